package oauth

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// idp is an identity provider stand-in over a real socket: discovery
// documents and a key set whose keys the test controls.
type idp struct {
	srv        *httptest.Server
	mu         sync.Mutex
	keys       []jose.JSONWebKey // public keys served
	jwksHits   atomic.Int64
	oidcOff    bool // serve only RFC 8414 metadata
	oidcOther  bool // the OpenID Connect document names another issuer
	failJWKS   atomic.Bool
	issuerPath string
}

func newIDP(t testing.TB, issuerPath string) *idp {
	t.Helper()
	p := &idp{issuerPath: issuerPath}
	mux := http.NewServeMux()
	meta := func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(ProviderMetadata{Issuer: p.issuer(), JWKSURI: p.srv.URL + "/keys"})
	}
	mux.HandleFunc("/.well-known/oauth-authorization-server"+issuerPath, meta)
	mux.HandleFunc(issuerPath+"/.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		if p.oidcOff {
			http.NotFound(w, r)
			return
		}
		if p.oidcOther {
			_ = json.NewEncoder(w).Encode(ProviderMetadata{Issuer: "https://elsewhere.example.test", JWKSURI: "https://elsewhere.example.test/keys"})
			return
		}
		meta(w, r)
	})
	mux.HandleFunc("/keys", func(w http.ResponseWriter, r *http.Request) {
		p.jwksHits.Add(1)
		if p.failJWKS.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: p.keys})
	})
	p.srv = httptest.NewServer(mux)
	t.Cleanup(p.srv.Close)
	return p
}

func (p *idp) issuer() string { return p.srv.URL + p.issuerPath }

// signer is a private key with its kid and algorithm.
type signer struct {
	kid string
	alg jose.SignatureAlgorithm
	key crypto.Signer
}

func newSigner(t testing.TB, kid string, alg jose.SignatureAlgorithm) *signer {
	t.Helper()
	var k crypto.Signer
	var err error
	switch alg {
	case jose.RS256:
		k, err = rsa.GenerateKey(rand.Reader, 2048)
	case jose.ES256:
		k, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case jose.EdDSA:
		_, k, err = ed25519.GenerateKey(rand.Reader)
	}
	if err != nil {
		t.Fatal(err)
	}
	return &signer{kid: kid, alg: alg, key: k}
}

func (s *signer) public() jose.JSONWebKey {
	return jose.JSONWebKey{Key: s.key.Public(), KeyID: s.kid, Algorithm: string(s.alg), Use: "sig"}
}

func (p *idp) publish(ss ...*signer) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.keys = p.keys[:0]
	for _, s := range ss {
		p.keys = append(p.keys, s.public())
	}
}

