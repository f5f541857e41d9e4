package engine

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/codemode-gateway/caddy-codemode/broker/sandbox/internal/observe"
)

// gateHost has tools that block until the test opens their gate, and a
// "mark" tool that records when it was called.
type gateHost struct {
	*testHost
	mu      sync.Mutex
	gates   map[string]chan struct{}
	started chan string
	marks   map[string]time.Time
}

func newGateHost() *gateHost {
	h := &gateHost{gates: map[string]chan struct{}{}, started: make(chan string, 100), marks: map[string]time.Time{}}
	h.testHost = newTestHost(map[string]func(json.RawMessage) (json.RawMessage, error){
		"wait": nil, "mark": nil, "echo": func(in json.RawMessage) (json.RawMessage, error) { return in, nil },
	})
	return h
}

func (h *gateHost) gate(name string) chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	g := h.gates[name]
	if g == nil {
		g = make(chan struct{})
		h.gates[name] = g
	}
	return g
}

func (h *gateHost) CallTool(ctx context.Context, call ToolCall) (json.RawMessage, error) {
	var in struct{ Gate string }
	_ = json.Unmarshal(call.Input, &in)
	switch call.Name {
	case "wait":
		h.started <- in.Gate
		select {
		case <-h.gate(in.Gate):
			return json.RawMessage(`"opened"`), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	case "mark":
		h.mu.Lock()
		h.marks[in.Gate] = time.Now()
		h.mu.Unlock()
		h.started <- "mark " + in.Gate
		return json.RawMessage(`1`), nil
	}
	return h.testHost.CallTool(ctx, call)
}

func (h *gateHost) mark(name string) time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.marks[name]
}

// exec runs a script in the background.
func execAsync(p Engine, principal, code string, h Host) chan *Result {
	ch := make(chan *Result, 1)
	go func() {
		r, err := p.Execute(context.Background(), Request{Code: code, Principal: principal}, h)
		if err != nil {
			r = &Result{Status: StatusRuntimeError, Error: &ScriptError{Code: "ENGINE", Message: err.Error()}}
		}
		ch <- r
	}()
	return ch
}

// TestWaitingScriptsHoldNoSlot: with one CPU slot, scripts waiting for
// tool results (a caller who answers later) do not stop others: the
// waiting ones give the slot back and hold only a seat in a worker.
func TestWaitingScriptsHoldNoSlot(t *testing.T) {
	p := newRealPool(t, PoolOptions{RuntimePoolOptions: RuntimePoolOptions{MinSize: 1, MaxSize: 1}, SessionsPerWorker: 8})
	h := newGateHost()
	var waiting []chan *Result
	for i := range 20 {
		waiting = append(waiting, execAsync(p, "waiter", `return await callTool("wait", {gate: "g"})`, h))
		_ = i
	}
	for range 20 {
		<-h.started
	}
	// 20 scripts wait on 3 workers (8 seats each); the slot is free.
	for i := range 5 {
		wantOK(t, mustRun(t, p, "return 40 + 2", h), "42")
		_ = i
	}
	live, _, busy, _, _ := p.(*workerPool).stats()
	if busy != 0 || live < 3 {
		t.Fatalf("live %d busy %d: want the 20 waiting scripts on at least 3 workers and no slot held", live, busy)
	}
	close(h.gate("g"))
	for _, ch := range waiting {
		wantOK(t, <-ch, `"opened"`)
	}
}

// TestResultWaitsForASlot: a result for a waiting script is held while
// another script holds the only slot; the waiting script runs again only
// when the slot is free. The busy script takes the slot while the other
// waits on its gate (no tool call of its own, which would give the slot
// back and race the waiter for it), and returns when its loop started.
func TestResultWaitsForASlot(t *testing.T) {
	p := newRealPool(t, PoolOptions{
		RuntimePoolOptions: RuntimePoolOptions{MinSize: 1, MaxSize: 1},
		Engine:             &Options{Limits: Limits{MaxSteps: 1 << 40, Timeout: 20 * time.Second}},
	})
	wp := p.(*workerPool)
	running := func() int { _, _, r, _, _ := wp.stats(); return r }
	h := newGateHost()
	waiter := execAsync(p, "a", `await callTool("wait", {gate: "w"}); await callTool("mark", {gate: "w"}); return 1`, h)
	if g := <-h.started; g != "w" {
		t.Fatalf("started %q", g)
	}
	waitFor(t, "the waiting script to give its slot back", func() bool { return running() == 0 })
	// The busy script holds the slot for 300 ms of running time.
	busy := execAsync(p, "b", `const t = Date.now(); while (Date.now() - t < 300) {} return t`, h)
	waitFor(t, "the busy script to hold the slot", func() bool { return running() == 1 })
	close(h.gate("w"))
	r := <-busy
	if r.Status != StatusOK {
		t.Fatalf("busy: %s", describeResult(r))
	}
	var startMs int64
	if err := json.Unmarshal(r.Result, &startMs); err != nil {
		t.Fatalf("busy result %s: %v", r.Result, err)
	}
	wantOK(t, <-waiter, "1")
	// Date.now() in the worker and time.Now() here read the same clock;
	// 1 ms of slack for the millisecond rounding.
	freed := time.UnixMilli(startMs).Add(299 * time.Millisecond)
	if got := h.mark("w"); got.Before(freed) {
		t.Fatalf("the waiting script ran again %v after the busy one started, before the busy one gave its slot back", got.Sub(time.UnixMilli(startMs)))
	}
}

