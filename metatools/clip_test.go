package metatools

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestMetaLogLevelErrorQuotesWholeCharacters: the -32602 answer to a bad
// _meta log level quotes at most 64 bytes of it, cut between characters,
// so a level of non-ASCII text is not quoted as broken UTF-8 (a cut in
// the middle of "é" left a lone byte that %q writes as \xc3).
func TestMetaLogLevelErrorQuotesWholeCharacters(t *testing.T) {
	req := &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{
		Name: "meta:search",
		Meta: mcp.Meta{mcp.MetaKeyLogLevel: strings.Repeat("é", 40)},
	}}
	err := checkMetaLogLevel("tools/call", req)
	je, ok := err.(*jsonrpc.Error)
	if !ok || je.Code != jsonrpc.CodeInvalidParams {
		t.Fatalf("checkMetaLogLevel = %v, want -32602", err)
	}
	if !utf8.ValidString(je.Message) || strings.Contains(je.Message, `\x`) || !strings.Contains(je.Message, "éé") {
		t.Fatalf("message quotes a cut character: %s", je.Message)
	}
}
