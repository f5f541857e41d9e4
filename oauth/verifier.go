package oauth

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"go.uber.org/zap"
)

// Reasons carried by a TokenError. They are stable: logs, metrics labels and
// the Caddy provider's placeholders use them as they are.
const (
	ReasonMissing       = "missing_token"  // no bearer token in the request
	ReasonMalformed     = "malformed"      // not a compact JWS, or claims that are not JSON
	ReasonBadAlgorithm  = "bad_algorithm"  // alg none, HMAC, or an algorithm not allowed
	ReasonUnknownKey    = "unknown_key"    // kid not in the key set, even after a refresh
	ReasonBadSignature  = "bad_signature"  // signature does not verify with the key
	ReasonExpired       = "expired"        // exp (plus leeway) is in the past, or exp is missing
	ReasonNotYetValid   = "not_yet_valid"  // nbf or iat (minus leeway) is in the future
	ReasonWrongIssuer   = "wrong_issuer"   // iss differs from the expected issuer
	ReasonWrongAudience = "wrong_audience" // aud does not contain the expected audience
	ReasonRevoked       = "revoked"        // our server ended the token's session (revocation, refresh reuse)
)

// Reasons are all the reasons of a TokenError, for metrics that export
// every label value from the start.
var Reasons = []string{ReasonMissing, ReasonMalformed, ReasonBadAlgorithm, ReasonUnknownKey, ReasonBadSignature,
	ReasonExpired, ReasonNotYetValid, ReasonWrongIssuer, ReasonWrongAudience, ReasonRevoked}

// ErrKeySetUnavailable is returned (wrapped) when the provider's discovery
// document or key set cannot be fetched and no cached keys exist. It is a
// server-side failure, not a bad token.
var ErrKeySetUnavailable = errors.New("key set unavailable")

// TokenError is a rejected bearer token. Code is always "invalid_token"
// (RFC 6750 §3.1); Reason says why, one of the Reason* constants.
type TokenError struct {
	Reason string
	Err    error
}

// Code returns the RFC 6750 error code, "invalid_token".
func (e *TokenError) Code() string { return "invalid_token" }

func (e *TokenError) Error() string {
	if e.Err == nil {
		return "invalid_token: " + e.Reason
	}
	return "invalid_token: " + e.Reason + ": " + e.Err.Error()
}

func (e *TokenError) Unwrap() error { return e.Err }

// TokenReason returns the Reason of a *TokenError in err's chain, or "" when
// err is not a token rejection.
func TokenReason(err error) string {
	var te *TokenError
	if errors.As(err, &te) {
		return te.Reason
	}
	return ""
}

func tokenErr(reason string, format string, args ...any) error {
	var err error
	if format != "" {
		err = fmt.Errorf(format, args...)
	}
	return &TokenError{Reason: reason, Err: err}
}

// VerifiedToken is what a valid access token says about its bearer. It maps
// onto the broker's AuthResult: UserID is the subject, Permissions the scopes.
type VerifiedToken struct {
	// Subject is the sub claim: the user (or, for client credentials, the client).
	Subject string `json:"sub"`
	// Issuer is the iss claim.
	Issuer string `json:"iss"`
	// Audience is the aud claim.
	Audience []string `json:"aud"`
	// ClientID is client_id (RFC 9068), else azp.
	ClientID string `json:"client_id,omitempty"`
	// Scopes are the space-separated scope claim, or scp (string or list).
	Scopes []string `json:"scopes,omitempty"`
	// TenantID is tenant_id, else tid.
	TenantID string `json:"tenant_id,omitempty"`
	// ID is the jti claim.
	ID string `json:"jti,omitempty"`
	// SessionID is the grant of a token our own server issued (sid).
	// Empty for an external provider's tokens.
	SessionID string `json:"sid,omitempty"`
	// ExpiresAt, IssuedAt and NotBefore are the exp, iat and nbf claims (zero when absent).
	ExpiresAt time.Time `json:"exp"`
	IssuedAt  time.Time `json:"iat,omitzero"`
	NotBefore time.Time `json:"nbf,omitzero"`
	// Claims holds every claim of the token as decoded JSON. It may be
	// shared with the Verifier's result cache: read it, do not modify it.
	Claims map[string]any `json:"-"`
}

// HasScope reports whether the token grants scope s.
func (t *VerifiedToken) HasScope(s string) bool { return slices.Contains(t.Scopes, s) }

