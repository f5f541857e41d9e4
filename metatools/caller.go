package metatools

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codemode-gateway/caddy-codemode/broker"
	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"
	"github.com/codemode-gateway/caddy-codemode/internal/clip"
	"github.com/codemode-gateway/caddy-codemode/internal/tool"
)

// Tools only the caller can answer (CallerAnswered: a broker registry tool
// without a handler) are answered by the MCP client through elicitation:
//
//   - revision 2026-07-28 (multi round-trip requests): meta:execute runs the
//     plan as a broker session (PlanSessions) and answers the tools/call with
//     an input_required result, one elicitation/create input request per
//     waiting call; the client retries the call with the answers and the
//     requestState, on any gateway (with Redis, every broker continues any
//     plan). meta:invoke of such a tool needs no session: the retry carries
//     the answer.
//   - older revisions with a session: the gateway sends elicitation/create
//     to the client and waits for the answer within the same tools/call.
//   - a client without the elicitation capability (or a stateless transport
//     of an older revision): the call fails with TOOL_NOT_CALLABLE.

// askFunc answers a call of a caller-answered tool by asking the MCP client.
type askFunc func(ctx context.Context, t Tool, input json.RawMessage) (json.RawMessage, error)

// PlanSessions runs meta:execute plans that wait for their MCP client across
// requests. *broker.Broker implements it.
type PlanSessions interface {
	Start(ctx context.Context, code string, opts broker.ExecuteOptions) (*broker.Session, error)
	Await(ctx context.Context, id string) (*broker.SessionState, error)
	SubmitToolResult(ctx context.Context, sessionID string, res broker.ToolResult) error
	// Cancel aborts a plan whose client left before it got the plan's
	// requestState.
	Cancel(id string) bool
}

// Codes of the caller-answered path.
const (
	// CodeToolNotCallable: the tool needs the client's answer and this client
	// cannot be asked (no elicitation capability, or no way to send it).
	CodeToolNotCallable = broker.CodeToolNotCallable
	// CodeCallerDeclined and CodeCallerCancelled are the tool errors a plan
	// sees when the client's user declines or dismisses the question.
	CodeCallerDeclined  = "CALLER_DECLINED"
	CodeCallerCancelled = "CALLER_CANCELLED"
	// CodeCallerAnswerInvalid: the answer does not fit its form (a field's
	// type, enum, bounds, a required field) or the tool's result; the plan
	// sees it at older revisions, a 2026-07-28 retry gets it and its plan
	// waits on.
	CodeCallerAnswerInvalid = "CALLER_ANSWER_INVALID"
	// CodeInvalidRequestState: a retry's requestState does not belong to
	// this call or its plan is gone (finished long ago, expired, its
	// gateway or Redis lost it, or another user's).
	CodeInvalidRequestState = "INVALID_REQUEST_STATE"
)

// firstMRTRRevision is the first MCP revision with multi round-trip requests.
const firstMRTRRevision = "2026-07-28"

func usesMRTR(req *mcp.CallToolRequest) bool {
	return req != nil && req.ProtocolVersion() >= firstMRTRRevision
}

// canElicit reports whether the client declared form elicitation.
func canElicit(req *mcp.CallToolRequest) bool {
	if req == nil {
		return false
	}
	caps := req.ClientCapabilities()
	if caps == nil || caps.Elicitation == nil {
		return false
	}
	return caps.Elicitation.Form != nil || caps.Elicitation.URL == nil // {} means form
}

