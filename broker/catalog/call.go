package catalog

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/codemode-gateway/caddy-codemode/internal/telemetry"
	"github.com/codemode-gateway/caddy-codemode/internal/tool"
)

// maxErrorBody caps the upstream body carried by an UPSTREAM_ERROR when it is
// not JSON.
const maxErrorBody = 4 << 10

// Call runs the named action with input (a JSON object, see
// CatalogAction.InputSchema; empty or null means {}) and returns the
// response body as JSON:
//
//   - a JSON response (application/json, any +json type, or no Content-Type
//     and a body that parses) is returned as is;
//   - an empty body (204, HEAD) is returned as null;
//   - any other body is wrapped: {"status":200,"contentType":"text/csv",
//     "text":"..."} when it is UTF-8 text, with "base64" instead of "text"
//     otherwise.
//
// Errors are *Error values with a stable Code: TOOL_NOT_FOUND,
// VALIDATION_ERROR, NO_BASE_URL, UPSTREAM_ERROR (with Status and Body),
// UPSTREAM_UNREACHABLE, RESPONSE_TOO_LARGE, TIMEOUT or CANCELED.
func (c *Catalog) Call(ctx context.Context, name string, input json.RawMessage) (json.RawMessage, error) {
	op, ok := c.snap.Load().ops[name]
	if !ok {
		return nil, &Error{Code: CodeToolNotFound, Message: fmt.Sprintf("no catalog action named %q", name)}
	}
	req, err := op.request(ctx, input)
	if err != nil {
		return nil, err
	}
	src := op.source.src
	if auth := c.opts.Authorize; auth != nil {
		if err := auth(ctx, src.Name, req); err != nil {
			var ce *Error
			if errors.As(err, &ce) {
				return nil, ce
			}
			return nil, newError(CodeUpstreamUnreachable, err, "authorizing the call of %s", name)
		}
	}
	ctx, cancel := context.WithTimeout(req.Context(), src.Timeout)
	defer cancel()
	// A client span per request (OpenTelemetry HTTP conventions, the path
	// template and never the URL: its query may carry credentials), and
	// the W3C trace context for the upstream API.
	ctx, span := telemetry.StartSpan(ctx, op.action.Method+" "+op.action.Path, trace.SpanKindClient,
		attribute.String("http.request.method", op.action.Method),
		attribute.String("url.template", op.action.Path),
		attribute.String("server.address", req.URL.Hostname()),
		attribute.String("codemode.catalog.source", src.Name))
	var code string
	defer func() { telemetry.EndSpan(span, code) }()
	req = req.WithContext(ctx)
	telemetry.Inject(ctx, req.Header)

	resp, err := c.callerCli.Do(req)
	if err != nil {
		te := transportError(ctx, scrubURLError(err), "calling %s %s", op.action.Method, redactURL(withoutQuery(req.URL)))
		code = te.Code
		return nil, te
	}
	defer resp.Body.Close()
	if span.IsRecording() {
		span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
	}

	max := src.MaxResponseBytes
	if resp.ContentLength > max {
		return nil, &Error{Code: CodeResponseTooLarge, Message: fmt.Sprintf("response of %d bytes exceeds the limit of %d bytes", resp.ContentLength, max)}
	}
	body, err := readCapped(resp.Body, max)
	if errors.Is(err, errTooLarge) {
		return nil, &Error{Code: CodeResponseTooLarge, Message: fmt.Sprintf("response exceeds the limit of %d bytes", max)}
	}
	if err != nil {
		return nil, transportError(ctx, err, "reading the response of %s %s", op.action.Method, op.action.Path)
	}
	ctype := resp.Header.Get("Content-Type")
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		e := &Error{
			Code:      CodeUpstreamError,
			Message:   fmt.Sprintf("%s %s answered %s", op.action.Method, op.action.Path, resp.Status),
			Status:    resp.StatusCode,
			Transient: tool.StatusTransient(resp.StatusCode),
		}
		if len(bytes.TrimSpace(body)) > 0 {
			if isJSONBody(ctype, body) {
				e.Body = json.RawMessage(bytes.TrimSpace(body))
			} else {
				e.Body = marshalPlain(truncateUTF8(body, maxErrorBody))
			}
		}
		code = e.Code
		return nil, e
	}
	return responseJSON(resp.StatusCode, ctype, body), nil
}

