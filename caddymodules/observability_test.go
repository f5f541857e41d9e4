package caddymodules

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/codemode-gateway/caddy-codemode/internal/dashboard"
)

func init() {
	caddy.RegisterModule(eventRecorder{})
}

// eventRecorder is an event handler module for the tests: it records the
// events it is subscribed to, as a plugin subscribed from the Caddyfile
// would see them.
type eventRecorder struct{}

type recordedEvent struct {
	name, origin string
	data         map[string]any
}

var (
	recordedMu sync.Mutex
	recorded   []recordedEvent
)

func (eventRecorder) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "events.handlers.codemode_test_recorder", New: func() caddy.Module { return new(eventRecorder) }}
}

func (eventRecorder) Handle(_ context.Context, e caddy.Event) error {
	origin := ""
	if o := e.Origin(); o != nil {
		origin = string(o.CaddyModule().ID)
	}
	recordedMu.Lock()
	recorded = append(recorded, recordedEvent{name: e.Name(), origin: origin, data: e.Data})
	recordedMu.Unlock()
	return nil
}

func (*eventRecorder) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next()
	return nil
}

func takeEvents() []recordedEvent {
	recordedMu.Lock()
	defer recordedMu.Unlock()
	out := recorded
	recorded = nil
	return out
}

// observedGateway subscribes the recorder to every lifecycle event by the
// spec's names and serves the broker and the meta-tools; variant changes
// the sandbox and broker blocks so that a reload builds new components.
func observedGateway(port, admin, variant int) string {
	return fmt.Sprintf(`{
	admin 127.0.0.1:%[2]d
	persist_config off
	events {
		on session:created codemode_test_recorder
		on session:completed codemode_test_recorder
		on session:error codemode_test_recorder
		on tool:called codemode_test_recorder
		on tool:completed codemode_test_recorder
	}
	codemode {
		sandbox {
			max_steps %[3]d
			pool {
				min 1
				max 1
			}
		}
		broker {
			demo_tools
			max_tool_calls %[4]d
		}
	}
}

http://127.0.0.1:%[1]d {
	bind 127.0.0.1
	handle_path /broker/* {
		codemode_broker
	}
	codemode_mcp /mcp
}
`, port, admin, 1000000+variant, 50+variant)
}

// scrape reads the admin endpoint's /metrics.
func scrape(t *testing.T, admin int) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", admin))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %d", resp.StatusCode)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// sample is dashboard.Value.
var sample = dashboard.Value

