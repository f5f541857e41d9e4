package metatools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"mime"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/codemode-gateway/caddy-codemode/broker/catalog"
	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"
	"github.com/codemode-gateway/caddy-codemode/internal/clip"
	"github.com/codemode-gateway/caddy-codemode/internal/notify"
	"github.com/codemode-gateway/caddy-codemode/internal/telemetry"
)

// UpstreamConfig is one upstream MCP server whose tools join the index as
// <Name>:<tool>. Exactly one of URL and Command is set.
type UpstreamConfig struct {
	// Name is the app id and name prefix; letters, digits, '_', '-', '.'.
	Name string
	// URL is a Streamable HTTP endpoint.
	URL string
	// Command and Args start a stdio server; Env is added to this process's
	// environment for it.
	Command string
	Args    []string
	Env     []string
	// Headers are sent with every request to a URL upstream (credentials
	// such as Authorization). Never logged.
	Headers map[string]string
	// HTTPClient is used for URL upstreams; nil means http.DefaultClient.
	HTTPClient *http.Client
	// CallTimeout is the deadline of one tool call on this upstream (the
	// caller's own deadline may be shorter). Default 30s.
	CallTimeout time.Duration
	// Credential, when set, makes the upstream call as each user (URL
	// upstreams only): for a call's context it returns the key of the
	// caller's own connection and the function that puts the caller's
	// current credential on each of that connection's requests, or an
	// empty key for the shared connection (Headers only). Its error stops
	// the call and reaches the caller as it is (an *Error such as
	// CREDENTIAL_REQUIRED). The shared connection lists the tools; while
	// it cannot (an upstream that lists for signed-in users only), the
	// first user connection lists them.
	Credential func(ctx context.Context) (user string, authorize func(*http.Request) error, err error)
	// UserIdle closes a user's connection after this long unused.
	// Default 5 minutes.
	UserIdle time.Duration
	// MaxUsers caps the users' connections kept open; the least recently
	// used is closed for a new one. Default 256.
	MaxUsers int
	// ToolCache, when set, keeps the last tool list a user's connection
	// read where every gateway finds it: an upstream whose shared
	// connection cannot list (it serves signed-in users only) starts from
	// it instead of having no tools until one of its own users connects.
	ToolCache ToolListCache
}

// DefaultUpstreamCallTimeout is UpstreamConfig.CallTimeout's default: no
// call to an upstream outlives it, whether or not a throttle sets one.
const DefaultUpstreamCallTimeout = 30 * time.Second

// ToolListCache keeps an upstream's tool list (JSON of []Tool) between
// gateways and restarts.
type ToolListCache interface {
	LoadTools(ctx context.Context) ([]byte, error)
	SaveTools(ctx context.Context, tools []byte) error
}

// headerTransport adds fixed headers to every request, then the user's
// credential on a user's connection, and the W3C trace context of the
// request's span when there is one.
type headerTransport struct {
	base      http.RoundTripper
	headers   map[string]string
	authorize func(*http.Request) error
}

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h.headers {
		r.Header.Set(k, v)
	}
	if h.authorize != nil {
		if err := h.authorize(r); err != nil {
			return nil, err
		}
	}
	telemetry.Inject(r.Context(), r.Header)
	resp, err := h.base.RoundTrip(r)
	if err != nil || resp.Body == nil {
		return resp, err
	}
	// The go-sdk reads a JSON answer whole (io.ReadAll): a JSON answer, or
	// a gzip one the transport inflates, is cut at MaxUpstreamMessageBytes.
	// A server-sent event is cut by the go-sdk (the transport's
	// MaxEventSize); sseWatch tells the call why its connection failed.
	c, _ := r.Context().Value(answerCapKey{}).(*answerCap)
	if ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); ct != "text/event-stream" {
		resp.Body = &cappedBody{ReadCloser: resp.Body, left: MaxUpstreamMessageBytes, cap: c}
	} else if c != nil {
		resp.Body = &sseWatch{ReadCloser: resp.Body, cap: c}
	}
	return resp, nil
}

// sseWatch marks its call's answerCap when an event of the stream grows
// past MaxUpstreamMessageBytes (the go-sdk then fails the connection).
type sseWatch struct {
	io.ReadCloser
	cap     *answerCap
	event   int64 // bytes of the current event
	newline bool  // the last byte but '\r' was '\n'
}

