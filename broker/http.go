package broker

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net"
	"net/http"
	"net/url"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/codemode-gateway/caddy-codemode/broker/catalog"
	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"
	"github.com/codemode-gateway/caddy-codemode/guard"
	"github.com/codemode-gateway/caddy-codemode/internal/jsonbound"
	"github.com/codemode-gateway/caddy-codemode/internal/streamdeadline"
	"github.com/codemode-gateway/caddy-codemode/internal/telemetry"
	"go.uber.org/zap"
)

// HandlerOptions adjust one HTTP handler of a broker; nil fields use the
// BrokerOptions.
type HandlerOptions struct {
	// RateLimiting replaces BrokerOptions.RateLimiting for this handler.
	RateLimiting *RateLimitConfig
	// RateLimitEntity names the guard entity counting this handler's
	// requests. Default "broker:http".
	RateLimitEntity string
	// Limits lower the broker's ceilings for requests through this handler
	// (a route): Timeout, MaxToolCalls and MaxSteps; zero keeps the
	// broker's (and the engine's, for MaxSteps).
	Limits RouteLimits
	// AllowedOrigins are the browser origins (scheme://host[:port], or "*"
	// for any) besides the handler's own whose requests are served. A
	// request whose Origin header names another origin is refused (403
	// ORIGIN_NOT_ALLOWED): a web page can POST to a gateway on the
	// visitor's machine or network without a CORS preflight (a body
	// without Content-Type is a "simple" request), so without this any
	// site the user visits could run code on an open broker. Clients that
	// are not browsers send no Origin and are not affected.
	AllowedOrigins []string
}

// RouteLimits are the ceilings of one route (see HandlerOptions.Limits).
type RouteLimits struct {
	Timeout      time.Duration
	MaxToolCalls int
	MaxSteps     int64
}

// Handler returns the HTTP interface with the BrokerOptions settings. Paths
// are matched as given (mount it under a prefix with http.StripPrefix):
//
//	POST /execute                       run code, stream NDJSON events
//	GET  /sessions/{sessionId}          read a session
//	POST /sessions/{sessionId}/tool-result  answer a pending tool call
//	GET  /health                        liveness and session counters
//	GET  /code/actions                  the action catalog
func (b *Broker) Handler() http.Handler { return b.HTTPHandler(nil) }

// HTTPHandler is Handler with per-handler options.
func (b *Broker) HTTPHandler(opts *HandlerOptions) http.Handler {
	h := &httpHandler{b: b, rl: b.opts.RateLimiting, entity: "broker:http", sessionHold: sessionEventHold, writeTimeout: streamWriteTimeout}
	if opts != nil {
		if opts.RateLimiting != nil {
			h.rl = opts.RateLimiting
		}
		if opts.RateLimitEntity != "" {
			h.entity = opts.RateLimitEntity
		}
		h.limits = opts.Limits
		h.origins = opts.AllowedOrigins
	}
	return h
}

type httpHandler struct {
	b      *Broker
	rl     *RateLimitConfig
	entity string
	limits RouteLimits
	// origins are HandlerOptions.AllowedOrigins.
	origins []string
	// sessionHold is sessionEventHold (tests shorten or lengthen it).
	sessionHold time.Duration
	// writeTimeout is streamWriteTimeout (tests shorten it).
	writeTimeout time.Duration
}

func (h *httpHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Every answer names its request: the id an HTTP front end put in the
	// context (Caddy's), else the caller's, else a new one. Log lines of
	// the request and of its session show the same id.
	id := telemetry.RequestID(r.Context())
	if id == "" {
		id = requestID(r)
		r = r.WithContext(telemetry.WithRequestID(r.Context(), id))
	}
	w.Header().Set(requestIDHeader, id)
	if origin := r.Header.Get("Origin"); origin != "" && !OriginAllowed(origin, r.Host, h.origins) {
		h.writeError(w, r, newError(http.StatusForbidden, CodeOriginNotAllowed, fmt.Sprintf("origin %q is not allowed", origin)))
		return
	}
	if AnswerCORS(w, r, "GET, POST", "X-Session-Id, X-Request-Id, Retry-After, RateLimit, RateLimit-Policy") {
		return
	}
	path := r.URL.Path
	if path != "/" {
		path = strings.TrimSuffix(path, "/")
	}
	var route func(http.ResponseWriter, *http.Request, *AuthResult)
	var method string
	var sessionID string
	switch {
	case path == "/health":
		if !h.allowMethod(w, r, http.MethodGet) {
			return
		}
		h.health(w, r)
		return
	case path == "/execute":
		method, route = http.MethodPost, h.execute
	case path == "/code/actions":
		method, route = http.MethodGet, h.actions
	case strings.HasPrefix(path, "/sessions/"):
		rest := strings.TrimPrefix(path, "/sessions/")
		id, tail, _ := strings.Cut(rest, "/")
		switch {
		case id != "" && tail == "":
			method, route = http.MethodGet, h.getSession
		case id != "" && tail == "tool-result":
			method, route = http.MethodPost, h.toolResult
		}
		sessionID = id
	}
	if route == nil {
		h.writeError(w, r, newError(http.StatusNotFound, CodeNotFound, fmt.Sprintf("no route for %s %s", r.Method, r.URL.Path)))
		return
	}
	if !h.allowMethod(w, r, method) {
		return
	}
	auth, err := h.authenticate(r)
	if err != nil {
		// Failed authentication counts against a limit too, so that keys
		// cannot be guessed at the rate of the network.
		if lerr := h.authFailure(r); lerr != nil {
			err = lerr
		}
		h.writeError(w, r, err)
		return
	}
	if err := h.rateLimit(r, auth); err != nil {
		h.writeError(w, r, err)
		return
	}
	if sessionID != "" {
		r.SetPathValue("sessionId", sessionID)
	}
	route(w, r, auth)
}

