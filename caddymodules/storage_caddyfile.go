package caddymodules

import (
	"encoding/json"
	"net"
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/codemode-gateway/caddy-codemode/guard"
)

// parseStorage parses `storage <module> [...]` (the dispenser is on
// "storage") into a module object for a `…_raw` field:
//
//	storage memory
//	storage redis [<address>] { ... }
func parseStorage(d *caddyfile.Dispenser) (json.RawMessage, error) {
	if !d.NextArg() {
		return nil, d.ArgErr()
	}
	return storageModule(d, d.Val())
}

// storageModule unmarshals the storage module name whose token the
// dispenser is on.
func storageModule(d *caddyfile.Dispenser, name string) (json.RawMessage, error) {
	if _, err := caddy.GetModule("codemode.storage." + name); err != nil {
		var names []string
		for _, m := range caddy.GetModules("codemode.storage") {
			names = append(names, m.ID.Name())
		}
		return nil, d.Errf("storage: %q is not a storage module (%s)", name, strings.Join(names, ", "))
	}
	unm, err := caddyfile.UnmarshalModule(d, "codemode.storage."+name)
	if err != nil {
		return nil, err
	}
	return caddyconfig.JSONModuleObject(unm, "module", name, nil), nil
}

// UnmarshalCaddyfile reads `memory`, which takes no options.
func (*MemoryStorage) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // module name
	if d.NextArg() {
		return d.ArgErr()
	}
	if d.NextBlock(0) {
		return d.Err("storage memory takes no options")
	}
	return nil
}

// UnmarshalCaddyfile reads the redis storage. Syntax:
//
//	redis [<address>] {
//		address      <host:port>           # default 127.0.0.1:6379
//		db           <n>                   # default 0
//		username     <name>
//		password     <password>
//		tls {                              # or just `tls`
//			server_name <name>
//			ca_file     <pem-file>
//		}
//		key_prefix   <prefix>              # default codemode:
//		pool_size    <n>                   # default 10 per CPU
//		dial_timeout <duration>            # default 1s
//		timeout      <duration>            # per command, default 500ms
//		failure_mode open|closed           # default open
//	}
//
// host <host> and port <port> are accepted as the two halves of address.
func (r *RedisStorage) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // module name
	if d.NextArg() {
		r.Address = d.Val()
	}
	if d.NextArg() {
		return d.ArgErr()
	}
	var host, port string
	if r.Address != "" {
		host, port, _ = net.SplitHostPort(r.Address)
	}
	seen := blockOptions{}
	for d.NextBlock(0) {
		if err := seen.once(d); err != nil {
			return err
		}
		opt := d.Val()
		var err error
		switch opt {
		case "address":
			err = oneArg(d, &r.Address)
			if err == nil {
				host, port, _ = net.SplitHostPort(r.Address)
			}
		case "host":
			err = oneArg(d, &host)
			r.Address = net.JoinHostPort(host, orDefault(port, "6379"))
		case "port":
			if err = oneArg(d, &port); err == nil {
				if n, perr := strconv.Atoi(port); perr != nil || n <= 0 || n > 65535 {
					return d.Errf("port: %q is not a port number", port)
				}
				r.Address = net.JoinHostPort(orDefault(host, "127.0.0.1"), port)
			}
		case "db":
			err = parseIntArg(d, &r.DB)
		case "pool_size":
			err = positiveIntArg(d, &r.PoolSize)
		case "username":
			err = oneArg(d, &r.Username)
		case "password":
			err = oneArg(d, &r.Password)
		case "key_prefix":
			err = oneArg(d, &r.KeyPrefix)
		case "dial_timeout":
			err = parseDurationArg(d, &r.DialTimeout)
		case "timeout":
			err = parseDurationArg(d, &r.Timeout)
		case "failure_mode":
			if err = oneArg(d, &r.FailureMode); err == nil && r.FailureMode != guard.FailOpen && r.FailureMode != guard.FailClosed {
				return d.Errf("failure_mode: %q is not open or closed", r.FailureMode)
			}
		case "tls":
			r.TLS = new(RedisTLS)
			if d.NextArg() {
				return d.ArgErr()
			}
			inner := blockOptions{}
			for nesting := d.Nesting(); d.NextBlock(nesting); {
				if err := inner.once(d); err != nil {
					return err
				}
				switch d.Val() {
				case "server_name":
					err = oneArg(d, &r.TLS.ServerName)
				case "ca_file":
					err = oneArg(d, &r.TLS.CAFile)
				default:
					return d.Errf("tls: unrecognized subdirective %q", d.Val())
				}
				if err != nil {
					return err
				}
			}
		default:
			return d.Errf("redis: unrecognized subdirective %q", opt)
		}
		if err != nil {
			return err
		}
	}
	if r.Address != "" && !hasPlaceholder(r.Address) {
		if _, _, err := net.SplitHostPort(r.Address); err != nil {
			return d.Errf("address %q: %v", r.Address, err)
		}
	}
	return nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func hasPlaceholder(s string) bool { return strings.Contains(s, "{") }