// sessionAsker asks the client of an older revision over its session
// (server-initiated elicitation/create), or nil when it declared no
// elicitation.
func sessionAsker(req *mcp.CallToolRequest) askFunc {
	if usesMRTR(req) || !canElicit(req) || req.Session == nil {
		return nil
	}
	ss := req.Session
	return func(ctx context.Context, t Tool, input json.RawMessage) (json.RawMessage, error) {
		f := answerFormFor(t)
		er, err := ss.Elicit(ctx, f.params(t, input))
		if err != nil {
			if isSchemaRefusal(err) {
				// The answer came, and did not fit the form: the go-sdk
				// checks it on both ends (the client's refusal arrives as
				// its -32602). It was TOOL_NOT_CALLABLE, as if the client
				// could not be asked.
				return nil, &Error{Code: CodeCallerAnswerInvalid, Transient: Transient(CodeCallerAnswerInvalid),
					Message: fmt.Sprintf("the client's answer to %s does not fit its form: %v", t.Name, err)}
			}
			return nil, &Error{Code: CodeToolNotCallable, Message: fmt.Sprintf("%s needs the client's answer and asking it failed: %v", t.Name, err)}
		}
		if p := f.answerProblem(er); p != "" {
			return nil, &Error{Code: CodeCallerAnswerInvalid, Transient: Transient(CodeCallerAnswerInvalid),
				Message: fmt.Sprintf("the client's answer to %s does not fit its form: %s", t.Name, p)}
		}
		tr, complete := f.toolResult("", t, er)
		if !complete {
			return nil, &Error{Code: CodeCallerAnswerInvalid, Message: fmt.Sprintf("the client's answer to %s does not fit its result: %s", t.Name, f.hint)}
		}
		if tr.Error != nil {
			return nil, &Error{Code: tr.Error.Code, Message: tr.Error.Message}
		}
		return tr.Result, nil
	}
}

// isSchemaRefusal tells whether asking the client failed because its
// answer does not fit the requested schema: the go-sdk's server checks the
// answer ("elicitation result content does not match requested schema"),
// and so do the go-sdk's and the TypeScript SDK's clients before they send
// it, answering -32602 with the same words. The go-sdk gives no sentinel
// error to match; TestCallerAnswerInvalidOlderRevisions pins both ends.
func isSchemaRefusal(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	return strings.Contains(strings.ToLower(err.Error()), "does not match requested schema")
}

// answerForm is how a caller-answered tool's result is asked for: an
// elicitation form is a flat object of primitive fields, so a tool whose
// output schema is such an object gets that form and its answer is the
// object; any other tool gets one "result" field: a primitive output schema
// as is, text for a tool without one, JSON text for a structured one.
type answerForm struct {
	schema map[string]any
	whole  bool // the answer object is the result
	json   bool // the "result" field holds JSON text
	hint   string
}

func answerFormFor(t Tool) answerForm {
	var out map[string]any
	_ = json.Unmarshal(t.OutputSchema, &out)
	if typ, _ := out["type"].(string); typ == "object" {
		if props, ok := out["properties"].(map[string]any); ok && len(props) > 0 {
			fields := map[string]any{}
			flat := true
			for name, p := range props {
				ps, ok := p.(map[string]any)
				if !ok {
					flat = false
					break
				}
				fs, ok := primitiveField(ps)
				if !ok {
					flat = false
					break
				}
				fields[name] = fs
			}
			if flat {
				schema := map[string]any{"type": "object", "properties": fields}
				if req, ok := out["required"].([]any); ok && len(req) > 0 {
					schema["required"] = req
				}
				return answerForm{schema: schema, whole: true, hint: "the fields of the tool's output"}
			}
		}
	}
	field := map[string]any{"type": "string", "title": "Answer"}
	f := answerForm{hint: "text"}
	switch {
	case len(out) == 0:
		field["description"] = "Your answer to " + t.Name + " (text)."
	default:
		if fs, ok := primitiveField(out); ok {
			field, f.hint = fs, "a "+fmt.Sprint(fs["type"])
		} else {
			field["description"] = "The result of " + t.Name + " as JSON."
			f.json, f.hint = true, "JSON text"
		}
	}
	f.schema = map[string]any{"type": "object", "properties": map[string]any{"result": field}, "required": []string{"result"}}
	return f
}

// primitiveField is the elicitation form field for a primitive JSON Schema
// (string, number, integer, boolean, string enum), keeping the keywords a
// form may carry.
func primitiveField(s map[string]any) (map[string]any, bool) {
	typ, _ := s["type"].(string)
	switch typ {
	case "string", "number", "integer", "boolean":
	default:
		return nil, false
	}
	f := map[string]any{"type": typ}
	keep := []string{"title", "description", "default"}
	switch typ {
	case "string":
		keep = append(keep, "enum", "minLength", "maxLength")
		switch s["format"] {
		case "email", "uri", "date", "date-time":
			f["format"] = s["format"]
		}
	case "number", "integer":
		keep = append(keep, "minimum", "maximum")
	}
	for _, k := range keep {
		if v, ok := s[k]; ok {
			f[k] = v
		}
	}
	return f, true
}

