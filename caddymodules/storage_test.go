package caddymodules

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
)

// TestRedisStoragePlaceholders: every string of the redis storage takes
// placeholders, as docs/storage.md says, the TLS settings included (a CA
// file path from the environment used to reach os.ReadFile as written).
func TestRedisStoragePlaceholders(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("CODEMODE_TEST_REDIS_CA", caFile)
	t.Setenv("CODEMODE_TEST_REDIS_NAME", "redis.internal")
	t.Setenv("CODEMODE_TEST_REDIS_PW", "pw")
	t.Setenv("CODEMODE_TEST_REDIS_PREFIX", "gw1:")
	r := &RedisStorage{Address: "127.0.0.1:6379", Password: "{env.CODEMODE_TEST_REDIS_PW}", KeyPrefix: "{env.CODEMODE_TEST_REDIS_PREFIX}",
		TLS: &RedisTLS{ServerName: "{env.CODEMODE_TEST_REDIS_NAME}", CAFile: "{env.CODEMODE_TEST_REDIS_CA}"}}
	r.replacePlaceholders()
	o, err := r.options()
	if err != nil {
		t.Fatal(err)
	}
	if o.Password != "pw" || r.KeyPrefix != "gw1:" || o.TLSConfig == nil || o.TLSConfig.ServerName != "redis.internal" || o.TLSConfig.RootCAs == nil {
		t.Fatalf("placeholders not resolved: password %q, key prefix %q, tls %+v", o.Password, r.KeyPrefix, o.TLSConfig)
	}
}

// TestRedisStorageUnsetAddress: `storage redis {env.REDIS_ADDR}` with the
// variable unset fails the load instead of using the default local Redis,
// which other gateways do not share.
func TestRedisStorageUnsetAddress(t *testing.T) {
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancel()
	r := &RedisStorage{Address: "{env.CODEMODE_TEST_SURELY_UNSET_ADDR}"}
	err := r.Provision(ctx)
	if err == nil || !strings.Contains(err.Error(), "is empty once its placeholders are resolved") {
		t.Fatalf("provision: %v", err)
	}
}
