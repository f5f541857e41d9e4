package caddymodules

import (
	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// MetaConfig is the `meta` part of the codemode app. Not built yet: the
// area's issue replaces this file.
type MetaConfig struct{}

// metaState is what the area keeps at run time.
type metaState struct{}

func (a *App) provisionMeta(caddy.Context) error { return nil }
func (a *App) cleanupMeta() error                { return nil }

// parseMeta parses the `meta` subdirective of the codemode global option.
func parseMeta(d *caddyfile.Dispenser) (*MetaConfig, error) {
	return nil, d.Errf("codemode: %q is not available in this build yet", d.Val())
}

func (a *App) startMeta() error { return nil }
func (a *App) stopMeta() error  { return nil }
