package caddymodules

import (
	"strconv"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

func init() {
	httpcaddyfile.RegisterHandlerDirective("codemode_mcp", parseMCPCaddyfile)
	httpcaddyfile.RegisterDirectiveOrder("codemode_mcp", httpcaddyfile.Before, "respond")
}

func parseMCPCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	m := new(MCPHandler)
	err := m.UnmarshalCaddyfile(h.Dispenser)
	return m, err
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens:
//
//	codemode_mcp [<matcher>] {
//		stateless
//		json_response
//		session_timeout <duration>
//		max_sessions <n>
//		max_sessions_per_client <n>
//		disable_localhost_protection
//		allowed_origins <origin>...
//		gateway_url <url>
//	}
func (h *MCPHandler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // directive name
	if d.NextArg() {
		return d.ArgErr()
	}
	seen := blockOptions{}
	for d.NextBlock(0) {
		if err := seen.once(d, "allowed_origins"); err != nil {
			return err
		}
		switch d.Val() {
		case "stateless":
			if d.NextArg() {
				return d.ArgErr()
			}
			h.Stateless = true
		case "json_response":
			if d.NextArg() {
				return d.ArgErr()
			}
			h.JSONResponse = true
		case "disable_localhost_protection":
			if d.NextArg() {
				return d.ArgErr()
			}
			h.DisableLocalhostProtection = true
		case "allowed_origins":
			origins, err := parseAllowedOrigins(d)
			if err != nil {
				return err
			}
			h.AllowedOrigins = append(h.AllowedOrigins, origins...)
		case "gateway_url":
			if !d.NextArg() {
				return d.ArgErr()
			}
			h.GatewayURL = d.Val()
			if d.NextArg() {
				return d.ArgErr()
			}
		case "session_timeout":
			if !d.NextArg() {
				return d.ArgErr()
			}
			dur, err := caddy.ParseDuration(d.Val())
			if err != nil {
				return d.Errf("session_timeout: %v", err)
			}
			if dur == 0 {
				// JSON's "unset": it would be the default 30m, not "at once".
				return d.Errf("session_timeout: 0 is neither a duration nor never (negative); leave the option out for the default 30m")
			}
			h.SessionTimeout = caddy.Duration(dur)
			if d.NextArg() {
				return d.ArgErr()
			}
		case "max_sessions", "max_sessions_per_client":
			name := d.Val()
			if !d.NextArg() {
				return d.ArgErr()
			}
			n, err := strconv.Atoi(d.Val())
			if err != nil || n == 0 {
				return d.Errf("%s: want a number of sessions (negative: no cap), got %q", name, d.Val())
			}
			if name == "max_sessions" {
				h.MaxSessions = n
			} else {
				h.MaxSessionsPerClient = n
			}
			if d.NextArg() {
				return d.ArgErr()
			}
		default:
			return d.Errf("unrecognized subdirective %q", d.Val())
		}
	}
	return nil
}

var _ caddyfile.Unmarshaler = (*MCPHandler)(nil)