// withoutQuery is u without its query, which may carry a credential.
func withoutQuery(u *url.URL) string {
	c := *u
	c.RawQuery, c.ForceQuery = "", false
	return c.String()
}

// scrubURLError drops the query of the URL a transport error quotes.
func scrubURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		if u, perr := url.Parse(ue.URL); perr == nil {
			return &url.Error{Op: ue.Op, URL: redactURL(withoutQuery(u)), Err: ue.Err}
		}
	}
	return err
}

// transportError classifies a failed request or read.
func transportError(ctx context.Context, err error, format string, args ...any) *Error {
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.Is(err, context.DeadlineExceeded):
		return newError(CodeTimeout, nil, format+": timed out", args...)
	case errors.Is(ctx.Err(), context.Canceled):
		return newError(CodeCanceled, nil, format+": canceled", args...)
	}
	return newError(CodeUpstreamUnreachable, err, format, args...)
}

func isJSONBody(ctype string, body []byte) bool {
	if ctype == "" {
		return json.Valid(body)
	}
	mt, _, err := mime.ParseMediaType(ctype)
	if err != nil {
		return false
	}
	return isJSONMediaType(mt) && json.Valid(body)
}

// responseJSON turns a 2xx response body into the action's JSON result.
func responseJSON(status int, ctype string, body []byte) json.RawMessage {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		return json.RawMessage("null")
	}
	if isJSONBody(ctype, trimmed) {
		return json.RawMessage(trimmed)
	}
	w := map[string]any{"status": status, "contentType": ctype}
	if utf8.Valid(body) {
		w["text"] = string(body)
	} else {
		w["base64"] = base64.StdEncoding.EncodeToString(body)
	}
	return marshalPlain(w)
}

// marshalPlain encodes v without escaping <, > and & (bodies are data, not
// HTML).
func marshalPlain(v any) json.RawMessage {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // strings and maps of strings cannot fail
	return json.RawMessage(bytes.TrimRight(buf.Bytes(), "\n"))
}

func truncateUTF8(b []byte, n int) string {
	if len(b) <= n {
		return strings.ToValidUTF8(string(b), "\uFFFD")
	}
	return strings.ToValidUTF8(string(b[:n]), "\uFFFD") + "…"
}

