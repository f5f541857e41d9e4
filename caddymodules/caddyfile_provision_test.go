package caddymodules

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	jose "github.com/go-jose/go-jose/v4"

	"github.com/codemode-gateway/caddy-codemode/guard/redistest"
	"github.com/codemode-gateway/caddy-codemode/internal/goroutinetest"
)

// provisionEnv is what the provisioning tests give a config: a Redis and an
// identity provider the test runs, a directory for Caddy's storage, and the
// environment the repository's Caddyfiles name.
type provisionEnv struct {
	redisAddr, prefix, idpURL, dir string
	signKey                        string // an ES256 JWK
}

func newProvisionEnv(tb testing.TB) *provisionEnv {
	tb.Helper()
	rc, prefix := redistest.Client(tb)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	jwk, _ := json.Marshal(jose.JSONWebKey{Key: key, KeyID: "provision", Algorithm: "ES256", Use: "sig"})
	e := &provisionEnv{redisAddr: rc.Options().Addr, prefix: prefix, idpURL: newFakeIDP(tb).srv.URL,
		dir: tb.TempDir(), signKey: string(jwk)}
	// docs/production.Caddyfile's secrets and addresses; exampleCaddyfiles
	// sets the others.
	tb.Setenv("REDIS_ADDR", e.redisAddr)
	tb.Setenv("REDIS_PASSWORD", "")
	tb.Setenv("JWT_SIGNING_KEY", e.signKey)
	tb.Setenv("ALICE_HASH", cheapHash)
	tb.Setenv("API_TOKEN", "token")
	tb.Setenv("GATEWAY_URL", "http://127.0.0.1:1/mcp")
	return e
}

// contain makes a whole Caddy config safe to provision in a test process,
// leaving every codemode module as written: no admin endpoint, logs
// discarded (a `log` directive could name any file), Caddy's storage in
// the test's directory (the pki app writes its root there).
func (e *provisionEnv) contain(cfg map[string]any) {
	cfg["admin"] = map[string]any{"disabled": true, "config": map[string]any{"persist": false}}
	cfg["logging"] = map[string]any{"logs": map[string]any{"default": map[string]any{
		"level": "ERROR", "writer": map[string]any{"output": "discard"}}}}
	cfg["storage"] = map[string]any{"module": "file_system", "root": e.dir}
}

// confine is contain plus what makes a fuzzed config cheap and hermetic
// (see FuzzCaddyfileProvision): localize (Redis and the identity provider
// are the test's, no worker command, bcrypt at its least cost), a worker
// pool that starts no worker (min_size 0, none spare while nothing runs),
// and development mode's generated RSA key replaced by a fixed key.
func (e *provisionEnv) confine(cfg map[string]any) {
	e.contain(cfg)
	localize(cfg, e.redisAddr, e.prefix, e.idpURL)
	apps, ok := cfg["apps"].(map[string]any)
	if !ok {
		return
	}
	app, ok := apps["codemode"].(map[string]any)
	if !ok {
		// Handlers get the app with its defaults, hence the worker
		// engine: state it, so that its pool starts no process.
		app = map[string]any{}
		apps["codemode"] = app
	}
	sb, ok := app["sandbox"].(map[string]any)
	if !ok {
		sb = map[string]any{}
		app["sandbox"] = sb
	}
	if eng, set := sb["engine"]; !set || eng == EngineWorker {
		pool, ok := sb["pool"].(map[string]any)
		if !ok {
			pool = map[string]any{}
			sb["pool"] = pool
		}
		delete(pool, "command")
		pool["min_size"] = 0
	}
	if auth, ok := app["auth"].(map[string]any); ok && auth["development"] == true && auth["mode"] != AuthModeTransparent {
		local, ok := auth["local"].(map[string]any)
		if !ok {
			local = map[string]any{}
			auth["local"] = local
		}
		if _, set := local["sign_key"]; !set {
			local["sign_key"] = e.signKey
		}
	}
}

// provisionState is what a provisioned and cleaned-up config must leave as
// it found it.
type provisionState struct {
	goroutines int
	fds        int
	children   int // sandbox workers (the test's redis-server may be one)
}

