package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"
)

func TestExecuteProgrammatic(t *testing.T) {
	b, _ := newTestBroker(t, nil)
	var mu sync.Mutex
	var seen []string
	for _, name := range []string{OnSessionCreated, OnSessionCompleted, OnSessionError, OnToolCalled, OnToolCompleted} {
		b.On(name, func(ev Event) {
			mu.Lock()
			defer mu.Unlock()
			s := ev.Name
			if ev.Tool != "" {
				s += "(" + ev.Tool + ")"
			}
			seen = append(seen, s)
		})
	}
	code := `const s = await callTool("math:add", {a: 2, b: 3});
const u = await callTool("text:upper", {text: "hi"});
return {sum: s.sum, text: u.text};`
	evs, err := collect(t, b, code, ExecuteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var ts []string
	for _, e := range evs {
		ts = append(ts, e.Type)
	}
	if got := strings.Join(ts, ","); got != "session,tool_call,tool_result,tool_call,tool_result,result" {
		t.Fatalf("events = %s", got)
	}
	sess := evs[0].Payload.(*Session)
	if sess.Status != StatusPending || sess.ExpiresAt-sess.CreatedAt != DefaultSessionTimeout.Milliseconds() {
		t.Errorf("session event = %+v", sess)
	}
	call := evs[1].Payload.(*ToolCallPayload)
	if call.Tool != "math:add" || call.AwaitingResult || call.SessionID != sess.ID {
		t.Errorf("tool_call = %+v", call)
	}
	if r := evs[2].Payload.(*ToolResultPayload); string(r.Result) != `{"sum":5}` || r.CallID != call.CallID {
		t.Errorf("tool_result = %+v", r)
	}
	res := evs[5].Payload.(*ResultPayload)
	if string(res.Result) != `{"sum":5,"text":"HI"}` || res.ToolCalls != 2 || res.Status != StatusCompleted {
		t.Errorf("result = %+v", res)
	}
	got, err := b.GetSession(context.Background(), sess.ID)
	if err != nil || got == nil || got.Status != StatusCompleted || got.ToolCalls != 2 {
		t.Errorf("GetSession = %+v, %v", got, err)
	}
	mu.Lock()
	defer mu.Unlock()
	want := "session:created,tool:called(math:add),tool:completed(math:add),tool:called(text:upper),tool:completed(text:upper),session:completed"
	if strings.Join(seen, ",") != want {
		t.Errorf("listeners saw %s", strings.Join(seen, ","))
	}
}

func TestExecuteErrors(t *testing.T) {
	b, _ := newTestBroker(t, nil)
	var sessErr error
	b.On(OnSessionError, func(ev Event) { sessErr = ev.Err })
	tests := []struct {
		name, code, status, errCode string
	}{
		{"syntax", `return (`, "syntax_error", sandbox.CodeSyntaxError},
		{"runtime", `null.x`, "runtime_error", sandbox.CodeExecutionError},
		{"unknown tool", `await callTool("nope:x", {})`, "tool_error", sandbox.CodeToolNotFound},
		{"validation", `await callTool("math:add", {a: "x"})`, "tool_error", CodeValidationError},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			evs, err := collect(t, b, tc.code, ExecuteOptions{})
			if err != nil {
				t.Fatal(err)
			}
			last := evs[len(evs)-1]
			p, ok := last.Payload.(*ErrorPayload)
			if last.Type != EventError || !ok {
				t.Fatalf("last event = %s %+v", last.Type, last.Payload)
			}
			if p.ScriptStatus != tc.status || p.Error.Code != tc.errCode || p.Status != StatusError {
				t.Errorf("error payload = %+v", p)
			}
			s, _ := b.GetSession(context.Background(), p.SessionID)
			if s.Status != StatusError || s.Error == nil || s.Error.Code != tc.errCode {
				t.Errorf("session = %+v", s)
			}
			if sessErr == nil {
				t.Error("session:error listener not called")
			}
		})
	}
	if _, err := collect(t, b, "", ExecuteOptions{}); err == nil {
		t.Error("empty code accepted")
	}
	_, err := collect(t, b, "return 1", ExecuteOptions{Filter: &EventFilter{Types: []string{"bogus"}}})
	var be *Error
	if !errors.As(err, &be) || be.Code != CodeValidationError {
		t.Errorf("bad filter: %v", err)
	}
}