// TestPrincipalsShareSlots: one principal holds at most
// MaxRunningPerPrincipal slots, so another finds one at once; waiting
// principals are served in turn.
func TestPrincipalsShareSlots(t *testing.T) {
	p, _ := newFakePool(t, PoolOptions{
		RuntimePoolOptions:    RuntimePoolOptions{MinSize: 2, MaxSize: 2},
		MaxQueuedPerPrincipal: 3,
	})
	h := newBlockingHost()
	// "calls block 1" holds its slot (the fake engine never waits).
	a1 := execAsync(p, "a", "calls block 1", h)
	<-h.started
	a2 := execAsync(p, "a", "calls block 1", h)
	waitFor(t, "a's second script queued", func() bool { _, _, _, _, q := p.stats(); return q == 1 })
	// b finds the slot a may not take.
	b1 := execAsync(p, "b", "calls block 1", h)
	<-h.started
	// a's queue is bounded.
	a3 := execAsync(p, "a", "ok 3", h)
	a4 := execAsync(p, "a", "ok 4", h)
	waitFor(t, "a's scripts queued", func() bool { _, _, _, _, q := p.stats(); return q == 3 })
	_, err := p.Execute(context.Background(), Request{Code: "ok 5", Principal: "a"}, h)
	wantCode(t, err, CodeQueueFull)
	// c waits behind a's queue but is served in its turn, before a's
	// third and fourth.
	c1 := execAsync(p, "c", "ok 6", h)
	waitFor(t, "c queued", func() bool { _, _, _, _, q := p.stats(); return q == 4 })
	close(h.release)
	for _, ch := range []chan *Result{a1, b1, a2, c1, a3, a4} {
		if r := <-ch; r.Status != StatusOK {
			t.Fatalf("got %s", describeResult(r))
		}
	}
}

