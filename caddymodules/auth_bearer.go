package caddymodules

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/caddyauth"
	"go.uber.org/zap"

	"github.com/codemode-gateway/caddy-codemode/internal/identity"
	"github.com/codemode-gateway/caddy-codemode/oauth"
)

func init() {
	caddy.RegisterModule(BearerAuth{})
}

// AuthVarKey is the request variable (caddyhttp.GetVar) holding the
// *oauth.VerifiedToken of an authenticated request, for handlers (the
// broker) that need more than the placeholders.
const AuthVarKey = "codemode.auth"

// AuthenticatedToken returns the token the codemode_bearer provider
// accepted for r, if any. Anonymous requests (allow_default_public) have
// none.
func AuthenticatedToken(r *http.Request) (*oauth.VerifiedToken, bool) {
	t, ok := caddyhttp.GetVar(r.Context(), AuthVarKey).(*oauth.VerifiedToken)
	return t, ok && t != nil
}

// withIdentity puts the user the bearer provider accepted for r into r's
// context (package internal/identity), where tool sources that act as the
// user upstream read it. A token without a subject (a machine client) and
// an anonymous request carry no identity.
func withIdentity(r *http.Request) *http.Request {
	t, ok := AuthenticatedToken(r)
	if !ok || t.Subject == "" {
		return r
	}
	return r.WithContext(identity.With(r.Context(), &identity.Identity{Issuer: t.Issuer, Subject: t.Subject,
		ClientID: t.ClientID, TenantID: t.TenantID, SessionID: t.SessionID}))
}

// BearerAuth is an authentication provider for Caddy's `authentication`
// handler (module http.authentication.providers.codemode_bearer). It
// validates `Authorization: Bearer` access tokens issued by the codemode
// app's authorization server (orchestrated mode) or by the external
// identity provider (transparent mode), and sets the placeholders
//
//	{http.auth.user.id}          the token's subject (else its client id)
//	{http.auth.user.scopes}      granted scopes, space-separated
//	{http.auth.user.client_id}   the OAuth client
//	{http.auth.user.tenant_id}   tenant_id/tid claim, when present
//	{http.auth.user.issuer}      the issuer
//	{http.auth.user.expires_at}  exp, Unix seconds
//	{http.auth.user.anonymous}   "true" for anonymous access
//
// A refused request gets `WWW-Authenticate: Bearer resource_metadata="..."`
// (RFC 9728), with error="invalid_token" when a token was sent, and 401,
// or 403 with error="insufficient_scope" for a valid token without a
// required scope (see Authenticate). Requires the codemode app's `auth` block.
type BearerAuth struct {
	// Resource is the protected resource's canonical URL: its RFC 9728
	// metadata URL goes into the WWW-Authenticate header, and in
	// orchestrated mode tokens must carry it as audience (RFC 8707).
	// Default: the app's auth resource.
	Resource string `json:"resource,omitempty"`

	// Audience overrides the audience tokens must carry. Default: the
	// expected audience in transparent mode, Resource in orchestrated mode.
	Audience string `json:"audience,omitempty"`

	// Scopes a token must all hold; a token lacking one is refused with
	// error="insufficient_scope". Default none.
	Scopes []string `json:"scopes,omitempty"`

	app         *App
	audience    string
	metadataURL string
	logger      *zap.Logger
}

// CaddyModule returns the Caddy module information.
func (BearerAuth) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.authentication.providers.codemode_bearer",
		New: func() caddy.Module { return new(BearerAuth) },
	}
}

// Provision sets the provider up (provision) and warns when the server's
// handle_errors routes will see a token without a required scope as 401:
// Caddy's authentication handler hands every refusal to them as 401, so
// only an error route matching the code answers it 403 (docs/auth.md).
func (b *BearerAuth) Provision(ctx caddy.Context) error {
	if err := b.provision(ctx); err != nil {
		return err
	}
	if srv, ok := ctx.Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server); ok && srv != nil &&
		srv.Errors != nil && len(srv.Errors.Routes) > 0 && len(b.Scopes) > 0 {
		b.logger.Warn("codemode_bearer in Caddy's authentication handler: the server's handle_errors routes get a token without a required scope as a 401 error; "+
			"answer it 403 with an error route matching vars codemode_auth_code INSUFFICIENT_SCOPE, or use the codemode_auth handler, which does (docs/auth.md)",
			zap.Strings("scopes", b.Scopes))
	}
	return nil
}

