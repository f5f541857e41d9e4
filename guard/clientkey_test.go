package guard

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	"github.com/codemode-gateway/caddy-codemode/guard/redistest"
	"github.com/redis/go-redis/v9"
)

func TestClientPrefixesKey(t *testing.T) {
	def := ClientPrefixes{}
	for _, tc := range []struct {
		p        ClientPrefixes
		in, want string
	}{
		{def, "203.0.113.7", "203.0.113.7"},
		{def, "203.0.113.7:5555", "203.0.113.7"},
		{def, "2001:db8:1:2:aaaa:bbbb:cccc:dddd", "2001:db8:1:2::/64"},
		{def, "[2001:db8:1:2::1]:443", "2001:db8:1:2::/64"},
		{def, "2001:DB8:1:2::FFFF", "2001:db8:1:2::/64"},
		{def, "fe80::1%eth0", "fe80::/64"},
		{def, "[fe80::2%25eth0]:80", "fe80::/64"},
		{def, "::ffff:203.0.113.7", "203.0.113.7"},
		{def, "[::ffff:203.0.113.7]:80", "203.0.113.7"},
		{def, "2001:db8:1:3::1", "2001:db8:1:3::/64"},
		{def, UnknownIP, UnknownIP},
		{def, "", ""},
		{def, "@", "@"},
		{def, "2001:db8:1:2::/64", "2001:db8:1:2::/64"}, // a key is its own key
		{ClientPrefixes{IPv6: 48}, "2001:db8:1:2::1", "2001:db8:1::/48"},
		{ClientPrefixes{IPv6: 56}, "2001:db8:1:2ff::1", "2001:db8:1:200::/56"},
		{ClientPrefixes{IPv6: 128}, "2001:db8::1", "2001:db8::1"},
		{ClientPrefixes{IPv6: 128}, "fe80::1%eth0", "fe80::1"},
		{ClientPrefixes{IPv4: 24}, "203.0.113.7", "203.0.113.0/24"},
		{ClientPrefixes{IPv4: 24}, "::ffff:203.0.113.7", "203.0.113.0/24"},
		{ClientPrefixes{IPv4: 24}, "203.0.113.0/24", "203.0.113.0/24"},
	} {
		if got := tc.p.Key(tc.in); got != tc.want {
			t.Errorf("%+v.Key(%q) = %q, want %q", tc.p, tc.in, got, tc.want)
		}
		if a, err := ParseClientIP(tc.in); err == nil {
			if got := tc.p.KeyAddr(tc.in, a); got != tc.want {
				t.Errorf("%+v.KeyAddr(%q, %v) = %q, want %q", tc.p, tc.in, a, got, tc.want)
			}
		}
		if got := tc.p.Key(tc.want); got != tc.want {
			t.Errorf("%+v.Key(%q) = %q: a key is not its own key", tc.p, tc.want, got)
		}
	}
}

func TestClientPrefixesValidate(t *testing.T) {
	for _, p := range []ClientPrefixes{{}, {IPv4: 1, IPv6: 1}, {IPv4: 32, IPv6: 128}} {
		if err := p.Validate(); err != nil {
			t.Errorf("%+v: %v", p, err)
		}
	}
	for _, p := range []ClientPrefixes{{IPv4: 33}, {IPv4: -1}, {IPv6: 129}, {IPv6: -64}} {
		if err := p.Validate(); err == nil {
			t.Errorf("%+v: no error", p)
		}
	}
}

// TestClientKeyHoldsRotatingIPv6Host: a host rotating through 100
// addresses of its /64 is held to one partition's limit, on the memory
// and the Redis storage, by the prepared check (codemode_guard's) and the
// manager's (the throttle's, the meta-tools', the token endpoints'); its
// next /64 is another partition, and an IPv4-mapped address counts
// against its IPv4 address. The Redis key holds the documented form.
func TestClientKeyHoldsRotatingIPv6Host(t *testing.T) {
	ctx := context.Background()
	const limit = 10
	for _, backend := range []string{"memory", "redis"} {
		t.Run(backend, func(t *testing.T) {
			clock := newFakeClock(t0)
			cfg := GuardConfig{Enabled: true}
			var prefix string
			if backend == "redis" {
				var rc *redis.Client
				rc, prefix = redistest.Client(t)
				cfg.KeyPrefix = prefix
				cfg.Storage = &StorageConfig{Provider: ProviderRedis, Client: rc}
				defer func() {
					n, err := rc.Exists(ctx, prefix+"per_ip:2001%3Adb8%3A1%3A2%3A%3A/64:rate").Result()
					if err != nil || n != 1 {
						keys, _ := rc.Keys(ctx, prefix+"*").Result()
						t.Errorf("redis key of the /64: %d %v; keys %q", n, err, keys)
					}
				}()
			}
			m := newTestManager(t, cfg, clock)
			perIP := RateLimitConfig{MaxRequests: limit, WindowMs: 60_000, PartitionBy: PartitionKey{Strategy: PartitionIP}}
			prepared := m.PrepareRateLimit("per_ip", perIP)
			var p ClientPrefixes
			allowed := 0
			for i := range 100 {
				ip := fmt.Sprintf("2001:db8:1:2:%x:%x::%x", i*7919%0x10000, i, i+1)
				if a, err := ParseClientIP(ip); err != nil || !a.Is6() {
					t.Fatalf("%s: %v", ip, err)
				}
				var ok bool
				if i%2 == 0 {
					r, err := prepared.Check(ctx, p.Key(ip), clock.Now())
					if err != nil {
						t.Fatal(err)
					}
					ok = r.Allowed
				} else {
					r, err := m.CheckRateLimit(ctx, "per_ip", &perIP, PartitionKeyContext{ClientIP: p.Key(ip)})
					if err != nil {
						t.Fatal(err)
					}
					ok = r.Allowed
				}
				if ok {
					allowed++
				}
			}
			if allowed != limit {
				t.Fatalf("100 addresses of one /64: %d allowed, want %d", allowed, limit)
			}
			if r, _ := prepared.Check(ctx, p.Key("2001:db8:1:3::1"), clock.Now()); !r.Allowed || r.Remaining != limit-1 {
				t.Fatalf("the next /64: %+v, want its own partition", r)
			}
			for i := range limit {
				ip := "198.51.100.9"
				if i%2 == 1 {
					ip = "::ffff:198.51.100.9"
				}
				if r, _ := prepared.Check(ctx, p.Key(ip), clock.Now()); !r.Allowed {
					t.Fatalf("request %d of 198.51.100.9 (%s): %+v", i+1, ip, r)
				}
			}
			if r, _ := prepared.Check(ctx, p.Key("[::ffff:198.51.100.9]:8080"), clock.Now()); r.Allowed {
				t.Fatalf("the IPv4-mapped address got past its IPv4 address's spent limit: %+v", r)
			}
		})
	}
}

// BenchmarkClientKey is the key computation alone: a bare IPv4 address
// (its own key, no allocation), an IPv6 address from its text, and one
// already parsed (KeyAddr, as codemode_guard calls it with an IP filter).
func BenchmarkClientKey(b *testing.B) {
	var p ClientPrefixes
	for _, tc := range []struct{ name, ip string }{{"ipv4", "203.0.113.7"}, {"ipv6", "2001:db8:85a3::8a2e:370:7334"}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = p.Key(tc.ip)
			}
		})
		a := netip.MustParseAddr(tc.ip)
		b.Run(tc.name+"_parsed", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = p.KeyAddr(tc.ip, a)
			}
		})
	}
}