// request validates input and builds the HTTP request of the operation.
func (op *operation) request(ctx context.Context, input json.RawMessage) (*http.Request, error) {
	var validated map[string]json.RawMessage // the input with defaults applied
	if v := op.validator(); v != nil {
		out, verr := v.Validate(input, &tool.ValidateOptions{NoUnknown: true})
		if verr != nil {
			for _, f := range verr.Fields {
				if !op.props[f] && !strings.Contains(f, ".") && f != "input" {
					// An unknown field: say what the action takes.
					verr.Message += " (" + op.action.Name + " takes: " + strings.Join(op.accepted(), ", ") + ")"
					break
				}
			}
			return nil, verr
		}
		_ = json.Unmarshal(out, &validated)
	}
	fields := map[string]json.RawMessage{}
	if trimmed := bytes.TrimSpace(input); len(trimmed) > 0 && !bytes.Equal(trimmed, []byte("null")) {
		if trimmed[0] != '{' {
			return nil, validationError("input must be a JSON object")
		}
		if err := json.Unmarshal(trimmed, &fields); err != nil {
			return nil, validationError("input is not valid JSON: %v", err)
		}
	}
	// The caller's fields keep their bytes (a JSON body goes out exactly as
	// given); validation only adds the defaults.
	for k, v := range validated {
		if old, ok := fields[k]; !ok || isNull(old) {
			fields[k] = v
		}
	}
	var unknown []string
	for k, v := range fields {
		if isNull(v) {
			delete(fields, k) // null means absent
			continue
		}
		if !op.props[k] {
			unknown = append(unknown, k)
		}
	}
	// What the validator checks already; these checks remain for an input
	// schema that did not compile, and name every field at fault in one
	// line, as the validator does.
	var missing []string
	for _, p := range op.params {
		if _, ok := fields[p.prop]; p.required && !ok {
			missing = append(missing, p.prop)
		}
	}
	if op.body != nil && op.body.required {
		if _, ok := fields[op.body.prop]; !ok {
			missing = append(missing, op.body.prop)
		}
	}
	if len(missing)+len(unknown) > 0 {
		sort.Strings(unknown)
		var parts []string
		if len(missing) > 0 {
			parts = append(parts, "missing required properties: "+strings.Join(missing, ", "))
		}
		if len(unknown) > 0 {
			parts = append(parts, "unknown properties: "+strings.Join(unknown, ", "))
		}
		all := append(missing, unknown...)
		return nil, &Error{Code: CodeValidationError, Field: all[0], Fields: all,
			Message: strings.Join(parts, "; ") + " (" + op.action.Name + " takes: " + strings.Join(op.accepted(), ", ") + ")"}
	}
	if op.baseURL == "" {
		return nil, &Error{Code: CodeNoBaseURL, Message: fmt.Sprintf("%s has no base URL: %s", op.action.Name, op.baseErr)}
	}

	path := op.action.Path
	var query []string
	var cookies []string
	header := http.Header{}
	for _, p := range op.params {
		raw, ok := fields[p.prop]
		if !ok {
			continue
		}
		v, err := decodeValue(raw, p)
		if err != nil {
			return nil, err
		}
		switch p.in {
		case "path":
			path = strings.ReplaceAll(path, "{"+p.name+"}", pathValue(p, v))
		case "query":
			query = append(query, queryPairs(p, v)...)
		case "header":
			s := simpleValue(v, p.explode, nil)
			if strings.ContainsAny(s, "\r\n") {
				return nil, validationError("field %q: a header value cannot contain line breaks", p.prop)
			}
			// Go's client refuses the other control characters too, as
			// an error of the transport (UPSTREAM_UNREACHABLE, transient):
			// the input is at fault, and a retry cannot help.
			if i := strings.IndexFunc(s, func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }); i >= 0 {
				return nil, validationError("field %q: a header value cannot contain control characters (%U at byte %d)", p.prop, rune(s[i]), i)
			}
			header.Set(p.name, s)
		case "cookie":
			cookies = append(cookies, p.name+"="+url.QueryEscape(simpleValue(v, false, nil)))
		}
	}

	if seg, ok := dotSegment(path, op.action.Path); ok {
		return nil, validationError("a path parameter makes the path segment %q, which a server would resolve to another path", seg)
	}
	target := op.baseURL + path
	if len(query) > 0 {
		sep := "?"
		if strings.Contains(target, "?") {
			sep = "&"
		}
		target += sep + strings.Join(query, "&")
	}
	u, err := url.Parse(target)
	if err != nil {
		return nil, validationError("building the request URL: %v", err)
	}

	var body io.Reader
	if op.body != nil {
		if raw, ok := fields[op.body.prop]; ok {
			b, err := encodeBody(op.body, raw)
			if err != nil {
				return nil, err
			}
			body = bytes.NewReader(b)
			header.Set("Content-Type", op.body.mediaType)
		}
	}
	req, err := http.NewRequestWithContext(ctx, op.action.Method, u.String(), body)
	if err != nil {
		return nil, validationError("building the request: %v", err)
	}
	req.Header = header
	if req.Header.Get("Accept") == "" {
		req.Header.Set("Accept", "application/json, */*;q=0.8")
	}
	if len(cookies) > 0 {
		req.Header.Set("Cookie", strings.Join(cookies, "; "))
	}
	for k, v := range op.source.src.Headers {
		req.Header.Set(k, v)
	}
	return req, nil
}

// dotSegment returns a "." or ".." segment of path when the template had
// none. Percent-encoding keeps a value from adding a segment, but a value
// that is itself "." or ".." (or makes one, as "." does in label style) is a
// whole segment that servers and proxies resolve (RFC 3986 section 5.2.4):
// /users/{id}/keys with id ".." would reach /keys. Percent-encoded dots
// count too: WHATWG URLs and many servers decode %2E before they resolve.
// So do the separators a value's own slashes and backslashes became
// (%2F, %5C): Caddy, and the proxies and frameworks that decode the path
// before they clean it, read /greet/{name} with name "../time" (sent as
// /greet/..%2Ftime) as /time, so a value could leave the operation and
// the source's base path.
func dotSegment(path, template string) (string, bool) {
	first := func(p string) string {
		p = strings.NewReplacer("%2f", "/", "%2F", "/", "%5c", "/", "%5C", "/").Replace(p)
		for _, seg := range strings.Split(p, "/") {
			if s := strings.ReplaceAll(strings.ToLower(seg), "%2e", "."); s == "." || s == ".." {
				return seg
			}
		}
		return ""
	}
	if first(template) != "" {
		return "", false // the service's own path; not ours to judge
	}
	seg := first(path)
	return seg, seg != ""
}

