package caddymodules

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
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

// TestTokenRateLimitPerIPv6Prefix: the authorization server's endpoints,
// in Caddy behind a trusted proxy, count a client by its address's key:
// POSTs to /oauth/token from 20 addresses of one /64 are held to the
// token_rate_limit of 5, another /64 has its own, and with the app's
// ipv6_prefix 128 each address is its own again.
func TestTokenRateLimitPerIPv6Prefix(t *testing.T) {
	freezeGuardClock(t)
	for _, tc := range []struct {
		prefix  int // the codemode app's ipv6_prefix; 0 = default
		allowed int // of the 20 requests
	}{{0, 5}, {128, 20}} {
		port := freePort(t)
		base := fmt.Sprintf("http://127.0.0.1:%d", port)
		var cfg map[string]any
		if err := json.Unmarshal(caddyConfig(port, map[string]any{
			"development": true, "issuer": base,
			"token_rate_limit": map[string]any{"max_requests": 5, "window": "1m"},
		}, standardRoutes(nil)), &cfg); err != nil {
			t.Fatal(err)
		}
		apps := cfg["apps"].(map[string]any)
		if tc.prefix != 0 {
			apps["codemode"].(map[string]any)["ipv6_prefix"] = tc.prefix
		}
		apps["http"].(map[string]any)["servers"].(map[string]any)["test"].(map[string]any)["trusted_proxies"] =
			map[string]any{"source": "static", "ranges": []string{"127.0.0.1/32"}}
		raw, _ := json.Marshal(cfg)
		t.Run(fmt.Sprintf("ipv6_prefix_%d", tc.prefix), func(t *testing.T) {
			startCaddy(t, raw)
			post := func(client string) int {
				req, _ := http.NewRequest(http.MethodPost, base+"/oauth/token", strings.NewReader("grant_type=refresh_token&refresh_token=nope&client_id=cli"))
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				req.Header.Set("X-Forwarded-For", client)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				return resp.StatusCode
			}
			allowed := 0
			for i := range 20 {
				if post(fmt.Sprintf("2001:db8:%x:1:%x::1", 0xa000+tc.prefix, i)) != http.StatusTooManyRequests {
					allowed++
				}
			}
			if allowed != tc.allowed {
				t.Fatalf("20 addresses of one /64: %d not refused, want %d", allowed, tc.allowed)
			}
			if s := post(fmt.Sprintf("2001:db8:%x:2::1", 0xa000+tc.prefix)); s == http.StatusTooManyRequests {
				t.Fatalf("another /64: %d", s)
			}
		})
	}
}
