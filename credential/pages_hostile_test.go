package credential

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
)

// refusedWith reports whether a page is the refusal with code.
func refusedWith(body, code string) bool {
	return strings.Contains(body, `<code id="code">`+code+`</code>`)
}

// keyOf is alice's stored API key of keyed, "" when none.
func (h *harness) keyOf(t *testing.T, user string) string {
	t.Helper()
	rec, err := h.m.Vault().Get(context.Background(), Owner{Issuer: testIssuer, Subject: user}.Key(), "keyed")
	if err != nil {
		return ""
	}
	return rec.APIKey
}

// TestPagesRefuseHostileInput: what a hostile browser or page posts to the
// connections page (over a real socket), each refusal with its stable code
// and nothing stored. Before the sixteenth pass a key that was not UTF-8
// was stored with its bytes turned into U+FFFD (the vault keeps JSON), so
// the key sent was not the key pasted, and a key with an invisible
// character (a zero-width space, a byte order mark, a bidirectional
// override, a no-break space) was stored and failed at the upstream; the
// refusals had no code.
func TestPagesRefuseHostileInput(t *testing.T) {
	h := newHarness(t, nil, nil, nil)
	alice := h.browser(t, "alice", "gh-alice")
	csrf := h.csrf(t, alice)
	save := h.gw.URL + "/connections/keyed/api_key"

	for name, key := range map[string]string{
		"not UTF-8":        "key\xff\xfeabc",
		"zero-width space": "key-1\u200b",
		"byte order mark":  "\ufeffkey-1",
		"bidi override":    "key-\u202e1",
		"no-break space":   "key\u00a01",
		"line separator":   "key\u20281",
		"line break":       "key\r\nX-Evil: 1",
		"NUL":              "key\x00",
		"empty":            "   ",
		"4097 bytes":       strings.Repeat("k", 4097),
	} {
		code := CodeAPIKeyInvalid
		if name == "not UTF-8" {
			code = CodeFormInvalid // every value of a form must be UTF-8
		}
		status, _, body := post(t, alice, save, url.Values{"csrf": {csrf}, "api_key": {key}}, nil)
		if status != http.StatusBadRequest || !refusedWith(body, code) {
			t.Errorf("key %s: %d, want 400 %s\n%s", name, status, code, body)
		}
		if got := h.keyOf(t, "alice"); got != "" {
			t.Fatalf("key %s: %q stored", name, got)
		}
	}
	for _, key := range []string{"key\u200b", "key\xff"} {
		if err := h.m.PutAPIKey(context.Background(), Owner{Issuer: testIssuer, Subject: "alice"}, "keyed", key); ErrorCode(err) != CodeAPIKeyInvalid {
			t.Errorf("PutAPIKey(%q): %v, want %s", key, err, CodeAPIKeyInvalid)
		}
	}

	// A key of printable characters, non-ASCII ones included, is stored
	// and sent exactly as pasted (trimmed).
	for _, key := range []string{"clé-ключ-鍵 with spaces", strings.Repeat("k", 4096)} {
		status, final, body := post(t, alice, save, url.Values{"csrf": {csrf}, "api_key": {" " + key + "\n"}}, nil)
		if status != http.StatusOK || !strings.Contains(final, "connected=keyed") {
			t.Fatalf("key %.20q: %d %s\n%s", key, status, final, body)
		}
		if got := h.keyOf(t, "alice"); got != key {
			t.Fatalf("stored %.40q, want %.40q", got, key)
		}
	}

	// The form itself.
	for name, c := range map[string]struct {
		body   string
		header http.Header
		status int
		code   string
	}{
		"value not UTF-8":      {"csrf=" + csrf + "&api_key=k&note=%ff", nil, http.StatusBadRequest, CodeFormInvalid},
		"name not UTF-8":       {"csrf=" + csrf + "&api_key=k&%fe=1", nil, http.StatusBadRequest, CodeFormInvalid},
		"malformed":            {"csrf=" + csrf + "&api_key=%zz", nil, http.StatusBadRequest, CodeFormInvalid},
		"over 16 KiB":          {"csrf=" + csrf + "&api_key=k&pad=" + strings.Repeat("p", 1<<20), nil, http.StatusBadRequest, CodeFormInvalid},
		"csrf in the query":    {"api_key=k", nil, http.StatusForbidden, CodeCSRFInvalid},
		"forged csrf":          {"csrf=AAAA&api_key=k", nil, http.StatusForbidden, CodeCSRFInvalid},
		"csrf twice, forged 1": {"csrf=AAAA&csrf=" + csrf + "&api_key=k", nil, http.StatusForbidden, CodeCSRFInvalid},
		"cross-site":           {"csrf=" + csrf + "&api_key=k", http.Header{"Origin": {"https://evil.example"}}, http.StatusForbidden, CodeCrossSite},
		"origin null":          {"csrf=" + csrf + "&api_key=k", http.Header{"Origin": {"null"}}, http.StatusForbidden, CodeCrossSite},
		"origin suffix":        {"csrf=" + csrf + "&api_key=k", http.Header{"Origin": {h.gw.URL + ".evil.example"}}, http.StatusForbidden, CodeCrossSite},
	} {
		u := save
		if name == "csrf in the query" {
			u += "?csrf=" + csrf
		}
		req, _ := http.NewRequest(http.MethodPost, u, strings.NewReader(c.body))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for k, v := range c.header {
			req.Header[k] = v
		}
		resp, err := alice.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		b := string(raw)
		if resp.StatusCode != c.status || !refusedWith(b, c.code) {
			t.Errorf("%s: %d, want %d %s\n%s", name, resp.StatusCode, c.status, c.code, b)
		}
		if resp.Header.Get("Cache-Control") != "no-store" || resp.Header.Get("X-Frame-Options") != "DENY" {
			t.Errorf("%s: headers %v", name, resp.Header)
		}
	}
	if got := h.keyOf(t, "alice"); got != strings.Repeat("k", 4096) {
		t.Fatalf("a refused form changed the key: %.20q", got)
	}
	// A page session that ended.
	anon := h.browser(t, "carol", "")
	if status, _, body := post(t, anon, h.gw.URL+"/connections/keyed/disconnect", url.Values{"csrf": {csrf}}, nil); status != http.StatusUnauthorized || !refusedWith(body, CodePageSignInRequired) {
		t.Errorf("post without a page session: %d\n%s", status, body)
	}
	// No key or token of alice's on any page.
	if _, _, body := open(t, alice, h.gw.URL+"/connections/keyed"); strings.Contains(body, strings.Repeat("k", 64)) {
		t.Fatal("the page shows the key")
	}
}

