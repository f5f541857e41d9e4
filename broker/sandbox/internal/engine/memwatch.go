package engine

import (
	"fmt"
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"
)

// memoryPollInterval is how often the heap watchdog samples the heap while
// a script runs.
const memoryPollInterval = 5 * time.Millisecond

// memWatch is an engine's heap watchdog. goja has no heap limit, and the Go
// heap is shared by every script of the process, so growth is attributed:
// each time the collector finishes a cycle, the change of the live heap
// since the previous cycle is shared among the scripts that ran JavaScript
// in between (those that finished since included), in proportion to their
// running time. A script whose share passes its MemoryBytes is stopped
// (WORKER_MEMORY_EXCEEDED). Scripts that only wait for tools run nothing,
// are charged nothing and cost the watchdog nothing: it samples (every
// 5 ms) only while a script runs.
//
// It reads the live heap the collector measured (/gc/heap/live:bytes), so
// garbage does not count and a growing heap is seen at most one cycle late.
// A worker paces its collector for its scripts' limits (gcPacer). In
// process, the gateway's own collector runs when the whole heap doubles,
// which for a gateway holding hundreds of MiB is many times a script's
// limit: a 64 MiB script doubling a string (`s += s`, an operator no
// built-in cap sees) reached 772 MiB live before a cycle measured it, and
// the copies went on doubling while the cycle ran. So in process, once the
// heap (garbage included) has grown since the last cycle by more than the
// lowest limit of the scripts that ran, the watchdog starts a cycle itself
// on a goroutine of its own and holds every script at its next step (a loop
// iteration or a function call) until that cycle has been measured: a
// script is stopped at most one copy past its limit. Scripts that allocate
// garbage pause for one cycle per limit's worth of allocation; the cycle's
// pause waits for a script inside a long copy as the gateway's own would.
type memWatch struct {
	mu sync.Mutex
	// active are the scripts running JavaScript now; touched the ones that
	// ran since the last cycle (they share its growth).
	active  map[*execution]struct{}
	touched map[*execution]struct{}
	running bool // the sampling goroutine is alive
	// processLimit, when set (a worker process sets it below its memory
	// cap), bounds the live heap of all scripts together: past it the
	// script charged the most is stopped, before the kernel stops them all.
	processLimit uint64
	// pacer, in a worker, paces the collector for the scripts' limits.
	pacer *gcPacer
	all   map[*execution]struct{}
	// live is the live heap the collector measured at the end of cycle, the
	// last cycle the watchdog saw.
	live  uint64
	cycle uint64
	// gone is the running time, since the last cycle, of the scripts that
	// finished since: their part of the next cycle's growth is charged to
	// no one rather than to the scripts still there.
	gone time.Duration
	// heap reads the runtime (readHeap; tests feed their own).
	heap   func() heapReading
	sample []metrics.Sample
	// collect runs a collector cycle (runtime.GC; tests run their own).
	collect func()
	// gate, while an early cycle runs, holds the scripts at their next step
	// (wait): closed when the cycle has been measured.
	gate atomic.Pointer[chan struct{}]
}

// heapReading is what the watchdog reads of the runtime.
type heapReading struct {
	live  uint64 // live heap the last finished cycle measured
	cycle uint64 // finished collector cycles
	inUse uint64 // heap objects now, garbage not yet swept included
}

func newMemWatch() *memWatch {
	m := &memWatch{
		active:  make(map[*execution]struct{}),
		all:     make(map[*execution]struct{}),
		touched: make(map[*execution]struct{}),
		sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/gc/cycles/total:gc-cycles"},
			{Name: "/memory/classes/heap/objects:bytes"}},
		collect: runtime.GC,
	}
	m.heap = m.readHeap
	return m
}

// readHeap reads the runtime's figures (m.mu held).
func (m *memWatch) readHeap() heapReading {
	metrics.Read(m.sample)
	return heapReading{live: m.sample[0].Value.Uint64(), cycle: m.sample[1].Value.Uint64(), inUse: m.sample[2].Value.Uint64()}
}

// begin marks x as running JavaScript.
func (m *memWatch) begin(x *execution, now time.Time) {
	if m.beginLocked(x, now) && m.pacer != nil && x.limits.MemoryBytes > 0 {
		// A new script: its limit may lower the worker's allowance.
		m.pacer.pace()
	}
}

// beginLocked is begin; it reports whether x is a new script.
func (m *memWatch) beginLocked(x *execution, now time.Time) (fresh bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	x.memAcct.since = now
	m.active[x] = struct{}{}
	m.touched[x] = struct{}{}
	m.all[x] = struct{}{}
	fresh = !x.memAcct.started
	if m.running && !fresh {
		return false
	}
	h := m.heap()
	if !m.running {
		m.running = true
		m.live, m.cycle = h.live, h.cycle
		go m.loop()
	}
	if fresh {
		// The cycle in progress when the script starts may have marked
		// what ran before it (a script that just finished with a huge
		// string): the script is charged from the cycle after that one
		// on, counted by the collector's own count. The count the
		// watchdog saw last is often a cycle behind (its 5 ms samples
		// lag a collector that the script before drove hard), which
		// charged the new script for the cycle in progress.
		x.memAcct.started, x.memAcct.fromCycle = true, h.cycle+2
	}
	return fresh
}

