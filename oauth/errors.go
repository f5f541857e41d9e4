package oauth

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/codemode-gateway/caddy-codemode/internal/kv"
)

// Stable codes of the errors the token storage returns. Rejected access
// tokens are *TokenError with a Reason* constant instead.
const (
	CodeStorage = "STORAGE_ERROR" // the token storage failed
	// CodeIssuerMismatch: no discovery document of an identity provider
	// names the provider's issuer (Discover); its keys and endpoints are not
	// trusted. The credential package uses the same code.
	CodeIssuerMismatch = "ISSUER_MISMATCH"
)

// Error is an error with a stable code. Status is the HTTP status a handler
// should answer with.
type Error struct {
	Code   string // one of the Code* constants
	Status int    // HTTP status for a handler to answer with
	Msg    string // what went wrong, without secrets
	Err    error  // the cause, if any
}

func (e *Error) Error() string {
	if e.Err != nil {
		return e.Msg + ": " + e.Err.Error()
	}
	return e.Msg
}

func (e *Error) Unwrap() error { return e.Err }

func newError(code string, status int, msg string, err error) *Error {
	return &Error{Code: code, Status: status, Msg: msg, Err: err}
}

// ErrorCode returns the stable code of err, or "" when it has none.
func ErrorCode(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// errNotFound is what a store returns for a missing or expired key.
var errNotFound = kv.ErrNotFound

// rfcError is an RFC 6749 section 5.2 error body.
type rfcError struct {
	Error       string `json:"error"`
	Description string `json:"error_description,omitempty"`
}

// writeOAuthError answers with an RFC 6749 JSON error.
func writeOAuthError(w http.ResponseWriter, status int, code, desc string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if status == http.StatusServiceUnavailable && w.Header().Get("Retry-After") == "" {
		w.Header().Set("Retry-After", "1")
	}
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(rfcError{Error: code, Description: desc})
}

// writeStorageUnavailable answers an OAuth request that the token storage
// could not serve: 503 temporarily_unavailable with Retry-After, never an
// error a client blames itself for (invalid_client makes MCP clients drop
// their registration).
func writeStorageUnavailable(w http.ResponseWriter) {
	writeOAuthError(w, http.StatusServiceUnavailable, "temporarily_unavailable", "token storage unavailable")
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// MaxRedirectURILength is the longest redirect URI a client may register,
// in bytes (the limit of a Client ID Metadata Document's URL too). Every
// registration is stored for a day before it is used, and every
// authorization request carries one.
const MaxRedirectURILength = 2048

// checkRedirectURI accepts an absolute URI without fragment or user
// information, at most MaxRedirectURILength bytes: https, http on a
// loopback host (any http host in development), or a private-use scheme of
// a native app.
func checkRedirectURI(raw string, development bool) error {
	if len(raw) > MaxRedirectURILength {
		return fmt.Errorf("redirect uri %.64q...: longer than %d bytes", raw, MaxRedirectURILength)
	}
	u, err := url.Parse(raw)
	if err != nil || !u.IsAbs() {
		return fmt.Errorf("redirect uri %q: must be an absolute URI", raw)
	}
	if u.User != nil {
		// https://claude.ai@evil.example/cb reads as one host and
		// goes to another (RFC 3986 section 3.2.1 deprecates it).
		return fmt.Errorf("redirect uri %q: must not have user information", raw)
	}
	if u.Fragment != "" || strings.Contains(raw, "#") {
		return fmt.Errorf("redirect uri %q: must not have a fragment", raw)
	}
	switch strings.ToLower(u.Scheme) {
	case "https":
		if u.Host == "" {
			return fmt.Errorf("redirect uri %q: has no host", raw)
		}
		return nil
	case "http":
		if development || isLoopbackHost(u.Hostname()) {
			return nil
		}
		return fmt.Errorf("redirect uri %q: http is allowed only on a loopback host", raw)
	case "javascript", "data", "file", "vbscript", "about", "blob":
		return fmt.Errorf("redirect uri %q: scheme %q is not allowed", raw, u.Scheme)
	}
	// Private-use scheme of a native app (RFC 8252 section 7.1).
	return nil
}

func isLoopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}