// VerifierConfig says whose tokens a Verifier accepts.
type VerifierConfig struct {
	// Issuer is the identity provider's issuer URL (IDP_PROVIDER_URL). Its
	// discovery document is read from Issuer + /.well-known/openid-configuration,
	// else from the RFC 8414 /.well-known/oauth-authorization-server location.
	// The iss claim of every token must equal it (a trailing slash is ignored).
	// Required.
	Issuer string

	// Audience is the value the aud claim must contain (expectedAudience,
	// IDP_EXPECTED_AUDIENCE; for our own server, the protected resource's URL).
	// Required: a token minted for another service is never accepted.
	Audience string

	// JWKSURL skips discovery and reads the key set from this URL. Optional.
	JWKSURL string

	// Algorithms are the accepted signature algorithms. Default: RS256,
	// RS384, RS512, PS256, PS384, PS512, ES256, ES384, ES512, EdDSA. "none" and
	// the HMAC algorithms are always refused.
	Algorithms []string

	// Leeway is the clock skew tolerated on exp, nbf and iat. Default 30s;
	// negative means none.
	Leeway time.Duration

	// TokenType, when set, is the typ header every token must carry, e.g.
	// "at+jwt" (RFC 9068: it tells an access token from an ID token signed
	// with the same key); compared without case, the "application/" form
	// accepted. Default: not checked (many providers do not set it).
	TokenType string

	// CacheTTL is how long a fetched key set is used before it is fetched
	// again on the next verification. Default 1h. A failed refetch keeps the
	// old keys (and is logged).
	CacheTTL time.Duration

	// MinRefreshInterval rate-limits the refetches triggered by an unknown key
	// id, so a flood of tokens with made-up kids cannot hammer the provider:
	// at most one such refetch per interval. Default 30s.
	MinRefreshInterval time.Duration

	// ResultCacheSize is how many validated tokens are remembered (by
	// SHA-256 of the token) so a token presented again skips the signature
	// check until it expires or the key set changes. Default 4096; negative
	// disables the cache.
	ResultCacheSize int
}

