package caddymodules

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// batchAnswer is one JSON-RPC response (of a batch's answer, or alone).
type batchAnswer struct {
	ID     json.RawMessage `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// batchAnswers decodes the responses of a batch's answer: one JSON array,
// or SSE events of one array or of one response each.
func batchAnswers(t *testing.T, contentType string, body []byte) map[string]batchAnswer {
	t.Helper()
	var datas []string
	if strings.HasPrefix(contentType, "text/event-stream") {
		for _, line := range strings.Split(string(body), "\n") {
			if d, ok := strings.CutPrefix(line, "data: "); ok {
				datas = append(datas, d)
			}
		}
	} else {
		datas = []string{string(body)}
	}
	got := map[string]batchAnswer{}
	for _, d := range datas {
		var as []batchAnswer
		if strings.HasPrefix(strings.TrimSpace(d), "[") {
			if err := json.Unmarshal([]byte(d), &as); err != nil {
				t.Fatalf("answer %s: %v", d, err)
			}
		} else {
			var a batchAnswer
			if err := json.Unmarshal([]byte(d), &a); err != nil {
				t.Fatalf("answer %s: %v", d, err)
			}
			as = []batchAnswer{a}
		}
		for _, a := range as {
			if _, dup := got[string(a.ID)]; dup {
				t.Fatalf("id %s answered twice: %s", a.ID, body)
			}
			got[string(a.ID)] = a
		}
	}
	return got
}

// wantBatchAnswers checks got: the ids of ok answered with a result, those
// of unknown with -32601 naming their method, nothing else.
func wantBatchAnswers(t *testing.T, batch string, got map[string]batchAnswer, ok []string, unknown map[string]string) {
	t.Helper()
	if len(got) != len(ok)+len(unknown) {
		t.Errorf("%s: %d answers %v, want %d", batch, len(got), got, len(ok)+len(unknown))
	}
	for _, id := range ok {
		if a, found := got[id]; !found || a.Error != nil || len(a.Result) == 0 {
			t.Errorf("%s: id %s answered %+v, want a result", batch, id, a)
		}
	}
	for id, method := range unknown {
		a, found := got[id]
		if !found || a.Error == nil || a.Error.Code != rpcMethodNotFound || a.Error.Message != "method not found: "+fmt.Sprintf("%q", method) {
			t.Errorf("%s: id %s answered %+v, want -32601 method not found: %q", batch, id, a, method)
		}
	}
}

// unknownRequestBatches are 2025-03-26 batches holding requests of methods
// the gateway does not know, with the ids answered by a result and those
// answered -32601 (by method).
var unknownRequestBatches = []struct {
	batch   string
	ok      []string
	unknown map[string]string
}{
	{`[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"no/such"},{"jsonrpc":"2.0","id":"three","method":"ping"}]`,
		[]string{`1`, `"three"`}, map[string]string{`2`: "no/such"}},
	{`[{"jsonrpc":"2.0","id":"u","method":"tasks/get","params":{}},{"jsonrpc":"2.0","method":"notifications/no_such"},{"jsonrpc":"2.0","id":5,"method":"tools/list"}]`,
		[]string{`5`}, map[string]string{`"u"`: "tasks/get"}},
	{`[{"jsonrpc":"2.0","id":6,"method":"a/b"},{"jsonrpc":"2.0","id":7,"method":"c/d"}]`,
		nil, map[string]string{`6`: "a/b", `7`: "c/d"}},
	// The go-sdk gets the notification alone and answers 202.
	{`[{"jsonrpc":"2.0","id":8,"method":"x/y"},{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}]`,
		nil, map[string]string{`8`: "x/y"}},
}

// TestMCPBatchUnknownRequest: revision 2025-03-26's batches over Streamable
// HTTP. JSON-RPC 2.0 answers each request of a batch: one of a method the
// server does not know with -32601 and its id, the others with their
// results. The go-sdk refused the whole batch (400, -32601 with id null),
// none of its requests answered.
// Both answer types: SSE events, and one JSON array (json_response).
func TestMCPBatchUnknownRequest(t *testing.T) {
	for _, jsonResponse := range []bool{false, true} {
		t.Run(fmt.Sprintf("json_response=%v", jsonResponse), func(t *testing.T) {
			port := freePort(t)
			cfg := mcpCaddyConfig(port, map[string]any{})
			if jsonResponse {
				cfg = bytes.Replace(cfg, []byte(`"handler":"codemode_mcp"`), []byte(`"handler":"codemode_mcp","json_response":true`), 1)
			}
			startCaddy(t, cfg)
			batchUnknownRequest(t, fmt.Sprintf("http://127.0.0.1:%d/mcp", port), jsonResponse)
		})
	}
}

func batchUnknownRequest(t *testing.T, url string, jsonResponse bool) {
	status, sid, body := rawMCP(t, url, nil, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	if status != http.StatusOK || sid == "" {
		t.Fatalf("initialize: %d %q %s", status, sid, body)
	}
	h := map[string]string{"Mcp-Session-Id": sid, "Mcp-Protocol-Version": "2025-03-26"}
	rawMCP(t, url, h, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	for _, tc := range unknownRequestBatches {
		resp, b := mcpRequest(t, http.MethodPost, url, h, strings.NewReader(tc.batch))
		if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || strings.HasPrefix(ct, "application/json") != (jsonResponse || tc.ok == nil) {
			t.Errorf("%s: %d %s %s, want 200", tc.batch, resp.StatusCode, ct, b)
			continue
		}
		wantBatchAnswers(t, tc.batch, batchAnswers(t, resp.Header.Get("Content-Type"), b), tc.ok, tc.unknown)
	}
}

// TestMCPStdioBatchUnknownRequest is TestMCPBatchUnknownRequest over stdio:
// one line, the batch's answers in one array.
func TestMCPStdioBatchUnknownRequest(t *testing.T) {
	inW, outR, done := stdioSession(t, "{\n\tadmin off\n\tcodemode\n}\n", 0)
	send, replies := stdioLines(t, inW, outR)
	send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	if _, err := io.WriteString(inW, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range unknownRequestBatches {
		line := send(tc.batch)
		if !strings.HasPrefix(string(line), "[") {
			t.Fatalf("%s: %s, want one array", tc.batch, line)
		}
		wantBatchAnswers(t, tc.batch, batchAnswers(t, "application/json", line), tc.ok, tc.unknown)
	}
	if _, err := io.WriteString(inW, `{"jsonrpc":"2.0","id":99,"method":"ping"}`+"\n"); err != nil {
		t.Fatal(err)
	}
	if !replies.Scan() || !strings.Contains(replies.Text(), `"id":99`) {
		t.Fatalf("ping after the batches: %s", replies.Text())
	}
	inW.Close()
	go io.Copy(io.Discard, outR)
	stdioEnded(t, done)
}
