package caddymodules

import (
	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
)

func init() {
	httpcaddyfile.RegisterGlobalOption("codemode", parseAppCaddyfile)
	// In a site block, Caddy would answer only "unrecognized directive".
	httpcaddyfile.RegisterDirective("codemode", func(h httpcaddyfile.Helper) ([]httpcaddyfile.ConfigValue, error) {
		h.Next()
		return nil, h.Err("codemode is a global option, not a site directive: move this block into the global options block " +
			"(the { } block at the very top of the Caddyfile); the site uses the handlers codemode_mcp, codemode_broker, codemode_guard, codemode_auth, ...")
	})
}

// parseAppCaddyfile sets up the codemode app from the global option block:
//
//	{
//		codemode {
//			storage  memory|redis ...
//			throttle { ... }
//			sandbox  { ... }
//			broker   { ... }
//			meta     { ... }
//			auth     { ... }
//			credentials { ... }
//			ipv4_prefix <bits>   # default 32
//			ipv6_prefix <bits>   # default 64
//		}
//	}
//
// Each subdirective's syntax is documented at its parser.
func parseAppCaddyfile(d *caddyfile.Dispenser, existing any) (any, error) {
	app := new(App)
	if existing != nil {
		if prev, ok := existing.(httpcaddyfile.App); ok {
			if err := caddy.StrictUnmarshalJSON(prev.Value, app); err != nil {
				return nil, err
			}
		}
	}
	d.Next() // consume option name
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	for d.NextBlock(0) {
		// A block given twice (in one codemode option or in two, e.g. from
		// two imported snippets) would replace the first one whole.
		if appBlockSet(app, d.Val()) {
			return nil, d.Errf("%s: set twice in the codemode global option; write one %s block", d.Val(), d.Val())
		}
		if ok, err := app.AddressPrefixes.unmarshalCaddyfileOption(d); ok {
			if err != nil {
				return nil, err
			}
			continue
		}
		var err error
		switch d.Val() {
		case "storage":
			app.StorageRaw, err = parseStorage(d)
		case "throttle":
			app.Throttle, err = parseThrottle(d)
		case "sandbox":
			app.SandboxRaw, err = parseSandbox(d)
		case "broker":
			app.Broker, err = parseBroker(d)
		case "meta":
			app.Meta, err = parseMeta(d)
		case "auth":
			app.Auth, err = parseAuth(d)
		case "credentials":
			app.Credentials, err = parseCredentials(d)
		default:
			return nil, d.Errf("unrecognized subdirective %q", d.Val())
		}
		if err != nil {
			return nil, err
		}
	}
	return httpcaddyfile.App{
		Name:  "codemode",
		Value: caddyconfig.JSON(app, nil),
	}, nil
}

// appBlockSet reports whether the app already has the block name.
func appBlockSet(app *App, name string) bool {
	switch name {
	case "storage":
		return len(app.StorageRaw) > 0
	case "throttle":
		return app.Throttle != nil
	case "sandbox":
		return len(app.SandboxRaw) > 0
	case "broker":
		return app.Broker != nil
	case "meta":
		return app.Meta != nil
	case "auth":
		return app.Auth != nil
	case "credentials":
		return app.Credentials != nil
	}
	return false
}