// VerifierOptions are optional collaborators of a Verifier. A nil
// *VerifierOptions means all defaults.
type VerifierOptions struct {
	// Keys are the keys to verify with. Default: the provider's published
	// key set, fetched through discovery (or JWKSURL) and cached.
	Keys KeySource
	// HTTPClient fetches discovery documents and key sets. Default: a client
	// with a 10s timeout. For our own authorization server, a client whose
	// transport calls its handler in process (see HandlerTransport).
	HTTPClient *http.Client
	// Logger receives key-set fetch failures (never tokens). Default: none.
	Logger *zap.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// KeySource hands a Verifier the public keys of an issuer: the provider's
// fetched key set by default, our authorization server's own key ring for
// its tokens.
type KeySource interface {
	// Keys returns the candidate keys for a token's kid (all keys for an
	// empty kid); a kid it does not know is a *TokenError with
	// ReasonUnknownKey.
	Keys(ctx context.Context, kid string) ([]jose.JSONWebKey, error)
	// Generation changes whenever the set of valid keys does: a token
	// verified under one generation is verified again under another.
	Generation() any
}

var defaultAlgorithms = []jose.SignatureAlgorithm{
	jose.RS256, jose.RS384, jose.RS512, jose.PS256, jose.PS384, jose.PS512,
	jose.ES256, jose.ES384, jose.ES512, jose.EdDSA,
}

// Verifier validates bearer JWTs against a provider's published key set:
// signature, exp/nbf/iat with leeway, iss and aud. Tokens seen before are
// answered from a bounded result cache (exp and aud rechecked) until the key
// set changes. It is safe for concurrent use.
type Verifier struct {
	cfg    VerifierConfig
	issuer string // normalised (no trailing slash)
	algs   []jose.SignatureAlgorithm
	client *http.Client
	logger *zap.Logger
	now    func() time.Time

	source  KeySource // the keys: opts.Keys, else the Verifier's own key-set cache
	keys    atomic.Pointer[keyCache]
	results *resultCache

	mu            sync.Mutex // serialises fetches
	jwksURL       string
	lastForced    time.Time // last refetch caused by an unknown kid
	lastFailure   time.Time // last failed fetch while no keys were cached
	lastErr       error
	fetches       atomic.Int64
	fetchFailures atomic.Int64
}

type keyCache struct {
	byKID   map[string][]jose.JSONWebKey
	all     []jose.JSONWebKey
	fetched time.Time
}

// NewVerifier checks cfg and returns a Verifier. It does no network I/O: keys
// are fetched on first use, or by calling Refresh.
func NewVerifier(cfg VerifierConfig, opts *VerifierOptions) (*Verifier, error) {
	if opts == nil {
		opts = &VerifierOptions{}
	}
	if cfg.Issuer == "" {
		return nil, errors.New("oauth: verifier: issuer (IDP_PROVIDER_URL) is required")
	}
	u, err := url.Parse(cfg.Issuer)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("oauth: verifier: issuer %q is not an http(s) URL", cfg.Issuer)
	}
	if cfg.Audience == "" {
		return nil, errors.New("oauth: verifier: audience (expectedAudience) is required")
	}
	if cfg.JWKSURL != "" {
		if ju, err := url.Parse(cfg.JWKSURL); err != nil || ju.Host == "" {
			return nil, fmt.Errorf("oauth: verifier: jwks url %q is not a URL", cfg.JWKSURL)
		}
	}
	v := &Verifier{
		cfg:     cfg,
		issuer:  strings.TrimSuffix(cfg.Issuer, "/"),
		client:  opts.HTTPClient,
		logger:  opts.Logger,
		now:     opts.Now,
		jwksURL: cfg.JWKSURL,
	}
	if len(cfg.Algorithms) == 0 {
		v.algs = defaultAlgorithms
	} else {
		for _, a := range cfg.Algorithms {
			alg := jose.SignatureAlgorithm(a)
			if !slices.Contains(defaultAlgorithms, alg) {
				return nil, fmt.Errorf("oauth: verifier: algorithm %q is not allowed (only asymmetric signatures)", a)
			}
			v.algs = append(v.algs, alg)
		}
	}
	switch {
	case v.cfg.Leeway == 0:
		v.cfg.Leeway = 30 * time.Second
	case v.cfg.Leeway < 0:
		v.cfg.Leeway = 0
	}
	v.source = opts.Keys
	if v.source == nil {
		v.source = v
	}
	if v.cfg.CacheTTL == 0 {
		v.cfg.CacheTTL = time.Hour
	}
	if v.cfg.MinRefreshInterval == 0 {
		v.cfg.MinRefreshInterval = 30 * time.Second
	}
	if v.cfg.ResultCacheSize == 0 {
		v.cfg.ResultCacheSize = 4096
	}
	if v.cfg.ResultCacheSize > 0 {
		v.results = &resultCache{max: v.cfg.ResultCacheSize, m: make(map[[32]byte]resultEntry)}
	}
	if v.client == nil {
		v.client = &http.Client{Timeout: 10 * time.Second}
	}
	if v.logger == nil {
		v.logger = zap.NewNop()
	}
	if v.now == nil {
		v.now = time.Now
	}
	return v, nil
}

// Issuer returns the expected issuer.
func (v *Verifier) Issuer() string { return v.issuer }

// Audience returns the expected audience.
func (v *Verifier) Audience() string { return v.cfg.Audience }

// FetchCount returns how many key-set fetches were attempted and how many
// failed, for monitoring (the spec alarms on any key-set fetch error).
func (v *Verifier) FetchCount() (total, failed int64) {
	return v.fetches.Load(), v.fetchFailures.Load()
}

// Verify validates token for the configured audience.
func (v *Verifier) Verify(ctx context.Context, token string) (*VerifiedToken, error) {
	return v.VerifyAudience(ctx, token, v.cfg.Audience)
}

// VerifyAudience validates token and requires audience in its aud claim
// (RFC 8707: a route protected as another resource passes its own URL;
// URLs compare in canonical form). Rejections are *TokenError; a key set
// that cannot be fetched gives an error wrapping ErrKeySetUnavailable.
func (v *Verifier) VerifyAudience(ctx context.Context, token, audience string) (*VerifiedToken, error) {
	return v.verify(ctx, token, audience, checks{})
}

// checks relaxes a verification: our server reads a token it is asked to
// revoke whatever its audience and expiry.
type checks struct{ anyAudience, anyTime bool }

