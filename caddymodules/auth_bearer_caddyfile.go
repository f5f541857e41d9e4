package caddymodules

import (
	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/caddyauth"
)

func init() {
	httpcaddyfile.RegisterHandlerDirective("codemode_auth", parseBearerCaddyfile)
	httpcaddyfile.RegisterDirectiveOrder("codemode_auth", httpcaddyfile.After, "basic_auth")
}

// parseBearerCaddyfile expands `codemode_auth` into Caddy's authentication
// handler with the codemode_bearer provider (the Caddyfile has no generic
// `authentication` directive). Syntax:
//
//	codemode_auth [<matcher>] {
//		resource <url>
//		audience <aud>
//		scopes <scope...>
//	}
func parseBearerCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	var b BearerAuth
	if err := b.UnmarshalCaddyfile(h.Dispenser); err != nil {
		return nil, err
	}
	return &caddyauth.Authentication{
		ProvidersRaw: caddy.ModuleMap{"codemode_bearer": caddyconfig.JSON(b, nil)},
	}, nil
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
	for d.NextBlock(0) {
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
