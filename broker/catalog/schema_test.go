package catalog

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/codemode-gateway/caddy-codemode/internal/tool"
)

// TestSchemaExpansionIsBounded builds a document whose body schema is a
// chain of 30 component schemas, each with two properties referencing the
// next: fully inlined it would have 2^30 nodes. The converter must stop at
// its bounds, deterministically.
func TestSchemaExpansionIsBounded(t *testing.T) {
	var comps []string
	for i := 0; i < 30; i++ {
		comps = append(comps, fmt.Sprintf(`"L%d": {"type": "object", "properties": {"a": {"$ref": "#/components/schemas/L%d"}, "b": {"$ref": "#/components/schemas/L%d"}}}`, i, i+1, i+1))
	}
	comps = append(comps, `"L30": {"type": "string"}`)
	doc := []byte(`{"openapi": "3.0.0", "info": {"title": "t", "version": "1"},
		"paths": {"/x": {"post": {"operationId": "x",
			"requestBody": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/L0"}}}},
			"responses": {"200": {"description": "ok", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/L0"}}}}}}}},
		"components": {"schemas": {` + strings.Join(comps, ",") + `}}}`)
	s, err := newSourceState(Source{Name: "t", SpecURL: "https://example.test/openapi.json"})
	if err != nil {
		t.Fatal(err)
	}
	first, err := buildOperations(s, doc)
	if err != nil {
		t.Fatal(err)
	}
	in, out := first[0].action.InputSchema, first[0].action.OutputSchema
	if !strings.Contains(string(in), notExpandedLabel) || !strings.Contains(string(out), notExpandedLabel) {
		t.Fatal("no cut in a 2^30 schema")
	}
	if len(in) > 400<<10 || len(out) > 100<<10 {
		t.Fatalf("schemas too large: input %d bytes, output %d bytes", len(in), len(out))
	}
	for i := 0; i < 3; i++ {
		again, err := buildOperations(s, doc)
		if err != nil {
			t.Fatal(err)
		}
		if string(again[0].action.InputSchema) != string(in) || string(again[0].action.OutputSchema) != string(out) {
			t.Fatal("cut schemas differ between builds")
		}
	}
}

