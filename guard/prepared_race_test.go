package guard

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestPreparedSemaphoreUnderSweep: slots of one global semaphore taken
// concurrently through two managers' prepared semaphores (two kept
// memory keys), a queueing prepared semaphore (UUID tickets beside the
// numbered slots) and the unprepared AcquireSemaphore, while the sweep
// keeps removing the semaphore whenever it is empty (so that the kept
// semaphores go stale): never more holders than slots, every ticket
// released twice, and every slot back at the end.
func TestPreparedSemaphoreUnderSweep(t *testing.T) {
	ctx := context.Background()
	st := NewMemoryStorage(&MemoryStorageOptions{SweepInterval: -1})
	defer st.Close()
	newManager := func() *GuardManager {
		m, err := NewGuardManager(ctx, GuardConfig{Enabled: true}, &ManagerOptions{Storage: st, Metrics: NewMetrics()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Destroy(ctx) })
		return m
	}
	m1, m2 := newManager(), newManager()
	const slots = 3
	cfg := ConcurrencyConfig{MaxConcurrent: slots}
	queued := ConcurrencyConfig{MaxConcurrent: slots, QueueTimeoutMs: 60_000}
	p1, p2, pq := m1.PrepareSemaphore("e", cfg), m2.PrepareSemaphore("e", cfg), m2.PrepareSemaphore("e", queued)
	// A per-partition limit: its key written on the stack at each acquire.
	perIP := ConcurrencyConfig{MaxConcurrent: slots, PartitionBy: PartitionKey{Strategy: PartitionIP}}
	pp := m1.PrepareSemaphore("f", perIP)
	partitions := []string{"10.0.0.1", strings.Repeat("a", 300)}

	var inUse [3]atomic.Int64 // e, f by partition
	stop := make(chan struct{})
	var sweeps sync.WaitGroup
	sweeps.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				st.Sweep()
				runtime.Gosched()
			}
		}
	})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			for i := range 300 {
				var tk SemaphoreTicket
				var utk *SemaphoreTicket
				var err error
				count := &inUse[0]
				switch (g + i) % 5 {
				case 0:
					err = p1.Acquire(ctx, "", &tk)
				case 1:
					err = p2.Acquire(ctx, "", &tk)
				case 2:
					err = pq.Acquire(ctx, "", &tk)
				case 3:
					utk, err = m1.AcquireSemaphore(ctx, "e", &cfg, PartitionKeyContext{})
				default:
					n := (g + i) % 2
					count = &inUse[1+n]
					err = pp.Acquire(ctx, partitions[n], &tk)
				}
				if err != nil {
					if (g+i)%5 == 2 {
						errs <- err // the queue waits for a slot
						return
					}
					continue
				}
				n := count.Add(1)
				for range 3 {
					runtime.Gosched()
					n = max(n, count.Load())
				}
				count.Add(-1)
				if utk != nil {
					_ = utk.Release(ctx)
					_ = utk.Release(ctx)
				}
				_ = tk.Release(ctx)
				_ = tk.Release(ctx)
				if n > slots {
					errs <- fmt.Errorf("%d holders of %d slots", n, slots)
					return // one error per goroutine: errs has room for all
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	sweeps.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	now := time.Now().UnixMilli()
	for _, key := range []string{p1.fixedKey, BuildStorageKey("f", partitions[0], suffixSem), BuildStorageKey("f", partitions[1], suffixSem)} {
		if n, _ := st.ActiveSlots(ctx, key, now); n != 0 {
			t.Fatalf("%s: %d slots held after every release", key, n)
		}
	}
	// All the slots are free again, through either kept key.
	var held [slots]SemaphoreTicket
	for i := range held {
		p := p1
		if i%2 == 1 {
			p = p2
		}
		if err := p.Acquire(ctx, "", &held[i]); err != nil {
			t.Fatalf("slot %d: %v", i, err)
		}
	}
	var extra SemaphoreTicket
	if err := p2.Acquire(ctx, "", &extra); err == nil {
		t.Fatal("a slot beyond the limit")
	}
	for i := range held {
		_ = held[i].Release(ctx)
	}
}

// TestPreparedRateExactAcrossResets: in each round the limit's window is
// removed (reset, or swept after the clock moved past it), then requests
// of two managers' prepared global limits (two kept memory keys) and of
// the unprepared CheckRateLimit race for it, with a sweep running beside
// them: exactly maxRequests are allowed per round, so no request counted
// into a removed window.
func TestPreparedRateExactAcrossResets(t *testing.T) {
	ctx := context.Background()
	clock := newFakeClock(t0)
	st := NewMemoryStorage(&MemoryStorageOptions{SweepInterval: -1, Now: clock.Now})
	defer st.Close()
	newManager := func() *GuardManager {
		m, err := NewGuardManager(ctx, GuardConfig{Enabled: true}, &ManagerOptions{Storage: st, Now: clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Destroy(ctx) })
		return m
	}
	m1, m2 := newManager(), newManager()
	const limit = 20
	cfg := RateLimitConfig{MaxRequests: limit, WindowMs: 1000}
	p1, p2 := m1.PrepareRateLimit("g", cfg), m2.PrepareRateLimit("g", cfg)
	for round := range 30 {
		if round%2 == 0 {
			if err := m1.RateLimiter().Reset(ctx, p1.fixedKey, 1000); err != nil {
				t.Fatal(err)
			}
		} else {
			clock.Advance(3 * time.Second)
			st.Sweep()
		}
		var allowed atomic.Int64
		var wg sync.WaitGroup
		wg.Go(func() {
			for range 20 {
				st.Sweep() // the window is current: it stays
				runtime.Gosched()
			}
		})
		for g := range 6 {
			wg.Go(func() {
				for i := range 10 {
					var r RateLimitResult
					switch (g + i) % 3 {
					case 0:
						r, _ = p1.Check(ctx, "", clock.Now())
					case 1:
						r, _ = p2.Check(ctx, "", clock.Now())
					default:
						r, _ = m2.CheckRateLimit(ctx, "g", &cfg, PartitionKeyContext{})
					}
					if r.Allowed {
						allowed.Add(1)
					}
				}
			})
		}
		wg.Wait()
		if n := allowed.Load(); n != limit {
			t.Fatalf("round %d: %d requests allowed, want %d", round, n, limit)
		}
	}
}

// TestPreparedKeysOnTheStack: the keys a prepared limit writes in its
// stack buffer are stored as copies, whatever their length (past the
// buffer) or content (multi-byte characters, colons), and name the same
// counters and slots as the unprepared checks.
func TestPreparedKeysOnTheStack(t *testing.T) {
	ctx := context.Background()
	clock := newFakeClock(t0)
	m := newTestManager(t, GuardConfig{Enabled: true}, clock)
	st := m.Storage().(*MemoryStorage)
	const limit = 3
	partitions := []string{
		"10.0.0.1", "10.0.0.2", // same length: the same bytes of the buffer
		"2001:db8::1", "::ffff:10.0.0.1",
		"用户-ü-🙂", "user:with:colons",
		strings.Repeat("x", 127), strings.Repeat("y", 128), strings.Repeat("z", 5000),
		strings.Repeat("é", 200),
	}
	var part string
	byFunc := PartitionKey{Func: func(PartitionKeyContext) string { return part }}
	cfg := RateLimitConfig{MaxRequests: limit, WindowMs: 60000, PartitionBy: PartitionKey{Strategy: PartitionUserID}}
	p := m.PrepareRateLimit("e", cfg)
	for _, pv := range partitions {
		for i := range limit {
			if r, _ := p.Check(ctx, pv, clock.Now()); !r.Allowed {
				t.Fatalf("%.20q: check %d refused", pv, i)
			}
		}
	}
	for _, pv := range partitions {
		if r, _ := p.Check(ctx, pv, clock.Now()); r.Allowed {
			t.Fatalf("%.20q: allowed past the limit (its stored key changed)", pv)
		}
		part = pv
		ucfg := cfg
		ucfg.PartitionBy = byFunc
		if r, _ := m.CheckRateLimit(ctx, "e", &ucfg, PartitionKeyContext{}); r.Allowed {
			t.Fatalf("%.20q: the unprepared check counts elsewhere", pv)
		}
	}
	if w, _ := st.Len(); w != len(partitions) {
		t.Fatalf("%d windows, want %d", w, len(partitions))
	}

	s := m.PrepareSemaphore("e", ConcurrencyConfig{MaxConcurrent: 1, PartitionBy: PartitionKey{Strategy: PartitionUserID}})
	tickets := make([]SemaphoreTicket, len(partitions))
	for i, pv := range partitions {
		if err := s.Acquire(ctx, pv, &tickets[i]); err != nil {
			t.Fatalf("%.20q: %v", pv, err)
		}
	}
	for i, pv := range partitions {
		key := BuildStorageKey("e", pv, suffixSem)
		if tickets[i].Key != key {
			t.Fatalf("ticket key %.40q, want %.40q", tickets[i].Key, key)
		}
		if n, _ := st.ActiveSlots(ctx, key, clock.Now().UnixMilli()); n != 1 {
			t.Fatalf("%.20q: %d slots", pv, n)
		}
		part = pv
		if tk, err := m.AcquireSemaphore(ctx, "e", &ConcurrencyConfig{MaxConcurrent: 1, PartitionBy: byFunc}, PartitionKeyContext{}); err == nil {
			_ = tk.Release(ctx)
			t.Fatalf("%.20q: the unprepared acquire found the slot free", pv)
		}
	}
	for i := range tickets {
		_ = tickets[i].Release(ctx)
	}
	for _, pv := range partitions {
		if n, _ := st.ActiveSlots(ctx, BuildStorageKey("e", pv, suffixSem), clock.Now().UnixMilli()); n != 0 {
			t.Fatalf("%.20q: %d slots after the release", pv, n)
		}
	}
}

// TestRedisPreparedSemaphoreNeverExceeds: prepared semaphores of two
// managers on one Redis (UUID tickets, queueing, the owner a prepared
// semaphore shares among its tickets) never hold more slots than the
// limit, and every slot is back after double releases.
func TestRedisPreparedSemaphoreNeverExceeds(t *testing.T) {
	ctx := context.Background()
	a, b := redisPair(t, GuardConfig{Enabled: true}, newFakeClock(t0))
	const slots = 3
	cfg := ConcurrencyConfig{MaxConcurrent: slots, QueueTimeoutMs: 60_000}
	perIP := ConcurrencyConfig{MaxConcurrent: slots, QueueTimeoutMs: 60_000, PartitionBy: PartitionKey{Strategy: PartitionIP}}
	ps := []*PreparedSemaphore{a.PrepareSemaphore("e", cfg), b.PrepareSemaphore("e", cfg), a.PrepareSemaphore("f", perIP), b.PrepareSemaphore("f", perIP)}
	long := strings.Repeat("p", 300)
	var inUse [2]atomic.Int64
	var over atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 25 {
				k := (g + i) % len(ps)
				var tk SemaphoreTicket
				if err := ps[k].Acquire(ctx, long, &tk); err != nil {
					t.Error(err)
					return
				}
				n := inUse[k/2].Add(1)
				for range 3 {
					runtime.Gosched()
					n = max(n, inUse[k/2].Load())
				}
				inUse[k/2].Add(-1)
				if n > slots {
					over.Store(n)
				}
				_ = tk.Release(ctx)
				_ = tk.Release(ctx)
			}
		})
	}
	wg.Wait()
	if n := over.Load(); n != 0 {
		t.Fatalf("%d holders of %d slots", n, slots)
	}
	for _, key := range []string{BuildStorageKey("e", PartitionGlobal, suffixSem), BuildStorageKey("f", long, suffixSem)} {
		if n, _ := a.Semaphore().GetActiveCount(ctx, key); n != 0 {
			t.Fatalf("%.20s: %d tickets left", key, n)
		}
	}
}