// verify is the one JWT verification: signature against the key source,
// the typ header when configured, then the claims.
func (v *Verifier) verify(ctx context.Context, token, audience string, c checks) (*VerifiedToken, error) {
	if token == "" {
		return nil, tokenErr(ReasonMissing, "")
	}
	if len(token) > maxTokenBytes || strings.Count(token, ".") != 2 {
		return nil, tokenErr(ReasonMalformed, "not a compact JWS")
	}
	var sum [32]byte
	gen := v.source.Generation()
	if v.results != nil {
		sum = sha256.Sum256([]byte(token))
		if t, ok := v.results.get(sum, gen); ok {
			return v.recheck(t, audience, c)
		}
	}
	parsed, err := parseCompactJWS(token, v.algs)
	if err != nil {
		var ua *errUnexpectedAlg
		if errors.As(err, &ua) {
			return nil, tokenErr(ReasonBadAlgorithm, "algorithm %q is not accepted", ua.got)
		}
		return nil, tokenErr(ReasonMalformed, "%w", err)
	}
	keys, err := v.source.Keys(ctx, parsed.kid)
	if err != nil {
		return nil, err
	}
	verified, tried := false, false
	for i := range keys {
		k := &keys[i]
		if k.Algorithm != "" && k.Algorithm != string(parsed.alg) {
			continue
		}
		tried = true
		if k.Use != "" && k.Use != "sig" {
			continue
		}
		if parsed.verify(k.Key) {
			verified = true
			break
		}
	}
	if !verified && !tried {
		// The key named by kid is for another algorithm.
		return nil, tokenErr(ReasonBadAlgorithm, "alg %s does not match the key", parsed.alg)
	}
	if !verified {
		return nil, tokenErr(ReasonBadSignature, "")
	}
	if v.cfg.TokenType != "" && !sameType(parsed.header[jose.HeaderType], v.cfg.TokenType) {
		return nil, tokenErr(ReasonMalformed, "typ is not %s", v.cfg.TokenType)
	}
	raw, err := decodeObject(parsed.payload)
	if err != nil {
		return nil, tokenErr(ReasonMalformed, "claims are not a JSON object")
	}
	t, err := v.checkClaims(raw, "", checks{anyAudience: true, anyTime: true})
	if err != nil {
		return nil, err
	}
	if v.results != nil {
		cp := *t // callers own what they get
		v.results.put(sum, &cp, gen)
	}
	return v.recheck(t, audience, c)
}

// maxTokenBytes bounds the tokens we parse.
const maxTokenBytes = 16 << 10

// sameType compares a typ header with want (RFC 9068 section 2.1: without
// case, the application/ prefix allowed).
func sameType(typ any, want string) bool {
	t, _ := typ.(string)
	t = strings.ToLower(t)
	return t == want || t == "application/"+want
}

// recheck applies the checks that depend on the time and the audience to a
// token whose signature and issuer were verified.
func (v *Verifier) recheck(t *VerifiedToken, audience string, c checks) (*VerifiedToken, error) {
	now := v.now()
	if !c.anyTime {
		// RFC 7519 section 4.1.4: the current time must be before exp.
		if !now.Before(t.ExpiresAt.Add(v.cfg.Leeway)) {
			return nil, tokenErr(ReasonExpired, "expired at %s", t.ExpiresAt.UTC().Format(time.RFC3339))
		}
		if !t.NotBefore.IsZero() && now.Add(v.cfg.Leeway).Before(t.NotBefore) {
			return nil, tokenErr(ReasonNotYetValid, "not before %s", t.NotBefore.UTC().Format(time.RFC3339))
		}
		if !t.IssuedAt.IsZero() && now.Add(v.cfg.Leeway).Before(t.IssuedAt) {
			return nil, tokenErr(ReasonNotYetValid, "issued in the future")
		}
	}
	if !c.anyAudience && !audienceContains(t.Audience, audience) {
		return nil, tokenErr(ReasonWrongAudience, "audience %q not in token", audience)
	}
	cp := *t
	cp.Audience, cp.Scopes = slices.Clone(t.Audience), slices.Clone(t.Scopes)
	return &cp, nil
}

// resultCache remembers validated tokens. An entry is valid only with the
// key set it was verified against: any key-set change empties it in effect.
type resultCache struct {
	mu  sync.RWMutex
	max int
	m   map[[32]byte]resultEntry
}

type resultEntry struct {
	tok *VerifiedToken
	gen any // the key source's generation it was verified under
}

