package metatools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"
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
}

// DefaultUpstreamCallTimeout is UpstreamConfig.CallTimeout's default: no
// call to an upstream outlives it, whether or not a throttle sets one.
const DefaultUpstreamCallTimeout = 30 * time.Second

// headerTransport adds fixed headers to every request, and the W3C trace
// context of the request's span when there is one.
type headerTransport struct {
	base    http.RoundTripper
	headers map[string]string
}

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h.headers {
		r.Header.Set(k, v)
	}
	telemetry.Inject(r.Context(), r.Header)
	return h.base.RoundTrip(r)
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

	cancel context.CancelFunc
	done   chan struct{}
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
	return &Upstream{cfg: cfg, logger: logger.With(zap.String("upstream", cfg.Name))}, nil
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
	u.done = make(chan struct{})
	first := make(chan struct{})
	go u.run(runCtx, first)
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
	u.mu.Unlock()
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
			u.logger.Warn("upstream MCP server unavailable; retrying", zap.Error(err), zap.Duration("backoff", backoff))
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
	client := mcp.NewClient(&mcp.Implementation{Name: "codemode-gateway", Version: "v1"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			u.mu.Lock()
			cs := u.session
			u.mu.Unlock()
			if cs != nil {
				go func() {
					if err := u.refresh(ctx, cs); err != nil {
						u.logger.Warn("refreshing upstream tools failed", zap.Error(err))
					}
				}()
			}
		},
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
		c.Transport = headerTransport{base: base, headers: u.cfg.Headers}
		hc = c
		t = &mcp.StreamableClientTransport{Endpoint: u.cfg.URL, HTTPClient: hc}
	} else {
		cmd := exec.Command(u.cfg.Command, u.cfg.Args...)
		if len(u.cfg.Env) > 0 {
			cmd.Env = append(cmd.Environ(), u.cfg.Env...)
		}
		t = &mcp.CommandTransport{Command: cmd}
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// The go-sdk client asks for the newest revision (2026-07-28:
	// server/discover, then stateless requests) and falls back to the
	// initialize handshake of the newest older revision the server offers.
	cs, err := client.Connect(cctx, t, nil)
	if err != nil {
		return nil, fmt.Errorf("connecting to upstream %q: %w", u.cfg.Name, err)
	}
	version := ""
	if ir := cs.InitializeResult(); ir != nil {
		version = ir.ProtocolVersion
	}
	u.logger.Info("connected to upstream MCP server", zap.String("protocol_version", version))
	u.mu.Lock()
	u.session = cs
	u.version = version
	u.mu.Unlock()
	return cs, nil
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
	u.mu.Lock()
	cs := u.session
	u.mu.Unlock()
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
	callCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res, err := cs.CallTool(callCtx, params)
	if err != nil {
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
		return &Error{Code: CodeToolExecutionError, Message: fmt.Sprintf("upstream %q refused %s: %s", u.cfg.Name, name, clip(we.Message, 1024))}
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
	var texts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			texts = append(texts, tc.Text)
		}
	}
	text := strings.Join(texts, "\n")
	if res.IsError {
		if text == "" {
			text = "tool reported an error"
		}
		return nil, &Error{Code: CodeToolExecutionError, Message: text, Transient: true}
	}
	if res.StructuredContent != nil {
		return json.Marshal(res.StructuredContent)
	}
	if len(texts) == 1 && json.Valid([]byte(text)) {
		return json.RawMessage(text), nil
	}
	if len(texts) == 0 && len(res.Content) > 0 {
		return json.Marshal(res.Content)
	}
	return json.Marshal(text)
}
