package metatools

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"
)

// upstreamServer starts a real go-sdk MCP server over Streamable HTTP with
// two tools, "echo" (text result) and "add" (structured result with an output
// schema).
func upstreamServer(t *testing.T) (*mcp.Server, string) {
	t.Helper()
	srv := mcp.NewServer(&mcp.Implementation{Name: "upstream", Version: "v1"}, nil)
	type addIn struct {
		A int `json:"a" jsonschema:"first addend"`
		B int `json:"b" jsonschema:"second addend"`
	}
	type addOut struct {
		Sum int `json:"sum"`
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "add", Description: "Add two integers and return their sum"},
		func(_ context.Context, _ *mcp.CallToolRequest, in addIn) (*mcp.CallToolResult, addOut, error) {
			return nil, addOut{Sum: in.A + in.B}, nil
		})
	type echoIn struct {
		Text string `json:"text"`
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "echo", Description: "Echo a text back"},
		func(_ context.Context, _ *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "echo: " + in.Text}}}, nil, nil
		})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	return srv, hs.URL
}

// registeredTools stands for tools registered in-process (the broker's
// registry): crm:createContact with declared examples and an output schema,
// and crm:listContacts.
func registeredTools() *StaticSource {
	yes := true
	return &StaticSource{
		List: []Tool{
			{
				Name: "crm:createContact", AppID: "crm", Description: "Create a new contact in the CRM",
				InputSchema:  json.RawMessage(`{"type":"object","properties":{"name":{"type":"string","minLength":1},"email":{"type":"string","format":"email"}},"required":["name","email"],"additionalProperties":false}`),
				OutputSchema: json.RawMessage(`{"type":"object","properties":{"id":{"type":"string"},"name":{"type":"string"}}}`),
				Examples:     []Example{{Description: "declared", Code: `return await callTool("crm:createContact", {name: "Ada", email: "ada@example.com"});`}},
			},
			{
				Name: "crm:listContacts", AppID: "crm", Description: "List all contacts",
				InputSchema: json.RawMessage(`{"type":"object","properties":{"limit":{"type":"integer","minimum":1,"maximum":100}}}`),
				Annotations: &Annotations{ReadOnlyHint: &yes},
				Tags:        []string{"contacts"},
			},
		},
		Handlers: map[string]func(context.Context, json.RawMessage) (json.RawMessage, error){
			"crm:createContact": func(_ context.Context, in json.RawMessage) (json.RawMessage, error) {
				var v struct{ Name string }
				json.Unmarshal(in, &v)
				return json.Marshal(map[string]any{"id": "c1", "name": v.Name})
			},
			"crm:listContacts": func(context.Context, json.RawMessage) (json.RawMessage, error) {
				return json.RawMessage(`[{"id":"c1","name":"Ada"},{"id":"c2","name":"Grace"}]`), nil
			},
		},
	}
}

type fixture struct {
	svc      *Service
	index    *Index
	upstream *mcp.Server
	session  *mcp.ClientSession
	reloads  chan int
	url      string // the MCP endpoint
}

type fixtureOptions struct {
	naming  Naming
	limiter Limiter
	extra   []ToolSource
	// protocolVersion is the MCP revision the client asks for (default:
	// the go-sdk's latest); transport carries its HTTP requests.
	protocolVersion string
	transport       http.RoundTripper
	// options, when set, adjusts the service's options.
	options func(*Options)
	// client, when set, are the go-sdk client's options.
	client *mcp.ClientOptions
}