// params is the elicitation request for one call.
func (f answerForm) params(t Tool, input json.RawMessage) *mcp.ElicitParams {
	in := string(input)
	if len(in) > 2000 {
		in = clip.Ellipsis(in, 2000)
	}
	msg := fmt.Sprintf("A plan calls %s, which only you can answer.\nInput: %s", t.Name, in)
	if d := firstLine(t.Description); d != "" {
		msg = fmt.Sprintf("A plan calls %s (%s), which only you can answer.\nInput: %s", t.Name, d, in)
	}
	return &mcp.ElicitParams{Mode: "form", Message: msg, RequestedSchema: f.schema}
}

// typeProblem names the first field of an accepted answer whose JSON type
// is not its form field's ("result: got number, want string"), "" when
// they all fit. A client must answer in the form's types (a form cannot
// produce a number in a text field); a retry of 2026-07-28 with a number
// for client:prompt's text was taken as the number. No type is coerced.
func (f answerForm) typeProblem(er *mcp.ElicitResult) string {
	if er.Action != "accept" {
		return ""
	}
	props, _ := f.schema["properties"].(map[string]any)
	names := make([]string, 0, len(props))
	for name := range props {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		v, ok := er.Content[name]
		if !ok {
			continue
		}
		field, _ := props[name].(map[string]any)
		want, _ := field["type"].(string)
		var fits bool
		switch n, isNumber := v.(float64); want {
		case "string":
			_, fits = v.(string)
		case "boolean":
			_, fits = v.(bool)
		case "number":
			fits = isNumber
		case "integer":
			fits = isNumber && n == math.Trunc(n)
		default:
			fits = true
		}
		if !fits {
			return fmt.Sprintf("%s: got %s, want %s", name, tool.JSONType(v), want)
		}
	}
	return ""
}

// answerProblem says why an accepted answer does not fit its form, "" when
// it does: a field of another JSON type (typeProblem), then the form's
// schema (a required field missing, a value outside its enum, bounds or
// lengths). Both eras check answers with it, so an answer one takes the
// other takes too; at 2026-07-28 only the types were checked, and
// client:pick took a choice outside its enum.
func (f answerForm) answerProblem(er *mcp.ElicitResult) string {
	if er.Action != "accept" {
		return ""
	}
	if p := f.typeProblem(er); p != "" {
		return p
	}
	raw, err := json.Marshal(f.schema)
	if err != nil {
		return ""
	}
	schema, err := tool.CompileSchema(raw)
	if err != nil {
		return "" // not a form the gateway builds
	}
	content, err := json.Marshal(er.Content)
	if err != nil {
		return err.Error()
	}
	if _, verr := schema.Validate(content, nil); verr != nil {
		return verr.Message
	}
	return ""
}

// retryAnswerInvalid is the error of a 2026-07-28 retry whose answer to
// the input request key does not fit t's form: CALLER_ANSWER_INVALID, as
// older revisions' plans see it (it was a VALIDATION_ERROR), naming the
// answer. Not transient: the same retry fails again; the same requestState
// takes a fitting answer.
func retryAnswerInvalid(key string, t Tool, problem string) *Error {
	return retryAnswerMisfit(key, problem, "the form of "+t.Name)
}

// retryAnswerMisfit is retryAnswerInvalid for the answer to what (a form,
// an upstream's question).
func retryAnswerMisfit(key, problem, what string) *Error {
	field := fmt.Sprintf("inputResponses[%q].content", key)
	return &Error{Code: CodeCallerAnswerInvalid, Field: field, Fields: []string{field},
		Message: fmt.Sprintf("%s: %s (%s)", field, problem, what)}
}

// toolResult turns the client's elicitation answer into the call's result.
// complete is false when an accepted answer does not fit (ask again).
func (f answerForm) toolResult(callID string, t Tool, er *mcp.ElicitResult) (broker.ToolResult, bool) {
	tr := broker.ToolResult{CallID: callID}
	switch er.Action {
	case "accept":
	case "decline":
		tr.Error = &broker.ToolResultError{Code: CodeCallerDeclined, Message: "the client declined to answer " + t.Name}
		return tr, true
	default:
		tr.Error = &broker.ToolResultError{Code: CodeCallerCancelled, Message: "the client dismissed the question of " + t.Name}
		return tr, true
	}
	var v any = er.Content
	if !f.whole {
		r, ok := er.Content["result"]
		if !ok {
			return tr, false
		}
		v = r
		if f.json {
			text, ok := r.(string)
			if !ok || !json.Valid([]byte(text)) {
				return tr, false
			}
			tr.Result = json.RawMessage(text)
			return tr, true
		}
	}
	if v == nil {
		v = map[string]any{}
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return tr, false
	}
	tr.Result = raw
	return tr, true
}

