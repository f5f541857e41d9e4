package caddymodules

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// TestConnectionsUnderHandlePath: a gateway mounted under a path prefix of
// an existing site (`handle_path /gw/*`), its auth resource and connect_url
// under that prefix, codemode_oauth at the site's top level. The browser asks for /gw/connections; codemode_connections,
// inside the handle_path, sees /connections. It used to compare that with
// connect_url's path, pass every request on, and the page was never
// served (Caddy's empty 200); it now also matches the path the browser
// sent, as it does at the site's top level.
func TestConnectionsUnderHandlePath(t *testing.T) {
	spec := httptest.NewServer(http.FileServer(http.Dir("testdata/demo")))
	defer spec.Close()
	hash, _ := bcrypt.GenerateFromPassword([]byte("pw"), bcrypt.MinCost)
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	startCaddyfile(t, fmt.Sprintf(`{
	admin off
	persist_config off
	codemode {
		broker {
			openapi demo %[1]s/openapi.json {
				credential user {
					title Demo API
					query key
					api_key Paste any key
				}
			}
		}
		auth {
			development
			issuer %[2]s
			resource %[2]s/gw/mcp
			user demo %[3]s
		}
		credentials {
			connect_url %[2]s/gw/connections
		}
	}
}

http://127.0.0.1:%[4]d {
	bind 127.0.0.1
	codemode_oauth
	handle_path /gw/* {
		codemode_connections
		codemode_auth /mcp
		codemode_mcp /mcp
	}
	respond "the existing site" 200
}
`, spec.URL, base, hash, port))

	// The MCP endpoint under the prefix sends its clients to the RFC 9728
	// metadata of its resource, which codemode_oauth serves at the site's
	// top level (the issuer has no path).
	plain := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := plain.Post(base+"/gw/mcp", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	metadata := base + "/.well-known/oauth-protected-resource/gw/mcp"
	if got := resp.Header.Get("WWW-Authenticate"); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(got, `resource_metadata="`+metadata+`"`) {
		t.Fatalf("POST /gw/mcp: %s, WWW-Authenticate %q", resp.Status, got)
	}
	resp, err = plain.Get(metadata)
	if err != nil {
		t.Fatal(err)
	}
	var prm struct {
		Resource             string   `json:"resource"`
		AuthorizationServers []string `json:"authorization_servers"`
	}
	err = json.NewDecoder(resp.Body).Decode(&prm)
	resp.Body.Close()
	if err != nil || prm.Resource != base+"/gw/mcp" || len(prm.AuthorizationServers) != 1 || prm.AuthorizationServers[0] != base {
		t.Fatalf("metadata: %+v (%v)", prm, err)
	}

	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Transport: &http.Transport{DisableKeepAlives: true}}
	final, page := signIn(t, c, base+"/gw/connections", "demo", "pw")
	if final.Path != "/gw/connections" || !strings.Contains(page, "Demo API") {
		t.Fatalf("after sign-in: %s\n%.2000s", final, page)
	}
	// The rest of the site is the site's.
	resp, err = c.Get(base + "/connections")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Set-Cookie") != "" {
		t.Errorf("/connections outside the prefix: %s", resp.Status)
	}
}

// TestWriteTimeoutWarned: an existing config whose server has a write
// timeout (`servers { timeouts { write … } }`) cuts /execute's NDJSON and
// MCP's SSE answers that outlive it, counted from the request's start and
// with no error on either side; the handlers on such a server say so at
// load, and those on a server without one stay quiet.
func TestWriteTimeoutWarned(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "caddy.log")
	timed, plain := freePort(t), freePort(t)
	startCaddyfile(t, fmt.Sprintf(`{
	admin off
	persist_config off
	log {
		output file %[1]s
		level WARN
	}
	servers :%[2]d {
		timeouts {
			write 30s
		}
	}
}

http://127.0.0.1:%[2]d {
	codemode_broker {
		prefix /broker
	}
	codemode_mcp /mcp
}

http://127.0.0.1:%[3]d {
	codemode_broker {
		prefix /broker
	}
	codemode_mcp /mcp
}
`, logPath, timed, plain))
	raw, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	logs := string(raw)
	for _, h := range []string{"codemode_broker", "codemode_mcp"} {
		if n := strings.Count(logs, h+": the server's write timeout cuts every streamed answer"); n != 1 {
			t.Errorf("%s: %d warnings about the write timeout, want 1 (its site with one):\n%s", h, n, logs)
		}
	}
}

