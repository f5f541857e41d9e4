package oauth

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/redis/go-redis/v9"
	"golang.org/x/oauth2"
)

// The rules below are the ones oauth4webapi (3.8) and jose found broken;
// .ci/clients runs oauth4webapi itself against the built gateway.

// jwtParts decodes a compact JWT's header and claims without verifying.
func jwtParts(t *testing.T, token string) (hdr, claims map[string]any) {
	t.Helper()
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("not a compact JWT: %q", token)
	}
	for i, v := range []*map[string]any{&hdr, &claims} {
		b, err := base64.RawURLEncoding.DecodeString(parts[i])
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatal(err)
		}
	}
	return hdr, claims
}

// TestTokensRFC9068AndIDToken: the access token is an RFC 9068 JWT (typ
// at+jwt, iss, exp, aud, sub, client_id, iat, jti, scope); the ID token
// (openid only) has sub, aud = client_id, the nonce and at_hash; both verify
// against the published key set.
func TestTokensRFC9068AndIDToken(t *testing.T) {
	e := newAS(t, nil)
	cfg := e.oauth2(asClientID, asRedirect)
	cfg.Scopes = []string{"openid", "mcp"}
	v := oauth2.GenerateVerifier()
	code := e.code(cfg, v, oauth2.SetAuthURLParam("nonce", "n-0S6_WzA2Mj"))
	tok, err := cfg.Exchange(e.ctx(), code, oauth2.VerifierOption(v))
	if err != nil {
		t.Fatal(err)
	}
	set, _ := e.s.JWKS()
	verify := func(token string) map[string]any {
		jws, err := jose.ParseSigned(token, signatureAlgs)
		if err != nil {
			t.Fatal(err)
		}
		keys := set.Key(jws.Signatures[0].Header.KeyID)
		if len(keys) != 1 {
			t.Fatalf("kid %q not in the key set", jws.Signatures[0].Header.KeyID)
		}
		if _, err := jws.Verify(keys[0].Key); err != nil {
			t.Fatalf("signature: %v", err)
		}
		_, c := jwtParts(t, token)
		return c
	}
	hdr, _ := jwtParts(t, tok.AccessToken)
	at := verify(tok.AccessToken)
	if hdr["typ"] != "at+jwt" {
		t.Errorf("access token typ %v, want at+jwt (RFC 9068 section 2.1)", hdr["typ"])
	}
	for _, c := range []string{"iss", "exp", "aud", "sub", "client_id", "iat", "jti", "scope", "auth_time"} {
		if at[c] == nil || at[c] == "" {
			t.Errorf("access token lacks %s: %v", c, at)
		}
	}
	if at["sub"] != asUser || at["client_id"] != asClientID || at["aud"] != asResource || at["iss"] != e.s.Issuer() {
		t.Errorf("access token claims %v", at)
	}
	if at["scope"] != "openid mcp" {
		t.Errorf("access token scope %q, want %q", at["scope"], "openid mcp")
	}
	idt, ok := tok.Extra("id_token").(string)
	if !ok {
		t.Fatal("no id_token for an openid grant")
	}
	hdr, _ = jwtParts(t, idt)
	id := verify(idt)
	if hdr["typ"] == "at+jwt" {
		t.Errorf("ID token typed as an access token")
	}
	if id["sub"] != asUser || id["aud"] != asClientID || id["nonce"] != "n-0S6_WzA2Mj" || id["at_hash"] == nil || id["iss"] != e.s.Issuer() || id["azp"] != asClientID {
		t.Errorf("ID token claims %v", id)
	}
	// The refresh response's ID token has the subject too.
	fresh, err := cfg.TokenSource(e.ctx(), &oauth2.Token{RefreshToken: tok.RefreshToken}).Token()
	if err != nil {
		t.Fatal(err)
	}
	if idt, _ := fresh.Extra("id_token").(string); idt == "" {
		t.Error("no id_token on refresh of an openid grant")
	} else if _, c := jwtParts(t, idt); c["sub"] != asUser {
		t.Errorf("refresh ID token claims %v", c)
	}
	// Without openid there is no ID token (OpenID Connect Core 3.1.3.3).
	plain := e.token(e.oauth2(asClientID, asRedirect))
	if plain.Extra("id_token") != nil {
		t.Errorf("ID token without the openid scope")
	}
}

