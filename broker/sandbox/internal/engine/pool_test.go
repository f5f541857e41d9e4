package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// fakeTimers replaces the pool's timers: a timer fires only when the test
// fires its duration.
type fakeTimers struct {
	mu     sync.Mutex
	timers map[time.Duration][]chan time.Time
}

func newFakeTimers() *fakeTimers {
	return &fakeTimers{timers: map[time.Duration][]chan time.Time{}}
}

func (f *fakeTimers) newTimer(d time.Duration) (<-chan time.Time, func() bool) {
	ch := make(chan time.Time, 1)
	f.mu.Lock()
	f.timers[d] = append(f.timers[d], ch)
	f.mu.Unlock()
	return ch, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		for i, x := range f.timers[d] {
			if x == ch {
				f.timers[d] = append(f.timers[d][:i], f.timers[d][i+1:]...)
				return true
			}
		}
		return false
	}
}

// fire fires every pending timer of duration d and reports how many.
func (f *fakeTimers) fire(d time.Duration) int {
	f.mu.Lock()
	chs := f.timers[d]
	delete(f.timers, d)
	f.mu.Unlock()
	for _, ch := range chs {
		ch <- time.Now()
	}
	return len(chs)
}

func (f *fakeTimers) pending(d time.Duration) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers[d])
}

// waitFor polls cond until it holds; it waits for an event, not for time.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// Distinct durations so that fakeTimers can tell the timers apart.
const (
	testQueueTimeout   = 777 * time.Second
	testStartupTimeout = 555 * time.Second
	testScriptTimeout  = 3500 * time.Millisecond // the secure preset
	testGrace          = 333 * time.Second
)

// newFakePool starts a pool of scripted workers (fakeEngine) with fake
// timers. Close is registered with t.Cleanup.
func newFakePool(t testing.TB, opts PoolOptions) (*workerPool, *fakeTimers) {
	t.Helper()
	ft := newFakeTimers()
	opts.Env = append(opts.Env, testWorkerEnv+"=fake")
	if opts.QueueTimeout == 0 {
		opts.QueueTimeout = testQueueTimeout
	}
	if opts.StartupTimeout == 0 {
		opts.StartupTimeout = testStartupTimeout
	}
	if opts.WatchdogGrace == 0 {
		opts.WatchdogGrace = testGrace
	}
	p, err := newWorkerPool(&opts, func(p *workerPool) { p.newTimer = ft.newTimer })
	if err != nil {
		t.Fatalf("NewWorkerPool: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p, ft
}

// blockingHost has an "echo" tool and a "block" tool that reports each call
// on started and returns when its context ends or release is closed.
type blockingHost struct {
	*testHost
	started chan struct{}
	release chan struct{}
}

func newBlockingHost() *blockingHost {
	h := &blockingHost{started: make(chan struct{}, 1000), release: make(chan struct{})}
	h.testHost = newTestHost(map[string]func(json.RawMessage) (json.RawMessage, error){
		"echo":  func(in json.RawMessage) (json.RawMessage, error) { return in, nil },
		"block": func(json.RawMessage) (json.RawMessage, error) { return nil, errors.New("unreachable") },
		"fail": func(json.RawMessage) (json.RawMessage, error) {
			return nil, &ToolError{Code: "RATE_LIMIT", Message: "slow down"}
		},
	})
	return h
}

func (h *blockingHost) CallTool(ctx context.Context, call ToolCall) (json.RawMessage, error) {
	if call.Name != "block" {
		return h.testHost.CallTool(ctx, call)
	}
	h.started <- struct{}{}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-h.release:
		return json.RawMessage(`"released"`), nil
	}
}

func mustRun(t testing.TB, e Engine, code string, host Host) *Result {
	t.Helper()
	res, err := e.Execute(context.Background(), Request{Code: code}, host)
	if err != nil {
		t.Fatalf("%q: Execute error %v", code, err)
	}
	return res
}

func wantOK(t testing.TB, res *Result, want string) {
	t.Helper()
	if res.Status != StatusOK || string(res.Result) != want {
		t.Fatalf("got %s %s %+v, want ok %s", res.Status, res.Result, res.Error, want)
	}
}

func wantCode(t testing.TB, err error, code string) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) || e.Code != code {
		t.Fatalf("error %v, want code %s", err, code)
	}
}