// newFixture serves the meta-tools over real HTTP and connects a go-sdk
// client to them.
func newFixture(t *testing.T, fo fixtureOptions) *fixture {
	t.Helper()
	up, url := upstreamServer(t)
	u, err := NewUpstream(UpstreamConfig{Name: "math", URL: url}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sources := append([]ToolSource{registeredTools(), u}, fo.extra...)
	ix, err := NewIndex(sources, nil)
	if err != nil {
		t.Fatal(err)
	}
	reloads := make(chan int, 16)
	ix.OnReload(func(n int) {
		select {
		case reloads <- n:
		default:
		}
	})
	// Setup only: a large extra source's index under -race on loaded
	// cores took more than 30 s.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := u.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { u.Close() })
	if err := ix.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	// A short timeout and a step limit beyond reach, so that the timeout
	// case ends by time rather than by steps. 1 s, not less: a plan of two
	// upstream calls under -race on a loaded 2-core machine took over
	// 300 ms (TestMetaSpansAndUpstreamTraceContext).
	engine := sandbox.NewInProcess(&sandbox.Options{Limits: sandbox.Limits{Timeout: time.Second, MaxSteps: 1 << 40}})
	t.Cleanup(func() { engine.Close() })
	opts := &Options{Engine: engine, Naming: fo.naming, Limiter: fo.limiter,
		Sanitize: Sanitization{RemoveStackTraces: true}}
	if fo.options != nil {
		fo.options(opts)
	}
	svc := NewService(ix, opts)
	// Revision 2026-07-28 has no sessions: codemode_mcp serves it with a
	// stateless handler, as here.
	hopts := &mcp.StreamableHTTPOptions{Stateless: fo.protocolVersion >= "2026-07-28"}
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return NewServer(svc, nil) }, hopts))
	t.Cleanup(hs.Close)
	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v1"}, fo.client)
	ct := &mcp.StreamableClientTransport{Endpoint: hs.URL}
	if fo.transport != nil {
		ct.HTTPClient = &http.Client{Transport: fo.transport}
	}
	cs, err := client.Connect(ctx, ct, &mcp.ClientSessionOptions{ProtocolVersion: fo.protocolVersion})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return &fixture{svc: svc, index: ix, upstream: up, session: cs, reloads: reloads, url: hs.URL}
}

func (f *fixture) call(t *testing.T, name string, args any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := f.session.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("calling %s: %v", name, err)
	}
	return res
}

// structured decodes a result's structured content into v.
func structured(t *testing.T, res *mcp.CallToolResult, v any) {
	t.Helper()
	if res.IsError {
		t.Fatalf("unexpected error result: %s", text(res))
	}
	raw, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("decoding %s: %v", raw, err)
	}
}

