package broker

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"sync"
	"time"
)

// Session statuses. A session moves pending -> running -> completed or
// error, and never otherwise.
const (
	StatusPending   = "pending"
	StatusRunning   = "running"
	StatusCompleted = "completed"
	StatusError     = "error"
)

// Session is one execution of a script. Times are Unix epoch milliseconds.
type Session struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	// CreatedAt is when the session was created (epoch ms).
	CreatedAt int64 `json:"createdAt"`
	// ExpiresAt is when the session record is removed (epoch ms):
	// CreatedAt + sessionTimeout.
	ExpiresAt int64 `json:"expiresAt"`
	// UpdatedAt is the last status change (epoch ms).
	UpdatedAt int64 `json:"updatedAt"`
	// Owner identifies the broker (gateway) running the session, with a
	// store shared through Redis; a session whose owner stops heartbeating
	// ends with error OWNER_LOST.
	Owner string `json:"owner,omitempty"`
	// UserID and TenantID come from the AuthResult of the request that
	// created the session; only that user may read or answer it.
	UserID   string `json:"userId,omitempty"`
	TenantID string `json:"tenantId,omitempty"`
	// ToolCalls counts the tool calls made so far, unknown tools included:
	// live in the lifecycle events, stored when the session finishes.
	ToolCalls int `json:"toolCalls"`
	// Result is the script's return value (JSON) once Status is completed,
	// so that a caller whose stream was cut learns it with GET
	// /sessions/{id}.
	Result json.RawMessage `json:"result,omitempty"`
	// Logs are the script's console entries once the session finished
	// (when the sandbox allows console; "[warn] ", "[error] " prefixes).
	Logs []string `json:"logs,omitempty"`
	// Error is set when Status is error.
	Error *SessionError `json:"error,omitempty"`
}

// SessionError is why a session ended in status error: a script error code
// (sandbox codes such as EXECUTION_ERROR, TIMEOUT, TOOL_EXECUTION_ERROR) or
// an engine code (QUEUE_FULL, EXECUTION_ABORTED...). The other fields are
// those of the final error event.
type SessionError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// ScriptStatus is the sandbox status (syntax_error, illegal_access,
	// runtime_error, tool_error, timeout) or engine_error.
	ScriptStatus string     `json:"scriptStatus,omitempty"`
	Location     *Location  `json:"location,omitempty"`
	Details      *ErrDetail `json:"details,omitempty"`
	// Stack is the script's stack trace, when the sandbox gave one.
	Stack string `json:"stack,omitempty"`
}

// finished reports whether the session reached its final status.
func (s *Session) finished() bool { return s.Status == StatusCompleted || s.Status == StatusError }

func (s *Session) clone() *Session {
	c := *s
	if s.Error != nil {
		e := *s.Error
		c.Error = &e
	}
	c.Logs = append([]string(nil), s.Logs...)
	if len(c.Logs) == 0 {
		c.Logs = nil
	}
	return &c
}

// PendingCall is a tool call of a session that waits for the caller's
// answer (SubmitToolResult).
type PendingCall struct {
	CallID string          `json:"callId"`
	Tool   string          `json:"tool"`
	Input  json.RawMessage `json:"input"`
	// Question, when set, is a question a Host's call of Tool asks the
	// caller (AskCaller) instead of a call the caller answers: its id is
	// "<call id>.<n>" and its answer is the question's.
	Question json.RawMessage `json:"question,omitempty"`
}

// runCalls is what a restore writes of a running session's calls: those
// waiting for the caller, oldest first, the ids of those that stopped
// waiting and of those answered, and whether the script has ended (its
// calls are closed, and every answer is 409 SESSION_FINISHED).
type runCalls struct {
	pending             []PendingCall
	abandoned, answered []string
	closed              bool
}

// SessionState is a session as Await reports it: the record, and the calls
// waiting for the caller, oldest first.
type SessionState struct {
	Session *Session
	Pending []PendingCall
}

