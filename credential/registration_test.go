package credential

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/codemode-gateway/caddy-codemode/credential/credentialtest"
	"github.com/codemode-gateway/caddy-codemode/guard/redistest"
)

// registeringSpecs is forge without a client id: the gateway registers one.
func registeringSpecs(f *credentialtest.Fake) []Spec {
	s := forgeSpecs(f)
	s[0].OAuth = &OAuthClient{AuthorizationServer: f.URL, Scopes: []string{"read"}}
	return s
}

// TestDynamicRegistration: a service without a client id is connected
// with a client the gateway registers at the authorization server (RFC
// 7591) with its redirect URI, once for every user and for two gateways
// sharing a Redis, and whose token endpoint method is the one the server
// registered (HTTP Basic, the secret in the form, or none), for the code,
// the refresh and the revocation.
func TestDynamicRegistration(t *testing.T) {
	for _, method := range []string{authNone, authBasic, authPost} {
		t.Run(method, func(t *testing.T) {
			fake := credentialtest.New()
			t.Cleanup(fake.Close)
			fake.EnableRegistration(method)
			c, prefix := redistest.Client(t)
			key := newKey(t)
			a := newHarnessWith(t, NewRedisStore(c, prefix+"credentials:"), keyring(t, key), fake, registeringSpecs(fake), nil)
			// b serves the same connections URL's users from the same storage;
			// its redirect URI differs (another port), so it registers its own.
			a.connect(t, a.browser(t, "alice", "gh-alice"))
			a.connect(t, a.browser(t, "bob", "gh-bob"))
			regs := fake.Registrations()
			if len(regs) != 1 {
				t.Fatalf("%d registrations for two users, want 1", len(regs))
			}
			r := regs[0]
			want := a.gw.URL + "/connections/callback/forge"
			if uris, _ := r["redirect_uris"].([]any); len(uris) != 1 || uris[0] != want {
				t.Errorf("redirect_uris %v, want [%s]", r["redirect_uris"], want)
			}
			if r["application_type"] != "web" || r["token_endpoint_auth_method"] != method || r["client_name"] == "" {
				t.Errorf("registration request %v", r)
			}
			if g, _ := r["grant_types"].([]any); !slices.Equal(g, []any{"authorization_code", "refresh_token"}) {
				t.Errorf("grant_types %v", r["grant_types"])
			}
			clients := fake.Clients()
			if len(clients) != 1 || clients[0].Method != method {
				t.Fatalf("clients %+v", clients)
			}
			for _, q := range fake.Authorizations() {
				if q.Get("client_id") != clients[0].ID {
					t.Errorf("authorization request with client_id %q, want the registered %q", q.Get("client_id"), clients[0].ID)
				}
			}
			if _, got, err := a.call(t, as("alice"), "forge", "/api/whoami"); err != nil || got != "gh-alice" {
				t.Fatalf("alice's call: %q %v", got, err)
			}
			// A second gateway on the same storage and redirect URI takes
			// the registration (and its sealed secret) from the storage.
			b := newHarnessWith(t, NewRedisStore(c, prefix+"credentials:"), keyring(t, key), fake, registeringSpecs(fake), nil)
			st := b.m.specs["forge"]
			meta, err := b.m.endpoints(t.Context(), st)
			if err != nil {
				t.Fatal(err)
			}
			regKey := "registration:" + hashOf("forge\x00"+meta.Issuer+"\x00"+a.m.redirectURI(a.m.specs["forge"]))
			got, _, ok := b.m.storedClient(t.Context(), regKey, []byte("caddy-codemode registration\x00"+regKey))
			if !ok || got.ID != clients[0].ID || got.Secret != clients[0].Secret || got.Method != method {
				t.Fatalf("gateway b read the registration as %+v %v, want %+v", got, ok, clients[0])
			}
			// The refresh (and the refresh token's revocation on disconnect)
			// authenticate as the registered client: the fake refuses
			// anything else with invalid_client.
			a.clock.add(2 * time.Hour)
			if _, got, err := a.call(t, as("alice"), "forge", "/api/whoami"); err != nil || got != "gh-alice" {
				t.Fatalf("alice's call after the refresh: %q %v", got, err)
			}
			if fake.Refreshes() != 1 {
				t.Fatalf("%d refreshes, want 1", fake.Refreshes())
			}
			if err := a.m.Disconnect(t.Context(), Owner{testIssuer, "alice"}, "forge"); err != nil {
				t.Fatal(err)
			}
			if n := len(fake.Revoked()); n != 2 {
				t.Fatalf("%d tokens revoked, want 2", n)
			}
			stored, err := c.Keys(t.Context(), prefix+"credentials:registration:*").Result()
			if err != nil || len(stored) != 1 {
				t.Fatalf("registrations stored: %v %v", stored, err)
			}
			if clients[0].Secret != "" {
				raw, _ := c.Get(t.Context(), stored[0]).Result()
				if strings.Contains(raw, clients[0].Secret) {
					t.Fatal("the client secret is stored in the clear")
				}
			}
			a.noSecretInLogs(t, clients[0].Secret)
		})
	}
}

