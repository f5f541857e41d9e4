package caddymodules

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/codemode-gateway/caddy-codemode/oauth"
)

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestAuthConfigEnvironment(t *testing.T) {
	// IDP_* select transparent mode and fill its fields.
	c := &AuthConfig{}
	if err := c.applyDefaults(envOf(map[string]string{
		EnvIDPProviderURL: "https://idp.example/realms/x", EnvIDPClientID: "gw", EnvIDPClientSecret: "s3cret",
		EnvIDPExpectedAudience: "https://gw.example/mcp",
	})); err != nil {
		t.Fatal(err)
	}
	if c.Mode != AuthModeTransparent || c.ProviderURL != "https://idp.example/realms/x" || c.ClientID != "gw" ||
		c.ClientSecret != "s3cret" || c.ExpectedAudience != "https://gw.example/mcp" || c.Resource != "https://gw.example/mcp" {
		t.Fatalf("transparent from env: %+v", c)
	}
	if err := c.validate(); err != nil {
		t.Fatal(err)
	}

	// Without an audience the client id is used.
	c = &AuthConfig{Mode: AuthModeTransparent, ProviderURL: "https://idp.example"}
	_ = c.applyDefaults(envOf(map[string]string{EnvIDPClientID: "gw"}))
	if c.ExpectedAudience != "gw" || c.Resource != "" {
		t.Fatalf("audience fallback: %+v", c)
	}

	// Orchestrated: JWT_SIGNING_KEY; REDIS_* name the token storage when
	// no storage is configured.
	env := envOf(map[string]string{
		"REDIS_HOST": "redis.internal", "REDIS_PORT": "6390", "REDIS_PASSWORD": "pw", "JWT_SIGNING_KEY": `{"kty":"EC"}`,
	})
	c = &AuthConfig{ServerConfig: oauth.ServerConfig{Issuer: "https://gw.example/"}}
	if err := c.applyDefaults(env); err != nil {
		t.Fatal(err)
	}
	if c.Mode != AuthModeOrchestrated || c.ServerConfig.Local.SignKey != `{"kty":"EC"}` || c.Issuer != "https://gw.example" || c.Resource != "https://gw.example" {
		t.Fatalf("orchestrated from env: %+v", c)
	}
	if got := string(redisFromEnv(env)); got != `{"address":"redis.internal:6390","module":"redis","password":"pw"}` {
		t.Fatalf("token storage from env: %s", got)
	}
	if redisFromEnv(envOf(nil)) != nil {
		t.Fatal("token storage from an empty environment")
	}
	if rl := c.TokenRateLimit; rl == nil || rl.MaxRequests != defaultTokenMaxRequests || rl.PartitionBy != "ip" || rl.Window != caddy.Duration(time.Minute) {
		t.Fatalf("default rate limit: %+v", c.TokenRateLimit)
	}

	// Caddy placeholders such as {env.X} are resolved.
	t.Setenv("CODEMODE_TEST_IDP", "https://idp.placeholder.example")
	c = &AuthConfig{Mode: AuthModeTransparent, ProviderURL: "{env.CODEMODE_TEST_IDP}", ExpectedAudience: "aud"}
	if err := c.applyDefaults(envOf(nil)); err != nil {
		t.Fatal(err)
	}
	if c.ProviderURL != "https://idp.placeholder.example" {
		t.Fatalf("placeholder: %q", c.ProviderURL)
	}
}

