package credential

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// noRedirect is c that stops at the first redirect.
func noRedirect(c *http.Client) *http.Client {
	n := *c
	n.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &n
}

func location(t *testing.T, c *http.Client, method, u string, form url.Values) string {
	t.Helper()
	var resp *http.Response
	var err error
	if method == http.MethodPost {
		resp, err = c.PostForm(u, form)
	} else {
		resp, err = c.Get(u)
	}
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 3 {
		t.Fatalf("%s %s: %d, want a redirect", method, u, resp.StatusCode)
	}
	return resp.Header.Get("Location")
}

// TestPagesRefuseForgery: CSRF tokens, Origin, the binding of a connection
// to the browser session that started it, and of a sign-in to its browser.
func TestPagesRefuseForgery(t *testing.T) {
	h := newHarness(t, nil, nil, nil)
	alice, bob := h.browser(t, "alice", "gh-alice"), h.browser(t, "bob", "gh-bob")
	csrfA := h.csrf(t, alice)
	h.csrf(t, bob)

	for name, c := range map[string]struct {
		form   url.Values
		header http.Header
		status int
	}{
		"no csrf":     {url.Values{}, nil, http.StatusForbidden},
		"bob's csrf":  {url.Values{"csrf": {h.csrf(t, bob)}}, nil, http.StatusForbidden},
		"cross-site":  {url.Values{"csrf": {csrfA}}, http.Header{"Origin": {"https://evil.example"}}, http.StatusForbidden},
		"origin null": {url.Values{"csrf": {csrfA}}, http.Header{"Origin": {"null"}}, http.StatusForbidden},
	} {
		status, _, _ := post(t, alice, h.gw.URL+"/connections/forge/connect", c.form, c.header)
		if status != c.status {
			t.Errorf("%s: %d, want %d", name, status, c.status)
		}
	}
	// Without a page session a post is refused.
	anon := h.browser(t, "carol", "")
	if status, _, _ := post(t, anon, h.gw.URL+"/connections/forge/disconnect", url.Values{"csrf": {csrfA}}, nil); status != http.StatusUnauthorized {
		t.Errorf("post without a page session: %d", status)
	}

	// A connection started by alice and finished in bob's browser (a link
	// sent to bob, with alice's upstream account, or the reverse) is
	// refused, and alice can still finish it.
	na := noRedirect(alice)
	authz := location(t, na, http.MethodPost, h.gw.URL+"/connections/forge/connect", url.Values{"csrf": {csrfA}})
	if !strings.HasPrefix(authz, h.fake.URL+"/authorize?") {
		t.Fatalf("connect went to %s", authz)
	}
	q, _ := url.Parse(authz)
	if q.Query().Get("redirect_uri") != h.gw.URL+"/connections/callback/forge" || q.Query().Get("code_challenge_method") != "S256" {
		t.Fatalf("authorization request: %s", authz)
	}
	callback := location(t, na, http.MethodGet, authz, nil)
	if status, _, body := open(t, bob, callback); status != http.StatusForbidden || !strings.Contains(body, "another browser session") {
		t.Fatalf("callback in bob's browser: %d", status)
	}
	if _, _, err := h.call(t, as("bob"), "forge", "/api/whoami"); ErrorCode(err) != CodeCredentialRequired {
		t.Fatal("bob got alice's connection")
	}
	if status, final, _ := open(t, alice, callback); status != 200 || !strings.Contains(final, "connected=forge") {
		t.Fatalf("callback in alice's browser: %d %s", status, final)
	}
	if _, got, err := h.call(t, as("alice"), "forge", "/api/whoami"); err != nil || got != "gh-alice" {
		t.Fatalf("alice: %q %v", got, err)
	}
	// A replayed answer finds nothing.
	if status, _, _ := open(t, alice, callback); status != http.StatusBadRequest {
		t.Errorf("replayed callback: %d", status)
	}
	// Unknown states and services.
	if status, _, _ := open(t, alice, h.gw.URL+"/connections/callback?state=forged&code=x"); status != http.StatusBadRequest {
		t.Errorf("forged state: %d", status)
	}
	if status, _, _ := open(t, alice, h.gw.URL+"/connections/nosuch"); status != http.StatusNotFound {
		t.Errorf("unknown service: %d", status)
	}
	if status, _, _ := post(t, alice, h.gw.URL+"/connections/nosuch/connect", url.Values{"csrf": {csrfA}}, nil); status != http.StatusNotFound {
		t.Errorf("connect an unknown service: %d", status)
	}
	if status, _, _ := post(t, alice, h.gw.URL+"/connections/keyed/connect", url.Values{"csrf": {csrfA}}, nil); status != http.StatusBadRequest {
		t.Errorf("OAuth connect of an API-key service: %d", status)
	}

	// A sign-in answer opened in another browser (login CSRF) is refused.
	fresh := noRedirect(h.browser(t, "mallory", ""))
	signin := location(t, fresh, http.MethodGet, h.gw.URL+"/connections", nil)
	back := location(t, fresh, http.MethodGet, signin, nil)
	victim := h.browser(t, "alice", "")
	if status, _, _ := open(t, victim, back); status != http.StatusForbidden {
		t.Fatalf("sign-in answer in another browser: %d", status)
	}

	// Sign out ends the page session, not the connections.
	if status, _, body := post(t, alice, h.gw.URL+"/connections/signout", url.Values{"csrf": {csrfA}}, nil); status != 200 || !strings.Contains(body, "signed out") {
		t.Fatalf("sign out: %d", status)
	}
	if status, _, _ := post(t, alice, h.gw.URL+"/connections/forge/disconnect", url.Values{"csrf": {csrfA}}, nil); status != http.StatusUnauthorized {
		t.Fatalf("post after sign-out: %d", status)
	}
	if _, got, err := h.call(t, as("alice"), "forge", "/api/whoami"); err != nil || got != "gh-alice" {
		t.Fatalf("connection after signing out of the page: %q %v", got, err)
	}
}

func TestPagesHeadersAndDenial(t *testing.T) {
	h := newHarness(t, nil, nil, nil)
	alice := h.browser(t, "alice", "gh-alice")
	resp, err := alice.Get(h.gw.URL + "/connections/forge")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	csp := resp.Header.Get("Content-Security-Policy")
	if !strings.Contains(csp, "form-action 'self' "+h.fake.URL) || !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Fatalf("CSP %q must let the connect form reach the upstream and nothing else", csp)
	}
	for k, v := range map[string]string{"Cache-Control": "no-store", "X-Frame-Options": "DENY", "Referrer-Policy": "same-origin"} {
		if resp.Header.Get(k) != v {
			t.Errorf("%s: %q", k, resp.Header.Get(k))
		}
	}
	// The upstream denies: the page says so, nothing is stored.
	na := noRedirect(alice)
	authz := location(t, na, http.MethodPost, h.gw.URL+"/connections/forge/connect", url.Values{"csrf": {h.csrf(t, alice)}})
	callback := location(t, na, http.MethodGet, authz+"&deny=1", nil)
	status, _, body := open(t, alice, callback)
	if status != http.StatusForbidden || !strings.Contains(body, "did not grant access (access_denied)") {
		t.Fatalf("denied: %d %s", status, body)
	}
	if _, _, err := h.call(t, as("alice"), "forge", "/api/whoami"); ErrorCode(err) != CodeCredentialRequired {
		t.Fatal("a denied connection was stored")
	}
}
