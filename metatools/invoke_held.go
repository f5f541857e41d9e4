package metatools

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codemode-gateway/caddy-codemode/broker"
	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"
)

// An upstream's question during a 2026-07-28 caller's meta:invoke: the
// caller has no session to be asked over, and the upstream call cannot end
// before it is answered. So the call runs on its own goroutine while the
// request waits for its result (heldInvoke); a call that asks nothing
// answers as any other. Its first question makes it a one-call plan
// session of the broker, as meta:execute's: the session's script calls the
// tool once, and its host (adoptHost) adopts the call in flight instead of
// making another, so the call's questions wait in the session
// (broker.AskCaller) and come back as the invoke's input_required result,
// and the caller's retries answer them on any gateway with the plan's
// requestState rules. The session's end (its execution_timeout, when the
// caller never retries) cancels the upstream call.

// holdsInvoke tells whether meta:invoke of in.Tool by this caller runs as
// a heldInvoke: a 2026-07-28 caller that declared elicitation, a tool of an
// upstream MCP server, a gateway with plan sessions; or a retry with a
// held call's requestState (never run anew).
func (s *Service) holdsInvoke(req *mcp.CallToolRequest, in InvokeInput) bool {
	if strings.HasPrefix(req.Params.RequestState, requestStatePrefix+"v.") {
		return true
	}
	return s.opts.Sessions != nil && usesMRTR(req) && canElicit(req) && s.index.fromUpstream(in.Tool)
}

// heldInvoke is one meta:invoke call of an upstream tool that may ask.
type heldInvoke struct {
	s  *Service
	ci CallInfo
	in InvokeInput
	// ctx is the call's, detached from the request; cancel ends it.
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // closed once res is set
	res    *mcp.CallToolResult

	promote  sync.Once
	promoted chan struct{} // closed once id or startErr is set
	id       string
	startErr error
	adopting atomic.Bool
	adopted  chan struct{} // closed once sessCtx is set
	sessCtx  context.Context
}

// invokeHeld is meta:invoke of an upstream tool by a 2026-07-28 caller
// (holdsInvoke): the first request, or a retry with the requestState of
// the session its call became.
func (s *Service) invokeHeld(ctx context.Context, req *mcp.CallToolRequest, ci CallInfo, in InvokeInput) (*mcp.CallToolResult, error) {
	if rs := req.Params.RequestState; rs != "" {
		sid, ok := parseHeldState(rs, in)
		if s.opts.Sessions == nil || !ok {
			return errorResult(requestStateError("requestState does not belong to this call; call again without it")), nil
		}
		if res := s.answerPlan(ctx, req, ci, sid); res != nil {
			return res, nil
		}
		return s.planRound(ctx, req, sid, heldState(sid, in), heldOutcome)
	}
	h := &heldInvoke{s: s, ci: ci, in: in, done: make(chan struct{}), promoted: make(chan struct{}), adopted: make(chan struct{})}
	h.ctx, h.cancel = context.WithCancel(context.WithoutCancel(ctx))
	go h.run()
	select {
	case <-h.done:
		h.cancel()
		return h.res, nil
	case <-h.promoted:
	case <-ctx.Done():
		// The caller left before anything was asked.
		h.cancel()
		<-h.done
		return h.res, nil
	}
	if h.id == "" {
		<-h.done // the question was refused (no session): the call fails
		return h.res, nil
	}
	return s.planRound(ctx, req, h.id, heldState(h.id, in), heldOutcome)
}

// run makes the upstream call; its questions go to ask.
func (h *heldInvoke) run() {
	defer close(h.done)
	res, err := h.s.invoke(withCallerQuestions(h.ctx, questionsCarrier{ask: h.ask}), h.in, nil)
	if err != nil {
		res = errorResult(err)
	}
	h.res = res
}

// ask waits in the call's plan session, made at the first question, for
// the caller's answer.
func (h *heldInvoke) ask(ctx context.Context, name string, p *mcp.ElicitParams) (*mcp.ElicitResult, error) {
	h.promote.Do(h.start)
	if h.id == "" {
		return nil, h.startErr
	}
	select {
	case <-h.adopted:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	// Asked in the session's call, until the answer, the session's end or
	// the upstream call's.
	actx, stop := context.WithCancel(h.sessCtx)
	defer stop()
	defer context.AfterFunc(ctx, stop)()
	return planQuestions().ask(actx, name, p)
}

// start makes the one-call plan session that adopts the call.
func (h *heldInvoke) start() {
	defer close(h.promoted)
	name, _ := json.Marshal(h.in.Tool)
	opts := broker.ExecuteOptions{Host: &adoptHost{h: h}, ClientIP: h.ci.ClientIP}
	if h.ci.UserID != "" {
		opts.Auth = &broker.AuthResult{Valid: true, UserID: h.ci.UserID, TenantID: h.ci.TenantID}
	}
	sess, err := h.s.opts.Sessions.Start(h.ctx, "return await callTool("+string(name)+", {});", opts)
	if err != nil {
		h.startErr = brokerError(err)
		return
	}
	h.id = sess.ID
}

// adoptHost is the host of a held call's session: its script's one call
// is the call in flight.
type adoptHost struct{ h *heldInvoke }

// LookupTool implements sandbox.Host.
func (a *adoptHost) LookupTool(name string) (sandbox.ToolInfo, bool) {
	if name != a.h.in.Tool {
		return sandbox.ToolInfo{}, false
	}
	return sandbox.ToolInfo{Name: name, InputSchema: json.RawMessage(`{"type":"object"}`)}, true
}

// CallTool implements sandbox.Host: it waits for the call in flight and
// returns its meta:invoke result, or cancels it when the session ends.
func (a *adoptHost) CallTool(ctx context.Context, _ sandbox.ToolCall) (json.RawMessage, error) {
	h := a.h
	if !h.adopting.CompareAndSwap(false, true) {
		return nil, &sandbox.ToolError{Code: sandbox.CodeExecutionError, Message: "a held call is adopted once"}
	}
	h.sessCtx = ctx
	close(h.adopted)
	select {
	case <-h.done:
	case <-ctx.Done():
		h.cancel()
		<-h.done
		return nil, ctx.Err()
	}
	return json.Marshal(h.res)
}

// heldOutcome is a held call's meta:invoke result, from its finished
// session.
func heldOutcome(sess *broker.Session) *mcp.CallToolResult {
	if sess.Status == broker.StatusCompleted {
		var res mcp.CallToolResult
		if err := json.Unmarshal(sess.Result, &res); err == nil {
			return &res
		}
		return errorResult(newError(CodeInternalError, "the held call's result did not survive its session"))
	}
	e := sess.Error
	if e == nil {
		e = &broker.SessionError{Code: sandbox.CodeExecutionError, Message: "the call failed"}
	}
	return errorResult(&Error{Code: e.Code, Message: e.Message, Transient: e.Code == sandbox.CodeTimeout || e.Code == broker.CodeOwnerLost})
}

// heldState is a held call's requestState: "cm1.v.<session>.<digest of
// tool and input>", checked as a plan's.
func heldState(sessionID string, in InvokeInput) string {
	return requestStatePrefix + "v." + sessionID + "." + callDigest("invoke-held", in.Tool, string(in.Input))
}

func parseHeldState(state string, in InvokeInput) (string, bool) {
	rest, ok := strings.CutPrefix(state, requestStatePrefix+"v.")
	if !ok {
		return "", false
	}
	id, _, ok := strings.Cut(rest, ".")
	return id, ok && id != "" && state == heldState(id, in)
}
