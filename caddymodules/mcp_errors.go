package caddymodules

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	sdkjson "github.com/segmentio/encoding/json"
	"go.uber.org/zap"

	"github.com/codemode-gateway/caddy-codemode/broker"
	"github.com/codemode-gateway/caddy-codemode/internal/jsonbound"
	"github.com/codemode-gateway/caddy-codemode/internal/streamdeadline"
	"github.com/codemode-gateway/caddy-codemode/internal/tool"
)

// JSON-RPC error codes the transport uses.
const (
	rpcParseError     = -32700
	rpcInvalidRequest = -32600
	rpcMethodNotFound = -32601
	rpcInvalidParams  = -32602
	rpcInternalError  = -32603
	// rpcSessionNotFound is implementation-defined (JSON-RPC's server-error
	// range), the code MCP SDKs use for an unknown Mcp-Session-Id.
	rpcSessionNotFound = -32001
	// rpcServerBusy is implementation-defined: the gateway holds as many
	// MCP sessions as it may.
	rpcServerBusy = -32000
)

// mcpWriter turns the go-sdk's plain-text transport errors (400, 404, 405,
// 413, 415, 5xx written with http.Error) into JSON-RPC error responses,
// which is what MCP clients parse, and reports 5xx with the request id. It
// also lets the session directory see the Mcp-Session-Id of an answer.
type mcpWriter struct {
	http.ResponseWriter
	status   int
	wrote    bool
	rewrite  bool
	buf      bytes.Buffer
	onHeader func(status int, h http.Header) // before the header goes out
	// body is the request body when it was peeked before the go-sdk read
	// it (the go-sdk replaces the request's Body), else nil.
	body *peekedBody
	// calls are the POST's requests while it is tracked (mcpCalls.track),
	// by id; cancelledCalls counts those cancelled; dropped tells that an
	// answer to a cancelled one was left out.
	calls          map[jsonrpc.ID]*rpcCall
	cancelledCalls atomic.Int32
	dropped        bool
	logger         *zap.Logger
	// stops are the requests its cancellations cancel, stopped once the
	// POST is accepted; post is what its requests' handlers find of it.
	stops []*rpcCall
	post  *postCalls
	// unknown are the answers (-32601, each with its id) to the requests
	// of unknown methods that legacyPrecheck left out of a batch, added to
	// the go-sdk's answer (addUnknown); whole is the batch as it came.
	unknown [][]byte
	whole   *peekedBody
	// deadline bounds each write of the answer (an SSE event, a JSON
	// body): a client that keeps its connection but reads nothing held
	// the handler, its answer's memory and the process's exit (Caddy
	// waits for every open request) until Caddy's write idle timeout, a
	// minute by default, or for ever without one. nil: none (tests).
	deadline *streamdeadline.Deadline
}

func (w *mcpWriter) WriteHeader(code int) {
	if w.wrote {
		return
	}
	alone := code == http.StatusAccepted && len(w.unknown) > 0
	if alone {
		// The rest of the batch were notifications: the answers to its
		// unknown requests are the whole answer.
		code = http.StatusOK
		w.Header().Set("Content-Type", "application/json")
		w.Header().Del("Content-Length")
	}
	w.wrote, w.status = true, code
	if strings.HasPrefix(w.Header().Get("Content-Type"), "text/event-stream") {
		// The 2026-07-28 transport: a proxy such as nginx must not buffer
		// an SSE stream (progress would reach the client in one lump).
		w.Header().Set("X-Accel-Buffering", "no")
	}
	if code < 400 && w.stops != nil {
		w.stopCancelled()
	}
	if w.onHeader != nil {
		w.onHeader(code, w.Header())
	}
	if code >= 400 && strings.HasPrefix(w.Header().Get("Content-Type"), "text/plain") {
		w.rewrite = true // written in finish
		return
	}
	w.ResponseWriter.WriteHeader(code)
	if alone {
		_, _ = w.ResponseWriter.Write(w.addUnknown(nil))
	}
}

func (w *mcpWriter) Write(b []byte) (int, error) {
	n := len(b) // of b as given, whatever is written in its place
	if !w.rewrite {
		b = withPlainErrors(b, strings.HasPrefix(w.Header().Get("Content-Type"), "text/event-stream"))
	}
	if w.cancelledCalls.Load() > 0 && !w.rewrite {
		if b = w.withoutCancelled(b); b == nil {
			w.dropped = true
		}
	}
	if len(w.unknown) > 0 && !w.rewrite && w.status < 300 {
		b = w.addUnknown(b)
	}
	if b == nil {
		return n, nil
	}
	if _, err := w.write(b); err != nil {
		return 0, err
	}
	return n, nil
}

func (w *mcpWriter) write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if w.rewrite {
		return w.buf.Write(b)
	}
	if w.deadline != nil {
		w.deadline.Extend(time.Now())
	}
	return w.ResponseWriter.Write(b)
}

