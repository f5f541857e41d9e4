package credential

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/codemode-gateway/caddy-codemode/credential/credentialtest"
)

// hostileAS is the authorization server of another configured service
// that mounts a mix-up (RFC 9700 section 4.4): handed a user's
// authorization request with the gateway's state, it sends the browser on
// to the honest fake with the gateway's client id there and the redirect
// URI registered there, asking for an answer without iss (a server such
// as GitHub's, which sends none). It counts what its token endpoint gets:
// the honest server's code, if the gateway were fooled.
type hostileAS struct {
	*httptest.Server
	tokenRequests atomic.Int32
}

func newHostileAS(t *testing.T, honest *credentialtest.Fake, honestRedirect func() string) *hostileAS {
	t.Helper()
	a := &hostileAS{}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/oauth-authorization-server", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"issuer":"` + a.URL + `","authorization_endpoint":"` + a.URL + `/authorize","token_endpoint":"` + a.URL + `/token"}`))
	})
	mux.HandleFunc("GET /authorize", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		v := url.Values{"response_type": {"code"}, "client_id": {honest.ClientID}, "redirect_uri": {honestRedirect()},
			"state": {q.Get("state")}, "code_challenge": {q.Get("code_challenge")}, "code_challenge_method": {"S256"}, "no_iss": {"1"}}
		http.Redirect(w, r, honest.URL+"/authorize?"+v.Encode(), http.StatusFound)
	})
	mux.HandleFunc("POST /token", func(w http.ResponseWriter, _ *http.Request) {
		a.tokenRequests.Add(1)
		http.Error(w, `{"error":"invalid_grant"}`, http.StatusBadRequest)
	})
	a.Server = httptest.NewServer(mux)
	t.Cleanup(a.Close)
	return a
}

// TestMixUpRefused: the state the gateway gave service evil's server comes
// back, by way of the honest forge server, at forge's redirect URI. Each
// service has its own redirect URI, so the answer is refused
// (REDIRECT_URI_MISMATCH) and forge's code never reaches evil's token
// endpoint. With the shared redirect URI of before (both services opted in
// with callback shared), the answer has no iss and is refused too
// (ISSUER_MISMATCH); before the sixteenth pass it was taken and forge's
// code went to evil.
func TestMixUpRefused(t *testing.T) {
	for _, shared := range []bool{false, true} {
		name := map[bool]string{false: "own redirect URIs", true: "shared redirect URI"}[shared]
		t.Run(name, func(t *testing.T) {
			fake := credentialtest.New()
			t.Cleanup(fake.Close)
			var h *harness
			evil := newHostileAS(t, fake, func() string { return h.m.RedirectURI("forge") })
			specs := []Spec{
				{Service: "forge", Title: "Fake Forge", Mode: ModeUser, Kind: KindOAuth,
					OAuth: &OAuthClient{AuthorizationServer: fake.URL, ClientID: fake.ClientID, ClientSecret: fake.ClientSecret, SharedCallback: shared}},
				{Service: "evil", Title: "Evil", Mode: ModeUser, Kind: KindOAuth,
					OAuth: &OAuthClient{AuthorizationServer: evil.URL, ClientID: "gateway-at-evil", SharedCallback: shared}},
			}
			h = newHarnessWith(t, nil, nil, fake, specs, nil)
			wantURI := h.gw.URL + "/connections/callback/forge"
			if shared {
				wantURI = h.gw.URL + "/connections/callback"
			}
			if got := h.m.RedirectURI("forge"); got != wantURI {
				t.Fatalf("forge's redirect URI %q, want %q", got, wantURI)
			}
			// Alice has approved the gateway at forge before: forge answers at once.
			alice := h.browser(t, "alice", "alice-at-forge")
			status, final, body := post(t, alice, h.gw.URL+"/connections/evil/connect", url.Values{"csrf": {h.csrf(t, alice)}}, nil)
			if !strings.HasPrefix(final, wantURI+"?") {
				t.Fatalf("the attack did not come back where expected: %s", final)
			}
			want := CodeRedirectURIMismatch
			if shared {
				want = CodeIssuerMismatch
			}
			if status != http.StatusForbidden || !refusedWith(body, want) {
				t.Fatalf("mix-up answer: %d %s\n%s", status, final, body)
			}
			if n := evil.tokenRequests.Load(); n != 0 {
				t.Fatalf("forge's code went to evil's token endpoint (%d requests)", n)
			}
			conns, err := h.m.Connections(as("alice"), Owner{Issuer: testIssuer, Subject: "alice"})
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range conns {
				if c.Connected {
					t.Errorf("%s connected by the attack", c.Service)
				}
			}
			// The honest flow still works on the same redirect URI.
			h.connect(t, alice)
		})
	}
}

