package broker

import (
	"context"
	"encoding/json"
	"errors"
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
	// UserID and TenantID come from the AuthResult of the request that
	// created the session; only that user may read or answer it.
	UserID   string `json:"userId,omitempty"`
	TenantID string `json:"tenantId,omitempty"`
	// ToolCalls counts the tool calls made so far (updated when the session
	// finishes).
	ToolCalls int `json:"toolCalls"`
	// Error is set when Status is error.
	Error *SessionError `json:"error,omitempty"`
}

// SessionError is why a session ended in status error: a script error code
// (sandbox codes such as EXECUTION_ERROR, TIMEOUT, TOOL_EXECUTION_ERROR) or
// an engine code (QUEUE_FULL, EXECUTION_ABORTED...).
type SessionError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (s *Session) clone() *Session {
	c := *s
	if s.Error != nil {
		e := *s.Error
		c.Error = &e
	}
	return &c
}

// toolAnswer is a caller-supplied tool result on its way to the waiting
// session, possibly through Redis pub/sub.
type toolAnswer struct {
	SessionID string          `json:"sessionId"`
	CallID    string          `json:"callId"`
	Result    json.RawMessage `json:"result,omitempty"`
	Error     *answerError    `json:"error,omitempty"`
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
)

// store keeps sessions and the state of caller-answered calls. The memory
// store serves one broker; the Redis store is shared by every broker using
// the same Redis and key prefix.
type store interface {
	// put writes a session; its record lives until s.ExpiresAt.
	put(ctx context.Context, s *Session) error
	// get returns a session, or nil when unknown or expired (an expired
	// record found on the way is deleted).
	get(ctx context.Context, id string) (*Session, error)
	// addCall records that callID of a session awaits a caller's result.
	addCall(ctx context.Context, s *Session, callID string) error
	// dropCall forgets a call that stopped waiting (timeout, abort).
	dropCall(ctx context.Context, sessionID, callID string) error
	// closeCalls marks a finished session so late results get 409.
	closeCalls(ctx context.Context, s *Session) error
	// resolveCall atomically moves a pending call to answered and delivers
	// the answer to the broker running the session. It returns
	// errSessionGone, errCallUnknown, errCallAnswered or errCallClosed and
	// changes nothing in those cases.
	resolveCall(ctx context.Context, a *toolAnswer) error
	// sweep deletes expired records (the memory store; Redis expires keys
	// itself).
	sweep(now int64)
	close() error
}

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

	mu       sync.Mutex
	sessions map[string]*memSession
}

type memSession struct {
	s      *Session
	calls  map[string]bool // callID -> answered; nil until a caller-answered call
	closed bool
}

func newMemoryStore(now func() time.Time, deliver func(*toolAnswer)) *memoryStore {
	return &memoryStore{now: now, deliver: deliver, sessions: make(map[string]*memSession)}
}

func (m *memoryStore) put(_ context.Context, s *Session) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.sessions[s.ID]; ok {
		e.s = s.clone()
		return nil
	}
	m.sessions[s.ID] = &memSession{s: s.clone()}
	return nil
}

func (m *memoryStore) get(_ context.Context, id string) (*Session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.sessions[id]
	if !ok {
		return nil, nil
	}
	if e.s.ExpiresAt <= m.now().UnixMilli() {
		delete(m.sessions, id)
		return nil, nil
	}
	return e.s.clone(), nil
}

func (m *memoryStore) addCall(_ context.Context, s *Session, callID string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.sessions[s.ID]; ok {
		if e.calls == nil {
			e.calls = map[string]bool{}
		}
		e.calls[callID] = false
	}
	return nil
}

func (m *memoryStore) dropCall(_ context.Context, sessionID, callID string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.sessions[sessionID]; ok && !e.calls[callID] {
		delete(e.calls, callID)
	}
	return nil
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
	answered, ok := e.calls[a.CallID]
	switch {
	case !ok:
		m.mu.Unlock()
		return errCallUnknown
	case answered:
		m.mu.Unlock()
		return errCallAnswered
	}
	e.calls[a.CallID] = true
	m.mu.Unlock()
	m.deliver(a)
	return nil
}

func (m *memoryStore) sweep(now int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, e := range m.sessions {
		if e.s.ExpiresAt <= now {
			delete(m.sessions, id)
		}
	}
}

func (m *memoryStore) len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.sessions)
}

func (m *memoryStore) close() error { return nil }