// TestRoundRobinOrder: when a slot frees, the principals waiting are
// served one after the other, not in arrival order. Each script calls the
// tool named after its principal while it holds the only slot, so the
// order of the calls is the order of service.
func TestRoundRobinOrder(t *testing.T) {
	p, _ := newFakePool(t, PoolOptions{
		RuntimePoolOptions:     RuntimePoolOptions{MinSize: 1, MaxSize: 1},
		MaxRunningPerPrincipal: 1,
	})
	var mu sync.Mutex
	var order []string
	record := func(name string) func(json.RawMessage) (json.RawMessage, error) {
		return func(json.RawMessage) (json.RawMessage, error) {
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
			return json.RawMessage(`1`), nil
		}
	}
	h := newBlockingHost()
	h.tools["a"] = record("a")
	h.tools["b"] = record("b")
	h.infos["a"], h.infos["b"] = ToolInfo{Name: "a"}, ToolInfo{Name: "b"}
	hold := execAsync(p, "z", "calls block 1", h)
	<-h.started
	var results []chan *Result
	for i, pr := range []string{"a", "a", "a", "b"} {
		results = append(results, execAsync(p, pr, "calls "+pr+" 1", h))
		waitFor(t, "queued", func() bool { _, _, _, _, q := p.stats(); return q == i+1 })
	}
	close(h.release)
	<-hold
	for _, ch := range results {
		if r := <-ch; r.Status != StatusOK {
			t.Fatalf("got %s", describeResult(r))
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(order) != 4 || order[0] != "a" || order[1] != "b" {
		t.Fatalf("served %v, want a then b then the rest of a", order)
	}
}

// hostingWorker returns the pid of the worker of p hosting n scripts.
func hostingWorker(t *testing.T, p Engine, n int) int {
	t.Helper()
	pool := p.(*workerPool)
	pool.mu.Lock()
	defer pool.mu.Unlock()
	for w := range pool.all {
		if w.hosted == n {
			return w.pid
		}
	}
	t.Fatalf("no worker hosts %d scripts", n)
	return 0
}

// TestWorkerLostByWaitingScripts: a worker killed while it hosts waiting
// scripts ends them with WORKER_LOST (the blast radius), and the pool
// serves on. With one worker at most, two principals share it (placement
// mixes principals only at MaxWorkers). The death is counted
// (worker_deaths_total{cause="crash"}) and logged once, not once per
// script: before, a worker killed while no script of it was running was
// neither counted nor logged (found by kill -9 of a gateway's worker).
func TestWorkerLostByWaitingScripts(t *testing.T) {
	m := NewMetrics()
	core, logs := observer.New(zap.WarnLevel)
	p := newRealPool(t, PoolOptions{RuntimePoolOptions: RuntimePoolOptions{MinSize: 1, MaxSize: 1}, MaxWorkers: 1, Metrics: m, Logger: observe.Zap{L: zap.New(core)}})
	h := newGateHost()
	w1 := execAsync(p, "a", `return await callTool("wait", {gate: "x"})`, h)
	w2 := execAsync(p, "b", `return await callTool("wait", {gate: "x"})`, h)
	<-h.started
	<-h.started
	pool := p.(*workerPool)
	waitFor(t, "both scripts waiting", func() bool { _, _, busy, _, _ := pool.stats(); return busy == 0 })
	pid := hostingWorker(t, p, 2)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for _, ch := range []chan *Result{w1, w2} {
		r := <-ch
		if r.Status != StatusRuntimeError || r.Error.Code != CodeWorkerLost {
			t.Fatalf("got %s, want WORKER_LOST", describeResult(r))
		}
		// Killed from outside: no script of the worker is to blame.
		if !strings.Contains(r.Error.Message, "died (signal: killed)") || strings.Contains(r.Error.Message, "another script") {
			t.Errorf("message %q: want the death named, no script blamed", r.Error.Message)
		}
	}
	wantOK(t, mustRun(t, p, "return 1", h), "1")
	if v := testutil.ToFloat64(m.deaths.WithLabelValues(DeathCrash)); v != 1 {
		t.Errorf("worker_deaths_total{cause=crash} = %v, want 1", v)
	}
	if n := logs.FilterMessage("sandbox worker died while its scripts waited for tool results").FilterField(zap.Int("pid", pid)).Len(); n != 1 {
		t.Errorf("%d warnings naming the killed worker, want 1: %v", n, logs.All())
	}
}

// TestWorkerOutlivesStopSignals: the signals that ask a gateway to stop
// also reach its workers (Ctrl-C signals the terminal's process group,
// systemd's stop the whole cgroup). A worker must not die of them, or the
// scripts the gateway is draining end with WORKER_LOST instead of
// finishing.
func TestWorkerOutlivesStopSignals(t *testing.T) {
	p := newRealPool(t, PoolOptions{RuntimePoolOptions: RuntimePoolOptions{MinSize: 1, MaxSize: 1}, MaxWorkers: 1})
	h := newGateHost()
	waiting := execAsync(p, "a", `return await callTool("wait", {gate: "x"})`, h)
	<-h.started
	pid := hostingWorker(t, p, 1)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP} {
		if err := syscall.Kill(pid, sig); err != nil {
			t.Fatal(err)
		}
	}
	// Signals land within microseconds; the pause only gives a worker that
	// would die of one the time to do so (were it ever too short, the test
	// would pass without proving anything, never fail wrongly).
	time.Sleep(200 * time.Millisecond)
	close(h.gate("x"))
	wantOK(t, <-waiting, `"opened"`)
	wantOK(t, mustRun(t, p, "return 1", h), "1")
}

// lookupGate blocks the first lookup of "probe" until release is closed.
type lookupGate struct {
	*gateHost
	looked  chan int32
	release chan struct{}
	n       atomic.Int32
}

func (h *lookupGate) LookupTool(name string) (ToolInfo, bool) {
	if name != "probe" {
		return h.gateHost.LookupTool(name)
	}
	n := h.n.Add(1)
	h.looked <- n
	if n == 1 {
		<-h.release
	}
	return ToolInfo{}, false
}

// TestScriptRunsAgainAfterOutsideKill: a worker SIGKILLed from outside
// (an operator, the kernel's OOM killer) before its script made a tool
// call or logged: nothing of the script reached the outside, so it runs
// again on a new worker instead of failing with WORKER_CRASHED. Typically
// a script sent to an idle worker in the instant after such a kill, before
// the pool saw the death.
func TestScriptRunsAgainAfterOutsideKill(t *testing.T) {
	p := newRealPool(t, PoolOptions{RuntimePoolOptions: RuntimePoolOptions{MinSize: 1, MaxSize: 1}, MaxWorkers: 1})
	h := &lookupGate{gateHost: newGateHost(), looked: make(chan int32, 4), release: make(chan struct{})}
	res := execAsync(p, "a", `return getTool("probe") === null ? "ran" : "found"`, h)
	<-h.looked
	pid := hostingWorker(t, p, 1)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	close(h.release)
	wantOK(t, <-res, `"ran"`)
	if n := h.n.Load(); n != 2 {
		t.Errorf("the script looked the tool up %d times, want 2 (one run per worker)", n)
	}
	// A script that made a tool call is not run again.
	waiter := execAsync(p, "a", `return await callTool("wait", {gate: "y"})`, h)
	<-h.started
	pid = hostingWorker(t, p, 1)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if r := <-waiter; r.Error == nil || (r.Error.Code != CodeWorkerLost && r.Error.Code != CodeWorkerCrashed) {
		t.Fatalf("a script with a tool call in flight: %s, want WORKER_LOST or WORKER_CRASHED", describeResult(r))
	}
}

// TestBombSparesCoHostedScripts: a script that grows the heap of a worker
// it shares with a waiting script (of its own principal: placement keeps
// principals apart) is the one stopped (it holds the most); the waiting
// one finishes.
//
// The time limits are backstops, out of reach: under -race the bomb fills
// 512 MiB, which at load 40 took 90 to 111 s of the two minutes the limits
// were (the bomb, and the waiter whose wall-clock time spans it, would then
// have ended in TIMEOUT).
func TestBombSparesCoHostedScripts(t *testing.T) {
	var memory int64 = 64 << 20
	if raceEnabled {
		memory = 512 << 20
	}
	p := newRealPool(t, PoolOptions{
		RuntimePoolOptions: RuntimePoolOptions{MinSize: 1, MaxSize: 1},
		MemoryBytes:        memory,
		Engine:             &Options{Limits: Limits{MaxSteps: 1 << 40, Timeout: 10 * time.Minute}}, // backstops, not speed bounds
	})
	h := newGateHost()
	waiter := execAsync(p, "a", `const keep = "y".repeat(1000); return (await callTool("wait", {gate: "x"})) + keep.length`, h)
	<-h.started
	r := mustRunAs(t, p, "a", `const a = []; for (;;) a.push("x".repeat(1e6) + a.length)`, h)
	if r.Status != StatusRuntimeError || r.Error.Code != CodeWorkerMemoryExceeded {
		t.Fatalf("bomb: %s", describeResult(r))
	}
	close(h.gate("x"))
	if r := <-waiter; r.Status != StatusOK {
		// Under -race the race runtime's shadow memory (which the heap
		// watchdog cannot see) counts against the cap, and the bomb may
		// outrun the watchdog; then the waiting script must say so.
		if !raceEnabled || r.Error == nil || r.Error.Code != CodeWorkerLost {
			t.Fatalf("waiter: %s", describeResult(r))
		}
		t.Logf("the bomb outran the watchdog: %s", describeResult(r))
	}
}

// TestCancelStopsOneHostedScript: a caller who leaves stops its script
// only; the others its worker hosts (its principal's) go on.
func TestCancelStopsOneHostedScript(t *testing.T) {
	p := newRealPool(t, PoolOptions{RuntimePoolOptions: RuntimePoolOptions{MinSize: 1, MaxSize: 1}})
	h := newGateHost()
	other := execAsync(p, "a", `return await callTool("wait", {gate: "o"})`, h)
	<-h.started
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := p.Execute(ctx, Request{Code: `return await callTool("wait", {gate: "c"})`, Principal: "a"}, h)
		done <- err
	}()
	<-h.started
	cancel()
	var e *Error
	if err := <-done; !errors.As(err, &e) || e.Code != CodeExecutionAborted {
		t.Fatalf("canceled: %v", err)
	}
	close(h.gate("o"))
	wantOK(t, <-other, `"opened"`)
}