func TestPoolServesScripts(t *testing.T) {
	p, _ := newFakePool(t, PoolOptions{})
	h := newBlockingHost()
	wantOK(t, mustRun(t, p, `ok {"a":1}`, h), `{"a":1}`)
	wantOK(t, mustRun(t, p, "calls echo 5", h), "5")
	wantOK(t, mustRun(t, p, "par echo 30", h), "30")
	if n := h.callCount(); n != 35 {
		t.Fatalf("host saw %d calls, want 35", n)
	}

	res := mustRun(t, p, "calls fail 1", h)
	if res.Status != StatusToolError || res.Error.Code != "RATE_LIMIT" || res.Error.Message != "slow down" {
		t.Fatalf("tool error: %+v", res.Error)
	}

	var info ToolInfo
	res = mustRun(t, p, "lookup echo", h)
	if err := json.Unmarshal(res.Result, &info); err != nil || info.Name != "echo" || info.Description != "test tool echo" {
		t.Fatalf("lookup: %s (%v)", res.Result, err)
	}
	wantOK(t, mustRun(t, p, "lookup nope", h), "null")

	// Allowed tools are looked up ahead; unknown ones are known missing.
	res, err := p.Execute(context.Background(), Request{Code: "lookup echo", AllowedTools: []string{"echo", "ghost"}}, h)
	if err != nil || !strings.Contains(string(res.Result), "test tool echo") {
		t.Fatalf("prefetched lookup: %v %s", err, res.Result)
	}

	// Console entries stream to a LogHost and come back in Logs.
	res = mustRun(t, p, "log 3", h)
	if len(res.Logs) != 3 || len(h.logs) != 3 || h.logs[0] != "log: entry 0" {
		t.Fatalf("logs %q, streamed %q", res.Logs, h.logs)
	}
}

// TestPoolWorkerFailures kills workers in every way a script can and
// checks the result and that the pool serves the next script.
func TestPoolWorkerFailures(t *testing.T) {
	p, ft := newFakePool(t, PoolOptions{
		RuntimePoolOptions: RuntimePoolOptions{MinSize: 1, MaxSize: 2},
		MemoryBytes:        64 << 20,
		FloodMessages:      500,
		FloodInterval:      time.Hour,
		MaxPendingCalls:    8,
	})
	h := newBlockingHost()
	cases := []struct {
		code   string
		status Status
		err    string
		fire   bool // fire the watchdog once the script runs
	}{
		{"crash", StatusRuntimeError, CodeWorkerCrashed, false},
		{"alloc", StatusRuntimeError, CodeWorkerMemoryExceeded, false},
		{"sleep", StatusTimeout, CodeWorkerTimeout, true},
		{"flood 100000", StatusRuntimeError, CodeMessageFlood, false},
		{"invalid", StatusRuntimeError, CodeMessageInvalid, false},
		{"huge", StatusRuntimeError, CodeMessageTooLarge, false},
		{"badtype", StatusRuntimeError, CodeMessageInvalid, false},
		{"wrongid", StatusRuntimeError, CodeMessageInvalid, false},
		// Frames that arrive in one write are checked one by one.
		{"batchbad", StatusRuntimeError, CodeMessageInvalid, false},
		{"baddone", StatusRuntimeError, CodeMessageInvalid, false},
		{"par block 50", StatusRuntimeError, CodeTooManyPendingCalls, false},
	}
	for _, c := range cases {
		t.Run(c.code, func(t *testing.T) {
			if c.fire {
				go func() {
					waitFor(t, "the watchdog", func() bool { return ft.pending(testScriptTimeout+testGrace) > 0 })
					ft.fire(testScriptTimeout + testGrace)
				}()
			}
			res := mustRun(t, p, c.code, h)
			if res.Status != c.status || res.Error == nil || res.Error.Code != c.err {
				t.Fatalf("got %s %+v, want %s %s", res.Status, res.Error, c.status, c.err)
			}
			if c.status == StatusTimeout && !strings.Contains(res.Error.Message, "3500 ms") {
				t.Fatalf("timeout message %q does not state the limit", res.Error.Message)
			}
			if c.status == StatusRuntimeError && (res.Error.Source != "script" || res.Error.Name == "") {
				t.Fatalf("runtime error without source or name: %+v", res.Error)
			}
			wantOK(t, mustRun(t, p, "ok 1", h), "1")
		})
	}
	// A worker that talks after done is killed: the talk lands while it is
	// idle or during the next script, which then fails with MESSAGE_INVALID
	// or, if the broken worker refuses the script, WORKER_CRASHED (a worker
	// that breaks the protocol is not trusted with any result).
	wantOK(t, mustRun(t, p, "chatter", h), `"early"`)
	if res := mustRun(t, p, "ok 2", h); res.Status != StatusOK && res.Error.Code != CodeMessageInvalid && res.Error.Code != CodeWorkerCrashed {
		t.Fatalf("after chatter: %s %+v", res.Status, res.Error)
	}
	wantOK(t, mustRun(t, p, "ok 3", h), "3")
}