// FlushError keeps SSE answers streaming (Caddy's writers flush through
// http.ResponseController, not http.Flusher).
func (w *mcpWriter) FlushError() error {
	if w.rewrite {
		return nil
	}
	if err := http.NewResponseController(w.ResponseWriter).Flush(); err != nil {
		return err
	}
	if w.deadline != nil {
		w.deadline.Sent()
	}
	return nil
}

// Flush is FlushError for callers that use http.Flusher.
func (w *mcpWriter) Flush() { _ = w.FlushError() }

// Unwrap lets http.ResponseController reach the connection (deadlines).
func (w *mcpWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// finish writes a buffered plain-text error as a JSON-RPC error object and
// logs a 5xx with its request id.
func (w *mcpWriter) finish(logger *zap.Logger, r *http.Request, requestID string) {
	if w.status >= 500 {
		logger.Error("MCP request failed", zap.Int("status", w.status), zap.String("request_id", requestID),
			zap.String("method", r.Method), zap.String("cause", strings.TrimSpace(w.buf.String())))
	}
	if !w.rewrite {
		return
	}
	msg := strings.TrimSpace(w.buf.String())
	if w.status == http.StatusForbidden && strings.HasPrefix(msg, "Forbidden: invalid Host header") {
		// Most often a proxy on this machine that keeps the public Host:
		// the client sees only a 403.
		logger.Warn("MCP request refused by the DNS-rebinding protection: a loopback listener got a request for another host; "+
			"behind a proxy on this machine that keeps the public Host, set disable_localhost_protection",
			zap.String("host", r.Host), zap.String("request_id", requestID))
	}
	h := w.ResponseWriter.Header()
	h.Del("Content-Length")
	if w.status == http.StatusBadRequest && strings.HasPrefix(msg, "JSON RPC not handled") {
		// A method the go-sdk does not know (tasks/get of 2025-11-25, a
		// misspelling) is refused before any session sees it, as a 400
		// without the request's id. JSON-RPC's answer is -32601 with the id,
		// which clients turn into a "method not found" error of that call;
		// a notification gets no answer (202, accepted and ignored). Only
		// a body peeked before the go-sdk read it can be looked at again.
		if w.body != nil {
			m, ok := w.body.message()
			if ok && m.Method != "" && len(m.ID) == 0 && len(w.unknown) > 0 {
				// A batch of unknown methods only (withoutUnknownMethods):
				// the answers to its requests.
				h.Set("Content-Type", "application/json")
				w.ResponseWriter.WriteHeader(http.StatusOK)
				_, _ = w.ResponseWriter.Write(w.addUnknown(nil))
				return
			}
			if ok && m.Method != "" && len(m.ID) == 0 {
				h.Del("Content-Type")
				w.ResponseWriter.WriteHeader(http.StatusAccepted)
				return
			}
			if ok && m.Method != "" {
				writeJSONRPCError(w.ResponseWriter, http.StatusOK, m.ID, rpcMethodNotFound, "method not found: "+strconv.Quote(m.Method), nil)
				return
			}
		}
	}
	var data any
	code := rpcInvalidRequest
	switch {
	case w.status == http.StatusBadRequest && (strings.HasPrefix(msg, "malformed payload") || strings.HasPrefix(msg, "failed to read body") ||
		strings.HasPrefix(msg, "POST requires a non-empty body")):
		code = rpcParseError
		if w.body != nil && strings.HasPrefix(msg, "malformed payload") && json.Valid(w.body.buf) {
			// JSON, but no message or batch of them: JSON-RPC's Invalid
			// Request, as over stdio, not a Parse error.
			code, msg = rpcInvalidRequest, invalidMessage(w.body.buf, msg)
		}
	case w.status == http.StatusNotFound:
		code = rpcSessionNotFound
		msg = "session not found: it ended, expired or its gateway is gone; send initialize without Mcp-Session-Id to start a new one"
	case w.status >= 500:
		code = rpcInternalError
		msg = "internal error"
		data = map[string]string{"requestId": requestID}
	case w.status == http.StatusBadRequest && strings.HasPrefix(msg, "JSON RPC not handled"):
		code = rpcMethodNotFound // in a batch: the id is not known
		msg, _ = plainErrorMessage(rpcMethodNotFound, msg)
	}
	writeJSONRPCError(w.ResponseWriter, w.status, nil, int64(code), msg, data)
}

// addUnknown is b, a piece of the go-sdk's answer to a batch (nil when it
// has none to add them to), with w.unknown added: one SSE event each before
// b's events, or inside b's JSON array; then w.unknown is spent. A piece
// that is neither (a 202's empty body) is b as it is, w.unknown kept.
func (w *mcpWriter) addUnknown(b []byte) []byte {
	var out []byte
	switch t := bytes.TrimSpace(b); {
	case strings.HasPrefix(w.Header().Get("Content-Type"), "text/event-stream"):
		for _, a := range w.unknown {
			out = append(append(append(out, "event: message\ndata: "...), a...), "\n\n"...)
		}
		out = append(out, b...)
	case b == nil || (len(t) >= 2 && t[0] == '[' && t[len(t)-1] == ']'):
		out = append(out, '[')
		if len(t) >= 2 {
			out = append(out, bytes.TrimSpace(t[1:len(t)-1])...)
		}
		for _, a := range w.unknown {
			if len(out) > 1 {
				out = append(out, ',')
			}
			out = append(out, a...)
		}
		out = append(out, ']')
	default:
		return b
	}
	w.unknown = nil
	return out
}

// unstripped is r with its batch as it came, for the gateway that holds
// its session, which leaves its unknown methods out itself; w adds no
// answers then.
func (w *mcpWriter) unstripped(r *http.Request) *http.Request {
	if w.whole == nil {
		return r
	}
	r = r.Clone(r.Context())
	setPeekedBody(r, w.whole.Closer, w.whole.buf)
	w.unknown, w.whole = nil, nil
	return r
}

// setPeekedBody makes buf, already read from a body that closer closes, r's
// body and length.
func setPeekedBody(r *http.Request, closer io.Closer, buf []byte) {
	r.Body = &peekedBody{Reader: bytes.NewReader(buf), Closer: closer, buf: buf, ok: true}
	r.ContentLength = int64(len(buf))
	r.Header.Set("Content-Length", strconv.Itoa(len(buf)))
}

// legacyPrecheck refuses, with the protocol's own errors, the messages the
// go-sdk's handshake handler would answer wrongly: an answer with code 0
// for a call before initialize (the transport wants 400 for a request
// without Mcp-Session-Id) or for initialize params that are not an object
// (-32602), and an empty 202 for a message that is neither a request, a
// notification nor a response. It returns false when it answered.
func (h *MCPHandler) legacyPrecheck(w http.ResponseWriter, r *http.Request) bool {
	if r.Method != http.MethodPost || r.Body == nil || baseMediaType(r.Header.Get("Content-Type")) != "application/json" {
		return true // the go-sdk answers (415 for another media type)
	}
	msg, ok := peekJSONRPC(r)
	if !ok {
		// Only a body within the size and nesting bounds is decoded.
		if pb := r.Body.(*peekedBody); !pb.ok {
			return true
		} else if heads, batch, ok := pb.readHeads(); batch && initializeInBatch(heads) {
			writeJSONRPCError(w, http.StatusBadRequest, nil, rpcInvalidRequest, batchedInitializeMessage, nil)
			return false
		} else if batch && ok {
			if buf, answers, cut := withoutUnknownMethods(pb.buf, heads); cut {
				if mw, ok := w.(*mcpWriter); ok {
					mw.unknown, mw.whole = answers, pb
				}
				setPeekedBody(r, pb.Closer, buf)
			}
		}
		return true // not one JSON object (a batch, or malformed): the go-sdk answers
	}
	switch {
	case msg.Method == "" && msg.Result == nil && msg.Error == nil:
		writeJSONRPCError(w, http.StatusBadRequest, msg.ID, rpcInvalidRequest, "invalid request: a message needs a method (a request or notification) or a result or error (a response)", nil)
		return false
	case msg.Method == "initialize" && !isJSONObjectRaw(msg.Params):
		writeJSONRPCError(w, http.StatusOK, msg.ID, rpcInvalidParams, "invalid params: initialize needs params {protocolVersion, capabilities, clientInfo}", nil)
		return false
	case msg.Method == "initialize" && r.Header.Get("Mcp-Session-Id") == "":
		// Fields of the wrong type: the go-sdk answered code 0 (naming its
		// Go types) after it had opened a session, which then held a place
		// of the client's and of the gateway's session limits.
		if problem := initializeParamsProblem(msg.Params); problem != "" {
			writeJSONRPCError(w, http.StatusOK, msg.ID, rpcInvalidParams, "invalid params: initialize: "+problem, nil)
			return false
		}
	case !h.Stateless && r.Header.Get("Mcp-Session-Id") == "" && len(msg.ID) > 0 && msg.Method != "" &&
		msg.Method != "initialize" && msg.Method != "ping" && msg.Method != "server/discover":
		writeJSONRPCError(w, http.StatusBadRequest, msg.ID, rpcInvalidRequest,
			"bad request: no Mcp-Session-Id; send initialize first (or speak revision 2026-07-28, which needs no session)", nil)
		return false
	}
	return true
}

// initializeInBatch reports whether heads, a batch's messages, hold an
// initialize, which revision 2025-03-26 (the one with batches) says "MUST
// NOT be part of a JSON-RPC batch". The go-sdk opened a session for one,
// outside the session limits (counted at a lone initialize), and answered
// one in a session with code 0; the batch is refused whole, as the go-sdk
// refuses other invalid batches.
func initializeInBatch(heads []rpcHead) bool {
	for _, h := range heads {
		var method string
		if len(h.Method) > 0 && sdkjson.Unmarshal(h.Method, &method) == nil && method == "initialize" {
			return true
		}
	}
	return false
}

// sdkNotifications are the notifications from a client that the go-sdk
// handles, and sdkRequests the requests (v1.8.0's serverMethodInfos;
// TestMCPBatchNotificationsOfTheSDK holds both lists to it). It refuses a
// POST holding any other method whole.
var (
	sdkNotifications = map[string]bool{
		"notifications/initialized": true, notificationCancelled: true,
		"notifications/progress": true, "notifications/roots/list_changed": true,
	}
	sdkRequests = map[string]bool{
		"completion/complete": true, "server/discover": true, "initialize": true, "ping": true,
		"prompts/list": true, "prompts/get": true, "tools/list": true, "tools/call": true,
		"resources/list": true, "resources/templates/list": true, "resources/read": true,
		"logging/setLevel": true, "resources/subscribe": true, "subscriptions/listen": true,
		"resources/unsubscribe": true,
	}
)

// withoutUnknownMethods is buf, a batch whose messages' heads are heads,
// without its messages of methods the go-sdk does not handle, which
// refused the whole batch (400 -32601 with id null), none of its requests
// answered. JSON-RPC 2.0 answers each request of a batch: answers holds
// the -32601 of each request left out, with its id, for the gateway to
// add to the go-sdk's answer (mcpWriter.addUnknown); a notification gets
// no answer, and one the server does not know is ignored. A batch of such
// messages only becomes a lone notification of its first method, which
// the go-sdk answers as any unknown message alone once it has checked the
// session (202, or the session's error). cut is false when nothing is
// left out (buf itself).
func withoutUnknownMethods(buf []byte, heads []rpcHead) (out []byte, answers [][]byte, cut bool) {
	unknown := func(h rpcHead) (method string, ok bool) {
		_, method, isMessage := h.call()
		if !isMessage || sdkNotifications[method] || (len(h.ID) > 0 && sdkRequests[method]) {
			return "", false
		}
		return method, true
	}
	if !slices.ContainsFunc(heads, func(h rpcHead) bool { _, ok := unknown(h); return ok }) {
		return buf, nil, false
	}
	var msgs []json.RawMessage
	if sdkjson.Unmarshal(bytes.TrimSpace(buf), &msgs) != nil || len(msgs) != len(heads) {
		return buf, nil, false
	}
	out = append(make([]byte, 0, len(buf)), '[')
	first := ""
	for i, m := range msgs {
		method, ok := unknown(heads[i])
		switch {
		case !ok:
			if len(out) > 1 {
				out = append(out, ',')
			}
			out = append(out, m...)
			continue
		case first == "":
			first = method
		}
		if len(heads[i].ID) > 0 {
			a, _ := json.Marshal(jsonrpcError(heads[i].ID, rpcMethodNotFound, "method not found: "+strconv.Quote(method), nil))
			answers = append(answers, a)
		}
	}
	if len(out) == 1 {
		lone, _ := json.Marshal(map[string]string{"jsonrpc": "2.0", "method": first})
		return lone, answers, true
	}
	return append(out, ']'), answers, true
}

// batchedInitializeMessage is the answer to a batch initializeInBatch
// refuses.
const batchedInitializeMessage = "invalid request: initialize must not be part of a JSON-RPC batch; send it alone"

// invalidMessage is the -32600 message for buf, JSON that is no JSON-RPC
// message or batch of them, which the go-sdk's decoder refused with cause:
// what is wrong in JSON-RPC's words, where cause names the decoder's Go
// types ("into Go value of type jsonrpc2.wireDecode").
func invalidMessage(buf []byte, cause string) string {
	t := bytes.TrimSpace(buf)
	batch := len(t) > 0 && t[0] == '['
	const want = `an object with "jsonrpc": "2.0" and a string "method" (a request or notification) or a "result" or "error" (a response)`
	switch {
	case batch && bytes.Equal(bytes.Join(bytes.Fields(t), nil), []byte("[]")):
		return "invalid request: an empty batch"
	case strings.Contains(cause, "version tag"):
		return `invalid request: "jsonrpc" must be "2.0"`
	case batch:
		return "invalid request: every message of a batch must be " + want
	}
	return "invalid request: a message must be " + want
}

// initializeParamsProblem says which field of initialize params (a JSON
// object) has a type the go-sdk cannot decode, or "" when none has. The
// fields are the go-sdk's own types, decoded as the go-sdk decodes them:
// keys match exactly (encoding/json would match "Roots" to roots, a key
// the go-sdk ignores, and refuse a handshake the go-sdk accepts).
func initializeParamsProblem(params json.RawMessage) string {
	var fields map[string]json.RawMessage
	if json.Unmarshal(params, &fields) != nil {
		return "params must be an object"
	}
	for _, f := range []struct {
		key  string
		into any
	}{
		{"protocolVersion", new(string)},
		{"capabilities", new(mcp.ClientCapabilities)},
		{"clientInfo", new(mcp.Implementation)},
		{"_meta", new(mcp.Meta)},
	} {
		raw, ok := fields[f.key]
		if !ok {
			continue
		}
		// Parse is the go-sdk decoder's Decode without the decoder, which
		// allocated a 32 KiB buffer per field (96 KB per initialize).
		_, err := sdkjson.Parse(raw, f.into, sdkjson.DontMatchCaseInsensitiveStructFields)
		if err == nil {
			continue
		}
		var te *json.UnmarshalTypeError
		if !errors.As(err, &te) {
			return f.key + ": " + err.Error()
		}
		return typeProblem(f.key, raw, te)
	}
	return ""
}

// typeProblem says where in raw (the value of the field named key, "" for
// params themselves) a value has the JSON type te refused, and which type
// was wanted: "capabilities.roots: got string, want object".
func typeProblem(key string, raw json.RawMessage, te *json.UnmarshalTypeError) string {
	path := key
	if te.Field != "" {
		path = strings.TrimPrefix(path+"."+te.Field, ".")
	}
	if path == "" {
		path = "params"
	}
	if got := jsonValueKind(valueAt(raw, te.Field)); got != "" {
		return fmt.Sprintf("%s: got %s, want %s", path, got, jsonKind(te.Type))
	}
	return fmt.Sprintf("%s: want %s", path, jsonKind(te.Type))
}

// namedParamsProblem says what is wrong with the params of a tools/call,
// prompts/get or resources/read request of revision 2026-07-28 when they do
// not decode as the go-sdk decodes them, "" when they do or method is
// another. The go-sdk reads them to compare the name with the Mcp-Name
// header first, and answered any such request -32020 "failed to extract
// name from parameters", blaming the header for a requestState of the
// wrong type or an inputResponses entry of no known shape.
func namedParamsProblem(method string, params json.RawMessage) string {
	const flags = sdkjson.DontMatchCaseInsensitiveStructFields | sdkjson.DontCopyRawMessage // decoded to be thrown away
	var into any
	switch method {
	case "tools/call":
		// The go-sdk's check decodes mcp.CallToolParams, whose arguments
		// (any JSON) cannot fail; raw, they are not copied.
		into = new(mcp.CallToolParamsRaw)
	case "prompts/get":
		into = new(mcp.GetPromptParams)
	case "resources/read":
		into = new(mcp.ReadResourceParams)
	default:
		return ""
	}
	params = bytes.TrimSpace(params)
	if len(params) == 0 || bytes.Equal(params, []byte("null")) {
		return ""
	}
	_, err := sdkjson.Parse(params, into, flags)
	if err == nil {
		return ""
	}
	problem := "a field of params has the wrong type"
	var te *json.UnmarshalTypeError
	switch {
	case strings.HasPrefix(err.Error(), `inputResponses["`):
		// An entry's own error (its type wrapped, or none): the go-sdk
		// picks the result type by the entry's keys.
		key, _, _ := strings.Cut(strings.TrimPrefix(err.Error(), `inputResponses[`), "]")
		problem = "inputResponses[" + key + "]: want the result of its input request: an object with \"action\" (elicitation), \"role\" (sampling) or \"roots\", of that result's shape"
	case errors.As(err, &te):
		problem = typeProblem("", params, te)
	}
	return "invalid params: " + method + ": " + problem
}

// valueAt is the value at a dotted path of object keys in raw (raw itself
// for ""), or nil.
func valueAt(raw json.RawMessage, path string) json.RawMessage {
	if path == "" {
		return raw
	}
	for _, key := range strings.Split(path, ".") {
		var obj map[string]json.RawMessage
		if json.Unmarshal(raw, &obj) != nil {
			return nil
		}
		if raw = obj[key]; raw == nil {
			return nil
		}
	}
	return raw
}

// jsonValueKind names the JSON type of a value, or "" for none.
func jsonValueKind(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return ""
	}
	switch raw[0] {
	case '"':
		return "string"
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	return "number"
}

// jsonKind names the JSON type a Go type decodes from.
func jsonKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint8,
		reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Slice, reflect.Array:
		return "array"
	}
	return "object"
}

