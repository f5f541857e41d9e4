package caddymodules

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// BenchmarkGuardServeHTTP measures the handler alone with every feature on
// (IP filter, two rate limits, a concurrency limit, a timeout); the
// sub-benchmark without_timeout leaves the timeout out.
func BenchmarkGuardServeHTTP(b *testing.B) {
	b.Run("all", func(b *testing.B) { benchGuard(b, 30*time.Second) })
	b.Run("without_timeout", func(b *testing.B) { benchGuard(b, 0) })
}

func benchGuard(b *testing.B, benchTimeout time.Duration) {
	g := &Guard{
		RateLimits:  []GuardRateLimit{{RateLimit: RateLimit{MaxRequests: 1 << 40, Window: caddy.Duration(time.Minute)}}, {Name: "per_ip", RateLimit: RateLimit{MaxRequests: 1 << 40, PartitionBy: "ip"}}},
		Concurrency: []GuardConcurrency{{Concurrency: Concurrency{MaxConcurrent: 100000}}},
		Timeout:     caddy.Duration(benchTimeout),
		IPFilter:    &GuardIPFilter{Allow: []string{"127.0.0.0/8"}, DefaultAction: "deny"},
	}
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancel()
	if err := g.Provision(ctx); err != nil {
		b.Fatal(err)
	}
	next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error { return nil })
	repl := caddy.NewReplacer()
	c := context.WithValue(context.Background(), caddy.ReplacerCtxKey, repl)
	c = context.WithValue(c, caddyhttp.VarsCtxKey, map[string]any{})
	req := httptest.NewRequest("GET", "/", nil).WithContext(c)
	req.RemoteAddr = "127.0.0.1:5555"
	w := httptest.NewRecorder()
	b.ReportAllocs()
	for b.Loop() {
		if err := g.ServeHTTP(w, req, next); err != nil {
			b.Fatal(err)
		}
	}
}
