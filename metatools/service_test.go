package metatools

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"

	"github.com/codemode-gateway/caddy-codemode/metatools/search"
)

func TestSearchMLUnreachable(t *testing.T) {
	hs := httptest.NewServer(http.NotFoundHandler())
	url := hs.URL
	hs.Close()
	strategy, err := search.NewEmbeddingStrategy(&search.EmbeddingClient{URL: url, Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	ix, err := NewIndex([]ToolSource{registeredTools()}, &IndexOptions{Strategy: strategy})
	if err != nil {
		t.Fatal(err)
	}
	ix.Reload(context.Background())
	_, err = NewService(ix, nil).Search(context.Background(), SearchInput{Queries: []string{"contacts"}})
	me, ok := err.(*Error)
	if !ok || me.Code != CodeSearchUnavailable || !me.Transient {
		t.Fatalf("err = %#v", err)
	}
	if _, err := search.NewEmbeddingStrategy(&search.EmbeddingClient{URL: url}); err == nil {
		t.Error("embeddings without a model accepted")
	}
}

func TestIsMetaToolName(t *testing.T) {
	for name, want := range map[string]bool{
		"meta:search": true, "meta:anything": true, "meta_search": true, "META_INVOKE": true, "meta.execute": true,
		"meta-describe": true, "metadata:get": false, "meta_data": false, "crm:createContact": false, "meta": false,
	} {
		if got := IsMetaToolName(name); got != want {
			t.Errorf("IsMetaToolName(%q) = %v", name, got)
		}
	}
}

// TestSearchMLStrategy ranks with embeddings from a local OpenAI-compatible
// endpoint (vectors: letter counts of the stemmed words, enough for similar
// texts to be close) and checks that document vectors are fetched once.
func TestSearchMLStrategy(t *testing.T) {
	var batches atomic.Int64
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Input []string }
		json.NewDecoder(r.Body).Decode(&req)
		batches.Add(1)
		var data []map[string]any
		for i, in := range req.Input {
			v := make([]float64, 26)
			for _, term := range search.Terms(in) {
				for _, c := range term {
					if c >= 'a' && c <= 'z' {
						v[c-'a']++
					}
				}
			}
			data = append(data, map[string]any{"index": i, "embedding": v})
		}
		json.NewEncoder(w).Encode(map[string]any{"data": data})
	}))
	defer hs.Close()
	strategy, err := search.NewEmbeddingStrategy(&search.EmbeddingClient{URL: hs.URL + "/v1", Model: "letters"})
	if err != nil {
		t.Fatal(err)
	}
	ix, err := NewIndex([]ToolSource{registeredTools()}, &IndexOptions{Strategy: strategy})
	if err != nil {
		t.Fatal(err)
	}
	ix.Reload(context.Background())
	s := NewService(ix, nil)
	out, err := s.Search(context.Background(), SearchInput{Queries: []string{"create contact"}, TopK: new(1)})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Tools) != 1 || out.Tools[0].Name != "crm:createContact" || out.Tools[0].RelevanceScore > 1 {
		t.Fatalf("ml search: %+v", out.Tools)
	}
	before := batches.Load()
	if _, err := s.Search(context.Background(), SearchInput{Queries: []string{"list contacts"}}); err != nil {
		t.Fatal(err)
	}
	if got := batches.Load() - before; got != 1 {
		t.Errorf("second search made %d embedding requests, want 1 (the query only)", got)
	}
}

func TestExecuteEngineErrors(t *testing.T) {
	ix, _ := NewIndex([]ToolSource{registeredTools()}, nil)
	ix.Reload(context.Background())
	_, err := NewService(ix, nil).Execute(context.Background(), ExecuteInput{Script: "return 1"})
	if me, ok := err.(*Error); !ok || me.Code != CodeEngineError || !me.Transient {
		t.Errorf("no engine: %#v", err)
	}
	engine := sandbox.NewInProcess(nil)
	engine.Close()
	_, err = NewService(ix, &Options{Engine: engine}).Execute(context.Background(), ExecuteInput{Script: "return 1"})
	if me, ok := err.(*Error); !ok || me.Code != sandbox.CodePoolDisposed || !me.Transient {
		t.Errorf("closed engine: %#v", err)
	}
	res := errorResult(err)
	if !res.IsError || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, `"code":"POOL_DISPOSED"`) {
		t.Errorf("error result: %+v", res)
	}
}

// TestExecuteContextTooDeep: a context nested deeper than the sandbox
// takes is the caller's mistake, VALIDATION_ERROR on context, not the
// engine's MESSAGE_INVALID marked transient (a client told to retry it
// would fail the same way each time).
func TestExecuteContextTooDeep(t *testing.T) {
	ix, _ := NewIndex([]ToolSource{registeredTools()}, nil)
	ix.Reload(context.Background())
	engine := sandbox.NewInProcess(nil)
	defer engine.Close()
	svc := NewService(ix, &Options{Engine: engine})
	nest := func(n int) json.RawMessage {
		return json.RawMessage(strings.Repeat(`{"a":`, n) + "1" + strings.Repeat("}", n))
	}
	_, err := svc.Execute(context.Background(), ExecuteInput{Script: "return 1", Context: nest(sandbox.MaxContextDepth + 1)})
	if me, ok := err.(*Error); !ok || me.Code != CodeValidationError || me.Field != "context" || me.Transient || !strings.Contains(me.Message, "64 levels") {
		t.Errorf("context nested %d deep: %#v", sandbox.MaxContextDepth+1, err)
	}
	res, err := svc.Execute(context.Background(), ExecuteInput{Script: "let d = 0; for (let c = metaContext; typeof c === 'object'; c = c.a) d++; return d", Context: nest(sandbox.MaxContextDepth)})
	if err != nil || res.Status != sandbox.StatusOK || string(res.Result) != "64" {
		t.Errorf("context nested %d deep: %v %+v", sandbox.MaxContextDepth, err, res)
	}
}

