package metatools

import (
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/codemode-gateway/caddy-codemode/internal/telemetry"
)

// Metrics are the meta-tools' Prometheus metrics: calls by meta-tool and
// outcome with their duration, and search latency and result counts. One
// Metrics serves any number of services; register it once per registry. A
// nil *Metrics records nothing.
type Metrics struct {
	calls         *prometheus.CounterVec
	duration      *prometheus.HistogramVec
	searchLatency prometheus.Histogram
	searchResults prometheus.Histogram
	all           telemetry.Collectors
}

// NewMetrics returns the meta-tools' metrics, registered nowhere yet.
func NewMetrics() *Metrics {
	m := &Metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "codemode", Subsystem: "meta", Name: "calls_total",
			Help: "Meta-tool calls by tool (search, describe, execute, invoke) and outcome: ok; for execute the plan's status when it did not succeed (syntax_error, runtime_error, ...); input_required while a client answers; else the error code in lower case.",
		}, []string{"tool", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "codemode", Subsystem: "meta", Name: "call_duration_seconds",
			Help:    "Duration of meta-tool calls, by tool.",
			Buckets: telemetry.DurationBuckets,
		}, []string{"tool"}),
		searchLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "codemode", Subsystem: "meta", Name: "search_duration_seconds",
			Help:    "Time to answer a search (every query ranked and merged).",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
		}),
		searchResults: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "codemode", Subsystem: "meta", Name: "search_results",
			Help:    "Tools returned by a successful search.",
			Buckets: []float64{0, 1, 2, 3, 5, 10, 20, 50, 100},
		}),
	}
	m.all = telemetry.Collectors{m.calls, m.duration, m.searchLatency, m.searchResults}
	// Every meta-tool's duration is exported (empty) from the start, so
	// that rate() sees its first call and a panel reads 0, not "no data".
	for _, tool := range metaNames {
		m.duration.WithLabelValues(strings.TrimPrefix(tool, "meta:"))
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

func (m *Metrics) called(tool, outcome string, d time.Duration) {
	if m != nil {
		m.calls.WithLabelValues(tool, outcome).Inc()
		m.duration.WithLabelValues(tool).Observe(d.Seconds())
	}
}

func (m *Metrics) searched(d time.Duration, results int) {
	if m != nil {
		m.searchLatency.Observe(d.Seconds())
		m.searchResults.Observe(float64(results))
	}
}
