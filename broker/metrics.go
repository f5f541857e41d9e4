package broker

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"
	"github.com/codemode-gateway/caddy-codemode/internal/telemetry"
)

// Tool sources of the tool-call metrics, beyond SourceRegistry and
// SourceCatalog: a tool of an upstream MCP server (the meta-tools call it),
// a tool answered by the caller of the session, and a name that is no tool.
const (
	SourceUpstream = "upstream"
	SourceCaller   = "caller"
	SourceUnknown  = "unknown"
)

// Metrics are the broker's Prometheus metrics: sessions, executions, tool
// calls, caller-answered waits, streamed events and Redis errors. One
// Metrics serves any number of brokers (a reload builds a new broker beside
// the draining one: both count into it); register it once per registry. A
// nil *Metrics records nothing.
type Metrics struct {
	sessions       *prometheus.GaugeVec
	rejected       *prometheus.CounterVec
	started        prometheus.Counter
	finished       *prometheus.CounterVec
	duration       *prometheus.HistogramVec
	toolCalls      *prometheus.CounterVec
	toolDuration   *prometheus.HistogramVec
	callerWaiting  prometheus.Gauge
	callerWait     *prometheus.HistogramVec
	eventsStreamed *prometheus.CounterVec
	redisErrors    *prometheus.CounterVec
	all            telemetry.Collectors

	// The series every execution records, looked up once per label value.
	sessionsOf *telemetry.Series[prometheus.Gauge]
	finishedOf *telemetry.Series[prometheus.Counter]
	durationOf *telemetry.Series[prometheus.Observer]
	streamedOf *telemetry.Series[prometheus.Counter]
}

// callerWaitOutcomes are the values of caller_wait_seconds' outcome label
// (broker/run.go).
var callerWaitOutcomes = []string{"answered", "error", "abandoned"}

// redisOperations are the values of redis_errors_total's operation label
// (broker/store_metrics.go).
var redisOperations = []string{"put_session", "get_session", "add_call", "pending_calls", "notify", "drop_call",
	"close_calls", "resolve_call", "fetch_answer", "restore_session"}

