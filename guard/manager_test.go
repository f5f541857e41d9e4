package guard

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/codemode-gateway/caddy-codemode/guard/redistest"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

func newTestManager(t *testing.T, cfg GuardConfig, clock *fakeClock) *GuardManager {
	t.Helper()
	m, err := NewGuardManager(context.Background(), cfg, &ManagerOptions{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Destroy(context.Background()) })
	return m
}

func TestManagerRateLimits(t *testing.T) {
	ctx := context.Background()
	m := newTestManager(t, GuardConfig{
		Enabled:          true,
		Global:           &RateLimitConfig{MaxRequests: 3, WindowMs: 1000},
		DefaultRateLimit: &RateLimitConfig{MaxRequests: 1, PartitionBy: PartitionKey{Strategy: PartitionUserID}},
	}, newFakeClock(t0))
	if m.Config().KeyPrefix != DefaultKeyPrefix {
		t.Fatalf("key prefix %q", m.Config().KeyPrefix)
	}
	alice := PartitionKeyContext{UserID: "alice"}
	bob := PartitionKeyContext{UserID: "bob"}
	// Default rate limit, partitioned by user.
	if r, _ := m.CheckRateLimit(ctx, "search", nil, alice); !r.Allowed {
		t.Fatal("alice denied")
	}
	if r, _ := m.CheckRateLimit(ctx, "search", nil, alice); r.Allowed {
		t.Fatal("alice allowed twice")
	}
	if r, _ := m.CheckRateLimit(ctx, "search", nil, bob); !r.Allowed {
		t.Fatal("bob shares alice's counter")
	}
	if r, _ := m.CheckRateLimit(ctx, "other", nil, alice); !r.Allowed {
		t.Fatal("another entity shares the counter")
	}
	// An entity's own config wins over the default.
	own := &RateLimitConfig{MaxRequests: 2}
	for i, want := range []bool{true, true, false} {
		if r, _ := m.CheckRateLimit(ctx, "exec", own, alice); r.Allowed != want {
			t.Fatalf("own config request %d: allowed=%v", i, r.Allowed)
		}
	}
	// Global.
	for i, want := range []bool{true, true, true, false} {
		r, err := m.CheckGlobalRateLimit(ctx, bob)
		if err != nil || r.Allowed != want {
			t.Fatalf("global request %d: %+v %v", i, r, err)
		}
	}
	// No config: allowed, unlimited.
	m2 := newTestManager(t, GuardConfig{Enabled: true}, newFakeClock(t0))
	r, err := m2.CheckRateLimit(ctx, "x", nil, alice)
	if err != nil || !r.Allowed || r.Remaining != Unlimited || r.ResetMs != 0 {
		t.Fatalf("no config: %+v %v", r, err)
	}
	if r, _ := m2.CheckGlobalRateLimit(ctx, alice); !r.Allowed {
		t.Fatal("global unset denied")
	}
}

func TestManagerDisabled(t *testing.T) {
	ctx := context.Background()
	m := newTestManager(t, GuardConfig{
		Enabled: false, Global: &RateLimitConfig{MaxRequests: 1}, GlobalConcurrency: &ConcurrencyConfig{MaxConcurrent: 1},
		DefaultTimeout: &TimeoutConfig{ExecuteMs: 5}, IpFilter: &IpFilterConfig{DefaultAction: "deny"},
	}, newFakeClock(t0))
	for range 3 {
		if r, _ := m.CheckGlobalRateLimit(ctx, PartitionKeyContext{}); !r.Allowed {
			t.Fatal("disabled guard denied")
		}
		if tk, err := m.AcquireGlobalSemaphore(ctx, PartitionKeyContext{}); tk != nil || err != nil {
			t.Fatalf("disabled guard gave %v %v", tk, err)
		}
	}
	if m.CheckIpFilter("1.2.3.4") != nil || m.TimeoutMs(nil) != 0 {
		t.Fatal("disabled guard filters or times out")
	}
}

