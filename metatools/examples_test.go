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
}
