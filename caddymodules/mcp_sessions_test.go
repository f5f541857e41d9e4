package caddymodules

import (
	"context"
	"testing"
	"time"

	"github.com/codemode-gateway/caddy-codemode/guard/redistest"
	"go.uber.org/zap"
)

// TestMCPDirectoryRegisterCarriesLiveness: a session this gateway records
// is never listed under a gateway that looks gone. keepAlive beats on its
// own goroutine, so a session registered before its first beat (a client
// that connects as the gateway starts, under load) was reported gone by the
// next gateway asked for it, which deleted its entry: the holder's liveness
// now goes with every registration.
func TestMCPDirectoryRegisterCarriesLiveness(t *testing.T) {
	rdb, prefix := redistest.Client(t)
	d := newMCPSessionDirectory(rdb, prefix, "http://127.0.0.1:1/mcp", time.Minute, zap.NewNop())
	defer d.close()
	ctx := context.Background()
	gw := d.gw(d.self)
	deadline := time.Now().Add(30 * time.Second)
	for rdb.Exists(ctx, gw).Val() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the first beat never set the liveness")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// As if the first beat had not run yet (the next one is mcpGatewayTTL/3 away).
	rdb.Del(ctx, gw)
	d.register("s1")
	if rdb.Exists(ctx, d.key("s1")).Val() != 1 {
		t.Fatal("the session was not recorded")
	}
	if ttl := rdb.TTL(ctx, gw).Val(); ttl <= 0 || ttl > mcpGatewayTTL {
		t.Fatalf("after a registration the holder's liveness TTL is %v, want (0, %v]", ttl, mcpGatewayTTL)
	}
}
