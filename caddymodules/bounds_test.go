package caddymodules

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/codemode-gateway/caddy-codemode/broker"
	"github.com/codemode-gateway/caddy-codemode/internal/jsonbound"
	"github.com/codemode-gateway/caddy-codemode/metatools"
)

// keysObject is a JSON object of n members "k0":0, "k1":0, ...
func keysObject(n int) string {
	var b strings.Builder
	b.WriteByte('{')
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"k%d":0`, i)
	}
	b.WriteByte('}')
	return b.String()
}

// stringsArray is a JSON array of n copies of the string s.
func stringsArray(n int, s string) string {
	q, _ := json.Marshal(s)
	return "[" + strings.Repeat(string(q)+",", n-1) + string(q) + "]"
}

// TestMCPLargeInputsRefused: over a socket, in both eras, a tools/call whose
// JSON text passes the bound on object members or array items (each body
// within the 4 MiB limit) is refused before it is decoded: 400, -32602
// naming the bound, its id kept. meta:invoke with 200,000 keys in its
// input (2.7 s of the gateway's CPU in the twenty-second pass),
// meta:execute with 300,000 allowedTools, meta:search with 300,000 appIds
// and meta:describe with 300,000 names. A call just under both bounds is
// served, and the gateway answers an ordinary call after them all.
func TestMCPLargeInputsRefused(t *testing.T) {
	port := freePort(t)
	startCaddy(t, mcpAppConfig(port, map[string]any{"meta": map[string]any{}, "broker": map[string]any{"demo_tools": true}}))
	url := fmt.Sprintf("http://127.0.0.1:%d/mcp", port)
	sid := mcpOpen(t, url, "127.0.0.1")
	legacy := map[string]string{"Mcp-Session-Id": sid, "Mcp-Protocol-Version": "2025-11-25"}
	call := func(modern bool, tool, args string) (int, string) {
		header, meta := legacy, ""
		if modern {
			header = map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": tool}
			meta = "," + modernMeta
		}
		status, _, body := rawMCP(t, url, header, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"`+tool+`","arguments":`+args+meta+`}}`)
		return status, body
	}
	lim := jsonbound.Request
	names := stringsArray(300_000, "math:add")
	for _, modern := range []bool{false, true} {
		for _, tc := range []struct {
			name, tool, args, bound string
		}{
			{"200,000 keys in meta:invoke's input", "meta:invoke", `{"tool":"math:add","input":` + strings.Replace(keysObject(200_000), "{", `{"a":1,"b":2,`, 1) + `}`, "object members"},
			{"200,000 keys in nested objects", "meta:invoke", `{"tool":"math:add","input":{"a":1,"b":2,"x":[` + strings.Repeat(`{"a":0,"b":0,"c":0,"d":0,"e":0,"f":0,"g":0,"h":0,"i":0,"j":0},`, 20_000) + `{}]}}`, "object members"},
			{"300,000 allowedTools", "meta:execute", `{"script":"return 1","allowedTools":` + names + `}`, "array items"},
			{"300,000 appIds", "meta:search", `{"query":"add","appIds":` + names + `}`, "array items"},
			{"300,000 toolNames", "meta:describe", `{"toolNames":` + names + `}`, "array items"},
		} {
			status, body := call(modern, tc.tool, tc.args)
			var msg struct {
				ID    json.RawMessage `json:"id"`
				Error struct {
					Code    int    `json:"code"`
					Message string `json:"message"`
					Data    struct {
						Code, Bound string
						Limit       int
					} `json:"data"`
				} `json:"error"`
			}
			_ = json.Unmarshal([]byte(body), &msg)
			if status != http.StatusBadRequest || string(msg.ID) != "7" || msg.Error.Code != -32602 ||
				!strings.Contains(msg.Error.Message, tc.bound) || msg.Error.Data.Code != "VALIDATION_ERROR" || msg.Error.Data.Bound != tc.bound {
				t.Errorf("modern %v, %s: %d %s, want 400 -32602 naming %s", modern, tc.name, status, clipBody(body), tc.bound)
			}
		}
		// The lists of names with a bound of their own: one name more is a
		// VALIDATION_ERROR naming the field.
		for _, tc := range []struct{ tool, args, want string }{
			{"meta:execute", `{"script":"return 1","allowedTools":` + stringsArray(broker.MaxAllowedTools+1, "math:add") + `}`, "allowedTools"},
			{"meta:search", `{"query":"add","appIds":` + stringsArray(metatools.MaxFilterNames+1, "demo") + `}`, "appIds"},
			{"meta:search", `{"query":"add","excludeToolNames":` + stringsArray(metatools.MaxFilterNames+1, "x") + `}`, "excludeToolNames"},
			{"meta:search", `{"query":"add","filter":{"tags":` + stringsArray(metatools.MaxFilterNames+1, "x") + `}}`, "filter.tags"},
		} {
			status, body := call(modern, tc.tool, tc.args)
			if status != http.StatusOK || !strings.Contains(body, `"code":"VALIDATION_ERROR"`) || !strings.Contains(body, `"field":"`+tc.want+`"`) && !strings.Contains(body, tc.want+": ") {
				t.Errorf("modern %v, %s with %d names in %s: %d %s", modern, tc.tool, metatools.MaxFilterNames+1, tc.want, status, clipBody(body))
			}
		}
		if status, body := call(modern, "meta:execute", `{"script":"return 1","allowedTools":`+stringsArray(broker.MaxAllowedTools, "math:add")+`}`); status != http.StatusOK || !strings.Contains(body, `"status":"ok"`) {
			t.Errorf("modern %v, meta:execute with %d allowedTools: %d %s", modern, broker.MaxAllowedTools, status, clipBody(body))
		}
		// Within both bounds (the envelope's members and items counted
		// too): answered, math:add takes properties it does not declare.
		within := `{"tool":"math:add","input":{"a":1,"b":2,"many":` + keysObject(lim.Members-100) + `,"list":[` + strings.Repeat("0,", lim.Items-100) + `0]}}`
		if status, body := call(modern, "meta:invoke", within); status != http.StatusOK || !strings.Contains(body, `\"sum\":3`) {
			t.Errorf("modern %v, within the bounds: %d %s", modern, status, clipBody(body))
		}
		if status, body := call(modern, "meta:invoke", `{"tool":"math:add","input":{"a":1,"b":2}}`); status != http.StatusOK || !strings.Contains(body, `\"sum\":3`) {
			t.Errorf("modern %v, after: %d %s", modern, status, clipBody(body))
		}
	}
}

