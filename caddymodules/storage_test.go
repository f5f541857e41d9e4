package caddymodules

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/codemode-gateway/caddy-codemode/guard/redistest"
)

// TestRedisStoragePlaceholders: every string of the redis storage takes
// placeholders, as docs/storage.md says, the TLS settings included (a CA
// file path from the environment used to reach os.ReadFile as written).
func TestRedisStoragePlaceholders(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("CODEMODE_TEST_REDIS_CA", caFile)
	t.Setenv("CODEMODE_TEST_REDIS_NAME", "redis.internal")
	t.Setenv("CODEMODE_TEST_REDIS_PW", "pw")
	t.Setenv("CODEMODE_TEST_REDIS_PREFIX", "gw1:")
	r := &RedisStorage{Address: "127.0.0.1:6379", Password: "{env.CODEMODE_TEST_REDIS_PW}", KeyPrefix: "{env.CODEMODE_TEST_REDIS_PREFIX}",
		TLS: &RedisTLS{ServerName: "{env.CODEMODE_TEST_REDIS_NAME}", CAFile: "{env.CODEMODE_TEST_REDIS_CA}"}}
	r.replacePlaceholders()
	o, err := r.options()
	if err != nil {
		t.Fatal(err)
	}
	if o.Password != "pw" || r.KeyPrefix != "gw1:" || o.TLSConfig == nil || o.TLSConfig.ServerName != "redis.internal" || o.TLSConfig.RootCAs == nil {
		t.Fatalf("placeholders not resolved: password %q, key prefix %q, tls %+v", o.Password, r.KeyPrefix, o.TLSConfig)
	}
}

// TestRedisStorageUnsetAddress: `storage redis {env.REDIS_ADDR}` with the
// variable unset fails the load instead of using the default local Redis,
// which other gateways do not share.
func TestRedisStorageUnsetAddress(t *testing.T) {
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancel()
	r := &RedisStorage{Address: "{env.CODEMODE_TEST_SURELY_UNSET_ADDR}"}
	err := r.Provision(ctx)
	if err == nil || !strings.Contains(err.Error(), "is empty once its placeholders are resolved") {
		t.Fatalf("provision: %v", err)
	}
}

