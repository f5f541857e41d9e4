package caddymodules

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyevents"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/codemode-gateway/caddy-codemode/broker"
	"github.com/codemode-gateway/caddy-codemode/broker/catalog"
	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"
	"github.com/codemode-gateway/caddy-codemode/guard"
	"github.com/codemode-gateway/caddy-codemode/internal/identity"
	"github.com/codemode-gateway/caddy-codemode/internal/telemetry"
	"github.com/codemode-gateway/caddy-codemode/metatools"
	"github.com/codemode-gateway/caddy-codemode/oauth"
)

// Observability of the codemode modules (docs/observability.md):
//
//   - metrics: every package's collectors live for the whole process and are
//     registered into the registry of each config Caddy loads (Caddy builds a
//     new registry per load, and the components a reload keeps must keep
//     counting where /metrics looks). Registering into the same registry
//     twice is not an error.
//   - events: the spec's lifecycle events of every broker and of the
//     meta-tools go to the events app of the running config.
//   - request ids: the caller's X-Request-Id (a short token) or Caddy's
//     {http.request.uuid} names each request in the X-Request-Id header,
//     the logs and 5xx bodies.

// telemetrySet is the process's collectors, one per package.
type telemetrySet struct {
	guard   *guard.Metrics
	broker  *broker.Metrics
	sandbox *sandbox.Metrics
	catalog *catalog.Metrics
	meta    *metatools.Metrics
	oauth   *oauth.Metrics
	auth    *authMetrics
}

var processTelemetry = sync.OnceValue(func() *telemetrySet {
	auth, _ := newAuthMetrics(nil) // cannot fail without a registry
	return &telemetrySet{
		guard:   guard.NewMetrics(),
		broker:  broker.NewMetrics(),
		sandbox: sandbox.NewMetrics(),
		catalog: catalog.NewMetrics(),
		meta:    metatools.NewMetrics(),
		oauth:   oauth.NewMetrics(),
		auth:    auth,
	}
})

// collectors are every collector of the set.
func (t *telemetrySet) collectors() []prometheus.Collector {
	return []prometheus.Collector{t.guard, t.broker, t.sandbox, t.catalog, t.meta, t.oauth,
		t.auth.failures, t.auth.tokenLatency, t.auth.rateLimited}
}

// register adds every collector to reg; those already there stay.
func (t *telemetrySet) register(reg prometheus.Registerer) error {
	for _, c := range t.collectors() {
		if err := telemetry.Register(reg, c); err != nil {
			return err
		}
	}
	return nil
}

// eventSink is the events app of one loaded config and the context events
// are emitted with (its module, the codemode app, is their origin).
type eventSink struct {
	app *caddyevents.App
	ctx caddy.Context
}

// runningEvents is the sink of the config that started last. Brokers and
// indexes outlive configs (a reload keeps or drains them), so their
// listeners look it up at each event instead of keeping one.
var runningEvents atomic.Pointer[eventSink]

// provisionTelemetry registers the metrics and finds the events app.
func (a *App) provisionTelemetry(ctx caddy.Context) error {
	if err := processTelemetry().register(ctx.GetMetricsRegistry()); err != nil {
		return fmt.Errorf("codemode: metrics: %w", err)
	}
	ev, err := ctx.App("events")
	if err != nil {
		return fmt.Errorf("codemode: loading the events app: %w", err)
	}
	a.events = &eventSink{app: ev.(*caddyevents.App), ctx: ctx}
	if err := a.events.app.On("stopping", exitHandler{a}); err != nil {
		return fmt.Errorf("codemode: subscribing to the stopping event: %w", err)
	}
	return nil
}

// startTelemetry makes this config's events app the one events go to.
func (a *App) startTelemetry() error {
	if a.events != nil {
		runningEvents.Store(a.events)
	}
	return nil
}

// stopTelemetry forgets this config's events app unless a newer config
// already took over.
func (a *App) stopTelemetry() error {
	if a.events != nil {
		runningEvents.CompareAndSwap(a.events, nil)
	}
	return nil
}

