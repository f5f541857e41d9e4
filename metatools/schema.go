package metatools

import (
	"bytes"
	"encoding/json"

	"github.com/codemode-gateway/caddy-codemode/internal/tool"
)

// compiledSchema is a tool's input schema ready to validate with the one
// tool-input validator (internal/tool). A schema that does not compile is
// kept with its error: such a tool is called unvalidated (its source still
// validates) and the problem is logged once at index build.
type compiledSchema struct {
	s   *tool.Schema
	err error
}

func compileSchema(raw json.RawMessage) compiledSchema {
	s, err := tool.CompileSchema(raw)
	return compiledSchema{s: s, err: err}
}

// validate checks input (a JSON object) and returns it with the schema's
// defaults applied, or a VALIDATION_ERROR whose message is one line naming
// every missing, unknown or wrong field and whose field is the first of
// them (a dotted path).
func (c compiledSchema) validate(input json.RawMessage) (json.RawMessage, *Error) {
	if c.s == nil {
		if t := bytes.TrimSpace(input); len(t) > 0 && t[0] != '{' && !bytes.Equal(t, []byte("null")) {
			return nil, validationError("input", "input must be a JSON object")
		}
		return input, nil
	}
	return c.s.Validate(input, nil)
}
