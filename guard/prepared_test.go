package guard

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
)

// TestPreparedSharesCounters: a prepared limit counts against the same
// counters and slots as the manager's CheckRateLimit and AcquireSemaphore
// for the same entity and partition (memory and Redis), and a partition
// given per request gets its own.
func TestPreparedSharesCounters(t *testing.T) {
	ctx := context.Background()
	for _, backend := range []string{"memory", "redis"} {
		t.Run(backend, func(t *testing.T) {
			clock := newFakeClock(t0)
			var m *GuardManager
			if backend == "redis" {
				m, _ = redisPair(t, GuardConfig{Enabled: true}, clock)
			} else {
				m = newTestManager(t, GuardConfig{Enabled: true}, clock)
			}
			perIP := RateLimitConfig{MaxRequests: 2, WindowMs: 1000, PartitionBy: PartitionKey{Strategy: PartitionIP}}
			p := m.PrepareRateLimit("tool", perIP)
			a := PartitionKeyContext{ClientIP: "10.0.0.1"}
			if r, err := p.Check(ctx, a.ClientIP, clock.Now()); err != nil || !r.Allowed || r.Remaining != 1 || r.Limit != 2 {
				t.Fatalf("prepared 1st: %+v %v", r, err)
			}
			if r, _ := m.CheckRateLimit(ctx, "tool", &perIP, a); !r.Allowed || r.Remaining != 0 {
				t.Fatalf("unprepared 2nd: %+v", r)
			}
			if r, _ := p.Check(ctx, a.ClientIP, clock.Now()); r.Allowed || r.RetryAfterMs <= 0 {
				t.Fatalf("prepared 3rd: %+v, want denied", r)
			}
			if r, _ := p.Check(ctx, "10.0.0.2", clock.Now()); !r.Allowed {
				t.Fatalf("another partition: %+v", r)
			}
			// The window rolls with the time given, not the manager's clock.
			if r, _ := p.Check(ctx, a.ClientIP, clock.Now().Add(2*time.Second)); !r.Allowed {
				t.Fatalf("two windows later: %+v", r)
			}

			global := ConcurrencyConfig{MaxConcurrent: 1}
			s := m.PrepareSemaphore("tool", global)
			var held SemaphoreTicket
			if err := s.Acquire(ctx, "ignored for a global limit", &held); err != nil || held.Ticket == "" {
				t.Fatalf("prepared acquire: %v %+v", err, held.Ticket)
			}
			if tk, err := m.AcquireSemaphore(ctx, "tool", &global, PartitionKeyContext{}); tk != nil || err == nil {
				t.Fatalf("unprepared acquire while the prepared one holds the slot: %v %v", tk, err)
			}
			var second SemaphoreTicket
			assertGuardError(t, s.Acquire(ctx, "", &second), CodeConcurrencyLimit, 429, func(*GuardError) bool { return true })
			if second.Ticket != "" || second.Release(ctx) != nil {
				t.Fatalf("a refused acquire filled its ticket: %+v", second.Ticket)
			}
			if err := held.Release(ctx); err != nil {
				t.Fatal(err)
			}
			tk, err := m.AcquireSemaphore(ctx, "tool", &global, PartitionKeyContext{})
			if err != nil || tk == nil {
				t.Fatalf("unprepared acquire after release: %v", err)
			}
			_ = tk.Release(ctx)
		})
	}
}

// TestPreparedExactUnderConcurrency: checks and acquisitions from many
// goroutines at once never let more through than the limit.
func TestPreparedExactUnderConcurrency(t *testing.T) {
	ctx := context.Background()
	clock := newFakeClock(t0)
	m := newTestManager(t, GuardConfig{Enabled: true}, clock)
	p := m.PrepareRateLimit("tool", RateLimitConfig{MaxRequests: 100})
	s := m.PrepareSemaphore("tool", ConcurrencyConfig{MaxConcurrent: 3})
	var allowed, inside, most atomic.Int64
	var wg sync.WaitGroup
	for range 1000 {
		wg.Go(func() {
			if r, err := p.Check(ctx, "", clock.Now()); err != nil {
				t.Error(err)
			} else if r.Allowed {
				allowed.Add(1)
			}
			var tk SemaphoreTicket
			if s.Acquire(ctx, "", &tk) != nil {
				return
			}
			n := inside.Add(1)
			for o := most.Load(); n > o && !most.CompareAndSwap(o, n); o = most.Load() {
			}
			inside.Add(-1)
			_ = tk.Release(ctx)
		})
	}
	wg.Wait()
	if n := allowed.Load(); n != 100 {
		t.Fatalf("allowed %d of 1000 against a limit of 100", n)
	}
	if n := most.Load(); n > 3 || n < 1 {
		t.Fatalf("%d slots held at once, limit 3", n)
	}
}

// TestPreparedDisabledAndFailOpen: a disabled manager's prepared limits
// allow without storage; with storage down and failure mode open, the
// ticket holds nothing and releases without error.
func TestPreparedDisabledAndFailOpen(t *testing.T) {
	ctx := context.Background()
	off := newTestManager(t, GuardConfig{}, newFakeClock(t0))
	if r, err := off.PrepareRateLimit("x", RateLimitConfig{MaxRequests: 1}).Check(ctx, "", time.Now()); err != nil || !r.Allowed || r.Remaining != Unlimited {
		t.Fatalf("disabled: %+v %v", r, err)
	}
	var tk SemaphoreTicket
	if err := off.PrepareSemaphore("x", ConcurrencyConfig{MaxConcurrent: 1}).Acquire(ctx, "", &tk); err != nil || tk.Ticket != "" {
		t.Fatalf("disabled acquire: %v %+v", err, tk.Ticket)
	}

	st := &flakyStorage{Storage: NewMemoryStorage(nil)}
	defer st.Close()
	m, err := NewGuardManager(ctx, GuardConfig{Enabled: true}, &ManagerOptions{Logger: zap.NewNop(), Storage: st})
	if err != nil {
		t.Fatal(err)
	}
	st.down.Store(true)
	if r, err := m.PrepareRateLimit("x", RateLimitConfig{MaxRequests: 1}).Check(ctx, "", time.Now()); err != nil || !r.Allowed {
		t.Fatalf("fail open: %+v %v", r, err)
	}
	if err := m.PrepareSemaphore("x", ConcurrencyConfig{MaxConcurrent: 1}).Acquire(ctx, "", &tk); err != nil || tk.Ticket == "" || tk.Release(ctx) != nil {
		t.Fatalf("fail open acquire: %v %+v", err, tk.Ticket)
	}
}
