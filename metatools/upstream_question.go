package metatools

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codemode-gateway/caddy-codemode/broker"
	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"
	"github.com/codemode-gateway/caddy-codemode/internal/tool"
)

// An upstream MCP server's question during a tool call (elicitation/create
// over an older revision's session; at 2026-07-28 an input_required result
// with elicitation requests, which the go-sdk client answers through the
// same handler and retries with the upstream's requestState unchanged, at
// most 10 rounds) is passed on to the gateway's own caller, and the
// caller's answer goes back upstream. The gateway answers nothing itself: a
// question it cannot pass on gets a JSON-RPC error, and a call that then
// fails carries the reason's code.
//
// A caller of 2026-07-28 has no session to be asked over; a plan it runs
// (meta:execute as a broker session) holds the upstream call open while
// the question waits in the plan's session as one more pending input
// request (planQuestions), and the caller's retry, on any gateway, answers
// it as it answers client:prompt.
//
// Which call asked: at 2026-07-28 the question comes back on the call
// itself (its context); over an older revision's session it comes on the
// session, and is the call's when that call is the only one in flight on
// the session. A question while several calls are in flight on one session
// cannot be told apart and is refused.

// Bounds of an upstream's questions.
const (
	// MaxUpstreamQuestionBytes bounds one question (its JSON: message and
	// requested schema) and the caller's answer content.
	MaxUpstreamQuestionBytes = 16 << 10
	// MaxUpstreamQuestions bounds the questions of one upstream call.
	MaxUpstreamQuestions = 10
)

// CodeUpstreamQuestionRefused: the upstream asked a question the gateway
// does not pass on (over the size or number bound, not a form, or on a
// session with several calls in flight) and the call failed.
const CodeUpstreamQuestionRefused = "UPSTREAM_QUESTION_REFUSED"

// questionFunc asks the gateway's caller an upstream's question during a
// call of tool.
type questionFunc func(ctx context.Context, tool string, p *mcp.ElicitParams) (*mcp.ElicitResult, error)

// callerQuestions is the caller's questionFunc in a meta-tool call's
// context: set, possibly nil, by meta:invoke and meta:execute.
type callerQuestionsKey struct{}

// questionsCarrier is what withCallerQuestions keeps in a context: a nil
// ask says why the caller cannot be asked.
type questionsCarrier struct {
	ask    questionFunc
	reason string
}

func withCallerQuestions(ctx context.Context, q questionsCarrier) context.Context {
	return context.WithValue(ctx, callerQuestionsKey{}, q)
}

// callerQuestionsOf is the caller who can be asked an upstream's question
// during this call: an older revision's session that declared form
// elicitation. A 2026-07-28 caller has no session to be asked over.
func callerQuestionsOf(req *mcp.CallToolRequest) questionsCarrier {
	switch {
	case req == nil || req.Session == nil:
		return questionsCarrier{reason: "the call has no MCP session to ask over"}
	case usesMRTR(req):
		return questionsCarrier{reason: "at revision " + firstMRTRRevision + " the gateway does not pass an upstream's question on to its caller"}
	case !canElicit(req):
		return questionsCarrier{reason: "this client declared no form elicitation capability"}
	}
	ss := req.Session
	return questionsCarrier{ask: func(ctx context.Context, _ string, p *mcp.ElicitParams) (*mcp.ElicitResult, error) {
		return ss.Elicit(ctx, p)
	}}
}

// planQuestions is the caller of a plan session that speaks 2026-07-28 and
// declared elicitation (executeRounds): the question waits in the plan's
// session as a pending call with the question (broker.AskCaller) and comes
// back to the caller in the plan's input_required result; the retry's
// answer, checked there (upstreamAnswerProblem), is the call's.
func planQuestions() questionsCarrier {
	return questionsCarrier{ask: func(ctx context.Context, name string, p *mcp.ElicitParams) (*mcp.ElicitResult, error) {
		q, err := json.Marshal(p)
		if err != nil {
			return nil, err
		}
		raw, err := broker.AskCaller(ctx, name, q)
		if err != nil {
			return nil, err
		}
		var er mcp.ElicitResult
		if err := json.Unmarshal(raw, &er); err != nil {
			return nil, fmt.Errorf("decoding the caller's answer: %w", err)
		}
		return &er, nil
	}}
}

