package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"
	"github.com/codemode-gateway/caddy-codemode/internal/telemetry"
)

// run is one session executing on this broker. It is the sandbox.Host of
// its script.
type run struct {
	b         *Broker
	principal string
	// streamed counts the bytes of events sent (guarded by sendMu's write
	// side being excluded: it is only touched under the read lock through
	// atomic adds).
	streamed atomic.Int64
	ctx      context.Context
	cancel   context.CancelFunc
	abortRun context.CancelCauseFunc
	// dirty is set when a write of the session to the store failed; the
	// keep-alive loop restores it.
	dirty    atomic.Bool
	events   chan StreamEvent
	stop     chan struct{} // closed when the consumer stops reading
	stopOnce sync.Once
	sendMu   sync.RWMutex
	closed   bool // events is closed; guarded by sendMu
	filter   *EventFilter
	auth     *AuthResult
	clientIP string
	context  map[string]any
	maxCalls int
	calls    atomic.Int64
	begun    time.Time
	// log carries the session and request ids; span is the execution's
	// trace span (recording only under a traced request).
	log    *zap.Logger
	span   trace.Span
	engine sandbox.Engine
	req    sandbox.Request
	// host resolves the script's tools instead of the broker (ExecuteOptions.Host).
	host sandbox.Host
	// announce tells Await on every broker when a call starts waiting for
	// the caller and when the session finishes (sessions made by Start).
	announce bool

	mu      sync.Mutex
	sess    *Session
	waiters map[string]chan *toolAnswer
	pending map[string]PendingCall // calls waiting for the caller, for restores
	// abandoned and answered are the ids of the calls that stopped waiting
	// and of those answered, for restores: at most maxCalls (every call
	// counts towards that limit) plus the questions a Host asked through
	// AskCaller, which the Host bounds (metatools: 10 per upstream call).
	abandoned, answered []string
	// ended: the script is over, its calls are closed or being closed
	// (restores write them closed); callsClosed: the store holds them so.
	ended, callsClosed bool
	// calling counts the CallTool calls in progress; once finishing is
	// set no call starts, and idle is closed when the last one returns.
	calling   int
	finishing bool
	idle      chan struct{}
}

// abort ends the execution with cause (errOwnerLost).
func (r *run) abort(cause error) { r.abortRun(cause) }

// restorable is what a restore writes of the session's calls.
func (r *run) restorable() runCalls {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ended {
		return runCalls{closed: true}
	}
	out := make([]PendingCall, 0, len(r.pending))
	for _, c := range r.pending {
		out = append(out, c)
	}
	sortCalls(out)
	return runCalls{pending: out, abandoned: slices.Clone(r.abandoned), answered: slices.Clone(r.answered)}
}

var (
	_ sandbox.Host      = (*run)(nil)
	_ sandbox.LogHost   = (*run)(nil)
	_ sandbox.Discovery = (*run)(nil)
	_ sandbox.EndHost   = (*run)(nil)
)

// Ended implements sandbox.EndHost: the script is over, and its calls close
// before the engine cancels those still waiting. The worker engine waits
// for its calls before it returns, and the calls closed only after that
// (in finish): meanwhile an answer to a call the script had left waiting
// was accepted (200) for a script that had ended. finish closes them if
// this failed, or for an engine that does not report the end.
func (r *run) Ended() {
	ctx, cancel := r.storeCtx()
	defer cancel()
	if err := r.closeCalls(ctx); err != nil {
		r.log.Warn("closing the calls of an ended script; retried as it finishes", zap.Error(err))
	}
}

// closeCalls closes the session's calls in the store, once: from then on
// every answer is 409 SESSION_FINISHED.
func (r *run) closeCalls(ctx context.Context) error {
	r.mu.Lock()
	r.ended = true
	done := r.callsClosed
	s := r.sess.clone()
	r.mu.Unlock()
	if done {
		return nil
	}
	if err := r.b.store.closeCalls(ctx, s); err != nil {
		return err
	}
	r.mu.Lock()
	r.callsClosed = true
	r.mu.Unlock()
	return nil
}

