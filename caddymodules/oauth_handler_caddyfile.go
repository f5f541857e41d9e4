package caddymodules

import (
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

func init() {
	httpcaddyfile.RegisterHandlerDirective("codemode_oauth", parseOAuthHandlerCaddyfile)
	// Before authentication, so the sign-in endpoints stay reachable
	// without a token.
	httpcaddyfile.RegisterDirectiveOrder("codemode_oauth", httpcaddyfile.Before, "basic_auth")
}

func parseOAuthHandlerCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	var oh OAuthHandler
	err := oh.UnmarshalCaddyfile(h.Dispenser)
	return &oh, err
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens. Syntax:
//
//	codemode_oauth [<matcher>] {
//		resource <url...>
//		scopes_supported <scope...>
//	}
//
// With no block, it serves the app's resource metadata and (orchestrated
// mode) the authorization server, and passes other requests on.
func (h *OAuthHandler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // directive name
	if d.NextArg() {
		return d.ArgErr()
	}
	seen := blockOptions{}
	for d.NextBlock(0) {
		if err := seen.once(d, "resource", "resources"); err != nil {
			return err
		}
		switch d.Val() {
		case "resource", "resources":
			args := d.RemainingArgs()
			if len(args) == 0 {
				return d.ArgErr()
			}
			h.Resources = append(h.Resources, args...)
		case "scopes_supported":
			h.ScopesSupported = d.RemainingArgs()
			if len(h.ScopesSupported) == 0 {
				return d.ArgErr()
			}
		default:
			return d.Errf("unrecognized subdirective %q", d.Val())
		}
	}
	return nil
}

var _ caddyfile.Unmarshaler = (*OAuthHandler)(nil)
