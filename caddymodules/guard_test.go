package caddymodules

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/codemode-gateway/caddy-codemode/guard"
	"github.com/codemode-gateway/caddy-codemode/guard/redistest"
)

// guardServer provisions g and serves it over a real loopback listener with
// Caddy's request context (replacer, vars, client_ip) in front and next
// behind. userHeader, when set on a request, plays the authenticated user.
func guardServer(t *testing.T, g *Guard, next caddyhttp.HandlerFunc) *httptest.Server {
	t.Helper()
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	t.Cleanup(cancel)
	if err := g.Provision(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Cleanup() })
	if next == nil {
		next = func(w http.ResponseWriter, r *http.Request) error {
			_, err := io.WriteString(w, "ok")
			return err
		}
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		repl := caddy.NewReplacer()
		c := context.WithValue(r.Context(), caddy.ReplacerCtxKey, repl)
		c = context.WithValue(c, caddyhttp.VarsCtxKey, map[string]any{caddyhttp.ClientIPVarKey: "203.0.113.99"})
		r = r.WithContext(c)
		repl.Set("http.request.header.X-Agent", r.Header.Get("X-Agent"))
		if u := r.Header.Get("X-Test-User"); u != "" {
			repl.Set("http.auth.user.id", u)
		}
		if err := g.ServeHTTP(w, r, next); err != nil {
			t.Logf("handler error: %v", err)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// freezeGuardClock stops the clock of the guard managers provisioned during
// t at the start of a rate-limit window (of one minute or one hour). The
// window slides: a boundary falling between a test's requests (which a
// loaded machine makes likely enough) turns the current count into the
// previous window's, and a request the test expects denied is allowed.
func freezeGuardClock(t testing.TB) {
	t.Helper()
	at := time.Unix(1_800_000_000, 0) // a multiple of 3600 s
	prev := guardNow
	guardNow = func() time.Time { return at }
	t.Cleanup(func() { guardNow = prev })
}

type guardReply struct {
	status int
	header http.Header
	code   string
	body   string
}

func guardGet(t *testing.T, url string, headers map[string]string) guardReply {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := reloadClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	r := guardReply{status: resp.StatusCode, header: resp.Header, body: string(b)}
	if resp.StatusCode >= 400 {
		var e guardErrorBody
		if err := json.Unmarshal(b, &e); err != nil || e.Error.Message == "" {
			t.Fatalf("status %d body %q is not the JSON error shape", resp.StatusCode, b)
		}
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Fatalf("error content type %q", ct)
		}
		r.code = e.Error.Code
	}
	return r
}

func TestGuardHandlerGlobalRateLimit(t *testing.T) {
	freezeGuardClock(t)
	srv := guardServer(t, &Guard{RateLimits: []GuardRateLimit{{RateLimit: RateLimit{MaxRequests: 3, Window: caddy.Duration(time.Minute)}}}}, nil)
	for i := range 3 {
		r := guardGet(t, srv.URL, nil)
		if r.status != 200 || r.body != "ok" {
			t.Fatalf("request %d: %d %q", i, r.status, r.body)
		}
		// The clock is frozen at a minute boundary: the window ends in 60 s.
		if p, rl := r.header.Values("RateLimit-Policy"), rateLimitField(t, r.header); len(p) != 1 || p[0] != `"global";q=3;w=60` ||
			rl != (rateLimitItem{"global", int64(2 - i), 60}) {
			t.Fatalf("request %d: headers %v", i, r.header)
		}
	}
	r := guardGet(t, srv.URL, nil)
	if r.status != 429 || r.code != "RATE_LIMIT" {
		t.Fatalf("4th request: %d %s", r.status, r.code)
	}
	ra, rl := r.header.Get("Retry-After"), rateLimitField(t, r.header)
	if ra == "" || ra == "0" || rl.remaining != 0 || fmt.Sprint(rl.reset) != ra || r.header.Get("RateLimit-Policy") != `"global";q=3;w=60` {
		t.Fatalf("429 headers: %v", r.header)
	}
	for _, old := range []string{"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"} {
		if r.header.Get(old) != "" {
			t.Fatalf("draft-06 field %s sent: %v", old, r.header)
		}
	}
}

// rateLimitItem is the one item of a RateLimit field.
type rateLimitItem struct {
	policy           string
	remaining, reset int64
}

// rateLimitField parses the RateLimit field of h, which must be one item
// `"<policy>";r=<n>;t=<n>` (draft-ietf-httpapi-ratelimit-headers).
func rateLimitField(t *testing.T, h http.Header) rateLimitItem {
	t.Helper()
	v := h.Values("RateLimit")
	m := regexp.MustCompile(`^"([^"\\]*)";r=([0-9]+);t=([0-9]+)$`).FindStringSubmatch(strings.Join(v, ","))
	if len(v) != 1 || m == nil {
		t.Fatalf("RateLimit field %q is not one item \"name\";r=N;t=N (headers %v)", v, h)
	}
	r, _ := strconv.ParseInt(m[2], 10, 64)
	reset, _ := strconv.ParseInt(m[3], 10, 64)
	return rateLimitItem{m[1], r, reset}
}

// TestGuardRateLimitFields: the RateLimit-Policy field lists every rate
// limit with its quota and window; RateLimit names the tightest with its
// remaining quota; names are structured-field Strings.
func TestGuardRateLimitFields(t *testing.T) {
	freezeGuardClock(t)
	srv := guardServer(t, &Guard{RateLimits: []GuardRateLimit{
		{RateLimit: RateLimit{MaxRequests: 100, Window: caddy.Duration(time.Hour)}},
		{Name: `per "ip"`, RateLimit: RateLimit{MaxRequests: 3, Window: caddy.Duration(10 * time.Second), PartitionBy: "ip"}},
		{Name: "fast\u00e9%", RateLimit: RateLimit{MaxRequests: 1 << 60, Window: caddy.Duration(1500 * time.Millisecond)}},
	}}, nil)
	wantPolicy := `"global";q=100;w=3600, "per \"ip\"";q=3;w=10, "fast%C3%A9%25";q=999999999999999`
	r := guardGet(t, srv.URL, nil)
	if r.status != 200 || r.header.Get("RateLimit-Policy") != wantPolicy {
		t.Fatalf("%d, RateLimit-Policy %q, want %q", r.status, r.header.Get("RateLimit-Policy"), wantPolicy)
	}
	if v := r.header.Values("RateLimit"); len(v) != 1 || v[0] != `"per \"ip\"";r=2;t=10` {
		t.Fatalf("RateLimit %q", v)
	}

	// A name too long for the room the handler keeps for the RateLimit
	// text (its value is then copied on its own); each response carries its
	// own values, not the previous one's.
	long := strings.Repeat("a_long_limit_name_", 4)
	srv = guardServer(t, &Guard{RateLimits: []GuardRateLimit{
		{Name: long, RateLimit: RateLimit{MaxRequests: 999_999, Window: caddy.Duration(time.Minute)}},
	}}, nil)
	for i := range 3 {
		r = guardGet(t, srv.URL, nil)
		want := fmt.Sprintf(`"%s";r=%d;t=60`, long, 999_998-i)
		if v := r.header.Values("RateLimit"); r.status != 200 || len(v) != 1 || v[0] != want {
			t.Fatalf("request %d: %d, RateLimit %q, want %q", i, r.status, v, want)
		}
		if p := r.header.Get("RateLimit-Policy"); p != `"`+long+`";q=999999;w=60` {
			t.Fatalf("request %d: RateLimit-Policy %q", i, p)
		}
	}
}

// TestGuardHandlerHideRateLimitHeaders: hide_rate_limit_headers leaves
// the RateLimit and RateLimit-Policy fields out of allowed and refused requests; the limit
// still counts and a 429 still says when to retry.
func TestGuardHandlerHideRateLimitHeaders(t *testing.T) {
	freezeGuardClock(t)
	srv := guardServer(t, &Guard{HideRateLimitHeaders: true, RateLimits: []GuardRateLimit{{RateLimit: RateLimit{MaxRequests: 2, Window: caddy.Duration(time.Minute)}}}}, nil)
	noRateLimitHeaders := func(h http.Header) bool {
		return h.Get("RateLimit") == "" && h.Get("RateLimit-Policy") == ""
	}
	for i := range 2 {
		if r := guardGet(t, srv.URL, nil); r.status != 200 || !noRateLimitHeaders(r.header) {
			t.Fatalf("request %d: %d, headers %v", i, r.status, r.header)
		}
	}
	r := guardGet(t, srv.URL, nil)
	if r.status != 429 || r.code != "RATE_LIMIT" || r.header.Get("Retry-After") == "" || !noRateLimitHeaders(r.header) {
		t.Fatalf("3rd request: %d %s, headers %v", r.status, r.code, r.header)
	}
}

func TestGuardHandlerNamedPartitions(t *testing.T) {
	freezeGuardClock(t)
	srv := guardServer(t, &Guard{RateLimits: []GuardRateLimit{
		{Name: "per_agent", RateLimit: RateLimit{MaxRequests: 2, PartitionBy: "{http.request.header.X-Agent}"}},
		{Name: "per_user", RateLimit: RateLimit{MaxRequests: 3, PartitionBy: "userId"}},
	}}, nil)
	a := map[string]string{"X-Agent": "a", "X-Test-User": "alice"}
	b := map[string]string{"X-Agent": "b", "X-Test-User": "alice"}
	for i, tc := range []struct {
		h      map[string]string
		status int
	}{{a, 200}, {a, 200}, {a, 429}, {b, 200}, {b, 429 /* alice's 3 are used: per_user */}} {
		if r := guardGet(t, srv.URL, tc.h); r.status != tc.status {
			t.Fatalf("request %d: status %d, want %d (%s)", i, r.status, tc.status, r.body)
		}
	}
	// Another user on agent c is not limited by alice's counters; with
	// no user the partition is "anonymous".
	if r := guardGet(t, srv.URL, map[string]string{"X-Agent": "c", "X-Test-User": "bob"}); r.status != 200 {
		t.Fatalf("bob: %d", r.status)
	}
	if r := guardGet(t, srv.URL, map[string]string{"X-Agent": "d"}); r.status != 200 || rateLimitField(t, r.header).remaining != 1 {
		t.Fatalf("anonymous: %d %v", r.status, r.header)
	}
}

func TestGuardHandlerIPFilter(t *testing.T) {
	deny := guardServer(t, &Guard{IPFilter: &GuardIPFilter{Deny: []string{"127.0.0.0/8"}}}, nil)
	if r := guardGet(t, deny.URL, nil); r.status != 403 || r.code != "IP_BLOCKED" {
		t.Fatalf("deny list: %d %s", r.status, r.code)
	}
	allow := guardServer(t, &Guard{IPFilter: &GuardIPFilter{Allow: []string{"10.0.0.0/8"}, DefaultAction: "deny"}}, nil)
	if r := guardGet(t, allow.URL, nil); r.status != 403 || r.code != "IP_NOT_ALLOWED" {
		t.Fatalf("default deny: %d %s", r.status, r.code)
	}
	// Own proxy logic: the client is read from X-Forwarded-For (depth 2).
	proxied := guardServer(t, &Guard{IPFilter: &GuardIPFilter{Allow: []string{"10.0.0.0/8"}, DefaultAction: "deny", TrustProxy: true, TrustedProxyDepth: 2}}, nil)
	if r := guardGet(t, proxied.URL, map[string]string{"X-Forwarded-For": "8.8.8.8, 10.1.2.3, 192.168.0.1"}); r.status != 200 {
		t.Fatalf("trusted XFF: %d %s", r.status, r.body)
	}
	if r := guardGet(t, proxied.URL, map[string]string{"X-Forwarded-For": "10.1.2.3, 8.8.8.8, 192.168.0.1"}); r.status != 403 {
		t.Fatalf("spoofed XFF entry trusted: %d", r.status)
	}
}

// slowNext answers "ok"; on /slow it first says it entered and waits for
// release.
func slowNext(entered chan<- struct{}, release <-chan struct{}) caddyhttp.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		if r.URL.Path == "/slow" {
			entered <- struct{}{}
			<-release
		}
		_, err := io.WriteString(w, "ok")
		return err
	}
}