// storeCtx bounds a write at the run's end: the caller's context may be
// gone, and the write must still be made (within a bound when the store
// is remote).
func (r *run) storeCtx() (context.Context, context.CancelFunc) {
	ctx := context.WithoutCancel(r.ctx)
	if _, local := r.b.store.(*memoryStore); local {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, 5*time.Second)
}

// send delivers an event to the consumer unless the filter drops it or the
// consumer has gone.
func (r *run) send(ev StreamEvent) {
	if !r.filter.allows(ev.Type) {
		return
	}
	// A tool goroutine abandoned by a timeout may still send after the run
	// ended; the read lock orders it against closeEvents.
	r.sendMu.RLock()
	defer r.sendMu.RUnlock()
	if r.closed {
		return
	}
	// Every byte a session streams is bounded: past MaxStreamBytes the
	// session ends with STREAM_LIMIT (its final event still goes out).
	if final := ev.Type == EventResult || ev.Type == EventError; !final {
		if n := r.streamed.Add(eventSize(ev)); n > r.b.opts.MaxStreamBytes {
			r.abort(errStreamLimit)
			return
		}
	}
	select {
	case r.events <- ev:
		r.b.opts.Metrics.streamed(ev.Type)
	case <-r.stop:
	}
}

func (r *run) closeEvents() {
	r.sendMu.Lock()
	defer r.sendMu.Unlock()
	r.closed = true
	close(r.events)
}

// stream yields events until the run ends or yield returns false.
func (r *run) stream(yield func(StreamEvent, error) bool) {
	defer r.detach()
	for ev := range r.events {
		if !yield(ev, nil) {
			return
		}
	}
}

// detach stops delivery and aborts the execution if it still runs.
func (r *run) detach() {
	r.stopOnce.Do(func() { close(r.stop) })
	r.abortRun(errCallerLeft)
	r.cancel()
}

// transition moves the session to status, allowing only pending -> running
// -> completed | error.
func (r *run) transition(status string) (*Session, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	from := r.sess.Status
	ok := (from == StatusPending && status == StatusRunning) ||
		(from == StatusRunning && (status == StatusCompleted || status == StatusError))
	if !ok {
		return nil, fmt.Errorf("session %s: invalid transition %s -> %s", r.sess.ID, from, status)
	}
	r.sess.Status = status
	r.sess.UpdatedAt = r.b.now().UnixMilli()
	return r.sess.clone(), nil
}

func (r *run) snapshot() *Session {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sess.clone()
}

func (r *run) execute() {
	b := r.b
	defer b.wg.Done()
	defer r.cancel()
	defer r.closeEvents()

	if s, err := r.transition(StatusRunning); err == nil {
		b.opts.Metrics.sessionMoved(StatusPending, StatusRunning)
		switch err := b.store.put(r.ctx, s); {
		case errors.Is(err, errSessionEnded):
			r.abort(errOwnerLost)
		case err != nil:
			r.log.Warn("storing running session", zap.Error(err))
			r.dirty.Store(true)
		}
	}
	res, err := r.engine.Execute(r.ctx, r.req, r)
	r.finish(res, err)
}

