package metatools

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/redis/go-redis/v9"

	"github.com/codemode-gateway/caddy-codemode/broker"
	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"
	"github.com/codemode-gateway/caddy-codemode/guard/redistest"
)

// questionBroker is the plan sessions of the tests of a 2026-07-28 caller
// asked an upstream's question: no tools of its own, plans of at most
// timeout, in memory or on rdb.
func questionBroker(t testing.TB, timeout time.Duration, rdb redis.UniversalClient, prefix string) *broker.Broker {
	t.Helper()
	return newTestBroker(t, &broker.BrokerOptions{Tools: broker.NewToolRegistry(), Engine: sandbox.NewInProcess(nil), DefaultTimeout: timeout, Redis: rdb, KeyPrefix: prefix})
}

// newTestBroker is a broker of opts, closed when the test ends.
func newTestBroker(t testing.TB, opts *broker.BrokerOptions) *broker.Broker {
	t.Helper()
	b, err := broker.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		b.Close(ctx)
	})
	return b
}

// asUser is an HTTP client whose requests carry the user of testIdentity.
func asUser(user *string) *http.Client {
	return &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		r = r.Clone(r.Context())
		r.Header.Set(testUserHeader, *user)
		return http.DefaultTransport.RoundTrip(r)
	})}
}

// TestUpstreamQuestionsReachA2026Caller: an upstream tool's question
// (either era's) during a meta:invoke or a meta:execute plan of a
// 2026-07-28 caller comes back as the caller's own input_required result,
// keyed "<call id>.1" and carrying the upstream's message and schema as
// they are, with the plan's (or the held call's) requestState; the retry's
// answer (accept, decline, cancel) goes upstream
// as it is. An answer of the wrong type, of an unknown action or over the
// bound is CALLER_ANSWER_INVALID and the plan waits on; a tampered, foreign
// or another user's requestState is INVALID_REQUEST_STATE; an oversize
// question fails the call with UPSTREAM_QUESTION_REFUSED without asking. A
// caller that never retries leaves no goroutine once the plan's time is
// over (the upstream call ends with it).
func TestUpstreamQuestionsReachA2026Caller(t *testing.T) {
	for _, modern := range []bool{false, true} {
		for _, via := range []string{"invoke", "execute"} {
			era := map[bool]string{false: "2025-11-25 upstream", true: "2026-07-28 upstream"}[modern]
			t.Run(era+" "+via, func(t *testing.T) { askA2026Caller(t, modern, via) })
		}
	}
}