func currentProvisionState(t *testing.T) provisionState {
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatalf("reading /proc/self/fd: %v", err)
	}
	n, _ := countGoroutines()
	return provisionState{goroutines: n, fds: len(fds), children: childProcesses(t)}
}

// countGoroutines counts the goroutines, less the ones a process keeps
// once some config needed them (certmagic's certificate cache, the
// process-wide telemetry), and returns the stacks it counted.
func countGoroutines() (int, string) {
	return goroutinetest.Count(processGoroutines...)
}

// processGoroutines are functions of goroutines that live as long as the
// process once started, whatever config started them.
var processGoroutines = []string{
	"certmagic.(*Cache).maintainAssets",
}

// validateAndRelease runs caddy.Validate on raw (every app and module is
// provisioned, validated and cleaned up; nothing listens) and then checks
// that the config left nothing running: no component, no sandbox worker,
// no goroutine or file descriptor more than before. The caller holds
// caddyMu.
func validateAndRelease(t *testing.T, raw []byte) error {
	t.Helper()
	before := currentProvisionState(t)
	var cfg caddy.Config
	if err := caddy.StrictUnmarshalJSON(raw, &cfg); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- caddy.Validate(&cfg) }()
	var err error
	select {
	case err = <-done:
	case <-time.After(2 * time.Minute):
		buf := make([]byte, 4<<20)
		t.Fatalf("provisioning did not end in 2 minutes\n%s\n%s", raw, buf[:runtime.Stack(buf, true)])
	}
	if err != nil && strings.TrimSpace(err.Error()) == "" {
		t.Fatalf("provisioning failed with an empty error\n%s", raw)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		// Transparent mode fetches the provider's metadata and keys with
		// http.DefaultTransport: its idle connection is the process's,
		// reused by the next config and closed after 90 s idle.
		http.DefaultTransport.(*http.Transport).CloseIdleConnections()
		keys, now := componentKeys(), currentProvisionState(t)
		if len(keys) == 0 && now.children <= before.children && now.goroutines <= before.goroutines && now.fds <= before.fds {
			return err
		}
		if time.Now().After(deadline) {
			_, stacks := countGoroutines()
			t.Fatalf("after provisioning (%v): components %v, %d child processes (%d before), %d goroutines (%d before), %d file descriptors (%d before)\n%s\n%s",
				err, keys, now.children, before.children, now.goroutines, before.goroutines, now.fds, before.fds, raw, stacks)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// FuzzCaddyfileProvision: what `caddy run` and `caddy reload` do with an
// operator's Caddyfile after adapting it. Any text that adapts either
// provisions (every app and handler: the codemode app's storage, throttle,
// sandbox, auth, credentials, broker and meta areas, and the codemode_*
// handlers) and is cleaned up, leaving no component, worker process,
// goroutine or file descriptor behind, or fails with an error; it never
// panics or hangs. caddy.Validate provisions without serving: nothing
// listens, no app starts (no catalog fetch, no upstream connection).
//
// Seeds: the golden .caddyfiletest inputs and every Caddyfile of the
// repository (Caddyfile.example, docs/production.Caddyfile with its Redis
// and secrets from the test, the CI's gateways).
//
// Each adapted config is confined first (provisionEnv.confine): Redis and
// the identity provider are the test's, and the worker engine keeps its
// pool settings but starts no process (min_size 0, no command). A worker
// start is a process spawn (tens of milliseconds, and a `command` a mutated
// seed names would run), and development mode's RSA key costs as much: both
// would make each iteration tens of times slower without reaching more of
// the configuration code. TestExampleCaddyfilesProvision provisions the
// repository's Caddyfiles as they are, workers included.
func FuzzCaddyfileProvision(f *testing.F) {
	env := newProvisionEnv(f)
	for _, in := range goldenInputs(f) {
		f.Add(in)
	}
	for _, in := range exampleCaddyfiles(f) {
		f.Add(in)
	}
	adapter := caddyconfig.GetAdapter("caddyfile")
	f.Fuzz(func(t *testing.T, input string) {
		if len(input) > 8<<10 || strings.Contains(input, "import") {
			return
		}
		out, _, err := adapter.Adapt([]byte(input), map[string]any{"filename": "Caddyfile"})
		if err != nil {
			return
		}
		var cfg map[string]any
		if err := json.Unmarshal(out, &cfg); err != nil {
			t.Fatalf("adapted to invalid JSON: %v\n%s", err, out)
		}
		env.confine(cfg)
		raw, err := json.Marshal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		caddyMu.Lock()
		defer caddyMu.Unlock()
		_ = validateAndRelease(t, raw)
	})
}

// TestExampleCaddyfilesProvision provisions every Caddyfile of the
// repository as written (only Caddy's admin, logs and storage are the
// test's): their sandbox pools start real worker processes, and once the
// config is cleaned up no worker, component, goroutine or file descriptor
// is left.
func TestExampleCaddyfilesProvision(t *testing.T) {
	env := newProvisionEnv(t)
	files := exampleCaddyfiles(t)
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range files {
			if !yield(n) {
				return
			}
		}
	})
	adapter := caddyconfig.GetAdapter("caddyfile")
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			out, _, err := adapter.Adapt([]byte(files[name]), map[string]any{"filename": name})
			if err != nil {
				t.Fatalf("adapt: %v", err)
			}
			var cfg map[string]any
			if err := json.Unmarshal(out, &cfg); err != nil {
				t.Fatal(err)
			}
			env.contain(cfg)
			raw, _ := json.Marshal(cfg)
			caddyMu.Lock()
			defer caddyMu.Unlock()
			if err := validateAndRelease(t, raw); err != nil {
				t.Fatal(fmt.Errorf("provisioning: %w", err))
			}
		})
	}
}