// TestTokenResponsesNotCached: RFC 6749 section 5.1 for answers with
// tokens, and for errors too.
func TestTokenResponsesNotCached(t *testing.T) {
	e := newAS(t, nil)
	cfg := e.oauth2(asClientID, asRedirect)
	v := oauth2.GenerateVerifier()
	ok := e.postForm(e.srv.URL+"/oauth/token", url.Values{"grant_type": {"authorization_code"}, "code": {e.code(cfg, v)},
		"code_verifier": {v}, "redirect_uri": {asRedirect}, "client_id": {asClientID}})
	bad := e.postForm(e.srv.URL+"/oauth/token", url.Values{"grant_type": {"authorization_code"}, "code": {"nope"},
		"code_verifier": {v}, "redirect_uri": {asRedirect}, "client_id": {asClientID}})
	for name, resp := range map[string]*http.Response{"tokens": ok, "error": bad} {
		b := body(t, resp)
		if resp.Header.Get("Cache-Control") != "no-store" || resp.Header.Get("Pragma") != "no-cache" {
			t.Errorf("%s: Cache-Control %q Pragma %q (%s)", name, resp.Header.Get("Cache-Control"), resp.Header.Get("Pragma"), b)
		}
	}
}

// postToken posts a token request with optional Basic credentials and
// returns status and RFC 6749 error code.
func (e *asEnv) postToken(v url.Values, basicID, basicSecret string) (int, string, map[string]any) {
	e.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/oauth/token", strings.NewReader(v.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if basicID != "" {
		req.SetBasicAuth(url.QueryEscape(basicID), url.QueryEscape(basicSecret))
	}
	resp, err := e.http.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	var out map[string]any
	_ = json.Unmarshal([]byte(body(e.t, resp)), &out)
	code, _ := out["error"].(string)
	return resp.StatusCode, code, out
}

