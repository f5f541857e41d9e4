package broker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"
	"github.com/codemode-gateway/caddy-codemode/guard"
)

// TestRequestLimitsAreCeilings: a caller may lower the timeout, maxToolCalls
// and maxSteps, never raise them above the configured maximums (400
// LIMIT_EXCEEDED naming the maximum); a route lowers them further.
func TestRequestLimitsAreCeilings(t *testing.T) {
	b, srv := newTestBroker(t, func(o *BrokerOptions) { o.DefaultTimeout = 2 * time.Second; o.DefaultMaxToolCalls = 5 })
	for _, body := range []string{
		`{"code":"return 1","timeout":300000}`,
		`{"code":"return 1","maxToolCalls":6}`,
		`{"code":"return 1","maxSteps":100001}`,
	} {
		code, _, resp := do(t, http.MethodPost, srv.URL+"/execute", body, nil)
		if code != http.StatusBadRequest || errorCode(t, resp) != CodeLimitExceeded || !strings.Contains(string(resp), "configured maximum") {
			t.Errorf("%s: %d %s", body, code, resp)
		}
	}
	// Lowering works.
	s := startExecute(t, srv.URL, map[string]any{"code": `for (let i = 0; i < 100; i++); return 1`, "maxSteps": 10}, nil)
	evs := append([]event{s.next()}, s.rest()...)
	var ep ErrorPayload
	evs[len(evs)-1].decode(t, &ep)
	if !strings.Contains(ep.Error.Message, "step limit of 10 ") {
		t.Errorf("lowered maxSteps: %+v", ep)
	}
	// A route's ceilings are lower still.
	route := httptest.NewServer(b.HTTPHandler(&HandlerOptions{Limits: RouteLimits{Timeout: time.Second, MaxToolCalls: 2}}))
	defer route.Close()
	code, _, resp := do(t, http.MethodPost, route.URL+"/execute", `{"code":"return 1","timeout":1500}`, nil)
	if code != http.StatusBadRequest || !strings.Contains(string(resp), "maximum of 1000 ms") {
		t.Errorf("route timeout: %d %s", code, resp)
	}
	s = startExecute(t, route.URL, map[string]any{"code": `for (let i = 0; i < 3; i++) await callTool("math:add", {a: i}); return 1`}, nil)
	evs = append([]event{s.next()}, s.rest()...)
	if last := evs[len(evs)-1]; last.Type != EventError || !strings.Contains(string(last.Payload), "tool call limit of 2") {
		t.Errorf("route maxToolCalls: %s %s", last.Type, last.Payload)
	}
}

// TestToolCallCeilingIsTheEngines: an engine that stops scripts at fewer
// tool calls than the broker's max_tool_calls is the ceiling a request
// meets: more is 400 LIMIT_EXCEEDED naming the engine's limit, where it was
// accepted and then cut at the engine's.
func TestToolCallCeilingIsTheEngines(t *testing.T) {
	_, srv := newTestBroker(t, func(o *BrokerOptions) {
		o.Engine = sandbox.NewInProcess(&sandbox.Options{Limits: sandbox.Limits{MaxToolCalls: 3}})
		o.DefaultMaxToolCalls = 50
	})
	code, _, resp := do(t, http.MethodPost, srv.URL+"/execute", `{"code":"return 1","maxToolCalls":10}`, nil)
	if code != http.StatusBadRequest || errorCode(t, resp) != CodeLimitExceeded || !strings.Contains(string(resp), "maximum of 3") {
		t.Fatalf("maxToolCalls 10 over an engine limit of 3: %d %s", code, resp)
	}
	s := startExecute(t, srv.URL, map[string]any{"code": `return 1`, "maxToolCalls": 3}, nil)
	evs := append([]event{s.next()}, s.rest()...)
	if last := evs[len(evs)-1]; last.Type != EventResult {
		t.Fatalf("maxToolCalls 3: %s %s", last.Type, last.Payload)
	}
}

