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

// TestDemoAddOverflow: a sum beyond a double's range is the input's fault
// and the same every time, so it is a VALIDATION_ERROR (not transient),
// not a result that fails to encode as JSON.
func TestDemoAddOverflow(t *testing.T) {
	b, _ := newTestBroker(t, nil)
	evs, err := collect(t, b, `try { await callTool("math:add", {a: 1e308, b: 1e308}); return "no error" } catch (e) { return e.code }`, ExecuteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if last := evs[len(evs)-1]; last.Type != EventResult || string(last.Payload.(*ResultPayload).Result) != `"VALIDATION_ERROR"` {
		raw, _ := json.Marshal(last)
		t.Fatalf("last event %s", raw)
	}
}