// provision finds the codemode app and refuses to serve bearer
// authentication over plain HTTP outside development on loopback.
func (b *BearerAuth) provision(ctx caddy.Context) error {
	b.logger = ctx.Logger()
	app, err := authApp(ctx)
	if err != nil {
		return fmt.Errorf("codemode_bearer: %w", err)
	}
	b.app = app
	if err := checkTransport(ctx, app.auth.cfg); err != nil {
		return fmt.Errorf("codemode_bearer: %w", err)
	}
	// Placeholders such as {env.PUBLIC_URL}, as in the auth block.
	repl := caddy.NewReplacer()
	resource := repl.ReplaceKnown(b.Resource, "")
	if resource == "" {
		resource = app.auth.resource
	}
	if resource != "" {
		if err := (&oauth.ResourceMetadata{Resource: resource}).Validate(); err != nil {
			return fmt.Errorf("codemode_bearer: %w", err)
		}
		b.metadataURL = oauth.MetadataURL(resource)
	}
	b.audience = repl.ReplaceKnown(b.Audience, "")
	if b.audience == "" {
		if app.auth.cfg.Mode == AuthModeTransparent {
			b.audience = app.auth.cfg.ExpectedAudience
		} else {
			b.audience = resource
		}
	}
	if b.audience == "" {
		return errors.New("codemode_bearer: no audience: set resource or audience")
	}
	// Our authorization server issues tokens for what its routes protect.
	if app.auth.cfg.Mode == AuthModeOrchestrated {
		// A scope the server does not offer is in no token: every request
		// would get 403, and the client's sign-in for it invalid_scope.
		if srv := app.auth.shared.server; srv != nil {
			offered := srv.Metadata(false).ScopesSupported
			for _, sc := range b.Scopes {
				if !slices.Contains(offered, sc) {
					return fmt.Errorf("codemode_bearer: scope %q is not offered by the authorization server (auth scopes: %s), so no token can hold it: add it to the auth block's scopes", sc, strings.Join(resourceScopes(offered), " "))
				}
			}
		}
		for _, r := range []struct{ what, v string }{{"resource", resource}, {"audience", b.audience}} {
			if err := app.auth.served.declare(r.what, r.v); err != nil {
				return fmt.Errorf("codemode_bearer: %w", err)
			}
		}
	}
	return nil
}

// Authenticate implements caddyauth.Authenticator. A refusal gets
// codemode_auth's status, WWW-Authenticate challenge and JSON body
// {"error":{"code","message"}} with the same codes, and the same CORS
// header fields for a browser page (exposeChallenge), written here: Caddy's
// handler answers with 401 and no body. A valid token without a required
// scope thus gets 403 insufficient_scope (MCP's scope challenge), since
// the status written first is the one sent. Where Caddy's handler keeps
// the answer from the client it stays 401: with handle_errors routes on the
// server (the body and status are theirs, the code in
// {http.vars.codemode_auth_code}) and with more than one provider (only
// a challenge's headers are sent).
func (b *BearerAuth) Authenticate(w http.ResponseWriter, r *http.Request) (caddyauth.User, bool, error) {
	u, status, err := b.check(w, r)
	if status != 0 || err != nil {
		exposeChallenge(w, r)
		code, msg := refusal(status, err)
		caddyhttp.SetVar(r.Context(), "codemode_auth_code", code)
		if !hasErrorRoutes(r) {
			writeErrorBody(w, max(status, http.StatusUnauthorized), code, msg)
		}
	}
	return u, status == 0 && err == nil, err
}

// check validates the request's bearer token. status is 0 when the request
// may pass, else 401 (no, bad or unverifiable token) or 403 (a valid token
// without a required scope); the WWW-Authenticate challenge is set either
// way. err is a server-side failure (key set or token storage down), not a
// bad token.
func (b *BearerAuth) check(w http.ResponseWriter, r *http.Request) (caddyauth.User, int, error) {
	token := oauth.BearerToken(r)
	st := &b.app.auth
	if token == "" && st.cfg.AllowDefaultPublic {
		return caddyauth.User{ID: "anonymous", Metadata: map[string]string{"anonymous": "true"}}, 0, nil
	}
	// The scopes named in a 401 are the route's (MCP's scope selection
	// strategy: a client asks for what the challenge names first).
	required := strings.Join(resourceScopes(b.Scopes), " ")
	vt, err := st.shared.verify(r.Context(), token, b.audience)
	if err != nil {
		reason := oauth.TokenReason(err)
		switch {
		case reason != "":
		case oauth.ErrorCode(err) == oauth.CodeIssuerMismatch:
			// The provider's discovery documents all name another issuer:
			// a misconfiguration to fix, not an outage that passes.
			reason = reasonIssuerMismatch
		default:
			reason = reasonUnavailable
		}
		st.metrics.failures.WithLabelValues(reason).Inc()
		if oauth.TokenReason(err) == "" {
			// A server-side failure (key set or token storage down, an
			// untrusted provider), not a bad token: no error attribute, and
			// the caller logs err.
			w.Header().Set("WWW-Authenticate", oauth.BearerChallenge(b.metadataURL, nil, required))
			return caddyauth.User{}, http.StatusUnauthorized, err
		}
		w.Header().Set("WWW-Authenticate", oauth.BearerChallenge(b.metadataURL, err, required))
		if c := b.logger.Check(zap.DebugLevel, "bearer token refused"); c != nil {
			c.Write(zap.String("reason", reason), zap.String("remote", remoteHost(r)))
		}
		return caddyauth.User{}, http.StatusUnauthorized, nil
	}
	var missing []string
	for _, s := range b.Scopes {
		if !vt.HasScope(s) {
			missing = append(missing, s)
		}
	}
	if len(missing) > 0 {
		st.metrics.failures.WithLabelValues(reasonInsufficientScope).Inc()
		w.Header().Set("WWW-Authenticate", insufficientScope(b.metadataURL, vt.Scopes, b.Scopes, missing))
		return caddyauth.User{ID: vt.Subject}, http.StatusForbidden, nil
	}
	caddyhttp.SetVar(r.Context(), AuthVarKey, vt)
	id := vt.Subject
	if id == "" {
		id = vt.ClientID
	}
	md := map[string]string{
		"scopes":    strings.Join(vt.Scopes, " "),
		"client_id": vt.ClientID,
		"issuer":    vt.Issuer,
	}
	if vt.TenantID != "" {
		md["tenant_id"] = vt.TenantID
	}
	if !vt.ExpiresAt.IsZero() {
		md["expires_at"] = strconv.FormatInt(vt.ExpiresAt.Unix(), 10)
	}
	return caddyauth.User{ID: id, Metadata: md}, 0, nil
}