// isInitialize tells whether body (nil: not peeked) is one JSON-RPC
// initialize request.
func isInitialize(body *peekedBody) bool {
	if body == nil {
		return false
	}
	m, ok := body.message()
	return ok && m.Method == "initialize" && len(m.ID) > 0
}

// jsonrpcMessage is the envelope of one JSON-RPC message.
type jsonrpcMessage struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  json.RawMessage `json:"error"`
}

// maxSafeID is the largest integer id in magnitude, 2^53-1, that the
// go-sdk answers as sent: it decodes a numeric id as a float64 and answers
// with its int64 conversion.
const maxSafeID = 1<<53 - 1

// badRequestID reports whether id, a request's id as sent, is one the
// go-sdk would answer as another id or not at all: MCP ids are strings or
// integers, and the go-sdk turns 1.5 into 1 and 2^53+1 into 2^53, so the
// client could not match the answer (and 1 may be another of its calls).
// A number with a zero fraction or an exponent (1.0, 1e2) is an integer
// and comes back as the same number. Absent is a notification; null is
// refused too: JSON-RPC makes {"id":null,"method":…} a request (to be
// answered with id null) and MCP forbids a null id, while the go-sdk took
// it for a notification and answered nothing, so a client waiting for the
// answer waited for ever.
func badRequestID(id json.RawMessage) bool {
	id = bytes.TrimSpace(id)
	if len(id) == 0 {
		return false
	}
	switch c := id[0]; {
	case c == '"':
		return false
	case c == '-', c >= '0' && c <= '9':
		v, err := strconv.ParseFloat(string(id), 64)
		return err != nil || v != math.Trunc(v) || math.Abs(v) > maxSafeID
	}
	return true // true, false, an object or an array
}

