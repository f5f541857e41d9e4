package caddymodules

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/crypto/bcrypt"

	"github.com/codemode-gateway/caddy-codemode/guard/redistest"
)

// waitUpstream is a real go-sdk MCP server over Streamable HTTP whose tool
// "wait" reports on started when it runs and on stopped when its context
// ends (the plan calling it was stopped); it never answers by itself, but
// it ends when the test does: a plan the gateway failed to stop fails the
// test instead of holding its cleanup for ever.
func waitUpstream(t *testing.T) (url string, started, stopped chan struct{}) {
	t.Helper()
	started, stopped = make(chan struct{}, 8), make(chan struct{}, 8)
	release := make(chan struct{})
	srv := mcp.NewServer(&mcp.Implementation{Name: "upstream", Version: "v1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "wait", Description: "Wait until cancelled"},
		func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, map[string]int, error) {
			started <- struct{}{}
			select {
			case <-ctx.Done():
				stopped <- struct{}{}
				return nil, nil, ctx.Err()
			case <-release:
				return nil, map[string]int{"released": 1}, nil
			}
		})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	t.Cleanup(func() { close(release) }) // first
	return hs.URL, started, stopped
}

// cancelConfig is a gateway on port whose meta-tools call the upstream at
// up: codemode_mcp at /mcp (with handler's fields), a stateless one at
// /stateless open to anyone and one at /stateless-basic behind Caddy's
// basic authentication (users alice and bob, basicPasswords),
// X-Forwarded-For trusted from loopback.
func cancelConfig(port int, up string, handler map[string]any) []byte {
	h := map[string]any{"handler": "codemode_mcp"}
	for k, v := range handler {
		h[k] = v
	}
	route := func(path string, handler map[string]any) any {
		return map[string]any{"match": []any{map[string]any{"path": []string{path}}}, "handle": []any{handler}}
	}
	cfg, _ := json.Marshal(map[string]any{
		"admin":   map[string]any{"disabled": true, "config": map[string]any{"persist": false}},
		"logging": map[string]any{"logs": map[string]any{"default": map[string]any{"level": "ERROR"}}},
		"apps": map[string]any{
			"codemode": map[string]any{"meta": map[string]any{"upstreams": []any{map[string]any{"name": "calc", "url": up}}}},
			"http": map[string]any{"servers": map[string]any{"test": map[string]any{
				"listen":          []string{fmt.Sprintf("127.0.0.1:%d", port)},
				"automatic_https": map[string]any{"disable": true},
				"trusted_proxies": map[string]any{"source": "static", "ranges": []string{"127.0.0.1/32"}},
				"routes": []any{route("/mcp", h),
					route("/stateless", map[string]any{"handler": "codemode_mcp", "stateless": true}),
					map[string]any{"match": []any{map[string]any{"path": []string{"/stateless-basic"}}}, "handle": []any{
						map[string]any{"handler": "authentication", "providers": map[string]any{"http_basic": map[string]any{
							"hash":     map[string]any{"algorithm": "bcrypt"},
							"accounts": []any{basicAccount("alice"), basicAccount("bob")}}}},
						map[string]any{"handler": "codemode_mcp", "stateless": true}}}},
			}}},
		},
	})
	return cfg
}

// basicPasswords are the passwords of cancelConfig's basic authentication.
var basicPasswords = map[string]string{"alice": "alice-password", "bob": "bob-password"}

// basicAuth is the Authorization header of user at cancelConfig's basic
// authentication.
func basicAuth(user string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+basicPasswords[user]))
}

func basicAccount(user string) map[string]any {
	h, err := bcrypt.GenerateFromPassword([]byte(basicPasswords[user]), bcrypt.MinCost)
	if err != nil {
		panic(err)
	}
	return map[string]any{"username": user, "password": string(h)}
}

// postAsync posts msg with header on a connection of its own and reports
// the answer (status, Content-Type, body) on the channel; ctx ends it. It
// goes through reloadClient: right after a reload the outgoing server may
// accept the connection and drop it unanswered, and the POST is sent again.
func postAsync(ctx context.Context, url string, header map[string]string, msg string) <-chan [3]string {
	out := make(chan [3]string, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(msg))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := reloadClient.Do(req)
		if err != nil {
			out <- [3]string{"", "", err.Error()}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		out <- [3]string{fmt.Sprint(resp.StatusCode), resp.Header.Get("Content-Type"), string(b)}
	}()
	return out
}