// TestCallbackIsPerService: an answer is taken only at the redirect URI
// its connection started with; the shared URI is taken for a service that
// opted in, and only with the server's iss.
func TestCallbackIsPerService(t *testing.T) {
	h := newHarness(t, nil, nil, nil)
	alice := h.browser(t, "alice", "alice-at-forge")
	csrf := h.csrf(t, alice)
	na := noRedirect(alice)
	answer := func() *url.URL {
		authz := location(t, na, http.MethodPost, h.gw.URL+"/connections/forge/connect", url.Values{"csrf": {csrf}})
		u, _ := url.Parse(location(t, na, http.MethodGet, authz, nil))
		return u
	}
	cases := []struct {
		name, path string
		status     int
		code       string
	}{
		{"shared URI", "/connections/callback", http.StatusForbidden, CodeRedirectURIMismatch},
		{"another service's URI", "/connections/callback/keyed", http.StatusForbidden, CodeRedirectURIMismatch},
		{"an unknown service's URI", "/connections/callback/nobody", http.StatusForbidden, CodeRedirectURIMismatch},
	}
	for _, c := range cases {
		u := answer()
		if u.Path != "/connections/callback/forge" {
			t.Fatalf("answer at %s", u.Path)
		}
		u.Path = c.path
		status, _, body := open(t, alice, u.String())
		if status != c.status || !refusedWith(body, c.code) {
			t.Errorf("%s: %d\n%s", c.name, status, body)
		}
		// The state is used up: the right URI now refuses it too.
		u.Path = "/connections/callback/forge"
		if status, _, body := open(t, alice, u.String()); status != http.StatusBadRequest || !refusedWith(body, CodeStateInvalid) {
			t.Errorf("%s, then at forge's URI: %d", c.name, status)
		}
	}
	if n := h.fake.TokenRequests(); n != 0 {
		t.Errorf("a refused answer's code was redeemed: %d token requests", n)
	}
	h.connect(t, alice)

	// Opted in to the shared URI: taken with the server's iss, not without.
	shared := forgeSpecs(h.fake)
	shared[0].OAuth.SharedCallback = true
	h2 := newHarnessWith(t, nil, nil, h.fake, shared, nil)
	bob := h2.browser(t, "bob", "bob-at-forge")
	csrf = h2.csrf(t, bob)
	nb := noRedirect(bob)
	authz := location(t, nb, http.MethodPost, h2.gw.URL+"/connections/forge/connect", url.Values{"csrf": {csrf}})
	if q, _ := url.Parse(authz); q.Query().Get("redirect_uri") != h2.gw.URL+"/connections/callback" {
		t.Fatalf("shared: authorization request %s", authz)
	}
	u, _ := url.Parse(location(t, nb, http.MethodGet, authz+"&no_iss=1", nil))
	if status, _, body := open(t, bob, u.String()); status != http.StatusForbidden || !refusedWith(body, CodeIssuerMismatch) {
		t.Errorf("shared URI without iss: %d\n%s", status, body)
	}
	h2.connect(t, bob)
}

// TestIssuerTrailingSlash: the decision of docs/credentials.md: the
// metadata's issuer is compared with the configured authorization server
// without a trailing slash (RFC 8414 section 3.3), whichever side has it
// (https://as.example and https://as.example/ name the same resource), and
// so is an answer's iss (RFC 9207) with a configured issuer no metadata was
// read for; an answer's iss is compared exactly with the issuer of the
// metadata (TestConnectAnswerIssComparedExactly). Any other difference is
// another server.
func TestIssuerTrailingSlash(t *testing.T) {
	cases := []struct {
		name                string
		configured, meta    func(base string) string
		endpointsConfigured bool
		connects            bool
	}{
		{"configured with a slash", func(b string) string { return b + "/" }, func(b string) string { return b }, false, true},
		{"advertised with a slash", func(b string) string { return b }, func(b string) string { return b + "/" }, false, true},
		{"endpoints configured, iss without the configured slash", func(b string) string { return b + "/" }, func(b string) string { return b }, true, true},
		{"another path", func(b string) string { return b }, func(b string) string { return b + "/tenant" }, false, false},
		{"endpoints configured, iss on another path", func(b string) string { return b }, func(b string) string { return b + "/tenant" }, true, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fake := credentialtest.New()
			t.Cleanup(fake.Close)
			fake.SetMetadata("issuer", c.meta(fake.URL)) // also the iss its answers carry
			specs := forgeSpecs(fake)
			specs[0].OAuth.AuthorizationServer = c.configured(fake.URL)
			if c.endpointsConfigured {
				specs[0].OAuth.AuthorizationEndpoint = fake.URL + "/authorize"
				specs[0].OAuth.TokenEndpoint = fake.URL + "/token"
				specs[0].OAuth.RevocationEndpoint = fake.URL + "/revoke"
			}
			h := newHarnessWith(t, nil, nil, fake, specs, nil)
			alice := h.browser(t, "alice", "gh-alice")
			status, final, body := post(t, alice, h.gw.URL+"/connections/forge/connect", url.Values{"csrf": {h.csrf(t, alice)}}, nil)
			connected := status == http.StatusOK && strings.Contains(final, "connected=forge")
			if connected != c.connects {
				t.Fatalf("connected %v, want %v: %d %s\n%s", connected, c.connects, status, final, body)
			}
			if !c.connects && fake.TokenRequests() != 0 {
				t.Errorf("the code went to the token endpoint")
			}
		})
	}
}
