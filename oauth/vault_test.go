package oauth

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"testing"
	"time"

	"github.com/codemode-gateway/caddy-codemode/guard/redistest"
)

// grant runs a flow and returns the access token's claims.
func grant(t *testing.T, e *asEnv) *Claims {
	t.Helper()
	cfg := e.oauth2(asClientID, asRedirect)
	tok := e.token(cfg)
	cl, err := e.s.VerifyAccessToken(context.Background(), tok.AccessToken, "")
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

func TestVault(t *testing.T) {
	rc, prefix := redistest.Client(t)
	e := newAS(t, func(c *ServerConfig) {
		c.TokenStorage = TokenStorageConfig{Type: "redis", Client: rc, KeyPrefix: prefix}
	})
	ctx := context.Background()
	cl := grant(t, e)
	vault := e.s.Vault()
	secret := []byte("ghp_upstream-token-of-alice")

	if err := vault.Put(ctx, "no-such-session", "github", secret); ErrorCode(err) != CodeNoSession {
		t.Fatalf("put without a session: %v", err)
	}
	if err := vault.Put(ctx, cl.SessionID, "github", secret); err != nil {
		t.Fatal(err)
	}
	if err := vault.Put(ctx, cl.SessionID, "jira", []byte("jira-token")); err != nil {
		t.Fatal(err)
	}
	got, err := vault.Get(ctx, cl.SessionID, "github")
	if err != nil || !bytes.Equal(got, secret) {
		t.Fatalf("get: %q %v", got, err)
	}
	if _, err := vault.Get(ctx, cl.SessionID, "gitlab"); ErrorCode(err) != CodeVaultNotFound {
		t.Fatalf("missing upstream: %v", err)
	}

	// Encrypted at rest, with the session's lifetime.
	key := prefix + "vault:" + cl.SessionID
	raw, err := rc.Get(ctx, key).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, secret) || bytes.Contains(raw, []byte("github")) {
		t.Fatal("vault record holds plaintext")
	}
	week := 7 * 24 * time.Hour
	if d := ttlOf(t, rc, key); d <= week-time.Minute || d > week {
		t.Fatalf("vault ttl %v, want the session's", d)
	}

	// A record moved under another session does not decrypt.
	other := grant(t, e)
	if err := rc.Set(ctx, prefix+"vault:"+other.SessionID, raw, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := vault.Get(ctx, other.SessionID, "github"); ErrorCode(err) != CodeVaultCorrupt {
		t.Fatalf("record under another session: %v", err)
	}

	if err := vault.Delete(ctx, cl.SessionID, "github"); err != nil {
		t.Fatal(err)
	}
	if _, err := vault.Get(ctx, cl.SessionID, "github"); ErrorCode(err) != CodeVaultNotFound {
		t.Fatalf("after delete: %v", err)
	}
	if got, _ := vault.Get(ctx, cl.SessionID, "jira"); string(got) != "jira-token" {
		t.Fatal("delete removed another upstream")
	}

	// Revoking the session erases its vault.
	e.s.revokeSession(ctx, cl.SessionID, "test")
	if n, _ := rc.Exists(ctx, key).Result(); n != 0 {
		t.Fatal("vault survives its session")
	}
	if err := vault.Put(ctx, cl.SessionID, "github", secret); ErrorCode(err) != CodeNoSession {
		t.Fatalf("put after revocation: %v", err)
	}
}

func TestVaultKeyFollowsSigningKey(t *testing.T) {
	e := newAS(t, nil)
	cl := grant(t, e)
	ctx := context.Background()
	if err := e.s.Vault().Put(ctx, cl.SessionID, "x", []byte("v")); err != nil {
		t.Fatal(err)
	}
	// Another server on the same store but a different signing key cannot
	// read the vault.
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	other := newVault(e.s, mustKey(t, k))
	if _, err := other.Get(ctx, cl.SessionID, "x"); ErrorCode(err) != CodeVaultCorrupt {
		t.Fatalf("foreign key: %v", err)
	}
}

func mustKey(t *testing.T, k *ecdsa.PrivateKey) *signingKey {
	t.Helper()
	sk, err := newSigningKey(k, "")
	if err != nil {
		t.Fatal(err)
	}
	return sk
}