// badIDMessage is the answer to a request whose id badRequestID refuses.
const badIDMessage = "invalid request: an id is a string or an integer of at most 2^53-1 in magnitude (MCP), never null; another would come back changed"

// requestsWithBadID reports whether buf, a JSON-RPC message or batch,
// holds a request (a method and an id) whose id badRequestID refuses. It
// decodes only the id and the method, with the go-sdk's JSON package:
// 0.4 µs for a 0.6 KiB request, 3 µs for one with a 64 KiB script, where
// the full decode of peekedBody.message takes 4.7 and 360 µs (a Go
// benchmark of the three decodes, load 3), and the 2026-07-28 path had
// no decode before the go-sdk's own. It reads the message as the go-sdk
// does: keys match exactly ("ID" is not the id), and a "method" key makes
// a request whatever its value ("" and null too).
func requestsWithBadID(buf []byte) bool {
	heads, _, ok := readHeads(buf)
	return ok && headsWithBadID(heads)
}

// headsWithBadID is requestsWithBadID of decoded messages; false for none
// (the go-sdk answers what is not a message or a batch of them).
func headsWithBadID(heads []rpcHead) bool {
	for _, h := range heads {
		if len(h.Method) > 0 && badRequestID(h.ID) {
			return true
		}
	}
	return false
}

