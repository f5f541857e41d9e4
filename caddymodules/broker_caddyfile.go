package caddymodules

import (
	"strconv"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

func init() {
	httpcaddyfile.RegisterHandlerDirective("codemode_broker", parseBrokerHandler)
	httpcaddyfile.RegisterDirectiveOrder("codemode_broker", httpcaddyfile.Before, "respond")
}

func parseBrokerHandler(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	m := new(BrokerHandler)
	err := m.UnmarshalCaddyfile(h.Dispenser)
	return m, err
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens:
//
//	codemode_broker [<matcher>] {
//		prefix <path>
//		rate_limit <max_requests> [<window>] {
//			key <placeholder>
//		}
//		limits {                 # this route's ceilings (lower than the broker's)
//			timeout <duration>
//			max_tool_calls <n>
//			max_steps <n>
//		}
//		allowed_origins <origin>...  # browser origins besides the route's own (* = any)
//	}
//
// The broker itself (sessions, tools, catalog, storage) is configured in
// the `broker` block of the codemode global option.
func (h *BrokerHandler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
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
		case "prefix":
			if !d.NextArg() {
				return d.ArgErr()
			}
			h.Prefix = d.Val()
			if d.NextArg() {
				return d.ArgErr()
			}
		case "rate_limit":
			rl := new(BrokerRateLimit)
			args := d.RemainingArgs()
			if len(args) < 1 || len(args) > 2 {
				return d.Err("rate_limit: want <max_requests> [<window>]")
			}
			n, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil || n <= 0 {
				return d.Errf("rate_limit: max_requests must be a positive integer, got %q", args[0])
			}
			rl.MaxRequests = n
			if len(args) == 2 {
				w, err := caddy.ParseDuration(args[1])
				if err != nil {
					return d.Errf("rate_limit: invalid window %q: %v", args[1], err)
				}
				rl.Window = caddy.Duration(w)
			}
			inner := blockOptions{}
			for nesting := d.Nesting(); d.NextBlock(nesting); {
				if err := inner.once(d); err != nil {
					return err
				}
				switch d.Val() {
				case "key":
					if !d.NextArg() {
						return d.ArgErr()
					}
					rl.Key = d.Val()
					if d.NextArg() {
						return d.ArgErr()
					}
				default:
					return d.Errf("unrecognized rate_limit subdirective %q", d.Val())
				}
			}
			h.RateLimit = rl
		case "limits":
			l := new(BrokerRouteLimits)
			if d.NextArg() {
				return d.ArgErr()
			}
			inner := blockOptions{}
			for nesting := d.Nesting(); d.NextBlock(nesting); {
				if err := inner.once(d); err != nil {
					return err
				}
				sub := d.Val()
				var s string
				if !d.AllArgs(&s) {
					return d.ArgErr()
				}
				switch sub {
				case "timeout":
					v, err := caddy.ParseDuration(s)
					if err != nil || v <= 0 {
						return d.Errf("limits: timeout: invalid duration %q", s)
					}
					l.Timeout = caddy.Duration(v)
				case "max_tool_calls", "max_steps":
					n, err := strconv.ParseInt(s, 10, 64)
					if err != nil || n <= 0 {
						return d.Errf("limits: %s: want a positive integer, got %q", sub, s)
					}
					if sub == "max_steps" {
						l.MaxSteps = n
					} else {
						l.MaxToolCalls = int(n)
					}
				default:
					return d.Errf("unrecognized limits subdirective %q", sub)
				}
			}
			h.Limits = l
		case "allowed_origins":
			origins, err := parseAllowedOrigins(d)
			if err != nil {
				return err
			}
			h.AllowedOrigins = append(h.AllowedOrigins, origins...)
		default:
			return d.Errf("unrecognized subdirective %q", d.Val())
		}
	}
	return nil
}

// parseAllowedOrigins reads the arguments of an allowed_origins
// subdirective (codemode_broker, codemode_mcp).
func parseAllowedOrigins(d *caddyfile.Dispenser) ([]string, error) {
	args := d.RemainingArgs()
	if len(args) == 0 {
		return nil, d.ArgErr()
	}
	if err := checkOrigins(args); err != nil {
		return nil, d.Err(err.Error())
	}
	return args, nil
}

// Interface guard
var _ caddyfile.Unmarshaler = (*BrokerHandler)(nil)
