package oauth

import (
	"context"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"golang.org/x/oauth2"
)

// TestSessionRevokedListeners: a revocation by the client (RFC 7009) and
// one by reuse detection tell the listeners whose session ended; an ended
// session is reported once; a removed listener hears nothing.
func TestSessionRevokedListeners(t *testing.T) {
	e := newAS(t, nil)
	var mu sync.Mutex
	var got []SessionRevoked
	remove := e.s.OnSessionRevoked(func(_ context.Context, ev SessionRevoked) {
		mu.Lock()
		got = append(got, ev)
		mu.Unlock()
	})
	cfg := e.oauth2(asClientID, asRedirect)

	tok := e.token(cfg)
	cl, err := e.s.VerifyAccessToken(context.Background(), tok.AccessToken, "")
	if err != nil {
		t.Fatal(err)
	}
	resp := e.postForm(e.srv.URL+"/oauth/revoke", url.Values{"token": {tok.RefreshToken}, "client_id": {asClientID}})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("revoke: %d", resp.StatusCode)
	}
	// Revoking what is already revoked reports nothing more.
	e.postForm(e.srv.URL+"/oauth/revoke", url.Values{"token": {tok.AccessToken}, "client_id": {asClientID}})

	tok = e.token(cfg)
	refresh := func(rt string) (*oauth2.Token, error) {
		return cfg.TokenSource(e.ctx(), &oauth2.Token{RefreshToken: rt, Expiry: time.Now().Add(-time.Minute)}).Token()
	}
	if _, err := refresh(tok.RefreshToken); err != nil {
		t.Fatal(err)
	}
	if _, err := refresh(tok.RefreshToken); !isOAuthError(err, "invalid_grant") {
		t.Fatalf("reuse: %v", err)
	}

	mu.Lock()
	if len(got) != 2 || got[0].SessionID != cl.SessionID || got[0].Subject != cl.Subject || got[0].ClientID != asClientID ||
		got[1].Reason != revokedRefreshReuse || got[1].Subject != cl.Subject {
		t.Fatalf("listeners heard %+v", got)
	}
	mu.Unlock()

	remove()
	tok = e.token(cfg)
	e.postForm(e.srv.URL+"/oauth/revoke", url.Values{"token": {tok.RefreshToken}, "client_id": {asClientID}})
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 {
		t.Fatalf("a removed listener heard %+v", got[2:])
	}
}