func (s *sseWatch) Read(p []byte) (int, error) {
	n, err := s.ReadCloser.Read(p)
	for _, b := range p[:n] {
		switch {
		case b == '\r':
			continue
		case b == '\n' && s.newline: // an empty line ends an event
			s.event = 0
			continue
		}
		s.newline = b == '\n'
		if s.event++; s.event > MaxUpstreamMessageBytes {
			s.cap.exceeded.Store(true)
		}
	}
	return n, err
}

// MaxUpstreamMessageBytes bounds one message from an upstream: a JSON
// answer of a URL upstream (after the transport inflates a gzip one), a
// server-sent event or a stdio upstream's message line past it fails the
// call with RESPONSE_TOO_LARGE, and the connection is opened again (a
// stdio upstream's process is stopped and started again). It is the
// go-sdk's mcp.DefaultMaxEventSize.
const MaxUpstreamMessageBytes = mcp.DefaultMaxEventSize

// errUpstreamMessageTooLarge is the read error of a cut answer.
var errUpstreamMessageTooLarge = fmt.Errorf("upstream answer exceeds %d bytes", MaxUpstreamMessageBytes)

// answerCap, in a call's context, learns that the call's answer was cut.
type answerCap struct{ exceeded atomic.Bool }

type answerCapKey struct{}

// cappedBody is a response body that fails once more than left bytes are
// read.
type cappedBody struct {
	io.ReadCloser
	left int64
	cap  *answerCap
}

func (b *cappedBody) Read(p []byte) (int, error) {
	if b.left < 0 {
		return 0, errUpstreamMessageTooLarge
	}
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	if b.left < 0 {
		if b.cap != nil {
			b.cap.exceeded.Store(true)
		}
		return n, errUpstreamMessageTooLarge
	}
	return n, err
}

// Validate checks the config.
func (c UpstreamConfig) Validate() error {
	if c.Name == "" {
		return errors.New("upstream needs a name")
	}
	for _, r := range c.Name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.') {
			return fmt.Errorf("upstream name %q: only letters, digits, '_', '-' and '.' are allowed", c.Name)
		}
	}
	if IsMetaToolName(c.Name+":x") || strings.EqualFold(c.Name, "meta") {
		return fmt.Errorf("upstream name %q is reserved", c.Name)
	}
	if (c.URL == "") == (c.Command == "") {
		return fmt.Errorf("upstream %q: set exactly one of url and command", c.Name)
	}
	if len(c.Headers) > 0 && c.URL == "" {
		return fmt.Errorf("upstream %q: headers apply to url upstreams only", c.Name)
	}
	if c.Credential != nil && c.URL == "" {
		return fmt.Errorf("upstream %q: user credentials apply to url upstreams only", c.Name)
	}
	return nil
}

// Upstream is a ToolSource over an upstream MCP server, connected with the
// go-sdk client. It refreshes its tool list on notifications/tools/list_changed
// and on every (re)connect, and reconnects with backoff when the session ends.
type Upstream struct {
	cfg    UpstreamConfig
	logger *zap.Logger

	mu        sync.Mutex
	session   *mcp.ClientSession
	version   string
	tools     []Tool
	listeners notify.Set
	// refreshing: a read of the tool list after a list_changed
	// notification runs; refreshAgain: another came meanwhile.
	refreshing, refreshAgain bool

	cancel context.CancelFunc
	done   chan struct{}
	runCtx context.Context

	// users are the per-user connections (Credential), by user key.
	users map[string]*userConn

	// calls are the calls in flight on each session, whose callers an
	// upstream's question goes to (upstream_question.go).
	callsMu sync.Mutex
	calls   map[*mcp.ClientSession]map[*upstreamCall]struct{}
}

// userConn is one user's connection to an upstream that takes user
// credentials.
type userConn struct {
	ready    chan struct{} // closed once connecting ended
	cs       *mcp.ClientSession
	err      error
	lastUsed time.Time
}

// Backoff bounds between reconnect attempts.
var (
	upstreamMinBackoff = 500 * time.Millisecond
	upstreamMaxBackoff = 30 * time.Second
	// upstreamRecheck is how often the tool list of an upstream speaking
	// 2026-07-28 is re-read (±20%): that revision keeps no session whose
	// end would tell that the upstream restarted and its change
	// notification stream (subscriptions/listen) is gone. The go-sdk client
	// answers from its cache while the upstream's ttlMs says the list is
	// fresh; a failed read reconnects.
	upstreamRecheck = 30 * time.Second
)