// AnswerCORS applies the CORS protocol to a request from a browser page
// (one with an Origin header) that the handler serves (OriginAllowed said
// so): the answer names the page's origin and exposes the header fields in
// expose; a preflight (OPTIONS with Access-Control-Request-Method) is
// answered here, 204 allowing methods and the header fields the page asked
// for, and AnswerCORS returns true. Without it a page of an allowed origin
// could send a request but never read its answer, and a request with a
// JSON body or an Authorization header (which needs a preflight) never
// left the browser. No credentials (cookies) are allowed: the gateway's
// callers authenticate with header fields.
func AnswerCORS(w http.ResponseWriter, r *http.Request, methods, expose string) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return false
	}
	h := w.Header()
	h.Set("Access-Control-Allow-Origin", origin)
	h.Add("Vary", "Origin")
	if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
		h.Add("Vary", "Access-Control-Request-Method")
		h.Add("Vary", "Access-Control-Request-Headers")
		h.Set("Access-Control-Allow-Methods", methods)
		if asked := r.Header.Get("Access-Control-Request-Headers"); asked != "" {
			h.Set("Access-Control-Allow-Headers", asked)
		}
		h.Set("Access-Control-Max-Age", "600")
		w.WriteHeader(http.StatusNoContent)
		return true
	}
	h.Set("Access-Control-Expose-Headers", expose)
	return false
}

// OriginAllowed tells whether a browser request whose Origin header is
// origin may be served by a handler reached as host: the page is of that
// host (its own origin) or allowed names it (scheme://host[:port],
// compared without case and trailing slash; "*" allows every origin).
// "null" (a sandboxed frame, a file) is never the handler's own origin.
//
// A port is compared after the origin's scheme supplies its default, so
// a Host header of "example.com:443" (some proxies and clients write the
// default port) is the own host of the page https://example.com, and a
// Host without a port matches an origin on its scheme's default port. The
// scheme itself is not compared: behind a TLS-terminating proxy the
// handler is reached over http by pages served over https.
func OriginAllowed(origin, host string, allowed []string) bool {
	for _, o := range allowed {
		if o == "*" || strings.EqualFold(strings.TrimSuffix(o, "/"), origin) {
			return true
		}
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	def := ""
	switch strings.ToLower(u.Scheme) {
	case "http":
		def = "80"
	case "https":
		def = "443"
	}
	oName, oPort := u.Hostname(), u.Port()
	if oPort == "" {
		oPort = def
	}
	hName, hPort, err := net.SplitHostPort(host)
	if err != nil { // no port
		hName, hPort = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"), def
	}
	return oName != "" && strings.EqualFold(oName, hName) && oPort == hPort
}

func (h *httpHandler) allowMethod(w http.ResponseWriter, r *http.Request, method string) bool {
	if r.Method == method || (method == http.MethodGet && r.Method == http.MethodHead) {
		return true
	}
	w.Header().Set("Allow", method)
	h.writeError(w, r, newError(http.StatusMethodNotAllowed, CodeMethodNotAllowed, fmt.Sprintf("use %s", method)))
	return false
}

// writeError writes {"error":{"code","message","requestId"?}} with the
// error's status. A server error (5xx) is logged with its cause and the
// request id, which the body carries too, so a caller's report can be found
// in the log. A draining broker's SHUTTING_DOWN (after a reload) is
// routine: logged at info.
func (h *httpHandler) writeError(w http.ResponseWriter, r *http.Request, err error) {
	e := asError(err)
	body := ErrorBody{Code: e.Code, Message: e.Message}
	if e.Status >= 500 {
		body.RequestID = w.Header().Get(requestIDHeader)
		cause := error(e)
		if e.Err != nil {
			cause = e.Err
		}
		log := h.b.logger.Error
		if e.Code == CodeShuttingDown {
			log = h.b.logger.Info
		}
		log("broker request failed", zap.Int("status", e.Status), zap.String("code", e.Code),
			zap.String("request_id", body.RequestID), zap.String("method", r.Method), zap.String("path", r.URL.Path), zap.Error(cause))
	}
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", retryAfterSeconds(e.RetryAfter))
	}
	if e.Status == http.StatusUnauthorized && w.Header().Get("WWW-Authenticate") == "" {
		w.Header().Set("WWW-Authenticate", h.challenge())
	}
	writeJSON(w, e.Status, map[string]ErrorBody{"error": body})
}

