package catalog

import (
	"slices"
	"sort"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/codemode-gateway/caddy-codemode/internal/tool"
)

// Bounds of one converted schema (an action's input, or its output). Deeper
// or larger parts become stubs: tool schemas are read by models, a few
// levels carry the meaning, and some public documents have schema graphs
// whose full expansion is exponential.
const (
	maxSchemaDepth   = 12   // nesting of schema objects
	maxRefDepth      = 6    // $refs followed on one path
	maxInputNodes    = 2000 // schema objects in one input schema part (a parameter, the body)
	maxOutputNodes   = 500  // schema objects in one output schema: a hint, not a contract
	notExpandedLabel = "not expanded: the schema is too deep or too large"
)

// schemaConverter turns OpenAPI schema objects into self-contained JSON
// Schema values (maps ready for encoding/json) with every $ref inlined. A
// recursive reference is cut at its second appearance on the current path and
// replaced by a stub that names the referenced schema. Converted subtrees that
// involved no cut are memoized per document (with their size, which counts
// against the budget when reused), so a component schema referenced by a
// hundred operations is converted once. Properties are visited in name order
// so that cuts, and hence the output, are deterministic.
type schemaConverter struct {
	memo   map[*openapi3.Schema]memoEntry
	stack  map[*openapi3.Schema]bool
	budget int // schema objects left for the current top-level schema
}

type memoEntry struct {
	v    any
	size int
}

func newSchemaConverter() *schemaConverter {
	return &schemaConverter{memo: map[*openapi3.Schema]memoEntry{}, stack: map[*openapi3.Schema]bool{}}
}

// stub stands for a schema that is not expanded.
func stub(ref *openapi3.SchemaRef, why string) map[string]any {
	s := ref.Value
	m := map[string]any{}
	if s.Type != nil {
		if t := jsonTypes(s.Type.Slice()); len(t) == 1 {
			m["type"] = t[0]
		}
	}
	switch name := refName(ref.Ref); {
	case name != "":
		m["description"] = why + " " + name
	case s.Description != "":
		m["description"] = s.Description
	}
	return m
}

// convert returns the JSON Schema for ref, the number of schema objects in
// it, and whether it is complete (no cut inside, so it may be memoized).
func (sc *schemaConverter) convert(ref *openapi3.SchemaRef, depth, refDepth int) (any, int, bool) {
	if ref == nil || ref.Value == nil {
		return map[string]any{}, 1, true
	}
	s := ref.Value
	if s.Always != nil {
		return *s.Always, 1, true
	}
	if sc.stack[s] {
		return stub(ref, "recursive reference to"), 1, false
	}
	if ref.Ref != "" {
		refDepth++
	}
	if e, ok := sc.memo[s]; ok && e.size <= sc.budget {
		sc.budget -= e.size
		return e.v, e.size, true
	}
	if depth > maxSchemaDepth || refDepth > maxRefDepth || sc.budget <= 0 {
		if refName(ref.Ref) != "" {
			return stub(ref, notExpandedLabel+":"), 1, false
		}
		st := stub(ref, "")
		st["description"] = notExpandedLabel
		return st, 1, false
	}
	sc.budget--
	sc.stack[s] = true
	defer delete(sc.stack, s)

	complete := true
	size := 1
	sub := func(r *openapi3.SchemaRef) any {
		v, n, ok := sc.convert(r, depth+1, refDepth)
		complete = complete && ok
		size += n
		return v
	}
	subs := func(rs openapi3.SchemaRefs) []any {
		out := make([]any, 0, len(rs))
		for _, r := range rs {
			out = append(out, sub(r))
		}
		return out
	}

	m := map[string]any{}
	if s.Type != nil && len(*s.Type) > 0 {
		types := jsonTypes(s.Type.Slice())
		if s.Nullable && len(types) > 0 && !slices.Contains(types, "null") {
			types = append(types, "null")
		}
		switch len(types) {
		case 0:
		case 1:
			m["type"] = types[0]
		default:
			m["type"] = types
		}
	}
	setString(m, "title", s.Title)
	setString(m, "format", s.Format)
	setString(m, "description", s.Description)
	setString(m, "pattern", s.Pattern)
	if len(s.Enum) > 0 {
		m["enum"] = s.Enum
	}
	if s.Const != nil {
		m["const"] = s.Const
	}
	if s.Default != nil {
		m["default"] = s.Default
	}
	if s.Example != nil {
		m["examples"] = []any{s.Example}
	} else if len(s.Examples) > 0 {
		m["examples"] = s.Examples
	}
	setBool(m, "readOnly", s.ReadOnly)
	setBool(m, "writeOnly", s.WriteOnly)
	setBool(m, "deprecated", s.Deprecated)
	setBool(m, "uniqueItems", s.UniqueItems)
	setFloat(m, "minimum", s.Min)
	setFloat(m, "maximum", s.Max)
	if s.MultipleOf != nil && *s.MultipleOf > 0 { // JSON Schema wants > 0
		m["multipleOf"] = *s.MultipleOf
	}
	// OpenAPI 3.0's boolean exclusive bounds become 3.1 / JSON Schema numbers.
	if s.ExclusiveMin.Value != nil {
		m["exclusiveMinimum"] = *s.ExclusiveMin.Value
	} else if s.ExclusiveMin.IsTrue() && s.Min != nil {
		m["exclusiveMinimum"] = *s.Min
		delete(m, "minimum")
	}
	if s.ExclusiveMax.Value != nil {
		m["exclusiveMaximum"] = *s.ExclusiveMax.Value
	} else if s.ExclusiveMax.IsTrue() && s.Max != nil {
		m["exclusiveMaximum"] = *s.Max
		delete(m, "maximum")
	}
	setUint(m, "minLength", s.MinLength)
	setUintPtr(m, "maxLength", s.MaxLength)
	setUint(m, "minItems", s.MinItems)
	setUintPtr(m, "maxItems", s.MaxItems)
	setUint(m, "minProperties", s.MinProps)
	setUintPtr(m, "maxProperties", s.MaxProps)
	if len(s.Required) > 0 {
		m["required"] = tool.Unique(s.Required) // JSON Schema wants no name twice
	}
	if s.Items != nil {
		m["items"] = sub(s.Items)
	}
	if len(s.PrefixItems) > 0 {
		m["prefixItems"] = subs(s.PrefixItems)
	}
	if len(s.Properties) > 0 {
		names := make([]string, 0, len(s.Properties))
		for name := range s.Properties {
			names = append(names, name)
		}
		sort.Strings(names)
		props := make(map[string]any, len(s.Properties))
		for _, name := range names {
			props[name] = sub(s.Properties[name])
		}
		m["properties"] = props
	}
	if ap := s.AdditionalProperties; ap.Schema != nil {
		m["additionalProperties"] = sub(ap.Schema)
	} else if ap.Has != nil {
		m["additionalProperties"] = *ap.Has
	}
	if len(s.OneOf) > 0 {
		m["oneOf"] = subs(s.OneOf)
	}
	if len(s.AnyOf) > 0 {
		m["anyOf"] = subs(s.AnyOf)
	}
	if len(s.AllOf) > 0 {
		m["allOf"] = subs(s.AllOf)
	}
	if s.Not != nil {
		m["not"] = sub(s.Not)
	}
	if complete {
		sc.memo[s] = memoEntry{m, size}
	}
	return m, size, complete
}