// finish records the outcome, then sends the final event: a caller that
// reads the result and then asks GET /sessions/{id} sees the final status.
func (r *run) finish(res *sandbox.Result, err error) {
	b := r.b
	r.waitCalls()
	sctx, cancel := r.storeCtx()
	defer cancel()
	// The script has ended: nothing reads an answer from now on, so the
	// calls close before the final record is written (an answer that came
	// before was used or is reported as the script left it), when the
	// engine did not report the end (Ended). They closed after that write,
	// and until then a call the script left waiting took an answer (200)
	// that went nowhere.
	closed := r.closeCalls(sctx) == nil
	elapsed := b.now().Sub(r.begun)
	dur := float64(elapsed.Microseconds()) / 1000
	calls := int(r.calls.Load())
	var final StreamEvent
	var sessErr error
	status := StatusCompleted
	if context.Cause(r.ctx) == errStreamLimit {
		err = &sandbox.Error{Code: CodeStreamLimit, Message: fmt.Sprintf("the session's event stream exceeded the limit of %d bytes", b.opts.MaxStreamBytes)}
	} else if context.Cause(r.ctx) == errShuttingDown {
		// The broker closes when the gateway stops and also when a reload
		// replaces it (a changed broker, sandbox or throttle block): the
		// message must not claim the gateway stopped.
		err = &sandbox.Error{Code: CodeShuttingDown, Message: "the broker running this session was closed (the gateway is stopping, or a config reload replaced it) before the session finished: it was aborted when the time given to running sessions (drain_timeout) ended"}
	} else if context.Cause(r.ctx) == errOwnerLost {
		// The store holds the session as lost: whatever the script did,
		// report what every other gateway reports.
		err = &sandbox.Error{Code: CodeOwnerLost, Message: "the session was declared lost while this gateway could not reach the session store"}
	} else if cause := context.Cause(r.ctx); (err != nil || res.Status != sandbox.StatusOK) && (cause == errCallerLeft || cause == errCallerStalled) {
		// Whatever the engine made of the abort (the tool call in flight
		// failed, the script stopped), the caller left or stopped reading;
		// the engine's message would say "context canceled".
		err = &sandbox.Error{Code: sandbox.CodeExecutionAborted, Message: "execution aborted: " + cause.Error()}
	} else if (err != nil || res.Status != sandbox.StatusOK) && context.Cause(r.ctx) == errExecutionTimeout {
		// Whatever the engine made of our deadline (an abort, a failed tool
		// call), it is the execution's timeout.
		err = nil
		res = &sandbox.Result{Status: sandbox.StatusTimeout, Error: &sandbox.ScriptError{
			Code: sandbox.CodeTimeout, Message: fmt.Sprintf("script exceeded the time limit of %d ms", r.req.Limits.Timeout.Milliseconds()),
		}}
	}
	switch {
	case err != nil:
		status = StatusError
		code, msg := sandbox.CodeExecutionAborted, err.Error()
		var se *sandbox.Error
		if errors.As(err, &se) {
			code, msg = se.Code, se.Message
		}
		sessErr = &sandbox.ToolError{Code: code, Message: msg}
		final = StreamEvent{Type: EventError, Payload: &ErrorPayload{ScriptStatus: "engine_error", Error: ErrorBody{Code: code, Message: msg}}}
	case res.Status != sandbox.StatusOK:
		status = StatusError
		p := &ErrorPayload{ScriptStatus: string(res.Status)}
		if res.Error != nil {
			p.Error = ErrorBody{Code: res.Error.Code, Message: res.Error.Message}
			if l := res.Error.Location; l != nil {
				p.Location = &Location{Line: l.Line, Column: l.Column}
			}
			if res.Error.Kind != "" || res.Error.Name != "" || res.Error.Source != "" || res.Error.ToolName != "" {
				p.Details = &ErrDetail{Kind: res.Error.Kind, Name: res.Error.Name, Source: res.Error.Source, ToolName: res.Error.ToolName}
			}
		} else {
			p.Error = ErrorBody{Code: sandbox.CodeExecutionError, Message: string(res.Status)}
		}
		sessErr = &sandbox.ToolError{Code: p.Error.Code, Message: p.Error.Message}
		final = StreamEvent{Type: EventError, Payload: p}
	default:
		result := res.Result
		if len(result) == 0 {
			result = json.RawMessage("null")
		}
		final = StreamEvent{Type: EventResult, Payload: &ResultPayload{Status: StatusCompleted, Result: result}}
	}

	r.mu.Lock()
	r.sess.ToolCalls = calls
	switch p := final.Payload.(type) {
	case *ResultPayload:
		r.sess.Result = p.Result
	case *ErrorPayload:
		r.sess.Error = &SessionError{Code: p.Error.Code, Message: p.Error.Message, ScriptStatus: p.ScriptStatus,
			Location: p.Location, Details: p.Details}
		if res != nil && res.Error != nil {
			r.sess.Error.Stack = res.Error.Stack
		}
	}
	if res != nil {
		r.sess.Logs = res.Logs
	}
	r.mu.Unlock()
	s, terr := r.transition(status)
	if terr != nil {
		r.log.Error("finishing session", zap.Error(terr))
		s = r.snapshot()
	} else {
		b.opts.Metrics.sessionMoved(StatusRunning, "")
	}
	outcome := StatusCompleted
	if p, ok := final.Payload.(*ErrorPayload); ok {
		outcome = p.ScriptStatus
	}
	b.opts.Metrics.executionFinished(outcome, b.now().Sub(r.begun))
	r.endSpan(outcome, calls, final)
	if outcome == StatusCompleted {
		if ce := r.log.Check(zap.DebugLevel, "session completed"); ce != nil {
			ce.Write(zap.Int("tool_calls", calls), zap.Duration("duration", elapsed))
		}
	} else if ce := r.log.Check(zap.DebugLevel, "session failed"); ce != nil {
		p := final.Payload.(*ErrorPayload)
		ce.Write(zap.String("status", outcome), zap.String("code", p.Error.Code),
			zap.Int("tool_calls", calls), zap.Duration("duration", elapsed))
	}
	if b.finishing != nil {
		b.finishing(s.ID)
	}
	switch err := b.store.put(sctx, s); {
	case errors.Is(err, errSessionEnded):
		r.log.Info("finished a session the store holds as lost; its outcome is dropped")
	case err != nil:
		r.log.Warn("storing finished session; retried in the background", zap.Error(err))
		b.keepUnwritten(s)
	case !closed:
		if err := r.closeCalls(sctx); err != nil {
			r.log.Warn("closing calls of finished session; retried in the background", zap.Error(err))
			b.keepUnwritten(s)
		}
	}
	r.changed(sctx)
	b.mu.Lock()
	delete(b.runs, s.ID)
	b.forgetPrincipalLocked(r.principal)
	b.mu.Unlock()
	if d := b.opts.Directory; d != nil {
		d.remove(s.ID, b)
	}

	switch p := final.Payload.(type) {
	case *ResultPayload:
		p.SessionID, p.ToolCalls, p.DurationMs = s.ID, calls, dur
		b.listeners.emit(Event{Name: OnSessionCompleted, Session: s, Result: p.Result})
	case *ErrorPayload:
		p.SessionID, p.Status, p.ToolCalls, p.DurationMs = s.ID, StatusError, calls, dur
		b.listeners.emit(Event{Name: OnSessionError, Session: s, Err: sessErr})
	}
	r.send(final)
}

