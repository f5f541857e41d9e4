package oauth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	_ "crypto/sha256" // crypto.SHA256.New
	_ "crypto/sha512" // crypto.SHA384.New, crypto.SHA512.New
	"encoding/base64"
	"errors"
	"math/big"
	"slices"
	"strconv"
	"strings"

	jose "github.com/go-jose/go-jose/v4"
	josejson "github.com/go-jose/go-jose/v4/json"
)

// compactJWS is a JWT in the JWS compact serialization (RFC 7515 section
// 7.1), split and decoded but not yet verified. The Verifier parses tokens
// itself rather than through go-jose's jwt package: on a token seen for the
// first time that package spent as long on parsing (the header decoded into
// a generic structure, the payload encoded to base64 again to be verified,
// the claims decoded by reflection) as crypto/rsa on the RS256 signature.
type compactJWS struct {
	header       map[string]any
	alg          jose.SignatureAlgorithm
	kid          string
	signingInput string // the first two segments as received: what was signed
	payload      []byte
	signature    []byte
}

// b64 is base64url without padding (RFC 7515 section 2), strict: bits after
// the last whole byte must be zero, so one token has one encoding.
var b64 = base64.RawURLEncoding.Strict()

// errUnexpectedAlg carries the alg header of a token whose algorithm is not
// accepted.
type errUnexpectedAlg struct{ got string }

func (e *errUnexpectedAlg) Error() string {
	return "unexpected signature algorithm " + strconv.Quote(e.got)
}

// parseCompactJWS splits token, decodes its protected header and checks the
// algorithm against algs. Any crit header is refused: the Verifier
// understands no extension (RFC 7515 section 4.1.11).
func parseCompactJWS(token string, algs []jose.SignatureAlgorithm) (*compactJWS, error) {
	h, rest, ok1 := strings.Cut(token, ".")
	p, s, ok2 := strings.Cut(rest, ".")
	if !ok1 || !ok2 || strings.Contains(s, ".") {
		return nil, errors.New("not a compact JWS")
	}
	hb, err := b64.DecodeString(h)
	if err != nil {
		return nil, errors.New("header is not base64url")
	}
	hdr, err := decodeObject(hb)
	if err != nil {
		return nil, errors.New("header is not a JSON object")
	}
	alg, _ := hdr["alg"].(string)
	if !slices.Contains(algs, jose.SignatureAlgorithm(alg)) {
		return nil, &errUnexpectedAlg{got: alg}
	}
	kid, ok := hdr["kid"].(string)
	if !ok && hdr["kid"] != nil {
		return nil, errors.New("kid is not a string")
	}
	if _, ok := hdr["crit"]; ok {
		return nil, errors.New("crit header: no extension is supported")
	}
	j := &compactJWS{header: hdr, alg: jose.SignatureAlgorithm(alg), kid: kid, signingInput: token[:len(h)+1+len(p)]}
	if j.payload, err = b64.DecodeString(p); err != nil {
		return nil, errors.New("payload is not base64url")
	}
	if j.signature, err = b64.DecodeString(s); err != nil {
		return nil, errors.New("signature is not base64url")
	}
	return j, nil
}

// verify checks the signature with key, a public key of the type alg needs
// (as go-jose's verifiers: RSA PKCS #1 v1.5 and PSS with the salt length
// detected, ECDSA on the curve the algorithm names with r||s of the curve's
// size, Ed25519).
func (j *compactJWS) verify(key any) bool {
	var hash crypto.Hash
	switch j.alg {
	case jose.RS256, jose.PS256, jose.ES256:
		hash = crypto.SHA256
	case jose.RS384, jose.PS384, jose.ES384:
		hash = crypto.SHA384
	case jose.RS512, jose.PS512, jose.ES512:
		hash = crypto.SHA512
	case jose.EdDSA:
		k, ok := key.(ed25519.PublicKey)
		return ok && len(k) == ed25519.PublicKeySize && ed25519.Verify(k, []byte(j.signingInput), j.signature)
	default:
		return false
	}
	h := hash.New()
	h.Write([]byte(j.signingInput))
	var buf [64]byte
	digest := h.Sum(buf[:0])
	switch j.alg {
	case jose.RS256, jose.RS384, jose.RS512:
		k, ok := key.(*rsa.PublicKey)
		return ok && k != nil && rsa.VerifyPKCS1v15(k, hash, digest, j.signature) == nil
	case jose.PS256, jose.PS384, jose.PS512:
		k, ok := key.(*rsa.PublicKey)
		return ok && k != nil && rsa.VerifyPSS(k, hash, digest, j.signature, nil) == nil
	}
	k, ok := key.(*ecdsa.PublicKey)
	if !ok || k == nil {
		return false
	}
	var curve elliptic.Curve
	size := 0
	switch j.alg {
	case jose.ES256:
		curve, size = elliptic.P256(), 32
	case jose.ES384:
		curve, size = elliptic.P384(), 48
	default:
		curve, size = elliptic.P521(), 66
	}
	if k.Curve != curve || len(j.signature) != 2*size {
		return false
	}
	r := new(big.Int).SetBytes(j.signature[:size])
	s := new(big.Int).SetBytes(j.signature[size:])
	return ecdsa.Verify(k, digest, r, s)
}

