package metatools

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/codemode-gateway/caddy-codemode/metatools/search"
)

// A tool's compact signature is a TypeScript declaration of the function a
// script calls: its input type with required and optional fields, enums,
// defaults and one-line field docs, and its output type trimmed to the
// fields a script reads. Models read typed APIs well, and this form is a
// fraction of the JSON Schema's size (docs/metatools.md, "Answer sizes").

// sigLevel is how much detail a signature carries; Signature lowers it
// until the declaration fits its budget.
type sigLevel struct {
	// inDocs: 2 every input field's doc, 1 only top-level fields', 0 none.
	inDocs int
	// docLen caps a one-line doc, in runes.
	docLen int
	// outDepth is how deep the output type is spelled out: 0 gives
	// "unknown", 1 the top-level fields with nested objects as "object".
	outDepth int
	// outDocs adds one-line docs to the output's top-level fields.
	outDocs bool
	// outRequired keeps only the output's required top-level fields (a
	// comment counts the others).
	outRequired bool
	// inDepth caps the input's nesting; deeper objects become "object".
	// Only the last level uses it: the input is otherwise complete.
	inDepth int
	// maxEnum caps the literals of one enum (the rest is "| string").
	maxEnum int
	// flat writes nested types on one line and names every type that
	// repeats ("type Pattern = {...}"), the most compact complete form.
	flat bool
	// capOptional keeps at most maxOptional optional fields of each input
	// object, the shortest names first (a comment counts the others). Only
	// Signature's last resort sets it: an operation with hundreds of
	// optional fields (an account's settings, a list with a filter
	// parameter per field and operator) does not fit even in the plainest
	// level.
	capOptional bool
	maxOptional int
	// maxAlts, when above 0, keeps the first maxAlts alternatives of an
	// input union (a comment counts the others): Signature's very last
	// resort, for a body that is one of dozens of shapes whose required
	// fields alone do not fit (a message per channel and type).
	maxAlts int
}

// sigLevels, most detailed first. The input's types stay complete longest;
// the output's top-level fields (what a script reads) are kept before the
// input's docs.
var sigLevels = []sigLevel{
	{inDocs: 2, docLen: 100, outDepth: 2, outDocs: true, inDepth: 64, maxEnum: 40},
	{inDocs: 2, docLen: 80, outDepth: 1, inDepth: 64, maxEnum: 40},
	{inDocs: 2, docLen: 50, outDepth: 1, inDepth: 64, maxEnum: 40},
	{inDocs: 1, docLen: 60, outDepth: 1, inDepth: 64, maxEnum: 40},
	{inDocs: 0, outDepth: 1, inDepth: 64, maxEnum: 40},
	{inDocs: 0, outDepth: 1, outRequired: true, inDepth: 64, maxEnum: 40},
	{inDocs: 1, docLen: 40, outDepth: 0, inDepth: 64, maxEnum: 40},
	{inDocs: 0, outDepth: 0, inDepth: 64, maxEnum: 40},
	{inDocs: 0, outDepth: 0, inDepth: 64, maxEnum: 40, flat: true},
	{inDocs: 0, outDepth: 0, inDepth: 64, maxEnum: 12, flat: true},
	{inDocs: 0, outDepth: 0, inDepth: 3, maxEnum: 12, flat: true},
	{inDocs: 0, outDepth: 0, inDepth: 2, maxEnum: 8},
}

