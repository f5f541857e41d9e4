package caddymodules

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codemode-gateway/caddy-codemode/guard/redistest"
)

// TestMCPProtocolErrors: every transport error of /mcp is a JSON-RPC error
// object with the right code and the HTTP status the Streamable HTTP
// transport prescribes; none is plain text, none has code 0, no invalid
// message gets an empty 202; every answer names its request.
func TestMCPProtocolErrors(t *testing.T) {
	port := freePort(t)
	startCaddy(t, mcpCaddyConfig(port, map[string]any{}))
	url := fmt.Sprintf("http://127.0.0.1:%d/mcp", port)
	big := `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"` + strings.Repeat("a", 5<<20) + `"}}`
	for _, tc := range []struct {
		name, method, body string
		header             map[string]string
		status             int
		code               int
	}{
		{"malformed JSON", "POST", `{bad`, nil, 400, -32700},
		{"empty body", "POST", ``, nil, 400, -32700},
		{"no method, result or error", "POST", `{"jsonrpc":"2.0","id":1}`, nil, 400, -32600},
		{"unknown session", "POST", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, map[string]string{"Mcp-Session-Id": "nope"}, 404, -32001},
		{"request without a session", "POST", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, nil, 400, -32600},
		{"initialize params not an object", "POST", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":5}`, nil, 200, -32602},
		{"PUT", "PUT", `{}`, nil, 405, -32600},
		{"GET without a session", "GET", ``, map[string]string{"Accept": "text/event-stream"}, 400, -32600},
		{"text/plain body", "POST", `{}`, map[string]string{"Content-Type": "text/plain"}, 415, -32600},
		// The go-sdk looked at the media type only: a UTF-16 body was read as UTF-8.
		{"utf-16 charset", "POST", `{"jsonrpc":"2.0","id":1,"method":"ping"}`, map[string]string{"Content-Type": "application/json; charset=utf-16"}, 415, -32600},
		{"utf-16 charset of 2026-07-28", "POST", `{"jsonrpc":"2.0","id":1,"method":"ping"}`, map[string]string{"Content-Type": "application/json; charset=utf-16", "Mcp-Protocol-Version": "2026-07-28"}, 415, -32600},
		{"body over 4 MiB", "POST", big, nil, 413, -32600},
		// The checks before the go-sdk decoded these with no bound on the
		// nesting: the stack outgrew its 1 GB limit and the process died.
		{"an id nested 4 million deep", "POST", `{"jsonrpc":"2.0","method":"ping","id":` + strings.Repeat("[", 4<<20-64), nil, 400, -32700},
		{"a batch nested 4 million deep", "POST", `[{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":` + strings.Repeat("{\"a\":", 4<<20/5-64), nil, 400, -32700},
		{"nested 1001 deep", "POST", `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"a":` + strings.Repeat("[", 1000) + strings.Repeat("]", 1000) + "}}", nil, 400, -32700},
		{"unknown protocol version header", "POST", `{"jsonrpc":"2.0","id":1,"method":"ping"}`, map[string]string{"Mcp-Protocol-Version": "1999-01-01"}, 400, -32600},
		// JSON that is no JSON-RPC message is JSON-RPC's Invalid Request,
		// as over stdio; the go-sdk answered Parse error, naming its Go
		// types ("jsonrpc2.wireDecode").
		{"empty batch", "POST", `[]`, nil, 400, -32600},
		{"empty batch of 2026-07-28", "POST", `[]`, map[string]string{"Mcp-Protocol-Version": "2026-07-28"}, 400, -32600},
		{"a batch of a number", "POST", `[1]`, nil, 400, -32600},
		{"a batch of an empty object", "POST", `[{}]`, nil, 400, -32600},
		{"a string", "POST", `"ping"`, nil, 400, -32600},
		{"null", "POST", `null`, nil, 400, -32600},
		{"no jsonrpc version", "POST", `{"id":1,"method":"ping"}`, nil, 400, -32600},
		{"jsonrpc 1.0", "POST", `{"jsonrpc":"1.0","id":1,"method":"ping"}`, nil, 400, -32600},
		{"method a number", "POST", `{"jsonrpc":"2.0","id":1,"method":5}`, nil, 400, -32600},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := mcpRequest(t, tc.method, url, tc.header, strings.NewReader(tc.body))
			var msg struct {
				JSONRPC string          `json:"jsonrpc"`
				ID      json.RawMessage `json:"id"`
				Error   *struct {
					Code    int    `json:"code"`
					Message string `json:"message"`
				} `json:"error"`
			}
			if resp.StatusCode != tc.status || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") ||
				json.Unmarshal(b, &msg) != nil || msg.JSONRPC != "2.0" || msg.Error == nil || msg.Error.Code != tc.code || msg.Error.Message == "" {
				t.Fatalf("%d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
			}
			if strings.Contains(msg.Error.Message, "Go value") || strings.Contains(msg.Error.Message, "jsonrpc2.") {
				t.Errorf("the message names Go types: %s", msg.Error.Message)
			}
			if resp.Header.Get("X-Request-Id") == "" {
				t.Error("no X-Request-Id")
			}
			if tc.status == 405 && resp.Header.Get("Allow") == "" {
				t.Error("405 without Allow")
			}
		})
	}
}

