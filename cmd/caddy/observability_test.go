package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"golang.org/x/crypto/bcrypt"
	"google.golang.org/protobuf/proto"

	"github.com/codemode-gateway/caddy-codemode/internal/dashboard"
	"github.com/codemode-gateway/caddy-codemode/internal/nettest"
)

// TestObservabilityOfTheBuiltBinary builds this command, runs it with
// Caddy's tracing exporting to an OTLP receiver in the test, an OpenAPI
// service and an upstream MCP server, and sends a scripted mix of traffic:
// broker executions (two tool calls each, unknown tools, a syntax error, a
// tool over its rate limit) and meta-tool calls over MCP. Then it reads the
// real endpoints: /metrics of the admin API (series and their values), the
// spans received (the tree of one execution with two tool calls, W3C trace
// context at the upstream services), the log (no line above info under
// healthy load, every execution line carries the session and request ids)
// and the events app's record of the lifecycle events. It also draws the
// Grafana dashboard from the scrapes taken during the run (written to
// $CODEMODE_DASHBOARD_SVG when set: that is how docs/grafana's picture is
// made).
func TestObservabilityOfTheBuiltBinary(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "caddy")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	otlp := newOTLPReceiver(t)
	api := newItemsAPI(t)
	upstream := newUpstreamMCP(t)
	port, admin := nettest.Port(t), nettest.Port(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	hash, _ := bcrypt.GenerateFromPassword([]byte("pw"), bcrypt.MinCost)
	cfg := fmt.Sprintf(`{
	admin 127.0.0.1:%[2]d
	persist_config off
	log {
		output stderr
		format json
		level DEBUG
	}
	codemode {
		throttle {
			default_rate_limit 60 24h global
		}
		broker {
			demo_tools
			openapi items %[3]s/openapi.json {
				base_url %[3]s
			}
		}
		meta {
			upstream up {
				url %[4]s
			}
			rate_limit meta:search 3 24h
		}
		auth {
			development
			issuer %[1]s
			user demo %[5]s
		}
	}
}

%[1]s {
	bind 127.0.0.1
	tracing {
		span codemode
	}
	handle_path /broker/* {
		codemode_broker
	}
	codemode_mcp /mcp
}
`, base, admin, api.srv.URL, upstream.url, hash)
	cfgPath := filepath.Join(t.TempDir(), "Caddyfile")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	gw := startGateway(t, bin, cfgPath, otlp.srv.URL, base, admin)

	// The traffic mix. Counts are kept to check the metrics exactly.
	scraper := startScraping(t, admin)
	logStart := gw.lines()
	const rounds, perRound = 8, 3
	pause := 400 * time.Millisecond
	if os.Getenv("CODEMODE_DASHBOARD_SVG") != "" {
		pause = 3 * time.Second // the same traffic, spread for the picture
	}
	client := &http.Client{Timeout: 60 * time.Second}
	twoCalls := `const a = await callTool("math:add", {a: 20, b: 22});
const it = await callTool("items_getItem", {id: "7"});
return {sum: a.sum, name: it.name};`
	target := execute(t, client, base, twoCalls)
	if target.last != "result" || !strings.Contains(target.payload, `"sum":42`) || !strings.Contains(target.payload, `"Widget 7"`) {
		t.Fatalf("target execution: %s %s", target.last, target.payload)
	}
	cs := connectMCP(t, base)
	for range rounds {
		var wg sync.WaitGroup
		for range perRound {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := execute(t, client, base, `await callTool("text:upper", {text: "x"});`+"\n"+twoCalls)
				if r.last != "result" {
					t.Errorf("load execution: %s %s", r.last, r.payload)
				}
			}()
		}
		if res := callTool(t, cs, "meta:describe", map[string]any{"toolNames": []string{"math:add"}}); res.IsError {
			t.Errorf("meta:describe: %s", textOf(res))
		}
		wg.Wait()
		time.Sleep(pause)
	}
	unknown := execute(t, client, base, `let c = ""; try { await callTool("no:such", {}) } catch (e) { c = e.code } return c`)
	if !strings.Contains(unknown.payload, `"TOOL_NOT_FOUND"`) {
		t.Fatalf("unknown tool: %s", unknown.payload)
	}
	if r := execute(t, client, base, `return (`); r.last != "error" {
		t.Fatalf("syntax error: %s %s", r.last, r.payload)
	}
	const upperLoop = 45
	limited := execute(t, client, base, fmt.Sprintf(`let ok = 0, limited = 0;
for (let i = 0; i < %d; i++) { try { await callTool("text:upper", {text: "x"}); ok++ } catch (e) { if (e.code === "RATE_LIMIT") limited++ } }
return {ok, limited};`, upperLoop))
	var loop struct{ Result struct{ OK, Limited int } }
	_ = json.Unmarshal([]byte(limited.payload), &loop)
	if loop.Result.Limited < 1 || loop.Result.OK+loop.Result.Limited != upperLoop {
		t.Fatalf("rate-limited loop: %s", limited.payload)
	}
	for range 4 {
		callTool(t, cs, "meta:search", map[string]any{"queries": []string{"add two numbers"}})
	}
	if res := callTool(t, cs, "meta:invoke", map[string]any{"tool": "up:double", "input": map[string]any{"n": 4}}); res.IsError {
		t.Fatalf("meta:invoke up:double: %+v", res.Content)
	}
	callTool(t, cs, "meta:invoke", map[string]any{"tool": "no:such", "input": map[string]any{}})
	if res := callTool(t, cs, "meta:execute", map[string]any{"script": `const d = await callTool("up:double", {n: 5}); const s = await callTool("math:add", {a: d.n, b: 1}); return s.sum`}); res.IsError || !strings.Contains(textOf(res), `"result":11`) {
		t.Fatalf("meta:execute: %s", textOf(res))
	}
	_ = cs.Close()
	time.Sleep(500 * time.Millisecond) // one more scrape after the traffic
	scrapes := scraper.stop()
	logEnd := gw.lines()

	// /metrics: the series and their values.
	fams := scrape(t, admin)
	executions := 1 + rounds*perRound + 3
	exact := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"codemode_broker_executions_started_total", nil, float64(executions)},
		{"codemode_broker_executions_finished_total", map[string]string{"outcome": "completed"}, float64(executions - 1)},
		{"codemode_broker_executions_finished_total", map[string]string{"outcome": "syntax_error"}, 1},
		{"codemode_broker_execution_duration_seconds", map[string]string{"outcome": "completed"}, float64(executions - 1)},
		{"codemode_broker_sessions", map[string]string{"status": "running"}, 0},
		{"codemode_broker_events_streamed_total", map[string]string{"type": "result"}, float64(executions - 1)},
		{"codemode_tool_calls_total", map[string]string{"source": "catalog", "outcome": "ok"}, float64(1 + rounds*perRound)},
		// math:add from the broker's executions, meta:execute's plan.
		{"codemode_tool_calls_total", map[string]string{"source": "registry", "outcome": "rate_limit"}, float64(loop.Result.Limited)},
		{"codemode_tool_calls_total", map[string]string{"source": "unknown", "outcome": "tool_not_found"}, 2},
		{"codemode_tool_calls_total", map[string]string{"source": "upstream", "outcome": "ok"}, 2},
		{"codemode_sandbox_scripts_total", map[string]string{"engine": "worker", "status": "ok"}, float64(executions - 1 + 1)},
		{"codemode_sandbox_scripts_total", map[string]string{"engine": "worker", "status": "syntax_error"}, 1},
		{"codemode_meta_calls_total", map[string]string{"tool": "describe", "outcome": "ok"}, rounds},
		{"codemode_meta_calls_total", map[string]string{"tool": "invoke", "outcome": "ok"}, 1},
		{"codemode_meta_calls_total", map[string]string{"tool": "invoke", "outcome": "not_found"}, 1},
		{"codemode_meta_calls_total", map[string]string{"tool": "execute", "outcome": "ok"}, 1},
		{"codemode_catalog_source_info", map[string]string{"source": "items"}, 1},
		{"codemode_catalog_source_operations", map[string]string{"source": "items"}, 1},
		{"codemode_catalog_source_last_fetch_failed", map[string]string{"source": "items"}, 0},
	}
	for _, e := range exact {
		if v, ok := sample(fams, e.name, e.labels); !ok || v != e.want {
			t.Errorf("%s%v = %v (present %v), want %v", e.name, e.labels, v, ok, e.want)
		}
	}
	registryOK := float64(1+rounds*perRound+1) + float64(rounds*perRound+loop.Result.OK) // math:add + text:upper
	if v, _ := sample(fams, "codemode_tool_calls_total", map[string]string{"source": "registry", "outcome": "ok"}); v != registryOK {
		t.Errorf("registry ok calls %v, want %v", v, registryOK)
	}
	searchOK, _ := sample(fams, "codemode_meta_calls_total", map[string]string{"tool": "search", "outcome": "ok"})
	searchLimited, _ := sample(fams, "codemode_meta_calls_total", map[string]string{"tool": "search", "outcome": "rate_limit"})
	if searchOK < 3 || searchOK+searchLimited != 4 {
		t.Errorf("searches ok %v, rate-limited %v; want 4 with at least 3 ok", searchOK, searchLimited)
	}
	// The guard refused the tool calls over their limit and the search over
	// meta:search's.
	if v, _ := sample(fams, "codemode_guard_decisions_total", map[string]string{"rule": "rate_limit", "outcome": "rate_limited"}); v != float64(loop.Result.Limited)+searchLimited {
		t.Errorf("guard rate_limited decisions %v, want %v", v, float64(loop.Result.Limited)+searchLimited)
	}
	positive := []struct {
		name   string
		labels map[string]string
	}{
		{"codemode_catalog_source_last_success_timestamp_seconds", map[string]string{"source": "items"}},
		{"codemode_catalog_fetches_total", map[string]string{"source": "items", "outcome": "ok"}},
		{"codemode_sandbox_workers_resident_memory_bytes", nil},
		{"codemode_sandbox_worker_resident_memory_max_bytes", nil},
		{"codemode_sandbox_worker_memory_limit_bytes", nil},
		{"codemode_sandbox_worker_start_duration_seconds", nil},
		{"codemode_tool_call_duration_seconds", map[string]string{"source": "catalog"}},
		{"codemode_meta_search_duration_seconds", nil},
		{"codemode_meta_search_results", nil},
		{"codemode_guard_decisions_total", map[string]string{"rule": "rate_limit", "outcome": "allowed"}},
		{"codemode_oauth_signing_key_age_seconds", nil},
	}
	for _, p := range positive {
		if v, ok := sample(fams, p.name, p.labels); !ok || !(v > 0) {
			t.Errorf("%s%v = %v (present %v), want > 0", p.name, p.labels, v, ok)
		}
	}
	var workers float64
	for _, state := range []string{"idle", "busy", "starting"} {
		v, ok := sample(fams, "codemode_sandbox_workers", map[string]string{"state": state})
		if !ok {
			t.Errorf("no codemode_sandbox_workers{state=%q}", state)
		}
		workers += v
	}
	if workers < 1 {
		t.Errorf("%v sandbox workers", workers)
	}
	// The codemode series pass Prometheus' own lint (naming, units, help).
	raw := scrapeRaw(t, admin)
	problems, err := promlint.New(bytes.NewReader(raw)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "codemode_") {
			t.Errorf("promlint: %s: %s", p.Metric, p.Text)
		}
	}

	// Traces: the tree of the target execution, and W3C trace context at
	// the OpenAPI service and the upstream MCP server.
	var spans map[string]*tracepb.Span
	var exec *tracepb.Span
	eventuallyT(t, "the target execution's spans", func() bool {
		spans = otlp.byID()
		exec = nil
		for _, s := range spans {
			if s.Name == "codemode.execute" && attr(s, "codemode.session.id") == target.session {
				exec = s
			}
		}
		if exec == nil {
			return false
		}
		n := 0
		for _, s := range spans {
			if hex.EncodeToString(s.TraceId) == hex.EncodeToString(exec.TraceId) {
				n++
			}
		}
		return n >= 6 // server, execute, sandbox, two tools, the HTTP call
	})
	child := func(parent *tracepb.Span, name string) *tracepb.Span {
		t.Helper()
		for _, s := range spans {
			if s.Name == name && bytes.Equal(s.ParentSpanId, parent.SpanId) {
				return s
			}
		}
		t.Fatalf("no span %q under %q; spans of the trace: %s", name, parent.Name, traceNames(spans, exec.TraceId))
		return nil
	}
	server := spans[hex.EncodeToString(exec.ParentSpanId)]
	if server == nil || server.Kind != tracepb.Span_SPAN_KIND_SERVER || server.Name != "codemode" {
		t.Fatalf("codemode.execute's parent is not Caddy's server span: %v", server)
	}
	run := child(exec, "codemode.sandbox.run")
	child(run, "execute_tool math:add")
	item := child(run, "execute_tool items_getItem")
	get := child(item, "GET /items/{id}")
	if get.Kind != tracepb.Span_SPAN_KIND_CLIENT || attr(get, "http.response.status_code") != "200" {
		t.Errorf("catalog call span %v", get)
	}
	want := fmt.Sprintf("00-%x-%x-01", exec.TraceId, get.SpanId)
	if got := api.traceparentOf("7", want); got != want {
		t.Errorf("the OpenAPI service saw traceparent %q, want %q", got, want)
	}
	for _, s := range spans {
		for _, a := range s.Attributes {
			if v := a.GetValue().GetStringValue(); strings.Contains(v, "callTool") || strings.Contains(v, "Widget") {
				t.Errorf("span %s attribute %s carries script or result data: %q", s.Name, a.Key, v)
			}
		}
	}
	var invoke *tracepb.Span
	for _, s := range spans {
		if s.Name == "tools/call meta:invoke" && attr(s, "codemode.meta.outcome") == "ok" {
			invoke = s
		}
	}
	if invoke == nil {
		t.Fatal("no span of the meta:invoke call")
	}
	if p := spans[hex.EncodeToString(invoke.ParentSpanId)]; p == nil || p.Kind != tracepb.Span_SPAN_KIND_SERVER {
		t.Errorf("meta:invoke's span is not under Caddy's server span: %v", p)
	}
	mcpClient := child(child(invoke, "execute_tool up:double"), "tools/call double")
	want = fmt.Sprintf("00-%x-%x-01", invoke.TraceId, mcpClient.SpanId)
	if !upstream.saw(want) {
		t.Errorf("the upstream MCP server never saw traceparent %s (saw %v)", want, upstream.seen())
	}

	// Logs: nothing above info while serving, and every line of an
	// execution names its session and request.
	lines := gw.linesBetween(logStart, logEnd)
	var sessionLines int
	for _, l := range lines {
		switch l.Level {
		case "debug", "info":
		default:
			t.Errorf("%s line under healthy load: %s", l.Level, l.raw)
		}
		if sid, ok := l.Fields["session_id"].(string); ok && sid != "" {
			sessionLines++
			if rid, _ := l.Fields["request_id"].(string); rid == "" {
				t.Errorf("line with a session but no request id: %s", l.raw)
			}
			if sid == target.session && l.Fields["request_id"] != target.requestID {
				t.Errorf("target session line with request id %v, its response said %s", l.Fields["request_id"], target.requestID)
			}
		}
	}
	if sessionLines < executions {
		t.Errorf("only %d log lines name a session", sessionLines)
	}

	// Events: the events app logs every emitted event at debug.
	var events []string
	for _, l := range lines {
		if l.Logger == "events" && l.Msg == "event" {
			data, _ := l.Fields["data"].(map[string]any)
			if data["session_id"] == target.session || data["path"] == "meta_invoke" || data["path"] == "meta_execute" {
				events = append(events, fmt.Sprintf("%v/%v", l.Fields["name"], data["path"]))
			}
			for k := range data {
				if !documentedEventKeys[k] {
					t.Errorf("event %v carries undocumented key %q", l.Fields["name"], k)
				}
			}
		}
	}
	got := strings.Join(events, " ")
	for _, want := range []string{
		"session:created/broker tool:called/broker tool:completed/broker tool:called/broker tool:completed/broker session:completed/broker",
		"tool:called/meta_invoke tool:completed/meta_invoke",
		"session:created/meta_execute tool:called/meta_execute tool:completed/meta_execute tool:called/meta_execute tool:completed/meta_execute session:completed/meta_execute",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("events %q lack %q", got, want)
		}
	}

	// The dashboard, drawn from the scrapes of this run.
	d, err := dashboard.Load("../../docs/grafana/caddy-codemode.json")
	if err != nil {
		t.Fatal(err)
	}
	note := fmt.Sprintf("Drawn by internal/dashboard (not Grafana) from %d scrapes of /metrics, %s apart, during TestObservabilityOfTheBuiltBinary's traffic: the dashboard's own queries evaluated on real values.",
		len(scrapes), scrapeEvery)
	svg, err := dashboard.Render(d, scrapes, note)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(svg), "<path d="); n < 15 {
		t.Errorf("only %d plotted lines in the dashboard", n)
	}
	if out := os.Getenv("CODEMODE_DASHBOARD_SVG"); out != "" {
		if err := os.WriteFile(out, svg, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// documentedEventKeys are the payload keys docs/observability.md lists.
var documentedEventKeys = map[string]bool{
	"path": true, "session_id": true, "status": true, "tool_calls": true, "user_id": true, "tenant_id": true,
	"duration_ms": true, "script_status": true, "tool": true, "call_id": true, "outcome": true, "error_code": true,
}

// eventuallyT polls cond for up to 60 s (a loaded machine; the span
// exporter batches).
func eventuallyT(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// gateway is the running binary and its log.
type gateway struct {
	mu  sync.Mutex
	log []logLine
}

type logLine struct {
	Level, Logger, Msg string
	Fields             map[string]any
	raw                string
}

func startGateway(t *testing.T, bin, cfgPath, otlpURL, base string, admin int) *gateway {
	t.Helper()
	cmd := exec.Command(bin, "run", "--config", cfgPath, "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(),
		"OTEL_TRACES_EXPORTER=otlp",
		"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf",
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT="+otlpURL+"/v1/traces",
		"OTEL_BSP_SCHEDULE_DELAY=200",
		"OTEL_SERVICE_NAME=codemode-e2e",
	)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	gw := &gateway{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		for sc.Scan() {
			l := logLine{raw: sc.Text()}
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				l.Level, _ = m["level"].(string)
				l.Logger, _ = m["logger"].(string)
				l.Msg, _ = m["msg"].(string)
				l.Fields = m
			}
			gw.mu.Lock()
			gw.log = append(gw.log, l)
			gw.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		<-done
		if t.Failed() {
			gw.mu.Lock()
			n := len(gw.log)
			for _, l := range gw.log[max(0, n-60):] {
				t.Log(l.raw)
			}
			gw.mu.Unlock()
		}
	})
	eventuallyT(t, "the gateway", func() bool {
		resp, err := http.Get(base + "/broker/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return false
		}
		resp, err = http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", admin))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	return gw
}

func (g *gateway) lines() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.log)
}

func (g *gateway) linesBetween(from, to int) []logLine {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]logLine(nil), g.log[from:to]...)
}

