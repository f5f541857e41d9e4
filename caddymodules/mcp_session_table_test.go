package caddymodules

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codemode-gateway/caddy-codemode/guard/redistest"
)

// mcpSessionsConfig is a Caddy config with one codemode_mcp handler (its
// options in handler) that takes the client address from X-Forwarded-For,
// so that a test can speak as several clients; timeout is the handler's
// session_timeout.
func mcpSessionsConfig(port int, handler map[string]any) []byte {
	h := map[string]any{"handler": "codemode_mcp"}
	for k, v := range handler {
		h[k] = v
	}
	cfg, _ := json.Marshal(map[string]any{
		"admin":   map[string]any{"disabled": true, "config": map[string]any{"persist": false}},
		"logging": map[string]any{"logs": map[string]any{"default": map[string]any{"level": "ERROR"}}},
		"apps": map[string]any{
			"codemode": map[string]any{"meta": map[string]any{}},
			"http": map[string]any{"servers": map[string]any{"test": map[string]any{
				"listen":          []string{fmt.Sprintf("127.0.0.1:%d", port)},
				"automatic_https": map[string]any{"disable": true},
				"trusted_proxies": map[string]any{"source": "static", "ranges": []string{"127.0.0.1/32"}},
				"routes": []any{map[string]any{
					"match":  []any{map[string]any{"path": []string{"/mcp"}}},
					"handle": []any{h},
				}},
			}}},
		},
	})
	return cfg
}

// mcpTestNet numbers the runs of the session tests, so that each run (with
// -count) speaks as clients of its own: the session table is the process's.
var mcpTestNet int

func nextMCPTestNet() string {
	mcpTestNet++
	return fmt.Sprintf("10.%d.%d.", 100+mcpTestNet/200, mcpTestNet%200)
}