var pageCode = regexp.MustCompile(`<code id="code">([^<]*)</code>`)

// TestRegistrationRefusals: a registration that cannot be had stops the
// connection with UPSTREAM_REGISTRATION_FAILED on the page (no endpoint,
// a refusal, an answer too large or without a client_id, a method the
// gateway cannot use), and a registration endpoint that breaks the rule
// of endpoints.go is not asked (UPSTREAM_ENDPOINT_REFUSED).
func TestRegistrationRefusals(t *testing.T) {
	for _, tc := range []struct {
		name   string
		set    func(f *credentialtest.Fake, answer *fixedAnswer)
		code   string
		reason string
	}{
		{"no endpoint", func(*credentialtest.Fake, *fixedAnswer) {}, CodeRegistrationFailed, "no dynamic client registration"},
		{"refused", func(f *credentialtest.Fake, a *fixedAnswer) {
			a.set(f, http.StatusBadRequest, `{"error":"invalid_redirect_uri"}`)
		}, CodeRegistrationFailed, "refused: 400 invalid_redirect_uri"},
		{"too large", func(f *credentialtest.Fake, a *fixedAnswer) {
			a.set(f, http.StatusCreated, `{"client_id":"c","pad":"`+strings.Repeat("x", 70<<10)+`"}`)
		}, CodeRegistrationFailed, "over 65536 bytes"},
		{"no client id", func(f *credentialtest.Fake, a *fixedAnswer) {
			a.set(f, http.StatusCreated, `{"client_secret":"s"}`)
		}, CodeRegistrationFailed, "no client_id"},
		{"private_key_jwt", func(f *credentialtest.Fake, a *fixedAnswer) {
			f.EnableRegistration("private_key_jwt")
		}, CodeRegistrationFailed, "takes none of the methods"},
		{"registered an unusable method", func(f *credentialtest.Fake, a *fixedAnswer) {
			a.set(f, http.StatusCreated, `{"client_id":"c","token_endpoint_auth_method":"tls_client_auth"}`)
		}, CodeRegistrationFailed, "cannot use"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := credentialtest.New()
			t.Cleanup(fake.Close)
			tc.set(fake, &fixedAnswer{t: t})
			h := newHarnessWith(t, nil, nil, fake, registeringSpecs(fake), nil)
			c := h.browser(t, "alice", "gh-alice")
			status, _, body := post(t, c, h.gw.URL+"/connections/forge/connect", url.Values{"csrf": {h.csrf(t, c)}}, nil)
			if m := pageCode.FindStringSubmatch(body); status != http.StatusBadGateway || m == nil || m[1] != tc.code {
				t.Fatalf("connect: %d %s", status, body)
			}
			if tc.reason != "" && !h.logged(tc.reason) {
				t.Errorf("no log line says %q", tc.reason)
			}
			if len(fake.Authorizations()) != 0 {
				t.Fatal("the browser was sent to the authorization server without a client")
			}
		})
	}
}

// TestRegistrationOverHTTPRefused: metadata read over https that names a
// plain http registration endpoint is refused like any other endpoint.
func TestRegistrationOverHTTPRefused(t *testing.T) {
	fake := credentialtest.NewTLS()
	t.Cleanup(fake.Close)
	fake.SetMetadata("registration_endpoint", "http://example.com/register")
	h := newHarnessWith(t, nil, nil, fake, registeringSpecs(fake), fake.Client())
	_, err := h.m.endpoints(t.Context(), h.m.specs["forge"])
	wantCode(t, err, CodeEndpointRefused)
}

// fixedAnswer names, as the fake's registration endpoint, a server that
// answers a fixed status and body.
type fixedAnswer struct{ t *testing.T }