func text(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// errorOf decodes the {"error": {...}} text of an isError result.
func errorOf(t *testing.T, res *mcp.CallToolResult) Error {
	t.Helper()
	if !res.IsError {
		t.Fatalf("expected an error result, got %s", text(res))
	}
	var body struct{ Error Error }
	if err := json.Unmarshal([]byte(text(res)), &body); err != nil {
		t.Fatalf("error text is not JSON: %q", text(res))
	}
	return body.Error
}

func TestMCPListsFourToolsWithSchemas(t *testing.T) {
	for _, naming := range []Naming{NamingSpec, NamingSafe} {
		t.Run(string(naming), func(t *testing.T) {
			f := newFixture(t, fixtureOptions{naming: naming})
			res, err := f.session.ListTools(context.Background(), nil)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, tool := range res.Tools {
				names = append(names, tool.Name)
				// meta:invoke declares no output schema: its result is the
				// invoked tool's (see TestMCPConformance).
				invoke := strings.HasSuffix(tool.Name, "invoke")
				if tool.InputSchema == nil || (tool.OutputSchema == nil) != invoke {
					t.Errorf("%s: input schema %v, output schema %v", tool.Name, tool.InputSchema != nil, tool.OutputSchema != nil)
				}
			}
			want := "meta:describe meta:execute meta:invoke meta:search"
			if naming == NamingSafe {
				want = "meta_describe meta_execute meta_invoke meta_search"
			}
			if got := strings.Join(names, " "); got != want {
				t.Errorf("tools = %s, want %s", got, want)
			}
		})
	}
}

func TestMCPSearch(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	var out SearchOutput
	structured(t, f.call(t, "meta:search", map[string]any{"queries": []string{"add two numbers", "create a contact"}, "topK": 3}), &out)
	if out.TotalAvailableTools != 4 {
		t.Errorf("totalAvailableTools = %d, want 4", out.TotalAvailableTools)
	}
	names := map[string]SearchResult{}
	for _, r := range out.Tools {
		names[r.Name] = r
		if r.RelevanceScore <= 0 || r.RelevanceScore > 1 {
			t.Errorf("%s: relevanceScore %v not in (0,1]", r.Name, r.RelevanceScore)
		}
	}
	if r, ok := names["math:add"]; !ok || r.MatchedQueries[0] != "add two numbers" || r.AppID != "math" {
		t.Errorf("math:add missing or wrong: %+v", out.Tools)
	}
	if _, ok := names["crm:createContact"]; !ok {
		t.Errorf("crm:createContact missing: %+v", out.Tools)
	}

	// The earlier contract: single query, filter.appIds.
	structured(t, f.call(t, "meta:search", map[string]any{"query": "contacts", "filter": map[string]any{"appIds": []string{"crm"}}}), &out)
	for _, r := range out.Tools {
		if r.AppID != "crm" {
			t.Errorf("appIds filter let %s through", r.Name)
		}
	}

	// Warnings: excluded tool not found, no results, low relevance.
	structured(t, f.call(t, "meta:search", map[string]any{"queries": []string{"zebra xylophone"}, "excludeToolNames": []string{"nope:tool"}}), &out)
	kinds := map[string]Warning{}
	for _, w := range out.Warnings {
		kinds[w.Type] = w
	}
	if w := kinds["excluded_tool_not_found"]; len(w.AffectedTools) != 1 || w.AffectedTools[0] != "nope:tool" {
		t.Errorf("excluded_tool_not_found warning = %+v", out.Warnings)
	}
	if _, ok := kinds["no_results"]; !ok || len(out.Tools) != 0 {
		t.Errorf("want no_results and no tools, got %+v %+v", out.Warnings, out.Tools)
	}
	structured(t, f.call(t, "meta:search", map[string]any{"queries": []string{"echo the weather forecast for tomorrow in paris"}}), &out)
	kinds = map[string]Warning{}
	for _, w := range out.Warnings {
		kinds[w.Type] = w
	}
	if _, ok := kinds["low_relevance"]; !ok {
		t.Errorf("want low_relevance, got %+v (tools %+v)", out.Warnings, out.Tools)
	}
	// minRelevanceScore filters.
	structured(t, f.call(t, "meta:search", map[string]any{"queries": []string{"add two numbers"}, "minRelevanceScore": 0.99}), &out)
	if len(out.Tools) != 0 {
		t.Errorf("minRelevanceScore 0.99 kept %+v", out.Tools)
	}
}

func TestMCPSearchAndDescribeInvalidInput(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	cases := []struct {
		tool  string
		args  any
		field string
	}{
		{"meta:search", map[string]any{}, "queries"},
		{"meta:search", map[string]any{"queries": []string{""}}, "queries.0"},
		{"meta:search", map[string]any{"queries": "not a list"}, "queries"},
		{"meta:search", map[string]any{"queries": []string{"x"}, "topK": 0}, "topK"},
		{"meta:search", map[string]any{"queries": []string{"x"}, "topK": 101}, "topK"},
		{"meta:search", map[string]any{"queries": []string{"x"}, "minRelevanceScore": 2}, "minRelevanceScore"},
		{"meta:search", map[string]any{"queries": []string{"x"}, "bogus": 1}, "bogus"},
		{"meta:describe", map[string]any{}, "toolNames"},
		{"meta:describe", map[string]any{"toolNames": []string{""}}, "toolNames.0"},
		{"meta:describe", map[string]any{"toolNames": 3}, "toolNames"},
		{"meta:execute", map[string]any{"script": ""}, "script"},
		{"meta:invoke", map[string]any{"tool": "crm:listContacts"}, "input"},
		{"meta:invoke", map[string]any{"input": map[string]any{}}, "tool"},
	}
	for _, c := range cases {
		e := errorOf(t, f.call(t, c.tool, c.args))
		if e.Code != CodeValidationError || e.Field != c.field || e.Transient {
			t.Errorf("%s %v: got %+v, want VALIDATION_ERROR on %s, non-transient", c.tool, c.args, e, c.field)
		}
	}
}

// TestMCPSearchQueryLengthInCharacters: a query's limit is the maxLength
// meta:search's input schema advertises, 1000 characters (code points, as
// JSON Schema counts them), not 1000 bytes: a query of 400 CJK characters
// (1,200 bytes) was refused although its schema allowed it.
func TestMCPSearchQueryLengthInCharacters(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	for _, q := range []string{strings.Repeat("中", 400), strings.Repeat("é", MaxQueryLength), strings.Repeat("🙂", MaxQueryLength)} {
		if res := f.call(t, "meta:search", map[string]any{"queries": []string{q}}); res.IsError {
			t.Errorf("a query of %d characters, %d bytes: %s", len([]rune(q)), len(q), text(res))
		}
	}
	e := errorOf(t, f.call(t, "meta:search", map[string]any{"queries": []string{"x", strings.Repeat("é", MaxQueryLength+1)}}))
	if e.Code != CodeValidationError || e.Field != "queries.1" {
		t.Errorf("a query of 1001 characters: %+v", e)
	}
}

func TestMCPDescribe(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	var out DescribeOutput
	long := strings.Repeat("n", 100_000)
	structured(t, f.call(t, "meta:describe", map[string]any{"toolNames": []string{"crm:createContact", "crm:listContacts", "math:add", "meta:execute", "meta_search", "nope", long}}), &out)
	if strings.Join(out.NotFound, ",") != "meta:execute,meta_search,nope,"+long[:MaxEchoedNameBytes]+"…" {
		t.Errorf("notFound = %v", out.NotFound)
	}
	if len(out.Tools) != 3 {
		t.Fatalf("described %d tools", len(out.Tools))
	}
	byName := map[string]DescribeEntry{}
	for _, e := range out.Tools {
		byName[e.Name] = e
		if len(e.UsageExamples) == 0 || len(e.UsageExamples) > 5 {
			t.Errorf("%s: %d usage examples", e.Name, len(e.UsageExamples))
		}
		for _, ex := range e.UsageExamples {
			if !strings.Contains(ex.Code, e.Name) {
				t.Errorf("%s: example does not use the tool: %s", e.Name, ex.Code)
			}
		}
	}
	cc := byName["crm:createContact"]
	if cc.UsageExamples[0].Description != "declared" {
		t.Errorf("declared example not first: %+v", cc.UsageExamples)
	}
	// The default answer is compact: a signature, no JSON Schemas.
	if cc.InputSchema != nil || cc.OutputSchema != nil || !strings.Contains(cc.Signature, "function createContact(input: {") {
		t.Errorf("compact createContact: input %s, output %s, signature %q", cc.InputSchema, cc.OutputSchema, cc.Signature)
	}
	if !byName["crm:listContacts"].Annotations.ReadOnlyHint {
		t.Error("listContacts lost its readOnlyHint")
	}

	var full DescribeOutput
	structured(t, f.call(t, "meta:describe", map[string]any{"toolNames": []string{"crm:createContact", "crm:listContacts"}, "detail": "full"}), &full)
	byName = map[string]DescribeEntry{}
	for _, e := range full.Tools {
		byName[e.Name] = e
	}
	cc = byName["crm:createContact"]
	if string(cc.OutputSchema) == "null" || len(cc.InputSchema) == 0 || cc.Signature == "" {
		t.Errorf("full createContact: input %s, output %s, signature %q", cc.InputSchema, cc.OutputSchema, cc.Signature)
	}
	if string(byName["crm:listContacts"].OutputSchema) != "null" || !byName["crm:listContacts"].Annotations.ReadOnlyHint {
		t.Errorf("listContacts: outputSchema %s, readOnly %v", byName["crm:listContacts"].OutputSchema, byName["crm:listContacts"].Annotations.ReadOnlyHint)
	}
	res := f.call(t, "meta:describe", map[string]any{"toolNames": []string{"crm:createContact"}, "detail": "everything"})
	if !res.IsError {
		t.Error("an unknown detail was accepted")
	}
}

// TestDescribeGeneratedExamplesValidate runs every generated example of a
// tool through meta:execute: each must succeed, which proves its input
// literal validates against the schema.
func TestDescribeGeneratedExamplesRun(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	var out DescribeOutput
	structured(t, f.call(t, "meta:describe", map[string]any{"toolNames": []string{"crm:createContact", "crm:listContacts", "math:add", "math:echo"}, "detail": "full"}), &out)
	for _, e := range out.Tools {
		for _, ex := range e.UsageExamples {
			var res sandbox.Result
			structured(t, f.call(t, "meta:execute", map[string]any{"script": ex.Code}), &res)
			if res.Status != sandbox.StatusOK {
				t.Errorf("%s example %q: status %s %+v\n%s", e.Name, ex.Description, res.Status, res.Error, ex.Code)
			}
		}
	}
}

func TestMCPExecutePlanAcrossSources(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	script := `
const contact = await callTool("crm:createContact", {name: "Ada", email: "ada@example.com"});
const all = await callTool("crm:listContacts", {});
const sum = await callTool("math:add", {a: all.length, b: 40});
const echoed = await callTool("math:echo", {text: contact.name});
return {id: contact.id, count: all.length, sum: sum.sum, echoed, ctx: metaContext.tenant};`
	var res sandbox.Result
	structured(t, f.call(t, "meta:execute", map[string]any{"script": script, "context": map[string]any{"tenant": "t1"}}), &res)
	if res.Status != sandbox.StatusOK {
		t.Fatalf("status %s: %+v", res.Status, res.Error)
	}
	var got map[string]any
	json.Unmarshal(res.Result, &got)
	if got["id"] != "c1" || got["count"] != 2.0 || got["sum"] != 42.0 || got["echoed"] != "echo: Ada" || got["ctx"] != "t1" {
		t.Errorf("result = %s", res.Result)
	}
}

func TestMCPExecuteStatuses(t *testing.T) {
	f := newFixture(t, fixtureOptions{naming: NamingSafe})
	cases := []struct {
		name, script string
		allowed      []string
		status       sandbox.Status
		code         string
	}{
		{"syntax", "return {", nil, sandbox.StatusSyntaxError, sandbox.CodeSyntaxError},
		{"illegal", "return eval('1')", nil, sandbox.StatusIllegalAccess, ""},
		{"self reference spec name", `return await callTool("meta:search", {queries: ["x"]})`, nil, sandbox.StatusIllegalAccess, sandbox.CodeSelfReferenceBlocked},
		{"self reference safe name", `return await callTool("meta_search", {queries: ["x"]})`, nil, sandbox.StatusIllegalAccess, sandbox.CodeSelfReferenceBlocked},
		{"self reference computed", `const n = ["meta", "invoke"].join("_"); return await callTool(n, {})`, nil, sandbox.StatusIllegalAccess, sandbox.CodeSelfReferenceBlocked},
		{"runtime", "null.x", nil, sandbox.StatusRuntimeError, sandbox.CodeExecutionError},
		{"not found", `return await callTool("nope:tool", {})`, nil, sandbox.StatusToolError, sandbox.CodeToolNotFound},
		{"access denied", `return await callTool("crm:listContacts", {})`, []string{"math:add"}, sandbox.StatusToolError, sandbox.CodeAccessDenied},
		{"validation", `return await callTool("crm:createContact", {name: "x"})`, nil, sandbox.StatusToolError, CodeValidationError},
		{"timeout", "while (true) {}", nil, sandbox.StatusTimeout, sandbox.CodeTimeout},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := map[string]any{"script": c.script}
			if c.allowed != nil {
				args["allowedTools"] = c.allowed
			}
			var res sandbox.Result
			structured(t, f.call(t, "meta_execute", args), &res)
			if res.Status != c.status || (c.code != "" && (res.Error == nil || res.Error.Code != c.code)) {
				t.Errorf("got %s %+v, want %s %s", res.Status, res.Error, c.status, c.code)
			}
			if res.Error != nil && res.Error.Stack != "" {
				t.Errorf("stack not removed: %q", res.Error.Stack)
			}
		})
	}
	// throwOnError false: the failure is data, with a non-transient code.
	var res sandbox.Result
	structured(t, f.call(t, "meta_execute", map[string]any{"script": `const r = await callTool("crm:createContact", {name: 3, email: "a@b.c"}, {throwOnError: false}); return r;`}), &res)
	var r struct {
		Success bool
		Error   struct{ Code, Message string }
	}
	json.Unmarshal(res.Result, &r)
	if res.Status != sandbox.StatusOK || r.Success || r.Error.Code != CodeValidationError || !strings.Contains(r.Error.Message, "name") {
		t.Errorf("throwOnError false: %s %s", res.Status, res.Result)
	}
}

