package catalog

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi2"
	"github.com/getkin/kin-openapi/openapi2conv"
	"github.com/getkin/kin-openapi/openapi3"
	"github.com/oasdiff/yaml"
	"golang.org/x/net/http/httpguts"

	"github.com/codemode-gateway/caddy-codemode/internal/tool"
)

// operation is an action plus what Call needs to make its request.
type operation struct {
	action  CatalogAction
	source  *sourceState
	baseURL string // absolute base URL, "" when none could be resolved
	baseErr string // why baseURL is ""
	params  []paramSpec
	body    *bodySpec
	props   map[string]bool // accepted input property names

	schemaOnce sync.Once
	schema     *tool.Schema // the action's input schema, compiled on first call
}

// validator is the action's input schema compiled for the one tool-input
// validator, or nil when it does not compile (a pattern Go cannot run is
// not among those: see tool.CompileSchema).
func (op *operation) validator() *tool.Schema {
	op.schemaOnce.Do(func() {
		// A schema that does not compile (it cannot, for one the catalog
		// derived, short of a bug) leaves the presence checks of request.
		op.schema, _ = tool.CompileSchema(op.action.InputSchema)
	})
	return op.schema
}

// paramSpec is one OpenAPI parameter and the input property that feeds it.
type paramSpec struct {
	name     string // the parameter's name on the wire
	in       string // path, query, header, cookie
	prop     string // input property name
	required bool
	style    string
	explode  bool
	kind     string // see kindOf
	asJSON   bool   // declared with `content` instead of `schema`: sent as JSON text
}

// bodySpec is the request body: the `body` input property.
type bodySpec struct {
	prop      string
	mediaType string
	required  bool
}

// bodyProperty is the input property that carries the request body.
const bodyProperty = "body"

// methodOrder sorts operations of one path, so collision suffixes are stable.
var methodOrder = map[string]int{
	"GET": 0, "HEAD": 1, "OPTIONS": 2, "POST": 3, "PUT": 4, "PATCH": 5, "DELETE": 6, "TRACE": 7, "QUERY": 8, "CONNECT": 9,
}

// buildOperations parses an OpenAPI 3 document (JSON or YAML) into the
// source's operations, sorted by action name.
func buildOperations(s *sourceState, data []byte) ([]*operation, error) {
	loader := openapi3.NewLoader()
	// A fetched document must not make the gateway read local files or
	// other URLs through external $refs.
	loader.IsExternalRefsAllowed = false
	doc, err := loadDocument(loader, data)
	if err != nil {
		return nil, fmt.Errorf("parsing OpenAPI document: %w", err)
	}

	type entry struct {
		path, method string
		item         *openapi3.PathItem
		op           *openapi3.Operation
	}
	var entries []entry
	for path, item := range doc.Paths.Map() {
		if item == nil {
			continue
		}
		for method, op := range item.Operations() {
			if op == nil {
				continue
			}
			entries = append(entries, entry{path, strings.ToUpper(method), item, op})
		}
	}
	sort.Slice(entries, func(i, j int) bool {
		if entries[i].path != entries[j].path {
			return entries[i].path < entries[j].path
		}
		oi, oj := methodOrder[entries[i].method], methodOrder[entries[j].method]
		if oi != oj {
			return oi < oj
		}
		return entries[i].method < entries[j].method
	})

	sc := newSchemaConverter()
	docBase, docBaseErr := s.resolveServers(doc.Servers)
	// Names with an operationId are taken first, so a fallback name never
	// pushes a real operationId to a suffixed name.
	taken := map[string]bool{}
	names := make([]string, len(entries))
	for pass := 0; pass < 2; pass++ {
		for i, e := range entries {
			hasID := sanitize(e.op.OperationID) != ""
			if (pass == 0) != hasID {
				continue
			}
			names[i] = uniqueName(actionName(s.src.Name, operationName(e.op.OperationID, e.method, e.path)), taken)
		}
	}

	ops := make([]*operation, 0, len(entries))
	for i, e := range entries {
		op, err := buildOperation(s, sc, names[i], e.method, e.path, e.item, e.op)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", e.method, e.path, err)
		}
		// A name made of method and path loses nothing its path does not
		// hold; an operationId cut at the limit loses its last words.
		if full := s.src.Name + "_" + sanitize(e.op.OperationID); len(full) > MaxNameLength && full != s.src.Name+"_" {
			op.action.FullName = full
		}
		op.baseURL, op.baseErr = docBase, docBaseErr
		if s.baseURL == nil {
			servers := e.op.Servers
			if servers == nil || len(*servers) == 0 {
				servers = &e.item.Servers
			}
			if len(*servers) > 0 {
				op.baseURL, op.baseErr = s.resolveServers(*servers)
			}
		}
		ops = append(ops, op)
	}
	sort.Slice(ops, func(i, j int) bool { return ops[i].action.Name < ops[j].action.Name })
	return ops, nil
}

