package tool

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestValidateNamesEveryFault: one clean line naming every missing,
// unknown or wrong field, the first of them as Field, defaults applied,
// nested fields as dotted paths.
func TestValidateNamesEveryFault(t *testing.T) {
	s, err := CompileSchema(json.RawMessage(`{"type":"object","required":["owner","repo","body"],"additionalProperties":false,
	"properties":{"owner":{"type":"string"},"repo":{"type":"string"},"per_page":{"type":"integer","maximum":100,"default":30},
	"body":{"type":"object","required":["title"],"properties":{"title":{"type":"string"},"state":{"enum":["open","closed"],"default":"open"},
	  "labels":{"type":"array","items":{"type":"string"}}}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct{ in, out, field, msg string }{
		{`{"owner":"a"}`, "", "repo", "missing required properties: repo, body"},
		{`{"owner":1,"repo":"r","body":{"title":"t"}}`, "", "owner", "owner: got number, want string"},
		{`{"owner":"a","repo":"r","per_page":"x","body":{"title":1,"state":"x","labels":["a",2]},"zz":1}`, "", "zz",
			`unknown property: zz; body.labels.1: got number, want string; body.state: value must be one of 'open', 'closed'; body.title: got number, want string; per_page: got string, want integer`},
		{`{"owner":"a","repo":"r","per_page":500,"body":{}}`, "", "body.title", "missing required property: body.title; per_page: maximum: got 500, want 100"},
		{`[1]`, "", "input", "input must be a JSON object, got array"},
		{`{"owner":"a","repo":"r","per_page":null,"body":{"title":"t"}}`, `{"body":{"state":"open","title":"t"},"owner":"a","per_page":30,"repo":"r"}`, "", ""},
	}
	for _, c := range cases {
		out, verr := s.Validate(json.RawMessage(c.in), nil)
		if c.msg == "" {
			if verr != nil || string(out) != c.out {
				t.Errorf("%s: got %s, %v; want %s", c.in, out, verr, c.out)
			}
			continue
		}
		if verr == nil {
			t.Errorf("%s: accepted as %s", c.in, out)
			continue
		}
		if verr.Code != CodeValidationError || verr.Field != c.field || verr.Message != c.msg || strings.Contains(verr.Message, "\n") {
			t.Errorf("%s:\n got field %q message %q\nwant field %q message %q", c.in, verr.Field, verr.Message, c.field, c.msg)
		}
	}
}

// TestSchemaRefusesExternalReferences: a tool's schema cannot make the
// gateway read a file or fetch a URL.
func TestSchemaRefusesExternalReferences(t *testing.T) {
	for _, ref := range []string{"file:///etc/passwd", "http://127.0.0.1:1/schema.json", "https://example.com/s.json#/x"} {
		if _, err := CompileSchema(json.RawMessage(`{"type":"object","properties":{"a":{"$ref":"` + ref + `"}}}`)); err == nil {
			t.Errorf("$ref %s compiled", ref)
		}
	}
	// Local references work.
	s, err := CompileSchema(json.RawMessage(`{"$defs":{"n":{"type":"integer"}},"type":"object","properties":{"a":{"$ref":"#/$defs/n"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, verr := s.Validate(json.RawMessage(`{"a":"x"}`), nil); verr == nil || verr.Field != "a" {
		t.Errorf("local $ref not enforced: %v", verr)
	}
}

func TestValidateNoUnknown(t *testing.T) {
	s, err := CompileSchema(json.RawMessage(`{"type":"object","properties":{"a":{"type":"string"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, verr := s.Validate(json.RawMessage(`{"a":"x","b":1}`), nil); verr != nil {
		t.Errorf("additional property refused without NoUnknown: %v", verr)
	}
	if _, verr := s.Validate(json.RawMessage(`{"a":"x","b":1}`), &ValidateOptions{NoUnknown: true}); verr == nil || verr.Message != "unknown property: b" {
		t.Errorf("NoUnknown: %v", verr)
	}
}

// TestValidateCombinators: a value failing anyOf, oneOf or not is said in
// words a caller can act on, not as "'oneOf' failed, subschemas 0, 1
// matched" (seen calling a public catalog's operations).
func TestValidateCombinators(t *testing.T) {
	s, err := CompileSchema(json.RawMessage(`{"type":"object","properties":{
	 "body":{"oneOf":[{"type":"object","properties":{"a":{"type":"string"}}},{"type":"object","properties":{"b":{"type":"string"}}}]},
	 "id":{"anyOf":[{"type":"string"},{"type":"integer"}]},
	 "pick":{"oneOf":[{"type":"string"},{"type":"integer"}]},
	 "name":{"type":"string","not":{"const":"root"}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	for in, want := range map[string]string{
		`{"body":{"a":"x","b":"y"}}`: "body: matches 2 of the allowed shapes (oneOf: 1 and 2) and must match exactly one; give only the fields of one",
		`{"id":true}`:                "id: matches none of the allowed shapes (anyOf)",
		`{"pick":1.5}`:               "pick: matches none of the allowed shapes (oneOf)",
		`{"name":"root"}`:            "name: matches a shape it must not (not)",
	} {
		_, verr := s.Validate(json.RawMessage(in), nil)
		if verr == nil || verr.Message != want {
			t.Errorf("%s: got %v, want %q", in, verr, want)
		}
	}
}

// TestValidateStringLengthsInCharacters: minLength and maxLength of a tool
// input count characters (code points), as JSON Schema says, not bytes nor
// UTF-16 units: this validator is the one of meta:invoke, of callTool in
// scripts and of the broker's tools and catalog operations.
func TestValidateStringLengthsInCharacters(t *testing.T) {
	s, err := CompileSchema(json.RawMessage(`{"type":"object","properties":{"s":{"type":"string","minLength":2,"maxLength":3}}}`))
	if err != nil {
		t.Fatal(err)
	}
	for in, ok := range map[string]bool{
		`"ab"`: true, `"abc"`: true, `"éüö"`: true, `"中文字"`: true, `"🙂🙂🙂"`: true, `"\u00e9\u00fc"`: true,
		`"a"`: false, `"é"`: false, `"🙂"`: false, `"abcd"`: false, `"éüöä"`: false, `"🙂🙂🙂🙂"`: false,
	} {
		_, verr := s.Validate(json.RawMessage(`{"s":`+in+`}`), nil)
		if (verr == nil) != ok {
			t.Errorf("%s: accepted %v, want %v (%v)", in, verr == nil, ok, verr)
		}
	}
}

// FuzzSchemaValidate: a schema comes from a tool source (an OpenAPI
// document, an upstream MCP server) and an input from a model's script;
// neither may panic or hang the validator. A compiled schema either
// accepts the input, answering a JSON object, or answers a
// VALIDATION_ERROR that names the fields at fault.
func FuzzSchemaValidate(f *testing.F) {
	for _, c := range [][2]string{
		{`{"type":"object","required":["a"],"properties":{"a":{"type":"string","default":"x"},"b":{"type":"object","properties":{"c":{"default":{"d":[1]}}}}}}`, `{"b":{}}`},
		{`{"oneOf":[{"required":["a"]},{"required":["b"]}],"additionalProperties":false}`, `{"a":1,"b":2,"c":3}`},
		{`{"$defs":{"n":{"type":"object","properties":{"next":{"$ref":"#/$defs/n"}}}},"$ref":"#/$defs/n"}`, `{"next":{"next":{"next":null}}}`},
		{`{"properties":{"n":{"multipleOf":1e-300,"maximum":1e308}}}`, `{"n":1e308}`},
		{`{"properties":{"s":{"pattern":"^(a+)+$","format":"email","minLength":1e18}}}`, `{"s":"aaaa!"}`},
		{`{"$ref":"https://example.com/s.json"}`, `{}`},
		{``, `null`},
		{`true`, `[1]`},
	} {
		f.Add([]byte(c[0]), []byte(c[1]))
	}
	f.Fuzz(func(t *testing.T, schema, input []byte) {
		s, err := CompileSchema(schema)
		if err != nil {
			return
		}
		for _, opts := range []*ValidateOptions{nil, {NoUnknown: true}} {
			out, verr := s.Validate(input, opts)
			if verr != nil {
				// Field may be "": a property named "" is valid JSON.
				if verr.Code != CodeValidationError || verr.Message == "" || len(verr.Fields) == 0 {
					t.Fatalf("error %+v", verr)
				}
				continue
			}
			var obj map[string]any
			if err := json.Unmarshal(out, &obj); err != nil || obj == nil {
				t.Fatalf("accepted input answers %q (%v)", out, err)
			}
		}
	})
}