func TestEventFilter(t *testing.T) {
	b, _ := newTestBroker(t, nil)
	code := `await callTool("math:add", {a: 1}); return 1`
	tests := []struct {
		name   string
		filter *EventFilter
		want   string
	}{
		{"none", nil, "session,tool_call,tool_result,result"},
		{"types", &EventFilter{Types: []string{EventResult, EventToolResult}}, "tool_result,result"},
		{"blocked", &EventFilter{BlockedTypes: []string{EventToolCall, EventSession}}, "tool_result,result"},
		{"blocked wins", &EventFilter{Types: []string{EventToolCall, EventResult}, BlockedTypes: []string{EventToolCall}}, "result"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			evs, err := collect(t, b, code, ExecuteOptions{Filter: tc.filter})
			if err != nil {
				t.Fatal(err)
			}
			var ts []string
			for _, e := range evs {
				ts = append(ts, e.Type)
			}
			if got := strings.Join(ts, ","); got != tc.want {
				t.Errorf("events = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestExecuteContextAndHandlerContext(t *testing.T) {
	var got *ExecutionContext
	b, _ := newTestBroker(t, func(o *BrokerOptions) {
		o.Tools.Register(ToolDefinition{Name: "ctx:echo", Handler: func(_ context.Context, in map[string]any, ec *ExecutionContext) (any, error) {
			got = ec
			return json.RawMessage(`{"ok":true}`), nil
		}})
	})
	auth := &AuthResult{Valid: true, UserID: "alice", TenantID: "acme"}
	evs, err := collect(t, b, `await callTool("ctx:echo", {}); return metaContext.name`, ExecuteOptions{
		Context: map[string]any{"name": "ctx"}, Auth: auth, ClientIP: "10.0.0.1",
	})
	if err != nil {
		t.Fatal(err)
	}
	if r := evs[len(evs)-1].Payload.(*ResultPayload); string(r.Result) != `"ctx"` {
		t.Errorf("result = %s", r.Result)
	}
	sess := evs[0].Payload.(*Session)
	if got == nil || got.SessionID != sess.ID || got.Auth != auth || got.Context["name"] != "ctx" || got.ClientIP != "10.0.0.1" || got.Tool != "ctx:echo" || got.CallID == "" {
		t.Errorf("ExecutionContext = %+v", got)
	}
	if sess.UserID != "alice" || sess.TenantID != "acme" {
		t.Errorf("session owner = %q/%q", sess.UserID, sess.TenantID)
	}
}

func TestToolHandlerFallback(t *testing.T) {
	b, _ := newTestBroker(t, func(o *BrokerOptions) {
		o.ToolHandler = func(_ context.Context, in map[string]any, ec *ExecutionContext) (any, error) {
			return map[string]any{"answeredBy": "toolHandler", "tool": ec.Tool, "question": in["question"]}, nil
		}
	})
	evs, err := collect(t, b, `return await callTool("client:prompt", {question: "q"})`, ExecuteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r := evs[len(evs)-1].Payload.(*ResultPayload); string(r.Result) != `{"answeredBy":"toolHandler","question":"q","tool":"client:prompt"}` {
		t.Errorf("result = %s", r.Result)
	}
}

func TestStopIterationAborts(t *testing.T) {
	b, _ := newTestBroker(t, nil)
	var id string
	for ev, err := range b.Execute(context.Background(), `await callTool("client:prompt", {question: "q"}); return 1`, ExecuteOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type == EventSession {
			id = ev.Payload.(*Session).ID
		}
		if ev.Type == EventToolCall {
			break
		}
	}
	// The abort is asynchronous; Close waits for it.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	s, _ := b.GetSession(context.Background(), id)
	if s == nil || s.Status != StatusError {
		t.Fatalf("session after abort = %+v", s)
	}
}

func TestStatusTransitions(t *testing.T) {
	r := &run{b: &Broker{now: time.Now}, sess: &Session{ID: "x", Status: StatusPending}}
	for _, bad := range []string{StatusCompleted, StatusError, StatusPending} {
		if _, err := r.transition(bad); err == nil {
			t.Errorf("pending -> %s allowed", bad)
		}
	}
	if _, err := r.transition(StatusRunning); err != nil {
		t.Fatal(err)
	}
	if _, err := r.transition(StatusPending); err == nil {
		t.Error("running -> pending allowed")
	}
	if _, err := r.transition(StatusCompleted); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{StatusRunning, StatusError, StatusPending, StatusCompleted} {
		if _, err := r.transition(bad); err == nil {
			t.Errorf("completed -> %s allowed", bad)
		}
	}
}

func TestSessionExpiryMemory(t *testing.T) {
	clock := &fakeClock{t: time.Now()}
	b, _ := newTestBroker(t, func(o *BrokerOptions) {
		o.Now = clock.Now
		o.SessionTimeout = time.Minute
	})
	evs, err := collect(t, b, `return 1`, ExecuteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	id := evs[0].Payload.(*Session).ID
	if s, _ := b.GetSession(context.Background(), id); s == nil {
		t.Fatal("session missing before expiry")
	}
	clock.Add(time.Minute)
	mem := b.store.(*memoryStore)
	mem.sweep(clock.Now().UnixMilli())
	if mem.len() != 0 {
		t.Errorf("%d sessions left after sweep", mem.len())
	}
	if s, _ := b.GetSession(context.Background(), id); s != nil {
		t.Errorf("expired session returned: %+v", s)
	}
	if err := b.SubmitToolResult(context.Background(), id, ToolResult{CallID: "1", Result: json.RawMessage(`1`)}); httpStatus(err) != http.StatusNotFound {
		t.Errorf("result for expired session: %v", err)
	}
}

func httpStatus(err error) int {
	var be *Error
	if errors.As(err, &be) {
		return be.Status
	}
	return 0
}

func TestNewValidation(t *testing.T) {
	bad := []*BrokerOptions{
		nil,
		{},
		{Engine: testEngine(), SessionTimeout: -1},
		{Engine: testEngine(), Authentication: &AuthConfig{Type: "basic", Validate: func(context.Context, string) (*AuthResult, error) { return nil, nil }}},
		{Engine: testEngine(), Authentication: &AuthConfig{Type: AuthBearer}},
		{Engine: testEngine(), RateLimiting: &RateLimitConfig{WindowMs: 0, MaxRequests: 1}},
	}
	for i, o := range bad {
		if _, err := New(o); err == nil {
			t.Errorf("case %d: New accepted %+v", i, o)
		}
	}
}

func TestLogEvents(t *testing.T) {
	engine := sandbox.NewInProcess(&sandbox.Options{Limits: sandbox.Limits{AllowConsole: true}})
	defer engine.Close()
	b, _ := newTestBroker(t, func(o *BrokerOptions) { o.Engine = engine })
	evs, err := collect(t, b, `console.log("hello", 1); console.warn("careful"); return 2`, ExecuteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var logs []string
	for _, e := range evs {
		if e.Type == EventLog {
			p := e.Payload.(*LogPayload)
			logs = append(logs, p.Level+":"+p.Message)
		}
	}
	if got := strings.Join(logs, "|"); !strings.Contains(got, "hello 1") || !strings.Contains(got, "careful") {
		t.Errorf("log events = %q", got)
	}
	if evs[len(evs)-1].Type != EventResult {
		t.Errorf("last event %s", evs[len(evs)-1].Type)
	}
}

// TestNoGoroutineLeak runs completed, failed, aborted and timed-out
// executions, closes the broker and checks the goroutines are gone.
func TestNoGoroutineLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	// An engine of its own, closed with the broker: the shared testEngine
	// keeps up to 16 idle goroutines for the next script, and how many this
	// test's scripts add to them depends on how their runs overlap.
	engine := sandbox.NewInProcess(nil)
	b, err := New(&BrokerOptions{Engine: engine, Tools: NewToolRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range DemoTools() {
		b.Tools().Register(d)
	}
	ctx := context.Background()
	for i := 0; i < 20; i++ {
		_, _ = collect(t, b, `return (await callTool("math:add", {a: 1})).sum`, ExecuteOptions{})
		_, _ = collect(t, b, `null.x`, ExecuteOptions{})
		_, _ = collect(t, b, `return await callTool("client:prompt", {question: "?"})`, ExecuteOptions{Timeout: time.Millisecond})
		for ev := range b.Execute(ctx, `return await callTool("client:prompt", {question: "?"})`, ExecuteOptions{}) {
			if ev.Type == EventToolCall {
				break // abort
			}
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := b.Close(cctx); err != nil {
		t.Fatal(err)
	}
	if err := engine.Close(); err != nil {
		t.Fatal(err)
	}
	// A leaked goroutine never exits: the wait is long only for a loaded
	// machine, where exiting goroutines may need seconds to be scheduled.
	deadline := time.Now().Add(30 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		runtime.Gosched()
		time.Sleep(10 * time.Millisecond) // waiting for exits, not for a clock
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<16)
		t.Fatalf("%d goroutines after Close, %d before:\n%s", n, before, buf[:runtime.Stack(buf, true)])
	}
}

// TestFinishedSessionsBounded: the finished sessions a memory store keeps
// hold at most MaxFinishedBytes of results; past it the oldest records go,
// as if expired, and the newest stay. Without the bound one caller running
// scripts that return 1 MB each grew the gateway to 2 GB in 47 s, every
// result kept for the session timeout.
func TestFinishedSessionsBounded(t *testing.T) {
	b, srv := newTestBroker(t, func(o *BrokerOptions) { o.Engine, o.MaxFinishedBytes = bigResultEngine(), 3<<20 })
	var ids []string
	for i := range 6 {
		code, hdr, body := do(t, http.MethodPost, srv.URL+"/execute", map[string]any{"code": fmt.Sprintf(`return "x".repeat(1000000) + %d`, i)}, nil)
		if code != 200 || !strings.Contains(string(body), `"type":"result"`) {
			t.Fatalf("script %d: %d %.200s", i, code, body)
		}
		ids = append(ids, hdr.Get("X-Session-Id"))
	}
	for i, id := range ids {
		code, _, body := do(t, http.MethodGet, srv.URL+"/sessions/"+id, nil, nil)
		kept := i >= len(ids)-3 // 3 MiB holds three results of 1 MB, not four
		if kept && (code != 200 || !strings.Contains(string(body), fmt.Sprintf(`x%d"`, i))) {
			t.Errorf("session %d of %d: %d %.100s, want its result", i, len(ids), code, body)
		}
		if !kept && code != 404 {
			t.Errorf("session %d of %d: %d, want 404 (removed past the bound)", i, len(ids), code)
		}
	}
	m := b.store.(*memoryStore)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.finishedBytes > 3<<20 || len(m.sessions) != 3 {
		t.Errorf("finishedBytes %d, %d records", m.finishedBytes, len(m.sessions))
	}
}
