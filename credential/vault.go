package credential

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// KeySize is the length of a vault key: AES-256.
const KeySize = 32

// recordVersion is the first byte of every sealed record.
const recordVersion = 1

// keyIDSize is the length of the key id stored in front of a record.
const keyIDSize = 8

// ErrUnreadable is returned for a record that no key of the keyring opens
// (the key that sealed it is gone) or that is damaged.
var ErrUnreadable = errors.New("credential vault: record does not decrypt with any configured key")

// Keyring holds the vault key that seals new records and the previous keys
// that still open old ones. Each record carries the id of its key, so a
// rotation is: configure a new key, keep the old one as previous, let
// Vault.Rekey (or each read) re-seal the records, then drop the old key.
type Keyring struct {
	current  vaultKey
	previous []vaultKey
}

type vaultKey struct {
	id   [keyIDSize]byte
	aead cipher.AEAD
}

// NewKeyring builds a keyring from the current key and any previous keys
// (each KeySize bytes).
func NewKeyring(current []byte, previous ...[]byte) (*Keyring, error) {
	cur, err := newVaultKey(current)
	if err != nil {
		return nil, fmt.Errorf("vault key: %w", err)
	}
	k := &Keyring{current: cur}
	for i, p := range previous {
		pk, err := newVaultKey(p)
		if err != nil {
			return nil, fmt.Errorf("previous vault key %d: %w", i+1, err)
		}
		if pk.id == cur.id {
			continue // the same key twice is harmless
		}
		k.previous = append(k.previous, pk)
	}
	return k, nil
}

func newVaultKey(b []byte) (vaultKey, error) {
	if len(b) != KeySize {
		return vaultKey{}, fmt.Errorf("want %d bytes, got %d", KeySize, len(b))
	}
	block, err := aes.NewCipher(b)
	if err != nil {
		return vaultKey{}, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return vaultKey{}, err
	}
	var k vaultKey
	sum := sha256.Sum256(append([]byte("caddy-codemode vault key id\x00"), b...))
	copy(k.id[:], sum[:])
	k.aead = aead
	return k, nil
}

// CurrentID is the id of the sealing key (hex), as logged and documented.
func (k *Keyring) CurrentID() string { return hex.EncodeToString(k.current.id[:]) }

// ParseKey reads a vault key written as base64 (standard or URL alphabet,
// padded or not) or hex. It must decode to KeySize bytes.
func ParseKey(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	if len(s) == 2*KeySize {
		if b, err := hex.DecodeString(s); err == nil {
			return b, nil
		}
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			if len(b) != KeySize {
				return nil, fmt.Errorf("vault key decodes to %d bytes, want %d", len(b), KeySize)
			}
			return b, nil
		}
	}
	return nil, fmt.Errorf("vault key is neither base64 nor hex of %d bytes", KeySize)
}

// DeriveKey derives a vault key from other secret material with HKDF-SHA256
// (for a gateway that has a signing key but no vault key of its own).
func DeriveKey(secret []byte, info string) []byte {
	k, err := hkdf.Key(sha256.New, secret, []byte("caddy-codemode credential vault"), info, KeySize)
	if err != nil {
		panic("credential: hkdf: " + err.Error()) // cannot fail for SHA-256 and 32 bytes
	}
	return k
}

// seal encrypts plain for aad under the current key:
// version | key id | nonce | ciphertext.
func (k *Keyring) seal(rnd io.Reader, plain, aad []byte) ([]byte, error) {
	a := k.current.aead
	out := make([]byte, 1+keyIDSize+a.NonceSize(), 1+keyIDSize+a.NonceSize()+len(plain)+a.Overhead())
	out[0] = recordVersion
	copy(out[1:], k.current.id[:])
	if _, err := io.ReadFull(rnd, out[1+keyIDSize:]); err != nil {
		return nil, fmt.Errorf("vault nonce: %w", err)
	}
	return a.Seal(out, out[1+keyIDSize:], plain, aad), nil
}

