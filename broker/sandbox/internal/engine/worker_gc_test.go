package engine

import (
	"context"
	"encoding/json"
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
	"testing"
	"time"
)

func TestWorkerGCPercent(t *testing.T) {
	for _, c := range []struct {
		base, allowance uint64
		want            int
	}{
		{0, 16 << 20, 100},        // nothing measured yet
		{16 << 20, 16 << 20, 100}, // the heap is as large as the allowance: GOGC=100
		{40 << 20, 16 << 20, 100},
		{8 << 20, 16 << 20, 200},
		{5 << 20, 16 << 20, 320},
		{1 << 20, 16 << 20, maxWorkerGCPercent}, // bounded
		{4 << 20, 1 << 20, 100},                 // a low script limit: as before
	} {
		if got := workerGCPercent(c.base, c.allowance); got != c.want {
			t.Errorf("workerGCPercent(%d, %d) = %d, want %d", c.base, c.allowance, got, c.want)
		}
	}
	for _, c := range []struct {
		limit int64
		want  uint64
	}{
		{0, maxGCAllowance}, // no limit
		{-1, maxGCAllowance},
		{512 << 20, maxGCAllowance},
		{128 << 20, 16 << 20},
		{16 << 20, 2 << 20},
	} {
		if got := gcAllowance(c.limit); got != c.want {
			t.Errorf("gcAllowance(%d) = %d, want %d", c.limit, got, c.want)
		}
	}
}

// gogc reads the collector's current GOGC.
func gogc() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int(s[0].Value.Uint64())
}

// TestGCPacerFollowsLowestLimit: the pacer of a worker whose scripts may
// use much memory raises GOGC on a small heap; a script with a low memory
// limit starting lowers it at once (its growth is seen as before), and
// after it ends the next cycle raises it again. The test process stands in
// for a worker: its GOGC is restored at the end.
func TestGCPacerFollowsLowestLimit(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	e := NewInProcess(nil).(*InProcess)
	defer e.Close()
	m := e.mem
	g := newGCPacer(0, m.minLimit)
	g.allowance = 1 << 40 // far above this process's heap, whatever it is
	m.pacer = g
	g.pace()
	if got := gogc(); got != maxWorkerGCPercent {
		t.Fatalf("GOGC %d with no script, want %d", got, maxWorkerGCPercent)
	}
	x := &execution{limits: Limits{MemoryBytes: 1 << 20}}
	m.begin(x, time.Now())
	if got := gogc(); got != 100 {
		t.Fatalf("GOGC %d with a script limited to 1 MiB, want 100", got)
	}
	m.end(x, time.Now(), true)
	g.pace() // what the next cycle does
	if got := gogc(); got != maxWorkerGCPercent {
		t.Fatalf("GOGC %d after the script ended, want %d", got, maxWorkerGCPercent)
	}
	waitMemWatchStopped(t, e)
}

// TestOnEveryGC: the hook runs after each collector cycle until it says
// stop.
func TestOnEveryGC(t *testing.T) {
	var calls atomic.Int32
	onEveryGC(func() bool { return calls.Add(1) < 3 })
	// A cycle can be missed (see onEveryGC), so collect until it stopped.
	waitFor(t, "three calls of the hook", func() bool {
		runtime.GC()
		return calls.Load() >= 3
	})
	for range 5 {
		runtime.GC()
	}
	time.Sleep(10 * time.Millisecond) // a late call would show now
	if n := calls.Load(); n != 3 {
		t.Fatalf("hook called %d times, want 3 (it said stop)", n)
	}
}

// TestStartedWorkerPacesItsCollector: a worker the pool starts runs its
// package initialisation with the collector off (GOGC=off in its
// environment) and turns it on, paced, with its handshake; the parent's
// own GOGC and GOMEMLIMIT (a user's settings for the Caddy process) do not
// reach it: its soft memory limit is 3/4 of its cap, or none.
func TestStartedWorkerPacesItsCollector(t *testing.T) {
	t.Setenv("GOGC", "25")
	t.Setenv("GOMEMLIMIT", "1MiB")
	for _, c := range []struct {
		memory       int64
		wantMemLimit int64
	}{
		{64 << 20, (64<<20 + 4*DefaultSessionMemoryBytes) / 4 * 3}, // capped: 3/4 of the cap
		{-1, math.MaxInt64}, // no cap: no soft limit
	} {
		p, _ := newFakePool(t, PoolOptions{MemoryBytes: c.memory, SessionsPerWorker: 4})
		res, err := p.Execute(context.Background(), Request{Code: "gc"}, newTestHost(nil))
		if err != nil || res.Status != StatusOK {
			t.Fatalf("memory %d: %+v %v", c.memory, res, err)
		}
		var got struct{ GOGC, MemLimit int64 }
		if err := json.Unmarshal(res.Result, &got); err != nil {
			t.Fatal(err)
		}
		if got.GOGC < 100 || got.GOGC > maxWorkerGCPercent {
			t.Errorf("memory %d: worker GOGC %d, want the paced value in [100, %d]", c.memory, got.GOGC, maxWorkerGCPercent)
		}
		if got.MemLimit != c.wantMemLimit {
			t.Errorf("memory %d: worker soft memory limit %d, want %d", c.memory, got.MemLimit, c.wantMemLimit)
		}
	}
}
