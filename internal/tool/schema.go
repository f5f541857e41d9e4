package tool

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// Schema is a tool's input schema compiled for validation: the one
// validator of every tool call (registry tools, catalog actions, upstream
// MCP tools, the meta-tools' own inputs).
//
// The validator is santhosh-tekuri/jsonschema (draft 2020-12 unless the
// schema names another draft), chosen over the go-sdk's jsonschema-go
// because its errors are structured: every fault with its instance
// location and kind, so the message names every missing or wrong field
// without reading any error text.
type Schema struct {
	compiled *jsonschema.Schema
	doc      any // the schema as decoded, walked to apply defaults
}

// printer renders the library's per-fault messages.
var printer = message.NewPrinter(language.English)

// refuseLoader refuses every external reference: a schema comes from a tool
// source we do not control, and must not make the gateway read a file or
// fetch a URL.
type refuseLoader struct{}

func (refuseLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("external schema reference %q is not loaded", url)
}

// CompileSchema compiles raw, a JSON Schema object; empty means
// {"type":"object"}. An error means the schema cannot be used (invalid
// JSON, an invalid keyword, a regular expression Go cannot run, a reference
// to another document).
func CompileSchema(raw json.RawMessage) (*Schema, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = json.RawMessage(`{"type":"object"}`)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("input schema is not valid JSON: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(refuseLoader{})
	const loc = "urn:codemode:tool-input"
	if err := c.AddResource(loc, doc); err != nil {
		return nil, fmt.Errorf("input schema: %w", err)
	}
	compiled, err := c.Compile(loc)
	if err != nil {
		return nil, fmt.Errorf("input schema: %w", err)
	}
	return &Schema{compiled: compiled, doc: doc}, nil
}

// ValidateOptions adjust Validate.
type ValidateOptions struct {
	// NoUnknown reports properties the schema does not declare at the top
	// level as unknown, even where the schema allows additional properties
	// (the meta-tools decode their inputs into Go structs).
	NoUnknown bool
}

// Validate checks input (a JSON object; empty or null mean {}) and returns
// it with the schema's defaults applied. A property that is null where its
// schema does not allow null counts as absent (models send null for "not
// set"), so its default applies. The error is a VALIDATION_ERROR whose
// message is one line naming every missing, unknown or wrong field (for
// example "missing required properties: repo, body; per_page: maximum: got
// 500, want 100") and whose Field is the first of them, a dotted path.
func (s *Schema) Validate(input json.RawMessage, opts *ValidateOptions) (json.RawMessage, *Error) {
	var v any = map[string]any{}
	if t := bytes.TrimSpace(input); len(t) > 0 && !bytes.Equal(t, []byte("null")) {
		var err error
		if v, err = jsonschema.UnmarshalJSON(bytes.NewReader(t)); err != nil {
			return nil, Invalid("input", "input is not valid JSON: "+err.Error())
		}
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, Invalid("input", "input must be a JSON object, got "+JSONType(v))
	}
	applyDefaults(s.doc, obj)
	var f faults
	if opts != nil && opts.NoUnknown {
		props, _ := asObject(s.doc)["properties"].(map[string]any)
		for name := range obj {
			if _, declared := props[name]; !declared {
				f.unknown = append(f.unknown, name)
			}
		}
	}
	if err := s.compiled.Validate(obj); err != nil {
		var ve *jsonschema.ValidationError
		if !errors.As(err, &ve) {
			return nil, Invalid("input", err.Error())
		}
		f.collect(ve)
	}
	if e := f.err(); e != nil {
		return nil, e
	}
	out, err := json.Marshal(obj)
	if err != nil {
		return nil, Invalid("input", err.Error())
	}
	return out, nil
}

// faults gathers the leaves of a validation error tree.
type faults struct {
	missing, unknown []string
	wrong            []fault
}

type fault struct{ path, msg string }

func (f *faults) collect(e *jsonschema.ValidationError) {
	switch k := e.ErrorKind.(type) {
	case *kind.Required:
		for _, m := range k.Missing {
			f.missing = append(f.missing, dotted(append(slices.Clone(e.InstanceLocation), m)))
		}
		return
	case *kind.AdditionalProperties:
		for _, p := range k.Properties {
			f.unknown = append(f.unknown, dotted(append(slices.Clone(e.InstanceLocation), p)))
		}
		return
	case *kind.AnyOf, *kind.OneOf, *kind.Not:
		// The branches' own faults would contradict each other: name the
		// field and the combinator, in words a caller can act on.
		f.wrong = append(f.wrong, fault{dotted(e.InstanceLocation), combinatorFault(e.ErrorKind)})
		return
	}
	if len(e.Causes) == 0 {
		f.wrong = append(f.wrong, fault{dotted(e.InstanceLocation), e.ErrorKind.LocalizedString(printer)})
		return
	}
	for _, c := range e.Causes {
		f.collect(c)
	}
}

// combinatorFault says what a value failing anyOf, oneOf or not is:
// "'oneOf' failed, subschemas 0, 1 matched" means nothing to a model.
func combinatorFault(k jsonschema.ErrorKind) string {
	switch k := k.(type) {
	case *kind.AnyOf:
		return "matches none of the allowed shapes (anyOf)"
	case *kind.OneOf:
		if len(k.Subschemas) == 0 {
			return "matches none of the allowed shapes (oneOf)"
		}
		alts := make([]string, len(k.Subschemas))
		for i, n := range k.Subschemas {
			alts[i] = strconv.Itoa(n + 1)
		}
		return fmt.Sprintf("matches %d of the allowed shapes (oneOf: %s) and must match exactly one; give only the fields of one", len(alts), strings.Join(alts, " and "))
	}
	return "matches a shape it must not (not)"
}

// err is the VALIDATION_ERROR naming every fault, or nil.
func (f *faults) err() *Error {
	if len(f.missing)+len(f.unknown)+len(f.wrong) == 0 {
		return nil
	}
	// Missing properties keep the schema's order (its required list);
	// unknown ones are sorted, wrong ones by path.
	f.missing = Unique(f.missing)
	slices.Sort(f.unknown)
	f.unknown = slices.Compact(f.unknown)
	slices.SortStableFunc(f.wrong, func(a, b fault) int { return strings.Compare(a.path, b.path) })
	var parts, fields []string
	if len(f.missing) > 0 {
		parts = append(parts, plural(len(f.missing), "missing required property: ", "missing required properties: ")+strings.Join(f.missing, ", "))
		fields = append(fields, f.missing...)
	}
	if len(f.unknown) > 0 {
		parts = append(parts, plural(len(f.unknown), "unknown property: ", "unknown properties: ")+strings.Join(f.unknown, ", "))
		fields = append(fields, f.unknown...)
	}
	for i, w := range f.wrong {
		if i > 0 && w == f.wrong[i-1] {
			continue
		}
		path := w.path
		if path == "" {
			path = "input"
		}
		parts = append(parts, path+": "+w.msg)
		fields = append(fields, path)
	}
	msg := strings.Join(parts, "; ")
	msg = strings.Join(strings.Fields(msg), " ") // one line, whatever a message held
	return &Error{Code: CodeValidationError, Message: msg, Field: fields[0], Fields: fields}
}

// Unique is l without repeats, in their order, in a new slice (l may
// belong to somebody else, as a parsed document's required names do).
func Unique(l []string) []string {
	seen := make(map[string]bool, len(l))
	out := make([]string, 0, len(l))
	for _, s := range l {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// dotted joins an instance location: items.0.name.
func dotted(loc []string) string { return strings.Join(loc, ".") }

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// applyDefaults walks the schema's properties: a property absent from obj
// (or null where null is not allowed) takes its default; a present object
// gets its own properties' defaults. This is jsonschema-go's ApplyDefaults
// rule (properties only, no $ref, no combinators), plus null as absent.
func applyDefaults(schema any, obj map[string]any) {
	s := asObject(schema)
	props, _ := s["properties"].(map[string]any)
	for name, ps := range props {
		p := asObject(ps)
		v, present := obj[name]
		if present && v == nil && !allowsNull(p) {
			delete(obj, name)
			present = false
		}
		if !present {
			if d, ok := p["default"]; ok {
				obj[name] = cloneJSON(d)
			}
			continue
		}
		if child, ok := v.(map[string]any); ok {
			applyDefaults(p, child)
		}
	}
}

func asObject(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

// allowsNull reports whether a property schema accepts null: no type, or a
// type that includes "null".
func allowsNull(s map[string]any) bool {
	switch t := s["type"].(type) {
	case nil:
		return true
	case string:
		return t == "null"
	case []any:
		return slices.Contains(t, any("null"))
	}
	return false
}

// cloneJSON copies a decoded JSON value, so that a default object is never
// shared between calls.
func cloneJSON(v any) any {
	switch t := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(t))
		for k, x := range t {
			m[k] = cloneJSON(x)
		}
		return m
	case []any:
		l := make([]any, len(t))
		for i, x := range t {
			l[i] = cloneJSON(x)
		}
		return l
	}
	return v
}

// JSONType names the JSON type of a decoded value ("integer" for a number
// without a fraction), as json.Unmarshal or the validator decode it.
func JSONType(v any) string {
	switch t := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	case json.Number:
		if _, err := strconv.ParseInt(string(t), 10, 64); err == nil {
			return "integer"
		}
		return "number"
	case float64:
		if t == math.Trunc(t) {
			return "integer"
		}
		return "number"
	}
	return "number"
}