// open decrypts a sealed record; current reports whether the current key
// sealed it.
func (k *Keyring) open(sealed, aad []byte) (plain []byte, current bool, err error) {
	if len(sealed) < 1+keyIDSize || sealed[0] != recordVersion {
		return nil, false, ErrUnreadable
	}
	var id [keyIDSize]byte
	copy(id[:], sealed[1:])
	key, current := k.current, true
	if id != k.current.id {
		current = false
		found := false
		for _, p := range k.previous {
			if p.id == id {
				key, found = p, true
				break
			}
		}
		if !found {
			return nil, false, ErrUnreadable
		}
	}
	body := sealed[1+keyIDSize:]
	ns := key.aead.NonceSize()
	if len(body) < ns {
		return nil, false, ErrUnreadable
	}
	plain, err = key.aead.Open(nil, body[:ns], body[ns:], aad)
	if err != nil {
		return nil, false, ErrUnreadable
	}
	return plain, current, nil
}

// Record is one user's credential for one service, as sealed in the vault.
type Record struct {
	// Kind is KindOAuth or KindAPIKey.
	Kind string `json:"kind"`
	// APIKey is the pasted key (KindAPIKey).
	APIKey string `json:"api_key,omitempty"`
	// AccessToken, RefreshToken, TokenType, Expiry and Scope are the
	// upstream's OAuth tokens (KindOAuth). A zero Expiry never expires.
	AccessToken  string    `json:"access_token,omitempty"`
	RefreshToken string    `json:"refresh_token,omitempty"`
	TokenType    string    `json:"token_type,omitempty"`
	Expiry       time.Time `json:"expiry,omitzero"`
	Scope        string    `json:"scope,omitempty"`
	// ConnectedAt is when the user connected; RefreshedAt the last refresh.
	ConnectedAt time.Time `json:"connected_at"`
	RefreshedAt time.Time `json:"refreshed_at,omitzero"`
	// Issuer and ClientID are the authorization server that issued the
	// OAuth tokens and the gateway's client there (a record made before
	// the twenty-third pass has neither).
	Issuer   string `json:"issuer,omitempty"`
	ClientID string `json:"client_id,omitempty"`
	// RequestedScope is the scope the connection asked for; StepUpScope
	// the scopes the user's next connection asks for, when the upstream
	// answered 403 insufficient_scope for one not asked for (Transport).
	RequestedScope string `json:"requested_scope,omitempty"`
	StepUpScope    string `json:"step_up_scope,omitempty"`
}

// issuedBy reports whether the record's tokens may go to the server issuer
// as client clientID: a record that names neither (older) is taken.
func (r *Record) issuedBy(issuer, clientID string) bool {
	return (r.Issuer == "" || r.Issuer == issuer) && (r.ClientID == "" || r.ClientID == clientID)
}

// Vault keeps users' upstream credentials sealed with AES-256-GCM, one
// record per user and service under vault:{owner}:{service}. The owner key
// and service name are the associated data, so a record copied under
// another user or service does not open.
type Vault struct {
	store Store
	keys  *Keyring
	rand  io.Reader
	ttl   time.Duration
}

const vaultPrefix = "vault:"

func vaultKeyOf(owner, service string) string { return vaultPrefix + owner + ":" + service }

func vaultAAD(owner, service string) []byte {
	return []byte("caddy-codemode credential\x00" + owner + "\x00" + service)
}

// NewVault returns a vault on store sealing with keys; records live ttl
// after their last write (0: until deleted).
func NewVault(store Store, keys *Keyring, rnd io.Reader, ttl time.Duration) *Vault {
	return &Vault{store: store, keys: keys, rand: rnd, ttl: ttl}
}

// Get returns the owner's record for service: ErrNotFound when there is
// none, ErrUnreadable when no key opens it. A record sealed by a previous
// key is re-sealed with the current one.
func (v *Vault) Get(ctx context.Context, owner, service string) (*Record, error) {
	k := vaultKeyOf(owner, service)
	sealed, err := v.store.Get(ctx, k)
	if err != nil {
		return nil, err
	}
	plain, current, err := v.keys.open(sealed, vaultAAD(owner, service))
	if err != nil {
		return nil, err
	}
	var rec Record
	if err := json.Unmarshal(plain, &rec); err != nil {
		return nil, ErrUnreadable
	}
	if !current {
		// Best effort: a concurrent write wins, and a failure is retried
		// at the next read or by Rekey.
		if resealed, err := v.keys.seal(v.rand, plain, vaultAAD(owner, service)); err == nil {
			_, _ = v.store.CompareAndSwap(ctx, k, sealed, resealed, v.ttl)
		}
	}
	return &rec, nil
}