// TestConnectAnswerRefusals: an upstream's answer to a connection (the
// callback) that is replayed, opened in another browser, or that does not
// name the upstream's authorization server. The fake's metadata says it
// names itself in every answer (RFC 9207
// authorization_response_iss_parameter_supported), so an answer without
// iss is not its own: a mix-up attacker's, whose code would go to the
// fake's token endpoint. Before the sixteenth pass only an iss naming
// another server was refused, and one without iss was taken.
func TestConnectAnswerRefusals(t *testing.T) {
	h := newHarness(t, nil, nil, nil)
	alice, bob := h.browser(t, "alice", "gh-alice"), h.browser(t, "bob", "gh-bob")
	csrf := h.csrf(t, alice)
	h.csrf(t, bob)
	na := noRedirect(alice)
	answer := func(extra string) string {
		t.Helper()
		authz := location(t, na, http.MethodPost, h.gw.URL+"/connections/forge/connect", url.Values{"csrf": {csrf}})
		return location(t, na, http.MethodGet, authz+extra, nil)
	}

	cb := answer("&no_iss=1")
	if strings.Contains(cb, "iss=") {
		t.Fatalf("the fake named itself: %s", cb)
	}
	if status, _, body := open(t, alice, cb); status != http.StatusForbidden || !refusedWith(body, CodeIssuerMismatch) {
		t.Fatalf("answer without iss: %d\n%s", status, body)
	}
	if status, _, body := open(t, alice, cb); status != http.StatusBadRequest || !refusedWith(body, CodeStateInvalid) {
		t.Fatalf("the refused answer again: %d\n%s", status, body)
	}
	cb = answer("")
	u, _ := url.Parse(cb)
	q := u.Query()
	q.Set("iss", "https://evil.example")
	u.RawQuery = q.Encode()
	if status, _, body := open(t, alice, u.String()); status != http.StatusForbidden || !refusedWith(body, CodeIssuerMismatch) {
		t.Fatalf("answer naming another server: %d\n%s", status, body)
	}
	if _, _, err := h.call(t, as("alice"), "forge", "/api/whoami"); ErrorCode(err) != CodeCredentialRequired {
		t.Fatalf("a refused answer connected alice: %v", err)
	}

	cb = answer("")
	if status, _, body := open(t, bob, cb); status != http.StatusForbidden || !refusedWith(body, CodeOtherBrowser) {
		t.Fatalf("alice's answer in bob's browser: %d\n%s", status, body)
	}
	if status, final, _ := open(t, alice, cb); status != http.StatusOK || !strings.Contains(final, "connected=forge") {
		t.Fatalf("alice's answer: %d %s", status, final)
	}
	if status, _, body := open(t, alice, cb); status != http.StatusBadRequest || !refusedWith(body, CodeStateInvalid) {
		t.Fatalf("a replayed answer: %d\n%s", status, body)
	}
	// An upstream's error text is reduced to an OAuth error code's
	// characters: no markup reaches the page.
	cb = answer("&deny=1")
	u, _ = url.Parse(cb)
	q = u.Query()
	q.Set("error", `<script>alert(1)</script>`)
	u.RawQuery = q.Encode()
	if status, _, body := open(t, alice, u.String()); status != http.StatusForbidden || strings.Contains(body, "<script>alert") {
		t.Fatalf("an error with markup: %d\n%s", status, body)
	}
	for _, e := range h.logs.All() {
		line := e.Message + fmt.Sprint(e.ContextMap())
		for _, secret := range append(h.fake.Tokens(), h.fake.ClientSecret, csrf) {
			if strings.Contains(line, secret) {
				t.Fatalf("log line %q has a secret", line)
			}
		}
	}
}

