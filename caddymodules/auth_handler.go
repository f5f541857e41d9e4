package caddymodules

import (
	"errors"
	"net/http"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/codemode-gateway/caddy-codemode/broker"
	"github.com/codemode-gateway/caddy-codemode/oauth"
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
// provider answers the same, except with handle_errors routes or other
// providers beside it, where it answers 401 for both.
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
	return h.BearerAuth.provision(ctx)
}

// ServeHTTP implements caddyhttp.MiddlewareHandler.
//
// A browser's CORS preflight carries no credentials, by the Fetch
// standard: on a route that needs a token it is answered here (the methods
// and header fields asked for) and never reaches the next handler
// unauthenticated; the request that follows needs its token as any other
// (a page of another site has none: bearer tokens are not sent by the
// browser on its own, as cookies are), and the next handler's own origin
// rule still decides whether the page may read the answer. With
// allow_default_public the route serves anonymous requests, and a
// preflight is one: it goes to the next handler, whose CORS answer decides
// (answering it here would let any site's page send a JSON or DELETE
// request there, which the preflight exists to stop). A refusal names
// the page's origin and exposes WWW-Authenticate (exposeChallenge).
func (h *AuthHandler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	if r.Method == http.MethodOptions && r.Header.Get("Origin") != "" && r.Header.Get("Access-Control-Request-Method") != "" &&
		!h.app.auth.cfg.AllowDefaultPublic {
		broker.AnswerCORS(w, r, r.Header.Get("Access-Control-Request-Method"), "")
		return nil
	}
	user, status, err := h.check(w, r)
	if status != 0 || err != nil {
		exposeChallenge(w, r)
		code, msg := refusal(status, err)
		return h.refuse(w, r, max(status, http.StatusUnauthorized), code, msg, err)
	}
	repl := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	repl.Set("http.auth.user.id", user.ID)
	for k, v := range user.Metadata {
		repl.Set("http.auth.user."+k, v)
	}
	return next.ServeHTTP(w, r)
}

// exposeChallenge lets the page of a browser request (one with Origin)
// read a refusal of codemode_auth or codemode_bearer: it names the page's
// origin and exposes WWW-Authenticate, public as the metadata it points
// to, so that a browser-based MCP client finds the resource metadata and
// the scopes to step up to; without it the browser hides the 401 or 403
// and the client sees a network error. No credentials are allowed.
func exposeChallenge(w http.ResponseWriter, r *http.Request) {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return
	}
	w.Header().Set("Access-Control-Allow-Origin", origin)
	w.Header().Add("Vary", "Origin")
	w.Header().Set("Access-Control-Expose-Headers", "WWW-Authenticate")
}

// refusal is the code and message of the body of a refused request,
// status and err as check returned them, of codemode_auth and
// codemode_bearer alike.
func refusal(status int, err error) (code, msg string) {
	switch {
	case oauth.ErrorCode(err) == oauth.CodeIssuerMismatch:
		// The provider's discovery documents name another issuer: not the
		// token's fault and not a passing outage, so the caller and the
		// operator read a code of their own.
		return oauth.CodeIssuerMismatch, "the token could not be verified: no discovery document of the identity provider names its issuer"
	case err != nil:
		return broker.CodeUnauthorized, "the token could not be verified now"
	case status == http.StatusForbidden:
		return CodeInsufficientScope, "the token lacks a scope this route needs (WWW-Authenticate names the scopes to ask for)"
	}
	return broker.CodeUnauthorized, "a valid bearer token is required (WWW-Authenticate names the resource metadata)"
}

// CodeInsufficientScope is the code of a 403 of codemode_auth: a valid
// token without a scope the route requires.
const CodeInsufficientScope = "INSUFFICIENT_SCOPE"

// refuse answers a request the handler does not let through, as the
// guard does: with handle_errors routes on the server it returns a
// caddyhttp.Error for them (the code in {http.vars.codemode_auth_code}),
// else it writes the JSON body {"error":{"code","message"}}, so that a
// client without OAuth support (or a person with curl) reads why; the
// status and WWW-Authenticate challenge are the same either way. cause is
// a server-side failure, logged.
func (h *AuthHandler) refuse(w http.ResponseWriter, r *http.Request, status int, code, msg string, cause error) error {
	caddyhttp.SetVar(r.Context(), "codemode_auth_code", code)
	if hasErrorRoutes(r) {
		if cause == nil {
			cause = errors.New(msg)
		}
		return caddyhttp.Error(status, cause)
	}
	if cause != nil {
		h.logger.Error("bearer token could not be verified", zap.String("remote", remoteHost(r)), zap.Error(cause))
	}
	writeErrorBody(w, status, code, msg)
	return nil
}

// Interface guards
var (
	_ caddy.Provisioner           = (*AuthHandler)(nil)
	_ caddyhttp.MiddlewareHandler = (*AuthHandler)(nil)
)