// toolAnswer is a caller-supplied tool result on its way to the waiting
// session, possibly through Redis pub/sub.
type toolAnswer struct {
	SessionID string          `json:"sessionId"`
	CallID    string          `json:"callId,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	Error     *answerError    `json:"error,omitempty"`
	// Changed marks a notice instead of an answer: the session has a new
	// pending call or finished (for Await on any broker).
	Changed bool `json:"changed,omitempty"`
}

type answerError struct {
	Message string `json:"message"`
	Code    string `json:"code,omitempty"`
}

// Outcomes of store.resolveCall.
var (
	errSessionGone  = errors.New("session not found")
	errCallUnknown  = errors.New("call not found")
	errCallAnswered = errors.New("call already answered")
	errCallClosed   = errors.New("session finished")
	// errCallAbandoned: the call stopped waiting for its answer (the
	// script's timeout, an abort, its worker lost, the tool's own timeout).
	errCallAbandoned = errors.New("call stopped waiting")
	// errOwnerLost: the broker running the session stopped heartbeating; the
	// session was ended with OWNER_LOST.
	errOwnerLost = errors.New("the gateway running the session is gone")
)

// errSessionEnded: a write of a running session found its record already
// finished (declared OWNER_LOST while this broker could not reach the
// store); the record is left as it is.
var errSessionEnded = errors.New("session already ended in the store")

// store keeps sessions and the state of caller-answered calls. The memory
// store serves one broker; the Redis store is shared by every broker using
// the same Redis and key prefix.
type store interface {
	// put writes a session; its record lives until s.ExpiresAt.
	put(ctx context.Context, s *Session) error
	// get returns a session, or nil when unknown or expired (an expired
	// record found on the way is deleted).
	get(ctx context.Context, id string) (*Session, error)
	// addCall records that a call of a session awaits a caller's result.
	addCall(ctx context.Context, s *Session, call PendingCall) error
	// pendingCalls lists the calls of a session still waiting for an
	// answer, oldest first.
	pendingCalls(ctx context.Context, sessionID string) ([]PendingCall, error)
	// notify tells every broker sharing the store (this one included) that
	// the session changed: Await re-reads it.
	notify(ctx context.Context, sessionID string) error
	// abandonCall marks a call that stopped waiting (timeout, abort, worker
	// lost) abandoned; the mark lives as long as the session's record. The
	// store decides which came first: a call it had already marked answered
	// stays so, and its answer is returned (Redis), or was handed to the
	// broker under the same lock (memory: it is in the call's channel), so
	// that the call uses what its caller was told was accepted.
	abandonCall(ctx context.Context, sessionID, callID string) (*toolAnswer, error)
	// closeCalls marks a session whose script ended (before its final
	// record is written) so late results get 409 SESSION_FINISHED.
	closeCalls(ctx context.Context, s *Session) error
	// resolveCall atomically moves a pending call to answered and delivers
	// the answer to the broker running the session. It returns
	// errSessionGone, errCallUnknown, errCallAnswered, errCallAbandoned,
	// errCallClosed or (Redis) errOwnerLost, and changes no call in those
	// cases (errOwnerLost: the session is ended OWNER_LOST if it was not).
	resolveCall(ctx context.Context, a *toolAnswer) error
	// restore re-writes a running session and its calls after the store
	// lost them or missed a write (Redis restarted, or was unreachable); an
	// abandoned call the store holds as answered stays so. It returns
	// errSessionEnded, changing nothing, when the store holds the session as
	// finished.
	restore(ctx context.Context, s *Session, calls runCalls) error
	// sweep deletes expired records (the memory store; Redis expires keys
	// itself).
	sweep(now int64)
	close() error
}

// ownerStore is a store shared by several brokers (Redis): each broker
// proves it is alive, and the sessions of one that stops are ended.
type ownerStore interface {
	// heartbeat renews this broker's liveness; reset is true when the store
	// had lost it (a restart without persistence, or a heartbeat lapse), so
	// the broker's running sessions must be restored.
	heartbeat(ctx context.Context) (reset bool, err error)
	// reapLost ends the running sessions of every broker whose liveness
	// lapsed with OWNER_LOST and returns their ids.
	reapLost(ctx context.Context) ([]string, error)
	// resign withdraws this broker's liveness (Close).
	resign(ctx context.Context) error
}

// CodeOwnerLost is the session error, and the 409 of a tool result, for a
// session whose gateway stopped (killed, crashed, cut off from Redis).
const CodeOwnerLost = "OWNER_LOST"

// answerFetcher is a store whose answers may miss their delivery (Redis
// pub/sub drops messages while reconnecting); waiting calls poll it.
type answerFetcher interface {
	fetchAnswer(ctx context.Context, sessionID, callID string) (*toolAnswer, error)
}

// answerPollInterval is how often a call waiting for its caller checks a
// Redis store for an answer whose pub/sub message was lost.
const answerPollInterval = time.Second

// memoryStore keeps everything in this process.
type memoryStore struct {
	now     func() time.Time
	deliver func(*toolAnswer)
	// maxFinished bounds finishedBytes (BrokerOptions.MaxFinishedBytes).
	maxFinished int64

	mu       sync.Mutex
	sessions map[string]*memSession
	// finishedBytes is what the finished records keep (finishedSize);
	// finished holds their ids, oldest first, to remove them past
	// maxFinished.
	finishedBytes int64
	finished      []string
}

type memSession struct {
	s      *Session
	calls  map[string]*memCall // nil until a caller-answered call
	closed bool
	// counted: the record is finished and size counts in finishedBytes.
	counted bool
	size    int64
}

// finishedSize is what a finished record keeps that its script or caller
// shaped: the result, the console logs and the error's texts.
func finishedSize(s *Session) int64 {
	n := int64(len(s.Result))
	for _, l := range s.Logs {
		n += int64(len(l))
	}
	if s.Error != nil {
		n += int64(len(s.Error.Message) + len(s.Error.Stack))
	}
	return n
}

// memCall is a call of a session and where it stands.
type memCall struct {
	PendingCall
	state callState
}

// callState is a caller-answered call's state in a store: waiting for its
// answer, answered, or abandoned (it stopped waiting before an answer came).
type callState uint8

const (
	callPending callState = iota
	callAnswered
	callAbandoned
)

func newMemoryStore(now func() time.Time, deliver func(*toolAnswer), maxFinished int64) *memoryStore {
	return &memoryStore{now: now, deliver: deliver, maxFinished: maxFinished, sessions: make(map[string]*memSession)}
}

// put writes s. A finished record counts in finishedBytes; past
// maxFinished the oldest finished records are removed, as if they had
// expired, the newest always kept: each may keep a result of the
// sandbox's MaxResultBytes for the session timeout, and one caller
// running scripts that return 1 MB each grew the gateway to 2 GB in 47 s,
// without a bound.
func (m *memoryStore) put(_ context.Context, s *Session) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.sessions[s.ID]
	if !ok {
		e = &memSession{}
		m.sessions[s.ID] = e
	}
	e.s = s.clone()
	if !s.finished() {
		return nil
	}
	size := finishedSize(s)
	if e.counted {
		m.finishedBytes += size - e.size
	} else {
		m.finishedBytes += size
		m.finished = append(m.finished, s.ID)
		e.counted = true
	}
	e.size = size
	for m.finishedBytes > m.maxFinished && len(m.finished) > 1 {
		id := m.finished[0]
		m.finished[0] = ""
		m.finished = m.finished[1:]
		if old, ok := m.sessions[id]; ok {
			m.remove(id, old)
		}
	}
	return nil
}

// remove deletes record id; the caller holds m.mu.
func (m *memoryStore) remove(id string, e *memSession) {
	delete(m.sessions, id)
	if e.counted {
		m.finishedBytes -= e.size
	}
}

func (m *memoryStore) get(_ context.Context, id string) (*Session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.sessions[id]
	if !ok {
		return nil, nil
	}
	if e.s.ExpiresAt <= m.now().UnixMilli() {
		m.remove(id, e)
		return nil, nil
	}
	return e.s.clone(), nil
}

func (m *memoryStore) addCall(_ context.Context, s *Session, call PendingCall) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.sessions[s.ID]; ok {
		if e.calls == nil {
			e.calls = map[string]*memCall{}
		}
		e.calls[call.CallID] = &memCall{PendingCall: call}
	}
	return nil
}

func (m *memoryStore) pendingCalls(_ context.Context, sessionID string) ([]PendingCall, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.sessions[sessionID]
	if !ok || e.closed {
		return nil, nil
	}
	var out []PendingCall
	for _, c := range e.calls {
		if c.state == callPending {
			out = append(out, c.PendingCall)
		}
	}
	sortCalls(out)
	return out, nil
}

func (m *memoryStore) notify(_ context.Context, sessionID string) error {
	m.deliver(&toolAnswer{SessionID: sessionID, Changed: true})
	return nil
}

// sortCalls orders calls by their sandbox id ("1", "2", ... "10"), that is
// in the order the script made them.
func sortCalls(calls []PendingCall) {
	sort.Slice(calls, func(i, j int) bool {
		a, b := calls[i].CallID, calls[j].CallID
		if len(a) != len(b) {
			return len(a) < len(b)
		}
		return a < b
	})
}

func (m *memoryStore) abandonCall(_ context.Context, sessionID, callID string) (*toolAnswer, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.sessions[sessionID]; ok {
		e.abandon(callID, false)
	}
	return nil, nil
}

// abandon marks a pending call abandoned, and an unknown one too when
// restoring; the caller holds m.mu. The mark is kept, without the input,
// until the record goes: a late answer is 409 CALL_ABANDONED, not 404 as
// for an id never issued.
func (e *memSession) abandon(callID string, restoring bool) {
	c := e.calls[callID]
	if (c == nil && restoring) || (c != nil && c.state == callPending) {
		if e.calls == nil {
			e.calls = map[string]*memCall{}
		}
		e.calls[callID] = &memCall{PendingCall: PendingCall{CallID: callID}, state: callAbandoned}
	}
}

func (m *memoryStore) closeCalls(_ context.Context, s *Session) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.sessions[s.ID]; ok {
		e.closed = true
		e.calls = nil
	}
	return nil
}

func (m *memoryStore) resolveCall(_ context.Context, a *toolAnswer) error {
	m.mu.Lock()
	e, ok := m.sessions[a.SessionID]
	switch {
	case !ok || e.s.ExpiresAt <= m.now().UnixMilli():
		m.mu.Unlock()
		return errSessionGone
	case e.closed:
		m.mu.Unlock()
		return errCallClosed
	}
	c, ok := e.calls[a.CallID]
	switch {
	case !ok:
		m.mu.Unlock()
		return errCallUnknown
	case c.state == callAnswered:
		m.mu.Unlock()
		return errCallAnswered
	case c.state == callAbandoned:
		m.mu.Unlock()
		return errCallAbandoned
	}
	// Delivered under the lock: a call that stops waiting (abandonCall)
	// either finds it answered and its answer already in its channel, or
	// marks it abandoned first. Delivered after, an answer accepted (200)
	// could reach the call after it had left, and nothing read it.
	c.state = callAnswered
	m.deliver(a)
	m.mu.Unlock()
	return nil
}

func (m *memoryStore) restore(ctx context.Context, s *Session, calls runCalls) error {
	if err := m.put(ctx, s); err != nil {
		return err
	}
	if calls.closed {
		return m.closeCalls(ctx, s)
	}
	for _, c := range calls.pending {
		_ = m.addCall(ctx, s, c)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.sessions[s.ID]; ok {
		for _, id := range calls.abandoned {
			e.abandon(id, true)
		}
		if e.calls == nil && len(calls.answered) > 0 {
			e.calls = map[string]*memCall{}
		}
		for _, id := range calls.answered {
			if c := e.calls[id]; c == nil || c.state != callAnswered {
				e.calls[id] = &memCall{PendingCall: PendingCall{CallID: id}, state: callAnswered}
			}
		}
	}
	return nil
}

func (m *memoryStore) sweep(now int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, e := range m.sessions {
		if e.s.ExpiresAt <= now {
			m.remove(id, e)
		}
	}
	// The ids of records gone (expired, removed) leave the queue too.
	kept := make([]string, 0, len(m.finished))
	for _, id := range m.finished {
		if e, ok := m.sessions[id]; ok && e.counted {
			kept = append(kept, id)
		}
	}
	m.finished = kept
}

func (m *memoryStore) len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.sessions)
}

func (m *memoryStore) close() error { return nil }
