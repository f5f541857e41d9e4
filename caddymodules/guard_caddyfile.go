package caddymodules

import (
	"strconv"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/codemode-gateway/caddy-codemode/guard"
)

func init() {
	httpcaddyfile.RegisterHandlerDirective("codemode_guard", parseGuardCaddyfile)
	// After authentication (so {http.auth.user.id} is known) and encode,
	// before the handlers that do the work (handle, route, reverse_proxy...).
	httpcaddyfile.RegisterDirectiveOrder("codemode_guard", httpcaddyfile.After, "encode")
}

func parseGuardCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	g := new(Guard)
	if err := g.UnmarshalCaddyfile(h.Dispenser); err != nil {
		return nil, err
	}
	return g, nil
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens. Syntax:
//
//	codemode_guard [<matcher>] {
//		zone <name>
//		storage memory                      # default
//		storage redis [<address>] { ... }   # see docs/storage.md
//		key_prefix <prefix>                 # default codemode:guard:
//		rate_limit [<name>] <max_requests> <window> [<partition>]
//		concurrency [<name>] <max_concurrent> [<queue_timeout>] [<partition>]
//		timeout <duration>
//		ip_filter {
//			allow <ip|cidr>...
//			deny <ip|cidr>...
//			default <allow|deny>
//			trust_proxy [<depth>]
//		}
//		session_header <header>
//		user <placeholder>
//		hide_rate_limit_headers
//		ipv4_prefix <bits>                  # default 32
//		ipv6_prefix <bits>                  # default 64
//	}
//
// rate_limit and concurrency may repeat; the one without a name is the
// global limit. <partition> is global (default), ip, session, userId or any
// string with placeholders, e.g. {http.request.header.X-Agent}. The ip
// partition keys an address on its prefix (ipv4_prefix, ipv6_prefix).
func (g *Guard) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // directive name
	if d.NextArg() {
		return d.ArgErr()
	}
	seen := blockOptions{}
	for d.NextBlock(0) {
		if err := seen.once(d, "rate_limit", "concurrency"); err != nil {
			return err
		}
		sub := d.Val()
		if ok, err := g.AddressPrefixes.unmarshalCaddyfileOption(d); ok {
			if err != nil {
				return err
			}
			continue
		}
		var err error
		switch sub {
		case "zone":
			if !d.AllArgs(&g.Zone) {
				return d.ArgErr()
			}
		case "storage":
			g.StorageRaw, err = parseStorage(d)
		case "key_prefix":
			if !d.AllArgs(&g.KeyPrefix) {
				return d.ArgErr()
			}
		case "rate_limit":
			var rl *GuardRateLimit
			if rl, err = parseGuardRateLimit(d, true, true); err == nil {
				g.RateLimits = append(g.RateLimits, *rl)
			}
		case "concurrency":
			var cc *GuardConcurrency
			if cc, err = parseGuardConcurrency(d, true, true); err == nil {
				g.Concurrency = append(g.Concurrency, *cc)
			}
		case "timeout":
			g.Timeout, err = parseGuardDuration(d, "timeout")
		case "ip_filter":
			g.IPFilter, err = parseGuardIPFilter(d)
		case "session_header":
			if !d.AllArgs(&g.SessionHeader) {
				return d.ArgErr()
			}
		case "user":
			if !d.AllArgs(&g.User) {
				return d.ArgErr()
			}
		case "hide_rate_limit_headers":
			if d.NextArg() {
				return d.ArgErr()
			}
			g.HideRateLimitHeaders = true
		default:
			return d.Errf("unrecognized subdirective %q", sub)
		}
		if err != nil {
			return err
		}
	}
	if err := g.Validate(); err != nil {
		return d.Err(err.Error())
	}
	return nil
}

// parseGuardRateLimit parses `[<name>] <max> <window> [<partition>]`.
func parseGuardRateLimit(d *caddyfile.Dispenser, named, placeholders bool) (*GuardRateLimit, error) {
	dir := d.Val()
	args := d.RemainingArgs()
	rl := &GuardRateLimit{}
	if named && len(args) > 0 && !isNumber(args[0]) {
		rl.Name, args = args[0], args[1:]
	}
	if len(args) < 2 || len(args) > 3 {
		return nil, d.Errf("%s: want %s<max_requests> <window> [<partition>]", dir, nameHint(named))
	}
	n, err := strconv.ParseInt(args[0], 10, 64)
	if err != nil || n <= 0 {
		return nil, d.Errf("%s: %q is not a positive number of requests", dir, args[0])
	}
	rl.MaxRequests = n
	w, err := caddy.ParseDuration(args[1])
	if err != nil || w <= 0 {
		return nil, d.Errf("%s: window %q is not a positive duration", dir, args[1])
	}
	rl.Window = caddy.Duration(w)
	if len(args) == 3 {
		if rl.PartitionBy, err = checkPartition(args[2], placeholders); err != nil {
			return nil, d.Errf("%s: %v", dir, err)
		}
	}
	if d.NextBlock(d.Nesting()) {
		return nil, d.Errf("%s takes no block", dir)
	}
	return rl, nil
}