// keyBroker serves api-key authentication with the given keys (key ->
// user id; an empty id is a key without a user).
func keyBroker(t *testing.T, keys map[string]string, mutate func(*BrokerOptions)) *httptest.Server {
	_, srv := newTestBroker(t, func(o *BrokerOptions) {
		o.Authentication = &AuthConfig{Type: AuthAPIKey, Validate: func(_ context.Context, tok string) (*AuthResult, error) {
			if u, ok := keys[tok]; ok {
				return &AuthResult{Valid: true, UserID: u}, nil
			}
			return &AuthResult{Valid: false}, nil
		}}
		if mutate != nil {
			mutate(o)
		}
	})
	return srv
}

// TestKeysWithoutUserAreTheirOwnPrincipal: two keys configured without a
// user id do not share sessions: one cannot read or answer the other's.
func TestKeysWithoutUserAreTheirOwnPrincipal(t *testing.T) {
	srv := keyBroker(t, map[string]string{"k1": "", "k2": ""}, nil)
	k1, k2 := http.Header{"X-API-Key": {"k1"}}, http.Header{"X-API-Key": {"k2"}}
	s := startExecute(t, srv.URL, map[string]any{"code": `return await callTool("client:prompt", {question: "q"})`}, k1)
	var sess Session
	s.next().decode(t, &sess)
	s.next() // the tool call
	if code, _, body := do(t, http.MethodGet, srv.URL+"/sessions/"+sess.ID, nil, k2); code != http.StatusNotFound {
		t.Fatalf("the other key read the session: %d %s", code, body)
	}
	if code, _, body := do(t, http.MethodPost, srv.URL+"/sessions/"+sess.ID+"/tool-result", map[string]any{"callId": "1", "result": "theirs"}, k2); code != http.StatusNotFound {
		t.Fatalf("the other key answered: %d %s", code, body)
	}
	if code, _, body := do(t, http.MethodPost, srv.URL+"/sessions/"+sess.ID+"/tool-result", map[string]any{"callId": "1", "result": "mine"}, k1); code != http.StatusOK {
		t.Fatalf("the owner's answer: %d %s", code, body)
	}
	if evs := s.rest(); !strings.Contains(string(evs[len(evs)-1].Payload), `"mine"`) {
		t.Fatalf("result: %s", evs[len(evs)-1].Payload)
	}
	if !strings.HasPrefix(sess.UserID, "key:") {
		t.Errorf("session owner %q, want the key's own principal", sess.UserID)
	}
}

// TestFailedAuthenticationIsLimited: wrong keys count against the client
// address's bucket (429 once spent), and the 401 names the API-key scheme.
func TestFailedAuthenticationIsLimited(t *testing.T) {
	srv := keyBroker(t, map[string]string{"good": "u"}, func(o *BrokerOptions) {
		o.RateLimiting = &RateLimitConfig{WindowMs: time.Hour.Milliseconds(), MaxRequests: 6}
	})
	var codes []int
	for i := range 8 {
		code, hdr, _ := do(t, http.MethodGet, srv.URL+"/sessions/x", nil, http.Header{"X-API-Key": {fmt.Sprint("wrong", i)}})
		codes = append(codes, code)
		if code == http.StatusUnauthorized && !strings.HasPrefix(hdr.Get("WWW-Authenticate"), "APIKey ") {
			t.Errorf("WWW-Authenticate %q", hdr.Get("WWW-Authenticate"))
		}
	}
	if codes[0] != http.StatusUnauthorized || codes[7] != http.StatusTooManyRequests {
		t.Fatalf("codes %v: want 401 first and 429 once the bucket is spent", codes)
	}
	// Without a request limit, MaxAuthFailures bounds them.
	srv = keyBroker(t, map[string]string{"good": "u"}, func(o *BrokerOptions) { o.MaxAuthFailures = 3 })
	codes = codes[:0]
	for range 5 {
		code, _, _ := do(t, http.MethodGet, srv.URL+"/sessions/x", nil, http.Header{"X-API-Key": {"wrong"}})
		codes = append(codes, code)
	}
	if codes[2] != http.StatusUnauthorized || codes[4] != http.StatusTooManyRequests {
		t.Fatalf("codes %v", codes)
	}
}

