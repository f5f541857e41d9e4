package broker

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"
	"github.com/codemode-gateway/caddy-codemode/guard/redistest"
)

// outerHost is a tool host of its own (as the meta-tools' index is): it
// answers "outer:double" and knows the broker's client:prompt by name.
type outerHost struct{}

func (outerHost) LookupTool(name string) (sandbox.ToolInfo, bool) {
	switch name {
	case "outer:double", "outer:block", "client:prompt":
		return sandbox.ToolInfo{Name: name, InputSchema: json.RawMessage(`{"type":"object"}`)}, true
	}
	return sandbox.ToolInfo{}, false
}

func (outerHost) CallTool(ctx context.Context, call sandbox.ToolCall) (json.RawMessage, error) {
	if call.Name == "outer:block" {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if call.Name != "outer:double" {
		return nil, &sandbox.ToolError{Code: "TOOL_NOT_FOUND", Message: call.Name + " is not an outer tool"}
	}
	var in struct{ N int }
	_ = json.Unmarshal(call.Input, &in)
	return json.Marshal(map[string]int{"n": 2 * in.N})
}

func awaitState(t *testing.T, b *Broker, id string) *SessionState {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := b.Await(ctx, id)
	if err != nil || st == nil {
		t.Fatalf("Await: %v %v", st, err)
	}
	return st
}

// TestStartAwaitOneBroker: a session made by Start runs without a stream,
// its host answers the outer tools, its caller-answered calls are reported
// by Await and answered with SubmitToolResult, and the finished record
// holds the result and the logs.
func TestStartAwaitOneBroker(t *testing.T) {
	b, _ := newTestBroker(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	s, err := b.Start(ctx, `
const d = await callTool("outer:double", {n: 21});
console.log("doubled", d.n);
const name = await callTool("client:prompt", {question: "name?"});
return name + " " + d.n;`, ExecuteOptions{Host: outerHost{}})
	if err != nil {
		t.Fatal(err)
	}
	cancel() // the session outlives the context it was started with
	st := awaitState(t, b, s.ID)
	if len(st.Pending) != 1 || st.Pending[0].Tool != "client:prompt" || string(st.Pending[0].Input) != `{"question":"name?"}` {
		t.Fatalf("pending: %+v (session %+v)", st.Pending, st.Session)
	}
	if err := b.SubmitToolResult(context.Background(), s.ID, ToolResult{CallID: st.Pending[0].CallID, Result: json.RawMessage(`"Ada"`)}); err != nil {
		t.Fatal(err)
	}
	st = awaitState(t, b, s.ID)
	if st.Session.Status != StatusCompleted || string(st.Session.Result) != `"Ada 42"` || len(st.Pending) != 0 {
		t.Fatalf("final: %+v", st.Session)
	}
	if st := awaitState(t, b, s.ID); st.Session.Status != StatusCompleted {
		t.Fatal("a second Await of a finished session did not return it")
	}
	// GET /sessions/{id} shows the same record.
	got, _ := b.GetSession(context.Background(), s.ID)
	if string(got.Result) != `"Ada 42"` {
		t.Fatalf("GetSession: %+v", got)
	}
}

// TestStartAwaitErrors: a failed script's record carries the error event's
// details; a tool the host does not know fails like any unknown tool; Await
// of an unknown session is nil; an Await whose context ends returns the
// latest state.
func TestStartAwaitErrors(t *testing.T) {
	b, _ := newTestBroker(t, nil)
	s, err := b.Start(context.Background(), "const x = ;", ExecuteOptions{Host: outerHost{}})
	if err != nil {
		t.Fatal(err)
	}
	st := awaitState(t, b, s.ID)
	if e := st.Session.Error; st.Session.Status != StatusError || e == nil || e.ScriptStatus != "syntax_error" || e.Location == nil {
		t.Fatalf("syntax error: %+v %+v", st.Session, e)
	}
	s, _ = b.Start(context.Background(), `return await callTool("math:add", {a: 1})`, ExecuteOptions{Host: outerHost{}})
	st = awaitState(t, b, s.ID)
	if e := st.Session.Error; e == nil || e.ScriptStatus != "tool_error" || !strings.Contains(e.Message+e.Code, "TOOL_NOT_FOUND") && e.Details == nil {
		t.Fatalf("tool the host does not know: %+v %+v", st.Session, e)
	}
	if st, err := b.Await(context.Background(), "nope"); st != nil || err != nil {
		t.Fatalf("unknown session: %v %v", st, err)
	}
	s, _ = b.Start(context.Background(), `await callTool("outer:block", {})`, ExecuteOptions{Host: outerHost{}, Timeout: 2 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	st, err = b.Await(ctx, s.ID)
	if err == nil || st == nil || st.Session.Status != StatusRunning && st.Session.Status != StatusPending {
		t.Fatalf("Await past its context: %+v %v", st, err)
	}
}

// TestStartAwaitAcrossRedis: a session started on broker A is followed and
// answered through broker B, which shares A's Redis: B learns of A's
// pending calls and of the end at once (pub/sub notice), not by polling.
func TestStartAwaitAcrossRedis(t *testing.T) {
	rdb, prefix := redistest.Client(t)
	shared := func(o *BrokerOptions) { o.Redis, o.KeyPrefix = rdb, prefix }
	a, _ := newTestBroker(t, shared)
	b, _ := newTestBroker(t, shared)
	b.answerPoll = time.Hour // only the notice can wake B

	s, err := a.Start(context.Background(), `
const x = await callTool("client:prompt", {question: "x?"});
const y = await callTool("client:prompt", {question: "y?"});
return [x, y];`, ExecuteOptions{Host: outerHost{}})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{`{"question":"x?"}`, `{"question":"y?"}`} {
		st := awaitState(t, b, s.ID)
		if len(st.Pending) != 1 || string(st.Pending[0].Input) != want {
			t.Fatalf("call %d seen on B: %+v", i, st.Pending)
		}
		if err := b.SubmitToolResult(context.Background(), s.ID, ToolResult{CallID: st.Pending[0].CallID, Result: json.RawMessage(`"` + string(rune('a'+i)) + `"`)}); err != nil {
			t.Fatal(err)
		}
	}
	st := awaitState(t, b, s.ID)
	if st.Session.Status != StatusCompleted || string(st.Session.Result) != `["a","b"]` {
		t.Fatalf("final on B: %+v", st.Session)
	}
}

// discoveringHost is an outerHost that also answers searchTools and
// describeTool, as the meta-tools do.
type discoveringHost struct{ outerHost }

func (discoveringHost) SearchTools(_ context.Context, req json.RawMessage) (json.RawMessage, error) {
	return json.RawMessage(`[{"name":"outer:double"}]`), nil
}

func (discoveringHost) DescribeTool(_ context.Context, name string) (json.RawMessage, error) {
	return json.Marshal(map[string]string{"name": name})
}

// TestSessionDiscovery: a session's run passes searchTools and
// describeTool to a host that offers them, and fails them with
// TOOL_NOT_FOUND otherwise.
func TestSessionDiscovery(t *testing.T) {
	b, _ := newTestBroker(t, nil)
	s, err := b.Start(context.Background(), `
const found = await searchTools("double a number");
const d = await describeTool(found[0].name);
return (await callTool(d.name, {n: 4})).n;`, ExecuteOptions{Host: discoveringHost{}})
	if err != nil {
		t.Fatal(err)
	}
	if st := awaitState(t, b, s.ID); st.Session.Status != StatusCompleted || string(st.Session.Result) != "8" {
		t.Fatalf("with discovery: %+v", st.Session)
	}
	s, _ = b.Start(context.Background(), `return await searchTools("x")`, ExecuteOptions{Host: outerHost{}})
	if st := awaitState(t, b, s.ID); st.Session.Status == StatusCompleted || !strings.Contains(string(mustJSON(t, st.Session)), "searchTools is not available") {
		t.Fatalf("without discovery: %+v", st.Session)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}
