package engine

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// A worker's collector pacing. Every execution builds a goja runtime and
// throws it away, so a worker allocates a lot on a small live heap (a few
// MB): with the default GOGC=100 it collects every few MB allocated, and
// the collector took some 15% of a worker's CPU time (more for trivial
// scripts). A worker therefore lets the heap grow by at least a fixed
// allowance between cycles instead of by the live heap:
//
//	next cycle at  live + max(live, allowance)   (GOGC=100 is live + live)
//
// The allowance is an eighth of the lowest memory limit of the scripts the
// worker hosts (at most maxGCAllowance; the pacing is set again when a
// script with a lower limit starts), so the heap watchdog (memWatch),
// which sees a script's growth when a cycle ends, sees it at most one
// doubling or one eighth of the script's limit late. A heap that outgrew the allowance is paced
// exactly as before. The soft memory limit (capMemory) still forces
// cycles as the heap nears the worker's cap whatever the pacing, so the
// process-wide limits are untouched.

// maxGCAllowance bounds the allowance of a worker whose scripts may use
// much memory (or have no limit).
const maxGCAllowance = 16 << 20

// maxWorkerGCPercent bounds the pacing: should a cycle be missed by the
// hook (see onEveryGC), a fast-growing heap is collected at 5x its size at
// worst, never later.
const maxWorkerGCPercent = 400

// gcAllowance is the allowance for scripts limited to scriptMemory bytes
// (0: no limit).
func gcAllowance(scriptMemory int64) uint64 {
	if scriptMemory <= 0 || scriptMemory/8 > maxGCAllowance {
		return maxGCAllowance
	}
	return uint64(scriptMemory / 8)
}

// workerGCPercent is the GOGC that makes the heap goal base + max(base,
// allowance), where base is what GOGC is a percentage of: the live heap
// plus the stacks and globals the collector scans.
func workerGCPercent(base, allowance uint64) int {
	if base == 0 || allowance <= base {
		return 100
	}
	return int(min(allowance*100/base, maxWorkerGCPercent))
}

// gcPacer sets a worker's GOGC from the last cycle's live heap, after
// every collector cycle and when a script with a lower memory limit starts.
type gcPacer struct {
	mu        sync.Mutex
	allowance uint64 // for the worker's per-script memory (gcAllowance)
	// minLimit is the lowest memory limit of the scripts the worker hosts
	// now (0: none); nil when the engine has no heap watchdog.
	minLimit func() int64
	sample   []metrics.Sample
	last     int
}

func newGCPacer(scriptMemory int64, minLimit func() int64) *gcPacer {
	return &gcPacer{
		allowance: gcAllowance(scriptMemory),
		minLimit:  minLimit,
		sample: []metrics.Sample{
			{Name: "/gc/heap/live:bytes"},
			{Name: "/gc/scan/stack:bytes"},
			{Name: "/gc/scan/globals:bytes"},
		},
		last: -1,
	}
}

// start paces now and after every collector cycle, for as long as the
// process lives.
func (g *gcPacer) start() {
	g.pace()
	onEveryGC(func() bool { g.pace(); return true })
}

// pace sets GOGC for the current live heap and the scripts hosted now.
func (g *gcPacer) pace() {
	allowance := g.allowance
	if g.minLimit != nil {
		if l := g.minLimit(); l > 0 {
			allowance = min(allowance, gcAllowance(l))
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	metrics.Read(g.sample)
	var base uint64
	for _, s := range g.sample {
		if s.Value.Kind() == metrics.KindUint64 {
			base += s.Value.Uint64()
		}
	}
	if pct := workerGCPercent(base, allowance); pct != g.last {
		debug.SetGCPercent(pct)
		g.last = pct
	}
}

// gcSentinel is an object nothing refers to: the next collector cycle finds
// it dead and runs its cleanup. It holds a pointer so that it is not
// allocated in a tiny block shared with other objects (which could delay
// its cleanup).
type gcSentinel struct{ _ *byte }

// onEveryGC calls f after each collector cycle (on the runtime's cleanup
// goroutine) until f returns false. A cycle can be missed: a sentinel
// allocated while the next cycle already marks survives that cycle.
func onEveryGC(f func() bool) {
	s := new(gcSentinel)
	runtime.AddCleanup(s, func(struct{}) {
		if f() {
			onEveryGC(f)
		}
	}, struct{}{})
}
