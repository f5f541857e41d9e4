package caddymodules

import (
	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
)

func init() {
	httpcaddyfile.RegisterGlobalOption("codemode", parseAppCaddyfile)
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
