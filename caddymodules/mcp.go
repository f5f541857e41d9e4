package caddymodules

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/redis/go-redis/v9"
	sdkjson "github.com/segmentio/encoding/json"
	"go.uber.org/zap"

	"github.com/codemode-gateway/caddy-codemode/broker"
	"github.com/codemode-gateway/caddy-codemode/internal/clip"
	"github.com/codemode-gateway/caddy-codemode/internal/jsonbound"
	"github.com/codemode-gateway/caddy-codemode/internal/streamdeadline"
	"github.com/codemode-gateway/caddy-codemode/internal/telemetry"
	"github.com/codemode-gateway/caddy-codemode/metatools"
)

func init() {
	caddy.RegisterModule(MCPHandler{})
}

// MCPHandler serves the meta-tools (meta:search, meta:describe, meta:execute,
// meta:invoke) of the codemode app over MCP Streamable HTTP. It is a
// terminal handler: it answers every request it gets.
//
// One endpoint serves every revision the meta block offers: a request of
// revision 2026-07-28 (MCP-Protocol-Version header, or the protocol version
// in its _meta) is served statelessly, so any gateway can answer it; older
// revisions go through the initialize handshake and an MCP session (POST
// for messages, GET for the server-to-client stream, DELETE to end it).
type MCPHandler struct {
	// Stateless serves the older revisions without a session too (no
	// Mcp-Session-Id, no server-to-client requests). Default false.
	// Revision 2026-07-28 is always stateless.
	Stateless bool `json:"stateless,omitempty"`
	// JSONResponse answers POSTs with application/json instead of an SSE
	// stream. Default false.
	JSONResponse bool `json:"json_response,omitempty"`
	// SessionTimeout closes sessions (older revisions) idle for this long.
	// Default 30m; a negative value keeps idle sessions forever.
	SessionTimeout caddy.Duration `json:"session_timeout,omitempty"`
	// DisableLocalhostProtection turns off the go-sdk's DNS-rebinding
	// protection, which answers 403 to a request that reaches a loopback
	// address with a non-loopback Host header. Needed only behind another
	// proxy on the same machine that keeps the public Host. Default false.
	DisableLocalhostProtection bool `json:"disable_localhost_protection,omitempty"`
	// AllowedOrigins are the origins (scheme://host[:port]) besides the
	// endpoint's own whose requests are served; a request with any other
	// Origin header gets 403 (DNS-rebinding and cross-site protection that
	// MCP's Streamable HTTP transport requires). "*" allows every origin.
	// Default: only the endpoint's own origin and requests without Origin
	// (non-browser clients).
	AllowedOrigins []string `json:"allowed_origins,omitempty"`
	// GatewayURL is this endpoint's URL as the other gateways reach it
	// (e.g. http://10.0.0.5:8080/mcp). With it, and the broker's sessions
	// in Redis, the MCP sessions of the older revisions are shared: a
	// gateway that gets a request for a session another gateway holds
	// forwards it there, so they work behind a load balancer without
	// affinity; a session whose gateway is gone gets 404 and the client
	// starts a new one. Placeholders such as {env.GATEWAY_URL} are replaced.
	// Default: sessions are served by the gateway that opened them only.
	GatewayURL string `json:"gateway_url,omitempty"`
	// MaxSessions caps the MCP sessions of the handshake revisions that
	// this process holds (all codemode_mcp handlers together; revision
	// 2026-07-28 has none): an initialize beyond it gets 503 with
	// Retry-After. An idle session holds about 30 KiB and a goroutine until
	// session_timeout, and initialize is open to anyone the route lets in.
	// Default 10000; a negative value is no cap.
	MaxSessions int `json:"max_sessions,omitempty"`
	// MaxSessionsPerClient caps one client's sessions (its user when
	// authenticated, else its IP address): an initialize beyond it closes
	// that client's least recently used session, so a client that never
	// ends its sessions keeps working and cannot crowd others out.
	// Default 100; a negative value is no cap.
	MaxSessionsPerClient int `json:"max_sessions_per_client,omitempty"`

	app    *App
	logger *zap.Logger
	dir    *mcpSessionDirectory
	// legacy serves the revisions before 2026-07-28 and modern serves
	// 2026-07-28 and later; either is nil when the meta block offers none
	// of its revisions.
	legacy, modern http.Handler
	offered        []string
	// adopted serves, without the go-sdk's session table, the sessions a
	// previous config opened (see mcpSessionTable).
	adopted http.Handler
	server  *mcp.Server
	idle    time.Duration
	owner   *mcpSessionOwner
}