// schema converts ref as a top-level schema with a fresh budget of nodes.
func (sc *schemaConverter) schema(ref *openapi3.SchemaRef, budget int) map[string]any {
	sc.budget = budget
	v, _, _ := sc.convert(ref, 0, 0)
	switch t := v.(type) {
	case map[string]any:
		return t
	case bool:
		if !t {
			return map[string]any{"not": map[string]any{}}
		}
	}
	return map[string]any{}
}

// refName is the last segment of a $ref: "#/components/schemas/Pet" -> "Pet".
func refName(ref string) string {
	if ref == "" {
		return ""
	}
	return ref[strings.LastIndex(ref, "/")+1:]
}

// withExtras returns schema with description added when it has none and
// deprecated set when asked, copying rather than changing a map that may be memoized and shared.
func withExtras(schema map[string]any, description string, deprecated bool) map[string]any {
	_, hasDesc := schema["description"]
	addDesc := description != "" && !hasDesc
	if !addDesc && !deprecated {
		return schema
	}
	out := make(map[string]any, len(schema)+2)
	for k, v := range schema {
		out[k] = v
	}
	if addDesc {
		out["description"] = description
	}
	if deprecated {
		out["deprecated"] = true
	}
	return out
}

// schemaType is the single JSON type a schema declares ("" when none or
// several), looking through a one-element allOf, at most maxSchemaDepth of
// them: a schema whose one allOf is a $ref to itself made this loop for
// ever, and with it the catalog's refresh.
func schemaType(ref *openapi3.SchemaRef) string {
	for range maxSchemaDepth + 1 {
		if ref == nil || ref.Value == nil {
			return ""
		}
		s := ref.Value
		if s.Type != nil {
			for _, t := range *s.Type {
				if t != "null" {
					return t
				}
			}
			return ""
		}
		if len(s.AllOf) != 1 {
			return ""
		}
		ref = s.AllOf[0]
	}
	return ""
}

// jsonTypes keeps the JSON Schema type names of types, each once. A
// document's other names ("A", "file") made the whole converted schema fail
// to compile (the metaschema allows only these), so the action's input went
// unvalidated; dropped, they leave that one schema without a type.
func jsonTypes(types []string) []string {
	out := make([]string, 0, len(types))
	for _, t := range types {
		switch t {
		case "array", "boolean", "integer", "null", "number", "object", "string":
			if !slices.Contains(out, t) {
				out = append(out, t)
			}
		}
	}
	return out
}

func setString(m map[string]any, k, v string) {
	if v != "" {
		m[k] = v
	}
}

func setBool(m map[string]any, k string, v bool) {
	if v {
		m[k] = true
	}
}

func setFloat(m map[string]any, k string, v *float64) {
	if v != nil {
		m[k] = *v
	}
}

func setUint(m map[string]any, k string, v uint64) {
	if v != 0 {
		m[k] = v
	}
}

func setUintPtr(m map[string]any, k string, v *uint64) {
	if v != nil {
		m[k] = *v
	}
}
