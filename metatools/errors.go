package metatools

import (
	"github.com/codemode-gateway/caddy-codemode/broker/catalog"
	"github.com/codemode-gateway/caddy-codemode/internal/tool"
)

// Error codes of the meta-tools beyond the sandbox's script codes.
const (
	// CodeNotFound: the tool does not exist (non-transient).
	CodeNotFound = "NOT_FOUND"
	// CodeValidationError: input does not match a schema; Field names the
	// first offending field, the message every one (non-transient).
	CodeValidationError = tool.CodeValidationError
	// CodeRateLimit: a meta-tool rate limit rule was exceeded.
	CodeRateLimit = "RATE_LIMIT"
	// CodeSearchUnavailable: the ml search strategy could not reach its
	// embeddings endpoint.
	CodeSearchUnavailable = "SEARCH_UNAVAILABLE"
	// CodeToolExecutionError: the tool failed.
	CodeToolExecutionError = tool.CodeToolExecutionError
	// CodeSelfReferenceBlocked: a script or invoke named a meta-tool.
	CodeSelfReferenceBlocked = "SELF_REFERENCE_BLOCKED"
	// CodeEngineError: the sandbox could not run a script at all; Message
	// carries the engine's own code (QUEUE_FULL, POOL_DISPOSED, ...).
	CodeEngineError = "ENGINE_ERROR"
	// CodeInternalError: a store the meta-tools need (the broker's, for
	// plans answered by the client) failed.
	CodeInternalError = "INTERNAL_ERROR"
)

// Error is a meta-tool or tool failure with a stable code, the error type
// every tool source shares (internal/tool).
type Error = tool.Error

// Transient reports whether an error code denotes a failure that may pass on
// retry. NOT_FOUND, VALIDATION_ERROR and SELF_REFERENCE_BLOCKED never do,
// nor does a catalog's NO_BASE_URL (its configuration) or
// RESPONSE_TOO_LARGE (the same request gets the same answer), nor a
// credential's CREDENTIAL_REQUIRED or UPSTREAM_ENDPOINT_REFUSED (the user
// or the operator must act first; package credential, which this one does
// not import).
func Transient(code string) bool {
	switch code {
	case CodeNotFound, CodeValidationError, CodeSelfReferenceBlocked, tool.CodeToolNotFound, "ACCESS_DENIED",
		CodeToolNotCallable, CodeInvalidRequestState, catalog.CodeNoBaseURL, catalog.CodeResponseTooLarge,
		"CREDENTIAL_REQUIRED", "UPSTREAM_ENDPOINT_REFUSED", CodeUpstreamQuestionRefused:
		return false
	}
	return true
}

// transientError is Transient of e's code, and for an upstream's answer
// (UPSTREAM_ERROR with its status) whether that status may pass: a 404 is
// not, a 503 is (tool.StatusTransient). Every UPSTREAM_ERROR was transient,
// and a client retried a 404 or a 403.
func transientError(e *Error) bool {
	if e.Code == catalog.CodeUpstreamError && e.Status != 0 {
		return tool.StatusTransient(e.Status)
	}
	return Transient(e.Code)
}

func newError(code, msg string) *Error {
	return &Error{Code: code, Message: msg, Transient: Transient(code)}
}

func validationError(field, msg string) *Error { return tool.Invalid(field, msg) }