func askA2026Caller(t *testing.T, modern bool, via string) {
	urls, states, _, _ := questionGatewayWith(t, modern, questionBroker(t, 5*time.Second, nil, ""))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	user := "ada"
	hc := asUser(&user)

	// A go-sdk caller answering the input requests itself.
	var mu sync.Mutex
	var reply *mcp.ElicitResult
	var asked []*mcp.ElicitParams
	auto, err := mcp.NewClient(&mcp.Implementation{Name: "caller", Version: "1"}, &mcp.ClientOptions{
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			mu.Lock()
			defer mu.Unlock()
			asked = append(asked, req.Params)
			return reply, nil
		},
	}).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: urls[1], HTTPClient: hc}, &mcp.ClientSessionOptions{ProtocolVersion: firstMRTRRevision})
	if err != nil {
		t.Fatal(err)
	}
	defer auto.Close()
	if v := auto.InitializeResult().ProtocolVersion; v != firstMRTRRevision {
		t.Fatalf("the caller speaks %s", v)
	}
	for _, want := range []*mcp.ElicitResult{
		{Action: "accept", Content: map[string]any{"name": "Ada"}}, {Action: "decline"}, {Action: "cancel"},
	} {
		mu.Lock()
		reply = want
		mu.Unlock()
		ans, code := askVia(t, auto, via, "ask")
		if code != "" || ans["action"] != want.Action || (want.Action == "accept") != (ans["content"] != nil) {
			t.Fatalf("%s: %v %s", want.Action, ans, code)
		}
		if want.Action == "accept" && ans["content"].(map[string]any)["name"] != "Ada" {
			t.Fatalf("accept: %v", ans)
		}
	}
	mu.Lock()
	if len(asked) != 3 || asked[0].Message != "Your name?" || asked[0].RequestedSchema == nil {
		t.Errorf("the caller was asked %+v, want the upstream's question as it is, 3 times", asked)
	}
	mu.Unlock()
	if n := len(states()); n != 3 {
		t.Errorf("%d answers reached the upstream, want 3", n)
	}
	if _, code := askVia(t, auto, via, "big"); code != CodeUpstreamQuestionRefused {
		t.Fatalf("oversize question: code %q, want %s", code, CodeUpstreamQuestionRefused)
	}

	// A caller handling the input requests by hand.
	manual, err := mcp.NewClient(&mcp.Implementation{Name: "manual", Version: "1"}, &mcp.ClientOptions{
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) { return nil, context.Canceled },
		MultiRoundTrip:     &mcp.MultiRoundTripOptions{Disabled: true},
	}).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: urls[1], HTTPClient: hc}, &mcp.ClientSessionOptions{ProtocolVersion: firstMRTRRevision})
	if err != nil {
		t.Fatal(err)
	}
	defer manual.Close()
	// The plan's other steps stay the plan's: the question's
	// answer is the value callTool returns.
	meta, args, others := MetaExecute, map[string]any{"script": `const a = await callTool("up:ask", {}); return {asked: a};`}, map[string]any{"script": `return 1;`}
	statePrefix := "cm1.x."
	if via == "invoke" {
		meta, args, others = MetaInvoke, map[string]any{"tool": "up:ask", "input": map[string]any{}}, map[string]any{"tool": "up:ask", "input": map[string]any{"other": 1}}
		statePrefix = "cm1.v."
	}
	call := func(state string, args any, responses mcp.InputResponseMap) (*mcp.CallToolResult, string) {
		t.Helper()
		res, err := manual.CallTool(ctx, &mcp.CallToolParams{Name: meta, Arguments: args, RequestState: state, InputResponses: responses})
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := json.Marshal(res)
		return res, string(raw)
	}
	first, raw := call("", args, nil)
	if !first.NeedsInput() || len(first.InputRequests) != 1 || !strings.HasPrefix(first.RequestState, statePrefix) {
		t.Fatalf("first call: %s", raw)
	}
	var key string
	for k := range first.InputRequests {
		key = k
	}
	if q, ok := first.InputRequests[key].(*mcp.ElicitParams); !ok || !strings.HasSuffix(key, ".1") || q.Message != "Your name?" {
		t.Fatalf("input request %q: %s", key, raw)
	}
	answer := func(er *mcp.ElicitResult) mcp.InputResponseMap { return mcp.InputResponseMap{key: er} }
	for what, bad := range map[string]*mcp.ElicitResult{
		"wrong type":     {Action: "accept", Content: map[string]any{"name": 42}},
		"missing field":  {Action: "accept", Content: map[string]any{}},
		"unknown action": {Action: "maybe"},
		"oversize":       {Action: "accept", Content: map[string]any{"name": strings.Repeat("y", MaxUpstreamQuestionBytes)}},
	} {
		res, raw := call(first.RequestState, args, answer(bad))
		if !res.IsError || !strings.Contains(raw, CodeCallerAnswerInvalid) || !strings.Contains(raw, `inputResponses[\\\"`+key+`\\\"].content`) {
			t.Fatalf("an answer with a %s: %s", what, raw)
		}
	}
	// The plan waits on: asked again, same key.
	if res, raw := call(first.RequestState, args, nil); !res.NeedsInput() || res.InputRequests[key] == nil {
		t.Fatalf("retry after refused answers: %s", raw)
	}
	good := answer(&mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Grace"}})
	tampered := []byte(first.RequestState)
	tampered[len(statePrefix)] ^= 1
	for what, try := range map[string]func() (*mcp.CallToolResult, string){
		"a tampered requestState":  func() (*mcp.CallToolResult, string) { return call(string(tampered), args, good) },
		"another call's arguments": func() (*mcp.CallToolResult, string) { return call(first.RequestState, others, good) },
		"another user": func() (*mcp.CallToolResult, string) {
			user = "bob"
			defer func() { user = "ada" }()
			return call(first.RequestState, args, good)
		},
	} {
		if res, raw := try(); !res.IsError || !strings.Contains(raw, CodeInvalidRequestState) {
			t.Fatalf("%s: %s", what, raw)
		}
	}
	// A retry from a client that declares no elicitation: the call
	// cannot go on without asking, and is not run anew.
	bare, err := mcp.NewClient(&mcp.Implementation{Name: "bare", Version: "1"}, &mcp.ClientOptions{
		MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true},
	}).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: urls[1], HTTPClient: hc}, &mcp.ClientSessionOptions{ProtocolVersion: firstMRTRRevision})
	if err != nil {
		t.Fatal(err)
	}
	defer bare.Close()
	n := len(states())
	res, err := bare.CallTool(ctx, &mcp.CallToolParams{Name: meta, Arguments: args, RequestState: first.RequestState})
	checkMissingElicitation(t, via+" retry without elicitation", res, err)
	res, raw = call(first.RequestState, args, good)
	if res.IsError || res.NeedsInput() || !strings.Contains(raw, `"name":"Grace"`) {
		t.Fatalf("the fitting answer: %s", raw)
	}
	if m := len(states()); m != n+1 {
		t.Errorf("%d answers reached the upstream, want 1", m-n)
	}

	// A caller that never retries: the plan's time ends the
	// upstream call, and nothing is left.
	before, _ := goroutineCount()
	if first, raw := call("", args, nil); !first.NeedsInput() {
		t.Fatalf("first call: %s", raw)
	}
	noGoroutinesLeft(t, before, 30*time.Second)
	if m := len(states()); m != n+1 {
		t.Errorf("the gateway answered the upstream for a caller who never did")
	}
}