// TestTokenRequestRules: repeated parameters, and client authentication by
// exactly the registered method. Each refusal leaves the code usable, so
// the last request proves the code was not consumed by the refusals.
func TestTokenRequestRules(t *testing.T) {
	e := newAS(t, func(c *ServerConfig) { c.DCREnabled = true })
	redirect := "https://app.example.test/cb"
	_, basicClient := register(t, e, map[string]any{"redirect_uris": []string{redirect}, "token_endpoint_auth_method": "client_secret_basic"})
	_, postClient := register(t, e, map[string]any{"redirect_uris": []string{redirect}, "token_endpoint_auth_method": "client_secret_post"})
	bID, bSecret := basicClient["client_id"].(string), basicClient["client_secret"].(string)
	pID, pSecret := postClient["client_id"].(string), postClient["client_secret"].(string)

	pub := e.oauth2(asClientID, asRedirect)
	v := oauth2.GenerateVerifier()
	code := e.code(pub, v)
	form := func(edit func(url.Values)) url.Values {
		f := url.Values{"grant_type": {"authorization_code"}, "code": {code}, "code_verifier": {v}, "redirect_uri": {asRedirect}, "client_id": {asClientID}}
		if edit != nil {
			edit(f)
		}
		return f
	}
	wrong := oauth2.GenerateVerifier()
	cases := []struct {
		name         string
		form         url.Values
		basic        [2]string
		status       int
		wantErr      string
		consumesCode bool
	}{
		{"code_verifier twice", form(func(f url.Values) { f["code_verifier"] = []string{wrong, v} }), [2]string{}, 400, "invalid_request", false},
		{"code twice", form(func(f url.Values) { f.Add("code", code) }), [2]string{}, 400, "invalid_request", false},
		{"grant_type twice", form(func(f url.Values) { f.Add("grant_type", "authorization_code") }), [2]string{}, 400, "invalid_request", false},
		{"public client with client_secret_post", form(func(f url.Values) { f.Set("client_secret", "x") }), [2]string{}, 401, "invalid_client", false},
		{"public client with client_secret_basic", form(func(f url.Values) { f.Del("client_id") }), [2]string{asClientID, "x"}, 401, "invalid_client", false},
		{"no client_id", form(func(f url.Values) { f.Del("client_id") }), [2]string{}, 401, "invalid_client", false},
		{"unknown client", form(func(f url.Values) { f.Set("client_id", "nobody") }), [2]string{}, 401, "invalid_client", false},
		{"basic client by post", form(func(f url.Values) { f.Set("client_id", bID); f.Set("client_secret", bSecret) }), [2]string{}, 401, "invalid_client", false},
		{"post client by basic", form(func(f url.Values) { f.Del("client_id") }), [2]string{pID, pSecret}, 401, "invalid_client", false},
		{"basic client without a secret", form(func(f url.Values) { f.Set("client_id", bID) }), [2]string{}, 401, "invalid_client", false},
		{"two methods at once", form(func(f url.Values) { f.Set("client_id", bID); f.Set("client_secret", bSecret) }), [2]string{bID, bSecret}, 400, "invalid_request", false},
		{"Basic and client_id differ", form(nil), [2]string{bID, bSecret}, 400, "invalid_request", false},
		{"malformed verifier", form(func(f url.Values) { f.Set("code_verifier", "short") }), [2]string{}, 400, "invalid_request", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, got, out := e.postToken(tc.form, tc.basic[0], tc.basic[1])
			if status != tc.status || got != tc.wantErr {
				t.Fatalf("status %d error %q, want %d %q (%v)", status, got, tc.status, tc.wantErr, out)
			}
		})
	}
	// None of the refusals consumed the code.
	if status, got, out := e.postToken(form(nil), "", ""); status != 200 || out["access_token"] == nil {
		t.Fatalf("the code after the refusals: %d %s %v", status, got, out)
	}
	// A confidential registered client with its own method gets tokens.
	status, got, _ := e.postToken(url.Values{"grant_type": {"refresh_token"}, "refresh_token": {"nope"}, "client_id": {pID}, "client_secret": {pSecret}}, "", "")
	if status != 400 || got != "invalid_grant" {
		t.Fatalf("post client by post: %d %q (authenticated, then the grant is judged)", status, got)
	}
	status, got, _ = e.postToken(url.Values{"grant_type": {"refresh_token"}, "refresh_token": {"nope"}}, bID, bSecret)
	if status != 400 || got != "invalid_grant" {
		t.Fatalf("basic client by basic: %d %q", status, got)
	}
}

// TestAuthorizeRequestRules: repeated parameters and oversized state or
// nonce are refused with invalid_request and the iss parameter, in the
// query (never a fragment).
func TestAuthorizeRequestRules(t *testing.T) {
	e := newAS(t, nil)
	v := oauth2.GenerateVerifier()
	for name, edit := range map[string]func(url.Values){
		"response_mode twice": func(q url.Values) { q["response_mode"] = []string{"fragment", "query"} },
		"state twice":         func(q url.Values) { q.Add("state", "other") },
		"scope twice":         func(q url.Values) { q.Add("scope", "tools:read") },
		"nonce twice":         func(q url.Values) { q["nonce"] = []string{"a", "b"} },
		"state too long":      func(q url.Values) { q.Set("state", strings.Repeat("s", MaxStateLength+1)) },
		"nonce too long":      func(q url.Values) { q.Set("nonce", strings.Repeat("n", MaxNonceLength+1)) },
		"resource twice":      func(q url.Values) { q["resource"] = []string{asResource, asResource + "/x"} },
	} {
		t.Run(name, func(t *testing.T) {
			q := authQuery(v)
			edit(q)
			resp := e.get(e.srv.URL + "/oauth/authorize?" + q.Encode())
			back := location(t, resp, http.StatusFound)
			want := "invalid_request"
			if name == "resource twice" {
				want = "invalid_target"
			}
			if back.Fragment != "" || back.Query().Get("error") != want || back.Query().Get("iss") != e.s.Issuer() {
				t.Fatalf("redirect %s, want error=%s with iss in the query", back, want)
			}
		})
	}
	// A long but allowed state passes.
	q := authQuery(v)
	q.Set("state", strings.Repeat("s", MaxStateLength))
	if loc := location(t, e.get(e.srv.URL+"/oauth/authorize?"+q.Encode()), http.StatusFound); loc.Path != "/oauth/login" {
		t.Fatalf("state of %d bytes: %s", MaxStateLength, loc)
	}
}