func TestPoolStartupFailures(t *testing.T) {
	cases := []struct {
		name string
		opts PoolOptions
		fire bool
		want string
	}{
		{"missing command", PoolOptions{Command: []string{"/nonexistent/codemode-worker"}}, false, "starting worker command"},
		{"exits", PoolOptions{Env: []string{testWorkerEnv + "=exit"}}, false, "refusing to start"},
		{"garbage", PoolOptions{Env: []string{testWorkerEnv + "=garbage"}}, false, "exited before its handshake"},
		{"silent", PoolOptions{Env: []string{testWorkerEnv + "=silent"}}, true, "did not complete its handshake"},
		{"another build", PoolOptions{Env: []string{testWorkerEnv + "=otherbuild"}}, false, `the worker program is another build ("v0.1.0 goja v0 prelude 000000000000") than the gateway`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ft := newFakeTimers()
			c.opts.StartupTimeout = testStartupTimeout
			if c.fire {
				// A worker that misses its deadline gets a second start.
				go func() {
					for range 2 {
						waitFor(t, "the startup timer", func() bool { return ft.pending(testStartupTimeout) > 0 })
						ft.fire(testStartupTimeout)
					}
				}()
			}
			p, err := newWorkerPool(&c.opts, func(p *workerPool) { p.newTimer = ft.newTimer })
			if err == nil {
				p.Close()
				t.Fatal("pool started")
			}
			wantCode(t, err, CodeWorkerStartupFailed)
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not mention %q", err, c.want)
			}
		})
	}

	// With MinSize 0 the failure shows at the first execution.
	p, err := NewWorkerPool(&PoolOptions{RuntimePoolOptions: RuntimePoolOptions{MinSize: -1}, Command: []string{"/nonexistent/codemode-worker"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	_, err = p.Execute(context.Background(), Request{Code: "ok 1"}, newBlockingHost())
	wantCode(t, err, CodeWorkerStartupFailed)
}

// TestPoolFirstStartOutlivesAStall: one of the pool's first workers that
// misses its handshake deadline (a machine stalled for seconds) is started
// again, so the pool, and the config that builds it, comes up; the missed
// start is still a start failure.
func TestPoolFirstStartOutlivesAStall(t *testing.T) {
	ft := newFakeTimers()
	m := NewMetrics()
	var stalled atomic.Bool
	p, err := newWorkerPool(&PoolOptions{RuntimePoolOptions: RuntimePoolOptions{MinSize: 1}, StartupTimeout: testStartupTimeout, Metrics: m}, func(p *workerPool) {
		p.newTimer = func(d time.Duration) (<-chan time.Time, func() bool) {
			if stalled.CompareAndSwap(false, true) {
				// The first start's deadline passes at once.
				ch := make(chan time.Time, 1)
				ch <- time.Now()
				return ch, func() bool { return false }
			}
			return ft.newTimer(d)
		}
	})
	if err != nil {
		t.Fatalf("the pool did not outlive one missed handshake: %v", err)
	}
	defer p.Close()
	wantOK(t, mustRun(t, p, "return 1", newTestHost(nil)), "1")
	if v := testutil.ToFloat64(m.startFailures); v != 1 {
		t.Errorf("%v start failures, want 1 (the missed handshake)", v)
	}
}

func TestPoolCancel(t *testing.T) {
	p, _ := newFakePool(t, PoolOptions{})
	h := newBlockingHost()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-h.started
		cancel()
	}()
	_, err := p.Execute(ctx, Request{Code: "calls block 1"}, h)
	wantCode(t, err, CodeExecutionAborted)
	_, err = p.Execute(ctx, Request{Code: "ok 1"}, h)
	wantCode(t, err, CodeExecutionAborted)
	wantOK(t, mustRun(t, p, "ok 1", h), "1")
}

func TestPoolQueue(t *testing.T) {
	p, ft := newFakePool(t, PoolOptions{
		RuntimePoolOptions: RuntimePoolOptions{MinSize: 1, MaxSize: 1},
		QueueSize:          1,
	})
	h := newBlockingHost()
	first := make(chan *Result)
	go func() {
		res, _ := p.Execute(context.Background(), Request{Code: "calls block 1"}, h)
		first <- res
	}()
	<-h.started

	// One waits in the queue; the next finds it full.
	queued := make(chan error)
	go func() {
		_, err := p.Execute(context.Background(), Request{Code: "ok 1"}, h)
		queued <- err
	}()
	waitFor(t, "a queued execution", func() bool { _, _, _, _, q := p.stats(); return q == 1 })
	_, err := p.Execute(context.Background(), Request{Code: "ok 1"}, h)
	wantCode(t, err, CodeQueueFull)

	// The queued one times out.
	waitFor(t, "the queue timer", func() bool { return ft.pending(testQueueTimeout) > 0 })
	ft.fire(testQueueTimeout)
	wantCode(t, <-queued, CodeQueueTimeout)

	// A queued execution gets the worker when it frees up.
	second := make(chan *Result)
	go func() {
		res, _ := p.Execute(context.Background(), Request{Code: "ok 2"}, h)
		second <- res
	}()
	waitFor(t, "a queued execution", func() bool { _, _, _, _, q := p.stats(); return q == 1 })
	close(h.release)
	wantOK(t, <-first, "1")
	wantOK(t, <-second, "2")
}

func TestPoolClose(t *testing.T) {
	base := runtime.NumGoroutine()
	p, _ := newFakePool(t, PoolOptions{RuntimePoolOptions: RuntimePoolOptions{MinSize: 2, MaxSize: 3}})
	h := newBlockingHost()
	var pids []int
	for range 2 {
		var pid int
		_ = json.Unmarshal(mustRun(t, p, "pid", h).Result, &pid)
		pids = append(pids, pid)
	}
	inflight := make(chan error)
	go func() {
		_, err := p.Execute(context.Background(), Request{Code: "calls block 1"}, h)
		inflight <- err
	}()
	<-h.started
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	wantCode(t, <-inflight, CodePoolDisposed)
	_, err := p.Execute(context.Background(), Request{Code: "ok 1"}, h)
	wantCode(t, err, CodePoolDisposed)

	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("worker %d still exists after Close (%v)", pid, err)
		}
	}
	if kids := childProcesses(t); len(kids) > 0 {
		t.Errorf("child processes left after Close: %v", kids)
	}
	waitFor(t, "goroutines to end", func() bool { return runtime.NumGoroutine() <= base })
}

