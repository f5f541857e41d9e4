package metatools

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// webUpstream is a real MCP server over HTTP whose tools answer HTML, as a
// web page or a documentation tool does: web:page as text, web:doc as
// structuredContent {"body": ...} (and its JSON text, as the go-sdk writes
// a typed tool's answer). Each repeats unit n times.
func webUpstream(t *testing.T) *Upstream {
	t.Helper()
	srv := mcp.NewServer(&mcp.Implementation{Name: "web", Version: "v1"}, nil)
	type in struct {
		Unit string `json:"unit"`
		N    int    `json:"n"`
	}
	type docOut struct {
		Body string `json:"body"`
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "page", Description: "Fetch a web page as HTML"},
		func(_ context.Context, _ *mcp.CallToolRequest, in in) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strings.Repeat(in.Unit, in.N)}}}, nil, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "doc", Description: "Fetch a documentation page as an object"},
		func(_ context.Context, _ *mcp.CallToolRequest, in in) (*mcp.CallToolResult, docOut, error) {
			return nil, docOut{Body: strings.Repeat(in.Unit, in.N)}, nil
		})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	u, err := NewUpstream(UpstreamConfig{Name: "web", URL: hs.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := u.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { u.Close() })
	return u
}

// htmlRow is one line of an HTML page: every kind of character HTML
// escaping rewrites.
const htmlRow = `<tr><td><a href="/items?id=42&amp;sort=asc">Item 42</a></td><td>&lt;b&gt; &amp; &quot;</td></tr>` + "\n"

// receivedResult returns the "result" of the last tools/call answer rec
// holds, byte for byte as the client received it.
func receivedResult(t *testing.T, rec *mcpRecorder) []byte {
	t.Helper()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for i := len(rec.answers) - 1; i >= 0; i-- {
		if rec.answers[i].req.Method != "tools/call" {
			continue
		}
		var msg struct {
			Result json.RawMessage `json:"result"`
		}
		if err := json.Unmarshal(rec.answers[i].raw, &msg); err != nil || msg.Result == nil {
			t.Fatalf("tools/call answer: %v %.200s", err, rec.answers[i].raw)
		}
		return msg.Result
	}
	t.Fatal("no tools/call answer recorded")
	return nil
}

// htmlEscapes counts the HTML escapes of Go's encoding/json in b.
func htmlEscapes(b []byte) int {
	n := 0
	for _, e := range []string{`\u003c`, `\u003e`, `\u0026`} {
		n += strings.Count(string(b), e)
	}
	return n
}

// TestAnswersAsReceived measures the tools/call results of meta:search
// (topK 10, every GitHub evaluation query), meta:describe (GitHub's largest
// operation) and meta:invoke (an HTML page of a real upstream) as a go-sdk
// client receives them over HTTP, and holds them to what a model should
// pay: no HTML escaping (Go's writes each <, > and & as six bytes) and
// issue 13's budget. go test -run TestAnswersAsReceived -v ./metatools/
// prints the sizes.
func TestAnswersAsReceived(t *testing.T) {
	gh := loadEvalCatalog(t, "github")
	rec := newMCPRecorder()
	f := newFixture(t, fixtureOptions{transport: rec, extra: []ToolSource{&StaticSource{List: gh.tools}, webUpstream(t)}})
	call := func(name string, args any) (*mcp.CallToolResult, []byte) {
		t.Helper()
		res := f.call(t, name, args)
		raw := receivedResult(t, rec)
		if n := htmlEscapes(raw); n > 0 {
			t.Errorf("%s: %d HTML escapes in the %d bytes received: %.300s", name, n, len(raw), raw)
		}
		return res, raw
	}

	var sizes []int
	for _, q := range gh.set.Queries {
		_, raw := call("meta:search", map[string]any{"queries": []string{q.Q}, "topK": 10})
		if len(raw) > maxAnswerBytes {
			t.Errorf("search %q: %d bytes received, budget %d", q.Q, len(raw), maxAnswerBytes)
		}
		sizes = append(sizes, len(raw))
	}
	sort.Ints(sizes)
	t.Logf("meta:search topK 10, %d GitHub queries: median %d bytes received, max %d", len(sizes), sizes[len(sizes)/2], sizes[len(sizes)-1])

	largest := largestOperation(t, gh)
	_, raw := call("meta:describe", map[string]any{"toolNames": []string{largest}})
	if len(raw) > maxAnswerBytes {
		t.Errorf("describe %s: %d bytes received, budget %d", largest, len(raw), maxAnswerBytes)
	}
	t.Logf("meta:describe %s (GitHub's largest operation): %d bytes received", largest, len(raw))

	page := "<!doctype html><html><head><title>Items</title></head><body><table>\n" + strings.Repeat(htmlRow, 200) + "</table></body></html>\n"
	res, raw := call("meta:invoke", map[string]any{"tool": "web:page", "input": map[string]any{"unit": page, "n": 1}})
	if res.IsError || text(res) != page {
		t.Fatalf("invoke web:page: %.300s", text(res))
	}
	t.Logf("meta:invoke web:page, an HTML page of %d bytes: %d bytes received", len(page), len(raw))
	res, raw = call("meta:invoke", map[string]any{"tool": "web:doc", "input": map[string]any{"unit": page, "n": 1}})
	var doc struct{ Body string }
	structured(t, res, &doc)
	if doc.Body != page {
		t.Fatalf("invoke web:doc: body %.300s", doc.Body)
	}
	t.Logf("meta:invoke web:doc, the same page as structuredContent and its text: %d bytes received", len(raw))
}

