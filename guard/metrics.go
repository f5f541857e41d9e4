package guard

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/codemode-gateway/caddy-codemode/internal/telemetry"
)

// Rule kinds of the guard's decisions (label "rule").
const (
	RuleRateLimit         = "rate_limit"
	RuleGlobalRateLimit   = "global_rate_limit"
	RuleConcurrency       = "concurrency"
	RuleGlobalConcurrency = "global_concurrency"
	RuleIPFilter          = "ip_filter"
	RuleTimeout           = "timeout"
)

// Outcomes of the guard's decisions (label "outcome").
const (
	OutcomeAllowed            = "allowed"
	OutcomeRateLimited        = "rate_limited"
	OutcomeConcurrencyLimited = "concurrency_limited"
	OutcomeQueueTimeout       = "queue_timeout"
	OutcomeIPBlocked          = "ip_blocked"
	OutcomeTimedOut           = "timed_out"
	OutcomeStorageUnavailable = "storage_unavailable"
)

// Metrics are the guard's Prometheus metrics. One Metrics serves any number
// of managers (give the same one to each, and register it once per
// registry); a nil *Metrics records nothing.
type Metrics struct {
	decisions *prometheus.CounterVec
	storage   *prometheus.CounterVec
	inUse     *prometheus.GaugeVec
	queueWait *prometheus.HistogramVec
	all       telemetry.Collectors

	// The series of the known rules and outcomes, looked up once: every
	// guarded request records several decisions, and a vector's lookup
	// hashes its label values each time.
	decided [len(rules)]*telemetry.Series[prometheus.Counter] // by rule, then outcome
	held    *telemetry.Series[prometheus.Gauge]
	waits   *telemetry.Series[prometheus.Observer]
}

var (
	rules    = [...]string{RuleRateLimit, RuleGlobalRateLimit, RuleConcurrency, RuleGlobalConcurrency, RuleIPFilter, RuleTimeout}
	outcomes = [...]string{OutcomeAllowed, OutcomeRateLimited, OutcomeConcurrencyLimited, OutcomeQueueTimeout, OutcomeIPBlocked, OutcomeTimedOut, OutcomeStorageUnavailable}
)

// decision is the counter of one rule and outcome.
func (m *Metrics) decision(rule, outcome string) prometheus.Counter {
	for i, r := range rules {
		if r == rule {
			return m.decided[i].Of(outcome)
		}
	}
	return m.decisions.WithLabelValues(rule, outcome)
}

// NewMetrics returns the guard's metrics, registered nowhere yet.
func NewMetrics() *Metrics {
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "codemode", Subsystem: "guard", Name: "decisions_total",
			Help: "Guard decisions by rule kind (rate_limit, global_rate_limit, concurrency, global_concurrency, ip_filter, timeout) and outcome (allowed, rate_limited, concurrency_limited, queue_timeout, ip_blocked, timed_out, storage_unavailable).",
		}, []string{"rule", "outcome"}),
		storage: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "codemode", Subsystem: "guard", Name: "storage_unavailable_total",
			Help: "Guard decisions taken without the storage backend, by rule kind and the failure mode applied (open: allowed, closed: refused with STORAGE_UNAVAILABLE).",
		}, []string{"rule", "failure_mode"}),
		inUse: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "codemode", Subsystem: "guard", Name: "semaphore_in_use",
			Help: "Concurrency slots held by this process, by rule kind (concurrency, global_concurrency).",
		}, []string{"rule"}),
		queueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "codemode", Subsystem: "guard", Name: "queue_wait_seconds",
			Help:    "Time to obtain a concurrency slot (storage round trip and queueing), by outcome (allowed, queue_timeout).",
			Buckets: telemetry.DurationBuckets,
		}, []string{"outcome"}),
	}
	m.all = telemetry.Collectors{m.decisions, m.storage, m.inUse, m.queueWait}
	// The rules that use the storage backend export their storage failures
	// from the start at 0, so that increase(), rate() and alerts see the
	// first one (Prometheus does not count a series' first sample as an
	// increase).
	for _, rule := range []string{RuleRateLimit, RuleGlobalRateLimit, RuleConcurrency, RuleGlobalConcurrency} {
		for _, mode := range []string{FailOpen, FailClosed} {
			m.storage.WithLabelValues(rule, mode)
		}
	}
	for i, rule := range rules {
		m.decided[i] = telemetry.NewSeries(func(o ...string) prometheus.Counter {
			return m.decisions.WithLabelValues(rule, o[0])
		}, outcomes[:]...)
	}
	m.held = telemetry.NewSeries(m.inUse.WithLabelValues, rules[:]...)
	m.waits = telemetry.NewSeries(m.queueWait.WithLabelValues, outcomes[:]...)
	// The outcomes a wait ends with, exported (empty) from the start as
	// the counters are, so that rate() sees the first wait.
	for _, o := range []string{OutcomeAllowed, OutcomeQueueTimeout} {
		m.waits.Of(o)
	}
	return m
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.all.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.all.Collect(ch)
}

