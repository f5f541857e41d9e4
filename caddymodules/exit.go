package caddymodules

import (
	"context"
	"errors"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyevents"

	"github.com/codemode-gateway/caddy-codemode/broker"
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

// plansExit ends, with errPlansDrained as its cause, drain_timeout after the
// process began to exit: the meta-tool calls still running then (a
// meta:execute plan of an older MCP revision waiting for its client's
// elicitation answer, which runs in its tools/call request and not as a
// broker session) are aborted and answered, so that Caddy's servers, which
// wait for every open request, let the process exit. Before, such a plan
// held the exit until its execution timeout (30 s by default).
var plansExit, endPlans = context.WithCancelCause(context.Background())

// errPlansDrained is why a meta-tool call still running drain_timeout
// after the process began to exit was aborted.
var errPlansDrained = errors.New("the gateway is stopping and the call was still running when the time given to running work (drain_timeout) ended")

// untilPlansExit bounds a meta-tool call's ctx by plansExit. The bound is
// dropped when ctx ends (the go-sdk ends each call's context when the call
// is answered), so calls leave nothing registered on plansExit.
func untilPlansExit(ctx context.Context) context.Context {
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(plansExit, func() { cancel(context.Cause(plansExit)) })
	context.AfterFunc(ctx, func() { stop() })
	return ctx
}

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
	drain := broker.DefaultDrainTimeout
	if a.Broker != nil {
		drain = time.Duration(a.Broker.withDefaults().DrainTimeout)
	}
	time.AfterFunc(drain, func() { endPlans(errPlansDrained) })
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
