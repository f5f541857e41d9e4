package caddymodules

import (
	"context"
	"net"
	"strconv"
	"testing"

	"go.uber.org/zap"

	"github.com/codemode-gateway/caddy-codemode/guard"
	"github.com/codemode-gateway/caddy-codemode/guard/redistest"
	"github.com/codemode-gateway/caddy-codemode/oauth"
)

// TestTokenRateLimitSharedThroughRedis: two gateways with Redis token
// storage share one token-endpoint limit, under the token storage's prefix.
func TestTokenRateLimitSharedThroughRedis(t *testing.T) {
	freezeGuardClock(t) // no window boundary between the five checks
	rc, prefix := redistest.Client(t)
	host, port, err := net.SplitHostPort(rc.Options().Addr)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := strconv.Atoi(port)
	newGateway := func() *authShared {
		cfg := &AuthConfig{
			ServerConfig: oauth.ServerConfig{Issuer: "http://127.0.0.1:1", Development: true,
				TokenStorage: oauth.TokenStorageConfig{Type: "redis", Host: host, Port: p, KeyPrefix: prefix}},
			TokenRateLimit: &guard.RateLimitConfig{MaxRequests: 3, WindowMs: 60000, PartitionBy: guard.PartitionKey{Strategy: "ip"}},
		}
		if err := cfg.applyDefaults(envOf(nil)); err != nil {
			t.Fatal(err)
		}
		sh, err := buildAuth(cfg, zap.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sh.Destruct() })
		return sh
	}
	a, b := newGateway(), newGateway()
	rl := &guard.RateLimitConfig{MaxRequests: 3, WindowMs: 60000, PartitionBy: guard.PartitionKey{Strategy: "ip"}}
	pc := guard.PartitionKeyContext{ClientIP: "192.0.2.7"}
	ctx := context.Background()
	var allowed int
	for i, g := range []*authShared{a, b, a, b, a} {
		res, err := g.limiter.CheckRateLimit(ctx, "oauth_endpoints", rl, pc)
		if err != nil {
			t.Fatalf("check %d: %v", i, err)
		}
		if res.Allowed {
			allowed++
		}
	}
	if allowed != 3 {
		t.Fatalf("allowed %d of 5 across two gateways, want 3", allowed)
	}
	keys, err := rc.Keys(ctx, prefix+"ratelimit:*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("no rate-limit keys under the token storage prefix: %v %v", keys, err)
	}
}
