package caddymodules

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/crypto/bcrypt"

	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"
)

// mcpUpstream is a real go-sdk MCP server over Streamable HTTP with one tool,
// "add".
func mcpUpstream(t *testing.T) string {
	t.Helper()
	srv := mcp.NewServer(&mcp.Implementation{Name: "upstream", Version: "v1"}, nil)
	type in struct{ A, B int }
	mcp.AddTool(srv, &mcp.Tool{Name: "add", Description: "Add two integers"},
		func(_ context.Context, _ *mcp.CallToolRequest, v in) (*mcp.CallToolResult, map[string]int, error) {
			return nil, map[string]int{"sum": v.A + v.B}, nil
		})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	return hs.URL
}

func connectMCP(t *testing.T, tr mcp.Transport) *mcp.ClientSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v1"}, nil).Connect(ctx, tr, nil)
	if err != nil {
		t.Fatalf("connecting: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func toolNames(t *testing.T, cs *mcp.ClientSession) string {
	t.Helper()
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
	}
	sort.Strings(names)
	return strings.Join(names, " ")
}

func callMeta(t *testing.T, cs *mcp.ClientSession, name string, args any) *mcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return res
}

func resultText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// TestCodemodeMCPHandler runs Caddy with codemode_mcp on /mcp, an upstream
// MCP server and a meta:search rate limit, and talks to it with the go-sdk
// client over real HTTP.
func TestCodemodeMCPHandler(t *testing.T) {
	// No window boundary between the searches; takes effect where the meta
	// limiter is built with Now: guardNow (app_meta.go).
	freezeGuardClock(t)
	port := freePort(t)
	up := mcpUpstream(t)
	cfg, _ := json.Marshal(map[string]any{
		"admin":   map[string]any{"disabled": true, "config": map[string]any{"persist": false}},
		"logging": map[string]any{"logs": map[string]any{"default": map[string]any{"level": "ERROR"}}},
		"apps": map[string]any{
			"codemode": map[string]any{"meta": map[string]any{
				"naming":      "safe",
				"upstreams":   []any{map[string]any{"name": "calc", "url": up}},
				"rate_limits": []any{map[string]any{"tool": "meta:search", "max_requests": 2, "window": int64(time.Minute)}},
			}},
			"http": map[string]any{"servers": map[string]any{"test": map[string]any{
				"listen":          []string{fmt.Sprintf("127.0.0.1:%d", port)},
				"automatic_https": map[string]any{"disable": true},
				"routes": []any{map[string]any{
					"match":  []any{map[string]any{"path": []string{"/mcp"}}},
					"handle": []any{map[string]any{"handler": "codemode_mcp"}},
				}},
			}}},
		},
	})
	startCaddy(t, cfg)
	cs := connectMCP(t, &mcp.StreamableClientTransport{Endpoint: fmt.Sprintf("http://127.0.0.1:%d/mcp", port)})
	if got := toolNames(t, cs); got != "meta_describe meta_execute meta_invoke meta_search" {
		t.Fatalf("tools = %s", got)
	}
	res := callMeta(t, cs, "meta_search", map[string]any{"queries": []string{"add two integers"}})
	if res.IsError || !strings.Contains(resultText(res), `"calc:add"`) {
		t.Fatalf("search: %s", resultText(res))
	}
	res = callMeta(t, cs, "meta_invoke", map[string]any{"tool": "calc:add", "input": map[string]any{"A": 2, "B": 3}})
	if res.IsError || !strings.Contains(resultText(res), `"sum":5`) {
		t.Fatalf("invoke: %s", resultText(res))
	}
	callMeta(t, cs, "meta_search", map[string]any{"queries": []string{"x"}})
	res = callMeta(t, cs, "meta_search", map[string]any{"queries": []string{"x"}})
	if !res.IsError || !strings.Contains(resultText(res), `"RATE_LIMIT"`) {
		t.Fatalf("third search within the window: %s", resultText(res))
	}
}

