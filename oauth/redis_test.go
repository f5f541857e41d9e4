package oauth

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/codemode-gateway/caddy-codemode/guard/redistest"
	"github.com/redis/go-redis/v9"
	"golang.org/x/oauth2"
)

func newRedisAS(t *testing.T, mutate func(*ServerConfig)) (*asEnv, *redis.Client, string) {
	t.Helper()
	rc, prefix := redistest.Client(t)
	e := newAS(t, func(c *ServerConfig) {
		c.TokenStorage = TokenStorageConfig{Type: "redis", Client: rc, KeyPrefix: prefix}
		if mutate != nil {
			mutate(c)
		}
	})
	return e, rc, prefix
}

// newCappedAS is a server of storage "memory" or "redis" configured by
// capped; with Redis, other starts a second instance on the same Redis
// (nil in memory, where instances share nothing).
func newCappedAS(t *testing.T, storage string, capped func(*ServerConfig)) (e *asEnv, other func() *asEnv) {
	t.Helper()
	if storage != "redis" {
		return newAS(t, capped), nil
	}
	e, rc, prefix := newRedisAS(t, capped)
	return e, func() *asEnv {
		return newAS(t, func(c *ServerConfig) {
			capped(c)
			c.TokenStorage = TokenStorageConfig{Type: "redis", Client: rc, KeyPrefix: prefix}
		})
	}
}