// refuseCharset answers a POST whose Content-Type names a charset other
// than UTF-8 with 415 and -32600, as the go-sdk answers another media
// type: the go-sdk looks at the media type only and read a UTF-16 body as
// UTF-8. It returns true when it answered.
func refuseCharset(w http.ResponseWriter, r *http.Request) bool {
	if r.Method != http.MethodPost {
		return false
	}
	cs, foreign := broker.ForeignCharset(r.Header.Get("Content-Type"))
	if !foreign {
		return false
	}
	writeJSONRPCError(w, http.StatusUnsupportedMediaType, nil, rpcInvalidRequest, fmt.Sprintf("charset %q is not served: JSON-RPC messages are UTF-8", cs), nil)
	return true
}

// refuseLargeBody answers a POST whose JSON text passes the gateway's
// bound on object members, array items or nesting (jsonbound.Request) with
// 400 and -32602, before anything decodes it: 200,000 keys in a
// meta:invoke's arguments cost 2.7 s of CPU within the 4 MiB body limit.
// A body over the byte limit, or nested deeper than mcpMaxDepth, is left
// to the go-sdk. It returns true when it answered.
func refuseLargeBody(w http.ResponseWriter, r *http.Request) bool {
	if r.Method != http.MethodPost || r.Body == nil {
		return false
	}
	buf, ok := peekBody(r)
	if !ok {
		return false
	}
	e := jsonbound.Check(buf, jsonbound.Request)
	if e == nil {
		return false
	}
	id, _ := peekMessage(r)
	writeJSONRPCError(w, http.StatusBadRequest, id, rpcInvalidParams, "invalid params: "+e.Error(),
		map[string]any{"code": tool.CodeValidationError, "bound": e.What, "limit": e.Limit})
	return true
}

