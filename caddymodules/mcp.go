package caddymodules

import (
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func init() {
	caddy.RegisterModule(MCPHandler{})
}

// MCPHandler serves the meta-tools (meta:search, meta:describe, meta:execute,
// meta:invoke) of the codemode app over MCP Streamable HTTP. It is a
// terminal handler: it answers every request it gets (POST for messages, GET
// for the server-to-client stream, DELETE to end a session).
type MCPHandler struct {
	// Stateless serves each request without a session (no Mcp-Session-Id,
	// no server-to-client requests). Default false.
	Stateless bool `json:"stateless,omitempty"`
	// JSONResponse answers POSTs with application/json instead of an SSE
	// stream. Default false.
	JSONResponse bool `json:"json_response,omitempty"`
	// SessionTimeout closes sessions idle for this long. Default 30m; a
	// negative value keeps idle sessions forever.
	SessionTimeout caddy.Duration `json:"session_timeout,omitempty"`
	// DisableLocalhostProtection turns off the go-sdk's DNS-rebinding
	// protection, which answers 403 to a request that reaches a loopback
	// address with a non-loopback Host header. Needed only behind another
	// proxy on the same machine that keeps the public Host. Default false.
	DisableLocalhostProtection bool `json:"disable_localhost_protection,omitempty"`

	app     *App
	handler http.Handler
}

// CaddyModule returns the Caddy module information.
func (MCPHandler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.codemode_mcp",
		New: func() caddy.Module { return new(MCPHandler) },
	}
}

// Provision finds the codemode app and builds the Streamable HTTP handler.
func (h *MCPHandler) Provision(ctx caddy.Context) error {
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
	h.handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return app.MetaServer() },
		&mcp.StreamableHTTPOptions{Stateless: h.Stateless, JSONResponse: h.JSONResponse, SessionTimeout: timeout,
			DisableLocalhostProtection: h.DisableLocalhostProtection})
	return nil
}

// ServeHTTP hands the request to the MCP handler. The client address and
// the user authenticated by an earlier handler ({http.auth.user.id}) reach
// the meta-tools (rate-limit partitions, broker calls) in headers that only
// this handler sets.
func (h *MCPHandler) ServeHTTP(w http.ResponseWriter, r *http.Request, _ caddyhttp.Handler) error {
	r.Header.Del(clientIPHeader)
	r.Header.Del(userIDHeader)
	if repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer); ok {
		if uid, _ := repl.GetString("http.auth.user.id"); uid != "" {
			r.Header.Set(userIDHeader, uid)
		}
	}
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		r.Header.Set(clientIPHeader, host)
	}
	if ip, ok := caddyhttp.GetVar(r.Context(), caddyhttp.ClientIPVarKey).(string); ok && ip != "" {
		r.Header.Set(clientIPHeader, ip)
	}
	h.handler.ServeHTTP(w, r)
	return nil
}

// Interface guards
var (
	_ caddy.Provisioner           = (*MCPHandler)(nil)
	_ caddyhttp.MiddlewareHandler = (*MCPHandler)(nil)
)
