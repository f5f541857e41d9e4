package caddymodules

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/codemode-gateway/caddy-codemode/guard"
	"github.com/codemode-gateway/caddy-codemode/oauth"
)

func init() {
	caddy.RegisterModule(OAuthHandler{})
}

// OAuthHandler (http.handlers.codemode_oauth) serves the codemode app's
// authentication endpoints and passes every other request on:
//
//   - /.well-known/oauth-protected-resource[/<path>]: RFC 9728 metadata of
//     the protected resources (both modes);
//   - in orchestrated mode, the authorization server: /oauth/authorize,
//     /oauth/token, /oauth/register (when dcr_enabled), /oauth/revoke, the
//     login and consent pages under /oauth/, /.well-known/jwks.json,
//     /.well-known/oauth-authorization-server and
//     /.well-known/openid-configuration.
//
// The token, registration, revocation, login and consent endpoints are
// rate limited with the guard library (auth.token_rate_limit); a refused
// request gets 429 with Retry-After and an RFC 6749 JSON error body.
type OAuthHandler struct {
	// Resources are the protected resources whose metadata is served.
	// Default: the app's auth resource.
	Resources []string `json:"resources,omitempty"`

	// ScopesSupported is the scopes_supported of the resource metadata.
	// Default: the app's auth scopes (orchestrated mode).
	ScopesSupported []string `json:"scopes_supported,omitempty"`

	app      *App
	metadata http.Handler
	served   *servedResources // orchestrated mode
	logger   *zap.Logger
}

// CaddyModule returns the Caddy module information.
func (OAuthHandler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.codemode_oauth",
		New: func() caddy.Module { return new(OAuthHandler) },
	}
}

// Provision finds the app, enforces the HTTPS rule and builds the
// metadata documents.
func (h *OAuthHandler) Provision(ctx caddy.Context) error {
	h.logger = ctx.Logger()
	app, err := authApp(ctx)
	if err != nil {
		return fmt.Errorf("codemode_oauth: %w", err)
	}
	h.app = app
	if err := checkTransport(ctx, app.auth.cfg); err != nil {
		return fmt.Errorf("codemode_oauth: %w", err)
	}
	repl := caddy.NewReplacer()
	var resources []string
	for _, r := range h.Resources {
		resources = append(resources, repl.ReplaceKnown(r, ""))
	}
	if len(resources) == 0 && app.auth.resource != "" {
		resources = []string{app.auth.resource}
	}
	scopes := h.ScopesSupported
	if len(scopes) == 0 {
		scopes = app.auth.cfg.Scopes
		if len(scopes) == 0 && app.auth.cfg.Mode == AuthModeOrchestrated {
			scopes = []string{"mcp"} // oauth.ServerConfig's default
		}
	}
	// MCP: a resource server does not list offline_access (nor OpenID's
	// scopes): refresh tokens are not a resource requirement.
	scopes = resourceScopes(scopes)
	var docs []oauth.ResourceMetadata
	for _, r := range resources {
		m := oauth.ResourceMetadata{Resource: r, AuthorizationServers: []string{app.auth.shared.issuer}, ScopesSupported: scopes}
		if err := m.Validate(); err != nil {
			return fmt.Errorf("codemode_oauth: %w", err)
		}
		// A document naming our issuer for a resource it would issue no
		// token for sends clients into invalid_target.
		if err := app.auth.served.declare("resource", r); err != nil {
			return fmt.Errorf("codemode_oauth: %w", err)
		}
		docs = append(docs, m)
	}
	// The requests it must see as sent: every resource's metadata (at the
	// resource's host) and, in orchestrated mode, the authorization
	// server's (at the issuer's).
	var paths []placedRequest
	for _, r := range resources {
		if u, err := url.Parse(oauth.MetadataURL(r)); err == nil {
			paths = append(paths, placedRequest{host: u.Host, path: u.Path})
		}
	}
	issuerHost := ""
	if u, err := url.Parse(app.auth.shared.issuer); err == nil {
		issuerHost = u.Host
	}
	if len(paths) == 0 {
		paths = append(paths, placedRequest{host: issuerHost, path: oauth.ProtectedResourcePath})
	}
	if app.auth.shared.handler != nil {
		for _, p := range []string{"/.well-known/oauth-authorization-server", "/.well-known/jwks.json", "/oauth/authorize", "/oauth/token"} {
			paths = append(paths, placedRequest{host: issuerHost, path: p})
		}
	}
	// Behind a TLS proxy the Host may be rewritten (nginx sends the
	// upstream's name unless told otherwise): a route for another host is
	// then only a warning.
	if err := checkOAuthPlacement(ctx, paths, true); err != nil {
		if !app.auth.cfg.BehindTLSProxy || checkOAuthPlacement(ctx, paths, false) != nil {
			return fmt.Errorf("codemode_oauth: %w", err)
		}
		h.logger.Warn("codemode_oauth: behind_tls_proxy is set, so the load goes on; unless the proxy sends a Host its route matches, "+
			"the authorization server's endpoints and the resource metadata answer 404", zap.Error(err))
	}
	h.served = app.auth.served
	h.metadata = oauth.MetadataHandler(docs...)
	return nil
}