// Signature renders t's most detailed signature for which fits reports
// true (nil fits takes the most detailed one). complete is false when even
// the plainest level that fits had to cut the input's nesting (meta:describe
// then says so).
//
// When even the plainest level does not fit, the input's optional fields
// are cut, shortest names first, to as many as fit (every required field
// stays); the signature then says how many it left out, and complete is
// false.
func Signature(t Tool, fits func(sig string) bool) (sig string, complete bool) {
	in := decodeSchema(t.InputSchema)
	out := decodeSchema(t.OutputSchema)
	for _, lv := range sigLevels {
		sig = renderSignature(t, in, out, lv)
		if fits == nil || fits(sig) {
			return sig, lv.inDepth >= 64
		}
	}
	// The largest caps that fit, by bisection (a signature grows with
	// each): optional fields first; then, when the required fields alone
	// are too long, the alternatives of each union (at least one).
	lv := sigLevels[len(sigLevels)-1]
	lv.capOptional = true
	lv.maxOptional = largestFitting(0, maxInSchema(in, objectFields), func(n int) bool {
		lv.maxOptional = n
		return fits(renderSignature(t, in, out, lv))
	})
	if sig = renderSignature(t, in, out, lv); fits(sig) {
		return sig, false
	}
	lv.maxAlts = largestFitting(1, maxInSchema(in, unionWidth), func(n int) bool {
		lv.maxAlts = n
		return fits(renderSignature(t, in, out, lv))
	})
	return renderSignature(t, in, out, lv), false
}

// largestFitting is the largest n in [lo, hi] for which try holds, try
// being monotone (true up to some n, false after), or lo when none does.
func largestFitting(lo, hi int, try func(n int) bool) int {
	best := lo
	for lo <= hi {
		mid := (lo + hi) / 2
		if try(mid) {
			best, lo = mid, mid+1
		} else {
			hi = mid - 1
		}
	}
	return best
}

// maxInSchema is the largest measure of any schema object in s, at any
// depth.
func maxInSchema(s any, measure func(map[string]any) int) int {
	n := 0
	switch v := s.(type) {
	case map[string]any:
		n = measure(v)
		for _, c := range v {
			n = max(n, maxInSchema(c, measure))
		}
	case []any:
		for _, c := range v {
			n = max(n, maxInSchema(c, measure))
		}
	}
	return n
}

// objectFields is the number of an object schema's properties.
func objectFields(s map[string]any) int {
	props, _ := s["properties"].(map[string]any)
	return len(props)
}

// unionWidth is the number of alternatives of a oneOf or anyOf.
func unionWidth(s map[string]any) int {
	return max(len(asSlice(s["oneOf"])), len(asSlice(s["anyOf"])))
}

func decodeSchema(raw json.RawMessage) map[string]any {
	if len(raw) == 0 {
		return nil
	}
	var m map[string]any
	if json.Unmarshal(raw, &m) != nil {
		return nil
	}
	return m
}

func renderSignature(t Tool, in, out map[string]any, lv sigLevel) string {
	if lv.flat {
		return renderFlat(t, in, out, lv)
	}
	var b strings.Builder
	if s := docComment(t.Description); s != "" {
		b.WriteString("/** " + s + " */\n")
	}
	b.WriteString("function ")
	b.WriteString(tsIdent(localToolName(t.Name)))
	b.WriteString("(input: ")
	r := &tsRenderer{b: &b, lv: lv}
	if in == nil {
		in = map[string]any{"type": "object"}
	}
	r.typ(in, 0, true)
	b.WriteString("): ")
	if out == nil || lv.outDepth == 0 {
		b.WriteString("Promise<unknown>;")
		if out != nil {
			b.WriteString(" // output: detail \"full\" has its schema")
		}
		return b.String()
	}
	b.WriteString("Promise<")
	ro := &tsRenderer{b: &b, lv: lv, output: true}
	ro.typ(out, 0, true)
	b.WriteString(">;")
	return b.String()
}

type tsRenderer struct {
	b      *strings.Builder
	lv     sigLevel
	output bool
}

func (r *tsRenderer) indent(depth int) {
	r.b.WriteString(strings.Repeat(" ", depth))
}