func TestManagerErrorKinds(t *testing.T) {
	ctx := context.Background()
	m := newTestManager(t, GuardConfig{
		Enabled:            true,
		GlobalConcurrency:  &ConcurrencyConfig{MaxConcurrent: 1},
		DefaultConcurrency: &ConcurrencyConfig{MaxConcurrent: 1, QueueTimeoutMs: 1, PartitionBy: PartitionKey{Strategy: "session"}},
		DefaultTimeout:     &TimeoutConfig{ExecuteMs: 30000},
		IpFilter:           &IpFilterConfig{AllowList: []string{"10.0.0.0/8"}, DenyList: []string{"10.6.6.6"}, DefaultAction: "deny"},
	}, newFakeClock(t0))
	pc := PartitionKeyContext{SessionID: "s1"}

	// CONCURRENCY_LIMIT (global, no queue).
	tk, err := m.AcquireGlobalSemaphore(ctx, pc)
	if err != nil || tk == nil {
		t.Fatal(err)
	}
	_, err = m.AcquireGlobalSemaphore(ctx, pc)
	assertGuardError(t, err, CodeConcurrencyLimit, 429, func(ge *GuardError) bool { return ge.MaxConcurrent == 1 && ge.EntityName == GlobalEntity })
	tk.Release(ctx)

	// QUEUE_TIMEOUT (default concurrency, queued 1 ms).
	held, _ := m.AcquireSemaphore(ctx, "exec", nil, pc)
	_, err = m.AcquireSemaphore(ctx, "exec", nil, pc)
	assertGuardError(t, err, CodeQueueTimeout, 429, func(ge *GuardError) bool { return ge.QueueTimeoutMs == 1 && ge.EntityName == "exec" })
	// Another session has its own slot.
	if tk, err := m.AcquireSemaphore(ctx, "exec", nil, PartitionKeyContext{SessionID: "s2"}); tk == nil || err != nil {
		t.Fatalf("session partition: %v %v", tk, err)
	}
	held.Release(ctx)
	if n, _ := m.Semaphore().GetActiveCount(ctx, BuildStorageKey("exec", "s1", suffixSem)); n != 0 {
		t.Fatalf("active %d after release", n)
	}

	// No config applies: nil, nil.
	m2 := newTestManager(t, GuardConfig{Enabled: true}, newFakeClock(t0))
	if tk, err := m2.AcquireSemaphore(ctx, "x", nil, pc); tk != nil || err != nil {
		t.Fatalf("no config: %v %v", tk, err)
	}

	// EXECUTION_TIMEOUT via WithTimeout and the default timeout.
	if ms := m.TimeoutMs(nil); ms != 30000 {
		t.Fatalf("TimeoutMs(nil) = %d", ms)
	}
	if ms := m.TimeoutMs(&TimeoutConfig{ExecuteMs: 1}); ms != 1 {
		t.Fatalf("TimeoutMs(own) = %d", ms)
	}
	_, err = WithTimeout(ctx, m.TimeoutMs(&TimeoutConfig{ExecuteMs: 1}), "exec", func(ctx context.Context) (int, error) { <-ctx.Done(); return 0, ctx.Err() })
	assertGuardError(t, err, CodeExecutionTimeout, 408, func(ge *GuardError) bool { return ge.TimeoutMs == 1 })

	// IP_BLOCKED and IP_NOT_ALLOWED.
	r := m.CheckIpFilter("10.6.6.6")
	assertGuardError(t, r.Err("10.6.6.6"), CodeIPBlocked, 403, func(ge *GuardError) bool { return ge.ClientIP == "10.6.6.6" })
	r = m.CheckIpFilter("8.8.8.8")
	assertGuardError(t, r.Err("8.8.8.8"), CodeIPNotAllowed, 403, func(ge *GuardError) bool { return ge.ClientIP == "8.8.8.8" })
	if r := m.CheckIpFilter("10.1.1.1"); r == nil || !r.Allowed || r.Reason != ReasonAllowlisted {
		t.Fatalf("allowed IP: %+v", r)
	}
	if m.CheckIpFilter("") != nil || m2.CheckIpFilter("1.2.3.4") != nil {
		t.Fatal("CheckIpFilter without ip or filter is not nil")
	}
	if !m.IsIpAllowListed("10.1.1.1") || m.IsIpAllowListed("") || m2.IsIpAllowListed("10.1.1.1") {
		t.Fatal("IsIpAllowListed")
	}

	// RATE_LIMIT and STORAGE_UNAVAILABLE constructors.
	assertGuardError(t, NewRateLimitError("x", 5, 100), CodeRateLimit, 429, func(ge *GuardError) bool { return ge.RetryAfterMs == 100 })
	cause := errors.New("dial tcp: refused")
	err = NewStorageUnavailableError(cause)
	assertGuardError(t, err, CodeStorageUnavailable, 503, func(ge *GuardError) bool { return ge.RetryAfterMs == 1000 })
	if !errors.Is(err, cause) {
		t.Fatal("STORAGE_UNAVAILABLE does not wrap its cause")
	}
}

