package metatools

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"sync"
)

// Identity is who a request to the meta-tools comes from, as the
// authentication in front of them established it: it partitions rate
// limits and owns the broker sessions the meta-tools start.
type Identity struct {
	// UserID is the authenticated user; empty when anonymous.
	UserID string
	// TenantID is the user's tenant, when known.
	TenantID string
	// ClientIP is the client address, when known.
	ClientIP string
	// ClientKey is ClientIP's key in per-address limits
	// (guard.ClientPrefixes.Key with the front end's prefixes: an IPv6
	// address's /64 by default); empty means the default prefixes'.
	ClientKey string
}

type identityKey struct{}

// WithIdentity returns a context carrying id. An HTTP front end puts it on
// each request before HTTPHandler; nothing a client sends can set it.
func WithIdentity(ctx context.Context, id Identity) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}

// IdentityFrom returns the Identity placed by WithIdentity.
func IdentityFrom(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(identityKey{}).(Identity)
	return id, ok
}

// requestRefHeader carries a reference to the HTTP request that delivers
// a JSON-RPC message. The go-sdk runs tool handlers on its session's
// context, not the request's, and hands them the request's headers;
// HTTPHandler sets this header to a fresh random reference (replacing
// whatever the client sent) and the meta-tools look the request's context
// up in inflight while the request is being served. A reference a client
// makes up matches nothing.
const requestRefHeader = "Codemode-Request-Ref"

// inflight maps the references of requests being served to their context.
var inflight sync.Map // ref -> context.Context

// HTTPHandler wraps an MCP HTTP handler serving the meta-tools (go-sdk's
// Streamable HTTP handler over NewServer) so that each request's context
// reaches the meta-tools that request calls: the Identity in it
// (WithIdentity), and whatever Options.RequestContext takes from it
// (RequestContextOf).
func HTTPHandler(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b [16]byte
		_, _ = rand.Read(b[:])
		ref := hex.EncodeToString(b[:])
		inflight.Store(ref, r.Context())
		defer inflight.Delete(ref)
		r.Header.Set(requestRefHeader, ref)
		h.ServeHTTP(w, r)
	})
}

// RequestContextOf returns the context of the HTTP request, served through
// HTTPHandler, whose header a meta-tool call received.
func RequestContextOf(h http.Header) (context.Context, bool) {
	ref := h.Get(requestRefHeader)
	if ref == "" {
		return nil, false
	}
	v, ok := inflight.Load(ref)
	if !ok {
		return nil, false
	}
	return v.(context.Context), true
}

// identityOf resolves the Identity of the request whose header h is.
func identityOf(h http.Header) (Identity, bool) {
	ctx, ok := RequestContextOf(h)
	if !ok {
		return Identity{}, false
	}
	return IdentityFrom(ctx)
}