// executed is what a test read of one /execute stream.
type executed struct {
	session, requestID string
	last, payload      string
}

func execute(t *testing.T, c *http.Client, base, code string) executed {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"code": code})
	resp, err := c.Post(base+"/broker/execute", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Errorf("execute: %v", err)
		return executed{}
	}
	defer resp.Body.Close()
	e := executed{session: resp.Header.Get("X-Session-Id"), requestID: resp.Header.Get("X-Request-Id")}
	if resp.StatusCode != 200 || e.requestID == "" {
		t.Errorf("execute: %d, X-Request-Id %q", resp.StatusCode, e.requestID)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var ev struct {
			Type    string          `json:"type"`
			Payload json.RawMessage `json:"payload"`
		}
		if json.Unmarshal(sc.Bytes(), &ev) == nil {
			e.last, e.payload = ev.Type, string(ev.Payload)
		}
	}
	return e
}

func connectMCP(t *testing.T, base string) *mcp.ClientSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "v1"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: base + "/mcp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func callTool(t *testing.T, cs *mcp.ClientSession, name string, args any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return res
}

func textOf(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func scrapeRaw(t *testing.T, admin int) []byte {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", admin))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("/metrics: %d %v", resp.StatusCode, err)
	}
	return b
}

func parseMetrics(t *testing.T, raw []byte) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

