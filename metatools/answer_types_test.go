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
// count the same, and with answers outside the form's enum, minimum or
// required fields. A CALLER_ANSWER_INVALID naming the answer (it was a
// VALIDATION_ERROR).
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
		want := fmt.Sprintf(`inputResponses[%q].content: result: got %s, want string`, id, tool.JSONType(bad))
		if !res.IsError || !strings.Contains(raw, `"code":"CALLER_ANSWER_INVALID"`) || !strings.Contains(raw, strings.ReplaceAll(want, `"`, `\"`)) {
			t.Errorf("a %T for the text field: %s, want CALLER_ANSWER_INVALID %s", bad, raw, want)
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
	if !res.IsError || !strings.Contains(raw, `content: count: got number, want integer`) || !strings.Contains(raw, CodeCallerAnswerInvalid) {
		t.Errorf("a fractional count: %s", raw)
	}
	// The form's schema beyond the types, as the go-sdk checks older
	// revisions' answers: these were taken as the result.
	for _, bad := range []map[string]any{{"choice": "z"}, {"count": 1}, {"choice": "a", "count": -1}} {
		res, raw := call("meta:invoke", pick, first.RequestState, accept("answer", bad))
		if !res.IsError || !strings.Contains(raw, `"code":"CALLER_ANSWER_INVALID"`) || !strings.Contains(raw, `"field":"inputResponses[\"answer\"].content"`) {
			t.Errorf("%v for client:pick: %s, want CALLER_ANSWER_INVALID", bad, raw)
		}
	}
	if res, raw := call("meta:invoke", pick, first.RequestState, accept("answer", map[string]any{"choice": "b", "count": 2})); res.IsError || !strings.Contains(raw, `"choice":"b"`) {
		t.Errorf("a fitting answer: %s", raw)
	}

}

// TestCallerAnswerInvalidOlderRevisions: over 2025-11-25 and 2025-06-18 an
// answer that does not fit its form fails the call with
// CALLER_ANSWER_INVALID (it was TOOL_NOT_CALLABLE, as if the client could
// not be asked), in meta:execute (the plan's tool error) and meta:invoke,
// whichever end finds it: the go-sdk client refuses to send it (-32602),
// or a client that sends it anyway (a middleware rewriting the go-sdk
// client's answer after its own check) meets the go-sdk's server check.
func TestCallerAnswerInvalidOlderRevisions(t *testing.T) {
	gw := callerGateway(t, nil, "")
	bad := map[string]map[string]any{"client:prompt": {"result": 5}, "client:pick": {"choice": "z"}}
	good := map[string]map[string]any{"client:prompt": {"result": "Ada"}, "client:pick": {"choice": "a"}}
	connect := func(version string, sends map[string]map[string]any) *mcp.ClientSession {
		ans := &answering{answers: good}
		c := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, &mcp.ClientOptions{ElicitationHandler: ans.handle})
		c.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
			return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
				res, err := next(ctx, method, req)
				if er, ok := res.(*mcp.ElicitResult); ok && err == nil {
					for name, content := range sends {
						if strings.Contains(req.(*mcp.ElicitRequest).Params.Message, "calls "+name+" ") {
							er.Content = content
						}
					}
				}
				return res, err
			}
		})
		cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: gw.URL}, &mcp.ClientSessionOptions{ProtocolVersion: version})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	for _, version := range []string{"2025-11-25", "2025-06-18"} {
		for _, end := range []string{"client", "server"} {
			var cs *mcp.ClientSession
			if end == "client" {
				cs = connectAnswering(t, nil, gw.URL, version, &answering{answers: bad})
			} else {
				cs = connect(version, bad)
			}
			for _, name := range []string{"client:prompt", "client:pick"} {
				input := map[string]any{"question": "?"}
				if name == "client:pick" {
					input = map[string]any{"options": []string{"a", "b"}}
				}
				raw, _ := json.Marshal(input)
				_, text := callJSON(t, cs, "meta:execute", map[string]any{"script": fmt.Sprintf(`return await callTool(%q, %s)`, name, raw)})
				if !strings.Contains(text, `"status":"tool_error"`) || !strings.Contains(text, CodeCallerAnswerInvalid) || !strings.Contains(text, "does not fit its form") {
					t.Errorf("%s, %s end, meta:execute of %s: %s", version, end, name, text)
				}
				res, text := callJSON(t, cs, "meta:invoke", map[string]any{"tool": name, "input": input})
				if !res.IsError || !strings.Contains(text, `"code":"CALLER_ANSWER_INVALID"`) {
					t.Errorf("%s, %s end, meta:invoke of %s: %s", version, end, name, text)
				}
			}
		}
		// The same gateway takes a fitting answer, through the middleware
		// too.
		res, text := callJSON(t, connect(version, good), "meta:invoke", map[string]any{"tool": "client:pick", "input": map[string]any{"options": []string{"a"}}})
		if res.IsError || !strings.Contains(text, `"choice":"a"`) {
			t.Errorf("%s, a fitting answer: %s", version, text)
		}
	}
}
