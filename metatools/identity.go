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

// requestRefHeader carries a reference to the identity of the HTTP request
// that delivers a JSON-RPC message. The go-sdk runs tool handlers on its
// session's context, not the request's, and hands them the request's
// headers; HTTPHandler sets this header to a fresh random reference
// (replacing whatever the client sent) and the meta-tools look it up in
// inflight while the request is being served. A reference a client makes
// up matches nothing.
const requestRefHeader = "Codemode-Request-Ref"

// inflight maps the references of requests being served to their identity.
var inflight = struct {
	sync.Mutex
	m map[string]Identity
}{m: map[string]Identity{}}

// HTTPHandler wraps an MCP HTTP handler serving the meta-tools (go-sdk's
// Streamable HTTP handler over NewServer) so that the Identity in each
// request's context reaches the meta-tools that request calls.
func HTTPHandler(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Del(requestRefHeader)
		id, ok := IdentityFrom(r.Context())
		if !ok {
			h.ServeHTTP(w, r)
			return
		}
		var b [16]byte
		_, _ = rand.Read(b[:])
		ref := hex.EncodeToString(b[:])
		inflight.Lock()
		inflight.m[ref] = id
		inflight.Unlock()
		defer func() {
			inflight.Lock()
			delete(inflight.m, ref)
			inflight.Unlock()
		}()
		r.Header.Set(requestRefHeader, ref)
		h.ServeHTTP(w, r)
	})
}

// identityOf resolves the reference in a request's headers.
func identityOf(h http.Header) (Identity, bool) {
	ref := h.Get(requestRefHeader)
	if ref == "" {
		return Identity{}, false
	}
	inflight.Lock()
	defer inflight.Unlock()
	id, ok := inflight.m[ref]
	return id, ok
}
