package caddymodules

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// headerRecorder is an http.RoundTripper that remembers every Mcp-Session-Id
// the server sent and every response status.
type headerRecorder struct {
	mu         sync.Mutex
	sessionIDs []string
	requests   int
}

func (h *headerRecorder) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.requests++
	if err == nil {
		if id := resp.Header.Get("Mcp-Session-Id"); id != "" {
			h.sessionIDs = append(h.sessionIDs, id)
		}
	}
	return resp, err
}

// mcpCaddyConfig runs codemode_mcp at /mcp on port with the given meta block.
func mcpCaddyConfig(port int, meta map[string]any) []byte {
	return mcpAppConfig(port, map[string]any{"meta": meta})
}

// mcpAppConfig runs codemode_mcp at /mcp on port with the given codemode
// app.
func mcpAppConfig(port int, app map[string]any) []byte {
	cfg, _ := json.Marshal(map[string]any{
		"admin":   map[string]any{"disabled": true, "config": map[string]any{"persist": false}},
		"logging": map[string]any{"logs": map[string]any{"default": map[string]any{"level": "ERROR"}}},
		"apps": map[string]any{
			"codemode": app,
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
	return cfg
}

// mcpTestClient sends mcpRequest's requests (reloadClient in tests that
// reload Caddy).
var mcpTestClient = http.DefaultClient

// mcpRequest sends one request as an MCP client does (JSON body, both
// media types accepted) with header on top, and returns the whole answer.
func mcpRequest(t *testing.T, method, url string, header map[string]string, body io.Reader) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, url, body)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := mcpTestClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// rawMCP posts one JSON-RPC message and returns the status, the
// Mcp-Session-Id and the body (the data line of an SSE answer).
func rawMCP(t *testing.T, url string, header map[string]string, msg string) (int, string, string) {
	t.Helper()
	resp, b := mcpRequest(t, http.MethodPost, url, header, strings.NewReader(msg))
	body := string(b)
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		for _, line := range strings.Split(body, "\n") {
			if d, ok := strings.CutPrefix(line, "data: "); ok {
				body = d
			}
		}
	}
	return resp.StatusCode, resp.Header.Get("Mcp-Session-Id"), strings.TrimSpace(body)
}

// modernMeta is the _meta of a request of revision 2026-07-28.
const modernMeta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}`

// TestMCPRevisionsOneEndpoint: one codemode_mcp endpoint serves a client of
// revision 2026-07-28 without a session (no Mcp-Session-Id ever) and
// clients of 2025-11-25 and 2025-06-18 through the handshake and a session.
func TestMCPRevisionsOneEndpoint(t *testing.T) {
	port := freePort(t)
	startCaddy(t, mcpCaddyConfig(port, map[string]any{"upstreams": []any{map[string]any{"name": "calc", "url": mcpUpstream(t)}}}))
	url := fmt.Sprintf("http://127.0.0.1:%d/mcp", port)

	// The go-sdk client speaks 2026-07-28 when the server does.
	rec := &headerRecorder{}
	modern := connectMCP(t, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: rec}})
	if v := modern.InitializeResult().ProtocolVersion; v != "2026-07-28" {
		t.Fatalf("negotiated %q, want 2026-07-28", v)
	}
	lt, err := modern.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(lt.Tools) != 4 || lt.CacheScope != "public" || lt.TTLMs < 0 {
		t.Fatalf("tools/list: %d tools, cacheScope %q, ttlMs %d", len(lt.Tools), lt.CacheScope, lt.TTLMs)
	}
	if v, _ := lt.Meta["codemode/toolIndexVersion"].(string); len(v) != 24 {
		t.Fatalf("tools/list _meta: %v", lt.Meta)
	}
	res := callMeta(t, modern, "meta:invoke", map[string]any{"tool": "calc:add", "input": map[string]any{"A": 2, "B": 3}})
	if res.IsError || !strings.Contains(resultText(res), `"sum":5`) {
		t.Fatalf("invoke: %s", resultText(res))
	}
	res = callMeta(t, modern, "meta:execute", map[string]any{"script": `return (await callTool("calc:add", {A: 1, B: 1})).sum`})
	if res.IsError || !strings.Contains(resultText(res), `"result":2`) {
		t.Fatalf("execute: %s", resultText(res))
	}
	if len(rec.sessionIDs) != 0 || rec.requests < 4 {
		t.Fatalf("2026-07-28: %d requests, session ids %v", rec.requests, rec.sessionIDs)
	}

	// A 2025-11-25 client goes through initialize and gets a session.
	rec = &headerRecorder{}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "old", Version: "v1"}, nil).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: rec}},
		&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if v := cs.InitializeResult().ProtocolVersion; v != "2025-11-25" {
		t.Fatalf("negotiated %q, want 2025-11-25", v)
	}
	res = callMeta(t, cs, "meta:search", map[string]any{"queries": []string{"add two integers"}})
	if res.IsError || !strings.Contains(resultText(res), `"calc:add"`) {
		t.Fatalf("search: %s", resultText(res))
	}
	if len(rec.sessionIDs) == 0 {
		t.Fatal("2025-11-25: no Mcp-Session-Id")
	}

	// Raw messages: an initialize of 2025-06-18 opens a session.
	status, sid, body := rawMCP(t, url, nil, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	if status != 200 || sid == "" || !strings.Contains(body, `"protocolVersion":"2025-06-18"`) {
		t.Fatalf("initialize 2025-06-18: %d %q %s", status, sid, body)
	}
	// 2026-07-28 with the header and _meta: answered, no session.
	status, sid, body = rawMCP(t, url, map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list"},
		`{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{`+modernMeta+`}}`)
	if status != 200 || sid != "" || !strings.Contains(body, `"ttlMs"`) || !strings.Contains(body, `"resultType":"complete"`) {
		t.Fatalf("tools/list 2026-07-28: %d %q %s", status, sid, body)
	}
	// _meta without the header: the revision's HeaderMismatch, not a legacy answer.
	status, _, body = rawMCP(t, url, nil, `{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{`+modernMeta+`}}`)
	if status != 400 || !strings.Contains(body, `"code":-32020`) {
		t.Fatalf("2026-07-28 without header: %d %s", status, body)
	}
	// A browser page of another origin is refused (DNS rebinding,
	// cross-site requests); the endpoint's own origin is served.
	status, _, body = rawMCP(t, url, map[string]string{"Origin": "http://evil.example", "Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list"},
		`{"jsonrpc":"2.0","id":5,"method":"tools/list","params":{`+modernMeta+`}}`)
	if status != 403 || !strings.Contains(body, `"code":-32600`) || !strings.Contains(body, `"id":null`) {
		t.Fatalf("foreign origin: %d %s", status, body)
	}
	status, _, _ = rawMCP(t, url, map[string]string{"Origin": fmt.Sprintf("http://127.0.0.1:%d", port), "Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list"},
		`{"jsonrpc":"2.0","id":6,"method":"tools/list","params":{`+modernMeta+`}}`)
	if status != 200 {
		t.Fatalf("own origin: %d", status)
	}
	// server/discover lists every revision offered.
	status, _, body = rawMCP(t, url, map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "server/discover"},
		`{"jsonrpc":"2.0","id":4,"method":"server/discover","params":{`+modernMeta+`}}`)
	if status != 200 || !strings.Contains(body, `"supportedVersions":["2026-07-28","2025-11-25","2025-06-18","2025-03-26","2024-11-05"]`) {
		t.Fatalf("server/discover: %d %s", status, body)
	}
}

// TestMCPProtocolVersionsOffered: the meta block's protocol_versions limits
// what /mcp serves, each refusal in the protocol's own terms.
func TestMCPProtocolVersionsOffered(t *testing.T) {
	t.Run("only 2026-07-28", func(t *testing.T) {
		port := freePort(t)
		startCaddy(t, mcpCaddyConfig(port, map[string]any{"protocol_versions": []string{"2026-07-28"}}))
		url := fmt.Sprintf("http://127.0.0.1:%d/mcp", port)
		status, sid, body := rawMCP(t, url, nil, `{"jsonrpc":"2.0","id":7,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
		if status != 400 || sid != "" || !strings.Contains(body, `"code":-32022`) || !strings.Contains(body, `"supported":["2026-07-28"]`) || !strings.Contains(body, `"id":7`) {
			t.Fatalf("initialize: %d %q %s", status, sid, body)
		}
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 405 || resp.Header.Get("Allow") != "POST" {
			t.Fatalf("GET: %d Allow %q", resp.StatusCode, resp.Header.Get("Allow"))
		}
		cs := connectMCP(t, &mcp.StreamableClientTransport{Endpoint: url})
		if v := cs.InitializeResult().ProtocolVersion; v != "2026-07-28" {
			t.Fatalf("negotiated %q", v)
		}
		if got := toolNames(t, cs); got != "meta:describe meta:execute meta:invoke meta:search" {
			t.Fatalf("tools = %s", got)
		}
	})
	t.Run("only older revisions", func(t *testing.T) {
		port := freePort(t)
		startCaddy(t, mcpCaddyConfig(port, map[string]any{"protocol_versions": []string{"2025-11-25", "2025-06-18"}}))
		url := fmt.Sprintf("http://127.0.0.1:%d/mcp", port)
		status, _, body := rawMCP(t, url, map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list"},
			`{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{`+modernMeta+`}}`)
		if status != 400 || !strings.Contains(body, `"code":-32022`) || !strings.Contains(body, `"supported":["2025-11-25","2025-06-18"]`) {
			t.Fatalf("2026-07-28 request: %d %s", status, body)
		}
		// The go-sdk client falls back to the handshake.
		cs := connectMCP(t, &mcp.StreamableClientTransport{Endpoint: url})
		if v := cs.InitializeResult().ProtocolVersion; v != "2025-11-25" {
			t.Fatalf("negotiated %q, want 2025-11-25", v)
		}
		// A revision not offered is answered with one that is (the handshake's rule).
		_, _, body = rawMCP(t, url, nil, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
		if !strings.Contains(body, `"protocolVersion":"2025-11-25"`) {
			t.Fatalf("initialize 2025-03-26: %s", body)
		}
	})
	t.Run("unknown revision refused at load", func(t *testing.T) {
		err := loadErr(t, mcpCaddyConfig(freePort(t), map[string]any{"protocol_versions": []string{"2099-01-01"}}))
		if err == nil || !strings.Contains(err.Error(), `"2099-01-01" is not supported`) {
			t.Fatalf("load: %v", err)
		}
	})
}

