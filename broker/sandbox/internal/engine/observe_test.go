package engine

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/codemode-gateway/caddy-codemode/broker/sandbox/internal/observe"
)

// testMetrics are the Metrics broker/sandbox gives its engines (the
// Recorder of these tests), with their series at hand.
type testMetrics struct {
	*observe.Metrics
	scripts, deaths *prometheus.CounterVec
	queueWait       *prometheus.HistogramVec
	startDuration   prometheus.Histogram
	startFailures   prometheus.Counter
}

// NewMetrics is sandbox.NewMetrics.
func NewMetrics() *testMetrics {
	m := observe.NewMetrics(DeathCauses, WaitOutcomes)
	return &testMetrics{Metrics: m, scripts: observe.Scripts(m), deaths: observe.Deaths(m),
		queueWait: observe.QueueWait(m), startDuration: observe.StartDuration(m), startFailures: observe.StartFailures(m)}
}