// childProcesses lists the processes whose parent is this process.
func childProcesses(t testing.TB) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Skip("no /proc")
	}
	var kids []int
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		s := string(b)
		rest := s[strings.LastIndexByte(s, ')')+1:]
		var state string
		var ppid int
		if _, err := fmt.Sscanf(rest, " %s %d", &state, &ppid); err == nil && ppid == os.Getpid() {
			kids = append(kids, pid)
		}
	}
	return kids
}

func TestPoolScaling(t *testing.T) {
	p, _ := newFakePool(t, PoolOptions{RuntimePoolOptions: RuntimePoolOptions{
		MinSize: 1, MaxSize: 3, ScaleUpThreshold: 1, ScaleDownThreshold: 0.2,
	}, MaxRunningPerPrincipal: 3})
	if live, _, _, _, _ := p.stats(); live != 1 {
		t.Fatalf("%d workers at start, want MinSize 1", live)
	}
	h := newBlockingHost()
	results := make(chan *Result, 4)
	for range 4 {
		go func() {
			res, _ := p.Execute(context.Background(), Request{Code: "calls block 1"}, h)
			results <- res
		}()
	}
	for range 3 {
		<-h.started
	}
	// Three run, one waits for a slot, and a spare is up beyond MaxSize for
	// when one of the three dies.
	waitFor(t, "three busy workers and a spare", func() bool {
		live, idle, busy, starting, queued := p.stats()
		return live == 4 && idle == 1 && busy == 3 && starting == 0 && queued == 1
	})
	close(h.release)
	for range 4 {
		wantOK(t, <-results, "1")
	}
	// Idle: each tick stops one worker above MinSize.
	p.scaleTick()
	p.scaleTick()
	p.scaleTick()
	if live, idle, _, _, _ := p.stats(); live != 1 || idle != 1 {
		t.Fatalf("after scaling down: live %d idle %d, want 1 1", live, idle)
	}
	wantOK(t, mustRun(t, p, "ok 1", h), "1")
}