// CaddyModule returns the Caddy module information.
func (MCPHandler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.codemode_mcp",
		New: func() caddy.Module { return new(MCPHandler) },
	}
}

// firstStatelessRevision is the first MCP revision without sessions: its
// requests carry their protocol version and client capabilities in _meta.
const firstStatelessRevision = "2026-07-28"

// mcpMaxBody is the go-sdk's default body limit, which both handlers apply.
const mcpMaxBody = mcp.DefaultMaxRequestBodyBytes

// mcpMaxDepth is the go-sdk's bound on a message's nesting: it refuses a
// deeper message (-32700) before it decodes it. The checks before the
// go-sdk decode with the go-sdk's JSON package, which recurses in Go once
// per level and has no bound of its own, so they must not see such a
// body: a POST of 4 MiB of "[" outgrew the 1 GB goroutine stack, a fatal
// error that ended the gateway's process.
const mcpMaxDepth = 1000

// Provision finds the codemode app and builds the Streamable HTTP handlers.
func (h *MCPHandler) Provision(ctx caddy.Context) error {
	warnWriteTimeout(ctx, "codemode_mcp")
	v, err := ctx.App("codemode")
	if err != nil {
		return fmt.Errorf("codemode_mcp: loading the codemode app: %w", err)
	}
	h.app = v.(*App)
	if h.app.MetaServer() == nil {
		return fmt.Errorf("codemode_mcp: the meta-tools are not provisioned")
	}
	timeout := time.Duration(h.SessionTimeout)
	switch {
	case timeout == 0:
		timeout = 30 * time.Minute
	case timeout < 0:
		timeout = 0
	}
	app := h.app
	// This config's server, taken now: the old config's servers still
	// answer the requests under way when Caddy cleans it up on a reload.
	srv := app.MetaServer()
	getServer := func(*http.Request) *mcp.Server { return srv }
	h.offered = app.MetaProtocolVersions()
	if slices.ContainsFunc(h.offered, isStatelessRevision) {
		h.modern = metatools.HTTPHandler(mcp.NewStreamableHTTPHandler(getServer, &mcp.StreamableHTTPOptions{Stateless: true,
			JSONResponse: h.JSONResponse, DisableLocalhostProtection: h.DisableLocalhostProtection,
			// The POST is the whole request: a client that goes away cancels its work.
			PropagateRequestCancellation: true}))
	}
	if slices.ContainsFunc(h.offered, func(v string) bool { return !isStatelessRevision(v) }) {
		h.legacy = metatools.HTTPHandler(mcp.NewStreamableHTTPHandler(getServer, &mcp.StreamableHTTPOptions{Stateless: h.Stateless,
			JSONResponse: h.JSONResponse, SessionTimeout: timeout, DisableLocalhostProtection: h.DisableLocalhostProtection}))
		// A session that a previous config opened is served without a
		// go-sdk session of its own: each request gets a temporary one
		// (no server-to-client requests, no GET stream), as in stateless
		// mode. Its client keeps its Mcp-Session-Id across the reload.
		h.adopted = metatools.HTTPHandler(mcp.NewStreamableHTTPHandler(getServer, &mcp.StreamableHTTPOptions{Stateless: true,
			JSONResponse: h.JSONResponse, DisableLocalhostProtection: h.DisableLocalhostProtection}))
	}
	h.server, h.idle, h.owner = srv, timeout, &mcpSessionOwner{cfg: app}
	if h.MaxSessions == 0 {
		h.MaxSessions = 10000
	}
	if h.MaxSessionsPerClient == 0 {
		h.MaxSessionsPerClient = 100
	}
	h.logger = ctx.Logger()
	if h.GatewayURL != "" && h.legacy != nil && !h.Stateless {
		gw := caddy.NewReplacer().ReplaceAll(h.GatewayURL, "")
		if u, err := url.Parse(gw); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("codemode_mcp: gateway_url %q: want http(s)://host[:port]/path", gw)
		}
		b, err := app.SharedBroker()
		if err != nil {
			return fmt.Errorf("codemode_mcp: gateway_url: %w", err)
		}
		var rdb redis.UniversalClient
		var prefix string
		if b != nil {
			rdb, prefix = b.Redis()
		}
		if rdb == nil {
			return fmt.Errorf("codemode_mcp: gateway_url needs the broker's sessions in Redis (codemode { broker { redis ... } }), where the gateways share the MCP sessions")
		}
		h.dir = newMCPSessionDirectory(rdb, prefix, gw, timeout, h.logger)
	}
	return nil
}

