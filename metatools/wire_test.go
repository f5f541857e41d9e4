package metatools

import (
	"strings"
	"testing"
	"unicode/utf8"
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
