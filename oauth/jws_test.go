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
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	josejson "github.com/go-jose/go-jose/v4/json"
)

// TestCompactJWSEveryAlgorithm signs with go-jose in every accepted
// algorithm and checks that the Verifier's own parser accepts exactly what
// go-jose accepts: the signature with the right key, not a tampered one, not
// a key of another type or curve.
func TestCompactJWSEveryAlgorithm(t *testing.T) {
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	rsaOther, _ := rsa.GenerateKey(rand.Reader, 2048)
	p256, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	p521, _ := ecdsa.GenerateKey(elliptic.P521(), rand.Reader)
	_, edKey, _ := ed25519.GenerateKey(rand.Reader)
	cases := []struct {
		alg   jose.SignatureAlgorithm
		key   crypto.Signer
		wrong []any // public keys that must not verify
	}{
		{jose.RS256, rsaKey, []any{&rsaOther.PublicKey, &p256.PublicKey}},
		{jose.RS384, rsaKey, []any{&rsaOther.PublicKey}},
		{jose.RS512, rsaKey, []any{&rsaOther.PublicKey}},
		{jose.PS256, rsaKey, []any{&rsaOther.PublicKey, edKey.Public()}},
		{jose.PS384, rsaKey, []any{&rsaOther.PublicKey}},
		{jose.PS512, rsaKey, []any{&rsaOther.PublicKey}},
		{jose.ES256, p256, []any{&p384.PublicKey, &rsaKey.PublicKey, (*ecdsa.PublicKey)(nil)}},
		{jose.ES384, p384, []any{&p256.PublicKey, &p521.PublicKey}},
		{jose.ES512, p521, []any{&p384.PublicKey}},
		{jose.EdDSA, edKey, []any{&p256.PublicKey, ed25519.PublicKey{}, []byte("secret")}},
	}
	algs := defaultAlgorithms
	for _, tc := range cases {
		t.Run(string(tc.alg), func(t *testing.T) {
			sg, err := jose.NewSigner(jose.SigningKey{Algorithm: tc.alg, Key: tc.key},
				(&jose.SignerOptions{}).WithType("at+jwt").WithHeader("kid", "k1"))
			if err != nil {
				t.Fatal(err)
			}
			jws, err := sg.Sign([]byte(`{"sub":"a","n":[1,"x"]}`))
			if err != nil {
				t.Fatal(err)
			}
			tok, _ := jws.CompactSerialize()
			j, err := parseCompactJWS(tok, algs)
			if err != nil {
				t.Fatal(err)
			}
			if j.alg != tc.alg || j.kid != "k1" || j.header["typ"] != "at+jwt" || string(j.payload) != `{"sub":"a","n":[1,"x"]}` {
				t.Fatalf("parsed %+v", j)
			}
			if !j.verify(tc.key.Public()) {
				t.Fatal("a good signature did not verify")
			}
			for _, k := range tc.wrong {
				if j.verify(k) {
					t.Fatalf("verified with %T", k)
				}
			}
			// Any changed bit of what was signed fails, in the payload or the header.
			parts := strings.Split(tok, ".")
			for _, bad := range []string{
				parts[0] + "." + b64.EncodeToString([]byte(`{"sub":"b","n":[1,"x"]}`)) + "." + parts[2],
				b64.EncodeToString([]byte(`{"alg":"`+string(tc.alg)+`","kid":"k1"}`)) + "." + parts[1] + "." + parts[2],
			} {
				j, err := parseCompactJWS(bad, algs)
				if err != nil {
					t.Fatal(err)
				}
				if j.verify(tc.key.Public()) {
					t.Fatal("a tampered token verified")
				}
			}
		})
	}
}

func TestCompactJWSRefuses(t *testing.T) {
	enc := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	hdr := enc(`{"alg":"RS256","kid":"k"}`)
	pl := enc(`{"sub":"a"}`)
	sig := enc("signature")
	cases := []struct{ name, token, alg string }{
		{"two segments", hdr + "." + pl, ""},
		{"four segments", hdr + "." + pl + "." + sig + ".x", ""},
		{"padded header", enc(`{"alg":"RS256","kid":"k1"}`) + "=." + pl + "." + sig, ""},
		{"standard base64", hdr + "." + pl + "." + base64.StdEncoding.EncodeToString([]byte{0xfb, 0xff}), ""},
		{"non-canonical base64 (trailing bits)", hdr + "." + pl + "." + "AB", ""},
		{"header not JSON", enc("alg=RS256") + "." + pl + "." + sig, ""},
		{"header an array", enc(`["alg"]`) + "." + pl + "." + sig, ""},
		{"header null", enc(`null`) + "." + pl + "." + sig, ""},
		{"kid not a string", enc(`{"alg":"RS256","kid":7}`) + "." + pl + "." + sig, ""},
		{"crit header", enc(`{"alg":"RS256","kid":"k","crit":["b64"],"b64":false}`) + "." + pl + "." + sig, ""},
		{"alg none", enc(`{"alg":"none"}`) + "." + pl + ".", "none"},
		{"alg HS256", enc(`{"alg":"HS256"}`) + "." + pl + "." + sig, "HS256"},
		{"alg missing", enc(`{"kid":"k"}`) + "." + pl + "." + sig, "none"},
		{"alg not a string", enc(`{"alg":1}`) + "." + pl + "." + sig, "none"},
		{"alg in another case", enc(`{"ALG":"RS256"}`) + "." + pl + "." + sig, "none"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseCompactJWS(tc.token, defaultAlgorithms)
			if err == nil {
				t.Fatal("accepted")
			}
			var ua *errUnexpectedAlg
			if isAlg := errors.As(err, &ua); isAlg != (tc.alg != "") {
				t.Fatalf("%v: algorithm error %v, want %v", err, isAlg, tc.alg != "")
			}
		})
	}
}

