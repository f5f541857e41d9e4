package metatools

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/codemode-gateway/caddy-codemode/metatools/search"
)

// maxExamples is the spec's cap on usage examples per tool.
const maxExamples = 5

type schemaProp struct {
	name     string
	schema   map[string]any
	required bool
}

// schemaProperties lists the top-level properties of an object schema,
// required ones first, each group by name.
func schemaProperties(raw []byte) []schemaProp {
	if len(raw) == 0 {
		return nil
	}
	var s map[string]any
	if json.Unmarshal(raw, &s) != nil {
		return nil
	}
	props, _ := s["properties"].(map[string]any)
	req := map[string]bool{}
	if r, ok := s["required"].([]any); ok {
		for _, n := range r {
			if n, ok := n.(string); ok {
				req[n] = true
			}
		}
	}
	out := make([]schemaProp, 0, len(props))
	for name, p := range props {
		m, _ := p.(map[string]any)
		out = append(out, schemaProp{name: name, schema: m, required: req[name]})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].required != out[j].required {
			return out[i].required
		}
		return out[i].name < out[j].name
	})
	return out
}

// exampleValue invents a value that satisfies a (sub)schema: its example,
// default, const or first enum value when it has one, otherwise one built
// from its type, format and bounds.
func exampleValue(name string, s map[string]any, depth int) any {
	if s == nil {
		return "example"
	}
	for _, k := range []string{"const", "example", "default"} {
		if v, ok := s[k]; ok {
			return v
		}
	}
	if ex, ok := s["examples"].([]any); ok && len(ex) > 0 {
		return ex[0]
	}
	if e, ok := s["enum"].([]any); ok && len(e) > 0 {
		return e[0]
	}
	for _, k := range []string{"oneOf", "anyOf", "allOf"} {
		if alts, ok := s[k].([]any); ok && len(alts) > 0 {
			if m, ok := alts[0].(map[string]any); ok {
				return exampleValue(name, m, depth)
			}
		}
	}
	typ := s["type"]
	if ts, ok := typ.([]any); ok && len(ts) > 0 {
		typ = ts[0]
		for _, t := range ts {
			if t != "null" {
				typ = t
				break
			}
		}
	}
	switch typ {
	case "integer", "number":
		n := 1.0
		if m, ok := s["minimum"].(float64); ok && m > n {
			n = m
		}
		if m, ok := s["exclusiveMinimum"].(float64); ok && m >= n {
			n = m + 1
		}
		if m, ok := s["maximum"].(float64); ok && m < n {
			n = m
		}
		if strings.Contains(strings.ToLower(name), "limit") || strings.Contains(strings.ToLower(name), "size") {
			n = max(n, min(10, maxOr(s, 10)))
		}
		return n
	case "boolean":
		return true
	case "array":
		items, _ := s["items"].(map[string]any)
		n := 1
		// Up to maxExampleItems items, no more (as strings are padded up
		// to maxExampleString): a minItems of 1e18 made make panic, one
		// of 1e9 asked for 16 GB (the example, not valid then, is left out).
		if m, ok := s["minItems"].(float64); ok && m > float64(n) {
			n = int(min(m, maxExampleItems))
		}
		if depth > 4 {
			n = min(n, 1) // nested arrays multiply (objects stop there too)
		}
		out := make([]any, n)
		for i := range out {
			out[i] = exampleValue(name, items, depth+1)
		}
		return out
	case "object":
		obj := map[string]any{}
		if depth > 4 {
			return obj
		}
		raw, _ := json.Marshal(s)
		for _, p := range schemaProperties(raw) {
			if p.required {
				obj[p.name] = exampleValue(p.name, p.schema, depth+1)
			}
		}
		return obj
	}
	return exampleString(name, s)
}

func maxOr(s map[string]any, def float64) float64 {
	if m, ok := s["maximum"].(float64); ok {
		return m
	}
	return def
}

// maxExampleString is the longest string exampleString pads to, and
// maxExampleItems the most items a generated array is given.
const (
	maxExampleString = 256
	maxExampleItems  = 16
)

func exampleString(name string, s map[string]any) string {
	var v string
	switch s["format"] {
	case "email":
		v = "user@example.com"
	case "date-time":
		v = "2026-01-01T00:00:00Z"
	case "date":
		v = "2026-01-01"
	case "uri", "url":
		v = "https://example.com"
	case "uuid":
		v = "123e4567-e89b-12d3-a456-426614174000"
	case "ipv4":
		v = "192.0.2.1"
	default:
		lower := strings.ToLower(name)
		switch {
		case strings.HasSuffix(lower, "id"):
			v = "123"
		case strings.Contains(lower, "email"):
			v = "user@example.com"
		case strings.Contains(lower, "query") || lower == "q":
			v = "example"
		default:
			v = "example-" + strings.ToLower(strings.Trim(name, "_-"))
		}
	}
	// Lengths in characters (code points), as JSON Schema counts them: a
	// name of other letters than ASCII ("größe") has fewer than bytes. An
	// example is padded up to maxExampleString characters, no further: a
	// schema's minLength of 1e9 made this loop for ever (the example, not
	// valid then, is left out).
	if m, ok := s["minLength"].(float64); ok && m <= maxExampleString {
		if n := utf8.RuneCountInString(v); n < int(m) {
			v += strings.Repeat("x", int(m)-n)
		}
	}
	// Compared as floats: int(m) of a maxLength past the int range (1e300)
	// is negative, and slicing to it panicked.
	if m, ok := s["maxLength"].(float64); ok && m >= 0 && float64(utf8.RuneCountInString(v)) > m {
		v = string([]rune(v)[:int(m)])
	}
	return v
}