// typ writes the TypeScript type of schema s at nesting depth.
func (r *tsRenderer) typ(s map[string]any, depth int, top bool) {
	if s == nil {
		r.b.WriteString("unknown")
		return
	}
	if c, ok := s["const"]; ok {
		r.b.WriteString(litType(c))
		return
	}
	if e := asSlice(s["enum"]); len(e) > 0 {
		n := min(len(e), r.lv.maxEnum)
		for i, v := range e[:n] {
			if i > 0 {
				r.b.WriteString(" | ")
			}
			r.b.WriteString(litType(v))
		}
		if n < len(e) {
			r.b.WriteString(fmt.Sprintf(" | string /* %d more */", len(e)-n))
		}
		return
	}
	for _, k := range []string{"oneOf", "anyOf"} {
		if alts := asSlice(s[k]); len(alts) > 0 {
			r.alts(alts, " | ", depth)
			return
		}
	}
	if alts := asSlice(s["allOf"]); len(alts) > 0 {
		r.alts(alts, " & ", depth)
		return
	}
	types := schemaTypes(s)
	if len(types) == 0 {
		if _, ok := s["properties"]; ok {
			types = []string{"object"}
		} else if _, ok := s["items"]; ok {
			types = []string{"array"}
		}
	}
	if len(types) == 0 {
		r.b.WriteString("unknown")
		return
	}
	for i, t := range types {
		if i > 0 {
			r.b.WriteString(" | ")
		}
		switch t {
		case "string":
			r.b.WriteString("string")
		case "integer", "number":
			r.b.WriteString("number")
		case "boolean":
			r.b.WriteString("boolean")
		case "null":
			r.b.WriteString("null")
		case "array":
			items, _ := s["items"].(map[string]any)
			if items == nil {
				r.b.WriteString("unknown[]")
				continue
			}
			var sub strings.Builder
			sr := &tsRenderer{b: &sub, lv: r.lv, output: r.output}
			sr.typ(items, depth, false)
			if it := sub.String(); topLevelUnion(it) {
				r.b.WriteString("(" + it + ")")
			} else {
				r.b.WriteString(it)
			}
			r.b.WriteString("[]")
		case "object":
			r.object(s, depth)
		default:
			r.b.WriteString("unknown")
		}
	}
}

func (r *tsRenderer) alts(alts []any, sep string, depth int) {
	var parts []string
	seen := map[string]bool{}
	for _, a := range alts {
		m, _ := a.(map[string]any)
		var sub strings.Builder
		sr := &tsRenderer{b: &sub, lv: r.lv, output: r.output}
		sr.typ(m, depth, false)
		if t := sub.String(); !seen[t] {
			seen[t] = true
			parts = append(parts, t)
		}
	}
	parts = dropVague(parts)
	cut := 0
	if max := r.lv.maxAlts; max > 0 && sep == " | " && !r.output && len(parts) > max {
		parts, cut = parts[:max], len(parts)-max
	}
	r.b.WriteString(strings.Join(parts, sep))
	if cut > 0 {
		noun := "shapes"
		if cut == 1 {
			noun = "shape"
		}
		fmt.Fprintf(r.b, " /* | %d more %s: detail \"full\" has them */", cut, noun)
	}
}