// Cleanup stops the session directory: this gateway's MCP sessions are
// reported gone at once.
func (h *MCPHandler) Cleanup() error {
	if h.owner != nil {
		h.owner.gone.Store(true) // the next config serves its sessions
	}
	if h.dir != nil {
		h.dir.close()
	}
	return nil
}

func isStatelessRevision(v string) bool { return v >= firstStatelessRevision }

// ServeHTTP hands the request to the MCP handler of its revision. The
// client address and the user authenticated by an earlier handler
// ({http.auth.user.id}, {http.auth.user.tenant_id}) reach the meta-tools
// (rate-limit partitions, broker calls) in the request's context
// (metatools.WithIdentity), never in a header a client could set.
func (h *MCPHandler) ServeHTTP(w http.ResponseWriter, r *http.Request, _ caddyhttp.Handler) error {
	r = withRequestID(w, withIdentity(r))
	var who metatools.Identity
	if repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer); ok {
		who.UserID, _ = repl.GetString("http.auth.user.id")
		who.TenantID, _ = repl.GetString("http.auth.user.tenant_id")
	}
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		who.ClientIP = host
	}
	if ip, ok := caddyhttp.GetVar(r.Context(), caddyhttp.ClientIPVarKey).(string); ok && ip != "" {
		who.ClientIP = ip
	}
	if who.ClientIP != "" {
		who.ClientKey = h.app.clientKey(who.ClientIP)
	}
	ctx := metatools.WithIdentity(r.Context(), who)
	if r.Method == http.MethodGet {
		// A GET stream lasts as long as its session; the process's exit
		// ends it (exit.go), or Caddy would wait for it forever.
		var stop context.CancelFunc
		ctx, stop = untilExit(ctx)
		defer stop()
	}
	r = r.WithContext(ctx)
	if !h.originAllowed(r) {
		writeJSONRPCError(w, http.StatusForbidden, nil, rpcInvalidRequest, "origin "+r.Header.Get("Origin")+" is not allowed", nil)
		return nil
	}
	if broker.AnswerCORS(w, r, "GET, POST, DELETE", "Mcp-Session-Id, Mcp-Protocol-Version, X-Request-Id, Retry-After, WWW-Authenticate") {
		return nil
	}
	rid := mcpRequestID(r)
	w.Header().Set("X-Request-Id", rid)
	mw := &mcpWriter{ResponseWriter: w, deadline: streamdeadline.New(w, r, streamdeadline.WriteTimeout)}
	defer mw.deadline.Clear()
	// Once the plans still running at the exit have been answered
	// (plansExit), their answers get a grace to go out, as the broker's
	// streams do: a client reading none of its answer held the exit.
	defer context.AfterFunc(plansExit, func() { mw.deadline.Limit(time.Now().Add(streamdeadline.Grace)) })()
	defer mw.finish(h.logger, r, rid)
	w = mw
	if h.unsupportedVersion(w, r) || refuseCharset(w, r) || refuseLargeBody(w, r) || refuseBadID(w, r) {
		return nil
	}
	if pb, ok := r.Body.(*peekedBody); ok && pb.ok {
		mw.body = pb // kept: the go-sdk replaces r.Body
	}
	if refuseAccept(w, r, h.legacy != nil && !isStatelessRevision(r.Header.Get("Mcp-Protocol-Version"))) {
		return nil
	}
	modern, id := h.isModern(r)
	switch {
	case modern && h.modern != nil:
		if !modernHeaders(w, r, id) {
			return nil
		}
		if msg, ok := peekJSONRPC(r); ok && r.Method == http.MethodPost {
			if problem := namedParamsProblem(msg.Method, msg.Params); problem != "" {
				writeJSONRPCError(w, http.StatusBadRequest, msg.ID, rpcInvalidParams, problem, nil)
				return nil
			}
		}
		h.modern.ServeHTTP(w, r)
	case h.legacy != nil:
		// A modern request when 2026-07-28 is not offered gets the go-sdk's
		// UnsupportedProtocolVersion answer listing the older revisions.
		if !modern && !h.legacyPrecheck(w, r) {
			return nil
		}
		if pb, ok := r.Body.(*peekedBody); ok && pb.ok {
			mw.body = pb // legacyPrecheck may have peeked it first
		}
		h.serveLegacy(mw, r, mcpClientKey(who.UserID, who.TenantID, who.ClientKey))
	case r.Method != http.MethodPost:
		// Revision 2026-07-28 has no GET stream and no session to DELETE.
		w.Header().Set("Allow", http.MethodPost)
		writeJSONRPCError(w, http.StatusMethodNotAllowed, nil, rpcInvalidRequest, "method not allowed: only POST is served", nil)
	default:
		// Only revisions without the handshake are offered: an initialize (or a
		// request without a protocol version) is refused the way the revision
		// refuses an unknown version, naming the ones served.
		requested := r.Header.Get("Mcp-Protocol-Version")
		writeJSONRPCError(w, http.StatusBadRequest, id, mcp.CodeUnsupportedProtocolVersion,
			"this server speaks only MCP "+fmt.Sprint(h.offered)+"; send the protocol version in _meta and the MCP-Protocol-Version header",
			map[string]any{"supported": h.offered, "requested": requested})
	}
	return nil
}

