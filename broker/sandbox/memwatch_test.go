package sandbox

import (
	"context"
	"testing"
	"time"
)

// TestMemWatchChargesNoScriptForTheOneBefore drives the heap watchdog with a
// collector the test plays (its live heap and count of finished cycles) and
// no sampling goroutine: the test is the 5 ms tick, and it lags as a loaded
// machine's does. A script that held a huge string finishes while a cycle
// that marked it runs; the next script must not be charged for that string,
// and must still be stopped for its own growth.
func TestMemWatchChargesNoScriptForTheOneBefore(t *testing.T) {
	const mib = 1 << 20
	var live, cycle uint64 = 10 * mib, 5
	m := newMemWatch()
	m.heap = func() (uint64, uint64) { return live, cycle }
	m.running, m.live, m.cycle = true, live, cycle // the test ticks
	now := time.Unix(0, 0)
	tick := func(l, c uint64) {
		t.Helper()
		live, cycle = l, c
		now = now.Add(memoryPollInterval)
		if !m.tick(now) {
			t.Fatalf("the watchdog stopped sampling at cycle %d", c)
		}
	}
	script := func(limit int64) *execution {
		x := newExecution(context.Background(), Limits{MemoryBytes: limit}, Request{}, newTestHost(nil))
		t.Cleanup(x.cancel)
		return x
	}
	charged := func(x *execution) float64 {
		m.mu.Lock()
		defer m.mu.Unlock()
		return x.memAcct.charged
	}

	hog := script(4096 * mib)
	m.begin(hog, now)
	tick(10*mib, 6) // in progress when the hog began: not its own
	tick(20*mib, 7)
	if got := charged(hog); got != 10*mib {
		t.Fatalf("hog charged %.0f bytes, want %d", got, 10*mib)
	}
	// The hog's string grows to 500 MiB. Cycle 8 ends without a tick (the
	// watchdog lags); the hog finishes (stopped by its time limit) while
	// cycle 9 marks its string, and the next script begins.
	live, cycle = 500*mib, 8
	m.end(hog, now, true)
	next := script(64 * mib)
	m.begin(next, now)
	tick(500*mib, 9) // the hog's string, marked by a cycle begun before next
	if x := next.stopped; x != nil {
		r, _ := x.outcome()
		t.Fatalf("the next script was stopped for the hog's string: %s", describeResult(r))
	}
	tick(12*mib, 10) // the string is garbage now
	tick(20*mib, 11)
	if got := charged(next); got != 8*mib {
		t.Fatalf("next charged %.0f bytes, want its own growth %d", got, 8*mib)
	}
	tick(100*mib, 12) // its own growth past its limit
	if next.stopped == nil {
		t.Fatalf("next was not stopped at %.0f bytes charged (limit 64 MiB)", charged(next))
	}
	if r, _ := next.stopped.outcome(); r == nil || r.Error == nil || r.Error.Code != CodeWorkerMemoryExceeded {
		t.Fatalf("next stopped with %s, want %s", describeResult(r), CodeWorkerMemoryExceeded)
	}
}