// minLimit is the lowest memory limit of the scripts it watches (0: none).
func (m *memWatch) minLimit() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	var low int64
	for x := range m.all {
		if l := x.limits.MemoryBytes; l > 0 && (low == 0 || l < low) {
			low = l
		}
	}
	return low
}

// end marks x as no longer running (waiting or finished); finished forgets
// it.
func (m *memWatch) end(x *execution, now time.Time, finished bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.active[x]; ok {
		x.memAcct.ran += now.Sub(x.memAcct.since)
		delete(m.active, x)
	}
	if finished {
		if _, ok := m.touched[x]; ok {
			m.gone += x.memAcct.ran
		}
		delete(m.touched, x)
		delete(m.all, x)
	}
}

func (m *memWatch) loop() {
	t := time.NewTicker(memoryPollInterval)
	defer t.Stop()
	for range t.C {
		if !m.tick(time.Now()) {
			return
		}
	}
}

// tick samples the heap once; it reports false (and the goroutine ends)
// when no script ran since the last look.
func (m *memWatch) tick(now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.active) == 0 && len(m.touched) == 0 {
		m.running, m.gone = false, 0
		return false
	}
	h := m.heap()
	if h.cycle != m.cycle {
		m.observeLocked(h, now)
	} else if m.pacer == nil {
		m.collectEarlyLocked(h.inUse)
	}
	return true
}

// observeLocked charges the growth a finished cycle measured to the
// scripts that ran since the one before (m.mu held).
func (m *memWatch) observeLocked(h heapReading, now time.Time) {
	live, cycle := h.live, h.cycle
	delta := float64(int64(live - m.live))
	m.live, m.cycle = live, cycle
	total := m.gone
	m.gone = 0
	for x := range m.touched {
		if _, ok := m.active[x]; ok {
			x.memAcct.ran += now.Sub(x.memAcct.since)
			x.memAcct.since = now
		}
		total += x.memAcct.ran
	}
	for x := range m.touched {
		share := 1.0 / float64(len(m.touched))
		if total > 0 {
			share = float64(x.memAcct.ran) / float64(total)
		}
		x.memAcct.ran = 0
		if cycle < x.memAcct.fromCycle {
			continue
		}
		x.memAcct.charged += delta * share
		if x.memAcct.charged < 0 {
			x.memAcct.charged = 0
		}
		if limit := x.limits.MemoryBytes; limit > 0 && x.memAcct.charged > float64(limit) {
			x.stop(&abort{result: memoryResult(limit)})
		}
	}
	if m.processLimit > 0 && live > m.processLimit {
		var heaviest *execution
		for x := range m.all {
			if heaviest == nil || x.memAcct.charged > heaviest.memAcct.charged {
				heaviest = x
			}
		}
		if heaviest != nil {
			heaviest.stop(&abort{result: &Result{Status: StatusRuntimeError, Error: &ScriptError{
				Code: CodeWorkerMemoryExceeded, Source: "script", Name: "WorkerMemoryError",
				Message: fmt.Sprintf("script exceeded the memory limit of %d MiB (it held the most of the memory its worker shares with other scripts)", heaviest.limits.MemoryBytes>>20),
			}}})
			delete(m.all, heaviest)
		}
	}
	// The next cycle is shared among those that run from now on.
	for x := range m.touched {
		if _, ok := m.active[x]; !ok {
			delete(m.touched, x)
		}
	}
}

// collectEarlyLocked starts a collector cycle when the heap has grown since
// the last one by more than the lowest limit of the scripts that ran since,
// and closes the gate until the cycle has been measured (see memWatch).
// m.mu held.
func (m *memWatch) collectEarlyLocked(inUse uint64) {
	if m.gate.Load() != nil || inUse <= m.live {
		return
	}
	var low int64
	for x := range m.touched {
		if l := x.limits.MemoryBytes; l > 0 && (low == 0 || l < low) {
			low = l
		}
	}
	if low == 0 || inUse-m.live <= uint64(low) {
		return
	}
	gate := make(chan struct{})
	m.gate.Store(&gate)
	go func() {
		defer close(gate)
		m.collect()
		m.mu.Lock()
		defer m.mu.Unlock()
		m.gate.Store(nil)
		if h := m.heap(); h.cycle != m.cycle {
			m.observeLocked(h, time.Now())
		}
	}()
}

// wait holds a script at its next step while the watchdog measures a heap
// that grew past a limit (see memWatch); a stopped script goes on to see
// its interrupt.
func (m *memWatch) wait(x *execution) {
	if gate := m.gate.Load(); gate != nil {
		select {
		case <-*gate:
		case <-x.stopCh:
		}
	}
}

// memShare is an execution's account with the watchdog (guarded by
// memWatch.mu).
type memShare struct {
	since     time.Time     // start of the current running stretch
	ran       time.Duration // running time since the last cycle
	charged   float64       // bytes of heap growth charged to the script
	started   bool
	fromCycle uint64 // the first collector cycle the script is charged for
}