// modernHeaders prepares a request of revision 2026-07-28 for the go-sdk,
// which reads its headers as the older revisions' transport did:
//
//   - A Last-Event-ID header is ignored, as the revision says of a header it
//     removed (no stream is resumable): the go-sdk refused such a POST, 400
//     -32600 with id null.
//   - An Mcp-Name in the revision's Base64 sentinel form (=?base64?…?=,
//     what a client must send for a name or URI that is no plain ASCII
//     header value) is decoded before the go-sdk compares it with the body,
//     as the revision requires: the go-sdk compared the encoded text and
//     answered -32020 HeaderMismatch. One that does not decode is refused
//     so, 400 -32020, here.
//
// It reports false when it answered r.
func modernHeaders(w http.ResponseWriter, r *http.Request, id json.RawMessage) bool {
	r.Header.Del("Last-Event-ID")
	name := r.Header.Get("Mcp-Name")
	enc, ok := strings.CutPrefix(name, "=?base64?")
	if !ok {
		return true
	}
	enc, ok = strings.CutSuffix(enc, "?=")
	var dec []byte
	var err error
	if ok {
		dec, err = base64.StdEncoding.DecodeString(enc)
	}
	if !ok || err != nil || !utf8.Valid(dec) {
		if id == nil && r.Body != nil {
			id, _ = peekMessage(r)
		}
		writeJSONRPCError(w, http.StatusBadRequest, id, mcp.CodeHeaderMismatch,
			"header mismatch: Mcp-Name "+strconv.Quote(clip.Ellipsis(name, 64))+" is not valid =?base64?…?= encoding of UTF-8 text", nil)
		return false
	}
	r.Header.Set("Mcp-Name", string(dec))
	return true
}