// emitEvent emits a lifecycle event into the running config's events app.
// Handlers run synchronously; an abort does not change the execution.
func emitEvent(ev broker.Event, path string) {
	s := runningEvents.Load()
	if s == nil || !s.app.ShouldEmit(ev.Name) {
		return
	}
	s.app.Emit(s.ctx, ev.Name, eventData(ev, path))
}

// Paths of the executions events come from (data key "path").
const (
	eventPathBroker      = "broker"
	eventPathMetaExecute = "meta_execute"
	eventPathMetaInvoke  = "meta_invoke"
)

// eventData is the documented, secret-free payload of an event: ids,
// names, counts, statuses and error codes; never inputs, results, scripts,
// credentials or error messages (they may quote data).
func eventData(ev broker.Event, path string) map[string]any {
	d := map[string]any{"path": path}
	if s := ev.Session; s != nil {
		d["session_id"] = s.ID
		d["status"] = s.Status
		d["tool_calls"] = s.ToolCalls
		if s.UserID != "" {
			d["user_id"] = s.UserID
		}
		if s.TenantID != "" {
			d["tenant_id"] = s.TenantID
		}
		if ev.Name == broker.OnSessionCompleted || ev.Name == broker.OnSessionError {
			d["duration_ms"] = s.UpdatedAt - s.CreatedAt
		}
		if ev.Name == broker.OnSessionError && s.Error != nil {
			d["script_status"] = s.Error.ScriptStatus
		}
	}
	if ev.Name == broker.OnToolCalled || ev.Name == broker.OnToolCompleted {
		name := ev.Tool
		if len(name) > 128 {
			name = name[:128]
		}
		d["tool"] = name
		d["call_id"] = ev.CallID
	}
	if ev.Name == broker.OnToolCompleted {
		d["outcome"] = "ok"
	}
	if ev.Err != nil {
		code := broker.CodeToolExecutionError
		var te *sandbox.ToolError
		if errors.As(ev.Err, &te) {
			code = te.Code
		}
		d["error_code"] = code
		if ev.Name == broker.OnToolCompleted {
			d["outcome"] = "error"
		}
	}
	return d
}

// forwardBrokerEvents sends a broker's lifecycle events to the events app.
func forwardBrokerEvents(b *broker.Broker) error {
	for _, name := range broker.EventNames {
		if err := b.On(name, func(ev broker.Event) { emitEvent(ev, eventPathBroker) }); err != nil {
			return err
		}
	}
	return nil
}

// metaEvents is the meta-tools' listener: a plan run by their own engine,
// and meta:invoke (no session).
func metaEvents(ev broker.Event) {
	path := eventPathMetaExecute
	if ev.Session == nil {
		path = eventPathMetaInvoke
	}
	emitEvent(ev, path)
}

// withRequestID gives r its request id in its context, and w the
// X-Request-Id header: the caller's X-Request-Id when it is a short token (a
// load balancer's, as the broker takes it), else the id Caddy made for the
// request ({http.request.uuid}).
func withRequestID(w http.ResponseWriter, r *http.Request) *http.Request {
	if telemetry.RequestID(r.Context()) != "" {
		return r // an earlier codemode handler of this request set it
	}
	id := r.Header.Get("X-Request-Id")
	if !telemetry.ValidRequestID(id) {
		repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
		if !ok {
			return r
		}
		if id, _ = repl.GetString("http.request.uuid"); id == "" {
			return r
		}
	}
	w.Header().Set("X-Request-Id", id)
	return r.WithContext(telemetry.WithRequestID(r.Context(), id))
}

// mcpRequestContext is the meta-tools' RequestContextFunc: the trace span,
// request id and authenticated user of the HTTP request that carried the
// call (metatools.HTTPHandler hands its context over), bounded by the
// process's exit (untilPlansExit).
func mcpRequestContext(ctx context.Context, h http.Header) context.Context {
	ctx = untilPlansExit(ctx)
	rctx, ok := metatools.RequestContextOf(h)
	if !ok {
		return ctx
	}
	if span := trace.SpanFromContext(rctx); span.SpanContext().IsValid() {
		ctx = trace.ContextWithSpan(ctx, span)
	}
	if id, ok := identity.From(rctx); ok { // the signed-in user, for sources that act as them
		ctx = identity.With(ctx, id)
	}
	return telemetry.WithRequestID(ctx, telemetry.RequestID(rctx))
}
