package oauth

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/oauth2"
)

func TestRefreshNarrowsScopeOfAccessTokenOnly(t *testing.T) {
	e := newAS(t, nil)
	cfg := e.oauth2(asClientID, asRedirect)
	cfg.Scopes = []string{"mcp", "tools:read"}
	tok := e.token(cfg)
	// x/oauth2 never sends scope on a refresh; post the form directly.
	refreshWith := func(rt, scope string) (map[string]any, int) {
		resp := e.postForm(e.srv.URL+"/oauth/token", url.Values{"grant_type": {"refresh_token"}, "refresh_token": {rt},
			"client_id": {asClientID}, "scope": {scope}})
		var out map[string]any
		_ = json.Unmarshal([]byte(body(t, resp)), &out)
		return out, resp.StatusCode
	}
	out, status := refreshWith(tok.RefreshToken, "mcp")
	if status != http.StatusOK {
		t.Fatalf("narrowing refresh: %d %v", status, out)
	}
	cl, err := e.s.VerifyAccessToken(context.Background(), out["access_token"].(string), "")
	if err != nil || cl.HasScope("tools:read") || !cl.HasScope("mcp") {
		t.Fatalf("narrowed token: %+v %v", cl, err)
	}
	tok2 := &oauth2.Token{RefreshToken: out["refresh_token"].(string)}
	// The grant keeps its scopes: the next refresh may ask for all of them.
	tok3, err := cfg.TokenSource(e.ctx(), &oauth2.Token{RefreshToken: tok2.RefreshToken, Expiry: time.Now().Add(-time.Minute)}).Token()
	if err != nil {
		t.Fatal(err)
	}
	if cl, _ := e.s.VerifyAccessToken(context.Background(), tok3.AccessToken, ""); !cl.HasScope("tools:read") {
		t.Fatalf("grant lost a scope: %+v", cl)
	}
	// Widening beyond the grant is refused.
	if out, status := refreshWith(tok3.RefreshToken, "mcp admin"); status != http.StatusBadRequest || out["error"] != "invalid_scope" {
		t.Fatalf("widening: %d %v", status, out)
	}
}

// TestOwnRedisClientHonoursDeadlines: the client the server dials itself
// (no Client given) applies a caller's context deadline to reads and
// writes, as the gateway's other Redis clients do; it did not.
func TestOwnRedisClientHonoursDeadlines(t *testing.T) {
	s, _, _ := newRedisStore(TokenStorageConfig{Host: "127.0.0.1", Port: 1}, "t:")
	o, ok := s.(ownedRedis)
	if !ok {
		t.Fatalf("store %T, want ownedRedis", s)
	}
	defer o.Close()
	c, ok := o.c.(*redis.Client)
	if !ok || !c.Options().ContextTimeoutEnabled {
		t.Fatalf("client %T: ContextTimeoutEnabled not set", o.c)
	}
}
