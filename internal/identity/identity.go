// Package identity carries the caller that a front end (the Caddy handlers,
// an embedder's own authentication) authenticated, in the request context.
// Tool sources read it from there to act as that caller upstream; nothing
// reads identity from a request header.
package identity

import "context"

// Identity is an authenticated caller.
type Identity struct {
	// Issuer is the authority that vouches for Subject: the gateway's own
	// authorization server, or the external identity provider.
	Issuer string
	// Subject is the user (the token's sub). A token without a subject
	// (a machine client) has its client id here.
	Subject string
	// ClientID is the OAuth client the caller used, when known.
	ClientID string
	// TenantID is the tenant claim, when present.
	TenantID string
	// SessionID is the grant of the gateway's own authorization server
	// (the token's sid), empty for external tokens.
	SessionID string
}

type key struct{}

// With returns ctx carrying id. A nil id, or one without a subject, leaves
// ctx anonymous.
func With(ctx context.Context, id *Identity) context.Context {
	if id == nil || id.Subject == "" {
		return ctx
	}
	return context.WithValue(ctx, key{}, id)
}

// From returns the identity in ctx, if any.
func From(ctx context.Context) (*Identity, bool) {
	id, ok := ctx.Value(key{}).(*Identity)
	return id, ok && id != nil
}