func (m *Metrics) decide(rule, outcome string) {
	if m != nil {
		m.decision(rule, outcome).Inc()
	}
}

func (m *Metrics) storageUnavailable(rule string, failOpen bool) {
	if m == nil {
		return
	}
	m.decision(rule, OutcomeStorageUnavailable).Inc()
	mode := FailClosed
	if failOpen {
		mode = FailOpen
	}
	m.storage.WithLabelValues(rule, mode).Inc()
}

func (m *Metrics) waited(outcome string, d time.Duration) {
	if m != nil {
		m.waits.Of(outcome).Observe(d.Seconds())
	}
}

// ruleMetrics are the series one rule's decisions update, looked up once by
// a prepared limit instead of at every decision. The zero value (with rule
// set) looks them up per decision; without metrics it records nothing.
type ruleMetrics struct {
	rule            string
	denied          string             // the rule's refusal outcome
	allowed, refuse prometheus.Counter // decisions: allowed, denied
	inUse           prometheus.Gauge   // slots held (concurrency rules)
	waitAllowed     prometheus.Observer
}

// forRule resolves rule's series; denied is its refusal outcome
// (rate_limited or concurrency_limited).
func (m *Metrics) forRule(rule, denied string) ruleMetrics {
	rm := ruleMetrics{rule: rule, denied: denied}
	if m != nil {
		rm.allowed, rm.refuse = m.decision(rule, OutcomeAllowed), m.decision(rule, denied)
		rm.inUse = m.held.Of(rule)
		rm.waitAllowed = m.waits.Of(OutcomeAllowed)
	}
	return rm
}

// forDecisions is forRule for a rule that only decides (the IP filter):
// its decision series alone, so that no slot or wait series of it appears.
func (m *Metrics) forDecisions(rule, denied string) ruleMetrics {
	rm := ruleMetrics{rule: rule, denied: denied}
	if m != nil {
		rm.allowed, rm.refuse = m.decision(rule, OutcomeAllowed), m.decision(rule, denied)
	}
	return rm
}

// decide counts an allowed or refused decision of the rule.
func (rm *ruleMetrics) decide(m *Metrics, allowed bool) {
	switch {
	case rm.allowed == nil && allowed:
		m.decide(rm.rule, OutcomeAllowed)
	case rm.allowed == nil:
		m.decide(rm.rule, rm.denied)
	case allowed:
		rm.allowed.Inc()
	default:
		rm.refuse.Inc()
	}
}

// acquired records a slot obtained after waiting d and returns the in-use
// gauge now counting it (nil without metrics).
func (rm *ruleMetrics) acquired(m *Metrics, d time.Duration) prometheus.Gauge {
	if m == nil {
		return nil
	}
	g, w := rm.inUse, rm.waitAllowed
	if g == nil {
		g, w = m.held.Of(rm.rule), m.waits.Of(OutcomeAllowed)
	}
	w.Observe(d.Seconds())
	g.Add(1)
	return g
}

// ObserveTimeout records the timeout decision of a run guarded with
// WithTimeout: err is what WithTimeout returned.
func (m *GuardManager) ObserveTimeout(err error) {
	var ge *GuardError
	if errors.As(err, &ge) && ge.Code == CodeExecutionTimeout {
		m.metrics.decide(RuleTimeout, OutcomeTimedOut)
		return
	}
	m.metrics.decide(RuleTimeout, OutcomeAllowed)
}
