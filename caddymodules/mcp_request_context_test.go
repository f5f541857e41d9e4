package caddymodules

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/codemode-gateway/caddy-codemode/internal/identity"
	"github.com/codemode-gateway/caddy-codemode/internal/telemetry"
	"github.com/codemode-gateway/caddy-codemode/metatools"
)

// TestMCPRequestContextReachesMetaTools: the request codemode_mcp serves
// goes through metatools.HTTPHandler, and a meta-tool call (which the
// go-sdk runs on its session's context, with only the request's header)
// gets the request's span, request id and signed-in user back through
// mcpRequestContext. codemode_mcp once registered the request under a
// reference of its own that metatools.HTTPHandler then replaced, so all
// three were lost on the handshake revisions. A reference a client sends
// finds nothing.
func TestMCPRequestContextReachesMetaTools(t *testing.T) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled})
	r := httptest.NewRequest(http.MethodPost, "/mcp", nil)
	r.Header.Set("X-Request-Id", "req-42")
	r.Header.Set("Codemode-Request-Ref", "made-up")
	ctx := trace.ContextWithSpanContext(r.Context(), sc)
	ctx = identity.With(ctx, &identity.Identity{Issuer: "https://gw.example", Subject: "alice"})
	w := httptest.NewRecorder()
	// What MCPHandler.ServeHTTP does before the go-sdk handler.
	r = withRequestID(w, r.WithContext(ctx))
	r = r.WithContext(metatools.WithIdentity(r.Context(), metatools.Identity{UserID: "alice"}))

	var got context.Context
	var clientRef bool
	metatools.HTTPHandler(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		got = mcpRequestContext(context.Background(), r.Header)
		h := http.Header{}
		h.Set("Codemode-Request-Ref", "made-up")
		_, clientRef = metatools.RequestContextOf(h)
	})).ServeHTTP(w, r)

	if s := trace.SpanContextFromContext(got); s.TraceID() != sc.TraceID() || s.SpanID() != sc.SpanID() {
		t.Errorf("span not handed over: %v", s)
	}
	if id := telemetry.RequestID(got); id != "req-42" {
		t.Errorf("request id %q, want req-42", id)
	}
	if id, ok := identity.From(got); !ok || id.Subject != "alice" {
		t.Errorf("signed-in user not handed over: %v %v", id, ok)
	}
	if clientRef {
		t.Error("a reference the client made up found a request context")
	}
	if _, ok := metatools.RequestContextOf(r.Header); ok {
		t.Error("the request's context is still registered after it was served")
	}
}
