package catalog

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Stable error codes carried by *Error. Scripts and HTTP clients match on
// these, never on messages.
const (
	// CodeToolNotFound: no action has the requested name (same code as the
	// sandbox's unknown tool).
	CodeToolNotFound = "TOOL_NOT_FOUND"
	// CodeValidationError: the input is not an object, misses a required
	// field, names an unknown field, or gives a scalar where an array or
	// object is needed (and the reverse). The message names the field.
	CodeValidationError = "VALIDATION_ERROR"
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

// Error is the error Call returns. Its Code is one of the Code constants.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Status is the upstream HTTP status for UPSTREAM_ERROR, else 0.
	Status int `json:"status,omitempty"`
	// Body is the upstream response body for UPSTREAM_ERROR: its JSON when it
	// is JSON, else a JSON string of its first 4 KiB.
	Body json.RawMessage `json:"body,omitempty"`

	cause error
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Unwrap returns the cause, if any (a net or context error).
func (e *Error) Unwrap() error { return e.cause }

func newError(code string, cause error, format string, args ...any) *Error {
	msg := fmt.Sprintf(format, args...)
	if cause != nil {
		msg += ": " + cause.Error()
	}
	return &Error{Code: code, Message: msg, cause: cause}
}

// ErrorCode returns the Code of err when it is (or wraps) an *Error, else "".
func ErrorCode(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}
