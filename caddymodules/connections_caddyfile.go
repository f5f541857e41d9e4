package caddymodules

import (
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

func init() {
	httpcaddyfile.RegisterHandlerDirective("codemode_connections", parseConnectionsCaddyfile)
	// Before authentication: the browser signs in on the page itself.
	httpcaddyfile.RegisterDirectiveOrder("codemode_connections", httpcaddyfile.Before, "basic_auth")
}

func parseConnectionsCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	var ch ConnectionsHandler
	err := ch.UnmarshalCaddyfile(h.Dispenser)
	return &ch, err
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens. Syntax:
//
//	codemode_connections [<matcher>]
//
// It takes no options: the path and everything else come from the
// codemode app's credentials block (connect_url).
func (h *ConnectionsHandler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // directive name
	if d.NextArg() {
		return d.ArgErr()
	}
	for d.NextBlock(0) {
		return d.Errf("unrecognized subdirective %q", d.Val())
	}
	return nil
}

var _ caddyfile.Unmarshaler = (*ConnectionsHandler)(nil)
