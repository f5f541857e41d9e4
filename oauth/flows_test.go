package oauth

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/oauth2"
)

func TestConfidentialClientFlow(t *testing.T) {
	e := newAS(t, func(c *ServerConfig) { c.Consent.Enabled = false })
	cfg := e.oauth2(asSecretID, asConfRedir)
	cfg.ClientSecret = asSecret
	cfg.Endpoint.AuthStyle = oauth2.AuthStyleInHeader
	v := oauth2.GenerateVerifier()
	code := e.code(cfg, v)
	tok, err := cfg.Exchange(e.ctx(), code, oauth2.VerifierOption(v))
	if err != nil {
		t.Fatalf("exchange with client_secret_basic: %v", err)
	}
	if _, err := e.s.VerifyAccessToken(context.Background(), tok.AccessToken, asResource); err != nil {
		t.Fatal(err)
	}
	// A wrong secret is invalid_client, whatever the code.
	bad := *cfg
	bad.ClientSecret = "wrong"
	code = e.code(cfg, v)
	if _, err := bad.Exchange(e.ctx(), code, oauth2.VerifierOption(v)); !isOAuthError(err, "invalid_client") {
		t.Fatalf("wrong secret: %v", err)
	}
	// Revocation needs the client's credentials too.
	resp := e.postForm(e.srv.URL+"/oauth/revoke", url.Values{"token": {tok.AccessToken}, "client_id": {asSecretID}})
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("revoke without secret: %d", resp.StatusCode)
	}
	resp.Body.Close()
	resp = e.postForm(e.srv.URL+"/oauth/revoke", url.Values{"token": {tok.AccessToken}, "client_id": {asSecretID}, "client_secret": {asSecret}})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("revoke access token: %d", resp.StatusCode)
	}
	resp.Body.Close()
	if _, err := e.s.VerifyAccessToken(context.Background(), tok.AccessToken, ""); TokenReason(err) != ReasonRevoked {
		t.Fatalf("after revoking the access token: %v", err)
	}
	e.assertNoSecretsLogged(asSecret, tok.AccessToken, tok.RefreshToken, code)
}