// requestIDHeader carries the request id: a caller's own (a load balancer's)
// when it is a short token, else a fresh one; every answer echoes it.
const requestIDHeader = "X-Request-Id"

func requestID(r *http.Request) string {
	if id := r.Header.Get(requestIDHeader); telemetry.ValidRequestID(id) {
		return id
	}
	return newID()
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // as the stream: a session's result is in it
	_ = enc.Encode(v)
}

// authenticate returns the caller's identity: one placed in the context by
// an outer layer (WithAuth), else the configured hook's verdict, else nil
// (anonymous) when authentication is off.
func (h *httpHandler) authenticate(r *http.Request) (*AuthResult, error) {
	if a := AuthFromContext(r.Context()); a != nil && a.Valid {
		return a, nil
	}
	cfg := h.b.opts.Authentication
	if cfg == nil {
		return nil, nil
	}
	var token string
	switch cfg.Type {
	case AuthBearer:
		token = bearerToken(r)
	case AuthAPIKey:
		token = r.Header.Get("X-API-Key")
	default:
		if cfg.Token != nil {
			token = cfg.Token(r)
		} else if token = bearerToken(r); token == "" {
			token = r.Header.Get("X-API-Key")
		}
	}
	if token == "" {
		return nil, newError(http.StatusUnauthorized, CodeUnauthorized, "missing credentials")
	}
	res, err := cfg.Validate(r.Context(), token)
	if err != nil {
		h.b.logger.Info("authentication failed", zap.Error(err), zap.String("remote", r.RemoteAddr),
			zap.String("request_id", telemetry.RequestID(r.Context())))
		return nil, newError(http.StatusUnauthorized, CodeUnauthorized, "invalid credentials")
	}
	if res == nil || !res.Valid {
		return nil, newError(http.StatusUnauthorized, CodeUnauthorized, "invalid credentials")
	}
	if res.UserID == "" {
		// A credential without a user is its own principal: sessions and
		// buckets are its alone.
		c := *res
		sum := sha256.Sum256([]byte(token))
		c.UserID = "key:" + hex.EncodeToString(sum[:8])
		res = &c
	}
	return res, nil
}

// challenge is the WWW-Authenticate of a 401: the scheme the broker's
// authentication expects.
func (h *httpHandler) challenge() string {
	if cfg := h.b.opts.Authentication; cfg != nil && cfg.Type == AuthAPIKey {
		return `APIKey realm="codemode", header="X-API-Key"`
	}
	return `Bearer realm="codemode"`
}

// authFailure counts a failed authentication of the client address: in
// RateLimiting's bucket for that address when a request limit is set, else
// against MaxAuthFailures a minute. It returns the 429 to answer instead of
// the 401 once the bucket is spent.
func (h *httpHandler) authFailure(r *http.Request) error {
	rl := h.rl
	entity := h.entity
	if rl == nil {
		if h.b.opts.MaxAuthFailures < 0 {
			return nil
		}
		rl = &RateLimitConfig{MaxRequests: h.b.opts.MaxAuthFailures, WindowMs: time.Minute.Milliseconds()}
		entity = "broker:auth-failures"
	}
	key := "ip:" + h.b.opts.ClientPrefixes.Key(clientIP(r))
	cfg := &guard.RateLimitConfig{MaxRequests: rl.MaxRequests, WindowMs: rl.WindowMs,
		PartitionBy: guard.PartitionKey{Func: func(guard.PartitionKeyContext) string { return key }}}
	res, err := h.b.rateGuard().CheckRateLimit(r.Context(), entity, cfg, guard.PartitionKeyContext{})
	if err != nil {
		return nil
	}
	if err := res.Err(entity); err != nil {
		return guardHTTPError(err)
	}
	return nil
}

