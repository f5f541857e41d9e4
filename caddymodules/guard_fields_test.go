package caddymodules

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// fieldsStep is one request of a TestGuardRateLimitFieldValues case: its
// clock (ms after a multiple of 3600 s), X-Agent and client address, and
// the status, RateLimit and Retry-After values its response must carry.
type fieldsStep struct {
	atMs       int64
	agent      string
	remote     string // default 192.0.2.1:40000
	status     int
	rateLimit  string // "" when absent
	retryAfter string // "" when absent
}

// TestGuardRateLimitFieldValues pins the RateLimit, RateLimit-Policy and
// Retry-After values of a table of requests: one and several rules, the
// tightest changing, refusals by the first and by a later rule, names that
// need escaping or are too long for the handler's room, quotas above the
// largest structured-field Integer, sub-second windows, the rounding of t,
// and hide_rate_limit_headers. The values are what the guard sent before
// its fields were written without allocation (main at da40715), so that how
// they are written can change and what they say cannot. RateLimit-Policy
// is the same on every response of a handler.
func TestGuardRateLimitFieldValues(t *testing.T) {
	long := strings.Repeat("a_long_limit_name_", 4)
	for _, tc := range []struct {
		name   string
		limits []GuardRateLimit
		hide   bool
		policy string // "" when absent
		steps  []fieldsStep
	}{
		{"one global limit", []GuardRateLimit{{RateLimit: RateLimit{MaxRequests: 3, Window: caddy.Duration(time.Minute)}}}, false,
			`"global";q=3;w=60`, []fieldsStep{
				{atMs: 0, status: 200, rateLimit: `"global";r=2;t=60`},
				{atMs: 1, status: 200, rateLimit: `"global";r=1;t=60`},
				{atMs: 59001, status: 200, rateLimit: `"global";r=0;t=1`},
				{atMs: 59500, status: 429, rateLimit: `"global";r=0;t=1`, retryAfter: "1"},
				{atMs: 60000, status: 429, rateLimit: `"global";r=0;t=1`, retryAfter: "1"},
				{atMs: 61999, status: 200, rateLimit: `"global";r=0;t=59`},
			}},
		{"several rules, the tightest changes", []GuardRateLimit{
			{RateLimit: RateLimit{MaxRequests: 100, Window: caddy.Duration(time.Hour)}},
			{Name: `per "ip"`, RateLimit: RateLimit{MaxRequests: 3, Window: caddy.Duration(10 * time.Second), PartitionBy: "ip"}},
			{Name: "fast\u00e9%", RateLimit: RateLimit{MaxRequests: 1 << 60, Window: caddy.Duration(1500 * time.Millisecond)}},
		}, false, `"global";q=100;w=3600, "per \"ip\"";q=3;w=10, "fast%C3%A9%25";q=999999999999999`, []fieldsStep{
			{atMs: 0, status: 200, rateLimit: `"per \"ip\"";r=2;t=10`},
			{atMs: 1, status: 200, rateLimit: `"per \"ip\"";r=1;t=10`},
			{atMs: 2, remote: "192.0.2.2:40000", status: 200, rateLimit: `"per \"ip\"";r=2;t=10`},
			{atMs: 3, status: 200, rateLimit: `"per \"ip\"";r=0;t=10`},
			{atMs: 4, status: 429, rateLimit: `"per \"ip\"";r=0;t=10`, retryAfter: "10"},
			{atMs: 9999, status: 429, rateLimit: `"per \"ip\"";r=0;t=1`, retryAfter: "1"},
			{atMs: 10000, status: 429, rateLimit: `"per \"ip\"";r=0;t=1`, retryAfter: "1"},
			{atMs: 10001, remote: "[2001:db8::1]:443", status: 200, rateLimit: `"per \"ip\"";r=2;t=10`},
		}},
		{"refused by the first rule", []GuardRateLimit{
			{RateLimit: RateLimit{MaxRequests: 1, Window: caddy.Duration(time.Minute)}},
			{Name: "per_ip", RateLimit: RateLimit{MaxRequests: 5, Window: caddy.Duration(time.Minute), PartitionBy: "ip"}},
		}, false, `"global";q=1;w=60, "per_ip";q=5;w=60`, []fieldsStep{
			{atMs: 0, status: 200, rateLimit: `"global";r=0;t=60`},
			{atMs: 30000, status: 429, rateLimit: `"global";r=0;t=31`, retryAfter: "31"},
			{atMs: 59999, status: 429, rateLimit: `"global";r=0;t=1`, retryAfter: "1"},
			{atMs: 60000, status: 429, rateLimit: `"global";r=0;t=1`, retryAfter: "1"},
		}},
		{"refused by a later rule, per agent", []GuardRateLimit{
			{Name: "global", RateLimit: RateLimit{MaxRequests: 1000, Window: caddy.Duration(time.Minute)}},
			{Name: "per_agent", RateLimit: RateLimit{MaxRequests: 2, Window: caddy.Duration(20 * time.Second), PartitionBy: "{http.request.header.X-Agent}"}},
		}, false, `"global";q=1000;w=60, "per_agent";q=2;w=20`, []fieldsStep{
			{atMs: 0, agent: "a", status: 200, rateLimit: `"per_agent";r=1;t=20`},
			{atMs: 1, agent: "a", status: 200, rateLimit: `"per_agent";r=0;t=20`},
			{atMs: 2, agent: "a", status: 429, rateLimit: `"per_agent";r=0;t=20`, retryAfter: "20"},
			{atMs: 3, agent: "b", status: 200, rateLimit: `"per_agent";r=1;t=20`},
			{atMs: 4, status: 200, rateLimit: `"per_agent";r=1;t=20`},
			{atMs: 5, status: 200, rateLimit: `"per_agent";r=0;t=20`},
			{atMs: 6, status: 429, rateLimit: `"per_agent";r=0;t=20`, retryAfter: "20"},
			{atMs: 19000, agent: "a", status: 429, rateLimit: `"per_agent";r=0;t=2`, retryAfter: "2"},
			{atMs: 20000, agent: "a", status: 429, rateLimit: `"per_agent";r=0;t=1`, retryAfter: "1"},
		}},
		{"a long name, escapes, large quotas", []GuardRateLimit{
			{Name: long, RateLimit: RateLimit{MaxRequests: 999_999_999_999_999_999, Window: caddy.Duration(90 * time.Second)}},
			{Name: `a\b"c` + "\x01\xff", RateLimit: RateLimit{MaxRequests: 1_000_000_000_000_000, Window: caddy.Duration(250 * time.Millisecond)}},
		}, false, `"` + long + `";q=999999999999999;w=90, "a\\b\"c%01%FF";q=999999999999999`, []fieldsStep{
			{atMs: 0, status: 200, rateLimit: `"a\\b\"c%01%FF";r=999999999999999;t=1`},
			{atMs: 124, status: 200, rateLimit: `"a\\b\"c%01%FF";r=999999999999998;t=1`},
			{atMs: 249, status: 200, rateLimit: `"a\\b\"c%01%FF";r=999999999999997;t=1`},
			{atMs: 250, status: 200, rateLimit: `"a\\b\"c%01%FF";r=999999999999996;t=1`},
			{atMs: 89999, status: 200, rateLimit: `"a\\b\"c%01%FF";r=999999999999999;t=1`},
		}},
		{"a long name refused", []GuardRateLimit{
			{Name: long + long, RateLimit: RateLimit{MaxRequests: 2, Window: caddy.Duration(time.Hour)}},
		}, false, `"` + long + long + `";q=2;w=3600`, []fieldsStep{
			{atMs: 0, status: 200, rateLimit: `"` + long + long + `";r=1;t=3600`},
			{atMs: 1000, status: 200, rateLimit: `"` + long + long + `";r=0;t=3599`},
			{atMs: 1001, status: 429, rateLimit: `"` + long + long + `";r=0;t=3599`, retryAfter: "3599"},
			{atMs: 3599000, status: 429, rateLimit: `"` + long + long + `";r=0;t=2`, retryAfter: "2"},
		}},
		{"hidden", []GuardRateLimit{{RateLimit: RateLimit{MaxRequests: 1, Window: caddy.Duration(time.Minute)}}}, true, "", []fieldsStep{
			{atMs: 0, status: 200, rateLimit: ``},
			{atMs: 1500, status: 429, retryAfter: "59"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := time.Unix(1_800_000_000, 0) // a multiple of 3600 s
			clock := base
			prev := guardNow
			guardNow = func() time.Time { return clock }
			t.Cleanup(func() { guardNow = prev })
			g := &Guard{RateLimits: tc.limits, HideRateLimitHeaders: tc.hide}
			ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
			t.Cleanup(cancel)
			if err := g.Provision(ctx); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = g.Cleanup() })
			next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
				w.WriteHeader(http.StatusOK)
				return nil
			})
			check := func(i int, st fieldsStep, code int, h http.Header) {
				t.Helper()
				if code != st.status || !oneValue(h, "RateLimit", st.rateLimit) || !oneValue(h, "RateLimit-Policy", tc.policy) ||
					!oneValue(h, "Retry-After", st.retryAfter) {
					t.Fatalf("step %d (at %d ms): %d, RateLimit %q, RateLimit-Policy %q, Retry-After %q; want %d, %q, %q, %q",
						i, st.atMs, code, h.Values("RateLimit"), h.Values("RateLimit-Policy"), h.Values("Retry-After"),
						st.status, st.rateLimit, tc.policy, st.retryAfter)
				}
			}
			written := make([]*httptest.ResponseRecorder, len(tc.steps))
			for i, st := range tc.steps {
				clock = base.Add(time.Duration(st.atMs) * time.Millisecond)
				req := httptest.NewRequest(http.MethodGet, "/", nil)
				req.RemoteAddr = "192.0.2.1:40000"
				if st.remote != "" {
					req.RemoteAddr = st.remote
				}
				repl := caddy.NewReplacer()
				if st.agent != "" {
					req.Header.Set("X-Agent", st.agent)
					repl.Set("http.request.header.X-Agent", st.agent)
				}
				c := context.WithValue(req.Context(), caddy.ReplacerCtxKey, repl)
				c = context.WithValue(c, caddyhttp.VarsCtxKey, map[string]any{})
				w := httptest.NewRecorder()
				if err := g.ServeHTTP(w, req.WithContext(c), next); err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				check(i, st, w.Code, w.Header())
				written[i] = w
			}
			// Each response keeps its own values: later requests change
			// none of them.
			for i, w := range written {
				check(i, tc.steps[i], w.Code, w.Header())
			}
		})
	}
}