func assertGuardError(t *testing.T, err error, code string, status int, extra func(*GuardError) bool) {
	t.Helper()
	var ge *GuardError
	if !errors.As(err, &ge) {
		t.Fatalf("error %v is not a *GuardError", err)
	}
	if ge.Code != code || ge.StatusCode != status || ge.Message == "" || !extra(ge) {
		t.Fatalf("got %+v, want %s %d", ge, code, status)
	}
	if ge.Error() == "" {
		t.Fatal("empty Error()")
	}
}

func TestNewGuardManagerRejectsBadConfig(t *testing.T) {
	_, err := NewGuardManager(context.Background(), GuardConfig{Enabled: true, Global: &RateLimitConfig{MaxRequests: -1}}, nil)
	if err == nil || err.Error() != "invalid guard config: global: maxRequests: must be positive, got -1" {
		t.Fatalf("error = %v", err)
	}
}

// flakyStorage fails every operation while down is set; it exercises the
// failure modes without a network (the Redis tests stop a real server).
type flakyStorage struct {
	Storage
	down atomic.Bool
}

var errDown = errors.New("connection refused")

func (f *flakyStorage) SlidingWindow(ctx context.Context, key string, ws, w, now, max int64) (WindowState, error) {
	if f.down.Load() {
		return WindowState{}, errDown
	}
	return f.Storage.SlidingWindow(ctx, key, ws, w, now, max)
}

func (f *flakyStorage) AcquireSlot(ctx context.Context, key, ticket string, max, now, exp int64) (bool, error) {
	if f.down.Load() {
		return false, errDown
	}
	return f.Storage.AcquireSlot(ctx, key, ticket, max, now, exp)
}