// NewUpstream returns an unconnected upstream; Start connects it.
func NewUpstream(cfg UpstreamConfig, logger *zap.Logger) (*Upstream, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	if cfg.UserIdle <= 0 {
		cfg.UserIdle = 5 * time.Minute
	}
	if cfg.MaxUsers <= 0 {
		cfg.MaxUsers = 256
	}
	return &Upstream{cfg: cfg, logger: logger.With(zap.String("upstream", cfg.Name)), users: map[string]*userConn{}}, nil
}

// OnChange implements ChangeNotifier.
func (u *Upstream) OnChange(fn func()) (remove func()) { return u.listeners.Add(fn) }

func (u *Upstream) notify() { u.listeners.Notify() }

// Start makes a first connection attempt, waiting at most until ctx ends,
// then keeps the connection up in the background until Close. A failed
// first attempt is logged and retried; it is not an error, so a gateway
// starts while an upstream is down.
func (u *Upstream) Start(ctx context.Context) error {
	runCtx, cancel := context.WithCancel(context.Background())
	u.cancel = cancel
	u.runCtx = runCtx
	u.done = make(chan struct{})
	first := make(chan struct{})
	go u.run(runCtx, first)
	if u.cfg.Credential != nil {
		go u.reapUsers(runCtx)
	}
	select {
	case <-first:
	case <-ctx.Done():
	}
	return nil
}

// Close ends the session and stops reconnecting.
func (u *Upstream) Close() error {
	if u.cancel == nil {
		return nil
	}
	u.cancel()
	u.mu.Lock()
	if u.session != nil {
		u.session.Close()
	}
	users := u.users
	u.users = map[string]*userConn{}
	u.mu.Unlock()
	for _, c := range users {
		<-c.ready
		if c.cs != nil {
			c.cs.Close()
		}
	}
	<-u.done
	return nil
}

func (u *Upstream) run(ctx context.Context, first chan struct{}) {
	defer close(u.done)
	backoff := upstreamMinBackoff
	signalled := false
	for {
		cs, err := u.connect(ctx)
		if err == nil {
			backoff = upstreamMinBackoff
			err = u.refresh(ctx, cs)
		}
		if !signalled {
			close(first)
			signalled = true
		}
		if err != nil {
			if u.cfg.Credential != nil {
				// An upstream that serves signed-in users only refuses the
				// shared connection; users' own connections still work, and
				// the list one of them read stands in.
				u.loadCachedTools(ctx)
				u.logger.Info("shared connection to an upstream MCP server that takes user credentials failed; retrying", zap.Error(err), zap.Duration("backoff", backoff))
			} else {
				u.logger.Warn("upstream MCP server unavailable; retrying", zap.Error(err), zap.Duration("backoff", backoff))
			}
		} else {
			u.watch(ctx, cs)
			u.mu.Lock()
			u.session = nil
			u.mu.Unlock()
			if ctx.Err() != nil {
				return
			}
			u.logger.Warn("upstream MCP session ended; reconnecting")
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, upstreamMaxBackoff)
	}
}

func (u *Upstream) connect(ctx context.Context) (*mcp.ClientSession, error) {
	cs, version, err := u.dial(ctx, nil)
	if err != nil {
		return nil, err
	}
	u.logger.Info("connected to upstream MCP server", zap.String("protocol_version", version))
	u.mu.Lock()
	u.session = cs
	u.version = version
	u.mu.Unlock()
	return cs, nil
}

