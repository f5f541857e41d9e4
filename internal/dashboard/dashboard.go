// Package dashboard reads the Grafana dashboard of docs/grafana, lists the
// series its queries name, and renders it as an SVG picture from /metrics
// scrapes, with a small evaluator of the PromQL subset the dashboard uses.
// Tests use it to check the dashboard against the series the gateway
// exports and to draw the docs' example from a real run; Grafana itself is
// not involved.
package dashboard

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// Dashboard is what this package reads of a Grafana dashboard.
type Dashboard struct {
	Title  string  `json:"title"`
	Panels []Panel `json:"panels"`
}

// Panel is one panel (or row) of the dashboard.
type Panel struct {
	Type        string   `json:"type"`
	Title       string   `json:"title"`
	Description string   `json:"description"`
	GridPos     GridPos  `json:"gridPos"`
	Targets     []Target `json:"targets"`
	FieldConfig struct {
		Defaults struct {
			Unit string `json:"unit"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
}

// GridPos places a panel on Grafana's 24-column grid.
type GridPos struct{ H, W, X, Y int }

// Target is one query of a panel.
type Target struct {
	Expr         string `json:"expr"`
	LegendFormat string `json:"legendFormat"`
}

// Vars are the values of the dashboard's variables when evaluating
// queries: every instance.
var Vars = map[string]string{"instance": ".*"}

// Load reads a dashboard file.
func Load(path string) (*Dashboard, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var d Dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &d, nil
}

// SeriesNames parses every query and returns the series names they read,
// by query.
func (d *Dashboard) SeriesNames() (map[string][]string, error) {
	out := map[string][]string{}
	for _, p := range d.Panels {
		for _, t := range p.Targets {
			n, err := Parse(t.Expr, Vars)
			if err != nil {
				return nil, fmt.Errorf("panel %q: %w", p.Title, err)
			}
			out[t.Expr] = MetricNames(n)
		}
	}
	return out, nil
}

// FromFamilies turns parsed /metrics families into a Scrape taken at at.
func FromFamilies(at time.Time, fams map[string]*dto.MetricFamily) Scrape {
	s := Scrape{At: at, Series: map[string][]Sample{}}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			switch {
			case m.Histogram != nil:
				h := m.Histogram
				sawInf := false
				for _, b := range h.GetBucket() {
					bl := clone(l)
					bl["le"] = strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64)
					sawInf = sawInf || math.IsInf(b.GetUpperBound(), 1)
					s.Series[name+"_bucket"] = append(s.Series[name+"_bucket"], Sample{bl, float64(b.GetCumulativeCount())})
				}
				if !sawInf { // the text format lists it; a registry's Gather does not
					inf := clone(l)
					inf["le"] = "+Inf"
					s.Series[name+"_bucket"] = append(s.Series[name+"_bucket"], Sample{inf, float64(h.GetSampleCount())})
				}
				s.Series[name+"_sum"] = append(s.Series[name+"_sum"], Sample{l, h.GetSampleSum()})
				s.Series[name+"_count"] = append(s.Series[name+"_count"], Sample{l, float64(h.GetSampleCount())})
			case m.Counter != nil:
				s.Series[name] = append(s.Series[name], Sample{l, m.Counter.GetValue()})
			case m.Gauge != nil:
				s.Series[name] = append(s.Series[name], Sample{l, m.Gauge.GetValue()})
			case m.Untyped != nil:
				s.Series[name] = append(s.Series[name], Sample{l, m.Untyped.GetValue()})
			}
		}
	}
	return s
}

func clone(m map[string]string) map[string]string {
	c := make(map[string]string, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// Line is one legend entry of a panel over time.
type Line struct {
	Legend string
	Values []float64 // one per scrape; NaN where the series has no value
}

// Evaluate computes every query of p at each scrape.
func (p Panel) Evaluate(scrapes []Scrape) ([]Line, error) {
	var lines []Line
	for _, t := range p.Targets {
		n, err := Parse(t.Expr, Vars)
		if err != nil {
			return nil, err
		}
		byLegend := map[string][]float64{}
		var order []string
		for i := range scrapes {
			pts, err := eval(n, scrapes, i)
			if err != nil {
				return nil, fmt.Errorf("panel %q: %w", p.Title, err)
			}
			for _, pt := range pts {
				leg := legend(t.LegendFormat, pt.labels)
				vals, ok := byLegend[leg]
				if !ok {
					vals = make([]float64, len(scrapes))
					for j := range vals {
						vals[j] = math.NaN()
					}
					order = append(order, leg)
				}
				vals[i] = pt.value
				byLegend[leg] = vals
			}
		}
		sort.Strings(order)
		for _, leg := range order {
			lines = append(lines, Line{Legend: leg, Values: byLegend[leg]})
		}
	}
	return lines, nil
}

// legend fills {{label}} placeholders.
func legend(format string, labels map[string]string) string {
	out := format
	for {
		i := strings.Index(out, "{{")
		if i < 0 {
			return out
		}
		j := strings.Index(out[i:], "}}")
		if j < 0 {
			return out
		}
		name := strings.TrimSpace(out[i+2 : i+j])
		out = out[:i] + labels[name] + out[i+j+2:]
	}
}

// Value is the value of the first series of name in fams whose labels
// include want (a histogram's sample count), and whether there is one.
func Value(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	for _, m := range fams[name].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		match := true
		for k, v := range want {
			match = match && labels[k] == v
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}