// Put seals and stores the owner's record for service.
func (v *Vault) Put(ctx context.Context, owner, service string, rec *Record) error {
	plain, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encoding credential: %w", err)
	}
	sealed, err := v.keys.seal(v.rand, plain, vaultAAD(owner, service))
	if err != nil {
		return err
	}
	return v.store.Set(ctx, vaultKeyOf(owner, service), sealed, v.ttl)
}

// Touch restarts the record's lifetime (a connection in use is kept).
func (v *Vault) Touch(ctx context.Context, owner, service string) error {
	return v.store.Expire(ctx, vaultKeyOf(owner, service), v.ttl)
}

// Delete removes the owner's record for service; a missing one is fine.
func (v *Vault) Delete(ctx context.Context, owner, service string) error {
	return v.store.Del(ctx, vaultKeyOf(owner, service))
}

// RekeyStats counts what a Rekey pass found.
type RekeyStats struct {
	// Records is every record seen.
	Records int
	// Resealed were sealed by a previous key and are now under the current one.
	Resealed int
	// Unreadable open with no configured key (their key was dropped, or
	// they are damaged); they are left to expire.
	Unreadable int
}

// Rekey re-seals every record that a previous key sealed, so the previous
// keys can be removed from the configuration afterwards. It is safe to run
// on several gateways at once and beside live traffic: a record is only
// replaced while it still holds what was read.
func (v *Vault) Rekey(ctx context.Context) (RekeyStats, error) {
	var st RekeyStats
	err := v.store.Scan(ctx, vaultPrefix, func(k string) error {
		owner, service, ok := strings.Cut(strings.TrimPrefix(k, vaultPrefix), ":")
		if !ok {
			return nil
		}
		sealed, err := v.store.Get(ctx, k)
		if errors.Is(err, ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		st.Records++
		plain, current, err := v.keys.open(sealed, vaultAAD(owner, service))
		if err != nil {
			st.Unreadable++
			return nil
		}
		if current {
			return nil
		}
		resealed, err := v.keys.seal(v.rand, plain, vaultAAD(owner, service))
		if err != nil {
			return err
		}
		// Keep the remaining lifetime roughly: a resealed record gets the
		// full ttl, as a write would.
		if ok, err := v.store.CompareAndSwap(ctx, k, sealed, resealed, v.ttl); err != nil {
			return err
		} else if ok {
			st.Resealed++
		}
		return nil
	})
	return st, err
}

// getSealed is Get that also returns the sealed bytes, for a later replace.
func (v *Vault) getSealed(ctx context.Context, owner, service string) (*Record, []byte, error) {
	sealed, err := v.store.Get(ctx, vaultKeyOf(owner, service))
	if err != nil {
		return nil, nil, err
	}
	plain, _, err := v.keys.open(sealed, vaultAAD(owner, service))
	if err != nil {
		return nil, nil, err
	}
	var rec Record
	if err := json.Unmarshal(plain, &rec); err != nil {
		return nil, nil, ErrUnreadable
	}
	return &rec, sealed, nil
}

// replace stores rec only while the record still holds old.
func (v *Vault) replace(ctx context.Context, owner, service string, old []byte, rec *Record) (bool, error) {
	plain, err := json.Marshal(rec)
	if err != nil {
		return false, fmt.Errorf("encoding credential: %w", err)
	}
	sealed, err := v.keys.seal(v.rand, plain, vaultAAD(owner, service))
	if err != nil {
		return false, err
	}
	return v.store.CompareAndSwap(ctx, vaultKeyOf(owner, service), old, sealed, v.ttl)
}