// TestPageSignInStoresNothing: the page's answer to an anonymous GET
// (the start of its sign-in) stores nothing: the pending sign-in travels
// sealed in the browser's cookie. Before the sixteenth pass each such GET
// stored a record for 10 minutes (on Redis 344 bytes), so a stranger with
// many addresses grew the storage without bound at the rate limit's pace.
// The cookie binds the answer to its browser as the record did: a
// tampered, foreign, replayed or expired one is refused.
func TestPageSignInStoresNothing(t *testing.T) {
	h := newHarness(t, nil, nil, nil)
	keys := func() int {
		n := 0
		if err := h.store.Scan(context.Background(), "", func(string) error { n++; return nil }); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := keys()
	for range 200 {
		resp, err := noRedirect(http.DefaultClient).Get(h.gw.URL + "/connections")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("anonymous GET: %d", resp.StatusCode)
		}
	}
	if after := keys(); after != before {
		t.Fatalf("200 anonymous GETs stored %d keys", after-before)
	}

	// The answer of a sign-in, opened in the browser that started it.
	start := func(c *http.Client) string {
		t.Helper()
		signin := location(t, noRedirect(c), http.MethodGet, h.gw.URL+"/connections/keyed", nil)
		return location(t, noRedirect(c), http.MethodGet, signin, nil)
	}
	alice := h.browser(t, "alice", "")
	back := start(alice)
	// A tampered cookie (one byte of its sealed value changed), and the
	// cookie of another browser's sign-in, do not open this answer.
	u, _ := url.Parse(h.gw.URL)
	var signinCookie *http.Cookie
	for _, c := range alice.Jar.Cookies(&url.URL{Scheme: u.Scheme, Host: u.Host, Path: "/connections/signin/callback"}) {
		if c.Name == "codemode_connections_signin" {
			signinCookie = c
		}
	}
	if signinCookie == nil {
		t.Fatal("no sign-in cookie")
	}
	for name, value := range map[string]string{
		"tampered": signinCookie.Value[:20] + string(signinCookie.Value[20]^1) + signinCookie.Value[21:],
		"garbage":  "x",
	} {
		req, _ := http.NewRequest(http.MethodGet, back, nil)
		req.AddCookie(&http.Cookie{Name: signinCookie.Name, Value: value})
		resp, err := noRedirect(http.DefaultClient).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || !refusedWith(string(b), CodeOtherBrowser) {
			t.Fatalf("%s cookie: %d\n%s", name, resp.StatusCode, b)
		}
	}
	mallory := h.browser(t, "mallory", "")
	start(mallory) // mallory's own sign-in cookie, for another state
	if status, _, body := open(t, mallory, back); status != http.StatusForbidden || !refusedWith(body, CodeOtherBrowser) {
		t.Fatalf("alice's answer in mallory's browser: %d\n%s", status, body)
	}
	status, final, body := open(t, alice, back)
	if status != http.StatusOK || !strings.HasSuffix(final, "/connections/keyed") || !strings.Contains(body, `id="subject">alice<`) {
		t.Fatalf("alice's answer: %d %s\n%s", status, final, body)
	}
	if status, _, body := open(t, alice, back); status != http.StatusForbidden || !refusedWith(body, CodeOtherBrowser) {
		t.Fatalf("replayed answer: %d\n%s", status, body)
	}
	// An answer after the ten minutes: the browser kept its cookie (a
	// clock that differs from the gateway's), the sealed expiry decides.
	bob := h.browser(t, "bob", "")
	back = start(bob)
	h.clock.add(pendingTTL + time.Second)
	if status, _, body := open(t, bob, back); status != http.StatusBadRequest || !refusedWith(body, CodeStateInvalid) {
		t.Fatalf("expired sign-in: %d\n%s", status, body)
	}
}