// TestMCPSessionsAcrossGateways: three gateways (three codemode_mcp
// handlers, each with its own go-sdk session table, as three processes
// have) share the MCP sessions of revision 2025-11-25 through Redis behind a
// round-robin load balancer: every call of a session works whichever
// gateway it lands on; when the gateway holding a session is gone, the
// others answer 404 with a JSON-RPC error and the client's new session
// works.
func TestMCPSessionsAcrossGateways(t *testing.T) {
	rdb, prefix := redistest.Client(t)
	lb := freePort(t)
	ports := []int{freePort(t), freePort(t), freePort(t)}
	servers := map[string]any{}
	var upstreams []any
	for i, p := range ports {
		servers[fmt.Sprint("gw", i)] = map[string]any{
			"listen":          []string{fmt.Sprintf("127.0.0.1:%d", p)},
			"automatic_https": map[string]any{"disable": true},
			"routes": []any{map[string]any{"handle": []any{
				map[string]any{"handler": "headers", "response": map[string]any{"set": map[string]any{"X-Gateway": []string{fmt.Sprint(i)}}}},
				map[string]any{"handler": "codemode_mcp", "gateway_url": fmt.Sprintf("http://127.0.0.1:%d/mcp", p)},
			}}},
		}
		upstreams = append(upstreams, map[string]any{"dial": fmt.Sprintf("127.0.0.1:%d", p)})
	}
	servers["lb"] = map[string]any{
		"listen":          []string{fmt.Sprintf("127.0.0.1:%d", lb)},
		"automatic_https": map[string]any{"disable": true},
		"routes": []any{map[string]any{"handle": []any{map[string]any{
			"handler": "reverse_proxy", "flush_interval": -1,
			"load_balancing": map[string]any{"selection_policy": map[string]any{"policy": "round_robin"}},
			"upstreams":      upstreams,
		}}}},
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
	startCaddy(t, cfg)

	gw := &gatewayRecorder{}
	hc := &http.Client{Transport: gw}
	connect := func(port int) *mcp.ClientSession {
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "old", Version: "v1"}, nil).Connect(context.Background(),
			&mcp.StreamableClientTransport{Endpoint: fmt.Sprintf("http://127.0.0.1:%d/mcp", port), HTTPClient: hc},
			&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	cs := connect(lb)
	for i := 0; i < 3; i++ {
		if got := toolNames(t, cs); got != "meta:describe meta:execute meta:invoke meta:search" {
			t.Fatalf("tools = %s", got)
		}
		if res := callMeta(t, cs, "meta:invoke", map[string]any{"tool": "math:add", "input": map[string]any{"a": i, "b": 1}}); res.IsError ||
			!strings.Contains(resultText(res), fmt.Sprintf(`"sum":%d`, i+1)) {
			t.Fatalf("invoke: %s", resultText(res))
		}
		if res := callMeta(t, cs, "meta:execute", map[string]any{"script": `return (await callTool("text:upper", {text: "ok"})).text`}); res.IsError ||
			!strings.Contains(resultText(res), `"result":"OK"`) {
			t.Fatalf("execute: %s", resultText(res))
		}
	}
	seen := map[string]bool{}
	for _, g := range gw.sequence() {
		seen[g] = true
	}
	if len(seen) != 3 {
		t.Fatalf("requests reached gateways %v, want all three", gw.sequence())
	}

	// The holder of the session goes away: its liveness key is removed (as
	// when it stopped cleanly or its TTL lapsed after a kill).
	keys, _ := rdb.Keys(context.Background(), prefix+brokerKeyPart+"mcp:gateway:*").Result()
	if len(keys) != 3 {
		t.Fatalf("gateway liveness keys: %v", keys)
	}
	var sid string
	ids, _ := rdb.Keys(context.Background(), prefix+brokerKeyPart+"mcp:session:*").Result()
	if len(ids) != 1 {
		t.Fatalf("session keys: %v", ids)
	}
	raw, _ := rdb.Get(context.Background(), ids[0]).Bytes()
	var e mcpSessionEntry
	json.Unmarshal(raw, &e)
	sid = strings.TrimPrefix(ids[0], prefix+brokerKeyPart+"mcp:session:")
	rdb.Del(context.Background(), prefix+brokerKeyPart+"mcp:gateway:"+e.Gateway)
	notFound := 0
	for _, p := range ports {
		status, _, body := rawMCP(t, fmt.Sprintf("http://127.0.0.1:%d/mcp", p), map[string]string{"Mcp-Session-Id": sid, "Mcp-Protocol-Version": "2025-11-25"},
			`{"jsonrpc":"2.0","id":9,"method":"tools/list"}`)
		switch {
		case fmt.Sprintf("http://127.0.0.1:%d/mcp", p) == e.URL:
			if status != 200 {
				t.Errorf("the holder itself: %d %s", status, body)
			}
		case status == 404 && strings.Contains(body, `"code":-32001`):
			notFound++
		default:
			t.Errorf("another gateway: %d %s", status, body)
		}
	}
	if notFound != 2 {
		t.Fatalf("%d gateways reported the session gone, want 2", notFound)
	}
	// The client starts a new session, which works on any live gateway (a
	// killed gateway gets no requests from a load balancer that retries:
	// the multi-gateway CI test kills one for real).
	for _, p := range ports {
		if fmt.Sprintf("http://127.0.0.1:%d/mcp", p) != e.URL {
			if got := toolNames(t, connect(p)); !strings.Contains(got, "meta:search") {
				t.Fatalf("new session: %s", got)
			}
			break
		}
	}
}

// TestMCPUnknownMethod: in a session of a handshake revision, a request
// for a method the server does not know (tasks/list of 2025-11-25, a
// misspelling) is answered as JSON-RPC says: error -32601 carrying the
// request's id, which MCP clients surface as that call's "method not
// found"; an unknown notification is accepted and ignored (202). The go-sdk
// alone answers both with a 400 that names no request.
func TestMCPUnknownMethod(t *testing.T) {
	port := freePort(t)
	startCaddy(t, mcpCaddyConfig(port, map[string]any{}))
	url := fmt.Sprintf("http://127.0.0.1:%d/mcp", port)
	sid := mcpOpen(t, url, "127.0.0.1")
	hdr := map[string]string{"Mcp-Session-Id": sid, "Mcp-Protocol-Version": "2025-11-25"}
	var status int
	var body string
	for _, method := range []string{"tasks/list", "no/such/method"} {
		status, _, body = rawMCP(t, url, hdr, `{"jsonrpc":"2.0","id":"req-7","method":"`+method+`","params":{}}`)
		var msg struct {
			ID    string `json:"id"`
			Error struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if status != http.StatusOK || json.Unmarshal([]byte(body), &msg) != nil || msg.ID != "req-7" ||
			msg.Error.Code != -32601 || msg.Error.Message != `method not found: "`+method+`"` {
			t.Fatalf("%s: %d %s, want 200 with error -32601 for id req-7", method, status, body)
		}
	}
	if status, _, body = rawMCP(t, url, hdr, `{"jsonrpc":"2.0","method":"notifications/no_such_thing","params":{}}`); status != http.StatusAccepted || body != "" {
		t.Fatalf("unknown notification: %d %q, want an empty 202", status, body)
	}
	// The session still works.
	status, _, body = rawMCP(t, url, hdr, `{"jsonrpc":"2.0","id":8,"method":"ping"}`)
	if status != http.StatusOK || !strings.Contains(body, `"id":8`) || strings.Contains(body, `"error"`) {
		t.Fatalf("ping after: %d %s", status, body)
	}
	// Revision 2026-07-28 alike: an unknown request is 404 -32601 with its
	// id (the revision's answer), an unknown notification is accepted and
	// ignored (it was 400 -32601 with id null, answering a notification).
	modern := map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "no/such/method"}
	// One message in every revision and transport (2026-07-28's was the
	// go-sdk's "JSON RPC not handled: "no/such/method" unsupported").
	status, _, body = rawMCP(t, url, modern, `{"jsonrpc":"2.0","id":"req-9","method":"no/such/method","params":{`+modernMeta+`}}`)
	if status != http.StatusNotFound || !strings.Contains(body, `"id":"req-9"`) || !strings.Contains(body, `-32601`) ||
		!strings.Contains(body, `"message":"method not found: \"no/such/method\""`) {
		t.Fatalf("2026-07-28 unknown request: %d %s, want 404 -32601 method not found for id req-9", status, body)
	}
	// ping is one there: the revision removed it (its changelog, SEP-2575;
	// its schema has no ping request), and the official TypeScript client
	// (2.4.0) refuses to send it on a connection of that revision.
	modern["Mcp-Method"] = "ping"
	status, _, body = rawMCP(t, url, modern, `{"jsonrpc":"2.0","id":"p-1","method":"ping","params":{`+modernMeta+`}}`)
	if status != http.StatusNotFound || !strings.Contains(body, `"id":"p-1"`) || !strings.Contains(body, `-32601`) ||
		!strings.Contains(body, `"message":"method not found: \"ping\""`) {
		t.Fatalf("2026-07-28 ping: %d %s, want 404 -32601 method not found for id p-1", status, body)
	}
	// In a 2025-03-26 batch, the same message with the request's id
	// (TestMCPBatchUnknownRequest).
	old := map[string]string{"Mcp-Session-Id": sid, "Mcp-Protocol-Version": "2025-03-26"}
	status, _, body = rawMCP(t, url, old, `[{"jsonrpc":"2.0","id":1,"method":"no/such/method"}]`)
	if status != http.StatusOK || body != `[{"error":{"code":-32601,"message":"method not found: \"no/such/method\""},"id":1,"jsonrpc":"2.0"}]` {
		t.Fatalf("unknown method in a batch: %d %s, want 200 -32601 method not found with id 1", status, body)
	}
	modern["Mcp-Method"] = "notifications/no_such_thing"
	if status, _, body = rawMCP(t, url, modern, `{"jsonrpc":"2.0","method":"notifications/no_such_thing","params":{`+modernMeta+`}}`); status != http.StatusAccepted || body != "" {
		t.Fatalf("2026-07-28 unknown notification: %d %q, want an empty 202", status, body)
	}
}

// TestInitializeParamsProblem: the check refuses exactly what the go-sdk
// cannot decode, which matches keys case-sensitively: a capability spelt
// "Roots" is a key it ignores, and an initialize carrying one opens a
// session; the check, decoding with encoding/json (which matches keys in
// any case), refused it with -32602.
func TestInitializeParamsProblem(t *testing.T) {
	for params, want := range map[string]string{
		`{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}`:                          "",
		`{"protocolVersion":"2025-11-25","capabilities":{"Roots":{"listChanged":"yes"}},"clientInfo":{"name":"x"}}`:           "",
		`{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","Version":7}}`:                            "",
		`{"protocolVersion":"2025-11-25","capabilities":5,"clientInfo":{"name":"x","version":"1"}}`:                           "capabilities: got number, want object",
		`{"protocolVersion":"2025-11-25","capabilities":{"roots":{"listChanged":"yes"}},"clientInfo":{"name":"x"}}`:           "capabilities.roots.listChanged: got string, want boolean",
		`{"protocolVersion":"2025-11-25","capabilities":{"roots":{"listChanged":"yes"},"Roots":5},"clientInfo":{"name":"x"}}`: "capabilities.roots.listChanged: got string, want boolean",
		`{"protocolVersion":7,"capabilities":{},"clientInfo":{"name":"x","version":"1"}}`:                                     "protocolVersion: got number, want string",
		`{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":"x"}`:                                                 "clientInfo: got string, want object",
		`{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":["x"]}}`:                                      "clientInfo.name: got array, want string",
		`{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x"},"_meta":true}`:                           "_meta: got boolean, want object",
	} {
		if got := initializeParamsProblem(json.RawMessage(params)); got != want {
			t.Errorf("%s: %q, want %q", params, got, want)
		}
	}
}

// TestMCPRequestIDs: MCP ids are strings or integers. The go-sdk decodes a
// numeric id as a float64 and answers with its int64 truncation: 1.5 came
// back as 1 and 9007199254740993 as 9007199254740992, so the client could
// not match the answer (and 1 may be another of its requests). Such a
// request, and one whose id is no string or number at all, is refused with
// 400 -32600 and id null by both revisions' handlers, in and out of a
// session and in a batch; strings and integers up to 2^53-1 in magnitude
// come back as sent.
func TestMCPRequestIDs(t *testing.T) {
	port := freePort(t)
	startCaddy(t, mcpCaddyConfig(port, map[string]any{}))
	url := fmt.Sprintf("http://127.0.0.1:%d/mcp", port)
	initialize := func(id, version string) string {
		return `{"jsonrpc":"2.0","id":` + id + `,"method":"initialize","params":{"protocolVersion":"` + version + `","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`
	}
	session := func(version string) map[string]string {
		t.Helper()
		status, sid, body := rawMCP(t, url, nil, initialize("1", version))
		if status != 200 || sid == "" {
			t.Fatalf("initialize %s: %d %s", version, status, body)
		}
		h := map[string]string{"Mcp-Session-Id": sid, "Mcp-Protocol-Version": version}
		rawMCP(t, url, h, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		return h
	}
	inSession, batching := session("2025-06-18"), session("2025-03-26")
	list := func(id string) string { return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/list"}` }
	modernList := func(id string) string {
		return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/list","params":{` + modernMeta + `}}`
	}
	modern := map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list"}
	type request struct {
		name   string
		header map[string]string
		body   func(id string) string
	}
	requests := []request{
		{"initialize", nil, func(id string) string { return initialize(id, "2025-06-18") }},
		{"in a session", inSession, list},
		{"2026-07-28", modern, modernList},
		{"in a batch", batching, func(id string) string { return "[" + list(`"ok"`) + "," + list(id) + "]" }},
	}
	// null too: the go-sdk took such a message for a notification, so a
	// method that is one (or that it does not know) got 202 and no answer.
	requests = append(requests,
		request{"a notification's method", inSession, func(id string) string {
			return `{"jsonrpc":"2.0","id":` + id + `,"method":"notifications/initialized"}`
		}},
		request{"an unknown method", inSession, func(id string) string { return `{"jsonrpc":"2.0","id":` + id + `,"method":"tasks/list"}` }},
		request{"2026-07-28, a notification's method", map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "notifications/cancelled"},
			func(id string) string {
				return `{"jsonrpc":"2.0","id":` + id + `,"method":"notifications/cancelled","params":{"requestId":"x"}}`
			}})
	for _, id := range []string{"1.5", "-0.5", "1e300", "9007199254740993", "-9007199254740993", "true", "{}", "[1]", "null", " null "} {
		for _, rq := range requests {
			status, _, body := rawMCP(t, url, rq.header, rq.body(id))
			if status != 400 || !strings.Contains(body, `"code":-32600`) || !strings.Contains(body, `"id":null`) {
				t.Errorf("%s, id %s: %d %s", rq.name, id, status, body)
			}
			// A batch is refused whole (decision): one error, not an
			// array answering the batch's other request.
			if rq.name == "in a batch" && (!strings.HasPrefix(body, "{") || strings.Contains(body, `"ok"`)) {
				t.Errorf("%s, id %s: not refused whole: %s", rq.name, id, body)
			}
		}
	}
	for _, id := range []string{`"a-1"`, "7", "-3", "0", "9007199254740991", "-9007199254740991"} {
		for _, rq := range requests[1:3] {
			status, _, body := rawMCP(t, url, rq.header, rq.body(id))
			if status != 200 || !strings.Contains(body, `"id":`+id+`,`) || !strings.Contains(body, `"tools"`) {
				t.Errorf("%s, id %s: %d %s", rq.name, id, status, body)
			}
		}
	}
	if status, _, body := rawMCP(t, url, nil, initialize("9007199254740991", "2025-06-18")); status != 200 || !strings.Contains(body, `"id":9007199254740991,`) {
		t.Errorf("initialize, id 2^53-1: %d %s", status, body)
	}
}

// TestBadRequestID: which ids come back from the go-sdk as sent.
func TestBadRequestID(t *testing.T) {
	for id, bad := range map[string]bool{
		``: false, `null`: true, `"x"`: false, `""`: false, `7`: false, `-3`: false, `0`: false, `-0`: false,
		`1.0`: false, `1e2`: false, `9007199254740991`: false, `-9007199254740991`: false, ` 5 `: false,
		`1.5`: true, `1e-1`: true, `9007199254740992`: true, `-9007199254740993`: true, `1e300`: true, `1e400`: true,
		`true`: true, `false`: true, `{}`: true, `[]`: true,
	} {
		if got := badRequestID(json.RawMessage(id)); got != bad {
			t.Errorf("badRequestID(%s) = %v, want %v", id, got, bad)
		}
	}
}

// TestRequestsWithBadID: the id checked is the one the go-sdk reads. Its
// JSON package matches keys exactly, so in {"id":1.5,"ID":1} the id is 1.5
// (a case-insensitive decode took 1 and let the go-sdk answer 1), and any
// "method" key makes a request, "" and null included.
func TestRequestsWithBadID(t *testing.T) {
	for body, bad := range map[string]bool{
		`{"jsonrpc":"2.0","id":1.5,"method":"tools/list"}`:          true,
		`{"jsonrpc":"2.0","id":1.5,"ID":1,"method":"tools/list"}`:   true,
		`{"jsonrpc":"2.0","id":1.5,"Id":1,"method":"tools/list"}`:   true,
		`{"jsonrpc":"2.0","id":1.5,"method":""}`:                    true,
		`{"jsonrpc":"2.0","id":1.5,"method":null}`:                  true,
		`[{"jsonrpc":"2.0","id":1.5,"ID":1,"method":"tools/list"}]`: true,
		`{"jsonrpc":"2.0","id":1,"ID":1.5,"method":"tools/list"}`:   false,
		`{"jsonrpc":"2.0","id":1.5,"Method":"tools/list"}`:          false, // no method: a response
		`{"jsonrpc":"2.0","id":1.5,"result":{}}`:                    false,
		`{"jsonrpc":"2.0","id":7,"method":"tools/list"}`:            false,
		// null: a request to answer with id null, which MCP forbids; the
		// go-sdk took it for a notification. Without the key, one.
		`{"jsonrpc":"2.0","id":null,"method":"notifications/initialized"}`:  true,
		`[{"jsonrpc":"2.0","id":null,"method":"tools/list"}]`:               true,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`:            false,
		`{"jsonrpc":"2.0","ID":null,"method":"notifications/initialized"}`:  false,
		`{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"x"}}`: false,
	} {
		if got := requestsWithBadID([]byte(body)); got != bad {
			t.Errorf("requestsWithBadID(%s) = %v, want %v", body, got, bad)
		}
	}
}

// BenchmarkMCPPeekAndCheck measures what a POST pays before the go-sdk
// reads it: the body read into memory (peekBody) and its id checked
// (refuseBadID), for a small request and one carrying a 64 KiB script,
// over the cost of making the request alone.
func BenchmarkMCPPeekAndCheck(b *testing.B) {
	for _, size := range []int{200, 64 << 10} {
		body := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{` + modernMeta +
			`,"name":"meta:execute","arguments":{"script":"` + strings.Repeat("a", size) + `"}}}`
		for _, check := range []bool{false, true} {
			name := fmt.Sprintf("script_%d/request_only", size)
			if check {
				name = fmt.Sprintf("script_%d/peek_and_check", size)
			}
			b.Run(name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					r := httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(body))
					r.Header.Set("Content-Type", "application/json")
					if check && refuseBadID(nil, r) {
						b.Fatal("refused")
					}
				}
			})
		}
	}
}