// unsupportedVersion answers a request whose MCP-Protocol-Version header
// names a revision of the stateless era (2026-07-28 or later, by string
// order) that is not offered, before anything else about it: 400 with the
// revision's UnsupportedProtocolVersionError (-32022, data.supported and
// data.requested), which the revision requires "whether the version is
// unknown to the server, or is a known version the server has chosen not to
// support". Routed on as 2026-07-28, an unknown version (9999-01-01, abc)
// was first told about a missing Mcp-Method header or _meta field. The
// go-sdk refuses an unoffered version that sorts earlier itself (400,
// turned into -32600 by mcpWriter).
func (h *MCPHandler) unsupportedVersion(w http.ResponseWriter, r *http.Request) bool {
	v := r.Header.Get("Mcp-Protocol-Version")
	if v == "" || !isStatelessRevision(v) || slices.Contains(h.offered, v) {
		return false
	}
	var id json.RawMessage
	if r.Method == http.MethodPost && r.Body != nil {
		id, _ = peekMessage(r)
	}
	writeJSONRPCError(w, http.StatusBadRequest, id, mcp.CodeUnsupportedProtocolVersion,
		fmt.Sprintf("unsupported protocol version %q: this server speaks MCP %s", v, strings.Join(h.offered, ", ")),
		map[string]any{"supported": h.offered, "requested": v})
	return true
}

// serveLegacy serves a request of the handshake revisions: through the
// session directory when there is one, within the session limits, and a
// session a previous config opened through the adopting handler.
func (h *MCPHandler) serveLegacy(w *mcpWriter, r *http.Request, client string) {
	if h.Stateless {
		if scope := statelessCancelScope(r); scope != "" {
			var end func()
			r, end = h.track(w, r, scope, true)
			defer end()
		} else if r.Method == http.MethodPost {
			r = withPostCalls(r, statelessPost) // its requests end with it
		}
		h.legacy.ServeHTTP(w, r)
		return
	}
	d := h.dir
	sid := r.Header.Get("Mcp-Session-Id")
	route := mcpRouteGoSDK
	if sid != "" {
		route = mcpSessions.route(sid, client, h.owner)
	}
	switch {
	case route == mcpRouteAdopt:
		if old := mcpSessions.answers(sid); old != nil && isJSONRPCAnswer(w.body) {
			// The client's answer to a request the session sent before
			// the reload (an elicitation a plan waits for): to that session.
			old.ServeHTTP(w, r)
			return
		}
		r, end := h.track(w, r, sid, true)
		defer end()
		h.serveAdopted(w, r, sid)
		return
	case route == mcpRouteOtherConfig:
		h.serveOtherConfig(w, r, sid)
		return
	case route == mcpRouteForeign:
		writeJSONRPCError(w, http.StatusNotFound, nil, rpcSessionNotFound,
			"session not found: it ended, expired or its gateway is gone; send initialize without Mcp-Session-Id to start a new one", nil)
		return
	case sid != "" && r.Method == http.MethodPost && isInitialize(w.body) && mcpSessions.holds(sid, h.owner):
		// The go-sdk answers a second initialize of a session with code 0,
		// which JSON-RPC does not define.
		m, _ := w.body.message()
		writeJSONRPCError(w, http.StatusOK, m.ID, rpcInvalidRequest,
			"invalid request: this session is initialized already; send initialize without Mcp-Session-Id to start another", nil)
		return
	case sid == "" && r.Method == http.MethodPost && w.body != nil:
		m, ok := w.body.message()
		if !ok || m.Method != "initialize" {
			break
		}
		victimID, victim, admitted := mcpSessions.admit(client, h.MaxSessions, h.MaxSessionsPerClient)
		if victim != nil {
			closeMCPSession(victim.server, victimID)
			if d != nil {
				d.forget(victimID)
			}
		}
		if !admitted {
			w.Header().Set("Retry-After", "5")
			writeJSONRPCError(w, http.StatusServiceUnavailable, m.ID, rpcServerBusy,
				fmt.Sprintf("this gateway holds its maximum of %d MCP sessions; retry shortly, or speak revision 2026-07-28, which needs none", h.MaxSessions), nil)
			return
		}
	}
	if d != nil && sid != "" && r.Header.Get(mcpForwardedHeader) == "" && !d.holds(sid) && d.forward(w, r, sid) {
		return
	}
	if sid != "" {
		var end func()
		r, end = h.track(w, r, sid, false)
		defer end()
	}
	w.onHeader = func(status int, hdr http.Header) {
		switch {
		case sid == "" && status < 300 && hdr.Get("Mcp-Session-Id") != "":
			// A new session: recorded before its id reaches the client.
			id := hdr.Get("Mcp-Session-Id")
			mcpSessions.add(id, &mcpSessionRecord{client: client, idle: h.idle, owner: h.owner, server: h.server, handler: h.legacy})
			if d != nil {
				d.register(id)
			}
		case sid != "" && status == http.StatusNotFound:
			h.forgetSession(sid)
		}
	}
	h.legacy.ServeHTTP(w, r)
	if r.Method == http.MethodDelete && sid != "" && w.status < 300 {
		h.forgetSession(sid)
	}
}

