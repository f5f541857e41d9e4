package metatools

import (
	"context"
	"testing"
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