// TestMetricsAndEventsAcrossReloads loads a config, runs an execution and
// meta-tool calls, and reloads three times into configs that rebuild the
// engine and the broker. After every load the admin endpoint's /metrics
// has the codemode series, counters go on from where they were (the
// collectors outlive the configs; registering them again is no error), the
// recorder subscribed from the Caddyfile receives the lifecycle events of
// both execution paths, and responses carry X-Request-Id.
func TestMetricsAndEventsAcrossReloads(t *testing.T) {
	caddyMu.Lock()
	defer caddyMu.Unlock()
	port, admin := freePort(t), freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	defer func() { _ = caddy.Stop() }()
	takeEvents()

	var startedBefore float64
	for variant := range 4 {
		loadCaddyfile(t, observedGateway(port, admin, variant))
		fams := scrape(t, admin)
		started, _ := sample(fams, "codemode_broker_executions_started_total", nil)
		if variant > 0 && started < startedBefore {
			t.Fatalf("reload %d: executions counter went back from %v to %v", variant, startedBefore, started)
		}
		if _, ok := sample(fams, "codemode_sandbox_workers", map[string]string{"state": "idle"}); !ok {
			t.Fatalf("reload %d: no codemode_sandbox_workers", variant)
		}

		resp, sc := postExecute(t, base+"/broker/execute", `const s = await callTool("math:add", {a: 1, b: 2});
try { await callTool("no:such", {}) } catch (e) {}
return s.sum`, nil)
		if resp.StatusCode != 200 || resp.Header.Get("X-Request-Id") == "" {
			t.Fatalf("execute: %d, X-Request-Id %q", resp.StatusCode, resp.Header.Get("X-Request-Id"))
		}
		for sc.Scan() {
		}
		cs := connectMCP(t, &mcp.StreamableClientTransport{Endpoint: base + "/mcp", HTTPClient: reloadClient})
		callMeta(t, cs, "meta:search", map[string]any{"queries": []string{"add numbers"}})
		callMeta(t, cs, "meta:invoke", map[string]any{"tool": "math:add", "input": map[string]any{"a": 1, "b": 1}})
		cs.Close()

		fams = scrape(t, admin)
		after, _ := sample(fams, "codemode_broker_executions_started_total", nil)
		if after != started+1 {
			t.Fatalf("reload %d: executions started %v -> %v, want one more", variant, started, after)
		}
		startedBefore = after
		for _, s := range []struct {
			name   string
			labels map[string]string
		}{
			{"codemode_broker_executions_finished_total", map[string]string{"outcome": "completed"}},
			{"codemode_broker_execution_duration_seconds", map[string]string{"outcome": "completed"}},
			{"codemode_tool_calls_total", map[string]string{"source": "registry", "outcome": "ok"}},
			{"codemode_tool_calls_total", map[string]string{"source": "unknown", "outcome": "tool_not_found"}},
			{"codemode_sandbox_scripts_total", map[string]string{"engine": "worker", "status": "ok"}},
			{"codemode_meta_calls_total", map[string]string{"tool": "search", "outcome": "ok"}},
			{"codemode_meta_calls_total", map[string]string{"tool": "invoke", "outcome": "ok"}},
			{"codemode_meta_search_duration_seconds", nil},
			{"codemode_broker_events_streamed_total", map[string]string{"type": "result"}},
		} {
			if v, ok := sample(fams, s.name, s.labels); !ok || v < 1 {
				t.Errorf("reload %d: %s%v = %v (present %v)", variant, s.name, s.labels, v, ok)
			}
		}
		if v, _ := sample(fams, "codemode_broker_sessions", map[string]string{"status": "running"}); v != 0 {
			t.Errorf("reload %d: %v sessions running after all finished", variant, v)
		}

		evs := takeEvents()
		var names []string
		for _, e := range evs {
			if e.origin != "codemode" {
				t.Errorf("event %s from origin %q, want codemode", e.name, e.origin)
			}
			names = append(names, e.name+"/"+fmt.Sprint(e.data["path"]))
		}
		want := "session:created/broker,tool:called/broker,tool:completed/broker,tool:called/broker,tool:completed/broker,session:completed/broker," +
			"tool:called/meta_invoke,tool:completed/meta_invoke"
		if got := strings.Join(names, ","); got != want {
			t.Fatalf("reload %d: events\n%s\nwant\n%s", variant, got, want)
		}
		done := evs[5].data
		if done["tool_calls"] != 2 || done["session_id"] == "" || done["status"] != "completed" {
			t.Errorf("session:completed data %v", done)
		}
		if unknown := evs[4].data; unknown["tool"] != "no:such" || unknown["error_code"] != "TOOL_NOT_FOUND" || unknown["tool_calls"] != 2 {
			t.Errorf("tool:completed of the unknown tool: %v", unknown)
		}
		for _, e := range evs {
			for k := range e.data {
				if !allowedEventKeys[k] {
					t.Errorf("event %s carries undocumented key %q", e.name, k)
				}
			}
		}
	}
}

// allowedEventKeys are the payload keys docs/observability.md documents.
var allowedEventKeys = map[string]bool{
	"path": true, "session_id": true, "status": true, "tool_calls": true, "user_id": true, "tenant_id": true,
	"duration_ms": true, "script_status": true, "tool": true, "call_id": true, "outcome": true, "error_code": true,
}

// describedSeries are the names of every series the codemode collectors
// describe, histograms with their _bucket, _sum and _count.
func describedSeries() map[string]bool {
	ts := processTelemetry()
	ch := make(chan *prometheus.Desc, 256)
	go func() {
		for _, c := range []prometheus.Collector{ts.guard, ts.broker, ts.sandbox, ts.catalog, ts.meta, ts.oauth,
			ts.auth.failures, ts.auth.tokenLatency, ts.auth.rateLimited} {
			c.Describe(ch)
		}
		close(ch)
	}()
	re := regexp.MustCompile(`fqName: "([^"]+)"`)
	out := map[string]bool{}
	for d := range ch {
		if m := re.FindStringSubmatch(d.String()); m != nil {
			out[m[1]] = true
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				out[m[1]+s] = true
			}
		}
	}
	return out
}

