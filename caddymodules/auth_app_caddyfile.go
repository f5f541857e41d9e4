package caddymodules

import (
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddytls"

	"github.com/codemode-gateway/caddy-codemode/guard"
	"github.com/codemode-gateway/caddy-codemode/oauth"
)

// parseAuth parses the `auth` subdirective of the codemode global option.
// Durations take Caddy's duration syntax (15m, 7d); a bare number is
// seconds. Syntax:
//
//	auth {
//		mode orchestrated|transparent
//		development [true|false]
//		issuer <url>
//		resource <url>
//		resources <uri...>
//		scopes <scope...>
//		token_storage memory|redis ...      # default: the app's storage
//		local {
//			sign_key <jwk-json>
//			key_rotation <duration>     # whole days, e.g. 30d
//			key_rotation_days <days>    # the same in days
//			max_keys <n>
//		}
//		refresh {
//			enabled [true|false]
//			skew <duration>
//			access_token_ttl <duration>
//			refresh_token_ttl <duration>
//			rotate_refresh_token true|false
//			reuse_grace <duration>
//		}
//		consent [true|false]
//		allow_default_public [true|false]
//		dcr_enabled [true|false]
//		registered_client_ttl <duration>
//		max_registered_clients <n>
//		max_pending_authorizations <n>
//		password_check_wait <duration>      # default 5s, at most 1m
//		client_id_metadata [true|false] {
//			max_document_bytes <n>
//			fetch_timeout <duration>
//			max_cache_ttl <duration>
//			allow_private_host <host...>
//			trust_pool <module> [<args...>]
//		}
//		user <username> <bcrypt-hash> [<subject>]
//		client <id> {
//			secret <secret>
//			name <name>
//			redirect_uri <uri...>
//			scopes <scope...>
//		}
//		provider_url <url>
//		client_id <id>
//		client_secret <secret>
//		expected_audience <aud>
//		jwks_url <url>
//		token_rate_limit <max_requests> [<window>] [ip|global]
//		behind_tls_proxy [true|false]
//		logging {
//			redact <field...>
//		}
//	}
func parseAuth(d *caddyfile.Dispenser) (*AuthConfig, error) {
	cfg := new(AuthConfig)
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	seen := blockOptions{}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		if err := seen.once(d, "resources", "user", "client", "local", "refresh", "logging"); err != nil {
			return nil, err
		}
		var err error
		switch d.Val() {
		case "mode":
			err = oneArg(d, &cfg.Mode)
			if err == nil && cfg.Mode != AuthModeOrchestrated && cfg.Mode != AuthModeTransparent {
				err = d.Errf("mode: %q is not orchestrated or transparent", cfg.Mode)
			}
		case "development":
			err = optBool(d, &cfg.Development)
		case "issuer":
			err = oneArg(d, &cfg.Issuer)
		case "resource":
			err = oneArg(d, &cfg.Resource)
		case "resources":
			args := d.RemainingArgs()
			if len(args) == 0 {
				return nil, d.ArgErr()
			}
			cfg.Resources = append(cfg.Resources, args...)
		case "scopes":
			cfg.Scopes = d.RemainingArgs()
			if len(cfg.Scopes) == 0 {
				err = d.ArgErr()
			}
		case "token_storage":
			cfg.TokenStorageRaw, err = parseStorage(d)
		case "local":
			if cfg.Local == nil {
				cfg.Local = new(AuthLocal)
			}
			err = parseLocal(d, cfg.Local)
		case "refresh":
			if cfg.Refresh == nil {
				cfg.Refresh = new(AuthRefresh)
			}
			err = parseRefresh(d, cfg.Refresh)
		case "consent":
			if cfg.Consent == nil {
				cfg.Consent = new(oauth.ConsentConfig)
			}
			err = optBool(d, &cfg.Consent.Enabled)
		case "allow_default_public":
			err = optBool(d, &cfg.AllowDefaultPublic)
		case "dcr_enabled":
			err = optBool(d, &cfg.DCREnabled)
		case "registered_client_ttl":
			err = positiveDurationArg(d, &cfg.RegisteredClientTTL)
		case "max_registered_clients":
			err = positiveIntArg(d, &cfg.MaxRegisteredClients)
		case "max_pending_authorizations":
			err = positiveIntArg(d, &cfg.MaxPendingAuthorizations)
		case "password_check_wait":
			err = positiveDurationArg(d, &cfg.PasswordCheckWait)
		case "client_id_metadata":
			err = parseClientIDMetadata(d, cfg)
		case "user":
			args := d.RemainingArgs()
			if len(args) < 2 || len(args) > 3 {
				return nil, d.Errf("user: want <username> <bcrypt-hash> [<subject>]")
			}
			u := oauth.User{Username: args[0], PasswordHash: args[1]}
			if len(args) == 3 {
				u.Subject = args[2]
			}
			cfg.Users = append(cfg.Users, u)
		case "client":
			var c oauth.ClientConfig
			c, err = parseClient(d)
			cfg.Clients = append(cfg.Clients, c)
		case "provider_url":
			err = oneArg(d, &cfg.ProviderURL)
		case "client_id":
			err = oneArg(d, &cfg.ClientID)
		case "client_secret":
			err = oneArg(d, &cfg.ClientSecret)
		case "expected_audience":
			err = oneArg(d, &cfg.ExpectedAudience)
		case "jwks_url":
			err = oneArg(d, &cfg.JWKSURL)
		case "token_rate_limit":
			cfg.TokenRateLimit, err = parseTokenRateLimit(d)
		case "behind_tls_proxy":
			err = optBool(d, &cfg.BehindTLSProxy)
		case "logging":
			for n := d.Nesting(); d.NextBlock(n); {
				switch d.Val() {
				case "redact":
					fields := d.RemainingArgs()
					if len(fields) == 0 {
						return nil, d.ArgErr()
					}
					cfg.Redact = append(cfg.Redact, fields...)
				default:
					return nil, d.Errf("logging: unrecognized subdirective %q", d.Val())
				}
			}
		default:
			return nil, d.Errf("auth: unrecognized subdirective %q", d.Val())
		}
		if err != nil {
			return nil, err
		}
	}
	return cfg, nil
}

