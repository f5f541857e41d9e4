// Package oauth is the OAuth 2.1 authorization server of caddy-codemode's
// orchestrated mode: it issues the access and refresh tokens that MCP
// clients present to the gateway.
//
// It is built on zitadel/oidc's op package with its own op.Storage (memory
// or Redis) and tightens op where the OAuth 2.1 and MCP rules are stricter:
// PKCE with S256 only for every client, exact redirect-URI match, state
// required, single-use authorization codes that live 60 seconds, refresh
// tokens rotated on every use with reuse detection that revokes the whole
// chain. It adds what op lacks: RFC 7591 dynamic client registration, RFC
// 8414 server metadata, an RFC 7009 revocation endpoint, a login page and a
// consent screen, signing-key rotation, and listeners told when a session
// is revoked (users' upstream credentials are cleared then).
//
// The package is plain Go: caddymodules wraps Server.Handler in a Caddy
// handler and Server.VerifyAccessToken in a Caddy authentication provider.
package oauth
