package caddymodules

import (
	"context"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyevents"
)

// When Caddy exits (SIGTERM, SIGINT, `caddy stop`, the admin API's /stop)
// without a grace_period, its HTTP servers wait for every open request
// before the apps are cleaned up. Two kinds of request would hold that
// forever or for as long as an execution may run: an MCP GET stream, which
// ends only when its session does (and sessions end at cleanup), and an
// /execute stream whose session waits for a caller that can no longer reach
// this gateway. Caddy emits `stopping` before it stops the servers, so the
// codemode app subscribes to it: when the process is exiting, processExit
// is cancelled (ending the GET streams) and the broker starts draining its
// sessions at once, for its drain_timeout, then aborts the rest with
// SHUTTING_DOWN. A reload also emits `stopping` for the old config; it
// changes nothing then (the streams and sessions carry over).
var processExit, exitNow = context.WithCancel(context.Background())

// untilExit bounds ctx by the process's exit.
func untilExit(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(processExit, cancel)
	return ctx, func() { stop(); cancel() }
}

// exitHandler is the codemode app's handler of Caddy's `stopping` event.
type exitHandler struct{ a *App }

func (h exitHandler) Handle(context.Context, caddy.Event) error {
	if caddy.Exiting() {
		h.a.beginExit()
	}
	return nil
}

// beginExit ends the GET streams and starts the broker's drain.
func (a *App) beginExit() {
	exitNow()
	if a.broker.brokerRuntime == nil {
		return
	}
	a.broker.mu.Lock()
	sb, released := a.broker.shared, a.broker.released
	a.broker.mu.Unlock()
	if sb != nil && !released {
		go sb.drainOnExit()
	}
}

var _ caddyevents.Handler = exitHandler{}