// TestSelfReferencingAllOf: a schema whose one allOf is a $ref to itself
// made schemaType loop for ever, and with it the catalog's refresh (found
// by FuzzBuildOperations). A parameter of that schema now has no type; one
// whose allOf leads to a declared type still has it.
func TestSelfReferencingAllOf(t *testing.T) {
	doc := []byte(`{"openapi":"3.0.3","info":{"title":"t","version":"1"},"paths":{"/x":{"get":{"operationId":"x",
		"parameters":[{"name":"loop","in":"query","schema":{"$ref":"#/components/schemas/Loop"}},
		{"name":"n","in":"query","schema":{"allOf":[{"$ref":"#/components/schemas/N"}]}}],
		"responses":{"200":{"description":"ok"}}}}},
		"components":{"schemas":{"Loop":{"allOf":[{"$ref":"#/components/schemas/Loop"}]},"N":{"allOf":[{"type":"integer"}]}}}}`)
	s, err := newSourceState(Source{Name: "t", SpecURL: "https://example.test/openapi.json"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan []*operation, 1)
	go func() {
		ops, err := buildOperations(s, doc)
		if err != nil {
			t.Error(err)
		}
		done <- ops
	}()
	var ops []*operation
	select {
	case ops = <-done:
	case <-time.After(30 * time.Second): // a backstop, not a speed bound: before, it never returned
		t.Fatal("buildOperations did not return")
	}
	if len(ops) != 1 || len(ops[0].params) != 2 {
		t.Fatalf("ops %+v", ops)
	}
	for _, p := range ops[0].params {
		if want := map[string]string{"loop": "", "n": kindOf("integer")}[p.name]; p.kind != want {
			t.Errorf("%s: kind %q, want %q", p.name, p.kind, want)
		}
	}
}

// TestConvertedSchemaCompiles: keywords a document gets wrong for JSON
// Schema (a type that is none of its names, a multipleOf of 0, a required
// name twice) made the whole converted input schema fail to compile, so
// the action's input went unvalidated (found by FuzzBuildOperations, which
// keeps its input in testdata/fuzz). They are left out now; the rest of the
// schema still validates.
func TestConvertedSchemaCompiles(t *testing.T) {
	doc := []byte(`{"openapi":"3.0.3","info":{"title":"t","version":"1"},"paths":{"/x":{"post":{"operationId":"x",
		"parameters":[{"name":"a","in":"query","schema":{"oneOf":[{"type":"A"}]}},{"name":"m","in":"query","schema":{"type":"number","multipleOf":0}}],
		"requestBody":{"content":{"application/json":{"schema":{"type":"object","required":["k","k"],"properties":{"k":{"type":["string","file","string"]}}}}}},
		"responses":{"200":{"description":"ok"}}}}}}`)
	s, err := newSourceState(Source{Name: "t", SpecURL: "https://example.test/openapi.json"})
	if err != nil {
		t.Fatal(err)
	}
	ops, err := buildOperations(s, doc)
	if err != nil {
		t.Fatal(err)
	}
	v := ops[0].validator()
	if v == nil {
		_, err := tool.CompileSchema(ops[0].action.InputSchema)
		t.Fatalf("input schema %s does not compile: %v", ops[0].action.InputSchema, err)
	}
	if _, verr := v.Validate([]byte(`{"m":"x","body":{"k":1}}`), nil); verr == nil || strings.Join(verr.Fields, ",") != "body.k,m" {
		t.Errorf("wrong types accepted or misnamed: %v", verr)
	}
}

// FuzzBuildOperations: an OpenAPI document comes from a URL an operator
// points at, served by someone else. Whatever it holds (any JSON or YAML,
// recursive or dangling $refs, Swagger 2.0), the catalog builds actions
// from it or answers an error: no panic, no hang, and every action's input
// schema is one the tool-input validator can take. The second input is a
// component schema put into a fixed document, where it is a parameter's,
// the body's and the answer's schema, so that the fuzzer spends its time
// on schemas rather than on the document around them.
func FuzzBuildOperations(f *testing.F) {
	shop, err := os.ReadFile("testdata/shop.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(shop, []byte(`{"type":"object"}`))
	for _, d := range [][2]string{
		{`{"openapi":"3.0.0","info":{"title":"t","version":"1"},"paths":{"/a/{id}":{"parameters":[{"name":"id","in":"path","required":true,"schema":{"type":"string"}}],
		"get":{"parameters":[{"name":"q","in":"query","content":{"application/json":{"schema":{"$ref":"#/components/schemas/N"}}}}],"responses":{"200":{"description":"ok"}}}}},
		"components":{"schemas":{"N":{"type":"object","properties":{"next":{"$ref":"#/components/schemas/N"}},"allOf":[{"$ref":"#/components/schemas/N"}]}}}}`,
			`{"type":"object","required":["a"],"properties":{"a":{"$ref":"#/components/schemas/S"},"b":{"type":"array","items":{"$ref":"#/components/schemas/S"},"minItems":18446744073709551615}}}`},
		{`{"swagger":"2.0","info":{"title":"t","version":"1"},"host":"api.example.com","basePath":"/v1","paths":{"/f":{"post":{"consumes":["multipart/form-data"],
		"parameters":[{"name":"file","in":"formData","type":"file"},{"name":"b","in":"body","schema":{"$ref":"#/definitions/B"}}],"responses":{"200":{"description":"ok"}}}}},
		"definitions":{"B":{"type":"array","items":{"$ref":"#/definitions/B"}}}}`,
			`{"oneOf":[{"type":"string","pattern":"^(a|b)+$","format":"uuid","maxLength":18446744073709551615},{"type":"number","multipleOf":1e-300,"exclusiveMinimum":true,"minimum":0}],"nullable":true,"enum":[null,"a",1]}`},
		{"openapi: 3.1.0\ninfo: {title: t, version: '1'}\nservers: [{url: 'https://{h}.example.com', variables: {h: {default: x, enum: [x]}}}]\npaths:\n  /x:\n    put:\n      requestBody: {content: {application/x-www-form-urlencoded: {schema: {type: object, properties: {a: {type: [string, 'null']}}}}}}\n      responses: {default: {description: d}}\n",
			`{"allOf":[{"$ref":"#/components/schemas/S"}],"not":{"anyOf":[{"additionalProperties":{"$ref":"#/components/schemas/S"}}]},"discriminator":{"propertyName":"k","mapping":{"a":"#/components/schemas/S"}}}`},
		{`{"openapi":"3.0.0","paths":{"/x":{"get":{"responses":{"200":{"$ref":"#/components/responses/R"}}}}},"components":{"responses":{"R":{"$ref":"#/components/responses/R"}}}}`, `{"$ref":"#/components/schemas/S"}`},
		{`{"openapi":"2.0"}`, `[]`},
	} {
		f.Add([]byte(d[0]), []byte(d[1]))
	}
	f.Fuzz(func(t *testing.T, doc, schema []byte) {
		build(t, doc)
		build(t, []byte(`{"openapi":"3.0.3","info":{"title":"t","version":"1"},"paths":{"/s/{p}":{"post":{"operationId":"s",
			"parameters":[{"name":"p","in":"path","required":true,"schema":{"$ref":"#/components/schemas/S"}},{"name":"q","in":"query","schema":{"$ref":"#/components/schemas/S"}}],
			"requestBody":{"content":{"application/json":{"schema":{"$ref":"#/components/schemas/S"}}}},
			"responses":{"200":{"description":"ok","content":{"application/json":{"schema":{"$ref":"#/components/schemas/S"}}}}}}}},
			"components":{"schemas":{"S":`+string(schema)+`}}}`))
	})
}

// build is one FuzzBuildOperations case: actions or an error, and every
// action's input schema compiles unless its pattern is a regular
// expression Go cannot run.
func build(t *testing.T, doc []byte) {
	s, err := newSourceState(Source{Name: "t", SpecURL: "https://example.test/openapi.json"})
	if err != nil {
		t.Fatal(err)
	}
	ops, err := buildOperations(s, doc)
	if err != nil {
		return
	}
	hashOperations(ops)
	for _, op := range ops {
		if op.validator() == nil {
			if _, err := tool.CompileSchema(op.action.InputSchema); err != nil && !strings.Contains(err.Error(), "regex") {
				t.Fatalf("%s: input schema %s does not compile: %v", op.action.Name, op.action.InputSchema, err)
			}
		}
	}
}
