package caddymodules

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// TestCaddyBearerRefusalBody: a refusal of the codemode_bearer provider
// (behind Caddy's authentication handler) has codemode_auth's JSON body
// and codes and its WWW-Authenticate challenge; it had no body, so a client
// without OAuth support (or a person with curl) read nothing of why. A
// valid token without the route's scope gets 403, as from codemode_auth
// (MCP's scope challenge, RFC 6750 section 3.1); it got 401, which tells a
// client to sign in again rather than to step up. With handle_errors
// routes the body is theirs, the code in {http.vars.codemode_auth_code}.
func TestCaddyBearerRefusalBody(t *testing.T) {
	idp, base, resource := startTransparent(t, map[string]any{"scopes": []string{"admin"}})
	md := `Bearer resource_metadata="` + base + `/.well-known/oauth-protected-resource/private"`
	aud := func(m map[string]any) { m["aud"] = resource }
	for _, tc := range []struct {
		what, token, challenge, code string
		status                       int
	}{
		{"no token", "", md + `, scope="admin"`, "UNAUTHORIZED", 401},
		{"bad token", "abc.def.ghi", md + `, error="invalid_token", error_description="malformed", scope="admin"`, "UNAUTHORIZED", 401},
		{"token without the scope", idp.token(t, aud), md + `, error="insufficient_scope", scope="admin mcp read", error_description="the token lacks scope admin"`, "INSUFFICIENT_SCOPE", 403},
	} {
		resp, body := get(t, base+"/private/x", tc.token)
		var e struct {
			Error struct{ Code, Message string }
		}
		if resp.StatusCode != tc.status || resp.Header.Get("WWW-Authenticate") != tc.challenge {
			t.Errorf("%s: %d %q, want %d %q", tc.what, resp.StatusCode, resp.Header.Get("WWW-Authenticate"), tc.status, tc.challenge)
		}
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" || json.Unmarshal([]byte(body), &e) != nil ||
			e.Error.Code != tc.code || e.Error.Message == "" {
			t.Errorf("%s: %s body %q, want a JSON body with the code %s", tc.what, ct, body, tc.code)
		}
	}
	ok := idp.token(t, func(m map[string]any) { aud(m); m["scope"] = "mcp admin" })
	if resp, body := get(t, base+"/private/x", ok); resp.StatusCode != 200 {
		t.Fatalf("token with the scope: %d %q", resp.StatusCode, body)
	}
}

// TestCaddyBearerRefusalErrorRoutes: with handle_errors routes, the
// refusal's body is theirs, as for codemode_auth. Caddy's authentication
// handler hands them 401 for every refusal, a missing scope included; an
// error route matching {http.vars.codemode_auth_code} INSUFFICIENT_SCOPE
// answers 403 with the provider's challenge (docs/auth.md).
func TestCaddyBearerRefusalErrorRoutes(t *testing.T) {
	idp := newFakeIDP(t)
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	var cfg map[string]any
	if err := json.Unmarshal(caddyConfig(port, map[string]any{
		"mode": "transparent", "development": true, "provider_url": idp.srv.URL, "expected_audience": base + "/private",
	}, standardRoutes(map[string]any{"scopes": []string{"admin"}})), &cfg); err != nil {
		t.Fatal(err)
	}
	srv := cfg["apps"].(map[string]any)["http"].(map[string]any)["servers"].(map[string]any)["test"].(map[string]any)
	srv["errors"] = map[string]any{"routes": []any{
		map[string]any{
			"match":  []any{map[string]any{"vars": map[string]any{"codemode_auth_code": []string{"INSUFFICIENT_SCOPE"}}}},
			"handle": []any{map[string]any{"handler": "static_response", "status_code": 403, "body": "step up: {http.vars.codemode_auth_code}"}},
		},
		map[string]any{"handle": []any{map[string]any{
			"handler": "static_response", "body": "refused: {http.error.status_code} {http.vars.codemode_auth_code}"}}},
	}}
	b, _ := json.Marshal(cfg)
	startCaddy(t, b)
	resp, body := get(t, base+"/private/x", "")
	if resp.StatusCode != 401 || body != "refused: 401 UNAUTHORIZED" || resp.Header.Get("WWW-Authenticate") == "" {
		t.Fatalf("no token: %d %q %q", resp.StatusCode, body, resp.Header.Get("WWW-Authenticate"))
	}
	tok := idp.token(t, func(m map[string]any) { m["aud"] = base + "/private" })
	resp, body = get(t, base+"/private/x", tok)
	if resp.StatusCode != 403 || body != "step up: INSUFFICIENT_SCOPE" ||
		!strings.Contains(resp.Header.Get("WWW-Authenticate"), `error="insufficient_scope", scope="admin mcp read"`) {
		t.Fatalf("token without the scope: %d %q %q", resp.StatusCode, body, resp.Header.Get("WWW-Authenticate"))
	}
}

// TestCaddyBearerRefusalCORS: a refusal by the codemode_bearer provider of a
// request with Origin names that origin and exposes WWW-Authenticate, as
// codemode_auth's does, so that a browser-based MCP client (MCP Inspector's
// web UI, a web app) reads the challenge, finds the resource metadata and
// steps up; without them the browser hid the 401 and 403 and the client
// saw a network error. No credentials are allowed, and a request without
// Origin gets no CORS header. A preflight carries no token, so the provider
// refuses it (docs/auth.md: codemode_auth answers preflights).
func TestCaddyBearerRefusalCORS(t *testing.T) {
	idp, base, resource := startTransparent(t, map[string]any{"scopes": []string{"admin"}})
	const page = "http://page.example"
	do := func(method, token, origin string, hdr ...string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, base+"/private/x", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		return doAndDrain(t, req)
	}
	noScope := idp.token(t, func(m map[string]any) { m["aud"] = resource })
	for _, tc := range []struct {
		what, token string
		status      int
	}{
		{"no token", "", 401},
		{"bad token", "abc.def.ghi", 401},
		{"token without the scope", noScope, 403},
	} {
		resp := do(http.MethodGet, tc.token, page)
		if resp.StatusCode != tc.status || resp.Header.Get("WWW-Authenticate") == "" ||
			resp.Header.Get("Access-Control-Allow-Origin") != page ||
			!strings.Contains(resp.Header.Get("Access-Control-Expose-Headers"), "WWW-Authenticate") ||
			!slices.Contains(resp.Header.Values("Vary"), "Origin") || resp.Header.Get("Access-Control-Allow-Credentials") != "" {
			t.Errorf("%s with Origin: %d %v, want %d and a challenge the page can read", tc.what, resp.StatusCode, resp.Header, tc.status)
		}
		if resp := do(http.MethodGet, tc.token, ""); resp.StatusCode != tc.status || resp.Header.Get("Access-Control-Allow-Origin") != "" ||
			resp.Header.Get("Access-Control-Expose-Headers") != "" {
			t.Errorf("%s without Origin: %d %v, want %d and no CORS header", tc.what, resp.StatusCode, resp.Header, tc.status)
		}
	}
	if resp := do(http.MethodOptions, "", page, "Access-Control-Request-Method", "POST"); resp.StatusCode != 401 ||
		resp.Header.Get("Access-Control-Allow-Methods") != "" {
		t.Errorf("preflight: %d %v, want the provider's 401 and no permission", resp.StatusCode, resp.Header)
	}
}