// oneValue reports whether h has exactly the value want for key, or no
// value when want is "".
func oneValue(h http.Header, key, want string) bool {
	v := h.Values(key)
	if want == "" {
		return len(v) == 0
	}
	return len(v) == 1 && v[0] == want
}

// TestGuardRateLimitFieldsKeptPerResponse: the values of 100 responses in
// a row (more than a slab of rateLimitFields holds) are each their own:
// every response still says its own remaining quota after the others.
func TestGuardRateLimitFieldsKeptPerResponse(t *testing.T) {
	serve := guardRecorder(t, &Guard{RateLimits: []GuardRateLimit{{RateLimit: RateLimit{MaxRequests: 1000, Window: caddy.Duration(time.Minute)}}}})
	var kept []http.Header
	for range 100 {
		kept = append(kept, serve().Header())
	}
	for i, h := range kept {
		if want := fmt.Sprintf(`"global";r=%d;t=60`, 999-i); !oneValue(h, "RateLimit", want) || !oneValue(h, "RateLimit-Policy", `"global";q=1000;w=60`) {
			t.Fatalf("response %d: RateLimit %q, RateLimit-Policy %q; want %q", i, h.Values("RateLimit"), h.Values("RateLimit-Policy"), want)
		}
	}
}

// guardRecorder provisions g with the clock frozen at a multiple of 3600 s;
// the function it returns serves one request from 192.0.2.1 through it.
func guardRecorder(t testing.TB, g *Guard) func() *httptest.ResponseRecorder {
	freezeGuardClock(t)
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	t.Cleanup(cancel)
	if err := g.Provision(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Cleanup() })
	next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error { return nil })
	return func() *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.RemoteAddr = "192.0.2.1:40000"
		c := context.WithValue(req.Context(), caddy.ReplacerCtxKey, caddy.NewReplacer())
		c = context.WithValue(c, caddyhttp.VarsCtxKey, map[string]any{})
		w := httptest.NewRecorder()
		if err := g.ServeHTTP(w, req.WithContext(c), next); err != nil {
			t.Fatal(err)
		}
		return w
	}
}