// TestCodemodeMCPStdio serves the meta-tools of a Caddyfile the way the
// codemode-mcp-stdio command does, over an in-memory pipe, and checks that
// the site's HTTP server is not started.
func TestCodemodeMCPStdio(t *testing.T) {
	port := freePort(t)
	up := mcpUpstream(t)
	caddyfile := fmt.Sprintf(`{
	admin off
	codemode {
		meta {
			upstream calc {
				url %s
			}
		}
	}
}

http://127.0.0.1:%d {
	codemode_mcp
}
`, up, port)
	raw, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(caddyfile), nil)
	if err != nil {
		t.Fatal(err)
	}
	caddyMu.Lock()
	defer caddyMu.Unlock()
	serverT, clientT := mcp.NewInMemoryTransports()
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { done <- serveMCPStdio(ctx, raw, serverT) }()
	cs := connectMCP(t, clientT)
	// Over stdio too the go-sdk client and server agree on the newest revision.
	if v := cs.InitializeResult().ProtocolVersion; v != "2026-07-28" {
		t.Fatalf("negotiated %q over stdio", v)
	}
	if got := toolNames(t, cs); got != "meta:describe meta:execute meta:invoke meta:search" {
		t.Fatalf("tools = %s", got)
	}
	res := callMeta(t, cs, "meta:describe", map[string]any{"toolNames": []string{"calc:add"}})
	if res.IsError || !strings.Contains(resultText(res), `"usageExamples"`) {
		t.Fatalf("describe: %s", resultText(res))
	}
	if resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/", port)); err == nil {
		resp.Body.Close()
		t.Error("the HTTP server of the Caddyfile is running under codemode-mcp-stdio")
	}
	cs.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serveMCPStdio: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("serveMCPStdio did not return after the client closed")
	}
}

type basicAuthTransport struct{ user, pass, spoof string }