func TestMCPInvoke(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	// Output schema: structuredContent present, text is the JSON.
	res := f.call(t, "meta:invoke", map[string]any{"tool": "crm:createContact", "input": map[string]any{"name": "Ada", "email": "ada@example.com"}})
	var contact map[string]any
	structured(t, res, &contact)
	if contact["id"] != "c1" || !strings.Contains(text(res), `"c1"`) {
		t.Errorf("createContact: %s", text(res))
	}
	// Upstream text result: plain text, no structured content.
	res = f.call(t, "meta:invoke", map[string]any{"tool": "math:echo", "input": map[string]any{"text": "hi"}})
	if res.IsError || text(res) != "echo: hi" || res.StructuredContent != nil {
		t.Errorf("echo: %+v %q", res, text(res))
	}
	// Upstream structured result.
	res = f.call(t, "meta:invoke", map[string]any{"tool": "math:add", "input": map[string]any{"a": 1, "b": 2}})
	var sum map[string]any
	structured(t, res, &sum)
	if sum["sum"] != 3.0 {
		t.Errorf("add: %s", text(res))
	}
	// Unknown tool: isError, one text entry pointing to meta:search.
	res = f.call(t, "meta:invoke", map[string]any{"tool": "nope:tool", "input": map[string]any{}})
	if !res.IsError || len(res.Content) != 1 || !strings.Contains(text(res), "not found") || !strings.Contains(text(res), "meta:search") {
		t.Errorf("unknown tool: %+v %q", res, text(res))
	}
	// Validation error names the field and is non-transient.
	e := errorOf(t, f.call(t, "meta:invoke", map[string]any{"tool": "crm:createContact", "input": map[string]any{"name": "Ada", "email": 5}}))
	if e.Code != CodeValidationError || e.Field != "email" || e.Transient {
		t.Errorf("validation: %+v", e)
	}
	e = errorOf(t, f.call(t, "meta:invoke", map[string]any{"tool": "crm:createContact", "input": map[string]any{"name": "Ada"}}))
	if e.Code != CodeValidationError || e.Field != "email" {
		t.Errorf("missing field: %+v", e)
	}
	// Self reference, both spellings.
	for _, name := range []string{"meta:execute", "meta_execute"} {
		e = errorOf(t, f.call(t, "meta:invoke", map[string]any{"tool": name, "input": map[string]any{"script": "return 1"}}))
		if e.Code != CodeSelfReferenceBlocked {
			t.Errorf("invoke %s: %+v", name, e)
		}
	}
}

