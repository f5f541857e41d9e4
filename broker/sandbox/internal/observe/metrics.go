// Package observe holds the sandbox's Prometheus metrics, OpenTelemetry spans
// and zap logging: what broker/sandbox gives its engines as an
// engine.Recorder and an engine.Logger. It does not import the engine, and
// the engine does not import it (nor Prometheus, OpenTelemetry or zap), so
// a worker process, which runs only the engine, initialises none of them.
package observe

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/codemode-gateway/caddy-codemode/internal/telemetry"
)

// Metrics are the sandbox's Prometheus metrics: scripts by outcome, and for
// worker pools the workers by state, the queue, worker starts and deaths
// and the workers' resident memory. One Metrics serves any number of
// engines (give each the same one; register it once per registry); a nil
// *Metrics records nothing.
type Metrics struct {
	scripts       *prometheus.CounterVec
	queueWait     *prometheus.HistogramVec
	deaths        *prometheus.CounterVec
	startDuration prometheus.Histogram
	startFailures prometheus.Counter
	all           telemetry.Collectors

	workers, queued, rss, rssMax, memLimit *prometheus.Desc

	mu    sync.Mutex
	pools map[any]struct{}
}

// NewMetrics returns the sandbox's metrics, registered nowhere yet. Each
// of causes (of worker deaths) and of waitOutcomes (of queue waits) is
// exported at 0 from the start.
func NewMetrics(causes, waitOutcomes []string) *Metrics {
	m := &Metrics{
		scripts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "codemode", Subsystem: "sandbox", Name: "scripts_total",
			Help: "Scripts run, by engine (worker, inprocess), status (ok, syntax_error, illegal_access, runtime_error, tool_error, timeout, engine_error) and error code (ok when none).",
		}, []string{"engine", "status", "code"}),
		queueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "codemode", Subsystem: "sandbox", Name: "queue_wait_seconds",
			Help:    "Time an execution waited in the queue for a free worker, by outcome (acquired, queue_timeout, aborted). Executions that found an idle worker do not wait.",
			Buckets: telemetry.DurationBuckets,
		}, []string{"outcome"}),
		deaths: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "codemode", Subsystem: "sandbox", Name: "worker_deaths_total",
			Help: "Worker processes that ended, by cause (memory, crash, protocol, timeout, aborted, recycle, scale_down, shutdown).",
		}, []string{"cause"}),
		startDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "codemode", Subsystem: "sandbox", Name: "worker_start_duration_seconds",
			Help:    "Time from starting a worker process to its handshake.",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}),
		startFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "codemode", Subsystem: "sandbox", Name: "worker_start_failures_total",
			Help: "Worker processes that failed to start or to complete their handshake.",
		}),
		workers: prometheus.NewDesc("codemode_sandbox_workers",
			"Worker processes of the pools of this process, by state (idle, busy, starting).", []string{"state"}, nil),
		queued: prometheus.NewDesc("codemode_sandbox_queue_length",
			"Executions waiting for a free worker.", nil, nil),
		rss: prometheus.NewDesc("codemode_sandbox_workers_resident_memory_bytes",
			"Resident memory of all worker processes (from /proc; 0 where it cannot be read).", nil, nil),
		rssMax: prometheus.NewDesc("codemode_sandbox_worker_resident_memory_max_bytes",
			"Resident memory of the largest worker process.", nil, nil),
		memLimit: prometheus.NewDesc("codemode_sandbox_worker_memory_limit_bytes",
			"The memory cap (RLIMIT_DATA) of each worker, the largest over the pools; 0 when uncapped.", nil, nil),
		pools: map[any]struct{}{},
	}
	m.all = telemetry.Collectors{m.scripts, m.queueWait, m.deaths, m.startDuration, m.startFailures}
	// Every cause is exported from the start at 0: Prometheus does not
	// count a series' first sample as an increase, so the first crash
	// would otherwise never show in increase() or fire an alert.
	for _, cause := range causes {
		m.deaths.WithLabelValues(cause)
	}
	// The histogram's outcomes too (empty), so that a dashboard's rate()
	// sees the first wait and a panel reads 0 rather than "no data".
	for _, outcome := range waitOutcomes {
		m.queueWait.WithLabelValues(outcome)
	}
	return m
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.all.Describe(ch)
	for _, d := range []*prometheus.Desc{m.workers, m.queued, m.rss, m.rssMax, m.memLimit} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: the counters, and the state of
