package caddymodules

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/codemode-gateway/caddy-codemode/broker"
)

func init() {
	caddy.RegisterModule(BrokerHandler{})
}

// BrokerHandler serves the broker's HTTP interface (POST /execute,
// GET /sessions/{id}, POST /sessions/{id}/tool-result, GET /health,
// GET /code/actions) for the broker of the codemode app. It is terminal.
//
// Routes are matched against the request path as the handler sees it:
// mount it under a prefix with `handle_path /broker/*` (which strips the
// prefix) or set Prefix. A user authenticated by a Caddy authentication
// handler ({http.auth.user.id}, and {http.auth.user.tenant_id} when set) is
// accepted as the session owner without checking the broker's own
// credentials.
type BrokerHandler struct {
	// Prefix is stripped from the request path before routing, for mounting
	// under `handle /broker/*`; a request outside it goes on to the next
	// handler of the route, so the directive can sit in a site with other
	// routes. Default none: every request reaching the handler is the
	// broker's (unknown paths get its 404).
	Prefix string `json:"prefix,omitempty"`

	// RateLimit limits requests to every endpoint but /health. Unset means
	// no request rate limit (tool calls are still throttled).
	RateLimit *BrokerRateLimit `json:"rate_limit,omitempty"`

	// Limits lower the broker's ceilings for requests on this route; a
	// request may lower them further, never raise them. Default: the
	// broker's.
	Limits *BrokerRouteLimits `json:"limits,omitempty"`
	// AllowedOrigins are the browser origins (scheme://host[:port], or "*")
	// besides the route's own whose requests are served; a request with
	// another Origin header gets 403 ORIGIN_NOT_ALLOWED, so a web page the
	// user visits cannot run code on the gateway. Default: only the route's
	// own origin and requests without Origin (clients that are not
	// browsers).
	AllowedOrigins []string `json:"allowed_origins,omitempty"`

	h http.Handler
}

// BrokerRouteLimits are the ceilings of one route; unset fields keep the
// broker's (and the sandbox's, for max_steps).
type BrokerRouteLimits struct {
	// Timeout is the most an execution may take, waits included.
	Timeout caddy.Duration `json:"timeout,omitempty"`
	// MaxToolCalls is the most tool calls of an execution.
	MaxToolCalls int `json:"max_tool_calls,omitempty"`
	// MaxSteps is the most loop iterations and function calls.
	MaxSteps int64 `json:"max_steps,omitempty"`
}

// BrokerRateLimit is a sliding-window request limit per key, counted by the
// codemode guard (shared through Redis when throttle uses Redis).
type BrokerRateLimit struct {
	// MaxRequests per window and key. Required.
	MaxRequests int64 `json:"max_requests"`
	// Window length. Default 1m.
	Window caddy.Duration `json:"window,omitempty"`
	// Key is a placeholder expression naming the bucket, e.g.
	// {http.request.header.X-API-Key} or {http.request.remote.host}.
	// Default: the authenticated user, else the client address.
	Key string `json:"key,omitempty"`
}

// CaddyModule returns the Caddy module information.
func (BrokerHandler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.codemode_broker",
		New: func() caddy.Module { return new(BrokerHandler) },
	}
}

// Provision finds the codemode app and its shared broker.
func (h *BrokerHandler) Provision(ctx caddy.Context) error {
	warnWriteTimeout(ctx, "codemode_broker")
	appIface, err := ctx.App("codemode")
	if err != nil {
		return fmt.Errorf("codemode_broker: loading the codemode app: %w", err)
	}
	b, err := appIface.(*App).SharedBroker()
	if err != nil {
		return fmt.Errorf("codemode_broker: %w", err)
	}
	var opts broker.HandlerOptions
	if rl := h.RateLimit; rl != nil {
		window := time.Duration(rl.Window)
		if window == 0 {
			window = time.Minute
		}
		cfg := &broker.RateLimitConfig{MaxRequests: rl.MaxRequests, WindowMs: window.Milliseconds()}
		if key := rl.Key; key != "" {
			cfg.KeyGenerator = func(r *http.Request) string {
				repl, _ := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
				if repl == nil {
					return key
				}
				return repl.ReplaceAll(key, "")
			}
		}
		opts.RateLimiting = cfg
	}
	if l := h.Limits; l != nil {
		opts.Limits = broker.RouteLimits{Timeout: time.Duration(l.Timeout), MaxToolCalls: l.MaxToolCalls, MaxSteps: l.MaxSteps}
	}
	opts.AllowedOrigins = h.AllowedOrigins
	h.h = b.HTTPHandler(&opts)
	return nil
}

