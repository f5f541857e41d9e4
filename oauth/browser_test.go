package oauth

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"golang.org/x/oauth2"

	"github.com/codemode-gateway/caddy-codemode/internal/browsertest"
)

// browser starts a headless Chromium for one test.
func browser(t *testing.T) context.Context {
	return browsertest.Start(t, 60*time.Second)
}

// clientApp is the OAuth client's redirect target: it records what the
// browser brings back.
type clientApp struct {
	srv  *httptest.Server
	mu   sync.Mutex
	back url.Values
}

func newClientApp(t *testing.T) *clientApp {
	a := &clientApp{}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/callback" {
			http.NotFound(w, r) // the browser also asks for /favicon.ico
			return
		}
		a.mu.Lock()
		a.back = r.URL.Query()
		a.mu.Unlock()
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte(`<!doctype html><title>client</title><p id="done">back at the client</p>`))
	}))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *clientApp) query() url.Values {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.back
}

func TestBrowserLoginAndConsent(t *testing.T) {
	ctx := browser(t)
	app := newClientApp(t)
	redirect := app.srv.URL + "/callback"
	e := newAS(t, func(c *ServerConfig) {
		c.Clients = append(c.Clients, ClientConfig{ID: "browser-app", Name: "Browser App", RedirectURIs: []string{redirect}})
	})
	cfg := e.oauth2("browser-app", redirect)
	cfg.Scopes = []string{"mcp", "tools:read"}
	v := oauth2.GenerateVerifier()
	authURL := cfg.AuthCodeURL("browser-state", oauth2.S256ChallengeOption(v), oauth2.SetAuthURLParam("resource", asResource))

	var client, errText, consentURL, pageCookies string
	var scopes []string
	err := chromedp.Run(ctx,
		chromedp.Navigate(authURL),
		chromedp.WaitVisible(`#username`, chromedp.ByID),
		chromedp.Text(`#client`, &client, chromedp.ByID),
		// A wrong password first: the page says so and stays.
		chromedp.SendKeys(`#username`, asUser, chromedp.ByID),
		chromedp.SendKeys(`#password`, "wrong password", chromedp.ByID),
		chromedp.Click(`#submit`, chromedp.ByID),
		chromedp.WaitVisible(`#error`, chromedp.ByID),
		chromedp.Text(`#error`, &errText, chromedp.ByID),
		chromedp.SendKeys(`#username`, asUser, chromedp.ByID),
		chromedp.SendKeys(`#password`, asPassword, chromedp.ByID),
		chromedp.Click(`#submit`, chromedp.ByID),
		chromedp.WaitVisible(`#approve`, chromedp.ByID),
		chromedp.Evaluate(`Array.from(document.querySelectorAll('#scopes li')).map(li => li.textContent)`, &scopes),
		chromedp.Location(&consentURL),
		chromedp.Evaluate(`document.cookie`, &pageCookies),
		chromedp.Click(`#approve`, chromedp.ByID),
		chromedp.WaitVisible(`#done`, chromedp.ByID),
	)
	if err != nil {
		t.Fatalf("browser flow: %v", err)
	}
	if client != "Browser App" || !strings.Contains(errText, "Wrong username or password") {
		t.Fatalf("login page: client %q error %q", client, errText)
	}
	if strings.Join(scopes, " ") != "mcp tools:read" {
		t.Fatalf("consent lists %v", scopes)
	}
	// The sign-in secret is a cookie the page's scripts cannot read, and
	// in no URL of the browser's history.
	if strings.Contains(consentURL, "signin") || pageCookies != "" {
		t.Fatalf("consent page at %s, its scripts see cookies %q", consentURL, pageCookies)
	}
	back := app.query()
	if back.Get("state") != "browser-state" || back.Get("code") == "" {
		t.Fatalf("client got %v", back)
	}
	tok, err := cfg.Exchange(e.ctx(), back.Get("code"), oauth2.VerifierOption(v))
	if err != nil {
		t.Fatalf("exchange of the browser's code: %v", err)
	}
	cl, err := e.s.VerifyAccessToken(context.Background(), tok.AccessToken, asResource)
	if err != nil || cl.Subject != asUser || !cl.HasScope("tools:read") {
		t.Fatalf("%+v %v", cl, err)
	}
}

func TestBrowserDenyAndForgedCSRF(t *testing.T) {
	ctx := browser(t)
	app := newClientApp(t)
	redirect := app.srv.URL + "/callback"
	e := newAS(t, func(c *ServerConfig) {
		c.Clients = append(c.Clients, ClientConfig{ID: "browser-app", RedirectURIs: []string{redirect}})
	})
	cfg := e.oauth2("browser-app", redirect)
	authURL := func() string {
		return cfg.AuthCodeURL("s2", oauth2.S256ChallengeOption(oauth2.GenerateVerifier()))
	}

	// The user says no: the client hears access_denied.
	err := chromedp.Run(ctx,
		chromedp.Navigate(authURL()),
		chromedp.WaitVisible(`#username`, chromedp.ByID),
		chromedp.SendKeys(`#username`, asUser, chromedp.ByID),
		chromedp.SendKeys(`#password`, asPassword, chromedp.ByID),
		chromedp.Click(`#submit`, chromedp.ByID),
		chromedp.WaitVisible(`#deny`, chromedp.ByID),
		chromedp.Click(`#deny`, chromedp.ByID),
		chromedp.WaitVisible(`#done`, chromedp.ByID),
	)
	if err != nil {
		t.Fatal(err)
	}
	if q := app.query(); q.Get("error") != "access_denied" || q.Get("code") != "" || q.Get("state") != "s2" {
		t.Fatalf("deny: %v", q)
	}

	// A page whose CSRF token was altered is refused.
	var errText string
	err = chromedp.Run(ctx,
		chromedp.Navigate(authURL()),
		chromedp.WaitVisible(`#username`, chromedp.ByID),
		chromedp.Evaluate(`document.querySelector('#login input[name=csrf]').value = 'forged'`, nil),
		chromedp.SendKeys(`#username`, asUser, chromedp.ByID),
		chromedp.SendKeys(`#password`, asPassword, chromedp.ByID),
		chromedp.Click(`#submit`, chromedp.ByID),
		chromedp.WaitVisible(`#error`, chromedp.ByID),
		chromedp.Text(`#error`, &errText, chromedp.ByID),
	)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(errText, "not sent by this page") {
		t.Fatalf("forged CSRF: %q", errText)
	}
}
