package metatools

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/codemode-gateway/caddy-codemode/broker"
	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"
)

type seenEvent struct {
	name, tool, session, code string
	calls                     int
}

func listen(mu *sync.Mutex, seen *[]seenEvent) broker.Listener {
	return func(ev broker.Event) {
		e := seenEvent{name: ev.Name, tool: ev.Tool}
		if ev.Session != nil {
			e.session, e.calls = ev.Session.ID, ev.Session.ToolCalls
		}
		if te, ok := ev.Err.(*sandbox.ToolError); ok {
			e.code = te.Code
		}
		mu.Lock()
		*seen = append(*seen, e)
		mu.Unlock()
	}
}

// TestMetaLifecycleEventsAndMetrics: meta:execute (the service's engine)
// reports a session with its tool events, an unknown tool's included and
// counts current; meta:invoke reports tool events without a session; the
// meta-tool calls, searches and non-broker tool calls are counted.
func TestMetaLifecycleEventsAndMetrics(t *testing.T) {
	var mu sync.Mutex
	var seen []seenEvent
	mm, tm := NewMetrics(), broker.NewMetrics()
	f := newFixture(t, fixtureOptions{options: func(o *Options) {
		o.Listener, o.Metrics, o.ToolMetrics = listen(&mu, &seen), mm, tm
	}})
	script := `const s = await callTool("math:add", {a: 1, b: 2});
let code = ""; try { await callTool("no:such", {}) } catch (e) { code = e.code }
const c = await callTool("crm:listContacts", {});
return {sum: s.sum, code, n: c.length}`
	var res sandbox.Result
	structured(t, f.call(t, "meta:execute", map[string]any{"script": script}), &res)
	if res.Status != sandbox.StatusOK || string(res.Result) != `{"code":"TOOL_NOT_FOUND","n":2,"sum":3}` {
		t.Fatalf("plan: %s %s %+v", res.Status, res.Result, res.Error)
	}
	f.call(t, "meta:invoke", map[string]any{"tool": "no:such", "input": map[string]any{}})
	f.call(t, "meta:invoke", map[string]any{"tool": "math:add", "input": map[string]any{"a": 2, "b": 2}})
	f.call(t, "meta:search", map[string]any{"queries": []string{"add numbers"}})
	f.call(t, "meta:execute", map[string]any{"script": "return ("})

	mu.Lock()
	got := append([]seenEvent(nil), seen...)
	mu.Unlock()
	if len(got) < 12 {
		t.Fatalf("events %+v", got)
	}
	sid := got[0].session
	want := []seenEvent{
		{name: broker.OnSessionCreated, session: sid},
		{name: broker.OnToolCalled, tool: "math:add", session: sid, calls: 1},
		{name: broker.OnToolCompleted, tool: "math:add", session: sid, calls: 1},
		{name: broker.OnToolCalled, tool: "no:such", session: sid, calls: 2},
		{name: broker.OnToolCompleted, tool: "no:such", session: sid, calls: 2, code: CodeNotFound},
		{name: broker.OnToolCalled, tool: "crm:listContacts", session: sid, calls: 3},
		{name: broker.OnToolCompleted, tool: "crm:listContacts", session: sid, calls: 3},
		{name: broker.OnSessionCompleted, session: sid, calls: 3},
		{name: broker.OnToolCalled, tool: "no:such"},
		{name: broker.OnToolCompleted, tool: "no:such", code: CodeNotFound},
		{name: broker.OnToolCalled, tool: "math:add"},
		{name: broker.OnToolCompleted, tool: "math:add"},
	}
	if sid == "" {
		t.Fatal("plan session without id")
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("event %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	// The failed plan: created, then error with the syntax error's code.
	if n := len(got); got[n-1].name != broker.OnSessionError || got[n-1].code != sandbox.CodeSyntaxError || got[n-2].name != broker.OnSessionCreated {
		t.Errorf("failed plan events %+v", got[12:])
	}

	val := func(c prometheus.Collector) float64 { return testutil.ToFloat64(c) }
	for _, c := range []struct {
		tool, outcome string
		want          float64
	}{{"execute", "ok", 1}, {"execute", "syntax_error", 1}, {"invoke", "not_found", 1}, {"invoke", "ok", 1}, {"search", "ok", 1}} {
		if v := val(mm.calls.WithLabelValues(c.tool, c.outcome)); v != c.want {
			t.Errorf("meta calls %s/%s = %v, want %v", c.tool, c.outcome, v, c.want)
		}
	}
	if n := testutil.CollectAndCount(mm.searchLatency); n != 1 {
		t.Errorf("search latency series %d", n)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(tm, mm)
	if v := toolCalls(t, reg, broker.SourceUpstream, "ok"); v != 3 {
		t.Errorf("upstream ok calls %v, want 3 (math:add twice, crm:listContacts)", v)
	}
	if v := toolCalls(t, reg, broker.SourceUnknown, "tool_not_found"); v != 2 {
		t.Errorf("unknown tool calls %v, want 2", v)
	}

	// A failed plan's label is its status whatever its error code:
	// runtime_error, tool_error and illegal_access were "other".
	f.call(t, "meta:execute", map[string]any{"script": `throw new Error("boom")`})
	f.call(t, "meta:execute", map[string]any{"script": `return await callTool("no:such", {})`})
	f.call(t, "meta:execute", map[string]any{"script": `return await callTool("meta:search", {queries: ["x"]})`})
	for _, outcome := range []string{"runtime_error", "tool_error", "illegal_access"} {
		if v := val(mm.calls.WithLabelValues("execute", outcome)); v != 1 {
			t.Errorf("meta calls execute/%s = %v, want 1", outcome, v)
		}
	}
	if v := val(mm.calls.WithLabelValues("execute", "other")); v != 0 {
		t.Errorf("meta calls execute/other = %v, want 0", v)
	}
}

// toolCalls reads codemode_tool_calls_total{source, outcome} from reg.
func toolCalls(t *testing.T, reg *prometheus.Registry, source, outcome string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != "codemode_tool_calls_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			if l["source"] == source && l["outcome"] == outcome {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestMetaSpansAndUpstreamTraceContext: with the request's span handed over
// by RequestContext, a meta:execute call makes its span, the plan's sandbox
// span, a span per tool call and a client span for the upstream MCP call,
// whose W3C trace context reaches the upstream in the HTTP header and in
// _meta.
func TestMetaSpansAndUpstreamTraceContext(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	rootCtx, root := tp.Tracer("test").Start(context.Background(), "POST /mcp")

	var mu sync.Mutex
	var header, meta string
	up := mcp.NewServer(&mcp.Implementation{Name: "traced", Version: "v1"}, nil)
	type in struct {
		N int `json:"n"`
	}
	mcp.AddTool(up, &mcp.Tool{Name: "double", Description: "Double a number"},
		func(_ context.Context, req *mcp.CallToolRequest, x in) (*mcp.CallToolResult, map[string]int, error) {
			mu.Lock()
			meta, _ = req.Params.Meta["traceparent"].(string)
			mu.Unlock()
			return nil, map[string]int{"n": 2 * x.N}, nil
		})
	sdkHandler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return up }, nil)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tp := r.Header.Get("Traceparent"); tp != "" {
			mu.Lock()
			header = tp
			mu.Unlock()
		}
		sdkHandler.ServeHTTP(w, r)
	}))
	defer hs.Close()
	u, err := NewUpstream(UpstreamConfig{Name: "t", URL: hs.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, fixtureOptions{extra: []ToolSource{u}, options: func(o *Options) {
		o.RequestContext = func(ctx context.Context, _ http.Header) context.Context {
			return trace.ContextWithSpan(ctx, root)
		}
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := u.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	if err := f.index.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	var res sandbox.Result
	structured(t, f.call(t, "meta:execute", map[string]any{"script": `const d = await callTool("t:double", {n: 21}); await callTool("crm:listContacts", {}); return d.n`}), &res)
	if res.Status != sandbox.StatusOK || string(res.Result) != "42" {
		t.Fatalf("plan: %s %s %+v", res.Status, res.Result, res.Error)
	}
	_ = rootCtx
	root.End()
	spans := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		spans[s.Name()] = s
	}
	parent := func(child, want string) {
		t.Helper()
		c, p := spans[child], spans[want]
		if c == nil || p == nil {
			var names []string
			for n := range spans {
				names = append(names, n)
			}
			t.Fatalf("span %q or %q missing; have %s", child, want, strings.Join(names, ", "))
		}
		if c.Parent().SpanID() != p.SpanContext().SpanID() {
			t.Errorf("%s's parent is not %s", child, want)
		}
	}
	parent("tools/call meta:execute", "POST /mcp")
	parent("codemode.sandbox.run", "tools/call meta:execute")
	parent("execute_tool t:double", "codemode.sandbox.run")
	parent("execute_tool crm:listContacts", "codemode.sandbox.run")
	parent("tools/call double", "execute_tool t:double")
	client := spans["tools/call double"].SpanContext()
	want := "00-" + client.TraceID().String() + "-" + client.SpanID().String() + "-01"
	mu.Lock()
	defer mu.Unlock()
	if header != want || meta != want {
		t.Errorf("upstream saw traceparent header %q and _meta %q, want %q", header, meta, want)
	}
}

// TestPanickingToolLeavesTheServerUp: a tool source whose Call panics (a
// bug in an embedder's source, or in the code that reads an upstream's
// answer) makes meta:invoke fail with INTERNAL_ERROR, counted and logged;
// the go-sdk runs the call on a goroutine of its own, where a panic ended
// the whole process: every session of every client, the gateway with them.
// A plan calling it fails as any tool error, and the next calls work.
func TestPanickingToolLeavesTheServerUp(t *testing.T) {
	mm := NewMetrics()
	boom := &StaticSource{
		List: []Tool{{Name: "boom:now", AppID: "boom", Description: "Panics",
			InputSchema: json.RawMessage(`{"type":"object"}`)}},
		Handlers: map[string]func(context.Context, json.RawMessage) (json.RawMessage, error){
			"boom:now": func(context.Context, json.RawMessage) (json.RawMessage, error) {
				var m map[string]int
				m["x"]++ // assignment to entry in nil map
				return nil, nil
			},
		},
	}
	f := newFixture(t, fixtureOptions{extra: []ToolSource{boom}, options: func(o *Options) { o.Metrics = mm }})
	res := f.call(t, "meta:invoke", map[string]any{"tool": "boom:now", "input": map[string]any{}})
	if !res.IsError || !strings.Contains(text(res), CodeInternalError) || strings.Contains(text(res), "nil map") {
		t.Fatalf("invoke of a panicking tool: %s", text(res))
	}
	if v := testutil.ToFloat64(mm.calls.WithLabelValues("invoke", "internal_error")); v != 1 {
		t.Errorf("meta calls invoke/internal_error = %v, want 1", v)
	}
	var plan sandbox.Result
	structured(t, f.call(t, "meta:execute", map[string]any{"script": `try { await callTool("boom:now", {}) } catch (e) { return e.code }`}), &plan)
	if plan.Status != sandbox.StatusOK || len(plan.Result) == 0 {
		t.Fatalf("plan calling a panicking tool: %s %s %+v", plan.Status, plan.Result, plan.Error)
	}
	if res := f.call(t, "meta:invoke", map[string]any{"tool": "crm:listContacts", "input": map[string]any{}}); res.IsError {
		t.Fatalf("the next call: %s", text(res))
	}
}
