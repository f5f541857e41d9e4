package sandbox

import (
	"context"
	"strings"
	"testing"
	"time"
)

// newRealPool starts a worker pool running the real engine (the test binary
// serves as the worker through MaybeServeWorker in TestMain).
func newRealPool(t testing.TB, opts PoolOptions) Engine {
	t.Helper()
	p, err := NewWorkerPool(&opts)
	if err != nil {
		t.Fatalf("NewWorkerPool: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// TestAttackSuiteWorkers runs the attack suite against the worker engine,
// including the cases only a separate process can stop (memory bombs that
// reach RLIMIT_DATA, built-ins that ignore interrupts).
func TestAttackSuiteWorkers(t *testing.T) {
	var memory int64 // the preset's (secure: 128 MiB)
	if raceEnabled {
		// Leave the engine's own caps the first word, as without -race.
		memory = 512 << 20
	}
	runAttackSuite(t, func(t *testing.T) Engine {
		return newRealPool(t, PoolOptions{
			RuntimePoolOptions: RuntimePoolOptions{MinSize: 1, MaxSize: 2},
			WatchdogGrace:      500 * time.Millisecond,
			MemoryBytes:        memory,
		})
	})
}

// TestWorkerMemoryBombs: allocations that no in-VM check sees (string
// concatenation, many medium strings, object growth) reach the worker's
// RLIMIT_DATA; the worker dies with WORKER_MEMORY_EXCEEDED or the script's
// own timeout comes first, and the pool serves the next script.
func TestWorkerMemoryBombs(t *testing.T) {
	p := newRealPool(t, PoolOptions{MemoryBytes: 32 << 20})
	h := newTestHost(echoTools())
	slow := Limits{Timeout: 5 * time.Second, MaxSteps: 1 << 40}
	for _, c := range []struct {
		name, code string
		codes      []string
	}{
		{"string doubling", `let s = "x"; for (let i = 0; i < 40; i++) s += s; return s.length`, []string{CodeWorkerMemoryExceeded}},
		// Near the cap the collector runs constantly; a slow (race) build
		// may reach the timeout first.
		{"many medium strings", `const a = []; for (;;) a.push("x".repeat(1e4) + Math.random())`, []string{CodeWorkerMemoryExceeded, CodeTimeout}},
		{"spread of a long string", `return [..."x".repeat(1e6)].sort().join("").length`, []string{CodeWorkerMemoryExceeded, CodeExecutionError}},
		{"object growth", `const o = {}; for (let i = 0; ; i++) o["k" + i] = "v".repeat(1000) + i`, []string{CodeWorkerMemoryExceeded, CodeTimeout}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, err := p.Execute(context.Background(), Request{Code: c.code, Limits: slow}, h)
			if err != nil {
				t.Fatal(err)
			}
			if r.Error == nil || !stringIn(r.Error.Code, c.codes) {
				t.Fatalf("got %s, want one of %v", describeResult(r), c.codes)
			}
			if r.Error.Code == CodeWorkerMemoryExceeded && (r.Status != StatusRuntimeError || !strings.Contains(r.Error.Message, "32 MiB")) {
				t.Fatalf("memory error: %s", describeResult(r))
			}
			assertServes(t, p)
		})
	}
}

// TestWorkerRecycledAfterHeavyScript: a script that grew its worker past
// half the cap succeeds, and the worker is replaced so that the next script
// has the whole cap.
func TestWorkerRecycledAfterHeavyScript(t *testing.T) {
	e := newRealPool(t, PoolOptions{RuntimePoolOptions: RuntimePoolOptions{MaxSize: 1}, MemoryBytes: 64 << 20})
	p := e.(*workerPool)
	pids := func() map[int]bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		m := map[int]bool{}
		for w := range p.all {
			m[w.pid] = true
		}
		return m
	}
	h := newTestHost(echoTools())
	wantOK(t, mustRun(t, p, "return 1", h), "1")
	before := pids()
	r, err := p.Execute(context.Background(), Request{
		Code:   `const a = []; for (let i = 0; i < 4000; i++) a.push("x".repeat(1e4) + i); return a.length`,
		Limits: Limits{Timeout: 10 * time.Second, MaxSteps: 1 << 40},
	}, h)
	if err != nil || r.Status != StatusOK {
		t.Fatalf("heavy script: %v %s", err, describeResult(r))
	}
	wantOK(t, mustRun(t, p, "return 2", h), "2")
	for pid := range pids() {
		if before[pid] {
			t.Fatalf("worker %d kept after a heavy script", pid)
		}
	}
}
