package broker

import (
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"go.uber.org/zap"
)

// Event types of the execute stream, in the order a caller sees them:
// session first; then any number of tool_call, tool_result and log; then
// exactly one result or error last (unless the filter removes it).
const (
	// EventSession carries the new Session (id, status pending, times).
	EventSession = "session"
	// EventToolCall carries ToolCallPayload; AwaitingResult true means the
	// caller must answer through POST /sessions/{id}/tool-result.
	EventToolCall = "tool_call"
	// EventToolResult carries ToolResultPayload once a call is answered
	// (by Go, the catalog or the caller) or failed.
	EventToolResult = "tool_result"
	// EventLog carries LogPayload for each console entry of the script.
	EventLog = "log"
	// EventResult carries ResultPayload: the script returned.
	EventResult = "result"
	// EventError carries ErrorPayload: the script or the engine failed.
	EventError = "error"
)

var eventTypes = []string{EventSession, EventToolCall, EventToolResult, EventLog, EventResult, EventError}

// StreamEvent is one line of the execute stream.
type StreamEvent struct {
	Type    string `json:"type"`
	Payload any    `json:"payload"`
}

// ToolCallPayload is the payload of a tool_call event.
type ToolCallPayload struct {
	SessionID string          `json:"sessionId"`
	CallID    string          `json:"callId"`
	Tool      string          `json:"tool"`
	Input     json.RawMessage `json:"input"`
	// AwaitingResult is true when no Go handler answers the tool and the
	// session waits for the caller's POST /sessions/{id}/tool-result.
	AwaitingResult bool `json:"awaitingResult"`
}

// ToolResultPayload is the payload of a tool_result event. Exactly one of
// Result and Error is set.
type ToolResultPayload struct {
	CallID     string          `json:"callId"`
	Tool       string          `json:"tool"`
	Result     json.RawMessage `json:"result,omitempty"`
	Error      *ErrorBody      `json:"error,omitempty"`
	DurationMs float64         `json:"durationMs"`
}

// LogPayload is the payload of a log event.
type LogPayload struct {
	Level   string `json:"level"`
	Message string `json:"message"`
}

// ResultPayload is the payload of the final result event.
type ResultPayload struct {
	SessionID  string          `json:"sessionId"`
	Status     string          `json:"status"` // always "completed"
	Result     json.RawMessage `json:"result"`
	ToolCalls  int             `json:"toolCalls"`
	DurationMs float64         `json:"durationMs"`
}

// ErrorPayload is the payload of the final error event. ScriptStatus is the
// sandbox status (syntax_error, illegal_access, runtime_error, tool_error,
// timeout) or "engine_error" when the engine could not run the script.
type ErrorPayload struct {
	SessionID    string     `json:"sessionId"`
	Status       string     `json:"status"` // always "error"
	ScriptStatus string     `json:"scriptStatus"`
	Error        ErrorBody  `json:"error"`
	ToolCalls    int        `json:"toolCalls"`
	DurationMs   float64    `json:"durationMs"`
	Location     *Location  `json:"location,omitempty"`
	Details      *ErrDetail `json:"details,omitempty"`
}

// ErrorBody is {code, message}, the shape of every error the broker shows.
type ErrorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// RequestID names the request in the gateway's log (HTTP 5xx only).
	RequestID string `json:"requestId,omitempty"`
}

// Location is a 1-based line and column in the script.
type Location struct {
	Line   int `json:"line"`
	Column int `json:"column"`
}

// ErrDetail carries the sandbox's extra error fields, when set.
type ErrDetail struct {
	Kind     string `json:"kind,omitempty"`
	Name     string `json:"name,omitempty"`
	Source   string `json:"source,omitempty"`
	ToolName string `json:"toolName,omitempty"`
}

// EventFilter restricts the event types delivered to the caller. Types,
// when non-empty, is the list of types delivered; BlockedTypes is removed
// from that. A type in both lists is blocked: BlockedTypes wins. Unknown
// type names are a VALIDATION_ERROR.
type EventFilter struct {
	Types        []string `json:"types,omitempty"`
	BlockedTypes []string `json:"blockedTypes,omitempty"`
}

func (f *EventFilter) validate() error {
	if f == nil {
		return nil
	}
	for _, list := range [][]string{f.Types, f.BlockedTypes} {
		for _, t := range list {
			if !slices.Contains(eventTypes, t) {
				return newError(400, CodeValidationError, fmt.Sprintf("filter: unknown event type %q (known: session, tool_call, tool_result, log, result, error)", t))
			}
		}
	}
	return nil
}

// allows reports whether events of type t are delivered.
func (f *EventFilter) allows(t string) bool {
	if f == nil {
		return true
	}
	if slices.Contains(f.BlockedTypes, t) {
		return false
	}
	return len(f.Types) == 0 || slices.Contains(f.Types, t)
}

// Names of the in-process events delivered to listeners registered with On.
const (
	OnSessionCreated   = "session:created"   // Session
	OnSessionCompleted = "session:completed" // Session, Result
	OnSessionError     = "session:error"     // Session, Err
	OnToolCalled       = "tool:called"       // Session, Tool, Input
	OnToolCompleted    = "tool:completed"    // Session, Tool, Result or Err
)

// EventNames are the names On accepts, in the order an execution emits
// them.
var EventNames = []string{OnSessionCreated, OnToolCalled, OnToolCompleted, OnSessionCompleted, OnSessionError}

// Event is what a Listener receives. Which fields are set depends on Name
// (see the On* constants); Session is a snapshot whose ToolCalls counts the
// calls made so far, the current one included. Session is nil for the
// tool events of a call made outside a session (the meta-tools'
// meta:invoke).
type Event struct {
	Name    string
	Session *Session
	// Tool is the tool name for tool events.
	Tool string
	// CallID identifies the call for tool events.
	CallID string
	// Input is the tool's input (tool:called).
	Input json.RawMessage
	// Result is the tool result (tool:completed) or the script's return
	// value (session:completed).
	Result json.RawMessage
	// Err is the tool's or the session's failure.
	Err error
}

// Listener receives in-process events. It runs synchronously on the
// goroutine that produced the event, so it must return quickly. A listener
// that panics is recovered and logged; the session goes on as if it had
// returned.
type Listener func(Event)

type listeners struct {
	mu sync.RWMutex
	m  map[string][]Listener
	// logger reports a panicking listener; nil means none.
	logger *zap.Logger
}

func (l *listeners) on(name string, f Listener) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = make(map[string][]Listener)
	}
	l.m[name] = append(l.m[name], f)
}

func (l *listeners) emit(ev Event) {
	l.mu.RLock()
	fs := l.m[ev.Name]
	l.mu.RUnlock()
	for _, f := range fs {
		l.call(f, ev)
	}
}

// call runs one listener: listeners are user code and must never take the
// gateway down or leave a session half-made.
func (l *listeners) call(f Listener, ev Event) {
	defer func() {
		if p := recover(); p != nil && l.logger != nil {
			sid := ""
			if ev.Session != nil {
				sid = ev.Session.ID
			}
			l.logger.Error("event listener panicked; ignored", zap.String("event", ev.Name),
				zap.String("session", sid), zap.Any("panic", p), zap.Stack("stack"))
		}
	}()
	f(ev)
}