// silentRedis is a listener that accepts connections and never answers, a
// Redis behind a stalled proxy or a paused process; closed at the end.
func silentRedis(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// TestRedisStorageStartUnanswered: a config load meeting a Redis that does
// not answer. With dial_timeout and timeout of an hour, the storage's start
// ping held the load for the client's timeout (an hour here; the ping's
// context bounded its dial only); it waits at most redisStartPingLimit and
// the load goes on, the areas applying their failure behaviour. A broker
// cannot start without its subscription: it waited for that too (the
// context bounded its dial only); its load now fails after at most
// redisStartTimeout with STORAGE_UNAVAILABLE, the code its requests get
// while Redis is down.
func TestRedisStorageStartUnanswered(t *testing.T) {
	closed := fmt.Sprintf("127.0.0.1:%d", freePort(t)) // nothing listens there
	for _, tc := range []struct {
		name, addr, areas, site, wantErr string
	}{
		{"silent, broker", silentRedis(t), "broker {\n\t\t\tdemo_tools\n\t\t}", "handle_path /broker/* {\n\t\tcodemode_broker\n\t}", "STORAGE_UNAVAILABLE"},
		{"closed port, broker", closed, "broker {\n\t\t\tdemo_tools\n\t\t}", "handle_path /broker/* {\n\t\tcodemode_broker\n\t}", "STORAGE_UNAVAILABLE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := fmt.Sprintf(`{
	admin off
	codemode {
		storage redis %s {
			dial_timeout 1h
			timeout 1h
		}
		%s
	}
}
http://127.0.0.1:0 {
	%s
}
`, tc.addr, tc.areas, tc.site)
			raw, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(src), map[string]any{"filename": "Caddyfile"})
			if err != nil {
				t.Fatalf("adapt: %v", err)
			}
			var cfg caddy.Config
			if err := caddy.StrictUnmarshalJSON(raw, &cfg); err != nil {
				t.Fatal(err)
			}
			caddyMu.Lock()
			defer caddyMu.Unlock()
			// Not validateAndRelease: the broker's abandoned subscription
			// holds its connection until the client's timeout (an hour) or
			// the silent server closes it, at the test's end.
			done := make(chan error, 1)
			go func() { done <- caddy.Validate(&cfg) }()
			select {
			case err = <-done:
			case <-time.After(2 * time.Minute):
				t.Fatal("the load did not end in 2 minutes")
			}
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("load: %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// TestRedisStartPingWarns: the start ping's warning carries the stable code
// and how long it waited, for a closed port and for a Redis that never
// answers (whose ping waited for the client's read timeout, an hour here).
func TestRedisStartPingWarns(t *testing.T) {
	closed := fmt.Sprintf("127.0.0.1:%d", freePort(t)) // nothing listens there
	for name, addr := range map[string]string{"closed port": closed, "silent": silentRedis(t)} {
		t.Run(name, func(t *testing.T) {
			core, logs := observer.New(zapcore.WarnLevel)
			opts := &redis.Options{Addr: addr, DialTimeout: time.Hour, ReadTimeout: time.Hour, WriteTimeout: time.Hour, MaxRetries: 1}
			if pingAtStart(opts, zap.New(core)) {
				t.Fatal("ping answered")
			}
			entries := logs.All()
			if len(entries) != 1 {
				t.Fatalf("%d warnings, want 1", len(entries))
			}
			f := entries[0].ContextMap()
			if f["code"] != "STORAGE_UNAVAILABLE" || f["waited"] != redisStartPingLimit {
				t.Fatalf("warning fields %v", f)
			}
			if name == "silent" && !strings.Contains(fmt.Sprint(f["error"]), "no answer within 5s") {
				t.Fatalf("error %v", f["error"])
			}
		})
	}
}

// TestBrokerStorageTimeoutBoundsReads: the broker's storage_timeout bounds
// a read from a Redis that has stopped answering (a private redis-server
// under CLIENT PAUSE), whatever the storage's own timeout: the request
// gets 503 STORAGE_UNAVAILABLE. go-redis applies a context's deadline to a
// read only with ContextTimeoutEnabled, which the client did not set: the
// read waited for the storage's timeout (a minute here), and the request
// for the pause to end. The HTTP client's 20 s is a backstop, not the bound.
func TestBrokerStorageTimeoutBoundsReads(t *testing.T) {
	srv := redistest.Start(t)
	port := freePort(t)
	startCaddyfile(t, fmt.Sprintf(`{
	admin off
	persist_config off
	codemode {
		storage redis %s {
			timeout 1m
			key_prefix %s
		}
		sandbox {
			engine inprocess
			trusted_callers
		}
		broker {
			demo_tools
			storage_timeout 300ms
		}
	}
}
http://127.0.0.1:%d {
	bind 127.0.0.1
	handle_path /broker/* {
		codemode_broker
	}
}
`, srv.Addr, redistest.Prefix(t), port))
	defer srv.Stop() // first: a paused server answers no one, not even the broker closing

	c := &http.Client{Timeout: 20 * time.Second}
	url := fmt.Sprintf("http://127.0.0.1:%d/broker/sessions/nonexistent", port)
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("before the pause: %s", resp.Status)
	}
	pause := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer pause.Close()
	if err := pause.Do(context.Background(), "CLIENT", "PAUSE", 60000, "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	resp, err = c.Get(url)
	if err != nil {
		t.Fatalf("while Redis is paused: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), `"STORAGE_UNAVAILABLE"`) {
		t.Fatalf("while Redis is paused: %s %s", resp.Status, body)
	}
}

// TestRedisStartSubscriptionReleased: a broker whose Redis accepts
// connections and never answers fails its load after redisStartTimeout
// (10 s), and the subscription it gave up on lets go of its connection
// then, not at the client's timeout (an hour here): go-redis bounded the
// connection's HELLO by the client's read timeout, not by the start's
// context, until the client honoured context deadlines
// (ContextTimeoutEnabled). The 40 s wait is a backstop, not the bound.
func TestRedisStartSubscriptionReleased(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepted, open atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			open.Add(1)
			go func() {
				defer open.Add(-1)
				defer c.Close()
				_, _ = io.Copy(io.Discard, c) // until the client closes it
			}()
		}
	}()
	src := fmt.Sprintf(`{
	admin off
	codemode {
		storage redis %s {
			dial_timeout 1h
			timeout 1h
		}
		broker {
			demo_tools
		}
	}
}
http://127.0.0.1:0 {
	handle_path /broker/* {
		codemode_broker
	}
}
`, ln.Addr())
	raw, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(src), map[string]any{"filename": "Caddyfile"})
	if err != nil {
		t.Fatalf("adapt: %v", err)
	}
	var cfg caddy.Config
	if err := caddy.StrictUnmarshalJSON(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	caddyMu.Lock()
	err = caddy.Validate(&cfg)
	caddyMu.Unlock()
	if err == nil || !strings.Contains(err.Error(), "STORAGE_UNAVAILABLE") {
		t.Fatalf("load: %v, want STORAGE_UNAVAILABLE", err)
	}
	if accepted.Load() == 0 {
		t.Fatal("no connection reached the silent Redis")
	}
	for deadline := time.Now().Add(40 * time.Second); open.Load() > 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d connections to the silent Redis still open 40 s after the failed load", open.Load(), accepted.Load())
		}
	}
}
