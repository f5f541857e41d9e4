package caddymodules

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/codemode-gateway/caddy-codemode/guard/redistest"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
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

// TestMCPDirectoryAfterStoreOutage: when Redis was out of reach for every
// gateway past mcpGatewayTTL, every liveness key expired although no
// gateway stopped. A gateway back from the outage must not report another's
// session gone (and delete its entry) before the holder could renew: it
// forwards the request, and the holder answers. After the wait, a holder
// that still has no liveness is reported gone, as before. Before, the session was
// reported gone at once and its client had to start over.
func TestMCPDirectoryAfterStoreOutage(t *testing.T) {
	ttl := mcpGatewayTTL
	mcpGatewayTTL = 300 * time.Millisecond
	t.Cleanup(func() { mcpGatewayTTL = ttl })
	rdb, prefix := redistest.Client(t)
	holder := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "served by the holder")
	}))
	defer holder.Close()
	hcut := redistest.NewCuttable(t, rdb.Options().Addr)
	h := newMCPSessionDirectory(hcut, prefix, holder.URL+"/mcp", time.Minute, zap.NewNop())
	defer h.close()
	h.register("s1")

	cut := redistest.NewCuttable(t, rdb.Options().Addr)
	core, logs := observer.New(zap.WarnLevel)
	d := newMCPSessionDirectory(cut, prefix, "http://127.0.0.1:1/mcp", time.Minute, zap.New(core))
	defer d.close()
	ctx := context.Background()
	hcut.SetCut(true)
	cut.SetCut(true)
	eventually(t, "a beat to fail", func() (bool, string) {
		return logs.FilterMessage("renewing the MCP session directory's liveness").Len() > 0, "no failed beat logged"
	})
	// Meanwhile every liveness lapsed, the holder's too; this gateway
	// reaches the store again first.
	rdb.Del(ctx, h.gw(h.self), d.gw(d.self))
	cut.SetCut(false)
	eventually(t, "a beat to succeed", func() (bool, string) { return rdb.Exists(ctx, d.gw(d.self)).Val() == 1, "no liveness" })

	rec := httptest.NewRecorder()
	if !d.forward(rec, httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader("{}")), "s1") {
		t.Fatal("the directory did not know the session")
	}
	if rec.Code != http.StatusOK || rec.Body.String() != "served by the holder" {
		t.Fatalf("right after the outage: %d %s", rec.Code, rec.Body)
	}
	if rdb.Exists(ctx, h.key("s1")).Val() != 1 {
		t.Fatal("the session's entry was deleted")
	}
	eventually(t, "the holder, still without liveness, to be reported gone", func() (bool, string) {
		rec := httptest.NewRecorder()
		d.forward(rec, httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader("{}")), "s1")
		return rec.Code == http.StatusNotFound, rec.Body.String()
	})
}
