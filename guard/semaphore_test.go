package guard

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func newTestSemaphore(clock *fakeClock) (*DistributedSemaphore, *MemoryStorage) {
	st := NewMemoryStorage(&MemoryStorageOptions{Now: clock.Now, SweepInterval: -1})
	return NewDistributedSemaphore(st, &LimiterOptions{Now: clock.Now}), st
}

func TestSemaphoreAcquireRelease(t *testing.T) {
	ctx := context.Background()
	s, _ := newTestSemaphore(newFakeClock(t0))
	t1, err := s.Acquire(ctx, "k", 2, 0, "tool")
	if err != nil || t1 == nil || !uuidRE.MatchString(t1.Ticket) {
		t.Fatalf("first acquire: %+v %v", t1, err)
	}
	t2, _ := s.Acquire(ctx, "k", 2, 0, "tool")
	if t2 == nil || t2.Ticket == t1.Ticket {
		t.Fatalf("second acquire: %+v", t2)
	}
	if t3, err := s.Acquire(ctx, "k", 2, 0, "tool"); t3 != nil || err != nil {
		t.Fatalf("third acquire with no queue: %+v %v, want nil, nil", t3, err)
	}
	if n, _ := s.GetActiveCount(ctx, "k"); n != 2 {
		t.Fatalf("active %d, want 2", n)
	}
	if err := t1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	_ = t1.Release(ctx) // idempotent
	var nilTicket *SemaphoreTicket
	_ = nilTicket.Release(ctx)
	if n, _ := s.GetActiveCount(ctx, "k"); n != 1 {
		t.Fatalf("active %d after release, want 1", n)
	}
	if err := s.ForceReset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.GetActiveCount(ctx, "k"); n != 0 {
		t.Fatalf("active %d after ForceReset, want 0", n)
	}
	_ = t2.Release(ctx) // releasing a reset ticket is harmless
}

func TestSemaphoreTicketTTL(t *testing.T) {
	ctx := context.Background()
	clock := newFakeClock(t0)
	s, st := newTestSemaphore(clock)
	if tk, _ := s.Acquire(ctx, "k", 1, 0, "tool"); tk == nil {
		t.Fatal("no ticket")
	} // never released: a crashed holder
	if tk, _ := s.Acquire(ctx, "k", 1, 0, "tool"); tk != nil {
		t.Fatal("slot free while held")
	}
	clock.Advance(299 * time.Second)
	if tk, _ := s.Acquire(ctx, "k", 1, 0, "tool"); tk != nil {
		t.Fatal("slot free before the TTL")
	}
	clock.Advance(time.Second)
	if n, _ := s.GetActiveCount(ctx, "k"); n != 0 {
		t.Fatalf("active %d after TTL, want 0", n)
	}
	if tk, _ := s.Acquire(ctx, "k", 1, 0, "tool"); tk == nil {
		t.Fatal("expired ticket still holds the slot")
	}
	// Custom TTL.
	s2 := NewDistributedSemaphore(st, &LimiterOptions{Now: clock.Now, TicketTTLSeconds: 5})
	s2.Acquire(ctx, "k2", 1, 0, "tool")
	clock.Advance(5 * time.Second)
	if tk, _ := s2.Acquire(ctx, "k2", 1, 0, "tool"); tk == nil {
		t.Fatal("5 s ticket still holds the slot")
	}
	clock.Advance(time.Hour)
	st.Sweep()
	if _, n := st.Len(); n != 0 {
		t.Fatalf("%d semaphore keys after sweep, want 0", n)
	}
}

func TestSemaphoreQueueWakesOnRelease(t *testing.T) {
	ctx := context.Background()
	s, _ := newTestSemaphore(newFakeClock(t0))
	// No poll and no queue deadline can wake a waiter during the test: only
	// the release notification can. (Timing the wake-up against the poll
	// schedule instead failed on a loaded machine.)
	noPolling(s)
	queue := int64(time.Hour / time.Millisecond)
	held, _ := s.Acquire(ctx, "k", 1, 0, "tool")
	var lat []time.Duration
	for round := range 5 {
		got := make(chan *SemaphoreTicket, 1)
		go func() {
			tk, err := s.Acquire(ctx, "k", 1, queue, "tool")
			if err != nil {
				t.Error(err)
			}
			got <- tk
		}()
		waitForWatchers(t, s.store.(*MemoryStorage), "k")
		released := time.Now()
		held.Release(ctx)
		var tk *SemaphoreTicket
		select {
		case tk = <-got:
		case <-time.After(time.Minute):
			t.Fatalf("round %d: the queued waiter was not woken by the release", round)
		}
		if tk == nil {
			t.Fatalf("round %d: queued waiter got no ticket", round)
		}
		lat = append(lat, time.Since(released))
		held = tk
	}
	held.Release(ctx)
	slices.Sort(lat)
	t.Logf("wake-up after release: %v", lat)
}

// waitForWatchers waits until a waiter watches key, so that the test
// releases only once someone is queued.
func waitForWatchers(t *testing.T, st *MemoryStorage, key string) {
	t.Helper()
	sh := st.shard(key)
	for range 5000 {
		sh.mu.Lock()
		n := len(sh.waiters[key])
		sh.mu.Unlock()
		if n > 0 {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("no waiter queued")
}

func TestSemaphoreQueueTimeout(t *testing.T) {
	ctx := context.Background()
	s, _ := newTestSemaphore(newFakeClock(t0))
	s.Acquire(ctx, "k", 1, 0, "tool")
	tk, err := s.Acquire(ctx, "k", 1, 5, "tool")
	var ge *GuardError
	if tk != nil || !errors.As(err, &ge) || ge.Code != CodeQueueTimeout || ge.StatusCode != 429 || ge.QueueTimeoutMs != 5 || ge.EntityName != "tool" {
		t.Fatalf("got %+v, %v; want QUEUE_TIMEOUT", tk, err)
	}
	// A cancelled context ends the wait with its error.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Acquire(cctx, "k", 1, 10_000, "tool"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait: %v", err)
	}
}

func TestSemaphoreNeverExceedsMax(t *testing.T) {
	ctx := context.Background()
	s, _ := newTestSemaphore(newFakeClock(t0))
	var cur, peak atomic.Int64
	var wg sync.WaitGroup
	for range 200 {
		wg.Go(func() {
			tk, err := s.Acquire(ctx, "k", 5, 10_000, "tool")
			if err != nil || tk == nil {
				t.Error("acquire:", err)
				return
			}
			n := cur.Add(1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			cur.Add(-1)
			tk.Release(ctx)
		})
	}
	wg.Wait()
	if p := peak.Load(); p > 5 || p < 1 {
		t.Fatalf("peak concurrency %d, want 1..5", p)
	}
}

// TestTicketIsUUIDv4: tickets are version 4 UUIDs in the 8-4-4-4-12 form,
// distinct from each other.
func TestTicketIsUUIDv4(t *testing.T) {
	re := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	seen := map[string]bool{}
	for range 1000 {
		u := newUUID()
		if !re.MatchString(u) || seen[u] {
			t.Fatalf("ticket %q: not a UUID v4, or repeated", u)
		}
		seen[u] = true
	}
	// Every hex digit position is filled: over many tickets each position
	// but the version digit takes more than one value.
	for i := range 36 {
		vals := map[byte]bool{}
		for u := range seen {
			vals[u[i]] = true
		}
		if want := i == 8 || i == 13 || i == 14 || i == 18 || i == 23; want != (len(vals) == 1) {
			t.Fatalf("position %d takes %d values", i, len(vals))
		}
	}
}
