package oauth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hkdf"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// signingKey is one key of the key ring; it serves op as both SigningKey
// and Key.
type signingKey struct {
	id      string
	alg     jose.SignatureAlgorithm
	private crypto.Signer
	public  crypto.PublicKey
}

func (k *signingKey) ID() string                                  { return k.id }
func (k *signingKey) SignatureAlgorithm() jose.SignatureAlgorithm { return k.alg }
func (k *signingKey) Algorithm() jose.SignatureAlgorithm          { return k.alg }
func (k *signingKey) Use() string                                 { return "sig" }

// Key returns the private key when op asks for a signer, the public key
// otherwise: op calls Key() on the SigningKey to sign and on the Key to
// publish, and the two interfaces share the method name, so keyRing hands
// op distinct views (see publicKey).
func (k *signingKey) Key() any { return k.private }

// publicKey is the published view of a signingKey.
type publicKey struct{ *signingKey }

func (k publicKey) Key() any { return k.public }

// keyRing holds the root key supplied by the operator and, with rotation,
// derives one ES256 key per rotation period from it. Derivation is
// deterministic (HKDF over the root key's private scalar and the period
// number), so every instance and every restart signs with the same key in
// the same period without sharing state.
type keyRing struct {
	root     *signingKey
	secret   []byte // root private material, input of every derivation
	rotation time.Duration
	maxKeys  int
	now      func() time.Time

	mu      sync.Mutex
	derived map[int64]*signingKey
}

func newKeyRing(root *signingKey, rotation time.Duration, maxKeys int, now func() time.Time) (*keyRing, error) {
	secret, err := privateMaterial(root.private)
	if err != nil {
		return nil, err
	}
	return &keyRing{root: root, secret: secret, rotation: rotation, maxKeys: maxKeys, now: now, derived: map[int64]*signingKey{}}, nil
}

// period is the rotation period that contains t.
func (kr *keyRing) period(t time.Time) int64 {
	return t.Unix() / int64(kr.rotation/time.Second)
}

// current is the key that signs now.
func (kr *keyRing) current() (*signingKey, error) {
	if kr.rotation <= 0 {
		return kr.root, nil
	}
	return kr.derive(kr.period(kr.now()))
}

// published are the keys in the key set: the root key, and with rotation
// the next period's derived key, the current one and the maxKeys before it.
func (kr *keyRing) published() ([]*signingKey, error) {
	if kr.rotation <= 0 {
		return []*signingKey{kr.root}, nil
	}
	p := kr.period(kr.now())
	out := make([]*signingKey, 0, kr.maxKeys+3)
	// The next period's key is published ahead of use, so verifiers that
	// cache the key set (ours for 5 minutes) know it before it signs.
	for i := int64(-1); i <= int64(kr.maxKeys); i++ {
		k, err := kr.derive(p - i)
		if err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	// The root key stays published so that tokens it signed before
	// rotation was turned on keep validating.
	return append(out, kr.root), nil
}

// lookup finds a published key by kid.
func (kr *keyRing) lookup(kid string) (*signingKey, bool) {
	keys, err := kr.published()
	if err != nil {
		return nil, false
	}
	for _, k := range keys {
		if k.id == kid {
			return k, true
		}
	}
	return nil, false
}

func (kr *keyRing) derive(p int64) (*signingKey, error) {
	kr.mu.Lock()
	defer kr.mu.Unlock()
	if k, ok := kr.derived[p]; ok {
		return k, nil
	}
	var info [8]byte
	binary.BigEndian.PutUint64(info[:], uint64(p))
	okm, err := hkdf.Key(sha256.New, kr.secret, []byte("caddy-codemode oauth key rotation"), string(info[:]), 48)
	if err != nil {
		return nil, fmt.Errorf("deriving key for period %d: %w", p, err)
	}
	// Reduce 384 bits modulo n-1 and add one: a uniform scalar in [1, n-1].
	n := elliptic.P256().Params().N
	d := new(big.Int).SetBytes(okm)
	d.Mod(d, new(big.Int).Sub(n, big.NewInt(1)))
	d.Add(d, big.NewInt(1))
	raw := make([]byte, 32)
	d.FillBytes(raw)
	priv, err := ecdsa.ParseRawPrivateKey(elliptic.P256(), raw)
	if err != nil {
		return nil, fmt.Errorf("deriving key for period %d: %w", p, err)
	}
	k, err := newSigningKey(priv, "")
	if err != nil {
		return nil, err
	}
	// Drop periods that can no longer be published.
	for q := range kr.derived {
		if q < p-int64(kr.maxKeys)-2 {
			delete(kr.derived, q)
		}
	}
	kr.derived[p] = k
	return k, nil
}

// JWKS returns the public key set as served at /.well-known/jwks.json.
func (kr *keyRing) JWKS() (jose.JSONWebKeySet, error) {
	keys, err := kr.published()
	if err != nil {
		return jose.JSONWebKeySet{}, err
	}
	set := jose.JSONWebKeySet{Keys: make([]jose.JSONWebKey, 0, len(keys))}
	for _, k := range keys {
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: k.public, KeyID: k.id, Algorithm: string(k.alg), Use: "sig"})
	}
	return set, nil
}

