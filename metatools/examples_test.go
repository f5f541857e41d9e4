package metatools

import (
	"context"
	"testing"
	"unicode/utf8"
)

// TestGeneratedExamplesCoverCatalog: generated example inputs must validate
// against the schemas the catalog builds from a large real document; count
// how many of the 334 SendGrid actions get generated examples.
func TestGeneratedExamplesCoverCatalog(t *testing.T) {
	src, _ := catalogTools(t, sendgridDoc(t))
	ix, err := NewIndex([]ToolSource{src}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ix.Reload(context.Background())
	s := NewService(ix, nil)
	var names []string
	for _, tool := range ix.Tools() {
		names = append(names, tool.Name)
	}
	with, total := 0, 0
	for start := 0; start < len(names); start += MaxDescribeNames {
		out, err := s.Describe(context.Background(), DescribeInput{ToolNames: names[start:min(start+MaxDescribeNames, len(names))]})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range out.Tools {
			total++
			if len(e.UsageExamples) > 0 {
				with++
			} else if testing.Verbose() {
				t.Logf("no example for %s", e.Name)
			}
			if len(e.UsageExamples) > maxExamples {
				t.Errorf("%s: %d examples", e.Name, len(e.UsageExamples))
			}
		}
	}
	t.Logf("%d of %d catalog actions have generated usage examples", with, total)
	if float64(with) < 0.95*float64(total) {
		t.Errorf("only %d of %d actions have examples", with, total)
	}
}

// TestExampleStringLengths: a generated string meets its schema's
// minLength and maxLength in characters (code points), as JSON Schema
// counts them, stays valid UTF-8, and a minLength past any sensible
// example is not padded to.
func TestExampleStringLengths(t *testing.T) {
	for _, c := range []struct {
		schema   map[string]any
		min, max int
	}{
		{map[string]any{"minLength": 14.0}, 14, 1 << 30},
		{map[string]any{"maxLength": 11.0}, 0, 11},
		{map[string]any{"minLength": 3.0, "maxLength": 3.0}, 3, 3},
	} {
		v := exampleString("größe", c.schema)
		if n := utf8.RuneCountInString(v); !utf8.ValidString(v) || n < c.min || n > c.max {
			t.Errorf("%v: %q, %d characters", c.schema, v, n)
		}
	}
	// Before, this padded one byte at a time towards 1e9: the test hung.
	if v := exampleString("name", map[string]any{"minLength": 1e9}); len(v) > maxExampleString {
		t.Errorf("minLength 1e9: padded to %d bytes", len(v))
	}
	// Before, a maxLength past the int range made int(m) negative and the
	// cut panicked (slice bounds out of range).
	for _, m := range []float64{1e19, 1e300} {
		if v := exampleString("name", map[string]any{"maxLength": m}); v != "example-name" {
			t.Errorf("maxLength %g: %q", m, v)
		}
	}
}

// TestExampleArrayLengths: a generated array has its schema's minItems of
// items up to maxExampleItems, no more: a minItems of 1e18 made the
// generator panic (makeslice), and one of 1e9 asked for 16 GB. Arrays
// nested past the depth where objects stop get one item each, so that
// nested minItems do not multiply without end.
func TestExampleArrayLengths(t *testing.T) {
	str := map[string]any{"type": "string"}
	for minItems, want := range map[float64]int{3: 3, maxExampleItems: maxExampleItems, 1e18: maxExampleItems} {
		v, _ := exampleValue("xs", map[string]any{"type": "array", "minItems": minItems, "items": str}, 0).([]any)
		if len(v) != want {
			t.Errorf("minItems %g: %d items, want %d", minItems, len(v), want)
		}
	}
	nested := str
	for range 8 {
		nested = map[string]any{"type": "array", "minItems": 2.0, "items": nested}
	}
	count := 0
	var walk func(v any)
	walk = func(v any) {
		if a, ok := v.([]any); ok {
			for _, e := range a {
				walk(e)
			}
			return
		}
		count++
	}
	walk(exampleValue("xs", nested, 0))
	if count != 1<<5 { // two items at depths 0 to 4, one below
		t.Errorf("eight nested arrays of two: %d strings, want %d", count, 1<<5)
	}
}

// FuzzUsageExamples: a tool's input schema comes from a source the gateway
// does not control (an OpenAPI document, an upstream MCP server); whatever
// it holds, the example generator answers, without a panic or a loop.
func FuzzUsageExamples(f *testing.F) {
	for _, s := range []string{
		`{"type":"object","required":["id"],"properties":{"id":{"type":"string"}}}`,
		`{"type":"object","required":["xs"],"properties":{"xs":{"type":"array","minItems":1e18,"items":{"type":"string","minLength":1e9}}}}`,
		`{"type":"object","required":["n","s"],"properties":{"n":{"type":"integer","minimum":-1e308,"maximum":1e308},"s":{"maxLength":3}}}`,
		`{"type":"object","required":["s"],"properties":{"s":{"type":"string","maxLength":18446744073709551615}}}`,
		`{"type":"object","required":["o"],"properties":{"o":{"oneOf":[{"allOf":[{"type":"object","required":["a"],"properties":{"a":{"$ref":"#"}}}]}]}}}`,
		`{"type":"object","required":["d"],"properties":{"d":{"type":["null","string"],"format":"date-time","pattern":"^[a-z]+$"}}}`,
		`not json`,
	} {
		f.Add("svc:create_thing", []byte(s))
	}
	f.Fuzz(func(t *testing.T, name string, schema []byte) {
		tl := Tool{Name: name, InputSchema: schema}
		sc := compileSchema(schema)
		for _, full := range []bool{true, false} {
			if n := len(usageExamples(tl, sc, full)); n > maxExamples {
				t.Fatalf("%d examples", n)
			}
		}
	})
}