const mcpInit2025 = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`

// mcpOpen opens a session as client (an IP address) and returns its id.
func mcpOpen(t *testing.T, url, client string) string {
	t.Helper()
	status, sid, body := rawMCP(t, url, map[string]string{"X-Forwarded-For": client}, mcpInit2025)
	if status != http.StatusOK || sid == "" {
		t.Fatalf("initialize as %s: %d %q %s", client, status, sid, body)
	}
	return sid
}

// mcpPing sends ping in session sid as client and returns the status.
func mcpPing(t *testing.T, url, client, sid string) (int, string) {
	t.Helper()
	status, _, body := rawMCP(t, url, map[string]string{"X-Forwarded-For": client, "Mcp-Session-Id": sid,
		"Mcp-Protocol-Version": "2025-11-25"}, `{"jsonrpc":"2.0","id":2,"method":"ping"}`)
	return status, body
}

// TestMCPSessionLimits: initialize is open to anyone, and each session of
// the handshake revisions holds memory and a goroutine until it idles out
// (20 000 initializes took the example gateway from 77 MB to 624 MB). A
// client past max_sessions_per_client loses its least recently used
// session (closed, 404 afterwards), not its new one; past max_sessions an
// initialize gets 503 with Retry-After and a JSON-RPC error, until a
// session ends.
func TestMCPSessionLimits(t *testing.T) {
	net := nextMCPTestNet()
	port := freePort(t)
	// The table is the process's: earlier tests' sessions are in it.
	before, _ := mcpSessions.count("")
	startCaddy(t, mcpSessionsConfig(port, map[string]any{"max_sessions": before + 4, "max_sessions_per_client": 3}))
	url := fmt.Sprintf("http://127.0.0.1:%d/mcp", port)

	a, b, c := mcpOpen(t, url, net+"1"), mcpOpen(t, url, net+"1"), mcpOpen(t, url, net+"1")
	// B is now the least recently used (each request is a whole round trip
	// after the last: their times on the monotonic clock differ).
	if status, body := mcpPing(t, url, net+"1", a); status != http.StatusOK {
		t.Fatalf("ping A: %d %s", status, body)
	}
	if status, body := mcpPing(t, url, net+"1", c); status != http.StatusOK {
		t.Fatalf("ping C: %d %s", status, body)
	}
	d := mcpOpen(t, url, net+"1") // the fourth of this client: B goes
	if status, body := mcpPing(t, url, net+"1", b); status != http.StatusNotFound || !strings.Contains(body, "-32001") {
		t.Fatalf("B after the client's fourth initialize: %d %s, want 404 -32001", status, body)
	}
	for name, sid := range map[string]string{"A": a, "C": c, "D": d} {
		if status, body := mcpPing(t, url, net+"1", sid); status != http.StatusOK {
			t.Fatalf("ping %s: %d %s", name, status, body)
		}
	}
	if total, mine := mcpSessions.count("ip:" + net + "1"); total != before+3 || mine != 3 {
		t.Fatalf("table holds %d sessions, %d of the client; want %d and 3", total, mine, before+3)
	}

	e := mcpOpen(t, url, net+"2") // the gateway's fourth
	resp, body := mcpRequest(t, http.MethodPost, url, map[string]string{"X-Forwarded-For": net + "3"}, strings.NewReader(mcpInit2025))
	var msg struct {
		ID    int `json:"id"`
		Error struct {
			Code int `json:"code"`
		} `json:"error"`
	}
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || resp.Header.Get("Mcp-Session-Id") != "" ||
		json.Unmarshal(body, &msg) != nil || msg.ID != 1 || msg.Error.Code != -32000 {
		t.Fatalf("fifth session of the gateway: %d Retry-After %q %s, want 503 -32000 for id 1", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if resp, body := mcpRequest(t, http.MethodDelete, url, map[string]string{"Mcp-Session-Id": e, "X-Forwarded-For": net + "2"}, nil); resp.StatusCode >= 300 {
		t.Fatalf("DELETE: %d %s", resp.StatusCode, body)
	}
	mcpOpen(t, url, net+"3") // room again
}

// TestMCPInitializeOfTheWrongShape: an initialize whose fields have the
// wrong type (capabilities 5, clientInfo "x", protocolVersion 7) gets
// -32602 naming the field and opens no session; the go-sdk answered code 0
// naming its Go types, after it had opened a session that took a place of
// the client's: three such requests closed the client's real session. A
// second initialize in a session gets -32600, not code 0.
func TestMCPInitializeOfTheWrongShape(t *testing.T) {
	net := nextMCPTestNet()
	port := freePort(t)
	startCaddy(t, mcpSessionsConfig(port, map[string]any{"max_sessions_per_client": 2}))
	url := fmt.Sprintf("http://127.0.0.1:%d/mcp", port)
	client := map[string]string{"X-Forwarded-For": net + "1"}

	real := mcpOpen(t, url, net+"1")
	for _, tc := range []struct{ params, field string }{
		{`{"protocolVersion":"2025-11-25","capabilities":5,"clientInfo":{"name":"x","version":"1"}}`, "capabilities: got number, want object"},
		{`{"protocolVersion":"2025-11-25","capabilities":{"roots":{"listChanged":"yes"}},"clientInfo":{"name":"x","version":"1"}}`, "capabilities.roots.listChanged: got string, want boolean"},
		{`{"protocolVersion":7,"capabilities":{},"clientInfo":{"name":"x","version":"1"}}`, "protocolVersion: got number, want string"},
		{`{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":"x"}`, "clientInfo: got string, want object"},
	} {
		status, sid, body := rawMCP(t, url, client, `{"jsonrpc":"2.0","id":3,"method":"initialize","params":`+tc.params+`}`)
		var msg rpcErrorReply
		if status != http.StatusOK || sid != "" || json.Unmarshal([]byte(body), &msg) != nil || string(msg.ID) != "3" ||
			msg.Error.Code != -32602 || !strings.Contains(msg.Error.Message, tc.field) || strings.Contains(msg.Error.Message, "mcp.") {
			t.Errorf("initialize with %s: %d session %q %s; want 200, no session, -32602 naming %q", tc.params, status, sid, body, tc.field)
		}
	}
	if status, body := mcpPing(t, url, net+"1", real); status != http.StatusOK {
		t.Fatalf("the client's session after the bad initializes: %d %s", status, body)
	}

	status, _, body := rawMCP(t, url, map[string]string{"X-Forwarded-For": net + "1", "Mcp-Session-Id": real, "Mcp-Protocol-Version": "2025-11-25"}, mcpInit2025)
	if status != http.StatusOK || !strings.Contains(body, `"code":-32600`) || !strings.Contains(body, `"id":1`) {
		t.Fatalf("a second initialize in a session: %d %s, want -32600 for id 1", status, body)
	}
	if status, body := mcpPing(t, url, net+"1", real); status != http.StatusOK {
		t.Fatalf("the session after a second initialize: %d %s", status, body)
	}
}