// NewMetrics returns the broker's metrics, registered nowhere yet.
func NewMetrics() *Metrics {
	m := &Metrics{
		sessions: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "codemode", Subsystem: "broker", Name: "sessions",
			Help: "Sessions of the brokers of this process that have not finished, by status (pending, running).",
		}, []string{"status"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "codemode", Subsystem: "broker", Name: "sessions_rejected_total",
			Help: "Executions refused before a session was created, by code (session_limit, shutting_down, storage_unavailable).",
		}, []string{"code"}),
		started: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "codemode", Subsystem: "broker", Name: "executions_started_total",
			Help: "Executions started (sessions created).",
		}),
		finished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "codemode", Subsystem: "broker", Name: "executions_finished_total",
			Help: "Executions finished, by outcome: completed, or the script status (syntax_error, illegal_access, runtime_error, tool_error, timeout) or engine_error.",
		}, []string{"outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "codemode", Subsystem: "broker", Name: "execution_duration_seconds",
			Help:    "Duration of executions from session creation to the final event, by outcome.",
			Buckets: telemetry.DurationBuckets,
		}, []string{"outcome"}),
		toolCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "codemode", Subsystem: "tool", Name: "calls_total",
			Help: "Tool calls by source (registry, catalog, upstream, caller, unknown) and outcome (ok, or the error code in lower case; other for codes from outside the gateway).",
		}, []string{"source", "outcome"}),
		toolDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "codemode", Subsystem: "tool", Name: "call_duration_seconds",
			Help:    "Duration of tool calls, guard waits included, by source.",
			Buckets: telemetry.DurationBuckets,
		}, []string{"source"}),
		callerWaiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "codemode", Subsystem: "broker", Name: "caller_waits",
			Help: "Tool calls now waiting for the caller's answer (POST /sessions/{id}/tool-result).",
		}),
		callerWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "codemode", Subsystem: "broker", Name: "caller_wait_seconds",
			Help:    "Time a tool call waited for the caller's answer, by outcome (answered, error, abandoned).",
			Buckets: telemetry.DurationBuckets,
		}, []string{"outcome"}),
		eventsStreamed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "codemode", Subsystem: "broker", Name: "events_streamed_total",
			Help: "Execute-stream events handed to consumers, by type (session, tool_call, tool_result, log, result, error).",
		}, []string{"type"}),
		redisErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "codemode", Subsystem: "broker", Name: "redis_errors_total",
			Help: "Failed round trips to the broker's Redis, by operation.",
		}, []string{"operation"}),
	}
	m.all = telemetry.Collectors{m.sessions, m.rejected, m.started, m.finished, m.duration, m.toolCalls,
		m.toolDuration, m.callerWaiting, m.callerWait, m.eventsStreamed, m.redisErrors}
	statuses := []string{StatusPending, StatusRunning, StatusCompleted, StatusError}
	m.sessionsOf = telemetry.NewSeries(m.sessions.WithLabelValues, statuses...)
	outcomes := []string{StatusCompleted, string(sandbox.StatusSyntaxError), string(sandbox.StatusIllegalAccess),
		string(sandbox.StatusRuntimeError), string(sandbox.StatusToolError), string(sandbox.StatusTimeout), "engine_error"}
	m.finishedOf = telemetry.NewSeries(m.finished.WithLabelValues, outcomes...)
	// The counters of fixed label sets are exported from the start at 0,
	// so that increase(), rate() and alerts see their first event
	// (Prometheus does not count a series' first sample as an increase).
	for _, o := range outcomes {
		m.finishedOf.Of(o)
	}
	for _, code := range []string{CodeSessionLimit, CodeShuttingDown, CodeStorageUnavailable} {
		m.rejected.WithLabelValues(telemetry.Outcome(code))
	}
	for _, op := range redisOperations {
		m.redisErrors.WithLabelValues(op)
	}
	m.durationOf = telemetry.NewSeries(m.duration.WithLabelValues, outcomes...)
	// The histograms of known label values too (empty), so that rate()
	// sees their first observation and a panel reads 0, not "no data".
	for _, o := range outcomes {
		m.durationOf.Of(o)
	}
	for _, s := range []string{SourceRegistry, SourceCatalog, SourceUpstream, SourceCaller, SourceUnknown} {
		m.toolDuration.WithLabelValues(s)
	}
	for _, o := range callerWaitOutcomes {
		m.callerWait.WithLabelValues(o)
	}
	m.streamedOf = telemetry.NewSeries(m.eventsStreamed.WithLabelValues, eventTypes...)
	for _, typ := range eventTypes {
		m.streamedOf.Of(typ)
	}
	// The gauge too, so that the dashboard's sessions panel reads 0 on an
	// idle gateway rather than "no data".
	for _, s := range []string{StatusPending, StatusRunning} {
		m.sessionsOf.Of(s)
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

// ObserveToolCall records one tool call made outside the broker (the
// meta-tools' calls to upstream MCP servers and to tools their MCP client
// answers): its source, its error code ("" for success) and its duration.
func (m *Metrics) ObserveToolCall(source, code string, d time.Duration) {
	if m == nil {
		return
	}
	m.toolCalls.WithLabelValues(source, telemetry.Outcome(code)).Inc()
	m.toolDuration.WithLabelValues(source).Observe(d.Seconds())
}

func (m *Metrics) sessionMoved(from, to string) {
	if m == nil {
		return
	}
	if from != "" {
		m.sessionsOf.Of(from).Dec()
	}
	if to != "" {
		m.sessionsOf.Of(to).Inc()
	}
}

func (m *Metrics) sessionRejected(code string) {
	if m != nil {
		m.rejected.WithLabelValues(telemetry.Outcome(code)).Inc()
	}
}

func (m *Metrics) executionStarted() {
	if m != nil {
		m.started.Inc()
		m.sessionsOf.Of(StatusPending).Inc()
	}
}

func (m *Metrics) executionFinished(outcome string, d time.Duration) {
	if m != nil {
		m.finishedOf.Of(outcome).Inc()
		m.durationOf.Of(outcome).Observe(d.Seconds())
	}
}

func (m *Metrics) callerWaitStarted() {
	if m != nil {
		m.callerWaiting.Inc()
	}
}

func (m *Metrics) callerWaitEnded(outcome string, d time.Duration) {
	if m != nil {
		m.callerWaiting.Dec()
		m.callerWait.WithLabelValues(outcome).Observe(d.Seconds())
	}
}

func (m *Metrics) streamed(typ string) {
	if m != nil {
		m.streamedOf.Of(typ).Inc()
	}
}

// redisFailed counts err (when not nil) against op and returns it.
func (m *Metrics) redisFailed(op string, err error) error {
	if m != nil && err != nil {
		m.redisErrors.WithLabelValues(op).Inc()
	}
	return err
}
