// Package credential lets each user of a gateway call upstream APIs with
// their own account: OpenAPI sources and upstream MCP servers configured
// with a `user` credential mode get the calling user's credential, never a
// shared one, and the sandboxed script never sees it.
//
// The pieces:
//
//   - Vault: users' credentials sealed with AES-256-GCM under a rotatable
//     keyring, one record per user and service, in a Store (memory or
//     Redis, so every gateway sees the same connections).
//   - Manager: resolves the caller's credential for a source (the caller
//     comes from the request context, package internal/identity), places
//     it on the outbound request (header with scheme, or query parameter),
//     refreshes OAuth access tokens before they expire (one refresh per
//     user and service across gateways, rotation kept), and answers
//     CREDENTIAL_REQUIRED with the connect URL when there is none.
//   - The connections pages (Manager.Handler): the user signs in (OpenID
//     Connect code flow against the gateway's authorization server or
//     identity provider), then connects a service by OAuth 2.1
//     authorization code with PKCE at the upstream, or by pasting an API
//     key, and disconnects (revoking at the upstream).
//
// It is a plain Go library; the Caddy side (package caddymodules) wires it
// to the configuration, the catalog and the upstream MCP servers.
package credential