// TestPageNoticeIsTrue: the notice that follows a connect or a disconnect
// (?connected=, ?disconnected=) is shown only when it is true: a link that
// names a connected service in ?disconnected= (or the reverse) showed
// "... is disconnected." above a live connection.
func TestPageNoticeIsTrue(t *testing.T) {
	h := newHarness(t, nil, nil, nil)
	alice := h.browser(t, "alice", "gh-alice")
	h.connect(t, alice)
	for q, want := range map[string]string{
		"?disconnected=forge": "",
		"?connected=keyed":    "",
		"?connected=forge":    "Fake Forge is connected.",
		"?disconnected=keyed": "keyed is disconnected.",
	} {
		_, _, body := open(t, alice, h.gw.URL+"/connections"+q)
		got := ""
		if i := strings.Index(body, `id="notice">`); i >= 0 {
			got = body[i+len(`id="notice">`):]
			got = got[:strings.Index(got, "<")]
		}
		if got != want {
			t.Errorf("%s: notice %q, want %q", q, got, want)
		}
	}
}

// TestPageSignInIssuerMismatch: a sign-in whose provider's metadata names
// another issuer when the code is redeemed (a gateway that had not read it
// before, or read it again) is refused with ISSUER_MISMATCH on the page
// (502) and in the log, as at its start; it was a 403 "Sign-in failed"
// without a code.
func TestPageSignInIssuerMismatch(t *testing.T) {
	h := newHarness(t, nil, nil, nil)
	c := noRedirect(h.browser(t, "from-another-issuer", ""))
	signin := location(t, c, http.MethodGet, h.gw.URL+"/connections", nil)
	back := location(t, c, http.MethodGet, signin, nil)
	resp, err := c.Get(back)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway || !refusedWith(string(b), CodeIssuerMismatch) || resp.Header.Get("Location") != "" {
		t.Fatalf("sign-in answer: %d %s", resp.StatusCode, b)
	}
	if h.logs.FilterMessage("connections page: sign-in refused").FilterField(zap.String("code", CodeIssuerMismatch)).Len() != 1 {
		t.Fatalf("refusal not logged with its code: %v", h.logs.All())
	}
}