// Validate checks the configuration.
func (h *BrokerHandler) Validate() error {
	if rl := h.RateLimit; rl != nil {
		if rl.MaxRequests <= 0 {
			return fmt.Errorf("codemode_broker: rate_limit: max_requests must be positive")
		}
		if rl.Window < 0 || (rl.Window > 0 && time.Duration(rl.Window) < time.Millisecond) {
			return fmt.Errorf("codemode_broker: rate_limit: window must be at least 1ms")
		}
	}
	if h.Prefix != "" && !strings.HasPrefix(h.Prefix, "/") {
		return fmt.Errorf("codemode_broker: prefix must start with /")
	}
	if err := checkOrigins(h.AllowedOrigins); err != nil {
		return fmt.Errorf("codemode_broker: %w", err)
	}
	if l := h.Limits; l != nil && (l.Timeout < 0 || l.MaxToolCalls < 0 || l.MaxSteps < 0) {
		return fmt.Errorf("codemode_broker: limits must not be negative")
	}
	return nil
}

// ServeHTTP implements caddyhttp.MiddlewareHandler. Errors are written as
// the broker's JSON bodies ({"error":{"code","message"}}) rather than
// returned, because API clients need the stable codes.
func (h *BrokerHandler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	var rest string
	if h.Prefix != "" {
		// Outside the prefix the request is not the broker's: the rest of
		// the site answers it, as with handle_path.
		var ok bool
		rest, ok = strings.CutPrefix(r.URL.Path, strings.TrimSuffix(h.Prefix, "/"))
		if !ok || (rest != "" && !strings.HasPrefix(rest, "/")) {
			return next.ServeHTTP(w, r)
		}
	}
	r = withIdentity(withRequestID(w, r))
	// Caddy's client address honours trusted_proxies: behind a load
	// balancer it is the caller's, not the balancer's.
	if ip, ok := caddyhttp.GetVar(r.Context(), caddyhttp.ClientIPVarKey).(string); ok && ip != "" {
		r = r.WithContext(broker.WithClientIP(r.Context(), ip))
	}
	if repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer); ok {
		if uid, _ := repl.GetString("http.auth.user.id"); uid != "" {
			tenant, _ := repl.GetString("http.auth.user.tenant_id")
			r = r.WithContext(broker.WithAuth(r.Context(), &broker.AuthResult{Valid: true, UserID: uid, TenantID: tenant}))
		}
	}
	if h.Prefix != "" {
		r2 := r.Clone(r.Context())
		r2.URL.Path, r2.URL.RawPath = rest, ""
		r = r2
	}
	h.h.ServeHTTP(w, r)
	return nil
}

// Interface guards
var (
	_ caddy.Provisioner           = (*BrokerHandler)(nil)
	_ caddy.Validator             = (*BrokerHandler)(nil)
	_ caddyhttp.MiddlewareHandler = (*BrokerHandler)(nil)
)

// warnWriteTimeout logs at load that the server's write timeout will cut
// the handler's streamed answers (/execute's NDJSON, MCP's SSE): Caddy
// counts it from the start of each request, a ceiling no handler can lift,
// and a stream cut by it ends without an error on either side.
func warnWriteTimeout(ctx caddy.Context, handler string) {
	srv, ok := ctx.Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server)
	if !ok || srv == nil || srv.WriteTimeout <= 0 {
		return
	}
	ctx.Logger().Warn(handler+": the server's write timeout cuts every streamed answer that lasts longer (counted from the request's start); "+
		"remove `write` from this server's `timeouts` (docs/production.md)", zap.Duration("write_timeout", time.Duration(srv.WriteTimeout)))
}

// checkOrigins refuses an allowed origin that is not scheme://host[:port]
// or "*" (a bare host would never equal a browser's Origin header).
func checkOrigins(origins []string) error {
	for _, o := range origins {
		if u, err := url.Parse(o); o != "*" && (err != nil || u.Scheme == "" || u.Host == "") {
			return fmt.Errorf("allowed_origins: want scheme://host[:port] or *, got %q", o)
		}
	}
	return nil
}