func TestGuardHandlerConcurrency(t *testing.T) {
	entered := make(chan struct{}, 4)
	release := make(chan struct{})
	next := slowNext(entered, release)
	srv := guardServer(t, &Guard{Concurrency: []GuardConcurrency{{Concurrency: Concurrency{MaxConcurrent: 1}}}}, next)
	var wg sync.WaitGroup
	wg.Go(func() { guardGet(t, srv.URL+"/slow", nil) })
	<-entered
	if r := guardGet(t, srv.URL, nil); r.status != 429 || r.code != "CONCURRENCY_LIMIT" || r.header.Get("Retry-After") != "1" {
		t.Fatalf("while held: %d %s %v", r.status, r.code, r.header)
	}
	close(release)
	wg.Wait()
	if r := guardGet(t, srv.URL, nil); r.status != 200 {
		t.Fatalf("after release: %d", r.status)
	}

	// Queueing: the second request waits for the slot.
	entered2 := make(chan struct{}, 4)
	release2 := make(chan struct{})
	next2 := func(w http.ResponseWriter, r *http.Request) error {
		if r.URL.Path == "/slow" {
			entered2 <- struct{}{}
			<-release2
		}
		_, err := io.WriteString(w, "ok")
		return err
	}
	q := guardServer(t, &Guard{Concurrency: []GuardConcurrency{{Name: "q", Concurrency: Concurrency{MaxConcurrent: 1, QueueTimeout: caddy.Duration(30 * time.Second)}}}}, next2)
	wg.Go(func() { guardGet(t, q.URL+"/slow", nil) })
	<-entered2
	done := make(chan guardReply)
	go func() { done <- guardGet(t, q.URL, nil) }()
	time.Sleep(50 * time.Millisecond) // let it queue
	close(release2)
	if r := <-done; r.status != 200 {
		t.Fatalf("queued request: %d %s", r.status, r.body)
	}
	wg.Wait()

	// Queue timeout.
	qt := guardServer(t, &Guard{Concurrency: []GuardConcurrency{{Concurrency: Concurrency{MaxConcurrent: 1, QueueTimeout: caddy.Duration(time.Millisecond)}}}}, func(w http.ResponseWriter, r *http.Request) error {
		if r.URL.Path == "/slow" {
			entered <- struct{}{}
			<-r.Context().Done()
		}
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, qt.URL+"/slow", nil)
	go func() {
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	<-entered
	if r := guardGet(t, qt.URL, nil); r.status != 429 || r.code != "QUEUE_TIMEOUT" {
		t.Fatalf("queue timeout: %d %s", r.status, r.code)
	}
	cancel()
}

// TestGuardHandlerReleasesEverySlot holds three concurrency limits (more
// than the handler keeps on its stack) and checks that every slot comes
// back: after a request, and after a request denied by the third limit
// while it held the first two.
func TestGuardHandlerReleasesEverySlot(t *testing.T) {
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	next := slowNext(entered, release)
	one := Concurrency{MaxConcurrent: 1, PartitionBy: "session"}
	srv := guardServer(t, &Guard{Concurrency: []GuardConcurrency{
		{Name: "a", Concurrency: one}, {Name: "b", Concurrency: one}, {Name: "c", Concurrency: Concurrency{MaxConcurrent: 1}},
	}}, next)
	s1 := map[string]string{"Mcp-Session-Id": "s1"}
	s2 := map[string]string{"Mcp-Session-Id": "s2"}
	for i := range 3 {
		if r := guardGet(t, srv.URL, s1); r.status != 200 {
			t.Fatalf("request %d: %d %s (a slot was not released)", i, r.status, r.body)
		}
	}
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free) // runs before the server's Close when the test fails
	var wg sync.WaitGroup
	wg.Go(func() { guardGet(t, srv.URL+"/slow", s1) })
	<-entered
	// s2 takes a:s2 and b:s2, then finds c (global) held.
	if r := guardGet(t, srv.URL, s2); r.status != 429 || r.code != "CONCURRENCY_LIMIT" || !strings.Contains(r.body, `for \"c\"`) {
		t.Fatalf("while c is held: %d %s", r.status, r.body)
	}
	free()
	wg.Wait()
	for _, h := range []map[string]string{s2, s1, s2} {
		if r := guardGet(t, srv.URL, h); r.status != 200 {
			t.Fatalf("after the denial, %v: %d %s (a slot was not released)", h, r.status, r.body)
		}
	}
}

func TestGuardHandlerTimeout(t *testing.T) {
	srv := guardServer(t, &Guard{Timeout: caddy.Duration(20 * time.Millisecond)}, func(w http.ResponseWriter, r *http.Request) error {
		if r.URL.Path == "/started" {
			w.WriteHeader(200)
			io.WriteString(w, "partial")
		}
		<-r.Context().Done()
		return r.Context().Err()
	})
	if r := guardGet(t, srv.URL, nil); r.status != 408 || r.code != "EXECUTION_TIMEOUT" {
		t.Fatalf("timeout: %d %s", r.status, r.code)
	}
	// A response already started is not replaced.
	resp, err := http.Get(srv.URL + "/started")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(string(b), "partial") {
		t.Fatalf("started response: %d %q", resp.StatusCode, b)
	}
}

func TestGuardValidate(t *testing.T) {
	tests := []struct {
		g    Guard
		want string
	}{
		{Guard{RateLimits: []GuardRateLimit{{RateLimit: RateLimit{MaxRequests: 0}}}}, "rate_limits[0]: max_requests"},
		{Guard{RateLimits: []GuardRateLimit{{RateLimit: RateLimit{MaxRequests: 1, PartitionBy: "tenant"}}}}, "rate_limits[0]: partition_by"},
		{Guard{Concurrency: []GuardConcurrency{{Concurrency: Concurrency{MaxConcurrent: 1}}, {Concurrency: Concurrency{MaxConcurrent: 2}}}}, "concurrency[1]: duplicate name"},
		{Guard{IPFilter: &GuardIPFilter{Allow: []string{"x"}}}, "ip_filter: allow[0]"},
		{Guard{IPFilter: &GuardIPFilter{DefaultAction: "maybe"}}, "ip_filter: default_action"},
		{Guard{Timeout: -1}, "timeout"},
		{Guard{AddressPrefixes: AddressPrefixes{IPv6Prefix: 129}}, "ipv6_prefix 129: must be 1 to 128 bits"},
		{Guard{AddressPrefixes: AddressPrefixes{IPv4Prefix: 33}}, "ipv4_prefix 33: must be 1 to 32 bits"},
	}
	for _, tt := range tests {
		if err := tt.g.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Validate() = %v, want %q", err, tt.want)
		}
	}
}