// dial opens a client session: the shared one (authorize nil) or a user's.
func (u *Upstream) dial(ctx context.Context, authorize func(*http.Request) error) (*mcp.ClientSession, string, error) {
	client := mcp.NewClient(&mcp.Implementation{Name: "codemode-gateway", Version: "v1"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			u.refreshSoon(ctx)
		},
		// Form elicitation is declared (the go-sdk's default for this
		// handler): an upstream's question goes to the gateway's caller.
		ElicitationHandler: u.elicit,
	})
	var t mcp.Transport
	if u.cfg.URL != "" {
		hc := u.cfg.HTTPClient
		base := http.DefaultTransport
		c := &http.Client{}
		if hc != nil {
			*c = *hc
			if hc.Transport != nil {
				base = hc.Transport
			}
		}
		c.Transport = headerTransport{base: base, headers: u.cfg.Headers, authorize: authorize}
		hc = c
		// MaxEventSize set: the go-sdk's 0 reads an event without a bound,
		// though its comment says 0 selects DefaultMaxEventSize.
		t = &mcp.StreamableClientTransport{Endpoint: u.cfg.URL, HTTPClient: hc, MaxEventSize: MaxUpstreamMessageBytes}
	} else {
		cmd := exec.Command(u.cfg.Command, u.cfg.Args...)
		if len(u.cfg.Env) > 0 {
			cmd.Env = append(cmd.Environ(), u.cfg.Env...)
		}
		t = &stdioTransport{cmd: cmd, logger: u.logger, max: MaxUpstreamMessageBytes, grace: stdioStopGrace}
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// The go-sdk client asks for the newest revision (2026-07-28:
	// server/discover, then stateless requests) and falls back to the
	// initialize handshake of the newest older revision the server offers.
	cs, err := client.Connect(cctx, t, nil)
	if err != nil {
		return nil, "", fmt.Errorf("connecting to upstream %q: %w", u.cfg.Name, err)
	}
	version := ""
	if ir := cs.InitializeResult(); ir != nil {
		version = ir.ProtocolVersion
	}
	return cs, version, nil
}

// watch returns when the session ends. A session of 2026-07-28 or later
// never ends by itself: its tool list is re-read every upstreamRecheck and a
// failure ends it.
func (u *Upstream) watch(ctx context.Context, cs *mcp.ClientSession) {
	ir := cs.InitializeResult()
	if ir == nil || ir.ProtocolVersion < firstMRTRRevision {
		cs.Wait()
		return
	}
	ended := make(chan struct{})
	go func() { cs.Wait(); close(ended) }()
	for {
		jitter := time.Duration(rand.Int64N(int64(upstreamRecheck)/5+1)) - upstreamRecheck/10
		select {
		case <-ended:
			return
		case <-ctx.Done():
			cs.Close()
			<-ended
			return
		case <-time.After(upstreamRecheck + jitter):
			if err := u.refresh(ctx, cs); err != nil {
				u.logger.Warn("upstream MCP server stopped answering; reconnecting", zap.Error(err))
				cs.Close()
				<-ended
				return
			}
		}
	}
}

// ProtocolVersion is the MCP revision negotiated with the upstream on the
// last connect, "" before the first.
func (u *Upstream) ProtocolVersion() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.version
}

// refresh lists the upstream's tools and notifies the index.
func (u *Upstream) refresh(ctx context.Context, cs *mcp.ClientSession) error {
	var tools []Tool
	for t, err := range cs.Tools(ctx, nil) {
		if err != nil {
			return fmt.Errorf("listing tools of upstream %q: %w", u.cfg.Name, err)
		}
		tools = append(tools, u.toolOf(t))
	}
	u.mu.Lock()
	u.tools = tools
	u.mu.Unlock()
	u.notify()
	return nil
}

// refreshSoon re-reads the tool list after a list_changed notification.
// One read runs at a time: notifications that come while it runs ask for
// one more read after it. Each notification started its own read, and an
// upstream sending 20,000 of them had the gateway hold 13,000 goroutines
// and 8,500 tools/list requests open against it at once.
func (u *Upstream) refreshSoon(ctx context.Context) {
	u.mu.Lock()
	if u.refreshing {
		u.refreshAgain = true
		u.mu.Unlock()
		return
	}
	u.refreshing = true
	u.mu.Unlock()
	go func() {
		for {
			u.mu.Lock()
			cs := u.session
			u.refreshAgain = false
			if cs == nil || ctx.Err() != nil {
				u.refreshing = false
				u.mu.Unlock()
				return
			}
			u.mu.Unlock()
			if err := u.refresh(ctx, cs); err != nil {
				u.logger.Warn("refreshing upstream tools failed", zap.Error(err))
			}
			u.mu.Lock()
			again := u.refreshAgain
			if !again {
				u.refreshing = false
			}
			u.mu.Unlock()
			if !again {
				return
			}
		}
	}()
}