// TestDashboardNamesExportedSeries: every query of the Grafana dashboard
// (docs/grafana) parses and reads only series the gateway exports.
func TestDashboardNamesExportedSeries(t *testing.T) {
	d, err := dashboard.Load("../docs/grafana/caddy-codemode.json")
	if err != nil {
		t.Fatal(err)
	}
	names, err := d.SeriesNames()
	if err != nil {
		t.Fatal(err)
	}
	exported := describedSeries()
	if len(exported) < 40 {
		t.Fatalf("only %d series described", len(exported))
	}
	used := map[string]bool{}
	for expr, ns := range names {
		for _, n := range ns {
			used[n] = true
			if !exported[n] {
				t.Errorf("query %s reads %s, which the gateway does not export", expr, n)
			}
		}
	}
	// The dashboard shows every area.
	for _, area := range []string{"guard", "broker", "tool", "sandbox", "catalog", "meta", "oauth", "auth"} {
		found := false
		for n := range used {
			found = found || strings.HasPrefix(n, "codemode_"+area+"_")
		}
		if !found {
			t.Errorf("no panel reads a codemode_%s_ series", area)
		}
	}
	// Every series the gateway exports has a panel: a new counter without
	// one is seen only by whoever reads /metrics by hand. An info series is
	// for joins, not for a panel of its own.
	notPanelled := map[string]bool{"codemode_catalog_source_info": true}
	for n := range exported {
		base := n
		for _, s := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(n, s); ok && exported[b] {
				base = b
			}
		}
		if base != n || notPanelled[n] {
			continue
		}
		read := used[n]
		for _, s := range []string{"_bucket", "_sum", "_count"} {
			read = read || used[n+s]
		}
		if !read {
			t.Errorf("no panel reads %s", n)
		}
	}
}

// TestLogDurationFields: every log field that is a length of time is a
// zap.Duration, rendered in the log's duration_format (Caddy's default is
// seconds; `format json { duration_format string }` gives "1m30s"), never a
// number whose unit only its name tells (key_rotation_days,
// reuse_grace_seconds and the broker's duration_ms were, beside
// write_timeout and access_token_ttl as durations).
func TestLogDurationFields(t *testing.T) {
	numeric := regexp.MustCompile(`zap\.(Int|Int32|Int64|Uint|Uint32|Uint64|Float32|Float64)\("([a-z_]*_(ms|millis|seconds|secs|sec|s|ns|us|minutes|mins|hours|days))"`)
	var found []string
	err := filepath.WalkDir("..", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".") && d.Name() != "..") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range numeric.FindAllSubmatch(src, -1) {
			found = append(found, path+": "+string(m[0]))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) > 0 {
		t.Errorf("durations logged as numbers (use zap.Duration):\n%s", strings.Join(found, "\n"))
	}
}

// TestMetricsTableListsEverySeries: the metrics table of
// docs/observability.md names exactly the series the gateway's collectors
// describe, so a series added or renamed gets its line.
func TestMetricsTableListsEverySeries(t *testing.T) {
	exported := map[string]bool{}
	fqName := regexp.MustCompile(`fqName: "([a-z0-9_]+)"`)
	descs := make(chan *prometheus.Desc, 256)
	go func() {
		for _, c := range processTelemetry().collectors() {
			c.Describe(descs)
		}
		close(descs)
	}()
	for d := range descs {
		m := fqName.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("no fqName in %s", d)
		}
		exported[m[1]] = true
	}
	b, err := os.ReadFile("../docs/observability.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(codemode_[a-z0-9_]+)`").FindAllStringSubmatch(string(b), -1) {
		documented[m[1]] = true
	}
	for n := range exported {
		if !documented[n] {
			t.Errorf("%s is exported but has no line in the metrics table of docs/observability.md", n)
		}
	}
	for n := range documented {
		if !exported[n] {
			t.Errorf("docs/observability.md lists %s, which no collector exports", n)
		}
	}
	if len(exported) < 40 {
		t.Fatalf("%d series described, want the gateway's 40 or more", len(exported))
	}
}