// guardCaddyConfig is a Caddy config with one server on port whose routes
// are a codemode_guard (g) and a static response; errorRoutes, when set,
// become handle_errors routes.
func guardCaddyConfig(port int, g map[string]any, server map[string]any, app map[string]any) []byte {
	g["handler"] = "codemode_guard"
	srv := map[string]any{
		"listen":          []string{fmt.Sprintf("127.0.0.1:%d", port)},
		"automatic_https": map[string]any{"disable": true},
		"routes": []any{map[string]any{"handle": []any{g,
			map[string]any{"handler": "static_response", "body": "ok {http.vars.client_ip}"}}}},
	}
	for k, v := range server {
		srv[k] = v
	}
	cfg := map[string]any{
		"admin":   map[string]any{"disabled": true, "config": map[string]any{"persist": false}},
		"logging": map[string]any{"logs": map[string]any{"default": map[string]any{"level": "ERROR"}}},
		"apps": map[string]any{
			"http": map[string]any{"servers": map[string]any{"guard": srv}},
		},
	}
	if app != nil {
		cfg["apps"].(map[string]any)["codemode"] = app
	}
	b, _ := json.Marshal(cfg)
	return b
}

func TestGuardInCaddy(t *testing.T) {
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d/", port)
	limit := map[string]any{"rate_limits": []any{map[string]any{"max_requests": 3, "window": int64(time.Minute)}}}
	freezeGuardClock(t)
	caddyMu.Lock()
	defer caddyMu.Unlock()
	defer caddy.Stop()
	if err := caddy.Load(guardCaddyConfig(port, limit, nil, nil), true); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if r := guardGet(t, base, nil); r.status != 200 {
			t.Fatalf("%d %s", r.status, r.body)
		}
	}
	// A reload with the same limits keeps the counters: one request left.
	limit = map[string]any{"rate_limits": []any{map[string]any{"max_requests": 3, "window": int64(time.Minute)}}}
	if err := caddy.Load(guardCaddyConfig(port, limit, map[string]any{"idle_timeout": int64(time.Minute)}, nil), true); err != nil {
		t.Fatal(err)
	}
	if r := guardGet(t, base, nil); r.status != 200 || rateLimitField(t, r.header).remaining != 0 {
		t.Fatalf("after reload: %d %v", r.status, r.header)
	}
	if r := guardGet(t, base, nil); r.status != 429 || r.code != "RATE_LIMIT" {
		t.Fatalf("after reload, 4th: %d %s", r.status, r.code)
	}

	// Placeholder partitions resolved by Caddy's replacer.
	ph := map[string]any{"zone": "ph", "rate_limits": []any{
		// Checked in order; a denial stops before the later limits count.
		map[string]any{"name": "agent", "max_requests": 1, "partition_by": "{http.request.header.X-Agent}"},
		map[string]any{"name": "host", "max_requests": 2, "partition_by": "{http.request.remote.host}"},
	}}
	if err := caddy.Load(guardCaddyConfig(port, ph, nil, nil), true); err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		agent  string
		status int
	}{{"a", 200}, {"a", 429}, {"b", 200}, {"c", 429 /* the host's 2 are used */}} {
		if r := guardGet(t, base, map[string]string{"X-Agent": tc.agent}); r.status != tc.status {
			t.Fatalf("placeholder partitions, request %d: %d, want %d (%s)", i, r.status, tc.status, r.body)
		}
	}

	// handle_errors routes answer instead of the guard's JSON body.
	errs := map[string]any{"errors": map[string]any{"routes": []any{map[string]any{"handle": []any{map[string]any{
		"handler": "static_response", "status_code": "{http.error.status_code}",
		"body": "custom {http.error.status_code} {http.vars.codemode_guard_code}"}}}}}}
	limit = map[string]any{"zone": "errs", "rate_limits": []any{map[string]any{"max_requests": 1}}}
	if err := caddy.Load(guardCaddyConfig(port, limit, errs, nil), true); err != nil {
		t.Fatal(err)
	}
	guardGet(t, base, nil)
	resp, err := reloadClient.Get(base)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 429 || string(b) != "custom 429 RATE_LIMIT" || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("handle_errors: %d %q %v", resp.StatusCode, b, resp.Header)
	}

	// Without Caddy's trusted_proxies (and no trust_proxy of the filter's
	// own) X-Forwarded-For is not the client; with them Caddy's client_ip
	// decides.
	filter := map[string]any{"ip_filter": map[string]any{"deny": []string{"198.51.100.7"}}}
	if err := caddy.Load(guardCaddyConfig(port, filter, nil, nil), true); err != nil {
		t.Fatal(err)
	}
	if r := guardGet(t, base, map[string]string{"X-Forwarded-For": "198.51.100.7"}); r.status != 200 || r.body != "ok 127.0.0.1" {
		t.Fatalf("untrusted X-Forwarded-For: %d %s %q", r.status, r.code, r.body)
	}
	trusted := map[string]any{"trusted_proxies": map[string]any{"source": "static", "ranges": []string{"127.0.0.1/32"}}}
	if err := caddy.Load(guardCaddyConfig(port, filter, trusted, nil), true); err != nil {
		t.Fatal(err)
	}
	if r := guardGet(t, base, map[string]string{"X-Forwarded-For": "198.51.100.7"}); r.status != 403 || r.code != "IP_BLOCKED" {
		t.Fatalf("trusted proxy client: %d %s", r.status, r.code)
	}
	if r := guardGet(t, base, map[string]string{"X-Forwarded-For": "198.51.100.8"}); r.status != 200 || r.body != "ok 198.51.100.8" {
		t.Fatalf("trusted proxy other client: %d %q", r.status, r.body)
	}

	// The throttle app builds the manager the broker and meta-tools use.
	throttle := map[string]any{"throttle": map[string]any{"default_rate_limit": map[string]any{"max_requests": 1}}}
	if err := caddy.Load(guardCaddyConfig(port, map[string]any{}, nil, throttle), true); err != nil {
		t.Fatal(err)
	}
	appIface, err := caddy.ActiveContext().AppIfConfigured("codemode")
	if err != nil {
		t.Fatal(err)
	}
	m := appIface.(*App).Guard()
	if m == nil {
		t.Fatal("no guard manager from throttle")
	}
	ctx := context.Background()
	if r, _ := m.CheckRateLimit(ctx, "tool", nil, guardPC("s")); !r.Allowed {
		t.Fatal("first call denied")
	}
	if r, _ := m.CheckRateLimit(ctx, "tool", nil, guardPC("s")); r.Allowed {
		t.Fatal("throttle default rate limit not applied")
	}
	// Bad throttle config fails at load.
	bad := map[string]any{"throttle": map[string]any{"global": map[string]any{"max_requests": 0}}}
	if err := caddy.Load(guardCaddyConfig(port, map[string]any{}, nil, bad), true); err == nil || !strings.Contains(err.Error(), "throttle: global: max_requests") {
		t.Fatalf("bad throttle: %v", err)
	}
}

