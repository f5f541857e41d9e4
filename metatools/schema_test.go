package metatools

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestValidationMessages: a tool input with several faults gets one clean
// line naming every missing, unknown or wrong field, and the first of them
// as the error's field (the validator itself is tested in internal/tool).
func TestValidationMessages(t *testing.T) {
	schema := compileSchema(json.RawMessage(`{"type":"object","required":["owner","repo","body"],"additionalProperties":false,
	"properties":{"owner":{"type":"string"},"repo":{"type":"string"},"per_page":{"type":"integer","maximum":100},
	"body":{"type":"object","required":["title"],"properties":{"title":{"type":"string"},"state":{"enum":["open","closed"]}}}}}`))
	cases := []struct{ in, field, msg string }{
		{`{"owner":"a"}`, "repo", "missing required properties: repo, body"},
		{`{"owner":1,"repo":"r","body":{"title":"t"}}`, "owner", "owner: got number, want string"},
		{`{"owner":"a","repo":"r","per_page":"x","body":{"title":1,"state":"x"},"zz":1}`, "zz",
			`unknown property: zz; body.state: value must be one of 'open', 'closed'; body.title: got number, want string; per_page: got string, want integer`},
		{`{"owner":"a","repo":"r","per_page":500,"body":{}}`, "body.title", "missing required property: body.title; per_page: maximum: got 500, want 100"},
		{`{"owner":"a","repo":"r","body":{"title":"t"}}`, "", ""},
	}
	for _, c := range cases {
		_, err := schema.validate(json.RawMessage(c.in))
		if c.msg == "" {
			if err != nil {
				t.Errorf("%s: unexpected %v", c.in, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: accepted", c.in)
			continue
		}
		if err.Code != CodeValidationError || err.Field != c.field || err.Message != c.msg || strings.ContainsAny(err.Message, "\n\"[") {
			t.Errorf("%s:\n got field %q message %q\nwant field %q message %q", c.in, err.Field, err.Message, c.field, c.msg)
		}
	}
}
