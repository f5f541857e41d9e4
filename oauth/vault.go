package oauth

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// Vault keeps, per session, the credentials the session holds for upstream
// services (an OpenAPI source or upstream MCP server that needs the user's
// own token), encrypted at rest with AES-256-GCM under a key derived from
// the signing key. All credentials of a session live in one record,
// vault:{session}, that expires with the session and is erased when the
// session is revoked.
type Vault struct {
	s    *Server
	aead cipher.AEAD
}

func newVault(s *Server, root *signingKey) *Vault {
	secret, _ := privateMaterial(root.private) // checked by newKeyRing
	key, err := hkdf.Key(sha256.New, secret, []byte("caddy-codemode oauth vault"), "aes-256-gcm", 32)
	if err != nil {
		panic(fmt.Sprintf("oauth: deriving vault key: %v", err)) // cannot fail for SHA-256 and 32 bytes
	}
	block, _ := aes.NewCipher(key)
	aead, _ := cipher.NewGCM(block)
	return &Vault{s: s, aead: aead}
}

// vaultRecord is the plaintext of vault:{session}.
type vaultRecord map[string][]byte

func (v *Vault) load(ctx context.Context, sid string) (vaultRecord, error) {
	b, err := v.s.store.Get(ctx, keyVault(sid))
	if errors.Is(err, errNotFound) {
		return vaultRecord{}, nil
	}
	if err != nil {
		return nil, err
	}
	ns := v.aead.NonceSize()
	if len(b) < ns {
		return nil, newError(CodeVaultCorrupt, http.StatusInternalServerError, "vault record is truncated", nil)
	}
	// The session id is the associated data: a record copied under another
	// session's key does not decrypt.
	plain, err := v.aead.Open(nil, b[:ns], b[ns:], []byte(sid))
	if err != nil {
		return nil, newError(CodeVaultCorrupt, http.StatusInternalServerError, "vault record does not decrypt with this key", nil)
	}
	rec := vaultRecord{}
	if err := json.Unmarshal(plain, &rec); err != nil {
		return nil, newError(CodeVaultCorrupt, http.StatusInternalServerError, "vault record is not valid", err)
	}
	return rec, nil
}

func (v *Vault) save(ctx context.Context, sid string, rec vaultRecord, ttl time.Duration) error {
	plain, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encoding vault record: %w", err)
	}
	nonce := make([]byte, v.aead.NonceSize())
	if _, err := io.ReadFull(v.s.rand, nonce); err != nil {
		return fmt.Errorf("vault nonce: %w", err)
	}
	return v.s.store.Set(ctx, keyVault(sid), v.aead.Seal(nonce, nonce, plain, []byte(sid)), ttl)
}

// sessionTTL is what is left of a live session.
func (v *Vault) sessionTTL(ctx context.Context, sid string) (time.Duration, error) {
	var ss session
	b, err := v.s.store.Get(ctx, keySession(sid))
	if errors.Is(err, errNotFound) {
		return 0, newError(CodeNoSession, http.StatusNotFound, "no live session "+shortID(sid), nil)
	}
	if err != nil {
		return 0, err
	}
	if err := json.Unmarshal(b, &ss); err != nil {
		return 0, fmt.Errorf("decoding session: %w", err)
	}
	ttl := ss.Expires.Sub(v.s.now())
	if ttl <= 0 {
		return 0, newError(CodeNoSession, http.StatusNotFound, "session "+shortID(sid)+" has ended", nil)
	}
	return ttl, nil
}

// Put stores the credential for upstream in the session's vault. The
// session (Claims.SessionID) must be live; the record expires with it.
// Concurrent Puts to one session are last-writer-wins per record.
func (v *Vault) Put(ctx context.Context, sessionID, upstream string, credential []byte) error {
	if upstream == "" {
		return errors.New("vault: upstream name is required")
	}
	ttl, err := v.sessionTTL(ctx, sessionID)
	if err != nil {
		return err
	}
	rec, err := v.load(ctx, sessionID)
	if err != nil {
		return err
	}
	rec[upstream] = append([]byte(nil), credential...)
	return v.save(ctx, sessionID, rec, ttl)
}

// Get returns the credential stored for upstream in a live session, or an
// error with code VAULT_NOT_FOUND (nothing stored) or VAULT_NO_SESSION.
func (v *Vault) Get(ctx context.Context, sessionID, upstream string) ([]byte, error) {
	// A record a racing Put wrote after the session was revoked must not
	// be served.
	if _, err := v.sessionTTL(ctx, sessionID); err != nil {
		return nil, err
	}
	rec, err := v.load(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	c, ok := rec[upstream]
	if !ok {
		return nil, newError(CodeVaultNotFound, http.StatusNotFound, "no credential for "+upstream, nil)
	}
	return c, nil
}

// Delete removes the credential for upstream; deleting a missing one is not
// an error.
func (v *Vault) Delete(ctx context.Context, sessionID, upstream string) error {
	rec, err := v.load(ctx, sessionID)
	if err != nil {
		return err
	}
	if _, ok := rec[upstream]; !ok {
		return nil
	}
	delete(rec, upstream)
	if len(rec) == 0 {
		return v.s.store.Del(ctx, keyVault(sessionID))
	}
	ttl, err := v.sessionTTL(ctx, sessionID)
	if err != nil {
		return v.s.store.Del(ctx, keyVault(sessionID))
	}
	return v.save(ctx, sessionID, rec, ttl)
}

// Clear removes every credential of the session.
func (v *Vault) Clear(ctx context.Context, sessionID string) error {
	return v.s.store.Del(ctx, keyVault(sessionID))
}
