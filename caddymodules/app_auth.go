package caddymodules

import (
	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// AuthConfig is the `auth` part of the codemode app. Not built yet: the
// area's issue replaces this file.
type AuthConfig struct{}

// authState is what the area keeps at run time.
type authState struct{}

func (a *App) provisionAuth(caddy.Context) error { return nil }
func (a *App) cleanupAuth() error                { return nil }

// parseAuth parses the `auth` subdirective of the codemode global option.
func parseAuth(d *caddyfile.Dispenser) (*AuthConfig, error) {
	return nil, d.Errf("codemode: %q is not available in this build yet", d.Val())
}
