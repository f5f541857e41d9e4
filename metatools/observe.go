package metatools

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/codemode-gateway/caddy-codemode/broker"
	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"
	"github.com/codemode-gateway/caddy-codemode/internal/clip"
	"github.com/codemode-gateway/caddy-codemode/internal/telemetry"
)

// RequestContextFunc returns the context a meta-tool call runs in, given
// the handler's context and the HTTP request's header (nil over stdio). The
// go-sdk runs tool handlers on its session's context, not the HTTP
// request's; an HTTP front end uses this to hand over what the request
// carries: its trace span and request id.
type RequestContextFunc func(ctx context.Context, h http.Header) context.Context

// observe wraps a meta-tool's handler: the request's context, a span, the
// call metrics and a debug line naming the outcome.
func (s *Service) observe(metaTool string, h mcp.ToolHandler) mcp.ToolHandler {
	short := strings.TrimPrefix(metaTool, "meta:")
	exposed := s.opts.Naming.ExposedName(metaTool)
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if f := s.opts.RequestContext; f != nil && req != nil && req.Extra != nil {
			ctx = f(ctx, req.Extra.Header)
		}
		ctx, span := telemetry.StartSpan(ctx, "tools/call "+exposed, trace.SpanKindInternal,
			attribute.String("mcp.method.name", "tools/call"),
			attribute.String("gen_ai.operation.name", "execute_tool"),
			attribute.String("gen_ai.tool.name", exposed))
		start := time.Now()
		ctx = s.awaitSources(ctx, metaTool)
		res, err := s.safeCall(ctx, metaTool, h, req)
		outcome, code := callOutcome(metaTool, res, err)
		s.opts.Metrics.called(short, outcome, time.Since(start))
		if span.IsRecording() {
			span.SetAttributes(attribute.String("codemode.meta.outcome", outcome))
		}
		telemetry.EndSpan(span, code)
		if c := s.logger.Check(zap.DebugLevel, "meta-tool call"); c != nil {
			c.Write(append(telemetry.LogFields(ctx), zap.String("tool", metaTool), zap.String("outcome", outcome),
				zap.Duration("duration", time.Since(start)))...)
		}
		return res, err
	}
}

// connectWaitedKey marks the context of a call that waited ConnectWait for
// the sources' first connection in vain: the calls made within it (a
// script's) do not wait again.
type connectWaitedKey struct{}

// awaitSources is what every meta-tool call and every call of the Go API
// (Search, Describe, Execute, Invoke, CallTool) does first: right after a
// start or a reload, the upstreams' tools are in the index only once their
// first connection is made, so it waits for it (up to ConnectWait) rather
// than answer TOOL_NOT_FOUND or search without them. Once the attempts are
// over it costs an atomic load.
func (s *Service) awaitSources(ctx context.Context, what string) context.Context {
	if !s.index.stillConnecting() || ctx.Value(connectWaitedKey{}) != nil {
		return ctx
	}
	if s.index.awaitConnecting(ctx, s.opts.ConnectWait) {
		return ctx
	}
	s.logger.Debug("call answered before the upstreams' first connection ended", zap.String("call", what))
	return context.WithValue(ctx, connectWaitedKey{}, struct{}{})
}

// safeCall runs a meta-tool's handler. A panic in it (a bug of a tool
// source, of the code reading an upstream's answer) becomes the call's
// INTERNAL_ERROR, logged with its stack: the go-sdk runs each call on a
// goroutine of its own, where a panic ended the whole process.
func (s *Service) safeCall(ctx context.Context, metaTool string, h mcp.ToolHandler, req *mcp.CallToolRequest) (res *mcp.CallToolResult, err error) {
	defer func() {
		if p := recover(); p != nil {
			s.logger.Error("meta-tool call panicked", append(telemetry.LogFields(ctx), zap.String("tool", metaTool),
				zap.Any("panic", p), zap.Stack("stack"))...)
			res, err = errorResult(newError(CodeInternalError, "internal error: the call failed unexpectedly (logged)")), nil
		}
	}()
	return h(ctx, req)
}

