package caddymodules

import (
	"context"
	"fmt"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/codemode-gateway/caddy-codemode/guard"
)

// ThrottleConfig is the `throttle` part of the codemode app: the spec's
// server-level GuardConfig, in its JSON shape (camelCase keys: enabled,
// storage, keyPrefix, global, globalConcurrency, defaultRateLimit,
// defaultConcurrency, defaultTimeout, ipFilter). The app builds a guard
// manager from it, which the broker and the meta-tools use for per-tool and
// per-agent limits (App.Guard).
type ThrottleConfig struct {
	guard.GuardConfig
}

// throttleState is what the area keeps at run time.
type throttleState struct {
	manager *guard.GuardManager
	key     string // the manager's component key
}

// Guard returns the guard manager built from `throttle`, or nil when the
// config has no throttle block. Its state (counters, tickets) lives in a
// storage shared across config reloads.
func (a *App) Guard() *guard.GuardManager { return a.throttle.manager }

// provisionThrottle loads the guard manager: a component keyed by the
// throttle block and its storage, so a broker built with it (keyed in turn
// by the manager's key) never sees another config's limits.
func (a *App) provisionThrottle(ctx caddy.Context) error {
	if a.Throttle == nil {
		return nil
	}
	cfg := a.Throttle.GuardConfig
	cfg.Storage = replaceStorageConfig(cfg.Storage)
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("codemode: throttle: %w", err)
	}
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = guard.DefaultKeyPrefix
	}
	logger := a.logger.Named("throttle")
	if !cfg.Enabled && (cfg.Global != nil || cfg.GlobalConcurrency != nil || cfg.DefaultRateLimit != nil ||
		cfg.DefaultConcurrency != nil || cfg.DefaultTimeout != nil || cfg.IpFilter != nil) {
		logger.Warn("throttle has limits but enabled is false: no limits apply (set \"enabled\": true)")
	}
	storeKey, store, err := loadGuardStorage(cfg.Storage, cfg.KeyPrefix, logger)
	if err != nil {
		return fmt.Errorf("codemode: throttle: %w", err)
	}
	a.hold(storeKey)
	key, err := componentKey("guard", cfg, storeKey)
	if err != nil {
		return fmt.Errorf("codemode: throttle: %w", err)
	}
	m, err := acquire(key, func() (*guard.GuardManager, func() error, error) {
		if err := retain(storeKey); err != nil {
			return nil, nil, err
		}
		m, err := guard.NewGuardManager(ctx, cfg, &guard.ManagerOptions{Logger: logger, Storage: store, Now: guardNow})
		if err != nil {
			_ = release(storeKey)
			return nil, nil, err
		}
		return m, func() error {
			_ = m.Destroy(context.Background())
			return release(storeKey)
		}, nil
	})
	if err != nil {
		return fmt.Errorf("codemode: throttle: %w", err)
	}
	a.hold(key)
	a.throttle = throttleState{manager: m, key: key}
	return nil
}

// parseThrottle parses the `throttle` subdirective of the codemode global
// option. Syntax:
//
//	throttle {
//		enabled <true|false>                      # default true
//		storage memory
//		storage redis {
//			host <host>                           # default 127.0.0.1
//			port <port>                           # default 6379
//			password <password>
//			db <n>
//			tls
//			failure_mode <open|closed>            # default open
//			timeout <duration>                    # per command, default 500ms
//		}
//		key_prefix <prefix>                       # default mcp:guard:
//		global <max> <window> [<partition>]
//		global_concurrency <max> [<queue_timeout>] [<partition>]
//		default_rate_limit <max> <window> [<partition>]
//		default_concurrency <max> [<queue_timeout>] [<partition>]
//		default_timeout <duration>
//		ip_filter {
//			allow <ip|cidr>...
//			deny <ip|cidr>...
//			default <allow|deny>
//			trust_proxy [<depth>]
//		}
//	}
//
// <partition> is global (default), ip, session or userId.
func parseThrottle(d *caddyfile.Dispenser) (*ThrottleConfig, error) {
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	c := &ThrottleConfig{GuardConfig: guard.GuardConfig{Enabled: true}}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		sub := d.Val()
		var err error
		switch sub {
		case "enabled":
			var v string
			if !d.AllArgs(&v) {
				return nil, d.ArgErr()
			}
			switch v {
			case "true", "on":
				c.Enabled = true
			case "false", "off":
				c.Enabled = false
			default:
				return nil, d.Errf("throttle: enabled: %q is not true or false", v)
			}
		case "storage":
			var s *GuardStorage
			if s, err = parseGuardStorage(d); err == nil {
				c.Storage = s.config()
			}
		case "key_prefix":
			if !d.AllArgs(&c.KeyPrefix) {
				return nil, d.ArgErr()
			}
		case "global":
			var rl *GuardRateLimit
			if rl, err = parseGuardRateLimit(d, false, false); err == nil {
				c.Global = rl.config()
			}
		case "default_rate_limit":
			var rl *GuardRateLimit
			if rl, err = parseGuardRateLimit(d, false, false); err == nil {
				c.DefaultRateLimit = rl.config()
			}
		case "global_concurrency":
			var cc *GuardConcurrency
			if cc, err = parseGuardConcurrency(d, false, false); err == nil {
				c.GlobalConcurrency = cc.config()
			}
		case "default_concurrency":
			var cc *GuardConcurrency
			if cc, err = parseGuardConcurrency(d, false, false); err == nil {
				c.DefaultConcurrency = cc.config()
			}
		case "default_timeout":
			var dur caddy.Duration
			if dur, err = parseGuardDuration(d, "default_timeout"); err == nil {
				c.DefaultTimeout = &guard.TimeoutConfig{ExecuteMs: max(int64(dur)/1e6, 1)}
			}
		case "ip_filter":
			var f *GuardIPFilter
			if f, err = parseGuardIPFilter(d); err == nil {
				c.IpFilter = f.config()
			}
		default:
			return nil, d.Errf("throttle: unrecognized subdirective %q", sub)
		}
		if err != nil {
			return nil, err
		}
	}
	if err := c.Validate(); err != nil {
		return nil, d.Errf("throttle: %v", err)
	}
	return c, nil
}