// TestBucketsIncludeTheTenant: the same user id in two tenants has two
// request buckets.
func TestBucketsIncludeTheTenant(t *testing.T) {
	b, _ := newTestBroker(t, func(o *BrokerOptions) {
		o.RateLimiting = &RateLimitConfig{WindowMs: time.Hour.Milliseconds(), MaxRequests: 1}
	})
	h := b.Handler()
	get := func(tenant string) int {
		r := httptest.NewRequest(http.MethodGet, "/sessions/x", nil)
		r = r.WithContext(WithAuth(r.Context(), &AuthResult{Valid: true, UserID: "u", TenantID: tenant}))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	if a, c := get("a"), get("c"); a != http.StatusNotFound || c != http.StatusNotFound {
		t.Fatalf("first request of each tenant: %d %d", a, c)
	}
	if a := get("a"); a != http.StatusTooManyRequests {
		t.Fatalf("second request of tenant a: %d", a)
	}
}

// TestClientIPFromTheFrontEnd: anonymous buckets use the address the front
// end determined (Caddy's client_ip behind trusted proxies), not the
// connection's, which behind a load balancer is the balancer's.
func TestClientIPFromTheFrontEnd(t *testing.T) {
	b, _ := newTestBroker(t, func(o *BrokerOptions) {
		o.RateLimiting = &RateLimitConfig{WindowMs: time.Hour.Milliseconds(), MaxRequests: 1}
	})
	get := getBehindBalancer(b.Handler())
	if a, c := get("203.0.113.1"), get("203.0.113.2"); a != http.StatusNotFound || c != http.StatusNotFound {
		t.Fatalf("two clients behind one balancer: %d %d", a, c)
	}
}

// getBehindBalancer returns a function that GETs an unknown session
// through h as the client ip behind a load balancer (the address the
// front end determined, WithClientIP) and returns the status.
func getBehindBalancer(h http.Handler) func(ip string) int {
	return func(ip string) int {
		r := httptest.NewRequest(http.MethodGet, "/sessions/x", nil)
		r.RemoteAddr = "10.0.0.1:4000" // the load balancer
		r = r.WithContext(WithClientIP(r.Context(), ip))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
}

// TestSessionsPerPrincipal: one caller cannot take every session of the
// gateway.
func TestSessionsPerPrincipal(t *testing.T) {
	b, _ := newTestBroker(t, func(o *BrokerOptions) { o.MaxSessionsPerPrincipal = 2 })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	code := `return await callTool("client:prompt", {question: "q"})`
	for range 2 {
		if _, err := b.start(ctx, code, ExecuteOptions{ClientIP: "203.0.113.1"}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := b.start(ctx, code, ExecuteOptions{ClientIP: "203.0.113.1"})
	var be *Error
	if !errors.As(err, &be) || be.Code != CodeSessionLimit || !strings.Contains(be.Message, "this caller") {
		t.Fatalf("third session: %v", err)
	}
	if _, err := b.start(ctx, code, ExecuteOptions{ClientIP: "203.0.113.2"}); err != nil {
		t.Fatalf("another caller: %v", err)
	}
}

// TestPrincipalIsTheIPv6Prefix: an anonymous caller rotating the
// addresses of its /64 is one principal (MaxSessionsPerPrincipal) and one
// bucket (RateLimiting, over the HTTP handler); the next /64 is another;
// ClientPrefixes set another prefix length.
func TestPrincipalIsTheIPv6Prefix(t *testing.T) {
	for _, tc := range []struct {
		prefixes guard.ClientPrefixes
		same     string // an address of the first caller's prefix
		other    string // an address of another prefix
	}{
		{guard.ClientPrefixes{}, "2001:db8:1:2:ffff::9", "2001:db8:1:3::1"},
		{guard.ClientPrefixes{IPv6: 48}, "2001:db8:1:ff::9", "2001:db8:2::1"},
	} {
		b, _ := newTestBroker(t, func(o *BrokerOptions) {
			o.MaxSessionsPerPrincipal = 2
			o.ClientPrefixes = tc.prefixes
			o.RateLimiting = &RateLimitConfig{WindowMs: time.Hour.Milliseconds(), MaxRequests: 3}
		})
		ctx, cancel := context.WithCancel(context.Background())
		code := `return await callTool("client:prompt", {question: "q"})`
		for _, ip := range []string{"2001:db8:1:2::1", "[2001:db8:1:2::2]:443"} {
			if _, err := b.start(ctx, code, ExecuteOptions{ClientIP: ip}); err != nil {
				t.Fatal(err)
			}
		}
		_, err := b.start(ctx, code, ExecuteOptions{ClientIP: tc.same})
		var be *Error
		if !errors.As(err, &be) || be.Code != CodeSessionLimit {
			t.Fatalf("%+v: third session from %s: %v", tc.prefixes, tc.same, err)
		}
		if _, err := b.start(ctx, code, ExecuteOptions{ClientIP: tc.other}); err != nil {
			t.Fatalf("%+v: another prefix %s: %v", tc.prefixes, tc.other, err)
		}
		cancel()

		get := getBehindBalancer(b.Handler())
		for i := range 3 {
			if c := get(fmt.Sprintf("2001:db8:1:2::%x", 0x100+i)); c != http.StatusNotFound {
				t.Fatalf("%+v: request %d: %d", tc.prefixes, i+1, c)
			}
		}
		if c := get(tc.same); c != http.StatusTooManyRequests {
			t.Fatalf("%+v: fourth request of the prefix, from %s: %d, want 429", tc.prefixes, tc.same, c)
		}
		if c := get(tc.other); c != http.StatusNotFound {
			t.Fatalf("%+v: another prefix %s: %d", tc.prefixes, tc.other, c)
		}
	}
}

// TestStreamIsBounded: a session that streams more than MaxStreamBytes
// ends with STREAM_LIMIT.
func TestStreamIsBounded(t *testing.T) {
	b, _ := newTestBroker(t, func(o *BrokerOptions) { o.MaxStreamBytes = 64 << 10 })
	evs, err := collect(t, b, `const s = "x".repeat(4000); for (let i = 0; i < 50; i++) await callTool("text:upper", {text: s}); return 1`, ExecuteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	last := evs[len(evs)-1]
	if p, ok := last.Payload.(*ErrorPayload); !ok || p.Error.Code != CodeStreamLimit {
		t.Fatalf("last event %s %+v", last.Type, last.Payload)
	}
}

// TestEveryToolCallHasADeadline: without a guard, a Go tool that hangs is
// ended by ToolTimeout.
func TestEveryToolCallHasADeadline(t *testing.T) {
	b, _ := newTestBroker(t, func(o *BrokerOptions) {
		o.ToolTimeout = 50 * time.Millisecond
		o.Tools.Register(ToolDefinition{Name: "hang", Description: "hangs", Handler: func(ctx context.Context, _ map[string]any, _ *ExecutionContext) (any, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		}})
	})
	evs, err := collect(t, b, `try { await callTool("hang", {}) } catch (e) { return e.code }`, ExecuteOptions{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if last := evs[len(evs)-1]; last.Type != EventResult || string(last.Payload.(*ResultPayload).Result) != `"EXECUTION_TIMEOUT"` {
		t.Fatalf("last event %s %+v", last.Type, last.Payload)
	}
}

// TestDemoKVIsBounded: the demo store refuses big values and holds 1 MiB
// in all.
func TestDemoKVIsBounded(t *testing.T) {
	b, _ := newTestBroker(t, nil)
	r := b.tools.Get("kv:set")
	ctx := context.Background()
	if _, err := r.Handler(ctx, map[string]any{"key": "a", "value": strings.Repeat("x", 5000)}, nil); err == nil || !strings.Contains(err.Error(), "at most 4096 bytes") {
		t.Fatalf("big value: %v", err)
	}
	var err error
	n := 0
	for ; n < 300 && err == nil; n++ {
		_, err = r.Handler(ctx, map[string]any{"key": fmt.Sprint("k", n), "value": strings.Repeat("x", 4000)}, nil)
	}
	var te *sandbox.ToolError
	if !errors.As(err, &te) || te.Code != "KV_FULL" || n < 250 {
		t.Fatalf("store full after %d values: %v", n, err)
	}
	// Overwriting a value within the budget still works.
	if _, err := r.Handler(ctx, map[string]any{"key": "k0", "value": "small"}, nil); err != nil {
		t.Fatalf("overwrite: %v", err)
	}
}