func clipBody(s string) string {
	if len(s) > 300 {
		return s[:300] + "…"
	}
	return s
}

// TestMCPStdioLargeInputsRefused: over stdio, a line whose JSON passes the
// bound on array items or object members is answered -32602 with its id,
// as over HTTP, and the session goes on.
func TestMCPStdioLargeInputsRefused(t *testing.T) {
	inW, outR, _ := stdioSession(t, "{\n\tadmin off\n\tcodemode {\n\t\tmeta\n\t}\n}\n", 0)
	sendLine, _ := stdioLines(t, inW, outR)
	send := func(line string) batchAnswer { t.Helper(); return stdioAnswer(t, sendLine(line)) }
	for bound, args := range map[string]string{
		"array items":    `{"query":"x","appIds":` + stringsArray(300_000, "a") + `}`,
		"object members": `{"tool":"math:add","input":` + keysObject(200_000) + `}`,
	} {
		r := send(`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"meta:search","arguments":` + args + `}}`)
		if r.Error == nil || r.Error.Code != -32602 || string(r.ID) != "9" || !strings.Contains(r.Error.Message, bound) {
			t.Errorf("%s: reply id %s error %+v", bound, r.ID, r.Error)
		}
	}
	if r := send(`{"jsonrpc":"2.0","id":10,"method":"ping"}`); r.Error != nil || string(r.ID) != "10" {
		t.Errorf("ping after: id %s error %+v", r.ID, r.Error)
	}
}
