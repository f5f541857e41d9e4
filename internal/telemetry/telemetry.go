// Package telemetry is what the core packages share to be observed: child
// spans on the tracer of the request's own span, W3C trace context on
// outbound calls, the request and session ids carried in a context (and the
// log fields made of them), bounded label values for error codes, and
// collector registration that tolerates a second registration.
//
// It imports no Caddy: Caddy's `tracing` handler puts its span in the request
// context, and a span started here from that context belongs to the same
// tracer provider. Without a span in the context nothing is recorded and
// nothing is allocated.
package telemetry

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
)

// Instrumentation is the instrumentation scope name of every span.
const Instrumentation = "github.com/codemode-gateway/caddy-codemode"

// StartSpan starts a child of the span in ctx on that span's tracer
// provider. Without a valid span in ctx it returns ctx and a span that
// records nothing.
func StartSpan(ctx context.Context, name string, kind trace.SpanKind, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.SpanContext().IsValid() {
		return ctx, parent
	}
	return parent.TracerProvider().Tracer(Instrumentation).Start(ctx, name,
		trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
}

// EndSpan ends span; a non-empty code marks it failed and is recorded as
// the attribute codemode.error.code (the code, never a message: messages
// may quote inputs).
func EndSpan(span trace.Span, code string) {
	if code != "" && span.IsRecording() {
		span.SetAttributes(attribute.String("codemode.error.code", code))
		span.SetStatus(codes.Error, code)
	}
	span.End()
}

var traceContext = propagation.TraceContext{}

// Inject writes the W3C trace context (traceparent, tracestate) of the span
// in ctx into h; nothing when ctx has no valid span.
func Inject(ctx context.Context, h http.Header) {
	if trace.SpanContextFromContext(ctx).IsValid() {
		traceContext.Inject(ctx, propagation.HeaderCarrier(h))
	}
}

type requestIDKey struct{}
type sessionIDKey struct{}

// WithRequestID returns ctx carrying the id of the HTTP request being
// served; log lines and 5xx answers made under ctx show it.
func WithRequestID(ctx context.Context, id string) context.Context {
	if id == "" {
		return ctx
	}
	return context.WithValue(ctx, requestIDKey{}, id)
}

// RequestID returns the id placed by WithRequestID, or "".
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

// ValidRequestID reports whether id, taken from a caller (a load
// balancer's X-Request-Id), may serve as the request id: a short token of
// letters, digits, '-', '_' and '.', nothing that could forge a log line.
func ValidRequestID(id string) bool {
	return id != "" && len(id) <= 64 && strings.Trim(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") == ""
}

// WithSessionID returns ctx carrying the execution's session id.
func WithSessionID(ctx context.Context, id string) context.Context {
	if id == "" {
		return ctx
	}
	return context.WithValue(ctx, sessionIDKey{}, id)
}

// SessionID returns the id placed by WithSessionID, or "".
func SessionID(ctx context.Context) string {
	id, _ := ctx.Value(sessionIDKey{}).(string)
	return id
}

// LogFields are the fields that tie a log line to its request and session:
// request_id and session_id, each when known.
func LogFields(ctx context.Context) []zap.Field {
	var f []zap.Field
	if id := RequestID(ctx); id != "" {
		f = append(f, zap.String("request_id", id))
	}
	if id := SessionID(ctx); id != "" {
		f = append(f, zap.String("session_id", id))
	}
	return f
}

// Logger returns l with the LogFields of ctx.
func Logger(ctx context.Context, l *zap.Logger) *zap.Logger {
	if f := LogFields(ctx); len(f) > 0 {
		return l.WithLazy(f...)
	}
	return l
}

// knownCodes are the error codes of every package of this module: the only
// codes that become label values. A code from elsewhere (a caller's answer,
// an upstream server) is "other", so that label sets stay bounded.
var knownCodes = sync.OnceValue(func() map[string]bool {
	m := map[string]bool{}
	for _, c := range strings.Fields(`ACCESS_DENIED ALREADY_SIGNED_IN CALLER_ANSWER_INVALID CALLER_CANCELLED CALLER_DECLINED
		CALL_ALREADY_ANSWERED CANCELED CONCURRENCY_LIMIT ENGINE_ERROR EXECUTION_ABORTED EXECUTION_ERROR
		EXECUTION_TIMEOUT INTERNAL_ERROR INVALID_REQUEST INVALID_REQUEST_STATE IP_BLOCKED IP_NOT_ALLOWED
		MESSAGE_FLOOD MESSAGE_INVALID MESSAGE_TOO_LARGE METHOD_NOT_ALLOWED NOT_FOUND NO_BASE_URL
		PAYLOAD_TOO_LARGE POOL_DISPOSED QUEUE_FULL QUEUE_TIMEOUT RATE_LIMIT RESPONSE_TOO_LARGE
		SEARCH_UNAVAILABLE SELF_REFERENCE_BLOCKED SESSION_FINISHED SESSION_LIMIT SHUTTING_DOWN
		STORAGE_ERROR STORAGE_UNAVAILABLE SYNTAX_ERROR TIMEOUT TOOL_CALL_LIMIT TOOL_EXECUTION_ERROR
		TOOL_NOT_CALLABLE TOOL_NOT_FOUND TOO_MANY_PENDING_CALLS UNAUTHORIZED UNSUPPORTED_MEDIA_TYPE
		UPSTREAM_ERROR UPSTREAM_QUESTION_REFUSED UPSTREAM_UNAVAILABLE UPSTREAM_UNREACHABLE VALIDATION_ERROR WORKER_CRASHED
		WORKER_LOST WORKER_MEMORY_EXCEEDED WORKER_STARTUP_FAILED WORKER_TIMEOUT LIMIT_EXCEEDED OWNER_LOST
		CREDENTIAL_REQUIRED CREDENTIAL_UNAVAILABLE STREAM_LIMIT ORIGIN_NOT_ALLOWED INSUFFICIENT_SCOPE LOGIN_BUSY
		API_KEY_INVALID FORM_INVALID CROSS_SITE_REQUEST CSRF_INVALID PAGE_SIGN_IN_REQUIRED STATE_INVALID OTHER_BROWSER
		ISSUER_MISMATCH UPSTREAM_ENDPOINT_REFUSED UPSTREAM_REGISTRATION_FAILED REDIRECT_URI_MISMATCH CALL_ABANDONED KV_FULL`) {
		m[c] = true
	}
	return m
})

// Outcome is the label value of an error code: "ok" for none, the code in
// lower case when this module defines it, else "other".
func Outcome(code string) string {
	switch {
	case code == "":
		return "ok"
	case knownCodes()[code]:
		return strings.ToLower(code)
	}
	return "other"
}

// Register registers c with reg. Registering the same collector again is
// not an error: a config reload provisions again with the collectors that
// live for the whole process. A different collector under the same names is.
func Register(reg prometheus.Registerer, c prometheus.Collector) error {
	if reg == nil || c == nil {
		return nil
	}
	err := reg.Register(c)
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) && are.ExistingCollector == c {
		return nil
	}
	return err
}

// Collectors are collected and described as one: the Metrics type of each
// core package keeps its collectors in one.
type Collectors []prometheus.Collector

// Describe implements prometheus.Collector.
func (cs Collectors) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range cs {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (cs Collectors) Collect(ch chan<- prometheus.Metric) {
	for _, c := range cs {
		c.Collect(ch)
	}
}

// Series caches the series of a vector for a fixed list of label values
// (the last label, when the vector has more: get binds the others). A
// vector's lookup hashes the values and takes a lock each time, and the
// core packages record several series per request or execution. A series
// is created on its first use, as with the vector alone; values outside the
// list go to the vector each time.
type Series[T any] struct {
	values []string
	cached []atomic.Pointer[T]
	get    func(...string) T
}

// NewSeries caches get's series of values.
func NewSeries[T any](get func(...string) T, values ...string) *Series[T] {
	return &Series[T]{values: values, cached: make([]atomic.Pointer[T], len(values)), get: get}
}

// Of is the series of label value v.
func (s *Series[T]) Of(v string) T {
	for i, k := range s.values {
		if k != v {
			continue
		}
		if p := s.cached[i].Load(); p != nil {
			return *p
		}
		x := s.get(v)
		s.cached[i].Store(&x)
		return x
	}
	return s.get(v)
}

// Buckets of the duration histograms, in seconds: from a millisecond (a
// guard decision, a registry tool) to a minute (a long script).
var DurationBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