// rateLimitedPaths are the endpoints of production rule 9, and the
// authorization endpoint, whose every request stores a pending
// authorization for ten minutes. The value says whether GET counts too
// (the login and consent pages are read freely; their POSTs count).
var rateLimitedPaths = map[string]bool{
	"/oauth/token": true, "/oauth/register": true, "/oauth/revoke": true, "/oauth/authorize": true,
	"/oauth/login": false, "/oauth/consent": false,
}

// ServeHTTP implements caddyhttp.MiddlewareHandler.
func (h *OAuthHandler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	p := r.URL.Path
	if p == oauth.ProtectedResourcePath || strings.HasPrefix(p, oauth.ProtectedResourcePath+"/") {
		h.metadata.ServeHTTP(w, r)
		return nil
	}
	sh := h.app.auth.shared
	if sh.handler == nil || !(strings.HasPrefix(p, "/oauth/") || p == "/.well-known/jwks.json" ||
		p == "/.well-known/oauth-authorization-server" || p == "/.well-known/openid-configuration") {
		return next.ServeHTTP(w, r)
	}
	r = withRequestID(w, r)
	if !oauthRequestAcceptable(w, r) {
		return nil
	}
	if withGet, limited := rateLimitedPaths[p]; limited && r.Method != http.MethodOptions && (r.Method != http.MethodGet || withGet) {
		res, err := sh.limiter.CheckRateLimit(r.Context(), "oauth_endpoints", h.app.auth.tokenLimit,
			guard.PartitionKeyContext{ClientIP: h.app.clientKey(remoteHost(r))})
		if err != nil {
			h.logger.Error("token endpoint rate limit check failed", zap.Error(err))
		} else if !res.Allowed {
			h.app.auth.metrics.rateLimited.Inc()
			secs := (res.RetryAfterMs + 999) / 1000
			if secs < 1 {
				secs = 1
			}
			w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Cache-Control", "no-store")
			w.WriteHeader(http.StatusTooManyRequests)
			_ = json.NewEncoder(w).Encode(map[string]string{
				"error":             "temporarily_unavailable",
				"error_description": fmt.Sprintf("too many requests; retry in %d s", secs),
			})
			return nil
		}
	}
	as := h.served.serving(sh.server, h.app.auth.logger)
	if p != "/oauth/token" {
		as.ServeHTTP(w, r)
		return nil
	}
	grant := peekGrantType(r)
	start := time.Now()
	rec := &statusRecorder{ResponseWriterWrapper: &caddyhttp.ResponseWriterWrapper{ResponseWriter: w}}
	as.ServeHTTP(rec, r)
	h.app.auth.metrics.tokenLatency.WithLabelValues(grant, statusClass(rec.status)).Observe(time.Since(start).Seconds())
	return nil
}

// peekGrantType reads grant_type from a form body without consuming it.
func peekGrantType(r *http.Request) string {
	if r.Body == nil || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
		return "unknown"
	}
	buf, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(buf), r.Body), r.Body}
	if err != nil {
		return "unknown"
	}
	for _, kv := range strings.Split(string(buf), "&") {
		if g, ok := strings.CutPrefix(kv, "grant_type="); ok {
			switch g {
			case "authorization_code", "refresh_token":
				return g
			}
			return "other"
		}
	}
	return "unknown"
}

type statusRecorder struct {
	*caddyhttp.ResponseWriterWrapper
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriterWrapper.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriterWrapper.Write(b)
}

func statusClass(code int) string {
	if code == 0 {
		code = http.StatusOK
	}
	return strconv.Itoa(code/100) + "xx"
}

// Interface guards
var (
	_ caddy.Provisioner           = (*OAuthHandler)(nil)
	_ caddyhttp.MiddlewareHandler = (*OAuthHandler)(nil)
)