// refuseBadID answers a POST whose request, or a request of whose batch,
// has an id badRequestID refuses: 400 with -32600 and id null, as any
// other invalid request, for both revisions' handlers. It returns true
// when it answered.
func refuseBadID(w http.ResponseWriter, r *http.Request) bool {
	if r.Method != http.MethodPost || r.Body == nil || baseMediaType(r.Header.Get("Content-Type")) != "application/json" {
		return false
	}
	if _, ok := peekBody(r); !ok {
		return false
	}
	if heads, _, ok := r.Body.(*peekedBody).readHeads(); !ok || !headsWithBadID(heads) {
		return false
	}
	writeJSONRPCError(w, http.StatusBadRequest, nil, rpcInvalidRequest, badIDMessage, nil)
	return true
}

// peekJSONRPC reads the body's JSON-RPC message and puts the body back.
func peekJSONRPC(r *http.Request) (jsonrpcMessage, bool) {
	if _, ok := peekBody(r); !ok {
		return jsonrpcMessage{}, false
	}
	return r.Body.(*peekedBody).message()
}

// parseJSONRPC decodes one JSON-RPC message; false for anything else.
func parseJSONRPC(buf []byte) (jsonrpcMessage, bool) {
	var msg jsonrpcMessage
	if len(bytes.TrimSpace(buf)) == 0 || bytes.TrimSpace(buf)[0] != '{' {
		return msg, false
	}
	if json.Unmarshal(buf, &msg) != nil {
		return msg, false
	}
	return msg, true
}

