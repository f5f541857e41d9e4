package guard

import (
	"fmt"
	"net/http"
)

// Stable error codes carried by GuardError.Code.
const (
	CodeExecutionTimeout   = "EXECUTION_TIMEOUT"
	CodeConcurrencyLimit   = "CONCURRENCY_LIMIT"
	CodeQueueTimeout       = "QUEUE_TIMEOUT"
	CodeIPBlocked          = "IP_BLOCKED"
	CodeIPNotAllowed       = "IP_NOT_ALLOWED"
	CodeRateLimit          = "RATE_LIMIT"
	CodeStorageUnavailable = "STORAGE_UNAVAILABLE"
)

// GuardError is the error of every guard denial. Code and StatusCode are
// always set; the other fields are set by the kinds that the spec gives them
// to (see the New*Error constructors).
type GuardError struct {
	// Code is the stable string code, e.g. "QUEUE_TIMEOUT".
	Code string
	// StatusCode is the HTTP status that fits the error (408, 429, 403, 503).
	StatusCode int
	// Message is a short human-readable description.
	Message string
	// EntityName is the guarded entity (EXECUTION_TIMEOUT, CONCURRENCY_LIMIT,
	// QUEUE_TIMEOUT, RATE_LIMIT).
	EntityName string
	// TimeoutMs is the execution timeout that passed (EXECUTION_TIMEOUT).
	TimeoutMs int64
	// MaxConcurrent is the concurrency limit that was full (CONCURRENCY_LIMIT).
	MaxConcurrent int64
	// QueueTimeoutMs is the queue wait that expired (QUEUE_TIMEOUT).
	QueueTimeoutMs int64
	// ClientIP is the rejected client address (IP_BLOCKED, IP_NOT_ALLOWED).
	ClientIP string
	// MaxRequests is the rate limit that was reached (RATE_LIMIT).
	MaxRequests int64
	// RetryAfterMs is how long the client should wait before retrying, in
	// milliseconds (RATE_LIMIT, and 1000 for STORAGE_UNAVAILABLE).
	RetryAfterMs int64
	// Err is the underlying cause, if any (STORAGE_UNAVAILABLE).
	Err error
}

// Error implements error.
func (e *GuardError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Err)
	}
	return e.Code + ": " + e.Message
}

// Unwrap returns the cause.
func (e *GuardError) Unwrap() error { return e.Err }

// NewExecutionTimeoutError reports that entityName ran past timeoutMs.
func NewExecutionTimeoutError(entityName string, timeoutMs int64) *GuardError {
	return &GuardError{
		Code: CodeExecutionTimeout, StatusCode: http.StatusRequestTimeout,
		Message:    fmt.Sprintf("execution of %q exceeded %d ms", entityName, timeoutMs),
		EntityName: entityName, TimeoutMs: timeoutMs,
	}
}

// NewConcurrencyLimitError reports that all maxConcurrent slots of entityName
// are taken and queueing is off.
func NewConcurrencyLimitError(entityName string, maxConcurrent int64) *GuardError {
	return &GuardError{
		Code: CodeConcurrencyLimit, StatusCode: http.StatusTooManyRequests,
		Message:    fmt.Sprintf("concurrency limit of %d reached for %q", maxConcurrent, entityName),
		EntityName: entityName, MaxConcurrent: maxConcurrent,
	}
}

// NewQueueTimeoutError reports that a queued request for entityName waited
// queueTimeoutMs without getting a slot.
func NewQueueTimeoutError(entityName string, queueTimeoutMs int64) *GuardError {
	return &GuardError{
		Code: CodeQueueTimeout, StatusCode: http.StatusTooManyRequests,
		Message:    fmt.Sprintf("no slot for %q within %d ms", entityName, queueTimeoutMs),
		EntityName: entityName, QueueTimeoutMs: queueTimeoutMs,
	}
}

// NewIPBlockedError reports that clientIP matches the deny list.
func NewIPBlockedError(clientIP string) *GuardError {
	return &GuardError{
		Code: CodeIPBlocked, StatusCode: http.StatusForbidden,
		Message: "client address is blocked", ClientIP: clientIP,
	}
}

// NewIPNotAllowedError reports that clientIP is not on the allow list and
// the default action is deny.
func NewIPNotAllowedError(clientIP string) *GuardError {
	return &GuardError{
		Code: CodeIPNotAllowed, StatusCode: http.StatusForbidden,
		Message: "client address is not allowed", ClientIP: clientIP,
	}
}

// NewRateLimitError reports that entityName used its maxRequests; the client
// may retry after retryAfterMs.
func NewRateLimitError(entityName string, maxRequests, retryAfterMs int64) *GuardError {
	return &GuardError{
		Code: CodeRateLimit, StatusCode: http.StatusTooManyRequests,
		Message:    fmt.Sprintf("rate limit of %d requests reached for %q", maxRequests, entityName),
		EntityName: entityName, MaxRequests: maxRequests, RetryAfterMs: retryAfterMs,
	}
}

// NewStorageUnavailableError reports that the storage backend failed and the
// failure mode is closed.
func NewStorageUnavailableError(cause error) *GuardError {
	return &GuardError{
		Code: CodeStorageUnavailable, StatusCode: http.StatusServiceUnavailable,
		Message: "guard storage is unavailable", RetryAfterMs: 1000, Err: cause,
	}
}