// TestUpstreamListChanged: a tool added on the upstream server reaches the
// index through notifications/tools/list_changed.
func TestUpstreamListChanged(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	for len(f.reloads) > 0 {
		<-f.reloads
	}
	mcp.AddTool(f.upstream, &mcp.Tool{Name: "multiply", Description: "Multiply two integers"},
		func(_ context.Context, _ *mcp.CallToolRequest, in struct{ A, B int }) (*mcp.CallToolResult, any, error) {
			return nil, map[string]int{"product": in.A * in.B}, nil
		})
	deadline := time.After(20 * time.Second)
	for {
		if _, ok := f.index.Lookup("math:multiply"); ok {
			break
		}
		select {
		case <-f.reloads:
		case <-deadline:
			t.Fatal("math:multiply never reached the index")
		}
	}
	var out SearchOutput
	structured(t, f.call(t, "meta:search", map[string]any{"queries": []string{"multiply numbers"}}), &out)
	if len(out.Tools) == 0 || out.Tools[0].Name != "math:multiply" {
		t.Errorf("search after list_changed: %+v", out.Tools)
	}
}

type denyAll struct{ calls []CallInfo }

func (d *denyAll) Check(_ context.Context, ci CallInfo) error {
	d.calls = append(d.calls, ci)
	if ci.MetaTool == MetaSearch {
		return &Error{Code: CodeRateLimit, Message: "rate limit of 1 per 1m exceeded for meta:search", Transient: true, RetryAfterSeconds: 60}
	}
	return nil
}

