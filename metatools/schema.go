package metatools

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/google/jsonschema-go/jsonschema"
)

// compiledSchema is a tool's input schema ready to validate. A schema the
// validator cannot resolve is kept as nil: such a tool is called unvalidated
// (its source still validates) and the problem is logged once at index build.
type compiledSchema struct {
	resolved *jsonschema.Resolved
	err      error
	// raw is the schema as a map, walked to name every field at fault.
	raw map[string]any
	// subs are the property schemas compiled on their own, by JSON pointer,
	// when a failed validation needs them.
	mu   *sync.Mutex
	subs map[string]*jsonschema.Resolved
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
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	return compiledSchema{resolved: r, raw: m, mu: &sync.Mutex{}, subs: map[string]*jsonschema.Resolved{}}
}

// validate checks input (a JSON object) and returns a VALIDATION_ERROR whose
// message is one line naming every missing, unknown or wrong field, and
// whose field is the first of them (a dotted path).
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
	err := c.resolved.Validate(v)
	if err == nil {
		return nil
	}
	var probs problems
	c.walk(c.raw, v, "", "", &probs)
	if len(probs.list) == 0 {
		// Nothing the walk can name (a oneOf at the root, say): the
		// validator's own words.
		return validationError(fieldOf(err.Error()), cleanValidation(err.Error()))
	}
	return validationError(probs.first, probs.String())
}

// problems collects what is wrong with an input, in schema order.
type problems struct {
	first   string
	missing []string
	unknown []string
	list    []string // in order, missing and unknown as one entry each
}

func (p *problems) field(f string) {
	if p.first == "" {
		p.first = f
	}
}

func (p *problems) String() string {
	var parts []string
	if len(p.missing) > 0 {
		parts = append(parts, "missing required "+plural(len(p.missing), "field ", "fields ")+strings.Join(p.missing, ", "))
	}
	if len(p.unknown) > 0 {
		parts = append(parts, "unknown "+plural(len(p.unknown), "field ", "fields ")+strings.Join(p.unknown, ", "))
	}
	for _, l := range p.list {
		if l != "" {
			parts = append(parts, l)
		}
	}
	return strings.Join(parts, "; ")
}

// maxProblems bounds the fields one message names.
const maxProblems = 20

// walk checks value against the object schema s at path (dotted; ptr is
// the schema's JSON pointer): required and unknown properties here, then
// each property on its own, going into nested objects.
func (c compiledSchema) walk(s map[string]any, value any, path, ptr string, p *problems) {
	obj, isObj := value.(map[string]any)
	props, _ := s["properties"].(map[string]any)
	if !isObj || props == nil || len(p.missing)+len(p.unknown)+len(p.list) >= maxProblems {
		return
	}
	join := func(name string) string {
		if path == "" {
			return name
		}
		return path + "." + name
	}
	for _, r := range asSlice(s["required"]) {
		if name, ok := r.(string); ok {
			if _, present := obj[name]; !present {
				p.field(join(name))
				p.missing = append(p.missing, join(name))
				p.list = append(p.list, "")
			}
		}
	}
	if ap, ok := s["additionalProperties"].(bool); ok && !ap {
		var extra []string
		for name := range obj {
			if _, known := props[name]; !known {
				extra = append(extra, name)
			}
		}
		sort.Strings(extra)
		for _, name := range extra {
			p.field(join(name))
			p.unknown = append(p.unknown, join(name))
			p.list = append(p.list, "")
		}
	}
	names := make([]string, 0, len(obj))
	for name := range obj {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		ps, ok := props[name].(map[string]any)
		if !ok {
			continue
		}
		sub := ptr + "/properties/" + escapePointer(name)
		r := c.sub(ps, sub)
		if r == nil {
			continue
		}
		err := r.Validate(obj[name])
		if err == nil {
			continue
		}
		before := len(p.list)
		if _, nested := ps["properties"].(map[string]any); nested {
			c.walk(ps, obj[name], join(name), sub, p)
		}
		if len(p.list) == before {
			p.field(join(name))
			p.list = append(p.list, join(name)+": "+cleanValidation(err.Error()))
		}
	}
}

// sub is the property schema s compiled on its own (nil when it cannot
// be: it refers to definitions of the whole schema).
func (c compiledSchema) sub(s map[string]any, ptr string) *jsonschema.Resolved {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r, ok := c.subs[ptr]; ok {
		return r
	}
	var r *jsonschema.Resolved
	if raw, err := json.Marshal(s); err == nil {
		var js jsonschema.Schema
		if json.Unmarshal(raw, &js) == nil {
			r, _ = js.Resolve(nil)
		}
	}
	c.subs[ptr] = r
	return r
}

func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

var (
	propPathRe = regexp.MustCompile(`validating (/[^:]*):`)
	missingRe  = regexp.MustCompile(`missing properties: \[([^\]]*)\]`)
	extraRe    = regexp.MustCompile(`unexpected additional properties? \[?"?([^"\]]*)`)
	typeRe     = regexp.MustCompile(`^type: .* has type "([^"]+)", want (.+)$`)
	enumRe     = regexp.MustCompile(`^enum: (.*) does not equal any of: \[(.*)\]$`)
	ratRe      = regexp.MustCompile(`\b(-?\d+)/1\b`)
	zerosRe    = regexp.MustCompile(`(\d)\.0+\b`)
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
		first := strings.Trim(strings.Fields(m[1] + " ")[0], `" ,`)
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
// that says what is wrong, in plain words ("must be integer, got string").
func cleanValidation(msg string) string {
	if i := strings.LastIndex(msg, ": validating "); i >= 0 {
		rest := msg[i+2:]
		if j := strings.Index(rest, ": "); j >= 0 {
			msg = rest[j+2:]
		}
	}
	msg = strings.TrimPrefix(msg, "validating root: ")
	if m := typeRe.FindStringSubmatch(msg); m != nil {
		return "must be " + strings.Trim(m[2], `"`) + ", got " + m[1]
	}
	if m := enumRe.FindStringSubmatch(msg); m != nil {
		return "must be one of " + strings.Join(strings.Fields(m[2]), ", ") + ", got " + m[1]
	}
	if m := missingRe.FindStringSubmatch(msg); m != nil {
		return "missing required fields " + strings.Join(strings.Fields(strings.ReplaceAll(m[1], `"`, "")), ", ")
	}
	msg = ratRe.ReplaceAllString(msg, "$1")
	return zerosRe.ReplaceAllString(msg, "$1")
}