// exampleInput builds an input for t from its required properties and
// returns it only if it validates against t's input schema.
func exampleInput(t Tool, schema compiledSchema) (map[string]any, bool) {
	in := map[string]any{}
	for _, p := range schemaProperties(t.InputSchema) {
		if p.required {
			in[p.name] = exampleValue(p.name, p.schema, 0)
		}
	}
	raw, _ := json.Marshal(in)
	if _, err := schema.validate(raw); err != nil {
		return nil, false
	}
	return in, true
}

// toolIntent guesses what a tool does from the first intent word of its
// local name, then of its description.
func toolIntent(t Tool) search.Intent {
	for _, text := range []string{localToolName(t.Name), firstLine(t.Description)} {
		for _, w := range search.Tokenize(text) {
			if in := search.IntentOf(w); in != search.IntentNone {
				if in == search.IntentGet && looksLikeList(t) {
					return search.IntentList
				}
				return in
			}
		}
	}
	if t.Annotations != nil && t.Annotations.ReadOnlyHint != nil && *t.Annotations.ReadOnlyHint {
		return search.IntentGet
	}
	return search.IntentNone
}

// looksLikeList: a read whose description speaks of all/list, or that takes
// no required input.
func looksLikeList(t Tool) bool {
	for _, w := range search.Tokenize(firstLine(t.Description)) {
		if search.IntentOf(w) == search.IntentList {
			return true
		}
	}
	for _, p := range schemaProperties(t.InputSchema) {
		if p.required {
			return false
		}
	}
	return false
}

func localToolName(name string) string {
	if i := strings.LastIndexByte(name, ':'); i >= 0 {
		return name[i+1:]
	}
	return name
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// jsLiteral writes v as a JavaScript literal over several lines, without
// the HTML escaping of json.Marshal: a model reads "<" better than "\u003c"
// and pays for six bytes instead of one.
func jsLiteral(v any) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
	return strings.TrimSuffix(buf.String(), "\n")
}

// usageExamples returns the declared examples, then generated ones chosen by
// intent, at most maxExamples in all. Generated inputs validate against the
// tool's schema; a tool whose schema defeats the generator gets examples
// without an input literal only where that is still correct (no required
// fields).
//
// With full false (meta:describe's compact answer) only the first generated
// example is added, and its input literal is written on one line.
func usageExamples(t Tool, schema compiledSchema, full bool) []Example {
	out := make([]Example, 0, maxExamples)
	for _, e := range t.Examples {
		if len(out) == maxExamples {
			return out
		}
		out = append(out, e)
	}
	in, ok := exampleInput(t, schema)
	if !ok {
		return out
	}
	name := jsonLit(t.Name)
	args := jsLiteral(in)
	if !full {
		args = jsonLit(in)
	}
	call := fmt.Sprintf("await callTool(%s, %s)", name, args)
	var gen []Example
	switch toolIntent(t) {
	case search.IntentCreate:
		gen = append(gen,
			example("Create a resource and return it", "const created = "+call+";\nreturn created;"),
			example("Create only when it does not exist yet, without throwing on failure",
				fmt.Sprintf("const res = await callTool(%s, %s, { throwOnError: false });\nif (!res.success) return { created: false, code: res.error.code, message: res.error.message };\nreturn { created: true, data: res.data };", name, args)))
	case search.IntentList, search.IntentSearch:
		gen = append(gen,
			example("List and return the results", "const items = "+call+";\nreturn items;"),
			example("Keep only the first five results",
				"const res = "+call+";\nconst items = Array.isArray(res) ? res : (res.items ?? res.data ?? res.results ?? []);\nreturn items.slice(0, 5);"))
	case search.IntentGet:
		gen = append(gen,
			example("Fetch one resource", "const item = "+call+";\nreturn item;"),
			example("Fetch several in parallel",
				fmt.Sprintf("const inputs = [%s, %s];\nreturn await __safe_parallel(inputs.map((input) => () => callTool(%s, input)));", args, args, name)))
	case search.IntentUpdate:
		gen = append(gen,
			example("Update a resource and return the new state", "const updated = "+call+";\nreturn updated;"))
	case search.IntentDelete:
		gen = append(gen,
			example("Delete a resource, reporting failure instead of throwing",
				fmt.Sprintf("const res = await callTool(%s, %s, { throwOnError: false });\nreturn res.success ? { deleted: true } : { deleted: false, code: res.error.code };", name, args)))
	default:
		gen = append(gen, example("Call the tool and return its result", "return "+call+";"))
	}
	gen = append(gen,
		example("Handle a failure without aborting the script",
			fmt.Sprintf("const res = await callTool(%s, %s, { throwOnError: false });\nif (!res.success) {\n  return { error: res.error.code, message: res.error.message };\n}\nreturn res.data;", name, args)),
		example("Inspect the schema before calling",
			fmt.Sprintf("const tool = getTool(%s);\nreturn { input: tool.inputSchema, output: tool.outputSchema };", name)),
	)
	if !full {
		gen = gen[:1]
	}
	for _, e := range gen {
		if len(out) == maxExamples {
			break
		}
		out = append(out, e)
	}
	return out
}

// example is a generated usage example.
func example(description, code string) Example {
	return Example{Description: description, Code: code}
}