func TestMCPRateLimit(t *testing.T) {
	lim := &denyAll{}
	f := newFixture(t, fixtureOptions{limiter: lim, naming: NamingSafe})
	e := errorOf(t, f.call(t, "meta_search", map[string]any{"queries": []string{"x"}}))
	if e.Code != CodeRateLimit || !e.Transient || e.RetryAfterSeconds != 60 {
		t.Errorf("rate limit: %+v", e)
	}
	res := f.call(t, "meta_describe", map[string]any{"toolNames": []string{"math:add"}})
	if res.IsError {
		t.Errorf("describe limited: %s", text(res))
	}
	if len(lim.calls) != 2 || lim.calls[0].SessionID == "" || lim.calls[0].Header == nil {
		t.Errorf("limiter calls: %+v", lim.calls)
	}
}

// TestExecuteDiscovery: one meta:execute plan finds a tool with
// searchTools, reads its signature with describeTool and getTool, and calls
// it; allowedTools bounds what discovery answers.
func TestExecuteDiscovery(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	plan := `
const found = await searchTools("add two numbers", {topK: 3});
const tool = found[0].name;
const d = await describeTool(tool);
const g = getTool(tool);
const sum = await callTool(tool, {a: 2, b: 3});
return {tool, sig: d.signature, gsig: g.signature, desc: found[0].description, sum, none: await describeTool("nope")};`
	var res sandbox.Result
	structured(t, f.call(t, "meta:execute", map[string]any{"script": plan}), &res)
	if res.Status != sandbox.StatusOK {
		t.Fatalf("status %s: %+v", res.Status, res.Error)
	}
	var out struct {
		Tool, Sig, Gsig, Desc string
		Sum                   any
		None                  any
	}
	if err := json.Unmarshal(res.Result, &out); err != nil {
		t.Fatal(err)
	}
	if out.Tool != "math:add" || !strings.Contains(out.Sig, "function add(input:") || out.Sig != out.Gsig || out.None != nil || out.Desc == "" {
		t.Fatalf("plan result %s", res.Result)
	}

	structured(t, f.call(t, "meta:execute", map[string]any{"script": `return (await searchTools("add two numbers")).map((t) => t.name)`,
		"allowedTools": []string{"crm:listContacts"}}), &res)
	if res.Status != sandbox.StatusOK || strings.Contains(string(res.Result), "math:add") {
		t.Fatalf("allowedTools ignored by searchTools: %s %s", res.Status, res.Result)
	}
	structured(t, f.call(t, "meta:execute", map[string]any{"script": `return await searchTools("x", {topK: 0})`}), &res)
	if res.Status != sandbox.StatusToolError || res.Error.Code != "VALIDATION_ERROR" || !strings.Contains(res.Error.Message, "topK") {
		t.Fatalf("bad topK: %s %+v", res.Status, res.Error)
	}

	// A tool's validation error names each field once in the message a
	// plan catches ("email: input of crm:createContact: email: ..." before).
	structured(t, f.call(t, "meta:execute", map[string]any{"script": `try { await callTool("crm:createContact", {name: "Ada", email: 5}) } catch (e) { return e.message }`}), &res)
	var msg string
	if err := json.Unmarshal(res.Result, &msg); err != nil || !strings.HasPrefix(msg, "input of crm:createContact: ") || strings.Count(msg, "email") != 1 {
		t.Fatalf("validation message in a plan: %s %s", res.Status, res.Result)
	}
}