func guardPC(session string) guard.PartitionKeyContext {
	return guard.PartitionKeyContext{SessionID: session}
}

// Two handlers on one Redis (two gateways) share a zone's counters.
func TestGuardHandlerRedisShared(t *testing.T) {
	c, prefix := redistest.Client(t)
	newGuard := func(poolSize int) *Guard {
		// A different pool size gives each its own client, as two
		// gateways would have.
		raw, _ := json.Marshal(map[string]any{"module": "redis", "address": c.Options().Addr, "pool_size": poolSize})
		return &Guard{
			Zone: "shared", KeyPrefix: prefix, StorageRaw: raw,
			RateLimits: []GuardRateLimit{{RateLimit: RateLimit{MaxRequests: 3}}},
		}
	}
	a := guardServer(t, newGuard(3), nil)
	b := guardServer(t, newGuard(4), nil)
	var statuses []int
	for _, u := range []string{a.URL, b.URL, a.URL, b.URL} {
		statuses = append(statuses, guardGet(t, u, nil).status)
	}
	if fmt.Sprint(statuses) != "[200 200 200 429]" {
		t.Fatalf("statuses %v, want [200 200 200 429]", statuses)
	}
}

// With Redis down, failure_mode closed answers 503 STORAGE_UNAVAILABLE and
// open lets requests through (recovery is tested in package guard, which
// injects the clock that paces the probes).
func TestGuardHandlerRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	newGuard := func(mode string) *Guard {
		raw, _ := json.Marshal(map[string]any{"module": "redis", "address": srv.Addr, "failure_mode": mode,
			"timeout": "200ms"})
		return &Guard{
			Zone:       mode,
			StorageRaw: raw,
			RateLimits: []GuardRateLimit{{RateLimit: RateLimit{MaxRequests: 100}}},
		}
	}
	closed := guardServer(t, newGuard("closed"), nil)
	open := guardServer(t, newGuard("open"), nil)
	if r := guardGet(t, closed.URL, nil); r.status != 200 {
		t.Fatalf("redis up: %d", r.status)
	}
	srv.Stop()
	r := guardGet(t, closed.URL, nil)
	if r.status != 503 || r.code != "STORAGE_UNAVAILABLE" || r.header.Get("Retry-After") != "1" {
		t.Fatalf("redis down, closed: %d %s %v", r.status, r.code, r.header)
	}
	if r := guardGet(t, open.URL, nil); r.status != 200 {
		t.Fatalf("redis down, open: %d", r.status)
	}
}