func keysWith(t *testing.T, rc *redis.Client, pattern string) []string {
	t.Helper()
	keys, err := rc.Keys(context.Background(), pattern).Result()
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

func ttlOf(t *testing.T, rc *redis.Client, key string) time.Duration {
	t.Helper()
	d, err := rc.PTTL(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestRedisStorageFlowAndKeys(t *testing.T) {
	e, rc, prefix := newRedisAS(t, nil)
	if e.logs.FilterMessageSnippet("in memory").Len() != 0 {
		t.Fatal("redis storage announced as memory")
	}
	cfg := e.oauth2(asClientID, asRedirect)
	v := oauth2.GenerateVerifier()
	code := e.code(cfg, v)

	pend := keysWith(t, rc, prefix+"pending:*")
	codes := keysWith(t, rc, prefix+"code:*")
	if len(pend) != 1 || len(codes) != 1 {
		t.Fatalf("pending %v codes %v", pend, codes)
	}
	if d := ttlOf(t, rc, pend[0]); d <= 9*time.Minute || d > PendingTTL {
		t.Fatalf("pending ttl %v, want 10 minutes", d)
	}
	if d := ttlOf(t, rc, codes[0]); d <= 50*time.Second || d > CodeTTL {
		t.Fatalf("code ttl %v, want 60 s", d)
	}
	if strings.Contains(codes[0], code) {
		t.Fatal("the code itself is a key")
	}

	tok, err := cfg.Exchange(e.ctx(), code, oauth2.VerifierOption(v))
	if err != nil {
		t.Fatal(err)
	}
	if len(keysWith(t, rc, prefix+"pending:*")) != 0 {
		t.Fatal("pending authorization left after the exchange")
	}
	// The code is gone; what is left is the marker that lets a replay
	// revoke the grant, for ten minutes.
	if left := keysWith(t, rc, prefix+"code:*"); len(left) != 1 || !strings.HasSuffix(left[0], ":used") {
		t.Fatalf("code keys after the exchange: %v", left)
	} else if d := ttlOf(t, rc, left[0]); d <= 9*time.Minute || d > PendingTTL {
		t.Fatalf("used-code marker ttl %v", d)
	}
	refresh := keysWith(t, rc, prefix+"refresh:*")
	sessions := keysWith(t, rc, prefix+"session:*")
	if len(refresh) != 1 || len(sessions) != 1 {
		t.Fatalf("refresh %v sessions %v", refresh, sessions)
	}
	week := 7 * 24 * time.Hour
	if d := ttlOf(t, rc, refresh[0]); d <= week-time.Minute || d > week {
		t.Fatalf("refresh ttl %v", d)
	}
	if d := ttlOf(t, rc, sessions[0]); d <= week-time.Minute || d > week {
		t.Fatalf("session ttl %v", d)
	}
	all := keysWith(t, rc, prefix+"*")
	for _, k := range all {
		val, _ := rc.Get(context.Background(), k).Result()
		for _, secret := range []string{tok.AccessToken, tok.RefreshToken, code} {
			if strings.Contains(k, secret) || strings.Contains(val, secret) {
				t.Fatalf("key %s holds a token in the clear", k)
			}
		}
	}

	if _, err := e.s.VerifyAccessToken(context.Background(), tok.AccessToken, asResource); err != nil {
		t.Fatal(err)
	}
	refreshOnce := func(rt string) (*oauth2.Token, error) {
		return cfg.TokenSource(e.ctx(), &oauth2.Token{RefreshToken: rt, Expiry: time.Now().Add(-time.Minute)}).Token()
	}
	tok2, err := refreshOnce(tok.RefreshToken)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := refreshOnce(tok.RefreshToken); !isOAuthError(err, "invalid_grant") {
		t.Fatalf("reuse on redis: %v", err)
	}
	if _, err := e.s.VerifyAccessToken(context.Background(), tok2.AccessToken, ""); TokenReason(err) != ReasonRevoked {
		t.Fatalf("chain not revoked on redis: %v", err)
	}
	if len(keysWith(t, rc, prefix+"session:*")) != 0 {
		t.Fatal("session left after reuse")
	}

	// A replayed code is refused and revokes what it bought.
	v = oauth2.GenerateVerifier()
	code = e.code(cfg, v)
	tok, err = cfg.Exchange(e.ctx(), code, oauth2.VerifierOption(v))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cfg.Exchange(e.ctx(), code, oauth2.VerifierOption(v)); !isOAuthError(err, "invalid_grant") {
		t.Fatalf("code reuse on redis: %v", err)
	}
	if _, err := e.s.VerifyAccessToken(context.Background(), tok.AccessToken, ""); TokenReason(err) != ReasonRevoked {
		t.Fatalf("token of a replayed code on redis: %v", err)
	}
}

// Two server instances on one Redis are one authorization server: a code
// from one is exchanged at the other, a token from one verifies at the
// other, and a revocation at one is seen by the other.
func TestRedisTwoInstances(t *testing.T) {
	rc, prefix := redistest.Client(t)
	a := newAS(t, func(c *ServerConfig) {
		c.TokenStorage = TokenStorageConfig{Type: "redis", Client: rc, KeyPrefix: prefix}
		c.Local.KeyRotationDays = 30
	})
	// b is a second instance of the same server (same issuer, key and
	// Redis) on its own socket.
	b := newAS(t, func(c *ServerConfig) {
		c.TokenStorage = TokenStorageConfig{Type: "redis", Client: rc, KeyPrefix: prefix}
		c.Local.KeyRotationDays = 30
		c.Issuer = a.srv.URL
	})
	b.clock.Set(a.clock.Now())

	v := oauth2.GenerateVerifier()
	code := a.code(a.oauth2(asClientID, asRedirect), v)
	cfgB := b.oauth2(asClientID, asRedirect)
	tok, err := cfgB.Exchange(b.ctx(), code, oauth2.VerifierOption(v))
	if err != nil {
		t.Fatalf("code from instance a exchanged at instance b: %v", err)
	}
	if _, err := a.s.VerifyAccessToken(context.Background(), tok.AccessToken, asResource); err != nil {
		t.Fatalf("instance a rejects instance b's token: %v", err)
	}
	tok2, err := a.oauth2(asClientID, asRedirect).TokenSource(a.ctx(), &oauth2.Token{RefreshToken: tok.RefreshToken, Expiry: time.Now().Add(-time.Minute)}).Token()
	if err != nil {
		t.Fatalf("refresh at instance a: %v", err)
	}
	// Reuse at b of the token a rotated revokes the chain everywhere.
	_, err = cfgB.TokenSource(b.ctx(), &oauth2.Token{RefreshToken: tok.RefreshToken, Expiry: time.Now().Add(-time.Minute)}).Token()
	if !isOAuthError(err, "invalid_grant") {
		t.Fatalf("reuse at the other instance: %v", err)
	}
	if _, err := a.s.VerifyAccessToken(context.Background(), tok2.AccessToken, ""); TokenReason(err) != ReasonRevoked {
		t.Fatalf("revocation not shared: %v", err)
	}
}

func TestRedisUnavailable(t *testing.T) {
	srv := redistest.Start(t)
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = rc.Close() })
	e := newAS(t, func(c *ServerConfig) {
		c.TokenStorage = TokenStorageConfig{Type: "redis", Client: rc, KeyPrefix: "t:"}
	})
	cfg := e.oauth2(asClientID, asRedirect)
	tok := e.token(cfg)
	srv.Stop()
	_, err := e.s.VerifyAccessToken(context.Background(), tok.AccessToken, "")
	if !errors.Is(err, ErrTokenStorage) || TokenReason(err) != "" {
		t.Fatalf("storage down: %v, want ErrTokenStorage and no token reason", err)
	}
	if err := e.s.Ping(context.Background()); ErrorCode(err) != CodeStorage {
		t.Fatalf("ping: %v", err)
	}
}

// TestRedisUnavailableRegisteredClient: while the token storage is down, a
// registered client is not "unknown". invalid_client would make an MCP
// client forget its registration and tokens (the TypeScript SDK invalidates
// all its credentials on it), so a Redis outage would sign every user out.
// The endpoints that look the client up answer 503 temporarily_unavailable
// with Retry-After instead, never a redirect (the redirect URI cannot be
// checked). A client that is really gone is still invalid_client.
func TestRedisUnavailableRegisteredClient(t *testing.T) {
	srv := redistest.Start(t)
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = rc.Close() })
	e := newAS(t, func(c *ServerConfig) {
		c.DCREnabled = true
		c.TokenStorage = TokenStorageConfig{Type: "redis", Client: rc, KeyPrefix: "t:"}
	})
	redirect := "http://127.0.0.1:33418/oauth/callback"
	status, out := register(t, e, map[string]any{"redirect_uris": []string{redirect}, "token_endpoint_auth_method": "none"})
	if status != http.StatusCreated {
		t.Fatalf("register: %d %v", status, out)
	}
	id, _ := out["client_id"].(string)
	verifier := oauth2.GenerateVerifier()
	authorize := e.srv.URL + "/oauth/authorize?" + url.Values{
		"response_type": {"code"}, "client_id": {id}, "redirect_uri": {redirect}, "state": {"s"},
		"code_challenge": {oauth2.S256ChallengeFromVerifier(verifier)}, "code_challenge_method": {"S256"},
	}.Encode()
	refresh := url.Values{"grant_type": {"refresh_token"}, "refresh_token": {"not-a-token"}, "client_id": {id}}
	if st, code, _ := e.postToken(refresh, "", ""); st != http.StatusBadRequest || code != "invalid_grant" {
		t.Fatalf("storage up: %d %s, want 400 invalid_grant", st, code)
	}

	srv.Stop()
	unavailable := func(what string, resp *http.Response) {
		t.Helper()
		b := body(t, resp)
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" ||
			!strings.Contains(b, `"error":"temporarily_unavailable"`) {
			t.Fatalf("%s with the storage down: %d Retry-After %q %s, want 503 temporarily_unavailable",
				what, resp.StatusCode, resp.Header.Get("Retry-After"), b)
		}
	}
	unavailable("refresh", e.postForm(e.srv.URL+"/oauth/token", refresh))
	unavailable("code exchange", e.postForm(e.srv.URL+"/oauth/token", url.Values{"grant_type": {"authorization_code"},
		"code": {"c"}, "client_id": {id}, "redirect_uri": {redirect}, "code_verifier": {verifier}}))
	unavailable("revoke", e.postForm(e.srv.URL+"/oauth/revoke", url.Values{"token": {"t"}, "client_id": {id}}))
	unavailable("authorize", e.get(authorize))

	srv.Restart() // empty: the registration is gone
	if st, code, _ := e.postToken(refresh, "", ""); st != http.StatusUnauthorized || code != "invalid_client" {
		t.Fatalf("storage back without the client: %d %s, want 401 invalid_client", st, code)
	}
}

