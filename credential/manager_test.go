package credential

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codemode-gateway/caddy-codemode/credential/credentialtest"
	"github.com/codemode-gateway/caddy-codemode/guard/redistest"
)

// noSecretInLogs fails when a log line carries any token the fake issued
// or a key.
func (h *harness) noSecretInLogs(t *testing.T, extra ...string) {
	t.Helper()
	secrets := append(h.fake.Tokens(), extra...)
	for _, e := range h.logs.All() {
		line := e.Message + fmt.Sprint(e.ContextMap())
		for _, s := range secrets {
			if s != "" && strings.Contains(line, s) {
				t.Fatalf("log line carries a secret: %s", line)
			}
		}
	}
}

func wantCode(t *testing.T, err error, code string) *Error {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) || e.Code != code {
		t.Fatalf("got %v, want %s", err, code)
	}
	return e
}

// TestCallsAsEachUser: two users connect two accounts; every call, many at
// once, reaches the upstream with its own user's token.
func TestCallsAsEachUser(t *testing.T) {
	h := newHarness(t, nil, nil, nil)
	users := map[string]string{"alice": "gh-alice", "bob": "gh-bob"}
	for u, acct := range users {
		h.connect(t, h.browser(t, u, acct))
	}
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for range 20 {
		for u, acct := range users {
			wg.Add(1)
			go func() {
				defer wg.Done()
				status, got, err := h.call(t, as(u), "forge", "/api/whoami")
				if err != nil || status != 200 || got != acct {
					errs <- fmt.Errorf("%s: %d %q %v", u, status, got, err)
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	tokens := map[string][]string{"gh-alice": h.fake.AccessTokens("gh-alice"), "gh-bob": h.fake.AccessTokens("gh-bob")}
	for _, s := range h.fake.Seen() {
		want := tokens[s.Account]
		if len(want) != 1 || s.Credential != "Bearer "+want[0] {
			t.Fatalf("the upstream saw %q for %s", s.Credential, s.Account)
		}
	}
	if n := len(h.fake.Seen()); n != 40 {
		t.Fatalf("upstream saw %d calls, want 40", n)
	}
	h.noSecretInLogs(t)
}

func TestCredentialRequired(t *testing.T) {
	h := newHarness(t, nil, nil, nil)
	ctx := context.Background()
	req, _ := http.NewRequest(http.MethodGet, h.fake.URL+"/api/whoami", nil)
	_, err := h.m.Authorize(ctx, "forge", req)
	e := wantCode(t, err, CodeCredentialRequired)
	if e.ConnectURL != h.gw.URL+"/connections/forge" || !strings.Contains(e.Message, e.ConnectURL) || !strings.Contains(e.Message, "sign in") {
		t.Fatalf("anonymous: %+v", e)
	}
	_, err = h.m.Authorize(as("alice"), "forge", req)
	e = wantCode(t, err, CodeCredentialRequired)
	if !strings.Contains(e.Message, "not connected") || e.Transient {
		t.Fatalf("not connected: %+v", e)
	}
	if req.Header.Get("Authorization") != "" {
		t.Fatal("a refused request got a header")
	}
	// user_or_static without a credential: the request goes out as it is.
	req.Header.Set("X-API-Key", "shared-static-key")
	if ok, err := h.m.Authorize(as("alice"), "keyed", req); ok || err != nil {
		t.Fatalf("user_or_static fallback: %v %v", ok, err)
	}
	if ok, err := h.m.Authorize(ctx, "keyed", req); ok || err != nil || req.Header.Get("X-API-Key") != "shared-static-key" {
		t.Fatalf("user_or_static anonymous: %v %v", ok, err)
	}
	// A static source is not the manager's business.
	if ok, err := h.m.Authorize(as("alice"), "other", req); ok || err != nil {
		t.Fatalf("static source: %v %v", ok, err)
	}
}

func TestAPIKeyApplied(t *testing.T) {
	h := newHarness(t, nil, nil, nil)
	h.fake.AddAPIKey("alice-key-0123", "acct-a")
	c := h.browser(t, "alice", "")
	status, final, body := post(t, c, h.gw.URL+"/connections/keyed/api_key", url.Values{"csrf": {h.csrf(t, c)}, "api_key": {" alice-key-0123 "}}, nil)
	if status != 200 || !strings.Contains(final, "connected=keyed") || !strings.Contains(body, "keyed is connected.") {
		t.Fatalf("save key: %d %s %s", status, final, body)
	}
	if status, got, err := h.call(t, as("alice"), "keyed", "/api/key/whoami"); err != nil || status != 200 || got != "acct-a" {
		t.Fatalf("call with the key: %d %q %v", status, got, err)
	}
	// A key in a query parameter or a header with a scheme.
	for _, a := range []struct {
		apply Apply
		check func(*http.Request) bool
	}{
		{Apply{Query: "api_key"}, func(r *http.Request) bool {
			return r.URL.Query().Get("api_key") == "k" && r.URL.Query().Get("x") == "1"
		}},
		{Apply{}, func(r *http.Request) bool { return r.Header.Get("Authorization") == "Bearer k" }},
		{Apply{Scheme: "token"}, func(r *http.Request) bool { return r.Header.Get("Authorization") == "token k" }},
		{Apply{Scheme: "none"}, func(r *http.Request) bool { return r.Header.Get("Authorization") == "k" }},
		{Apply{Header: "X-Key"}, func(r *http.Request) bool { return r.Header.Get("X-Key") == "k" }},
	} {
		r, _ := http.NewRequest(http.MethodGet, "https://api.test/x?x=1", nil)
		apply(r, a.apply, "k")
		if !a.check(r) {
			t.Errorf("apply %+v: %v %v", a.apply, r.URL, r.Header)
		}
	}
	// Bad keys are refused.
	for _, bad := range []string{"", "two\nlines", strings.Repeat("k", maxAPIKey+1)} {
		status, _, _ := post(t, c, h.gw.URL+"/connections/keyed/api_key", url.Values{"csrf": {h.csrf(t, c)}, "api_key": {bad}}, nil)
		if status != http.StatusBadRequest {
			t.Errorf("key %.10q: %d", bad, status)
		}
	}
	h.noSecretInLogs(t, "alice-key-0123")
}

// TestRefreshRotates: an access token about to expire is refreshed once,
// the rotated refresh token replaces the old one, and the new access
// token goes out.
func TestRefreshRotates(t *testing.T) {
	h := newHarness(t, nil, nil, nil)
	h.connect(t, h.browser(t, "alice", "gh-alice"))
	first := h.fake.AccessTokens("gh-alice")
	h.clock.add(time.Hour - 30*time.Second) // inside the 1 minute before expiry
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if status, got, err := h.call(t, as("alice"), "forge", "/api/whoami"); err != nil || status != 200 || got != "gh-alice" {
				t.Errorf("call during refresh: %d %q %v", status, got, err)
			}
		}()
	}
	wg.Wait()
	if n := h.fake.Refreshes(); n != 1 {
		t.Fatalf("%d refreshes, want exactly 1", n)
	}
	rec, err := h.m.Vault().Get(context.Background(), Owner{testIssuer, "alice"}.Key(), "forge")
	if err != nil || rec.AccessToken == first[0] || rec.RefreshedAt.IsZero() {
		t.Fatalf("after refresh: %v", err)
	}
	// The calls after the refresh carry the new token.
	if _, _, err := h.call(t, as("alice"), "forge", "/api/whoami"); err != nil {
		t.Fatal(err)
	}
	seen := h.fake.Seen()
	if last := seen[len(seen)-1]; last.Credential != "Bearer "+rec.AccessToken {
		t.Fatalf("after the refresh the upstream saw %q", last.Credential)
	}
	if n := h.fake.Refreshes(); n != 1 {
		t.Fatalf("a fresh token was refreshed again: %d", n)
	}
	h.noSecretInLogs(t)
}

// TestRefreshOnceAcrossGateways: two gateways sharing a Redis refresh a
// user's token once between them, and both then use the new token.
func TestRefreshOnceAcrossGateways(t *testing.T) {
	c, prefix := redistest.Client(t)
	store := NewRedisStore(c, prefix+"credentials:")
	key := newKey(t)
	fake := credentialtest.New()
	t.Cleanup(fake.Close)
	a := newHarness(t, store, keyring(t, key), fake)
	b := newHarness(t, NewRedisStore(c, prefix+"credentials:"), keyring(t, key), fake)
	a.connect(t, a.browser(t, "alice", "gh-alice"))
	if status, got, err := b.call(t, as("alice"), "forge", "/api/whoami"); err != nil || status != 200 || got != "gh-alice" {
		t.Fatalf("gateway b uses the connection made on a: %d %q %v", status, got, err)
	}
	// Past the token's expiry on both clocks: whoever does not refresh
	// waits for the other's new token.
	a.clock.add(2 * time.Hour)
	b.clock.add(2 * time.Hour)
	fake.SetTokenTTL(3 * time.Hour)
	var wg sync.WaitGroup
	for i := range 20 {
		g := a
		if i%2 == 1 {
			g = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, _, err := g.call(t, as("alice"), "forge", "/api/whoami"); err != nil {
				t.Errorf("call: %v", err)
			}
		}()
	}
	wg.Wait()
	if n := fake.Refreshes(); n != 1 {
		t.Fatalf("%d refreshes across two gateways, want 1", n)
	}
	for _, s := range fake.Seen() {
		if s.Account != "gh-alice" {
			t.Fatalf("a call went out with a dead token: %+v", s)
		}
	}
}

// TestRefreshRefusedNeedsReconnect: an upstream that refuses the refresh
// (grant revoked there) ends the connection: CREDENTIAL_REQUIRED, record
// gone.
func TestRefreshRefusedNeedsReconnect(t *testing.T) {
	h := newHarness(t, nil, nil, nil)
	h.connect(t, h.browser(t, "alice", "gh-alice"))
	rec, _ := h.m.Vault().Get(context.Background(), Owner{testIssuer, "alice"}.Key(), "forge")
	revokeAt(t, h.fake, rec.RefreshToken)
	h.clock.add(2 * time.Hour)
	_, _, err := h.call(t, as("alice"), "forge", "/api/whoami")
	wantCode(t, err, CodeCredentialRequired)
	if _, err := h.m.Vault().Get(context.Background(), Owner{testIssuer, "alice"}.Key(), "forge"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the refused connection is still stored: %v", err)
	}
	h.noSecretInLogs(t)
}

func revokeAt(t *testing.T, f *credentialtest.Fake, token string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, f.URL+"/revoke", strings.NewReader(url.Values{"token": {token}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(f.ClientID, f.ClientSecret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}

// TestDisconnectAndForget: a disconnect revokes the tokens upstream and
// refuses the next call; Forget (gateway session revoked) clears every
// connection of the user and no other user's.
func TestDisconnectAndForget(t *testing.T) {
	h := newHarness(t, nil, nil, nil)
	alice, bob := h.browser(t, "alice", "gh-alice"), h.browser(t, "bob", "gh-bob")
	h.connect(t, alice)
	h.connect(t, bob)
	rec, _ := h.m.Vault().Get(context.Background(), Owner{testIssuer, "alice"}.Key(), "forge")
	status, final, body := post(t, alice, h.gw.URL+"/connections/forge/disconnect", url.Values{"csrf": {h.csrf(t, alice)}}, nil)
	if status != 200 || !strings.Contains(final, "disconnected=forge") || !strings.Contains(body, "not connected") {
		t.Fatalf("disconnect: %d %s", status, final)
	}
	revoked := strings.Join(h.fake.Revoked(), " ")
	if !strings.Contains(revoked, rec.RefreshToken) || !strings.Contains(revoked, rec.AccessToken) {
		t.Fatal("disconnect did not revoke both tokens at the upstream")
	}
	_, _, err := h.call(t, as("alice"), "forge", "/api/whoami")
	wantCode(t, err, CodeCredentialRequired)
	if _, got, err := h.call(t, as("bob"), "forge", "/api/whoami"); err != nil || got != "gh-bob" {
		t.Fatalf("bob after alice's disconnect: %q %v", got, err)
	}
	if err := h.m.Forget(context.Background(), Owner{testIssuer, "bob"}); err != nil {
		t.Fatal(err)
	}
	_, _, err = h.call(t, as("bob"), "forge", "/api/whoami")
	wantCode(t, err, CodeCredentialRequired)
	h.noSecretInLogs(t)
}

func TestSpecValidate(t *testing.T) {
	ok := Spec{Service: "gh", Mode: ModeUser, Kind: KindOAuth, OAuth: &OAuthClient{ClientID: "c", AuthorizationServer: "https://github.com"}}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mutate := range map[string]func(*Spec){
		"no service":  func(s *Spec) { s.Service = "" },
		"reserved":    func(s *Spec) { s.Service = "callback" },
		"static mode": func(s *Spec) { s.Mode = ModeStatic },
		"bad kind":    func(s *Spec) { s.Kind = "password" },
		"no client, endpoints configured": func(s *Spec) {
			s.OAuth.ClientID, s.OAuth.AuthorizationEndpoint, s.OAuth.TokenEndpoint = "", "https://a.test/authorize", "https://a.test/token"
		},
		"secret, no client": func(s *Spec) { s.OAuth.ClientID, s.OAuth.ClientSecret = "", "s" },
		"no server":         func(s *Spec) { s.OAuth.AuthorizationServer = "" },
		"relative url":      func(s *Spec) { s.OAuth.TokenEndpoint = "/token" },
		"header+query":      func(s *Spec) { s.Apply = Apply{Header: "X", Query: "q"} },
		"bad header":        func(s *Spec) { s.Apply.Header = "X Y" },
		"api_key+oauth":     func(s *Spec) { s.Kind = KindAPIKey },
		"scheme with sp":    func(s *Spec) { s.Apply.Scheme = "a b" },
	} {
		s := ok
		o := *ok.OAuth
		s.OAuth = &o
		mutate(&s)
		if err := s.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	registers := ok
	registers.OAuth = &OAuthClient{AuthorizationServer: "https://github.com"}
	if err := registers.Validate(); err != nil {
		t.Errorf("no client_id, metadata to register from: %v", err)
	}
	if _, err := NewManager([]Spec{ok, ok}, &Options{Store: NewMemoryStore(nil), Keys: keyring(t, newKey(t))}); err == nil {
		t.Error("a service configured twice")
	}
}