func bearerToken(r *http.Request) string {
	v := r.Header.Get("Authorization")
	if len(v) > 7 && strings.EqualFold(v[:7], "bearer ") {
		return strings.TrimSpace(v[7:])
	}
	return ""
}

// rateLimit counts the request in its bucket with the guard's sliding window.
func (h *httpHandler) rateLimit(r *http.Request, auth *AuthResult) error {
	rl := h.rl
	if rl == nil {
		return nil
	}
	var key string
	if rl.KeyGenerator != nil {
		key = rl.KeyGenerator(r)
	}
	switch {
	case key != "":
	case auth != nil && auth.UserID != "":
		// The same user id in two tenants is two principals.
		key = "user:" + auth.TenantID + "/" + auth.UserID
	default:
		key = "ip:" + h.b.opts.ClientPrefixes.Key(clientIP(r))
	}
	m := h.b.rateGuard()
	cfg := &guard.RateLimitConfig{MaxRequests: rl.MaxRequests, WindowMs: rl.WindowMs,
		PartitionBy: guard.PartitionKey{Func: func(guard.PartitionKeyContext) string { return key }}}
	res, err := m.CheckRateLimit(r.Context(), h.entity, cfg, guard.PartitionKeyContext{})
	if err != nil {
		return guardHTTPError(err)
	}
	if err := res.Err(h.entity); err != nil {
		return guardHTTPError(err)
	}
	return nil
}

func guardHTTPError(err error) error {
	var ge *guard.GuardError
	if !errors.As(err, &ge) {
		return err
	}
	e := &Error{Code: ge.Code, Message: ge.Message, Status: ge.StatusCode, Err: err}
	if ge.StatusCode == http.StatusTooManyRequests || ge.StatusCode == http.StatusServiceUnavailable {
		e.RetryAfter = max(time.Duration(ge.RetryAfterMs)*time.Millisecond, time.Second)
	}
	return e
}

// rateGuard is the manager counting HTTP requests: the broker's guard when
// it is enabled (shared through its storage), else a private in-memory one.
func (b *Broker) rateGuard() *guard.GuardManager {
	if m := b.guard.Load(); m != nil && m.Config().Enabled {
		return m
	}
	b.httpGuardMu.Lock()
	defer b.httpGuardMu.Unlock()
	if b.httpGuard == nil {
		m, _ := guard.NewGuardManager(context.Background(), guard.GuardConfig{Enabled: true}, &guard.ManagerOptions{Logger: b.logger, Now: b.now})
		b.httpGuard = m
	}
	return b.httpGuard
}

// clientIP is the caller's address: the one the front end determined
// (WithClientIP: Caddy's client_ip, which honours trusted_proxies), else
// the connection's.
func clientIP(r *http.Request) string {
	if ip, _ := r.Context().Value(clientIPContextKey{}).(string); ip != "" {
		return ip
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// ForeignCharset reports the charset a Content-Type names when it is one
// other than UTF-8 or a name for it or for its ASCII subset ("utf8",
// "us-ascii": a body in either reads the same as UTF-8). JSON is UTF-8
// (RFC 8259 section 8.1) and every body is read as such: a body declared
// in another charset is refused (415), not misread.
func ForeignCharset(contentType string) (string, bool) {
	_, params, err := mime.ParseMediaType(contentType)
	cs, ok := params["charset"]
	if err != nil || !ok {
		return cs, false
	}
	switch strings.ToLower(cs) {
	case "utf-8", "utf8", "us-ascii", "ascii":
		return cs, false
	}
	return cs, true
}

// readJSON decodes a JSON object body strictly, mapping failures to 400,
// 413 and 415; a body passing shape (jsonbound) is a VALIDATION_ERROR.
func (h *httpHandler) readJSON(w http.ResponseWriter, r *http.Request, v any, shape jsonbound.Limits) error {
	if ct := r.Header.Get("Content-Type"); ct != "" && ct != "application/json" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			return newError(http.StatusUnsupportedMediaType, CodeUnsupportedMediaType, "Content-Type must be application/json")
		}
		if cs, foreign := ForeignCharset(ct); foreign {
			return newError(http.StatusUnsupportedMediaType, CodeUnsupportedMediaType, fmt.Sprintf("charset %q is not served: JSON is UTF-8", cs))
		}
	}
	limit := h.b.opts.MaxBodyBytes
	if r.ContentLength > limit {
		return newError(http.StatusRequestEntityTooLarge, CodePayloadTooLarge, fmt.Sprintf("body exceeds %d bytes", limit))
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return newError(http.StatusRequestEntityTooLarge, CodePayloadTooLarge, fmt.Sprintf("body exceeds %d bytes", limit))
		}
		return newError(http.StatusBadRequest, CodeInvalidRequest, "reading body: "+err.Error())
	}
	// Counted before decoding: within the byte limit, 100,000s of keys or
	// items cost the decoder and the validators far more than their bytes.
	if e := jsonbound.Check(body, shape); e != nil {
		return newError(http.StatusBadRequest, CodeValidationError, e.Error())
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return newError(http.StatusBadRequest, CodeInvalidRequest, "invalid JSON body: "+decodeErrorText(err))
	}
	if dec.More() {
		return newError(http.StatusBadRequest, CodeInvalidRequest, "invalid JSON body: trailing data")
	}
	return nil
}