// TestMCPStatelessThroughRoundRobin puts two codemode_mcp handlers (each with
// its own session table, as two gateways have) behind Caddy's reverse_proxy
// with lb_policy round_robin: a 2026-07-28 client works with every request
// on the other handler; a 2025-11-25 client without affinity does not, which
// is what the stateless revision fixes.
func TestMCPStatelessThroughRoundRobin(t *testing.T) {
	lb, a, b := freePort(t), freePort(t), freePort(t)
	gateway := func(port int) map[string]any {
		return map[string]any{
			"listen":          []string{fmt.Sprintf("127.0.0.1:%d", port)},
			"automatic_https": map[string]any{"disable": true},
			"routes": []any{map[string]any{"handle": []any{
				map[string]any{"handler": "headers", "response": map[string]any{"set": map[string]any{"X-Gateway": []string{fmt.Sprint(port)}}}},
				map[string]any{"handler": "codemode_mcp"},
			}}},
		}
	}
	cfg, _ := json.Marshal(map[string]any{
		"admin":   map[string]any{"disabled": true, "config": map[string]any{"persist": false}},
		"logging": map[string]any{"logs": map[string]any{"default": map[string]any{"level": "ERROR"}}},
		"apps": map[string]any{
			"codemode": map[string]any{"meta": map[string]any{"upstreams": []any{map[string]any{"name": "calc", "url": mcpUpstream(t)}}}},
			"http": map[string]any{"servers": map[string]any{
				"a": gateway(a), "b": gateway(b),
				"lb": map[string]any{
					"listen":          []string{fmt.Sprintf("127.0.0.1:%d", lb)},
					"automatic_https": map[string]any{"disable": true},
					"routes": []any{map[string]any{"handle": []any{map[string]any{
						"handler":        "reverse_proxy",
						"load_balancing": map[string]any{"selection_policy": map[string]any{"policy": "round_robin"}},
						"upstreams":      []any{map[string]any{"dial": fmt.Sprintf("127.0.0.1:%d", a)}, map[string]any{"dial": fmt.Sprintf("127.0.0.1:%d", b)}},
					}}}},
				},
			}},
		},
	})
	startCaddy(t, cfg)
	url := fmt.Sprintf("http://127.0.0.1:%d/mcp", lb)

	gw := &gatewayRecorder{}
	cs := connectMCP(t, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: gw}})
	if v := cs.InitializeResult().ProtocolVersion; v != "2026-07-28" {
		t.Fatalf("negotiated %q", v)
	}
	toolNames(t, cs)
	callMeta(t, cs, "meta:search", map[string]any{"queries": []string{"add"}})
	if res := callMeta(t, cs, "meta:execute", map[string]any{"script": `return (await callTool("calc:add", {A: 40, B: 2})).sum`}); res.IsError || !strings.Contains(resultText(res), `"result":42`) {
		t.Fatalf("execute: %s", resultText(res))
	}
	if res := callMeta(t, cs, "meta:invoke", map[string]any{"tool": "calc:add", "input": map[string]any{"A": 1, "B": 2}}); res.IsError {
		t.Fatalf("invoke: %s", resultText(res))
	}
	seq := gw.sequence()
	if len(seq) < 5 {
		t.Fatalf("requests: %v", seq)
	}
	for i := 1; i < len(seq); i++ {
		if seq[i] == seq[i-1] {
			t.Fatalf("two requests in a row on gateway %s: %v", seq[i], seq)
		}
	}

	// The handshake's session lives in one gateway: the next request,
	// sent to the other, cannot find it.
	old, err := mcp.NewClient(&mcp.Implementation{Name: "old", Version: "v1"}, nil).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: url}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err == nil {
		defer old.Close()
		_, err = old.ListTools(context.Background(), nil)
		if err == nil {
			_, err = old.ListTools(context.Background(), nil)
		}
	}
	if err == nil || !strings.Contains(err.Error(), "session not found") {
		t.Fatalf("a 2025-11-25 session through round robin without affinity: %v", err)
	}
}