// TestExampleCaddyfilesBoundSlowClients holds the Caddyfiles a user starts
// from (Caddyfile.example, docs/production.Caddyfile) to read timeouts on
// every server: Caddy's defaults cut a body that stalls, not one that
// trickles a byte at a time, so without read_body one client holds a
// connection and a handler's goroutine for as long as it likes. No write
// timeout: MCP and broker answers stream as long as a session runs.
func TestExampleCaddyfilesBoundSlowClients(t *testing.T) {
	files := exampleCaddyfiles(t)
	adapter := caddyconfig.GetAdapter("caddyfile")
	for _, name := range []string{"Caddyfile.example", "docs/production.Caddyfile"} {
		t.Run(name, func(t *testing.T) {
			src, ok := files[name]
			if !ok {
				t.Fatalf("%s not found", name)
			}
			out, _, err := adapter.Adapt([]byte(src), map[string]any{"filename": name})
			if err != nil {
				t.Fatalf("adapt: %v", err)
			}
			var cfg struct {
				Apps struct {
					HTTP struct {
						Servers map[string]struct {
							ReadTimeout       caddy.Duration `json:"read_timeout"`
							ReadHeaderTimeout caddy.Duration `json:"read_header_timeout"`
							WriteTimeout      caddy.Duration `json:"write_timeout"`
						} `json:"servers"`
					} `json:"http"`
				} `json:"apps"`
			}
			if err := json.Unmarshal(out, &cfg); err != nil {
				t.Fatal(err)
			}
			if len(cfg.Apps.HTTP.Servers) == 0 {
				t.Fatal("no HTTP server")
			}
			for srv, s := range cfg.Apps.HTTP.Servers {
				if s.ReadTimeout <= 0 || s.ReadHeaderTimeout <= 0 {
					t.Errorf("server %s: read_timeout %v, read_header_timeout %v; want both set (servers { timeouts { read_header; read_body } })",
						srv, time.Duration(s.ReadTimeout), time.Duration(s.ReadHeaderTimeout))
				}
				if s.WriteTimeout != 0 {
					t.Errorf("server %s: write_timeout %v would cut streamed answers", srv, time.Duration(s.WriteTimeout))
				}
			}
		})
	}
}