// cancelInFlight sends a plan as request id of the session in header,
// cancels it from another POST once its tool call runs, and checks that the
// plan is stopped and its POST ends without a response.
func cancelInFlight(t *testing.T, url string, header map[string]string, started, stopped chan struct{}, id string) {
	t.Helper()
	answered := postAsync(context.Background(), url, header, waitCall(id))
	waitFor(t, started, "start of the plan's tool call")
	if status, _, body := rawMCP(t, url, header, cancelNote(id)); status != http.StatusAccepted {
		t.Fatalf("notifications/cancelled: %d %s", status, body)
	}
	waitFor(t, stopped, "stop of the plan's tool call after the cancellation")
	a := waitFor(t, answered, "end of the cancelled request's POST")
	if a[0] != "200" || !strings.HasPrefix(a[1], "text/event-stream") || a[2] != "" {
		t.Fatalf("cancelled request's POST: %s %s %.400q, want 200, an SSE stream without events", a[0], a[1], a[2])
	}
}

// TestMCPCancelInTemporarySessions: a request that a temporary go-sdk
// session serves (a session adopted after a config reload; during a reload,
// one the other config adopted) is cancelled by a notifications/cancelled
// that comes in a POST of its own, so in another temporary session, which
// the go-sdk ignores: the gateway stops the plan and leaves its answer out,
// as in a go-sdk session. So too for a request the other config's go-sdk
// session serves during a reload (it stopped the plan, and its answer was
// sent). A stateless handler's request (no session, so a cancellation in
// another POST names no request of the caller's own) is stopped when its
// POST ends. Before, each plan ran on: its tool call never saw its context
// end.
func TestMCPCancelInTemporarySessions(t *testing.T) {
	up, started, stopped := waitUpstream(t)
	net := nextMCPTestNet()
	mcpTestClient = reloadClient
	t.Cleanup(func() { mcpTestClient = http.DefaultClient })
	port := freePort(t)
	startCaddy(t, cancelConfig(port, up, nil))
	url := fmt.Sprintf("http://127.0.0.1:%d/mcp", port)
	session := func(sid string) map[string]string {
		return map[string]string{"X-Forwarded-For": net + "1", "Mcp-Session-Id": sid, "Mcp-Protocol-Version": "2025-11-25"}
	}

	t.Run("adopted", func(t *testing.T) {
		sid := mcpOpen(t, url, net+"1")
		if err := caddy.Load(cancelConfig(port, up, map[string]any{"session_timeout": "20m"}), true); err != nil {
			t.Fatal(err)
		}
		cancelInFlight(t, url, session(sid), started, stopped, "5")
		if status, body := mcpPing(t, url, net+"1", sid); status != http.StatusOK || !strings.Contains(body, `"result"`) {
			t.Fatalf("ping after the cancellation: %d %s", status, body)
		}
	})

	// A 2025-03-26 batch of two tools/call in an adopted session: the
	// cancelled one is told from the other by its params. Before, neither
	// was stopped: the cancelled plan ran on and held the batch's POST open
	// (its answer left out) until it ended by itself.
	t.Run("adopted_batch_of_one_method", func(t *testing.T) {
		h := map[string]string{"X-Forwarded-For": net + "1", "Mcp-Protocol-Version": "2025-03-26"}
		status, sid, body := rawMCP(t, url, h, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26",`+
			`"capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
		if status != http.StatusOK || sid == "" {
			t.Fatalf("initialize: %d %s", status, body)
		}
		h["Mcp-Session-Id"] = sid
		rawMCP(t, url, h, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		if err := caddy.Load(cancelConfig(port, up, map[string]any{"session_timeout": "21m"}), true); err != nil {
			t.Fatal(err)
		}
		other := `{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"meta:execute","arguments":{"script":"return 6"}}}`
		answered := postAsync(context.Background(), url, h, "["+waitCall("5")+","+other+"]")
		waitFor(t, started, "start of the plan's tool call")
		if status, _, body := rawMCP(t, url, h, cancelNote("5")); status != http.StatusAccepted {
			t.Fatalf("notifications/cancelled: %d %s", status, body)
		}
		waitFor(t, stopped, "stop of the cancelled plan's tool call")
		a := waitFor(t, answered, "end of the batch's POST")
		if a[0] != "200" || strings.Contains(a[2], `"id":5`) || !strings.Contains(a[2], `"id":6`) {
			t.Fatalf("batch's POST: %s %s %.600q, want 200 with the answer to 6 only", a[0], a[1], a[2])
		}
	})

	// During a reload: the session is the other config's, whose go-sdk
	// session holds it (held) or that adopted it already.
	for _, held := range []bool{true, false} {
		t.Run(fmt.Sprint("other_config_held_", held), func(t *testing.T) {
			sid := mcpOpen(t, url, net+"1")
			mcpSessions.mu.Lock()
			rec := mcpSessions.byID[sid]
			owner := rec.owner
			rec.owner = &mcpSessionOwner{cfg: new(App)} // a config still running
			if !held {
				rec.server, rec.handler = nil, nil
			}
			mcpSessions.mu.Unlock()
			t.Cleanup(func() {
				mcpSessions.mu.Lock()
				rec.owner = owner
				mcpSessions.mu.Unlock()
			})
			if r := mcpSessions.route(sid, "ip:"+net+"1", owner); r != mcpRouteOtherConfig {
				t.Fatalf("route %v, want %v", r, mcpRouteOtherConfig)
			}
			cancelInFlight(t, url, session(sid), started, stopped, `"x"`)
		})
	}

	// The TypeScript SDK cancels a call with notifications/cancelled in a
	// POST of its own and keeps the call's POST open: a stateless request
	// is stopped by a cancellation carrying its credentials, verified by an
	// authentication handler, and its POST ends without the answer. One
	// carrying another user's credentials, a wrong password or none names
	// no request of its sender's. Before, the plan ran to its end.
	t.Run("stateless_cancelled_with_its_credentials", func(t *testing.T) {
		stateless := fmt.Sprintf("http://127.0.0.1:%d/stateless-basic", port)
		mine := map[string]string{"Mcp-Protocol-Version": "2025-11-25", "Authorization": basicAuth("alice")}
		answered := postAsync(context.Background(), stateless, mine, waitCall("1"))
		waitFor(t, started, "start of the plan's tool call")
		for _, other := range []map[string]string{
			{"Mcp-Protocol-Version": "2025-11-25", "Authorization": basicAuth("bob")},
		} {
			if status, _, body := rawMCP(t, stateless, other, cancelNote("1")); status != http.StatusAccepted {
				t.Fatalf("notifications/cancelled: %d %s", status, body)
			}
		}
		for _, other := range []map[string]string{
			{"Mcp-Protocol-Version": "2025-11-25"},
			{"Mcp-Protocol-Version": "2025-11-25", "Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte("alice:wrong"))},
		} {
			if status, _, body := rawMCP(t, stateless, other, cancelNote("1")); status != http.StatusUnauthorized {
				t.Fatalf("notifications/cancelled without alice's credentials: %d %s, want 401", status, body)
			}
		}
		select {
		case <-stopped:
			t.Fatal("a cancellation with other credentials stopped the plan")
		case <-answered:
			t.Fatal("a cancellation with other credentials ended the POST")
		default:
		}
		if status, _, body := rawMCP(t, stateless, mine, cancelNote("1")); status != http.StatusAccepted {
			t.Fatalf("notifications/cancelled: %d %s", status, body)
		}
		waitFor(t, stopped, "stop of the plan's tool call after the cancellation")
		a := waitFor(t, answered, "end of the cancelled request's POST")
		if a[0] != "200" || a[2] != "" {
			t.Fatalf("cancelled request's POST: %s %s %.400q, want 200 without a response", a[0], a[1], a[2])
		}
	})

	// On a route nothing authenticates, an Authorization header is no
	// credential: anonymous clients send the same few values ("Bearer
	// undefined", "Bearer null") or whatever a hostile caller picks. A
	// caller cancelling request 1 with the header of another anonymous
	// caller stops nothing. Before, the unverified header was the scope,
	// and the plan was stopped.
	for _, junk := range []string{"Bearer undefined", "Bearer null", "Bearer "} {
		t.Run("stateless_anonymous_header_"+strings.ReplaceAll(strings.TrimSpace(junk), " ", "_"), func(t *testing.T) {
			stateless := fmt.Sprintf("http://127.0.0.1:%d/stateless", port)
			h := map[string]string{"Mcp-Protocol-Version": "2025-11-25", "Authorization": junk}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			answered := postAsync(ctx, stateless, h, waitCall("1"))
			waitFor(t, started, "start of the victim's plan's tool call")
			if status, _, body := rawMCP(t, stateless, h, cancelNote("1")); status != http.StatusAccepted {
				t.Fatalf("notifications/cancelled: %d %s", status, body)
			}
			// The victim's POST is still open and its plan still runs: a
			// ping through the gateway is answered after the cancellation was
			// handled, and neither the plan nor the POST has ended.
			if status, _, body := rawMCP(t, stateless, h, `{"jsonrpc":"2.0","id":2,"method":"ping"}`); status != http.StatusOK {
				t.Fatalf("ping: %d %s", status, body)
			}
			select {
			case <-stopped:
				t.Fatal("another anonymous caller's cancellation stopped the plan")
			case a := <-answered:
				t.Fatalf("another anonymous caller's cancellation ended the POST: %v", a)
			default:
			}
			cancel() // the victim goes away: its plan ends with its POST
			waitFor(t, stopped, "stop of the plan's tool call after its POST ended")
		})
	}

	t.Run("stateless_post_ends", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		postAsync(ctx, fmt.Sprintf("http://127.0.0.1:%d/stateless", port), map[string]string{"Mcp-Protocol-Version": "2025-11-25"}, waitCall("1"))
		waitFor(t, started, "start of the plan's tool call")
		cancel() // the client goes away
		waitFor(t, stopped, "stop of the plan's tool call after its POST ended")
	})
}

// serveSecondGateway runs caddyfile in a process of its own (this test
// binary, serveCaddyfileEnv) until the test ends, once url answers.
func serveSecondGateway(t *testing.T, caddyfile, url string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "Caddyfile")
	if err := os.WriteFile(path, []byte(caddyfile), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), serveCaddyfileEnv+"="+path)
	var stderr strings.Builder
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			return
		}
		select {
		case err := <-exited:
			t.Fatalf("second gateway exited: %v\n%s", err, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("second gateway did not answer: %v\n%s", err, stderr.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestMCPCancelAcrossGateways: two gateway processes share the MCP
// sessions through Redis (gateway_url). A session that one of them adopted
// after a config reload is registered as its own, so a cancellation that
// reaches the other gateway is forwarded to it like any request of the
// session, and the plan running there is stopped and left unanswered. The
// request and its cancellation meet in the process that holds the session;
// nothing about a request under way is kept in Redis.
func TestMCPCancelAcrossGateways(t *testing.T) {
	mcpTestClient = reloadClient
	t.Cleanup(func() { mcpTestClient = http.DefaultClient })
	rdb, prefix := redistest.Client(t)
	up, started, stopped := waitUpstream(t)
	ports := []int{freePort(t), freePort(t)}
	caddyfile := func(port int, timeout string) string {
		return fmt.Sprintf(`{
	admin off
	persist_config off
	log {
		level ERROR
	}
	codemode {
		storage redis %[1]s {
			key_prefix %[2]s
		}
		meta {
			upstream calc {
				url %[3]s
			}
		}
	}
}
http://127.0.0.1:%[4]d {
	codemode_mcp {
		gateway_url http://127.0.0.1:%[4]d/mcp
		session_timeout %[5]s
	}
}
`, rdb.Options().Addr, prefix, up, port, timeout)
	}
	startCaddyfile(t, caddyfile(ports[0], "30m"))
	urls := []string{fmt.Sprintf("http://127.0.0.1:%d/mcp", ports[0]), fmt.Sprintf("http://127.0.0.1:%d/mcp", ports[1])}
	serveSecondGateway(t, caddyfile(ports[1], "30m"), urls[1])
	sid := mcpOpen(t, urls[0], "10.9.1.1")
	loadCaddyfile(t, caddyfile(ports[0], "20m")) // the session is adopted by its next request
	header := map[string]string{"Mcp-Session-Id": sid, "Mcp-Protocol-Version": "2025-11-25"}
	answered := postAsync(context.Background(), urls[0], header, waitCall("5"))
	waitFor(t, started, "start of the plan's tool call")
	if status, _, body := rawMCP(t, urls[1], header, cancelNote("5")); status != http.StatusAccepted {
		t.Fatalf("notifications/cancelled through the other gateway: %d %s", status, body)
	}
	waitFor(t, stopped, "stop of the plan's tool call after the cancellation")
	if a := waitFor(t, answered, "end of the cancelled request's POST"); a[0] != "200" || a[2] != "" {
		t.Fatalf("cancelled request's POST: %s %s %.400q, want 200 without a response", a[0], a[1], a[2])
	}
	if status, _, body := rawMCP(t, urls[1], header, `{"jsonrpc":"2.0","id":6,"method":"ping"}`); status != http.StatusOK || !strings.Contains(body, `"id":6`) {
		t.Fatalf("ping through the other gateway after the cancellation: %d %s", status, body)
	}
}
