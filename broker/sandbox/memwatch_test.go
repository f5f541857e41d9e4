package sandbox

import (
	"context"
	"math"
	"testing"
	"time"
)

const mib = 1 << 20

// watchTest drives a heap watchdog with no sampling goroutine: the test
// plays the collector (its live heap and count of finished cycles) and the
// 5 ms tick, which lags as a loaded machine's does.
type watchTest struct {
	t           *testing.T
	m           *memWatch
	live, cycle uint64
	now         time.Time
}

func newWatchTest(t *testing.T, live, cycle uint64) *watchTest {
	w := &watchTest{t: t, m: newMemWatch(), live: live, cycle: cycle, now: time.Unix(0, 0)}
	w.m.heap = func() (uint64, uint64) { return w.live, w.cycle }
	w.m.running, w.m.live, w.m.cycle = true, live, cycle // the test ticks
	return w
}

// tick is the sampler's look after the collector finished cycle with live.
func (w *watchTest) tick(live, cycle uint64) {
	w.t.Helper()
	w.live, w.cycle = live, cycle
	w.now = w.now.Add(memoryPollInterval)
	if !w.m.tick(w.now) {
		w.t.Fatalf("the watchdog stopped sampling at cycle %d", cycle)
	}
}

func (w *watchTest) script(limit int64) *execution {
	x := newExecution(context.Background(), Limits{MemoryBytes: limit}, Request{}, newTestHost(nil))
	w.t.Cleanup(x.cancel)
	return x
}

// run is a stretch of JavaScript of x lasting d.
func (w *watchTest) run(x *execution, d time.Duration, finished bool) {
	w.m.begin(x, w.now)
	w.m.end(x, w.now.Add(d), finished)
}

func (w *watchTest) charged(x *execution) float64 {
	w.m.mu.Lock()
	defer w.m.mu.Unlock()
	return x.memAcct.charged
}

func (w *watchTest) notStopped(x *execution, what string) {
	w.t.Helper()
	if x.stopped != nil {
		r, _ := x.stopped.outcome()
		w.t.Fatalf("%s was stopped: %s", what, describeResult(r))
	}
}

// A script that held a huge string finishes while a cycle that marked it
// runs: the next script must not be charged for that string, and must still
// be stopped for its own growth.
func TestMemWatchChargesNoScriptForTheOneBefore(t *testing.T) {
	w := newWatchTest(t, 10*mib, 5)
	hog := w.script(4096 * mib)
	w.m.begin(hog, w.now)
	w.tick(10*mib, 6) // in progress when the hog began: not its own
	w.tick(20*mib, 7)
	if got := w.charged(hog); got != 10*mib {
		t.Fatalf("hog charged %.0f bytes, want %d", got, 10*mib)
	}
	// The hog's string grows to 500 MiB. Cycle 8 ends without a tick (the
	// sampler lags); the hog finishes (stopped by its time limit) while
	// cycle 9 marks its string, and the next script begins.
	w.live, w.cycle = 500*mib, 8
	w.m.end(hog, w.now, true)
	next := w.script(64 * mib)
	w.m.begin(next, w.now)
	w.tick(500*mib, 9) // the hog's string, marked by a cycle begun before next
	w.notStopped(next, "the next script")
	w.tick(12*mib, 10) // the string is garbage now
	w.tick(20*mib, 11)
	if got := w.charged(next); got != 8*mib {
		t.Fatalf("next charged %.0f bytes, want its own growth %d", got, 8*mib)
	}
	w.tick(100*mib, 12) // its own growth past its limit
	if next.stopped == nil {
		t.Fatalf("next was not stopped at %.0f bytes charged (limit 64 MiB)", w.charged(next))
	}
	if r, _ := next.stopped.outcome(); r == nil || r.Error == nil || r.Error.Code != CodeWorkerMemoryExceeded {
		t.Fatalf("next stopped with %s, want %s", describeResult(r), CodeWorkerMemoryExceeded)
	}
}

// Growth is shared in proportion to running time among the scripts that ran
// between two cycles, those that finished in between included: a script
// that ran 1 ms of 100 is charged 1% of it, not all of it because the hog
// that ran the rest finished before the cycle ended.
func TestMemWatchSharesGrowthWithScriptsThatFinished(t *testing.T) {
	w := newWatchTest(t, 10*mib, 5)
	small, hog := w.script(64*mib), w.script(4096*mib)
	for cycle := uint64(6); cycle <= 7; cycle++ { // both past their first cycles
		w.run(small, time.Millisecond, false)
		w.run(hog, time.Millisecond, false)
		w.tick(10*mib, cycle)
	}
	w.run(small, time.Millisecond, false)
	w.run(hog, 99*time.Millisecond, true)
	w.tick(410*mib, 8)
	w.notStopped(small, "the script that ran 1% of the time")
	if got, want := w.charged(small), 4.0*mib; math.Abs(got-want) > 1024 {
		t.Fatalf("small charged %.0f bytes, want %.0f (1%% of the growth)", got, want)
	}
}
