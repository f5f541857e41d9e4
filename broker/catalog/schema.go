package catalog

import (
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
)

// maxSchemaDepth bounds how deep a converted schema nests. Deeper parts become
// `{}` (any value): tool schemas are read by models, and a few levels carry
// the meaning.
const maxSchemaDepth = 12

// schemaConverter turns OpenAPI schema objects into self-contained JSON
// Schema values (maps ready for encoding/json) with every $ref inlined. A
// recursive reference is cut at its second appearance on the current path and
// replaced by a stub that names the referenced schema. Converted subtrees that
// did not involve a cut are memoized per document, so a component schema
// referenced by a hundred operations is converted once.
type schemaConverter struct {
	memo  map[*openapi3.Schema]any
	stack map[*openapi3.Schema]bool
}

func newSchemaConverter() *schemaConverter {
	return &schemaConverter{memo: map[*openapi3.Schema]any{}, stack: map[*openapi3.Schema]bool{}}
}

// convert returns the JSON Schema for ref and whether the result is complete
// (no recursion or depth cut inside, so it may be memoized).
func (sc *schemaConverter) convert(ref *openapi3.SchemaRef, depth int) (any, bool) {
	if ref == nil || ref.Value == nil {
		return map[string]any{}, true
	}
	s := ref.Value
	if v, ok := sc.memo[s]; ok {
		return v, true
	}
	if s.Always != nil {
		return *s.Always, true
	}
	if sc.stack[s] || depth > maxSchemaDepth {
		stub := map[string]any{}
		if s.Type != nil && len(*s.Type) == 1 {
			stub["type"] = (*s.Type)[0]
		}
		if name := refName(ref.Ref); name != "" {
			stub["description"] = "recursive reference to " + name
		} else if s.Description != "" {
			stub["description"] = s.Description
		}
		return stub, false
	}
	sc.stack[s] = true
	defer delete(sc.stack, s)

	complete := true
	sub := func(r *openapi3.SchemaRef) any {
		v, ok := sc.convert(r, depth+1)
		complete = complete && ok
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
		types := s.Type.Slice()
		if s.Nullable && !s.Type.Includes("null") {
			types = append(append([]string(nil), types...), "null")
		}
		if len(types) == 1 {
			m["type"] = types[0]
		} else {
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
	setFloat(m, "multipleOf", s.MultipleOf)
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
		m["required"] = s.Required
	}
	if s.Items != nil {
		m["items"] = sub(s.Items)
	}
	if len(s.PrefixItems) > 0 {
		m["prefixItems"] = subs(s.PrefixItems)
	}
	if len(s.Properties) > 0 {
		props := make(map[string]any, len(s.Properties))
		for name, p := range s.Properties {
			props[name] = sub(p)
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
		sc.memo[s] = m
	}
	return m, complete
}

// schema converts ref at the top of a new path.
func (sc *schemaConverter) schema(ref *openapi3.SchemaRef) map[string]any {
	v, _ := sc.convert(ref, 0)
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
// several), looking through a one-element allOf.
func schemaType(ref *openapi3.SchemaRef) string {
	for ref != nil && ref.Value != nil {
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