// TestResourceCanonicalForm: a token for https://h/ works at https://h and
// the other way round; the token endpoint accepts a resource of the grant
// in either form and refuses another one with invalid_target.
func TestResourceCanonicalForm(t *testing.T) {
	e := newAS(t, nil)
	cfg := e.oauth2(asClientID, asRedirect)
	iss := e.s.Issuer()
	v := oauth2.GenerateVerifier()
	code := e.code(cfg, v, oauth2.SetAuthURLParam("resource", iss+"/"))
	status, _, out := e.postToken(url.Values{"grant_type": {"authorization_code"}, "code": {code}, "code_verifier": {v},
		"redirect_uri": {asRedirect}, "client_id": {asClientID}, "resource": {iss + "/"}}, "", "")
	if status != 200 {
		t.Fatalf("exchange with resource %s/: %d %v", iss, status, out)
	}
	at := out["access_token"].(string)
	for _, aud := range []string{iss, iss + "/", strings.ToUpper(iss[:5]) + iss[5:]} {
		if _, err := e.s.VerifyAccessToken(context.Background(), at, aud); err != nil {
			t.Errorf("token for %s/ at %s: %v", iss, aud, err)
		}
	}
	if _, err := e.s.VerifyAccessToken(context.Background(), at, iss+"/mcp"); TokenReason(err) != ReasonWrongAudience {
		t.Errorf("token for %s/ at %s/mcp: %v", iss, iss, err)
	}
	status, got, _ := e.postToken(url.Values{"grant_type": {"refresh_token"}, "refresh_token": {out["refresh_token"].(string)},
		"client_id": {asClientID}, "resource": {"https://elsewhere.example.test/"}}, "", "")
	if status != 400 || got != "invalid_target" {
		t.Fatalf("refresh for another resource: %d %q", status, got)
	}
	for in, want := range map[string]string{
		"https://GW.example.com:443/": "https://gw.example.com",
		"http://gw.example.com:80/":   "http://gw.example.com",
		"https://gw.example.com/mcp/": "https://gw.example.com/mcp",
		"https://gw.example.com:8443": "https://gw.example.com:8443",
		"http://[::1]:8080/":          "http://[::1]:8080",
	} {
		if got, ok := CanonicalResource(in); !ok || got != want {
			t.Errorf("CanonicalResource(%q) = %q %v, want %q", in, got, ok, want)
		}
	}
	for _, bad := range []string{"", "/mcp", "urn:x", "https://h/#f", "https://u:p@h/"} {
		if _, ok := CanonicalResource(bad); ok {
			t.Errorf("CanonicalResource(%q) accepted", bad)
		}
	}
}

