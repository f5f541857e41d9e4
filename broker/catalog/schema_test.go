package catalog

import (
	"fmt"
	"strings"
	"testing"
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
