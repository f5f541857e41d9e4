package caddymodules

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/codemode-gateway/caddy-codemode/guard"
)

// ThrottleConfig is the `throttle` part of the codemode app: the limits the
// broker and the meta-tools apply to each tool call, per tool and per agent
// (the spec's server-level GuardConfig, in Caddy's terms). The app builds a
// guard manager from it (App.Guard).
type ThrottleConfig struct {
	// Enabled applies the block. Default true; false keeps the block but
	// applies no limit.
	Enabled *bool `json:"enabled,omitempty"`
	// StorageRaw is the storage module holding the counters. Default: the
	// app's storage.
	StorageRaw json.RawMessage `json:"storage,omitempty" caddy:"namespace=codemode.storage inline_key=module"`
	// KeyPrefix prefixes every key. Default: the storage's key_prefix
	// followed by "guard:" (codemode:guard:).
	KeyPrefix string `json:"key_prefix,omitempty"`
	// Global limits all tool calls together. Default none.
	Global *RateLimit `json:"global,omitempty"`
	// GlobalConcurrency limits all tool calls running at once. Default none.
	GlobalConcurrency *Concurrency `json:"global_concurrency,omitempty"`
	// DefaultRateLimit applies to each tool without its own limit. Default
	// none.
	DefaultRateLimit *RateLimit `json:"default_rate_limit,omitempty"`
	// DefaultConcurrency applies to each tool without its own limit.
	// Default none.
	DefaultConcurrency *Concurrency `json:"default_concurrency,omitempty"`
	// DefaultTimeout bounds each tool call without its own timeout.
	// Default none (the execution's timeout still applies).
	DefaultTimeout caddy.Duration `json:"default_timeout,omitempty"`
	// IPFilter allows or denies callers by address. Default none.
	IPFilter *GuardIPFilter `json:"ip_filter,omitempty"`
}

// validate checks the block, naming fields by their JSON keys.
func (c *ThrottleConfig) validate() error {
	for _, rl := range []struct {
		name string
		l    *RateLimit
	}{{"global", c.Global}, {"default_rate_limit", c.DefaultRateLimit}} {
		if rl.l != nil {
			if err := rl.l.validate(false); err != nil {
				return fmt.Errorf("%s: %w", rl.name, err)
			}
		}
	}
	for _, cc := range []struct {
		name string
		c    *Concurrency
	}{{"global_concurrency", c.GlobalConcurrency}, {"default_concurrency", c.DefaultConcurrency}} {
		if cc.c != nil {
			if err := cc.c.validate(false); err != nil {
				return fmt.Errorf("%s: %w", cc.name, err)
			}
		}
	}
	if c.DefaultTimeout < 0 || (c.DefaultTimeout > 0 && time.Duration(c.DefaultTimeout) < time.Millisecond) {
		return fmt.Errorf("default_timeout: must be at least 1ms")
	}
	if err := c.IPFilter.validate(); err != nil {
		return fmt.Errorf("ip_filter: %w", err)
	}
	return nil
}

// enabled applies the default of Enabled.
func (c *ThrottleConfig) enabled() bool { return c.Enabled == nil || *c.Enabled }

