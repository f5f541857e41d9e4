package metatools

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codemode-gateway/caddy-codemode/internal/tool"
)

// TestCallerAnswerTypes: an answer must have its form field's JSON type,
// none is coerced. Over 2026-07-28 (a real HTTP gateway) a number for
// client:prompt's text field is a VALIDATION_ERROR naming the field (it
// was taken as the number), the plan waits on and takes a text answer to
// the same requestState; meta:invoke of client:pick with a fractional
// count the same. Over 2025-11-25 the go-sdk checks the answer against
// the form before the gateway sees it: the plan sees the call fail.
func TestCallerAnswerTypes(t *testing.T) {
	gw := callerGateway(t, nil, "")
	ctx := context.Background()
	manual, err := mcp.NewClient(&mcp.Implementation{Name: "manual", Version: "1"}, &mcp.ClientOptions{
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) { return nil, fmt.Errorf("unused") },
		MultiRoundTrip:     &mcp.MultiRoundTripOptions{Disabled: true},
	}).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: gw.URL, HTTPClient: http.DefaultClient}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer manual.Close()
	call := func(tool string, args any, state string, responses mcp.InputResponseMap) (*mcp.CallToolResult, string) {
		t.Helper()
		res, err := manual.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args, RequestState: state, InputResponses: responses})
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := json.Marshal(res)
		return res, string(raw)
	}
	accept := func(id string, content map[string]any) mcp.InputResponseMap {
		return mcp.InputResponseMap{id: &mcp.ElicitResult{Action: "accept", Content: content}}
	}
	args := map[string]any{"script": `return await callTool("client:prompt", {question: "x?"})`}
	first, raw := call("meta:execute", args, "", nil)
	if !first.NeedsInput() || len(first.InputRequests) != 1 {
		t.Fatalf("first call: %s", raw)
	}
	var id string
	for id = range first.InputRequests {
	}
	for _, bad := range []any{5.0, true, map[string]any{"a": 1}, nil} {
		res, raw := call("meta:execute", args, first.RequestState, accept(id, map[string]any{"result": bad}))
		want := fmt.Sprintf(`inputResponses[%q].content.result: got %s, want string`, id, tool.JSONType(bad))
		if !res.IsError || !strings.Contains(raw, `"code":"VALIDATION_ERROR"`) || !strings.Contains(raw, strings.ReplaceAll(want, `"`, `\"`)) {
			t.Errorf("a %T for the text field: %s, want VALIDATION_ERROR %s", bad, raw, want)
		}
	}
	if res, raw := call("meta:execute", args, first.RequestState, accept(id, map[string]any{"result": "5"})); res.IsError || !strings.Contains(raw, `"result":"5"`) {
		t.Fatalf("the text answer after them: %s", raw)
	}

	pick := map[string]any{"tool": "client:pick", "input": map[string]any{"options": []string{"a", "b"}}}
	first, raw = call("meta:invoke", pick, "", nil)
	if !first.NeedsInput() {
		t.Fatalf("meta:invoke of client:pick: %s", raw)
	}
	res, raw := call("meta:invoke", pick, first.RequestState, accept("answer", map[string]any{"choice": "a", "count": 1.5}))
	if !res.IsError || !strings.Contains(raw, `content.count: got number, want integer`) || !strings.Contains(raw, "VALIDATION_ERROR") {
		t.Errorf("a fractional count: %s", raw)
	}
	if res, raw := call("meta:invoke", pick, first.RequestState, accept("answer", map[string]any{"choice": "b", "count": 2})); res.IsError || !strings.Contains(raw, `"choice":"b"`) {
		t.Errorf("a fitting answer: %s", raw)
	}

	old := connectAnswering(t, nil, gw.URL, "2025-11-25", &answering{answers: map[string]map[string]any{"client:prompt": {"result": 5}}})
	_, text := callJSON(t, old, "meta:execute", map[string]any{"script": `return await callTool("client:prompt", {question: "?"})`})
	if !strings.Contains(text, `"status":"tool_error"`) || !strings.Contains(text, "does not match requested schema") {
		t.Errorf("2025-11-25, a number for the text field: %s", text)
	}
}
