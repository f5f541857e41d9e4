package metatools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/redis/go-redis/v9"

	"github.com/codemode-gateway/caddy-codemode/broker"
	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"
	"github.com/codemode-gateway/caddy-codemode/guard/redistest"
)

// callerGateway is one gateway of the caller-answered tests: a broker (in
// memory, or on a shared Redis) with the demo tools (client:prompt) and
// client:pick, whose answer is a flat object, the meta-tools over it and a
// static calc:double, served like codemode_mcp does: 2026-07-28 requests
// statelessly, the others through the handshake.
func callerGateway(t *testing.T, rdb redis.UniversalClient, prefix string) *httptest.Server {
	t.Helper()
	hs, _ := callerGatewayWith(t, rdb, prefix)
	return hs
}

// callerGatewayWith is callerGateway with extra broker tools; it also
// returns the gateway's broker.
func callerGatewayWith(t *testing.T, rdb redis.UniversalClient, prefix string, extra ...broker.ToolDefinition) (*httptest.Server, *broker.Broker) {
	t.Helper()
	reg := broker.NewToolRegistry()
	for _, d := range append(broker.DemoTools(), extra...) {
		reg.Register(d)
	}
	if err := reg.Add(broker.ToolDefinition{Name: "client:pick", Description: "Let the user pick an option",
		InputSchema:  json.RawMessage(`{"type":"object","properties":{"options":{"type":"array","items":{"type":"string"}}}}`),
		OutputSchema: json.RawMessage(`{"type":"object","properties":{"choice":{"type":"string","enum":["a","b"]},"count":{"type":"integer","minimum":0}},"required":["choice"]}`),
	}); err != nil {
		t.Fatal(err)
	}
	b := newTestBroker(t, &broker.BrokerOptions{Tools: reg, Engine: sandbox.NewInProcess(nil), Redis: rdb, KeyPrefix: prefix})
	calc := &StaticSource{
		List: []Tool{{Name: "calc:double", AppID: "calc", Description: "Double a number",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"number"}},"required":["n"]}`)}},
		Handlers: map[string]func(context.Context, json.RawMessage) (json.RawMessage, error){
			"calc:double": func(_ context.Context, in json.RawMessage) (json.RawMessage, error) {
				var v struct{ N float64 }
				json.Unmarshal(in, &v)
				return json.Marshal(map[string]float64{"n": 2 * v.N})
			},
		},
	}
	ix, err := NewIndex([]ToolSource{&BrokerSource{B: b}, calc}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ix.Reload(context.Background())
	srv := NewServer(NewService(ix, &Options{Engine: sandbox.NewInProcess(nil), Sessions: b}), nil)
	get := func(*http.Request) *mcp.Server { return srv }
	modern := HTTPHandler(mcp.NewStreamableHTTPHandler(get, &mcp.StreamableHTTPOptions{Stateless: true, PropagateRequestCancellation: true}))
	legacy := HTTPHandler(mcp.NewStreamableHTTPHandler(get, nil))
	hs := httptest.NewServer(testIdentity(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Mcp-Protocol-Version") >= "2026-07-28" {
			modern.ServeHTTP(w, r)
			return
		}
		legacy.ServeHTTP(w, r)
	})))
	t.Cleanup(hs.Close)
	return hs, b
}

// testUserHeader plays the authentication in front of the test gateways:
// testIdentity turns it into the request's Identity, as codemode_mcp does
// with Caddy's {http.auth.user.id}.
const testUserHeader = "X-Test-User"

// testTenantHeader is the user's tenant, with testUserHeader.
const testTenantHeader = "X-Test-Tenant"

func testIdentity(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u := r.Header.Get(testUserHeader); u != "" {
			r = r.WithContext(WithIdentity(r.Context(), Identity{UserID: u, TenantID: r.Header.Get(testTenantHeader)}))
		}
		h.ServeHTTP(w, r)
	})
}

// roundRobin sends each request to the next gateway, recording which.
type roundRobin struct {
	mu     sync.Mutex
	hosts  []string
	n      int
	seq    []int
	header http.Header // added to every request
}

func newRoundRobin(servers ...*httptest.Server) *roundRobin {
	rr := &roundRobin{header: http.Header{}}
	for _, s := range servers {
		u, _ := url.Parse(s.URL)
		rr.hosts = append(rr.hosts, u.Host)
	}
	return rr
}

func (rr *roundRobin) RoundTrip(r *http.Request) (*http.Response, error) {
	rr.mu.Lock()
	i := rr.n % len(rr.hosts)
	rr.n++
	rr.seq = append(rr.seq, i)
	rr.mu.Unlock()
	r = r.Clone(r.Context())
	r.URL.Host, r.Host = rr.hosts[i], rr.hosts[i]
	for k, v := range rr.header {
		r.Header[k] = v
	}
	return http.DefaultTransport.RoundTrip(r)
}

// answering is an elicitation handler that answers per tool (nil content
// declines) and records the questions.
type answering struct {
	mu      sync.Mutex
	answers map[string]map[string]any
	asked   []*mcp.ElicitParams
}

func (a *answering) handle(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.asked = append(a.asked, req.Params)
	for tool, content := range a.answers {
		if strings.Contains(req.Params.Message, "calls "+tool+" ") {
			if content == nil {
				return &mcp.ElicitResult{Action: "decline"}, nil
			}
			return &mcp.ElicitResult{Action: "accept", Content: content}, nil
		}
	}
	return &mcp.ElicitResult{Action: "cancel"}, nil
}

func connectAnswering(t *testing.T, hc *http.Client, endpoint, version string, a *answering) *mcp.ClientSession {
	t.Helper()
	opts := &mcp.ClientOptions{}
	if a != nil {
		opts.ElicitationHandler = a.handle
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, opts).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: hc}, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func callJSON(t *testing.T, cs *mcp.ClientSession, tool string, args any) (*mcp.CallToolResult, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return res, b.String()
}

const askingPlan = `
const name = await callTool("client:prompt", {question: "name?"});
const d = await callTool("calc:double", {n: 21});
const p = await callTool("client:pick", {options: ["a", "b"]});
return {name, n: d.n, p};`

// TestCallerAnsweredOverMRTRAcrossGateways: a 2026-07-28 client answers a
// plan's caller-answered calls through multi round-trip requests, every
// request on the other of two gateways sharing one Redis; nothing about the
// client is kept by either (no Mcp-Session-Id), the plan lives in the
// broker's session.
func TestCallerAnsweredOverMRTRAcrossGateways(t *testing.T) {
	rdb, prefix := redistest.Client(t)
	a, b := callerGateway(t, rdb, prefix), callerGateway(t, rdb, prefix)
	rr := newRoundRobin(a, b)
	rec := newMCPRecorder()
	rec.rt = rr
	ans := &answering{answers: map[string]map[string]any{
		"client:prompt": {"result": "Ada"},
		"client:pick":   {"choice": "b", "count": 3},
	}}
	cs := connectAnswering(t, &http.Client{Transport: rec}, a.URL, "", ans)
	if v := cs.InitializeResult().ProtocolVersion; v != "2026-07-28" {
		t.Fatalf("negotiated %s", v)
	}
	rr.mu.Lock()
	before := rr.n
	rr.mu.Unlock()
	res, text := callJSON(t, cs, "meta:execute", map[string]any{"script": askingPlan})
	if res.IsError || !strings.Contains(text, `"status":"ok"`) || !strings.Contains(text, `"result":{"name":"Ada","n":42,"p":{"choice":"b","count":3}}`) {
		t.Fatalf("execute: %s", text)
	}
	rr.mu.Lock()
	seq := rr.seq[before:]
	rr.mu.Unlock()
	if len(seq) != 3 || seq[0] == seq[1] || seq[1] == seq[2] {
		t.Fatalf("the plan took %d requests on gateways %v, want 3 alternating", len(seq), seq)
	}
	if len(ans.asked) != 2 || !strings.Contains(ans.asked[0].Message, `{"question":"name?"}`) {
		t.Fatalf("questions: %+v", ans.asked)
	}
	schema, _ := json.Marshal(ans.asked[1].RequestedSchema)
	if !strings.Contains(string(schema), `"choice":{"enum":["a","b"],"type":"string"}`) {
		t.Fatalf("client:pick's form is not its output object: %s", schema)
	}
	// Every interim answer is the revision's InputRequiredResult.
	s26 := loadMCPSchema(t, "2026-07-28")
	interim := 0
	rec.mu.Lock()
	for _, an := range rec.answers {
		var env struct {
			Result json.RawMessage `json:"result"`
		}
		json.Unmarshal(an.raw, &env)
		if strings.Contains(string(env.Result), `"input_required"`) {
			interim++
			if err := s26.check("InputRequiredResult", env.Result); err != nil {
				t.Errorf("input_required result %s: %v", env.Result, err)
			}
		}
	}
	rec.mu.Unlock()
	if interim != 2 {
		t.Fatalf("%d input_required results, want 2", interim)
	}

	// A declined question is a tool error the plan can handle.
	ans.answers["client:prompt"] = nil
	_, text = callJSON(t, cs, "meta:execute", map[string]any{"script": `
const r = await callTool("client:prompt", {question: "?"}, {throwOnError: false});
return r.error.code;`})
	if !strings.Contains(text, `"result":"CALLER_DECLINED"`) {
		t.Fatalf("declined: %s", text)
	}

	// meta:invoke of a caller-answered tool: the retry carries the answer.
	ans.answers["client:prompt"] = map[string]any{"result": "Grace"}
	res, text = callJSON(t, cs, "meta:invoke", map[string]any{"tool": "client:prompt", "input": map[string]any{"question": "who?"}})
	if res.IsError || text != "Grace" {
		t.Fatalf("invoke: %v %s", res.IsError, text)
	}
}

// TestCallerAnsweredRequestState: a retry whose requestState is not its
// plan's, or comes from another user, is refused; a plan a client never
// answers keeps asking.
func TestCallerAnsweredRequestState(t *testing.T) {
	gw := callerGateway(t, nil, "")
	rr := newRoundRobin(gw)
	rr.header.Set(testUserHeader, "ada")
	// The client declares elicitation but handles input requests itself.
	ctx := context.Background()
	mcpClient := mcp.NewClient(&mcp.Implementation{Name: "manual", Version: "1"}, &mcp.ClientOptions{
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) { return nil, fmt.Errorf("unused") },
		MultiRoundTrip:     &mcp.MultiRoundTripOptions{Disabled: true},
	})
	manual, err := mcpClient.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: gw.URL, HTTPClient: &http.Client{Transport: rr}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer manual.Close()
	args := map[string]any{"script": `return await callTool("client:prompt", {question: "x?"})`}
	first, err := manual.CallTool(ctx, &mcp.CallToolParams{Name: "meta:execute", Arguments: args})
	if err != nil || !first.NeedsInput() || len(first.InputRequests) != 1 || first.RequestState == "" {
		t.Fatalf("first call: %+v %v", first, err)
	}
	var callID string
	for id := range first.InputRequests {
		callID = id
	}
	retry := func(state string, args any, responses mcp.InputResponseMap) (*mcp.CallToolResult, string) {
		t.Helper()
		res, err := manual.CallTool(ctx, &mcp.CallToolParams{Name: "meta:execute", Arguments: args, RequestState: state, InputResponses: responses})
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := json.Marshal(res)
		return res, string(raw)
	}
	// No answer: asked again, same question.
	if res, raw := retry(first.RequestState, args, nil); !res.NeedsInput() || res.InputRequests[callID] == nil {
		t.Fatalf("retry without an answer: %s", raw)
	}
	// An answer to nothing asked is ignored, as the revision says a server
	// SHOULD: the question is asked again.
	stray := mcp.InputResponseMap{"not-asked": &mcp.ElicitResult{Action: "accept", Content: map[string]any{"result": "stray"}}}
	if res, raw := retry(first.RequestState, args, stray); !res.NeedsInput() || res.InputRequests[callID] == nil {
		t.Fatalf("retry with an answer to nothing asked: %s", raw)
	}
	// A requestState of another plan or a forged one.
	other := map[string]any{"script": `return 1`}
	if res, raw := retry(first.RequestState, other, nil); !res.IsError || !strings.Contains(raw, CodeInvalidRequestState) {
		t.Fatalf("state of another plan: %s", raw)
	}
	if res, raw := retry("cm1.x.0000.abc", args, nil); !res.IsError || !strings.Contains(raw, CodeInvalidRequestState) {
		t.Fatalf("forged state: %s", raw)
	}
	// Another user presenting ada's state.
	rr.header.Set(testUserHeader, "bob")
	answer := mcp.InputResponseMap{callID: &mcp.ElicitResult{Action: "accept", Content: map[string]any{"result": "from bob"}}}
	if res, raw := retry(first.RequestState, args, answer); !res.IsError || !strings.Contains(raw, CodeInvalidRequestState) {
		t.Fatalf("bob with ada's state: %s", raw)
	}
	// A user of the same id in another tenant is another user (as the
	// broker's session owner check has it).
	rr.header.Set(testUserHeader, "ada")
	rr.header.Set(testTenantHeader, "other")
	answer = mcp.InputResponseMap{callID: &mcp.ElicitResult{Action: "accept", Content: map[string]any{"result": "from the other ada"}}}
	if res, raw := retry(first.RequestState, args, answer); !res.IsError || !strings.Contains(raw, CodeInvalidRequestState) {
		t.Fatalf("ada of another tenant with ada's state: %s", raw)
	}
	rr.header.Del(testTenantHeader)
	// Ada retrying from a client that does not declare elicitation: the
	// plan cannot go on without asking, and a server must not send input
	// requests a client did not declare, so the retry is the revision's
	// MissingRequiredClientCapabilityError (before: the questions again);
	// the plan waits on for a retry that can answer.
	bare, err := mcp.NewClient(&mcp.Implementation{Name: "bare", Version: "1"}, &mcp.ClientOptions{
		MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true},
	}).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: gw.URL, HTTPClient: &http.Client{Transport: rr}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer bare.Close()
	res, err := bare.CallTool(ctx, &mcp.CallToolParams{Name: "meta:execute", Arguments: args, RequestState: first.RequestState})
	checkMissingElicitation(t, "retry without elicitation", res, err)
	if res, raw := retry(first.RequestState, args, nil); !res.NeedsInput() || res.InputRequests[callID] == nil {
		t.Fatalf("retry with elicitation after one without: %s", raw)
	}
	answer = mcp.InputResponseMap{callID: &mcp.ElicitResult{Action: "accept", Content: map[string]any{"result": "from ada"}}}
	if res, raw := retry(first.RequestState, args, answer); res.IsError || !strings.Contains(raw, `"result":"from ada"`) {
		t.Fatalf("ada's answer: %s", raw)
	}
}

// TestCallerAnsweredOlderRevisions: a 2025-11-25 client that declared
// elicitation is asked over its session within the one call; a client
// without elicitation (of either revision) gets TOOL_NOT_CALLABLE.
func TestCallerAnsweredOlderRevisions(t *testing.T) {
	gw := callerGateway(t, nil, "")
	ans := &answering{answers: map[string]map[string]any{
		"client:prompt": {"result": "Ada"},
		"client:pick":   {"choice": "a"},
	}}
	old := connectAnswering(t, nil, gw.URL, "2025-11-25", ans)
	if v := old.InitializeResult().ProtocolVersion; v != "2025-11-25" {
		t.Fatalf("negotiated %s", v)
	}
	res, text := callJSON(t, old, "meta:execute", map[string]any{"script": askingPlan})
	if res.IsError || !strings.Contains(text, `"result":{"name":"Ada","n":42,"p":{"choice":"a"}}`) {
		t.Fatalf("2025-11-25 with elicitation: %s", text)
	}
	for _, version := range []string{"2025-11-25", ""} {
		cs := connectAnswering(t, nil, gw.URL, version, nil)
		_, text := callJSON(t, cs, "meta:execute", map[string]any{"script": `return await callTool("client:prompt", {question: "?"})`})
		if !strings.Contains(text, `"status":"tool_error"`) || !strings.Contains(text, CodeToolNotCallable) {
			t.Fatalf("%q without elicitation: %s", version, text)
		}
		if version == "" {
			// 2026-07-28: the request cannot be served without asking, so
			// it is the revision's MissingRequiredClientCapabilityError.
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "meta:invoke",
				Arguments: map[string]any{"tool": "client:prompt", "input": map[string]any{"question": "?"}}})
			checkMissingElicitation(t, "2026-07-28 invoke without elicitation", res, err)
			continue
		}
		res, text = callJSON(t, cs, "meta:invoke", map[string]any{"tool": "client:prompt", "input": map[string]any{"question": "?"}})
		if !res.IsError || !strings.Contains(text, CodeToolNotCallable) {
			t.Fatalf("%q invoke without elicitation: %s", version, text)
		}
	}
}

// checkMissingElicitation fails unless a call's outcome is revision
// 2026-07-28's MissingRequiredClientCapabilityError naming elicitation.
func checkMissingElicitation(t *testing.T, what string, res *mcp.CallToolResult, err error) {
	t.Helper()
	var je *jsonrpc.Error
	if !errors.As(err, &je) || je.Code != mcp.CodeMissingRequiredClientCapabilities {
		raw, _ := json.Marshal(res)
		t.Fatalf("%s: %v %s, want error %d", what, err, raw, mcp.CodeMissingRequiredClientCapabilities)
	}
	var data mcp.MissingRequiredClientCapabilityData
	if json.Unmarshal(je.Data, &data) != nil || data.RequiredCapabilities == nil || data.RequiredCapabilities.Elicitation == nil {
		t.Fatalf("%s: data %s, want requiredCapabilities.elicitation", what, je.Data)
	}
}

// TestIdentityFromContextOnly: the identity the meta-tools see comes from
// the request's context (WithIdentity), never from a header a client sets:
// neither the former Codemode-User-Id nor a made-up request reference.
func TestIdentityFromContextOnly(t *testing.T) {
	var seen []CallInfo
	var mu sync.Mutex
	src := &StaticSource{List: []Tool{{Name: "who:ami", AppID: "who", Description: "who am I"}},
		Handlers: map[string]func(ctx context.Context, in json.RawMessage) (json.RawMessage, error){
			"who:ami": func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
				ci, _ := CallInfoFrom(ctx)
				mu.Lock()
				seen = append(seen, ci)
				mu.Unlock()
				return json.RawMessage(`"ok"`), nil
			}}}
	ix, err := NewIndex([]ToolSource{src}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ix.Reload(context.Background())
	srv := NewServer(NewService(ix, &Options{Engine: sandbox.NewInProcess(nil)}), nil)
	inner := HTTPHandler(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Front") == "ada" {
			r = r.WithContext(WithIdentity(r.Context(), Identity{UserID: "ada", TenantID: "t1", ClientIP: "192.0.2.1"}))
		}
		inner.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	call := func(header http.Header) CallInfo {
		t.Helper()
		rr := newRoundRobin(hs)
		rr.header = header
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(context.Background(),
			&mcp.StreamableClientTransport{Endpoint: hs.URL, HTTPClient: &http.Client{Transport: rr}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "meta:invoke",
			Arguments: map[string]any{"tool": "who:ami", "input": map[string]any{}}})
		if err != nil || res.IsError {
			t.Fatalf("invoke: %v %+v", err, res)
		}
		mu.Lock()
		defer mu.Unlock()
		return seen[len(seen)-1]
	}
	if ci := call(http.Header{"X-Front": {"ada"}}); ci.UserID != "ada" || ci.TenantID != "t1" || ci.ClientIP != "192.0.2.1" {
		t.Errorf("identity from the context: %+v", ci)
	}
	spoof := http.Header{"Codemode-User-Id": {"mallory"}, "Codemode-Client-Ip": {"10.0.0.1"}, "Codemode-Request-Ref": {"0123"}}
	if ci := call(spoof); ci.UserID != "" || ci.ClientIP != "" {
		t.Errorf("identity from client headers: %+v", ci)
	}
}

// TestCallerPlanEndsWithItsCancelledFirstRequest: a 2026-07-28 client that
// cancels meta:execute before the plan asked it anything never got a
// requestState, so nobody can reach the plan again: it is aborted at once,
// not left calling tools until its execution timeout.
func TestCallerPlanEndsWithItsCancelledFirstRequest(t *testing.T) {
	started := make(chan struct{}, 1)
	block := broker.ToolDefinition{Name: "test:block", Description: "Waits until its call is cancelled",
		Handler: func(ctx context.Context, _ map[string]any, _ *broker.ExecutionContext) (any, error) {
			select {
			case started <- struct{}{}:
			default:
			}
			<-ctx.Done()
			return nil, ctx.Err()
		}}
	gw, b := callerGatewayWith(t, nil, "", block)
	rr := newRoundRobin(gw)
	rr.header.Set(testUserHeader, "ada")
	cs := connectAnswering(t, &http.Client{Transport: rr}, gw.URL, "2026-07-28", &answering{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "meta:execute", Arguments: map[string]any{"script": `return await callTool("test:block", {})`}})
		done <- err
	}()
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("the plan never called test:block")
	}
	if n := b.Stats().Active; n != 1 {
		t.Fatalf("%d sessions active while the plan waits, want 1", n)
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("the cancelled call returned no error")
	}
	deadline := time.Now().Add(10 * time.Second) // the broker's execution timeout is 30 s
	for b.Stats().Active != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the plan still runs 10 s after its only request was cancelled")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
