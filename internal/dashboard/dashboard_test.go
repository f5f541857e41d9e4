package dashboard

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

func TestEveryDashboardQueryParses(t *testing.T) {
	d, err := Load("../../docs/grafana/caddy-codemode.json")
	if err != nil {
		t.Fatal(err)
	}
	names, err := d.SeriesNames()
	if err != nil {
		t.Fatal(err)
	}
	if len(names) < 20 {
		t.Fatalf("only %d queries", len(names))
	}
	for expr, ns := range names {
		if len(ns) == 0 {
			t.Errorf("%s reads no series", expr)
		}
	}
}

func TestUnsupportedQueriesAreErrors(t *testing.T) {
	for _, q := range []string{`rate(x)`, `sum(x) + sum(y)`, `x{a=b}`, `topk(3, x)`, `x{a=~"$nope"}`} {
		if _, err := Parse(q, Vars); err == nil {
			t.Errorf("%s parsed", q)
		}
	}
}

func scrapesOf(values ...map[string][]Sample) []Scrape {
	t0 := time.Unix(1000, 0)
	var out []Scrape
	for i, v := range values {
		out = append(out, Scrape{At: t0.Add(time.Duration(i) * 10 * time.Second), Series: v})
	}
	return out
}

func TestEvaluation(t *testing.T) {
	l := func(kv ...string) map[string]string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	scrapes := scrapesOf(
		map[string][]Sample{
			"c_total":  {{l("k", "a", "instance", "x"), 0}, {l("k", "b", "instance", "x"), 10}},
			"h_bucket": {{l("le", "1"), 0}, {l("le", "2"), 0}, {l("le", "+Inf"), 0}},
			"g":        {{l("src", "s"), 1500}},
		},
		map[string][]Sample{
			"c_total": {{l("k", "a", "instance", "x"), 20}, {l("k", "b", "instance", "x"), 30}},
			// 10 observations: 5 under 1, 5 between 1 and 2.
			"h_bucket": {{l("le", "1"), 5}, {l("le", "2"), 10}, {l("le", "+Inf"), 10}},
			"g":        {{l("src", "s"), 1500}},
		},
	)
	cases := []struct {
		expr   string
		legend string
		want   map[string]float64
	}{
		{`sum(rate(c_total{instance=~"$instance"}[5m]))`, "all", map[string]float64{"all": 4}},
		{`sum by (k) (increase(c_total[1h]))`, "{{k}}", map[string]float64{"a": 20, "b": 20}},
		{`max by (k) (c_total{k!="b"})`, "{{k}}", map[string]float64{"a": 20}},
		{`histogram_quantile(0.75, sum by (le) (rate(h_bucket[5m])))`, "q", map[string]float64{"q": 1.5}},
		{`max by (src) (time() - g)`, "{{src}}", map[string]float64{"s": 1010 - 1500}},
		{`max(g) / 100`, "x", map[string]float64{"x": 15}},
	}
	for _, c := range cases {
		p := Panel{Title: c.expr, Targets: []Target{{Expr: c.expr, LegendFormat: c.legend}}}
		lines, err := p.Evaluate(scrapes)
		if err != nil {
			t.Fatalf("%s: %v", c.expr, err)
		}
		got := map[string]float64{}
		for _, ln := range lines {
			got[ln.Legend] = ln.Values[1]
		}
		for k, v := range c.want {
			if math.Abs(got[k]-v) > 1e-9 {
				t.Errorf("%s: %s = %v, want %v (all %v)", c.expr, k, got[k], v, got)
			}
		}
	}
}

func TestRenderIsWellFormedSVG(t *testing.T) {
	d, err := Load("../../docs/grafana/caddy-codemode.json")
	if err != nil {
		t.Fatal(err)
	}
	scrapes := scrapesOf(
		map[string][]Sample{"codemode_broker_executions_started_total": {{map[string]string{}, 1}}},
		map[string][]Sample{"codemode_broker_executions_started_total": {{map[string]string{}, 11}}},
	)
	svg, err := Render(d, scrapes, "test <note>")
	if err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(bytes.NewReader(svg))
	for {
		if _, err := dec.Token(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("not XML: %v", err)
		}
	}
	if !strings.Contains(string(svg), "Executions started /s") || !strings.Contains(string(svg), "No data") || !strings.Contains(string(svg), "test &lt;note&gt;") {
		t.Fatal("panels missing from the picture")
	}
}

// TestHistogramFromTheTextFormat: a histogram read from /metrics text has
// its +Inf bucket once, so quantiles come out right.
func TestHistogramFromTheTextFormat(t *testing.T) {
	text := func(le1, inf int) string {
		return fmt.Sprintf(`# TYPE d_seconds histogram
d_seconds_bucket{le="0.1"} %d
d_seconds_bucket{le="1"} %d
d_seconds_bucket{le="+Inf"} %d
d_seconds_sum 1
d_seconds_count %d
`, le1, inf, inf, inf)
	}
	var scrapes []Scrape
	for i, s := range []string{text(0, 0), text(9, 10)} {
		p := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := p.TextToMetricFamilies(strings.NewReader(s))
		if err != nil {
			t.Fatal(err)
		}
		scrapes = append(scrapes, FromFamilies(time.Unix(int64(i*10), 0), fams))
	}
	p := Panel{Targets: []Target{{Expr: `histogram_quantile(0.5, sum by (le) (rate(d_seconds_bucket[5m])))`, LegendFormat: "p50"}}}
	lines, err := p.Evaluate(scrapes)
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != 1 || math.Abs(lines[0].Values[1]-0.1*5/9) > 1e-9 {
		t.Fatalf("p50 %v, want %v", lines, 0.1*5/9)
	}
}