// TestServedResources: the server issues tokens only for the resources it
// serves (RFC 8707 section 2), so it is no token factory for resource
// servers elsewhere that trust its issuer. An authorization request for
// another resource is answered invalid_target by redirect, with state and
// iss; a token request naming one gets a 400 invalid_target. The issuer is
// always served; resources compare in canonical form. ResourceHandler
// replaces the set for the requests it serves: a grant for a resource the
// server no longer serves buys no token by either grant, and the refusal
// leaves the refresh token as it was.
func TestServedResources(t *testing.T) {
	e := newAS(t, nil) // Resources: asResource
	iss := e.s.Issuer()
	v := oauth2.GenerateVerifier()
	authorize := func(resource string) *url.URL {
		t.Helper()
		q := authQuery(v)
		q.Set("resource", resource)
		return location(t, e.get(e.srv.URL+"/oauth/authorize?"+q.Encode()), http.StatusFound)
	}
	refused := func(loc *url.URL) bool {
		q := loc.Query()
		return loc.Host+loc.Path == "127.0.0.1:9999/callback" && q.Get("error") == "invalid_target" &&
			q.Get("state") == "st" && q.Get("iss") == iss && q.Get("code") == ""
	}
	for _, res := range []string{asResource, "HTTPS://Gateway.Example.TEST:443/mcp/", iss, iss + "/"} {
		if loc := authorize(res); loc.Path != "/oauth/login" {
			t.Errorf("served resource %s: redirected to %s, want the login page", res, loc)
		}
	}
	for _, res := range []string{"https://api.elsewhere.test/", "https://gateway.example.test/admin",
		"https://gateway.example.test/mcp/x", "https://gateway.example.test:8443/mcp", "http://gateway.example.test/mcp",
		"https://gateway.example.test", iss + "/mcp"} {
		if loc := authorize(res); !refused(loc) {
			t.Errorf("resource %s: redirected to %s, want invalid_target with state and iss", res, loc)
		}
	}

	cfg := e.oauth2(asClientID, asRedirect)
	exchange := func(code, verifier string, extra url.Values) (int, string, map[string]any) {
		t.Helper()
		f := url.Values{"grant_type": {"authorization_code"}, "code": {code}, "code_verifier": {verifier},
			"redirect_uri": {asRedirect}, "client_id": {asClientID}}
		for k, vs := range extra {
			f[k] = vs
		}
		return e.postToken(f, "", "")
	}
	refresh := func(rt string, extra url.Values) (int, string, map[string]any) {
		t.Helper()
		f := url.Values{"grant_type": {"refresh_token"}, "refresh_token": {rt}, "client_id": {asClientID}}
		for k, vs := range extra {
			f[k] = vs
		}
		return e.postToken(f, "", "")
	}
	// The token endpoint: a resource the server does not serve.
	v1 := oauth2.GenerateVerifier()
	status, got, out := exchange(e.code(cfg, v1), v1, url.Values{"resource": {"https://api.elsewhere.test"}})
	if desc, _ := out["error_description"].(string); status != 400 || got != "invalid_target" || !strings.Contains(desc, "issues no tokens") {
		t.Fatalf("code exchange for a resource not served: %d %v", status, out)
	}

	// The set shrinks (a front end that no longer serves asResource).
	narrow, err := e.s.ResourceHandler(nil)
	if err != nil {
		t.Fatal(err)
	}
	wide, err := e.s.ResourceHandler([]string{"https://gateway.example.test/mcp/"})
	if err != nil {
		t.Fatal(err)
	}
	v2, v3 := oauth2.GenerateVerifier(), oauth2.GenerateVerifier()
	code2, code3 := e.code(cfg, v2), e.code(cfg, v3) // authorized for asResource
	e.mount(narrow)
	if loc := authorize(asResource); !refused(loc) {
		t.Errorf("authorize for %s through a handler that does not serve it: %s", asResource, loc)
	}
	if loc := authorize(iss); loc.Path != "/oauth/login" {
		t.Errorf("the issuer through a handler serving no resource: %s", loc)
	}
	if status, got, out := exchange(code2, v2, nil); status != 400 || got != "invalid_grant" {
		t.Fatalf("code of a grant for a resource no longer served: %d %v", status, out)
	}
	e.mount(e.s.Handler())
	status, _, out = exchange(code3, v3, nil)
	if status != 200 {
		t.Fatalf("exchange: %d %v", status, out)
	}
	rt := out["refresh_token"].(string)
	e.mount(narrow)
	if status, got, out := refresh(rt, nil); status != 400 || got != "invalid_grant" {
		t.Fatalf("refresh of a grant for a resource no longer served: %d %v", status, out)
	}
	if status, got, out := refresh(rt, url.Values{"resource": {asResource}}); status != 400 || got != "invalid_target" {
		t.Fatalf("refresh naming a resource no longer served: %d %v", status, out)
	}
	e.mount(wide)
	status, _, out = refresh(rt, url.Values{"resource": {asResource + "/"}})
	if status != 200 {
		t.Fatalf("refresh after the refusals (the token must not have rotated): %d %v", status, out)
	}
	if _, err := e.s.VerifyAccessToken(context.Background(), out["access_token"].(string), asResource); err != nil {
		t.Fatalf("refreshed token at %s: %v", asResource, err)
	}
	if _, err := e.s.ResourceHandler([]string{"urn:example:mcp"}); err == nil {
		t.Fatal("ResourceHandler accepted a resource that is not an absolute http(s) URI")
	}

	// Without Resources the server serves its issuer alone.
	d := newAS(t, func(c *ServerConfig) { c.Resources = nil })
	q := authQuery(v)
	q.Set("resource", asResource)
	if loc := location(t, d.get(d.srv.URL+"/oauth/authorize?"+q.Encode()), http.StatusFound); loc.Query().Get("error") != "invalid_target" {
		t.Errorf("default set, resource %s: %s", asResource, loc)
	}
	q.Set("resource", d.s.Issuer()+"/")
	if loc := location(t, d.get(d.srv.URL+"/oauth/authorize?"+q.Encode()), http.StatusFound); loc.Path != "/oauth/login" {
		t.Errorf("default set, the issuer: %s", loc)
	}
}