// requestState is the opaque state of an input_required result:
// "cm1.x.<session>.<digest>" for a plan, "cm1.i.<digest>" for meta:invoke.
// The session id is an unguessable capability and the plan's owner is
// checked against the caller on every retry, so tampering can only make
// the retry fail; the digest binds the state to the call's arguments.
const requestStatePrefix = "cm1."

func callDigest(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%d:%s", len(p), p)
	}
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil)[:12])
}

func planDigest(in ExecuteInput) string {
	allowed, _ := json.Marshal(in.AllowedTools)
	return callDigest("execute", in.Script, string(allowed), string(in.Context))
}

func planState(sessionID string, in ExecuteInput) string {
	return requestStatePrefix + "x." + sessionID + "." + planDigest(in)
}

func parsePlanState(state string, in ExecuteInput) (string, bool) {
	rest, ok := strings.CutPrefix(state, requestStatePrefix+"x.")
	if !ok {
		return "", false
	}
	id, digest, ok := strings.Cut(rest, ".")
	return id, ok && id != "" && digest == planDigest(in)
}

func invokeState(in InvokeInput) string {
	return requestStatePrefix + "i." + callDigest("invoke", in.Tool, string(in.Input))
}

func requestStateError(msg string) *Error {
	return &Error{Code: CodeInvalidRequestState, Message: msg}
}

// usesPlanSessions tells whether meta:execute runs this call as a broker
// session answered over multi round-trip requests.
func (s *Service) usesPlanSessions(req *mcp.CallToolRequest) bool {
	if req.Params.RequestState != "" {
		return true
	}
	return s.opts.Sessions != nil && usesMRTR(req) && canElicit(req) && s.index.mayAskCaller()
}

// executeRounds is meta:execute over multi round-trip requests: the first
// call starts the plan as a session; it and every retry answer once the
// plan finished (the ordinary result) or waits for the client (an
// input_required result with the questions and the requestState).
func (s *Service) executeRounds(ctx context.Context, req *mcp.CallToolRequest, ci CallInfo, in ExecuteInput) (*mcp.CallToolResult, error) {
	ps := s.opts.Sessions
	if err := validateExecute(&in, s.maxScript); err != nil {
		return errorResult(err), nil
	}
	var id string
	if rs := req.Params.RequestState; rs != "" {
		sid, ok := parsePlanState(rs, in)
		if ps == nil || !ok {
			return errorResult(requestStateError("requestState does not belong to this plan; call again without it to run the plan anew")), nil
		}
		if res := s.answerPlan(ctx, req, ci, sid); res != nil {
			return res, nil
		}
		id = sid
	} else {
		if ps == nil {
			return errorResult(newError(CodeEngineError, "no plan sessions are configured")), nil
		}
		// Progress reaches the client while this first request waits: the
		// plan's steps until it finishes or first asks the client. The
		// reporter is stopped when this request answers; the plan's later
		// steps (during retries, maybe on another gateway) are not reported.
		p := s.progressOf(ctx, req, "")
		defer p.stop()
		questions := callerQuestionsOf(req)
		if usesMRTR(req) && canElicit(req) {
			questions = planQuestions()
		}
		h := &host{s: s, ci: &ci, questions: questions, allowed: allowedSet(in.AllowedTools), progress: p, log: s.sessionLogger(ctx, req)}
		var ph sandbox.Host = h
		if h.progress != nil || h.log != nil {
			// Console lines reach this first request's client as they
			// reach a plan's outside a session: as progress and as log
			// messages; lines after it answered are in the result only.
			ph = consoleHost{h}
		}
		opts := broker.ExecuteOptions{Host: ph, ClientIP: ci.ClientIP, AllowedTools: in.AllowedTools}
		if len(in.Context) > 0 {
			_ = json.Unmarshal(in.Context, &opts.Context) // an object: validated above
		}
		if ci.UserID != "" {
			opts.Auth = &broker.AuthResult{Valid: true, UserID: ci.UserID, TenantID: ci.TenantID}
		}
		sess, err := ps.Start(ctx, in.Script, opts)
		if err != nil {
			return errorResult(brokerError(err)), nil
		}
		id = sess.ID
	}
	return s.planRound(ctx, req, id, planState(id, in), func(sess *broker.Session) *mcp.CallToolResult {
		res, merr := s.sessionOutcome(sess)
		if merr != nil {
			return errorResult(merr)
		}
		out, err := s.executeResult(res)
		if err != nil {
			return errorResult(err)
		}
		return out
	})
}