func (c *resultCache) get(sum [32]byte, gen any) (*VerifiedToken, bool) {
	c.mu.RLock()
	e, ok := c.m[sum]
	c.mu.RUnlock()
	if !ok || e.gen != gen {
		return nil, false
	}
	return e.tok, true
}

func (c *resultCache) put(sum [32]byte, t *VerifiedToken, gen any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= c.max {
		clear(c.m) // crude but bounded; a busy gateway refills it at once
	}
	c.m[sum] = resultEntry{tok: t, gen: gen}
}

// checkClaims decodes the claims and checks the issuer and that exp is
// present; the time and audience checks are recheck's.
func (v *Verifier) checkClaims(raw map[string]any, audience string, c checks) (*VerifiedToken, error) {
	now := v.now()
	t := &VerifiedToken{Claims: raw}
	t.Issuer, _ = raw["iss"].(string)
	t.Subject, _ = raw["sub"].(string)
	t.ID, _ = raw["jti"].(string)
	exp, hasExp := numericDate(raw["exp"])
	if !hasExp {
		return nil, tokenErr(ReasonExpired, "no exp claim")
	}
	t.ExpiresAt = exp
	if nbf, ok := numericDate(raw["nbf"]); ok {
		t.NotBefore = nbf
	}
	if iat, ok := numericDate(raw["iat"]); ok {
		t.IssuedAt = iat
	}
	if !c.anyTime && !now.Before(exp.Add(v.cfg.Leeway)) {
		return nil, tokenErr(ReasonExpired, "expired at %s", exp.UTC().Format(time.RFC3339))
	}
	if strings.TrimSuffix(t.Issuer, "/") != v.issuer {
		return nil, tokenErr(ReasonWrongIssuer, "issuer %q", t.Issuer)
	}
	switch aud := raw["aud"].(type) {
	case string:
		t.Audience = []string{aud}
	case []any:
		for _, a := range aud {
			if s, ok := a.(string); ok {
				t.Audience = append(t.Audience, s)
			}
		}
	}
	if !c.anyAudience && !audienceContains(t.Audience, audience) {
		return nil, tokenErr(ReasonWrongAudience, "audience %q not in token", audience)
	}
	t.SessionID, _ = raw["sid"].(string)
	if s, ok := raw["client_id"].(string); ok {
		t.ClientID = s
	} else if s, ok := raw["azp"].(string); ok {
		t.ClientID = s
	}
	if s, ok := raw["tenant_id"].(string); ok {
		t.TenantID = s
	} else if s, ok := raw["tid"].(string); ok {
		t.TenantID = s
	}
	switch s := raw["scope"].(type) {
	case string:
		t.Scopes = strings.Fields(s)
	}
	if t.Scopes == nil {
		switch s := raw["scp"].(type) {
		case string:
			t.Scopes = strings.Fields(s)
		case []any:
			for _, x := range s {
				if str, ok := x.(string); ok {
					t.Scopes = append(t.Scopes, str)
				}
			}
		}
	}
	return t, nil
}

func numericDate(v any) (time.Time, bool) {
	switch n := v.(type) {
	case float64:
		sec := int64(n)
		return time.Unix(sec, int64((n-float64(sec))*1e9)), true
	case json.Number:
		f, err := n.Float64()
		if err != nil {
			return time.Time{}, false
		}
		return numericDate(f)
	}
	return time.Time{}, false
}

// Keys implements KeySource over the provider's published key set: the
// candidate keys for kid, fetching the key set when none is cached, when
// the cache is older than CacheTTL, or (rate-limited) when kid is unknown.
func (v *Verifier) Keys(ctx context.Context, kid string) ([]jose.JSONWebKey, error) {
	kc := v.keys.Load()
	if kc == nil || v.now().Sub(kc.fetched) > v.cfg.CacheTTL {
		if err := v.refresh(ctx, false, false, kc); err != nil && kc == nil {
			return nil, err
		}
		kc = v.keys.Load()
	}
	if ks := kc.lookup(kid); len(ks) > 0 {
		return ks, nil
	}
	if kid == "" {
		return nil, tokenErr(ReasonUnknownKey, "no key matches a token without kid")
	}
	// Unknown kid: the provider may have rotated. Refetch at most once per
	// MinRefreshInterval.
	if err := v.refresh(ctx, true, false, kc); err != nil && !errors.Is(err, errRefreshLimited) {
		return nil, err
	}
	if ks := v.keys.Load().lookup(kid); len(ks) > 0 {
		return ks, nil
	}
	return nil, tokenErr(ReasonUnknownKey, "key id not in the key set")
}