// TestRegisteredClientsExpire: open registration cannot fill the storage.
// A registration never used goes after UnusedClientTTL; a used one lives
// RegisteredClientTTL after its last token (and as long as its grant).
func TestRegisteredClientsExpire(t *testing.T) {
	e := newAS(t, func(c *ServerConfig) { c.DCREnabled = true; c.RegisteredClientTTL = 30 * 86400 })
	redirect := "http://127.0.0.1:33418/cb"
	_, unused := register(t, e, map[string]any{"redirect_uris": []string{redirect}})
	_, used := register(t, e, map[string]any{"redirect_uris": []string{redirect}})
	usedID := used["client_id"].(string)
	tok := e.token(e.oauth2(usedID, redirect))

	e.clock.Add(UnusedClientTTL + time.Minute)
	ctx := context.Background()
	if _, err := e.s.client(ctx, unused["client_id"].(string)); err == nil {
		t.Error("an unused registration outlived UnusedClientTTL")
	}
	if _, err := e.s.client(ctx, usedID); err != nil {
		t.Fatalf("a used registration expired with the unused ones: %v", err)
	}
	// Refreshing keeps it alive; 30 days without a token ends it.
	fresh, err := e.oauth2(usedID, redirect).TokenSource(e.ctx(), &oauth2.Token{RefreshToken: tok.RefreshToken}).Token()
	if err != nil {
		t.Fatal(err)
	}
	e.clock.Add(29 * 24 * time.Hour)
	if _, err := e.s.client(ctx, usedID); err != nil {
		t.Fatalf("29 days after its last refresh: %v", err)
	}
	e.clock.Add(2 * 24 * time.Hour)
	if _, err := e.s.client(ctx, usedID); err == nil {
		t.Error("a registration outlived RegisteredClientTTL after its last token")
	}
	if fresh.RefreshToken == "" {
		t.Error("no refresh token")
	}
}

// TestRegistrationApplicationType: application_type (OpenID Connect
// Dynamic Registration, which MCP 2026-07-28 clients send) is honoured, and
// inferred from the redirect URIs when absent.
func TestRegistrationApplicationType(t *testing.T) {
	e := newAS(t, func(c *ServerConfig) { c.DCREnabled = true })
	loopback, web, private := "http://127.0.0.1:33418/cb", "https://app.example.test/cb", "cursor://anysphere.cursor-retrieval/oauth/cb"
	cases := []struct {
		name     string
		declared string
		uris     []string
		status   int
		want     string // application_type answered, or the error code
	}{
		{"native loopback", "native", []string{loopback}, 201, "native"},
		{"native private-use scheme", "native", []string{private}, 201, "native"},
		{"native claimed https", "native", []string{web}, 201, "native"},
		{"web https", "web", []string{web}, 201, "web"},
		{"web with a loopback redirect", "web", []string{web, loopback}, 400, "invalid_redirect_uri"},
		{"web with a private-use scheme", "web", []string{private}, 400, "invalid_redirect_uri"},
		{"unknown type", "desktop", []string{loopback}, 400, "invalid_client_metadata"},
		{"inferred native", "", []string{web, loopback}, 201, "native"},
		{"inferred web", "", []string{web}, 201, "web"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			meta := map[string]any{"redirect_uris": tc.uris}
			if tc.declared != "" {
				meta["application_type"] = tc.declared
			}
			status, out := register(t, e, meta)
			got, _ := out["application_type"].(string)
			if status != 201 {
				got, _ = out["error"].(string)
			}
			if status != tc.status || got != tc.want {
				t.Fatalf("%d %v, want %d %s", status, out, tc.status, tc.want)
			}
		})
	}
}