// upstreamAnswerProblem says why a 2026-07-28 caller's answer to an
// upstream's question does not fit it, "" when it does: an unknown action,
// accepted content over MaxUpstreamQuestionBytes or outside the question's
// requested schema (what the go-sdk checks of an older caller's answer).
func upstreamAnswerProblem(question json.RawMessage, er *mcp.ElicitResult) string {
	switch er.Action {
	case "accept":
	case "decline", "cancel":
		return ""
	default:
		return fmt.Sprintf("action %q is none of accept, decline, cancel", er.Action)
	}
	content, err := json.Marshal(er.Content)
	if err != nil {
		return err.Error()
	}
	if er.Content == nil {
		content = []byte("{}")
	}
	if len(content) > MaxUpstreamQuestionBytes {
		return fmt.Sprintf("%d bytes, more than the bound of %d", len(content), MaxUpstreamQuestionBytes)
	}
	var q struct {
		RequestedSchema json.RawMessage `json:"requestedSchema"`
	}
	if json.Unmarshal(question, &q) != nil || len(q.RequestedSchema) == 0 || string(q.RequestedSchema) == "null" {
		return ""
	}
	schema, err := tool.CompileSchema(q.RequestedSchema)
	if err != nil {
		return "" // the upstream's schema; its own check stands
	}
	if _, verr := schema.Validate(content, nil); verr != nil {
		return verr.Message
	}
	return ""
}

// upstreamCall is one call of an upstream's tool, for its questions.
type upstreamCall struct {
	ctx      context.Context // the call's: its deadline bounds the time to answer
	upstream string
	tool     string
	q        questionsCarrier
	asked    atomic.Int32
	mu       sync.Mutex
	refused  *Error // the first question not passed on or not answered
}

type upstreamCallKey struct{}

// newUpstreamCall is the call about to be made under ctx.
func newUpstreamCall(ctx context.Context, upstream, tool string) *upstreamCall {
	q, ok := ctx.Value(callerQuestionsKey{}).(questionsCarrier)
	if !ok {
		q.reason = "the tool was not called through meta:invoke or meta:execute"
	}
	return &upstreamCall{upstream: upstream, tool: tool, q: q}
}

// refuse records why a question got no answer and is the JSON-RPC error
// the upstream gets.
func (c *upstreamCall) refuse(code, msg string) error {
	c.mu.Lock()
	if c.refused == nil {
		c.refused = &Error{Code: code, Message: msg}
	}
	c.mu.Unlock()
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: msg}
}

// refusal is the error of a call that failed after one of its questions
// got no answer, nil when none did.
func (c *upstreamCall) refusal(upstreamSaid string) *Error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.refused == nil {
		return nil
	}
	e := *c.refused
	if upstreamSaid != "" {
		e.Message += "; the upstream then answered: " + upstreamSaid
	}
	return &e
}

