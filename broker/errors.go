package broker

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/codemode-gateway/caddy-codemode/internal/tool"
)

// Stable error codes of the broker. They appear in HTTP error bodies
// ({"error":{"code","message"}}), in Go errors (*Error) and, for tool calls,
// in the *sandbox.ToolError a script sees.
const (
	CodeInvalidRequest       = "INVALID_REQUEST"           // 400: malformed body or parameters
	CodeValidationError      = tool.CodeValidationError    // 400 / tool error: input does not match the tool's input schema
	CodeUnauthorized         = "UNAUTHORIZED"              // 401: missing or rejected credentials
	CodeNotFound             = "NOT_FOUND"                 // 404: unknown route, session or call
	CodeOriginNotAllowed     = "ORIGIN_NOT_ALLOWED"        // 403: a browser page of another origin
	CodeMethodNotAllowed     = "METHOD_NOT_ALLOWED"        // 405
	CodeCallAlreadyAnswered  = "CALL_ALREADY_ANSWERED"     // 409: a second result for one call
	CodeSessionFinished      = "SESSION_FINISHED"          // 409: a result for a finished session
	CodeCallAbandoned        = "CALL_ABANDONED"            // 409: a result for a call that stopped waiting (timeout, abort, worker lost)
	CodePayloadTooLarge      = "PAYLOAD_TOO_LARGE"         // 413: body over the size limit
	CodeUnsupportedMediaType = "UNSUPPORTED_MEDIA_TYPE"    // 415: body is not application/json
	CodeRateLimit            = "RATE_LIMIT"                // 429: request rate limit, or a tool's rate limit
	CodeSessionLimit         = "SESSION_LIMIT"             // 429: maxConcurrentSessions (or the caller's share) reached
	CodeLimitExceeded        = "LIMIT_EXCEEDED"            // 400: a request asks for more than a configured maximum
	CodeStreamLimit          = "STREAM_LIMIT"              // session error: its event stream exceeded maxStreamBytes
	CodeShuttingDown         = "SHUTTING_DOWN"             // 503: the broker is closing
	CodeInternal             = "INTERNAL_ERROR"            // 500: an unexpected internal failure
	CodeStorageUnavailable   = "STORAGE_UNAVAILABLE"       // 503: the session store (Redis) did not answer in time
	CodeToolNotFound         = tool.CodeToolNotFound       // tool error: no such tool
	CodeToolCallLimit        = "TOOL_CALL_LIMIT"           // tool error: maxToolCalls reached
	CodeToolExecutionError   = tool.CodeToolExecutionError // tool error: the handler failed
	CodeExecutionTimeout     = "EXECUTION_TIMEOUT"         // tool error: the tool ran past its timeout
	CodeKVFull               = "KV_FULL"                   // tool error: the demo kv store is full (kv:set)
)

// Error is a broker failure with a stable code and the HTTP status it maps to.
type Error struct {
	Code    string
	Message string
	// Status is the HTTP status the error is served with.
	Status int
	// RetryAfter, when positive, is sent as the Retry-After header (rounded
	// up to whole seconds) with 429 and 503 responses.
	RetryAfter time.Duration
	// Err is the cause, if any; it is never shown to HTTP clients.
	Err error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return e.Code + ": " + e.Message + ": " + e.Err.Error()
	}
	return e.Code + ": " + e.Message
}

func (e *Error) Unwrap() error { return e.Err }

func newError(status int, code, msg string) *Error {
	return &Error{Code: code, Message: msg, Status: status}
}

// asError maps any error to an *Error, hiding unknown causes behind
// INTERNAL_ERROR.
func asError(err error) *Error {
	var be *Error
	if errors.As(err, &be) {
		return be
	}
	return &Error{Code: CodeInternal, Message: "internal error", Status: http.StatusInternalServerError, Err: err}
}

// storageError is a failed session-store operation: 503, retry soon.
func storageError(err error) *Error {
	var be *Error
	if errors.As(err, &be) {
		return be
	}
	return &Error{Code: CodeStorageUnavailable, Message: "the session store is unavailable; retry shortly",
		Status: http.StatusServiceUnavailable, RetryAfter: time.Second, Err: err}
}

// retryAfterSeconds rounds d up to whole seconds, at least 1.
func retryAfterSeconds(d time.Duration) string {
	s := int64((d + time.Second - 1) / time.Second)
	if s < 1 {
		s = 1
	}
	return strconv.FormatInt(s, 10)
}
