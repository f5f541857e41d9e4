package oauth

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"golang.org/x/oauth2"
)

func (c *fakeNow) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

func (e *asEnv) jwksKids(t *testing.T) []string {
	t.Helper()
	resp := e.get(e.srv.URL + "/.well-known/jwks.json")
	var set jose.JSONWebKeySet
	if err := json.Unmarshal([]byte(body(t, resp)), &set); err != nil {
		t.Fatal(err)
	}
	var kids []string
	for _, k := range set.Keys {
		if !k.IsPublic() {
			t.Fatalf("key set publishes a private key %s", k.KeyID)
		}
		kids = append(kids, k.KeyID)
	}
	return kids
}

func kidOf(t *testing.T, token string) string {
	t.Helper()
	jws, err := jose.ParseSigned(token, signatureAlgs)
	if err != nil {
		t.Fatal(err)
	}
	return jws.Signatures[0].Header.KeyID
}

func TestKeyRotationOldKeyStillValidates(t *testing.T) {
	e := newAS(t, func(c *ServerConfig) { c.Local.KeyRotationDays = 1; c.Local.MaxKeys = 2 })
	day := int64(24 * time.Hour / time.Second)
	boundary := time.Unix((time.Now().Unix()/day+1)*day, 0)
	e.clock.Set(boundary.Add(-10 * time.Minute))

	cfg := e.oauth2(asClientID, asRedirect)
	issue := func() *oauth2.Token {
		v := oauth2.GenerateVerifier()
		tok, err := cfg.Exchange(e.ctx(), e.code(cfg, v), oauth2.VerifierOption(v))
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	old := issue()
	oldKid := kidOf(t, old.AccessToken)
	if jws, _ := jose.ParseSigned(old.AccessToken, signatureAlgs); jws.Signatures[0].Header.Algorithm != "ES256" {
		t.Fatalf("rotated keys sign ES256, got %s", jws.Signatures[0].Header.Algorithm)
	}

	before := e.jwksKids(t)
	e.clock.Add(20 * time.Minute) // next period: a new key signs
	fresh := issue()
	newKid := kidOf(t, fresh.AccessToken)
	if newKid == oldKid {
		t.Fatal("the signing key did not rotate")
	}
	if !slices.Contains(before, newKid) {
		t.Fatal("the next key was not published before it signed")
	}
	ctx := context.Background()
	if _, err := e.s.VerifyAccessToken(ctx, old.AccessToken, asResource); err != nil {
		t.Fatalf("token of the previous key after rotation: %v", err)
	}
	if _, err := e.s.VerifyAccessToken(ctx, fresh.AccessToken, asResource); err != nil {
		t.Fatalf("token of the new key: %v", err)
	}
	kids := e.jwksKids(t)
	if !slices.Contains(kids, oldKid) || !slices.Contains(kids, newKid) || len(kids) != 5 {
		t.Fatalf("key set %v: want the next key, the current one, 2 previous ones and the root key", kids)
	}
	// Refresh after rotation signs with the new key.
	tok, err := cfg.TokenSource(e.ctx(), &oauth2.Token{RefreshToken: old.RefreshToken, Expiry: time.Now().Add(-time.Minute)}).Token()
	if err != nil || kidOf(t, tok.AccessToken) != newKid {
		t.Fatalf("refresh after rotation: %v", err)
	}

	// maxKeys periods later the old key leaves the set.
	e.clock.Add(3 * 24 * time.Hour)
	if slices.Contains(e.jwksKids(t), oldKid) {
		t.Fatal("a key older than max_keys periods is still published")
	}
	if _, err := e.s.VerifyAccessToken(ctx, old.AccessToken, ""); TokenReason(err) != ReasonUnknownKey {
		t.Fatalf("token of a retired key: %v, want unknown_key", err)
	}
}

func TestDerivedKeysAreStableAcrossInstances(t *testing.T) {
	a, b := newAS(t, func(c *ServerConfig) { c.Local.KeyRotationDays = 30 }), newAS(t, func(c *ServerConfig) { c.Local.KeyRotationDays = 30 })
	b.clock.Set(a.clock.Now())
	ka, _ := a.s.keys.current()
	kb, _ := b.s.keys.current()
	if ka.id != kb.id {
		t.Fatalf("two instances with one sign key derived different keys: %s %s", ka.id, kb.id)
	}
	if ka.alg != jose.ES256 {
		t.Fatalf("alg %s", ka.alg)
	}
}

func TestNoRotationSignsWithSuppliedKey(t *testing.T) {
	e := newAS(t, nil)
	kids := e.jwksKids(t)
	if len(kids) != 1 || kids[0] != e.s.keys.root.id {
		t.Fatalf("key set %v", kids)
	}
	resp := e.get(e.srv.URL + "/.well-known/jwks.json")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Access-Control-Allow-Origin") != "*" {
		t.Fatalf("jwks: %d %v", resp.StatusCode, resp.Header)
	}
	resp.Body.Close()
}

func TestParseSigningKey(t *testing.T) {
	jwk, _ := testKey(t)
	k, err := parseSigningKey(jwk)
	if err != nil || k.alg != jose.RS256 {
		t.Fatalf("%v %v", k, err)
	}
	var pub jose.JSONWebKey
	_ = json.Unmarshal([]byte(jwk), &pub)
	pubJSON, _ := json.Marshal(pub.Public())
	for name, raw := range map[string]string{
		"not json":    "{",
		"public only": string(pubJSON),
		"symmetric":   `{"kty":"oct","k":"c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0"}`,
	} {
		if _, err := parseSigningKey(raw); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