// optBool reads `name` (true) or `name true|false`.
func optBool(d *caddyfile.Dispenser, dst *bool) error {
	name := d.Val()
	args := d.RemainingArgs()
	switch len(args) {
	case 0:
		*dst = true
	case 1:
		b, err := strconv.ParseBool(args[0])
		if err != nil {
			return d.Errf("%s: %q is not true or false", name, args[0])
		}
		*dst = b
	default:
		return d.Errf("%s: takes at most one value", name)
	}
	return nil
}

// durationArg reads a Caddy duration, or a bare number of seconds.
func durationArg(d *caddyfile.Dispenser, dst *caddy.Duration) error {
	name := d.Val()
	var s string
	if err := oneArg(d, &s); err != nil {
		return err
	}
	if n, err := strconv.Atoi(s); err == nil && n >= 0 {
		if n > math.MaxInt64/int(time.Second) {
			// Past 292 years the seconds would wrap around to another
			// duration, perhaps a valid one.
			return d.Errf("%s: %q seconds is too long", name, s)
		}
		*dst = caddy.Duration(time.Duration(n) * time.Second)
		return nil
	}
	dur, err := caddy.ParseDuration(s)
	if err != nil || dur < 0 {
		return d.Errf("%s: %q is not a duration", name, s)
	}
	*dst = caddy.Duration(dur)
	return nil
}

// positiveDurationArg reads a duration as durationArg does, refusing 0:
// the options read with it have a default that 0 (JSON's "unset") stands
// for, so `access_token_ttl 0` would be 15 minutes, not none.
func positiveDurationArg(d *caddyfile.Dispenser, dst *caddy.Duration) error {
	name := d.Val()
	if err := durationArg(d, dst); err != nil {
		return err
	}
	if *dst == 0 {
		return d.Errf("%s: 0 is not a positive duration (leave the option out for its default)", name)
	}
	return nil
}

// keyRotationDaysArg reads key_rotation_days, a whole number of days; 0
// turns rotation off.
func keyRotationDaysArg(d *caddyfile.Dispenser, dst *caddy.Duration) error {
	name := d.Val()
	var days int
	if err := parseIntArg(d, &days); err != nil {
		return err
	}
	if days > math.MaxInt64/int(24*time.Hour) {
		return d.Errf("%s: %d days is too long", name, days)
	}
	*dst = caddy.Duration(time.Duration(days) * 24 * time.Hour)
	return nil
}

