package metatools

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/codemode-gateway/caddy-codemode/broker"
	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"
)

// TestPlanCancelledDuringToolCall: a plan cancelled while one of its tool
// calls runs (the MCP client sent notifications/cancelled) ends at once;
// the call finishes afterwards on its own goroutine and emits
// tool:completed with the plan's session while meta:execute has already
// recorded the plan's end. Under -race this failed: the session was read
// by the late call while finish wrote it, unguarded.
func TestPlanCancelledDuringToolCall(t *testing.T) {
	started := make(chan struct{}, 1)
	src := &StaticSource{
		List: []Tool{{Name: "slow:wait", AppID: "slow", Description: "Return a little after the plan is cancelled",
			InputSchema: json.RawMessage(`{"type":"object"}`)}},
		Handlers: map[string]func(context.Context, json.RawMessage) (json.RawMessage, error){
			"slow:wait": func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
				started <- struct{}{}
				<-ctx.Done()
				time.Sleep(20 * time.Millisecond) // outlive the plan's end
				return json.RawMessage(`{}`), nil
			},
		},
	}
	ix, err := NewIndex([]ToolSource{src}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ix.Reload(context.Background())
	engine := sandbox.NewInProcess(nil)
	defer engine.Close()
	completed := make(chan *broker.Session, 4)
	s := NewService(ix, &Options{Engine: engine, Listener: func(ev broker.Event) {
		if ev.Name == broker.OnToolCompleted {
			completed <- ev.Session
		}
	}})
	for range 3 {
		ctx, cancel := context.WithCancel(context.Background())
		go func() { <-started; cancel() }()
		if _, err := s.execute(ctx, ExecuteInput{Script: `return await callTool("slow:wait", {})`}, &host{s: s, ci: &CallInfo{}}); err == nil {
			t.Fatal("a cancelled plan reported no error")
		}
		select {
		case sess := <-completed:
			if sess.ToolCalls != 1 {
				t.Errorf("tool:completed of the cancelled plan: %d tool calls, want 1", sess.ToolCalls)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("the late tool call never completed")
		}
		cancel()
	}
}