// waitCalls waits for the tool calls still running when the engine
// returned (their contexts have ended: the in-process engine cancels the
// calls it leaves, without waiting for them), so that their tool_result
// events and tool:completed come before the session's end. They came
// after, when at all: the final event closed the stream, and a call the
// script had left waiting was never reported.
func (r *run) waitCalls() {
	r.mu.Lock()
	r.finishing = true
	idle := r.idle
	if r.calling > 0 {
		idle = make(chan struct{})
		r.idle = idle
	}
	r.mu.Unlock()
	if idle == nil {
		return
	}
	if r.b.callsRunning != nil {
		r.b.callsRunning(r.sess.ID)
	}
	<-idle
}

// callStarted counts a call in; false once the run is finishing (the
// engine has returned and nothing would read the call's outcome).
func (r *run) callStarted() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.finishing {
		return false
	}
	r.calling++
	return true
}

// callEnded counts a call out.
func (r *run) callEnded() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calling--
	if r.calling == 0 && r.idle != nil {
		close(r.idle)
	}
}

// LookupTool implements sandbox.Host.
func (r *run) LookupTool(name string) (sandbox.ToolInfo, bool) {
	if r.host != nil {
		return r.host.LookupTool(name)
	}
	return r.b.lookupTool(name)
}

// SearchTools implements sandbox.Discovery with the session's host, when it
// offers discovery (the meta-tools do).
func (r *run) SearchTools(ctx context.Context, request json.RawMessage) (json.RawMessage, error) {
	if d, ok := r.host.(sandbox.Discovery); ok {
		return d.SearchTools(ctx, request)
	}
	return nil, &sandbox.ToolError{Code: sandbox.CodeToolNotFound, Message: "searchTools is not available here"}
}

