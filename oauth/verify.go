package oauth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	jose "github.com/go-jose/go-jose/v4"
)

// Claims is what VerifyAccessToken returns: the same VerifiedToken the
// transparent-mode Verifier returns, so the authentication provider handles
// both modes alike. SessionID is set (the sid claim) for our tokens.
type Claims = VerifiedToken

// audience accepts both forms of aud: a string or an array, and writes a
// single audience as a string, the form most verifiers compare directly.
type audience []string

func (a audience) MarshalJSON() ([]byte, error) {
	if len(a) == 1 {
		return json.Marshal(a[0])
	}
	return json.Marshal([]string(a))
}

func (a *audience) UnmarshalJSON(b []byte) error {
	var one string
	if json.Unmarshal(b, &one) == nil {
		*a = []string{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return err
	}
	*a = many
	return nil
}

// signatureAlgs are the algorithms our keys sign with.
var signatureAlgs = []jose.SignatureAlgorithm{jose.RS256, jose.ES256}

// ringKeys is the KeySource of our own tokens: the key ring, in process.
type ringKeys struct{ kr *keyRing }

func (r ringKeys) Keys(_ context.Context, kid string) ([]jose.JSONWebKey, error) {
	k, ok := r.kr.lookup(kid)
	if !ok {
		return nil, tokenErr(ReasonUnknownKey, "kid %q is not in the key set", kid)
	}
	return []jose.JSONWebKey{{Key: k.public, KeyID: k.id, Algorithm: string(k.alg), Use: "sig"}}, nil
}

// Generation is the rotation period: the published keys change with it.
func (r ringKeys) Generation() any {
	if r.kr.rotation <= 0 {
		return int64(0)
	}
	return r.kr.period(r.kr.now())
}

// newTokenVerifier is the verifier of our own access tokens: the one JWT
// verifier of the package (Verifier) on the key ring, requiring the RFC 9068
// typ, with refresh.skew as leeway.
func (s *Server) newTokenVerifier() (*Verifier, error) {
	leeway := s.cfg.skew
	if leeway == 0 {
		leeway = -1 // none
	}
	algs := make([]string, len(signatureAlgs))
	for i, a := range signatureAlgs {
		algs[i] = string(a)
	}
	return NewVerifier(VerifierConfig{Issuer: s.cfg.issuer, Audience: s.cfg.issuer, Algorithms: algs,
		Leeway: leeway, TokenType: AccessTokenType}, &VerifierOptions{Keys: ringKeys{s.keys}, Now: s.now, Logger: s.log})
}

// parseAccessToken verifies the signature and typ of one of our access
// tokens and decodes its claims, without checking time, audience or
// revocation (revocation reads a token whatever they are).
func (s *Server) parseAccessToken(ctx context.Context, token string) (*Claims, error) {
	c, err := s.verifier.verify(ctx, token, "", checks{anyAudience: true, anyTime: true})
	if err != nil {
		return nil, err
	}
	if use, _ := c.Claims["token_use"].(string); use != "access" || c.SessionID == "" || c.Subject == "" {
		return nil, tokenErr(ReasonMalformed, "not an access token of this server")
	}
	return c, nil
}

// ErrTokenStorage is returned (wrapped) when the session of a token cannot
// be checked because the token storage fails: a server-side failure, not a
// bad token.
var ErrTokenStorage = errors.New("token storage unavailable")

// VerifyAccessToken validates an access token this server issued: the
// signature against the current key set (by kid), the issuer, the expiry
// (with refresh.skew_seconds), the audience when one is given (RFC 8707:
// the resource the token is presented to), and that its session is still
// live (not revoked, not ended by refresh-token reuse). A rejected token is
// a *TokenError whose Reason is one of the Reason* constants (ReasonRevoked
// included); a storage failure wraps ErrTokenStorage.
func (s *Server) VerifyAccessToken(ctx context.Context, token, aud string) (*Claims, error) {
	c, err := s.verifier.verify(ctx, token, aud, checks{anyAudience: aud == ""})
	if err != nil {
		return nil, err
	}
	if use, _ := c.Claims["token_use"].(string); use != "access" || c.SessionID == "" || c.Subject == "" {
		return nil, tokenErr(ReasonMalformed, "not an access token of this server")
	}
	if _, err := s.store.Get(ctx, keySession(c.SessionID)); err != nil {
		if errors.Is(err, errNotFound) {
			return nil, tokenErr(ReasonRevoked, "the token's grant was revoked or has ended")
		}
		return nil, fmt.Errorf("%w: %w", ErrTokenStorage, err)
	}
	return c, nil
}

// audienceContains compares resource identifiers in canonical form, so a
// resource configured as https://gw.example.com accepts a token issued for
// https://gw.example.com/ (see CanonicalResource); an audience that is not
// a URL is compared as is.
func audienceContains(list []string, aud string) bool {
	// The same text is the same resource in either form: no URL parsing
	// for the common case.
	if containsString(list, aud) {
		return true
	}
	want, ok := canonicalResource(aud)
	if !ok {
		return false
	}
	for _, a := range list {
		if c, ok := canonicalResource(a); ok && c == want {
			return true
		}
	}
	return false
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