// TestAuthUserPlaceholders: a user's password hash (and name) may come
// from the environment or a file, as docs/credentials.md shows with
// `user alice {env.ALICE_HASH}`; the placeholder used to reach the bcrypt
// check as is and the config failed to load.
func TestAuthUserPlaceholders(t *testing.T) {
	const hash = "$2a$10$enaNFJ7OuAlx4Q8TTTsz3e/rd1O7ekoqVkd2xKEDt5mpWCC4pseAG"
	t.Setenv("CODEMODE_TEST_ALICE_HASH", hash)
	file := filepath.Join(t.TempDir(), "bob.hash")
	if err := os.WriteFile(file, []byte(hash+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := &AuthConfig{ServerConfig: oauth.ServerConfig{Issuer: "http://localhost:8080", Development: true, Users: []oauth.User{
		{Username: "alice", PasswordHash: "{env.CODEMODE_TEST_ALICE_HASH}"},
		{Username: "bob", PasswordHash: "{file." + file + "}"},
	}}}
	if err := c.applyDefaults(envOf(nil)); err != nil {
		t.Fatal(err)
	}
	for _, u := range c.Users {
		if u.PasswordHash != hash {
			t.Errorf("user %s: password hash %q, want the hash from the placeholder", u.Username, u.PasswordHash)
		}
	}
	if err := c.validate(); err != nil {
		t.Fatal(err)
	}
}

// TestAuthUserPlaceholderUnset: a user whose hash placeholder resolves to
// nothing (an unset variable, as production.Caddyfile's `user alice
// {env.ALICE_HASH}` on a host without it) fails the load naming the user
// and the placeholder; it said "users[0]: username and password_hash are
// required".
func TestAuthUserPlaceholderUnset(t *testing.T) {
	t.Setenv("CODEMODE_TEST_UNSET_HASH", "")
	c := &AuthConfig{ServerConfig: oauth.ServerConfig{Issuer: "http://localhost:8080", Development: true, Users: []oauth.User{
		{Username: "alice", PasswordHash: "{env.CODEMODE_TEST_UNSET_HASH}"},
	}}}
	err := c.applyDefaults(envOf(nil))
	want := `user "alice": password hash {env.CODEMODE_TEST_UNSET_HASH} is empty (an unset environment variable or an empty file?)`
	if err == nil || err.Error() != want {
		t.Fatalf("error %v, want %q", err, want)
	}
}

func TestAuthConfigValidate(t *testing.T) {
	cases := []struct {
		cfg  AuthConfig
		want string
	}{
		{AuthConfig{Mode: "remote"}, "must be orchestrated or transparent"},
		{AuthConfig{Mode: AuthModeTransparent, ExpectedAudience: "a"}, "provider_url"},
		{AuthConfig{Mode: AuthModeTransparent, ProviderURL: "http://idp.example", ExpectedAudience: "a"}, "https outside development"},
		{AuthConfig{Mode: AuthModeTransparent, ProviderURL: "https://idp.example"}, "expected_audience"},
		{AuthConfig{Mode: AuthModeOrchestrated}, "issuer"},
		// A scheme left out: the error names the issuer, not the resource
		// that defaults to it.
		{AuthConfig{Mode: AuthModeOrchestrated, ServerConfig: oauth.ServerConfig{Issuer: "gw.example.com"}}, `issuer "gw.example.com": must be an absolute http(s) URL`},
		{AuthConfig{Mode: AuthModeOrchestrated, ServerConfig: oauth.ServerConfig{Issuer: "https://gw.example"}, ProviderURL: "https://idp.example"}, "belong to transparent mode"},
		{AuthConfig{Mode: AuthModeOrchestrated, ServerConfig: oauth.ServerConfig{Issuer: "https://gw.example"}, Resource: "/mcp"}, "absolute URL"},
		{AuthConfig{Mode: AuthModeTransparent, ProviderURL: "https://idp.example", ExpectedAudience: "a",
			ServerConfig: oauth.ServerConfig{Resources: []string{"https://gw.example/mcp"}}}, "resources belongs to orchestrated mode"},
		{AuthConfig{Mode: AuthModeOrchestrated, ServerConfig: oauth.ServerConfig{Issuer: "https://gw.example", Resources: []string{"urn:example:mcp"}}},
			"not an absolute http(s) URI"},
		{AuthConfig{Mode: AuthModeOrchestrated, Resource: "https://gw.example/mcp",
			ServerConfig: oauth.ServerConfig{Issuer: "https://gw.example", Resources: []string{"https://gw.example/api"}}}, "auth resource https://gw.example/mcp is not among the auth resources"},
		// In the Caddyfile's key and unit, where it named the library's
		// refresh.reuse_grace_seconds and a number of seconds.
		{AuthConfig{Mode: AuthModeOrchestrated, ServerConfig: oauth.ServerConfig{Issuer: "https://gw.example"},
			Refresh: &AuthRefresh{Enabled: true, ReuseGrace: caddy.Duration(10 * time.Minute)}}, "refresh: reuse_grace 10m0s is more than 5m0s"},
		{AuthConfig{Mode: AuthModeOrchestrated, ServerConfig: oauth.ServerConfig{Issuer: "https://gw.example"},
			PasswordCheckWait: caddy.Duration(2 * time.Minute)}, "password_check_wait: 2m0s is more than 1m0s"},
		{AuthConfig{Mode: AuthModeOrchestrated, ServerConfig: oauth.ServerConfig{Issuer: "https://gw.example"},
			PasswordCheckWait: caddy.Duration(1500 * time.Millisecond)}, "password_check_wait: 1.5s is not a non-negative whole number of seconds"},
	}
	for _, tc := range cases {
		c := tc.cfg
		err := c.applyDefaults(envOf(nil))
		if err == nil {
			err = c.validate()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want %q", tc.cfg, err, tc.want)
		}
	}
}

func TestAuthConfigWarnings(t *testing.T) {
	core, logs := observer.New(zapcore.WarnLevel)
	no := false
	c := &AuthConfig{ServerConfig: oauth.ServerConfig{
		Issuer: "http://localhost:8080", Development: true, AllowDefaultPublic: true, DCREnabled: true},
		Refresh: &AuthRefresh{AccessTokenTTL: caddy.Duration(2 * time.Hour), RotateRefreshToken: &no,
			RefreshTokenTTL: caddy.Duration(90 * 24 * time.Hour)},
	}
	if err := c.applyDefaults(envOf(nil)); err != nil {
		t.Fatal(err)
	}
	c.warn(zap.New(core), nil)
	var all []string
	for _, e := range logs.All() {
		all = append(all, e.Message)
	}
	joined := strings.Join(all, "\n")
	for _, want := range []string{"development mode", "allow_default_public", "in memory", "no signing key",
		"not rotated", "rotate_refresh_token is false", "dcr_enabled", "consent screen is off",
		"longer than 1 hour", "longer than 30 days"} {
		if !strings.Contains(joined, want) {
			t.Errorf("no warning about %q in:\n%s", want, joined)
		}
	}

	// Durations are logged as durations, rendered in the log's
	// duration_format (Caddy's default: seconds), as every other duration
	// field: key_rotation was an int of days, reuse_grace one of seconds.
	core, logs = observer.New(zapcore.WarnLevel)
	c = &AuthConfig{ServerConfig: oauth.ServerConfig{Issuer: "https://gw.example"},
		Local:   &AuthLocal{KeyRotation: caddy.Duration(10 * 24 * time.Hour)},
		Refresh: &AuthRefresh{ReuseGrace: caddy.Duration(30 * time.Second)},
	}
	if err := c.applyDefaults(envOf(nil)); err != nil {
		t.Fatal(err)
	}
	c.warn(zap.New(core), nil)
	durations := map[string]any{}
	for _, e := range logs.All() {
		for _, f := range e.Context {
			if f.Key == "key_rotation" || f.Key == "reuse_grace" || strings.HasSuffix(f.Key, "_days") || strings.HasSuffix(f.Key, "_seconds") {
				durations[f.Key] = e.ContextMap()[f.Key]
			}
		}
	}
	if len(durations) != 2 || durations["key_rotation"] != 10*24*time.Hour || durations["reuse_grace"] != 30*time.Second {
		t.Errorf("duration fields %v, want key_rotation 240h and reuse_grace 30s as time.Duration", durations)
	}

	// A production-shaped config warns about nothing.
	core, logs = observer.New(zapcore.WarnLevel)
	c = &AuthConfig{ServerConfig: oauth.ServerConfig{Issuer: "https://gw.example"},
		Consent: &oauth.ConsentConfig{Enabled: true},
		Local:   &AuthLocal{SignKey: "{...}", KeyRotation: caddy.Duration(30 * 24 * time.Hour)},
	}
	if err := c.applyDefaults(envOf(nil)); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer rdb.Close()
	c.warn(zap.New(core), &RedisStorage{TLS: &RedisTLS{}, client: rdb})
	if n := logs.Len(); n != 0 {
		t.Fatalf("production config warned %d times: %v", n, logs.All())
	}
}

func TestAuthMetricsRegisterTwice(t *testing.T) {
	reg := prometheus.NewRegistry()
	m1, err := newAuthMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	m2, err := newAuthMetrics(reg) // a reload provisions the app again
	if err != nil {
		t.Fatal(err)
	}
	m1.failures.WithLabelValues("expired").Inc()
	m2.failures.WithLabelValues("expired").Inc()
	if got := counterValue(t, m1.failures.WithLabelValues("expired")); got != 2 {
		t.Fatalf("shared counter = %v, want 2", got)
	}
}

func TestIsLoopbackListener(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": true, "tcp/127.0.0.1:80": true, "[::1]:8080": true, "localhost:9000": true,
		"unix//tmp/caddy.sock": true, ":8080": false, "0.0.0.0:80": false, "10.0.0.1:80": false, "example.com:443": false,
	} {
		if got := isLoopbackListener(addr); got != want {
			t.Errorf("%s: %v, want %v", addr, got, want)
		}
	}
}

// TestCaddyAuthMetrics checks that refused tokens are counted by reason
// in the registry Caddy's metrics endpoint serves. The counters live for
// the whole process (observability.go), so the test reads what its own
// requests added: with -count=2 a ">= n" would pass on the first round's
// counts alone.
func TestCaddyAuthMetrics(t *testing.T) {
	idp := newFakeIDP(t)
	port := freePort(t)
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	startCaddy(t, caddyConfig(port, map[string]any{
		"mode": "transparent", "development": true, "provider_url": idp.srv.URL, "expected_audience": base + "/private",
	}, standardRoutes(nil)))
	app, err := caddy.ActiveContext().App("codemode")
	if err != nil {
		t.Fatal(err)
	}
	m := app.(*App).auth.metrics
	missing := counterValue(t, m.failures.WithLabelValues(oauth.ReasonMissing))
	audience := counterValue(t, m.failures.WithLabelValues(oauth.ReasonWrongAudience))
	get(t, base+"/private", "")
	get(t, base+"/private", "")
	get(t, base+"/private", idp.token(t, nil)) // wrong audience
	if got := counterValue(t, m.failures.WithLabelValues(oauth.ReasonMissing)) - missing; got != 2 {
		t.Errorf("missing_token grew by %v, want 2", got)
	}
	if got := counterValue(t, m.failures.WithLabelValues(oauth.ReasonWrongAudience)) - audience; got != 1 {
		t.Errorf("wrong_audience grew by %v, want 1", got)
	}
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