// TestSpareTakesOverAfterRecycleAndCrash: a recycle, a worker death and a
// memory kill hand the next script to a worker that was already up (the
// spare), never to one started for it; the spare is replaced in the
// background.
func TestSpareTakesOverAfterRecycleAndCrash(t *testing.T) {
	p, _ := newFakePool(t, PoolOptions{
		RuntimePoolOptions:     RuntimePoolOptions{MinSize: 1, MaxSize: 1},
		MaxExecutionsPerWorker: 3,
		MemoryBytes:            64 << 20,
	})
	h := newBlockingHost()
	pid := func(code string) int {
		t.Helper()
		var pid int
		_ = json.Unmarshal(mustRun(t, p, code, h).Result, &pid)
		return pid
	}
	// live pids once the pool has settled: the worker in use and a spare.
	settled := func() map[int]bool {
		t.Helper()
		waitFor(t, "a ready spare", func() bool {
			live, idle, busy, starting, _ := p.stats()
			return live == 2 && idle == 2 && busy == 0 && starting == 0
		})
		pids, _, _, _, _ := p.gauges()
		set := make(map[int]bool)
		for _, id := range pids {
			set[id] = true
		}
		return set
	}
	a := pid("pid")
	before := settled()
	// The first worker keeps the scripts (the spare stays spare) until its
	// recycle; the script after it runs on the spare.
	if b, c := pid("pid"), pid("pid"); b != a || c != a {
		t.Fatalf("pids %d %d %d: want one worker until its recycle", a, b, c)
	}
	d := pid("pid")
	if d == a || !before[d] {
		t.Fatalf("after the recycle of %d the script ran on %d, want the spare from %v", a, d, before)
	}
	// A worker that dies under a script: the next one runs on the spare
	// started when d took a script.
	before = settled()
	res, err := p.Execute(context.Background(), Request{Code: "crash"}, h)
	if err != nil || res.Error == nil || res.Error.Code != CodeWorkerCrashed {
		t.Fatalf("crash: %+v %v, want WORKER_CRASHED", res, err)
	}
	e := pid("pid")
	if e == d || !before[e] {
		t.Fatalf("after %d crashed the script ran on %d, want the spare from %v", d, e, before)
	}
	// A worker killed at its memory cap: the same.
	before = settled()
	res, err = p.Execute(context.Background(), Request{Code: "alloc"}, h)
	if err != nil || res.Error == nil || res.Error.Code != CodeWorkerMemoryExceeded {
		t.Fatalf("alloc: %+v %v, want WORKER_MEMORY_EXCEEDED", res, err)
	}
	f := pid("pid")
	if f == e || !before[f] {
		t.Fatalf("after %d went over its memory cap the script ran on %d, want the spare from %v", e, f, before)
	}
	settled()
}

// TestNoSpareWhenDisabled: SpareWorkers < 0 keeps only the workers in use.
func TestNoSpareWhenDisabled(t *testing.T) {
	p, _ := newFakePool(t, PoolOptions{RuntimePoolOptions: RuntimePoolOptions{MinSize: 1, MaxSize: 1}, SpareWorkers: -1})
	h := newBlockingHost()
	for range 3 {
		wantOK(t, mustRun(t, p, "ok 1", h), "1")
	}
	if live, _, _, starting, _ := p.stats(); live != 1 || starting != 0 {
		t.Fatalf("live %d starting %d, want one worker and no spare", live, starting)
	}
}

func TestPoolReplacesAndRecycles(t *testing.T) {
	p, _ := newFakePool(t, PoolOptions{
		RuntimePoolOptions:     RuntimePoolOptions{MinSize: 1, MaxSize: 1},
		MaxExecutionsPerWorker: 2,
	})
	h := newBlockingHost()
	pid := func() int {
		var pid int
		_ = json.Unmarshal(mustRun(t, p, "pid", h).Result, &pid)
		return pid
	}
	a, b, c := pid(), pid(), pid()
	if a != b || b == c {
		t.Fatalf("pids %d %d %d: want the worker recycled after 2 executions", a, b, c)
	}
	// A worker killed while idle is replaced.
	if err := syscall.Kill(c, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a replacement", func() bool {
		live, idle, _, _, _ := p.stats()
		return live == 1 && idle == 1 && pid() != c
	})
}

