package engine

import (
	"context"
	"math"
	"runtime"
	"runtime/metrics"
	"sync/atomic"
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
	w.m.heap = func() heapReading { return heapReading{live: w.live, cycle: w.cycle, inUse: w.live} }
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
	w.t.Cleanup(func() { x.cancel(nil) })
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

// In process the gateway's collector runs when its whole heap doubles: a
// script that grows the heap by more than its limit between two cycles gets
// a cycle of the watchdog's own, and every script waits at its next step
// until that cycle has been measured, so a doubling string is stopped one
// copy past its limit rather than at the gateway's next cycle.
func TestMemWatchCollectsEarlyAndHoldsScripts(t *testing.T) {
	w := newWatchTest(t, 400*mib, 5)
	inUse := uint64(400 * mib)
	w.m.heap = func() heapReading { return heapReading{live: w.live, cycle: w.cycle, inUse: inUse} }
	collecting := make(chan struct{})
	release := make(chan struct{})
	var collected int
	w.m.collect = func() {
		collected++
		close(collecting)
		<-release
		w.live, w.cycle = 600*mib, 8 // the cycle marks the script's 200 MiB
	}
	x, other := w.script(64*mib), w.script(4096*mib)
	w.m.begin(x, w.now)
	w.m.begin(other, w.now)
	w.live, w.cycle = 400*mib, 7 // both past their first cycle
	w.tick(400*mib, 7)

	inUse = 460 * mib // 60 MiB of growth: under the lowest limit
	w.tick(400*mib, 7)
	if w.m.gate.Load() != nil {
		t.Fatal("the watchdog collected early for growth under every limit")
	}
	inUse = 600 * mib
	w.tick(400*mib, 7)
	select {
	case <-collecting:
	case <-time.After(10 * time.Second):
		t.Fatal("the watchdog did not collect when the heap grew past a script's limit")
	}
	waited := make(chan struct{})
	go func() {
		w.m.wait(other)
		close(waited)
	}()
	select {
	case <-waited:
		t.Fatal("a script went on while the early cycle ran")
	case <-time.After(20 * time.Millisecond):
	}
	w.tick(400*mib, 7) // the sampler ticks meanwhile: no second cycle
	close(release)
	<-waited
	if collected != 1 {
		t.Fatalf("%d early cycles, want 1", collected)
	}
	if x.stopped == nil {
		t.Fatal("the script that grew past its limit was not stopped when the early cycle was measured")
	}
	if r, _ := x.stopped.outcome(); r == nil || r.Error == nil || r.Error.Code != CodeWorkerMemoryExceeded {
		t.Fatalf("stopped with %s, want %s", describeResult(r), CodeWorkerMemoryExceeded)
	}
	w.notStopped(other, "the script with a 4 GiB limit")
	if w.m.gate.Load() != nil {
		t.Fatal("the gate stayed closed after the cycle was measured")
	}
}

// A worker paces its own collector (gcPacer): its watchdog never collects.
func TestMemWatchInWorkerLeavesCollectionToThePacer(t *testing.T) {
	w := newWatchTest(t, 10*mib, 5)
	w.m.heap = func() heapReading { return heapReading{live: w.live, cycle: w.cycle, inUse: 1 << 40} }
	w.m.collect = func() { t.Error("a worker's watchdog collected") }
	x := w.script(64 * mib)
	w.m.begin(x, w.now)
	w.m.pacer = &gcPacer{} // after begin: a real pacer would set this process's GOGC
	w.tick(10*mib, 5)
	if w.m.gate.Load() != nil {
		t.Fatal("a worker's watchdog closed the gate")
	}
}

// A gateway that holds a large heap collects rarely: with 768 MiB live its
// next cycle comes at about 1.5 GiB. A 64 MiB script doubling a string must
// still be stopped near its limit, not when the gateway's heap doubles.
func TestInProcessDoublingStoppedNearItsLimit(t *testing.T) {
	const limit = 64 * mib
	ballast := make([]byte, 768*mib) // fresh from the OS: costs no memory until written
	runtime.GC()
	base := heapObjects()
	var peak atomic.Uint64
	done := make(chan struct{})
	go func() {
		for {
			peak.Store(max(peak.Load(), heapObjects()))
			select {
			case <-done:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	e := NewInProcess(&Options{Limits: Limits{Timeout: 20 * time.Second, MemoryBytes: limit}})
	defer e.Close()
	r, err := e.Execute(context.Background(), Request{Code: `let s = "x"; for (let i = 0; i < 40; i++) s += s; return s.length`}, newTestHost(nil))
	close(done)
	runtime.KeepAlive(ballast)
	if err != nil {
		t.Fatal(err)
	}
	if r.Error == nil || r.Error.Code != CodeWorkerMemoryExceeded {
		t.Fatalf("got %s, want %s", describeResult(r), CodeWorkerMemoryExceeded)
	}
	// Stopped one copy past the limit: the string at 128 MiB, the one it
	// was copied from and a copy in flight. The gateway's own cycle would
	// have let it reach 512 MiB to 1 GiB.
	grew := peak.Load() - base
	t.Logf("heap grew by %d MiB before the script was stopped", grew>>20)
	if grew > 8*limit {
		t.Fatalf("the heap grew by %d MiB before the script was stopped, want at most %d MiB (8× its limit)", grew>>20, 8*limit>>20)
	}
}

func heapObjects() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