// callOutcome is a meta-tool result's outcome label and error code: ok,
// input_required, a failed plan's status, or the error code in lower case.
func callOutcome(metaTool string, res *mcp.CallToolResult, err error) (outcome, code string) {
	var je *jsonrpc.Error
	switch {
	case errors.As(err, &je) && je.Code == mcp.CodeMissingRequiredClientCapabilities:
		// The client cannot be asked (missingElicitation): what
		// TOOL_NOT_CALLABLE says in a result.
		return telemetry.Outcome(CodeToolNotCallable), CodeToolNotCallable
	case err != nil:
		return "internal_error", CodeInternalError
	case res == nil:
		return "ok", ""
	case res.IsError:
		code = CodeToolExecutionError
		if e, ok := res.Meta["codemode/error"].(*Error); ok {
			code = e.Code
		}
		return telemetry.Outcome(code), code
	case len(res.InputRequests) > 0:
		return "input_required", ""
	case metaTool == MetaExecute:
		var r struct {
			Status string `json:"status"`
			Error  *struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		raw, _ := res.StructuredContent.(json.RawMessage)
		if json.Unmarshal(raw, &r) == nil && r.Status != "" && r.Status != string(sandbox.StatusOK) {
			if r.Error != nil {
				code = r.Error.Code
			}
			// The plan's status is the label: runtime_error, tool_error and
			// illegal_access are no error codes, and telemetry.Outcome
			// turned them into "other".
			switch s := sandbox.Status(r.Status); s {
			case sandbox.StatusSyntaxError, sandbox.StatusIllegalAccess, sandbox.StatusRuntimeError,
				sandbox.StatusToolError, sandbox.StatusTimeout:
				return string(s), code
			}
			return telemetry.Outcome(strings.ToUpper(r.Status)), code
		}
	}
	return "ok", ""
}

// toolSource is where callTool sends name, for the tool-call metrics:
// "" for the broker's tools (the broker counts them itself).
func (s *Service) toolSource(name string) string {
	if IsMetaToolName(name) {
		return broker.SourceUnknown
	}
	snap := s.index.snap.Load()
	idx, ok := snap.byName[name]
	if !ok {
		return broker.SourceUnknown
	}
	if snap.tools[idx].CallerAnswered {
		return broker.SourceCaller
	}
	if _, ok := s.index.sources[snap.source[idx]].(*BrokerSource); ok {
		return ""
	}
	return broker.SourceUpstream
}

// observedCall is callTool in a span of its own, counted in the tool-call
// metrics, unless the broker does both (its own tools).
func (s *Service) observedCall(ctx context.Context, name string, input json.RawMessage, ask askFunc) (json.RawMessage, *Error) {
	source := s.toolSource(name)
	if source == "" {
		return s.callTool(ctx, name, input, ask)
	}
	spanName := "execute_tool"
	if source != broker.SourceUnknown {
		spanName += " " + name
	}
	ctx, span := telemetry.StartSpan(ctx, spanName, trace.SpanKindInternal,
		attribute.String("gen_ai.operation.name", "execute_tool"),
		attribute.String("gen_ai.tool.name", clip.String(name, 128)),
		attribute.String("codemode.tool.source", source))
	start := time.Now()
	out, err := s.callTool(ctx, name, input, ask)
	code := ""
	if err != nil {
		code = err.Code
		if code == CodeNotFound {
			code = broker.CodeToolNotFound // the broker's name for it, so one outcome label counts both
		}
	}
	s.opts.ToolMetrics.ObserveToolCall(source, code, time.Since(start))
	telemetry.EndSpan(span, code)
	return out, err
}

// emit hands a lifecycle event to Options.Listener.
func (s *Service) emit(ev broker.Event) {
	if s.opts.Listener != nil {
		s.opts.Listener(ev)
	}
}

// planSession is the session a meta:execute plan run by the service's own
// engine reports in its lifecycle events (a plan run by the broker is the
// broker's session and reports there).
type planSession struct {
	s     *Service
	calls atomic.Int64
	// mu guards sess after startPlan (its ID never changes): a tool call
	// the plan started may finish, and snapshot it, after the plan was
	// cancelled and finish wrote its end.
	mu   sync.Mutex
	sess broker.Session
}

func newSessionID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// startPlan emits session:created for a plan and returns its session.
func (s *Service) startPlan(ci *CallInfo) *planSession {
	now := time.Now().UnixMilli()
	p := &planSession{s: s, sess: broker.Session{ID: newSessionID(), Status: broker.StatusPending, CreatedAt: now, UpdatedAt: now}}
	if ci != nil {
		p.sess.UserID = ci.UserID
	}
	s.emit(broker.Event{Name: broker.OnSessionCreated, Session: p.snapshot()})
	return p
}

func (p *planSession) snapshot() *broker.Session {
	p.mu.Lock()
	c := p.sess
	p.mu.Unlock()
	c.ToolCalls = int(p.calls.Load())
	return &c
}

// end records the plan's end in its session.
func (p *planSession) end(status string, serr *broker.SessionError) {
	p.mu.Lock()
	p.sess.UpdatedAt = time.Now().UnixMilli()
	p.sess.Status, p.sess.Error = status, serr
	p.mu.Unlock()
}

// finish emits session:completed or session:error for the plan's outcome.
func (p *planSession) finish(res *sandbox.Result, err error) {
	switch {
	case err != nil:
		code, msg := CodeEngineError, err.Error()
		var me *Error
		if errors.As(err, &me) {
			code, msg = me.Code, me.Message
		}
		p.end(broker.StatusError, &broker.SessionError{Code: code, Message: msg, ScriptStatus: "engine_error"})
		p.s.emit(broker.Event{Name: broker.OnSessionError, Session: p.snapshot(), Err: &sandbox.ToolError{Code: code, Message: msg}})
	case res.Status != sandbox.StatusOK:
		code, msg := sandbox.CodeExecutionError, string(res.Status)
		if res.Error != nil {
			code, msg = res.Error.Code, res.Error.Message
		}
		p.end(broker.StatusError, &broker.SessionError{Code: code, Message: msg, ScriptStatus: string(res.Status)})
		p.s.emit(broker.Event{Name: broker.OnSessionError, Session: p.snapshot(), Err: &sandbox.ToolError{Code: code, Message: msg}})
	default:
		p.end(broker.StatusCompleted, nil)
		p.s.emit(broker.Event{Name: broker.OnSessionCompleted, Session: p.snapshot(), Result: res.Result})
	}
}
