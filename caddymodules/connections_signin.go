package caddymodules

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/codemode-gateway/caddy-codemode/credential"
	"github.com/codemode-gateway/caddy-codemode/oauth"
)

// oidcSignIn signs a browser in on the connections page with an OpenID
// Connect authorization code flow (PKCE, nonce) against the gateway's own
// authorization server (in process) or the transparent mode's provider,
// and reads who it is from the ID token.
type oidcSignIn struct {
	issuer       string
	clientID     string
	clientSecret string
	client       *http.Client
	verify       func(ctx context.Context, idToken, audience string) (*oauth.VerifiedToken, error)
	// revoke the sign-in's own grant afterwards (our own server: the page
	// needs the subject, not a session).
	revokeGrant bool

	mu        sync.Mutex
	endpoints *oauth.ProviderMetadata
}

// newSignIn is the sign-in of the auth mode in s.
func newSignIn(s *authShared, cfg *AuthConfig) (credential.SignIn, error) {
	switch {
	case s.server != nil:
		srv := s.server
		client := &http.Client{Transport: oauth.HandlerTransport{Handler: srv.Handler()}, Timeout: 15 * time.Second}
		v, err := oauth.NewVerifier(oauth.VerifierConfig{Issuer: srv.Issuer(), Audience: connectionsClientID},
			&oauth.VerifierOptions{HTTPClient: client})
		if err != nil {
			return nil, err
		}
		iss := srv.Issuer()
		return &oidcSignIn{issuer: iss, clientID: connectionsClientID, client: client, verify: v.VerifyAudience, revokeGrant: true,
			endpoints: &oauth.ProviderMetadata{Issuer: iss, AuthorizationEndpoint: iss + "/oauth/authorize", TokenEndpoint: iss + "/oauth/token",
				RevocationEndpoint: iss + "/oauth/revoke"}}, nil
	case s.verifier != nil:
		return &oidcSignIn{issuer: s.verifier.Issuer(), clientID: cfg.ClientID, clientSecret: cfg.ClientSecret,
			client: &http.Client{Timeout: 15 * time.Second}, verify: s.verifier.VerifyAudience}, nil
	}
	return nil, errors.New("no authorization server or identity provider to sign users in with")
}

// metadata returns the provider's endpoints, discovered on first use (the
// provider may be down when the gateway starts).
func (s *oidcSignIn) metadata(ctx context.Context) (*oauth.ProviderMetadata, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.endpoints != nil {
		return s.endpoints, nil
	}
	md, err := oauth.Discover(ctx, s.client, s.issuer)
	if oauth.ErrorCode(err) == oauth.CodeIssuerMismatch {
		// A document naming another issuer is not the provider's own (RFC
		// 8414 section 3.3, OpenID Connect Discovery 1.0 section 4.3): the
		// browser and the client secret would go where it says. Discover
		// passed over every such document. Not cached: the next sign-in
		// reads them again.
		return nil, &credential.Error{Code: credential.CodeIssuerMismatch,
			Message: err.Error(), Err: err}
	}
	if err != nil {
		return nil, err
	}
	if md.AuthorizationEndpoint == "" || md.TokenEndpoint == "" {
		return nil, fmt.Errorf("identity provider %s names no authorization or token endpoint", s.issuer)
	}
	s.endpoints = md
	return md, nil
}

// AuthCodeURL implements credential.SignIn.
func (s *oidcSignIn) AuthCodeURL(ctx context.Context, redirectURI, state, nonce, challenge string) (string, error) {
	md, err := s.metadata(ctx)
	if err != nil {
		return "", err
	}
	v := url.Values{"response_type": {"code"}, "client_id": {s.clientID}, "redirect_uri": {redirectURI}, "scope": {"openid"},
		"state": {state}, "nonce": {nonce}, "code_challenge": {challenge}, "code_challenge_method": {"S256"}}
	sep := "?"
	if strings.Contains(md.AuthorizationEndpoint, "?") {
		sep = "&"
	}
	return md.AuthorizationEndpoint + sep + v.Encode(), nil
}

// Exchange implements credential.SignIn: the code for tokens, the ID token
// checked (signature, issuer, audience, expiry, nonce), its subject.
func (s *oidcSignIn) Exchange(ctx context.Context, redirectURI, code, verifier, nonce string) (credential.Owner, error) {
	md, err := s.metadata(ctx)
	if err != nil {
		return credential.Owner{}, err
	}
	form := url.Values{"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {redirectURI}, "code_verifier": {verifier}}
	var tok struct {
		IDToken      string `json:"id_token"`
		AccessToken  string `json:"access_token"`
		RefreshToken string `json:"refresh_token"`
		Error        string `json:"error"`
	}
	status, err := s.post(ctx, md.TokenEndpoint, form, &tok)
	if err != nil {
		return credential.Owner{}, err
	}
	if status != http.StatusOK || tok.IDToken == "" {
		return credential.Owner{}, fmt.Errorf("the token endpoint answered %d %s without an ID token", status, tok.Error)
	}
	if s.revokeGrant {
		defer func() {
			for _, t := range []string{tok.RefreshToken, tok.AccessToken} {
				if t != "" {
					_, _ = s.post(context.WithoutCancel(ctx), md.RevocationEndpoint, url.Values{"token": {t}}, nil)
					break // revoking either ends the grant
				}
			}
		}()
	}
	id, err := s.verify(ctx, tok.IDToken, s.clientID)
	if err != nil {
		return credential.Owner{}, fmt.Errorf("ID token: %w", err)
	}
	if n, _ := id.Claims["nonce"].(string); n == "" || n != nonce {
		return credential.Owner{}, errors.New("ID token: nonce does not match the sign-in")
	}
	if id.Subject == "" {
		return credential.Owner{}, errors.New("ID token: no subject")
	}
	return credential.Owner{Issuer: id.Issuer, Subject: id.Subject}, nil
}

// post sends a form with the client's authentication and decodes the JSON
// answer into dst (nil: discarded).
func (s *oidcSignIn) post(ctx context.Context, endpoint string, form url.Values, dst any) (int, error) {
	if endpoint == "" {
		return 0, errors.New("no endpoint")
	}
	if s.clientSecret == "" {
		form.Set("client_id", s.clientID)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	if s.clientSecret != "" {
		req.SetBasicAuth(url.QueryEscape(s.clientID), url.QueryEscape(s.clientSecret))
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil || dst == nil {
		return resp.StatusCode, err
	}
	if err := json.Unmarshal(b, dst); err != nil {
		return resp.StatusCode, fmt.Errorf("the answer of %s is not JSON", endpoint)
	}
	return resp.StatusCode, nil
}