func (u *Upstream) toolOf(t *mcp.Tool) Tool {
	out := Tool{Name: u.cfg.Name + ":" + t.Name, AppID: u.cfg.Name, Description: t.Description}
	if t.InputSchema != nil {
		out.InputSchema, _ = json.Marshal(t.InputSchema)
	}
	if t.OutputSchema != nil {
		out.OutputSchema, _ = json.Marshal(t.OutputSchema)
	}
	if a := t.Annotations; a != nil {
		ro, idem := a.ReadOnlyHint, a.IdempotentHint
		out.Annotations = &Annotations{Title: a.Title, ReadOnlyHint: &ro, IdempotentHint: &idem,
			DestructiveHint: a.DestructiveHint, OpenWorldHint: a.OpenWorldHint}
	}
	return out
}

// Tools implements ToolSource: the list from the last (re)connect or change
// notification.
func (u *Upstream) Tools(context.Context) ([]Tool, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]Tool(nil), u.tools...), nil
}

// Call implements ToolSource.
func (u *Upstream) Call(ctx context.Context, name string, input json.RawMessage) (json.RawMessage, error) {
	var cs *mcp.ClientSession
	if u.cfg.Credential != nil {
		user, authorize, err := u.cfg.Credential(ctx)
		if err != nil {
			return nil, err
		}
		if user != "" {
			if cs, err = u.userSession(ctx, user, authorize); err != nil {
				return nil, err
			}
		}
	}
	if cs == nil {
		u.mu.Lock()
		cs = u.session
		u.mu.Unlock()
	}
	if cs == nil {
		return nil, &Error{Code: "UPSTREAM_UNAVAILABLE", Message: fmt.Sprintf("upstream MCP server %q is not connected", u.cfg.Name), Transient: true}
	}
	tool := strings.TrimPrefix(name, u.cfg.Name+":")
	// A client span (OpenTelemetry's MCP conventions); its trace context
	// goes in the HTTP headers (headerTransport) and in _meta, where
	// upstreams over stdio can read it too.
	ctx, span := telemetry.StartSpan(ctx, "tools/call "+tool, trace.SpanKindClient,
		attribute.String("mcp.method.name", "tools/call"),
		attribute.String("gen_ai.tool.name", tool),
		attribute.String("codemode.upstream", u.cfg.Name))
	params := &mcp.CallToolParams{Name: tool, Arguments: input}
	if h := (http.Header{}); span.SpanContext().IsValid() {
		telemetry.Inject(ctx, h)
		params.Meta = mcp.Meta{}
		for _, k := range []string{"traceparent", "tracestate"} {
			if v := h.Get(k); v != "" {
				params.Meta[k] = v
			}
		}
	}
	timeout := u.cfg.CallTimeout
	if timeout <= 0 {
		timeout = DefaultUpstreamCallTimeout
	}
	ac := &answerCap{}
	uc := newUpstreamCall(ctx, u.cfg.Name, name)
	callCtx, cancel := context.WithTimeout(context.WithValue(context.WithValue(ctx, answerCapKey{}, ac), upstreamCallKey{}, uc), timeout)
	defer cancel()
	uc.ctx = callCtx
	untrack := u.track(cs, uc)
	res, err := cs.CallTool(callCtx, params)
	untrack()
	if err == nil && res.IsError {
		if e := uc.refusal(clip.String(resultText(res), 1024)); e != nil {
			telemetry.EndSpan(span, e.Code)
			return nil, e
		}
	}
	if err != nil {
		if e := uc.refusal(""); e != nil {
			u.logger.Info("upstream call failed after a question its caller was not asked or did not answer", zap.String("tool", name), zap.Error(err))
			telemetry.EndSpan(span, e.Code)
			return nil, e
		}
		var me *Error
		if errors.As(err, &me) { // the user's credential, refused on the way out
			telemetry.EndSpan(span, me.Code)
			return nil, me
		}
		if ac.exceeded.Load() {
			u.logger.Warn("upstream MCP answer over the bound; reconnecting", zap.String("tool", name), zap.Int64("max_bytes", MaxUpstreamMessageBytes))
			e := &Error{Code: catalog.CodeResponseTooLarge, Message: fmt.Sprintf("upstream %q answered %s with more than %d bytes", u.cfg.Name, name, MaxUpstreamMessageBytes)}
			telemetry.EndSpan(span, e.Code)
			return nil, e
		}
		e := u.callError(ctx, callCtx, name, timeout, err)
		telemetry.EndSpan(span, e.Code)
		return nil, e
	}
	out, err := resultJSON(res)
	code := ""
	var me *Error
	if errors.As(err, &me) {
		code = me.Code
	}
	telemetry.EndSpan(span, code)
	return out, err
}