// TestUpstreamQuestionAcrossGateways: two gateways sharing one real
// redis-server, every request of a 2026-07-28 caller on the other one, by
// meta:execute and meta:invoke: the question waits in the plan's session (its pending call, question
// included, read from Redis by the gateway that got the retry), and the
// answer reaches the upstream call held open by the gateway running the
// plan, once.
func TestUpstreamQuestionAcrossGateways(t *testing.T) {
	rdb, prefix := redistest.Client(t)
	var hosts [2]string
	var states [2]func() []string
	for i := range hosts {
		urls, st, _, _ := questionGatewayWith(t, i == 0, questionBroker(t, 30*time.Second, rdb, prefix))
		hosts[i], states[i] = strings.TrimPrefix(urls[1], "http://"), st
	}
	var mu sync.Mutex
	var seq []int
	hc := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		mu.Lock()
		i := len(seq) % 2
		seq = append(seq, i)
		mu.Unlock()
		r = r.Clone(r.Context())
		r.URL.Host, r.Host = hosts[i], hosts[i]
		return http.DefaultTransport.RoundTrip(r)
	})}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var asked int
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "caller", Version: "1"}, &mcp.ClientOptions{
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			mu.Lock()
			asked++
			mu.Unlock()
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Ada"}}, nil
		},
	}).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: "http://" + hosts[0], HTTPClient: hc}, &mcp.ClientSessionOptions{ProtocolVersion: firstMRTRRevision})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	for i, via := range []string{"execute", "invoke"} {
		mu.Lock()
		from, asked0 := len(seq), asked
		mu.Unlock()
		ans, code := askVia(t, cs, via, "ask")
		if code != "" || ans["action"] != "accept" || ans["content"].(map[string]any)["name"] != "Ada" {
			t.Fatalf("%s: %v %s", via, ans, code)
		}
		mu.Lock()
		calls, n := seq[from:], asked-asked0
		mu.Unlock()
		if len(calls) != 2 || calls[0] == calls[1] || n != 1 {
			t.Fatalf("%s took requests on gateways %v and asked %d times, want 2 requests, one on each, one question", via, calls, n)
		}
		if got := len(states[0]()) + len(states[1]()); got != i+1 {
			t.Errorf("%s: %d answers reached the upstreams, want %d", via, got, i+1)
		}
	}
}

// BenchmarkInvokeQuietUpstream2026 is one meta:invoke of an upstream tool
// that asks nothing ("quiet", a 2026-07-28 upstream), by a 2026-07-28 caller
// that declared elicitation, on a gateway with plan sessions: the common
// case that holding an asking call open must not make slower. Its
// allocations count the caller's, the gateway's and the upstream's (one
// process).
func BenchmarkInvokeQuietUpstream2026(b *testing.B) {
	urls, _, _, _ := questionGatewayWith(b, true, questionBroker(b, 30*time.Second, nil, ""))
	ctx := context.Background()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "caller", Version: "1"}, &mcp.ClientOptions{
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "cancel"}, nil
		},
	}).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: urls[1]}, &mcp.ClientSessionOptions{ProtocolVersion: firstMRTRRevision})
	if err != nil {
		b.Fatal(err)
	}
	defer cs.Close()
	params := &mcp.CallToolParams{Name: MetaInvoke, Arguments: map[string]any{"tool": "up:quiet", "input": map[string]any{}}}
	b.ReportAllocs()
	for b.Loop() {
		res, err := cs.CallTool(ctx, params)
		if err != nil || res.IsError {
			b.Fatalf("%v %+v", err, res)
		}
	}
}