// statelessCancelScope is what scopes a stateless POST's requests and
// cancellations in place of a session: its credentials (the Authorization
// header, digested) when an authentication handler before this one
// accepted them ({http.auth.user.id} set, not anonymous), "" otherwise. A
// notifications/cancelled in another POST stops a request only when both
// carry the same verified credentials, which only their holder can send:
// the TypeScript SDK cancels a call so and keeps its POST open, so without
// a scope the plan ran to its end. An Authorization header nothing
// verified is no credential: on a public route any caller sends any value,
// and clients without a token send the same few ("Bearer undefined",
// "Bearer null", "Bearer "), so anonymous callers shared a scope and one
// could stop the other's plans by cancelling ids 0, 1, 2... Two clients
// sharing one token and numbering their requests alike can still stop
// each other's; anonymous requests stay out of reach (every client numbers
// its requests from 0 or 1), and end with their POST.
func statelessCancelScope(r *http.Request) string {
	if r.Method != http.MethodPost {
		return ""
	}
	auth := r.Header.Get("Authorization")
	if auth == "" || !authenticated(r) {
		return ""
	}
	sum := sha256.Sum256([]byte(auth))
	return "stateless:" + hex.EncodeToString(sum[:])
}

// authenticated reports whether an authentication handler that ran before
// this one (codemode_auth, Caddy's authentication with any provider)
// accepted a user for r, not anonymous access.
func authenticated(r *http.Request) bool {
	repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	if !ok {
		return false
	}
	id, _ := repl.GetString("http.auth.user.id")
	anon, _ := repl.GetString("http.auth.user.anonymous")
	return id != "" && anon != "true"
}

// track records the requests of a POST of session sid for cancellation
// before the go-sdk reads it (a request it cancels is marked before its
// handler can answer, mcp_cancel.go), and returns r carrying what their
// handlers look up (postCalls) and the func to call once the POST is
// answered. temporary: a temporary go-sdk session serves it.
func (h *MCPHandler) track(w *mcpWriter, r *http.Request, sid string, temporary bool) (*http.Request, func()) {
	if r.Method != http.MethodPost || w.body == nil {
		return r, func() {}
	}
	end := mcpCalls.track(sid, w, h.logger)
	switch pc := w.post; {
	case pc == nil && temporary:
		return withPostCalls(r, statelessPost), end
	case pc == nil:
		return r, end
	default:
		pc.temporary = temporary
		return withPostCalls(r, pc), end
	}
}

// isJSONRPCAnswer reports whether body is one JSON-RPC response: a result
// or an error for a request the server sent.
func isJSONRPCAnswer(body *peekedBody) bool {
	if body == nil {
		return false
	}
	m, ok := body.message()
	return ok && m.Method == "" && len(m.ID) > 0 && (m.Result != nil || m.Error != nil)
}