func scrape(t *testing.T, admin int) map[string]*dto.MetricFamily {
	t.Helper()
	return parseMetrics(t, scrapeRaw(t, admin))
}

// sample is dashboard.Value.
var sample = dashboard.Value

const scrapeEvery = 300 * time.Millisecond

// scraper reads /metrics periodically, for the dashboard picture.
type scraper struct {
	mu      sync.Mutex
	scrapes []dashboard.Scrape
	quit    chan struct{}
	done    chan struct{}
}

func startScraping(t *testing.T, admin int) *scraper {
	s := &scraper{quit: make(chan struct{}), done: make(chan struct{})}
	url := fmt.Sprintf("http://127.0.0.1:%d/metrics", admin)
	take := func() {
		resp, err := http.Get(url)
		if err != nil {
			return
		}
		defer resp.Body.Close()
		p := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := p.TextToMetricFamilies(resp.Body)
		if err != nil {
			return
		}
		s.mu.Lock()
		s.scrapes = append(s.scrapes, dashboard.FromFamilies(time.Now(), fams))
		s.mu.Unlock()
	}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(scrapeEvery)
		defer tick.Stop()
		take()
		for {
			select {
			case <-s.quit:
				take()
				return
			case <-tick.C:
				take()
			}
		}
	}()
	t.Cleanup(func() {
		select {
		case <-s.done:
		default:
			close(s.quit)
			<-s.done
		}
	})
	return s
}

