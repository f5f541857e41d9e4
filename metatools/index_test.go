package metatools

import (
	"encoding/json"
	"slices"
	"strconv"
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

// TestDocFieldDescriptionInAllOf: a field of a shared type is documented
// in its allOf wrapper (`{"allOf": [{"$ref": …}, {"description": …}]}`,
// as AWS documents do); that description is the field's and is indexed,
// the referenced type's own is not.
func TestDocFieldDescriptionInAllOf(t *testing.T) {
	schema := `{"type":"object","properties":{"body":{"type":"object","properties":{
		"UserPoolId":{"allOf":[{"type":"string","description":"An identifier of any pool."},{"description":"The user pool where the users are imported."}]},
		"Plain":{"type":"string","description":"A field described in place."}}}}}`
	d := docOf(Tool{Name: "x:import", InputSchema: json.RawMessage(schema)})
	for _, want := range []string{"The user pool where the users are imported.", "A field described in place."} {
		if !strings.Contains(d.FieldDocs, want) {
			t.Errorf("field docs %q lack %q", d.FieldDocs, want)
		}
	}
	if strings.Contains(d.FieldDocs, "any pool") {
		t.Errorf("field docs %q have the referenced type's description", d.FieldDocs)
	}
}

// TestDocFieldExamples: the examples a field's description gives name values
// the field may hold, not what the call does, and are not indexed.
func TestDocFieldExamples(t *testing.T) {
	for _, c := range []struct{ desc, keep, drop string }{
		{"The name of the provider, such as Facebook, Google, or Login with Amazon.", "The name of the provider", "Google"},
		{"The attribute name, for example email.", "The attribute name", "email"},
		{"The display name (for instance Jane Doe).", "The display name", "Jane"},
		{"The region of the bucket e.g. eu-west-1.", "The region of the bucket", "eu-west-1"},
		{"The code sent to the user's phone.", "The code sent to the user's phone.", ""},
	} {
		schema := `{"type":"object","properties":{"body":{"type":"object","properties":{"f":{"type":"string","description":` + strconv.Quote(c.desc) + `}}}}}`
		d := docOf(Tool{Name: "x:y", InputSchema: json.RawMessage(schema)})
		if !strings.Contains(d.FieldDocs, c.keep) || c.drop != "" && strings.Contains(d.FieldDocs, c.drop) {
			t.Errorf("%q: field docs %q, want %q without %q", c.desc, d.FieldDocs, c.keep, c.drop)
		}
	}
}

// TestDocKinds: the enum of a body field that holds the kind of the thing
// made or edited ("workType", "type", "resource_subtype") is its kinds; an
// enum of another field, or deeper, is not.
func TestDocKinds(t *testing.T) {
	schema := `{"type":"object","properties":{"body":{"type":"object","properties":{
		"workType":{"type":"string","enum":["ASSIGNMENT","SHORT_ANSWER_QUESTION"]},
		"state":{"type":"string","enum":["PUBLISHED","DRAFT"]},
		"materials":{"type":"object","properties":{"type":{"type":"string","enum":["LINK"]}}}}}}}`
	d := docOf(Tool{Name: "x:create", InputSchema: json.RawMessage(schema)})
	if got := strings.Fields(d.Kinds); !slices.Equal(got, []string{"ASSIGNMENT", "SHORT_ANSWER_QUESTION"}) {
		t.Errorf("kinds %q", d.Kinds)
	}
}