func isJSONObjectRaw(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) > 0 && t[0] == '{' && json.Valid(t)
}

func baseMediaType(v string) string {
	mt, _, err := mime.ParseMediaType(v)
	if err != nil {
		return ""
	}
	return mt
}

// refuseAccept answers a POST, or a GET of the handshake revisions (served
// when legacy), whose Accept header does not list what MCP's Streamable
// HTTP transport says the client MUST list: both application/json and
// text/event-stream for a POST, text/event-stream for a GET. An Accept
// that lists them otherwise gets 406 Not Acceptable, the HTTP status for
// it (the TypeScript SDK's answer; the go-sdk answered 400), and none at
// all 400: RFC 9110 reads a request without Accept as accepting anything,
// so it is the client breaking the transport's rule, not an unacceptable
// answer. Both carry JSON-RPC -32600 and a message naming the rule. It
// returns true when it answered.
func refuseAccept(w http.ResponseWriter, r *http.Request, legacy bool) bool {
	var need []string
	switch {
	case r.Method == http.MethodPost:
		need = []string{"application/json", "text/event-stream"}
	case r.Method == http.MethodGet && legacy:
		need = []string{"text/event-stream"}
	default:
		return false
	}
	values := r.Header.Values("Accept")
	if len(values) == 0 {
		writeJSONRPCError(w, http.StatusBadRequest, nil, rpcInvalidRequest, acceptMessage(r.Method, "no Accept header"), nil)
		return true
	}
	for _, t := range need {
		if !accepts(values, t) {
			writeJSONRPCError(w, http.StatusNotAcceptable, nil, rpcInvalidRequest, acceptMessage(r.Method, "Accept does not list "+t), nil)
			return true
		}
	}
	return false
}

// acceptMessage is refuseAccept's message for a request of method.
func acceptMessage(method, problem string) string {
	if method == http.MethodGet {
		return "not acceptable: " + problem + "; a GET stream needs Accept: text/event-stream"
	}
	return "not acceptable: " + problem + "; MCP clients send Accept: application/json, text/event-stream (answers are one or the other)"
}

// accepts reports whether the Accept header values list mediaType (a
// type/subtype without parameters) as acceptable, by RFC 9110's rule: the
// most specific range matching it (type/subtype, then type/*, then */*)
// decides, and its weight q=0 means "not acceptable" (so
// "application/json, text/event-stream;q=0" refuses SSE, as if it did not
// list it). A weight that is no number counts as 1, as the go-sdk, which
// reads no weights, takes it.
func accepts(values []string, mediaType string) bool {
	typ, _, _ := strings.Cut(mediaType, "/")
	best, q := 0, 0.0 // specificity of the best match so far (0: none), its weight
	for _, v := range values {
		for _, rng := range strings.Split(v, ",") {
			name, params, _ := strings.Cut(rng, ";")
			var spec int
			switch strings.ToLower(strings.TrimSpace(name)) {
			case mediaType:
				spec = 3
			case typ + "/*":
				spec = 2
			case "*/*":
				spec = 1
			}
			if spec > best {
				best, q = spec, acceptWeight(params)
			}
		}
	}
	return best > 0 && q > 0
}

// acceptWeight is the q parameter among an Accept range's parameters
// ("level=1;q=0.5"), 1 when there is none or it is no number.
func acceptWeight(params string) float64 {
	for _, p := range strings.Split(params, ";") {
		k, v, _ := strings.Cut(p, "=")
		if strings.EqualFold(strings.TrimSpace(k), "q") {
			if w, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
				return w
			}
		}
	}
	return 1
}

// goTypeError is the go-sdk's -32602 message for params it cannot decode
// into its Go type: "handling 'tools/call': invalid params: unmarshaling
// "5" into a *mcp.CallToolParamsRaw: json: cannot unmarshal "5" into Go
// value of type mcp.CallToolParamsRaw", or, for a field, "... into Go
// struct field mcp.CallToolParamsRaw.name of type string". Its groups: the
// method, the rest of the input from the value refused (Go-quoted), the Go
// type of params, the struct field (type.path) and its Go type.
var goTypeError = regexp.MustCompile(`^handling '([^']*)': invalid params: unmarshaling .* json: cannot unmarshal ("(?:[^"\\]|\\.)*") into Go (?:value of type (.+)|struct field (\S+) of type (.+))$`)

// notHandled is the go-sdk's message for a method it does not know, as
// its transport checks a request (2026-07-28, and a 2025-03-26 batch):
// "JSON RPC not handled: "x" unsupported"; in a session its JSON-RPC
// layer says "method not found: "x"". The group: the method, Go-quoted.
var notHandled = regexp.MustCompile(`^JSON RPC not handled: ("(?:[^"\\]|\\.)*") unsupported$`)