func (s *scraper) stop() []dashboard.Scrape {
	close(s.quit)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.scrapes
}

// otlpReceiver is an OTLP/HTTP trace endpoint (protobuf) keeping every span.
type otlpReceiver struct {
	srv   *httptest.Server
	mu    sync.Mutex
	spans []*tracepb.Span
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	r := &otlpReceiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var body io.Reader = req.Body
		if req.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(req.Body)
			if err != nil {
				http.Error(w, err.Error(), 400)
				return
			}
			body = zr
		}
		b, err := io.ReadAll(body)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		var in coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &in); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		r.mu.Lock()
		for _, rs := range in.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				r.spans = append(r.spans, ss.Spans...)
			}
		}
		r.mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *otlpReceiver) byID() map[string]*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := make(map[string]*tracepb.Span, len(r.spans))
	for _, s := range r.spans {
		m[hex.EncodeToString(s.SpanId)] = s
	}
	return m
}

func attr(s *tracepb.Span, key string) string {
	for _, a := range s.Attributes {
		if a.Key == key {
			if v, ok := a.Value.Value.(*commonpb.AnyValue_IntValue); ok {
				return fmt.Sprint(v.IntValue)
			}
			return a.Value.GetStringValue()
		}
	}
	return ""
}

func traceNames(spans map[string]*tracepb.Span, traceID []byte) string {
	var out []string
	for _, s := range spans {
		if bytes.Equal(s.TraceId, traceID) {
			out = append(out, fmt.Sprintf("%s(parent %x)", s.Name, s.ParentSpanId))
		}
	}
	return strings.Join(out, ", ")
}