// loadDocument parses an OpenAPI 3.x document, or a Swagger 2.0 one which it
// converts to 3.0 (kin-openapi's openapi2conv: host, basePath and schemes
// become the server; body and formData parameters the request body).
func loadDocument(loader *openapi3.Loader, data []byte) (*openapi3.T, error) {
	var probe struct {
		Swagger string `json:"swagger"`
		OpenAPI string `json:"openapi"`
	}
	asJSON := data
	if err := json.Unmarshal(data, &probe); err != nil {
		if asJSON, err = yaml.YAMLToJSON(data); err != nil {
			return nil, fmt.Errorf("neither JSON nor YAML: %w", err)
		}
		if err := json.Unmarshal(asJSON, &probe); err != nil {
			return nil, errors.New("the document is not an object")
		}
	}
	switch {
	case strings.HasPrefix(probe.OpenAPI, "3."):
		return loader.LoadFromData(data)
	case probe.Swagger == "2.0":
		var doc2 openapi2.T
		if err := json.Unmarshal(asJSON, &doc2); err != nil {
			return nil, fmt.Errorf("swagger 2.0: %w", err)
		}
		doc, err := openapi2conv.ToV3WithLoader(&doc2, loader, nil)
		if err != nil {
			return nil, fmt.Errorf("converting swagger 2.0 to OpenAPI 3: %w", err)
		}
		return doc, nil
	case probe.OpenAPI != "":
		return nil, fmt.Errorf("unsupported openapi version %q (want 3.x)", probe.OpenAPI)
	case probe.Swagger != "":
		return nil, fmt.Errorf("unsupported swagger version %q (want 2.0)", probe.Swagger)
	}
	return nil, errors.New("no `openapi: 3.x` (or `swagger: \"2.0\"`) field")
}