// TestExecuteStreamsThroughEncodeAndProxy: /execute behind an existing
// site's `encode gzip zstd` (told to compress NDJSON, from the first byte)
// and a `reverse_proxy` in front still streams event by event: the caller
// reads the tool_call it must answer before the response ends, answers it,
// and reads the result. A layer that held the stream until its end would
// leave the plan waiting for an answer the caller never saw.
func TestExecuteStreamsThroughEncodeAndProxy(t *testing.T) {
	gw, front := freePort(t), freePort(t)
	startCaddyfile(t, fmt.Sprintf(`{
	admin off
	persist_config off
	codemode {
		broker {
			demo_tools
		}
	}
}

http://127.0.0.1:%d {
	encode gzip zstd {
		minimum_length 1
		match {
			header Content-Type application/x-ndjson*
		}
	}
	handle_path /broker/* {
		codemode_broker
	}
}

http://127.0.0.1:%d {
	reverse_proxy 127.0.0.1:%[1]d
}
`, gw, front))
	base := fmt.Sprintf("http://127.0.0.1:%d/broker", front)
	// A stream held back by a layer ends at the client's timeout instead.
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true, DisableCompression: true}}
	req, _ := http.NewRequest(http.MethodPost, base+"/execute",
		strings.NewReader(`{"code":"return 'got ' + await callTool('client:prompt', {question: 'name?'})"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("Content-Encoding %q: the stream was not compressed, the test proves nothing", resp.Header.Get("Content-Encoding"))
	}
	zr, err := gzip.NewReader(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(zr)
	var call ndjsonEvent
	for call.Type != "tool_call" {
		call = nextEvent(t, sc)
	}
	var p struct {
		CallID string `json:"callId"`
	}
	_ = json.Unmarshal(call.Payload, &p)
	answer, err := c.Post(base+"/sessions/"+resp.Header.Get("X-Session-Id")+"/tool-result", "application/json",
		strings.NewReader(`{"callId":"`+p.CallID+`","result":"Ada"}`))
	if err != nil {
		t.Fatal(err)
	}
	answer.Body.Close()
	last := nextEvent(t, sc)
	for last.Type != "result" && last.Type != "error" {
		last = nextEvent(t, sc)
	}
	if last.Type != "result" || !strings.Contains(string(last.Payload), `"result":"got Ada"`) {
		t.Fatalf("last event %s %s", last.Type, last.Payload)
	}
}

// TestLocalhostProtectionLogged: behind a proxy on the same machine that
// keeps the public Host (Caddy's reverse_proxy does), a gateway listening
// on loopback answers MCP with 403 "invalid Host header" (the go-sdk's
// DNS-rebinding protection). The gateway's log now says why and names the
// option; before, only the client saw the 403.
func TestLocalhostProtectionLogged(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "caddy.log")
	port := freePort(t)
	startCaddyfile(t, fmt.Sprintf(`{
	admin off
	persist_config off
	log {
		output file %s
		level WARN
	}
}

http://:%d {
	bind 127.0.0.1
	codemode_mcp /mcp
}
`, logPath, port))
	req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("http://127.0.0.1:%d/mcp", port),
		strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`))
	req.Host = "gw.example.com"
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("status %s, want 403 from the DNS-rebinding protection", resp.Status)
	}
	raw, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), "set disable_localhost_protection") || !strings.Contains(string(raw), `"host":"gw.example.com"`) {
		t.Errorf("no warning naming the option and the host:\n%s", raw)
	}
}

// TestGuardConcurrencyOnMCP: a codemode_guard slot is held for the whole
// request, and an MCP client's GET stream lasts as long as its session, so
// a bare `concurrency 1` in front of codemode_mcp is taken by one idle
// client's stream and refuses everything else, that client's own calls
// included. Matched to POSTs (docs/guard.md), it counts the calls only.
func TestGuardConcurrencyOnMCP(t *testing.T) {
	port := freePort(t)
	startCaddyfile(t, fmt.Sprintf(`{
	admin off
	persist_config off
}

http://127.0.0.1:%d {
	route /bare {
		codemode_guard {
			concurrency 1
		}
		codemode_mcp
	}
	route /posts {
		@calls method POST
		codemode_guard @calls {
			concurrency 1
		}
		codemode_mcp
	}
}
`, port))
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	post := func(url, sid, body string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if sid != "" {
			req.Header.Set("Mcp-Session-Id", sid)
			req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	for path, want := range map[string]int{"/bare": http.StatusTooManyRequests, "/posts": http.StatusOK} {
		url := fmt.Sprintf("http://127.0.0.1:%d%s", port, path)
		resp, _ := post(url, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
		sid := resp.Header.Get("Mcp-Session-Id")
		if sid == "" {
			t.Fatalf("%s: initialize: %s", path, resp.Status)
		}
		post(url, sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set("Mcp-Session-Id", sid)
		req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
		stream, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if stream.StatusCode != http.StatusOK {
			t.Fatalf("%s: GET stream: %s", path, stream.Status)
		}
		resp, body := post(url, sid, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
		stream.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%s: tools/list while the client's GET stream is open: %s %.200s, want %d", path, resp.Status, body, want)
		}
	}
}
