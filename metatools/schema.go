package metatools

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
)

// compiledSchema is a tool's input schema ready to validate. A schema the
// validator cannot resolve is kept as nil: such a tool is called unvalidated
// (its source still validates) and the problem is logged once at index build.
type compiledSchema struct {
	resolved *jsonschema.Resolved
	err      error
}

func compileSchema(raw json.RawMessage) compiledSchema {
	if len(raw) == 0 {
		raw = json.RawMessage(`{"type":"object"}`)
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(raw, &s); err != nil {
		return compiledSchema{err: fmt.Errorf("parsing input schema: %w", err)}
	}
	r, err := s.Resolve(nil)
	if err != nil {
		return compiledSchema{err: fmt.Errorf("resolving input schema: %w", err)}
	}
	return compiledSchema{resolved: r}
}

// validate checks input (a JSON object) and returns a VALIDATION_ERROR naming
// the field at fault.
func (c compiledSchema) validate(input json.RawMessage) *Error {
	var v any
	if len(input) == 0 {
		v = map[string]any{}
	} else if err := json.Unmarshal(input, &v); err != nil {
		return validationError("input", "not valid JSON: "+err.Error())
	}
	if _, ok := v.(map[string]any); !ok {
		return validationError("input", "must be a JSON object")
	}
	if c.resolved == nil {
		return nil
	}
	if err := c.resolved.Validate(v); err != nil {
		return validationError(fieldOf(err.Error()), cleanValidation(err.Error()))
	}
	return nil
}

var (
	propPathRe = regexp.MustCompile(`validating (/[^:]*):`)
	missingRe  = regexp.MustCompile(`missing properties: \[([^\]]*)\]`)
	extraRe    = regexp.MustCompile(`unexpected additional properties? \[?"?([^"\]]*)`)
)

// fieldOf turns the validator's JSON pointer into a dotted field name.
func fieldOf(msg string) string {
	var parts []string
	if m := propPathRe.FindAllStringSubmatch(msg, -1); len(m) > 0 {
		ptr := m[len(m)-1][1]
		segs := strings.Split(strings.TrimPrefix(ptr, "/"), "/")
		for i := 0; i < len(segs); i++ {
			switch segs[i] {
			case "properties", "patternProperties":
				if i+1 < len(segs) {
					parts = append(parts, segs[i+1])
					i++
				}
			case "items", "prefixItems":
				parts = append(parts, "[]")
			}
		}
	}
	if m := missingRe.FindStringSubmatch(msg); m != nil {
		first := strings.Trim(strings.SplitN(m[1], ",", 2)[0], `" `)
		parts = append(parts, first)
	} else if m := extraRe.FindStringSubmatch(msg); m != nil && m[1] != "" {
		parts = append(parts, m[1])
	}
	if len(parts) == 0 {
		return "input"
	}
	return strings.Join(parts, ".")
}

// cleanValidation keeps the last clause of the validator's message, the part
// that says what is wrong.
func cleanValidation(msg string) string {
	if i := strings.LastIndex(msg, ": validating "); i >= 0 {
		rest := msg[i+2:]
		if j := strings.Index(rest, ": "); j >= 0 {
			return rest[j+2:]
		}
	}
	msg = strings.TrimPrefix(msg, "validating root: ")
	return msg
}