// TestMCPSessionSurvivesReload: a client of a handshake revision keeps its
// session across config reloads (it got 404 at the first request after each
// `caddy reload`, and the TypeScript SDK does not start a new session by
// itself). The new config serves it (without server-to-client requests: a
// GET stream is 405) until DELETE.
func TestMCPSessionSurvivesReload(t *testing.T) {
	net := nextMCPTestNet()
	mcpTestClient = reloadClient
	t.Cleanup(func() { mcpTestClient = http.DefaultClient })
	port := freePort(t)
	startCaddy(t, mcpSessionsConfig(port, nil))
	url := fmt.Sprintf("http://127.0.0.1:%d/mcp", port)
	sid := mcpOpen(t, url, net+"1")
	search := `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"meta:search","arguments":{"query":"anything"}}}`
	hdr := map[string]string{"X-Forwarded-For": net + "1", "Mcp-Session-Id": sid, "Mcp-Protocol-Version": "2025-11-25"}
	for i, cfg := range [][]byte{
		mcpSessionsConfig(port, map[string]any{"session_timeout": "20m"}), // a changed config
		mcpSessionsConfig(port, map[string]any{"session_timeout": "25m"}),
	} {
		if err := caddy.Load(cfg, true); err != nil {
			t.Fatal(err)
		}
		for j := 0; j < 2; j++ {
			if status, body := mcpPing(t, url, net+"1", sid); status != http.StatusOK || !strings.Contains(body, `"result"`) {
				t.Fatalf("reload %d, ping %d: %d %s", i+1, j+1, status, body)
			}
			status, _, body := rawMCP(t, url, hdr, search)
			if status != http.StatusOK || !strings.Contains(body, `"structuredContent"`) || strings.Contains(body, `"isError":true`) {
				t.Fatalf("reload %d, meta:search %d: %d %s", i+1, j+1, status, body)
			}
		}
	}
	resp, body := mcpRequest(t, http.MethodGet, url, map[string]string{"X-Forwarded-For": net + "1", "Mcp-Session-Id": sid,
		"Mcp-Protocol-Version": "2025-11-25", "Accept": "text/event-stream"}, nil)
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET stream of a reloaded session: %d %s, want 405", resp.StatusCode, body)
	}
	if resp, body := mcpRequest(t, http.MethodDelete, url, map[string]string{"X-Forwarded-For": net + "1", "Mcp-Session-Id": sid}, nil); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE: %d %s", resp.StatusCode, body)
	}
	if status, body := mcpPing(t, url, net+"1", sid); status != http.StatusNotFound {
		t.Fatalf("after DELETE: %d %s, want 404", status, body)
	}
	// A session opened under the new config is the go-sdk's, with its stream.
	sid2 := mcpOpen(t, url, net+"1")
	if status, body := mcpPing(t, url, net+"1", sid2); status != http.StatusOK {
		t.Fatalf("new session: %d %s", status, body)
	}
}

// TestMCPSessionBoundToUser: behind codemode_auth, a session is its user's:
// another user presenting its Mcp-Session-Id (leaked in a log, say) gets
// 404 and cannot read its stream or use it, and the session keeps working
// for its owner. The go-sdk binds a session to its user only when it
// authenticates the request itself.
func TestMCPSessionBoundToUser(t *testing.T) {
	idp := newFakeIDP(t)
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	cfg, _ := json.Marshal(map[string]any{
		"admin":   map[string]any{"disabled": true, "config": map[string]any{"persist": false}},
		"logging": map[string]any{"logs": map[string]any{"default": map[string]any{"level": "ERROR"}}},
		"apps": map[string]any{
			"codemode": map[string]any{"meta": map[string]any{}, "auth": map[string]any{
				"mode": "transparent", "development": true, "provider_url": idp.srv.URL, "expected_audience": base + "/mcp"}},
			"http": map[string]any{"servers": map[string]any{"test": map[string]any{
				"listen":          []string{fmt.Sprintf("127.0.0.1:%d", port)},
				"automatic_https": map[string]any{"disable": true},
				"routes": []any{map[string]any{
					"match": []any{map[string]any{"path": []string{"/mcp"}}},
					"handle": []any{
						map[string]any{"handler": "authentication", "providers": map[string]any{"codemode_bearer": map[string]any{}}},
						map[string]any{"handler": "codemode_mcp"},
					},
				}},
			}}},
		},
	})
	startCaddy(t, cfg)
	url := base + "/mcp"
	as := func(sub string) string {
		return "Bearer " + idp.token(t, func(c map[string]any) { c["aud"], c["sub"] = base+"/mcp", sub })
	}
	alice, mallory := as("alice-"+nextMCPTestNet()), as("mallory")
	status, sid, body := rawMCP(t, url, map[string]string{"Authorization": alice}, mcpInit2025)
	if status != http.StatusOK || sid == "" {
		t.Fatalf("initialize: %d %q %s", status, sid, body)
	}
	ping := `{"jsonrpc":"2.0","id":2,"method":"ping"}`
	hdr := func(token string) map[string]string {
		return map[string]string{"Authorization": token, "Mcp-Session-Id": sid, "Mcp-Protocol-Version": "2025-11-25"}
	}
	if status, _, body := rawMCP(t, url, hdr(mallory), ping); status != http.StatusNotFound || !strings.Contains(body, "-32001") {
		t.Fatalf("another user's request in the session: %d %s, want 404 -32001", status, body)
	}
	if resp, body := mcpRequest(t, http.MethodDelete, url, hdr(mallory), nil); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("another user's DELETE: %d %s, want 404", resp.StatusCode, body)
	}
	if status, _, body := rawMCP(t, url, hdr(alice), ping); status != http.StatusOK || !strings.Contains(body, `"result"`) {
		t.Fatalf("the owner's request: %d %s", status, body)
	}
}

