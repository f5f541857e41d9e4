package caddymodules

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// BenchmarkMCPHeaderlessPOST measures what a POST without
// MCP-Protocol-Version and Mcp-Session-Id pays before the go-sdk reads it:
// the id check, the look for a revision in _meta (isModern) and the
// handshake revisions' checks (legacyPrecheck), for an initialize of
// 2025-11-25 and a tools/call of 2026-07-28 without its header, with a
// small and a 64 KiB script.
func BenchmarkMCPHeaderlessPOST(b *testing.B) {
	h := &MCPHandler{}
	for _, tc := range []struct{ name, body string }{
		{"initialize", mcpInit2025},
		{"modern_call_200", `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{` + modernMeta +
			`,"name":"meta:execute","arguments":{"script":"` + strings.Repeat("a", 200) + `"}}}`},
		{"modern_call_64k", `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{` + modernMeta +
			`,"name":"meta:execute","arguments":{"script":"` + strings.Repeat("a", 64<<10) + `"}}}`},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				r := httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(tc.body))
				r.Header.Set("Content-Type", "application/json")
				if refuseBadID(nil, r) {
					b.Fatal("refused")
				}
				if modern, _ := h.isModern(r); !modern && !h.legacyPrecheck(nil, r) {
					b.Fatal("answered")
				}
			}
		})
	}
}

// BenchmarkMCPCancelTarget: reading the request a notifications/cancelled
// names, once per cancellation before the go-sdk reads it.
func BenchmarkMCPCancelTarget(b *testing.B) {
	params := []byte(`{"requestId":42,"reason":"user aborted"}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, ok := cancelTarget(params); !ok {
			b.Fatal("no target")
		}
	}
}