func buildOperation(s *sourceState, sc *schemaConverter, name, method, path string, item *openapi3.PathItem, o *openapi3.Operation) (*operation, error) {
	op := &operation{source: s, props: map[string]bool{}}
	a := &op.action
	a.Name = name
	a.Service = s.src.Name
	a.Method = method
	a.Path = path
	a.OperationID = o.OperationID
	a.Summary = strings.TrimSpace(o.Summary)
	a.Description = joinDescription(a.Summary, strings.TrimSpace(o.Description))
	if len(o.Tags) > 0 {
		a.Tags = append([]string(nil), o.Tags...)
	}
	a.Deprecated = o.Deprecated
	a.Annotations = annotationsFor(method, a.Summary)

	properties := map[string]any{}
	required := []string{}

	// Operation parameters override path-item ones with the same name and
	// location (OpenAPI 3 rule).
	var params []*openapi3.Parameter
	index := map[string]int{}
	for _, list := range []openapi3.Parameters{item.Parameters, o.Parameters} {
		for _, pr := range list {
			if pr == nil || pr.Value == nil {
				continue
			}
			p := pr.Value
			key := p.In + "\x00" + p.Name
			if i, ok := index[key]; ok {
				params[i] = p
				continue
			}
			index[key] = len(params)
			params = append(params, p)
		}
	}
	// Path parameters first, then query, header and cookie: a name used in
	// two locations keeps its plain name in the first and gets `_<in>`
	// appended in the others.
	locOrder := map[string]int{"path": 0, "query": 1, "header": 2, "cookie": 3}
	sort.SliceStable(params, func(i, j int) bool { return locOrder[params[i].In] < locOrder[params[j].In] })
	for _, p := range params {
		if _, known := locOrder[p.In]; !known {
			return nil, fmt.Errorf("parameter %q: unknown location %q", p.Name, p.In)
		}
		if p.In == "header" && ignoredHeaderParam(p.Name) {
			continue // OpenAPI: Accept, Content-Type and Authorization parameters are ignored
		}
		if !sendableParam(p.In, p.Name) {
			// No request can carry it (public documents have header
			// parameters named ""): left out, rather than an input field
			// that fails every call.
			continue
		}
		ps := paramSpec{name: p.Name, in: p.In, required: p.Required || p.In == "path"}
		ps.style = p.Style
		if ps.style == "" {
			ps.style = map[string]string{"path": "simple", "query": "form", "header": "simple", "cookie": "form"}[p.In]
		}
		ps.explode = ps.style == "form"
		if p.Explode != nil {
			ps.explode = *p.Explode
		}
		schemaRef := p.Schema
		if schemaRef == nil && len(p.Content) > 0 {
			schemaRef = firstMedia(p.Content).Schema
			ps.asJSON = true
		}
		ps.kind = kindOf(schemaType(schemaRef))
		ps.prop = p.Name
		if op.props[ps.prop] || ps.prop == bodyProperty && o.RequestBody != nil {
			ps.prop = p.Name + "_" + p.In
		}
		for op.props[ps.prop] { // still taken: a pathological document
			ps.prop += "_"
		}
		op.props[ps.prop] = true
		properties[ps.prop] = withExtras(sc.schema(schemaRef, maxInputNodes), p.Description, p.Deprecated)
		if ps.required {
			required = append(required, ps.prop)
		}
		op.params = append(op.params, ps)
	}

	if o.RequestBody != nil && o.RequestBody.Value != nil && len(o.RequestBody.Value.Content) > 0 {
		rb := o.RequestBody.Value
		mt, media := pickMediaType(rb.Content)
		op.body = &bodySpec{prop: bodyProperty, mediaType: mt, required: rb.Required}
		for op.props[op.body.prop] {
			op.body.prop += "_"
		}
		op.props[op.body.prop] = true
		var bodySchema map[string]any
		if media != nil && media.Schema != nil {
			bodySchema = sc.schema(media.Schema, maxInputNodes)
		} else {
			bodySchema = map[string]any{}
		}
		desc := rb.Description
		if desc == "" {
			desc = "Request body (" + mt + ")."
		}
		properties[op.body.prop] = withExtras(bodySchema, desc, false)
		if rb.Required {
			required = append(required, op.body.prop)
		}
	}

	input := map[string]any{
		"type":                 "object",
		"properties":           properties,
		"additionalProperties": false,
	}
	if len(required) > 0 {
		input["required"] = required
	}
	raw, err := json.Marshal(input)
	if err != nil {
		return nil, fmt.Errorf("encoding input schema: %w", err)
	}
	a.InputSchema = raw

	if out := successSchema(o.Responses); out != nil {
		raw, err := json.Marshal(sc.schema(out, maxOutputNodes))
		if err != nil {
			return nil, fmt.Errorf("encoding output schema: %w", err)
		}
		a.OutputSchema = raw
	}
	return op, nil
}

func joinDescription(summary, description string) string {
	switch {
	case summary == "":
		return description
	case description == "" || description == summary:
		return summary
	default:
		return summary + "\n\n" + description
	}
}

func annotationsFor(method, title string) Annotations {
	a := Annotations{Title: title, OpenWorldHint: true}
	switch method {
	case "GET", "HEAD", "OPTIONS":
		a.ReadOnlyHint, a.IdempotentHint = true, true
	case "PUT":
		a.IdempotentHint = true
	case "DELETE":
		a.DestructiveHint, a.IdempotentHint = true, true
	}
	return a
}

// sendableParam tells whether a parameter's name can go on the wire: not
// empty, and for a header or a cookie an HTTP token (RFC 9110 §5.1, RFC
// 6265 §4.1.1).
func sendableParam(in, name string) bool {
	if name == "" {
		return false
	}
	if in == "header" || in == "cookie" {
		return httpguts.ValidHeaderFieldName(name)
	}
	return true
}