// DescribeTool implements sandbox.Discovery like SearchTools.
func (r *run) DescribeTool(ctx context.Context, name string) (json.RawMessage, error) {
	if d, ok := r.host.(sandbox.Discovery); ok {
		return d.DescribeTool(ctx, name)
	}
	return nil, &sandbox.ToolError{Code: sandbox.CodeToolNotFound, Message: "describeTool is not available here"}
}

// changed announces a change of the session to Await, when it is followed.
func (r *run) changed(ctx context.Context) {
	if !r.announce {
		return
	}
	if err := r.b.store.notify(ctx, r.sess.ID); err != nil {
		r.log.Warn("announcing a session change", zap.Error(err))
	}
}

// Log implements sandbox.LogHost: console entries become log events, and
// reach the session's Host too when it takes them.
func (r *run) Log(level, message string) {
	r.send(StreamEvent{Type: EventLog, Payload: &LogPayload{Level: level, Message: message}})
	if lh, ok := r.host.(sandbox.LogHost); ok {
		lh.Log(level, message)
	}
}

// CallTool implements sandbox.Host: the call is counted, validated,
// admitted by the guard and answered by Go, the catalog or the caller.
func (r *run) CallTool(ctx context.Context, call sandbox.ToolCall) (json.RawMessage, error) {
	if !r.callStarted() {
		return nil, &sandbox.ToolError{Code: sandbox.CodeExecutionAborted, Message: "the execution ended before the tool was called"}
	}
	defer r.callEnded()
	b := r.b
	n := r.calls.Add(1)
	r.mu.Lock()
	// Every call counts, refused ones included, as in the final toolCalls.
	r.sess.ToolCalls = max(r.sess.ToolCalls, int(n))
	sess := r.sess.clone()
	r.mu.Unlock()
	started := b.now()
	b.listeners.emit(Event{Name: OnToolCalled, Session: sess, Tool: call.Name, CallID: call.ID, Input: call.Input})

	// announce runs once: from the handler path (possibly on a guard
	// goroutine that outlives a timeout) or, failing that, below.
	var announced atomic.Bool
	announce := func(awaiting bool) {
		if !announced.CompareAndSwap(false, true) {
			return
		}
		r.send(StreamEvent{Type: EventToolCall, Payload: &ToolCallPayload{
			SessionID: sess.ID, CallID: call.ID, Tool: call.Name, Input: call.Input, AwaitingResult: awaiting,
		}})
	}
	var out json.RawMessage
	var err error
	if n > int64(r.maxCalls) {
		err = &sandbox.ToolError{Code: CodeToolCallLimit, Message: fmt.Sprintf("tool call limit of %d reached", r.maxCalls)}
	} else {
		ic := &invocation{
			sessionID: sess.ID, callID: call.ID, auth: r.auth, clientIP: r.clientIP, context: r.context,
			caller: r, announce: announce,
		}
		if r.host != nil && !b.callerAnswered(call.Name) {
			announce(false)
			out, err = r.host.CallTool(context.WithValue(ctx, hostCallKey{}, &hostCall{r: r, id: call.ID}), call)
		} else {
			out, err = b.invoke(ctx, call.Name, call.Input, ic)
		}
	}
	announce(false)
	err = toolErrorIn(ctx, err)
	p := &ToolResultPayload{CallID: call.ID, Tool: call.Name, DurationMs: float64(b.now().Sub(started).Microseconds()) / 1000}
	if err != nil {
		te := err.(*sandbox.ToolError)
		p.Error = &ErrorBody{Code: te.Code, Message: te.Message}
	} else {
		p.Result = out
	}
	r.send(StreamEvent{Type: EventToolResult, Payload: p})
	b.listeners.emit(Event{Name: OnToolCompleted, Session: r.snapshot(), Tool: call.Name, CallID: call.ID, Result: out, Err: err})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// hostCall is a Host's tool call, in the context the Host gets, for its
// questions to the caller (AskCaller).
type hostCall struct {
	r     *run
	id    string
	asked atomic.Int32
}

type hostCallKey struct{}

// ErrNoCaller is AskCaller's error outside a Host's tool call of a session.
var ErrNoCaller = errors.New("not a tool call of a session whose caller can be asked")

// AskCaller makes a Host's tool call (ctx is the one CallTool got) wait for
// the session's caller to answer question (metatools: an upstream MCP
// server's elicitation request during that call): the question is one more
// pending call of the session, id "<call id>.<n>", Tool the tool called,
// with Question set; Await on any broker reports it, and SubmitToolResult
// on any broker answers it (its Result is the answer), as for a tool the
// caller answers. It waits until the answer or ctx's end (the call's
// deadline, the execution's); ErrNoCaller outside such a call.
func AskCaller(ctx context.Context, tool string, question json.RawMessage) (json.RawMessage, error) {
	hc, _ := ctx.Value(hostCallKey{}).(*hostCall)
	if hc == nil {
		return nil, ErrNoCaller
	}
	id := hc.id + "." + strconv.Itoa(int(hc.asked.Add(1)))
	return hc.r.awaitCaller(ctx, PendingCall{CallID: id, Tool: tool, Question: question}, func(bool) {})
}

// awaitCaller registers the call as pending, announces it and waits for the
// caller's answer through SubmitToolResult (possibly on another broker).
func (r *run) awaitCaller(ctx context.Context, call PendingCall, announce func(bool)) (json.RawMessage, error) {
	b := r.b
	if err := ctx.Err(); err != nil {
		// The call came after its script ended (the in-process engine runs
		// calls on goroutines it does not wait for), or was aborted.
		return nil, err
	}
	callID := call.CallID
	ch := make(chan *toolAnswer, 1)
	r.mu.Lock()
	r.waiters[callID] = ch
	if r.pending == nil {
		r.pending = make(map[string]PendingCall)
	}
	r.pending[callID] = call
	sess := r.sess.clone()
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.waiters, callID)
		delete(r.pending, callID)
		r.mu.Unlock()
	}()
	// A call that ends while it is written is no failure of the store (it
	// was marked unavailable, "context canceled"); the wait below sees the
	// end and marks the call abandoned, should the write have been made.
	if err := b.store.addCall(ctx, sess, call); err != nil && ctx.Err() == nil {
		b.storageFailed(err)
		return nil, &sandbox.ToolError{Code: CodeStorageUnavailable, Message: "the call cannot be recorded for the caller to answer: the session store is unavailable"}
	}
	announce(true)
	r.changed(ctx)
	m, waitStart := b.opts.Metrics, b.now()
	m.callerWaitStarted()
	answered := func(a *toolAnswer) (json.RawMessage, error) {
		outcome := "answered"
		if a.Error != nil {
			outcome = "error"
		}
		m.callerWaitEnded(outcome, b.now().Sub(waitStart))
		// Kept for restores: a store that lost the session would answer
		// one more answer 404, as for an id never issued, not 409.
		r.settle(callID, &r.answered)
		return answerResult(a)
	}
	var poll <-chan time.Time
	fetcher, _ := b.store.(answerFetcher)
	if fetcher != nil {
		t := time.NewTicker(b.answerPoll)
		defer t.Stop()
		poll = t.C
	}
	for {
		select {
		case a := <-ch:
			return answered(a)
		case <-poll:
			a, err := fetcher.fetchAnswer(ctx, sess.ID, callID)
			if err != nil {
				r.log.Debug("polling a tool answer", zap.Error(err))
			}
			if a != nil {
				return answered(a)
			}
		case <-ctx.Done():
			if b.callEnding != nil {
				b.callEnding(sess.ID, callID)
			}
			// The store decides whether the answer or the end came first:
			// an answer it accepted (its caller was told 200) is the call's
			// outcome, although the context ended before it arrived; any
			// later one is 409 CALL_ABANDONED. The call used to end with
			// its context's error whenever the select took that branch,
			// and an accepted answer went nowhere.
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			a, err := b.store.abandonCall(dctx, sess.ID, callID)
			cancel()
			if err != nil {
				r.log.Warn("marking a call that stopped waiting abandoned", zap.Error(err))
			}
			if a == nil {
				select {
				case a = <-ch: // delivered before it left (memory: under the store's lock)
				default:
				}
			}
			if a != nil {
				return answered(a)
			}
			m.callerWaitEnded("abandoned", b.now().Sub(waitStart))
			// Kept for restores: a store that lost the session would
			// otherwise answer a late result 404, as for an id never issued.
			r.settle(callID, &r.abandoned)
			return nil, ctx.Err()
		}
	}
}