// itemsAPI is an OpenAPI service with one operation, recording the
// traceparent of each call.
type itemsAPI struct {
	srv  *httptest.Server
	mu   sync.Mutex
	seen map[string][]string // item id -> traceparents
}

func newItemsAPI(t *testing.T) *itemsAPI {
	a := &itemsAPI{seen: map[string][]string{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /openapi.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"openapi":"3.0.3","info":{"title":"items","version":"1"},"paths":{"/items/{id}":{"get":{"operationId":"getItem","summary":"Get an item by id","parameters":[{"name":"id","in":"path","required":true,"schema":{"type":"string"}}],"responses":{"200":{"description":"ok","content":{"application/json":{"schema":{"type":"object"}}}}}}}}}`)
	})
	mux.HandleFunc("GET /items/{id}", func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		a.seen[r.PathValue("id")] = append(a.seen[r.PathValue("id")], r.Header.Get("Traceparent"))
		a.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"id": r.PathValue("id"), "name": "Widget " + r.PathValue("id")})
	})
	a.srv = httptest.NewServer(mux)
	t.Cleanup(a.srv.Close)
	return a
}

// traceparentOf returns want when a call of item id carried it, else the
// traceparents seen.
func (a *itemsAPI) traceparentOf(id, want string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, tp := range a.seen[id] {
		if tp == want {
			return tp
		}
	}
	return strings.Join(a.seen[id], ",")
}

// upstreamMCP is an MCP server with one tool, double, recording the
// traceparent headers of its requests.
type upstreamMCP struct {
	url string
	mu  sync.Mutex
	tps []string
}

func newUpstreamMCP(t *testing.T) *upstreamMCP {
	u := &upstreamMCP{}
	srv := mcp.NewServer(&mcp.Implementation{Name: "up", Version: "v1"}, nil)
	type in struct {
		N int `json:"n"`
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "double", Description: "Double a number"},
		func(_ context.Context, _ *mcp.CallToolRequest, x in) (*mcp.CallToolResult, map[string]int, error) {
			return nil, map[string]int{"n": 2 * x.N}, nil
		})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tp := r.Header.Get("Traceparent"); tp != "" {
			u.mu.Lock()
			u.tps = append(u.tps, tp)
			u.mu.Unlock()
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	u.url = hs.URL
	return u
}

func (u *upstreamMCP) saw(tp string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, s := range u.tps {
		if s == tp {
			return true
		}
	}
	return false
}

func (u *upstreamMCP) seen() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.tps...)
}
