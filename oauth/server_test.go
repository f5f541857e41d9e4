package oauth

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
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
	"golang.org/x/crypto/bcrypt"
	"golang.org/x/oauth2"
)

// fakeNow is the injected clock of the authorization-server tests.
type fakeNow struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeNow) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeNow) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

var (
	testKeyOnce sync.Once
	testKeyJWK  string
	testHash    string
)

const (
	asUser      = "alice"
	asPassword  = "correct horse battery staple"
	asClientID  = "cli"
	asRedirect  = "http://127.0.0.1:9999/callback"
	asResource  = "https://gateway.example.test/mcp"
	asSecretID  = "conf"
	asSecret    = "s3cret-client-secret-value"
	asConfRedir = "https://app.example.test/cb"
)

func testKey(t testing.TB) (string, string) {
	testKeyOnce.Do(func() {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			panic(err)
		}
		if testKeyJWK, err = MarshalSigningKeyJWK(k); err != nil {
			panic(err)
		}
		h, err := bcrypt.GenerateFromPassword([]byte(asPassword), bcrypt.MinCost)
		if err != nil {
			panic(err)
		}
		testHash = string(h)
	})
	return testKeyJWK, testHash
}

// asEnv is one authorization server on a real TLS socket.
type asEnv struct {
	t     testing.TB
	srv   *httptest.Server
	s     *Server
	clock *fakeNow
	http  *http.Client // the user's browser: keeps cookies, does not follow redirects
	logs  *observer.ObservedLogs
	slog  *lockedBuffer      // what op logs through slog's default logger
	mount func(http.Handler) // replaces what the TLS server serves
}

// lockedBuffer collects op's slog output; handlers may write concurrently.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// captureSlog routes slog's default logger, which op logs its errors to,
// into a buffer for the rest of the test.
func captureSlog(t testing.TB) *lockedBuffer {
	buf := &lockedBuffer{}
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Cleanup(func() { slog.SetDefault(prev) })
	return buf
}

func newAS(t testing.TB, mutate func(*ServerConfig)) *asEnv {
	t.Helper()
	jwk, hash := testKey(t)
	var h http.Handler = http.NotFoundHandler()
	var mu sync.RWMutex
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.RLock()
		hh := h
		mu.RUnlock()
		hh.ServeHTTP(w, r)
	}))
	srv.StartTLS()
	t.Cleanup(srv.Close)
	cfg := ServerConfig{
		Issuer:  srv.URL,
		Local:   LocalConfig{SignKey: jwk},
		Refresh: RefreshConfig{Enabled: true, AccessTokenTTL: 3600, RefreshTokenTTL: 7 * 86400},
		Consent: ConsentConfig{Enabled: true},
		Users:   []User{{Username: asUser, PasswordHash: hash}},
		Clients: []ClientConfig{
			{ID: asClientID, Name: "Test CLI", RedirectURIs: []string{asRedirect}},
			{ID: asSecretID, Secret: asSecret, RedirectURIs: []string{asConfRedir}},
		},
		Scopes:    []string{"mcp", "tools:read"},
		Resources: []string{asResource},
	}
	if mutate != nil {
		mutate(&cfg)
	}
	// op computes expires_in from the real clock, so the injected one
	// starts at the real time and only moves forward.
	clk := &fakeNow{t: time.Now().Truncate(time.Second)}
	core, logs := observer.New(zap.DebugLevel)
	s, err := NewServer(cfg, &ServerOptions{Logger: zap.New(core), Now: clk.Now, Metrics: NewMetrics()})
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	mu.Lock()
	h = s.Handler()
	mu.Unlock()
	c := srv.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	c.Jar, _ = cookiejar.New(nil) // the user's browser keeps the sign-in cookie
	mount := func(hh http.Handler) {
		mu.Lock()
		h = hh
		mu.Unlock()
	}
	return &asEnv{t: t, srv: srv, s: s, clock: clk, http: c, logs: logs, slog: captureSlog(t), mount: mount}
}

func (e *asEnv) oauth2(clientID, redirect string) *oauth2.Config {
	return &oauth2.Config{
		ClientID:    clientID,
		RedirectURL: redirect,
		Scopes:      []string{"mcp"},
		Endpoint: oauth2.Endpoint{
			AuthURL:   e.srv.URL + "/oauth/authorize",
			TokenURL:  e.srv.URL + "/oauth/token",
			AuthStyle: oauth2.AuthStyleInParams,
		},
	}
}