// largestOperation is the tool of c with the largest schemas (GitHub's:
// github_repos_update, also the largest with detail "full",
// TestDescribeAnswerSize).
func largestOperation(t *testing.T, c *evalCatalog) string {
	t.Helper()
	name, size := "", 0
	for _, tl := range c.tools {
		if n := len(tl.InputSchema) + len(tl.OutputSchema); n > size {
			name, size = tl.Name, n
		}
	}
	if name == "" {
		t.Fatalf("%s: no tools", c.name)
	}
	return name
}

// TestHTMLUnescape: the HTML escapes of encoding/json become their
// characters, and nothing else moves: an escaped backslash followed by
// "u003c" is text, other escapes stay.
func TestHTMLUnescape(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"a":"\u003cb\u003e \u0026"}`, `{"a":"<b> &"}`},
		{`"\\u003c"`, `"\\u003c"`},
		{`"\\\u003c"`, `"\\<"`},
		{`"\\\\u003c\u003E\u003C"`, `"\\\\u003c><"`},
		{`"\"\u003c\"\n\u0001\u2028\u0027\ud83d\ude00"`, `"\"<\"\n\u0001\u2028\u0027\ud83d\ude00"`},
		{`"no escapes <>&"`, `"no escapes <>&"`},
		{`"\u003"`, `"\u003"`},
		{`"\`, `"\`},
	} {
		got := string(htmlUnescape([]byte(tc.in)))
		if got != tc.want {
			t.Errorf("htmlUnescape(%s) = %s, want %s", tc.in, got, tc.want)
			continue
		}
		if !json.Valid([]byte(tc.in)) {
			continue
		}
		var a, b any
		if json.Unmarshal([]byte(tc.in), &a) != nil || json.Unmarshal([]byte(got), &b) != nil || fmt.Sprint(a) != fmt.Sprint(b) {
			t.Errorf("htmlUnescape(%s) changed the value: %v, %v", tc.in, a, b)
		}
	}
}

// TestWireSizes: wireSizes counts what the go-sdk and unescapedResult
// write, for structuredContent with its text copy and for text alone. (The
// go-sdk's JSON-RPC encoder, like encodeJSON, leaves HTML alone; json.Marshal
// would escape the result again.)
func TestWireSizes(t *testing.T) {
	size := func(res *mcp.CallToolResult) int {
		b, err := encodeJSON(unescapedResult{res})
		if err != nil {
			t.Fatal(err)
		}
		return len(b)
	}
	both := func(raw string) *mcp.CallToolResult {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: raw}}, StructuredContent: json.RawMessage(raw)}
	}
	textOnly := func(s string) *mcp.CallToolResult {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
	}
	baseBoth, baseText := size(both("0"))-1-3, size(textOnly(""))-2
	for _, raw := range []string{
		`{"html":"<p class=\"x\">a &amp; b</p>"}`,
		`{"s":"tab\tnl\nquote\"back\\slash\\u003c"}`,
		"{\"ls\":\"a\u2028b\u2029c\",\"emoji\":\"\U0001F600\",\"fffd\":\"\uFFFD\"}",
		"{\"dash\":\"a\u2014b\u2026c\u202ad\u2027\"}", // E2 80 xx that are written as is
		`[1,2.5,true,null,"x"]`,
	} {
		s, tx := wireSizes([]byte(raw))
		if got, want := size(both(raw)), baseBoth+s+tx; got != want {
			t.Errorf("%s: %d bytes written, wireSizes says %d (structured %d, text %d)", raw, got, want, s, tx)
		}
	}
	for _, s := range []string{
		"<html>&amp;</html>", "ctl \x00\x01\x1f \b\f\n\r\t", "bad \xff\xfe utf-8 \xe2\x80", "\u2028\u2029", `"\`,
		"ends in half a line separator \xe2\x80", "\u2028 then bad \xe2\x80\xa8\xff",
	} {
		if _, tx := wireSizes([]byte(s)); size(textOnly(s)) != baseText+tx {
			t.Errorf("%q: %d bytes written, wireSizes says %d", s, size(textOnly(s)), baseText+tx)
		}
	}
}