// FuzzMCPPeek: every POST to /mcp is read by the checks that run before the
// go-sdk (bad ids, the handshake's params, the revision in _meta); whatever
// the body holds, they answer or pass it on without a panic, an answer is a
// JSON-RPC error object, and a body passed on reaches the go-sdk as sent.
func FuzzMCPPeek(f *testing.F) {
	for _, b := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{"roots":{"listChanged":"yes"}},"clientInfo":{"name":"c","version":"1"}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"capabilities":{"elicitation":[1]},"_meta":{"a":{"b":1}}}}`,
		`[{"jsonrpc":"2.0","id":1.5,"method":"ping"},{"id":9007199254740993,"method":"x"}]`,
		`{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"},"name":"meta:search"}}`,
		`{"jsonrpc":"2.0","id":7,"result":{}}`,
		`{"id":1e400}`,
		`{}`,
		``,
	} {
		f.Add(b, "")
		f.Add(b, "s1")
	}
	f.Fuzz(func(t *testing.T, body, sessionID string) {
		for _, stateless := range []bool{false, true} {
			h := &MCPHandler{Stateless: stateless}
			r := httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(body))
			r.Header.Set("Content-Type", "application/json")
			if sessionID != "" && !strings.ContainsAny(sessionID, "\r\n\x00") {
				r.Header.Set("Mcp-Session-Id", sessionID)
			}
			w := httptest.NewRecorder()
			answered := refuseBadID(w, r)
			if !answered {
				h.isModern(r)
				answered = !h.legacyPrecheck(w, r)
			}
			if answered {
				var e struct {
					Error *struct {
						Code    int64  `json:"code"`
						Message string `json:"message"`
					} `json:"error"`
				}
				if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Error == nil || e.Error.Code == 0 || e.Error.Message == "" {
					t.Fatalf("answer %d %q (%v)", w.Code, w.Body, err)
				}
				continue
			}
			got, err := io.ReadAll(r.Body)
			if err != nil || string(got) != body {
				t.Fatalf("the go-sdk would read %q (%v), not %q", got, err, body)
			}
		}
	})
}