// gatewayRecorder records which gateway (X-Gateway) answered each request.
type gatewayRecorder struct {
	mu  sync.Mutex
	seq []string
}

func (g *gatewayRecorder) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil {
		g.mu.Lock()
		g.seq = append(g.seq, resp.Header.Get("X-Gateway"))
		g.mu.Unlock()
	}
	return resp, err
}

func (g *gatewayRecorder) sequence() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.seq...)
}

// TestMCPUnsupportedProtocolVersionFirst: a request whose
// MCP-Protocol-Version header names a revision the endpoint does not offer
// is told so first (400), whatever else it lacks. An unknown version of the
// stateless era (it sorts after 2026-07-28) gets that revision's
// UnsupportedProtocolVersionError, -32022 with data.supported and
// data.requested, not a complaint about a missing Mcp-Method header or _meta
// field of 2026-07-28; so does 2026-07-28 where only older revisions are
// offered. An unknown version that sorts earlier is the go-sdk's 400.
func TestMCPUnsupportedProtocolVersionFirst(t *testing.T) {
	type answer struct {
		ID    json.RawMessage
		Error struct {
			Code int
			Data struct {
				Supported []string
				Requested string
			}
		}
	}
	check := func(t *testing.T, url, method, version string, header map[string]string, body string, code int, supported []string, id string) {
		t.Helper()
		h := map[string]string{"Mcp-Protocol-Version": version}
		for k, v := range header {
			h[k] = v
		}
		resp, b := mcpRequest(t, method, url, h, strings.NewReader(body))
		var a answer
		if resp.StatusCode != 400 || json.Unmarshal(b, &a) != nil || a.Error.Code != code {
			t.Fatalf("%s %s: %d %s, want 400 %d", method, version, resp.StatusCode, b, code)
		}
		if code != mcp.CodeUnsupportedProtocolVersion {
			return
		}
		if strings.Join(a.Error.Data.Supported, " ") != strings.Join(supported, " ") || a.Error.Data.Requested != version || string(a.ID) != id {
			t.Fatalf("%s %s: %s, want supported %q, requested %q, id %s", method, version, b, supported, version, id)
		}
	}
	t.Run("every revision offered", func(t *testing.T) {
		port := freePort(t)
		startCaddy(t, mcpCaddyConfig(port, map[string]any{}))
		url := fmt.Sprintf("http://127.0.0.1:%d/mcp", port)
		all := mcp.SupportedProtocolVersions()
		meta := strings.ReplaceAll(modernMeta, "2026-07-28", "9999-01-01")
		// Without Mcp-Method; without _meta; complete.
		check(t, url, "POST", "9999-01-01", nil, `{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{`+meta+`}}`, mcp.CodeUnsupportedProtocolVersion, all, "3")
		check(t, url, "POST", "abc", map[string]string{"Mcp-Method": "tools/list"}, `{"jsonrpc":"2.0","id":"x","method":"tools/list"}`, mcp.CodeUnsupportedProtocolVersion, all, `"x"`)
		check(t, url, "POST", "9999-01-01", map[string]string{"Mcp-Method": "tools/list"}, `{"jsonrpc":"2.0","id":4,"method":"tools/list","params":{`+meta+`}}`, mcp.CodeUnsupportedProtocolVersion, all, "4")
		check(t, url, "GET", "9999-01-01", map[string]string{"Accept": "text/event-stream"}, ``, mcp.CodeUnsupportedProtocolVersion, all, "null")
		// Earlier than any revision: the go-sdk's 400.
		check(t, url, "POST", "2024-01-01", nil, `{"jsonrpc":"2.0","id":5,"method":"ping"}`, rpcInvalidRequest, nil, "")
	})
	t.Run("only older revisions", func(t *testing.T) {
		port := freePort(t)
		startCaddy(t, mcpCaddyConfig(port, map[string]any{"protocol_versions": []string{"2025-11-25", "2025-06-18"}}))
		url := fmt.Sprintf("http://127.0.0.1:%d/mcp", port)
		older := []string{"2025-11-25", "2025-06-18"}
		check(t, url, "GET", "2026-07-28", map[string]string{"Accept": "text/event-stream"}, ``, mcp.CodeUnsupportedProtocolVersion, older, "null")
		check(t, url, "POST", "9999-01-01", nil, `{"jsonrpc":"2.0","id":6,"method":"ping"}`, mcp.CodeUnsupportedProtocolVersion, older, "6")
	})
}
