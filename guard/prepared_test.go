package guard

import (
	"context"
	"net/netip"
	"strings"
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
			if err := s.Acquire(ctx, "ignored for a global limit", &held); err != nil || held.Key == "" {
				t.Fatalf("prepared acquire: %v %+v", err, held.Key)
			}
			// Redis slots are UUID tickets; the memory storage numbers a
			// prepared semaphore's slots instead.
			if uuid := uuidRE.MatchString(held.Ticket); uuid != (backend == "redis") {
				t.Fatalf("prepared ticket %q on %s", held.Ticket, backend)
			}
			if tk, err := m.AcquireSemaphore(ctx, "tool", &global, PartitionKeyContext{}); tk != nil || err == nil {
				t.Fatalf("unprepared acquire while the prepared one holds the slot: %v %v", tk, err)
			}
			var second SemaphoreTicket
			assertGuardError(t, s.Acquire(ctx, "", &second), CodeConcurrencyLimit, 429, func(*GuardError) bool { return true })
			if second.Ticket != "" || second.Key != "" || second.Release(ctx) != nil {
				t.Fatalf("a refused acquire filled its ticket: %q %q", second.Ticket, second.Key)
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

// TestMemoryNumberedSlots: the numbered slots of prepared semaphores and
// the UUID tickets of AcquireSlot count against one limit of the memory
// storage; an expired numbered slot is dropped when the semaphore is full
// and by the sweep; ActiveSlots counts both; after ResetSlots a numbered
// slot's release returns nothing (the new slots stay taken).
func TestMemoryNumberedSlots(t *testing.T) {
	ctx := context.Background()
	st := NewMemoryStorage(&MemoryStorageOptions{SweepInterval: -1, Now: func() time.Time { return time.UnixMilli(5000) }})
	key := []byte("e:p:sem")
	a, n := st.acquireNumbered(key, 2, 1000, 2000)
	if a == nil || n == 0 || a.key != string(key) {
		t.Fatalf("first numbered slot: %v %d", a, n)
	}
	if ok, _ := st.AcquireSlot(ctx, string(key), "uuid-1", 2, 1000, 9000); !ok {
		t.Fatal("a UUID ticket beside one numbered slot of two")
	}
	if b, _ := st.acquireNumbered(key, 2, 1500, 9000); b != nil {
		t.Fatal("a third slot of two")
	}
	if c, _ := st.ActiveSlots(ctx, string(key), 1500); c != 2 {
		t.Fatalf("active %d, want 2", c)
	}
	// At 2000 the numbered slot has expired: the full semaphore drops it.
	b, m := st.acquireNumbered(key, 2, 2000, 9000)
	if b != a || m == n {
		t.Fatalf("after expiry: %v %d (first %d)", b, m, n)
	}
	a.releaseNumbered(n) // expired and dropped: returns nothing
	if c, _ := st.ActiveSlots(ctx, string(key), 2000); c != 2 {
		t.Fatalf("active %d after releasing an expired slot, want 2", c)
	}
	b.releaseNumbered(m)
	b.releaseNumbered(m) // twice: the second finds nothing
	if c, _ := st.ActiveSlots(ctx, string(key), 2000); c != 1 {
		t.Fatalf("active %d after a release, want 1", c)
	}

	// Reset: a slot taken before it returns nothing when released.
	old, k := st.acquireNumbered(key, 2, 2000, 9000)
	if err := st.ResetSlots(ctx, string(key)); err != nil {
		t.Fatal(err)
	}
	x, _ := st.acquireNumbered(key, 2, 2000, 9000)
	y, _ := st.acquireNumbered(key, 2, 2000, 9000)
	if x == nil || y == nil || x == old {
		t.Fatal("two slots after a reset")
	}
	old.releaseNumbered(k)
	if z, _ := st.acquireNumbered(key, 2, 2000, 9000); z != nil {
		t.Fatal("a release from before the reset freed a slot taken after it")
	}

	// The sweep (clock at 5000) drops expired numbered slots and the
	// semaphores left empty.
	st2 := NewMemoryStorage(&MemoryStorageOptions{SweepInterval: -1, Now: func() time.Time { return time.UnixMilli(5000) }})
	st2.acquireNumbered(key, 1, 1000, 4000)
	if _, sems := st2.Len(); sems != 1 {
		t.Fatalf("%d semaphores", sems)
	}
	st2.Sweep()
	if _, sems := st2.Len(); sems != 0 {
		t.Fatalf("%d semaphores after the sweep, want 0", sems)
	}
}

// TestPreparedMemoryAllocs: on the memory storage a prepared check of a
// per-request partition, and a prepared acquire and release, allocate
// nothing once the partition's key is stored (metrics on), also when the
// key escapes the partition's colons (an IPv6 address).
func TestPreparedMemoryAllocs(t *testing.T) {
	ctx := context.Background()
	st := NewMemoryStorage(&MemoryStorageOptions{SweepInterval: -1})
	defer st.Close()
	m, err := NewGuardManager(ctx, GuardConfig{Enabled: true}, &ManagerOptions{Storage: st, Metrics: NewMetrics()})
	if err != nil {
		t.Fatal(err)
	}
	perIP := PartitionKey{Strategy: PartitionIP}
	r := m.PrepareRateLimit("e", RateLimitConfig{MaxRequests: 1 << 40, PartitionBy: perIP})
	s := m.PrepareSemaphore("e", ConcurrencyConfig{MaxConcurrent: 10, PartitionBy: perIP})
	round := func() {
		now := m.Now()
		for _, ip := range []string{"10.1.2.3", "2001:db8::1"} { // the second one escaped
			if res, err := r.Check(ctx, ip, now); err != nil || !res.Allowed {
				t.Fatalf("check: %+v %v", res, err)
			}
			var tk SemaphoreTicket
			if err := s.AcquireAt(ctx, ip, now, &tk); err != nil {
				t.Fatal(err)
			}
			if err := tk.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	round()
	if n := testing.AllocsPerRun(1000, round); n != 0 {
		t.Fatalf("%v allocations per check, acquire and release, want 0", n)
	}
	if c, _ := st.ActiveSlots(ctx, "e:10.1.2.3:sem", time.Now().UnixMilli()); c != 0 {
		t.Fatalf("%d slots held after the releases", c)
	}
}

// TestMemoryKeyFollowsResetAndSweep: a prepared limit of a global
// partition keeps its memory window and semaphore between requests; after
// a reset or a sweep removed them it counts on the ones the storage has
// now, shared with the manager's unprepared checks.
func TestMemoryKeyFollowsResetAndSweep(t *testing.T) {
	ctx := context.Background()
	clock := newFakeClock(t0)
	m := newTestManager(t, GuardConfig{Enabled: true}, clock)
	cfg := RateLimitConfig{MaxRequests: 2, WindowMs: 1000}
	p := m.PrepareRateLimit("g", cfg)
	if p.memKey == nil {
		t.Fatal("a global limit on the memory storage has no memory key")
	}
	check := func(what string, want bool) {
		t.Helper()
		if r, err := p.Check(ctx, "", clock.Now()); err != nil || r.Allowed != want {
			t.Fatalf("%s: %+v %v, want allowed %v", what, r, err, want)
		}
	}
	check("1st", true)
	check("2nd", true)
	check("3rd", false)
	if err := m.RateLimiter().Reset(ctx, p.fixedKey, 1000); err != nil {
		t.Fatal(err)
	}
	check("after the reset", true)
	if r, _ := m.CheckRateLimit(ctx, "g", &cfg, PartitionKeyContext{}); !r.Allowed || r.Remaining != 0 {
		t.Fatalf("unprepared after the reset: %+v, want the prepared count shared", r)
	}
	check("full again", false)
	clock.Advance(3 * time.Second)
	m.Storage().(*MemoryStorage).Sweep()
	if w, _ := m.Storage().(*MemoryStorage).Len(); w != 0 {
		t.Fatalf("%d windows after the sweep", w)
	}
	check("after the sweep", true)
	if r, _ := m.CheckRateLimit(ctx, "g", &cfg, PartitionKeyContext{}); !r.Allowed || r.Remaining != 0 {
		t.Fatalf("unprepared after the sweep: %+v", r)
	}

	one := ConcurrencyConfig{MaxConcurrent: 1}
	s := m.PrepareSemaphore("g", one)
	var t1, t2 SemaphoreTicket
	if err := s.Acquire(ctx, "", &t1); err != nil {
		t.Fatal(err)
	}
	if err := m.Semaphore().ForceReset(ctx, s.fixedKey); err != nil {
		t.Fatal(err)
	}
	if err := s.Acquire(ctx, "", &t2); err != nil {
		t.Fatalf("after the reset: %v", err)
	}
	if tk, err := m.AcquireSemaphore(ctx, "g", &one, PartitionKeyContext{}); tk != nil || err == nil {
		t.Fatal("unprepared acquire while the slot taken after the reset is held")
	}
	_ = t1.Release(ctx) // taken before the reset: frees nothing
	if tk, err := m.AcquireSemaphore(ctx, "g", &one, PartitionKeyContext{}); tk != nil || err == nil {
		t.Fatal("a release from before the reset freed the slot")
	}
	_ = t2.Release(ctx)
	tk, err := m.AcquireSemaphore(ctx, "g", &one, PartitionKeyContext{})
	if err != nil || tk == nil {
		t.Fatalf("after the release: %v", err)
	}
	_ = tk.Release(ctx)
}

// BenchmarkPreparedCheckClientKey is BenchmarkPreparedCheckPartition
// with the partition computed from the address as codemode_guard does
// (ClientPrefixes.KeyAddr of the parsed address): the IPv4 address is
// its own key, the IPv6 one is written as its /64.
func BenchmarkPreparedCheckClientKey(b *testing.B) {
	ctx := context.Background()
	st := NewMemoryStorage(&MemoryStorageOptions{SweepInterval: -1})
	defer st.Close()
	m, err := NewGuardManager(ctx, GuardConfig{Enabled: true}, &ManagerOptions{Storage: st})
	if err != nil {
		b.Fatal(err)
	}
	p := m.PrepareRateLimit("zone:per_ip", RateLimitConfig{MaxRequests: 1 << 40, PartitionBy: PartitionKey{Strategy: PartitionIP}})
	var prefixes ClientPrefixes
	for _, ip := range []string{"203.0.113.7", "2001:db8:85a3::8a2e:370:7334"} {
		name := "ipv4"
		if strings.Contains(ip, ":") {
			name = "ipv6"
		}
		a := netip.MustParseAddr(ip)
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			now := m.Now()
			for b.Loop() {
				if r, err := p.Check(ctx, prefixes.KeyAddr(ip, a), now); err != nil || !r.Allowed {
					b.Fatal(r, err)
				}
			}
		})
	}
}

// BenchmarkPreparedCheckPartition is a prepared per-IP rate-limit check on
// the memory storage, the codemode_guard hot path, for an IPv4 partition
// (written into the key as it is) and an IPv6 one (its colons escaped).
func BenchmarkPreparedCheckPartition(b *testing.B) {
	ctx := context.Background()
	st := NewMemoryStorage(&MemoryStorageOptions{SweepInterval: -1})
	defer st.Close()
	m, err := NewGuardManager(ctx, GuardConfig{Enabled: true}, &ManagerOptions{Storage: st})
	if err != nil {
		b.Fatal(err)
	}
	p := m.PrepareRateLimit("zone:per_ip", RateLimitConfig{MaxRequests: 1 << 40, PartitionBy: PartitionKey{Strategy: PartitionIP}})
	for _, ip := range []string{"203.0.113.7", "2001:db8:85a3::8a2e:370:7334"} {
		name := "ipv4"
		if strings.Contains(ip, ":") {
			name = "ipv6"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			now := m.Now()
			for b.Loop() {
				if r, err := p.Check(ctx, ip, now); err != nil || !r.Allowed {
					b.Fatal(r, err)
				}
			}
		})
	}
}
