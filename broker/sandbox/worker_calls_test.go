package sandbox

import (
	"context"
	"encoding/json"
	"testing"
)

// TestWorkerCallsByCallback: the worker's engine starts tool calls on the
// VM goroutine and the reader hands each reply straight to the script
// (callStarter). 100 calls at once (under the pool's 128 in flight) overflow the engine's completion queue
// (16), so some replies wait in a goroutine of their own; every reply must
// reach the script exactly once and keep its outcome: data, a tool error
// with its code, a plain error, an unknown tool.
func TestWorkerCallsByCallback(t *testing.T) {
	p := newRealPool(t, PoolOptions{
		RuntimePoolOptions: RuntimePoolOptions{MinSize: 1, MaxSize: 1},
		Engine:             &Options{Limits: Limits{MaxToolCalls: 1000}},
	})
	h := newTestHost(echoTools())
	code := `
		const r = await Promise.all(Array.from({length: 100}, (_, i) => callTool("echo", {i})));
		let sum = 0;
		for (const x of r) sum += x.i;
		const errs = [];
		for (const name of ["fail", "boom", "nope"]) {
			try { await callTool(name, {}); errs.push("no error"); } catch (e) { errs.push(e.code || e.message); }
		}
		return {sum, n: r.length, errs}`
	for range 3 {
		res, err := p.Execute(context.Background(), Request{Code: code}, h)
		if err != nil || res.Status != StatusOK {
			t.Fatalf("%v %s %+v", err, res.Status, res.Error)
		}
		var got struct {
			Sum, N int
			Errs   []string
		}
		if err := json.Unmarshal(res.Result, &got); err != nil {
			t.Fatal(err)
		}
		if got.Sum != 99*100/2 || got.N != 100 {
			t.Fatalf("sum %d of %d results, want %d of 100", got.Sum, got.N, 99*100/2)
		}
		if len(got.Errs) != 3 || got.Errs[0] != "RATE_LIMIT" || got.Errs[1] != CodeToolExecutionError || got.Errs[2] != CodeToolNotFound {
			t.Fatalf("errors %q", got.Errs)
		}
		if res.Stats.ToolCalls != 103 {
			t.Fatalf("tool calls %d, want 103", res.Stats.ToolCalls)
		}
	}
}