// TestGuardSameLimitsApart: two codemode_guard handlers with the same
// limits, e.g. one snippet imported by two routes and two sites, count
// apart unless they name one zone; a reload of the same config keeps each
// one's counters. Before, the default zone was a hash of the limits alone,
// so the routes shared one budget.
func TestGuardSameLimitsApart(t *testing.T) {
	portA, portB := freePort(t), freePort(t)
	freezeGuardClock(t)
	src := fmt.Sprintf(`{
	admin off
}
(limited) {
	codemode_guard {
		rate_limit 2 1m
	}
}
(shared) {
	codemode_guard {
		zone shared
		rate_limit 2 1m
	}
}
http://127.0.0.1:%d {
	route /a {
		import limited
		respond "a"
	}
	route /b {
		import limited
		respond "b"
	}
	route /s1 {
		import shared
		respond "s1"
	}
	route /s2 {
		import shared
		respond "s2"
	}
}
http://127.0.0.1:%d {
	import limited
	respond "other site"
}
`, portA, portB)
	caddyMu.Lock()
	defer caddyMu.Unlock()
	defer caddy.Stop()
	base := fmt.Sprintf("http://127.0.0.1:%d", portA)
	other := fmt.Sprintf("http://127.0.0.1:%d/", portB)
	want := func(url string, status int) {
		t.Helper()
		if r := guardGet(t, url, nil); r.status != status {
			t.Fatalf("GET %s: %d, want %d (%s)", url, r.status, status, r.body)
		}
	}
	loadCaddyfile(t, src)
	want(base+"/a", 200)
	want(base+"/a", 200)
	want(base+"/a", 429)
	want(base+"/b", 200) // its own budget
	want(other, 200)     // and the other site's
	want(other, 200)
	want(other, 429)
	want(base+"/s1", 200) // one zone named: one budget
	want(base+"/s2", 200)
	want(base+"/s1", 429)

	loadCaddyfile(t, src+"\n") // a reload keeps each handler's counters
	want(base+"/a", 429)
	want(base+"/b", 200)
	want(base+"/b", 429)
	want(other, 429)
}