func parseLocal(d *caddyfile.Dispenser, l *AuthLocal) error {
	if d.NextArg() {
		return d.ArgErr()
	}
	seen := blockOptions{}
	for n := d.Nesting(); d.NextBlock(n); {
		if err := seen.once(d); err != nil {
			return err
		}
		var err error
		switch d.Val() {
		case "sign_key":
			err = oneArg(d, &l.SignKey)
		case "key_rotation":
			err = durationArg(d, &l.KeyRotation)
		case "key_rotation_days":
			err = keyRotationDaysArg(d, &l.KeyRotation)
		case "max_keys":
			err = positiveIntArg(d, &l.MaxKeys)
		default:
			return d.Errf("local: unrecognized subdirective %q", d.Val())
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func parseRefresh(d *caddyfile.Dispenser, r *AuthRefresh) error {
	if d.NextArg() {
		return d.ArgErr()
	}
	seen := blockOptions{}
	for n := d.Nesting(); d.NextBlock(n); {
		if err := seen.once(d); err != nil {
			return err
		}
		var err error
		switch d.Val() {
		case "enabled":
			err = optBool(d, &r.Enabled)
		case "skew":
			err = durationArg(d, &r.Skew)
		case "access_token_ttl":
			err = positiveDurationArg(d, &r.AccessTokenTTL)
		case "refresh_token_ttl":
			err = positiveDurationArg(d, &r.RefreshTokenTTL)
		case "rotate_refresh_token":
			var b bool
			err = optBool(d, &b)
			r.RotateRefreshToken = &b
		case "reuse_grace":
			err = durationArg(d, &r.ReuseGrace)
		default:
			return d.Errf("refresh: unrecognized subdirective %q", d.Val())
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// parseClientIDMetadata reads the client_id_metadata block: Client ID
// Metadata Documents, on when the block is present (or `true`).
func parseClientIDMetadata(d *caddyfile.Dispenser, cfg *AuthConfig) error {
	m := &AuthClientIDMetadata{Enabled: true}
	cfg.ClientIDMetadata = m
	if d.NextArg() {
		b, err := strconv.ParseBool(d.Val())
		if err != nil || d.NextArg() {
			return d.Errf("client_id_metadata: want [true|false] and a block")
		}
		m.Enabled = b
	}
	seen := blockOptions{}
	for n := d.Nesting(); d.NextBlock(n); {
		if err := seen.once(d, "allow_private_host"); err != nil {
			return err
		}
		var err error
		switch d.Val() {
		case "max_document_bytes":
			var s string
			if err = oneArg(d, &s); err == nil {
				if m.MaxDocumentBytes, err = strconv.Atoi(s); err != nil || m.MaxDocumentBytes <= 0 {
					err = d.Errf("max_document_bytes: %q is not a positive number of bytes", s)
				}
			}
		case "fetch_timeout":
			err = positiveDurationArg(d, &m.FetchTimeout)
		case "max_cache_ttl":
			err = positiveDurationArg(d, &m.MaxCacheTTL)
		case "allow_private_host":
			hosts := d.RemainingArgs()
			if len(hosts) == 0 {
				return d.ArgErr()
			}
			m.AllowedPrivateHosts = append(m.AllowedPrivateHosts, hosts...)
		case "trust_pool":
			if !d.NextArg() {
				return d.ArgErr()
			}
			stem := d.Val()
			unm, err := caddyfile.UnmarshalModule(d, "tls.ca_pool.source."+stem)
			if err != nil {
				return err
			}
			if _, ok := unm.(caddytls.CA); !ok {
				return d.Errf("trust_pool: module %s is not a CA pool", stem)
			}
			m.TrustPoolRaw = caddyconfig.JSONModuleObject(unm, "provider", stem, nil)
		default:
			return d.Errf("client_id_metadata: unrecognized subdirective %q", d.Val())
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func parseClient(d *caddyfile.Dispenser) (oauth.ClientConfig, error) {
	var c oauth.ClientConfig
	if err := oneArg(d, &c.ID); err != nil {
		return c, err
	}
	seen := blockOptions{}
	for n := d.Nesting(); d.NextBlock(n); {
		if err := seen.once(d, "redirect_uri", "redirect_uris"); err != nil {
			return oauth.ClientConfig{}, err
		}
		var err error
		switch d.Val() {
		case "secret":
			err = oneArg(d, &c.Secret)
		case "name":
			c.Name = strings.Join(d.RemainingArgs(), " ")
			if c.Name == "" {
				err = d.ArgErr()
			}
		case "redirect_uri", "redirect_uris":
			uris := d.RemainingArgs()
			if len(uris) == 0 {
				err = d.ArgErr()
			}
			c.RedirectURIs = append(c.RedirectURIs, uris...)
		case "scopes":
			c.Scopes = d.RemainingArgs()
			if len(c.Scopes) == 0 {
				err = d.ArgErr()
			}
		default:
			return c, d.Errf("client: unrecognized subdirective %q", d.Val())
		}
		if err != nil {
			return c, err
		}
	}
	if len(c.RedirectURIs) == 0 {
		return c, d.Errf("client %q: redirect_uri is required", c.ID)
	}
	return c, nil
}

// parseTokenRateLimit reads `token_rate_limit <max> [<window>] [ip|global]`.
func parseTokenRateLimit(d *caddyfile.Dispenser) (*RateLimit, error) {
	args := d.RemainingArgs()
	if len(args) < 1 || len(args) > 3 {
		return nil, d.Errf("token_rate_limit: want <max_requests> [<window>] [ip|global]")
	}
	n, err := strconv.ParseInt(args[0], 10, 64)
	if err != nil || n <= 0 {
		return nil, d.Errf("token_rate_limit: %q is not a positive number of requests", args[0])
	}
	rl := &RateLimit{MaxRequests: n}
	for _, a := range args[1:] {
		switch a {
		case guard.PartitionIP, guard.PartitionGlobal:
			rl.PartitionBy = a
		default:
			dur, err := caddy.ParseDuration(a)
			if err != nil || dur < time.Millisecond {
				return nil, d.Errf("token_rate_limit: %q is not a window duration or ip|global", a)
			}
			rl.Window = caddy.Duration(dur)
		}
	}
	return rl, nil
}
