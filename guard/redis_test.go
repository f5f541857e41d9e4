package guard

import (
	"bufio"
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/codemode-gateway/caddy-codemode/guard/redistest"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// redisPair returns two managers with separate clients of one real Redis,
// like two gateways.
func redisPair(t *testing.T, cfg GuardConfig, clock *fakeClock) (*GuardManager, *GuardManager) {
	t.Helper()
	c1, prefix := redistest.Client(t)
	c2 := redis.NewClient(&redis.Options{Addr: c1.Options().Addr})
	t.Cleanup(func() { _ = c2.Close() })
	var ms [2]*GuardManager
	for i, c := range []*redis.Client{c1, c2} {
		cfg := cfg
		cfg.KeyPrefix = prefix
		cfg.Storage = &StorageConfig{Provider: ProviderRedis, Client: c}
		m, err := NewGuardManager(context.Background(), cfg, &ManagerOptions{Now: clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Destroy(context.Background()) })
		ms[i] = m
	}
	return ms[0], ms[1]
}

func TestRedisRateLimitExactAcrossManagers(t *testing.T) {
	ctx := context.Background()
	clock := newFakeClock(t0 + 30000)
	a, b := redisPair(t, GuardConfig{Enabled: true}, clock)
	cfg := &RateLimitConfig{MaxRequests: 100}
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for i := range 2000 {
		m := a
		if i%2 == 1 {
			m = b
		}
		wg.Go(func() {
			r, err := m.CheckRateLimit(ctx, "tool", cfg, PartitionKeyContext{})
			if err != nil {
				t.Error(err)
				return
			}
			if r.Allowed {
				allowed.Add(1)
			}
		})
	}
	wg.Wait()
	if n := allowed.Load(); n != 100 {
		t.Fatalf("allowed %d of 2000 against a limit of 100, want exactly 100", n)
	}
}

// The Redis script and the memory store compute the same sliding window.
func TestRedisSlidingWindowMatchesMemory(t *testing.T) {
	ctx := context.Background()
	c, prefix := redistest.Client(t)
	clock := newFakeClock(t0)
	rs, _ := NewRedisStorage(StorageConfig{Client: c}, prefix, nil)
	ms := NewMemoryStorage(&MemoryStorageOptions{SweepInterval: -1})
	lr := NewSlidingWindowRateLimiter(rs, &LimiterOptions{Now: clock.Now})
	lm := NewSlidingWindowRateLimiter(ms, &LimiterOptions{Now: clock.Now})
	steps := []time.Duration{0, 100 * time.Millisecond, 300 * time.Millisecond, 700 * time.Millisecond, 250 * time.Millisecond, 2 * time.Second, 10 * time.Millisecond}
	for i := range 120 {
		clock.Advance(steps[i%len(steps)])
		r1, err := lr.Check(ctx, "k", 7, 1000)
		if err != nil {
			t.Fatal(err)
		}
		r2, _ := lm.Check(ctx, "k", 7, 1000)
		if r1 != r2 {
			t.Fatalf("step %d: redis %+v, memory %+v", i, r1, r2)
		}
	}
	if err := lr.Reset(ctx, "k", 1000); err != nil {
		t.Fatal(err)
	}
	if r, _ := lr.Check(ctx, "k", 1, 1000); !r.Allowed {
		t.Fatal("denied after Reset")
	}
}

func TestRedisSemaphoreNeverExceedsMax(t *testing.T) {
	ctx := context.Background()
	clock := newFakeClock(t0)
	a, b := redisPair(t, GuardConfig{Enabled: true}, clock)
	cfg := &ConcurrencyConfig{MaxConcurrent: 5, QueueTimeoutMs: 60_000}
	var cur, peak, done atomic.Int64
	var wg sync.WaitGroup
	for i := range 200 {
		m := a
		if i%2 == 1 {
			m = b
		}
		wg.Go(func() {
			tk, err := m.AcquireSemaphore(ctx, "tool", cfg, PartitionKeyContext{})
			if err != nil || tk == nil {
				t.Error("acquire:", err)
				return
			}
			n := cur.Add(1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			time.Sleep(time.Millisecond) // hold the slot so that holders overlap
			cur.Add(-1)
			if err := tk.Release(ctx); err != nil {
				t.Error(err)
			}
			done.Add(1)
		})
	}
	wg.Wait()
	if p := peak.Load(); p > 5 {
		t.Fatalf("peak concurrency %d across two managers, want <= 5", p)
	}
	if done.Load() != 200 {
		t.Fatalf("%d of 200 finished", done.Load())
	}
	if n, _ := a.Semaphore().GetActiveCount(ctx, BuildStorageKey("tool", "global", suffixSem)); n != 0 {
		t.Fatalf("%d tickets left", n)
	}
}

func TestRedisQueuedWaiterWakesOnRelease(t *testing.T) {
	ctx := context.Background()
	clock := newFakeClock(t0)
	a, b := redisPair(t, GuardConfig{Enabled: true}, clock)
	// No poll and no queue deadline can wake a waiter during the test: only
	// the release published over pub/sub can. (Timing the wake-up against
	// the poll schedule instead failed on a loaded machine.)
	noPolling(a.sem)
	noPolling(b.sem)
	cfg := &ConcurrencyConfig{MaxConcurrent: 1, QueueTimeoutMs: int64(time.Hour / time.Millisecond)}
	held, err := a.AcquireSemaphore(ctx, "tool", cfg, PartitionKeyContext{})
	if err != nil || held == nil {
		t.Fatal(err)
	}
	var lat []time.Duration
	for round := range 5 {
		woke := make(chan time.Time, 1)
		var tk *SemaphoreTicket
		go func() {
			var err error
			tk, err = b.AcquireSemaphore(ctx, "tool", cfg, PartitionKeyContext{})
			if err != nil {
				t.Error(err)
			}
			woke <- time.Now()
		}()
		// Release once the waiter watches and its subscription is active
		// (go-redis subscribes asynchronously; a release published before
		// that is lost, and in production the next poll finds the slot).
		waitRedisWatcher(t, b.Storage().(*RedisStorage), "tool:global:sem")
		waitRedisSubscribers(t, b.Storage().(*RedisStorage), int64(min(round+1, 2)))
		released := time.Now()
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case w := <-woke:
			lat = append(lat, w.Sub(released))
		case <-time.After(time.Minute):
			t.Fatalf("round %d: the waiter was not woken by the release notification", round)
		}
		if tk == nil {
			t.Fatal("waiter got no ticket")
		}
		held = tk
		a, b = b, a
	}
	held.Release(ctx)
	slices.Sort(lat)
	t.Logf("wake-up after release: %v", lat)
}

// noPolling makes s's queued waiters poll only after an hour.
func noPolling(s *DistributedSemaphore) {
	s.pollMin, s.pollMax = time.Hour, time.Hour
}

// waitRedisSubscribers waits until s's release channel has n subscribers.
func waitRedisSubscribers(t *testing.T, s *RedisStorage, n int64) {
	t.Helper()
	for range 10000 {
		m, err := s.client.PubSubNumSub(context.Background(), s.channel).Result()
		if err != nil {
			t.Fatal(err)
		}
		if m[s.channel] >= n {
			return
		}
		time.Sleep(time.Millisecond) // polling a condition, not waiting for time
	}
	t.Fatalf("release channel has fewer than %d subscribers", n)
}

func waitRedisWatcher(t *testing.T, s *RedisStorage, key string) {
	t.Helper()
	for range 5000 {
		s.mu.Lock()
		n := len(s.waiters[key])
		s.mu.Unlock()
		if n > 0 {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("no waiter")
}

// TestRedisKilledHolderWithTimeout: a holder bound by a timeout (the
// guard's, a tool call's) that never releases (its gateway was killed)
// gives its slot back HoldMs after it took it, not after the 300 s TTL:
// other gateways are not locked out for five minutes.
func TestRedisKilledHolderWithTimeout(t *testing.T) {
	ctx := context.Background()
	clock := newFakeClock(t0)
	a, b := redisPair(t, GuardConfig{Enabled: true}, clock)
	cfg := ConcurrencyConfig{MaxConcurrent: 1}
	const timeoutMs = 10_000
	if tk, err := a.AcquireSemaphoreTimed(ctx, "tool", &cfg, PartitionKeyContext{}, timeoutMs); tk == nil || err != nil {
		t.Fatal(err) // never released: its gateway was killed
	}
	prepared := b.PrepareSemaphore("route", cfg).WithTimeout(timeoutMs)
	var held SemaphoreTicket
	if err := prepared.Acquire(ctx, "", &held); err != nil {
		t.Fatal(err) // never released either
	}
	var ge *GuardError
	if _, err := b.AcquireSemaphoreTimed(ctx, "tool", &cfg, PartitionKeyContext{}, timeoutMs); !errors.As(err, &ge) || ge.Code != CodeConcurrencyLimit {
		t.Fatalf("held slot: %v", err)
	}
	if err := prepared.Acquire(ctx, "", new(SemaphoreTicket)); !errors.As(err, &ge) || ge.Code != CodeConcurrencyLimit {
		t.Fatalf("held route slot: %v", err)
	}
	clock.Advance(time.Duration(HoldMs(timeoutMs)) * time.Millisecond)
	if tk, err := b.AcquireSemaphoreTimed(ctx, "tool", &cfg, PartitionKeyContext{}, timeoutMs); tk == nil || err != nil {
		t.Fatalf("a killed holder's ticket still holds the slot %v after it was taken: %v", time.Duration(HoldMs(timeoutMs))*time.Millisecond, err)
	}
	if err := prepared.Acquire(ctx, "", new(SemaphoreTicket)); err != nil {
		t.Fatalf("a killed holder's route ticket still holds the slot: %v", err)
	}
	// Without a timeout the ticket keeps the TTL.
	if tk, err := a.AcquireSemaphoreTimed(ctx, "untimed", &cfg, PartitionKeyContext{}, 0); tk == nil || err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Duration(HoldMs(timeoutMs)) * time.Millisecond)
	if _, err := b.AcquireSemaphore(ctx, "untimed", &cfg, PartitionKeyContext{}); !errors.As(err, &ge) || ge.Code != CodeConcurrencyLimit {
		t.Fatalf("an untimed ticket expired before the TTL: %v", err)
	}
}

func TestRedisExpiredTicketFreesSlot(t *testing.T) {
	ctx := context.Background()
	clock := newFakeClock(t0)
	a, b := redisPair(t, GuardConfig{Enabled: true}, clock)
	cfg := &ConcurrencyConfig{MaxConcurrent: 1}
	if tk, err := a.AcquireSemaphore(ctx, "tool", cfg, PartitionKeyContext{}); tk == nil || err != nil {
		t.Fatal(err) // never released: the holder crashed
	}
	_, err := b.AcquireSemaphore(ctx, "tool", cfg, PartitionKeyContext{})
	var ge *GuardError
	if !errors.As(err, &ge) || ge.Code != CodeConcurrencyLimit {
		t.Fatalf("held slot: %v", err)
	}
	clock.Advance(DefaultTicketTTLSeconds * time.Second)
	if n, _ := b.Semaphore().GetActiveCount(ctx, "tool:global:sem"); n != 0 {
		t.Fatalf("active %d after the TTL", n)
	}
	if tk, err := b.AcquireSemaphore(ctx, "tool", cfg, PartitionKeyContext{}); tk == nil || err != nil {
		t.Fatalf("expired ticket still holds the slot: %v", err)
	}
	if err := b.Semaphore().ForceReset(ctx, "tool:global:sem"); err != nil {
		t.Fatal(err)
	}
	if n, _ := a.Semaphore().GetActiveCount(ctx, "tool:global:sem"); n != 0 {
		t.Fatalf("active %d after ForceReset", n)
	}
}

func TestRedisStoppedAndRestarted(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	for _, mode := range []string{FailOpen, FailClosed} {
		t.Run(mode, func(t *testing.T) {
			core, logs := observer.New(zapcore.InfoLevel)
			clock := newFakeClock(t0)
			host, port := splitAddr(t, srv.Addr)
			m, err := NewGuardManager(ctx, GuardConfig{
				Enabled: true, KeyPrefix: "restart:" + mode + ":",
				Storage:           &StorageConfig{Provider: ProviderRedis, Host: host, Port: port, FailureMode: mode, TimeoutMs: 200},
				Global:            &RateLimitConfig{MaxRequests: 2},
				GlobalConcurrency: &ConcurrencyConfig{MaxConcurrent: 1, QueueTimeoutMs: 100},
			}, &ManagerOptions{Logger: zap.New(core), Now: clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Destroy(ctx)
			check := func() (RateLimitResult, error) { return m.CheckGlobalRateLimit(ctx, PartitionKeyContext{}) }
			if r, err := check(); err != nil || !r.Allowed {
				t.Fatalf("before stop: %+v %v", r, err)
			}
			// A waiter subscribes, so the pub/sub connection exists across the outage.
			tk, _ := m.AcquireGlobalSemaphore(ctx, PartitionKeyContext{})
			if _, err := m.AcquireGlobalSemaphore(ctx, PartitionKeyContext{}); err == nil {
				t.Fatal("second holder admitted")
			}
			_ = tk

			srv.Stop()
			for range 3 {
				r, err := check()
				tk, terr := m.AcquireGlobalSemaphore(ctx, PartitionKeyContext{})
				if mode == FailOpen {
					if err != nil || !r.Allowed || terr != nil || tk == nil {
						t.Fatalf("redis down, fail open: %+v %v / %v %v", r, err, tk, terr)
					}
					tk.Release(ctx)
				} else {
					assertGuardError(t, err, CodeStorageUnavailable, 503, func(*GuardError) bool { return true })
					assertGuardError(t, terr, CodeStorageUnavailable, 503, func(*GuardError) bool { return true })
				}
			}
			if n := logs.FilterMessage("guard storage unreachable; applying the failure mode until it recovers").Len(); n != 1 {
				t.Fatalf("%d outage log lines, want 1", n)
			}

			srv.Restart() // empty: counters and tickets are gone
			// Stale pooled connections may fail a few more commands (each
			// failure restarts the retry interval); then limits apply again.
			recovered := false
			for range 50 {
				clock.Advance(storageRetryInterval)
				r1, e1 := check()
				r2, e2 := check()
				r3, e3 := check()
				if e1 == nil && e2 == nil && e3 == nil && r1.Allowed && r2.Allowed && !r3.Allowed && r3.RetryAfterMs > 0 {
					recovered = true
					break
				}
				_ = m.RateLimiter().Reset(ctx, BuildStorageKey(GlobalEntity, "global", suffixRate), 0)
			}
			if !recovered {
				t.Fatal("limits not enforced again after the restart")
			}
			if n := logs.FilterMessage("guard storage reachable again").Len(); n < 1 {
				t.Fatal("no recovery log line")
			}
			// Semaphores work again, and pub/sub wakes a waiter after the restart.
			held, err := m.AcquireGlobalSemaphore(ctx, PartitionKeyContext{})
			if err != nil || held == nil {
				t.Fatalf("semaphore after restart: %v", err)
			}
			go func() { time.Sleep(20 * time.Millisecond); held.Release(ctx) }()
			m2 := m
			if tk, err := m2.AcquireSemaphore(ctx, GlobalEntity, &ConcurrencyConfig{MaxConcurrent: 1, QueueTimeoutMs: 5000}, PartitionKeyContext{}); err != nil || tk == nil {
				t.Fatalf("queued acquire after restart: %v", err)
			} else {
				tk.Release(ctx)
			}
		})
	}
}

func splitAddr(t *testing.T, addr string) (string, int) {
	t.Helper()
	var host string
	var port int
	for i := len(addr) - 1; i >= 0; i-- {
		if addr[i] == ':' {
			host = addr[:i]
			for _, c := range addr[i+1:] {
				port = port*10 + int(c-'0')
			}
			break
		}
	}
	return host, port
}

func BenchmarkRedisLimiterCheck(b *testing.B) {
	c, prefix := redistest.Client(b)
	rs, _ := NewRedisStorage(StorageConfig{Client: c}, prefix, nil)
	l := NewSlidingWindowRateLimiter(rs, nil)
	ctx := context.Background()
	keys := []string{"a:1:rate", "a:2:rate", "b:1:rate", "b:2:rate"}
	b.SetParallelism(16)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if _, err := l.Check(ctx, keys[i%len(keys)], 1<<40, 60000); err != nil {
				b.Error(err)
				return
			}
			i++
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "checks/s")
}

// TestRedisStalledAcquireLeavesNoSlot: an acquire sent to a Redis that
// stalls (SIGSTOP here; a long fork, a slow script, a frozen VM) fails by
// its timeout, and the failure mode answers; but the command waits in the
// server's socket buffer and runs when it continues, taking a slot that
// nobody holds until the ticket expires (the TTL, 300 s). With
// `concurrency 1` the route answered CONCURRENCY_LIMIT for five minutes
// after a 3 s stall. The next acquire of that key withdraws it.
func TestRedisStalledAcquireLeavesNoSlot(t *testing.T) {
	srv := redistest.Start(t)
	prefix := redistest.Prefix(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	s, err := NewRedisStorage(StorageConfig{Provider: ProviderRedis, Client: c}, prefix, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	now := time.Now().UnixMilli()
	const ttl = 300_000
	// The script loaded (EVALSHA runs), and a pooled connection on which
	// the stalled command will wait.
	if _, err := s.AcquireSlot(ctx, "warm", "w", 1, now, now+ttl); err != nil {
		t.Fatal(err)
	}

	srv.Pause()
	tctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = s.AcquireSlot(tctx, "k", "stalled", 1, now, now+ttl)
	cancel()
	if err == nil {
		t.Fatal("an acquire on a stopped Redis answered")
	}
	srv.Resume()
	other := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = other.Close() })
	deadline := time.Now().Add(30 * time.Second)
	for other.ZScore(ctx, prefix+"k", "stalled").Err() != nil { // the stalled command ran
		if time.Now().After(deadline) {
			t.Fatal("the stalled acquire never ran")
		}
		time.Sleep(10 * time.Millisecond)
	}
	ok, err := s.AcquireSlot(ctx, "k", "next", 1, now, now+ttl)
	if err != nil || !ok {
		t.Fatalf("the slot after the stall: %v %v (tickets %v)", ok, err, other.ZRange(ctx, prefix+"k", 0, -1).Val())
	}
	if n := other.ZCard(ctx, prefix+"k").Val(); n != 1 {
		t.Fatalf("%d tickets, want the new one only", n)
	}
}

// TestRedisLostReleaseLeavesNoSlot: a release that cannot reach Redis (a
// partition, Redis restarting elsewhere) left the slot taken until its
// ticket expired; the next acquire of the key that Redis answers now
// withdraws it.
func TestRedisLostReleaseLeavesNoSlot(t *testing.T) {
	c, prefix := redistest.Client(t)
	cut := redistest.NewCuttable(t, c.Options().Addr)
	s, err := NewRedisStorage(StorageConfig{Provider: ProviderRedis, Client: cut}, prefix, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	now := time.Now().UnixMilli()
	if ok, err := s.AcquireSlot(ctx, "k", "held", 1, now, now+300_000); !ok || err != nil {
		t.Fatal(ok, err)
	}
	cut.SetCut(true)
	if err := s.ReleaseSlot(ctx, "k", "held"); err == nil {
		t.Fatal("a release without Redis answered")
	}
	cut.SetCut(false)
	if ok, err := s.AcquireSlot(ctx, "k", "next", 1, now, now+300_000); !ok || err != nil {
		t.Fatalf("the slot after a lost release: %v %v (tickets %v)", ok, err, c.ZRange(ctx, prefix+"k", 0, -1).Val())
	}
}

// BenchmarkRedisAcquireRelease takes and returns a slot of a real Redis
// (the path of a concurrency limit on the Redis storage).
func BenchmarkRedisAcquireRelease(b *testing.B) {
	c, prefix := redistest.Client(b)
	rs, _ := NewRedisStorage(StorageConfig{Client: c}, prefix, nil)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		now := time.Now().UnixMilli()
		if ok, err := rs.AcquireSlot(ctx, "sem", "t", 1, now, now+60000); !ok || err != nil {
			b.Fatal(ok, err)
		}
		if err := rs.ReleaseSlot(ctx, "sem", "t"); err != nil {
			b.Fatal(err)
		}
	}
}

// heldConn is a connection to a real Redis whose writes, while hold is
// set, wait in the test instead of the network: a command delayed on its
// way (a congested link, a proxy's buffer) that reaches Redis after its
// client gave up and after a later command on another connection. Close
// while writes are held leaves the connection open until they are let
// through.
type heldConn struct {
	net.Conn
	hold   *atomic.Bool
	mu     sync.Mutex
	held   []byte
	closed bool
}

func (c *heldConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hold.Load() || len(c.held) > 0 {
		c.held = append(c.held, p...)
		return len(p), nil
	}
	return c.Conn.Write(p)
}

func (c *heldConn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	if len(c.held) > 0 {
		return nil
	}
	return c.Conn.Close()
}

// deliver writes the held bytes, reads Redis's answer (the command ran)
// and closes the connection if its client has.
func (c *heldConn) deliver(t *testing.T) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = c.Conn.SetDeadline(time.Now().Add(30 * time.Second)) // its client's has passed
	if _, err := c.Conn.Write(c.held); err != nil {
		t.Fatal(err)
	}
	c.held = nil
	if _, err := bufio.NewReader(c.Conn).ReadString('\n'); err != nil {
		t.Fatalf("the delayed command's answer: %v", err)
	}
	if c.closed {
		_ = c.Conn.Close()
	}
}

// heldClient is a client of a real Redis whose connections are heldConns.
type heldClient struct {
	*redis.Client
	hold  atomic.Bool
	mu    sync.Mutex
	conns []*heldConn
}

func newHeldClient(t *testing.T, addr string) *heldClient {
	hc := &heldClient{}
	hc.Client = redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			hc.mu.Lock()
			defer hc.mu.Unlock()
			c := &heldConn{Conn: conn, hold: &hc.hold}
			hc.conns = append(hc.conns, c)
			return c, nil
		}})
	t.Cleanup(func() { _ = hc.Client.Close() })
	return hc
}

