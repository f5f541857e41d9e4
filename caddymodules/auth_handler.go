package caddymodules

import (
	"errors"
	"net/http"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

func init() {
	caddy.RegisterModule(AuthHandler{})
}

// AuthHandler protects a route with bearer tokens (module
// http.handlers.codemode_auth; the codemode_auth directive). It validates
// tokens like the codemode_bearer provider and sets the same
// {http.auth.user.*} placeholders, and answers refusals the way MCP clients
// expect: 401 with the RFC 9728 challenge (and the route's scopes) when
// there is no valid token, 403 with error="insufficient_scope" and the
// scopes to ask for when a valid token lacks one, so that a client can
// step up. Caddy's authentication handler with the codemode_bearer
// provider answers 401 for both.
type AuthHandler struct {
	BearerAuth
}

// CaddyModule returns the Caddy module information.
func (AuthHandler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.codemode_auth",
		New: func() caddy.Module { return new(AuthHandler) },
	}
}

// Provision sets up the embedded provider.
func (h *AuthHandler) Provision(ctx caddy.Context) error {
	return h.BearerAuth.Provision(ctx)
}

// ServeHTTP implements caddyhttp.MiddlewareHandler.
func (h *AuthHandler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	user, status, err := h.check(w, r)
	switch {
	case err != nil:
		return caddyhttp.Error(http.StatusUnauthorized, err)
	case status == http.StatusForbidden:
		return caddyhttp.Error(status, errors.New("insufficient scope"))
	case status != 0:
		return caddyhttp.Error(status, errors.New("not authenticated"))
	}
	repl := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	repl.Set("http.auth.user.id", user.ID)
	for k, v := range user.Metadata {
		repl.Set("http.auth.user."+k, v)
	}
	return next.ServeHTTP(w, r)
}

// Interface guards
var (
	_ caddy.Provisioner           = (*AuthHandler)(nil)
	_ caddyhttp.MiddlewareHandler = (*AuthHandler)(nil)
)
