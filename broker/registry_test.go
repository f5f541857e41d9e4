package broker

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"
)

func TestToolDefinitionValidate(t *testing.T) {
	def := ToolDefinition{
		Name: "t:x",
		Parameters: map[string]ParameterDef{
			"name":  {Type: TypeString, Description: "n", Required: true},
			"count": {Type: TypeInteger, Description: "c", Default: 3.0},
			"ratio": {Type: TypeNumber, Description: "r"},
			"flag":  {Type: TypeBoolean, Description: "f"},
			"obj":   {Type: TypeObject, Description: "o"},
			"list":  {Type: TypeArray, Description: "l"},
			"mode":  {Type: TypeString, Description: "m", Enum: []any{"a", "b"}},
		},
	}
	reg := NewToolRegistry()
	reg.Register(def)
	d := reg.Get("t:x")
	tests := []struct {
		name    string
		input   string
		wantErr string // substring of the VALIDATION_ERROR message; "" means valid
		check   func(t *testing.T, args map[string]any)
	}{
		{"defaults applied", `{"name":"a"}`, "", func(t *testing.T, a map[string]any) {
			if a["count"] != 3.0 {
				t.Errorf("count = %v, want default 3", a["count"])
			}
		}},
		{"null takes default", `{"name":"a","count":null}`, "", func(t *testing.T, a map[string]any) {
			if a["count"] != 3.0 {
				t.Errorf("count = %v", a["count"])
			}
		}},
		{"numbers are float64", `{"name":"a","ratio":1.5,"list":[1,2]}`, "", func(t *testing.T, a map[string]any) {
			if a["ratio"] != 1.5 || a["list"].([]any)[1] != 2.0 {
				t.Errorf("args = %v", a)
			}
		}},
		{"extra fields pass", `{"name":"a","other":1}`, "", nil},
		{"missing required", `{}`, `missing required property: name`, nil},
		{"empty input", ``, `missing required property: name`, nil},
		{"wrong type string", `{"name":5}`, `name: got number, want string`, nil},
		{"integer not whole", `{"name":"a","count":1.5}`, `count: got number, want integer`, nil},
		{"boolean", `{"name":"a","flag":"yes"}`, `flag: got string, want boolean`, nil},
		{"object", `{"name":"a","obj":[]}`, `obj: got array, want object`, nil},
		{"array", `{"name":"a","list":{}}`, `list: got object, want array`, nil},
		{"enum", `{"name":"a","mode":"c"}`, `mode: value must be one of 'a', 'b'`, nil},
		{"not an object", `[1]`, `input must be a JSON object, got array`, nil},
		{"bad json", `{`, `input is not valid JSON`, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args, err := d.Validate(json.RawMessage(tc.input))
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				if tc.check != nil {
					tc.check(t, args)
				}
				return
			}
			var te *sandbox.ToolError
			if !errors.As(err, &te) || te.Code != CodeValidationError || !strings.Contains(te.Message, tc.wantErr) {
				t.Fatalf("err = %v, want VALIDATION_ERROR containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestToolDefinitionSchemaOnly(t *testing.T) {
	reg := NewToolRegistry()
	reg.Register(ToolDefinition{Name: "s:x", InputSchema: json.RawMessage(`{"type":"object","properties":{"id":{"type":"string"}},"required":["id"]}`)})
	d := reg.Get("s:x")
	if _, err := d.Validate(json.RawMessage(`{"id":1}`)); err == nil || !strings.Contains(err.Error(), `id: got number, want string`) {
		t.Fatalf("err = %v", err)
	}
	// Nested requirements and bounds are enforced too (they were not when
	// the registry checked the top level only), with every fault named.
	reg.Register(ToolDefinition{Name: "s:nested", InputSchema: json.RawMessage(`{"type":"object","required":["order"],
		"properties":{"order":{"type":"object","required":["sku","qty"],"properties":{"sku":{"type":"string"},
		"qty":{"type":"integer","minimum":1},"gift":{"type":"boolean","default":false}}}}}`)})
	n := reg.Get("s:nested")
	if _, err := n.Validate(json.RawMessage(`{"order":{"qty":0}}`)); err == nil ||
		err.Error() != "VALIDATION_ERROR: missing required property: order.sku; order.qty: minimum: got 0, want 1" {
		t.Fatalf("nested: err = %v", err)
	}
	args, err := n.Validate(json.RawMessage(`{"order":{"sku":"a","qty":2}}`))
	if err != nil || args["order"].(map[string]any)["gift"] != false {
		t.Fatalf("nested default: %v %v", args, err)
	}
	if string(d.Schema()) != `{"type":"object","properties":{"id":{"type":"string"}},"required":["id"]}` {
		t.Fatalf("schema = %s", d.Schema())
	}
}

func TestToolRegistry(t *testing.T) {
	reg := NewToolRegistry()
	changes := 0
	reg.OnChange(func() { changes++ })
	for _, d := range DemoTools() {
		reg.Register(d)
	}
	if changes != 5 {
		t.Errorf("OnChange called %d times, want 5", changes)
	}
	var names []string
	for _, d := range reg.List() {
		names = append(names, d.Name)
	}
	if got := strings.Join(names, ","); got != "client:prompt,kv:get,kv:set,math:add,text:upper" {
		t.Errorf("List = %s", got)
	}
	if reg.Get("nope") != nil {
		t.Error("Get(unknown) != nil")
	}
	var schema map[string]any
	if err := json.Unmarshal(reg.Get("math:add").Schema(), &schema); err != nil {
		t.Fatal(err)
	}
	if req := schema["required"].([]any); len(req) != 1 || req[0] != "a" {
		t.Errorf("required = %v", schema["required"])
	}
	doc := reg.GetDocumentation()
	for _, want := range []string{"## math:add", "`a` (number, required): First addend.", "`b` (number, optional, default 0)", "callTool(\"math:add\"", "## client:prompt"} {
		if !strings.Contains(doc, want) {
			t.Errorf("documentation lacks %q:\n%s", want, doc)
		}
	}
	for _, bad := range []ToolDefinition{
		{Name: ""},
		{Name: "x", Parameters: map[string]ParameterDef{"p": {Type: "date"}}},
		{Name: "x", Parameters: map[string]ParameterDef{"p": {}}},
		{Name: "x", InputSchema: json.RawMessage(`{`)},
	} {
		if err := reg.Add(bad); err == nil {
			t.Errorf("Add(%+v) succeeded", bad)
		}
	}
}