func (s *signer) sign(t testing.TB, claims map[string]any) string {
	t.Helper()
	opts := (&jose.SignerOptions{}).WithType("at+jwt")
	if s.kid != "" {
		opts = opts.WithHeader("kid", s.kid)
	}
	sg, err := jose.NewSigner(jose.SigningKey{Algorithm: s.alg, Key: s.key}, opts)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jwt.Signed(sg).Claims(claims).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// clock is an injected clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

const testAudience = "https://mcp.example.test/mcp"

func claimsAt(iss string, now time.Time) map[string]any {
	return map[string]any{
		"iss":       iss,
		"sub":       "user-42",
		"aud":       []string{testAudience, "other"},
		"exp":       now.Add(15 * time.Minute).Unix(),
		"iat":       now.Unix(),
		"nbf":       now.Unix(),
		"jti":       "jti-1",
		"scope":     "mcp:tools read",
		"client_id": "client-a",
		"tenant_id": "tenant-9",
	}
}

func newTestVerifier(t testing.TB, p *idp, c *clock) *Verifier {
	t.Helper()
	v, err := NewVerifier(VerifierConfig{Issuer: p.issuer(), Audience: testAudience},
		&VerifierOptions{HTTPClient: p.srv.Client(), Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestVerifierAcceptsEveryAlgorithm(t *testing.T) {
	for _, alg := range []jose.SignatureAlgorithm{jose.RS256, jose.ES256, jose.EdDSA} {
		t.Run(string(alg), func(t *testing.T) {
			p := newIDP(t, "")
			s := newSigner(t, "k-"+string(alg), alg)
			p.publish(s)
			c := &clock{t: time.Unix(1_900_000_000, 0)}
			v := newTestVerifier(t, p, c)
			got, err := v.Verify(context.Background(), s.sign(t, claimsAt(p.issuer(), c.Now())))
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			if got.Subject != "user-42" || got.ClientID != "client-a" || got.TenantID != "tenant-9" ||
				!got.HasScope("mcp:tools") || !got.HasScope("read") || got.ID != "jti-1" {
				t.Fatalf("claims: %+v", got)
			}
			if !got.ExpiresAt.Equal(c.Now().Add(15 * time.Minute)) {
				t.Fatalf("exp %v", got.ExpiresAt)
			}
		})
	}
}

func TestVerifierRejects(t *testing.T) {
	p := newIDP(t, "/realms/test")
	good := newSigner(t, "good", jose.RS256)
	other := newSigner(t, "good", jose.RS256) // same kid, different key
	p.publish(good)
	c := &clock{t: time.Unix(1_900_000_000, 0)}
	v := newTestVerifier(t, p, c)
	now := c.Now()
	with := func(mut func(m map[string]any)) map[string]any {
		m := claimsAt(p.issuer(), now)
		mut(m)
		return m
	}
	valid := good.sign(t, claimsAt(p.issuer(), now))
	parts := strings.Split(valid, ".")
	sig, _ := base64.RawURLEncoding.DecodeString(parts[2])
	sig[10] ^= 0xff
	tamperedSig := parts[0] + "." + parts[1] + "." + base64.RawURLEncoding.EncodeToString(sig)
	payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
	payload = []byte(strings.Replace(string(payload), "user-42", "admin-1", 1))
	tamperedPayload := parts[0] + "." + base64.RawURLEncoding.EncodeToString(payload) + "." + parts[2]
	noneHeader := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","kid":"good"}`))
	algNone := noneHeader + "." + parts[1] + "."
	hsHeader := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"HS256","kid":"good"}`))
	algHS := hsHeader + "." + parts[1] + "." + parts[2]

	cases := []struct {
		name, token, reason string
	}{
		{"empty", "", ReasonMissing},
		{"garbage", "not-a-jwt", ReasonMalformed},
		{"three garbage parts", "a.b.c", ReasonMalformed},
		{"alg none", algNone, ReasonBadAlgorithm},
		{"alg HS256", algHS, ReasonBadAlgorithm},
		{"tampered signature", tamperedSig, ReasonBadSignature},
		{"tampered payload", tamperedPayload, ReasonBadSignature},
		{"signed by another key with a known kid", other.sign(t, claimsAt(p.issuer(), now)), ReasonBadSignature},
		{"unknown kid", newSigner(t, "nope", jose.ES256).sign(t, claimsAt(p.issuer(), now)), ReasonUnknownKey},
		{"wrong audience", good.sign(t, with(func(m map[string]any) { m["aud"] = "https://other.example.test/" })), ReasonWrongAudience},
		{"no audience", good.sign(t, with(func(m map[string]any) { delete(m, "aud") })), ReasonWrongAudience},
		{"wrong issuer", good.sign(t, with(func(m map[string]any) { m["iss"] = "https://evil.example.test" })), ReasonWrongIssuer},
		{"expired", good.sign(t, with(func(m map[string]any) { m["exp"] = now.Add(-31 * time.Second).Unix() })), ReasonExpired},
		{"no exp", good.sign(t, with(func(m map[string]any) { delete(m, "exp") })), ReasonExpired},
		{"not yet valid", good.sign(t, with(func(m map[string]any) { m["nbf"] = now.Add(time.Minute).Unix() })), ReasonNotYetValid},
		{"issued in the future", good.sign(t, with(func(m map[string]any) { m["iat"] = now.Add(time.Minute).Unix() })), ReasonNotYetValid},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := v.Verify(context.Background(), tc.token)
			if err == nil {
				t.Fatal("accepted")
			}
			var te *TokenError
			if !errors.As(err, &te) || te.Code() != "invalid_token" || te.Reason != tc.reason {
				t.Fatalf("got %v, want reason %s", err, tc.reason)
			}
		})
	}
	// Within the leeway is still fine.
	if _, err := v.Verify(context.Background(), good.sign(t, with(func(m map[string]any) { m["exp"] = now.Add(-20 * time.Second).Unix() }))); err != nil {
		t.Fatalf("within leeway: %v", err)
	}
	// A trailing slash on iss is the same issuer.
	if _, err := v.Verify(context.Background(), good.sign(t, with(func(m map[string]any) { m["iss"] = p.issuer() + "/" }))); err != nil {
		t.Fatalf("trailing slash: %v", err)
	}
}

func TestVerifierExpiresWithInjectedClock(t *testing.T) {
	p := newIDP(t, "")
	s := newSigner(t, "k1", jose.ES256)
	p.publish(s)
	c := &clock{t: time.Unix(1_900_000_000, 0)}
	v := newTestVerifier(t, p, c)
	tok := s.sign(t, claimsAt(p.issuer(), c.Now()))
	if _, err := v.Verify(context.Background(), tok); err != nil {
		t.Fatal(err)
	}
	c.Add(15*time.Minute + 31*time.Second)
	if _, err := v.Verify(context.Background(), tok); TokenReason(err) != ReasonExpired {
		t.Fatalf("after exp: %v", err)
	}
}

func TestVerifierRefreshesOnUnknownKidRateLimited(t *testing.T) {
	p := newIDP(t, "")
	k1 := newSigner(t, "k1", jose.RS256)
	k2 := newSigner(t, "k2", jose.RS256)
	p.publish(k1)
	c := &clock{t: time.Unix(1_900_000_000, 0)}
	v := newTestVerifier(t, p, c)
	ctx := context.Background()
	if _, err := v.Verify(ctx, k1.sign(t, claimsAt(p.issuer(), c.Now()))); err != nil {
		t.Fatal(err)
	}
	if got := p.jwksHits.Load(); got != 1 {
		t.Fatalf("jwks fetched %d times, want 1", got)
	}

	// The provider rotates: k2 appears. The first token with k2 triggers one
	// refetch and then validates.
	p.publish(k1, k2)
	if _, err := v.Verify(ctx, k2.sign(t, claimsAt(p.issuer(), c.Now()))); err != nil {
		t.Fatalf("rotated kid: %v", err)
	}
	if got := p.jwksHits.Load(); got != 2 {
		t.Fatalf("jwks fetched %d times, want 2", got)
	}

	// A flood of made-up kids causes no further fetch within the interval.
	for i := range 50 {
		bogus := newSigner(t, "bogus", jose.EdDSA)
		bogus.kid = "bogus-" + string(rune('a'+i%26))
		if _, err := v.Verify(ctx, bogus.sign(t, claimsAt(p.issuer(), c.Now()))); TokenReason(err) != ReasonUnknownKey {
			t.Fatalf("bogus kid: %v", err)
		}
	}
	if got := p.jwksHits.Load(); got != 2 {
		t.Fatalf("flood caused fetches: %d, want 2", got)
	}

	// After the interval, one more unknown kid may refetch again.
	k3 := newSigner(t, "k3", jose.ES256)
	p.publish(k1, k2, k3)
	c.Add(31 * time.Second)
	if _, err := v.Verify(ctx, k3.sign(t, claimsAt(p.issuer(), c.Now()))); err != nil {
		t.Fatalf("k3 after interval: %v", err)
	}
	if got := p.jwksHits.Load(); got != 3 {
		t.Fatalf("jwks fetched %d times, want 3", got)
	}
}

func TestVerifierCacheTTLAndFetchFailure(t *testing.T) {
	p := newIDP(t, "")
	k1 := newSigner(t, "k1", jose.RS256)
	p.publish(k1)
	c := &clock{t: time.Unix(1_900_000_000, 0)}
	v := newTestVerifier(t, p, c)
	ctx := context.Background()
	if err := v.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	// The provider goes down after the cache expires: old keys keep working,
	// and the failed refetch is not retried on every request.
	p.failJWKS.Store(true)
	c.Add(time.Hour + time.Second)
	for range 5 {
		if _, err := v.Verify(ctx, k1.sign(t, claimsAt(p.issuer(), c.Now()))); err != nil {
			t.Fatalf("with stale keys: %v", err)
		}
	}
	if total, failed := v.FetchCount(); total != 2 || failed != 1 {
		t.Fatalf("fetches total=%d failed=%d, want 2/1", total, failed)
	}
	p.failJWKS.Store(false)
	c.Add(31 * time.Second)
	if _, err := v.Verify(ctx, k1.sign(t, claimsAt(p.issuer(), c.Now()))); err != nil {
		t.Fatal(err)
	}
	if total, _ := v.FetchCount(); total != 3 {
		t.Fatalf("fetches %d, want 3", total)
	}
}

func TestVerifierKeySetUnavailable(t *testing.T) {
	p := newIDP(t, "")
	p.failJWKS.Store(true)
	k1 := newSigner(t, "k1", jose.RS256)
	c := &clock{t: time.Unix(1_900_000_000, 0)}
	v := newTestVerifier(t, p, c)
	tok := k1.sign(t, claimsAt(p.issuer(), c.Now()))
	_, err := v.Verify(context.Background(), tok)
	if !errors.Is(err, ErrKeySetUnavailable) || TokenReason(err) != "" {
		t.Fatalf("got %v, want ErrKeySetUnavailable", err)
	}
	// While the provider is down, requests do not each cause a fetch.
	for range 20 {
		if _, err := v.Verify(context.Background(), tok); !errors.Is(err, ErrKeySetUnavailable) {
			t.Fatalf("got %v, want ErrKeySetUnavailable", err)
		}
	}
	if total, failed := v.FetchCount(); total != 1 || failed != 1 {
		t.Fatalf("fetches %d/%d, want 1/1", total, failed)
	}
	// A little later it is tried again, and works once the provider is back.
	p.publish(k1)
	p.failJWKS.Store(false)
	c.Add(6 * time.Second)
	if _, err := v.Verify(context.Background(), tok); err != nil {
		t.Fatalf("after recovery: %v", err)
	}
}

func TestDiscoveryFallsBackToRFC8414(t *testing.T) {
	p := newIDP(t, "/tenant1")
	p.oidcOff = true
	s := newSigner(t, "k1", jose.ES256)
	p.publish(s)
	c := &clock{t: time.Unix(1_900_000_000, 0)}
	v := newTestVerifier(t, p, c)
	if _, err := v.Verify(context.Background(), s.sign(t, claimsAt(p.issuer(), c.Now()))); err != nil {
		t.Fatal(err)
	}
}

func TestDiscoveryIssuerMismatch(t *testing.T) {
	p := newIDP(t, "")
	s := newSigner(t, "k1", jose.ES256)
	p.publish(s)
	v, err := NewVerifier(VerifierConfig{Issuer: p.issuer() + "/elsewhere", Audience: testAudience},
		&VerifierOptions{HTTPClient: p.srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Refresh(context.Background()); err == nil {
		t.Fatal("discovery of a different issuer accepted")
	}
}

func TestNewVerifierConfigErrors(t *testing.T) {
	cases := []VerifierConfig{
		{Audience: "a"},
		{Issuer: "ftp://x", Audience: "a"},
		{Issuer: "https://idp.example.test"},
		{Issuer: "https://idp.example.test", Audience: "a", Algorithms: []string{"HS256"}},
		{Issuer: "https://idp.example.test", Audience: "a", Algorithms: []string{"none"}},
		{Issuer: "https://idp.example.test", Audience: "a", JWKSURL: "::"},
	}
	for _, cfg := range cases {
		if _, err := NewVerifier(cfg, nil); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
}

func TestVerifierInProcessHandler(t *testing.T) {
	// The same Verifier reads keys through HandlerTransport, as it does for
	// our own authorization server.
	s := newSigner(t, "k1", jose.EdDSA)
	const iss = "https://auth.example.test"
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(ProviderMetadata{Issuer: iss, JWKSURI: iss + "/.well-known/jwks.json"})
	})
	mux.HandleFunc("/.well-known/jwks.json", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{s.public()}})
	})
	v, err := NewVerifier(VerifierConfig{Issuer: iss, Audience: testAudience},
		&VerifierOptions{HTTPClient: &http.Client{Transport: HandlerTransport{Handler: mux}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(context.Background(), s.sign(t, claimsAt(iss, time.Now()))); err != nil {
		t.Fatal(err)
	}
	if _, err := v.VerifyAudience(context.Background(), s.sign(t, claimsAt(iss, time.Now())), "https://x.test/"); TokenReason(err) != ReasonWrongAudience {
		t.Fatalf("VerifyAudience: %v", err)
	}
}

func TestVerifierConcurrent(t *testing.T) {
	p := newIDP(t, "")
	s := newSigner(t, "k1", jose.ES256)
	p.publish(s)
	c := &clock{t: time.Unix(1_900_000_000, 0)}
	v := newTestVerifier(t, p, c)
	tok := s.sign(t, claimsAt(p.issuer(), c.Now()))
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 20 {
				if _, err := v.Verify(context.Background(), tok); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if got := p.jwksHits.Load(); got != 1 {
		t.Fatalf("concurrent first use fetched %d times, want 1", got)
	}
}

func benchVerify(b *testing.B, alg jose.SignatureAlgorithm, cacheSize int) {
	p := newIDP(b, "")
	s := newSigner(b, "k1", alg)
	p.publish(s)
	v, err := NewVerifier(VerifierConfig{Issuer: p.issuer(), Audience: testAudience, ResultCacheSize: cacheSize},
		&VerifierOptions{HTTPClient: p.srv.Client()})
	if err != nil {
		b.Fatal(err)
	}
	tok := s.sign(b, claimsAt(p.issuer(), time.Now()))
	ctx := context.Background()
	if _, err := v.Verify(ctx, tok); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := v.Verify(ctx, tok); err != nil {
			b.Fatal(err)
		}
	}
}

// Full validation of every request (signature included): the cache is off.
func BenchmarkVerifyRS256(b *testing.B) { benchVerify(b, jose.RS256, -1) }
func BenchmarkVerifyES256(b *testing.B) { benchVerify(b, jose.ES256, -1) }
func BenchmarkVerifyEdDSA(b *testing.B) { benchVerify(b, jose.EdDSA, -1) }

// The same token presented again: served by the result cache.
func BenchmarkVerifyCachedES256(b *testing.B) { benchVerify(b, jose.ES256, 0) }

func TestVerifierResultCache(t *testing.T) {
	p := newIDP(t, "")
	k1 := newSigner(t, "k1", jose.ES256)
	k2 := newSigner(t, "k2", jose.ES256)
	p.publish(k1)
	c := &clock{t: time.Unix(1_900_000_000, 0)}
	v := newTestVerifier(t, p, c)
	ctx := context.Background()
	tok := k1.sign(t, claimsAt(p.issuer(), c.Now()))
	first, err := v.Verify(ctx, tok)
	if err != nil {
		t.Fatal(err)
	}
	first.Subject = "mutated by a caller"
	second, err := v.Verify(ctx, tok)
	if err != nil || second.Subject != "user-42" {
		t.Fatalf("cached result: %+v %v", second, err)
	}
	// The audience and the clock still apply to a cached token.
	if _, err := v.VerifyAudience(ctx, tok, "https://elsewhere.test/"); TokenReason(err) != ReasonWrongAudience {
		t.Fatalf("cached, other audience: %v", err)
	}
	c.Add(16 * time.Minute)
	if _, err := v.Verify(ctx, tok); TokenReason(err) != ReasonExpired {
		t.Fatalf("cached, expired: %v", err)
	}
	c.Add(-16 * time.Minute)
	// The provider drops k1: once the key set is refetched, the cached
	// result no longer counts.
	p.publish(k2)
	if err := v.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(ctx, tok); TokenReason(err) != ReasonUnknownKey {
		t.Fatalf("after k1 was dropped: %v", err)
	}
}