// TestNestsDeeperIsTheGoSDKsRule: nestsDeeper, which skips strings and
// counts brackets first, answers as the go-sdk's own depth check (brackets
// counted outside strings, one character at a time), so a body the checks
// before the go-sdk decode is one the go-sdk decodes too.
func TestNestsDeeperIsTheGoSDKsRule(t *testing.T) {
	sdkRule := func(data []byte, limit int) bool {
		depth, inString, escaped := 0, false, false
		for _, b := range data {
			switch {
			case inString && escaped:
				escaped = false
			case inString && b == '\\':
				escaped = true
			case inString && b == '"':
				inString = false
			case inString:
			case b == '"':
				inString = true
			case b == '{' || b == '[':
				if depth++; depth > limit {
					return true
				}
			case (b == '}' || b == ']') && depth > 0:
				depth--
			}
		}
		return false
	}
	alphabet := []byte(`[]{}"\a `)
	r := rand.New(rand.NewPCG(1, 2))
	for range 50000 {
		b := make([]byte, r.IntN(40))
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		for _, limit := range []int{1, 2, 5} { // a bound of 0 is none (jsonbound)
			if got := nestsDeeper(b, limit); got != sdkRule(b, limit) {
				t.Fatalf("nestsDeeper(%q, %d) = %v, the go-sdk's rule says %v", b, limit, got, !got)
			}
		}
	}
}