// heldStorage is a Redis storage on a private redis-server through a
// heldClient, its key prefix and the server's address.
func heldStorage(t *testing.T) (*RedisStorage, *heldClient, string, string) {
	srv := redistest.Start(t)
	prefix := redistest.Prefix(t)
	hc := newHeldClient(t, srv.Addr)
	s, err := NewRedisStorage(StorageConfig{Provider: ProviderRedis, Client: hc.Client}, prefix, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s, hc, prefix, srv.Addr
}

// lose runs op with its writes held and a 200 ms deadline: it must fail
// without Redis's answer. It returns the connection holding its command.
func (hc *heldClient) lose(t *testing.T, op func(context.Context) error) *heldConn {
	t.Helper()
	hc.hold.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	err := op(ctx)
	cancel()
	hc.hold.Store(false)
	if err == nil {
		t.Fatal("a command that never left answered")
	}
	hc.mu.Lock()
	defer hc.mu.Unlock()
	for _, c := range hc.conns {
		c.mu.Lock()
		n := len(c.held)
		c.mu.Unlock()
		if n > 0 {
			return c
		}
	}
	t.Fatal("no connection holds the lost command")
	return nil
}

// TestRedisLateAcquireAfterWithdrawal: an acquire whose answer was lost
// (its client timed out) reaches Redis only after the next acquire of its
// key, which withdrew it, has run. That acquire found nothing to withdraw,
// so the late one took a slot nobody holds, and a `concurrency 1` route
// answered CONCURRENCY_LIMIT until the ticket expired (the TTL, 300 s).
// The withdrawal now leaves a mark in the key that the late acquire finds:
// it takes no slot and removes the mark. A reset of the key's slots
// (ForceReset) between the withdrawal and the late acquire keeps the mark:
// it deleted the key, marks included, and the late acquire took the slot.
func TestRedisLateAcquireAfterWithdrawal(t *testing.T) {
	t.Run("released", func(t *testing.T) { lateAcquireAfterWithdrawal(t, false) })
	t.Run("reset", func(t *testing.T) { lateAcquireAfterWithdrawal(t, true) })
}

func lateAcquireAfterWithdrawal(t *testing.T, reset bool) {
	s, hc, prefix, addr := heldStorage(t)
	ctx := context.Background()
	now := time.Now().UnixMilli()
	const ttl = 300_000
	// The script loaded, so that the late acquire is one EVALSHA.
	if _, err := s.AcquireSlot(ctx, "warm", "w", 1, now, now+ttl); err != nil {
		t.Fatal(err)
	}
	late := hc.lose(t, func(ctx context.Context) error {
		_, err := s.AcquireSlot(ctx, "k", "late", 1, now, now+ttl)
		return err
	})

	// The next acquire withdraws it (nothing there yet) and takes the slot;
	// its request ends (or the key's slots are reset). Then the late
	// acquire reaches Redis.
	if ok, err := s.AcquireSlot(ctx, "k", "next", 1, now, now+ttl); !ok || err != nil {
		t.Fatalf("the next acquire: %v %v", ok, err)
	}
	end := func() error { return s.ReleaseSlot(ctx, "k", "next") }
	if reset {
		end = func() error { return s.ResetSlots(ctx, "k") }
	}
	if err := end(); err != nil {
		t.Fatal(err)
	}
	late.deliver(t)

	other := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = other.Close() })
	if ok, err := s.AcquireSlot(ctx, "k", "third", 1, now, now+ttl); !ok || err != nil {
		t.Fatalf("the slot after the late acquire: %v %v (members %v)", ok, err, other.ZRangeWithScores(ctx, prefix+"k", 0, -1).Val())
	}
	if m := other.ZRange(ctx, prefix+"k", 0, -1).Val(); !slices.Equal(m, []string{"third"}) {
		t.Fatalf("members %q, want the third ticket only", m)
	}
	if n, err := s.ActiveSlots(ctx, "k", now); n != 1 || err != nil {
		t.Fatalf("active slots %d %v", n, err)
	}
}

