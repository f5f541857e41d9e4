package engine

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// discoveryHost is a testHost that also answers searchTools and
// describeTool.
type discoveryHost struct {
	*testHost
	searches []string
}

func (h *discoveryHost) SearchTools(_ context.Context, req json.RawMessage) (json.RawMessage, error) {
	var in struct {
		Query string `json:"query"`
		TopK  int    `json:"topK"`
	}
	if err := json.Unmarshal(req, &in); err != nil {
		return nil, &ToolError{Code: CodeValidationError, Message: err.Error()}
	}
	if in.Query == "bad" {
		return nil, &ToolError{Code: CodeValidationError, Message: "queries.0: query is empty"}
	}
	h.mu.Lock()
	h.searches = append(h.searches, string(req))
	h.mu.Unlock()
	return json.Marshal([]map[string]any{{"name": "add", "description": "adds " + in.Query, "topK": in.TopK}})
}

func (h *discoveryHost) DescribeTool(_ context.Context, name string) (json.RawMessage, error) {
	if _, ok := h.tools[name]; !ok {
		return json.RawMessage("null"), nil
	}
	return json.Marshal(map[string]string{"name": name, "signature": "function " + name + "(input: { a: number; b: number }): Promise<number>;"})
}

// TestDiscoveryInPlan runs one plan that finds, inspects and calls a tool,
// on both engines: searchTools and describeTool reach the host's Discovery,
// pass allowedTools (they are no tools), count as tool calls against
// maxToolCalls, and fail with TOOL_NOT_FOUND on a host without Discovery.
func TestDiscoveryInPlan(t *testing.T) {
	engines := map[string]Engine{
		"inprocess": NewInProcess(nil),
		"workers":   newRealPool(t, PoolOptions{}),
	}
	plan := `
const found = await searchTools("two numbers", {topK: 3});
const d = await describeTool(found[0].name);
const missing = await describeTool("nope");
const sum = await callTool(found[0].name, {a: 2, b: 3});
return {found, sig: d.signature, missing, sum};`
	for name, e := range engines {
		t.Run(name, func(t *testing.T) {
			h := &discoveryHost{testHost: newTestHost(echoTools())}
			res, err := e.Execute(context.Background(), Request{Code: plan, AllowedTools: []string{"add"}}, h)
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != StatusOK {
				t.Fatalf("status %s: %+v", res.Status, res.Error)
			}
			var out struct {
				Found   []struct{ Name, Description string }
				Sig     string
				Missing any
				Sum     float64
			}
			if err := json.Unmarshal(res.Result, &out); err != nil {
				t.Fatal(err)
			}
			if len(out.Found) != 1 || out.Found[0].Name != "add" || out.Found[0].Description != "adds two numbers" ||
				!strings.Contains(out.Sig, "function add(") || out.Missing != nil || out.Sum != 5 {
				t.Fatalf("result %s", res.Result)
			}
			if len(h.searches) != 1 || !strings.Contains(h.searches[0], `"topK":3`) {
				t.Fatalf("searches %q", h.searches)
			}

			// Counted against maxToolCalls: three discovery calls and one
			// tool call exceed a limit of 3.
			res, err = e.Execute(context.Background(), Request{Code: plan, Limits: Limits{MaxToolCalls: 3}}, h)
			if err != nil {
				t.Fatal(err)
			}
			if res.Status == StatusOK {
				t.Fatalf("four calls passed a limit of 3: %s", res.Result)
			}

			// A host error reaches the script as a ToolError with the API's name.
			res, _ = e.Execute(context.Background(), Request{Code: `try { await searchTools("bad"); } catch (e) { return [e.name, e.code, e.toolName, e.message]; }`}, h)
			if res.Status != StatusOK || string(res.Result) != `["ToolError","VALIDATION_ERROR","searchTools","queries.0: query is empty"]` {
				t.Fatalf("error: %s %s %+v", res.Status, res.Result, res.Error)
			}
			res, _ = e.Execute(context.Background(), Request{Code: `return await searchTools(42)`}, h)
			if res.Status != StatusRuntimeError || !strings.Contains(res.Error.Message, "searchTools: the query must be a string") {
				t.Fatalf("non-string query: %s %+v", res.Status, res.Error)
			}

			// A host without Discovery.
			res, _ = e.Execute(context.Background(), Request{Code: `return await describeTool("add")`}, newTestHost(echoTools()))
			if res.Status != StatusToolError || res.Error.Code != CodeToolNotFound || !strings.Contains(res.Error.Message, "describeTool is not available") {
				t.Fatalf("no discovery: %s %+v", res.Status, res.Error)
			}
		})
	}
}
