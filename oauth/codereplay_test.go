package oauth

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/oauth2"
)

// sessionHookStore runs before once, just before the first write of a
// grant (a session:{id} record) after arm.
type sessionHookStore struct {
	kvStore
	before func(ctx context.Context)
	armed  atomic.Bool
}

func (h *sessionHookStore) Set(ctx context.Context, key string, val []byte, ttl time.Duration) error {
	if strings.HasPrefix(key, "session:") && !strings.Contains(key[len("session:"):], ":") && h.armed.CompareAndSwap(true, false) {
		h.before(ctx)
	}
	return h.kvStore.Set(ctx, key, val, ttl)
}

// TestCodeReplayDuringItsExchange: a code presented again while its first
// exchange is still creating the grant revokes that grant (OAuth 2.1
// section 4.1.3), as a replay after the exchange does. The code was
// consumed first and marked with its grant only once the grant was
// stored: a replay in between found neither the code nor the mark, was
// refused, and left the first exchange's tokens working.
func TestCodeReplayDuringItsExchange(t *testing.T) {
	for _, storage := range []string{"memory", "redis"} {
		t.Run(storage, func(t *testing.T) {
			var e *asEnv
			if storage == "redis" {
				e, _, _ = newRedisAS(t, nil)
			} else {
				e = newAS(t, nil)
			}
			cfg := e.oauth2(asClientID, asRedirect)
			verifier := oauth2.GenerateVerifier()
			code := e.code(cfg, verifier)
			hook := &sessionHookStore{kvStore: e.s.store}
			var replayErr error
			hook.before = func(ctx context.Context) {
				_, replayErr = e.s.redeemCode(ctx, code)
			}
			e.s.store = hook
			defer func() { e.s.store = hook.kvStore }()
			hook.armed.Store(true)

			tok, err := cfg.Exchange(e.ctx(), code, oauth2.VerifierOption(verifier))
			if hook.armed.Load() {
				t.Fatal("no grant was written")
			}
			if replayErr == nil {
				t.Fatal("the replay redeemed the code")
			}
			if err != nil {
				if !strings.Contains(err.Error(), "invalid_grant") {
					t.Fatalf("the first exchange: %v, want invalid_grant or revoked tokens", err)
				}
				return
			}
			if _, err := e.s.VerifyAccessToken(context.Background(), tok.AccessToken, ""); TokenReason(err) != ReasonRevoked {
				t.Errorf("the first exchange's access token after a replay during the exchange: %v, want revoked", err)
			}
			if _, err := cfg.TokenSource(e.ctx(), &oauth2.Token{RefreshToken: tok.RefreshToken}).Token(); err == nil {
				t.Error("the first exchange's refresh token works after a replay during the exchange")
			}
		})
	}
}
