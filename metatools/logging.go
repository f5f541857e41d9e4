package metatools

import (
	"context"
	"runtime"
	"slices"
	"strings"
	"sync"
	"weak"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A plan's console lines reach its MCP client as log messages
// (notifications/message, logger "meta:execute") at or above the level the
// client set with logging/setLevel, or at revision 2026-07-28 the level its
// request's _meta names; a client that set none gets none. The lines are
// the ones the result's logs carry, bounded by the sandbox's console limits
// (entries and bytes), so a plan sends at most that many; a console not
// allowed sends nothing.
//
// A line nobody would receive costs nothing: when the plan starts with no
// level, or one above error (the highest a console line has), and no
// progress token, its host is no sandbox.LogHost, so a worker sends no line
// to the gateway at all; a line below the level is dropped before the
// go-sdk is asked to send it.

// consoleLogger sends one console line, at the console method's level.
type consoleLogger func(level, message string)

// sessionLogger is the call's consoleLogger, nil when it has no session to
// send over or the session takes no console line.
func (s *Service) sessionLogger(ctx context.Context, req *mcp.CallToolRequest) consoleLogger {
	if req == nil || req.Session == nil {
		return nil
	}
	ss := req.Session
	level := func() mcp.LoggingLevel { return s.levels.get(ss) } // logging/setLevel may change it meanwhile
	if req.ProtocolVersion() >= firstPerRequestLogLevel {
		l, _ := req.Params.GetMeta()[mcp.MetaKeyLogLevel].(string)
		level = func() mcp.LoggingLevel { return mcp.LoggingLevel(l) }
	}
	if !takesLevel(level(), "error") {
		return nil
	}
	return func(l, message string) {
		ml := consoleLevel(l)
		if ctx.Err() != nil || !takesLevel(level(), ml) {
			// Also a plan session's line after the request that started
			// it answered: the rest is in the result.
			return
		}
		// The result's logs mark a warning or error line with its level
		// ("[warn] …"); a log message carries the level as its own field.
		message = strings.TrimPrefix(message, "["+l+"] ")
		// A client gone or slow to read loses the line, never the plan:
		// the result carries every line anyway.
		_ = ss.Log(ctx, &mcp.LoggingMessageParams{Level: ml, Logger: MetaExecute, Data: message})
	}
}

// firstPerRequestLogLevel is the first MCP revision whose requests name
// their log level in _meta (io.modelcontextprotocol/logLevel) instead of
// the session's logging/setLevel.
const firstPerRequestLogLevel = "2026-07-28"

// takesLevel reports whether a client that asked for min ("" for nothing)
// takes a message at level.
func takesLevel(min, level mcp.LoggingLevel) bool {
	i := slices.Index(logLevels, min)
	return i >= 0 && slices.Index(logLevels, level) >= i
}

// sessionLevels holds the level each session's logging/setLevel set (the
// go-sdk keeps it unexported); an entry goes with its session.
type sessionLevels struct {
	m sync.Map // weak.Pointer[mcp.ServerSession] → mcp.LoggingLevel
}

func (l *sessionLevels) set(ss *mcp.ServerSession, level mcp.LoggingLevel) {
	key := weak.Make(ss)
	if _, loaded := l.m.Swap(key, level); !loaded {
		runtime.AddCleanup(ss, func(key weak.Pointer[mcp.ServerSession]) { l.m.Delete(key) }, key)
	}
}

func (l *sessionLevels) get(ss *mcp.ServerSession) mcp.LoggingLevel {
	v, _ := l.m.Load(weak.Make(ss))
	level, _ := v.(mcp.LoggingLevel)
	return level
}

// consoleLevel is the MCP logging level of a console entry's level: the
// sandbox's console.log, info and debug write "log", warn "warn", error
// "error".
func consoleLevel(level string) mcp.LoggingLevel {
	switch level {
	case "warn":
		return "warning"
	case "error":
		return "error"
	default: // log
		return "info"
	}
}

// consoleHost is a plan's host when its client can be told of console
// lines: as progress, and as log messages.
type consoleHost struct{ *host }

func (h consoleHost) Log(level, message string) {
	h.progress.logged(message)
	if h.log != nil {
		h.log(level, message)
	}
}