// decodeErrorText says what is wrong with a request body in the words of
// JSON, not of the Go types it is decoded into: encoding/json names the
// struct, its package and the Go type ("Go struct field
// executeRequest.filter of type broker.EventFilter"), which tells a caller
// nothing it can act on and shows the server's internals.
func decodeErrorText(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		got, _, _ := strings.Cut(te.Value, " ") // "number 1e400" -> "number"
		want := jsonKind(te.Type)
		msg := fmt.Sprintf("got %s, want %s", got, want)
		if got == want || (got == "number" && want == "integer") {
			msg = te.Value + " is out of range" // 1e400, or 1.5 for an integer
		}
		if te.Field == "" {
			return msg
		}
		return te.Field + ": " + msg
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

// jsonKind names the JSON type a Go type is decoded from.
func jsonKind(t reflect.Type) string {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return "a value"
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Slice, reflect.Array:
		return "array"
	case reflect.Map, reflect.Struct:
		return "object"
	}
	return "a value"
}

// streamWriteTimeout bounds the write of one stream event to the client.
const streamWriteTimeout = streamdeadline.WriteTimeout

// abortWriteGrace is what a stream still open when Close aborts its
// session has left to send its final event (Broker.endStreams).
const abortWriteGrace = streamdeadline.Grace

type executeRequest struct {
	Code         string         `json:"code"`
	Timeout      *float64       `json:"timeout"`
	MaxToolCalls *float64       `json:"maxToolCalls"`
	MaxSteps     *float64       `json:"maxSteps"`
	Context      map[string]any `json:"context"`
	Filter       *EventFilter   `json:"filter"`
	AllowedTools []string       `json:"allowedTools"`
}

func (h *httpHandler) execute(w http.ResponseWriter, r *http.Request, auth *AuthResult) {
	var req executeRequest
	if err := h.readJSON(w, r, &req, jsonbound.Request); err != nil {
		h.writeError(w, r, err)
		return
	}
	if strings.TrimSpace(req.Code) == "" {
		h.writeError(w, r, newError(http.StatusBadRequest, CodeValidationError, "code is required"))
		return
	}
	opts := ExecuteOptions{Context: req.Context, Filter: req.Filter, AllowedTools: req.AllowedTools, Auth: auth, ClientIP: clientIP(r)}
	if err := h.requestLimits(&req, &opts); err != nil {
		h.writeError(w, r, err)
		return
	}
	// The run ends with the request, but with a cause that says why: the
	// server cancels a request's context with a bare "context canceled"
	// when its client leaves. A deadline (codemode_guard's timeout) stays.
	rctx := context.WithoutCancel(r.Context())
	if d, ok := r.Context().Deadline(); ok {
		var cancel context.CancelFunc
		rctx, cancel = context.WithDeadline(rctx, d)
		defer cancel()
	}
	run, err := h.b.start(rctx, req.Code, opts)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	rc := http.NewResponseController(w)
	deadline := streamdeadline.New(w, r, h.writeTimeout)
	defer context.AfterFunc(r.Context(), func() {
		cause := context.Cause(r.Context())
		if errors.Is(cause, context.Canceled) {
			// The server cancels the request when its client leaves, and
			// also when a write fails: one past its deadline is a client
			// that kept the connection but stopped reading.
			cause = errCallerLeft
			if deadline.Missed(time.Now()) {
				cause = errCallerStalled
			}
		}
		run.abortRun(cause)
	})()
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.Header().Set("X-Session-Id", run.sess.ID)
	w.WriteHeader(http.StatusOK)
	// The start of the response (the headers, and the session event unless
	// the filter drops it) waits up to sessionEventHold for the next event:
	// a script that ends by then (most do) sends its whole response in one
	// write, with the end of the response, instead of two. A longer one
	// sends its session ID at most sessionEventHold late, and at once with
	// any event before that (a tool call the caller must answer is never
	// held). Any later event is flushed unless another is queued behind
	// it. The final event is not flushed: the handler returns right after
	// it, and the server sends it with the end of the response in one write.
	defer run.detach()
	enc := json.NewEncoder(w)
	// No HTML escaping: it wrote each "<", ">" and "&" of a result as six
	// bytes, a result within the sandbox's bound six times over it.
	enc.SetEscapeHTML(false)
	defer deadline.Clear()
	stopCap := context.AfterFunc(h.b.aborted, func() { deadline.Limit(h.b.streamsEnd) })
	defer stopCap()
	var hold *time.Timer // set while what was written waits for the next event
	if len(run.events) == 0 {
		hold = time.NewTimer(h.sessionHold)
	}
events:
	for {
		var ev StreamEvent
		var ok bool
		if hold == nil {
			ev, ok = <-run.events
		} else {
			select {
			case ev, ok = <-run.events:
				hold.Stop()
			case <-hold.C:
				if rc.Flush() != nil {
					break events
				}
				deadline.Sent()
				ev, ok = <-run.events
			}
			hold = nil
		}
		if !ok {
			break
		}
		// A client that stops reading must not hold the session (and its
		// goroutines) forever: each event gets streamWriteTimeout to go out
		// (less at most a second: events that follow one another within a
		// second share a deadline instead of moving it each time), or
		// abortWriteGrace once Close has aborted the session.
		deadline.Extend(time.Now())
		if err := enc.Encode(ev); err != nil {
			stalled(run, err, deadline)
			break
		}
		if len(run.events) > 0 || ev.Type == EventResult || ev.Type == EventError {
			continue
		}
		if ev.Type == EventSession {
			hold = time.NewTimer(h.sessionHold)
			continue
		}
		if err := rc.Flush(); err != nil {
			stalled(run, err, deadline)
			break
		}
		deadline.Sent()
	}
	if hold != nil {
		hold.Stop()
	}
}