// insufficientScope is the RFC 6750 section 3.1 challenge of a token that
// lacks a scope. scope names the route's scopes and the token's together,
// so a client that re-authorizes with exactly that set keeps what it had
// (MCP 2025-11-25's recommended approach; 2026-07-28 clients form the
// union themselves, which this does not disturb).
func insufficientScope(metadataURL string, granted, required, missing []string) string {
	var want []string
	for _, s := range append(slices.Clone(required), resourceScopes(granted)...) {
		if !slices.Contains(want, s) {
			want = append(want, s)
		}
	}
	v := `Bearer error="insufficient_scope", scope="` + strings.Join(resourceScopes(want), " ") +
		`", error_description="the token lacks scope ` + strings.Join(missing, " ") + `"`
	if metadataURL != "" {
		v = `Bearer resource_metadata="` + metadataURL + `", ` + strings.TrimPrefix(v, "Bearer ")
	}
	return v
}

// resourceScopes drops the scopes that say nothing about the resource:
// offline_access (MCP: a resource server does not name it in a challenge or
// its metadata; refresh tokens are not a resource requirement) and OpenID's.
func resourceScopes(scopes []string) []string {
	out := make([]string, 0, len(scopes))
	for _, s := range scopes {
		switch s {
		case "offline_access", "openid", "profile", "email":
			continue
		}
		out = append(out, s)
	}
	return out
}

func remoteHost(r *http.Request) string {
	if ip, ok := caddyhttp.GetVar(r.Context(), caddyhttp.ClientIPVarKey).(string); ok && ip != "" {
		return ip
	}
	h, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return h
}

// authApp returns the codemode app, which must have an auth block.
func authApp(ctx caddy.Context) (*App, error) {
	v, err := ctx.App("codemode")
	if err != nil {
		return nil, fmt.Errorf("loading the codemode app: %w", err)
	}
	app := v.(*App)
	if app.auth.shared == nil {
		return nil, errors.New("the codemode app has no auth configuration (add `auth { ... }` to the codemode global option)")
	}
	return app, nil
}

// checkTransport enforces production rule 1 at load: authentication is
// never served over plain HTTP, except in development mode when every
// listener of the server is on loopback, or behind a declared TLS proxy.
func checkTransport(ctx caddy.Context, cfg *AuthConfig) error {
	srv, ok := ctx.Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server)
	if !ok || srv == nil {
		return nil // not inside an HTTP server (e.g. a unit test)
	}
	if len(srv.TLSConnPolicies) > 0 {
		return nil
	}
	if cfg.BehindTLSProxy {
		return nil
	}
	loopback := len(srv.Listen) > 0
	for _, l := range srv.Listen {
		if !isLoopbackListener(l) {
			loopback = false
			break
		}
	}
	if cfg.Development && loopback {
		return nil
	}
	if !cfg.Development {
		return fmt.Errorf("production rule 1: authentication over plain HTTP (listeners %v) is refused; serve the site over HTTPS (Caddy's automatic HTTPS does it), or set auth development mode and bind to loopback", srv.Listen)
	}
	return fmt.Errorf("production rule 1: plain HTTP is allowed only on loopback listeners in development mode, got %v (use `bind 127.0.0.1`)", srv.Listen)
}

func isLoopbackListener(addr string) bool {
	na, err := caddy.ParseNetworkAddress(addr)
	if err != nil {
		return false
	}
	if na.IsUnixNetwork() {
		return true
	}
	host := na.Host
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// Interface guards
var (
	_ caddy.Provisioner       = (*BearerAuth)(nil)
	_ caddyauth.Authenticator = (*BearerAuth)(nil)
)
