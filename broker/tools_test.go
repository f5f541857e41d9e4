package broker

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/codemode-gateway/caddy-codemode/broker/catalog"
	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"
)

const petsDoc = `{
  "openapi": "3.0.3",
  "info": {"title": "pets", "version": "1"},
  "paths": {
    "/pets/{id}": {
      "get": {
        "operationId": "getPet",
        "summary": "Get a pet",
        "tags": ["pets"],
        "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}],
        "responses": {"200": {"description": "ok", "content": {"application/json": {"schema": {"type": "object"}}}}}
      }
    }
  }
}`

// newCatalog serves petsDoc and its one operation on a real socket and
// returns a started catalog with it as service "pets".
func newCatalog(t *testing.T) *catalog.Catalog {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /openapi.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(petsDoc))
	})
	mux.HandleFunc("GET /pets/{id}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"id": r.PathValue("id"), "name": "Rex"})
	})
	base := newServer(t, mux)
	c, err := catalog.New([]catalog.Source{{Name: "pets", SpecURL: base + "/openapi.json", BaseURL: base}}, &catalog.Options{PollInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func TestCatalogActionsAsTools(t *testing.T) {
	cat := newCatalog(t)
	b, srv := newTestBroker(t, func(o *BrokerOptions) { o.Catalog = cat })

	code, _, body := do(t, http.MethodGet, srv.URL+"/code/actions", nil, nil)
	var resp catalog.CatalogResponse
	if err := json.Unmarshal(body, &resp); err != nil || code != 200 {
		t.Fatalf("actions: %d %s", code, body)
	}
	if len(resp.Actions) != 1 || resp.Actions[0].Name != "pets_getPet" || resp.Actions[0].Service != "pets" ||
		len(resp.Services) != 1 || resp.Services[0].ActionCount != 1 || resp.Services[0].LastUpdated == "" || resp.Version == "" {
		t.Errorf("actions body = %s", body)
	}

	evs, err := collect(t, b, `const p = await callTool("pets_getPet", {id: "7"}); const t = getTool("pets_getPet"); return {name: p.name, id: p.id, described: t.description}`, ExecuteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r := evs[len(evs)-1].Payload.(*ResultPayload); string(r.Result) != `{"name":"Rex","id":"7","described":"Get a pet"}` {
		t.Errorf("result = %s", r.Result)
	}
	evs, _ = collect(t, b, `return await callTool("pets_getPet", {})`, ExecuteOptions{})
	if p, ok := evs[len(evs)-1].Payload.(*ErrorPayload); !ok || p.Error.Code != catalog.CodeValidationError {
		t.Errorf("missing path parameter: %+v", evs[len(evs)-1].Payload)
	}
}

// TestMetaToolsAPI covers what the meta-tools use: ListTools, LookupTool,
// InvokeTool and ToolHost.
func TestMetaToolsAPI(t *testing.T) {
	cat := newCatalog(t)
	b, _ := newTestBroker(t, func(o *BrokerOptions) { o.Catalog = cat })
	var names []string
	for _, s := range b.ListTools() {
		names = append(names, s.Name+"/"+s.Source)
		if len(s.InputSchema) == 0 || !json.Valid(s.InputSchema) {
			t.Errorf("%s: input schema %q", s.Name, s.InputSchema)
		}
	}
	if got := strings.Join(names, ","); got != "client:prompt/registry,kv:get/registry,kv:set/registry,math:add/registry,text:upper/registry,pets_getPet/catalog" {
		t.Errorf("ListTools = %s", got)
	}
	spec, ok := b.LookupTool("client:prompt")
	if !ok || !spec.CallerAnswered {
		t.Errorf("client:prompt spec = %+v", spec)
	}
	spec, ok = b.LookupTool("pets_getPet")
	if !ok || spec.Service != "pets" || spec.Annotations == nil || !*spec.Annotations.ReadOnlyHint {
		t.Errorf("pets_getPet spec = %+v", spec)
	}
	if _, ok := b.LookupTool("nope"); ok {
		t.Error("LookupTool(nope) found")
	}

	ctx := context.Background()
	out, err := b.InvokeTool(ctx, "math:add", json.RawMessage(`{"a":1}`), nil)
	if err != nil || string(out) != `{"sum":1}` {
		t.Errorf("InvokeTool math:add = %s, %v", out, err)
	}
	out, err = b.InvokeTool(ctx, "pets_getPet", json.RawMessage(`{"id":"9"}`), &InvokeOptions{SessionID: "mcp-1"})
	if err != nil || !strings.Contains(string(out), `"id":"9"`) {
		t.Errorf("InvokeTool pets_getPet = %s, %v", out, err)
	}
	for name, want := range map[string]string{"nope": CodeToolNotFound, "client:prompt": CodeToolNotCallable, "math:add": CodeValidationError} {
		_, err := b.InvokeTool(ctx, name, json.RawMessage(`{"a":"x","question":"q"}`), nil)
		var te *sandbox.ToolError
		if !errors.As(err, &te) || te.Code != want {
			t.Errorf("InvokeTool %s: %v, want %s", name, err, want)
		}
	}

	res, err := testEngine().Execute(ctx, sandbox.Request{Code: `return (await callTool("text:upper", {text: "x"})).text`}, b.ToolHost(&InvokeOptions{SessionID: "mcp-2"}))
	if err != nil || res.Status != sandbox.StatusOK || string(res.Result) != `"X"` {
		t.Errorf("ToolHost: %+v, %v", res, err)
	}

	doc := b.GetDocumentation()
	for _, want := range []string{"## math:add", "## pets_getPet", "- `id` (string, required)"} {
		if !strings.Contains(doc, want) {
			t.Errorf("documentation lacks %q:\n%s", want, doc)
		}
	}

	changed := 0
	b.OnToolsChange(func() { changed++ })
	b.Tools().Register(ToolDefinition{Name: "new:tool"})
	if changed != 1 {
		t.Errorf("OnToolsChange called %d times", changed)
	}
}
