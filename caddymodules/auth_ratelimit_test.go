package caddymodules

import (
	"context"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/codemode-gateway/caddy-codemode/guard"
	"github.com/codemode-gateway/caddy-codemode/guard/redistest"
	"github.com/codemode-gateway/caddy-codemode/oauth"
)

// TestTokenRateLimitSharedThroughRedis: two gateways with Redis token
// storage share one token-endpoint limit, under the storage's prefix.
func TestTokenRateLimitSharedThroughRedis(t *testing.T) {
	freezeGuardClock(t) // no window boundary between the five checks
	rc, prefix := redistest.Client(t)
	newGateway := func(poolSize int) *authShared {
		// A different pool size gives each gateway its own client, as two
		// processes would have.
		cctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
		t.Cleanup(cancel)
		st := &RedisStorage{Address: rc.Options().Addr, KeyPrefix: prefix, PoolSize: poolSize}
		if err := st.Provision(cctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Cleanup() })
		cfg := &AuthConfig{
			ServerConfig:   oauth.ServerConfig{Issuer: "http://127.0.0.1:1", Development: true},
			TokenRateLimit: &RateLimit{MaxRequests: 3, PartitionBy: "ip"},
		}
		if err := cfg.applyDefaults(envOf(nil)); err != nil {
			t.Fatal(err)
		}
		sh, err := buildAuth(cfg, st.Backend(), zap.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sh.Destruct() })
		return sh
	}
	a, b := newGateway(3), newGateway(4)
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
	keys, err := rc.Keys(ctx, prefix+"auth:ratelimit:*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("no rate-limit keys under the storage prefix: %v %v", keys, err)
	}
}