// Generation implements KeySource: the cached key set itself.
func (v *Verifier) Generation() any { return v.keys.Load() }

func (kc *keyCache) lookup(kid string) []jose.JSONWebKey {
	if kid == "" {
		return kc.all
	}
	return kc.byKID[kid]
}

var errRefreshLimited = errors.New("refresh rate-limited")

// Refresh fetches the discovery document (unless JWKSURL is set) and the key
// set now. Use it at start-up to fail or warn early.
func (v *Verifier) Refresh(ctx context.Context) error {
	return v.refresh(ctx, false, true, v.keys.Load())
}

// refresh fetches the key set. seen is the cache the caller looked at (nil
// when there was none): when another goroutine replaced it meanwhile, there
// is nothing to do.
func (v *Verifier) refresh(ctx context.Context, forced, explicit bool, seen *keyCache) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.keys.Load() != seen {
		return nil // another goroutine fetched meanwhile
	}
	now := v.now()
	if forced {
		if !v.lastForced.IsZero() && now.Sub(v.lastForced) < v.cfg.MinRefreshInterval {
			return errRefreshLimited
		}
		v.lastForced = now
	}
	if seen == nil && !explicit && v.lastErr != nil && now.Sub(v.lastFailure) < noKeysRetry {
		// The provider was down a moment ago and nothing is cached: answer
		// at once instead of sending it one request per incoming token.
		return v.lastErr
	}
	v.fetches.Add(1)
	kc, err := v.fetch(ctx)
	if err != nil {
		v.fetchFailures.Add(1)
		if v.keys.Load() == nil {
			v.lastFailure = now
			v.lastErr = fmt.Errorf("oauth: %w: %w", ErrKeySetUnavailable, err)
		}
		v.logger.Error("fetching identity provider key set", zap.String("issuer", v.issuer), zap.Error(err))
		if cur := v.keys.Load(); cur != nil && !forced {
			// Keep serving the old keys; retry after MinRefreshInterval
			// rather than on every request.
			v.keys.Store(&keyCache{byKID: cur.byKID, all: cur.all,
				fetched: now.Add(-v.cfg.CacheTTL + v.cfg.MinRefreshInterval)})
		}
		return fmt.Errorf("oauth: %w: %w", ErrKeySetUnavailable, err)
	}
	kc.fetched = now
	v.keys.Store(kc)
	v.lastErr = nil
	return nil
}

// noKeysRetry is how long a failed fetch is not retried while no keys are
// cached at all.
const noKeysRetry = 5 * time.Second

func (v *Verifier) fetch(ctx context.Context) (*keyCache, error) {
	if v.jwksURL == "" {
		doc, err := Discover(ctx, v.client, v.issuer)
		if err != nil {
			return nil, err
		}
		if doc.JWKSURI == "" {
			return nil, errors.New("discovery document has no jwks_uri")
		}
		v.jwksURL = doc.JWKSURI
	}
	var set jose.JSONWebKeySet
	if err := getJSON(ctx, v.client, v.jwksURL, &set); err != nil {
		return nil, fmt.Errorf("key set: %w", err)
	}
	kc := &keyCache{byKID: make(map[string][]jose.JSONWebKey)}
	for _, k := range set.Keys {
		if !k.Valid() || !k.IsPublic() {
			continue // never trust a private or broken key from a key set
		}
		kc.all = append(kc.all, k)
		kc.byKID[k.KeyID] = append(kc.byKID[k.KeyID], k)
	}
	if len(kc.all) == 0 {
		return nil, errors.New("key set has no usable public keys")
	}
	return kc, nil
}

// ProviderMetadata is the part of an OpenID Connect discovery document or
// RFC 8414 authorization server metadata that token validation and clients use.
type ProviderMetadata struct {
	Issuer                        string   `json:"issuer"`
	JWKSURI                       string   `json:"jwks_uri"`
	AuthorizationEndpoint         string   `json:"authorization_endpoint,omitempty"`
	TokenEndpoint                 string   `json:"token_endpoint,omitempty"`
	RegistrationEndpoint          string   `json:"registration_endpoint,omitempty"`
	RevocationEndpoint            string   `json:"revocation_endpoint,omitempty"`
	ScopesSupported               []string `json:"scopes_supported,omitempty"`
	CodeChallengeMethodsSupported []string `json:"code_challenge_methods_supported,omitempty"`
}