// TestMCPSessionsAcrossGatewaysSurviveReload: with gateway_url, a session
// held by a gateway that reloads its config stays its own in the shared
// directory (the gateway keeps its id; the old config's directory does not
// withdraw its liveness), so a gateway in another process still forwards
// its requests to it.
func TestMCPSessionsAcrossGatewaysSurviveReload(t *testing.T) {
	mcpTestClient = reloadClient
	t.Cleanup(func() { mcpTestClient = http.DefaultClient })
	rdb, prefix := redistest.Client(t)
	ports := []int{freePort(t), freePort(t)}
	config := func(timeout string) []byte {
		servers := map[string]any{}
		for i, p := range ports {
			servers[fmt.Sprint("gw", i)] = map[string]any{
				"listen":          []string{fmt.Sprintf("127.0.0.1:%d", p)},
				"automatic_https": map[string]any{"disable": true},
				"routes": []any{map[string]any{"handle": []any{
					map[string]any{"handler": "codemode_mcp", "gateway_url": fmt.Sprintf("http://127.0.0.1:%d/mcp", p), "session_timeout": timeout},
				}}},
			}
		}
		cfg, _ := json.Marshal(map[string]any{
			"admin":   map[string]any{"disabled": true, "config": map[string]any{"persist": false}},
			"logging": map[string]any{"logs": map[string]any{"default": map[string]any{"level": "ERROR"}}},
			"apps": map[string]any{
				"codemode": map[string]any{
					"broker": map[string]any{"demo_tools": true, "storage": map[string]any{"module": "redis", "address": rdb.Options().Addr, "key_prefix": prefix}},
				},
				"http": map[string]any{"servers": servers},
			},
		})
		return cfg
	}
	startCaddy(t, config("30m"))
	urls := []string{fmt.Sprintf("http://127.0.0.1:%d/mcp", ports[0]), fmt.Sprintf("http://127.0.0.1:%d/mcp", ports[1])}
	sid := mcpOpen(t, urls[0], "10.9.0.1")
	for i, timeout := range []string{"20m", "25m"} {
		if err := caddy.Load(config(timeout), true); err != nil {
			t.Fatal(err)
		}
		// What a gateway in another process sees before any request
		// reached the holder again: the session's gateway is alive.
		raw, err := rdb.Get(context.Background(), prefix+brokerKeyPart+"mcp:session:"+sid).Bytes()
		var e mcpSessionEntry
		if err != nil || json.Unmarshal(raw, &e) != nil || e.URL != urls[0] {
			t.Fatalf("reload %d: directory entry %s %v", i+1, raw, err)
		}
		if n, err := rdb.Exists(context.Background(), prefix+brokerKeyPart+"mcp:gateway:"+e.Gateway).Result(); err != nil || n != 1 {
			t.Fatalf("reload %d: the holder's liveness is gone (%d, %v): the other gateways would answer 404", i+1, n, err)
		}
		// The holder serves it. (Another gateway of this one process would
		// adopt it through the process's table and take it over.)
		if status, body := mcpPing(t, urls[0], "10.9.0.1", sid); status != http.StatusOK || !strings.Contains(body, `"result"`) {
			t.Fatalf("reload %d, ping: %d %s", i+1, status, body)
		}
	}
	keys, _ := rdb.Keys(context.Background(), prefix+brokerKeyPart+"mcp:gateway:*").Result()
	if len(keys) != 2 {
		t.Fatalf("gateway liveness keys after the reloads: %v, want the two gateways'", keys)
	}
}

