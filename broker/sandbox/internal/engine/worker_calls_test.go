package engine

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"
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

// serveInProcess runs ServeWorker with the in-process engine over pipes,
// recording each write the worker makes; grace is parkGraceDelay and
// queued frames leave only with a write or a flush.
func serveInProcess(t *testing.T, grace time.Duration) (*frameWriter, *frameReader, *writeLog) {
	t.Helper()
	oldDelay, oldGrace, oldEngine := queueDelay, parkGraceDelay, newWorkerEngine
	queueDelay, parkGraceDelay = time.Hour, grace
	var engine *InProcess
	newWorkerEngine = func(c workerEngineConfig) (Engine, error) {
		e, err := oldEngine(c)
		engine, _ = e.(*InProcess)
		return e, err
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	l := &writeLog{}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = ServeWorker(inR, io.MultiWriter(l, outW))
		outW.Close()
	}()
	t.Cleanup(func() {
		inW.Close()
		outR.Close()
		<-served
		if engine != nil {
			waitMemWatchStopped(t, engine)
		}
		queueDelay, parkGraceDelay, newWorkerEngine = oldDelay, oldGrace, oldEngine
	})
	fw, fr := &frameWriter{w: inW, max: 1 << 20}, &frameReader{r: outR, max: 1 << 20}
	_ = fw.write(&wireMsg{T: msgInit, V: protocolVersion, Init: &wireInit{MaxMessageBytes: 1 << 20}})
	if m, err := fr.read(); err != nil || m.T != msgReady {
		t.Fatalf("ready: %v %v", m, err)
	}
	return fw, fr, l
}

// TestServeWorkerBatchesCalls: of the calls one stretch of JavaScript
// starts (a Promise.all), the first leaves the worker at once and the
// others together, in one write, when the stretch ends; the frames are the
// usual ones, one per call. The script then waits up to the park grace for
// a result before it sends wait: with results inside the grace it sends
// none (the parent answers as to a script that holds its slot), past it
// the wait follows in a write of its own.
func TestServeWorkerBatchesCalls(t *testing.T) {
	for _, c := range []struct {
		name  string
		grace time.Duration
	}{{"results within the grace", time.Hour}, {"grace over", time.Nanosecond}} {
		t.Run(c.name, func(t *testing.T) {
			fw, fr, l := serveInProcess(t, c.grace)
			tools := []ToolInfo{{Name: "a"}, {Name: "b"}, {Name: "c"}}
			_ = fw.write(&wireMsg{T: msgExec, ID: 1, Exec: &wireExec{
				Code:       `const r = await Promise.all([callTool("a", {n: 1}), callTool("b", {n: 2}), callTool("c", {n: 3})]); return r.map((x) => x.n).join(",")`,
				Allowed:    []string{"a", "b", "c"},
				HasAllowed: true,
				Tools:      tools,
			}})
			var calls []*wireMsg
			for len(calls) < 3 {
				m, err := fr.read()
				if err != nil {
					t.Fatal(err)
				}
				if err := validateFromWorker(m); err != nil || m.T != msgCall {
					t.Fatalf("got %+v (%v), want a call", m, err)
				}
				calls = append(calls, m)
			}
			want := 3 // ready, the first call, the other two
			if c.grace < time.Second {
				if m, err := fr.read(); err != nil || m.T != msgWait || m.Seen != 0 {
					t.Fatalf("got %+v %v, want wait", m, err)
				}
				want = 4 // and the wait
			}
			chunks := l.snapshot()
			if len(chunks) != want {
				t.Fatalf("%d writes, want %d", len(chunks), want)
			}
			if ms := chunkFrames(t, chunks[1]); len(ms) != 1 || ms[0].Name != "a" {
				t.Fatalf("the first write holds %+v, want the first call", ms)
			}
			if ms := chunkFrames(t, chunks[2]); len(ms) != 2 || ms[0].Name != "b" || ms[1].Name != "c" {
				t.Fatalf("the batch holds %+v, want the other 2 calls", ms)
			}
			for i, c := range calls {
				if c.Name != tools[i].Name || c.Call != uint64(i+1) {
					t.Fatalf("call %d: %+v", i, c)
				}
				_ = fw.write(&wireMsg{T: msgResult, ID: 1, Call: c.Call, Data: c.Input})
			}
			for {
				m, err := fr.read()
				if err != nil {
					t.Fatal(err)
				}
				if m.T == msgDone {
					if m.Done.Result == nil || string(m.Done.Result.Result) != `"1,2,3"` {
						t.Fatalf("done: %+v", m.Done)
					}
					return
				}
				if m.T != msgWait || c.grace > time.Second {
					t.Fatalf("got %+v", m)
				}
			}
		})
	}
}

// flushHost answers every call before startCall returns and records what
// the engine asks of it.
type flushHost struct {
	*testHost
	events []string
}

func (h *flushHost) startCall(_ context.Context, call ToolCall, done func(json.RawMessage, error)) {
	h.events = append(h.events, "start "+call.Name)
	done(call.Input, nil)
}

func (h *flushHost) flushCalls() { h.events = append(h.events, "flush") }

// TestEngineFlushesCallsWhenGoingOn: a host that queues the calls a stretch
// of JavaScript starts is told to send them when the stretch ends and the
// script goes on without waiting (its results are there already), before
// the script runs again.
func TestEngineFlushesCallsWhenGoingOn(t *testing.T) {
	e := NewInProcess(nil)
	defer waitMemWatchStopped(t, e.(*InProcess))
	defer e.Close()
	h := &flushHost{testHost: newTestHost(echoTools())}
	res, err := e.Execute(context.Background(), Request{Code: `const x = await callTool("echo", {n: 1}); const y = await callTool("echo", {n: 2}); return x.n + y.n`}, h)
	if err != nil || res.Status != StatusOK || string(res.Result) != "3" {
		t.Fatalf("%v %+v", err, res)
	}
	want := []string{"start echo", "flush", "start echo", "flush"}
	if strings.Join(h.events, "; ") != strings.Join(want, "; ") {
		t.Fatalf("events %q, want %q", h.events, want)
	}
}

// waitMemWatchStopped waits until e's heap watchdog goroutine is gone: the
// next tests run ServeWorker in this process, which sets time.Local.
func waitMemWatchStopped(t *testing.T, e *InProcess) {
	waitFor(t, "the heap watchdog to stop", func() bool {
		e.mem.mu.Lock()
		defer e.mem.mu.Unlock()
		return !e.mem.running
	})
}