func (a *fixedAnswer) set(f *credentialtest.Fake, status int, body string) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	a.t.Cleanup(srv.Close)
	f.SetMetadata("registration_endpoint", srv.URL+"/register")
}

// logged reports whether a log line's error or message contains s.
func (h *harness) logged(s string) bool {
	for _, e := range h.logs.All() {
		if strings.Contains(e.Message, s) {
			return true
		}
		for k, v := range e.ContextMap() {
			if k == "error" && strings.Contains(v.(string), s) {
				return true
			}
		}
	}
	return false
}

// TestRegistrationFollowsTheAuthorizationServer: when the MCP server's
// protected resource metadata names another authorization server (SEP-2352),
// the refresh token is not sent there, the user is asked to connect again,
// and the new connection registers at the new server, whose requests never
// carry the old server's client.
func TestRegistrationFollowsTheAuthorizationServer(t *testing.T) {
	as1, as2 := credentialtest.New(), credentialtest.New()
	t.Cleanup(as1.Close)
	t.Cleanup(as2.Close)
	for _, f := range []*credentialtest.Fake{as1, as2} {
		f.EnableRegistration()
	}
	spec := Spec{Service: "forge", Title: "Fake Forge", Mode: ModeUser, Kind: KindOAuth, Resource: as1.URL + "/mcp", OAuth: &OAuthClient{}}
	h := newHarnessWith(t, nil, nil, as1, []Spec{spec}, nil)
	c := h.browser(t, "alice", "gh-alice")
	h.connect(t, c)
	if n := len(as1.Clients()); n != 1 {
		t.Fatalf("%d clients at the first server", n)
	}
	old := as1.Clients()[0].ID

	as1.SetResourceMetadata("authorization_servers", []string{as2.URL})
	h.clock.add(2 * time.Hour) // the token is due and the metadata read again
	_, _, err := h.call(t, as("alice"), "forge", "/api/whoami")
	wantCode(t, err, CodeCredentialRequired)
	if as1.Refreshes() != 0 || as2.TokenRequests() != 0 {
		t.Fatalf("the refresh token went out: %d refreshes at the first server, %d token requests at the second", as1.Refreshes(), as2.TokenRequests())
	}
	// Connecting again: registered at the second server, signed in there.
	resp, err := c.Get(as2.URL + "/login?account=gh-alice")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	h.connect(t, c)
	if n := len(as2.Registrations()); n != 1 {
		t.Fatalf("%d registrations at the second server, want 1", n)
	}
	for _, q := range as2.Authorizations() {
		if q.Get("client_id") == old {
			t.Fatal("the first server's client was shown to the second")
		}
	}
}

// TestScopesFromTheMCPServer: without configured scopes the connection asks
// for the scope of the MCP server's 401 challenge, else for its protected
// resource metadata's scopes_supported; configured scopes win; what is not
// a scope token is left out.
func TestScopesFromTheMCPServer(t *testing.T) {
	for _, tc := range []struct {
		name       string
		configured []string
		challenge  string
		supported  []string
		want       string
	}{
		{"challenge", nil, "mcp:basic", []string{"mcp:basic", "mcp:write"}, "mcp:basic"},
		{"scopes_supported", nil, "", []string{"mcp:basic", "mcp:read", "bad\"scope", "mcp:basic"}, "mcp:basic mcp:read"},
		{"none", nil, "", nil, ""},
		{"configured", []string{"read"}, "mcp:basic", []string{"mcp:write"}, "read"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := credentialtest.New()
			t.Cleanup(fake.Close)
			fake.SetChallengeScope(tc.challenge)
			if tc.supported != nil {
				fake.SetResourceMetadata("scopes_supported", tc.supported)
			}
			spec := Spec{Service: "forge", Title: "Fake Forge", Mode: ModeUser, Kind: KindOAuth, Resource: fake.URL + "/mcp",
				OAuth: &OAuthClient{ClientID: fake.ClientID, ClientSecret: fake.ClientSecret, Scopes: tc.configured}}
			h := newHarnessWith(t, nil, nil, fake, []Spec{spec}, nil)
			h.connect(t, h.browser(t, "alice", "gh-alice"))
			auths := fake.Authorizations()
			if len(auths) != 1 {
				t.Fatalf("%d authorization requests", len(auths))
			}
			if got, has := auths[0]["scope"]; strings.Join(got, ",") != tc.want || (tc.want == "" && has) {
				t.Fatalf("scope %q, want %q", got, tc.want)
			}
		})
	}
}
