package caddymodules

import (
	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// SandboxConfig is the `sandbox` part of the codemode app. Not built yet: the
// area's issue replaces this file.
type SandboxConfig struct{}

// sandboxState is what the area keeps at run time.
type sandboxState struct{}

func (a *App) provisionSandbox(caddy.Context) error { return nil }
func (a *App) cleanupSandbox() error                { return nil }

// parseSandbox parses the `sandbox` subdirective of the codemode global option.
func parseSandbox(d *caddyfile.Dispenser) (*SandboxConfig, error) {
	return nil, d.Errf("codemode: %q is not available in this build yet", d.Val())
}