func TestRevokeOtherClientsToken(t *testing.T) {
	e := newAS(t, nil)
	cfg := e.oauth2(asClientID, asRedirect)
	tok := e.token(cfg)
	resp := e.postForm(e.srv.URL+"/oauth/revoke", url.Values{"token": {tok.RefreshToken}, "client_id": {asSecretID}, "client_secret": {asSecret}})
	if b := body(t, resp); resp.StatusCode != http.StatusBadRequest || !strings.Contains(b, "invalid_request") {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if _, err := e.s.VerifyAccessToken(context.Background(), tok.AccessToken, ""); err != nil {
		t.Fatalf("another client revoked the grant: %v", err)
	}
}

func TestNoRefreshTokensWhenDisabled(t *testing.T) {
	e := newAS(t, func(c *ServerConfig) { c.Refresh.Enabled = false })
	cfg := e.oauth2(asClientID, asRedirect)
	tok := e.token(cfg)
	if tok.RefreshToken != "" {
		t.Fatal("refresh token issued with refresh disabled")
	}
	resp := e.postForm(e.srv.URL+"/oauth/token", url.Values{"grant_type": {"refresh_token"}, "refresh_token": {"x"}, "client_id": {asClientID}})
	if b := body(t, resp); !strings.Contains(b, "unsupported_grant_type") {
		t.Fatal(b)
	}
	// The session lives as long as the access token.
	e.clock.Add(time.Hour)
	if _, err := e.s.VerifyAccessToken(context.Background(), tok.AccessToken, ""); err == nil {
		t.Fatal("token valid after its lifetime")
	}
}

func register(t *testing.T, e *asEnv, meta map[string]any) (int, map[string]any) {
	t.Helper()
	b, _ := json.Marshal(meta)
	resp, err := e.http.Post(e.srv.URL+"/oauth/register", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	_ = json.Unmarshal([]byte(body(t, resp)), &out)
	return resp.StatusCode, out
}

func TestDynamicClientRegistration(t *testing.T) {
	e := newAS(t, func(c *ServerConfig) { c.DCREnabled = true })
	redirect := "http://127.0.0.1:33418/oauth/callback"
	status, out := register(t, e, map[string]any{"redirect_uris": []string{redirect}, "client_name": "Inspector", "token_endpoint_auth_method": "none"})
	if status != http.StatusCreated {
		t.Fatalf("register: %d %v", status, out)
	}
	id, _ := out["client_id"].(string)
	if id == "" || out["client_secret"] != nil || out["token_endpoint_auth_method"] != "none" {
		t.Fatalf("registration response %v", out)
	}
	cfg := e.oauth2(id, redirect)
	v := oauth2.GenerateVerifier()
	tok, err := cfg.Exchange(e.ctx(), e.code(cfg, v), oauth2.VerifierOption(v))
	if err != nil {
		t.Fatalf("flow with a registered client: %v", err)
	}
	if _, err := e.s.VerifyAccessToken(context.Background(), tok.AccessToken, asResource); err != nil {
		t.Fatal(err)
	}

	// A confidential registration gets a secret that works.
	status, out = register(t, e, map[string]any{"redirect_uris": []string{"https://app.example.test/cb2"}, "token_endpoint_auth_method": "client_secret_post"})
	if status != http.StatusCreated || out["client_secret"] == nil {
		t.Fatalf("confidential registration: %d %v", status, out)
	}

	// Scopes not offered are not refused; the client may ask for every
	// offered scope (for a later step-up), and the answer says so.
	status, out = register(t, e, map[string]any{"redirect_uris": []string{redirect}, "scope": "openid profile admin tools:read"})
	if status != http.StatusCreated || out["scope"] != "mcp tools:read" {
		t.Fatalf("registered scope: %d %v", status, out)
	}

	for name, meta := range map[string]map[string]any{
		"no redirect":       {"client_name": "x"},
		"http non-loopback": {"redirect_uris": []string{"http://evil.example/cb"}},
		"fragment":          {"redirect_uris": []string{"https://a.example/cb#x"}},
		"javascript scheme": {"redirect_uris": []string{"javascript:alert(1)"}},
		// Reads as claude.ai, goes to evil.example.
		"user information":       {"redirect_uris": []string{"https://claude.ai@evil.example/cb"}},
		"user and password":      {"redirect_uris": []string{"https://u:p@a.example/cb"}},
		"redirect of 2049 bytes": {"redirect_uris": []string{"https://a.example/" + strings.Repeat("x", MaxRedirectURILength-len("https://a.example/")+1)}},
		"implicit grant":         {"redirect_uris": []string{redirect}, "grant_types": []string{"implicit"}},
		"client_credentials":     {"redirect_uris": []string{redirect}, "grant_types": []string{"client_credentials"}},
		"token response type":    {"redirect_uris": []string{redirect}, "response_types": []string{"token"}},
		"private_key_jwt":        {"redirect_uris": []string{redirect}, "token_endpoint_auth_method": "private_key_jwt"},
		// The consent screen shows the name: a right-to-left override
		// would display "Google" for "\u202eelgooG".
		"name with a bidi override":   {"redirect_uris": []string{redirect}, "client_name": "\u202eelgooG"},
		"name with an isolate":        {"redirect_uris": []string{redirect}, "client_name": "Claude \u2067edoC\u2069"},
		"name with a control":         {"redirect_uris": []string{redirect}, "client_name": "Inspector\x00"},
		"name with a line break":      {"redirect_uris": []string{redirect}, "client_name": "Inspector\nApproved by your admin"},
		"name of more than 200 bytes": {"redirect_uris": []string{redirect}, "client_name": strings.Repeat("x", 201)},
	} {
		t.Run(name, func(t *testing.T) {
			status, out := register(t, e, meta)
			if status != http.StatusBadRequest || !strings.HasPrefix(out["error"].(string), "invalid_") {
				t.Fatalf("%d %v", status, out)
			}
		})
	}
	e.assertNoSecretsLogged(tok.AccessToken, tok.RefreshToken)
}

// registerRaw posts body as it is to the registration endpoint.
func registerRaw(t *testing.T, e *asEnv, raw string) (int, map[string]any) {
	t.Helper()
	resp, err := e.http.Post(e.srv.URL+"/oauth/register", "application/json", strings.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	_ = json.Unmarshal([]byte(body(t, resp)), &out)
	return resp.StatusCode, out
}

// A registration body is one JSON object and nothing else: the decoder
// stopped after the first value, so `{...} xyz` registered a client.
func TestRegistrationRefusesMalformedBodies(t *testing.T) {
	e := newAS(t, func(c *ServerConfig) { c.DCREnabled = true })
	good := `{"redirect_uris":["` + asRedirect + `"]}`
	if status, out := registerRaw(t, e, good+"\n"); status != http.StatusCreated {
		t.Fatalf("one object and a newline: %d %v", status, out)
	}
	for name, b := range map[string]string{
		"trailing garbage": good + " xyz",
		"two objects":      good + good,
		"trailing bracket": good + "}",
		"not an object":    `["` + asRedirect + `"]`,
		"truncated":        good[:len(good)-1],
		"empty":            "",
		"over 64 KiB":      `{"redirect_uris":["` + asRedirect + `"],"x":"` + strings.Repeat("a", 64<<10) + `"}`,
	} {
		t.Run(name, func(t *testing.T) {
			status, out := registerRaw(t, e, b)
			if status != http.StatusBadRequest || out["error"] != "invalid_client_metadata" {
				t.Fatalf("%d %v", status, out)
			}
		})
	}
}

// Open registration stores a bounded amount: at most MaxRegisteredClients
// live registrations, counted on both storages (and across instances on
// one Redis), each at most MaxRegisteredClientBytes as stored. Before, a
// patient or distributed caller could grow the storage without bound.
func TestRegisteredClientsCapped(t *testing.T) {
	const redirect = "http://127.0.0.1:33418/cb"
	full := func(t *testing.T, e *asEnv, what string) {
		t.Helper()
		b, _ := json.Marshal(map[string]any{"redirect_uris": []string{redirect}})
		resp, err := e.http.Post(e.srv.URL+"/oauth/register", "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		out := body(t, resp)
		if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(out, `"error":"temporarily_unavailable"`) {
			t.Fatalf("%s: %d %.80s, want 503 temporarily_unavailable", what, resp.StatusCode, out)
		}
		// Retry-After says when the first registration expires.
		if ra, _ := strconv.Atoi(resp.Header.Get("Retry-After")); ra < 1 || ra > int(UnusedClientTTL/time.Second) {
			t.Fatalf("%s: Retry-After %q", what, resp.Header.Get("Retry-After"))
		}
	}
	admitted := func(t *testing.T, e *asEnv, what string) string {
		t.Helper()
		status, out := register(t, e, map[string]any{"redirect_uris": []string{redirect}})
		if status != http.StatusCreated {
			t.Fatalf("%s: %d %v", what, status, out)
		}
		return out["client_id"].(string)
	}
	for _, storage := range []string{"memory", "redis"} {
		t.Run(storage, func(t *testing.T) {
			capped := func(c *ServerConfig) { c.DCREnabled = true; c.MaxRegisteredClients = 3 }
			e, other := newCappedAS(t, storage, capped)
			used := admitted(t, e, "first")
			admitted(t, e, "second")
			admitted(t, e, "third")
			full(t, e, "fourth")
			if other != nil {
				full(t, other(), "fourth at another instance on the same Redis")
			}
			// A client that obtains tokens keeps its place; unused ones
			// leave after UnusedClientTTL and free theirs.
			e.token(e.oauth2(used, redirect))
			e.clock.Add(UnusedClientTTL + time.Minute)
			admitted(t, e, "after the unused expired")
			admitted(t, e, "second after the unused expired")
			full(t, e, "past the cap again")
			if _, err := e.s.client(context.Background(), used); err != nil {
				t.Fatalf("the used client: %v", err)
			}
		})
	}

	e := newAS(t, func(c *ServerConfig) { c.DCREnabled = true })
	uris := func(n, size int) []string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf("https://app.example.test/%d/", i)+strings.Repeat("x", size))
		}
		return out
	}
	if status, out := register(t, e, map[string]any{"redirect_uris": uris(10, 700)}); status != http.StatusCreated {
		t.Fatalf("ten redirect URIs of 700 bytes: %d %v", status, out)
	}
	for name, meta := range map[string]map[string]any{
		"ten redirect URIs of 1000 bytes": {"redirect_uris": uris(10, 1000)},
		"four of 2000 and a long name":    {"redirect_uris": uris(4, 2000), "client_name": strings.Repeat("n", 200)},
	} {
		if status, out := register(t, e, meta); status != http.StatusBadRequest || out["error"] != "invalid_client_metadata" {
			t.Errorf("%s: %d %v, want 400 invalid_client_metadata", name, status, out["error"])
		}
	}
	if status, out := register(t, e, map[string]any{"redirect_uris": uris(11, 10)}); status != http.StatusBadRequest || out["error"] != "invalid_redirect_uri" {
		t.Errorf("eleven redirect URIs: %d %v", status, out)
	}
}

func TestRegistrationWithoutRefresh(t *testing.T) {
	e := newAS(t, func(c *ServerConfig) { c.DCREnabled = true; c.Refresh.Enabled = false })
	status, out := register(t, e, map[string]any{"redirect_uris": []string{asRedirect}, "grant_types": []string{"authorization_code", "refresh_token"}})
	if status != http.StatusCreated || len(out["grant_types"].([]any)) != 1 {
		t.Fatalf("%d %v", status, out)
	}
}

func TestRegistrationOffByDefault(t *testing.T) {
	e := newAS(t, nil)
	status, _ := register(t, e, map[string]any{"redirect_uris": []string{asRedirect}})
	if status != http.StatusNotFound {
		t.Fatalf("registration with dcr off: %d", status)
	}
	if e.s.Metadata(false).RegistrationEndpoint != "" {
		t.Fatal("metadata advertises registration")
	}
}

func TestMetadata(t *testing.T) {
	e := newAS(t, func(c *ServerConfig) { c.DCREnabled = true })
	for _, p := range []string{"/.well-known/oauth-authorization-server", "/.well-known/openid-configuration"} {
		resp := e.get(e.srv.URL + p)
		var m map[string]any
		if err := json.Unmarshal([]byte(body(t, resp)), &m); err != nil {
			t.Fatal(err)
		}
		want := map[string]any{
			"issuer":                           e.srv.URL,
			"authorization_endpoint":           e.srv.URL + "/oauth/authorize",
			"token_endpoint":                   e.srv.URL + "/oauth/token",
			"registration_endpoint":            e.srv.URL + "/oauth/register",
			"revocation_endpoint":              e.srv.URL + "/oauth/revoke",
			"jwks_uri":                         e.srv.URL + "/.well-known/jwks.json",
			"code_challenge_methods_supported": []any{"S256"},
			"grant_types_supported":            []any{"authorization_code", "refresh_token"},
			"response_types_supported":         []any{"code"},
		}
		for k, v := range want {
			got, _ := json.Marshal(m[k])
			exp, _ := json.Marshal(v)
			if !bytes.Equal(got, exp) {
				t.Errorf("%s %s = %s, want %s", p, k, got, exp)
			}
		}
		if p == "/.well-known/openid-configuration" && m["id_token_signing_alg_values_supported"] == nil {
			t.Errorf("discovery lacks id_token_signing_alg_values_supported")
		}
	}
	// The discovery document passes the transparent-mode verifier's
	// discovery, so a gateway could trust another gateway's server.
	md, err := Discover(context.Background(), e.http, e.srv.URL)
	if err != nil || md.JWKSURI != e.srv.URL+"/.well-known/jwks.json" {
		t.Fatalf("Discover: %+v %v", md, err)
	}
}

// The Verifier of transparent mode validates our tokens through our own
// discovery document and key set: the two halves agree on the wire.
func TestTransparentVerifierAcceptsOurTokens(t *testing.T) {
	e := newAS(t, nil)
	cfg := e.oauth2(asClientID, asRedirect)
	tok := e.token(cfg)
	ver, err := NewVerifier(VerifierConfig{Issuer: e.srv.URL, Audience: asResource}, &VerifierOptions{HTTPClient: e.http})
	if err != nil {
		t.Skipf("verifier options differ: %v", err)
	}
	vt, err := ver.Verify(context.Background(), tok.AccessToken)
	if err != nil || vt.Subject != asUser {
		t.Fatalf("transparent verifier on our token: %+v %v", vt, err)
	}
}

func TestLoginAndConsentPages(t *testing.T) {
	e := newAS(t, nil)
	cfg := e.oauth2(asClientID, asRedirect)
	start := func() (id, csrf string) {
		loginURL := location(t, e.get(cfg.AuthCodeURL("st", oauth2.S256ChallengeOption(oauth2.GenerateVerifier()))), http.StatusFound)
		page := body(t, e.get(e.srv.URL+loginURL.RequestURI()))
		if strings.Contains(page, "Demo login") {
			t.Fatal("demo login offered outside development mode")
		}
		if !strings.Contains(page, "Test CLI") {
			t.Fatal("login page does not name the client")
		}
		return hidden(t, page)
	}
	login := func(v url.Values) *http.Response { return e.postForm(e.srv.URL+"/oauth/login", v) }
	// loginFrom posts the login form as a page of origin would.
	loginFrom := func(origin string, v url.Values) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/oauth/login", strings.NewReader(v.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", origin)
		resp, err := e.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}

	t.Run("wrong password", func(t *testing.T) {
		id, csrf := start()
		resp := login(url.Values{"id": {id}, "csrf": {csrf}, "username": {asUser}, "password": {"nope"}})
		if b := body(t, resp); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(b, "Wrong username or password") {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
	})
	t.Run("too many wrong passwords", func(t *testing.T) {
		id, csrf := start()
		for i := 1; i <= MaxLoginFailures; i++ {
			resp := login(url.Values{"id": {id}, "csrf": {csrf}, "username": {asUser}, "password": {"nope"}})
			b := body(t, resp)
			if i == MaxLoginFailures && !strings.Contains(b, "Too many failed attempts") {
				t.Fatalf("attempt %d: %s", i, b)
			}
		}
		resp := login(url.Values{"id": {id}, "csrf": {csrf}, "username": {asUser}, "password": {asPassword}})
		if b := body(t, resp); resp.StatusCode != http.StatusBadRequest || !strings.Contains(b, "expired") {
			t.Fatalf("right password after the limit: %d %s", resp.StatusCode, b)
		}
	})
	t.Run("unknown user", func(t *testing.T) {
		id, csrf := start()
		resp := login(url.Values{"id": {id}, "csrf": {csrf}, "username": {"bob"}, "password": {asPassword}})
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("%d", resp.StatusCode)
		}
		resp.Body.Close()
	})
	t.Run("wrong csrf", func(t *testing.T) {
		id, _ := start()
		resp := login(url.Values{"id": {id}, "csrf": {"forged"}, "username": {asUser}, "password": {asPassword}})
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("%d", resp.StatusCode)
		}
		resp.Body.Close()
	})
	t.Run("csrf of another authorization", func(t *testing.T) {
		id, _ := start()
		_, otherCSRF := start()
		resp := login(url.Values{"id": {id}, "csrf": {otherCSRF}, "username": {asUser}, "password": {asPassword}})
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("%d", resp.StatusCode)
		}
		resp.Body.Close()
	})
	t.Run("cross-site origin", func(t *testing.T) {
		id, csrf := start()
		if resp := loginFrom("https://evil.example", url.Values{"id": {id}, "csrf": {csrf}, "username": {asUser}, "password": {asPassword}}); resp.StatusCode != http.StatusForbidden {
			t.Fatalf("%d", resp.StatusCode)
		}
	})
	t.Run("origin null", func(t *testing.T) {
		// The pages' own posts carry Origin: null (Referrer-Policy:
		// no-referrer), so null proves nothing either way: the CSRF token
		// decides (docs/oauth.md).
		post := func(csrf string) *http.Response {
			id, own := start()
			if csrf == "" {
				csrf = own
			}
			return loginFrom("null", url.Values{"id": {id}, "csrf": {csrf}, "username": {asUser}, "password": {asPassword}})
		}
		if resp := post("forged"); resp.StatusCode != http.StatusForbidden {
			t.Fatalf("null origin, forged token: %d", resp.StatusCode)
		}
		if resp := post(""); resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("null origin, the form's token: %d", resp.StatusCode)
		}
	})
	t.Run("demo login refused outside development", func(t *testing.T) {
		id, csrf := start()
		resp := login(url.Values{"id": {id}, "csrf": {csrf}, "demo": {"1"}})
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("%d", resp.StatusCode)
		}
		resp.Body.Close()
	})
	t.Run("callback before consent", func(t *testing.T) {
		id, csrf := start()
		next := location(t, login(url.Values{"id": {id}, "csrf": {csrf}, "username": {asUser}, "password": {asPassword}}), http.StatusSeeOther)
		if next.Path != "/oauth/consent" {
			t.Fatalf("after login: %s", next)
		}
		resp := e.get(e.srv.URL + "/oauth/authorize/callback?id=" + url.QueryEscape(id))
		if loc := resp.Header.Get("Location"); strings.Contains(loc, "code=") {
			t.Fatalf("code issued without consent: %s", loc)
		}
		// op's refusal is an authorization response (RFC 9207 iss), and
		// the authorization is still pending: the sign-in cookie stays.
		if back := location(t, resp, http.StatusFound); back.Query().Get("error") == "" || back.Query().Get("iss") != e.s.Issuer() {
			t.Errorf("callback before consent: %s", back)
		}
		if e.signInCookie(id) == "" {
			t.Error("a refused callback dropped the sign-in cookie")
		}
	})
	t.Run("consent denied", func(t *testing.T) {
		id, csrf := start()
		location(t, login(url.Values{"id": {id}, "csrf": {csrf}, "username": {asUser}, "password": {asPassword}}), http.StatusSeeOther)
		back := location(t, e.postForm(e.srv.URL+"/oauth/consent", url.Values{"id": {id}, "csrf": {csrf}, "decision": {"deny"}}), http.StatusFound)
		if back.Query().Get("error") != "access_denied" || back.Query().Get("state") != "st" || !strings.HasPrefix(back.String(), asRedirect) {
			t.Fatalf("deny redirect %s", back)
		}
	})
	t.Run("one code per authorization", func(t *testing.T) {
		id, csrf := start()
		location(t, login(url.Values{"id": {id}, "csrf": {csrf}, "username": {asUser}, "password": {asPassword}}), http.StatusSeeOther)
		callback := location(t, e.postForm(e.srv.URL+"/oauth/consent", url.Values{"id": {id}, "csrf": {csrf}, "decision": {"approve"}}), http.StatusSeeOther)
		first := location(t, e.get(e.srv.URL+callback.RequestURI()), http.StatusFound)
		if first.Query().Get("code") == "" {
			t.Fatalf("first callback: %s", first)
		}
		// The same browser comes back (a reload, the back button): the
		// code's redirect dropped its cookie, and op refuses a second
		// code, by an error response to the client as before the cookie,
		// not as a sign-in from another browser (403 and a warning).
		warned := e.logs.FilterMessageSnippet("without the secret").Len()
		resp := e.get(e.srv.URL + callback.RequestURI())
		if loc := resp.Header.Get("Location"); strings.Contains(loc, "code=") {
			t.Fatalf("second code for one authorization: %s", loc)
		}
		if second := location(t, resp, http.StatusFound); second.Query().Get("error") == "" || second.Query().Get("state") != "st" {
			t.Errorf("second callback: %s", second)
		}
		if e.logs.FilterMessageSnippet("without the secret").Len() != warned {
			t.Error("a second callback of the browser that signed in was logged as another browser's")
		}
	})
	t.Run("pending authorization expires after 10 minutes", func(t *testing.T) {
		id, csrf := start()
		e.clock.Add(PendingTTL)
		resp := login(url.Values{"id": {id}, "csrf": {csrf}, "username": {asUser}, "password": {asPassword}})
		if b := body(t, resp); resp.StatusCode != http.StatusBadRequest || !strings.Contains(b, "expired") {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
	})
	t.Run("security headers", func(t *testing.T) {
		loginURL := location(t, e.get(cfg.AuthCodeURL("st", oauth2.S256ChallengeOption(oauth2.GenerateVerifier()))), http.StatusFound)
		resp := e.get(e.srv.URL + loginURL.RequestURI())
		resp.Body.Close()
		csp := resp.Header.Get("Content-Security-Policy")
		if resp.Header.Get("X-Frame-Options") != "DENY" || !strings.Contains(csp, "frame-ancestors 'none'") ||
			!strings.Contains(csp, "form-action 'self' http://127.0.0.1:9999;") {
			t.Fatalf("headers %v", resp.Header)
		}
	})
	e.assertNoSecretsLogged(asPassword)
}