// limitsHidden is an engine that does not tell its limits (no
// sandbox.LimitsReporter).
type limitsHidden struct{ sandbox.Engine }

// TestExecuteScriptLimitIsTheEngines: meta:execute advertises and enforces
// the script size its engine takes (the secure preset's 64 KiB here), not
// its own larger bound, so a longer script is refused by the meta-tool
// with the limit named (VALIDATION_ERROR on script), not by the engine.
// Options.Limits lower it further; an engine that does not tell its limits
// leaves MaxScriptBytes.
func TestExecuteScriptLimitIsTheEngines(t *testing.T) {
	secure, _ := sandbox.Preset(sandbox.PresetSecure)
	cases := []struct {
		name    string
		options func(*Options)
		want    int
		// runs: a script of want bytes runs (the engine, not told, refuses
		// more than its 64 KiB).
		runs bool
	}{
		{"engine", nil, secure.MaxSourceBytes, true},
		{"options", func(o *Options) { o.Limits.MaxSourceBytes = 1000 }, 1000, true},
		{"untold", func(o *Options) { o.Engine = limitsHidden{o.Engine} }, MaxScriptBytes, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, fixtureOptions{options: c.options})
			if got := f.svc.ScriptLimit(); got != c.want {
				t.Fatalf("ScriptLimit %d, want %d", got, c.want)
			}
			res, err := f.session.ListTools(context.Background(), nil)
			if err != nil {
				t.Fatal(err)
			}
			var maxLength any
			for _, tl := range res.Tools {
				if tl.Name == MetaExecute {
					raw, _ := json.Marshal(tl.InputSchema)
					var s struct {
						Properties struct{ Script map[string]any }
					}
					json.Unmarshal(raw, &s)
					maxLength = s.Properties.Script["maxLength"]
				}
			}
			if maxLength != float64(c.want) {
				t.Errorf("advertised script maxLength %v, want %d", maxLength, c.want)
			}
			script := func(n int) string { return "return 1;" + strings.Repeat(" ", n-len("return 1;")) }
			if c.runs {
				var out struct{ Status string }
				structured(t, f.call(t, MetaExecute, map[string]any{"script": script(c.want)}), &out)
				if out.Status != "ok" {
					t.Errorf("script of %d bytes: status %s, want ok", c.want, out.Status)
				}
			}
			// The schema validator writes 65,536.
			limit := strconv.Itoa(c.want)
			e := errorOf(t, f.call(t, MetaExecute, map[string]any{"script": script(c.want + 1)}))
			if e.Code != CodeValidationError || e.Field != "script" || !strings.Contains(strings.ReplaceAll(e.Message, ",", ""), limit) {
				t.Errorf("MCP, script of %d bytes: %+v, want VALIDATION_ERROR on script naming %s", c.want+1, e, limit)
			}
			_, err = f.svc.Execute(context.Background(), ExecuteInput{Script: script(c.want + 1)})
			if me, ok := err.(*Error); !ok || me.Code != CodeValidationError || me.Field != "script" || !strings.Contains(me.Message, limit) {
				t.Errorf("Execute, script of %d bytes: %v, want VALIDATION_ERROR on script naming %s", c.want+1, err, limit)
			}
		})
	}
}
