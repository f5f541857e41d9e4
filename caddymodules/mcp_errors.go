package caddymodules

import (
	"bytes"
	"encoding/json"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"go.uber.org/zap"
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
}

func (w *mcpWriter) WriteHeader(code int) {
	if w.wrote {
		return
	}
	w.wrote, w.status = true, code
	if w.onHeader != nil {
		w.onHeader(code, w.Header())
	}
	if code >= 400 && strings.HasPrefix(w.Header().Get("Content-Type"), "text/plain") {
		w.rewrite = true // written in finish
		return
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *mcpWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if w.rewrite {
		return w.buf.Write(b)
	}
	return w.ResponseWriter.Write(b)
}

// FlushError keeps SSE answers streaming (Caddy's writers flush through
// http.ResponseController, not http.Flusher).
func (w *mcpWriter) FlushError() error {
	if w.rewrite {
		return nil
	}
	return http.NewResponseController(w.ResponseWriter).Flush()
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
			m, ok := parseJSONRPC(w.body.buf)
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
	case w.status == http.StatusNotFound:
		code = rpcSessionNotFound
		msg = "session not found: it ended, expired or its gateway is gone; send initialize without Mcp-Session-Id to start a new one"
	case w.status >= 500:
		code = rpcInternalError
		msg = "internal error"
		data = map[string]string{"requestId": requestID}
	case w.status == http.StatusBadRequest && strings.HasPrefix(msg, "JSON RPC not handled"):
		code = rpcMethodNotFound // in a batch: the id is not known
	}
	writeJSONRPCError(w.ResponseWriter, w.status, nil, int64(code), msg, data)
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
		return true // not one JSON object (a batch, or malformed): the go-sdk answers
	}
	switch {
	case msg.Method == "" && msg.Result == nil && msg.Error == nil:
		writeJSONRPCError(w, http.StatusBadRequest, msg.ID, rpcInvalidRequest, "invalid request: a message needs a method (a request or notification) or a result or error (a response)", nil)
		return false
	case msg.Method == "initialize" && !isJSONObjectRaw(msg.Params):
		writeJSONRPCError(w, http.StatusOK, msg.ID, rpcInvalidParams, "invalid params: initialize needs params {protocolVersion, capabilities, clientInfo}", nil)
		return false
	case !h.Stateless && r.Header.Get("Mcp-Session-Id") == "" && len(msg.ID) > 0 && msg.Method != "" &&
		msg.Method != "initialize" && msg.Method != "ping" && msg.Method != "server/discover":
		writeJSONRPCError(w, http.StatusBadRequest, msg.ID, rpcInvalidRequest,
			"bad request: no Mcp-Session-Id; send initialize first (or speak revision 2026-07-28, which needs no session)", nil)
		return false
	}
	return true
}

// jsonrpcMessage is the envelope of one JSON-RPC message.
type jsonrpcMessage struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  json.RawMessage `json:"error"`
}

// peekJSONRPC reads the body's JSON-RPC message and puts the body back.
func peekJSONRPC(r *http.Request) (jsonrpcMessage, bool) {
	buf, ok := peekBody(r)
	if !ok {
		return jsonrpcMessage{}, false
	}
	return parseJSONRPC(buf)
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