// parseSigningKey reads a private JWK (RSA or P-256).
func parseSigningKey(raw string) (*signingKey, error) {
	var jwk jose.JSONWebKey
	if err := json.Unmarshal([]byte(raw), &jwk); err != nil {
		return nil, fmt.Errorf("signing key: not a JSON Web Key: %w", err)
	}
	if jwk.IsPublic() {
		return nil, errors.New("signing key: the JWK has no private part")
	}
	signer, ok := jwk.Key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("signing key: unsupported key type %T (want RSA or EC P-256)", jwk.Key)
	}
	return newSigningKey(signer, jwk.KeyID)
}

// generateSigningKey makes an RSA 2048 key for development mode.
func generateSigningKey(r io.Reader) (*signingKey, error) {
	priv, err := rsa.GenerateKey(r, 2048)
	if err != nil {
		return nil, fmt.Errorf("generating development signing key: %w", err)
	}
	return newSigningKey(priv, "")
}

func newSigningKey(priv crypto.Signer, kid string) (*signingKey, error) {
	k := &signingKey{private: priv, public: priv.Public()}
	switch p := priv.(type) {
	case *rsa.PrivateKey:
		if p.N.BitLen() < 2048 {
			return nil, fmt.Errorf("signing key: RSA key has %d bits, want at least 2048", p.N.BitLen())
		}
		k.alg = jose.RS256
	case *ecdsa.PrivateKey:
		if p.Curve != elliptic.P256() {
			return nil, errors.New("signing key: EC key must use P-256 (ES256)")
		}
		k.alg = jose.ES256
	default:
		return nil, fmt.Errorf("signing key: unsupported key type %T (want RSA or EC P-256)", priv)
	}
	if kid == "" {
		tp, err := (&jose.JSONWebKey{Key: k.public}).Thumbprint(crypto.SHA256)
		if err != nil {
			return nil, fmt.Errorf("signing key: thumbprint: %w", err)
		}
		kid = base64.RawURLEncoding.EncodeToString(tp)
	}
	k.id = kid
	return k, nil
}

// privateMaterial is the secret every derivation (rotated keys)
// starts from.
func privateMaterial(priv crypto.Signer) ([]byte, error) {
	switch p := priv.(type) {
	case *rsa.PrivateKey:
		return p.D.Bytes(), nil
	case *ecdsa.PrivateKey:
		b, err := p.Bytes()
		if err != nil {
			return nil, fmt.Errorf("signing key: %w", err)
		}
		return b, nil
	}
	return nil, fmt.Errorf("signing key: unsupported key type %T", priv)
}

// opKeys adapts the ring to op.
func (kr *keyRing) opSigningKey() (op.SigningKey, error) { return kr.current() }

func (kr *keyRing) opKeySet() ([]op.Key, error) {
	keys, err := kr.published()
	if err != nil {
		return nil, err
	}
	out := make([]op.Key, len(keys))
	for i, k := range keys {
		out[i] = publicKey{k}
	}
	return out, nil
}

// MarshalSigningKeyJWK renders a private key as the JWK JSON that
// JWT_SIGNING_KEY and local.sign_key take; tests and tooling use it.
func MarshalSigningKeyJWK(priv crypto.Signer) (string, error) {
	k, err := newSigningKey(priv, "")
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(jose.JSONWebKey{Key: priv, KeyID: k.id, Algorithm: string(k.alg), Use: "sig"})
	if err != nil {
		return "", fmt.Errorf("encoding JWK: %w", err)
	}
	return string(b), nil
}