// dropVague leaves out "object" and "unknown" beside more precise
// alternatives: "{ id: number } & object" says no more than its first part.
func dropVague(parts []string) []string {
	var out []string
	for _, p := range parts {
		if p != "object" && p != "unknown" {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return parts
	}
	return out
}

// object writes an object type: one field a line, "?" for optional
// fields, a trailing comment with the field's one-line doc and default.
func (r *tsRenderer) object(s map[string]any, depth int) {
	props, _ := s["properties"].(map[string]any)
	limit := r.lv.inDepth
	if r.output {
		limit = r.lv.outDepth
	}
	if len(props) == 0 || depth >= limit {
		if ap, ok := s["additionalProperties"].(map[string]any); ok && len(props) == 0 && depth < limit {
			r.b.WriteString("Record<string, ")
			r.typ(ap, depth+1, false)
			r.b.WriteString(">")
			return
		}
		r.b.WriteString("object")
		return
	}
	req := requiredSet(s)
	names := sortedFields(props, req)
	// An object whose fields carry no comments fits on one line when short:
	// "{ status?: string }".
	if inline := r.inlineObject(props, names, req, depth); inline != "" {
		r.b.WriteString(inline)
		return
	}
	r.b.WriteString("{\n")
	omitted, cut := 0, 0
	kept := r.keptOptional(names, req)
	for _, n := range names {
		p, _ := props[n].(map[string]any)
		if r.output && r.lv.outRequired && depth == 0 && !req[n] {
			omitted++
			continue
		}
		if kept != nil && !req[n] && !kept[n] {
			cut++
			continue
		}
		r.indent(depth + 1)
		r.b.WriteString(tsKey(n))
		if !req[n] {
			r.b.WriteString("?")
		}
		r.b.WriteString(": ")
		r.typ(p, depth+1, false)
		r.b.WriteString(";")
		if doc := r.fieldDoc(p, depth); doc != "" {
			r.b.WriteString(" // " + doc)
		}
		r.b.WriteString("\n")
	}
	if omitted > 0 {
		r.indent(depth + 1)
		r.b.WriteString(fmt.Sprintf("// and %d optional fields\n", omitted))
	}
	if cut > 0 {
		r.indent(depth + 1)
		r.b.WriteString(fmt.Sprintf("// and %d more optional fields: detail \"full\" has them\n", cut))
	}
	r.indent(depth)
	r.b.WriteString("}")
}

// keptOptional is the set of optional input fields an object keeps under
// the level's cap, the shortest names first (a field's plain name, not
// its "…_in_or_isnull" variants), or nil when every field is kept.
func (r *tsRenderer) keptOptional(names []string, req map[string]bool) map[string]bool {
	if r.output || !r.lv.capOptional {
		return nil
	}
	var opt []string
	for _, n := range names {
		if !req[n] {
			opt = append(opt, n)
		}
	}
	if len(opt) <= r.lv.maxOptional {
		return nil
	}
	sort.SliceStable(opt, func(i, j int) bool { return len(opt[i]) < len(opt[j]) })
	kept := make(map[string]bool, r.lv.maxOptional)
	for _, n := range opt[:r.lv.maxOptional] {
		kept[n] = true
	}
	return kept
}

// maxInlineObject is the longest object type written on one line.
const maxInlineObject = 90

func (r *tsRenderer) inlineObject(props map[string]any, names []string, req map[string]bool, depth int) string {
	if depth == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("{ ")
	for i, n := range names {
		p, _ := props[n].(map[string]any)
		if r.fieldDoc(p, depth) != "" {
			return ""
		}
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(tsKey(n))
		if !req[n] {
			b.WriteString("?")
		}
		b.WriteString(": ")
		sr := &tsRenderer{b: &b, lv: r.lv, output: r.output}
		sr.typ(p, depth+1, false)
		if b.Len() > maxInlineObject || strings.Contains(b.String(), "\n") {
			return ""
		}
	}
	b.WriteString(" }")
	if b.Len() > maxInlineObject {
		return ""
	}
	return b.String()
}

// fieldDoc is a field's trailing comment: its one-line doc (when the level
// keeps docs at this depth), its default and its format.
func (r *tsRenderer) fieldDoc(p map[string]any, depth int) string {
	var parts []string
	keep := r.lv.inDocs == 2 || r.lv.inDocs == 1 && depth == 0
	if r.output {
		keep = r.lv.outDocs && depth == 0
	}
	if keep {
		if d, _ := p["description"].(string); d != "" && !strings.HasPrefix(d, "not expanded") {
			if s := oneLine(d, r.lv.docLen); s != "" {
				parts = append(parts, s)
			}
		}
	}
	if !r.output {
		if f, _ := p["format"].(string); f != "" && keep {
			parts = append(parts, f)
		}
		if def, ok := p["default"]; ok {
			parts = append(parts, "default "+jsonLit(def))
		}
		if p["deprecated"] == true {
			parts = append(parts, "deprecated")
		}
	}
	// a doc's full stop would sit before the "; " that joins what follows:
	// "Second addend; default 0", not "Second addend.; default 0".
	for i := 0; i < len(parts)-1; i++ {
		parts[i] = strings.TrimRight(parts[i], ".;, ")
	}
	return strings.Join(parts, "; ")
}

func schemaTypes(s map[string]any) []string {
	switch t := s["type"].(type) {
	case string:
		return []string{t}
	case []any:
		var out []string
		for _, x := range t {
			if v, ok := x.(string); ok {
				out = append(out, v)
			}
		}
		return out
	}
	return nil
}

// jsonLit writes v as one line of JSON, a literal of TypeScript and
// JavaScript alike, without the HTML escaping of json.Marshal.
func jsonLit(v any) string {
	b, err := encodeJSON(v)
	if err != nil {
		return "unknown"
	}
	return string(b)
}

// litType is the TypeScript literal type of an enum or const value; an
// object or array value (no literal type spells it) is its kind.
func litType(v any) string {
	switch v.(type) {
	case map[string]any:
		return "object"
	case []any:
		return "unknown[]"
	}
	return jsonLit(v)
}

var tsIdentRe = regexp.MustCompile(`^[A-Za-z_$][A-Za-z0-9_$]*$`)

// tsReserved are words a function cannot be named.
var tsReserved = map[string]bool{
	"break": true, "case": true, "catch": true, "class": true, "const": true, "continue": true, "debugger": true,
	"default": true, "delete": true, "do": true, "else": true, "enum": true, "export": true, "extends": true,
	"false": true, "finally": true, "for": true, "function": true, "if": true, "import": true, "in": true,
	"instanceof": true, "new": true, "null": true, "return": true, "super": true, "switch": true, "this": true,
	"throw": true, "true": true, "try": true, "typeof": true, "var": true, "void": true, "while": true, "with": true,
	"implements": true, "interface": true, "let": true, "package": true, "private": true, "protected": true,
	"public": true, "static": true, "yield": true, "await": true,
}

func tsKey(n string) string {
	if tsIdentRe.MatchString(n) {
		return n
	}
	return jsonLit(n)
}

// tsIdent turns a tool's local name into a function name ("issues/create"
// -> issues_create).
func tsIdent(n string) string {
	var b strings.Builder
	for _, r := range n {
		if r == '_' || r == '$' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	s := b.String()
	if s == "" || s[0] >= '0' && s[0] <= '9' || tsReserved[s] {
		s = "_" + s
	}
	return s
}

var spaceRe = regexp.MustCompile(`\s+`)

// oneLine is the first sentence of a description, without markup or links,
// cut at a word boundary to at most n runes ("…" marks a cut).
func oneLine(desc string, n int) string {
	s, _ := search.SplitSummary(desc)
	s = strings.TrimSpace(spaceRe.ReplaceAllString(strings.ReplaceAll(s, "`", ""), " "))
	return cutRunes(s, n)
}

// docComment is a description's first sentence for a /** */ comment (a
// "*/" in it would end the comment early).
func docComment(desc string) string {
	return strings.ReplaceAll(oneLine(desc, 100), "*/", "* /")
}

// cutRunes cuts s to at most n runes at a word boundary, marking the cut.
func cutRunes(s string, n int) string {
	if n <= 0 || utf8.RuneCountInString(s) <= n {
		return s
	}
	rs := []rune(s)[:n-1]
	cut := string(rs)
	if i := strings.LastIndexByte(cut, ' '); i > len(cut)/2 {
		cut = cut[:i]
	}
	return strings.TrimRight(cut, " ,;:") + "…"
}

// compactDescription is a description for meta:describe's default answer:
// its summary, then the sentences that are not the catalog's boilerplate,
// without markup and links, whitespace collapsed, at most n runes.
func compactDescription(desc string, boiler search.Boilerplate, n int) string {
	summary, body := search.SplitSummary(desc)
	if rest := boiler.Strip(body); rest != "" {
		summary = strings.TrimRight(summary, ".") + ". " + rest
	}
	s := strings.TrimSpace(spaceRe.ReplaceAllString(strings.ReplaceAll(summary, "`", ""), " "))
	return cutRunes(s, n)
}

// renderFlat is the flat form: the input's top-level fields one a line,
// everything nested on one line, and every type of some length that occurs
// more than once declared once as an alias.
func renderFlat(t Tool, in, out map[string]any, lv sigLevel) string {
	f := &flatRenderer{lv: lv, aliases: map[string]string{}, taken: map[string]bool{}}
	if in == nil {
		in = map[string]any{"type": "object"}
	}
	// Count repeated types, name them, and count again with the names in
	// place (a type that repeats only once its parts are named), until no
	// new type repeats.
	for range 4 {
		f.counting, f.counts, f.hints = true, map[string]int{}, map[string]string{}
		f.top(in)
		var repeated []string
		for t, n := range f.counts {
			if n >= 3 || n == 2 && len(t) >= minAliasOften {
				repeated = append(repeated, t)
			}
		}
		if len(repeated) == 0 {
			break
		}
		sort.Strings(repeated)
		for _, t := range repeated {
			f.name(t, f.hints[t])
		}
	}
	f.counting = false
	body := f.top(in)
	decls := f.declarations()
	// Keep only the aliases in use (a type named in an early round may have
	// been replaced by a later, shorter spelling): those the body uses, and
	// those a kept one uses, until no more are found; a declaration may use
	// one named after it.
	keep := make([]bool, len(decls))
	used := body
	for found := true; found; {
		found = false
		for i, d := range decls {
			if !keep[i] && usesName(used, f.aliases[f.order[i]]) {
				keep[i], found = true, true
				used += d
			}
		}
	}
	var kept []string
	for i, d := range decls {
		if keep[i] {
			kept = append(kept, d)
		}
	}
	decls = kept
	body, decls = f.rename(body, decls)
	var b strings.Builder
	if s := docComment(t.Description); s != "" {
		b.WriteString("/** " + s + " */\n")
	}
	for _, d := range decls {
		b.WriteString(d + "\n")
	}
	b.WriteString("function " + tsIdent(localToolName(t.Name)) + "(input: " + body + "): Promise<unknown>;")
	if out != nil {
		b.WriteString(" // output: detail \"full\" has its schema")
	}
	return b.String()
}

type flatRenderer struct {
	lv       sigLevel
	counting bool
	counts   map[string]int
	hints    map[string]string
	aliases  map[string]string // type -> name
	order    []string          // types in naming order
	taken    map[string]bool
	hintOf   map[string]string // alias name -> the field it was named after
}

// minAlias is the shortest type worth an alias when it repeats; a type
// shorter than minAliasOften needs three uses.
const (
	minAlias      = 16
	minAliasOften = 30
)

// tsGlobalTypes are TypeScript's global types an alias must not shadow:
// those signatures use (Record, Promise) and those a model reads as the
// standard ones (a field "records" names its item type Record2).
var tsGlobalTypes = map[string]bool{
	"Record": true, "Promise": true, "Array": true, "Object": true, "String": true, "Number": true,
	"Boolean": true, "Date": true, "Error": true, "Function": true, "Map": true, "Set": true,
	"Symbol": true, "Partial": true, "Required": true, "Readonly": true, "Pick": true, "Omit": true,
}

// name gives type t an alias name, after hint when it is free.
func (f *flatRenderer) name(t, hint string) {
	if _, ok := f.aliases[t]; ok {
		return
	}
	name := pascal(hint)
	if name == "" || f.taken[name] || tsGlobalTypes[name] {
		base := name
		if base == "" {
			base = "T"
		}
		for i := 2; ; i++ {
			if n := fmt.Sprintf("%s%d", base, i); !f.taken[n] {
				name = n
				break
			}
		}
	}
	f.taken[name] = true
	f.aliases[t] = name
	f.order = append(f.order, t)
	if f.hintOf == nil {
		f.hintOf = map[string]string{}
	}
	f.hintOf[name] = hint
}

// rename gives the aliases kept their plain names back: a name taken in an
// earlier round by a type later replaced ("A" taken, "A2" kept) is free.
func (f *flatRenderer) rename(body string, decls []string) (string, []string) {
	used := map[string]bool{}
	var names []string
	for _, d := range decls {
		name := strings.TrimPrefix(d[:strings.Index(d, " = ")], "type ")
		names = append(names, name)
		used[name] = true
	}
	for _, name := range names {
		want := pascal(f.hintOf[name])
		if want == "" || want == name || used[want] || tsGlobalTypes[want] {
			continue
		}
		body = replaceWord(body, name, want)
		for i := range decls {
			decls[i] = replaceWord(decls[i], name, want)
		}
		used[want] = true
		delete(used, name)
	}
	return body, decls
}

// replaceWord replaces whole-word occurrences of old in text.
func replaceWord(text, old, repl string) string {
	var b strings.Builder
	for i := 0; ; {
		j := strings.Index(text[i:], old)
		if j < 0 {
			b.WriteString(text[i:])
			return b.String()
		}
		j += i
		end := j + len(old)
		b.WriteString(text[i:j])
		if (j == 0 || !isIdentByte(text[j-1])) && (end == len(text) || !isIdentByte(text[end])) {
			b.WriteString(repl)
		} else {
			b.WriteString(old)
		}
		i = end
	}
}

// declarations are the alias declarations, each with the other aliases
// used in place of the types they name (longest first).
func (f *flatRenderer) declarations() []string {
	byLen := append([]string(nil), f.order...)
	sort.Slice(byLen, func(i, j int) bool { return len(byLen[i]) > len(byLen[j]) })
	var out []string
	for _, t := range f.order {
		def := t
		for _, o := range byLen {
			if o != t && len(o) < len(def) {
				// Whole types only: "A" must not be replaced inside
				// "A2", nor a name inside a longer one.
				def = replaceWord(def, o, f.aliases[o])
			}
		}
		out = append(out, "type "+f.aliases[t]+" = "+def+";")
	}
	return out
}

func (f *flatRenderer) top(s map[string]any) string {
	props, _ := s["properties"].(map[string]any)
	if len(props) == 0 {
		return f.typ(s, "", 0)
	}
	req := requiredSet(s)
	var b strings.Builder
	b.WriteString("{\n")
	for _, n := range sortedFields(props, req) {
		p, _ := props[n].(map[string]any)
		b.WriteString(" " + tsKey(n))
		if !req[n] {
			b.WriteString("?")
		}
		b.WriteString(": " + f.typ(p, n, 1) + ";")
		if def, ok := p["default"]; ok {
			b.WriteString(" // default " + jsonLit(def))
		}
		b.WriteString("\n")
	}
	b.WriteString("}")
	return b.String()
}

// typ is the one-line type of s; hint names an alias after the field.
func (f *flatRenderer) typ(s map[string]any, hint string, depth int) string {
	var out string
	r := &tsRenderer{b: &strings.Builder{}, lv: f.lv}
	switch {
	case s == nil:
		return "unknown"
	case s["const"] != nil || len(asSlice(s["enum"])) > 0:
		r.typ(s, depth, false)
		out = r.b.String()
	case len(asSlice(s["oneOf"])) > 0 || len(asSlice(s["anyOf"])) > 0 || len(asSlice(s["allOf"])) > 0:
		var alts []any
		sep := " | "
		for _, k := range []string{"oneOf", "anyOf"} {
			alts = append(alts, asSlice(s[k])...)
		}
		if len(alts) == 0 {
			alts, sep = asSlice(s["allOf"]), " & "
		}
		seen := map[string]bool{}
		var parts []string
		for _, a := range alts {
			m, _ := a.(map[string]any)
			if t := f.typ(m, hint, depth); !seen[t] {
				seen[t] = true
				parts = append(parts, t)
			}
		}
		out = strings.Join(dropVague(parts), sep)
	default:
		types := schemaTypes(s)
		if len(types) == 0 {
			if _, ok := s["properties"]; ok {
				types = []string{"object"}
			} else if _, ok := s["items"]; ok {
				types = []string{"array"}
			}
		}
		var parts []string
		for _, t := range types {
			switch t {
			case "string", "boolean", "null":
				parts = append(parts, t)
			case "integer", "number":
				parts = append(parts, "number")
			case "array":
				items, _ := s["items"].(map[string]any)
				it := f.typ(items, singular(hint), depth+1)
				if topLevelUnion(it) {
					it = "(" + it + ")"
				}
				parts = append(parts, it+"[]")
			case "object":
				parts = append(parts, f.object(s, hint, depth))
			default:
				parts = append(parts, "unknown")
			}
		}
		if len(parts) == 0 {
			return "unknown"
		}
		out = strings.Join(parts, " | ")
	}
	return f.alias(out, hint)
}

func (f *flatRenderer) object(s map[string]any, hint string, depth int) string {
	props, _ := s["properties"].(map[string]any)
	if len(props) == 0 || depth >= f.lv.inDepth {
		if ap, ok := s["additionalProperties"].(map[string]any); ok && len(props) == 0 && depth < f.lv.inDepth {
			return "Record<string, " + f.typ(ap, hint, depth+1) + ">"
		}
		return "object"
	}
	req := requiredSet(s)
	var parts []string
	for _, n := range sortedFields(props, req) {
		p, _ := props[n].(map[string]any)
		opt := "?"
		if req[n] {
			opt = ""
		}
		parts = append(parts, tsKey(n)+opt+": "+f.typ(p, n, depth+1))
	}
	return "{ " + strings.Join(parts, "; ") + " }"
}

// alias replaces a named type by its name; while counting, it counts the
// types long enough to be worth a name.
func (f *flatRenderer) alias(t, hint string) string {
	if name, ok := f.aliases[t]; ok {
		return name
	}
	if f.taken[t] {
		// t is an alias name already (a oneOf or allOf of one named
		// type): naming it again would declare "B = A".
		return t
	}
	if f.counting && len(t) >= minAlias {
		f.counts[t]++
		if _, ok := f.hints[t]; !ok {
			f.hints[t] = hint
		}
	}
	return t
}

// requiredSet is an object schema's required properties as a set.
func requiredSet(s map[string]any) map[string]bool {
	req := map[string]bool{}
	for _, n := range requiredOf(s) {
		req[n] = true
	}
	return req
}

// sortedFields orders an object's fields required first, each group by
// name: what must be given is read first.
func sortedFields(props map[string]any, req map[string]bool) []string {
	names := make([]string, 0, len(props))
	for n := range props {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		if req[names[i]] != req[names[j]] {
			return req[names[i]]
		}
		return names[i] < names[j]
	})
	return names
}

// pascal turns a field name into a type name ("bypass_actors" ->
// BypassActors).
func pascal(s string) string {
	var b strings.Builder
	up := true
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z':
			if up {
				r -= 'a' - 'A'
			}
			b.WriteRune(r)
			up = false
		case r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' && b.Len() > 0:
			b.WriteRune(r)
			up = false
		default:
			up = true
		}
	}
	return b.String()
}

