package sandbox

import (
	"context"
	"fmt"
	"math"
	"sync"
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

// recordProcs is a procsFollower whose GOMAXPROCS changes are recorded.
type recordProcs struct {
	mu  sync.Mutex
	set []int
}

func (r *recordProcs) follower(wide int) *procsFollower {
	return &procsFollower{wide: wide, set: func(n int) int {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.set = append(r.set, n)
		return 0
	}}
}

func (r *recordProcs) calls() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int(nil), r.set...)
}

// TestMemWatchComputing: a script counts as computing once one stretch of
// JavaScript lasted a whole sampling interval; a pause starts it over.
func TestMemWatchComputing(t *testing.T) {
	w := newWatchTest(t, 4*mib, 1)
	x := w.script(64 * mib)
	w.m.begin(x, w.now)
	if w.m.computing(w.now.Add(memoryPollInterval - time.Microsecond)) {
		t.Fatal("computing before a whole interval")
	}
	w.tick(4*mib, 2) // the watchdog's own bookkeeping must not restart the stretch
	if !w.m.computing(w.now) {
		t.Fatal("not computing after a whole interval of JavaScript")
	}
	w.m.end(x, w.now, false)
	if w.m.computing(w.now) {
		t.Fatal("computing while the script waits")
	}
	w.m.begin(x, w.now)
	if w.m.computing(w.now.Add(time.Millisecond)) {
		t.Fatal("a new stretch counted from the old one")
	}
}

// TestProcsFollower: GOMAXPROCS is wide while a script computes or the
// worker hosts more than one execution, and changes only when that does.
func TestProcsFollower(t *testing.T) {
	var r recordProcs
	p := r.follower(4)
	for _, c := range []bool{false, true, true, false, false, true} {
		p.follow(c)
	}
	if got, want := fmt.Sprint(r.calls()), "[4 1 4]"; got != want {
		t.Errorf("GOMAXPROCS set to %s, want %s", got, want)
	}
	p.follow(false) // 1
	p.share(true)   // 4
	p.follow(true)  // stays 4
	p.follow(false) // stays 4: shared
	p.share(false)  // 1
	if got, want := fmt.Sprint(r.calls()), "[4 1 4 1 4 1]"; got != want {
		t.Errorf("GOMAXPROCS set to %s, want %s", got, want)
	}
}

// TestMemWatchWidensWhileComputing: the sampling goroutine widens a
// worker's processors while a script computes and narrows them when it
// waits and when it ends (polled: the ticks are real).
func TestMemWatchWidensWhileComputing(t *testing.T) {
	var r recordProcs
	m := newMemWatch()
	m.procs = r.follower(2)
	x := newExecution(context.Background(), Limits{MemoryBytes: 64 * mib}, Request{}, newTestHost(nil))
	t.Cleanup(x.cancel)
	m.begin(x, time.Now())
	waitFor(t, "the processors widened", func() bool { return fmt.Sprint(r.calls()) == "[2]" })
	m.end(x, time.Now(), true)
	waitFor(t, "the processors narrowed", func() bool { return fmt.Sprint(r.calls()) == "[2 1]" })
	waitFor(t, "the heap watchdog to stop", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return !m.running
	})
}
