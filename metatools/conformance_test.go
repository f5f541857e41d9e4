package metatools

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// mcpRevisions are the MCP revisions the go-sdk speaks. The official JSON
// schema of each is vendored as testdata/mcpschema/<rev>/schema.json (see
// testdata/mcpschema/README.md for its source).
var mcpRevisions = []string{"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"}

// mcpSchema validates JSON values against the definitions of one revision's
// official schema.
type mcpSchema struct {
	rev      string
	url      string
	defs     string // "definitions" (draft-07 revisions) or "$defs" (2020-12)
	compiler *jsonschema.Compiler
	compiled map[string]*jsonschema.Schema
}

func loadMCPSchema(t *testing.T, rev string) *mcpSchema {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "mcpschema", rev, "schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("schema %s: %v", rev, err)
	}
	m := &mcpSchema{rev: rev, url: "https://modelcontextprotocol.io/schema/" + rev + ".json", defs: "definitions",
		compiler: jsonschema.NewCompiler(), compiled: map[string]*jsonschema.Schema{}}
	if _, ok := doc.(map[string]any)["$defs"]; ok {
		m.defs = "$defs"
	}
	m.compiler.AssertFormat()
	if err := m.compiler.AddResource(m.url, doc); err != nil {
		t.Fatal(err)
	}
	return m
}

func (m *mcpSchema) has(def string) bool {
	_, err := m.schema(def)
	return err == nil
}

func (m *mcpSchema) schema(def string) (*jsonschema.Schema, error) {
	if s, ok := m.compiled[def]; ok {
		return s, nil
	}
	s, err := m.compiler.Compile(m.url + "#/" + m.defs + "/" + def)
	if err != nil {
		return nil, err
	}
	m.compiled[def] = s
	return s, nil
}

// check validates raw against the named definition.
func (m *mcpSchema) check(def string, raw json.RawMessage) error {
	s, err := m.schema(def)
	if err != nil {
		return fmt.Errorf("schema %s has no usable %s: %w", m.rev, def, err)
	}
	return validateRaw(s, raw)
}

func validateRaw(s *jsonschema.Schema, raw json.RawMessage) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return err
	}
	return s.Validate(v)
}

// compileToolSchema compiles a tool's input or output schema the way a
// client does before using it: a JSON Schema of 2020-12 unless it names
// another dialect.
func compileToolSchema(raw json.RawMessage) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("tool-schema.json", doc); err != nil {
		return nil, err
	}
	return c.Compile("tool-schema.json")
}

// mcpRecorder is an HTTP transport that keeps every JSON-RPC message the
// server answers a POST with, with the method and params of the request
// each answer belongs to. Nothing is changed on the way.
type mcpRecorder struct {
	rt      http.RoundTripper
	mu      sync.Mutex
	pending map[string]rpcRequest // by id
	answers []rpcAnswer
	header  http.Header // of the last request, to send raw requests in the same session
}

type rpcRequest struct {
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
}

type rpcAnswer struct {
	req rpcRequest // zero for a server-initiated message
	raw json.RawMessage
}

func newMCPRecorder() *mcpRecorder {
	return &mcpRecorder{rt: http.DefaultTransport, pending: map[string]rpcRequest{}}
}

func (r *mcpRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPost && req.Body != nil {
		body, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		var msg struct {
			ID json.RawMessage `json:"id"`
			rpcRequest
		}
		if json.Unmarshal(body, &msg) == nil && len(msg.ID) > 0 && msg.Method != "" {
			r.mu.Lock()
			r.pending[string(msg.ID)] = msg.rpcRequest
			r.header = req.Header.Clone()
			r.mu.Unlock()
		}
	}
	resp, err := r.rt.RoundTrip(req)
	if err != nil || req.Method != http.MethodPost {
		return resp, err
	}
	// A POST's answer ends with the response to it, so it can be read
	// whole here (the standalone GET stream is left alone).
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	var msgs []json.RawMessage
	switch ct {
	case "application/json":
		msgs = append(msgs, json.RawMessage(body))
	case "text/event-stream":
		msgs = sseData(body)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range msgs {
		var id struct {
			ID json.RawMessage `json:"id"`
		}
		_ = json.Unmarshal(m, &id)
		r.answers = append(r.answers, rpcAnswer{req: r.pending[string(id.ID)], raw: m})
	}
	return resp, nil
}

// sseData returns the data of each event of a text/event-stream body.
func sseData(body []byte) []json.RawMessage {
	var out []json.RawMessage
	var data []string
	flush := func() {
		if len(data) > 0 {
			out = append(out, json.RawMessage(strings.Join(data, "\n")))
			data = nil
		}
	}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			flush()
		case strings.HasPrefix(line, "data:"):
			data = append(data, strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
		}
	}
	flush()
	return out
}