// stalled ends run with errCallerStalled when err is a write that missed its
// deadline: the caller kept its connection but stopped reading (a write
// failed for another reason, or at the broker's close, keeps the cause
// already given). Over HTTP/2 the missed deadline resets the stream and
// the write fails with the stream's error, not os.ErrDeadlineExceeded: the
// deadline being past is what tells. Only the request context's callback
// told before, and on a loaded machine the handler returned first and its
// detach gave the run errCallerLeft ("the caller closed the event stream").
func stalled(run *run, err error, deadline *streamdeadline.Deadline) {
	if errors.Is(err, os.ErrDeadlineExceeded) || deadline.Missed(time.Now()) {
		run.abortRun(errCallerStalled)
	}
}

// sessionEventHold is how long the session event of /execute waits for the
// next event before it is flushed alone.
const sessionEventHold = 10 * time.Millisecond

// owns reports whether auth may see s: the same user and tenant (both
// empty for anonymous sessions).
func owns(auth *AuthResult, s *Session) bool {
	var user, tenant string
	if auth != nil {
		user, tenant = auth.UserID, auth.TenantID
	}
	return s.UserID == user && s.TenantID == tenant
}

func (h *httpHandler) session(r *http.Request, auth *AuthResult) (*Session, error) {
	s, err := h.b.GetSession(r.Context(), r.PathValue("sessionId"))
	if err != nil {
		return nil, err
	}
	// Someone else's session is reported as unknown, not forbidden, so ids
	// cannot be probed.
	if s == nil || !owns(auth, s) {
		return nil, newError(http.StatusNotFound, CodeNotFound, "session not found")
	}
	return s, nil
}

func (h *httpHandler) getSession(w http.ResponseWriter, r *http.Request, auth *AuthResult) {
	s, err := h.session(r, auth)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, s)
}

func (h *httpHandler) toolResult(w http.ResponseWriter, r *http.Request, auth *AuthResult) {
	// A result is kept as the bytes it came in (json.RawMessage): the
	// gateway only scans it, whatever its shape, and the script that reads
	// it parses it within the sandbox's limits. Its members and items are
	// not bounded, so a caller's large data set comes through.
	var req ToolResult
	if err := h.readJSON(w, r, &req, jsonbound.Limits{}); err != nil {
		h.writeError(w, r, err)
		return
	}
	s, err := h.session(r, auth)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	if err := h.b.SubmitToolResult(r.Context(), s.ID, req); err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{"success": true})
}