// guardConfig is the guard library's form, with failureMode from the
// storage.
func (c *ThrottleConfig) guardConfig(keyPrefix, failureMode string) guard.GuardConfig {
	g := guard.GuardConfig{Enabled: c.enabled(), KeyPrefix: keyPrefix,
		Storage: &guard.StorageConfig{FailureMode: failureMode}}
	if c.Global != nil {
		g.Global = c.Global.config()
	}
	if c.DefaultRateLimit != nil {
		g.DefaultRateLimit = c.DefaultRateLimit.config()
	}
	if c.GlobalConcurrency != nil {
		g.GlobalConcurrency = c.GlobalConcurrency.config()
	}
	if c.DefaultConcurrency != nil {
		g.DefaultConcurrency = c.DefaultConcurrency.config()
	}
	if c.DefaultTimeout > 0 {
		g.DefaultTimeout = &guard.TimeoutConfig{ExecuteMs: time.Duration(c.DefaultTimeout).Milliseconds()}
	}
	if c.IPFilter != nil {
		g.IpFilter = c.IPFilter.config()
	}
	return g
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
	c := a.Throttle
	if c == nil {
		return nil
	}
	if err := c.validate(); err != nil {
		return fmt.Errorf("codemode: throttle: %w", err)
	}
	st, err := loadStorage(ctx, c, "StorageRaw", c.StorageRaw, a.storage)
	if err != nil {
		return fmt.Errorf("codemode: throttle: %w", err)
	}
	backend := st.Backend()
	prefix := c.KeyPrefix
	if prefix == "" {
		prefix = backend.KeyPrefix + guardKeyPart
	}
	cfg := c.guardConfig(prefix, backend.FailureMode)
	logger := a.logger.Named("throttle")
	storeKey, store, err := guardStorageOn(backend, prefix, logger)
	if err != nil {
		return fmt.Errorf("codemode: throttle: %w", err)
	}
	a.hold(storeKey)
	spelled := c.withDefaults()
	spelled.KeyPrefix = prefix
	key, err := componentKey("guard", spelled, storeKey)
	if err != nil {
		return fmt.Errorf("codemode: throttle: %w", err)
	}
	m, err := acquire(key, func() (*guard.GuardManager, func() error, error) {
		if err := retain(storeKey); err != nil {
			return nil, nil, err
		}
		m, err := guard.NewGuardManager(context.Background(), cfg, &guard.ManagerOptions{Logger: logger, Storage: store, Now: guardNow,
			Metrics: processTelemetry().guard})
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

// withDefaults is the block with its defaults spelled out, for the
// component key: a block that states a default and one that leaves it out
// build the same manager. The storage is keyed separately.
func (c *ThrottleConfig) withDefaults() ThrottleConfig {
	d := *c
	d.StorageRaw = nil
	on := c.enabled()
	d.Enabled = &on
	for _, p := range []**RateLimit{&d.Global, &d.DefaultRateLimit} {
		if *p != nil {
			v := (*p).withDefaults()
			*p = &v
		}
	}
	for _, p := range []**Concurrency{&d.GlobalConcurrency, &d.DefaultConcurrency} {
		if *p != nil {
			v := (*p).withDefaults()
			*p = &v
		}
	}
	return d
}

// parseThrottle parses the `throttle` subdirective of the codemode global
// option. Syntax:
//
//	throttle {
//		enabled <true|false>                      # default true
//		storage memory|redis ...                  # default: the app's storage
//		key_prefix <prefix>                       # default codemode:guard:
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
	c := new(ThrottleConfig)
	seen := blockOptions{}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		if err := seen.once(d); err != nil {
			return nil, err
		}
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
				c.Enabled = nil // the default
			case "false", "off":
				off := false
				c.Enabled = &off
			default:
				return nil, d.Errf("throttle: enabled: %q is not true or false", v)
			}
		case "storage":
			c.StorageRaw, err = parseStorage(d)
		case "key_prefix":
			if !d.AllArgs(&c.KeyPrefix) {
				return nil, d.ArgErr()
			}
		case "global", "default_rate_limit":
			var rl *GuardRateLimit
			if rl, err = parseGuardRateLimit(d, false, false); err == nil {
				if sub == "global" {
					c.Global = &rl.RateLimit
				} else {
					c.DefaultRateLimit = &rl.RateLimit
				}
			}
		case "global_concurrency", "default_concurrency":
			var cc *GuardConcurrency
			if cc, err = parseGuardConcurrency(d, false, false); err == nil {
				if sub == "global_concurrency" {
					c.GlobalConcurrency = &cc.Concurrency
				} else {
					c.DefaultConcurrency = &cc.Concurrency
				}
			}
		case "default_timeout":
			c.DefaultTimeout, err = parseGuardDuration(d, "default_timeout")
		case "ip_filter":
			c.IPFilter, err = parseGuardIPFilter(d)
		default:
			return nil, d.Errf("throttle: unrecognized subdirective %q", sub)
		}
		if err != nil {
			return nil, err
		}
	}
	if err := c.validate(); err != nil {
		return nil, d.Errf("throttle: %v", err)
	}
	return c, nil
}
