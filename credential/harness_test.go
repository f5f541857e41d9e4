package credential

import (
	"context"
	"encoding/json"
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

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/codemode-gateway/caddy-codemode/credential/credentialtest"
	"github.com/codemode-gateway/caddy-codemode/internal/identity"
)

const testIssuer = "https://idp.test"

// testSignIn signs browsers in as the user named by their "user" cookie at
// the test gateway (set by /test-login), standing in for the gateway's
// authorization server.
type testSignIn struct{ base string }

func (s testSignIn) AuthCodeURL(_ context.Context, redirect, state, nonce, challenge string) (string, error) {
	return s.base + "/test-signin?" + url.Values{"redirect_uri": {redirect}, "state": {state}}.Encode(), nil
}

func (testSignIn) Exchange(_ context.Context, _, code, _, _ string) (Owner, error) {
	if code == "from-another-issuer" { // a provider whose metadata turned
		return Owner{}, &Error{Code: CodeIssuerMismatch, Message: "the discovery document names issuer \"https://other.test\""}
	}
	return Owner{Issuer: testIssuer, Subject: code}, nil
}

// clock is a settable clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// harness is a gateway serving the connections pages, a fake upstream and
// a log observer.
type harness struct {
	fake  *credentialtest.Fake
	gw    *httptest.Server
	m     *Manager
	clock *clock
	logs  *observer.ObservedLogs
	store Store
}

// forgeSpecs are an OAuth source and an API-key source on the fake.
func forgeSpecs(f *credentialtest.Fake) []Spec {
	return []Spec{
		{Service: "forge", Title: "Fake Forge", Mode: ModeUser, Kind: KindOAuth,
			OAuth: &OAuthClient{AuthorizationServer: f.URL, ClientID: f.ClientID, ClientSecret: f.ClientSecret, Scopes: []string{"read"}}},
		{Service: "keyed", Mode: ModeUserOrStatic, Kind: KindAPIKey, Apply: Apply{Header: "X-API-Key"}, Hint: "a key from the fake"},
	}
}

func newHarness(t testing.TB, store Store, keys *Keyring, fake *credentialtest.Fake) *harness {
	t.Helper()
	if fake == nil {
		fake = credentialtest.New()
		t.Cleanup(fake.Close)
	}
	return newHarnessWith(t, store, keys, fake, forgeSpecs(fake), nil)
}

// newHarnessWith is newHarness with the specs and the client the manager
// talks to upstreams with (nil: the default); each of opts changes the
// manager's options before it is made.
func newHarnessWith(t testing.TB, store Store, keys *Keyring, fake *credentialtest.Fake, specs []Spec, client *http.Client, opts ...func(*Options)) *harness {
	t.Helper()
	if store == nil {
		store = NewMemoryStore(nil)
	}
	if keys == nil {
		keys = keyring(t, newKey(t))
	}
	h := &harness{fake: fake, clock: &clock{t: time.Now()}, store: store}
	core, logs := observer.New(zap.DebugLevel)
	h.logs = logs
	mux := http.NewServeMux()
	h.gw = httptest.NewServer(mux)
	t.Cleanup(h.gw.Close)
	o := &Options{Store: store, Keys: keys, ConnectURL: h.gw.URL + "/connections",
		SignIn: testSignIn{base: h.gw.URL}, Logger: zap.New(core), Now: h.clock.now, HTTPClient: client}
	for _, f := range opts {
		f(o)
	}
	m, err := NewManager(specs, o)
	if err != nil {
		t.Fatal(err)
	}
	h.m = m
	mux.Handle("/connections", m.Handler())
	mux.Handle("/connections/", m.Handler())
	mux.HandleFunc("/test-login", func(w http.ResponseWriter, r *http.Request) {
		http.SetCookie(w, &http.Cookie{Name: "user", Value: r.URL.Query().Get("user"), Path: "/"})
	})
	mux.HandleFunc("/test-signin", func(w http.ResponseWriter, r *http.Request) {
		c, err := r.Cookie("user")
		if err != nil {
			http.Error(w, "nobody signed in", http.StatusUnauthorized)
			return
		}
		q := r.URL.Query()
		http.Redirect(w, r, q.Get("redirect_uri")+"?"+url.Values{"code": {c.Value}, "state": {q.Get("state")}}.Encode(), http.StatusFound)
	})
	return h
}

// browser is a user's browser: signed in at the gateway's identity
// provider as user and at the fake upstream as account.
func (h *harness) browser(t testing.TB, user, account string) *http.Client {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 10 * time.Second}
	for _, u := range []string{h.gw.URL + "/test-login?user=" + user, h.fake.URL + "/login?account=" + account} {
		resp, err := c.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	return c
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// open GETs a page and returns its status, final URL and body.
func open(t testing.TB, c *http.Client, u string) (int, string, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Request.URL.String(), string(b)
}

// post submits a form of the connections page.
func post(t testing.TB, c *http.Client, u string, form url.Values, header http.Header) (int, string, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, u, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Request.URL.String(), string(b)
}

// csrf signs the browser in (if needed) and returns the page's CSRF token.
func (h *harness) csrf(t testing.TB, c *http.Client) string {
	t.Helper()
	status, _, body := open(t, c, h.gw.URL+"/connections")
	m := csrfRE.FindStringSubmatch(body)
	if status != http.StatusOK || m == nil {
		t.Fatalf("connections page: %d %s", status, body)
	}
	return m[1]
}

// connect runs the OAuth connection of forge in the browser.
func (h *harness) connect(t testing.TB, c *http.Client) {
	t.Helper()
	status, final, body := post(t, c, h.gw.URL+"/connections/forge/connect", url.Values{"csrf": {h.csrf(t, c)}}, nil)
	if status != http.StatusOK || !strings.Contains(final, "connected=forge") || !strings.Contains(body, "Fake Forge is connected.") {
		t.Fatalf("connect: %d %s\n%s", status, final, body)
	}
}

// as is a context whose caller is user.
func as(user string) context.Context {
	return identity.With(context.Background(), &identity.Identity{Issuer: testIssuer, Subject: user})
}

// call sends GET path to the fake upstream with user's credential for
// service and returns the status and the account it answered.
func (h *harness) call(t *testing.T, ctx context.Context, service, path string) (int, string, error) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, h.fake.URL+path, nil)
	if _, err := h.m.Authorize(ctx, service, req); err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Account string `json:"account"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out.Account, nil
}
