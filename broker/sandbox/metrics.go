package sandbox

import (
	"context"
	"errors"
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

// Engine kinds of the script metrics (label "engine").
const (
	EngineWorker    = "worker"
	EngineInProcess = "inprocess"
)

// Causes of worker deaths (label "cause" of
// codemode_sandbox_worker_deaths_total).
const (
	DeathMemory   = "memory"   // the script went over the worker's memory cap
	DeathCrash    = "crash"    // the process died on its own
	DeathProtocol = "protocol" // the worker broke the protocol and was killed
	DeathTimeout  = "timeout"  // the script ignored its timeout; the watchdog killed it
	DeathAborted  = "aborted"  // the execution was cancelled while running
	// DeathUnresponsive: the worker did not answer (stopped by a SIGSTOP
	// from outside, or hung without using the CPU) and was killed.
	DeathUnresponsive = "unresponsive"
	DeathRecycle      = "recycle"    // replaced after maxExecutionsPerWorker, or at its own request
	DeathScaleDown    = "scale_down" // an idle worker above minSize stopped by the scaler
	DeathShutdown     = "shutdown"   // the pool closed
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
	pools map[*workerPool]struct{}
}

// NewMetrics returns the sandbox's metrics, registered nowhere yet.
func NewMetrics() *Metrics {
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
		pools: map[*workerPool]struct{}{},
	}
	m.all = telemetry.Collectors{m.scripts, m.queueWait, m.deaths, m.startDuration, m.startFailures}
	// Every cause is exported from the start at 0: Prometheus does not
	// count a series' first sample as an increase, so the first crash
	// would otherwise never show in increase() or fire an alert.
	for _, cause := range []string{DeathMemory, DeathCrash, DeathProtocol, DeathTimeout, DeathAborted, DeathUnresponsive, DeathRecycle, DeathScaleDown, DeathShutdown} {
		m.deaths.WithLabelValues(cause)
	}
	// The histogram's outcomes too (empty), so that a dashboard's rate()
	// sees the first wait and a panel reads 0 rather than "no data".
	for _, outcome := range []string{WaitAcquired, WaitQueueTimeout, WaitAborted} {
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
	pools := make([]*workerPool, 0, len(m.pools))
	for p := range m.pools {
		pools = append(pools, p)
	}
	m.mu.Unlock()
	var idle, busy, starting, queued int
	var rss, rssMax, limit int64
	for _, p := range pools {
		pids, i, b, s, q := p.gauges()
		idle, busy, starting, queued = idle+i, busy+b, starting+s, queued+q
		limit = max(limit, p.opts.MemoryBytes)
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

func (m *Metrics) track(p *workerPool) {
	if m != nil {
		m.mu.Lock()
		m.pools[p] = struct{}{}
		m.mu.Unlock()
	}
}

func (m *Metrics) untrack(p *workerPool) {
	if m != nil {
		m.mu.Lock()
		delete(m.pools, p)
		m.mu.Unlock()
	}
}

func (m *Metrics) died(cause string) {
	if m != nil {
		m.deaths.WithLabelValues(cause).Inc()
	}
}

// Outcomes of queue_wait_seconds.
const (
	WaitAcquired     = "acquired"
	WaitQueueTimeout = "queue_timeout"
	WaitAborted      = "aborted"
)

func (m *Metrics) waited(outcome string, d time.Duration) {
	if m != nil {
		m.queueWait.WithLabelValues(outcome).Observe(d.Seconds())
	}
}

func (m *Metrics) started(d time.Duration, err error) {
	if m == nil {
		return
	}
	if err != nil {
		if !isDisposed(err) {
			m.startFailures.Inc()
		}
		return
	}
	m.startDuration.Observe(d.Seconds())
}

// begin starts the span of one script and returns the function that ends
// it and counts the script. The span carries the engine and the outcome,
// never the code.
func (m *Metrics) begin(ctx context.Context, engine string) (context.Context, func(*Result, error)) {
	ctx, span := telemetry.StartSpan(ctx, "codemode.sandbox.run", trace.SpanKindInternal,
		attribute.String("codemode.sandbox.engine", engine))
	return ctx, func(res *Result, err error) {
		status, code := scriptOutcome(res, err)
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

// scriptOutcome is a script's status and error code ("" when it succeeded).
func scriptOutcome(res *Result, err error) (status, code string) {
	if err != nil {
		var e *Error
		if errors.As(err, &e) {
			return "engine_error", e.Code
		}
		return "engine_error", CodeExecutionAborted
	}
	if res == nil {
		return "engine_error", CodeExecutionError
	}
	if res.Error != nil && res.Status != StatusOK {
		return string(res.Status), res.Error.Code
	}
	return string(res.Status), ""
}