// singular names an array's item type after the array ("rules" -> Rule,
// "queryParameters" -> QueryParameter, "bypass_actors" -> BypassActor): the
// last word of a compound name is the one in the plural.
func singular(s string) string {
	i := strings.LastIndexFunc(s, func(r rune) bool { return r == '_' || r == '-' || r >= 'A' && r <= 'Z' })
	if i < 0 || s[i] == '_' || s[i] == '-' {
		i++
	}
	head, last := s[:i], s[i:]
	ls := search.Lemmas(strings.ToLower(last))
	if len(ls) == 0 || ls[len(ls)-1] == strings.ToLower(last) {
		return s
	}
	lemma := ls[len(ls)-1]
	if last[0] >= 'A' && last[0] <= 'Z' {
		lemma = strings.ToUpper(lemma[:1]) + lemma[1:]
	}
	return head + lemma
}

// topLevelUnion reports whether a type string is a union or intersection
// outside any braces or parentheses (an array of it needs parentheses).
func topLevelUnion(t string) bool {
	depth := 0
	inStr := false
	for i := 0; i < len(t); i++ {
		switch c := t[i]; {
		case c == '"':
			inStr = !inStr
		case inStr:
			if c == '\\' {
				i++
			}
		case c == '{' || c == '(' || c == '<':
			depth++
		case c == '}' || c == ')' || c == '>':
			depth--
		case (c == '|' || c == '&') && depth == 0:
			return true
		}
	}
	return false
}

// usesName reports whether text uses the alias name as a whole word.
func usesName(text, name string) bool {
	for i := 0; ; {
		j := strings.Index(text[i:], name)
		if j < 0 {
			return false
		}
		j += i
		end := j + len(name)
		if (j == 0 || !isIdentByte(text[j-1])) && (end == len(text) || !isIdentByte(text[end])) {
			return true
		}
		i = end
	}
}

func isIdentByte(c byte) bool {
	return c == '_' || c == '$' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}