// callError is what a failed call reports. The transport's text (URLs,
// addresses, dial errors) is logged and never shown: a caller learns that
// the upstream is unavailable or slow, and what the upstream itself said
// when it answered with a JSON-RPC error.
func (u *Upstream) callError(ctx, callCtx context.Context, name string, timeout time.Duration, err error) *Error {
	var we *jsonrpc.Error
	switch {
	case errors.As(err, &we) && !sdkLocalError(we.Code) && !errors.Is(err, mcp.ErrConnectionClosed):
		return &Error{Code: CodeToolExecutionError, Message: fmt.Sprintf("upstream %q refused %s: %s", u.cfg.Name, name, clip.String(we.Message, 1024))}
	case ctx.Err() != nil:
		// The caller's own deadline or cancellation: its error, as is.
		return &Error{Code: sandbox.CodeTimeout, Message: fmt.Sprintf("the call of %s on upstream %q ended with its caller (%v)", name, u.cfg.Name, ctx.Err()), Transient: true}
	case callCtx.Err() != nil:
		return &Error{Code: sandbox.CodeTimeout, Message: fmt.Sprintf("upstream %q did not answer %s within %v", u.cfg.Name, name, timeout), Transient: true}
	}
	u.logger.Warn("upstream MCP call failed", zap.String("tool", name), zap.Error(err))
	return &Error{Code: "UPSTREAM_UNAVAILABLE", Message: fmt.Sprintf("upstream MCP server %q is unavailable", u.cfg.Name), Transient: true}
}

// sdkLocalError tells the go-sdk's own JSON-RPC codes (a request its
// transport rejected, a closing client or server, an uncoded error) from
// those an upstream answers with.
func sdkLocalError(code int64) bool {
	switch code {
	case -32001, -32003, -32004, -32005:
		return true
	}
	return false
}

// resultJSON turns an MCP call result into the JSON a script sees: the
// structured content when present, else the text (parsed when it is JSON).
func resultJSON(res *mcp.CallToolResult) (json.RawMessage, error) {
	texts := resultTexts(res)
	text := strings.Join(texts, "\n")
	if res.IsError {
		if text == "" {
			text = "tool reported an error"
		}
		return nil, &Error{Code: CodeToolExecutionError, Message: text, Transient: true}
	}
	// Without HTML escaping: the answer is the invoked tool's on the wire
	// (invokeResult) and a script's value.
	if res.StructuredContent != nil {
		return encodeJSON(res.StructuredContent)
	}
	if len(texts) == 1 && json.Valid([]byte(text)) {
		return json.RawMessage(text), nil
	}
	if len(texts) == 0 && len(res.Content) > 0 {
		return encodeJSON(res.Content)
	}
	return encodeJSON(text)
}

func resultTexts(res *mcp.CallToolResult) []string {
	var texts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			texts = append(texts, tc.Text)
		}
	}
	return texts
}

func resultText(res *mcp.CallToolResult) string { return strings.Join(resultTexts(res), "\n") }