// TestMCPBatchedInitialize: revision 2025-03-26, the one with batches,
// says initialize "MUST NOT be part of a JSON-RPC batch". The go-sdk
// opened a session for one outside the session limits (the gateway counts
// a session at a lone initialize), so batches of one initialize opened any
// number of them, and answered one in a session with code 0, which
// JSON-RPC does not define. The batch is refused whole, as other invalid
// batches are (400, -32600, no session), over HTTP and stdio.
func TestMCPBatchedInitialize(t *testing.T) {
	port := freePort(t)
	startCaddy(t, mcpCaddyConfig(port, map[string]any{}))
	url := fmt.Sprintf("http://127.0.0.1:%d/mcp", port)
	initialize := func(id int) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`, id)
	}
	status, sid, body := rawMCP(t, url, nil, initialize(1))
	if status != http.StatusOK || sid == "" {
		t.Fatalf("initialize: %d %q %s", status, sid, body)
	}
	inSession := map[string]string{"Mcp-Session-Id": sid, "Mcp-Protocol-Version": "2025-03-26"}
	rawMCP(t, url, inSession, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	for _, tc := range []struct {
		name   string
		header map[string]string
		body   string
	}{
		{"alone, no session", nil, "[" + initialize(2) + "]"},
		{"with a ping, no session", nil, `[{"jsonrpc":"2.0","id":"p","method":"ping"},` + initialize(3) + "]"},
		{"in a session", inSession, "[" + initialize(4) + "]"},
	} {
		for range 3 { // none opens a session, however many
			status, newSID, body := rawMCP(t, url, tc.header, tc.body)
			var msg struct {
				ID    json.RawMessage `json:"id"`
				Error *struct {
					Code int `json:"code"`
				} `json:"error"`
			}
			if status != http.StatusBadRequest || newSID != "" || json.Unmarshal([]byte(body), &msg) != nil ||
				msg.Error == nil || msg.Error.Code != -32600 || string(msg.ID) != "null" || !strings.Contains(body, "batch") {
				t.Fatalf("%s: %d session %q %s, want 400 -32600 with id null and no session", tc.name, status, newSID, body)
			}
		}
	}
	// The client's one session was neither replaced nor closed.
	if status, _, body := rawMCP(t, url, inSession, `{"jsonrpc":"2.0","id":9,"method":"ping"}`); status != http.StatusOK || !strings.Contains(body, `"result"`) {
		t.Fatalf("ping in the session: %d %s", status, body)
	}
}

// TestMCPAccept: the transport says a client MUST list application/json
// and text/event-stream in Accept on a POST (text/event-stream on a GET).
// One that lists only one of them, in either revision, gets 406 Not
// Acceptable with JSON-RPC -32600 (the go-sdk answered 400), one without
// Accept 400 (RFC 9110: no Accept accepts anything); wildcards count, and
// a weight of 0 refuses a type (RFC 9110), as not listing it does.
func TestMCPAccept(t *testing.T) {
	port := freePort(t)
	startCaddy(t, mcpCaddyConfig(port, map[string]any{}))
	url := fmt.Sprintf("http://127.0.0.1:%d/mcp", port)
	sid := mcpOpen(t, url, "127.0.0.1")
	legacy := map[string]string{"Mcp-Session-Id": sid, "Mcp-Protocol-Version": "2025-11-25"}
	modern := map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list"}
	const legacyPing = `{"jsonrpc":"2.0","id":2,"method":"ping"}`
	modernPing := `{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{` + modernMeta + `}}`
	for _, tc := range []struct {
		name, method, accept string
		header               map[string]string
		body                 string
		status               int
	}{
		{"legacy, JSON only", "POST", "application/json", legacy, legacyPing, 406},
		{"legacy, SSE only", "POST", "text/event-stream", legacy, legacyPing, 406},
		{"2026-07-28, JSON only", "POST", "application/json", modern, modernPing, 406},
		{"2026-07-28, SSE only", "POST", "text/event-stream", modern, modernPing, 406},
		{"another type", "POST", "text/html", modern, modernPing, 406},
		{"no Accept", "POST", "", modern, modernPing, 400},
		{"GET stream, JSON only", "GET", "application/json", legacy, ``, 406},
		// RFC 9110: q=0 is "not acceptable", the same as not listed. The
		// go-sdk, which reads no weights, answered these with SSE.
		{"legacy, SSE refused", "POST", "application/json, text/event-stream;q=0", legacy, legacyPing, 406},
		{"2026-07-28, SSE refused", "POST", "application/json, text/event-stream; q=0.0", modern, modernPing, 406},
		{"2026-07-28, JSON refused", "POST", "application/json;q=0, text/event-stream", modern, modernPing, 406},
		{"SSE refused under a wildcard", "POST", "*/*, text/event-stream;q=0", modern, modernPing, 406},
		{"GET stream, SSE refused", "GET", "text/*, text/event-stream;q=0", legacy, ``, 406},
		{"weights above 0", "POST", "application/json;q=0.1, text/event-stream;q=0.9", modern, modernPing, 200},
		{"the specific range decides", "POST", "application/json, text/*;q=0, text/event-stream", modern, modernPing, 200},
		{"both", "POST", "application/json, text/event-stream", modern, modernPing, 200},
		{"wildcards", "POST", "application/*, text/*", modern, modernPing, 200},
		{"anything", "POST", "*/*", legacy, legacyPing, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, url, strings.NewReader(tc.body))
			req.Header.Set("Content-Type", "application/json")
			for k, v := range tc.header {
				req.Header.Set(k, v)
			}
			if tc.accept != "" {
				req.Header.Set("Accept", tc.accept)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			// The body is not read before the status is checked: a GET
			// stream served by mistake would never end.
			if resp.StatusCode != tc.status {
				t.Fatalf("%d %s, want %d", resp.StatusCode, resp.Header.Get("Content-Type"), tc.status)
			}
			if tc.status == 200 {
				return
			}
			b, _ := io.ReadAll(resp.Body)
			var msg rpcErrorReply
			if json.Unmarshal(b, &msg) != nil || msg.Error.Code != -32600 || !strings.HasPrefix(msg.Error.Message, "not acceptable: ") {
				t.Fatalf("%d %s, want JSON-RPC -32600 \"not acceptable: ...\"", resp.StatusCode, b)
			}
		})
	}
}

// TestMCPInvalidParamsMessage: params of the wrong type get -32602 with a
// message saying what was expected, in both revisions and with both
// answer types: the go-sdk's named its Go types ("into Go value of type
// mcp.CallToolParamsRaw").
func TestMCPInvalidParamsMessage(t *testing.T) {
	for _, jsonResponse := range []bool{false, true} {
		t.Run(fmt.Sprint("json_response ", jsonResponse), func(t *testing.T) {
			port := freePort(t)
			cfg := mcpCaddyConfig(port, map[string]any{})
			if jsonResponse {
				cfg = []byte(strings.Replace(string(cfg), `"handler":"codemode_mcp"`, `"handler":"codemode_mcp","json_response":true`, 1))
			}
			startCaddy(t, cfg)
			url := fmt.Sprintf("http://127.0.0.1:%d/mcp", port)
			sid := mcpOpen(t, url, "127.0.0.1")
			legacy := map[string]string{"Mcp-Session-Id": sid, "Mcp-Protocol-Version": "2025-11-25"}
			modern := map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list"}
			modernCall := func(name string) map[string]string {
				return map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": name}
			}
			for _, tc := range []struct {
				name, body string
				header     map[string]string
				want       string
			}{
				{"params a number", `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":5}`, legacy, "invalid params: tools/call: params: got number, want object"},
				{"params an array", `{"jsonrpc":"2.0","id":7,"method":"tools/list","params":[1]}`, legacy, "invalid params: tools/list: params: got array, want object"},
				{"name a number", `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":5}}`, legacy, "invalid params: tools/call: name: got number, want string"},
				{"2026-07-28, cursor a number", `{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{"cursor":5,` + modernMeta + `}}`, modern, "invalid params: tools/list: cursor: got number, want string"},
				// A tools/call of 2026-07-28 whose params do not decode: the
				// go-sdk's header check read them first and answered -32020
				// "failed to extract name from parameters".
				{"2026-07-28, call name a number", `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":5,` + modernMeta + `}}`, modernCall("5"), "invalid params: tools/call: name: got number, want string"},
				{"2026-07-28, call params a number", `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":5}`, modernCall("meta:search"), "invalid params: tools/call: params: got number, want object"},
				{"2026-07-28, requestState a number", `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"meta:search","arguments":{"query":"x"},"requestState":5,` + modernMeta + `}}`, modernCall("meta:search"), "invalid params: tools/call: requestState: got number, want string"},
				{"2026-07-28, inputResponses a number", `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"meta:search","arguments":{"query":"x"},"inputResponses":5,` + modernMeta + `}}`, modernCall("meta:search"), "invalid params: tools/call: inputResponses: got number, want object"},
				{"2026-07-28, an input response a string", `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"meta:search","arguments":{"query":"x"},"inputResponses":{"q1":"yes"},` + modernMeta + `}}`, modernCall("meta:search"), `invalid params: tools/call: inputResponses["q1"]: want the result of its input request: an object with "action" (elicitation), "role" (sampling) or "roots", of that result's shape`},
				{"2026-07-28, an input response of no known shape", `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"meta:search","arguments":{"query":"x"},"inputResponses":{"q1":{"method":"x"}},` + modernMeta + `}}`, modernCall("meta:search"), `invalid params: tools/call: inputResponses["q1"]: want the result of its input request: an object with "action" (elicitation), "role" (sampling) or "roots", of that result's shape`},
				{"2026-07-28, an elicitation result's content a string", `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"meta:search","arguments":{"query":"x"},"inputResponses":{"q1":{"action":"accept","content":"x"}},` + modernMeta + `}}`, modernCall("meta:search"), `invalid params: tools/call: inputResponses["q1"]: want the result of its input request: an object with "action" (elicitation), "role" (sampling) or "roots", of that result's shape`},
			} {
				status, _, body := rawMCP(t, url, tc.header, tc.body)
				var msg rpcErrorReply
				if json.Unmarshal([]byte(body), &msg) != nil || string(msg.ID) != "7" || msg.Error.Code != -32602 || msg.Error.Message != tc.want {
					t.Errorf("%s: %d %s, want -32602 %q", tc.name, status, body, tc.want)
				}
			}
		})
	}
}

