package metatools

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestExecuteWellFormedOverMCP: a plan's lone surrogates reach an MCP
// client, in the text content and in structuredContent, as U+FFFD: the
// "\ud800" escape the sandbox's JSON.stringify writes is refused by strict
// JSON parsers (serde_json).
func TestExecuteWellFormedOverMCP(t *testing.T) {
	rec := newMCPRecorder()
	f := newFixture(t, fixtureOptions{transport: rec})
	res := callExecute(t, f, `return {s: "a\ud800b", pair: "\ud83d\ude00"};`, nil)
	var out struct{ Result map[string]string }
	structured(t, res, &out)
	if out.Result["s"] != "a\uFFFDb" || out.Result["pair"] != "\U0001F600" {
		t.Errorf("result %v", out.Result)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	seen := false
	for _, a := range rec.answers {
		if a.req.Method != "tools/call" {
			continue
		}
		seen = true
		if !utf8.Valid(a.raw) || strings.Contains(strings.ToLower(string(a.raw)), `\ud800`) {
			t.Errorf("a lone surrogate on the wire: %s", a.raw)
		}
	}
	if !seen {
		t.Fatal("no tools/call answer recorded")
	}
}

// wireCounter is an HTTP transport that counts the bytes of the bodies the
// server answers POSTs with, as the client reads them.
type wireCounter struct{ n atomic.Int64 }

func (c *wireCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil || req.Method != http.MethodPost {
		return resp, err
	}
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.TeeReader(resp.Body, writerFunc(func(p []byte) { c.n.Add(int64(len(p))) })), resp.Body}
	return resp, nil
}

type writerFunc func([]byte)

func (f writerFunc) Write(p []byte) (int, error) { f(p); return len(p), nil }

// TestExecuteAnswerWithinResultBound: a plan's answer reaches a go-sdk
// client over HTTP in at most twice the sandbox's result bound (its
// structuredContent and the text copy) plus a little. A result of 900 KB
// of "<&>" was 11.7 MB on the wire: each character HTML-escaped to six
// bytes, twice; it is now 1.8 MB, both copies unescaped (unescapedResult).
// A result within the sandbox's bound that is over it as the client
// receives it (U+2028, which encoding/json always escapes to six bytes) is
// refused. The text copy of a result within the bound whose text would
// not be is a note pointing to structuredContent.
//
// The bound is the subject, not time: building and encoding 900 KB under
// -race at load 20 ran past the fixture's 1 s of running time (status
// "timeout" in most rounds), so the engine here allows a minute.
func TestExecuteAnswerWithinResultBound(t *testing.T) {
	wc := &wireCounter{}
	engine := sandbox.NewInProcess(&sandbox.Options{Limits: sandbox.Limits{Timeout: time.Minute, CPUTime: time.Minute}})
	t.Cleanup(func() { engine.Close() })
	f := newFixture(t, fixtureOptions{transport: wc, options: func(o *Options) { o.Engine = engine }})
	bound := f.svc.resultBound()
	if bound != 1<<20 {
		t.Fatalf("result bound %d, want the standard preset's 1 MiB", bound)
	}
	for _, tc := range []struct {
		name, expr string
		n          int
		status     string
		textCopy   bool
	}{
		{"900 KB of <&>", `"<&>".repeat(307200)`, 900 << 10, "ok", true},
		{"900 KB of U+2028", `"\u2028".repeat(307200)`, 900 << 10, "runtime_error", false},
		{"150 KB of <&>", `"<&>".repeat(51200)`, 150 << 10, "ok", true},
		{"900 KB of a", `"a".repeat(921600)`, 900 << 10, "ok", true},
		{"500 KB of quotes", `"\"".repeat(512000)`, 500 << 10, "ok", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := wc.n.Load()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			res, err := f.session.CallTool(ctx, &mcp.CallToolParams{Name: "meta:execute", Arguments: map[string]any{"script": "return " + tc.expr + ";"}})
			if err != nil {
				t.Fatal(err)
			}
			wire := wc.n.Load() - before
			var out struct {
				Status string
				Result string
				Error  struct{ Name, Message string }
			}
			structured(t, res, &out)
			t.Logf("a result of %d bytes: %d bytes on the wire, %s %s", tc.n, wire, out.Status, out.Error.Message)
			if out.Status != tc.status {
				t.Fatalf("status %q, want %q: %s", out.Status, tc.status, out.Error.Message)
			}
			if wire > int64(2*bound+4096) {
				t.Errorf("%d bytes on the wire, over twice the %d-byte result bound", wire, bound)
			}
			if tc.status != "ok" {
				if out.Error.Name != "RangeError" || !strings.Contains(out.Error.Message, "as an MCP client receives it") {
					t.Errorf("error %+v", out.Error)
				}
				return
			}
			if len(out.Result) != tc.n {
				t.Fatalf("structuredContent result of %d bytes, want %d", len(out.Result), tc.n)
			}
			if got := strings.Contains(text(res), out.Result[:30]); got != tc.textCopy {
				t.Errorf("text copy of the result: %v, want %v (%.200s)", got, tc.textCopy, text(res))
			}
			if !tc.textCopy && !strings.Contains(text(res), "structuredContent") {
				t.Errorf("the text does not point to structuredContent: %.200s", text(res))
			}
		})
	}
}