// settle records a call that no longer waits in ids (r.answered or
// r.abandoned), for restores.
func (r *run) settle(callID string, ids *[]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.pending, callID)
	if len(r.abandoned)+len(r.answered) < r.maxCalls {
		*ids = append(*ids, callID)
	}
}

// answerResult turns a caller's answer into the call's outcome.
func answerResult(a *toolAnswer) (json.RawMessage, error) {
	if a.Error != nil {
		code := a.Error.Code
		if code == "" {
			code = CodeToolExecutionError
		}
		return nil, &sandbox.ToolError{Code: code, Message: a.Error.Message}
	}
	return a.Result, nil
}

// answer hands a caller's answer to the waiting call.
func (r *run) answer(a *toolAnswer) {
	r.mu.Lock()
	ch := r.waiters[a.CallID]
	delete(r.waiters, a.CallID)
	r.mu.Unlock()
	if ch != nil {
		ch <- a // buffered, one answer per call
	}
}

// endSpan closes the execution's span with its outcome; the error code, not
// the message, marks a failure (messages may quote data).
func (r *run) endSpan(outcome string, calls int, final StreamEvent) {
	if r.span == nil {
		return
	}
	code := ""
	if p, ok := final.Payload.(*ErrorPayload); ok {
		code = p.Error.Code
	}
	if r.span.IsRecording() {
		r.span.SetAttributes(attribute.String("codemode.execution.outcome", outcome), attribute.Int("codemode.tool_calls", calls))
	}
	telemetry.EndSpan(r.span, code)
}

// errStreamLimit is the cause of a run ended for streaming too much.
var errStreamLimit = errors.New("the session streamed more than its limit")

// errShuttingDown is the cause of a run Close aborted when its drain ended.
var errShuttingDown = errors.New("the broker closed before the session finished")

// errCallerLeft is the cause of a run whose caller stopped reading its
// events (closed the /execute response, or stopped an Execute iteration).
var errCallerLeft = errors.New("the caller closed the event stream before the session finished")

// errCallerStalled is the cause of a run whose caller kept its /execute
// response open but read nothing for streamWriteTimeout: an event could not
// be written.
var errCallerStalled = errors.New("the caller stopped reading the event stream: an event could not be written within the stream's write timeout (30s)")

// eventSize estimates what an event adds to the stream: its payloads and
// texts, plus a fixed envelope.
func eventSize(ev StreamEvent) int64 {
	n := 128
	switch p := ev.Payload.(type) {
	case *ToolCallPayload:
		n += len(p.Input) + len(p.Tool)
	case *ToolResultPayload:
		n += len(p.Result) + len(p.Tool)
		if p.Error != nil {
			n += len(p.Error.Message)
		}
	case *LogPayload:
		n += len(p.Message)
	}
	return int64(n)
}
