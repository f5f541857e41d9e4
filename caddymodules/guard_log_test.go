package caddymodules

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestGuardDenyLogNamesClientAndPartition: the debug line of a denial
// names the client address and the partition key it was counted in: the
// /64 of an IPv6 client for a per-address limit (the client address came
// from X-Forwarded-For), the placeholder's value, and a session's
// fingerprint, never its id; the address also where no check read it (a
// rate limit's denial had client_ip empty, and no line named the
// partition). Over real sockets.
func TestGuardDenyLogNamesClientAndPartition(t *testing.T) {
	freezeGuardClock(t)
	for _, tc := range []struct {
		name      string
		g         *Guard
		headers   map[string]string
		ip, part  string
		notLogged string
	}{
		{"per ip", &Guard{Zone: "log-ip", RateLimits: []GuardRateLimit{{Name: "per_ip", RateLimit: RateLimit{MaxRequests: 1, PartitionBy: "ip"}}},
			IPFilter: &GuardIPFilter{TrustProxy: true}},
			map[string]string{"X-Forwarded-For": "2001:db8:1:2::5"}, "2001:db8:1:2::5", "2001:db8:1:2::/64", ""},
		{"placeholder", &Guard{Zone: "log-agent", RateLimits: []GuardRateLimit{{Name: "per_agent", RateLimit: RateLimit{MaxRequests: 1, PartitionBy: "{http.request.header.X-Agent}"}}}},
			map[string]string{"X-Agent": "bot-7"}, "127.0.0.1", "bot-7", ""},
		{"session concurrency", &Guard{Zone: "log-session", SessionHeader: "Mcp-Session-Id",
			Concurrency: []GuardConcurrency{{Name: "per_session", Concurrency: Concurrency{MaxConcurrent: 1, PartitionBy: "session"}}}},
			map[string]string{"Mcp-Session-Id": "secret-session-id-123"}, "127.0.0.1", "session#", "secret-session-id-123"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hold := make(chan struct{})
			entered := make(chan struct{}, 1)
			var next func(w http.ResponseWriter, r *http.Request) error
			if len(tc.g.Concurrency) > 0 {
				next = func(w http.ResponseWriter, r *http.Request) error {
					entered <- struct{}{}
					<-hold
					return nil
				}
			}
			srv := guardServer(t, tc.g, next)
			core, logs := observer.New(zapcore.DebugLevel)
			tc.g.logger = zap.New(core)
			done := make(chan guardReply, 1)
			if next != nil {
				go func() { done <- guardGet(t, srv.URL, tc.headers) }()
				<-entered
			} else if r := guardGet(t, srv.URL, tc.headers); r.status != 200 {
				t.Fatalf("first request: %d", r.status)
			}
			r := guardGet(t, srv.URL, tc.headers)
			if next != nil {
				close(hold)
				<-done
			}
			if r.status != 429 && r.status != 503 {
				t.Fatalf("second request: %d %s", r.status, r.code)
			}
			lines := logs.FilterMessage("request denied by guard").All()
			if len(lines) != 1 {
				t.Fatalf("%d deny lines, want 1", len(lines))
			}
			f := lines[0].ContextMap()
			if f["client_ip"] != tc.ip || !strings.HasPrefix(f["partition"].(string), tc.part) || f["code"] != r.code {
				t.Fatalf("deny line %v, want client_ip %q, partition %q…, code %q", f, tc.ip, tc.part, r.code)
			}
			if tc.notLogged != "" && strings.Contains(fmt.Sprint(f), tc.notLogged) {
				t.Fatalf("the session id is logged: %v", f)
			}
		})
	}
}

// TestGuardPlaceholderAddressPartition: a partition that is the client's
// address as a placeholder ({http.vars.client_ip}, {http.request.remote.host},
// {http.request.remote}) keys an IPv6 client by its /64, as partition_by ip
// does: callers of one /64 share the limit, the next /64 has its own, IPv4
// addresses stay apart (each address counted apart before). Another
// placeholder is its text. Over real sockets; the address is set as
// Caddy's server sets it (the peer address, or client_ip after
// trusted_proxies).
func TestGuardPlaceholderAddressPartition(t *testing.T) {
	freezeGuardClock(t)
	for _, placeholder := range []string{"{http.vars.client_ip}", "{http.request.remote.host}", "{http.request.remote}"} {
		t.Run(placeholder, func(t *testing.T) {
			g := &Guard{Zone: "addr-" + placeholder, RateLimits: []GuardRateLimit{{Name: "per_addr", RateLimit: RateLimit{MaxRequests: 3, PartitionBy: placeholder}}}}
			ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
			t.Cleanup(cancel)
			if err := g.Provision(ctx); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = g.Cleanup() })
			ok := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error { return nil })
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				addr := r.Header.Get("X-Test-Client")
				r.RemoteAddr = net.JoinHostPort(addr, "40000")
				r = r.WithContext(context.WithValue(r.Context(), caddyhttp.VarsCtxKey, map[string]any{caddyhttp.ClientIPVarKey: addr}))
				r = r.WithContext(context.WithValue(r.Context(), caddy.ReplacerCtxKey, caddyhttp.NewTestReplacer(r)))
				if err := g.ServeHTTP(w, r, ok); err != nil {
					t.Logf("handler error: %v", err)
				}
			}))
			t.Cleanup(srv.Close)
			from := func(addr string) int {
				return guardGet(t, srv.URL, map[string]string{"X-Test-Client": addr}).status
			}
			statuses := map[int]int{}
			for i := range 6 {
				statuses[from(fmt.Sprintf("2001:db8:7:1:%x::1", i))]++
			}
			if statuses[200] != 3 || statuses[429] != 3 {
				t.Fatalf("six addresses of one /64: %v, want 3 allowed and 3 refused", statuses)
			}
			if s := from("2001:db8:7:2::1"); s != 200 {
				t.Fatalf("the next /64: %d", s)
			}
			for i := range 4 {
				if s := from(fmt.Sprintf("198.51.100.%d", i+1)); s != 200 {
					t.Fatalf("IPv4 address %d: %d", i+1, s)
				}
			}
		})
	}
}
