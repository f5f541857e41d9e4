package metatools

// Error codes of the meta-tools beyond the sandbox's script codes.
const (
	// CodeNotFound: the tool does not exist (non-transient).
	CodeNotFound = "NOT_FOUND"
	// CodeValidationError: input does not match a schema; Field names the
	// offending field (non-transient).
	CodeValidationError = "VALIDATION_ERROR"
	// CodeRateLimit: a meta-tool rate limit rule was exceeded.
	CodeRateLimit = "RATE_LIMIT"
	// CodeSearchUnavailable: the ml search strategy could not reach its
	// embeddings endpoint.
	CodeSearchUnavailable = "SEARCH_UNAVAILABLE"
	// CodeToolExecutionError: the tool failed.
	CodeToolExecutionError = "TOOL_EXECUTION_ERROR"
	// CodeSelfReferenceBlocked: a script or invoke named a meta-tool.
	CodeSelfReferenceBlocked = "SELF_REFERENCE_BLOCKED"
	// CodeEngineError: the sandbox could not run a script at all; Message
	// carries the engine's own code (QUEUE_FULL, POOL_DISPOSED, ...).
	CodeEngineError = "ENGINE_ERROR"
	// CodeInternalError: a store the meta-tools need (the broker's, for
	// plans answered by the client) failed.
	CodeInternalError = "INTERNAL_ERROR"
)

// Error is a meta-tool or tool failure with a stable code.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Field is the input field at fault for VALIDATION_ERROR, as a dotted
	// path ("queries", "filter.appIds", "items.0.name").
	Field string `json:"field,omitempty"`
	// Transient tells a caller whether retrying the same call may succeed.
	Transient bool `json:"transient"`
	// RetryAfterSeconds is set for RATE_LIMIT when known.
	RetryAfterSeconds int `json:"retryAfterSeconds,omitempty"`
}

func (e *Error) Error() string {
	if e.Field != "" {
		return e.Code + ": " + e.Field + ": " + e.Message
	}
	return e.Code + ": " + e.Message
}

// Transient reports whether an error code denotes a failure that may pass on
// retry. NOT_FOUND, VALIDATION_ERROR and SELF_REFERENCE_BLOCKED never do.
func Transient(code string) bool {
	switch code {
	case CodeNotFound, CodeValidationError, CodeSelfReferenceBlocked, "TOOL_NOT_FOUND", "ACCESS_DENIED",
		CodeToolNotCallable, CodeInvalidRequestState:
		return false
	}
	return true
}

func newError(code, msg string) *Error {
	return &Error{Code: code, Message: msg, Transient: Transient(code)}
}

func validationError(field, msg string) *Error {
	return &Error{Code: CodeValidationError, Field: field, Message: msg}
}