// TestPlainErrorMessage: the go-sdk's message names Go types; the one in
// its place says what was expected, and a message of another shape keeps
// no Go type name either.
func TestPlainErrorMessage(t *testing.T) {
	for msg, want := range map[string]string{
		`handling 'tools/call': invalid params: unmarshaling "5" into a *mcp.CallToolParamsRaw: json: cannot unmarshal "5" into Go value of type mcp.CallToolParamsRaw`:                                "invalid params: tools/call: params: got number, want object",
		`handling 'tools/call': invalid params: unmarshaling "{\"name\":5}" into a *mcp.CallToolParamsRaw: json: cannot unmarshal "5}" into Go struct field mcp.CallToolParamsRaw.name of type string`: "invalid params: tools/call: name: got number, want string",
		`handling 'x/y': invalid params: unmarshaling "{}" into a *mcp.P: json: cannot unmarshal "\"a\"}" into Go struct field mcp.P._meta.n of type int64`:                                            "invalid params: x/y: _meta.n: got string, want number",
		`handling 'x/y': invalid params: unmarshaling "{}" into a *mcp.P: json: cannot unmarshal "{}" into Go struct field mcp.P.a of type []mcp.Content`:                                              "invalid params: x/y: a: got object, want array",
		`handling 'x/y': invalid params: something else into Go value of type mcp.P`:                                                                                                                   "invalid params: x/y: a field of params has the wrong type",
	} {
		got, ok := plainErrorMessage(-32602, msg)
		if !ok || got != want {
			t.Errorf("%s:\n got %q %v\nwant %q", msg, got, ok, want)
		}
	}
	if got, ok := plainErrorMessage(-32601, `JSON RPC not handled: "a \"b\"" unsupported`); !ok || got != `method not found: "a \"b\""` {
		t.Errorf("unknown method: %q %v", got, ok)
	}
	if _, ok := plainErrorMessage(-32601, `method not found: "x"`); ok {
		t.Error("the go-sdk's other message rewritten")
	}
	if _, ok := plainErrorMessage(-32602, "invalid params: unknown logging level"); ok {
		t.Error("a message without Go types rewritten")
	}
}

// rpcErrorReply is a JSON-RPC error response as the tests read it.
type rpcErrorReply struct {
	ID    json.RawMessage `json:"id"`
	Error struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}
