package caddymodules

import (
	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// ThrottleConfig is the `throttle` part of the codemode app. Not built yet: the
// area's issue replaces this file.
type ThrottleConfig struct{}

// throttleState is what the area keeps at run time.
type throttleState struct{}

func (a *App) provisionThrottle(caddy.Context) error { return nil }
func (a *App) cleanupThrottle() error                { return nil }

// parseThrottle parses the `throttle` subdirective of the codemode global option.
func parseThrottle(d *caddyfile.Dispenser) (*ThrottleConfig, error) {
	return nil, d.Errf("codemode: %q is not available in this build yet", d.Val())
}
