package catalog

import (
	"errors"
	"fmt"

	"github.com/codemode-gateway/caddy-codemode/internal/tool"
)

// Stable error codes carried by *Error. Scripts and HTTP clients match on
// these, never on messages.
const (
	// CodeToolNotFound: no action has the requested name (same code as the
	// sandbox's unknown tool).
	CodeToolNotFound = tool.CodeToolNotFound
	// CodeValidationError: the input does not match the action's input
	// schema (the one tool-input validator); the message names every field
	// at fault, Field the first.
	CodeValidationError = tool.CodeValidationError
	// CodeUpstreamError: the service answered with a status outside 2xx.
	// Error.Status and Error.Body carry its status and (capped) body.
	CodeUpstreamError = "UPSTREAM_ERROR"
	// CodeUpstreamUnreachable: the request could not be made or its response
	// not read (connection refused, TLS, reset, redirect refused).
	CodeUpstreamUnreachable = "UPSTREAM_UNREACHABLE"
	// CodeResponseTooLarge: the response body exceeds the source's
	// MaxResponseBytes.
	CodeResponseTooLarge = "RESPONSE_TOO_LARGE"
	// CodeTimeout: the source's Timeout (or the caller's deadline) passed
	// before the response was read.
	CodeTimeout = "TIMEOUT"
	// CodeCanceled: the caller's context was canceled.
	CodeCanceled = "CANCELED"
	// CodeNoBaseURL: the action's service has no usable base URL (a file
	// source whose document has no absolute server URL and no BaseURL).
	CodeNoBaseURL = "NO_BASE_URL"
)

// Error is the error Call returns, the error type every tool source shares
// (internal/tool). Its Code is one of the Code constants; Status and Body
// carry an upstream's answer for UPSTREAM_ERROR.
type Error = tool.Error

func newError(code string, cause error, format string, args ...any) *Error {
	msg := fmt.Sprintf(format, args...)
	if cause != nil {
		msg += ": " + cause.Error()
	}
	return &Error{Code: code, Message: msg, Err: cause}
}

// ErrorCode returns the Code of err when it is (or wraps) an *Error, else "".
func ErrorCode(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}
