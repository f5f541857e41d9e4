package credential

import (
	"errors"
	"fmt"
)

// Stable error codes of a call that needs a user's credential.
const (
	// CodeCredentialRequired: the caller has no usable credential for the
	// source (not signed in, never connected, disconnected, or the
	// upstream refused to refresh the connection). Error.ConnectURL is
	// where the user connects; the agent should show it and run the plan
	// again afterwards.
	CodeCredentialRequired = "CREDENTIAL_REQUIRED"
	// CodeCredentialUnavailable: the credential could not be read or
	// refreshed right now (storage or the upstream's authorization server
	// unreachable). Transient.
	CodeCredentialUnavailable = "CREDENTIAL_UNAVAILABLE"
	// CodeEndpointRefused: an upstream's authorization server, token,
	// authorization or revocation endpoint breaks the gateway's rule for
	// where a client secret, a code or a refresh token may go: a
	// configured URL over plain http outside loopback and development, or
	// a discovered one over plain http from metadata read over https, or
	// on an internal address when the configured server is not internal
	// (by name at discovery; by the address dialled when the request is
	// sent, dial.go). Not transient: the configuration or the upstream's metadata must
	// change. A load error when configured; at discovery the call, the
	// connection or its refresh fails and nothing is sent there.
	CodeEndpointRefused = "UPSTREAM_ENDPOINT_REFUSED"
	// CodeRegistrationFailed: a service configured without a client_id,
	// whose authorization server the gateway could not register at (RFC
	// 7591): the server's metadata has no registration_endpoint, the
	// endpoint refused or did not answer in 15 s, or its answer was over
	// 64 KiB, not JSON, without a client_id, or registered a token
	// endpoint method other than none, client_secret_basic and
	// client_secret_post. The connection is not started.
	CodeRegistrationFailed = "UPSTREAM_REGISTRATION_FAILED"
)

// Stable codes of the connections page's refusals, shown on the error page
// in <code id="code">: what a caller sent that the page does not take.
const (
	// CodeAPIKeyInvalid: a pasted API key that is empty, longer than 4096
	// bytes, not UTF-8, or has a character that is not printable (a control
	// character, a line break, an invisible format character such as a
	// zero-width space, a byte order mark or a bidirectional override, a
	// space other than U+0020). The key is not stored.
	CodeAPIKeyInvalid = "API_KEY_INVALID"
	// CodeFormInvalid: a form post that cannot be read: over 16 KiB, a
	// malformed body or query, or a name or value that is not UTF-8.
	CodeFormInvalid = "FORM_INVALID"
	// CodeCrossSite: a form post whose Origin is not the page's own
	// ("null" included).
	CodeCrossSite = "CROSS_SITE_REQUEST"
	// CodeCSRFInvalid: a form post without the page session's CSRF token.
	CodeCSRFInvalid = "CSRF_INVALID"
	// CodePageSignInRequired: a form post without a page session (it ended,
	// or the browser never signed in).
	CodePageSignInRequired = "PAGE_SIGN_IN_REQUIRED"
	// CodeStateInvalid: a sign-in or connection answer without a state, or
	// with one that is unknown, expired or already used.
	CodeStateInvalid = "STATE_INVALID"
	// CodeOtherBrowser: a sign-in or connection answer opened in a browser
	// other than the one that started it.
	CodeOtherBrowser = "OTHER_BROWSER"
	// CodeIssuerMismatch: an upstream's answer whose iss names another
	// authorization server, or has none although the server's metadata
	// says it sends one (RFC 9207); also a page sign-in whose identity
	// provider's discovery document names another issuer (SignIn).
	CodeIssuerMismatch = "ISSUER_MISMATCH"
	// CodeRedirectURIMismatch: an upstream's answer that arrived at a
	// redirect URI other than the one its connection was started with:
	// another service's (the mix-up attack of RFC 9700 section 4.4, where
	// a hostile authorization server sends the browser with its state on
	// to another service's server), or the shared one for a service that
	// has its own.
	CodeRedirectURIMismatch = "REDIRECT_URI_MISMATCH"
)

// Error is a failed credential lookup. Its message never contains a
// credential.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Service is the source whose credential was needed.
	Service string `json:"service"`
	// ConnectURL is the page where the user connects the service.
	ConnectURL string `json:"connectUrl,omitempty"`
	// Transient reports whether retrying later may succeed by itself.
	Transient bool `json:"transient"`
	// Err is the cause; never shown.
	Err error `json:"-"`
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// ErrorCode returns the Code of err when it is (or wraps) an *Error.
func ErrorCode(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// required is CREDENTIAL_REQUIRED for service with why (a sentence start).
func (m *Manager) required(service, why string, cause error) *Error {
	u := m.ConnectURL(service)
	return &Error{Code: CodeCredentialRequired, Service: service, ConnectURL: u, Err: cause,
		Message: fmt.Sprintf("%s: connect it at %s, then run the plan again", why, u)}
}

func unavailable(service string, cause error) *Error {
	return &Error{Code: CodeCredentialUnavailable, Service: service, Transient: true, Err: cause,
		Message: fmt.Sprintf("the credential for %s cannot be read or refreshed right now; retry later", service)}
}
