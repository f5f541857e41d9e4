package credential

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestConnectAnswerIssComparedExactly: RFC 9207 section 2.4 compares an
// answer's iss with the authorization server's issuer by simple string
// comparison (RFC 3986 section 6.2.1), no normalisation. Until the
// twenty-second pass a trailing-slash variant of the issuer was taken (both
// sides were trimmed of it), which the MCP conformance suite's
// auth/iss-normalized scenario failed through a gateway. Each variant is
// refused with ISSUER_MISMATCH; the issuer itself connects.
func TestConnectAnswerIssComparedExactly(t *testing.T) {
	h := newHarness(t, nil, nil, nil)
	alice := h.browser(t, "alice", "gh-alice")
	csrf := h.csrf(t, alice)
	na := noRedirect(alice)
	answer := func() (*url.URL, string) {
		t.Helper()
		authz := location(t, na, http.MethodPost, h.gw.URL+"/connections/forge/connect", url.Values{"csrf": {csrf}})
		u, _ := url.Parse(location(t, na, http.MethodGet, authz, nil))
		iss := u.Query().Get("iss")
		if iss == "" {
			t.Fatalf("the fake did not name itself: %s", u)
		}
		return u, iss
	}
	withIss := func(u *url.URL, iss string) string {
		q := u.Query()
		q.Set("iss", iss)
		v := *u
		v.RawQuery = q.Encode()
		return v.String()
	}
	_, issuer := answer()
	variants := map[string]string{
		"trailing slash":    issuer + "/",
		"upper-case scheme": strings.ToUpper(issuer[:4]) + issuer[4:],
		"percent-encoded":   strings.Replace(issuer, ".", "%2E", 1),
	}
	for name, iss := range variants {
		if iss == issuer {
			t.Fatalf("%s: no variant of %q", name, issuer)
		}
		u, _ := answer()
		if status, _, body := open(t, alice, withIss(u, iss)); status != http.StatusForbidden || !refusedWith(body, CodeIssuerMismatch) {
			t.Fatalf("%s (%q for %q): %d\n%s", name, iss, issuer, status, body)
		}
	}
	if _, _, err := h.call(t, as("alice"), "forge", "/api/whoami"); ErrorCode(err) != CodeCredentialRequired {
		t.Fatalf("a refused answer connected alice: %v", err)
	}
	u, _ := answer()
	if status, final, _ := open(t, alice, withIss(u, issuer)); status != http.StatusOK || !strings.Contains(final, "connected=forge") {
		t.Fatalf("the issuer's own answer: %d %s", status, final)
	}
}