// decodeObject decodes a JSON object into a map as go-jose's JSON decoder
// does (numbers as float64, a repeated name an error). A flat object
// whose strings are printable ASCII without escapes, the shape of nearly
// every JWT header and claims set, is scanned here without reflection;
// anything else (nesting, escapes, other bytes, an error) is left to
// go-jose's decoder, so both give one answer (FuzzDecodeObject).
func decodeObject(b []byte) (map[string]any, error) {
	if m, ok := scanFlatObject(string(b)); ok {
		return m, nil
	}
	var m map[string]any
	if err := josejson.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	if m == nil { // the JSON text null
		return nil, errors.New("not an object")
	}
	return m, nil
}

// scanFlatObject is decodeObject's fast path; ok is false when s is not
// entirely in the shape it handles.
func scanFlatObject(s string) (m map[string]any, ok bool) {
	i := skipSpace(s, 0)
	if i >= len(s) || s[i] != '{' {
		return nil, false
	}
	m = make(map[string]any, 16)
	i = skipSpace(s, i+1)
	if i < len(s) && s[i] == '}' {
		return m, skipSpace(s, i+1) == len(s)
	}
	for {
		key, j, ok := scanString(s, i)
		if !ok {
			return nil, false
		}
		i = skipSpace(s, j)
		if i >= len(s) || s[i] != ':' {
			return nil, false
		}
		var v any
		if v, i, ok = scanValue(s, skipSpace(s, i+1), true); !ok {
			return nil, false
		}
		if _, dup := m[key]; dup { // go-jose refuses repeated names
			return nil, false
		}
		m[key] = v
		i = skipSpace(s, i)
		if i >= len(s) {
			return nil, false
		}
		switch s[i] {
		case ',':
			i = skipSpace(s, i+1)
		case '}':
			return m, skipSpace(s, i+1) == len(s)
		default:
			return nil, false
		}
	}
}

func skipSpace(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}

// scanString reads a string of printable ASCII without escapes at s[i].
func scanString(s string, i int) (string, int, bool) {
	if i >= len(s) || s[i] != '"' {
		return "", i, false
	}
	for j := i + 1; j < len(s); j++ {
		switch c := s[j]; {
		case c == '"':
			return s[i+1 : j], j + 1, true
		case c < 0x20 || c > 0x7e || c == '\\':
			return "", j, false
		}
	}
	return "", len(s), false
}

// scanValue reads a string, number, true, false or null at s[i], and when
// array is true an array of those.
func scanValue(s string, i int, array bool) (any, int, bool) {
	if i >= len(s) {
		return nil, i, false
	}
	switch c := s[i]; {
	case c == '"':
		return scanString(s, i)
	case c == '-' || c >= '0' && c <= '9':
		j := scanNumber(s, i)
		if j < 0 {
			return nil, i, false
		}
		f, err := strconv.ParseFloat(s[i:j], 64)
		if err != nil { // out of range: the general decoder says how
			return nil, i, false
		}
		return f, j, true
	case strings.HasPrefix(s[i:], "true"):
		return true, i + 4, true
	case strings.HasPrefix(s[i:], "false"):
		return false, i + 5, true
	case strings.HasPrefix(s[i:], "null"):
		return nil, i + 4, true
	case c == '[' && array:
		list := []any{}
		i = skipSpace(s, i+1)
		if i < len(s) && s[i] == ']' {
			return list, i + 1, true
		}
		for {
			v, j, ok := scanValue(s, i, false)
			if !ok {
				return nil, j, false
			}
			list = append(list, v)
			i = skipSpace(s, j)
			if i >= len(s) {
				return nil, i, false
			}
			switch s[i] {
			case ',':
				i = skipSpace(s, i+1)
			case ']':
				return list, i + 1, true
			default:
				return nil, i, false
			}
		}
	}
	return nil, i, false
}

// scanNumber returns the end of the JSON number (RFC 8259 section 6) at
// s[i], or -1.
func scanNumber(s string, i int) int {
	if i < len(s) && s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && s[i] >= '1' && s[i] <= '9':
		i = skipDigits(s, i)
	default:
		return -1
	}
	if i < len(s) && s[i] == '.' {
		j := skipDigits(s, i+1)
		if j == i+1 {
			return -1
		}
		i = j
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		j := skipDigits(s, i)
		if j == i {
			return -1
		}
		i = j
	}
	return i
}

func skipDigits(s string, i int) int {
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i
}