// userSession returns the user's own connection, opening it when there is
// none (one attempt at a time per user). The connection's requests carry
// the user's current credential (authorize), so a refreshed token is used
// as soon as it is stored and a disconnected user's next request fails.
func (u *Upstream) userSession(ctx context.Context, user string, authorize func(*http.Request) error) (*mcp.ClientSession, error) {
	u.mu.Lock()
	if u.runCtx == nil || u.runCtx.Err() != nil {
		u.mu.Unlock()
		return nil, &Error{Code: "UPSTREAM_UNAVAILABLE", Message: fmt.Sprintf("upstream MCP server %q is not started", u.cfg.Name), Transient: true}
	}
	c, ok := u.users[user]
	if !ok {
		c = &userConn{ready: make(chan struct{})}
		u.users[user] = c
		u.evictLocked()
		runCtx := u.runCtx
		u.mu.Unlock()
		// The connection outlives this call: it dials under the
		// upstream's context, not the caller's.
		go u.openUser(runCtx, user, c, authorize)
		u.mu.Lock()
	}
	c.lastUsed = time.Now()
	u.mu.Unlock()
	select {
	case <-c.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if c.err != nil {
		var me *Error
		if errors.As(c.err, &me) { // the user's credential was refused
			return nil, me
		}
		return nil, &Error{Code: "UPSTREAM_UNAVAILABLE", Message: c.err.Error(), Transient: true}
	}
	return c.cs, nil
}

func (u *Upstream) openUser(ctx context.Context, user string, c *userConn, authorize func(*http.Request) error) {
	cs, _, err := u.dial(ctx, authorize)
	c.cs, c.err = cs, err
	close(c.ready)
	if err != nil {
		u.dropUser(user, c)
		return
	}
	u.mu.Lock()
	adopt := len(u.tools) == 0
	u.mu.Unlock()
	if adopt {
		// The shared connection has listed nothing (the upstream serves
		// signed-in users only): this user's list stands in, here and, by
		// the cache, on the other gateways.
		if err := u.refresh(ctx, cs); err != nil {
			u.logger.Info("listing tools over a user's connection failed", zap.Error(err))
			var me *Error
			if errors.As(err, &me) {
				// The user's credential was refused on the way (the
				// upstream refused the token): the connection is closed,
				// so that the user's next one, connected again, lists.
				u.dropUser(user, c)
				_ = cs.Close()
				return
			}
		} else if c := u.cfg.ToolCache; c != nil {
			u.mu.Lock()
			b, _ := json.Marshal(u.tools)
			u.mu.Unlock()
			if err := c.SaveTools(ctx, b); err != nil {
				u.logger.Warn("saving the upstream's tool list failed", zap.Error(err))
			}
		}
	}
	go func() {
		cs.Wait()
		u.dropUser(user, c)
	}()
}

// dropUser forgets c if it is still the user's connection.
func (u *Upstream) dropUser(user string, c *userConn) {
	u.mu.Lock()
	if u.users[user] == c {
		delete(u.users, user)
	}
	u.mu.Unlock()
}

// evictLocked closes the least recently used connections over MaxUsers.
func (u *Upstream) evictLocked() {
	for len(u.users) > u.cfg.MaxUsers {
		var oldest string
		var at time.Time
		for k, c := range u.users {
			if oldest == "" || c.lastUsed.Before(at) {
				oldest, at = k, c.lastUsed
			}
		}
		u.closeUserLocked(oldest)
	}
}

func (u *Upstream) closeUserLocked(user string) {
	c := u.users[user]
	delete(u.users, user)
	go func() {
		<-c.ready
		if c.cs != nil {
			c.cs.Close()
		}
	}()
}

// reapUsers closes users' connections idle for UserIdle.
func (u *Upstream) reapUsers(ctx context.Context) {
	every := min(u.cfg.UserIdle/2, time.Minute)
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
		u.mu.Lock()
		for k, c := range u.users {
			if time.Since(c.lastUsed) > u.cfg.UserIdle {
				select {
				case <-c.ready:
					u.closeUserLocked(k)
				default:
				}
			}
		}
		u.mu.Unlock()
	}
}

// UserConnections is how many users' connections are open (tests).
func (u *Upstream) UserConnections() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.users)
}

// loadCachedTools takes the cached tool list while the upstream has none.
func (u *Upstream) loadCachedTools(ctx context.Context) {
	c := u.cfg.ToolCache
	if c == nil {
		return
	}
	u.mu.Lock()
	have := len(u.tools) > 0
	u.mu.Unlock()
	if have {
		return
	}
	b, err := c.LoadTools(ctx)
	if err != nil || len(b) == 0 {
		return
	}
	var tools []Tool
	if err := json.Unmarshal(b, &tools); err != nil {
		return
	}
	for i := range tools { // a cache names only this upstream's tools
		if tools[i].AppID != u.cfg.Name || !strings.HasPrefix(tools[i].Name, u.cfg.Name+":") {
			return
		}
	}
	u.mu.Lock()
	if len(u.tools) > 0 {
		u.mu.Unlock()
		return
	}
	u.tools = tools
	u.mu.Unlock()
	u.notify()
}

// Prime opens a user's connection when the upstream has no tool list yet,
// so that the list that connection reads stands in (a user just connected
// the upstream's account).
func (u *Upstream) Prime(user string, authorize func(*http.Request) error) {
	u.mu.Lock()
	have := len(u.tools) > 0
	u.mu.Unlock()
	if have || u.cfg.Credential == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	go func() {
		defer cancel()
		if _, err := u.userSession(ctx, user, authorize); err != nil {
			u.logger.Info("listing tools over a newly connected user's connection failed", zap.Error(err))
		}
	}()
}