func (b basicAuthTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.SetBasicAuth(b.user, b.pass)
	if b.spoof != "" {
		r.Header.Set("Codemode-User-Id", b.spoof)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// TestCodemodeMCPUserPartition: a user authenticated by an earlier handler
// ({http.auth.user.id}) gets its own meta-tool rate-limit counter, and a
// client cannot pose as another by sending the internal header.
func TestCodemodeMCPUserPartition(t *testing.T) {
	// No window boundary between the searches; takes effect where the meta
	// limiter is built with Now: guardNow (app_meta.go).
	freezeGuardClock(t)
	port := freePort(t)
	hash, err := bcrypt.GenerateFromPassword([]byte("pw"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	accounts := []any{map[string]any{"username": "ada", "password": string(hash)}, map[string]any{"username": "bob", "password": string(hash)}}
	cfg, _ := json.Marshal(map[string]any{
		"admin":   map[string]any{"disabled": true, "config": map[string]any{"persist": false}},
		"logging": map[string]any{"logs": map[string]any{"default": map[string]any{"level": "ERROR"}}},
		"apps": map[string]any{
			"codemode": map[string]any{"meta": map[string]any{
				"rate_limits": []any{map[string]any{"tool": "meta:search", "max_requests": 1, "partition_by": "userId"}},
			}},
			"http": map[string]any{"servers": map[string]any{"test": map[string]any{
				"listen":          []string{fmt.Sprintf("127.0.0.1:%d", port)},
				"automatic_https": map[string]any{"disable": true},
				"routes": []any{map[string]any{"handle": []any{
					map[string]any{"handler": "authentication", "providers": map[string]any{"http_basic": map[string]any{"accounts": accounts}}},
					map[string]any{"handler": "codemode_mcp"},
				}}},
			}}},
		},
	})
	startCaddy(t, cfg)
	endpoint := fmt.Sprintf("http://127.0.0.1:%d/", port)
	session := func(user, spoof string) *mcp.ClientSession {
		return connectMCP(t, &mcp.StreamableClientTransport{Endpoint: endpoint,
			HTTPClient: &http.Client{Transport: basicAuthTransport{user, "pw", spoof}}})
	}
	search := func(cs *mcp.ClientSession) *mcp.CallToolResult {
		return callMeta(t, cs, "meta:search", map[string]any{"queries": []string{"x"}})
	}
	ada, bob := session("ada", ""), session("bob", "")
	if res := search(ada); res.IsError {
		t.Fatalf("ada's first search: %s", resultText(res))
	}
	if res := search(ada); !res.IsError || !strings.Contains(resultText(res), "RATE_LIMIT") {
		t.Fatalf("ada's second search: %s", resultText(res))
	}
	if res := search(bob); res.IsError {
		t.Fatalf("bob's first search (own counter): %s", resultText(res))
	}
	if res := search(session("ada", "carol")); !res.IsError || !strings.Contains(resultText(res), "RATE_LIMIT") {
		t.Fatalf("ada posing as carol got a fresh counter: %s", resultText(res))
	}
}

// scriptMaxLength is the maxLength of meta:execute's script as tools/list
// advertises it.
func scriptMaxLength(t *testing.T, cs *mcp.ClientSession) any {
	t.Helper()
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range res.Tools {
		if tool.Name == "meta:execute" {
			raw, _ := json.Marshal(tool.InputSchema)
			var s struct {
				Properties struct{ Script map[string]any }
			}
			json.Unmarshal(raw, &s)
			return s.Properties.Script["maxLength"]
		}
	}
	t.Fatal("no meta:execute")
	return nil
}

// TestMetaScriptLimitIsTheSandboxes: meta:execute advertises and enforces
// the sandbox preset's script size (max_source_bytes), and a reload with
// another preset advertises the new one.
func TestMetaScriptLimitIsTheSandboxes(t *testing.T) {
	port := freePort(t)
	config := func(preset string) []byte {
		return mcpAppConfig(port, map[string]any{
			"sandbox": map[string]any{"engine": "inprocess", "preset": preset, "trusted_callers": true},
			"meta":    map[string]any{},
		})
	}
	endpoint := fmt.Sprintf("http://127.0.0.1:%d/mcp", port)
	startCaddy(t, config(sandbox.PresetLockedDown))
	cs := connectMCP(t, &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: reloadClient})
	locked, _ := sandbox.Preset(sandbox.PresetLockedDown)
	if got := scriptMaxLength(t, cs); got != float64(locked.MaxSourceBytes) {
		t.Errorf("locked_down: script maxLength %v, want %d", got, locked.MaxSourceBytes)
	}
	res := callMeta(t, cs, "meta:execute", map[string]any{"script": "return 1;" + strings.Repeat(" ", locked.MaxSourceBytes)})
	if !res.IsError || !strings.Contains(resultText(res), `"VALIDATION_ERROR"`) || !strings.Contains(resultText(res), `"field":"script"`) {
		t.Errorf("script over the preset's limit: %s", resultText(res))
	}
	if err := caddy.Load(config(sandbox.PresetBalanced), true); err != nil {
		t.Fatal(err)
	}
	// The outgoing config may still accept a connection right after Load
	// (untilReloaded): its locked_down limit then is no failure, the new
	// config's never answering with balanced's within 10 s is.
	balanced, _ := sandbox.Preset(sandbox.PresetBalanced)
	untilReloaded(t, func() bool {
		cs := connectMCP(t, &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: reloadClient})
		defer cs.Close()
		got := scriptMaxLength(t, cs)
		if got != float64(balanced.MaxSourceBytes) && got != float64(locked.MaxSourceBytes) {
			t.Fatalf("after a reload to balanced: script maxLength %v, want %d", got, balanced.MaxSourceBytes)
		}
		return got == float64(balanced.MaxSourceBytes)
	})
}
