package credential

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/codemode-gateway/caddy-codemode/guard/redistest"
)

func newKey(t testing.TB) []byte {
	t.Helper()
	k := make([]byte, KeySize)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

func keyring(t testing.TB, cur []byte, prev ...[]byte) *Keyring {
	t.Helper()
	k, err := NewKeyring(cur, prev...)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// stores runs fn against the memory store and a Redis store.
func stores(t *testing.T, fn func(t *testing.T, s Store)) {
	t.Run("memory", func(t *testing.T) { fn(t, NewMemoryStore(nil)) })
	t.Run("redis", func(t *testing.T) {
		c, prefix := redistest.Client(t)
		fn(t, NewRedisStore(c, prefix+"credentials:"))
	})
}

func TestParseKey(t *testing.T) {
	k := newKey(t)
	for name, s := range map[string]string{
		"std":    base64.StdEncoding.EncodeToString(k),
		"raw":    base64.RawStdEncoding.EncodeToString(k),
		"url":    base64.URLEncoding.EncodeToString(k),
		"rawurl": base64.RawURLEncoding.EncodeToString(k),
		"hex":    hex.EncodeToString(k),
		"spaces": " " + base64.StdEncoding.EncodeToString(k) + "\n",
	} {
		got, err := ParseKey(s)
		if err != nil || !bytes.Equal(got, k) {
			t.Errorf("%s: %v", name, err)
		}
	}
	for _, bad := range []string{"", "short", base64.StdEncoding.EncodeToString(k[:16]), "!!!"} {
		if _, err := ParseKey(bad); err == nil {
			t.Errorf("ParseKey(%q) accepted", bad)
		}
	}
	if _, err := NewKeyring(k[:16]); err == nil {
		t.Error("a 16-byte key accepted")
	}
}

func TestVaultSealsPerOwnerAndService(t *testing.T) {
	stores(t, func(t *testing.T, s Store) {
		ctx := context.Background()
		v := NewVault(s, keyring(t, newKey(t)), rand.Reader, time.Hour)
		rec := &Record{Kind: KindAPIKey, APIKey: "secret-key-123", ConnectedAt: time.Unix(5, 0).UTC()}
		if err := v.Put(ctx, "alice", "forge", rec); err != nil {
			t.Fatal(err)
		}
		got, err := v.Get(ctx, "alice", "forge")
		if err != nil || got.APIKey != "secret-key-123" {
			t.Fatalf("get: %+v %v", got, err)
		}
		raw, _ := s.Get(ctx, "vault:alice:forge")
		if bytes.Contains(raw, []byte("secret-key-123")) {
			t.Fatal("the stored record holds the key in the clear")
		}
		// The record copied under another user or service does not open.
		_ = s.Set(ctx, "vault:bob:forge", raw, time.Hour)
		_ = s.Set(ctx, "vault:alice:chat", raw, time.Hour)
		for _, k := range [][2]string{{"bob", "forge"}, {"alice", "chat"}} {
			if _, err := v.Get(ctx, k[0], k[1]); !errors.Is(err, ErrUnreadable) {
				t.Errorf("record copied to %v: %v, want ErrUnreadable", k, err)
			}
		}
		if _, err := v.Get(ctx, "carol", "forge"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("missing record: %v", err)
		}
		if err := v.Delete(ctx, "alice", "forge"); err != nil {
			t.Fatal(err)
		}
		if _, err := v.Get(ctx, "alice", "forge"); !errors.Is(err, ErrNotFound) {
			t.Fatal("deleted record still there")
		}
	})
}

// TestVaultKeyRotation: a new key with the old one as previous opens old
// records and re-seals them (on read and by Rekey); once the old key is
// dropped, what was not re-sealed is unreadable, never misread.
func TestVaultKeyRotation(t *testing.T) {
	stores(t, func(t *testing.T, s Store) {
		ctx := context.Background()
		k1, k2 := newKey(t), newKey(t)
		old := NewVault(s, keyring(t, k1), rand.Reader, time.Hour)
		for _, o := range []string{"a", "b", "c"} {
			if err := old.Put(ctx, o, "forge", &Record{Kind: KindAPIKey, APIKey: "key-" + o}); err != nil {
				t.Fatal(err)
			}
		}
		// Without the old key nothing opens: VAULT_CORRUPT of the old design
		// becomes "connect again", never a wrong credential.
		lost := NewVault(s, keyring(t, k2), rand.Reader, time.Hour)
		if _, err := lost.Get(ctx, "a", "forge"); !errors.Is(err, ErrUnreadable) {
			t.Fatalf("new key alone: %v", err)
		}
		rotated := NewVault(s, keyring(t, k2, k1), rand.Reader, time.Hour)
		// A read re-seals.
		if r, err := rotated.Get(ctx, "a", "forge"); err != nil || r.APIKey != "key-a" {
			t.Fatalf("read through the previous key: %+v %v", r, err)
		}
		if r, err := lost.Get(ctx, "a", "forge"); err != nil || r.APIKey != "key-a" {
			t.Fatalf("the record read once is now under the new key: %v", err)
		}
		st, err := rotated.Rekey(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Records != 3 || st.Resealed != 2 || st.Unreadable != 0 {
			t.Fatalf("rekey: %+v, want 3 records, 2 resealed", st)
		}
		for _, o := range []string{"a", "b", "c"} {
			if r, err := lost.Get(ctx, o, "forge"); err != nil || r.APIKey != "key-"+o {
				t.Fatalf("after rekey, %s under the new key alone: %+v %v", o, r, err)
			}
		}
		if st, _ := rotated.Rekey(ctx); st.Resealed != 0 {
			t.Fatalf("a second rekey resealed %d records", st.Resealed)
		}
		// A record of a key nobody has any more is counted, not destroyed.
		k3 := newKey(t)
		_ = NewVault(s, keyring(t, k3), rand.Reader, time.Hour).Put(ctx, "d", "forge", &Record{Kind: KindAPIKey, APIKey: "x"})
		if st, _ := rotated.Rekey(ctx); st.Unreadable != 1 {
			t.Fatalf("rekey with a foreign record: %+v", st)
		}
		if keyring(t, k2).CurrentID() == keyring(t, k1).CurrentID() {
			t.Fatal("two keys share an id")
		}
	})
}

// TestVaultRekeyKeepsConcurrentWrite: a record rewritten between Rekey's
// read and its write keeps the new value.
func TestVaultRekeyKeepsConcurrentWrite(t *testing.T) {
	ctx := context.Background()
	s := NewMemoryStore(nil)
	k1, k2 := newKey(t), newKey(t)
	_ = NewVault(s, keyring(t, k1), rand.Reader, 0).Put(ctx, "a", "forge", &Record{Kind: KindAPIKey, APIKey: "old"})
	sealed, _ := s.Get(ctx, "vault:a:forge")
	rotated := NewVault(s, keyring(t, k2, k1), rand.Reader, 0)
	_ = rotated.Put(ctx, "a", "forge", &Record{Kind: KindAPIKey, APIKey: "new"})
	if ok, _ := s.CompareAndSwap(ctx, "vault:a:forge", sealed, []byte("x"), 0); ok {
		t.Fatal("swap over a newer write")
	}
	if r, _ := rotated.Get(ctx, "a", "forge"); r.APIKey != "new" {
		t.Fatalf("got %q", r.APIKey)
	}
}
