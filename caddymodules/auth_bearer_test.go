package caddymodules

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/codemode-gateway/caddy-codemode/oauth"
)

// bearerFor builds a provider on a transparent-mode app without Caddy.
func bearerFor(t testing.TB, idpURL, audience string, allowPublic bool, scopes ...string) *BearerAuth {
	t.Helper()
	cfg := &AuthConfig{Mode: AuthModeTransparent, ProviderURL: idpURL, ExpectedAudience: audience,
		ServerConfig: oauth.ServerConfig{Development: true, AllowDefaultPublic: allowPublic}}
	if err := cfg.applyDefaults(envOf(nil)); err != nil {
		t.Fatal(err)
	}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	sh, err := buildAuth(cfg, MemoryStorage{}.Backend(), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sh.Destruct() })
	m, _ := newAuthMetrics(nil)
	app := &App{auth: authState{cfg: cfg, shared: sh, metrics: m, resource: cfg.Resource}}
	return &BearerAuth{app: app, audience: audience, Scopes: scopes,
		metadataURL: oauth.MetadataURL(audience), logger: zap.NewNop()}
}

func TestBearerAuthenticate(t *testing.T) {
	idp := newFakeIDP(t)
	const aud = "https://gw.example/mcp"
	b := bearerFor(t, idp.srv.URL, aud, false, "mcp")
	good := idp.token(t, func(m map[string]any) { m["aud"] = aud })
	noScope := idp.token(t, func(m map[string]any) { m["aud"] = aud; m["scope"] = "read" })

	r := httptest.NewRequest(http.MethodGet, "/mcp", nil)
	r.Header.Set("Authorization", "Bearer "+good)
	w := httptest.NewRecorder()
	u, ok, err := b.Authenticate(w, r)
	if err != nil || !ok || u.ID != "user-7" || u.Metadata["scopes"] != "mcp read" || u.Metadata["tenant_id"] != "acme" ||
		u.Metadata["client_id"] != "cli-1" || u.Metadata["expires_at"] == "" {
		t.Fatalf("good token: %+v %v %v", u, ok, err)
	}

	r.Header.Set("Authorization", "Bearer "+noScope)
	w = httptest.NewRecorder()
	if _, ok, _ := b.Authenticate(w, r); ok {
		t.Fatal("token without the required scope accepted")
	}
	if got := w.Header().Get("WWW-Authenticate"); !strings.Contains(got, `error="insufficient_scope", scope="mcp read"`) ||
		!strings.Contains(got, `resource_metadata="https://gw.example/.well-known/oauth-protected-resource/mcp"`) {
		t.Fatalf("insufficient scope challenge: %q", got)
	}

	// Anonymous access only with allow_default_public, and never with a bad token.
	r.Header.Del("Authorization")
	if _, ok, _ := b.Authenticate(httptest.NewRecorder(), r); ok {
		t.Fatal("anonymous accepted without allow_default_public")
	}
	pub := bearerFor(t, idp.srv.URL, aud, true)
	if u, ok, _ := pub.Authenticate(httptest.NewRecorder(), r); !ok || u.Metadata["anonymous"] != "true" {
		t.Fatalf("anonymous with allow_default_public: %+v %v", u, ok)
	}
	r.Header.Set("Authorization", "Bearer garbage")
	if _, ok, _ := pub.Authenticate(httptest.NewRecorder(), r); ok {
		t.Fatal("bad token accepted with allow_default_public")
	}

	// The provider is down and no keys were ever fetched: a server-side
	// error for caddyauth to log, and a challenge without error="invalid_token".
	idp.srv.Close()
	down := bearerFor(t, idp.srv.URL, aud, false)
	r.Header.Set("Authorization", "Bearer "+good)
	w = httptest.NewRecorder()
	_, ok, err = down.Authenticate(w, r)
	if ok || !errors.Is(err, oauth.ErrKeySetUnavailable) {
		t.Fatalf("provider down: ok=%v err=%v", ok, err)
	}
	if got := w.Header().Get("WWW-Authenticate"); strings.Contains(got, "error=") {
		t.Fatalf("provider down challenge: %q", got)
	}
}

// BenchmarkBearerAuthenticate is the provider's cost per request with a
// token presented before (the usual case: a client reuses its token).
func BenchmarkBearerAuthenticate(b *testing.B) {
	idp := newFakeIDP(b)
	const aud = "https://gw.example/mcp"
	p := bearerFor(b, idp.srv.URL, aud, false)
	tok := idp.token(b, func(m map[string]any) { m["aud"] = aud })
	r := httptest.NewRequest(http.MethodGet, "/mcp", nil)
	r.Header.Set("Authorization", "Bearer "+tok)
	w := httptest.NewRecorder()
	b.ReportAllocs()
	for b.Loop() {
		if _, ok, err := p.Authenticate(w, r); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}
