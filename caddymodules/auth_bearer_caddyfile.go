package caddymodules

import (
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

func init() {
	httpcaddyfile.RegisterHandlerDirective("codemode_auth", parseBearerCaddyfile)
	httpcaddyfile.RegisterDirectiveOrder("codemode_auth", httpcaddyfile.After, "basic_auth")
}

// parseBearerCaddyfile reads `codemode_auth` into the codemode_auth handler
// (AuthHandler: 401 without a valid token, 403 for a missing scope). JSON
// users may also put the codemode_bearer provider in Caddy's authentication
// handler, which answers the same except where that handler decides the
// answer (handle_errors routes, other providers): 401 for both. Syntax:
//
//	codemode_auth [<matcher>] {
//		resource <url>
//		audience <aud>
//		scopes <scope...>
//	}
func parseBearerCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	var a AuthHandler
	if err := a.UnmarshalCaddyfile(h.Dispenser); err != nil {
		return nil, err
	}
	return &a, nil
}

// UnmarshalCaddyfile reads the codemode_auth block into the provider.
// Syntax:
//
//	codemode_auth [<matcher>] {
//		resource <url>
//		audience <aud>
//		scopes <scope...>
//	}
func (b *BearerAuth) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // directive name
	if d.NextArg() {
		return d.ArgErr()
	}
	seen := blockOptions{}
	for d.NextBlock(0) {
		if err := seen.once(d); err != nil {
			return err
		}
		var err error
		switch d.Val() {
		case "resource":
			err = oneArg(d, &b.Resource)
		case "audience":
			err = oneArg(d, &b.Audience)
		case "scopes":
			b.Scopes = d.RemainingArgs()
			if len(b.Scopes) == 0 {
				err = d.ArgErr()
			}
		default:
			return d.Errf("unrecognized subdirective %q", d.Val())
		}
		if err != nil {
			return err
		}
	}
	return nil
}

var _ caddyfile.Unmarshaler = (*BearerAuth)(nil)