func TestDevelopmentMode(t *testing.T) {
	core, logs := observer.New(zap.DebugLevel)
	s, err := NewServer(ServerConfig{Issuer: "http://127.0.0.1:1", Development: true,
		Clients: []ClientConfig{{ID: "dev", RedirectURIs: []string{"http://devbox.local:3000/cb"}}}},
		&ServerOptions{Logger: zap.New(core)})
	if err != nil {
		t.Fatalf("development server: %v", err)
	}
	defer s.Close()
	if logs.FilterMessageSnippet("DEVELOPMENT MODE: generated a throwaway signing key").Len() != 1 {
		t.Fatal("generated key not announced loudly")
	}
	if logs.FilterMessageSnippet("for one instance only").Len() != 1 {
		t.Fatal("memory storage warning missing")
	}
	// Drive the demo login over real HTTP.
	e := newAS(t, func(c *ServerConfig) { c.Development = true; c.Consent.Enabled = false })
	cfg := e.oauth2(asClientID, asRedirect)
	v := oauth2.GenerateVerifier()
	loginURL := location(t, e.get(cfg.AuthCodeURL("st", oauth2.S256ChallengeOption(v))), http.StatusFound)
	page := body(t, e.get(e.srv.URL+loginURL.RequestURI()))
	if !strings.Contains(page, "Demo login") {
		t.Fatal("demo login not offered in development mode")
	}
	id, csrf := hidden(t, page)
	next := location(t, e.postForm(e.srv.URL+"/oauth/login", url.Values{"id": {id}, "csrf": {csrf}, "demo": {"1"}}), http.StatusSeeOther)
	back := location(t, e.get(e.srv.URL+next.RequestURI()), http.StatusFound)
	tok, err := cfg.Exchange(e.ctx(), back.Query().Get("code"), oauth2.VerifierOption(v))
	if err != nil {
		t.Fatal(err)
	}
	cl, err := e.s.VerifyAccessToken(context.Background(), tok.AccessToken, "")
	if err != nil || cl.Subject != DemoUser {
		t.Fatalf("%+v %v", cl, err)
	}
	// Without a resource indicator the audience is the issuer.
	if !slices.Contains(cl.Audience, e.srv.URL) {
		t.Fatalf("audience %v", cl.Audience)
	}
}