func validationError(format string, args ...any) *Error {
	return &Error{Code: CodeValidationError, Message: fmt.Sprintf(format, args...)}
}

// accepted lists the input properties the action takes, sorted.
func (op *operation) accepted() []string {
	out := make([]string, 0, len(op.props))
	for k := range op.props {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func isNull(raw json.RawMessage) bool {
	return bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}

// value is a decoded parameter: a scalar's text, a list of scalar texts, or
// object pairs in key order.
type value struct {
	scalar string
	list   []string
	pairs  [][2]string
	kind   string // "", "array", "object"
}

// decodeValue reads one parameter's JSON value. A scalar where the schema
// says array is a one-element array; an array or object where the schema
// says scalar is refused, unless the parameter is sent as JSON text.
func decodeValue(raw json.RawMessage, p paramSpec) (value, error) {
	raw = bytes.TrimSpace(raw)
	if p.asJSON {
		var buf bytes.Buffer
		if err := json.Compact(&buf, raw); err != nil {
			return value{}, validationError("field %q: %v", p.prop, err)
		}
		return value{scalar: buf.String()}, nil
	}
	switch raw[0] {
	case '[':
		if p.kind == "object" || p.kind == "scalar" {
			return value{}, validationError("field %q must be %s, not an array", p.prop, kindName(p.kind))
		}
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			return value{}, validationError("field %q: %v", p.prop, err)
		}
		v := value{kind: "array"}
		for i, it := range items {
			s, ok := scalarText(it)
			if !ok {
				return value{}, validationError("field %q: item %d must be a string, number or boolean", p.prop, i)
			}
			v.list = append(v.list, s)
		}
		return v, nil
	case '{':
		if p.kind == "array" || p.kind == "scalar" {
			return value{}, validationError("field %q must be %s, not an object", p.prop, kindName(p.kind))
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(raw, &m); err != nil {
			return value{}, validationError("field %q: %v", p.prop, err)
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		v := value{kind: "object"}
		for _, k := range keys {
			if isNull(m[k]) {
				continue
			}
			s, ok := scalarText(m[k])
			if !ok {
				return value{}, validationError("field %q: property %q must be a string, number or boolean", p.prop, k)
			}
			v.pairs = append(v.pairs, [2]string{k, s})
		}
		return v, nil
	}
	s, ok := scalarText(raw)
	if !ok {
		return value{}, validationError("field %q: invalid value", p.prop)
	}
	if p.kind == "array" {
		return value{kind: "array", list: []string{s}}, nil
	}
	if p.kind == "object" {
		return value{}, validationError("field %q must be an object", p.prop)
	}
	return value{scalar: s}, nil
}

func kindName(kind string) string {
	switch kind {
	case "array":
		return "an array"
	case "object":
		return "an object"
	}
	return "a string, number or boolean"
}

// scalarText is the wire text of a JSON string, number or boolean.
func scalarText(raw json.RawMessage) (string, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "", false
	}
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", false
		}
		return s, true
	case 't', 'f':
		var b bool
		if err := json.Unmarshal(raw, &b); err != nil {
			return "", false
		}
		return strconv.FormatBool(b), true
	case '[', '{', 'n':
		return "", false
	}
	var n json.Number
	if err := json.Unmarshal(raw, &n); err != nil {
		return "", false
	}
	return n.String(), true
}

// simpleValue renders the `simple` style (path and header): a,b,c for an
// array; k1,v1,k2,v2 for an object, or k1=v1,k2=v2 exploded. esc escapes each
// part (nil: none).
func simpleValue(v value, explode bool, esc func(string) string) string {
	if esc == nil {
		esc = func(s string) string { return s }
	}
	switch v.kind {
	case "array":
		parts := make([]string, len(v.list))
		for i, s := range v.list {
			parts[i] = esc(s)
		}
		return strings.Join(parts, ",")
	case "object":
		parts := make([]string, 0, 2*len(v.pairs))
		for _, kv := range v.pairs {
			if explode {
				parts = append(parts, esc(kv[0])+"="+esc(kv[1]))
			} else {
				parts = append(parts, esc(kv[0]), esc(kv[1]))
			}
		}
		return strings.Join(parts, ",")
	}
	return esc(v.scalar)
}