// principalEngine records the principal of each script it runs.
type principalEngine struct {
	sandbox.Engine
	got []string
}

func (e *principalEngine) Execute(ctx context.Context, req sandbox.Request, h sandbox.Host) (*sandbox.Result, error) {
	e.got = append(e.got, req.Principal)
	return e.Engine.Execute(ctx, req, h)
}

// TestExecutePrincipal: a meta:execute script reaches the sandbox with its
// caller's principal (the broker's naming), so MCP callers get fair shares
// of the pool each instead of sharing one anonymous queue.
func TestExecutePrincipal(t *testing.T) {
	ix, _ := NewIndex([]ToolSource{registeredTools()}, nil)
	ix.Reload(context.Background())
	inner := sandbox.NewInProcess(nil)
	defer inner.Close()
	e := &principalEngine{Engine: inner}
	s := NewService(ix, &Options{Engine: e})
	for _, ci := range []CallInfo{
		{UserID: "ada", TenantID: "t1", ClientIP: "10.0.0.1"},
		{ClientIP: "10.0.0.2"},
		{},
	} {
		if _, err := s.execute(context.Background(), ExecuteInput{Script: "return 1"}, &host{s: s, ci: &ci}); err != nil {
			t.Fatal(err)
		}
	}
	if want := []string{"user:t1/ada", "ip:10.0.0.2", ""}; !slices.Equal(e.got, want) {
		t.Errorf("principals %q, want %q", e.got, want)
	}
}

// TestMetaToolSchemasPortable: the advertised schemas are valid JSON
// Schemas of type object without a root combinator (rejected by several
// model APIs in tool parameters).
func TestMetaToolSchemasPortable(t *testing.T) {
	for name, raw := range map[string]json.RawMessage{
		"search": searchInputSchema, "describe": describeInputSchema, "execute": executeInputSchema(MaxScriptBytes), "invoke": invokeInputSchema,
		"search out": searchOutputSchema, "describe out": describeOutputSchema, "execute out": executeOutputSchema,
	} {
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if m["type"] != "object" {
			t.Errorf("%s: type %v", name, m["type"])
		}
		for _, k := range []string{"anyOf", "oneOf", "allOf"} {
			if _, ok := m[k]; ok {
				t.Errorf("%s: root %s", name, k)
			}
		}
		if c := compileSchema(raw); c.err != nil {
			t.Errorf("%s: %v", name, c.err)
		}
		checkSchemaDialect(t, name, m)
	}
}

// checkSchemaDialect walks a schema for what a client mapping tool schemas
// onto a single-type dialect (Gemini's OpenAPI subset; MCP Inspector 2's
// --strict reports both) cannot read: a type given as an array, and a
// subschema with no keyword at all, which constrains nothing.
func checkSchemaDialect(t *testing.T, path string, s map[string]any) {
	t.Helper()
	if _, ok := s["type"].([]any); ok {
		t.Errorf("%s: type is an array %v (use anyOf of single types)", path, s["type"])
	}
	keyword := false
	for k := range s {
		if k != "description" && k != "title" && k != "default" && k != "examples" {
			keyword = true
		}
	}
	if !keyword {
		t.Errorf("%s: no validation keyword (accepts any value)", path)
	}
	for _, k := range []string{"properties", "patternProperties"} {
		props, _ := s[k].(map[string]any)
		for name, sub := range props {
			if sub, ok := sub.(map[string]any); ok {
				checkSchemaDialect(t, path+"."+name, sub)
			}
		}
	}
	for _, k := range []string{"items", "additionalProperties", "not"} {
		if sub, ok := s[k].(map[string]any); ok {
			checkSchemaDialect(t, path+"."+k, sub)
		}
	}
	for _, k := range []string{"anyOf", "oneOf", "allOf"} {
		subs, _ := s[k].([]any)
		for i, sub := range subs {
			if sub, ok := sub.(map[string]any); ok {
				checkSchemaDialect(t, fmt.Sprintf("%s.%s[%d]", path, k, i), sub)
			}
		}
	}
}

// scoredStrategy ranks every query with the same hits.
type scoredStrategy []search.Hit

func (s scoredStrategy) NewRanker([]search.Doc) search.Ranker { return s }

func (s scoredStrategy) Rank(context.Context, string, int, func(int) bool) ([]search.Hit, error) {
	return append([]search.Hit(nil), s...), nil
}

// TestSearchOrdersByExactScore: results come in the ranker's order, not by
// the score rounded for the answer with near-ties broken by name (which made
// the order depend on what tools are called).
func TestSearchOrdersByExactScore(t *testing.T) {
	for name, hits := range map[string]scoredStrategy{
		"near tie":  {{Doc: 1, Score: 0.5004}, {Doc: 0, Score: 0.5001}},
		"exact tie": {{Doc: 1, Score: 0.5}, {Doc: 0, Score: 0.5}},
	} {
		ix, err := NewIndex([]ToolSource{registeredTools()}, &IndexOptions{Strategy: hits})
		if err != nil {
			t.Fatal(err)
		}
		ix.Reload(context.Background())
		out, err := NewService(ix, nil).Search(context.Background(), SearchInput{Queries: []string{"contacts"}})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Tools) != 2 || out.Tools[0].Name != "crm:listContacts" || out.Tools[0].RelevanceScore != 0.5 || out.Tools[1].RelevanceScore != 0.5 {
			t.Errorf("%s: %+v, want crm:listContacts first, both scored 0.5", name, out.Tools)
		}
	}
}