func TestConfigErrors(t *testing.T) {
	jwk, hash := testKey(t)
	f := false
	base := func() ServerConfig {
		return ServerConfig{Issuer: "https://auth.example.test", Local: LocalConfig{SignKey: jwk}}
	}
	cases := map[string]func(*ServerConfig){
		"no issuer":                 func(c *ServerConfig) { c.Issuer = "" },
		"http issuer in production": func(c *ServerConfig) { c.Issuer = "http://auth.example.test" },
		"issuer with path":          func(c *ServerConfig) { c.Issuer = "https://auth.example.test/base" },
		"no key in production":      func(c *ServerConfig) { c.Local.SignKey = "" },
		"bad key":                   func(c *ServerConfig) { c.Local.SignKey = `{"kty":"RSA"}` },
		"rotation off":              func(c *ServerConfig) { c.Refresh.RotateRefreshToken = &f },
		"negative ttl":              func(c *ServerConfig) { c.Refresh.AccessTokenTTL = -1 },
		"storage type":              func(c *ServerConfig) { c.TokenStorage.Type = "etcd" },
		"plain password":            func(c *ServerConfig) { c.Users = []User{{Username: "a", PasswordHash: "hunter2"}} },
		"duplicate user": func(c *ServerConfig) {
			c.Users = []User{{Username: "a", PasswordHash: hash}, {Username: "a", PasswordHash: hash}}
		},
		"client without redirect": func(c *ServerConfig) { c.Clients = []ClientConfig{{ID: "x"}} },
		"client http redirect": func(c *ServerConfig) {
			c.Clients = []ClientConfig{{ID: "x", RedirectURIs: []string{"http://x.example/cb"}}}
		},
		"client scope not offered": func(c *ServerConfig) {
			c.Clients = []ClientConfig{{ID: "x", RedirectURIs: []string{asRedirect}, Scopes: []string{"root"}}}
		},
		"bad scope":              func(c *ServerConfig) { c.Scopes = []string{"a b"} },
		"relative resource":      func(c *ServerConfig) { c.Resources = []string{"/mcp"} },
		"resource not http(s)":   func(c *ServerConfig) { c.Resources = []string{"urn:example:mcp"} },
		"resource with fragment": func(c *ServerConfig) { c.Resources = []string{"https://gw.example.test/mcp#f"} },
		"negative client cap":    func(c *ServerConfig) { c.MaxRegisteredClients = -1 },
		"negative pending cap":   func(c *ServerConfig) { c.MaxPendingAuthorizations = -1 },
		// 2^62 seconds or days wrap to a 0 duration: a token that expires
		// at once, a grace that passes the bound, rotation off.
		"access ttl past a duration":    func(c *ServerConfig) { c.Refresh.AccessTokenTTL = 1 << 62 },
		"reuse grace past a duration":   func(c *ServerConfig) { c.Refresh.ReuseGraceSeconds = 1 << 62 },
		"rotation days past a duration": func(c *ServerConfig) { c.Local.KeyRotationDays = 1 << 62 },
	}
	for name, edit := range cases {
		t.Run(name, func(t *testing.T) {
			c := base()
			edit(&c)
			if s, err := NewServer(c, nil); err == nil {
				s.Close()
				t.Fatal("accepted")
			}
		})
	}
	s, err := NewServer(base(), nil)
	if err != nil {
		t.Fatalf("valid config: %v", err)
	}
	s.Close()
}