// decodeObjectSeeds are JSON texts around the fast path's edges.
var decodeObjectSeeds = []string{
	`{}`, ` { } `, `{"a":1}`, `{"a":1,}`, `{"a" : "b" , "c":[ "d" , 2 ,true,false,null ] }`,
	`{"a":[]}`, `{"a":[[1]]}`, `{"a":{"b":1}}`, `{"a":"\u00e9"}`, `{"a":"\n"}`, "{\"a\":\"\x01\"}",
	"{\"a\":\"\xff\"}", `{"é":1}`, `{"a":01}`, `{"a":-0}`, `{"a":-}`, `{"a":1.}`, `{"a":.5}`, `{"a":1e5}`,
	`{"a":1E+5}`, `{"a":1e}`, `{"a":1e400}`, `{"a":-1.5e-3}`, `{"a":+1}`, `{"a":tru}`, `{"a":truex}`,
	`{"a":nul}`, `{"a":1}x`, `{"a":1}{}`, `{"a":1,"a":2}`, `{"a" 1}`, `{a:1}`, `[1]`, `null`, `"s"`, ``,
	`{"a":1`, `{"a":[1,2`, `{"a":[1 2]}`, `{"a":[1,]}`, `{"":0}`, "{\t\"a\"\r:\n1}", `{"a":1.0000000000000002}`,
	`{"a":9007199254740993}`, `{"exp":1795563645,"aud":"https://x/mcp","scope":"a b"}`,
}

// TestDecodeObjectMatchesGoJose checks the fast path against the decoder it
// stands in for, on the seeds (FuzzDecodeObject explores further).
func TestDecodeObjectMatchesGoJose(t *testing.T) {
	for _, s := range decodeObjectSeeds {
		checkDecodeObject(t, []byte(s))
	}
}

func FuzzDecodeObject(f *testing.F) {
	for _, s := range decodeObjectSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(checkDecodeObject)
}

func checkDecodeObject(t *testing.T, b []byte) {
	got, err := decodeObject(b)
	var want map[string]any
	werr := josejson.Unmarshal(b, &want)
	if werr == nil && want == nil {
		werr = errors.New("null")
	}
	if (err == nil) != (werr == nil) {
		t.Fatalf("%q: error %v, go-jose %v", b, err, werr)
	}
	if err == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("%q: %#v, go-jose %#v", b, got, want)
	}
}

// TestVerifierRefusesBadClaimsUnderAGoodSignature: a validly signed token
// whose claims are not one JSON object, or name a claim twice (two subs
// that two parsers could read differently), is malformed.
func TestVerifierRefusesBadClaimsUnderAGoodSignature(t *testing.T) {
	p := newIDP(t, "")
	s := newSigner(t, "k", jose.RS256)
	p.publish(s)
	c := &clock{t: time.Unix(1_900_000_000, 0)}
	v := newTestVerifier(t, p, c)
	sg, err := jose.NewSigner(jose.SigningKey{Algorithm: s.alg, Key: s.key},
		(&jose.SignerOptions{}).WithType("at+jwt").WithHeader("kid", s.kid))
	if err != nil {
		t.Fatal(err)
	}
	exp := c.Now().Add(time.Minute).Unix()
	good := fmt.Sprintf(`{"iss":%q,"sub":"a","aud":%q,"exp":%d}`, p.issuer(), testAudience, exp)
	for name, payload := range map[string]string{
		"not JSON":      "sub=a",
		"an array":      `["sub","a"]`,
		"null":          `null`,
		"sub twice":     fmt.Sprintf(`{"iss":%q,"sub":"a","aud":%q,"exp":%d,"sub":"admin"}`, p.issuer(), testAudience, exp),
		"trailing text": good + "x",
	} {
		jws, err := sg.Sign([]byte(payload))
		if err != nil {
			t.Fatal(err)
		}
		tok, _ := jws.CompactSerialize()
		_, err = v.Verify(context.Background(), tok)
		var te *TokenError
		if !errors.As(err, &te) || te.Reason != ReasonMalformed {
			t.Errorf("%s: %v, want %s", name, err, ReasonMalformed)
		}
	}
	jws, _ := sg.Sign([]byte(good))
	tok, _ := jws.CompactSerialize()
	if _, err := v.Verify(context.Background(), tok); err != nil {
		t.Fatalf("the same token with good claims: %v", err)
	}
}