// planRound answers a request of plan session id once the plan finished
// (finish gives its result) or waits for its caller (an input_required
// result with the questions and state).
func (s *Service) planRound(ctx context.Context, req *mcp.CallToolRequest, id, state string, finish func(*broker.Session) *mcp.CallToolResult) (*mcp.CallToolResult, error) {
	ps := s.opts.Sessions
	st, err := ps.Await(ctx, id)
	if req.Params.RequestState == "" && ctx.Err() != nil {
		// The client left (cancelled, disconnected) before it got the
		// requestState: no retry can reach this plan, so it stops now
		// instead of calling tools for nobody until its timeout.
		ps.Cancel(id)
	}
	if err != nil || st == nil {
		if err == nil {
			err = errors.New("the plan's session vanished")
		}
		return errorResult(brokerError(err)), nil
	}
	if st.Session.Status == broker.StatusCompleted || st.Session.Status == broker.StatusError {
		return finish(st.Session), nil
	}
	if !canElicit(req) {
		// A retry whose client no longer declares elicitation: asking it
		// would break the revision's rule, and the plan cannot go on
		// without the answers. Left waiting, as for a client that does
		// not retry; a retry declaring elicitation continues it.
		return nil, missingElicitation("the plan waits for answers asked with elicitation/create")
	}
	questions := mcp.InputRequestMap{}
	for _, c := range st.Pending {
		if c.Question != nil {
			var p mcp.ElicitParams
			if err := json.Unmarshal(c.Question, &p); err == nil {
				questions[c.CallID] = &p
				continue
			}
		}
		t, ok := s.index.Lookup(c.Tool)
		if !ok {
			t = Tool{Name: c.Tool}
		}
		questions[c.CallID] = answerFormFor(t).params(t, c.Input)
	}
	return &mcp.CallToolResult{InputRequests: questions, RequestState: state}, nil
}

// answerPlan hands a retry's answers to the waiting calls of plan session
// sid (its caller's: ci's user), and is nil when it took them, else the
// retry's error result: a gone or foreign plan, an answer that does not
// fit (nothing of the retry is taken then).
func (s *Service) answerPlan(ctx context.Context, req *mcp.CallToolRequest, ci CallInfo, sid string) *mcp.CallToolResult {
	ps := s.opts.Sessions
	st, err := ps.Await(ctx, sid)
	if err != nil && st == nil {
		return errorResult(brokerError(err))
	}
	if st == nil || st.Session.UserID != ci.UserID || st.Session.TenantID != ci.TenantID {
		return errorResult(requestStateError("the plan of this requestState is gone (finished long ago, expired or lost); call again without it to run the plan anew"))
	}
	for _, c := range st.Pending {
		if er, ok := req.Params.InputResponses[c.CallID].(*mcp.ElicitResult); ok {
			if c.Question != nil {
				if p := upstreamAnswerProblem(c.Question, er); p != "" {
					return errorResult(retryAnswerMisfit(c.CallID, p, "the question of "+c.Tool))
				}
				continue
			}
			t, _ := s.index.Lookup(c.Tool)
			if p := answerFormFor(t).answerProblem(er); p != "" {
				// Nothing of this retry is taken; the plan waits on.
				return errorResult(retryAnswerInvalid(c.CallID, t, p))
			}
		}
	}
	for _, c := range st.Pending {
		er, ok := req.Params.InputResponses[c.CallID].(*mcp.ElicitResult)
		if !ok {
			continue // not answered: asked again below
		}
		var tr broker.ToolResult
		if c.Question != nil {
			// Passed upstream as it is: the action, and the content
			// of an accepted answer.
			a := &mcp.ElicitResult{Action: er.Action}
			if er.Action == "accept" {
				a.Content = er.Content
			}
			raw, err := json.Marshal(a)
			if err != nil {
				return errorResult(retryAnswerMisfit(c.CallID, err.Error(), "the question of "+c.Tool))
			}
			tr = broker.ToolResult{CallID: c.CallID, Result: raw}
		} else {
			t, _ := s.index.Lookup(c.Tool)
			var complete bool
			if tr, complete = answerFormFor(t).toolResult(c.CallID, t, er); !complete {
				continue
			}
		}
		if err := ps.SubmitToolResult(ctx, sid, tr); err != nil {
			var be *broker.Error
			if errors.As(err, &be) && be.Status == http.StatusConflict {
				continue // a repeated retry: the first one answered it
			}
			return errorResult(brokerError(err))
		}
	}
	return nil
}