// pathValue renders a path parameter in its style (simple, label, matrix),
// percent-encoding each part so a value never adds a path segment.
func pathValue(p paramSpec, v value) string {
	esc := url.PathEscape
	switch p.style {
	case "label":
		if p.explode && v.kind == "array" {
			return "." + strings.Join(mapStrings(v.list, esc), ".")
		}
		return "." + simpleValue(v, p.explode, esc)
	case "matrix":
		name := esc(p.name)
		switch {
		case v.kind == "array" && p.explode:
			parts := make([]string, len(v.list))
			for i, s := range v.list {
				parts[i] = ";" + name + "=" + esc(s)
			}
			return strings.Join(parts, "")
		case v.kind == "object" && p.explode:
			var b strings.Builder
			for _, kv := range v.pairs {
				b.WriteString(";" + esc(kv[0]) + "=" + esc(kv[1]))
			}
			return b.String()
		}
		return ";" + name + "=" + simpleValue(v, false, esc)
	}
	return simpleValue(v, p.explode, esc)
}

// queryPairs renders a query parameter as encoded name=value pairs in its
// style: form (default; exploded arrays repeat the name, exploded objects
// give one pair per property), spaceDelimited, pipeDelimited, deepObject
// (name[key]=value).
func queryPairs(p paramSpec, v value) []string {
	esc := url.QueryEscape
	name := esc(p.name)
	switch v.kind {
	case "array":
		switch {
		case p.style == "spaceDelimited" && !p.explode:
			return []string{name + "=" + strings.Join(mapStrings(v.list, esc), "%20")}
		case p.style == "pipeDelimited" && !p.explode:
			return []string{name + "=" + strings.Join(mapStrings(v.list, esc), "|")}
		case p.explode:
			out := make([]string, len(v.list))
			for i, s := range v.list {
				out[i] = name + "=" + esc(s)
			}
			return out
		}
		return []string{name + "=" + strings.Join(mapStrings(v.list, esc), ",")}
	case "object":
		switch {
		case p.style == "deepObject":
			out := make([]string, len(v.pairs))
			for i, kv := range v.pairs {
				out[i] = esc(p.name+"["+kv[0]+"]") + "=" + esc(kv[1])
			}
			return out
		case p.explode:
			out := make([]string, len(v.pairs))
			for i, kv := range v.pairs {
				out[i] = esc(kv[0]) + "=" + esc(kv[1])
			}
			return out
		}
		return []string{name + "=" + simpleValue(v, false, esc)}
	}
	return []string{name + "=" + esc(v.scalar)}
}

func mapStrings(in []string, f func(string) string) []string {
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = f(s)
	}
	return out
}

// encodeBody encodes the `body` input for the operation's media type: JSON
// as given for JSON types, form encoding for an object under
// application/x-www-form-urlencoded, and a string as is for anything else.
func encodeBody(b *bodySpec, raw json.RawMessage) ([]byte, error) {
	raw = bytes.TrimSpace(raw)
	mt := strings.ToLower(strings.TrimSpace(strings.Split(b.mediaType, ";")[0]))
	switch {
	case isJSONMediaType(mt):
		return raw, nil
	case mt == "application/x-www-form-urlencoded":
		if raw[0] != '{' {
			return nil, validationError("field %q must be an object (sent as %s)", b.prop, mt)
		}
		v, err := decodeValue(raw, paramSpec{prop: b.prop})
		if err != nil {
			return nil, err
		}
		pairs := queryPairs(paramSpec{name: b.prop, style: "form", explode: true}, v)
		return []byte(strings.Join(pairs, "&")), nil
	}
	if raw[0] != '"' {
		return nil, validationError("field %q must be a string (sent as %s)", b.prop, b.mediaType)
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, validationError("field %q: %v", b.prop, err)
	}
	return []byte(s), nil
}