// forgetSession drops session id, which ended here, from this process's
// record and from the session directory.
func (h *MCPHandler) forgetSession(id string) {
	mcpSessions.remove(id, h.owner)
	if h.dir != nil {
		h.dir.forget(id)
	}
}

// serveAdopted serves a request of session sid, which a config unloaded
// since opened: the old go-sdk session is closed (nothing reaches it any
// more) and the request is served by a temporary session of this config.
func (h *MCPHandler) serveAdopted(w *mcpWriter, r *http.Request, sid string) {
	closeMCPSession(mcpSessions.adopt(sid, h.owner), sid)
	if h.dir != nil {
		h.dir.register(sid) // the other gateways forward it here now
	}
	if r.Method == http.MethodDelete {
		h.forgetSession(sid)
		w.WriteHeader(http.StatusNoContent)
		return
	}
	h.adopted.ServeHTTP(w, r)
}

// serveOtherConfig serves a request of session sid, which the other config
// of a reload under way holds: through the go-sdk handler holding it, or,
// once that config adopted it, a temporary session of this config, as
// after the reload. A GET stream is refused (405) rather than held by a
// config about to go; the session is left to its owner, which ends it on
// DELETE.
func (h *MCPHandler) serveOtherConfig(w *mcpWriter, r *http.Request, sid string) {
	owner, held := mcpSessions.holder(sid)
	// Tracked as in this config: the request or its cancellation may come
	// through the other config (mcpCalls is the process's).
	r, end := h.track(w, r, sid, held == nil)
	defer end()
	switch {
	case r.Method == http.MethodGet || (held == nil && r.Method != http.MethodDelete):
		h.adopted.ServeHTTP(w, r)
	case held != nil:
		held.ServeHTTP(w, r)
	default:
		w.WriteHeader(http.StatusNoContent)
	}
	if r.Method == http.MethodDelete && w.status < 300 {
		mcpSessions.remove(sid, owner)
		if h.dir != nil {
			h.dir.forget(sid)
		}
	}
}

