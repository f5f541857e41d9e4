// Package tool holds what every tool source shares: the descriptor of a
// tool as models and indexes see it, the error of a tool call with its
// stable codes, and the one validator of tool inputs (Schema). The broker,
// its catalog and the meta-tools alias these types, so a tool crosses no
// translation between them.
package tool

import "encoding/json"

// Codes shared by every tool source.
const (
	// CodeValidationError: the input does not match the tool's input
	// schema; Error.Field names the first field at fault, the message all
	// of them.
	CodeValidationError = "VALIDATION_ERROR"
	// CodeToolNotFound: no tool has the requested name.
	CodeToolNotFound = "TOOL_NOT_FOUND"
	// CodeToolExecutionError: the tool ran and failed.
	CodeToolExecutionError = "TOOL_EXECUTION_ERROR"
)

// Descriptor is one tool: what search, describe and a model need.
type Descriptor struct {
	// Name is unique among the tools of a gateway, namespaced as
	// <app>:<tool> by the catalog and upstream sources.
	Name string `json:"name"`
	// AppID is the owning app (the OpenAPI service or upstream server name).
	AppID       string `json:"appId"`
	Description string `json:"description"`
	// InputSchema is a JSON Schema object; empty means {"type":"object"}.
	InputSchema json.RawMessage `json:"inputSchema,omitempty"`
	// OutputSchema is a JSON Schema, or empty when the tool declares none.
	OutputSchema json.RawMessage `json:"outputSchema,omitempty"`
	Annotations  *Annotations    `json:"annotations,omitempty"`
	// Examples are declared usage examples, listed before generated ones.
	Examples []Example `json:"examples,omitempty"`
	// Tags are indexed for search (OpenAPI tags, for example) and can be
	// filtered on.
	Tags []string `json:"tags,omitempty"`
	// CallerAnswered marks a tool that only the caller can answer (a broker
	// registry tool without a handler).
	CallerAnswered bool `json:"callerAnswered,omitempty"`
	// Deprecated tools rank below equivalent current ones.
	Deprecated bool `json:"deprecated,omitempty"`
	// Path is a catalog action's path template ("/repos/{owner}/{repo}/issues"):
	// its static segments are indexed for search, evidence of what the call
	// acts on when its operation id says little. Not part of the wire form.
	Path string `json:"-"`
	// Method is a catalog action's HTTP method ("POST"): a request that
	// names the call ("POST /repos/{owner}/{repo}/issues") finds it. Not
	// part of the wire form.
	Method string `json:"-"`
	// FullName is a catalog action's name before the catalog cut it to its
	// length limit ("" when it did not): a cut name ends in a hash, and the
	// words it lost — often the verb or the thing acted on — are indexed
	// from this. Not part of the wire form.
	FullName string `json:"-"`
}

// Annotations are the MCP tool hints; nil means not declared.
type Annotations struct {
	Title           string `json:"title,omitempty"`
	ReadOnlyHint    *bool  `json:"readOnlyHint,omitempty"`
	DestructiveHint *bool  `json:"destructiveHint,omitempty"`
	IdempotentHint  *bool  `json:"idempotentHint,omitempty"`
	OpenWorldHint   *bool  `json:"openWorldHint,omitempty"`
}

// Example is a usage example: a JavaScript snippet that calls the tool.
type Example struct {
	Description string `json:"description"`
	Code        string `json:"code"`
}

// Error is the failure of a tool call (or of a meta-tool) with a stable
// code. The meta-tools serve it as is; catalog actions fill Status and
// Body for an upstream's answer.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Field is the input field at fault for VALIDATION_ERROR, as a dotted
	// path ("queries", "filter.appIds", "items.0.name"): the first of
	// Fields.
	Field string `json:"field,omitempty"`
	// Fields lists every field at fault for VALIDATION_ERROR.
	Fields []string `json:"-"`
	// Transient tells a caller whether retrying the same call may succeed.
	Transient bool `json:"transient"`
	// RetryAfterSeconds is set for RATE_LIMIT when known.
	RetryAfterSeconds int `json:"retryAfterSeconds,omitempty"`
	// Status is an upstream's HTTP status (catalog UPSTREAM_ERROR), else 0.
	Status int `json:"status,omitempty"`
	// Body is an upstream's response body (catalog UPSTREAM_ERROR): its
	// JSON, or a JSON string of its first 4 KiB.
	Body json.RawMessage `json:"body,omitempty"`
	// Err is the cause, if any (a net or context error); never shown.
	Err error `json:"-"`
}

func (e *Error) Error() string {
	if e.Field != "" && e.Code != CodeValidationError {
		return e.Code + ": " + e.Field + ": " + e.Message
	}
	return e.Code + ": " + e.Message
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// StatusTransient reports whether an upstream's answer with HTTP status
// (a catalog UPSTREAM_ERROR's) may pass if the same call is made again:
// 408, 425, 429 and the 5xx statuses, except those that state a lasting
// property of the server (501 Not Implemented, 505 HTTP Version Not
// Supported, 506 Variant Also Negotiates, 508 Loop Detected, 510 Not
// Extended, 511 Network Authentication Required). Every other status (a
// 404, a 401, a 3xx not followed) answers the request itself: the same
// call gets it again.
func StatusTransient(status int) bool {
	switch status {
	case 408, 425, 429:
		return true
	case 501, 505, 506, 508, 510, 511:
		return false
	}
	return status >= 500 && status <= 599
}

// Invalid is a VALIDATION_ERROR about field.
func Invalid(field, msg string) *Error {
	return &Error{Code: CodeValidationError, Message: msg, Field: field, Fields: []string{field}}
}

// Bool returns a pointer to b, for Annotations.
func Bool(b bool) *bool { return &b }
