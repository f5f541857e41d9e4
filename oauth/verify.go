package oauth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// Claims is what VerifyAccessToken returns: the same VerifiedToken the
// transparent-mode Verifier returns, so the authentication provider handles
// both modes alike. SessionID is set (the sid claim) for our tokens.
type Claims = VerifiedToken

type accessClaims struct {
	Issuer   string   `json:"iss"`
	Subject  string   `json:"sub"`
	Audience audience `json:"aud"`
	Expiry   int64    `json:"exp"`
	IssuedAt int64    `json:"iat"`
	ID       string   `json:"jti"`
	ClientID string   `json:"client_id"`
	Scope    string   `json:"scope"`
	SID      string   `json:"sid"`
	TokenUse string   `json:"token_use"`
}

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

var signatureAlgs = []jose.SignatureAlgorithm{jose.RS256, jose.ES256}

// parseAccessToken checks the signature against the key set and decodes
// the claims, without checking issuer, time, audience or revocation.
func (s *Server) parseAccessToken(token string) (*Claims, error) {
	if token == "" {
		return nil, &TokenError{Reason: ReasonMissing}
	}
	if c, kid, ok := s.verified.get(token); ok {
		// The token is byte for byte one whose signature verified; its
		// key must still be in the key set.
		if _, ok := s.keys.lookup(kid); ok {
			return c, nil
		}
		return nil, tokenErr(ReasonUnknownKey, "kid %q is no longer in the key set", kid)
	}
	if len(token) > 16<<10 || strings.Count(token, ".") != 2 {
		return nil, tokenErr(ReasonMalformed, "not a compact JWS")
	}
	jws, err := jose.ParseSigned(token, signatureAlgs)
	if err != nil {
		if strings.Contains(err.Error(), "algorithm") {
			return nil, tokenErr(ReasonBadAlgorithm, "algorithm not accepted")
		}
		return nil, tokenErr(ReasonMalformed, "not a signed JWT")
	}
	if len(jws.Signatures) != 1 {
		return nil, tokenErr(ReasonMalformed, "not a single-signature JWS")
	}
	hdr := jws.Signatures[0].Header
	key, ok := s.keys.lookup(hdr.KeyID)
	if !ok {
		return nil, tokenErr(ReasonUnknownKey, "kid %q is not in the key set", hdr.KeyID)
	}
	if hdr.Algorithm != string(key.alg) {
		return nil, tokenErr(ReasonBadAlgorithm, "alg %s does not match the key", hdr.Algorithm)
	}
	payload, err := jws.Verify(key.public)
	if err != nil {
		return nil, tokenErr(ReasonBadSignature, "")
	}
	if !isAccessTokenType(hdr.ExtraHeaders[jose.HeaderType]) {
		// RFC 9068 section 4: typ tells an access token from an ID token or
		// any other JWT signed with the same key.
		return nil, tokenErr(ReasonMalformed, "typ is not at+jwt")
	}
	var ac accessClaims
	if err := json.Unmarshal(payload, &ac); err != nil || ac.TokenUse != "access" || ac.SID == "" || ac.Subject == "" || ac.Expiry == 0 {
		return nil, tokenErr(ReasonMalformed, "not an access token of this server")
	}
	c := &Claims{
		Subject: ac.Subject, Issuer: ac.Issuer, Audience: ac.Audience, ClientID: ac.ClientID,
		Scopes: strings.Fields(ac.Scope), ID: ac.ID, SessionID: ac.SID,
		ExpiresAt: time.Unix(ac.Expiry, 0), IssuedAt: time.Unix(ac.IssuedAt, 0),
	}
	s.verified.put(token, c, hdr.KeyID)
	cp := *c
	cp.Audience, cp.Scopes = slices.Clone(cp.Audience), slices.Clone(cp.Scopes)
	return &cp, nil
}

// verifiedCache remembers the claims of tokens whose signature verified,
// keyed by the whole token, so that a client presenting the same token on
// every request pays for the signature once. Expiry, audience and session
// are still checked on every call; only the signature and decoding are
// skipped. Bounded: a full cache drops an arbitrary entry.
type verifiedCache struct {
	mu sync.Mutex
	m  map[string]verifiedEntry
}

type verifiedEntry struct {
	c   *Claims
	kid string
}

const verifiedCacheSize = 4096

func (vc *verifiedCache) get(token string) (*Claims, string, bool) {
	vc.mu.Lock()
	e, ok := vc.m[token]
	vc.mu.Unlock()
	if !ok {
		return nil, "", false
	}
	cp := *e.c
	cp.Audience, cp.Scopes = slices.Clone(cp.Audience), slices.Clone(cp.Scopes)
	return &cp, e.kid, true
}

func (vc *verifiedCache) put(token string, c *Claims, kid string) {
	vc.mu.Lock()
	defer vc.mu.Unlock()
	if vc.m == nil {
		vc.m = make(map[string]verifiedEntry)
	}
	if len(vc.m) >= verifiedCacheSize {
		for k := range vc.m {
			delete(vc.m, k)
			break
		}
	}
	vc.m[token] = verifiedEntry{c: c, kid: kid}
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
	c, err := s.parseAccessToken(token)
	if err != nil {
		return nil, err
	}
	if c.Issuer != s.cfg.issuer {
		return nil, tokenErr(ReasonWrongIssuer, "")
	}
	if !s.now().Before(c.ExpiresAt.Add(s.cfg.skew)) {
		return nil, tokenErr(ReasonExpired, "")
	}
	if aud != "" && !audienceContains(c.Audience, aud) {
		return nil, tokenErr(ReasonWrongAudience, "")
	}
	if _, err := s.store.Get(ctx, keySession(c.SessionID)); err != nil {
		if errors.Is(err, errNotFound) {
			return nil, tokenErr(ReasonRevoked, "the token's grant was revoked or has ended")
		}
		return nil, fmt.Errorf("%w: %w", ErrTokenStorage, err)
	}
	return c, nil
}

// isAccessTokenType accepts at+jwt and its media type form (RFC 9068
// section 2.1), in any case.
func isAccessTokenType(typ any) bool {
	t, _ := typ.(string)
	t = strings.ToLower(t)
	return t == AccessTokenType || t == "application/"+AccessTokenType
}

// audienceContains compares resource identifiers in canonical form, so a
// resource configured as https://gw.example.com accepts a token issued for
// https://gw.example.com/ (see CanonicalResource); an audience that is not
// a URL is compared as is.
func audienceContains(list []string, aud string) bool {
	want, ok := canonicalResource(aud)
	if !ok {
		return containsString(list, aud)
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
