package broker

import (
	"encoding/json"
	"testing"
)

// TestDemoExamplesRun executes every usage example the demo tools declare
// (meta:describe shows them first) and expects each to succeed; the
// examples must be runnable code, not text with escapes in it.
func TestDemoExamplesRun(t *testing.T) {
	b, _ := newTestBroker(t, nil)
	n := 0
	for _, d := range DemoTools() {
		for _, ex := range d.Examples {
			n++
			evs, err := collect(t, b, ex.Code, ExecuteOptions{})
			if err != nil {
				t.Fatalf("%s example %q: %v", d.Name, ex.Description, err)
			}
			last := evs[len(evs)-1]
			if last.Type != EventResult {
				raw, _ := json.Marshal(last)
				t.Errorf("%s example %q did not run: %s\n%s", d.Name, ex.Description, raw, ex.Code)
			}
		}
	}
	if n == 0 {
		t.Fatal("the demo tools declare no examples")
	}
}
