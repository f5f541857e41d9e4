package broker

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/codemode-gateway/caddy-codemode/broker/catalog"
	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"
	"github.com/codemode-gateway/caddy-codemode/guard/redistest"
	"github.com/codemode-gateway/caddy-codemode/internal/telemetry"
)

// recorded is what a listener saw of one event.
type recorded struct {
	name, tool, code string
	calls            int
	status           string
}

func recordEvents(t *testing.T, b *Broker) func() []recorded {
	t.Helper()
	var mu sync.Mutex
	var seen []recorded
	for _, name := range EventNames {
		if err := b.On(name, func(ev Event) {
			r := recorded{name: ev.Name, tool: ev.Tool}
			if ev.Session != nil {
				r.calls, r.status = ev.Session.ToolCalls, ev.Session.Status
			}
			if te, ok := ev.Err.(*sandbox.ToolError); ok {
				r.code = te.Code
			}
			mu.Lock()
			seen = append(seen, r)
			mu.Unlock()
		}); err != nil {
			t.Fatal(err)
		}
	}
	return func() []recorded {
		mu.Lock()
		defer mu.Unlock()
		return append([]recorded(nil), seen...)
	}
}

// TestEventsCountCallsAndUnknownTools: tool events carry the calls made so
// far (not the count of the session's start), a call of an unknown tool
// has its tool:called and tool:completed, and the final count matches.
func TestEventsCountCallsAndUnknownTools(t *testing.T) {
	// The worker engine reaches the host for unknown tools the same way
	// (sandbox's TestUnknownToolReachesHost).
	b, _ := newTestBroker(t, nil)
	seen := recordEvents(t, b)
	evs, err := collect(t, b, `const s = await callTool("math:add", {a: 1, b: 2});
let code = "";
try { await callTool("no:such", {}); } catch (e) { code = e.code; }
return {sum: s.sum, code};`, ExecuteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r := evs[len(evs)-1].Payload.(*ResultPayload); string(r.Result) != `{"sum":3,"code":"TOOL_NOT_FOUND"}` || r.ToolCalls != 2 {
		t.Fatalf("result %s, %d calls", r.Result, r.ToolCalls)
	}
	want := []recorded{
		{name: OnSessionCreated, status: StatusPending},
		{name: OnToolCalled, tool: "math:add", calls: 1, status: StatusRunning},
		{name: OnToolCompleted, tool: "math:add", calls: 1, status: StatusRunning},
		{name: OnToolCalled, tool: "no:such", calls: 2, status: StatusRunning},
		{name: OnToolCompleted, tool: "no:such", calls: 2, status: StatusRunning, code: CodeToolNotFound},
		{name: OnSessionCompleted, calls: 2, status: StatusCompleted},
	}
	got := seen()
	if len(got) != len(want) {
		t.Fatalf("events %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("event %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestOnRefusesUnknownNames(t *testing.T) {
	b, _ := newTestBroker(t, nil)
	if err := b.On("session:started", func(Event) {}); err == nil || !strings.Contains(err.Error(), "session:created") {
		t.Fatalf("unknown name: %v", err)
	}
	if err := b.On("session_created", func(Event) {}); err == nil {
		t.Fatal("Caddy-style name accepted by the Go API")
	}
	if err := b.On(OnSessionCreated, nil); err == nil {
		t.Fatal("nil listener accepted")
	}
}

// TestMetricsOfExecutions: sessions, executions, tool calls by source and
// outcome, caller waits and streamed events are counted.
func TestMetricsOfExecutions(t *testing.T) {
	m := NewMetrics()
	cat := newCatalog(t)
	b, srv := newTestBroker(t, func(o *BrokerOptions) {
		o.Metrics = m
		o.Catalog = cat
		o.Tools.Register(ToolDefinition{Name: "ask:user", Description: "asks"})
	})
	if _, err := collect(t, b, `await callTool("math:add", {a: 1, b: 2}); await callTool("pets_getPet", {id: "1"});
try { await callTool("nope", {}) } catch (e) {} return 1`, ExecuteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := collect(t, b, `return (`, ExecuteOptions{}); err != nil {
		t.Fatal(err)
	}
	// A caller-answered call over HTTP, answered with an error.
	st := startExecute(t, srv.URL, map[string]any{"code": `try { await callTool("ask:user", {}) } catch (e) {} return 2`}, nil)
	var call ToolCallPayload
	for {
		ev := st.next()
		if ev.Type == EventToolCall {
			ev.decode(t, &call)
			break
		}
	}
	if code, _, body := do(t, http.MethodPost, srv.URL+"/sessions/"+call.SessionID+"/tool-result",
		map[string]any{"callId": call.CallID, "error": map[string]any{"message": "no", "code": "MY_OWN_CODE"}}, nil); code != 200 {
		t.Fatalf("tool-result: %d %s", code, body)
	}
	for st.next().Type != EventResult {
	}

	val := func(c prometheus.Collector) float64 { return testutil.ToFloat64(c) }
	if v := val(m.started); v != 3 {
		t.Errorf("started %v, want 3", v)
	}
	if c, s := val(m.finished.WithLabelValues("completed")), val(m.finished.WithLabelValues("syntax_error")); c != 2 || s != 1 {
		t.Errorf("finished: completed %v syntax_error %v", c, s)
	}
	// The final event goes out after the session left the gauge.
	if r, p := val(m.sessions.WithLabelValues(StatusRunning)), val(m.sessions.WithLabelValues(StatusPending)); r != 0 || p != 0 {
		t.Errorf("sessions gauge running %v pending %v after all finished", r, p)
	}
	for _, c := range []struct {
		source, outcome string
		want            float64
	}{
		{SourceRegistry, "ok", 1}, {SourceCatalog, "ok", 1}, {SourceUnknown, "tool_not_found", 1},
		{SourceCaller, "other", 1}, // a caller's own code is not a label value
	} {
		if v := val(m.toolCalls.WithLabelValues(c.source, c.outcome)); v != c.want {
			t.Errorf("tool calls %s/%s = %v, want %v", c.source, c.outcome, v, c.want)
		}
	}
	if v := val(m.callerWaiting); v != 0 {
		t.Errorf("caller waits %v after the answer", v)
	}
	// Every outcome's series is there from the start (empty); the one
	// call the caller answered, with an error of its own, is in "error"
	// alone.
	if n := testutil.CollectAndCount(m.callerWait); n != len(callerWaitOutcomes) {
		t.Errorf("caller wait series %d, want %d", n, len(callerWaitOutcomes))
	}
	for _, o := range callerWaitOutcomes {
		var got dto.Metric
		if err := m.callerWait.WithLabelValues(o).(prometheus.Histogram).Write(&got); err != nil {
			t.Fatal(err)
		}
		if want := map[bool]uint64{true: 1, false: 0}[o == "error"]; got.GetHistogram().GetSampleCount() != want {
			t.Errorf("caller waits ended %s: %d, want %d", o, got.GetHistogram().GetSampleCount(), want)
		}
	}
	if v := val(m.eventsStreamed.WithLabelValues(EventToolCall)); v < 1 {
		t.Errorf("tool_call events streamed %v", v)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	if _, err := reg.Gather(); err != nil {
		t.Fatal(err)
	}
}

// TestSpansOfAnExecution: under a traced context an execution makes the
// span tree execute -> sandbox run -> one span per tool call, the catalog
// call has an HTTP client span, the upstream API receives its W3C trace
// context, and no attribute carries the script or a tool's input.
func TestSpansOfAnExecution(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())

	var mu sync.Mutex
	var traceparent string
	mux := http.NewServeMux()
	mux.HandleFunc("GET /openapi.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(petsDoc))
	})
	mux.HandleFunc("GET /pets/{id}", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		traceparent = r.Header.Get("Traceparent")
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"name":"Rex"}`))
	})
	base := newServer(t, mux)
	cat, err := catalog.New([]catalog.Source{{Name: "pets", SpecURL: base + "/openapi.json", BaseURL: base}}, &catalog.Options{PollInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := cat.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cat.Close)
	b, _ := newTestBroker(t, func(o *BrokerOptions) { o.Catalog = cat })

	ctx, root := tp.Tracer("test").Start(context.Background(), "request")
	const secret = "s3cret-input-value"
	code := `const a = await callTool("math:add", {a: 1, b: 2}); const p = await callTool("pets_getPet", {id: "` + secret + `"}); return a.sum`
	for _, err := range b.Execute(ctx, code, ExecuteOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
	}
	root.End()

	spans := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		spans[s.Name()] = s
		for _, a := range s.Attributes() {
			if v := a.Value.Emit(); strings.Contains(v, secret) || strings.Contains(v, "callTool") {
				t.Errorf("span %s attribute %s carries script data: %q", s.Name(), a.Key, v)
			}
		}
	}
	parent := func(child, want string) {
		t.Helper()
		c, p := spans[child], spans[want]
		if c == nil || p == nil {
			t.Fatalf("spans %q or %q missing; have %v", child, want, names(spans))
		}
		if c.Parent().SpanID() != p.SpanContext().SpanID() {
			t.Errorf("%s's parent is not %s", child, want)
		}
	}
	parent("codemode.execute", "request")
	parent("codemode.sandbox.run", "codemode.execute")
	parent("execute_tool math:add", "codemode.sandbox.run")
	parent("execute_tool pets_getPet", "codemode.sandbox.run")
	parent("GET /pets/{id}", "execute_tool pets_getPet")
	if k := spans["GET /pets/{id}"].SpanKind(); k != trace.SpanKindClient {
		t.Errorf("catalog call span kind %v", k)
	}
	client := spans["GET /pets/{id}"].SpanContext()
	mu.Lock()
	defer mu.Unlock()
	if want := "00-" + client.TraceID().String() + "-" + client.SpanID().String() + "-01"; traceparent != want {
		t.Errorf("upstream traceparent %q, want %q", traceparent, want)
	}
}

func names(m map[string]sdktrace.ReadOnlySpan) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestServerErrorNamesItsRequest: a 5xx answer carries a request id, in its
// header and body, and the error log line with the cause shows the same id;
// the failed Redis round trip is counted.
func TestServerErrorNamesItsRequest(t *testing.T) {
	srvRedis := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srvRedis.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	prefix := redistest.Prefix(t)
	core, logs := observer.New(zapcore.InfoLevel)
	m := NewMetrics()
	_, srv := newTestBroker(t, func(o *BrokerOptions) {
		o.Redis, o.KeyPrefix, o.Metrics, o.Logger = rdb, prefix, m, zap.New(core)
	})
	srvRedis.Stop()
	code, h, body := do(t, http.MethodPost, srv.URL+"/execute", map[string]any{"code": "return 1"}, nil)
	if code != http.StatusServiceUnavailable {
		t.Fatalf("status %d %s", code, body)
	}
	id := h.Get("X-Request-Id")
	var eb struct {
		Error ErrorBody `json:"error"`
	}
	if err := json.Unmarshal(body, &eb); err != nil || id == "" || eb.Error.RequestID != id || eb.Error.Code != CodeStorageUnavailable {
		t.Fatalf("header id %q, body %s", id, body)
	}
	lines := logs.FilterMessage("broker request failed").FilterField(zap.String("request_id", id)).All()
	if len(lines) != 1 || lines[0].Level != zapcore.ErrorLevel || !strings.Contains(lines[0].ContextMap()["error"].(string), "creating session") {
		t.Fatalf("log lines for %s: %+v", id, logs.All())
	}
	if v := testutil.ToFloat64(m.redisErrors.WithLabelValues("put_session")); v != 1 {
		t.Errorf("redis errors %v", v)
	}
	// A 4xx answer carries the header, not a body id.
	code, h, body = do(t, http.MethodGet, srv.URL+"/nowhere", nil, nil)
	if code != 404 || h.Get("X-Request-Id") == "" || strings.Contains(string(body), "requestId") {
		t.Fatalf("404: %d %v %s", code, h, body)
	}
	// A front end's id is used as is.
	req, _ := http.NewRequestWithContext(telemetry.WithRequestID(context.Background(), "front-1"), http.MethodGet, "/nowhere", nil)
	w := httptest.NewRecorder()
	b2, _ := newTestBroker(t, nil)
	b2.Handler().ServeHTTP(w, req)
	if got := w.Header().Get("X-Request-Id"); got != "front-1" {
		t.Fatalf("front end id replaced by %q", got)
	}
}

// TestFixedLabelCountersExportedAtZero: the counters whose label values
// are a fixed set are series from the start, so that Prometheus'
// increase() and the alerting rules see the first event; the sessions
// gauge too, so that an idle gateway's dashboard shows 0.
func TestFixedLabelCountersExportedAtZero(t *testing.T) {
	m := NewMetrics()
	for name, want := range map[string]int{
		"codemode_broker_executions_finished_total": 7,
		"codemode_broker_sessions_rejected_total":   3,
		"codemode_broker_redis_errors_total":        len(redisOperations),
		"codemode_broker_events_streamed_total":     len(eventTypes),
		"codemode_broker_sessions":                  2, // pending, running
		// The histograms of fixed label sets too (empty).
		"codemode_broker_execution_duration_seconds": 7,
		"codemode_tool_call_duration_seconds":        5,
		"codemode_broker_caller_wait_seconds":        len(callerWaitOutcomes),
	} {
		if n := testutil.CollectAndCount(m, name); n != want {
			t.Errorf("%s: %d series before any event, want %d", name, n, want)
		}
	}
}