// scrapeFreshGateway starts observedGateway and reads its /metrics before
// any request.
func scrapeFreshGateway(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	caddyMu.Lock()
	defer caddyMu.Unlock()
	port, admin := freePort(t), freePort(t)
	defer func() { _ = caddy.Stop() }()
	loadCaddyfile(t, observedGateway(port, admin, 0))
	return scrape(t, admin)
}

// TestAuthFailureReasonsAtZero: every reason of codemode_auth_failures_total
// is in a scrape of /metrics from the start (at 0 in a fresh process), so
// that rate() and increase() see a reason's first failure; a reason's
// series appeared only with its first failure, which Prometheus counts as
// no increase.
func TestAuthFailureReasonsAtZero(t *testing.T) {
	fams := scrapeFreshGateway(t)
	for _, reason := range []string{"missing_token", "malformed", "bad_algorithm", "unknown_key", "bad_signature", "expired",
		"not_yet_valid", "wrong_issuer", "wrong_audience", "revoked", "insufficient_scope", "unavailable", "issuer_mismatch"} {
		if _, ok := sample(fams, "codemode_auth_failures_total", map[string]string{"reason": reason}); !ok {
			t.Errorf("no codemode_auth_failures_total{reason=%q} in /metrics", reason)
		}
	}
}

// TestLabelledHistogramsFromTheStart: the histograms whose label values
// are known (sandbox and guard queue waits, the token endpoint's latency,
// execution, tool-call and meta-tool durations, caller waits) are in a
// scrape of a fresh gateway's /metrics with every such label set, so that
// rate() and histogram_quantile() see the first observation and a panel
// reads 0 rather than "no data". They appeared only once observed.
func TestLabelledHistogramsFromTheStart(t *testing.T) {
	fams := scrapeFreshGateway(t)
	want := map[string][]map[string]string{}
	for _, o := range []string{"acquired", "queue_timeout", "aborted"} {
		want["codemode_sandbox_queue_wait_seconds"] = append(want["codemode_sandbox_queue_wait_seconds"], map[string]string{"outcome": o})
	}
	for _, o := range []string{"allowed", "queue_timeout"} {
		want["codemode_guard_queue_wait_seconds"] = append(want["codemode_guard_queue_wait_seconds"], map[string]string{"outcome": o})
	}
	for _, g := range []string{"authorization_code", "refresh_token"} {
		for _, s := range []string{"2xx", "4xx", "5xx"} {
			want["codemode_auth_token_issuance_seconds"] = append(want["codemode_auth_token_issuance_seconds"], map[string]string{"grant_type": g, "status": s})
		}
	}
	for _, g := range []string{"other", "unknown"} {
		want["codemode_auth_token_issuance_seconds"] = append(want["codemode_auth_token_issuance_seconds"], map[string]string{"grant_type": g, "status": "4xx"})
	}
	for _, o := range []string{"completed", "syntax_error", "illegal_access", "runtime_error", "tool_error", "timeout", "engine_error"} {
		want["codemode_broker_execution_duration_seconds"] = append(want["codemode_broker_execution_duration_seconds"], map[string]string{"outcome": o})
	}
	for _, s := range []string{"registry", "catalog", "upstream", "caller", "unknown"} {
		want["codemode_tool_call_duration_seconds"] = append(want["codemode_tool_call_duration_seconds"], map[string]string{"source": s})
	}
	for _, o := range []string{"answered", "error", "abandoned"} {
		want["codemode_broker_caller_wait_seconds"] = append(want["codemode_broker_caller_wait_seconds"], map[string]string{"outcome": o})
	}
	for _, tool := range []string{"search", "describe", "execute", "invoke"} {
		want["codemode_meta_call_duration_seconds"] = append(want["codemode_meta_call_duration_seconds"], map[string]string{"tool": tool})
	}
	for name, sets := range want {
		fam := fams[name]
		for _, labels := range sets {
			found := false
			for _, m := range fam.GetMetric() {
				got := map[string]string{}
				for _, lp := range m.GetLabel() {
					got[lp.GetName()] = lp.GetValue()
				}
				if maps.Equal(got, labels) && m.GetHistogram() != nil {
					found = true
					break
				}
			}
			if !found {
				t.Errorf("no %s%v in /metrics", name, labels)
			}
		}
	}
}
