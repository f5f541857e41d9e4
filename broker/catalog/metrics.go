package catalog

import (
	"cmp"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the catalog's Prometheus metrics: per source its version,
// last successful fetch, whether the last fetch failed, its operation
// count, and fetches by outcome. One Metrics serves any number of catalogs
// (a reload builds a new one beside the draining one: a source is then
// reported from the catalog started last); register it once per registry.
// A nil *Metrics records nothing.
type Metrics struct {
	fetches *prometheus.CounterVec

	info, lastSuccess, lastFailed, operations *prometheus.Desc

	mu       sync.Mutex
	seq      uint64
	catalogs map[*Catalog]uint64 // live catalogs, by start order
}

// NewMetrics returns the catalog's metrics, registered nowhere yet.
func NewMetrics() *Metrics {
	return &Metrics{
		fetches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "codemode", Subsystem: "catalog", Name: "fetches_total",
			Help: "Fetches of OpenAPI documents, by source and outcome (ok, error).",
		}, []string{"source", "outcome"}),
		info: prometheus.NewDesc("codemode_catalog_source_info",
			"Always 1; the version label is the hash of the source's action names (it changes when actions come or go).",
			[]string{"source", "version"}, nil),
		lastSuccess: prometheus.NewDesc("codemode_catalog_source_last_success_timestamp_seconds",
			"Unix time of the source's last successful fetch; 0 until one succeeds.", []string{"source"}, nil),
		lastFailed: prometheus.NewDesc("codemode_catalog_source_last_fetch_failed",
			"1 when the source's last fetch failed (its last good actions are kept), else 0. The error is in the log.", []string{"source"}, nil),
		operations: prometheus.NewDesc("codemode_catalog_source_operations",
			"Actions (operations) the source contributes.", []string{"source"}, nil),
		catalogs: map[*Catalog]uint64{},
	}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.fetches.Describe(ch)
	ch <- m.info
	ch <- m.lastSuccess
	ch <- m.lastFailed
	ch <- m.operations
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.fetches.Collect(ch)
	type live struct {
		c   *Catalog
		seq uint64
	}
	m.mu.Lock()
	newest := make([]live, 0, len(m.catalogs))
	for c, n := range m.catalogs {
		newest = append(newest, live{c, n})
	}
	m.mu.Unlock()
	// Newest first: a source name is reported once, from the latest catalog.
	slices.SortFunc(newest, func(a, b live) int { return cmp.Compare(b.seq, a.seq) })
	seen := map[string]bool{}
	for _, l := range newest {
		for _, s := range l.c.sources {
			name := s.src.Name
			if seen[name] {
				continue
			}
			seen[name] = true
			st := s.state()
			version := ""
			if len(st.specHash) >= 16 {
				version = st.specHash[:16]
			}
			var last float64
			if !st.lastSuccess.IsZero() {
				last = float64(st.lastSuccess.UnixMilli()) / 1000
			}
			failed := 0.0
			if st.lastError != "" {
				failed = 1
			}
			ch <- prometheus.MustNewConstMetric(m.info, prometheus.GaugeValue, 1, name, version)
			ch <- prometheus.MustNewConstMetric(m.lastSuccess, prometheus.GaugeValue, last, name)
			ch <- prometheus.MustNewConstMetric(m.lastFailed, prometheus.GaugeValue, failed, name)
			ch <- prometheus.MustNewConstMetric(m.operations, prometheus.GaugeValue, float64(len(st.ops)), name)
		}
	}
}

func (m *Metrics) track(c *Catalog) {
	if m != nil {
		m.mu.Lock()
		m.seq++
		m.catalogs[c] = m.seq
		m.mu.Unlock()
	}
}

func (m *Metrics) untrack(c *Catalog) {
	if m != nil {
		m.mu.Lock()
		delete(m.catalogs, c)
		m.mu.Unlock()
	}
}

func (m *Metrics) fetched(source string, err error) {
	if m == nil {
		return
	}
	outcome := "ok"
	if err != nil {
		outcome = "error"
	}
	m.fetches.WithLabelValues(source, outcome).Inc()
}