// TestInvokeAnswerWithinResultBound: meta:invoke's answer, an upstream MCP
// server's over a real socket, reaches a go-sdk client over HTTP held to
// the result bound of meta:execute's plans (here lowered to 128 KiB by the
// meta-tools' limits), as the client receives it: a page of 100 KB of
// "<&>" in 0.1 MB (0.6 MB HTML-escaped before), a result over the bound is
// RESPONSE_TOO_LARGE, and the text copy of a structuredContent within the
// bound whose text would not be is a note.
func TestInvokeAnswerWithinResultBound(t *testing.T) {
	wc := &wireCounter{}
	f := newFixture(t, fixtureOptions{transport: wc, extra: []ToolSource{webUpstream(t)},
		options: func(o *Options) { o.Limits.MaxResultBytes = 128 << 10 }})
	bound := f.svc.resultBound()
	if bound != 128<<10 {
		t.Fatalf("result bound %d, want the 128 KiB of Options.Limits", bound)
	}
	for _, tc := range []struct {
		name, tool, unit string
		n                int
		tooLarge         bool
		textCopy         bool // the text is the result (web:page) or its JSON (web:doc)
	}{
		{"page of 100 KB of <&>", "web:page", "<&>", 100 << 10 / 3, false, true},
		{"page of 140 KB", "web:page", "a", 140 << 10, true, false},
		{"doc of 75 KB of <&>", "web:doc", "<&>", 25 << 10, false, true},
		{"doc of 50 KB of quotes", "web:doc", `"`, 50 << 10, false, false},
		{"doc of 140 KB", "web:doc", "a", 140 << 10, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := wc.n.Load()
			res := f.call(t, "meta:invoke", map[string]any{"tool": tc.tool, "input": map[string]any{"unit": tc.unit, "n": tc.n}})
			wire := wc.n.Load() - before
			t.Logf("a result of %d bytes: %d bytes on the wire, isError %v %.200s", len(tc.unit)*tc.n, wire, res.IsError, text(res))
			limit := int64(bound + 4096)
			if tc.tool == "web:doc" {
				limit += int64(bound) // structuredContent and its text copy
			}
			if wire > limit {
				t.Errorf("%d bytes on the wire, over %d", wire, limit)
			}
			if tc.tooLarge {
				if e := errorOf(t, res); e.Code != "RESPONSE_TOO_LARGE" || e.Transient || !strings.Contains(e.Message, "as an MCP client receives it") {
					t.Errorf("error %+v", e)
				}
				return
			}
			want := strings.Repeat(tc.unit, tc.n)
			if tc.tool == "web:page" {
				if res.IsError || text(res) != want {
					t.Fatalf("text of %d bytes, want %d", len(text(res)), len(want))
				}
				return
			}
			var doc struct{ Body string }
			structured(t, res, &doc)
			if doc.Body != want {
				t.Fatalf("structuredContent body of %d bytes, want %d", len(doc.Body), len(want))
			}
			if got := strings.Contains(text(res), want[:30]); got != tc.textCopy {
				t.Errorf("text copy of the result: %v, want %v (%.200s)", got, tc.textCopy, text(res))
			}
			if !tc.textCopy && !strings.Contains(text(res), "structuredContent only") {
				t.Errorf("the text does not point to structuredContent: %.200s", text(res))
			}
		})
	}
}

// TestErrorResultUnescaped: an error's text is JSON without HTML escaping,
// so "<" is one byte of it (and one on the wire), not the six of \u003c.
func TestErrorResultUnescaped(t *testing.T) {
	const msg = `limit: want <= 100 & > 0`
	if got := text(errorResult(newError(CodeValidationError, msg))); !strings.Contains(got, msg) {
		t.Errorf("error text %s", got)
	}
}

func fmtSizes(structured, text int) string { return fmt.Sprintf("%d/%d", structured, text) }

// TestWireSizesValidFastPath: on valid UTF-8, wireSizes's byte loop counts
// what decoding character by character (the path of invalid text) counts.
func TestWireSizesValidFastPath(t *testing.T) {
	runes := []rune{'a', '"', '\\', '\n', 0x01, 0x7f, 'é', 0x7ff, 0x800, '—', '…', 0x2027, 0x2028, 0x2029, 0x202a, 0xe280, 0xffff, 0x10000, 0x1F600, 0x10ffff}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		rs := make([]rune, rng.IntN(40))
		for i := range rs {
			rs[i] = runes[rng.IntN(len(runes))]
		}
		s := string(rs)
		if got, want := fmtSizes(wireSizes([]byte(s))), fmtSizes(wireSizesDecoded([]byte(s))); got != want {
			t.Fatalf("%q: wireSizes %s, decoded %s", s, got, want)
		}
	}
}