// The count behind max_registered_clients behaves the same on both
// storages: expired entries free their places, extend keeps one, forget
// frees one, and a full count names when the first place frees.
func TestRegistrationCount(t *testing.T) {
	rc, prefix := redistest.Client(t)
	ctx := context.Background()
	t0 := time.Now().Truncate(time.Millisecond)
	for name, r := range map[string]registrations{
		"memory": newMemoryRegistrations(),
		"redis":  redisRegistrations{rc, prefix + keyRegistrations, "registered clients"},
	} {
		t.Run(name, func(t *testing.T) {
			admit := func(id string, now, exp time.Time) (bool, time.Time) {
				t.Helper()
				ok, free, err := r.admit(ctx, id, now, exp, 2)
				if err != nil {
					t.Fatal(err)
				}
				return ok, free
			}
			if ok, _ := admit("a", t0, t0.Add(time.Hour)); !ok {
				t.Fatal("a refused")
			}
			if ok, _ := admit("b", t0, t0.Add(2*time.Hour)); !ok {
				t.Fatal("b refused")
			}
			if ok, free := admit("c", t0, t0.Add(time.Hour)); ok || !free.Equal(t0.Add(time.Hour)) {
				t.Fatalf("c at the cap: %v, first place frees at %v", ok, free)
			}
			// a is used: its place is kept past its first expiry.
			if err := r.extend(ctx, "a", t0.Add(3*time.Hour)); err != nil {
				t.Fatal(err)
			}
			if ok, free := admit("c", t0.Add(90*time.Minute), t0.Add(3*time.Hour)); ok || !free.Equal(t0.Add(2*time.Hour)) {
				t.Fatalf("c with a extended: %v, %v", ok, free)
			}
			// b expires; c takes its place, an entry expiring before a.
			if ok, _ := admit("c", t0.Add(2*time.Hour), t0.Add(150*time.Minute)); !ok {
				t.Fatal("c refused after b expired")
			}
			if ok, free := admit("d", t0.Add(2*time.Hour), t0.Add(4*time.Hour)); ok || !free.Equal(t0.Add(150*time.Minute)) {
				t.Fatalf("d: %v, first place frees at %v, want c's expiry", ok, free)
			}
			if err := r.forget(ctx, "c"); err != nil {
				t.Fatal(err)
			}
			if ok, _ := admit("d", t0.Add(2*time.Hour), t0.Add(4*time.Hour)); !ok {
				t.Fatal("d refused after c was forgotten")
			}
			// extend never adds an entry it does not count.
			if err := r.extend(ctx, "gone", t0.Add(5*time.Hour)); err != nil {
				t.Fatal(err)
			}
			if ok, _ := admit("e", t0.Add(2*time.Hour), t0.Add(4*time.Hour)); ok {
				t.Fatal("e admitted past the cap")
			}
			// A used client's lifetime may be shorter than the unused
			// one's (registered_client_ttl and the token lifetimes under
			// 24 h): extend moves d earlier than every other entry, and its
			// place frees then. The memory count kept the earliest expiry it
			// had seen and refused until a's.
			if err := r.extend(ctx, "d", t0.Add(135*time.Minute)); err != nil {
				t.Fatal(err)
			}
			if ok, free := admit("e", t0.Add(130*time.Minute), t0.Add(4*time.Hour)); ok || !free.Equal(t0.Add(135*time.Minute)) {
				t.Fatalf("e before d's new expiry: %v, first place frees at %v, want d's new expiry", ok, free)
			}
			if ok, _ := admit("e", t0.Add(140*time.Minute), t0.Add(4*time.Hour)); !ok {
				t.Fatal("e refused after d's shortened lifetime ended")
			}
		})
	}
}

// TestRedisCountsNameWhatTheyCount: a failure of the pending
// authorizations' count says so, not "registered clients" (the two counts
// share their code).
func TestRedisCountsNameWhatTheyCount(t *testing.T) {
	rc := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: 100 * time.Millisecond, MaxRetries: -1})
	defer rc.Close()
	for _, what := range []string{"registered clients", "pending authorizations"} {
		_, _, err := redisRegistrations{rc, "t:", what}.admit(context.Background(), "id", time.Now(), time.Now().Add(time.Minute), 10)
		if err == nil || !strings.Contains(err.Error(), "counting "+what) {
			t.Errorf("%s: %v", what, err)
		}
	}
}
