package oauth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/codemode-gateway/caddy-codemode/guard/redistest"
	"golang.org/x/oauth2"
)

// The same contract holds for both backends.
func TestStoreContract(t *testing.T) {
	rc, prefix := redistest.Client(t)
	clk := &fakeNow{t: time.Now()}
	for name, st := range map[string]kvStore{
		"memory": prefixedMemory{newMemoryStore(clk.Now), "p:"},
		"redis":  &redisStore{c: rc, prefix: prefix},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			if _, err := st.Get(ctx, "a"); !errors.Is(err, errNotFound) {
				t.Fatalf("get missing: %v", err)
			}
			if ok, err := st.SetXX(ctx, "a", []byte("x"), time.Minute); ok || err != nil {
				t.Fatalf("setxx on missing key: %v %v", ok, err)
			}
			if ok, err := st.SetNX(ctx, "a", []byte("1"), time.Minute); !ok || err != nil {
				t.Fatalf("setnx: %v %v", ok, err)
			}
			if ok, _ := st.SetNX(ctx, "a", []byte("2"), time.Minute); ok {
				t.Fatal("setnx on an existing key succeeded")
			}
			if ok, err := st.SetXX(ctx, "a", []byte("3"), time.Minute); !ok || err != nil {
				t.Fatalf("setxx: %v %v", ok, err)
			}
			if b, _ := st.GetDel(ctx, "a"); string(b) != "3" {
				t.Fatalf("getdel %q", b)
			}
			if _, err := st.GetDel(ctx, "a"); !errors.Is(err, errNotFound) {
				t.Fatalf("second getdel: %v", err)
			}
			_ = st.Set(ctx, "b", []byte("v"), 0)
			_ = st.Set(ctx, "c", []byte("v"), time.Minute)
			if err := st.Expire(ctx, "missing", time.Minute); err != nil {
				t.Fatalf("expire missing: %v", err)
			}
			if err := st.Del(ctx, "b", "c", "missing"); err != nil {
				t.Fatal(err)
			}
			if _, err := st.Get(ctx, "b"); !errors.Is(err, errNotFound) {
				t.Fatal("del did not delete")
			}
			if err := st.Ping(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestMemoryStoreExpiresByInjectedClock(t *testing.T) {
	clk := &fakeNow{t: time.Now()}
	st := newMemoryStore(clk.Now)
	ctx := context.Background()
	_ = st.Set(ctx, "k", []byte("v"), time.Minute)
	_ = st.Set(ctx, "forever", []byte("v"), 0)
	clk.Add(59 * time.Second)
	if _, err := st.Get(ctx, "k"); err != nil {
		t.Fatalf("before expiry: %v", err)
	}
	_ = st.Expire(ctx, "k", 2*time.Minute)
	clk.Add(time.Minute)
	if _, err := st.Get(ctx, "k"); err != nil {
		t.Fatalf("expire did not extend: %v", err)
	}
	clk.Add(time.Minute)
	if _, err := st.Get(ctx, "k"); !errors.Is(err, errNotFound) {
		t.Fatalf("after expiry: %v", err)
	}
	if ok, _ := st.SetNX(ctx, "k", []byte("new"), time.Minute); !ok {
		t.Fatal("an expired key blocks setnx")
	}
	// Expired entries are swept on writes, so memory stays bounded.
	for i := range 2048 {
		_ = st.Set(ctx, fmt.Sprint("tmp", i), []byte("v"), time.Second)
	}
	clk.Add(2 * time.Second)
	for i := range 1024 {
		_ = st.Set(ctx, fmt.Sprint("new", i), []byte("v"), time.Hour)
	}
	st.mu.Lock()
	n := len(st.m)
	st.mu.Unlock()
	if n > 1024+2+1 {
		t.Fatalf("%d entries after the sweep", n)
	}
	if _, err := st.Get(ctx, "forever"); err != nil {
		t.Fatal("a key without ttl expired")
	}
}

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