func (e *asEnv) ctx() context.Context {
	return context.WithValue(context.Background(), oauth2.HTTPClient, e.http)
}

func (e *asEnv) get(u string) *http.Response {
	e.t.Helper()
	resp, err := e.http.Get(u)
	if err != nil {
		e.t.Fatalf("GET %s: %v", u, err)
	}
	return resp
}

func (e *asEnv) postForm(u string, v url.Values) *http.Response {
	e.t.Helper()
	resp, err := e.http.PostForm(u, v)
	if err != nil {
		e.t.Fatalf("POST %s: %v", u, err)
	}
	return resp
}

func body(t testing.TB, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func location(t testing.TB, resp *http.Response, want int) *url.URL {
	t.Helper()
	if resp.StatusCode != want {
		t.Fatalf("status %d, want %d; body: %s", resp.StatusCode, want, body(t, resp))
	}
	resp.Body.Close()
	u, err := resp.Location()
	if err != nil {
		t.Fatalf("no Location: %v", err)
	}
	return u
}

var hiddenRE = regexp.MustCompile(`name="(id|csrf)" value="([^"]*)"`)

func hidden(t testing.TB, page string) (id, csrf string) {
	t.Helper()
	for _, m := range hiddenRE.FindAllStringSubmatch(page, -1) {
		if m[1] == "id" {
			id = m[2]
		} else {
			csrf = m[2]
		}
	}
	if id == "" || csrf == "" {
		t.Fatalf("no id/csrf in page: %s", page)
	}
	return id, csrf
}

// signIn follows an authorization URL through login and consent and
// returns the redirect back to the client.
func (e *asEnv) signIn(authURL string) *url.URL {
	e.t.Helper()
	loginURL := location(e.t, e.get(authURL), http.StatusFound)
	if loginURL.Path != "/oauth/login" {
		e.t.Fatalf("authorize redirected to %s, want the login page", loginURL)
	}
	page := body(e.t, e.get(e.srv.URL+loginURL.RequestURI()))
	id, csrf := hidden(e.t, page)
	next := location(e.t, e.postForm(e.srv.URL+"/oauth/login", url.Values{"id": {id}, "csrf": {csrf}, "username": {asUser}, "password": {asPassword}}), http.StatusSeeOther)
	if next.Path == "/oauth/consent" {
		page = body(e.t, e.get(e.srv.URL+next.RequestURI()))
		if !strings.Contains(page, "<li>mcp</li>") {
			e.t.Fatalf("consent page does not list the scope: %s", page)
		}
		id, csrf = hidden(e.t, page)
		next = location(e.t, e.postForm(e.srv.URL+"/oauth/consent", url.Values{"id": {id}, "csrf": {csrf}, "decision": {"approve"}}), http.StatusSeeOther)
	}
	if next.Path != "/oauth/authorize/callback" {
		e.t.Fatalf("login led to %s, want the callback", next)
	}
	return location(e.t, e.get(e.srv.URL+next.RequestURI()), http.StatusFound)
}

// code runs the whole browser part for the public client and returns the
// authorization code.
func (e *asEnv) code(cfg *oauth2.Config, verifier string, opts ...oauth2.AuthCodeOption) string {
	e.t.Helper()
	opts = append([]oauth2.AuthCodeOption{oauth2.S256ChallengeOption(verifier), oauth2.SetAuthURLParam("resource", asResource)}, opts...)
	back := e.signIn(cfg.AuthCodeURL("st-123", opts...))
	if got := back.Query().Get("iss"); got != e.s.Issuer() {
		e.t.Fatalf("iss %q in the authorization response, want the issuer (RFC 9207)", got)
	}
	if got := back.Query().Get("state"); got != "st-123" {
		e.t.Fatalf("state %q, want st-123 (redirect %s)", got, back)
	}
	c := back.Query().Get("code")
	if c == "" {
		e.t.Fatalf("no code in %s", back)
	}
	return c
}

// token signs in with a fresh PKCE verifier and exchanges the code.
func (e *asEnv) token(cfg *oauth2.Config) *oauth2.Token {
	e.t.Helper()
	v := oauth2.GenerateVerifier()
	tok, err := cfg.Exchange(e.ctx(), e.code(cfg, v), oauth2.VerifierOption(v))
	if err != nil {
		e.t.Fatal(err)
	}
	return tok
}

func TestFullFlowPublicClient(t *testing.T) {
	e := newAS(t, nil)
	cfg := e.oauth2(asClientID, asRedirect)
	verifier := oauth2.GenerateVerifier()
	code := e.code(cfg, verifier)

	tok, err := cfg.Exchange(e.ctx(), code, oauth2.VerifierOption(verifier))
	if err != nil {
		t.Fatalf("exchange: %v", err)
	}
	if tok.RefreshToken == "" || tok.AccessToken == "" || tok.TokenType != "Bearer" {
		t.Fatalf("token response %+v", tok)
	}
	if d := time.Until(tok.Expiry); d < 50*time.Minute || d > 61*time.Minute {
		// expires_in is computed by op from the real clock against our exp.
		t.Logf("expiry in %v", d)
	}
	cl, err := e.s.VerifyAccessToken(context.Background(), tok.AccessToken, asResource)
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	if cl.Subject != asUser || cl.ClientID != asClientID || !cl.HasScope("mcp") || cl.HasScope("offline_access") || cl.SessionID == "" {
		t.Fatalf("claims %+v", cl)
	}
	if want := e.clock.Now().Add(time.Hour).Unix(); cl.ExpiresAt.Unix() != want {
		t.Fatalf("exp %v, want access_token_ttl after the injected now", cl.ExpiresAt)
	}

	// Refresh rotates: a new refresh token, and the new access token works.
	ts := cfg.TokenSource(e.ctx(), &oauth2.Token{RefreshToken: tok.RefreshToken, Expiry: time.Now().Add(-time.Minute)})
	tok2, err := ts.Token()
	if err != nil {
		t.Fatalf("refresh: %v", err)
	}
	if tok2.RefreshToken == "" || tok2.RefreshToken == tok.RefreshToken {
		t.Fatalf("refresh token not rotated")
	}
	cl2, err := e.s.VerifyAccessToken(context.Background(), tok2.AccessToken, asResource)
	if err != nil || cl2.SessionID != cl.SessionID {
		t.Fatalf("refreshed token: %v %+v", err, cl2)
	}

	// Revocation (RFC 7009) of the refresh token ends the whole grant.
	resp := e.postForm(e.srv.URL+"/oauth/revoke", url.Values{"token": {tok2.RefreshToken}, "client_id": {asClientID}})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("revoke: %d %s", resp.StatusCode, body(t, resp))
	}
	resp.Body.Close()
	if _, err := e.s.VerifyAccessToken(context.Background(), tok2.AccessToken, asResource); TokenReason(err) != ReasonRevoked {
		t.Fatalf("after revocation: %v, want revoked", err)
	}
	ts = cfg.TokenSource(e.ctx(), &oauth2.Token{RefreshToken: tok2.RefreshToken, Expiry: time.Now().Add(-time.Minute)})
	if _, err := ts.Token(); !isOAuthError(err, "invalid_grant") {
		t.Fatalf("refresh after revocation: %v, want invalid_grant", err)
	}
	// Unknown tokens are fine (RFC 7009 section 2.2).
	resp = e.postForm(e.srv.URL+"/oauth/revoke", url.Values{"token": {"nonsense"}, "client_id": {asClientID}})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("revoke unknown: %d", resp.StatusCode)
	}
	resp.Body.Close()
	e.assertNoSecretsLogged(code, verifier, tok.AccessToken, tok.RefreshToken, tok2.AccessToken, tok2.RefreshToken, asPassword)
}

func isOAuthError(err error, code string) bool {
	var re *oauth2.RetrieveError
	return errors.As(err, &re) && re.ErrorCode == code
}

func (e *asEnv) assertNoSecretsLogged(secrets ...string) {
	e.t.Helper()
	if e.logs.Len() == 0 {
		e.t.Fatal("no log lines captured: the check would prove nothing")
	}
	for _, entry := range e.logs.All() {
		line := entry.Message
		for k, v := range entry.ContextMap() {
			b, _ := json.Marshal(v)
			line += " " + k + "=" + string(b)
		}
		for _, s := range secrets {
			if s != "" && strings.Contains(line, s) {
				e.t.Errorf("log line leaks a secret: %s", line)
			}
		}
	}
	op := e.slog.String()
	for _, s := range secrets {
		if s != "" && strings.Contains(op, s) {
			e.t.Errorf("op's slog output leaks a secret: %s", op)
		}
	}
}
