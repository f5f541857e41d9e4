package metatools

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/codemode-gateway/caddy-codemode/metatools/search"
)

// TestDocStates: the states a call sets are its parameters' and its
// request body's own enum values and one-word booleans, and the one-word
// booleans of a body's object (spec.suspend); a boolean named by a phrase
// is an option, and deeper fields describe the object.
func TestDocStates(t *testing.T) {
	schema := `{"type":"object","properties":{
		"draft":{"type":"boolean"},
		"body":{"type":"object","properties":{
			"archived":{"type":"boolean"},
			"is_locked":{"type":"boolean"},
			"accept_partial_authorization":{"type":"boolean"},
			"state":{"enum":["open","closed"]},
			"spec":{"type":"object","properties":{"suspend":{"type":"boolean"},"phase":{"enum":["Running"]},
				"template":{"type":"object","properties":{"privileged":{"type":"boolean"}}}}}}}}}`
	d := docOf(Tool{Name: "x:update", InputSchema: json.RawMessage(schema)})
	states := " " + d.States + " "
	for _, want := range []string{"draft", "archived", "is_locked", "closed", "suspend"} {
		if !strings.Contains(states, " "+want+" ") {
			t.Errorf("states %q lack %q", d.States, want)
		}
	}
	for _, not := range []string{"accept_partial_authorization", "privileged", "Running"} {
		if strings.Contains(states, " "+not+" ") {
			t.Errorf("states %q have %q", d.States, not)
		}
	}
}

// TestDocAccess: a tool's declared read-only hint is what search reads of
// its effect; an undeclared hint is unknown, not "writes".
func TestDocAccess(t *testing.T) {
	yes, no := true, false
	for _, c := range []struct {
		a    *Annotations
		want search.Access
	}{
		{nil, search.AccessUnknown},
		{&Annotations{}, search.AccessUnknown},
		{&Annotations{ReadOnlyHint: &yes}, search.AccessRead},
		{&Annotations{ReadOnlyHint: &no}, search.AccessWrite},
	} {
		if got := docOf(Tool{Name: "x:y", Annotations: c.a}).Access; got != c.want {
			t.Errorf("annotations %+v: access %d, want %d", c.a, got, c.want)
		}
	}
}
