package caddymodules

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// waitFor fails the test when ch gets nothing within a while (a hang,
// not a measure of speed).
func waitFor[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(20 * time.Second):
		t.Fatalf("no %s", what)
	}
	var zero T
	return zero
}

// waitCall is a tools/call of meta:execute with id, whose plan calls the
// upstream's wait tool.
func waitCall(id string) string {
	return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"meta:execute","arguments":{"script":"return await callTool(\"calc:wait\", {})"}}}`
}

func cancelNote(id string) string {
	return `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":` + id + `,"reason":"test"}}`
}

// TestMCPCancelledRequestGetsNoResponse: over Streamable HTTP, a request
// of the handshake revisions that the client cancels with
// notifications/cancelled is stopped (the plan's tool call sees its context
// end) and answered by nothing: its POST's stream ends without a JSON-RPC
// message, an SSE stream without events in the json_response mode too (the
// go-sdk sent an error response, which the TypeScript SDK reports as one
// for an unknown id). In a 2025-03-26 batch the other request is answered.
// A cancellation of a request not under way changes nothing, and the
// session goes on.
func TestMCPCancelledRequestGetsNoResponse(t *testing.T) {
	up, started, stopped := waitUpstream(t)
	port := freePort(t)
	meta := map[string]any{"upstreams": []any{map[string]any{"name": "calc", "url": up}}}
	route := func(path string, handler map[string]any) any {
		return map[string]any{"match": []any{map[string]any{"path": []string{path}}}, "handle": []any{handler}}
	}
	cfg, _ := json.Marshal(map[string]any{
		"admin":   map[string]any{"disabled": true, "config": map[string]any{"persist": false}},
		"logging": map[string]any{"logs": map[string]any{"default": map[string]any{"level": "ERROR"}}},
		"apps": map[string]any{
			"codemode": map[string]any{"meta": meta},
			"http": map[string]any{"servers": map[string]any{"test": map[string]any{
				"listen":          []string{fmt.Sprintf("127.0.0.1:%d", port)},
				"automatic_https": map[string]any{"disable": true},
				"routes": []any{
					route("/mcp", map[string]any{"handler": "codemode_mcp"}),
					route("/json", map[string]any{"handler": "codemode_mcp", "json_response": true}),
				},
			}}},
		},
	})
	startCaddy(t, cfg)
	type answer struct {
		status      int
		contentType string
		body        string
	}
	for _, tc := range []struct {
		version, path string
		batch         bool
	}{
		{"2025-11-25", "/mcp", false}, {"2025-06-18", "/mcp", false}, {"2025-06-18", "/json", false},
		{"2025-03-26", "/mcp", true}, {"2025-03-26", "/json", true},
	} {
		t.Run(tc.version+tc.path, func(t *testing.T) {
			url := fmt.Sprintf("http://127.0.0.1:%d%s", port, tc.path)
			status, sid, body := rawMCP(t, url, nil, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"`+tc.version+
				`","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
			if status != 200 || sid == "" {
				t.Fatalf("initialize: %d %s", status, body)
			}
			h := map[string]string{"Mcp-Session-Id": sid, "Mcp-Protocol-Version": tc.version}
			rawMCP(t, url, h, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
			call := waitCall("5")
			if tc.batch {
				call = "[" + call + `,{"jsonrpc":"2.0","id":"other","method":"tools/list"}]`
			}
			answered := make(chan answer, 1)
			go func() {
				req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(call))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Accept", "application/json, text/event-stream")
				for k, v := range h {
					req.Header.Set(k, v)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					answered <- answer{body: err.Error()}
					return
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				answered <- answer{resp.StatusCode, resp.Header.Get("Content-Type"), string(b)}
			}()
			waitFor(t, started, "start of the plan's tool call")
			if status, _, body := rawMCP(t, url, h, cancelNote("5")); status != http.StatusAccepted {
				t.Fatalf("notifications/cancelled: %d %s", status, body)
			}
			waitFor(t, stopped, "stop of the plan's tool call after the cancellation")
			a := waitFor(t, answered, "end of the cancelled request's POST")
			if a.status != 200 || !strings.HasPrefix(a.contentType, "text/event-stream") && !(tc.batch && tc.path == "/json") {
				t.Fatalf("cancelled request's POST: %d %s %.400q", a.status, a.contentType, a.body)
			}
			if strings.Contains(a.body, `"id":5`) {
				t.Fatalf("the cancelled request was answered: %.400q", a.body)
			}
			switch {
			case !tc.batch && a.body != "":
				t.Fatalf("the cancelled request's stream carries %.400q", a.body)
			case tc.batch && tc.path == "/json":
				var batch []map[string]any
				if err := json.Unmarshal([]byte(a.body), &batch); err != nil || len(batch) != 1 || batch[0]["id"] != "other" {
					t.Fatalf("batch answer %s: %.400q", a.contentType, a.body)
				}
			case tc.batch && !strings.Contains(a.body, `"id":"other"`):
				t.Fatalf("the batch's other request was not answered: %.400q", a.body)
			}
			// A cancellation of no request under way (one answered, one
			// never sent) changes nothing. (MCP ids are never reused in a
			// session: the go-sdk cancels asynchronously, so a request sent
			// right after a cancellation of its id may be cancelled.)
			for _, id := range []string{"5", `"never"`} {
				if status, _, body := rawMCP(t, url, h, cancelNote(id)); status != http.StatusAccepted {
					t.Fatalf("notifications/cancelled of request %s: %d %s", id, status, body)
				}
			}
			status, _, body = rawMCP(t, url, h, `{"jsonrpc":"2.0","id":6,"method":"tools/list"}`)
			if status != 200 || !strings.Contains(body, `"id":6`) || !strings.Contains(body, "meta:execute") {
				t.Fatalf("tools/list after the cancellations: %d %s", status, body)
			}
		})
	}
}

// TestMCPStdioCancelledRequestGetsNoResponse: over stdio, a request the
// client cancels with notifications/cancelled (revision 2026-07-28 too,
// which cancels so over stdio) is stopped and never answered (the go-sdk
// wrote what its handler returned); in a 2025-03-26 batch the other
// request is answered, in an array of its own.
func TestMCPStdioCancelledRequestGetsNoResponse(t *testing.T) {
	up, started, stopped := waitUpstream(t)
	raw, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(fmt.Sprintf(`{
	admin off
	codemode {
		meta {
			upstream calc {
				url %s
			}
		}
	}
}
`, up)), nil)
	if err != nil {
		t.Fatal(err)
	}
	caddyMu.Lock()
	defer caddyMu.Unlock()
	for _, version := range []string{"2026-07-28", "2025-11-25", "2025-03-26"} {
		t.Run(version, func(t *testing.T) {
			inR, inW := io.Pipe()
			outR, outW := io.Pipe()
			done := make(chan error, 1)
			core, logs := observer.New(zap.DebugLevel)
			go func() {
				err := serveMCPStdio(context.Background(), raw, &checkedStdio{in: inR, out: outW, logger: zap.New(core)})
				// A server that ended (a config that failed to load, a
				// worker that did not start) ends the output and refuses
				// input, so that the test fails instead of waiting forever.
				inR.CloseWithError(fmt.Errorf("the server ended: %v", err))
				outW.Close()
				done <- err
			}()
			lines := make(chan string, 64)
			go func() {
				defer close(lines)
				sc := bufio.NewScanner(outR)
				sc.Buffer(nil, 8<<20)
				for sc.Scan() {
					lines <- sc.Text()
				}
			}()
			t.Cleanup(func() { inW.Close(); outW.Close() })
			var all []string
			next := func(what string) string {
				t.Helper()
				var line string
				var ok bool
				select {
				case line, ok = <-lines:
				case <-time.After(2 * time.Minute): // a backstop, not a bound under test
				}
				if !ok {
					t.Fatalf("no %s: output ended or none came", what)
				}
				all = append(all, line)
				return line
			}
			send := func(line string) {
				t.Helper()
				if _, err := io.WriteString(inW, line+"\n"); err != nil {
					t.Fatal(err)
				}
			}
			batch := version == "2025-03-26"
			switch {
			case version == "2026-07-28": // no handshake: the version in each request's _meta
				send(strings.Replace(waitCall("5"), `"params":{`, `"params":{`+modernMeta+`,`, 1))
			default:
				send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"` + version + `","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
				if line := next("initialize answer"); !strings.Contains(line, `"protocolVersion":"`+version+`"`) {
					t.Fatalf("initialize: %s", line)
				}
				send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
				if batch {
					send(`[` + waitCall("5") + `,{"jsonrpc":"2.0","id":"slow","method":"ping"}]`)
				} else {
					send(waitCall("5"))
				}
			}
			waitFor(t, started, "start of the plan's tool call")
			send(cancelNote("5"))
			waitFor(t, stopped, "stop of the plan's tool call after the cancellation")
			// The go-sdk has answered the request by now: the answer was
			// left out (or, without the fix, is on its way out).
			dropped := make(chan struct{})
			go func() {
				defer close(dropped)
				for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
					if logs.FilterMessageSnippet("its response is not sent").Len() > 0 {
						return
					}
				}
			}()
			<-dropped
			if logs.FilterMessageSnippet("its response is not sent").Len() == 0 {
				t.Error("no response of the cancelled request was left out")
			}
			if version == "2026-07-28" {
				send(`{"jsonrpc":"2.0","id":6,"method":"ping","params":{` + modernMeta + `}}`)
			} else {
				send(`{"jsonrpc":"2.0","id":6,"method":"ping"}`)
			}
			for line := next("ping answer"); !strings.Contains(line, `"id":6`); line = next("ping answer") {
			}
			inW.Close() // the session ends once every request is done
			waitFor(t, done, "end of the session")
			outW.Close()
			for line := range lines {
				all = append(all, line)
			}
			var answeredBatch bool
			for _, line := range all {
				if strings.Contains(line, `"id":5`) {
					t.Errorf("the cancelled request was answered: %.400s", line)
				}
				if strings.Contains(line, `"id":"slow"`) {
					answeredBatch = strings.HasPrefix(line, "[") && strings.Count(line, `"id"`) == 1
				}
			}
			if batch && !answeredBatch {
				t.Errorf("the batch's other request was not answered alone in an array: %.400q", all)
			}
		})
	}
}

// TestMCPCancellationBatchCostsLinear: a 2025-03-26 batch of n
// cancellations (any session may send one, up to the 4 MiB body) is read
// once: the tracking of a POST, under a lock every POST of every session
// takes, decoded the whole batch again for each cancellation, n² (a
// 312 KB batch held the lock 4.7 s). Counted in allocations, not time:
// 4 times the cancellations allocate about 4 times as much, not 16.
func TestMCPCancellationBatchCostsLinear(t *testing.T) {
	table := &callTable{byKey: map[callKey]*rpcCall{}}
	// A request under way, which every cancellation names.
	under := &mcpWriter{body: &peekedBody{buf: []byte(waitCall("1")), ok: true}}
	done := table.track("s", under, zap.NewNop())
	defer done()
	allocs := func(n int) float64 {
		batch := "[" + strings.TrimSuffix(strings.Repeat(cancelNote("1")+",", n), ",") + "]"
		return testing.AllocsPerRun(3, func() {
			w := &mcpWriter{body: &peekedBody{buf: []byte(batch), ok: true}}
			table.track("s", w, zap.NewNop())()
		})
	}
	small, large := allocs(100), allocs(400)
	if large > 6*small {
		t.Fatalf("a batch of 100 cancellations allocates %.0f times, one of 400 %.0f times: not linear", small, large)
	}
	id, _ := jsonrpc.MakeID(float64(1))
	if c := table.byKey[callKey{"s", id}]; c == nil || !c.cancelled() {
		t.Fatal("the cancellations did not mark the request under way")
	}
}

// BenchmarkMCPCancelledBatchAnswers: the answers of a 2025-03-26 batch of
// 20,000 requests (pings: a 4 MiB batch holds some 90,000) of which one is
// cancelled, written through the POST's writer as the go-sdk writes them
// (one SSE event each).
func BenchmarkMCPCancelledBatchAnswers(b *testing.B) {
	const n = 20000
	var batch strings.Builder
	batch.WriteString("[")
	events := make([][]byte, n)
	for i := range n {
		if i > 0 {
			batch.WriteString(",")
		}
		fmt.Fprintf(&batch, `{"jsonrpc":"2.0","id":%d,"method":"ping"}`, i)
		events[i] = fmt.Appendf(nil, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":%d,\"result\":{}}\n\n", i)
	}
	batch.WriteString("]")
	table := &callTable{byKey: map[callKey]*rpcCall{}}
	for b.Loop() {
		w := &mcpWriter{ResponseWriter: httptest.NewRecorder(), body: &peekedBody{buf: []byte(batch.String()), ok: true}}
		w.Header().Set("Content-Type", "text/event-stream")
		done := table.track("s", w, zap.NewNop())
		table.track("s", &mcpWriter{body: &peekedBody{buf: []byte(cancelNote(fmt.Sprint(n - 1))), ok: true}}, nil)()
		for _, e := range events {
			_, _ = w.Write(e)
		}
		done()
	}
}

// TestMCPRefusedCancellationWithdrawsOnlyItsOwn: two cancellations of one
// request, one in a POST the go-sdk refuses (its mark is withdrawn) and
// one in a POST it accepts (it stops the request): the request stays
// cancelled whatever their order. The accepted one, finding the request
// marked already, left no mark of its own, and the refused one's
// withdrawal cleared the request's: its EXECUTION_ABORTED result went out.
func TestMCPRefusedCancellationWithdrawsOnlyItsOwn(t *testing.T) {
	table := &callTable{byKey: map[callKey]*rpcCall{}}
	under := &mcpWriter{body: &peekedBody{buf: []byte(waitCall("1")), ok: true}}
	defer table.track("s", under, zap.NewNop())()
	note := func() (*mcpWriter, func()) {
		w := &mcpWriter{body: &peekedBody{buf: []byte(cancelNote("1")), ok: true}}
		return w, table.track("s", w, zap.NewNop())
	}
	refused, refusedDone := note()
	accepted, acceptedDone := note()
	refused.status, accepted.status = http.StatusBadRequest, http.StatusAccepted
	refusedDone()
	acceptedDone()
	id, _ := jsonrpc.MakeID(float64(1))
	if under.cancelledCall(id) == nil || under.cancelledCalls.Load() != 1 {
		t.Fatal("a refused cancellation withdrew the mark of one the go-sdk acted on")
	}
	// Alone, a refused cancellation leaves the request as it was.
	other := &mcpWriter{body: &peekedBody{buf: []byte(waitCall("2")), ok: true}}
	defer table.track("s", other, zap.NewNop())()
	w := &mcpWriter{body: &peekedBody{buf: []byte(cancelNote("2")), ok: true}}
	done := table.track("s", w, zap.NewNop())
	w.status = http.StatusNotFound
	done()
	id2, _ := jsonrpc.MakeID(float64(2))
	if other.cancelledCall(id2) != nil || other.cancelledCalls.Load() != 0 {
		t.Fatal("a refused cancellation left its mark")
	}
}