// missingElicitation is revision 2026-07-28's
// MissingRequiredClientCapabilityError (-32021, HTTP 400) for a request
// that cannot be served without asking its client, which did not declare
// elicitation: the revision says a server MUST answer so rather than send
// input requests the client did not declare, or act as if it could.
func missingElicitation(why string) error {
	data, _ := json.Marshal(mcp.MissingRequiredClientCapabilityData{
		RequiredCapabilities: &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{}}})
	return &jsonrpc.Error{Code: mcp.CodeMissingRequiredClientCapabilities,
		Message: why + "; declare the elicitation capability in _meta[\"" + mcp.MetaKeyClientCapabilities + "\"]", Data: data}
}

// sessionOutcome is meta:execute's output for a finished plan session.
func (s *Service) sessionOutcome(sess *broker.Session) (*sandbox.Result, *Error) {
	if sess.Status == broker.StatusCompleted {
		result := sess.Result
		if len(result) == 0 {
			result = json.RawMessage("null")
		}
		return &sandbox.Result{Status: sandbox.StatusOK, Result: result, Logs: sess.Logs}, nil
	}
	e := sess.Error
	if e == nil {
		e = &broker.SessionError{Code: sandbox.CodeExecutionError, Message: "the plan failed"}
	}
	if e.ScriptStatus == "" || e.ScriptStatus == "engine_error" {
		return nil, &Error{Code: e.Code, Message: e.Message, Transient: true}
	}
	se := &sandbox.ScriptError{Code: e.Code, Message: e.Message, Stack: e.Stack}
	if d := e.Details; d != nil {
		se.Kind, se.Name, se.Source, se.ToolName = d.Kind, d.Name, d.Source, d.ToolName
	}
	if l := e.Location; l != nil {
		se.Location = &sandbox.Location{Line: l.Line, Column: l.Column}
	}
	return s.scriptOutcome(&sandbox.Result{Status: sandbox.Status(e.ScriptStatus), Logs: sess.Logs, Error: se}), nil
}

// brokerError is a broker failure as a meta-tool error.
func brokerError(err error) *Error {
	var be *broker.Error
	if errors.As(err, &be) {
		return &Error{Code: be.Code, Message: be.Message, Transient: be.Status == http.StatusTooManyRequests || be.Status >= 500,
			RetryAfterSeconds: int((be.RetryAfter.Milliseconds() + 999) / 1000)}
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return &Error{Code: sandbox.CodeTimeout, Message: "the call ended before the plan answered", Transient: true}
	}
	return &Error{Code: CodeInternalError, Message: "plan sessions are unavailable: " + err.Error(), Transient: true}
}

// invokeAnswered is meta:invoke of a caller-answered tool over multi
// round-trip requests: the first call asks the client, the retry carries
// the answer, so no state is kept between the two.
func (s *Service) invokeAnswered(req *mcp.CallToolRequest, t Tool, in InvokeInput) *mcp.CallToolResult {
	const key = "answer"
	f := answerFormFor(t)
	if rs := req.Params.RequestState; rs != "" {
		if rs != invokeState(in) {
			return errorResult(requestStateError("requestState does not belong to this call; call again without it"))
		}
		if er, ok := req.Params.InputResponses[key].(*mcp.ElicitResult); ok {
			if p := f.answerProblem(er); p != "" {
				return errorResult(retryAnswerInvalid(key, t, p))
			}
			if tr, complete := f.toolResult("", t, er); complete {
				if tr.Error != nil {
					return errorResult(&Error{Code: tr.Error.Code, Message: tr.Error.Message})
				}
				return s.invokeResult(t.Name, tr.Result)
			}
		}
	}
	return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{key: f.params(t, in.Input)}, RequestState: invokeState(in)}
}