// rawCall posts one JSON-RPC request in the recorded session, the way the
// client would send it (for revision 2026-07-28 with the per-request _meta
// and Mcp-Method/Mcp-Name headers), for requests the client API cannot make.
func (r *mcpRecorder) rawCall(t *testing.T, url, rev string, id int, method string, params map[string]any) {
	t.Helper()
	r.mu.Lock()
	header := r.header.Clone()
	r.mu.Unlock()
	header.Del("Content-Length")
	if rev >= "2026-07-28" {
		params["_meta"] = map[string]any{
			"io.modelcontextprotocol/protocolVersion":    rev,
			"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "raw", "version": "1"},
			"io.modelcontextprotocol/clientCapabilities": map[string]any{},
		}
		header.Set("Mcp-Method", method)
		header.Del("Mcp-Name")
		if name, ok := params["name"].(string); ok {
			header.Set("Mcp-Name", name)
		}
	}
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = header
	resp, err := (&http.Client{Transport: r, Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}

// switchLimiter denies every meta-tool call while on, with RATE_LIMIT.
type switchLimiter struct{ on atomic.Bool }

func (l *switchLimiter) Check(context.Context, CallInfo) error {
	if l.on.Load() {
		return &Error{Code: CodeRateLimit, Message: "rate limit of 1 per 1m exceeded", Transient: true, RetryAfterSeconds: 60}
	}
	return nil
}

// failingTools is a source whose one tool always fails.
func failingTools() *StaticSource {
	return &StaticSource{
		List: []Tool{{Name: "ops:fail", AppID: "ops", Description: "A tool that always fails",
			InputSchema: json.RawMessage(`{"type":"object"}`)}},
		Handlers: map[string]func(context.Context, json.RawMessage) (json.RawMessage, error){
			"ops:fail": func(context.Context, json.RawMessage) (json.RawMessage, error) {
				return nil, errors.New("the backend said no")
			},
		},
	}
}

// TestMCPConformance checks everything the meta-tools' MCP server sends
// against the official MCP schema of every revision the go-sdk speaks, for
// both naming options: the handshake (initialize, or server/discover from
// 2026-07-28), tools/list (and every tool's input and output schema, which
// must compile), tools/call results of the four meta-tools (success and
// each error class), and protocol errors. It also applies the rules the
// TypeScript SDK enforces beyond the schema: a tool with an outputSchema
// returns structuredContent that validates against it.
func TestMCPConformance(t *testing.T) {
	schemas := map[string]*mcpSchema{}
	for _, rev := range mcpRevisions {
		schemas[rev] = loadMCPSchema(t, rev)
	}
	for _, rev := range mcpRevisions {
		for _, naming := range []Naming{NamingSpec, NamingSafe} {
			t.Run(rev+"/"+string(naming), func(t *testing.T) {
				rec := newMCPRecorder()
				lim := &switchLimiter{}
				f := newFixture(t, fixtureOptions{naming: naming, limiter: lim, extra: []ToolSource{failingTools()},
					protocolVersion: rev, transport: rec})
				n := driveAllMetaTools(t, f, rev, naming, lim, rec)
				// Answers follow the revision the server agreed to.
				got := negotiatedRevision(t, rec)
				if got != rev {
					t.Logf("asked for %s, the server answered with %s: checked against %s", rev, got, got)
				}
				checkRecorded(t, schemas, got, rec, naming, n)
			})
		}
	}
}

// driveAllMetaTools makes every kind of call a client can make to the
// meta-tools; the answers are checked from the recording.
// It returns the number of tools/call results to expect.
func driveAllMetaTools(t *testing.T, f *fixture, rev string, naming Naming, lim *switchLimiter, rec *mcpRecorder) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := f.session.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	search, describe := naming.ExposedName(MetaSearch), naming.ExposedName(MetaDescribe)
	execute, invoke := naming.ExposedName(MetaExecute), naming.ExposedName(MetaInvoke)
	script := func(s string, allowed ...string) map[string]any {
		m := map[string]any{"script": s}
		if allowed != nil {
			m["allowedTools"] = allowed
		}
		return m
	}
	calls := []struct {
		tool    string
		args    any
		isError bool
	}{
		{search, map[string]any{"queries": []string{"create a contact", "add numbers"}}, false},
		{search, map[string]any{"queries": []string{"zzqx wvvy"}, "excludeToolNames": []string{"nope"}}, false}, // warnings
		{search, map[string]any{"query": "contacts", "filter": map[string]any{"appIds": []string{"crm"}}}, false},
		{search, map[string]any{}, true},                    // VALIDATION_ERROR
		{search, map[string]any{"topK": "ten"}, true},       // wrong type
		{search, map[string]any{"queries": []int{1}}, true}, // wrong item type
		{describe, map[string]any{"toolNames": []string{"crm:createContact", "crm:listContacts", "math:add", "math:echo", "ops:fail", "nope:tool", "meta:search"}}, false},
		{describe, map[string]any{"toolNames": []string{}}, true},
		{describe, map[string]any{"bogus": 1}, true},
		{execute, script(`const a = await callTool("math:add", {a: 1, b: 2}); const c = await callTool("crm:createContact", {name: "Ada", email: "ada@example.com"}); return {a, c}`), false},
		{execute, script(`return "text"`), false},
		{execute, script(`return [1, 2]`), false},
		{execute, script(`return`), false},
		{execute, script("return {"), false},                                                  // syntax_error
		{execute, script("return eval('1')"), false},                                          // illegal_access
		{execute, script(`return await callTool("` + search + `", {queries: ["x"]})`), false}, // SELF_REFERENCE_BLOCKED
		{execute, script("null.x"), false},                                                    // runtime_error
		{execute, script(`return await callTool("nope:tool", {})`), false},                    // TOOL_NOT_FOUND
		{execute, script(`return await callTool("crm:listContacts", {})`, "math:add"), false}, // ACCESS_DENIED
		{execute, script(`return await callTool("crm:createContact", {name: "x"})`), false},   // VALIDATION_ERROR
		{execute, script(`return await callTool("ops:fail", {})`), false},                     // TOOL_EXECUTION_ERROR
		{execute, script(`const r = await callTool("ops:fail", {}, {throwOnError: false}); return r`), false},
		{execute, script("while (true) {}"), false}, // timeout
		{execute, map[string]any{"script": ""}, true},
		{execute, map[string]any{"script": "return 1", "context": 5}, true},
		{invoke, map[string]any{"tool": "crm:createContact", "input": map[string]any{"name": "Ada", "email": "ada@example.com"}}, false}, // object, output schema
		{invoke, map[string]any{"tool": "math:add", "input": map[string]any{"a": 1, "b": 2}}, false},                                     // upstream structured
		{invoke, map[string]any{"tool": "math:echo", "input": map[string]any{"text": "hi"}}, false},                                      // upstream text
		{invoke, map[string]any{"tool": "crm:listContacts", "input": map[string]any{}}, false},                                           // array result
		{invoke, map[string]any{"tool": "nope:tool", "input": map[string]any{}}, true},                                                   // NOT_FOUND
		{invoke, map[string]any{"tool": "crm:createContact", "input": map[string]any{"name": "Ada", "email": 5}}, true},                  // VALIDATION_ERROR
		{invoke, map[string]any{"tool": "crm:createContact"}, true},                                                                      // input missing
		{invoke, map[string]any{"tool": execute, "input": map[string]any{"script": "return 1"}}, true},                                   // SELF_REFERENCE_BLOCKED
		{invoke, map[string]any{"tool": "ops:fail", "input": map[string]any{}}, true},                                                    // TOOL_EXECUTION_ERROR
	}
	for _, c := range calls {
		res, err := f.session.CallTool(ctx, &mcp.CallToolParams{Name: c.tool, Arguments: c.args})
		if err != nil {
			t.Fatalf("%s %v: %v", c.tool, c.args, err)
		}
		if res.IsError != c.isError {
			t.Errorf("%s %v: isError %v, want %v: %s", c.tool, c.args, res.IsError, c.isError, text(res))
		}
	}
	// RATE_LIMIT from every meta-tool.
	lim.on.Store(true)
	for _, name := range []string{search, describe, execute, invoke} {
		res, err := f.session.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: map[string]any{}})
		if err != nil {
			t.Fatal(err)
		}
		if e := errorOf(t, res); e.Code != CodeRateLimit {
			t.Errorf("%s limited: %+v", name, e)
		}
	}
	lim.on.Store(false)
	// Protocol errors and the other requests clients send by habit: an
	// unknown tool, arguments that are not an object, methods of
	// capabilities the server does not offer.
	if _, err := f.session.CallTool(ctx, &mcp.CallToolParams{Name: "no_such_tool", Arguments: map[string]any{}}); err == nil {
		t.Error("tools/call of an unknown tool: no error")
	}
	rec.rawCall(t, f.url, rev, 9001, "tools/call", map[string]any{"name": search, "arguments": []int{1}})
	methods := []string{"resources/list", "resources/templates/list", "prompts/list"}
	if rev < "2026-07-28" {
		methods = append(methods, "ping") // gone in 2026-07-28
	}
	for i, m := range methods {
		rec.rawCall(t, f.url, rev, 9010+i, m, map[string]any{})
	}
	return len(calls) + 4 + 1
}