func TestPoolOptionsValidation(t *testing.T) {
	bad := []PoolOptions{
		{RuntimePoolOptions: RuntimePoolOptions{MinSize: 3, MaxSize: 2}},
		{RuntimePoolOptions: RuntimePoolOptions{ScaleUpThreshold: 1.5}},
		{RuntimePoolOptions: RuntimePoolOptions{ScaleUpThreshold: 0.5, ScaleDownThreshold: 0.6}},
		{RuntimePoolOptions: RuntimePoolOptions{ScaleInterval: time.Millisecond}},
		{MaxMessageBytes: 1000},
		{MemoryBytes: 1 << 20},
		{Env: []string{"NOEQUALS"}},
		{Engine: &Options{Preset: "reckless"}},
	}
	for i, o := range bad {
		o.Command = []string{"/nonexistent"}
		p, err := NewWorkerPool(&o)
		var e *Error
		if err == nil || errors.As(err, &e) {
			if p != nil {
				p.Close()
			}
			t.Errorf("case %d: options accepted (%v): %+v", i, err, o)
		}
	}
	o, err := (*PoolOptions)(nil).withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if o.MinSize != 1 || o.MaxSize != 4 || o.ScaleUpThreshold != 0.75 || o.ScaleDownThreshold != 0.25 ||
		o.ScaleInterval != 5*time.Second || o.QueueSize != 1000 || o.MaxMessageBytes != 8<<20 ||
		len(o.Command) != 2 || o.Command[1] != WorkerCommandName {
		t.Fatalf("defaults: %+v", o)
	}
}

func TestWorkerEnvironmentIsMinimal(t *testing.T) {
	t.Setenv("CODEMODE_TEST_SECRET", "hunter2")
	env := strings.Join(workerEnv([]string{"EXTRA=1"}), "\n")
	if strings.Contains(env, "hunter2") || !strings.Contains(env, workerEnvVar+"=1") || !strings.Contains(env, "EXTRA=1") {
		t.Fatalf("worker environment:\n%s", env)
	}
}

func TestPoolShutdownDrains(t *testing.T) {
	p, _ := newFakePool(t, PoolOptions{})
	h := newBlockingHost()
	inflight := make(chan *Result)
	go func() {
		res, _ := p.Execute(context.Background(), Request{Code: "calls block 1"}, h)
		inflight <- res
	}()
	<-h.started
	shut := make(chan error)
	go func() { shut <- p.Shutdown(context.Background()) }()
	waitFor(t, "draining", func() bool {
		_, err := p.Execute(context.Background(), Request{Code: "ok 1"}, h)
		var e *Error
		return errors.As(err, &e) && e.Code == CodePoolDisposed
	})
	close(h.release)
	wantOK(t, <-inflight, "1")
	if err := <-shut; err != nil {
		t.Fatal(err)
	}
}

// TestPoolShutdownWaitsForItsExecutionsLimits: Shutdown bounds its wait by
// the latest time an admitted execution may run, its own limit included: a
// request may raise the wall-clock timeout above the pool's (a plan
// waiting for its caller), and a reload replacing the pool must not cut it
// at the pool's timeout. Within that bound the execution finishes with its
// own result.
func TestPoolShutdownWaitsForItsExecutionsLimits(t *testing.T) {
	p, _ := newFakePool(t, PoolOptions{QueueTimeout: time.Second, WatchdogGrace: time.Second})
	h := newBlockingHost()
	inflight := make(chan *Result)
	go func() {
		res, _ := p.Execute(context.Background(), Request{Code: "calls block 1", Limits: Limits{Timeout: 10 * time.Minute}}, h)
		inflight <- res
	}()
	<-h.started
	p.mu.Lock()
	limit := p.lastEnd
	p.mu.Unlock()
	if want := time.Now().Add(10 * time.Minute); limit.Before(want) || limit.After(want.Add(time.Minute)) {
		t.Fatalf("latest limit in %v, want the execution's own 10 min + queue wait + grace", time.Until(limit))
	}
	shut := make(chan error)
	go func() { shut <- p.Shutdown(context.Background()) }()
	waitFor(t, "draining", func() bool {
		_, err := p.Execute(context.Background(), Request{Code: "ok 1"}, h)
		var e *Error
		return errors.As(err, &e) && e.Code == CodePoolDisposed
	})
	close(h.release)
	wantOK(t, <-inflight, "1")
	if err := <-shut; err != nil {
		t.Fatal(err)
	}
}