// the live pools read now.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.all.Collect(ch)
	m.mu.Lock()
	pools := make([]gaugeSource, 0, len(m.pools))
	for p := range m.pools {
		if g, ok := p.(gaugeSource); ok {
			pools = append(pools, g)
		}
	}
	m.mu.Unlock()
	var idle, busy, starting, queued int
	var rss, rssMax, limit int64
	for _, p := range pools {
		pids, i, b, s, q, l := p.Gauges()
		idle, busy, starting, queued = idle+i, busy+b, starting+s, queued+q
		limit = max(limit, l)
		for _, pid := range pids {
			r := residentBytes(pid)
			rss += r
			rssMax = max(rssMax, r)
		}
	}
	ch <- prometheus.MustNewConstMetric(m.workers, prometheus.GaugeValue, float64(idle), "idle")
	ch <- prometheus.MustNewConstMetric(m.workers, prometheus.GaugeValue, float64(busy), "busy")
	ch <- prometheus.MustNewConstMetric(m.workers, prometheus.GaugeValue, float64(starting), "starting")
	ch <- prometheus.MustNewConstMetric(m.queued, prometheus.GaugeValue, float64(queued))
	ch <- prometheus.MustNewConstMetric(m.rss, prometheus.GaugeValue, float64(rss))
	ch <- prometheus.MustNewConstMetric(m.rssMax, prometheus.GaugeValue, float64(rssMax))
	ch <- prometheus.MustNewConstMetric(m.memLimit, prometheus.GaugeValue, float64(limit))
}

// residentBytes reads a process's resident set size from /proc/<pid>/statm
// (0 when unavailable: another OS, or the process just exited).
func residentBytes(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return 0
	}
	return pages * int64(os.Getpagesize())
}

// gaugeSource is a worker pool as Track takes it: the pids of its live
// workers, its counts and its workers' memory cap.
type gaugeSource interface {
	Gauges() (pids []int, idle, busy, starting, queued int, memoryBytes int64)
}

// Track adds a pool (a Gauges method) to what Collect reads.
func (m *Metrics) Track(pool any) {
	if m != nil {
		m.mu.Lock()
		m.pools[pool] = struct{}{}
		m.mu.Unlock()
	}
}

// Untrack removes a pool added by Track.
func (m *Metrics) Untrack(pool any) {
	if m != nil {
		m.mu.Lock()
		delete(m.pools, pool)
		m.mu.Unlock()
	}
}

// Died counts a worker's death by cause.
func (m *Metrics) Died(cause string) {
	if m != nil {
		m.deaths.WithLabelValues(cause).Inc()
	}
}

// Waited observes an execution's wait in the queue, by outcome.
func (m *Metrics) Waited(outcome string, d time.Duration) {
	if m != nil {
		m.queueWait.WithLabelValues(outcome).Observe(d.Seconds())
	}
}

// Started observes a worker's start, from exec to its handshake.
func (m *Metrics) Started(d time.Duration) {
	if m != nil {
		m.startDuration.Observe(d.Seconds())
	}
}

// StartFailed counts a worker that failed to start or to complete its
// handshake.
func (m *Metrics) StartFailed() {
	if m != nil {
		m.startFailures.Inc()
	}
}

// Begin starts the span of one script and returns the function that ends
// it and counts the script by its status and error code ("" when it
// succeeded). The span carries the engine and the outcome, never the code.
// A nil *Metrics still makes spans.
func (m *Metrics) Begin(ctx context.Context, engine string) (context.Context, func(status, code string)) {
	ctx, span := telemetry.StartSpan(ctx, "codemode.sandbox.run", trace.SpanKindInternal,
		attribute.String("codemode.sandbox.engine", engine))
	return ctx, func(status, code string) {
		if m != nil {
			c := telemetry.Outcome(code)
			m.scripts.WithLabelValues(engine, status, c).Inc()
		}
		if span.IsRecording() {
			span.SetAttributes(attribute.String("codemode.sandbox.status", status))
		}
		telemetry.EndSpan(span, code)
	}
}

// Scripts, Deaths, QueueWait, StartDuration and StartFailures are m's
// counters and histograms, for the engine's tests (this package is
// internal to broker/sandbox, which does not name them).
func Scripts(m *Metrics) *prometheus.CounterVec     { return m.scripts }
func Deaths(m *Metrics) *prometheus.CounterVec      { return m.deaths }
func QueueWait(m *Metrics) *prometheus.HistogramVec { return m.queueWait }
func StartDuration(m *Metrics) prometheus.Histogram { return m.startDuration }
func StartFailures(m *Metrics) prometheus.Counter   { return m.startFailures }
