package caddymodules

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// modernHeader is what a client of revision 2026-07-28 sends with a
// request of method (and name, for tools/call), on top of extra.
func modernHeader(method, name string, extra ...string) map[string]string {
	h := map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": method}
	if name != "" {
		h["Mcp-Name"] = name
	}
	for i := 0; i+1 < len(extra); i += 2 {
		h[extra[i]] = extra[i+1]
	}
	return h
}

// TestMCPModernTransport holds the Streamable HTTP transport of revision
// 2026-07-28 to the revision's requirements over a real Caddy, one raw
// request each (docs/clients.md, "MCP 2026-07-28, requirement by
// requirement", names the requirement of each case):
//   - an Mcp-Name in the Base64 sentinel form is decoded before it is
//     compared with the body (the go-sdk compared the encoded text: 400
//     -32020 to a conforming client); one that does not decode is -32020;
//   - a Last-Event-ID header is ignored (the go-sdk refused the POST, 400
//     -32600 with id null);
//   - an SSE answer carries X-Accel-Buffering: no;
//   - a _meta log level that is no MCP level is -32602 (the go-sdk served
//     the request);
//   - the rest were met already and had no test of their own at this
//     revision: an Mcp-Session-Id is ignored and none is minted, a
//     notification gets 202 without a body, a result carries resultType
//     and serverInfo, subscriptions/listen is acknowledged first and ends
//     with its result, both tagged with the subscription id.
func TestMCPModernTransport(t *testing.T) {
	port := freePort(t)
	startCaddy(t, mcpCaddyConfig(port, map[string]any{}))
	url := fmt.Sprintf("http://127.0.0.1:%d/mcp", port)
	search := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"meta:search","arguments":{"query":"add"},` + modernMeta + `}}`
	list := `{"jsonrpc":"2.0","id":8,"method":"tools/list","params":{` + modernMeta + `}}`
	b64 := func(s string) string { return "=?base64?" + base64.StdEncoding.EncodeToString([]byte(s)) + "?=" }
	for _, tc := range []struct {
		name   string
		header map[string]string
		body   string
		status int
		want   []string // in the answer's body
	}{
		{"Mcp-Name base64", modernHeader("tools/call", b64("meta:search")), search, 200, []string{`"id":7`, `"resultType":"complete"`, `"tools"`}},
		{"Mcp-Name base64 of another name", modernHeader("tools/call", b64("meta:invoke")), search, 400, []string{`"id":7`, `"code":-32020`}},
		{"Mcp-Name base64 broken", modernHeader("tools/call", "=?base64?not base64!?="), search, 400, []string{`"id":7`, `"code":-32020`, "base64"}},
		{"Mcp-Name base64 unterminated", modernHeader("tools/call", "=?base64?bWV0YTpzZWFyY2g="), search, 400, []string{`"id":7`, `"code":-32020`}},
		{"Mcp-Name missing", modernHeader("tools/call", ""), search, 400, []string{`"id":7`, `"code":-32020`}},
		{"Last-Event-ID ignored", modernHeader("tools/list", "", "Last-Event-ID", "5"), list, 200, []string{`"id":8`, `"resultType":"complete"`}},
		{"Mcp-Session-Id ignored", modernHeader("tools/list", "", "Mcp-Session-Id", "no-such-session"), list, 200, []string{`"id":8`, `"meta:execute"`}},
		{"result names the server", modernHeader("tools/list", ""), list, 200, []string{`"io.modelcontextprotocol/serverInfo":{"name":"codemode-meta-tools"`, `"cacheScope":"public"`, `"ttlMs":`}},
		{"log level not MCP's", modernHeader("tools/list", ""), strings.Replace(list, `"_meta":{`, `"_meta":{"io.modelcontextprotocol/logLevel":"loud",`, 1), 400, []string{`"id":8`, `"code":-32602`, "logLevel"}},
		{"log level of MCP", modernHeader("tools/list", ""), strings.Replace(list, `"_meta":{`, `"_meta":{"io.modelcontextprotocol/logLevel":"debug",`, 1), 200, []string{`"id":8`, `"tools"`}},
		{"required _meta missing", modernHeader("tools/list", ""), `{"jsonrpc":"2.0","id":9,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`, 400, []string{`"id":9`, `"code":-32602`, "clientCapabilities"}},
		{"header and _meta versions differ", modernHeader("tools/list", ""), strings.Replace(list, `/protocolVersion":"2026-07-28"`, `/protocolVersion":"2027-01-01"`, 1), 400, []string{`"id":8`, `"code":-32020`}},
		{"invalid cursor", modernHeader("tools/list", ""), strings.Replace(list, `"params":{`, `"params":{"cursor":"not-a-cursor",`, 1), 400, []string{`"id":8`, `"code":-32602`}},
		{"notification", modernHeader("notifications/cancelled", ""), `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`, 202, nil},
		{"unknown method", modernHeader("x/y", ""), `{"jsonrpc":"2.0","id":10,"method":"x/y","params":{` + modernMeta + `}}`, 404, []string{`"id":10`, `"code":-32601`}},
		{"subscriptions/listen", modernHeader("subscriptions/listen", ""), `{"jsonrpc":"2.0","id":"L","method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true},` + modernMeta + `}}`, 200,
			[]string{`"method":"notifications/subscriptions/acknowledged","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":"L"}`, `"id":"L","result":{"resultType":"complete"`, `"io.modelcontextprotocol/subscriptionId":"L"}`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := mcpRequest(t, http.MethodPost, url, tc.header, strings.NewReader(tc.body))
			body := string(b)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %.600s", resp.StatusCode, tc.status, body)
			}
			for _, w := range tc.want {
				if !strings.Contains(body, w) {
					t.Errorf("answer lacks %s: %.600s", w, body)
				}
			}
			if sid := resp.Header.Get("Mcp-Session-Id"); sid != "" {
				t.Errorf("a session id was minted or echoed: %q", sid)
			}
			if tc.status == 202 && body != "" {
				t.Errorf("202 with a body: %q", body)
			}
			if ct := resp.Header.Get("Content-Type"); strings.HasPrefix(ct, "text/event-stream") {
				if v := resp.Header.Get("X-Accel-Buffering"); v != "no" {
					t.Errorf("SSE answer with X-Accel-Buffering %q, want no", v)
				}
				// The listen stream: acknowledged before anything else.
				if tc.name == "subscriptions/listen" && strings.Index(body, "acknowledged") > strings.Index(body, `"result"`) {
					t.Errorf("the acknowledgement is not first: %s", body)
				}
			}
		})
	}
}

// TestMCPModernDisconnectStopsCall: under revision 2026-07-28 closing a
// request's stream is its cancellation, and the server MUST treat it so:
// a meta:execute plan whose client goes away mid-call has its tool call in
// flight stopped (the upstream sees its context end), over a real Caddy
// and a real socket, and the gateway serves the next request.
func TestMCPModernDisconnectStopsCall(t *testing.T) {
	up, started, stopped := waitUpstream(t)
	port := freePort(t)
	startCaddy(t, mcpCaddyConfig(port, map[string]any{"upstreams": []any{map[string]any{"name": "calc", "url": up}}}))
	url := fmt.Sprintf("http://127.0.0.1:%d/mcp", port)
	for _, mode := range []string{"close", "cancel"} {
		t.Run(mode, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			call := strings.Replace(waitCall("5"), `"params":{`, `"params":{`+modernMeta+`,`, 1)
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(call))
			for k, v := range modernHeader("tools/call", "meta:execute") {
				req.Header.Set(k, v)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			answered := make(chan string, 1)
			var conn net.Conn
			if mode == "close" {
				// The client sends the request on a socket of its own and
				// closes it while the plan runs (no answer has begun: the
				// SSE stream opens with its first event).
				c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				if err := req.Write(c); err != nil {
					t.Fatal(err)
				}
				conn = c
				go func() {
					b, _ := io.ReadAll(c)
					answered <- string(b)
				}()
			} else {
				go func() {
					tr := &http.Transport{}
					defer tr.CloseIdleConnections()
					resp, err := tr.RoundTrip(req)
					if err != nil {
						answered <- ""
						return
					}
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					answered <- string(b)
				}()
			}
			waitFor(t, started, "start of the plan's tool call")
			if conn != nil {
				conn.Close()
			} else {
				cancel()
			}
			waitFor(t, stopped, "stop of the plan's tool call after its client went away")
			if a := waitFor(t, answered, "end of the request"); strings.Contains(a, `"id":5`) {
				t.Fatalf("the cancelled request was answered: %.400s", a)
			}
			status, _, body := rawMCP(t, url, modernHeader("tools/list", ""), `{"jsonrpc":"2.0","id":6,"method":"tools/list","params":{`+modernMeta+`}}`)
			var m struct {
				Result struct {
					Tools []json.RawMessage `json:"tools"`
				} `json:"result"`
			}
			if status != 200 || json.Unmarshal([]byte(body), &m) != nil || len(m.Result.Tools) != 4 {
				t.Fatalf("tools/list after the disconnect: %d %.400s", status, body)
			}
		})
	}
}