func TestConfigFromEnv(t *testing.T) {
	env := map[string]string{EnvRedisHost: "redis.internal", EnvRedisPort: "6380", EnvRedisPassword: "pw", EnvSigningKey: `{"kty":"EC"}`}
	var c ServerConfig
	if err := ConfigFromEnv(&c, func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	if c.TokenStorage.Type != "redis" || c.TokenStorage.Host != "redis.internal" || c.TokenStorage.Port != 6380 ||
		c.TokenStorage.Password != "pw" || c.Local.SignKey != `{"kty":"EC"}` {
		t.Fatalf("%+v", c)
	}
	c = ServerConfig{TokenStorage: TokenStorageConfig{Type: "memory", Host: "keep"}}
	_ = ConfigFromEnv(&c, func(k string) string { return env[k] })
	if c.TokenStorage.Type != "memory" || c.TokenStorage.Host != "keep" {
		t.Fatalf("configuration must win over the environment: %+v", c.TokenStorage)
	}
	env[EnvRedisPort] = "http"
	if err := ConfigFromEnv(&ServerConfig{}, func(k string) string { return env[k] }); err == nil {
		t.Fatal("bad port accepted")
	}
}

func TestRedactedLogFields(t *testing.T) {
	core, logs := observer.New(zap.DebugLevel)
	l := redactLogger(zap.New(core), []string{"api_key"})
	l.Info("x", zap.String("api_key", "k-123"), zap.String("client_secret", "s-456"), zap.String("signin", "g-012"), zap.String("client_id", "c"))
	l.With(zap.String("refresh_token", "r-789")).Info("y")
	for _, entry := range logs.All() {
		for k, v := range entry.ContextMap() {
			if s, _ := v.(string); strings.Contains(s, "-") && k != "client_id" {
				t.Errorf("%s=%v not redacted", k, v)
			}
		}
	}
	if logs.All()[0].ContextMap()["client_id"] != "c" {
		t.Fatal("an ordinary field was redacted")
	}
}

func TestNoGoroutineLeak(t *testing.T) {
	jwk, _ := testKey(t)
	before := runtime.NumGoroutine()
	for range 5 {
		s, err := NewServer(ServerConfig{Issuer: "https://auth.example.test", Local: LocalConfig{SignKey: jwk, KeyRotationDays: 30},
			TokenStorage: TokenStorageConfig{Type: "redis", Host: "127.0.0.1", Port: 1}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		_ = s.Ping(ctx) // nothing listens on port 1: the client dials and fails
		cancel()
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// A leaked goroutine never exits: the wait is long only for a loaded
	// machine, where the closed clients' goroutines may need seconds to run.
	deadline := time.Now().Add(30 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		runtime.Gosched()
		time.Sleep(10 * time.Millisecond) // waiting for goroutines to exit, not for time to pass
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Fatalf("%d goroutines before, %d after closing the servers", before, n)
	}
}

// TestSelfRegisteredClientsAlwaysAsk: with consent off, a configured client
// goes from the login straight to the callback, but a dynamically
// registered one gets the consent screen, which names it unverified and
// shows where the answer goes. Anyone can register "Claude" with a
// redirect URI of their own and send a user the authorization link; after
// a plain login page the code would be on its way to them.
func TestSelfRegisteredClientsAlwaysAsk(t *testing.T) {
	e := newAS(t, func(c *ServerConfig) { c.DCREnabled = true; c.Consent.Enabled = false })
	afterLogin := func(clientID, redirect string) (*url.URL, string) {
		t.Helper()
		cfg := e.oauth2(clientID, redirect)
		loginURL := location(t, e.get(cfg.AuthCodeURL("st", oauth2.S256ChallengeOption(oauth2.GenerateVerifier()), oauth2.SetAuthURLParam("resource", asResource))), http.StatusFound)
		page := body(t, e.get(e.srv.URL+loginURL.RequestURI()))
		id, csrf := hidden(t, page)
		next := location(t, e.postForm(e.srv.URL+"/oauth/login", url.Values{"id": {id}, "csrf": {csrf}, "username": {asUser}, "password": {asPassword}}), http.StatusSeeOther)
		return next, page
	}
	if next, _ := afterLogin(asClientID, asRedirect); next.Path != "/oauth/authorize/callback" {
		t.Fatalf("configured client, consent off: led to %s, want the callback", next)
	}

	const evil = "https://evil.example/cb"
	status, out := register(t, e, map[string]any{"redirect_uris": []string{evil}, "client_name": "Claude"})
	if status != http.StatusCreated {
		t.Fatalf("register: %d %v", status, out)
	}
	next, login := afterLogin(out["client_id"].(string), evil)
	if !strings.Contains(login, "registered by itself") {
		t.Errorf("login page does not say the name is unverified: %s", login)
	}
	if next.Path != "/oauth/consent" {
		t.Fatalf("registered client, consent off: led to %s, want the consent screen", next)
	}
	// The callback cannot be reached past the consent screen.
	skip := e.get(e.srv.URL + "/oauth/authorize/callback?" + next.RawQuery)
	if loc := skip.Header.Get("Location"); strings.Contains(loc, "code=") {
		t.Fatalf("callback before consent redirected with a code: %d %s", skip.StatusCode, loc)
	}
	skip.Body.Close()
	page := body(t, e.get(e.srv.URL+next.RequestURI()))
	for _, want := range []string{`id="client">Claude<`, "registered by itself", `id="redirect-host">evil.example<`, `id="resource">` + asResource + `<`} {
		if !strings.Contains(page, want) {
			t.Errorf("consent page lacks %q: %s", want, page)
		}
	}

	// A registered client whose answers all go to this computer gets the
	// warning that any program here could use its name.
	status, out = register(t, e, map[string]any{"redirect_uris": []string{"http://127.0.0.1:40123/cb"}, "client_name": "Claude"})
	if status != http.StatusCreated {
		t.Fatalf("register: %d %v", status, out)
	}
	next, _ = afterLogin(out["client_id"].(string), "http://127.0.0.1:40123/cb")
	if page := body(t, e.get(e.srv.URL+next.RequestURI())); !strings.Contains(page, `id="local-warning"`) {
		t.Errorf("consent page of a loopback-only registered client has no warning: %s", page)
	}
}

// TestSignInBelongsToTheBrowser plays an attacker who starts an
// authorization with a verifier of its own, reads the login page, sends the
// user its link and, once the user has signed in, approves the consent
// screen or collects the code from the callback itself. Before the sign-in
// secret, the id and the CSRF token of the login page were all it took: the
// attacker exchanged the user's code for the user's tokens. The secret is
// the user's browser's cookie; in a URL (where it once travelled) it counts
// for nothing.
func TestSignInBelongsToTheBrowser(t *testing.T) {
	for _, consent := range []bool{true, false} {
		t.Run(fmt.Sprintf("consent %v", consent), func(t *testing.T) {
			e := newAS(t, func(c *ServerConfig) { c.Consent.Enabled = consent })
			cfg := e.oauth2(asClientID, asRedirect)
			verifier := oauth2.GenerateVerifier()
			loginURL := location(t, e.get(cfg.AuthCodeURL("st", oauth2.S256ChallengeOption(verifier))), http.StatusFound)
			id, csrf := hidden(t, body(t, e.get(e.srv.URL+loginURL.RequestURI())))

			// The user opens the link and signs in.
			next := location(t, e.postForm(e.srv.URL+"/oauth/login", url.Values{"id": {id}, "csrf": {csrf}, "username": {asUser}, "password": {asPassword}}), http.StatusSeeOther)
			signin := e.signInCookie(id)
			if signin == "" {
				t.Fatalf("the user's browser holds no sign-in secret after the login")
			}

			// The attacker knows id and csrf, not the secret: its browser
			// has no cookie, or a wrong one, or names the secret in the URL.
			attacker := &http.Client{Transport: e.http.Transport, CheckRedirect: e.http.CheckRedirect}
			send := func(method, u string, form url.Values, cookie string) *http.Response {
				t.Helper()
				var req *http.Request
				if method == http.MethodPost {
					req, _ = http.NewRequest(method, u, strings.NewReader(form.Encode()))
					req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				} else {
					req, _ = http.NewRequest(method, u, nil)
				}
				if cookie != "" {
					req.AddCookie(&http.Cookie{Name: e.s.signInCookie(id), Value: cookie})
				}
				resp, err := attacker.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				return resp
			}
			refused := func(what string, resp *http.Response) {
				t.Helper()
				b := body(t, resp)
				if resp.StatusCode != http.StatusForbidden || strings.Contains(resp.Header.Get("Location"), "code=") {
					t.Errorf("%s: %d %s %s", what, resp.StatusCode, resp.Header.Get("Location"), b)
				}
				// A user whose browser refuses cookies lands here too.
				if !strings.Contains(b, "cookies") {
					t.Errorf("%s: the page does not name cookies: %s", what, b)
				}
			}
			for _, sec := range []string{"", "wrong-" + signin} {
				refused("consent page", send(http.MethodGet, e.srv.URL+"/oauth/consent?"+url.Values{"id": {id}}.Encode(), nil, sec))
				refused("consent approve", send(http.MethodPost, e.srv.URL+"/oauth/consent", url.Values{"id": {id}, "csrf": {csrf}, "decision": {"approve"}}, sec))
				refused("callback", send(http.MethodGet, e.srv.URL+"/oauth/authorize/callback?"+url.Values{"id": {id}}.Encode(), nil, sec))
			}
			inURL := url.Values{"id": {id}, "signin": {signin}}
			refused("consent page, secret in the URL", send(http.MethodGet, e.srv.URL+"/oauth/consent?"+inURL.Encode(), nil, ""))
			refused("consent approve, secret in the form", send(http.MethodPost, e.srv.URL+"/oauth/consent", url.Values{"id": {id}, "csrf": {csrf}, "signin": {signin}, "decision": {"approve"}}, ""))
			refused("callback, secret in the URL", send(http.MethodGet, e.srv.URL+"/oauth/authorize/callback?"+inURL.Encode(), nil, ""))

			// The user signs in between the callback's check and op's
			// read: the record the code is saved on is checked again.
			for _, sec := range []string{"", "wrong-" + signin} {
				ctx := context.WithValue(context.Background(), signInKey{}, sec)
				if err := (opStorage{e.s}).SaveAuthCode(ctx, id, "code-"+sec); err == nil {
					t.Errorf("a code saved for a callback with sign-in secret %q", sec)
				}
			}

			// The user's browser finishes, and the code is the user's.
			if next.Path == "/oauth/consent" {
				next = location(t, e.postForm(e.srv.URL+"/oauth/consent", url.Values{"id": {id}, "csrf": {csrf}, "decision": {"approve"}}), http.StatusSeeOther)
			}
			back := location(t, e.get(e.srv.URL+next.RequestURI()), http.StatusFound)
			if back.Query().Get("code") == "" {
				t.Fatalf("the user's callback: %s", back)
			}
			e.assertNoSecretsLogged(signin, csrf, asPassword, back.Query().Get("code"))
		})
	}
}

// signInCookie is the sign-in secret of authorization id that the user's
// browser holds for the consent page ("" if none).
func (e *asEnv) signInCookie(id string) string {
	u, _ := url.Parse(e.srv.URL + "/oauth/consent")
	for _, c := range e.http.Jar.Cookies(u) {
		if c.Name == e.s.signInCookie(id) {
			return c.Value
		}
	}
	return ""
}

// TestSignInSecretInACookie: the sign-in secret never appears in a URL
// (where access logs, browser history and proxies' logs would keep it). It
// is an HttpOnly, Secure (https issuer), SameSite=Lax cookie on the pages'
// path, named after its authorization so that two sign-ins in one browser
// keep theirs, living as long as the pending authorization, and dropped
// when the authorization ends with a code or a refusal.
func TestSignInSecretInACookie(t *testing.T) {
	e := newAS(t, nil)
	cfg := e.oauth2(asClientID, asRedirect)
	// Two tabs of one browser sign in, one after the other.
	var ids, csrfs [2]string
	var nexts [2]*url.URL
	for i := range 2 {
		loginURL := location(t, e.get(cfg.AuthCodeURL(fmt.Sprint("st", i), oauth2.S256ChallengeOption(oauth2.GenerateVerifier()))), http.StatusFound)
		ids[i], csrfs[i] = hidden(t, body(t, e.get(e.srv.URL+loginURL.RequestURI())))
		resp := e.postForm(e.srv.URL+"/oauth/login", url.Values{"id": {ids[i]}, "csrf": {csrfs[i]}, "username": {asUser}, "password": {asPassword}})
		var set *http.Cookie
		for _, c := range resp.Cookies() {
			if c.Name == "__Secure-codemode_signin_"+ids[i] {
				set = c
			}
		}
		nexts[i] = location(t, resp, http.StatusSeeOther)
		if nexts[i].Path != "/oauth/consent" || nexts[i].RawQuery != "id="+url.QueryEscape(ids[i]) {
			t.Errorf("login answer: %s, want the consent page with the id alone", nexts[i])
		}
		if set == nil {
			t.Fatalf("login answer sets no sign-in cookie: %v", resp.Header["Set-Cookie"])
		}
		if !set.HttpOnly || !set.Secure || set.SameSite != http.SameSiteLaxMode || set.Path != "/oauth/" ||
			set.MaxAge <= 0 || set.MaxAge > int(PendingTTL/time.Second) || set.Domain != "" {
			t.Errorf("sign-in cookie %s", set)
		}
		if e.signInCookie(ids[i]) == "" {
			t.Fatal("the browser does not send the sign-in cookie to the consent page")
		}
	}
	// The first tab approves and gets its code, then the second denies.
	page := body(t, e.get(e.srv.URL+nexts[0].RequestURI()))
	if strings.Contains(page, "signin") {
		t.Errorf("consent page carries the secret: %s", page)
	}
	callback := location(t, e.postForm(e.srv.URL+"/oauth/consent", url.Values{"id": {ids[0]}, "csrf": {csrfs[0]}, "decision": {"approve"}}), http.StatusSeeOther)
	if callback.RawQuery != "id="+url.QueryEscape(ids[0]) {
		t.Errorf("consent answer: %s, want the callback with the id alone", callback)
	}
	if back := location(t, e.get(e.srv.URL+callback.RequestURI()), http.StatusFound); back.Query().Get("code") == "" {
		t.Fatalf("first tab: %s", back)
	}
	if e.signInCookie(ids[0]) != "" {
		t.Error("the sign-in cookie outlives the code")
	}
	if e.signInCookie(ids[1]) == "" {
		t.Fatal("the second tab's cookie went with the first's")
	}
	if back := location(t, e.postForm(e.srv.URL+"/oauth/consent", url.Values{"id": {ids[1]}, "csrf": {csrfs[1]}, "decision": {"deny"}}), http.StatusFound); back.Query().Get("error") != "access_denied" {
		t.Fatalf("second tab: %s", back)
	}
	if e.signInCookie(ids[1]) != "" {
		t.Error("the sign-in cookie outlives the refusal")
	}

	// Over plain http (development) the cookie cannot be Secure, nor carry
	// the __Secure- prefix.
	dev := &Server{cfg: settings{issuer: "http://localhost:8080"}}
	if got := dev.signInCookie("x"); got != "codemode_signin_x" || dev.secureCookies() {
		t.Errorf("http issuer: cookie %q, secure %v", got, dev.secureCookies())
	}
	// The configuration takes the scheme in any case.
	upper := &Server{cfg: settings{issuer: "HTTPS://auth.example.test"}}
	if got := upper.signInCookie("x"); got != "__Secure-codemode_signin_x" || !upper.secureCookies() {
		t.Errorf("HTTPS issuer: cookie %q, secure %v", got, upper.secureCookies())
	}
}

// TestOneCodePerAuthorization: callbacks racing for one authorization (a
// double click, a reload, two gateways) get one code between them. The
// check that no code was issued yet and the mark that one is were two
// steps, and each callback that read the record before another marked it
// issued a code of its own: two grants from one sign-in.
func TestOneCodePerAuthorization(t *testing.T) {
	for _, storage := range []string{"memory", "redis"} {
		t.Run(storage, func(t *testing.T) {
			noConsent := func(c *ServerConfig) { c.Consent.Enabled = false }
			var e *asEnv
			if storage == "redis" {
				e, _, _ = newRedisAS(t, noConsent)
			} else {
				e = newAS(t, noConsent)
			}
			cfg := e.oauth2(asClientID, asRedirect)
			// Rounds, each a fresh authorization: a round may happen to
			// run its callbacks one after another.
			for round := range 8 {
				loginURL := location(t, e.get(cfg.AuthCodeURL("st", oauth2.S256ChallengeOption(oauth2.GenerateVerifier()))), http.StatusFound)
				id, csrf := hidden(t, body(t, e.get(e.srv.URL+loginURL.RequestURI())))
				location(t, e.postForm(e.srv.URL+"/oauth/login", url.Values{"id": {id}, "csrf": {csrf}, "username": {asUser}, "password": {asPassword}}), http.StatusSeeOther)
				ctx := context.WithValue(context.Background(), signInKey{}, e.signInCookie(id))
				if codes := raceCallbacks(ctx, e, id, 32); len(codes) != 1 {
					t.Fatalf("round %d: 32 callbacks racing for one authorization saved codes %v, want one", round, codes)
				} else if _, err := e.s.redeemCode(context.Background(), codes[0]); err != nil {
					t.Fatalf("round %d: the one code saved: %v", round, err)
				}
			}
		})
	}
}

// raceCallbacks runs n SaveAuthCode calls for authorization id at once and
// returns the codes saved.
func raceCallbacks(ctx context.Context, e *asEnv, id string, n int) []string {
	start := make(chan struct{})
	saved := make(chan string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			code := fmt.Sprintf("code-%s-%d", id[:6], i)
			if err := (opStorage{e.s}).SaveAuthCode(ctx, id, code); err == nil {
				saved <- code
			}
		}()
	}
	close(start)
	wg.Wait()
	close(saved)
	var codes []string
	for c := range saved {
		codes = append(codes, c)
	}
	return codes
}

// signedIn is a fresh authorization of e, signed in (no consent): its id
// and the context a callback of the browser that signed in has.
func signedIn(t *testing.T, e *asEnv) (string, context.Context) {
	t.Helper()
	cfg := e.oauth2(asClientID, asRedirect)
	loginURL := location(t, e.get(cfg.AuthCodeURL("st", oauth2.S256ChallengeOption(oauth2.GenerateVerifier()))), http.StatusFound)
	id, csrf := hidden(t, body(t, e.get(e.srv.URL+loginURL.RequestURI())))
	location(t, e.postForm(e.srv.URL+"/oauth/login", url.Values{"id": {id}, "csrf": {csrf}, "username": {asUser}, "password": {asPassword}}), http.StatusSeeOther)
	return id, context.WithValue(context.Background(), signInKey{}, e.signInCookie(id))
}

// TestPendingWriteKeepsTheIssuedCode: a login or a consent that read the
// pending authorization before a callback marked its code issued does not
// write the record back without the mark (a failed login's password check
// takes a while): then another callback of the browser issued a second
// code.
func TestPendingWriteKeepsTheIssuedCode(t *testing.T) {
	e := newAS(t, func(c *ServerConfig) { c.Consent.Enabled = false })
	id, ctx := signedIn(t, e)
	cs := &changingStore{kvStore: e.s.store, change: func(context.Context) {
		if err := (opStorage{e.s}).SaveAuthCode(ctx, id, "code-first"); err != nil {
			t.Error(err)
		}
	}}
	e.s.store = cs
	defer func() { e.s.store = cs.kvStore }()
	cs.armed.Store(true)
	a, err := e.s.changePending(context.Background(), id, func(a *authRequest) error {
		a.Failures++ // a wrong password, counted
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if cs.armed.Load() {
		t.Fatal("the code was not issued meanwhile")
	}
	if !a.CodeIssued || a.Failures != 1 {
		t.Fatalf("a change whose first read came before the code was issued stored code issued %v, %d failures", a.CodeIssued, a.Failures)
	}
	if err := (opStorage{e.s}).SaveAuthCode(ctx, id, "code-second"); !errors.Is(err, errCodeIssued) {
		t.Fatalf("a second code for one authorization: %v, want errCodeIssued", err)
	}
}

// changingStore runs change once, right after the first read of a pending
// authorization that follows arm: another writer between a reader's read
// and its compare-and-swap.
type changingStore struct {
	kvStore
	change func(ctx context.Context)
	armed  atomic.Bool
}

func (c *changingStore) Get(ctx context.Context, key string) ([]byte, error) {
	b, err := c.kvStore.Get(ctx, key)
	if strings.HasPrefix(key, "pending:") && c.armed.CompareAndSwap(true, false) {
		c.change(ctx)
	}
	return b, err
}

// TestCallbackAfterAnotherChange: a callback whose record changed between
// its read and its mark for another reason than a code (a failed login
// counted) reads it again and issues its code; it was refused as if a code
// had been issued.
func TestCallbackAfterAnotherChange(t *testing.T) {
	e := newAS(t, func(c *ServerConfig) { c.Consent.Enabled = false })
	id, ctx := signedIn(t, e)
	cs := &changingStore{kvStore: e.s.store, change: func(ctx context.Context) {
		_, _ = e.s.changePending(ctx, id, func(a *authRequest) error {
			a.Failures++ // a wrong password somewhere else
			return nil
		})
	}}
	e.s.store = cs
	defer func() { e.s.store = cs.kvStore }()
	cs.armed.Store(true)
	if err := (opStorage{e.s}).SaveAuthCode(ctx, id, "code-once"); err != nil {
		t.Fatalf("the callback after another change: %v", err)
	}
	if cs.armed.Load() {
		t.Fatal("the record was not changed meanwhile")
	}
	if _, err := e.s.redeemCode(context.Background(), "code-once"); err != nil {
		t.Fatal(err)
	}
}