// HealthResponse is the body of GET /health.
type HealthResponse struct {
	// Status is "ok", or "degraded" with Reasons.
	Status  string   `json:"status"`
	Reasons []string `json:"reasons,omitempty"`
	// Uptime is the time since the broker was created, in seconds.
	Uptime   float64       `json:"uptime"`
	Sessions Stats         `json:"sessions"`
	Storage  HealthStorage `json:"storage"`
	// Workers is the sandbox engine's state, when the engine reports one.
	Workers *sandbox.EngineHealth `json:"workers,omitempty"`
	// Catalog lists the OpenAPI sources, when there is a catalog.
	Catalog []HealthCatalogSource `json:"catalog,omitempty"`
}

// HealthStorage is the session store's state.
type HealthStorage struct {
	// Kind is "memory" or "redis".
	Kind string `json:"kind"`
	// Status is "ok" or "unavailable".
	Status string `json:"status"`
	// Error is the last failure, Since when the store fails (epoch ms).
	Error string `json:"error,omitempty"`
	Since int64  `json:"since,omitempty"`
	// FailureMode is closed or open (BrokerOptions.StorageFailureMode).
	FailureMode string `json:"failureMode"`
}

// HealthCatalogSource is one OpenAPI source of the catalog.
type HealthCatalogSource struct {
	Name        string `json:"name"`
	Actions     int    `json:"actions"`
	LastUpdated string `json:"lastUpdated,omitempty"`
	// Error is the failure of the last fetch, when it failed.
	Error string `json:"error,omitempty"`
}

// pinger is a store that can check it is reachable.
type pinger interface {
	ping(ctx context.Context) error
}

// Health returns the body of GET /health: the session store (checked now,
// within the storage timeout), the sandbox's workers and the catalog's
// sources; any problem makes the status "degraded" with a reason.
func (b *Broker) Health(ctx context.Context) HealthResponse {
	up := b.now().Sub(b.started).Seconds()
	h := HealthResponse{Status: "ok", Uptime: math.Round(up*1000) / 1000, Sessions: b.Stats(),
		Storage: HealthStorage{Kind: "memory", Status: "ok", FailureMode: b.opts.StorageFailureMode}}
	if p, ok := b.store.(pinger); ok {
		h.Storage.Kind = "redis"
		if err := p.ping(ctx); err != nil {
			b.callerStorageFailed(ctx, err)
		} else {
			b.storageOK()
		}
		if ok, err, since := b.StorageStatus(); !ok {
			h.Storage.Status, h.Storage.Error, h.Storage.Since = "unavailable", err.Error(), since.UnixMilli()
			h.Reasons = append(h.Reasons, "session store unavailable: "+err.Error())
		}
	}
	if hr, ok := b.engine.Load().e.(sandbox.HealthReporter); ok {
		eh := hr.Health()
		h.Workers = &eh
		for _, p := range eh.Problems {
			h.Reasons = append(h.Reasons, "sandbox: "+p)
		}
	}
	if c := b.opts.Catalog; c != nil {
		for _, svc := range c.Response().Services {
			h.Catalog = append(h.Catalog, HealthCatalogSource{Name: svc.Name, Actions: svc.ActionCount,
				LastUpdated: svc.LastUpdated, Error: svc.LastError})
			if svc.LastError != "" {
				h.Reasons = append(h.Reasons, fmt.Sprintf("catalog source %s: %s", svc.Name, svc.LastError))
			}
		}
	}
	if len(h.Reasons) > 0 {
		h.Status = "degraded"
	}
	return h
}

// health answers 503 when new sessions cannot start (the store is down and
// the failure mode is closed), so a load balancer takes the gateway out;
// degraded otherwise still answers 200.
func (h *httpHandler) health(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), h.b.opts.StorageTimeout)
	defer cancel()
	hr := maskHealth(h.b.Health(ctx))
	status := http.StatusOK
	if hr.Storage.Status != "ok" && hr.Storage.FailureMode == StorageFailClosed {
		status = http.StatusServiceUnavailable
	}
	writeJSON(w, status, hr)
}

// healthMask is what /health hides of its texts. Anyone may read it (a load
// balancer's check has no credentials, and it answers before
// authentication), so they say what fails, not where: addresses, URLs,
// file paths and KEY=value pairs are masked as the sanitization policy
// masks them in script errors ("dial tcp [host]: connect: connection
// refused"). The log keeps them whole; Broker.Health does too.
var healthMask = sandbox.Sanitization{RemoveHosts: true, RemoveFilePaths: true, RemoveEnvValues: true}