func ignoredHeaderParam(name string) bool {
	switch strings.ToLower(name) {
	case "accept", "content-type", "authorization":
		return true
	}
	return false
}

// kindOf maps a JSON Schema type to how a parameter value is serialized:
// "array", "object", "scalar", or "" when the schema does not say (then the
// value's own JSON kind decides).
func kindOf(t string) string {
	switch t {
	case "array", "object":
		return t
	case "string", "number", "integer", "boolean":
		return "scalar"
	}
	return ""
}

// firstMedia returns the content entry with the smallest media type name:
// a deterministic pick for parameters, which have exactly one.
func firstMedia(content openapi3.Content) *openapi3.MediaType {
	_, m := pickMediaType(content)
	if m == nil {
		return &openapi3.MediaType{}
	}
	return m
}

// pickMediaType chooses the request body encoding the catalog sends: JSON
// first (application/json, then any +json or */json type), then form
// encoding, then text, then the alphabetically first.
func pickMediaType(content openapi3.Content) (string, *openapi3.MediaType) {
	keys := make([]string, 0, len(content))
	for k := range content {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	rank := func(k string) int {
		mt := strings.ToLower(strings.TrimSpace(strings.Split(k, ";")[0]))
		switch {
		case mt == "application/json":
			return 0
		case isJSONMediaType(mt):
			return 1
		case mt == "application/x-www-form-urlencoded":
			return 2
		case strings.HasPrefix(mt, "text/"):
			return 3
		case mt == "*/*":
			return 4
		}
		return 5
	}
	sort.SliceStable(keys, func(i, j int) bool { return rank(keys[i]) < rank(keys[j]) })
	if len(keys) == 0 {
		return "application/json", nil
	}
	mt := keys[0]
	if mt == "*/*" {
		return "application/json", content[keys[0]]
	}
	return mt, content[mt]
}

func isJSONMediaType(mt string) bool {
	mt = strings.ToLower(strings.TrimSpace(strings.Split(mt, ";")[0]))
	return mt == "application/json" || strings.HasSuffix(mt, "+json") || strings.HasSuffix(mt, "/json")
}

// successSchema returns the schema of the first 2xx response with a JSON
// body: 200, 201, 202, 203, 206, 2XX, then the other 2xx codes in order.
func successSchema(responses *openapi3.Responses) *openapi3.SchemaRef {
	if responses == nil {
		return nil
	}
	m := responses.Map()
	codes := []string{"200", "201", "202", "203", "206", "2XX", "2xx"}
	var rest []string
	for code := range m {
		if len(code) == 3 && code[0] == '2' && !strings.Contains("200 201 202 203 206 2XX 2xx", code) {
			rest = append(rest, code)
		}
	}
	sort.Strings(rest)
	for _, code := range append(codes, rest...) {
		r := m[code]
		if r == nil || r.Value == nil {
			continue
		}
		keys := make([]string, 0, len(r.Value.Content))
		for k := range r.Value.Content {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if mt := r.Value.Content[k]; isJSONMediaType(k) && mt != nil && mt.Schema != nil {
				return mt.Schema
			}
		}
	}
	return nil
}

// resolveServers picks the first server, substitutes its variables' defaults
// and resolves a relative URL against an http(s) spec URL. A configured
// BaseURL wins over all of it.
func (s *sourceState) resolveServers(servers openapi3.Servers) (string, string) {
	if s.baseURL != nil {
		return strings.TrimRight(s.baseURL.String(), "/"), ""
	}
	raw := "/"
	if len(servers) > 0 && servers[0] != nil {
		raw = servers[0].URL
		for name, v := range servers[0].Variables {
			if v != nil {
				raw = strings.ReplaceAll(raw, "{"+name+"}", v.Default)
			}
		}
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Sprintf("server URL %q: %v", raw, err)
	}
	if !u.IsAbs() {
		if s.specURL == nil {
			return "", fmt.Sprintf("server URL %q is relative and the document is a file: configure a base URL", raw)
		}
		u = s.specURL.ResolveReference(u)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Sprintf("server URL %q is not http(s)", raw)
	}
	return strings.TrimRight(u.String(), "/"), ""
}
