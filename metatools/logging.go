package metatools

import (
	"context"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A plan's console lines reach its MCP client as log messages
// (notifications/message, logger "meta:execute") at or above the level the
// client set with logging/setLevel, or at revision 2026-07-28 the level its
// request's _meta names; a client that set none gets none (the go-sdk's
// ServerSession.Log decides). The lines are the ones the result's logs
// carry, bounded by the sandbox's console limits (entries and bytes), so a
// plan sends at most that many; a console not allowed sends nothing.

// consoleLogger sends one console line, at the console method's level.
type consoleLogger func(level, message string)

// sessionLogger is the call's consoleLogger, nil when it has no session to
// send over.
func sessionLogger(ctx context.Context, req *mcp.CallToolRequest) consoleLogger {
	if req == nil || req.Session == nil {
		return nil
	}
	ss := req.Session
	return func(level, message string) {
		// The result's logs mark a warning or error line with its level
		// ("[warn] …"); a log message carries the level as its own field.
		message = strings.TrimPrefix(message, "["+level+"] ")
		// A client gone or slow to read loses the line, never the plan:
		// the result carries every line anyway.
		_ = ss.Log(ctx, &mcp.LoggingMessageParams{Level: consoleLevel(level), Logger: MetaExecute, Data: message})
	}
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
