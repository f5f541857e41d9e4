package caddymodules

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"

	"golang.org/x/oauth2"
)

// TestCaddySecondLoginRefused: through Caddy, an authorization that alice
// signed in to is refused to bob's login from another browser (409,
// ALREADY_SIGNED_IN), and alice's browser still gets the code, whose token
// is alice's. The second login re-bound the authorization to bob.
func TestCaddySecondLoginRefused(t *testing.T) {
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	resource := base + "/private"
	redirect := "http://127.0.0.1:1/callback" // never contacted: we stop at the redirect
	startCaddy(t, caddyConfig(port, map[string]any{
		"development": true,
		"issuer":      base,
		"resource":    resource,
		"scopes":      []string{"mcp"},
		"consent":     map[string]any{"enabled": false},
		"clients":     []any{map[string]any{"id": "cli", "redirect_uris": []string{redirect}}},
		"users": []any{
			map[string]any{"username": "alice", "password_hash": cheapHash},
			map[string]any{"username": "bob", "password_hash": cheapHash},
		},
	}, standardRoutes(nil)))

	newBrowser := func() *http.Client {
		jar, _ := cookiejar.New(nil)
		return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	do := func(resp *http.Response, err error) (int, *url.URL, string) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		loc, _ := resp.Location()
		return resp.StatusCode, loc, string(b)
	}
	alice, bob := newBrowser(), newBrowser()

	conf := &oauth2.Config{ClientID: "cli", RedirectURL: redirect, Scopes: []string{"mcp"},
		Endpoint: oauth2.Endpoint{AuthURL: base + "/oauth/authorize", TokenURL: base + "/oauth/token", AuthStyle: oauth2.AuthStyleInParams}}
	verifier := oauth2.GenerateVerifier()
	_, loginURL, _ := do(alice.Get(conf.AuthCodeURL("st", oauth2.S256ChallengeOption(verifier), oauth2.SetAuthURLParam("resource", resource))))
	_, _, page := do(alice.Get(base + loginURL.RequestURI()))
	v := url.Values{}
	for _, m := range hiddenField.FindAllStringSubmatch(page, -1) {
		v.Set(m[1], m[2])
	}
	login := func(c *http.Client, user string) (int, *url.URL, string) {
		f := url.Values{"id": {v.Get("id")}, "csrf": {v.Get("csrf")}, "username": {user}, "password": {"pw"}}
		return do(c.PostForm(base+"/oauth/login", f))
	}
	status, next, page := login(alice, "alice")
	if status != http.StatusSeeOther || next.Path != "/oauth/authorize/callback" {
		t.Fatalf("alice's login: %d %v %s", status, next, page)
	}
	if status, _, page := login(bob, "bob"); status != http.StatusConflict || !strings.Contains(page, "ALREADY_SIGNED_IN") {
		t.Fatalf("bob's login on alice's authorization: %d %s", status, page)
	}
	status, back, page := do(alice.Get(base + next.RequestURI()))
	if status != http.StatusFound || back.Query().Get("code") == "" {
		t.Fatalf("alice's callback: %d %v %s", status, back, page)
	}
	tok, err := conf.Exchange(context.Background(), back.Query().Get("code"), oauth2.VerifierOption(verifier))
	if err != nil {
		t.Fatal(err)
	}
	if resp, body := get(t, resource+"/data", tok.AccessToken); resp.StatusCode != 200 || !strings.HasPrefix(body, "user=alice ") {
		t.Fatalf("the token: %d %q", resp.StatusCode, body)
	}
}