// TestGuardHandlerIPv6Prefix: over a real socket, with the client address
// read from X-Forwarded-For, a host rotating through 100 addresses of its
// /64 gets one ip partition's requests (memory and Redis storage); the
// next /64 has its own; an IPv4-mapped address counts as its IPv4
// address; a zone is stripped. The deny rule still matches the exact
// address, not its /64. With ipv6_prefix 128 each address is its own.
func TestGuardHandlerIPv6Prefix(t *testing.T) {
	freezeGuardClock(t)
	c, prefix := redistest.Client(t)
	for _, backend := range []string{"memory", "redis"} {
		t.Run(backend, func(t *testing.T) {
			newGuard := func(prefixes AddressPrefixes) *Guard {
				g := &Guard{
					Zone:            "v6" + fmt.Sprint(prefixes.IPv6Prefix),
					RateLimits:      []GuardRateLimit{{Name: "per_ip", RateLimit: RateLimit{MaxRequests: 10, PartitionBy: "ip"}}},
					IPFilter:        &GuardIPFilter{Deny: []string{"2001:db8:1:2::bad"}, TrustProxy: true},
					AddressPrefixes: prefixes,
				}
				if backend == "redis" {
					g.StorageRaw, _ = json.Marshal(map[string]any{"module": "redis", "address": c.Options().Addr})
					g.KeyPrefix = prefix
				}
				return g
			}
			srv := guardServer(t, newGuard(AddressPrefixes{}), nil)
			from := func(ip string) guardReply { return guardGet(t, srv.URL, map[string]string{"X-Forwarded-For": ip}) }
			if r := from("2001:db8:1:2::bad"); r.status != 403 || r.code != "IP_BLOCKED" {
				t.Fatalf("denied address: %d %s", r.status, r.code)
			}
			statuses := map[int]int{}
			for i := range 100 {
				statuses[from(fmt.Sprintf("2001:db8:1:2:%x::%x", i, 0xbad0+i)).status]++
			}
			if statuses[200] != 10 || statuses[429] != 90 {
				t.Fatalf("100 addresses of one /64: %v, want 10 allowed and 90 refused", statuses)
			}
			if r := from("2001:db8:1:3::1"); r.status != 200 || rateLimitField(t, r.header).remaining != 9 {
				t.Fatalf("the next /64: %d %v", r.status, r.header)
			}
			if r := from("fe80::1%eth0"); r.status != 200 || rateLimitField(t, r.header).remaining != 9 {
				t.Fatalf("a zoned address: %d %v", r.status, r.header)
			}
			if r := from("fe80::2%eth1"); r.status != 200 || rateLimitField(t, r.header).remaining != 8 {
				t.Fatalf("another zoned address of fe80::/64: %d %v", r.status, r.header)
			}
			for i, ip := range []string{"198.51.100.9", "::ffff:198.51.100.9"} {
				if r := from(ip); r.status != 200 || rateLimitField(t, r.header).remaining != int64(9-i) {
					t.Fatalf("%s: %d %v", ip, r.status, r.header)
				}
			}
			if backend == "redis" {
				key := prefix + "v60%3Aper_ip:2001%3Adb8%3A1%3A2%3A%3A/64:rate" // zone v60, limit per_ip
				if n, err := c.Exists(context.Background(), key).Result(); err != nil || n != 1 {
					keys, _ := c.Keys(context.Background(), prefix+"v6*").Result()
					t.Fatalf("key %q: %d %v; keys %q", key, n, err, keys)
				}
			}

			exact := guardServer(t, newGuard(AddressPrefixes{IPv6Prefix: 128}), nil)
			for i := range 12 {
				if r := guardGet(t, exact.URL, map[string]string{"X-Forwarded-For": fmt.Sprintf("2001:db8:1:2::%x", i+1)}); r.status != 200 {
					t.Fatalf("ipv6_prefix 128, address %d: %d", i+1, r.status)
				}
			}
		})
	}
}