// TestRedisLostWindowCheckCounts pins a decision: a rate-limit check whose
// answer was lost (the failure mode answered its request) counts its hit
// when its command reaches Redis, whenever that is. With failure mode open
// the request was served, so the hit is right; closed, the window holds one
// hit more than the requests it let through, until the window rolls. Taking
// it back would need every check to leave a record in Redis (the client
// cannot know beforehand which answer it will lose): a write per request
// for an error of one hit per lost answer.
func TestRedisLostWindowCheckCounts(t *testing.T) {
	s, hc, _, _ := heldStorage(t)
	ctx := context.Background()
	const win = 600_000
	now := time.Now().UnixMilli()
	ws := now - now%win
	if _, err := s.SlidingWindow(ctx, "warm", ws, win, now, 10); err != nil {
		t.Fatal(err)
	}
	late := hc.lose(t, func(ctx context.Context) error {
		_, err := s.SlidingWindow(ctx, "k", ws, win, now, 10)
		return err
	})
	st, err := s.SlidingWindow(ctx, "k", ws, win, now, 10)
	if err != nil || st.Current != 1 {
		t.Fatalf("the next check: %+v %v", st, err)
	}
	late.deliver(t)
	if st, err := s.SlidingWindow(ctx, "k", ws, win, now, 10); err != nil || st.Current != 3 {
		t.Fatalf("after the lost check ran: %+v %v, want 3 hits (the lost one counted)", st, err)
	}
}
