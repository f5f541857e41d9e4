package engine

import (
	"context"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// onlyWorker returns the pid of p's one worker.
func onlyWorker(t *testing.T, p Engine) int {
	t.Helper()
	pool := p.(*workerPool)
	pool.mu.Lock()
	defer pool.mu.Unlock()
	if len(pool.all) != 1 {
		t.Fatalf("%d workers, want 1", len(pool.all))
	}
	for w := range pool.all {
		return w.pid
	}
	return 0
}

// TestStoppedWorkerNotBlamedOnScript: a worker stopped from outside
// (SIGSTOP) just before it got a script holds the script until the
// watchdog kills it, and the answer says what happened: the worker did not
// answer and was replaced. Before, the script was told it "exceeded the
// time limit ... and did not stop", although it never ran.
func TestStoppedWorkerNotBlamedOnScript(t *testing.T) {
	m := NewMetrics()
	p := newRealPool(t, PoolOptions{RuntimePoolOptions: RuntimePoolOptions{MinSize: 1, MaxSize: 1}, MaxWorkers: 1,
		WatchdogGrace: 200 * time.Millisecond, Metrics: m})
	h := newGateHost()
	wantOK(t, mustRun(t, p, "return 1", h), "1") // the worker was just used: no idle check
	pid := onlyWorker(t, p)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the worker stopped", func() bool { stopped, _, _ := processActivity(pid); return stopped })
	res, err := p.Execute(context.Background(), Request{Code: "return 2", Limits: Limits{Timeout: 300 * time.Millisecond}}, h)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != StatusTimeout || res.Error == nil || res.Error.Code != CodeWorkerTimeout {
		t.Fatalf("got %s, want WORKER_TIMEOUT", describeResult(res))
	}
	if msg := res.Error.Message; !strings.Contains(msg, "did not answer") || !strings.Contains(msg, "killed and replaced") || strings.Contains(msg, "script exceeded") {
		t.Errorf("message %q: want the worker's silence named, not the script blamed", msg)
	}
	if v := testutil.ToFloat64(m.deaths.WithLabelValues(DeathUnresponsive)); v != 1 {
		t.Errorf("worker_deaths_total{cause=unresponsive} = %v, want 1", v)
	}
	wantOK(t, mustRun(t, p, "return 3", h), "3")
}

// TestStoppedIdleWorkerSkipped: a worker idle for a second or more is
// looked at before it gets a script; found stopped (SIGSTOP), it is killed
// and the script runs on a new worker at once, instead of waiting for the
// watchdog (its timeout plus the grace: 4.5 s with the secure preset) and
// failing.
func TestStoppedIdleWorkerSkipped(t *testing.T) {
	m := NewMetrics()
	p := newRealPool(t, PoolOptions{RuntimePoolOptions: RuntimePoolOptions{MinSize: 1, MaxSize: 1}, MaxWorkers: 1, Metrics: m})
	h := newGateHost()
	pid := onlyWorker(t, p)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// kill returns before the signal has stopped the process.
	waitFor(t, "the worker stopped", func() bool { stopped, _, _ := processActivity(pid); return stopped })
	pool := p.(*workerPool)
	pool.mu.Lock()
	for w := range pool.all {
		w.lastUsed = w.lastUsed.Add(-idleCheckAfter)
	}
	pool.mu.Unlock()
	wantOK(t, mustRun(t, p, "return 1", h), "1")
	if now := onlyWorker(t, p); now == pid {
		t.Errorf("the stopped worker %d still serves", pid)
	}
	if v := testutil.ToFloat64(m.deaths.WithLabelValues(DeathUnresponsive)); v != 1 {
		t.Errorf("worker_deaths_total{cause=unresponsive} = %v, want 1", v)
	}
}

// BenchmarkProcessActivity is the cost of the look run takes at a worker
// idle for idleCheckAfter or more before giving it a script (one read of
// /proc/<pid>/stat); workers in steady use never pay it.
func BenchmarkProcessActivity(b *testing.B) {
	pid := os.Getpid()
	for b.Loop() {
		if _, _, ok := processActivity(pid); !ok {
			b.Fatal("cannot read /proc/self/stat")
		}
	}
}
