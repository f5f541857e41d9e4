package caddymodules

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// BenchmarkGuardServeHTTP measures the handler alone with every feature on
// (IP filter, two rate limits, a concurrency limit, a timeout); the
// sub-benchmark without_timeout leaves the timeout out, one_limit has one
// global rate limit only (what caddy-ratelimit's route does). The
// concurrency limit has one slot, so that a slot not released fails the
// benchmark.
func BenchmarkGuardServeHTTP(b *testing.B) {
	b.Run("all", func(b *testing.B) { benchGuard(b, 30*time.Second) })
	b.Run("without_timeout", func(b *testing.B) { benchGuard(b, 0) })
	b.Run("one_limit", func(b *testing.B) {
		serve := servingGuard(b, &Guard{RateLimits: []GuardRateLimit{{RateLimit: RateLimit{MaxRequests: 1 << 40, Window: caddy.Duration(time.Minute)}}}})
		b.ReportAllocs()
		for b.Loop() {
			serve()
		}
	})
	// per_ip: every feature but the timeout, from an IPv4 and an IPv6
	// client: the per-IP limit's partition is the address's key (the
	// IPv4 address itself, the IPv6 address's /64).
	for _, remote := range []string{"127.0.0.1:5555", "[2001:db8:1:2::7]:5555"} {
		name := "per_ip_ipv4"
		if strings.HasPrefix(remote, "[") {
			name = "per_ip_ipv6"
		}
		b.Run(name, func(b *testing.B) {
			g := everyFeatureConfig(0)
			g.IPFilter.Allow = append(g.IPFilter.Allow, "2001:db8::/32")
			serve := servingGuardFrom(b, g, remote)
			b.ReportAllocs()
			for b.Loop() {
				serve()
			}
		})
	}
}

// BenchmarkGuardRoundTrip serves requests through the handler with every
// feature but the timeout, behind a net/http server on loopback, read by
// Go's client in the same process (as the route of .ci/bench/guard is),
// with the RateLimit fields and with hide_rate_limit_headers: the
// difference is what the two fields cost on both sides of the socket, the
// handler's writing of them included (docs/figures.md counts it in
// instructions; nothing here is timed against a goal).
func BenchmarkGuardRoundTrip(b *testing.B) {
	for _, hide := range []bool{false, true} {
		name := "fields"
		if hide {
			name = "hide_rate_limit_headers"
		}
		b.Run(name, func(b *testing.B) {
			g := everyFeatureConfig(0)
			g.HideRateLimitHeaders = hide
			provisionGuard(b, g)
			next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
				_, err := io.WriteString(w, "ok")
				return err
			})
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Server", "Caddy") // as Caddy's server does on every response
				if err := g.ServeHTTP(w, r, next); err != nil {
					w.WriteHeader(http.StatusInternalServerError)
				}
			}))
			b.Cleanup(srv.Close)
			c := srv.Client()
			b.ReportAllocs()
			for b.Loop() {
				resp, err := c.Get(srv.URL)
				if err != nil {
					b.Fatal(err)
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusOK || string(body) != "ok" || (len(resp.Header["Ratelimit"]) == 0) != hide {
					b.Fatalf("%d %q %v, RateLimit %q", resp.StatusCode, body, err, resp.Header["Ratelimit"])
				}
			}
		})
	}
}

func benchGuard(b *testing.B, benchTimeout time.Duration) {
	serve := everyFeatureGuard(b, benchTimeout)
	b.ReportAllocs()
	for b.Loop() {
		serve()
	}
}

// TestGuardServeHTTPAllocs: with every feature but the timeout, a request
// the guard lets through does not allocate (the rate-limit field values
// come from a slab of 31, allocated once per 31 requests, which
// AllocsPerRun's integer average does not count) and holds no slot after
// it was served. Under the race detector pooled objects are sometimes
// dropped and allocated anew (raceEnabled).
func TestGuardServeHTTPAllocs(t *testing.T) {
	serve := everyFeatureGuard(t, 0)
	serve()
	want := 0.0
	if raceEnabled {
		want = 2
	}
	if n := testing.AllocsPerRun(1000, serve); n > want {
		t.Fatalf("%v allocations per request, want %v", n, want)
	}
}

// everyFeatureGuard provisions a handler with an IP filter, two rate
// limits (global and per IP) and a concurrency limit, and the timeout
// when not 0; the function it returns serves one request through it.
func everyFeatureGuard(tb testing.TB, timeout time.Duration) func() {
	return servingGuard(tb, everyFeatureConfig(timeout))
}

// everyFeatureConfig is the handler of everyFeatureGuard, not provisioned.
func everyFeatureConfig(timeout time.Duration) *Guard {
	return &Guard{
		RateLimits:  []GuardRateLimit{{RateLimit: RateLimit{MaxRequests: 1 << 40, Window: caddy.Duration(time.Minute)}}, {Name: "per_ip", RateLimit: RateLimit{MaxRequests: 1 << 40, PartitionBy: "ip"}}},
		Concurrency: []GuardConcurrency{{Concurrency: Concurrency{MaxConcurrent: 1}}},
		Timeout:     caddy.Duration(timeout),
		IPFilter:    &GuardIPFilter{Allow: []string{"127.0.0.0/8"}, DefaultAction: "deny"},
	}
}

// servingGuard provisions g; the function it returns serves one request
// from 127.0.0.1 through it, the same request and recorder each time.
func servingGuard(tb testing.TB, g *Guard) func() { return servingGuardFrom(tb, g, "127.0.0.1:5555") }

// servingGuardFrom is servingGuard of a request from remote (host:port).
func servingGuardFrom(tb testing.TB, g *Guard, remote string) func() {
	provisionGuard(tb, g)
	next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error { return nil })
	repl := caddy.NewReplacer()
	c := context.WithValue(context.Background(), caddy.ReplacerCtxKey, repl)
	c = context.WithValue(c, caddyhttp.VarsCtxKey, map[string]any{})
	req := httptest.NewRequest("GET", "/", nil).WithContext(c)
	req.RemoteAddr = remote
	w := httptest.NewRecorder()
	return func() {
		// One slot: a request finding it still taken would be refused.
		if err := g.ServeHTTP(w, req, next); err != nil || w.Code != http.StatusOK {
			tb.Fatalf("%d %v", w.Code, err)
		}
	}
}