// checkRecorded validates every recorded answer.
func checkRecorded(t *testing.T, schemas map[string]*mcpSchema, rev string, rec *mcpRecorder, naming Naming, calls int) {
	t.Helper()
	schema := schemas[rev]
	if schema == nil {
		t.Fatalf("the server answered with revision %s, which has no vendored schema", rev)
	}
	resultDef := map[string]string{
		"initialize":               "InitializeResult",
		"server/discover":          "DiscoverResult",
		"tools/list":               "ListToolsResult",
		"tools/call":               "CallToolResult",
		"ping":                     "EmptyResult",
		"resources/list":           "ListResourcesResult",
		"resources/templates/list": "ListResourceTemplatesResult",
		"prompts/list":             "ListPromptsResult",
	}
	errorDef := "JSONRPCError"
	if !schema.has(errorDef) {
		errorDef = "JSONRPCErrorResponse"
	}
	outputSchemas := map[string]*jsonschema.Schema{}
	seen := map[string]int{}
	rec.mu.Lock()
	answers := append([]rpcAnswer(nil), rec.answers...)
	rec.mu.Unlock()
	for _, a := range answers {
		what := fmt.Sprintf("answer to %s %s: %s", a.req.Method, a.req.Params, truncate(string(a.raw), 600))
		schema := schema
		if a.req.Method == "server/discover" {
			// The probe of a 2026-07-28 client, answered in that revision
			// even by a server that then settles on an older one.
			schema = schemas["2026-07-28"]
		}
		if err := schema.check("JSONRPCMessage", a.raw); err != nil {
			t.Errorf("%s\nis not a JSONRPCMessage of %s: %v", what, schema.rev, err)
			continue
		}
		var msg struct {
			Result json.RawMessage `json:"result"`
			Error  json.RawMessage `json:"error"`
			Method string          `json:"method"`
		}
		if err := json.Unmarshal(a.raw, &msg); err != nil {
			t.Errorf("%s: %v", what, err)
			continue
		}
		switch {
		case msg.Method != "":
			seen["server message"]++
		case msg.Error != nil:
			seen["error"]++
			if err := schema.check(errorDef, a.raw); err != nil {
				t.Errorf("%s\nis not a %s of %s: %v", what, errorDef, schema.rev, err)
			}
		default:
			def, ok := resultDef[a.req.Method]
			if !ok {
				t.Errorf("%s: no schema definition mapped for this method", what)
				continue
			}
			seen[a.req.Method]++
			if err := schema.check(def, msg.Result); err != nil {
				t.Errorf("%s\nis not a %s of %s: %v", what, def, schema.rev, err)
				continue
			}
			switch a.req.Method {
			case "tools/list":
				checkToolList(t, msg.Result, outputSchemas, naming)
			case "tools/call":
				checkCallResult(t, a.req.Params, msg.Result, outputSchemas, what)
			}
		}
	}
	// The test proves nothing if the calls did not happen.
	handshake := "initialize"
	if !schema.has("InitializeResult") {
		handshake = "server/discover"
	}
	if seen[handshake] != 1 || seen["tools/list"] != 1 || seen["tools/call"] != calls || seen["error"] < 1 {
		t.Errorf("recorded answers %v: want one %s, one tools/list, %d tools/call results and the errors", seen, handshake, calls)
	}
}

