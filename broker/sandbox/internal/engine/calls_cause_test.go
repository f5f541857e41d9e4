package engine

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// causeHost answers echo, and hang only when its context ends, recording
// the cancellation's cause.
type causeHost struct{ causes chan error }

func (h *causeHost) LookupTool(name string) (ToolInfo, bool) {
	return ToolInfo{Name: name, InputSchema: json.RawMessage(`{"type":"object"}`)}, name == "echo" || name == "hang"
}

func (h *causeHost) CallTool(ctx context.Context, call ToolCall) (json.RawMessage, error) {
	if call.Name == "echo" {
		return call.Input, nil
	}
	<-ctx.Done()
	h.causes <- context.Cause(ctx)
	return nil, ctx.Err()
}

// TestCallsCancelledWithTheExecutionsCause: a tool call still running when
// the script is stopped (here over its memory limit) is cancelled with a
// cause that names why, a *ToolError with the result's code, in both
// engines alike: the broker reports it to the tool's caller. Before, the
// in-process engine cancelled with a bare context.Canceled.
func TestCallsCancelledWithTheExecutionsCause(t *testing.T) {
	engines := map[string]func(t *testing.T) Engine{
		"inprocess": func(*testing.T) Engine { return NewInProcess(&Options{}) },
		"worker": func(t *testing.T) Engine {
			return newRealPool(t, PoolOptions{RuntimePoolOptions: RuntimePoolOptions{MinSize: 1, MaxSize: 1}})
		},
	}
	code := `
		const pending = callTool("hang", {});
		pending.catch(() => {});
		await callTool("echo", {}); // the hang call is out
		let s = "x"; for (let i = 0; i < 40; i++) s += s;
		return s.length`
	for name, newEngine := range engines {
		t.Run(name, func(t *testing.T) {
			e := newEngine(t)
			h := &causeHost{causes: make(chan error, 1)}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a backstop
			defer cancel()
			res, err := e.Execute(ctx, Request{Code: code, Limits: Limits{Timeout: 30 * time.Second, MemoryBytes: 64 << 20}}, h)
			if err != nil || res.Error == nil {
				t.Fatalf("execute: %v %s", err, describeResult(res))
			}
			cause := <-h.causes
			var te *ToolError
			if !errors.As(cause, &te) || te.Code != res.Error.Code || !strings.Contains(te.Message, "the execution ended before the tool answered") {
				t.Fatalf("the call's cause: %v (%T), want a tool error with %s", cause, cause, res.Error.Code)
			}
		})
	}
}
