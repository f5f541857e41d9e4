package metatools

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"
)

// answerInputs are meta:execute results of the shapes plans return: prose,
// an HTML page, API objects, non-Latin text.
func answerInputs(b *testing.B) map[string]*sandbox.Result {
	b.Helper()
	str := func(s string) json.RawMessage {
		raw, err := json.Marshal(s)
		if err != nil {
			b.Fatal(err)
		}
		return raw
	}
	var objs []map[string]any
	for i := range 2000 {
		objs = append(objs, map[string]any{"id": i, "name": "Item \"quoted\" name", "url": "https://example.com/items/42?a=1", "tags": []string{"alpha", "beta"}, "score": 0.5})
	}
	api, _ := json.Marshal(objs)
	return map[string]*sandbox.Result{
		"prose_900KB":   {Status: sandbox.StatusOK, Result: str(strings.Repeat("The quick brown fox jumps over the lazy dog, then \"rests\".\n", 900<<10/60))},
		"html_150KB":    {Status: sandbox.StatusOK, Result: str(strings.Repeat(htmlRow, 150<<10/len(htmlRow)))},
		"api_json_2000": {Status: sandbox.StatusOK, Result: api},
		"unicode_300KB": {Status: sandbox.StatusOK, Result: str(strings.Repeat("Привет, мир — 你好，世界 — ", 300<<10/56))},
	}
}

// BenchmarkAnswerChecks: the per-answer size checks of meta:execute's
// result (structuredContent and its text copy as the client receives
// them).
func BenchmarkAnswerChecks(b *testing.B) {
	for name, res := range answerInputs(b) {
		out, err := successResult(MetaExecute, res)
		if err != nil {
			b.Fatal(err)
		}
		raw := out.StructuredContent.(json.RawMessage)
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				answerChecks(raw)
			}
		})
	}
}

func answerChecks(raw []byte) int {
	s, t := wireSizes(raw)
	return s + t
}

// BenchmarkExecuteResult: meta:execute's result encoded and checked.
func BenchmarkExecuteResult(b *testing.B) {
	svc := NewService(nil, &Options{Limits: sandbox.Limits{MaxResultBytes: 1 << 20}})
	for name, res := range answerInputs(b) {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := svc.executeResult(res); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkInvokeTextAnswer: the result bound's check of a text-only
// answer (an upstream tool's, through meta:invoke) of about 1 MB.
func BenchmarkInvokeTextAnswer(b *testing.B) {
	svc := NewService(nil, &Options{Limits: sandbox.Limits{MaxResultBytes: 4 << 20}})
	for name, res := range answerInputs(b) {
		var text string
		if err := json.Unmarshal(res.Result, &text); err != nil {
			continue // not a string answer
		}
		out := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			b.ReportAllocs()
			for b.Loop() {
				if size, _ := svc.answerOverBound(out, sandbox.StatusOK); size != 0 {
					b.Fatal("over the bound")
				}
			}
		})
	}
}
