package oauth

import (
	"context"
	"net/http"
	"testing"

	"golang.org/x/oauth2"
)

// TestVerifierValidatesServerTokens shows the transparent-mode Verifier
// accepting our own server's access tokens through its discovery document
// and key set, over the network and in process, with the same claims as
// the server's VerifyAccessToken (which adds the revocation check).
func TestVerifierValidatesServerTokens(t *testing.T) {
	e := newAS(t, nil)
	cfg := e.oauth2(asClientID, asRedirect)
	pkce := oauth2.GenerateVerifier()
	tok, err := cfg.Exchange(e.ctx(), e.code(cfg, pkce), oauth2.VerifierOption(pkce))
	if err != nil {
		t.Fatalf("exchange: %v", err)
	}
	want, err := e.s.VerifyAccessToken(context.Background(), tok.AccessToken, asResource)
	if err != nil {
		t.Fatal(err)
	}
	for name, client := range map[string]*http.Client{
		"network":    e.srv.Client(),
		"in process": {Transport: HandlerTransport{Handler: e.s.Handler()}},
	} {
		t.Run(name, func(t *testing.T) {
			v, err := NewVerifier(VerifierConfig{Issuer: e.s.Issuer(), Audience: asResource},
				&VerifierOptions{HTTPClient: client, Now: e.clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			got, err := v.Verify(context.Background(), tok.AccessToken)
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			if got.Subject != want.Subject || got.ClientID != want.ClientID || got.Issuer != want.Issuer ||
				!got.ExpiresAt.Equal(want.ExpiresAt) || len(got.Scopes) != len(want.Scopes) {
				t.Fatalf("verifier %+v\nserver   %+v", got, want)
			}
			if _, err := v.VerifyAudience(context.Background(), tok.AccessToken, e.s.Issuer()); TokenReason(err) != ReasonWrongAudience {
				t.Fatalf("token bound to %s accepted for the issuer: %v", asResource, err)
			}
		})
	}
}