// negotiatedRevision is the protocol version of the handshake's answer.
func negotiatedRevision(t *testing.T, rec *mcpRecorder) string {
	t.Helper()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, a := range rec.answers {
		if a.req.Method != "initialize" && a.req.Method != "server/discover" {
			continue
		}
		var m struct {
			Result struct {
				ProtocolVersion   string   `json:"protocolVersion"`
				SupportedVersions []string `json:"supportedVersions"`
			} `json:"result"`
		}
		if err := json.Unmarshal(a.raw, &m); err != nil {
			t.Fatal(err)
		}
		if m.Result.ProtocolVersion != "" {
			return m.Result.ProtocolVersion
		}
		if len(m.Result.SupportedVersions) > 0 {
			return m.Result.SupportedVersions[0]
		}
	}
	t.Fatal("no handshake answer recorded")
	return ""
}

// checkToolList: four meta-tools with the configured names, every schema a
// JSON Schema a client can compile, output schemas kept for the results.
func checkToolList(t *testing.T, result json.RawMessage, outputSchemas map[string]*jsonschema.Schema, naming Naming) {
	t.Helper()
	var list struct {
		Tools []struct {
			Name         string          `json:"name"`
			InputSchema  json.RawMessage `json:"inputSchema"`
			OutputSchema json.RawMessage `json:"outputSchema"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(result, &list); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, m := range []string{MetaSearch, MetaDescribe, MetaExecute, MetaInvoke} {
		want[naming.ExposedName(m)] = true
	}
	for _, tool := range list.Tools {
		if !want[tool.Name] {
			t.Errorf("tools/list: unexpected tool %q", tool.Name)
		}
		delete(want, tool.Name)
		if _, err := compileToolSchema(tool.InputSchema); err != nil {
			t.Errorf("%s: inputSchema does not compile: %v", tool.Name, err)
		}
		if len(tool.OutputSchema) > 0 {
			s, err := compileToolSchema(tool.OutputSchema)
			if err != nil {
				t.Errorf("%s: outputSchema does not compile: %v", tool.Name, err)
				continue
			}
			outputSchemas[tool.Name] = s
		}
	}
	if len(want) > 0 {
		t.Errorf("tools/list: missing %v", want)
	}
}

// checkCallResult applies the client-side rule of the TypeScript SDK: a
// successful result of a tool with an outputSchema has structuredContent,
// valid against it.
func checkCallResult(t *testing.T, params, result json.RawMessage, outputSchemas map[string]*jsonschema.Schema, what string) {
	t.Helper()
	var p struct {
		Name string `json:"name"`
	}
	var r struct {
		IsError           bool            `json:"isError"`
		StructuredContent json.RawMessage `json:"structuredContent"`
	}
	if err := json.Unmarshal(params, &p); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(result, &r); err != nil {
		t.Fatal(err)
	}
	s, ok := outputSchemas[p.Name]
	if r.IsError || !ok {
		return
	}
	if len(r.StructuredContent) == 0 {
		t.Errorf("%s\nhas no structuredContent although %s declares an outputSchema", what, p.Name)
		return
	}
	if err := validateRaw(s, r.StructuredContent); err != nil {
		t.Errorf("%s\nstructuredContent does not match the outputSchema of %s: %v", what, p.Name, err)
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