// TestRefreshTokensFollowTheGrantType: a client registered for the
// refresh_token grant gets refresh tokens whether or not it asks for
// offline_access; one registered without it gets none even when it asks.
// offline_access is echoed in the token response's scope when asked for and
// a refresh token comes with it, never in the access token.
func TestRefreshTokensFollowTheGrantType(t *testing.T) {
	e := newAS(t, func(c *ServerConfig) { c.DCREnabled = true })
	redirect := "http://127.0.0.1:33418/cb"
	_, codeOnly := register(t, e, map[string]any{"redirect_uris": []string{redirect}, "grant_types": []string{"authorization_code"}})
	_, both := register(t, e, map[string]any{"redirect_uris": []string{redirect}, "grant_types": []string{"authorization_code", "refresh_token"}})
	for _, tc := range []struct {
		client  string
		scopes  []string
		refresh bool
		scope   string
	}{
		{both["client_id"].(string), []string{"mcp"}, true, "mcp"},
		{both["client_id"].(string), []string{"mcp", "offline_access"}, true, "mcp offline_access"},
		{codeOnly["client_id"].(string), []string{"mcp", "offline_access"}, false, "mcp"},
	} {
		cfg := e.oauth2(tc.client, redirect)
		cfg.Scopes = tc.scopes
		tok := e.token(cfg)
		if (tok.RefreshToken != "") != tc.refresh || tok.Extra("scope") != tc.scope {
			t.Errorf("%v: refresh token %v, scope %q; want %v %q", tc.scopes, tok.RefreshToken != "", tok.Extra("scope"), tc.refresh, tc.scope)
		}
		if _, c := jwtParts(t, tok.AccessToken); c["scope"] != "mcp" {
			t.Errorf("%v: access token scope %q", tc.scopes, c["scope"])
		}
	}
}

// TestRepeatedScopesStoredOnce: a scope named thousands of times is stored
// once. "openid openid ..." passed every check, and the pending
// authorization kept the request's whole 16 KiB (15x a plain one) for ten
// minutes; a refresh's repeated scope went whole into the new token.
func TestRepeatedScopesStoredOnce(t *testing.T) {
	for _, store := range []string{"memory", "redis"} {
		t.Run(store, func(t *testing.T) {
			var e *asEnv
			var stored func(id string) int64
			if store == "redis" {
				var rc *redis.Client
				var prefix string
				e, rc, prefix = newRedisAS(t, nil)
				stored = func(id string) int64 { return rc.StrLen(context.Background(), prefix+keyPending(id)).Val() }
			} else {
				e = newAS(t, nil)
			}
			q := authQuery(oauth2.GenerateVerifier())
			q.Set("scope", strings.TrimSpace(strings.Repeat("mcp openid mcp ", 1000)))
			loc := location(t, e.postForm(e.srv.URL+"/oauth/authorize", q), http.StatusFound)
			if loc.Path != "/oauth/login" {
				t.Fatalf("authorize of %d bytes redirected to %s", len(q.Encode()), loc)
			}
			a, err := e.s.pending(e.ctx(), loc.Query().Get("id"))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(a.Scopes, []string{"mcp", "openid"}) {
				t.Fatalf("stored %d scopes %q..., want [mcp openid]", len(a.Scopes), a.Scopes[:min(4, len(a.Scopes))])
			}
			if stored != nil {
				if n := stored(a.ID); n == 0 || n > 2048 {
					t.Fatalf("the pending authorization is %d bytes in Redis", n)
				}
			}

			tok := e.token(e.oauth2(asClientID, asRedirect))
			status, _, out := e.postToken(url.Values{"grant_type": {"refresh_token"}, "refresh_token": {tok.RefreshToken},
				"client_id": {asClientID}, "scope": {strings.TrimSpace(strings.Repeat("mcp ", 3000))}}, "", "")
			if status != http.StatusOK || out["scope"] != "mcp" {
				t.Fatalf("refresh with a repeated scope: %d scope %.60q", status, out["scope"])
			}
			if at, _ := out["access_token"].(string); len(at) > 2048 {
				t.Fatalf("the refreshed access token is %d bytes", len(at))
			}
		})
	}
}