// parseGuardConcurrency parses `[<name>] <max> [<queue_timeout>] [<partition>]`.
func parseGuardConcurrency(d *caddyfile.Dispenser, named, placeholders bool) (*GuardConcurrency, error) {
	dir := d.Val()
	args := d.RemainingArgs()
	cc := &GuardConcurrency{}
	if named && len(args) > 0 && !isNumber(args[0]) {
		cc.Name, args = args[0], args[1:]
	}
	if len(args) < 1 || len(args) > 3 {
		return nil, d.Errf("%s: want %s<max_concurrent> [<queue_timeout>] [<partition>]", dir, nameHint(named))
	}
	n, err := strconv.ParseInt(args[0], 10, 64)
	if err != nil || n <= 0 {
		return nil, d.Errf("%s: %q is not a positive number of slots", dir, args[0])
	}
	cc.MaxConcurrent = n
	args = args[1:]
	if len(args) > 0 {
		if q, err := caddy.ParseDuration(args[0]); err == nil {
			if q < 0 {
				return nil, d.Errf("%s: queue timeout %q is negative", dir, args[0])
			}
			cc.QueueTimeout = caddy.Duration(q)
			args = args[1:]
		}
	}
	if len(args) == 1 {
		if cc.PartitionBy, err = checkPartition(args[0], placeholders); err != nil {
			return nil, d.Errf("%s: %v", dir, err)
		}
	} else if len(args) > 1 {
		return nil, d.Errf("%s: want %s<max_concurrent> [<queue_timeout>] [<partition>]", dir, nameHint(named))
	}
	if d.NextBlock(d.Nesting()) {
		return nil, d.Errf("%s takes no block", dir)
	}
	return cc, nil
}

func nameHint(named bool) string {
	if named {
		return "[<name>] "
	}
	return ""
}

func isNumber(s string) bool {
	_, err := strconv.ParseInt(s, 10, 64)
	return err == nil
}

// parseGuardDuration parses the one duration argument of a subdirective.
func parseGuardDuration(d *caddyfile.Dispenser, name string) (caddy.Duration, error) {
	var v string
	if !d.AllArgs(&v) {
		return 0, d.ArgErr()
	}
	dur, err := caddy.ParseDuration(v)
	if err != nil || dur <= 0 {
		return 0, d.Errf("%s: %q is not a positive duration", name, v)
	}
	return caddy.Duration(dur), nil
}

// parseGuardIPFilter parses an `ip_filter { ... }` block.
func parseGuardIPFilter(d *caddyfile.Dispenser) (*GuardIPFilter, error) {
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	f := &GuardIPFilter{}
	seen := blockOptions{}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		if err := seen.once(d, "allow", "deny"); err != nil {
			return nil, err
		}
		opt := d.Val()
		switch opt {
		case "allow", "deny":
			rules := d.RemainingArgs()
			if len(rules) == 0 {
				return nil, d.ArgErr()
			}
			for _, r := range rules {
				if _, err := guard.ParseIPRule(r); err != nil {
					return nil, d.Errf("ip_filter: %s: %v", opt, err)
				}
			}
			if opt == "allow" {
				f.Allow = append(f.Allow, rules...)
			} else {
				f.Deny = append(f.Deny, rules...)
			}
		case "default":
			if !d.AllArgs(&f.DefaultAction) {
				return nil, d.ArgErr()
			}
			if f.DefaultAction != guard.ActionAllow && f.DefaultAction != guard.ActionDeny {
				return nil, d.Errf("ip_filter: default: %q is not allow or deny", f.DefaultAction)
			}
		case "trust_proxy":
			f.TrustProxy = true
			args := d.RemainingArgs()
			if len(args) > 1 {
				return nil, d.ArgErr()
			}
			if len(args) == 1 {
				n, err := strconv.Atoi(args[0])
				if err != nil || n <= 0 {
					return nil, d.Errf("ip_filter: trust_proxy: depth %q is not a positive number", args[0])
				}
				f.TrustedProxyDepth = n
			}
		default:
			return nil, d.Errf("ip_filter: unrecognized option %q", opt)
		}
	}
	return f, nil
}

var _ caddyfile.Unmarshaler = (*Guard)(nil)