// maskHealth applies healthMask to hr's texts.
func maskHealth(hr HealthResponse) HealthResponse {
	hr.Reasons = slices.Clone(hr.Reasons)
	for i, r := range hr.Reasons {
		hr.Reasons[i] = healthMask.Text(r)
	}
	hr.Storage.Error = healthMask.Text(hr.Storage.Error)
	hr.Catalog = slices.Clone(hr.Catalog)
	for i := range hr.Catalog {
		hr.Catalog[i].Error = healthMask.Text(hr.Catalog[i].Error)
	}
	if hr.Workers != nil {
		w := *hr.Workers
		w.Problems = slices.Clone(w.Problems)
		for i, p := range w.Problems {
			w.Problems[i] = healthMask.Text(p)
		}
		hr.Workers = &w
	}
	return hr
}

// emptyCatalogVersion is the version of a catalog with no sources.
var emptyCatalogVersion = func() string {
	s := sha256.Sum256(nil)
	return hex.EncodeToString(s[:])
}()

// Actions returns the body of GET /code/actions: the catalog's actions,
// or an empty catalog when no OpenAPI source is configured.
func (b *Broker) Actions() catalog.CatalogResponse {
	if c := b.opts.Catalog; c != nil {
		return c.Response()
	}
	return catalog.CatalogResponse{Actions: []catalog.CatalogAction{}, Services: []catalog.CatalogService{}, Version: emptyCatalogVersion}
}

func (h *httpHandler) actions(w http.ResponseWriter, _ *http.Request, _ *AuthResult) {
	writeJSON(w, http.StatusOK, h.b.Actions())
}

// ceilings are the most a request through this handler may ask for: the
// broker's, lowered by the route's, and the engine's step and tool-call
// limits (the engine stops every script at its own, so a request for more
// would be accepted and not get it).
func (h *httpHandler) ceilings() (timeout time.Duration, toolCalls int, steps int64) {
	timeout, toolCalls = h.b.opts.MaxTimeout, h.b.opts.DefaultMaxToolCalls
	if l := h.limits.Timeout; l > 0 && l < timeout {
		timeout = l
	}
	if l := h.limits.MaxToolCalls; l > 0 && l < toolCalls {
		toolCalls = l
	}
	if lr, ok := h.b.engine.Load().e.(sandbox.LimitsReporter); ok {
		steps = lr.Limits().MaxSteps
		if l := lr.Limits().MaxToolCalls; l > 0 && l < toolCalls {
			toolCalls = l
		}
	}
	if l := h.limits.MaxSteps; l > 0 && (steps <= 0 || l < steps) {
		steps = l
	}
	return timeout, toolCalls, steps
}

// requestLimits checks a request's limits against the ceilings: a caller
// may lower them, never raise them (400 LIMIT_EXCEEDED names the maximum).
// Without a request value the route's ceiling applies.
func (h *httpHandler) requestLimits(req *executeRequest, opts *ExecuteOptions) error {
	maxTimeout, maxCalls, maxSteps := h.ceilings()
	exceeded := func(field string, v float64, max int64, unit string) error {
		return newError(http.StatusBadRequest, CodeLimitExceeded,
			fmt.Sprintf("%s of %v%s exceeds the configured maximum of %d%s; a request may lower its limits, not raise them", field, v, unit, max, unit))
	}
	opts.Timeout, opts.MaxToolCalls, opts.MaxSteps = h.limits.Timeout, h.limits.MaxToolCalls, h.limits.MaxSteps
	if t := req.Timeout; t != nil {
		if *t <= 0 || math.IsInf(*t, 0) || math.IsNaN(*t) {
			return newError(http.StatusBadRequest, CodeValidationError, "timeout must be a positive number of milliseconds")
		}
		if *t > float64(maxTimeout.Milliseconds()) {
			return exceeded("timeout", *t, maxTimeout.Milliseconds(), " ms")
		}
		opts.Timeout = time.Duration(*t * float64(time.Millisecond))
	}
	if n := req.MaxToolCalls; n != nil {
		if *n < 1 || *n != math.Trunc(*n) {
			return newError(http.StatusBadRequest, CodeValidationError, "maxToolCalls must be a whole number of at least 1")
		}
		if *n > float64(maxCalls) {
			return exceeded("maxToolCalls", *n, int64(maxCalls), "")
		}
		opts.MaxToolCalls = int(*n)
	}
	if n := req.MaxSteps; n != nil {
		if *n < 1 || *n != math.Trunc(*n) {
			return newError(http.StatusBadRequest, CodeValidationError, "maxSteps must be a whole number of at least 1")
		}
		if maxSteps > 0 && *n > float64(maxSteps) {
			return exceeded("maxSteps", *n, maxSteps, "")
		}
		opts.MaxSteps = int64(*n)
	}
	return nil
}
