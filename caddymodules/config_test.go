package caddymodules

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	jose "github.com/go-jose/go-jose/v4"
	"golang.org/x/crypto/bcrypt"

	"github.com/codemode-gateway/caddy-codemode/broker/catalog"
	"github.com/codemode-gateway/caddy-codemode/guard/redistest"
)

// goldenInputs returns the Caddyfile of every golden file that adapts, by
// file name, plus the repository's Caddyfile.example.
func goldenInputs(t testing.TB) map[string]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "caddyfile", "*.caddyfiletest"))
	if err != nil || len(files) == 0 {
		t.Fatalf("golden files: %v", err)
	}
	out := map[string]string{}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		input, want, _ := strings.Cut(string(raw), "\n----------\n")
		if !strings.HasPrefix(strings.TrimSpace(want), "error:") {
			out[filepath.Base(f)] = input
		}
	}
	example, err := os.ReadFile(filepath.Join("..", "Caddyfile.example"))
	if err != nil {
		t.Fatal(err)
	}
	out["Caddyfile.example"] = string(example)
	return out
}

// exampleCaddyfiles returns every Caddyfile of the repository outside the
// golden files (Caddyfile.example, docs/*.Caddyfile, the CI's), by path.
// Their environment placeholders get plausible values, set for the test.
func exampleCaddyfiles(t testing.TB) map[string]string {
	t.Helper()
	out := map[string]string{}
	placeholder := regexp.MustCompile(`\{\$([A-Z0-9_]+)(:[^}]*)?\}`)
	port := 18000 // each variable its own port: two sites must not share one
	err := filepath.WalkDir("..", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if name == ".git" || name == "node_modules" || name == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if name != "Caddyfile" && !strings.HasSuffix(name, ".Caddyfile") && !strings.HasPrefix(name, "Caddyfile.") {
			return nil
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range placeholder.FindAllStringSubmatch(string(raw), -1) {
			if _, set := os.LookupEnv(m[1]); !set {
				port++
				t.Setenv(m[1], placeholderValue(m[1], port))
			}
		}
		rel, _ := filepath.Rel("..", path)
		out[rel] = string(raw)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, must := range []string{"Caddyfile.example", filepath.Join("docs", "production.Caddyfile")} {
		if _, ok := out[must]; !ok {
			t.Fatalf("%s not found among %d example Caddyfiles", must, len(out))
		}
	}
	return out
}

// placeholderValue is a value of the shape an environment variable's name
// suggests; port is free for it to use.
func placeholderValue(name string, port int) string {
	switch {
	case strings.HasSuffix(name, "PORT"):
		return strconv.Itoa(port)
	case strings.HasSuffix(name, "URL"):
		return "http://127.0.0.1:" + strconv.Itoa(port) + "/mcp"
	case strings.Contains(name, "ISSUER"):
		return "http://127.0.0.1:" + strconv.Itoa(port)
	case strings.Contains(name, "HOST"):
		return "gateway.example.com"
	case strings.Contains(name, "PREFIX"):
		return "codemode:test:"
	case strings.Contains(name, "NAME"):
		return "gw1"
	default: // addresses: REDIS_ADDR, GW1, CODEMODE_ADMIN, ...
		return "127.0.0.1:" + strconv.Itoa(port)
	}
}

func adaptGolden(t *testing.T, name, src string) map[string]any {
	t.Helper()
	out, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(src), map[string]any{"filename": name})
	if err != nil {
		t.Fatalf("%s: adapt: %v", name, err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(out, &cfg); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// mapKeys hold data, not configuration: their keys are header names (the
// header handler's operations too: response.set, request.add, ...).
var mapKeys = map[string]bool{"headers": true, "spec_headers": true, "header": true}

// headerOps are the header handler's maps of header names.
var headerOps = map[string]bool{"set": true, "add": true, "replace": true}

// durationKey names a field that holds a duration.
var durationKey = regexp.MustCompile(`(^|_)(timeout|interval|window|ttl|grace|duration|delay|lifetime|period|backoff|expiry)s?($|_)`)

// badDuration tells why v is not a caddy.Duration: a duration string, or
// nanoseconds (a number below a millisecond is some other unit's count).
func badDuration(v any) string {
	switch v := v.(type) {
	case string:
		if _, err := caddy.ParseDuration(v); err != nil {
			return fmt.Sprintf("%q is not a duration", v)
		}
	case float64:
		// Negative values are Caddy's sentinels (flush_interval -1).
		if v > 0 && (v < 1e6 || v != float64(int64(v))) {
			return fmt.Sprintf("%v is not nanoseconds", v)
		}
	case map[string]any, []any, bool, nil:
	default:
		return fmt.Sprintf("%v (%T)", v, v)
	}
	return ""
}

var snakeCase = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// TestAdaptedConfigIsCaddyShaped: `caddy adapt` of every Caddyfile of the
// repository (the golden files, Caddyfile.example, docs/*.Caddyfile, the
// CI's) emits snake_case keys only, and no duration in a unit of its own:
// durations are caddy.Duration, nanoseconds or a duration string.
func TestAdaptedConfigIsCaddyShaped(t *testing.T) {
	inputs := goldenInputs(t)
	for name, src := range exampleCaddyfiles(t) {
		inputs[name] = src
	}
	if len(inputs) < 20 {
		t.Fatalf("only %d Caddyfiles found", len(inputs))
	}
	for name, src := range inputs {
		var bad []string
		var walk func(v any, path string, data bool)
		walk = func(v any, path string, data bool) {
			switch v := v.(type) {
			case map[string]any:
				for k, x := range v {
					if !data && (!snakeCase.MatchString(k) || strings.HasSuffix(k, "_ms") ||
						strings.HasSuffix(k, "_seconds") || strings.HasSuffix(k, "_days")) {
						bad = append(bad, path+"/"+k)
					}
					if !data && durationKey.MatchString(k) {
						if why := badDuration(x); why != "" {
							bad = append(bad, path+"/"+k+": "+why)
						}
					}
					isData := mapKeys[k] || headerOps[k] && (strings.HasSuffix(path, "/response") || strings.HasSuffix(path, "/request"))
					walk(x, path+"/"+k, isData)
				}
			case []any:
				for _, x := range v {
					walk(x, path+"[]", false)
				}
			}
		}
		walk(adaptGolden(t, name, src), "", false)
		if len(bad) > 0 {
			sort.Strings(bad)
			t.Errorf("%s: keys that are not Caddy-shaped: %v", name, bad)
		}
	}
}

// TestEmptyBlocksAddNoDefaults: a Caddyfile block without subdirectives
// adapts to a JSON block holding at most its module's name, so the
// Caddyfile has no defaults of its own: an option left out of the
// Caddyfile and a field left out of the JSON get the same default, the one
// Provision applies.
func TestEmptyBlocksAddNoDefaults(t *testing.T) {
	cfg := adaptGolden(t, "empty blocks", `{
	codemode {
		storage memory
		throttle {
		}
		sandbox {
		}
		broker {
		}
		meta {
		}
		auth {
		}
	}
}`)
	app := cfg["apps"].(map[string]any)["codemode"].(map[string]any)
	want := map[string]string{
		"storage":  `{"module":"memory"}`,
		"throttle": `{}`,
		"sandbox":  `{"engine":"worker"}`,
		"broker":   `{}`,
		"meta":     `{}`,
		"auth":     `{}`,
	}
	for block, w := range want {
		got, _ := json.Marshal(app[block])
		if string(got) != w {
			t.Errorf("%s {} adapts to %s, want %s", block, got, w)
		}
	}
	// Options spelled with their default value: the throttle's `enabled
	// true` is the default, so it adds nothing either.
	cfg = adaptGolden(t, "explicit defaults", `{
	codemode {
		throttle {
			enabled true
		}
	}
}`)
	got, _ := json.Marshal(cfg["apps"].(map[string]any)["codemode"].(map[string]any)["throttle"])
	if string(got) != `{}` {
		t.Errorf("throttle { enabled true } adapts to %s, want {}", got)
	}
}

// localize points a golden config's external parts at local ones: every
// Redis storage at the test server (no password, no TLS), worker pools at
// this test binary, a transparent-mode provider at a fake one. It also
// keeps the variants cheap under the race detector: pools start no worker
// until asked (min_size 0) and user passwords are hashed at bcrypt's least
// cost (the server hashes a stand-in at the users' cost when it starts).
func localize(v any, redisAddr, prefix, idpURL string) {
	switch v := v.(type) {
	case map[string]any:
		if v["module"] == storageRedis {
			v["address"], v["key_prefix"] = redisAddr, prefix
			delete(v, "password")
			delete(v, "tls")
			delete(v, "username")
		}
		if pool, ok := v["pool"].(map[string]any); ok && v["engine"] == EngineWorker {
			delete(pool, "command")
			pool["min_size"] = 0
		}
		if _, ok := v["password_hash"]; ok {
			v["password_hash"] = cheapHash
		}
		if v["mode"] == AuthModeTransparent {
			v["provider_url"], v["development"] = idpURL, true
			delete(v, "jwks_url")
		}
		// A spec file must exist at load (file:///srv/petstore.json does
		// not here): the demo document stands in.
		if spec, ok := v["spec_url"].(string); ok && catalog.LocalFile(spec) != "" {
			v["spec_url"] = demoSpecFile
		}
		for _, x := range v {
			localize(x, redisAddr, prefix, idpURL)
		}
	case []any:
		for _, x := range v {
			localize(x, redisAddr, prefix, idpURL)
		}
	}
}

// demoSpecFile is Caddyfile.example's demo OpenAPI document, by absolute
// path.
var demoSpecFile, _ = filepath.Abs(filepath.Join("testdata", "demo", "openapi.json"))

// cheapHash is a bcrypt hash at the least cost.
var cheapHash = func() string {
	h, _ := bcrypt.GenerateFromPassword([]byte("pw"), bcrypt.MinCost)
	return string(h)
}()

// requiredKeys are fields without a default; removing one is expected to
// fail (or to change what the block is), so the test leaves them. address
// is localized: its default names no server the test runs.
var requiredKeys = map[string]bool{
	"module": true, "engine": true, "strategy": true, "mode": true, "issuer": true, "provider_url": true,
	"expected_audience": true, "max_requests": true, "max_concurrent": true, "tool": true, "name": true,
	"spec_url": true, "url": true, "command": true, "model": true, "id": true, "redirect_uris": true,
	"username": true, "password_hash": true, "key": true, "type": true, "keys": true, "address": true,
	"provider": true, // the inline key of tls.ca_pool.source modules (client_id_metadata's trust_pool)
}

// dependentKeys are optional fields whose removal must fail in the golden
// that names them, because another field there needs them.
var dependentKeys = map[string]string{
	"auth_development.caddyfiletest/auth/development":                                          "an http issuer needs development mode",
	"Caddyfile.example/auth/development":                                                       "an http issuer needs development mode",
	"auth_transparent.caddyfiletest/auth/development":                                          "the local provider (localize) is plain http",
	"sandbox_minimal.caddyfiletest/sandbox/trusted_callers":                                    "the in-process engine refuses untrusted callers",
	"credentials_full.caddyfiletest/auth":                                                      "user credentials are the signed-in user's: they need auth",
	"credentials_full.caddyfiletest/auth/development":                                          "an http issuer needs development mode",
	"credentials_full.caddyfiletest/broker/openapi/#0/credential/oauth":                        "a user credential needs a way to connect",
	"credentials_full.caddyfiletest/broker/openapi/#0/credential/oauth/authorization_endpoint": "without metadata both endpoints are needed",
	"credentials_full.caddyfiletest/broker/openapi/#0/credential/oauth/token_endpoint":         "without metadata both endpoints are needed",
	// Without a client_id the gateway registers one, from metadata: the
	// tracker upstream's (an authorization_server) may leave it out.
	"credentials_full.caddyfiletest/broker/openapi/#0/credential/oauth/client_id": "with both endpoints configured there is no metadata to register from",
	"credentials_full.caddyfiletest/broker/openapi/#1/credential/api_key":         "a user credential needs a way to connect",
	"credentials_full.caddyfiletest/broker/openapi/#2/credential/api_key":         "a user credential needs a way to connect",
	"credentials_full.caddyfiletest/meta/upstreams/#0/credential/oauth":           "a user credential needs a way to connect",
}

// optionalPaths lists the paths of the removable fields of v (objects and
// leaves alike), as key paths.
func optionalPaths(v any, path []string, out *[][]string) {
	m, ok := v.(map[string]any)
	if !ok {
		if l, ok := v.([]any); ok {
			for i, x := range l {
				optionalPaths(x, append(slices.Clone(path), "#"+strconv.Itoa(i)), out)
			}
		}
		return
	}
	for k, x := range m {
		p := append(slices.Clone(path), k)
		if !requiredKeys[k] && !mapKeys[k] {
			*out = append(*out, p)
		}
		if !mapKeys[k] {
			optionalPaths(x, p, out)
		}
	}
}

// without returns a deep copy of v without the field at path.
func without(v any, path []string) any {
	raw, _ := json.Marshal(v)
	var c any
	_ = json.Unmarshal(raw, &c)
	cur := c
	for i, k := range path {
		last := i == len(path)-1
		switch node := cur.(type) {
		case map[string]any:
			if last {
				delete(node, k)
				return c
			}
			cur = node[k]
		case []any:
			i, _ := strconv.Atoi(k[1:])
			cur = node[i]
		}
	}
	return c
}

// quietCaddy runs an empty Caddy config whose default log keeps errors
// only, for tests that provision many apps outside a running config (their
// contexts log through Caddy's default logger).
func quietCaddy(t *testing.T) {
	t.Helper()
	caddyMu.Lock()
	if err := caddy.Load([]byte(`{"admin":{"disabled":true,"config":{"persist":false}},"logging":{"logs":{"default":{"level":"ERROR"}}}}`), true); err != nil {
		caddyMu.Unlock()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = caddy.Stop()
		caddyMu.Unlock()
	})
}

// loadApp decodes and provisions a codemode app from raw the way Caddy
// loads an app; the returned function cleans it up the way Caddy unloads a
// config (the app, then the guest modules of its context).
func loadApp(raw []byte) (*App, func(), error) {
	parent := caddy.ActiveContext() // quietCaddy's, for its logs
	if parent.Context == nil {
		parent = caddy.Context{Context: context.Background()}
	}
	ctx, cancel := caddy.NewContext(parent)
	app := new(App)
	if err := caddy.StrictUnmarshalJSON(raw, app); err != nil {
		cancel()
		return nil, nil, err
	}
	if err := app.Provision(ctx); err != nil {
		_ = app.Cleanup()
		cancel()
		return nil, nil, err
	}
	return app, func() { _ = app.Cleanup(); cancel() }, nil
}

// provisionApp provisions a codemode app from raw and cleans it up.
func provisionApp(raw []byte) error {
	_, unload, err := loadApp(raw)
	if err == nil {
		unload()
	}
	return err
}

// TestGoldenConfigsProvision provisions the codemode app of every golden
// Caddyfile (and of Caddyfile.example), once whole and once without each
// optional field in turn: every field the Caddyfile can leave out has a
// default that works from JSON too. External parts are made local (see
// localize). A context kept open across the variants holds the whole
// config's components, so variants reuse what they do not change.
func TestGoldenConfigsProvision(t *testing.T) {
	quietCaddy(t)
	rc, prefix := redistest.Client(t)
	idp := newFakeIDP(t)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	jwk, _ := json.Marshal(jose.JSONWebKey{Key: key, KeyID: "golden", Algorithm: "ES256", Use: "sig"})
	t.Setenv("JWT_SIGNING_KEY", string(jwk))
	t.Setenv("REDIS_PASSWORD", "")
	t.Setenv("REDIS_HOST", "")

	names := slices.Sorted(func(yield func(string) bool) {
		for n := range goldenInputs(t) {
			if !yield(n) {
				return
			}
		}
	})
	inputs := goldenInputs(t)
	for _, name := range names {
		app, ok := adaptGolden(t, name, inputs[name])["apps"].(map[string]any)["codemode"].(map[string]any)
		if !ok {
			continue
		}
		t.Run(name, func(t *testing.T) {
			localize(app, rc.Options().Addr, prefix, idp.srv.URL)
			whole, _ := json.Marshal(app)
			_, unload, err := loadApp(whole)
			if err != nil {
				t.Fatalf("whole config: %v\n%s", err, whole)
			}
			defer unload()
			var paths [][]string
			optionalPaths(app, nil, &paths)
			for _, p := range paths {
				id := name + "/" + strings.Join(p, "/")
				raw, _ := json.Marshal(without(app, p))
				err := provisionApp(raw)
				switch why, dependent := dependentKeys[id]; {
				case dependent && err == nil:
					t.Errorf("without %s: provisioned, but %s", strings.Join(p, "/"), why)
				case !dependent && err != nil:
					t.Errorf("without %s: %v", strings.Join(p, "/"), err)
				}
			}
		})
	}
}

// TestExplicitDefaultsSameComponents: a block that spells out a default
// and one that leaves it out build the same components (their keys hash
// the configuration with its defaults applied), so adding a default to a
// running config does not replace anything.
func TestExplicitDefaultsSameComponents(t *testing.T) {
	quietCaddy(t)
	// A broker drains in the background and then lets go of its engine
	// and guard, so the process's pool may still hold what an earlier test
	// retired: each load starts from an empty pool, or its keys would
	// include those.
	released := func() {
		t.Helper()
		eventually(t, "components released", func() (bool, string) {
			k := componentKeys()
			return len(k) == 0, fmt.Sprint(k)
		})
	}
	released()
	keysOf := func(app string) []string {
		t.Helper()
		_, unload, err := loadApp([]byte(app))
		if err != nil {
			t.Fatalf("%s: %v", app, err)
		}
		keys := componentKeys()
		unload()
		released()
		return keys
	}
	for _, tc := range []struct{ bare, explicit string }{
		{`{"throttle":{"default_rate_limit":{"max_requests":5}}}`,
			`{"storage":{"module":"memory"},"throttle":{"enabled":true,"key_prefix":"codemode:guard:","default_rate_limit":{"max_requests":5,"window":"1m","partition_by":"global"}}}`},
		{`{"sandbox":{"engine":"inprocess","trusted_callers":true}}`, `{"sandbox":{"engine":"inprocess","preset":"secure","trusted_callers":true}}`},
		{`{"sandbox":{"pool":{"min_size":0}}}`, `{"sandbox":{"engine":"worker","preset":"secure","pool":{"min_size":0}}}`},
		{`{"broker":{}}`, `{"broker":{"session_timeout":"5m","max_concurrent_sessions":1000,"execution_timeout":"30s",` +
			`"max_tool_calls":100,"max_body_size":1048576,"drain_timeout":"10s","poll_interval":"5m","storage":{"module":"memory"}}}`},
	} {
		bare, explicit := keysOf(tc.bare), keysOf(tc.explicit)
		if !slices.Equal(bare, explicit) {
			t.Errorf("%s\nbuilds %v\n%s\nbuilds %v", tc.bare, bare, tc.explicit, explicit)
		}
	}
}
