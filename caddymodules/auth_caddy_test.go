package caddymodules

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"golang.org/x/oauth2"

	"github.com/codemode-gateway/caddy-codemode/internal/nettest"
	"github.com/codemode-gateway/caddy-codemode/oauth"
)

// caddyMu serialises the tests that run a Caddy instance: caddy.Load
// replaces the process-wide config.
var caddyMu sync.Mutex

// freePort is a free loopback port for a test's gateway.
var freePort = nettest.Port

// caddyConfig is a whole Caddy JSON config with one HTTP server on
// 127.0.0.1:port running routes, and the codemode app's auth.
func caddyConfig(port int, auth map[string]any, routes []any) []byte {
	cfg := map[string]any{
		"admin":   map[string]any{"disabled": true, "config": map[string]any{"persist": false}},
		"logging": map[string]any{"logs": map[string]any{"default": map[string]any{"level": "ERROR"}}},
		"apps": map[string]any{
			"codemode": map[string]any{"auth": auth},
			"http": map[string]any{"servers": map[string]any{"test": map[string]any{
				"listen":          []string{fmt.Sprintf("127.0.0.1:%d", port)},
				"automatic_https": map[string]any{"disable": true},
				"routes":          routes,
			}}},
		},
	}
	b, _ := json.Marshal(cfg)
	return b
}

// standardRoutes: codemode_oauth first, /private* behind codemode_bearer
// answering with the auth placeholders, everything else public.
func standardRoutes(provider map[string]any) []any {
	if provider == nil {
		provider = map[string]any{}
	}
	return []any{
		map[string]any{"handle": []any{map[string]any{"handler": "codemode_oauth"}}},
		map[string]any{
			"match": []any{map[string]any{"path": []string{"/private*"}}},
			"handle": []any{
				map[string]any{"handler": "authentication", "providers": map[string]any{"codemode_bearer": provider}},
				map[string]any{"handler": "static_response",
					"body": "user={http.auth.user.id} scopes={http.auth.user.scopes} client={http.auth.user.client_id} tenant={http.auth.user.tenant_id}"},
			},
			"terminal": true,
		},
		map[string]any{"handle": []any{map[string]any{"handler": "static_response", "body": "public"}}},
	}
}

func startCaddy(t *testing.T, cfg []byte) {
	t.Helper()
	caddyMu.Lock()
	if err := caddy.Load(cfg, true); err != nil {
		caddyMu.Unlock()
		t.Fatalf("caddy.Load: %v", err)
	}
	t.Cleanup(func() {
		_ = caddy.Stop()
		// The stopped server closed the client's idle connections; a
		// later test whose port happens to be this one must not reuse them.
		http.DefaultClient.CloseIdleConnections()
		caddyMu.Unlock()
	})
}

// startCaddyfile adapts the Caddyfile src and starts it as startCaddy does.
func startCaddyfile(t *testing.T, src string) {
	t.Helper()
	cfg, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(src), nil)
	if err != nil {
		t.Fatal(err)
	}
	startCaddy(t, cfg)
}

func loadErr(t *testing.T, cfg []byte) error {
	t.Helper()
	caddyMu.Lock()
	defer caddyMu.Unlock()
	err := caddy.Load(cfg, true)
	_ = caddy.Stop()
	return err
}

type fakeIDP struct {
	srv  *httptest.Server
	key  *ecdsa.PrivateKey
	kid  string
	mu   sync.Mutex
	keys []jose.JSONWebKey
}

func newFakeIDP(t testing.TB) *fakeIDP {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p := &fakeIDP{key: k, kid: "idp-1"}
	p.keys = []jose.JSONWebKey{{Key: k.Public(), KeyID: p.kid, Algorithm: "ES256", Use: "sig"}}
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(oauth.ProviderMetadata{Issuer: p.srv.URL, JWKSURI: p.srv.URL + "/jwks"})
	})
	mux.HandleFunc("/jwks", func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		defer p.mu.Unlock()
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: p.keys})
	})
	p.srv = httptest.NewServer(mux)
	t.Cleanup(p.srv.Close)
	return p
}

// rotate publishes a new signing key next to the old one and signs with it.
func (p *fakeIDP) rotate(t testing.TB) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.key, p.kid = k, fmt.Sprintf("idp-%d", len(p.keys)+1)
	p.keys = append(p.keys, jose.JSONWebKey{Key: k.Public(), KeyID: p.kid, Algorithm: "ES256", Use: "sig"})
}