// plainErrorMessage is the message of a JSON-RPC error the go-sdk sends
// (code, msg) in MCP's words, and true, where the go-sdk's names its Go
// types (-32602 for params of the wrong type) or differs by where it was
// found (-32601 for an unknown method: always "method not found: "x"");
// false leaves msg as it is. The HTTP answers (mcpWriter) and stdio
// (codedErrors) both go through it.
func plainErrorMessage(code int64, msg string) (string, bool) {
	if code == rpcMethodNotFound && strings.HasPrefix(msg, "JSON RPC not handled") {
		if m := notHandled.FindStringSubmatch(msg); m != nil {
			return "method not found: " + m[1], true
		}
		return "method not found", true
	}
	if code != rpcInvalidParams || !strings.Contains(msg, " into Go ") {
		return msg, false
	}
	m := goTypeError.FindStringSubmatch(msg)
	if m == nil {
		method, _, _ := strings.Cut(strings.TrimPrefix(msg, "handling '"), "'")
		return "invalid params: " + method + ": a field of params has the wrong type", true
	}
	var got string
	if rest, err := strconv.Unquote(m[2]); err == nil {
		got = jsonValueKind(json.RawMessage(rest))
	}
	path, want := "params", "object"
	if m[4] != "" {
		// type.path: the path's keys follow the package and type names.
		if _, p, ok := strings.Cut(m[4], "."); ok {
			if _, p, ok = strings.Cut(p, "."); ok {
				path = p
			}
		}
		want = goTypeKind(m[5])
	}
	if got == "" {
		return fmt.Sprintf("invalid params: %s: %s: want %s", m[1], path, want), true
	}
	return fmt.Sprintf("invalid params: %s: %s: got %s, want %s", m[1], path, got, want), true
}

// goTypeKind names the JSON type that the Go type named t (as a message of
// encoding/json writes it: "string", "*int64", "[]mcp.Content",
// "map[string]interface {}") decodes from.
func goTypeKind(t string) string {
	t = strings.TrimLeft(t, "*")
	switch {
	case t == "string":
		return "string"
	case t == "bool":
		return "boolean"
	case strings.HasPrefix(t, "int"), strings.HasPrefix(t, "uint"), strings.HasPrefix(t, "float"):
		return "number"
	case strings.HasPrefix(t, "[]"), strings.HasPrefix(t, "["):
		return "array"
	}
	return "object"
}

// withPlainErrors is b, an answer the go-sdk writes (one SSE event when
// sse, else a JSON body: a message or a batch of them), with its error
// messages rewritten by plainErrorMessage; b itself when none changes.
// Most answers hold no error and are only scanned for one.
func withPlainErrors(b []byte, sse bool) []byte {
	if !bytes.Contains(b, []byte(`"error"`)) || !bytes.Contains(b, []byte(" into Go ")) && !bytes.Contains(b, []byte("JSON RPC not handled")) {
		return b
	}
	start, data := 0, b
	if sse {
		if data = sseData(b); data == nil {
			return b
		}
		start = bytes.Index(b, []byte("data: ")) + len("data: ")
	}
	t := bytes.TrimSpace(data)
	var fixed []byte
	if len(t) > 0 && t[0] == '[' {
		var msgs []json.RawMessage
		if json.Unmarshal(t, &msgs) != nil {
			return b
		}
		changed := false
		for i, m := range msgs {
			if f, ok := plainErrorsOf(m); ok {
				msgs[i], changed = f, true
			}
		}
		if !changed {
			return b
		}
		fixed, _ = json.Marshal(msgs)
	} else {
		var ok bool
		if fixed, ok = plainErrorsOf(t); !ok {
			return b
		}
	}
	if !sse {
		return append(fixed, '\n')
	}
	out := make([]byte, 0, len(b)+len(fixed)-len(data))
	out = append(append(append(out, b[:start]...), fixed...), b[start+len(data):]...)
	return out
}

// plainErrorsOf is msg, one JSON-RPC message, with its error's message
// rewritten by plainErrorMessage, and true; false when it keeps it.
func plainErrorsOf(msg json.RawMessage) (json.RawMessage, bool) {
	var m map[string]json.RawMessage
	if json.Unmarshal(msg, &m) != nil || m["error"] == nil {
		return msg, false
	}
	var e map[string]json.RawMessage
	var code int64
	var text string
	if json.Unmarshal(m["error"], &e) != nil || json.Unmarshal(e["code"], &code) != nil || json.Unmarshal(e["message"], &text) != nil {
		return msg, false
	}
	plain, ok := plainErrorMessage(code, text)
	if !ok {
		return msg, false
	}
	e["message"], _ = json.Marshal(plain)
	m["error"], _ = json.Marshal(e)
	out, err := json.Marshal(m)
	return out, err == nil
}