// TestMCPSessionDuringReload: while a reload is under way the new config's
// servers and the old one's answer at once, the old ones the requests on
// their kept-alive connections until Caddy cleans that config up. A request
// for a session the other config holds goes to the go-sdk handler holding
// it (or, once adopted, a temporary session), not to this handler's go-sdk
// table, which answered 404 and lost the client its session; a session of
// another codemode_mcp handler of the same config still gets 404, and one
// of a config that is gone is adopted as before.
func TestMCPSessionDuringReload(t *testing.T) {
	table := &mcpSessionTable{byID: map[string]*mcpSessionRecord{}, perClient: map[string]int{}}
	oldCfg, newCfg := new(App), new(App)
	old, oldOtherPath, cur := &mcpSessionOwner{cfg: oldCfg}, &mcpSessionOwner{cfg: oldCfg}, &mcpSessionOwner{cfg: newCfg}
	held := http.NotFoundHandler()
	table.add("s1", &mcpSessionRecord{client: "ip:127.0.0.1", owner: old, server: new(mcp.Server), handler: held, last: time.Now()})
	if r := table.route("s1", "ip:127.0.0.1", cur); r != mcpRouteOtherConfig {
		t.Fatalf("the new config's handler, the old one running: route %v, want %v", r, mcpRouteOtherConfig)
	}
	if owner, h := table.holder("s1"); owner != old || h == nil {
		t.Fatalf("holder: %v %v", owner, h)
	}
	if r := table.route("s1", "ip:127.0.0.1", oldOtherPath); r != mcpRouteGoSDK {
		t.Fatalf("another handler of the same config: route %v, want %v (404)", r, mcpRouteGoSDK)
	}
	old.gone.Store(true)
	if r := table.route("s1", "ip:127.0.0.1", cur); r != mcpRouteAdopt {
		t.Fatalf("the old config gone: route %v, want %v", r, mcpRouteAdopt)
	}
	// A session the new config opened, asked for on the old config's
	// connection after its Cleanup.
	table.add("s2", &mcpSessionRecord{client: "ip:127.0.0.1", owner: cur, server: new(mcp.Server), handler: held, last: time.Now()})
	if r := table.route("s2", "ip:127.0.0.1", old); r != mcpRouteOtherConfig {
		t.Fatalf("the old config's handler after its Cleanup: route %v, want %v", r, mcpRouteOtherConfig)
	}
}

// TestMCPSessionsPerIPv6Prefix: max_sessions_per_client counts a host by
// its prefix: the codemode app's ipv6_prefix (56 here), so sessions opened
// from four addresses of one /56 are one client's three, and another /56
// is another client.
func TestMCPSessionsPerIPv6Prefix(t *testing.T) {
	port := freePort(t)
	var cfg map[string]any
	if err := json.Unmarshal(mcpSessionsConfig(port, map[string]any{"max_sessions_per_client": 3}), &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["apps"].(map[string]any)["codemode"].(map[string]any)["ipv6_prefix"] = 56
	raw, _ := json.Marshal(cfg)
	startCaddy(t, raw)
	url := fmt.Sprintf("http://127.0.0.1:%d/mcp", port)
	// Unique to the run: the session table is the process's.
	nextMCPTestNet()
	hi := (mcpTestNet%255 + 1) << 8 // the 4th group's byte inside the /56
	addr := func(net, low int, iid string) string { return fmt.Sprintf("2001:db8:%x:%x::%s", net, hi|low, iid) }
	first := mcpOpen(t, url, addr(6, 1, "1"))
	for _, a := range []string{addr(6, 2, "1"), addr(6, 0xff, "2"), addr(6, 1, "3")} {
		mcpOpen(t, url, "["+a+"]:1234")
	}
	key := fmt.Sprintf("ip:2001:db8:6:%x::/56", hi)
	if _, mine := mcpSessions.count(key); mine != 3 {
		t.Fatalf("%s holds %d sessions, want 3", key, mine)
	}
	if status, body := mcpPing(t, url, addr(6, 0x42, "9"), first); status != http.StatusNotFound {
		t.Fatalf("the prefix's first session after its fourth initialize: %d %s, want 404", status, body)
	}
	mcpOpen(t, url, addr(7, 0, "1"))
	if _, mine := mcpSessions.count(fmt.Sprintf("ip:2001:db8:7:%x::/56", hi)); mine != 1 {
		t.Fatalf("another /56 holds %d sessions, want 1", mine)
	}
}