func (p *fakeIDP) token(t testing.TB, mut func(map[string]any)) string {
	t.Helper()
	now := time.Now()
	c := map[string]any{"iss": p.srv.URL, "sub": "user-7", "aud": "placeholder", "exp": now.Add(10 * time.Minute).Unix(),
		"iat": now.Unix(), "scope": "mcp read", "azp": "cli-1", "tid": "acme"}
	if mut != nil {
		mut(c)
	}
	p.mu.Lock()
	key, kid := p.key, p.kid
	p.mu.Unlock()
	sg, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: key}, (&jose.SignerOptions{}).WithHeader("kid", kid))
	if err != nil {
		t.Fatal(err)
	}
	s, err := jwt.Signed(sg).Claims(c).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func get(t *testing.T, u, token string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// startTransparent runs a gateway in transparent mode in front of a fake
// identity provider, its protected resource at base+"/private" with the
// handler options given (standardRoutes).
func startTransparent(t *testing.T, handler map[string]any) (idp *fakeIDP, base, resource string) {
	t.Helper()
	idp = newFakeIDP(t)
	port := freePort(t)
	base = fmt.Sprintf("http://127.0.0.1:%d", port)
	resource = base + "/private"
	startCaddy(t, caddyConfig(port, map[string]any{
		"mode": "transparent", "development": true, "provider_url": idp.srv.URL, "expected_audience": resource,
	}, standardRoutes(handler)))
	return idp, base, resource
}

func TestCaddyTransparentMode(t *testing.T) {
	idp, base, resource := startTransparent(t, nil)
	aud := func(m map[string]any) { m["aud"] = resource }
	metadataURL := base + "/.well-known/oauth-protected-resource/private"

	if resp, body := get(t, base+"/hello", ""); resp.StatusCode != 200 || body != "public" {
		t.Fatalf("public route: %d %q", resp.StatusCode, body)
	}
	resp, body := get(t, base+"/private/x", idp.token(t, aud))
	if resp.StatusCode != 200 || body != "user=user-7 scopes=mcp read client=cli-1 tenant=acme" {
		t.Fatalf("valid token: %d %q", resp.StatusCode, body)
	}

	resp, _ = get(t, base+"/private/x", "")
	if resp.StatusCode != 401 || resp.Header.Get("WWW-Authenticate") != `Bearer resource_metadata="`+metadataURL+`"` {
		t.Fatalf("no token: %d %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
	for name, tok := range map[string]string{
		"wrong_audience": idp.token(t, nil),
		"expired":        idp.token(t, func(m map[string]any) { aud(m); m["exp"] = time.Now().Add(-time.Hour).Unix() }),
		"wrong_issuer":   idp.token(t, func(m map[string]any) { aud(m); m["iss"] = "https://elsewhere.example" }),
		"malformed":      "abc.def.ghi",
	} {
		resp, _ := get(t, base+"/private/x", tok)
		want := `Bearer resource_metadata="` + metadataURL + `", error="invalid_token", error_description="` + name + `"`
		if resp.StatusCode != 401 || resp.Header.Get("WWW-Authenticate") != want {
			t.Errorf("%s: %d %q", name, resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
		}
	}

	// RFC 9728 metadata, at the path the challenge names.
	resp, body = get(t, metadataURL, "")
	var md oauth.ResourceMetadata
	if err := json.Unmarshal([]byte(body), &md); err != nil || resp.StatusCode != 200 {
		t.Fatalf("metadata: %d %s", resp.StatusCode, body)
	}
	if md.Resource != resource || len(md.AuthorizationServers) != 1 || md.AuthorizationServers[0] != idp.srv.URL {
		t.Fatalf("metadata: %+v", md)
	}
	// The provider rotates its key: the first token with the new kid makes
	// the gateway refetch the key set; tokens of the old key keep working.
	oldTok := idp.token(t, aud)
	idp.rotate(t)
	if resp, body := get(t, base+"/private/x", idp.token(t, aud)); resp.StatusCode != 200 {
		t.Fatalf("token signed with the rotated key: %d %q", resp.StatusCode, body)
	}
	if resp, _ := get(t, base+"/private/x", oldTok); resp.StatusCode != 200 {
		t.Fatalf("token of the old key after rotation: %d", resp.StatusCode)
	}
	// Transparent mode has no authorization server endpoints of its own.
	if resp, body := get(t, base+"/oauth/token", ""); resp.StatusCode != 200 || body != "public" {
		t.Fatalf("/oauth/token in transparent mode: %d %q", resp.StatusCode, body)
	}
}

func TestCaddyProductionRuleHTTPS(t *testing.T) {
	idp := newFakeIDP(t)
	port := freePort(t)
	routes := standardRoutes(nil)
	// Development mode but listening on every interface: refused.
	cfg := map[string]any{}
	_ = json.Unmarshal(caddyConfig(port, map[string]any{
		"mode": "transparent", "development": true, "provider_url": idp.srv.URL, "expected_audience": "https://x.example/mcp",
	}, routes), &cfg)
	cfg["apps"].(map[string]any)["http"].(map[string]any)["servers"].(map[string]any)["test"].(map[string]any)["listen"] = []string{fmt.Sprintf(":%d", port)}
	b, _ := json.Marshal(cfg)
	if err := loadErr(t, b); err == nil || !strings.Contains(err.Error(), "production rule 1") {
		t.Fatalf("dev on all interfaces: %v", err)
	}
	// Not development: plain HTTP even on loopback is refused, and so is an
	// http provider URL.
	err := loadErr(t, caddyConfig(port, map[string]any{
		"mode": "transparent", "provider_url": "https://idp.example", "expected_audience": "https://x.example/mcp",
	}, routes))
	if err == nil || !strings.Contains(err.Error(), "production rule 1") {
		t.Fatalf("plain http outside development: %v", err)
	}
	err = loadErr(t, caddyConfig(port, map[string]any{
		"mode": "transparent", "provider_url": idp.srv.URL, "expected_audience": "https://x.example/mcp",
	}, routes))
	if err == nil || !strings.Contains(err.Error(), "https") {
		t.Fatalf("http provider outside development: %v", err)
	}
	// Unless a TLS-terminating proxy is declared in front.
	err = loadErr(t, caddyConfig(port, map[string]any{
		"mode": "transparent", "provider_url": "https://127.0.0.1:1", "expected_audience": "https://x.example/mcp",
		"behind_tls_proxy": true,
	}, routes))
	if err != nil {
		t.Fatalf("behind_tls_proxy: %v", err)
	}
	// Transparent mode without an audience: refused (rule 6).
	err = loadErr(t, caddyConfig(port, map[string]any{"mode": "transparent", "development": true, "provider_url": idp.srv.URL}, routes))
	if err == nil || !strings.Contains(err.Error(), "expected_audience") {
		t.Fatalf("no audience: %v", err)
	}
	// A provider without the app's auth block: refused.
	err = loadErr(t, caddyConfig(port, nil, routes))
	if err == nil || !strings.Contains(err.Error(), "no auth configuration") {
		t.Fatalf("no auth block: %v", err)
	}
}

var hiddenField = regexp.MustCompile(`name="(id|csrf)" value="([^"]*)"`)

// TestCaddyOrchestratedFlow drives the whole flow through Caddy with
// golang.org/x/oauth2: PKCE S256 with a resource indicator, the login and
// consent pages, code exchange, the protected route, refresh rotation,
// refresh reuse, revocation, and the token endpoint's rate limit.
func TestCaddyOrchestratedFlow(t *testing.T) {
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	resource := base + "/private"
	redirect := "http://127.0.0.1:1/callback" // never contacted: we stop at the redirect
	startCaddy(t, caddyConfig(port, map[string]any{
		"development":      true,
		"issuer":           base,
		"resource":         resource,
		"scopes":           []string{"mcp", "admin"},
		"refresh":          map[string]any{"enabled": true},
		"consent":          map[string]any{"enabled": true},
		"clients":          []any{map[string]any{"id": "cli", "redirect_uris": []string{redirect}}},
		"token_rate_limit": map[string]any{"max_requests": 14, "window": "1m", "partition_by": "ip"},
	}, standardRoutes(nil)))
	// The window does not slide between the flow's requests: exactly 4
	// token requests pass after the flow's 10.
	freezeGuardClock(t)
	// The auth counters are the process's (processTelemetry, kept across
	// configs): the checks at the end read what this flow added.
	app, err := caddy.ActiveContext().App("codemode")
	if err != nil {
		t.Fatal(err)
	}
	m := app.(*App).auth.metrics
	issued := func(grant string) uint64 {
		t.Helper()
		var dm dto.Metric
		if err := m.tokenLatency.WithLabelValues(grant, "2xx").(prometheus.Histogram).Write(&dm); err != nil {
			t.Fatal(err)
		}
		return dm.GetHistogram().GetSampleCount()
	}
	codesBefore, refreshesBefore := issued("authorization_code"), issued("refresh_token")
	limitedBefore := counterValue(t, m.rateLimited)

	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	expect := func(want int) func(*http.Response, error) (*url.URL, string) {
		return func(resp *http.Response, err error) (*url.URL, string) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != want {
				t.Fatalf("%s %s: status %d, want %d: %s", resp.Request.Method, resp.Request.URL, resp.StatusCode, want, b)
			}
			loc, _ := resp.Location()
			return loc, string(b)
		}
	}
	form := func(page string) url.Values {
		v := url.Values{}
		for _, m := range hiddenField.FindAllStringSubmatch(page, -1) {
			v.Set(m[1], m[2])
		}
		return v
	}

	// Discovery the MCP way: 401 -> resource metadata -> AS metadata.
	resp, _ := get(t, resource, "")
	if !strings.Contains(resp.Header.Get("WWW-Authenticate"), `resource_metadata="`+base+`/.well-known/oauth-protected-resource/private"`) {
		t.Fatalf("challenge: %q", resp.Header.Get("WWW-Authenticate"))
	}
	_, body := get(t, base+"/.well-known/oauth-protected-resource/private", "")
	var md oauth.ResourceMetadata
	_ = json.Unmarshal([]byte(body), &md)
	if md.Resource != resource || md.AuthorizationServers[0] != base {
		t.Fatalf("resource metadata: %s", body)
	}
	asMeta, err := oauth.Discover(context.Background(), http.DefaultClient, md.AuthorizationServers[0])
	if err != nil {
		t.Fatal(err)
	}

	conf := &oauth2.Config{ClientID: "cli", RedirectURL: redirect, Scopes: []string{"mcp"},
		Endpoint: oauth2.Endpoint{AuthURL: asMeta.AuthorizationEndpoint, TokenURL: asMeta.TokenEndpoint, AuthStyle: oauth2.AuthStyleInParams}}
	ctx := context.Background()
	// signIn runs the browser part (demo login, consent) and the code
	// exchange; resource is the RFC 8707 indicator ("" for none).
	signIn := func(resource string) *oauth2.Token {
		t.Helper()
		verifier := oauth2.GenerateVerifier()
		opts := []oauth2.AuthCodeOption{oauth2.S256ChallengeOption(verifier)}
		if resource != "" {
			opts = append(opts, oauth2.SetAuthURLParam("resource", resource))
		}
		authURL := conf.AuthCodeURL("state-1", opts...)
		loginURL, _ := expect(http.StatusFound)(browser.Get(authURL))
		_, page := expect(200)(browser.Get(base + loginURL.RequestURI()))
		next, _ := expect(http.StatusSeeOther)(browser.PostForm(base+"/oauth/login", withDemo(form(page))))
		_, page = expect(200)(browser.Get(base + next.RequestURI()))
		if !strings.Contains(page, "<li>mcp</li>") {
			t.Fatalf("consent page: %s", page)
		}
		v := form(page)
		v.Set("decision", "approve")
		next, _ = expect(http.StatusSeeOther)(browser.PostForm(base+"/oauth/consent", v))
		back, _ := expect(http.StatusFound)(browser.Get(base + next.RequestURI()))
		if back.Query().Get("state") != "state-1" || back.Query().Get("code") == "" {
			t.Fatalf("callback: %s", back)
		}
		tok, err := conf.Exchange(ctx, back.Query().Get("code"), oauth2.VerifierOption(verifier))
		if err != nil {
			t.Fatalf("exchange: %v", err)
		}
		return tok
	}

	// RFC 8707: a token obtained without the resource indicator has the
	// issuer as audience and is refused by the resource.
	other := signIn("")
	resp, _ = get(t, resource, other.AccessToken)
	if resp.StatusCode != 401 || !strings.Contains(resp.Header.Get("WWW-Authenticate"), `error_description="wrong_audience"`) {
		t.Fatalf("token without resource: %d %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}

	tok := signIn(resource)
	resp, body = get(t, resource+"/data", tok.AccessToken)
	if resp.StatusCode != 200 || !strings.HasPrefix(body, "user="+oauth.DemoUser+" scopes=mcp client=cli") {
		t.Fatalf("protected route: %d %q", resp.StatusCode, body)
	}
	if resp, _ := get(t, resource, tok.AccessToken+"x"); resp.StatusCode != 401 {
		t.Fatalf("tampered token: %d", resp.StatusCode)
	}

	// Refresh rotates; reusing the old refresh token revokes the chain.
	fresh, err := conf.TokenSource(ctx, &oauth2.Token{RefreshToken: tok.RefreshToken}).Token()
	if err != nil {
		t.Fatalf("refresh: %v", err)
	}
	if fresh.RefreshToken == tok.RefreshToken || fresh.AccessToken == tok.AccessToken {
		t.Fatal("refresh did not rotate")
	}
	if resp, _ := get(t, resource, fresh.AccessToken); resp.StatusCode != 200 {
		t.Fatalf("refreshed token: %d", resp.StatusCode)
	}
	if _, err := conf.TokenSource(ctx, &oauth2.Token{RefreshToken: tok.RefreshToken}).Token(); err == nil {
		t.Fatal("reused refresh token accepted")
	}
	resp, _ = get(t, resource, fresh.AccessToken)
	if resp.StatusCode != 401 || !strings.Contains(resp.Header.Get("WWW-Authenticate"), `error_description="revoked"`) {
		t.Fatalf("after reuse: %d %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}

	// Rate limit of the token endpoint: 14 per minute per IP in this config;
	// 10 went to authorize, login, consent and token so far (the clock is
	// frozen), so exactly 4 more pass and the fifth is refused.
	var last *http.Response
	var lastBody []byte
	passed := 0
	for range 10 {
		r, err := http.PostForm(base+"/oauth/token", url.Values{"grant_type": {"refresh_token"}, "refresh_token": {"nope"}, "client_id": {"cli"}})
		if err != nil {
			t.Fatal(err)
		}
		lastBody, _ = io.ReadAll(r.Body)
		r.Body.Close()
		last = r
		if r.StatusCode == http.StatusTooManyRequests {
			break
		}
		passed++
	}
	if passed != 4 || last.StatusCode != http.StatusTooManyRequests || last.Header.Get("Retry-After") == "" ||
		!strings.Contains(string(lastBody), `"error":"temporarily_unavailable"`) {
		t.Fatalf("rate limit after %d: %d Retry-After=%q %s", passed, last.StatusCode, last.Header.Get("Retry-After"), lastBody)
	}

	// Token issuance latency was observed per grant type, once per token
	// issued: two codes exchanged, one refresh (the reused one and the
	// "nope"s answered 4xx).
	if got := issued("authorization_code") - codesBefore; got != 2 {
		t.Errorf("authorization_code issuances observed: %d, want 2", got)
	}
	if got := issued("refresh_token") - refreshesBefore; got != 1 {
		t.Errorf("refresh_token issuances observed: %d, want 1", got)
	}
	if got := counterValue(t, m.rateLimited) - limitedBefore; got != 1 {
		t.Errorf("rate-limited requests counted: %v, want 1", got)
	}
}

func withDemo(v url.Values) url.Values {
	v.Set("demo", "1")
	return v
}

// TestCaddyfileAuthRuns adapts a Caddyfile using the directives and runs it.
func TestCaddyfileAuthRuns(t *testing.T) {
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	src := fmt.Sprintf(`{
	admin off
	persist_config off
	codemode {
		auth {
			development
			issuer %[1]s
			resource %[1]s/mcp
			client cli {
				redirect_uri http://127.0.0.1:1/cb
			}
		}
	}
}

%[1]s {
	bind 127.0.0.1
	codemode_oauth
	codemode_auth /mcp* {
		scopes mcp
	}
	respond /mcp* "in as {http.auth.user.id}"
	respond "public"
}
`, base)
	startCaddyfile(t, src)
	resp, _ := get(t, base+"/mcp", "")
	if resp.StatusCode != 401 || resp.Header.Get("WWW-Authenticate") != `Bearer resource_metadata="`+base+`/.well-known/oauth-protected-resource/mcp", scope="mcp"` {
		t.Fatalf("/mcp: %d %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
	if resp, body := get(t, base+"/", ""); resp.StatusCode != 200 || body != "public" {
		t.Fatalf("/: %d %q", resp.StatusCode, body)
	}
	resp, body := get(t, base+"/.well-known/oauth-protected-resource/mcp", "")
	if resp.StatusCode != 200 || !strings.Contains(body, `"resource":"`+base+`/mcp"`) {
		t.Fatalf("metadata: %d %s", resp.StatusCode, body)
	}
	if resp, _ := get(t, base+"/.well-known/openid-configuration", ""); resp.StatusCode != 200 {
		t.Fatalf("openid-configuration: %d", resp.StatusCode)
	}
}

// TestCaddyScopeStepUp: the codemode_auth directive answers a valid token
// that lacks a route's scope with 403 and an RFC 6750 insufficient_scope
// challenge naming the scopes to ask for (the token's and the route's), so
// an MCP client can step up; a 401 names the route's scopes; a token with
// both scopes passes.
func TestCaddyScopeStepUp(t *testing.T) {
	idp := newFakeIDP(t)
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	src := fmt.Sprintf(`{
	admin off
	persist_config off
	codemode {
		auth {
			mode transparent
			development
			provider_url %[2]s
			expected_audience %[1]s
		}
	}
}

%[1]s {
	bind 127.0.0.1
	codemode_oauth
	codemode_auth /admin* {
		scopes mcp admin
	}
	codemode_auth /mcp* {
		scopes mcp
	}
	respond /admin* "admin for {http.auth.user.id} ({http.auth.user.scopes})"
	respond /mcp* "mcp for {http.auth.user.id}"
}
`, base, idp.srv.URL)
	startCaddyfile(t, src)
	md := `resource_metadata="` + base + `/.well-known/oauth-protected-resource"`
	withScope := func(scope string) string {
		return idp.token(t, func(m map[string]any) { m["aud"] = base; m["scope"] = scope })
	}
	one, two := withScope("mcp offline_access"), withScope("mcp admin")

	// Every refusal says why in the body too, with a stable code, for a
	// client without OAuth support or a person with curl.
	refusal := func(what, body, code string) {
		t.Helper()
		var e struct {
			Error struct{ Code, Message string }
		}
		if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Code != code || e.Error.Message == "" {
			t.Errorf("%s: body %q, want the code %s", what, body, code)
		}
	}
	resp, body := get(t, base+"/admin/x", "")
	if resp.StatusCode != 401 || resp.Header.Get("WWW-Authenticate") != `Bearer `+md+`, scope="mcp admin"` {
		t.Fatalf("no token: %d %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("no token: Content-Type %q", ct)
	}
	refusal("no token", body, "UNAUTHORIZED")
	if resp, body := get(t, base+"/mcp", one); resp.StatusCode != 200 || body != "mcp for user-7" {
		t.Fatalf("one scope at /mcp: %d %q", resp.StatusCode, body)
	}
	resp, body = get(t, base+"/admin/x", one)
	want := `Bearer ` + md + `, error="insufficient_scope", scope="mcp admin", error_description="the token lacks scope admin"`
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get("WWW-Authenticate") != want {
		t.Fatalf("one scope at /admin: %d %q %q, want 403 %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"), body, want)
	}
	refusal("one scope at /admin", body, "INSUFFICIENT_SCOPE")
	if resp, body := get(t, base+"/admin/x", two); resp.StatusCode != 200 || body != "admin for user-7 (mcp admin)" {
		t.Fatalf("two scopes at /admin: %d %q", resp.StatusCode, body)
	}
	resp, body = get(t, base+"/admin/x", "garbage")
	if resp.StatusCode != 401 || !strings.Contains(resp.Header.Get("WWW-Authenticate"), `error="invalid_token"`) {
		t.Fatalf("bad token: %d %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
	refusal("bad token", body, "UNAUTHORIZED")
}

// TestCaddyAuthRefusalErrorRoutes: with handle_errors routes, codemode_auth
// leaves the refusal's body to them (as the guard does), with its status,
// its challenge and its code in {http.vars.codemode_auth_code}.
func TestCaddyAuthRefusalErrorRoutes(t *testing.T) {
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	startCaddyfile(t, fmt.Sprintf(`{
	admin off
	persist_config off
	codemode {
		auth {
			development
			issuer %[1]s
		}
	}
}

%[1]s {
	bind 127.0.0.1
	codemode_oauth
	codemode_auth /mcp*
	respond "through"
	handle_errors {
		respond "refused: {http.error.status_code} {http.vars.codemode_auth_code}"
	}
}
`, base))
	resp, body := get(t, base+"/mcp", "")
	if resp.StatusCode != 401 || body != "refused: 401 UNAUTHORIZED" || !strings.Contains(resp.Header.Get("WWW-Authenticate"), "resource_metadata=") {
		t.Fatalf("no token: %d %q %q", resp.StatusCode, body, resp.Header.Get("WWW-Authenticate"))
	}
}

// TestCaddyAuthHandlerPlaceholders: the resource of codemode_auth and
// codemode_oauth takes placeholders like the auth block's strings, e.g.
// {env.PUBLIC_URL}/api from the environment; it used to fail the load as
// "not an absolute URL".
func TestCaddyAuthHandlerPlaceholders(t *testing.T) {
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	t.Setenv("CODEMODE_TEST_PUBLIC_URL", base)
	src := fmt.Sprintf(`{
	admin off
	persist_config off
	codemode {
		auth {
			development
			issuer %[1]s
		}
	}
}

%[1]s {
	bind 127.0.0.1
	codemode_oauth {
		resource {env.CODEMODE_TEST_PUBLIC_URL}/api
	}
	codemode_auth /api* {
		resource {env.CODEMODE_TEST_PUBLIC_URL}/api
	}
	respond "public"
}
`, base)
	startCaddyfile(t, src)
	md := base + "/.well-known/oauth-protected-resource/api"
	if resp, _ := get(t, base+"/api/x", ""); resp.StatusCode != 401 || !strings.Contains(resp.Header.Get("WWW-Authenticate"), `resource_metadata="`+md+`"`) {
		t.Fatalf("/api/x: %d %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
	if resp, body := get(t, md, ""); resp.StatusCode != 200 || !strings.Contains(body, `"resource":"`+base+`/api"`) {
		t.Fatalf("metadata: %d %s", resp.StatusCode, body)
	}
}

// TestCaddyAuthPreflight: codemode_auth answers a browser's CORS preflight
// itself and never hands an unauthenticated request to the next handler:
// not a preflight (answered 204 without the route's content), not an
// OPTIONS that only looks like one (no Origin, or no
// Access-Control-Request-Method: 401), not a page's POST without a token
// (401, its challenge readable, no credentials allowed).
func TestCaddyAuthPreflight(t *testing.T) {
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	startCaddyfile(t, fmt.Sprintf(`{
	admin off
	persist_config off
	codemode {
		auth {
			development
			issuer %[1]s
		}
	}
}

%[1]s {
	bind 127.0.0.1
	codemode_auth /api*
	respond "secret"
}
`, base))
	const page = "http://page.example"
	do := func(method string, hdr map[string]string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(method, base+"/api/x", nil)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	for _, tc := range []struct {
		name   string
		method string
		hdr    map[string]string
		status int
	}{
		{"preflight", http.MethodOptions, map[string]string{"Origin": page, "Access-Control-Request-Method": "POST",
			"Access-Control-Request-Headers": "authorization,content-type"}, http.StatusNoContent},
		{"OPTIONS without Origin", http.MethodOptions, map[string]string{"Access-Control-Request-Method": "POST"}, http.StatusUnauthorized},
		{"OPTIONS without a requested method", http.MethodOptions, map[string]string{"Origin": page}, http.StatusUnauthorized},
		{"POST of a page without a token", http.MethodPost, map[string]string{"Origin": page}, http.StatusUnauthorized},
	} {
		resp, body := do(tc.method, tc.hdr)
		if resp.StatusCode != tc.status || strings.Contains(body, "secret") || resp.Header.Get("Access-Control-Allow-Credentials") != "" {
			t.Errorf("%s: %d %v %q, want %d without the route's content or credentials", tc.name, resp.StatusCode, resp.Header, body, tc.status)
		}
		if tc.status == http.StatusUnauthorized && tc.hdr["Origin"] != "" &&
			(resp.Header.Get("WWW-Authenticate") == "" || !strings.Contains(resp.Header.Get("Access-Control-Expose-Headers"), "WWW-Authenticate")) {
			t.Errorf("%s: the challenge is not readable by the page: %v", tc.name, resp.Header)
		}
	}
}

// TestCaddyAuthPreflightPublic: with allow_default_public a route serves
// anonymous requests, and a preflight is one. codemode_auth does not answer
// it: the next handler does (here it allows nothing), so a page of another
// site gets no permission from codemode_auth to send a JSON or DELETE
// request to a public route.
func TestCaddyAuthPreflightPublic(t *testing.T) {
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	startCaddyfile(t, fmt.Sprintf(`{
	admin off
	persist_config off
	codemode {
		auth {
			development
			issuer %[1]s
			allow_default_public
		}
	}
}

%[1]s {
	bind 127.0.0.1
	codemode_auth /api*
	respond "next {method}"
}
`, base))
	req, _ := http.NewRequest(http.MethodOptions, base+"/api/x", nil)
	req.Header.Set("Origin", "http://page.example")
	req.Header.Set("Access-Control-Request-Method", "DELETE")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || string(b) != "next OPTIONS" ||
		resp.Header.Get("Access-Control-Allow-Origin") != "" || resp.Header.Get("Access-Control-Allow-Methods") != "" {
		t.Errorf("preflight on a public route: %d %v %q, want the next handler's answer and no CORS permission", resp.StatusCode, resp.Header, b)
	}
}

// TestCaddyServedResources: the authorization server issues tokens only for
// the resources its configuration serves (RFC 8707). Without `resources` in
// the auth block they are the issuer, auth's resource and what codemode_oauth
// and codemode_auth name, on any origin; a refused resource is
// invalid_target, by redirect with state and iss at the authorization
// endpoint and as a 400 at the token endpoint. With `resources` they are
// exactly the list (and the issuer): a route naming another fails the load
// and leaves the running config as it was, and a reload that changes only
// the resources keeps the server.
func TestCaddyServedResources(t *testing.T) {
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	elsewhere := fmt.Sprintf("http://mcp.localhost:%d/x", port) // another origin, named by a route
	const redirect = "http://127.0.0.1:1/cb"
	adapt := func(resources, routes string) []byte {
		t.Helper()
		src := fmt.Sprintf(`{
	admin off
	persist_config off
	codemode {
		auth {
			development
			issuer %[1]s
			resource %[1]s/mcp
			%[2]s
			client cli {
				redirect_uri %[3]s
			}
		}
	}
}

%[1]s {
	bind 127.0.0.1
	codemode_oauth {
		resource %[1]s/mcp %[1]s/api
	}
	codemode_auth /mcp*
	codemode_auth /api* {
		resource %[1]s/api
	}
	%[4]s
	respond /api* "api for {http.auth.user.id}"
	respond "public"
}
`, base, resources, redirect, routes)
		cfg, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(src), nil)
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	other := fmt.Sprintf("codemode_auth /x* {\n\t\tresource %s\n\t}", elsewhere)
	startCaddy(t, adapt("", other))

	jar, _ := cookiejar.New(nil) // the sign-in cookie
	// The test reloads Caddy and goes on asking: reloadClient's transport.
	browser := &http.Client{Jar: jar, Transport: reloadClient.Transport,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	verifier := oauth2.GenerateVerifier()
	conf := &oauth2.Config{ClientID: "cli", RedirectURL: redirect, Scopes: []string{"mcp"},
		Endpoint: oauth2.Endpoint{AuthURL: base + "/oauth/authorize", TokenURL: base + "/oauth/token", AuthStyle: oauth2.AuthStyleInParams}}
	authorize := func(resource string) *url.URL {
		t.Helper()
		resp, err := browser.Get(conf.AuthCodeURL("st-9", oauth2.S256ChallengeOption(verifier), oauth2.SetAuthURLParam("resource", resource)))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		loc, err := resp.Location()
		if resp.StatusCode != http.StatusFound || err != nil {
			t.Fatalf("authorize for %s: %d %v", resource, resp.StatusCode, err)
		}
		return loc
	}
	accepted := func(resources ...string) {
		t.Helper()
		for _, r := range resources {
			if loc := authorize(r); loc.Path != "/oauth/login" {
				t.Errorf("resource %s refused: %s", r, loc)
			}
		}
	}
	refused := func(resources ...string) {
		t.Helper()
		for _, r := range resources {
			loc := authorize(r)
			q := loc.Query()
			if !strings.HasPrefix(loc.String(), redirect+"?") || q.Get("error") != "invalid_target" || q.Get("state") != "st-9" || q.Get("iss") != base {
				t.Errorf("resource %s: %s, want invalid_target with state and iss", r, loc)
			}
		}
	}
	// code signs in (demo login, no consent for a configured client) for
	// resource and returns the authorization code.
	code := func(resource string) string {
		t.Helper()
		login := authorize(resource)
		_, page := get(t, base+login.RequestURI(), "")
		v := url.Values{}
		for _, m := range hiddenField.FindAllStringSubmatch(page, -1) {
			v.Set(m[1], m[2])
		}
		resp, err := browser.PostForm(base+"/oauth/login", withDemo(v))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		next, _ := resp.Location()
		if resp.StatusCode != http.StatusSeeOther || next == nil {
			t.Fatalf("login: %d", resp.StatusCode)
		}
		if resp, err = browser.Get(base + next.RequestURI()); err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		back, _ := resp.Location()
		if back == nil || back.Query().Get("code") == "" {
			t.Fatalf("callback: %d %v", resp.StatusCode, back)
		}
		return back.Query().Get("code")
	}

	accepted(base, base+"/", base+"/mcp", base+"/api/", strings.Replace(elsewhere, "mcp.localhost", "MCP.localhost", 1)+"/")
	refused("https://elsewhere.example.test/mcp", base+"/admin", base+"/mcp/x")
	_, err := conf.Exchange(context.Background(), code(base+"/mcp"), oauth2.VerifierOption(verifier),
		oauth2.SetAuthURLParam("resource", "https://elsewhere.example.test/mcp"))
	if !isRetrieveError(err, "invalid_target") {
		t.Fatalf("token request for a resource not served: %v", err)
	}
	tok, err := conf.Exchange(context.Background(), code(base+"/api"), oauth2.VerifierOption(verifier),
		oauth2.SetAuthURLParam("resource", base+"/api/"))
	if err != nil {
		t.Fatalf("exchange for %s/api: %v", base, err)
	}
	if resp, body := get(t, base+"/api/x", tok.AccessToken); resp.StatusCode != 200 || body != "api for "+oauth.DemoUser {
		t.Fatalf("/api with its token: %d %q", resp.StatusCode, body)
	}

	// resources lists what tokens are issued for; a route naming another
	// is a load error, and the running config stays.
	app := func() *App {
		a, err := caddy.ActiveContext().App("codemode")
		if err != nil {
			t.Fatal(err)
		}
		return a.(*App)
	}
	before := app().AuthServer()
	explicit := fmt.Sprintf("resources %[1]s/mcp %[1]s/api https://backend.example.test/", base)
	err = caddy.Load(adapt(explicit, other), true)
	if err == nil || !strings.Contains(err.Error(), "not among the auth resources") || !strings.Contains(err.Error(), "mcp.localhost") {
		t.Fatalf("a route outside resources: %v", err)
	}
	accepted(elsewhere)
	if err := caddy.Load(adapt(explicit, ""), true); err != nil {
		t.Fatal(err)
	}
	untilReloaded(t, func() bool { return authorize("https://backend.example.test").Path == "/oauth/login" })
	accepted(base, base+"/mcp", base+"/api", "https://backend.example.test")
	refused(elsewhere, base+"/admin")
	if app().AuthServer() != before {
		t.Error("a reload that changed only the resources built a new authorization server")
	}
}

func isRetrieveError(err error, code string) bool {
	var re *oauth2.RetrieveError
	return errors.As(err, &re) && re.ErrorCode == code
}

// TestCaddyAuthScopeNotOffered: in orchestrated mode a codemode_auth route
// that requires a scope the authorization server does not offer fails the
// load, naming the scope and the ones offered. Before, the load went
// through and every request got 403 insufficient_scope, every sign-in for
// the scope invalid_scope. In transparent mode the provider decides
// (TestCaddyScopeStepUp).
func TestCaddyAuthScopeNotOffered(t *testing.T) {
	port := freePort(t)
	cfg := func(authScopes, routeScopes string) []byte {
		src := fmt.Sprintf(`{
	admin off
	persist_config off
	codemode {
		auth {
			development
			issuer http://127.0.0.1:%d
			%s
			refresh {
				enabled
			}
		}
	}
}
http://127.0.0.1:%[1]d {
	bind 127.0.0.1
	codemode_oauth
	codemode_auth /admin* {
		scopes %[3]s
	}
	respond "ok"
}
`, port, authScopes, routeScopes)
		out, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(src), nil)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	err := loadErr(t, cfg("", "mcp admin"))
	want := `codemode_bearer: scope "admin" is not offered by the authorization server (auth scopes: mcp), so no token can hold it: add it to the auth block's scopes`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %v, want %q", err, want)
	}
	for _, tc := range []struct{ auth, route string }{
		{"", "mcp"},
		{"scopes mcp admin", "mcp admin"},
		{"", "offline_access"}, // offered: refresh is on
	} {
		if err := loadErr(t, cfg(tc.auth, tc.route)); err != nil {
			t.Errorf("auth %q, route %q: %v", tc.auth, tc.route, err)
		}
	}
}

// TestCaddyfilePendingAuthorizationsCap: max_pending_authorizations in the
// auth block bounds the authorization requests that wait for their user;
// past it /oauth/authorize answers 503 temporarily_unavailable, not a
// redirect.
func TestCaddyfilePendingAuthorizationsCap(t *testing.T) {
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	startCaddyfile(t, fmt.Sprintf(`{
	admin off
	persist_config off
	codemode {
		auth {
			development
			issuer %[1]s
			max_pending_authorizations 1
			client cli {
				redirect_uri http://127.0.0.1:1/cb
			}
		}
	}
}

%[1]s {
	bind 127.0.0.1
	codemode_oauth
}
`, base))
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	authorize := base + "/oauth/authorize?" + url.Values{
		"response_type": {"code"}, "client_id": {"cli"}, "redirect_uri": {"http://127.0.0.1:1/cb"}, "state": {"s"},
		"code_challenge": {strings.Repeat("a", 43)}, "code_challenge_method": {"S256"},
	}.Encode()
	for i, want := range []int{http.StatusFound, http.StatusServiceUnavailable} {
		resp, err := c.Get(authorize)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want || (want == http.StatusServiceUnavailable && !strings.Contains(string(b), `"error":"temporarily_unavailable"`)) {
			t.Fatalf("authorization request %d: %d %s %.100s, want %d", i+1, resp.StatusCode, resp.Header.Get("Location"), b, want)
		}
	}
}

// TestCaddyAuthIssuerMismatchCode: in transparent mode, a provider whose
// only discovery document names another issuer is not trusted (RFC 8414
// section 3.3). A caller of codemode_auth gets 401 with the plain challenge
// (not the token's fault) and the body's code ISSUER_MISMATCH, a stable
// code of its own; it used to be UNAUTHORIZED "could not be verified now",
// the code of a passing outage. A token the provider refuses keeps its
// reason in the challenge (wrong_audience here) and UNAUTHORIZED in the body.
func TestCaddyAuthIssuerMismatchCode(t *testing.T) {
	idp := newFakeIDP(t)
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/.well-known/openid-configuration" {
			http.NotFound(w, r)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]string{"issuer": idp.srv.URL, "jwks_uri": idp.srv.URL + "/jwks"})
	}))
	defer other.Close()
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	for _, tc := range []struct{ provider, code, challenge string }{
		{other.URL, oauth.CodeIssuerMismatch, `Bearer resource_metadata="` + base + `/.well-known/oauth-protected-resource/mcp"`},
		{idp.srv.URL, "UNAUTHORIZED", `Bearer resource_metadata="` + base + `/.well-known/oauth-protected-resource/mcp", error="invalid_token", error_description="wrong_audience"`},
	} {
		t.Run(tc.code, func(t *testing.T) {
			startCaddyfile(t, fmt.Sprintf(`{
	admin off
	persist_config off
	codemode {
		auth {
			development
			mode transparent
			provider_url %[1]s
			expected_audience %[2]s/mcp
		}
	}
}

%[2]s {
	bind 127.0.0.1
	codemode_auth /mcp*
	respond "through"
}
`, tc.provider, base))
			// The counters live for the whole process (observability.go):
			// this request's share is what they gained during it.
			app, err := caddy.ActiveContext().App("codemode")
			if err != nil {
				t.Fatal(err)
			}
			m := app.(*App).auth.metrics
			mismatches := counterValue(t, m.failures.WithLabelValues("issuer_mismatch"))
			outages := counterValue(t, m.failures.WithLabelValues("unavailable"))
			resp, body := get(t, base+"/mcp", idp.token(t, nil))
			var e struct {
				Error struct{ Code string } `json:"error"`
			}
			_ = json.Unmarshal([]byte(body), &e)
			if resp.StatusCode != 401 || e.Error.Code != tc.code || resp.Header.Get("WWW-Authenticate") != tc.challenge {
				t.Errorf("provider %s: %d %q %s, want %s and %s", tc.provider, resp.StatusCode, resp.Header.Get("WWW-Authenticate"), body, tc.code, tc.challenge)
			}
			// The refusal is counted under a reason of its own, not as an outage.
			if tc.code == oauth.CodeIssuerMismatch {
				if got := counterValue(t, m.failures.WithLabelValues("issuer_mismatch")) - mismatches; got != 1 {
					t.Errorf("issuer_mismatch grew by %v, want 1", got)
				}
				if got := counterValue(t, m.failures.WithLabelValues("unavailable")) - outages; got != 0 {
					t.Errorf("unavailable grew by %v, want 0", got)
				}
			}
		})
	}
}