func TestManagerFailureModes(t *testing.T) {
	ctx := context.Background()
	for _, mode := range []string{FailOpen, FailClosed} {
		t.Run(mode, func(t *testing.T) {
			core, logs := observer.New(zapcore.InfoLevel)
			clock := newFakeClock(t0)
			st := &flakyStorage{Storage: NewMemoryStorage(nil)}
			defer st.Close()
			m, err := NewGuardManager(ctx, GuardConfig{
				Enabled: true, Storage: &StorageConfig{FailureMode: mode},
				Global: &RateLimitConfig{MaxRequests: 1}, GlobalConcurrency: &ConcurrencyConfig{MaxConcurrent: 1},
			}, &ManagerOptions{Logger: zap.New(core), Storage: st, Now: clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			st.down.Store(true)
			for range 3 {
				r, err := m.CheckGlobalRateLimit(ctx, PartitionKeyContext{})
				tk, terr := m.AcquireGlobalSemaphore(ctx, PartitionKeyContext{})
				if mode == FailOpen {
					if err != nil || !r.Allowed || terr != nil || tk == nil || tk.Release(ctx) != nil {
						t.Fatalf("fail open: %+v %v %v %v", r, err, tk, terr)
					}
				} else {
					assertGuardError(t, err, CodeStorageUnavailable, 503, func(*GuardError) bool { return true })
					assertGuardError(t, terr, CodeStorageUnavailable, 503, func(*GuardError) bool { return true })
				}
			}
			if n := logs.FilterMessage("guard storage unreachable; applying the failure mode until it recovers").Len(); n != 1 {
				t.Fatalf("%d outage log lines, want 1", n)
			}
			st.down.Store(false)
			// Storage is not asked again until the retry interval passed.
			if _, err := m.CheckGlobalRateLimit(ctx, PartitionKeyContext{}); (err != nil) != (mode == FailClosed) {
				t.Fatalf("within the retry interval: %v", err)
			}
			clock.Advance(storageRetryInterval)
			if r, err := m.CheckGlobalRateLimit(ctx, PartitionKeyContext{}); err != nil || !r.Allowed {
				t.Fatalf("after recovery: %+v %v", r, err)
			}
			if r, _ := m.CheckGlobalRateLimit(ctx, PartitionKeyContext{}); r.Allowed {
				t.Fatal("limit not applied after recovery")
			}
			if n := logs.FilterMessage("guard storage reachable again").Len(); n != 1 {
				t.Fatalf("%d recovery log lines, want 1", n)
			}
			// A shared storage is not closed by Destroy.
			m.Destroy(ctx)
			if _, err := st.Storage.SlidingWindow(ctx, "x", 0, 1000, 0, 1); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestDestroyStopsGoroutines(t *testing.T) {
	ctx := context.Background()
	c, prefix := redistest.Client(t)
	runtime.GC()
	before := runtime.NumGoroutine()
	for range 3 {
		mem, err := NewGuardManager(ctx, GuardConfig{Enabled: true}, nil)
		if err != nil {
			t.Fatal(err)
		}
		rm, err := NewGuardManager(ctx, GuardConfig{Enabled: true, KeyPrefix: prefix,
			Storage: &StorageConfig{Provider: ProviderRedis, Host: c.Options().Addr[:strings.LastIndexByte(c.Options().Addr, ':')],
				Port: atoi(c.Options().Addr[strings.LastIndexByte(c.Options().Addr, ':')+1:])}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		// Start the pub/sub subscription with a queued waiter.
		cfg := &ConcurrencyConfig{MaxConcurrent: 1, QueueTimeoutMs: 1}
		held, _ := rm.AcquireSemaphore(ctx, "x", cfg, PartitionKeyContext{})
		if _, err := rm.AcquireSemaphore(ctx, "x", cfg, PartitionKeyContext{}); err == nil {
			t.Fatal("second holder admitted")
		}
		held.Release(ctx)
		if err := mem.Destroy(ctx); err != nil {
			t.Fatal(err)
		}
		if err := rm.Destroy(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for range 200 {
		if runtime.NumGoroutine() <= before {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	buf := make([]byte, 1<<16)
	t.Fatalf("%d goroutines after Destroy, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// TestManagerFixedKeys checks that the storage keys kept for global
// partitions are the keys built per request, that a per-request partition
// is never kept, and that rate and semaphore keys stay apart.
func TestManagerFixedKeys(t *testing.T) {
	m, err := NewGuardManager(context.Background(), GuardConfig{Enabled: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Destroy(context.Background())
	pc := PartitionKeyContext{ClientIP: "10.0.0.1", SessionID: "s1", UserID: "u1"}
	for _, p := range []PartitionKey{{}, {Strategy: PartitionGlobal}, {Strategy: PartitionIP}, {Strategy: PartitionSession},
		{Strategy: PartitionUserID}, {Func: func(PartitionKeyContext) string { return "f" }}} {
		for _, suffix := range []string{suffixRate, suffixSem} {
			for range 2 { // built, then kept
				want := BuildStorageKey("e", ResolvePartitionKey(p, pc), suffix)
				if got := m.storageKey("e", p, pc, suffix); got != want {
					t.Errorf("storageKey(%+v, %s) = %q, want %q", p.Strategy, suffix, got, want)
				}
			}
		}
	}
	if n := m.fixedCount.Load(); n != 2 {
		t.Errorf("kept %d keys, want 2 (the global partition's rate and semaphore keys)", n)
	}
	pc.ClientIP = "10.0.0.2"
	if got := m.storageKey("e", PartitionKey{Strategy: PartitionIP}, pc, suffixRate); got != "e:10.0.0.2:rate" {
		t.Errorf("per-IP key after another IP: %q", got)
	}
	// Past the bound, keys are still right, just not kept.
	m.fixedCount.Store(maxFixedKeys)
	if got := m.storageKey("other", PartitionKey{}, pc, suffixRate); got != "other:global:rate" {
		t.Errorf("key past the bound: %q", got)
	}
	if _, kept := m.fixedKeys[0].Load("other"); kept {
		t.Error("a key past the bound was kept")
	}
}

// TestStorageKeysKeepPartsApart: an entity and a partition are both free to
// hold ':' (a tool "math:add", an IPv6 address, a value from a caller's
// header), so "a" partitioned "b:x" and "a:b" partitioned "x" must not
// count in one bucket: a caller choosing its partition could otherwise
// spend another entity's limit (or, were only ':' escaped, choose "b%3Ax"
// for "b:x"). Checked for unprepared and prepared rate
// limits and semaphores, on the memory storage and on Redis.
func TestStorageKeysKeepPartsApart(t *testing.T) {
	byValue := PartitionKey{Func: func(pc PartitionKeyContext) string { return pc.UserID }}
	pairs := [][2][2]string{ // {entity, partition} twice
		{{"a", "b:x"}, {"a:b", "x"}},
		{{"a", "b%3Ax"}, {"a:b", "x"}},
		{{"a", "b%3Ax"}, {"a", "b:x"}}, // only with '%' escaped too
		{{"a%3Ab", "x"}, {"a:b", "x"}},
		{{"tool", "2001:db8::1"}, {"tool:2001", "db8::1"}},
	}
	storages := map[string]func(t *testing.T) *GuardManager{
		"memory": func(t *testing.T) *GuardManager {
			return newTestManager(t, GuardConfig{Enabled: true}, newFakeClock(t0))
		},
		"redis": func(t *testing.T) *GuardManager {
			m, _ := redisPair(t, GuardConfig{Enabled: true}, newFakeClock(t0))
			return m
		},
	}
	for name, newManager := range storages {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			m := newManager(t)
			rate := RateLimitConfig{MaxRequests: 1, PartitionBy: byValue}
			conc := ConcurrencyConfig{MaxConcurrent: 1, PartitionBy: byValue}
			for i, pair := range pairs {
				for j, ep := range pair {
					entity, pc := ep[0], PartitionKeyContext{UserID: ep[1]}
					// Each pair gets entities of its own per way of checking.
					unprepared, prepared := fmt.Sprint(i, "u", entity), fmt.Sprint(i, "p", entity)
					if r, err := m.CheckRateLimit(ctx, unprepared, &rate, pc); err != nil || !r.Allowed {
						t.Errorf("pair %d, %d: rate limit of %q partition %q: %+v %v (counted with the other)", i, j, entity, ep[1], r, err)
					}
					if r, err := m.PrepareRateLimit(prepared, rate).Check(ctx, ep[1], m.Now()); err != nil || !r.Allowed {
						t.Errorf("pair %d, %d: prepared rate limit of %q partition %q: %+v %v", i, j, entity, ep[1], r, err)
					}
					if _, err := m.AcquireSemaphore(ctx, unprepared, &conc, pc); err != nil {
						t.Errorf("pair %d, %d: semaphore of %q partition %q: %v", i, j, entity, ep[1], err)
					}
					var tk SemaphoreTicket
					if err := m.PrepareSemaphore(prepared, conc).Acquire(ctx, ep[1], &tk); err != nil {
						t.Errorf("pair %d, %d: prepared semaphore of %q partition %q: %v", i, j, entity, ep[1], err)
					}
				}
			}
		})
	}
}