// question passes one upstream question on to the caller.
func (c *upstreamCall) question(p *mcp.ElicitParams) (*mcp.ElicitResult, error) {
	who := fmt.Sprintf("upstream %q asked a question during %s", c.upstream, c.tool)
	if n := c.asked.Add(1); n > MaxUpstreamQuestions {
		return nil, c.refuse(CodeUpstreamQuestionRefused, fmt.Sprintf("%s: more than %d questions in one call", who, MaxUpstreamQuestions))
	}
	if p.Mode != "" && p.Mode != "form" {
		return nil, c.refuse(CodeUpstreamQuestionRefused, fmt.Sprintf("%s in %q mode; only form questions are passed on", who, p.Mode))
	}
	fwd := &mcp.ElicitParams{Mode: "form", Message: p.Message, RequestedSchema: p.RequestedSchema}
	if b, err := json.Marshal(fwd); err != nil || len(b) > MaxUpstreamQuestionBytes {
		return nil, c.refuse(CodeUpstreamQuestionRefused, fmt.Sprintf("%s of %d bytes, more than the bound of %d", who, len(b), MaxUpstreamQuestionBytes))
	}
	if c.q.ask == nil {
		return nil, c.refuse(CodeToolNotCallable, fmt.Sprintf("%s, and its caller cannot be asked: %s", who, c.q.reason))
	}
	er, err := c.q.ask(c.ctx, c.tool, fwd)
	if err != nil {
		// The go-sdk checks the caller's answer against the requested
		// schema and fails the request when it does not fit.
		if isSchemaRefusal(err) {
			return nil, c.refuse(CodeCallerAnswerInvalid, fmt.Sprintf("%s; the caller's answer does not fit its requested schema", who))
		}
		if c.ctx.Err() != nil {
			return nil, c.refuse(sandbox.CodeTimeout, fmt.Sprintf("%s; the caller did not answer within the call's time", who))
		}
		return nil, c.refuse(CodeToolNotCallable, fmt.Sprintf("%s; asking its caller failed: %v", who, err))
	}
	switch er.Action {
	case "accept", "decline", "cancel":
	default:
		return nil, c.refuse(CodeCallerAnswerInvalid, fmt.Sprintf("%s; the caller answered with action %q", who, er.Action))
	}
	out := &mcp.ElicitResult{Action: er.Action}
	if er.Action == "accept" {
		if b, _ := json.Marshal(er.Content); len(b) > MaxUpstreamQuestionBytes {
			return nil, c.refuse(CodeCallerAnswerInvalid, fmt.Sprintf("%s; the caller's answer is %d bytes, more than the bound of %d", who, len(b), MaxUpstreamQuestionBytes))
		}
		out.Content = er.Content
	}
	return out, nil
}

// elicit is the upstream client's elicitation handler.
func (u *Upstream) elicit(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
	c, _ := ctx.Value(upstreamCallKey{}).(*upstreamCall)
	if c == nil {
		c = u.onlyCall(req.Session)
	}
	if c == nil {
		msg := fmt.Sprintf("upstream %q asked a question on a session with no single call in flight; the gateway cannot tell whose caller to ask", u.cfg.Name)
		u.refuseAll(req.Session, msg)
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: msg}
	}
	return c.question(req.Params)
}

// track records c as in flight on cs until the returned function is called.
func (u *Upstream) track(cs *mcp.ClientSession, c *upstreamCall) (untrack func()) {
	u.callsMu.Lock()
	if u.calls == nil {
		u.calls = map[*mcp.ClientSession]map[*upstreamCall]struct{}{}
	}
	m := u.calls[cs]
	if m == nil {
		m = map[*upstreamCall]struct{}{}
		u.calls[cs] = m
	}
	m[c] = struct{}{}
	u.callsMu.Unlock()
	return func() {
		u.callsMu.Lock()
		delete(m, c)
		if len(m) == 0 {
			delete(u.calls, cs)
		}
		u.callsMu.Unlock()
	}
}

// onlyCall is the one call in flight on cs, nil when there are none or
// several.
func (u *Upstream) onlyCall(cs *mcp.ClientSession) *upstreamCall {
	u.callsMu.Lock()
	defer u.callsMu.Unlock()
	if m := u.calls[cs]; len(m) == 1 {
		for c := range m {
			return c
		}
	}
	return nil
}

// refuseAll marks every call in flight on cs with a question none of them
// could be given.
func (u *Upstream) refuseAll(cs *mcp.ClientSession, msg string) {
	u.callsMu.Lock()
	defer u.callsMu.Unlock()
	for c := range u.calls[cs] {
		c.refuse(CodeUpstreamQuestionRefused, msg)
	}
}
