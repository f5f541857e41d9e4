package caddymodules

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/codemode-gateway/caddy-codemode/guard"
)

func init() {
	caddy.RegisterModule(ConnectionsHandler{})
}

// ConnectionsHandler (http.handlers.codemode_connections) serves the
// connections pages below the path of the app's credentials connect_url
// (default /connections): a signed-in user connects the sources that take
// user credentials (OAuth at the upstream, or a pasted API key), sees them
// and disconnects them. Every other request goes to the next handler.
//
// The pages are rate limited with the authorization endpoints' limiter
// (auth.token_rate_limit); they need no bearer token (the browser signs in
// on the page itself), so the directive is ordered before authentication.
type ConnectionsHandler struct {
	app    *App
	prefix string
	logger *zap.Logger
}

// CaddyModule returns the Caddy module information.
func (ConnectionsHandler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.codemode_connections",
		New: func() caddy.Module { return new(ConnectionsHandler) },
	}
}

// Provision finds the app's credential manager and enforces the HTTPS rule.
func (h *ConnectionsHandler) Provision(ctx caddy.Context) error {
	h.logger = ctx.Logger()
	app, err := authApp(ctx)
	if err != nil {
		return fmt.Errorf("codemode_connections: %w", err)
	}
	if app.CredentialManager() == nil {
		return fmt.Errorf("codemode_connections: no source takes user credentials (give an openapi source or upstream `credential user { ... }`)")
	}
	if err := checkTransport(ctx, app.auth.cfg); err != nil {
		return fmt.Errorf("codemode_connections: %w", err)
	}
	h.app = app
	u, _ := url.Parse(app.CredentialManager().ConnectURL(""))
	h.prefix = strings.TrimSuffix(u.Path, "/")
	return nil
}

// ServeHTTP implements caddyhttp.MiddlewareHandler.
func (h *ConnectionsHandler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	if !h.serves(r.URL.Path) {
		// Under handle_path or uri strip_prefix the request's path has
		// lost the prefix that connect_url, and so the browser, has: the
		// page's URLs are the ones it sent.
		orig, ok := r.Context().Value(caddyhttp.OriginalRequestCtxKey).(http.Request)
		if !ok || orig.URL == nil || !h.serves(orig.URL.Path) {
			return next.ServeHTTP(w, r)
		}
		r = r.Clone(r.Context())
		r.URL.Path, r.URL.RawPath = orig.URL.Path, orig.URL.RawPath
	}
	r = withRequestID(w, r)
	sh := h.app.auth.shared
	res, err := sh.limiter.CheckRateLimit(r.Context(), "connections", h.app.auth.tokenLimit, guard.PartitionKeyContext{ClientIP: h.app.clientKey(remoteHost(r))})
	if err != nil {
		h.logger.Error("connections page rate limit check failed", zap.Error(err))
	} else if !res.Allowed {
		h.app.auth.metrics.rateLimited.Inc()
		secs := max((res.RetryAfterMs+999)/1000, 1)
		w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
		http.Error(w, fmt.Sprintf("too many requests; retry in %d s", secs), http.StatusTooManyRequests)
		return nil
	}
	h.app.CredentialManager().Handler().ServeHTTP(w, r)
	return nil
}

// serves reports whether path is one of the pages, below connect_url's path.
func (h *ConnectionsHandler) serves(path string) bool {
	return path == h.prefix || strings.HasPrefix(path, h.prefix+"/")
}

// Interface guards
var (
	_ caddy.Provisioner           = (*ConnectionsHandler)(nil)
	_ caddyhttp.MiddlewareHandler = (*ConnectionsHandler)(nil)
)
