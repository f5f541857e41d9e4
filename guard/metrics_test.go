package guard

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
)

// TestMetricsCountDecisions: each rule kind's decisions land in
// codemode_guard_decisions_total under their outcome, the in-use gauge
// follows tickets, and storage outages count with the failure mode.
func TestMetricsCountDecisions(t *testing.T) {
	ctx := context.Background()
	mt := NewMetrics()
	clock := newFakeClock(t0)
	st := &flakyStorage{Storage: NewMemoryStorage(nil)}
	defer st.Close()
	m, err := NewGuardManager(ctx, GuardConfig{
		Enabled:            true,
		Storage:            &StorageConfig{FailureMode: FailClosed},
		Global:             &RateLimitConfig{MaxRequests: 1},
		DefaultConcurrency: &ConcurrencyConfig{MaxConcurrent: 1, QueueTimeoutMs: 50},
		IpFilter:           &IpFilterConfig{DenyList: []string{"10.0.0.0/8"}},
	}, &ManagerOptions{Storage: st, Now: clock.Now, Metrics: mt})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Destroy(ctx)
	val := func(rule, outcome string) float64 {
		return testutil.ToFloat64(mt.decisions.WithLabelValues(rule, outcome))
	}

	m.CheckGlobalRateLimit(ctx, PartitionKeyContext{})
	m.CheckGlobalRateLimit(ctx, PartitionKeyContext{})
	if a, l := val(RuleGlobalRateLimit, OutcomeAllowed), val(RuleGlobalRateLimit, OutcomeRateLimited); a != 1 || l != 1 {
		t.Fatalf("global rate limit: allowed %v limited %v, want 1 and 1", a, l)
	}

	tk, err := m.AcquireSemaphore(ctx, "tool", nil, PartitionKeyContext{})
	if err != nil || tk == nil {
		t.Fatal(tk, err)
	}
	if v := testutil.ToFloat64(mt.inUse.WithLabelValues(RuleConcurrency)); v != 1 {
		t.Fatalf("in use %v, want 1", v)
	}
	// The second caller queues (50 ms, real time: the semaphore polls) and
	// times out.
	if _, err := m.AcquireSemaphore(ctx, "tool", nil, PartitionKeyContext{}); err == nil {
		t.Fatal("second slot granted")
	}
	_ = tk.Release(ctx)
	_ = tk.Release(ctx) // a second release changes nothing
	if v := testutil.ToFloat64(mt.inUse.WithLabelValues(RuleConcurrency)); v != 0 {
		t.Fatalf("in use after release %v, want 0", v)
	}
	if a, q := val(RuleConcurrency, OutcomeAllowed), val(RuleConcurrency, OutcomeQueueTimeout); a != 1 || q != 1 {
		t.Fatalf("concurrency: allowed %v queue timeout %v", a, q)
	}
	if n := testutil.CollectAndCount(mt.queueWait, "codemode_guard_queue_wait_seconds"); n != 2 {
		t.Fatalf("%d queue wait series, want allowed and queue_timeout", n)
	}

	m.CheckIpFilter("10.1.2.3")
	m.CheckIpFilter("192.0.2.1")
	if b, a := val(RuleIPFilter, OutcomeIPBlocked), val(RuleIPFilter, OutcomeAllowed); b != 1 || a != 1 {
		t.Fatalf("ip filter: blocked %v allowed %v", b, a)
	}

	m.ObserveTimeout(NewExecutionTimeoutError("tool", 10))
	m.ObserveTimeout(nil)
	if o, a := val(RuleTimeout, OutcomeTimedOut), val(RuleTimeout, OutcomeAllowed); o != 1 || a != 1 {
		t.Fatalf("timeout: timed out %v allowed %v", o, a)
	}

	st.down.Store(true)
	clock.Advance(time.Minute)
	m.CheckGlobalRateLimit(ctx, PartitionKeyContext{})
	if v := testutil.ToFloat64(mt.storage.WithLabelValues(RuleGlobalRateLimit, FailClosed)); v != 1 {
		t.Fatalf("storage unavailable (closed) %v, want 1", v)
	}
	if v := val(RuleGlobalRateLimit, OutcomeStorageUnavailable); v != 1 {
		t.Fatalf("storage_unavailable decisions %v, want 1", v)
	}

	// The collector passes a pedantic registry (Caddy's kind), twice.
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(mt)
	if err := reg.Register(mt); err == nil {
		t.Fatal("second registration of the same collector not reported")
	}
	if n, err := testutil.GatherAndCount(reg); err != nil || n == 0 {
		t.Fatalf("gather: %d %v", n, err)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP codemode_guard_semaphore_in_use Concurrency slots held by this process, by rule kind (concurrency, global_concurrency).
# TYPE codemode_guard_semaphore_in_use gauge
codemode_guard_semaphore_in_use{rule="concurrency"} 0
`), "codemode_guard_semaphore_in_use"); err != nil {
		t.Fatal(err)
	}
}

// TestNilMetrics: a manager without metrics works (nil records nothing).
func TestNilMetrics(t *testing.T) {
	m := newTestManager(t, GuardConfig{Enabled: true, Global: &RateLimitConfig{MaxRequests: 1},
		GlobalConcurrency: &ConcurrencyConfig{MaxConcurrent: 1}}, newFakeClock(t0))
	ctx := context.Background()
	if r, err := m.CheckGlobalRateLimit(ctx, PartitionKeyContext{}); err != nil || !r.Allowed {
		t.Fatal(r, err)
	}
	tk, err := m.AcquireGlobalSemaphore(ctx, PartitionKeyContext{})
	if err != nil {
		t.Fatal(err)
	}
	_ = tk.Release(ctx)
	m.ObserveTimeout(nil)
}

// TestMetricsPreparedLimits: prepared limits, which resolve their series
// once, record the same decisions, in-use gauge and queue waits as the
// manager's own calls.
func TestMetricsPreparedLimits(t *testing.T) {
	ctx := context.Background()
	mt := NewMetrics()
	clock := newFakeClock(t0)
	m, err := NewGuardManager(ctx, GuardConfig{Enabled: true}, &ManagerOptions{Now: clock.Now, Metrics: mt})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Destroy(ctx)
	val := func(rule, outcome string) float64 {
		return testutil.ToFloat64(mt.decisions.WithLabelValues(rule, outcome))
	}
	p := m.PrepareRateLimit(GlobalEntity, RateLimitConfig{MaxRequests: 1})
	p.Check(ctx, "", clock.Now())
	p.Check(ctx, "", clock.Now())
	named := m.PrepareRateLimit("tool", RateLimitConfig{MaxRequests: 5})
	named.Check(ctx, "", clock.Now())
	if a, l, n := val(RuleGlobalRateLimit, OutcomeAllowed), val(RuleGlobalRateLimit, OutcomeRateLimited), val(RuleRateLimit, OutcomeAllowed); a != 1 || l != 1 || n != 1 {
		t.Fatalf("rate limits: global allowed %v limited %v, named allowed %v; want 1, 1, 1", a, l, n)
	}
	s := m.PrepareSemaphore("tool", ConcurrencyConfig{MaxConcurrent: 1})
	var tk, second SemaphoreTicket
	if err := s.Acquire(ctx, "", &tk); err != nil {
		t.Fatal(err)
	}
	if v := testutil.ToFloat64(mt.inUse.WithLabelValues(RuleConcurrency)); v != 1 {
		t.Fatalf("in use %v, want 1", v)
	}
	if err := s.Acquire(ctx, "", &second); err == nil {
		t.Fatal("second slot granted")
	}
	_ = tk.Release(ctx)
	_ = tk.Release(ctx)
	if v := testutil.ToFloat64(mt.inUse.WithLabelValues(RuleConcurrency)); v != 0 {
		t.Fatalf("in use after release %v, want 0", v)
	}
	if a, l := val(RuleConcurrency, OutcomeAllowed), val(RuleConcurrency, OutcomeConcurrencyLimited); a != 1 || l != 1 {
		t.Fatalf("concurrency: allowed %v limited %v", a, l)
	}
	var hm dto.Metric
	if err := mt.queueWait.WithLabelValues(OutcomeAllowed).(prometheus.Histogram).Write(&hm); err != nil || hm.GetHistogram().GetSampleCount() != 1 {
		t.Fatalf("queue waits observed: %v %v, want 1", hm.GetHistogram().GetSampleCount(), err)
	}
}

// TestStorageFailuresExportedAtZero: storage_unavailable_total has a series
// per storage rule and failure mode from the start, so that Prometheus'
// increase() and the alerting rules see the first failure; queue_wait_seconds
// one per outcome (empty), so that rate() sees the first wait.
func TestStorageFailuresExportedAtZero(t *testing.T) {
	if n := testutil.CollectAndCount(NewMetrics(), "codemode_guard_queue_wait_seconds"); n != 2 {
		t.Errorf("%d queue_wait_seconds series before any wait, want 2 (allowed, queue_timeout)", n)
	}
	if n := testutil.CollectAndCount(NewMetrics(), "codemode_guard_storage_unavailable_total"); n != 8 {
		t.Errorf("%d storage_unavailable_total series before any failure, want 8", n)
	}
}
