package caddymodules

import (
	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// BrokerConfig is the `broker` part of the codemode app. Not built yet: the
// area's issue replaces this file.
type BrokerConfig struct{}

// brokerState is what the area keeps at run time.
type brokerState struct{}

func (a *App) provisionBroker(caddy.Context) error { return nil }
func (a *App) cleanupBroker() error                { return nil }

// parseBroker parses the `broker` subdirective of the codemode global option.
func parseBroker(d *caddyfile.Dispenser) (*BrokerConfig, error) {
	return nil, d.Errf("codemode: %q is not available in this build yet", d.Val())
}

func (a *App) startBroker() error { return nil }
func (a *App) stopBroker() error  { return nil }