// mcpRequestID is the request's id: the one the observability bridge set
// (the caller's, or Caddy's {http.request.uuid} as in its logs), else a
// fresh one.
func mcpRequestID(r *http.Request) string {
	if id := telemetry.RequestID(r.Context()); id != "" {
		return id
	}
	if repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer); ok {
		if id, _ := repl.GetString("http.request.uuid"); id != "" {
			return id
		}
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// originAllowed applies the transport's Origin rule: no Origin (a client
// that is not a browser), the endpoint's own origin or a configured one.
func (h *MCPHandler) originAllowed(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	return origin == "" || broker.OriginAllowed(origin, r.Host, h.AllowedOrigins)
}

// isModern tells whether r is a request of revision 2026-07-28 or later:
// its MCP-Protocol-Version header says so, or, without the header, the
// protocol version in the message's _meta does (the go-sdk then answers the
// missing header with the revision's HeaderMismatch error). It returns the
// message id when it read the body.
func (h *MCPHandler) isModern(r *http.Request) (bool, json.RawMessage) {
	if v := r.Header.Get("Mcp-Protocol-Version"); v != "" {
		return isStatelessRevision(v), nil
	}
	if r.Method != http.MethodPost || r.Header.Get("Mcp-Session-Id") != "" || r.Body == nil {
		return false, nil
	}
	id, version := peekMessage(r)
	return version != "" && isStatelessRevision(version), id
}

// peekMessage reads the id and params._meta protocol version of the
// JSON-RPC message in r's body and puts the body back as it was. A body
// over the transport's limit or not a single JSON object yields nothing;
// the MCP handler then answers it. Read as the go-sdk reads it (keys
// matched exactly), without copying the id or decoding anything else:
// the whole _meta was decoded into a map, in a second full decode of every
// POST without the revision's header and a session (every initialize).
func peekMessage(r *http.Request) (json.RawMessage, string) {
	buf, ok := peekBody(r)
	if !ok {
		return nil, ""
	}
	t := bytes.TrimSpace(buf)
	if len(t) == 0 || t[0] != '{' {
		return nil, ""
	}
	var msg struct {
		ID     json.RawMessage `json:"id"`
		Params struct {
			Meta struct {
				Version any `json:"io.modelcontextprotocol/protocolVersion"`
			} `json:"_meta"`
		} `json:"params"`
	}
	if _, err := sdkjson.Parse(t, &msg, sdkjson.DontMatchCaseInsensitiveStructFields|sdkjson.DontCopyRawMessage); err != nil {
		return nil, ""
	}
	v, _ := msg.Params.Meta.Version.(string)
	return msg.ID, v
}

// peekBody reads r's body and puts it back as it was; false when it is over
// the transport's limit, nested deeper than mcpMaxDepth or unreadable (the
// MCP handler then answers it).
// Once read, the body is kept, so several peeks read it once.
func peekBody(r *http.Request) ([]byte, bool) {
	if pb, ok := r.Body.(*peekedBody); ok {
		return pb.buf, pb.ok
	}
	// Sized by Content-Length up to 128 KiB (a 64 KiB script and its
	// request): io.ReadAll grew it step by step, copying it each time
	// (152 KB allocated for a 64 KiB script, 80 KB now). Not
	// beyond: a Content-Length is a claim, and a caller announcing 4 MiB
	// and sending nothing would hold that much per request.
	var b bytes.Buffer
	if n := r.ContentLength; n > 0 && n <= 128<<10 {
		b.Grow(int(n) + bytes.MinRead)
	}
	_, err := b.ReadFrom(io.LimitReader(r.Body, mcpMaxBody+1))
	buf := b.Bytes()
	ok := err == nil && int64(len(buf)) <= mcpMaxBody && !nestsDeeper(buf, mcpMaxDepth)
	r.Body = &peekedBody{Reader: io.MultiReader(bytes.NewReader(buf), r.Body), Closer: r.Body, buf: buf, ok: ok}
	return buf, ok
}

// nestsDeeper reports whether the JSON text buf nests arrays and objects
// deeper than limit, by the go-sdk's own rule (brackets counted outside
// strings, whatever the syntax), so that what it passes the go-sdk's
// decoder takes too.
func nestsDeeper(buf []byte, limit int) bool {
	return jsonbound.Check(buf, jsonbound.Limits{Depth: limit}) != nil
}

// peekedBody is a request body whose start was read by peekBody.
type peekedBody struct {
	io.Reader
	io.Closer
	buf []byte
	ok  bool
	// msg is buf's JSON-RPC message, decoded once by message: the checks
	// before the go-sdk and the answer's rewrite look at it several times.
	msg          jsonrpcMessage
	msgOK, drawn bool
	// heads are buf's ids and methods, decoded once by readHeads.
	heads                           []rpcHead
	headsBatch, headsOK, headsDrawn bool
}

// message is the body's JSON-RPC message (false for anything else),
// decoded on first use.
func (pb *peekedBody) message() (jsonrpcMessage, bool) {
	if !pb.drawn {
		pb.msg, pb.msgOK = parseJSONRPC(pb.buf)
		pb.drawn = true
	}
	return pb.msg, pb.msgOK
}

// writeJSONRPCError answers with a JSON-RPC error response; id nil means
// the message's id is unknown (null).
func writeJSONRPCError(w http.ResponseWriter, status int, id json.RawMessage, code int64, message string, data any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(jsonrpcError(id, code, message, data))
}

// jsonrpcError is a JSON-RPC error response (id null when id is empty;
// data only when not nil), for HTTP and stdio alike.
func jsonrpcError(id json.RawMessage, code int64, message string, data any) map[string]any {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	e := map[string]any{"code": code, "message": message}
	if data != nil {
		e["data"] = data
	}
	return map[string]any{"jsonrpc": "2.0", "id": id, "error": e}
}

// Interface guards
var (
	_ caddy.Provisioner           = (*MCPHandler)(nil)
	_ caddy.CleanerUpper          = (*MCPHandler)(nil)
	_ caddyhttp.MiddlewareHandler = (*MCPHandler)(nil)
)