// Discover reads the provider's metadata from the first of its well-known
// documents that answers and names the issuer, in the order of the MCP
// authorization spec ("Authorization Server Metadata Discovery", 2025-11-25):
// for an issuer with a path, RFC 8414 with the path inserted
// (<origin>/.well-known/oauth-authorization-server<path>), OpenID Connect
// with the path inserted (<origin>/.well-known/openid-configuration<path>),
// then OpenID Connect with the path appended
// (<issuer>/.well-known/openid-configuration); for one without a path,
// RFC 8414 then OpenID Connect. A document whose issuer is not the one asked
// for (RFC 8414 section 3.3, OpenID Connect Discovery 1.0 section 4.3; a
// trailing slash on either side is no difference) is not the provider's own
// and is passed over as a missing one is; one without jwks_uri (optional
// in RFC 8414) is used only when no later one has it. When no document
// qualifies the error names each attempt; it has code ISSUER_MISMATCH
// (ErrorCode) when one of them answered with another issuer.
func Discover(ctx context.Context, client *http.Client, issuer string) (*ProviderMetadata, error) {
	issuer = strings.TrimSuffix(issuer, "/")
	u, err := url.Parse(issuer)
	if err != nil {
		return nil, fmt.Errorf("issuer: %w", err)
	}
	origin := u.Scheme + "://" + u.Host
	urls := []string{origin + "/.well-known/oauth-authorization-server" + u.Path}
	if u.Path != "" {
		urls = append(urls, origin+"/.well-known/openid-configuration"+u.Path)
	}
	urls = append(urls, issuer+"/.well-known/openid-configuration")
	var errs []string
	mismatch := false
	var found *ProviderMetadata
	for _, d := range urls {
		var doc ProviderMetadata
		if err := getJSON(ctx, client, d, &doc); err != nil {
			errs = append(errs, err.Error())
			continue
		}
		if strings.TrimSuffix(doc.Issuer, "/") != issuer {
			mismatch = true
			errs = append(errs, fmt.Sprintf("GET %s: the document names issuer %q", d, doc.Issuer))
			continue
		}
		if doc.JWKSURI != "" {
			return &doc, nil
		}
		if found == nil {
			found = &doc // RFC 8414 makes jwks_uri optional: a later one may name it
		}
	}
	if found != nil {
		return found, nil
	}
	if mismatch {
		return nil, newError(CodeIssuerMismatch, http.StatusBadGateway,
			fmt.Sprintf("discovery of issuer %s: no document names it: %s", issuer, strings.Join(errs, "; ")), nil)
	}
	return nil, fmt.Errorf("discovery of issuer %s: %s", issuer, strings.Join(errs, "; "))
}

func getJSON(ctx context.Context, client *http.Client, u string, dst any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("GET %s: status %d", u, resp.StatusCode)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(dst); err != nil {
		return fmt.Errorf("GET %s: decoding: %w", u, err)
	}
	return nil
}

// HandlerTransport is an http.RoundTripper that serves requests with an
// in-process handler. A Verifier for our own authorization server uses it to
// read the server's discovery document and key set without a network hop,
// so both modes share one validation path.
type HandlerTransport struct{ Handler http.Handler }

// RoundTrip implements http.RoundTripper.
func (t HandlerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	rec := &responseRecorder{header: make(http.Header), code: http.StatusOK}
	t.Handler.ServeHTTP(rec, req)
	return &http.Response{
		StatusCode:    rec.code,
		Status:        http.StatusText(rec.code),
		Header:        rec.header,
		Body:          io.NopCloser(strings.NewReader(rec.body.String())),
		ContentLength: int64(rec.body.Len()),
		Request:       req,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
	}, nil
}

type responseRecorder struct {
	header      http.Header
	code        int
	wroteHeader bool
	body        strings.Builder
}

func (r *responseRecorder) Header() http.Header { return r.header }
func (r *responseRecorder) WriteHeader(code int) {
	if !r.wroteHeader {
		r.code, r.wroteHeader = code, true
	}
}
func (r *responseRecorder) Write(p []byte) (int, error) {
	r.wroteHeader = true
	return r.body.Write(p)
}
