// Package engine is the sandbox (see broker/sandbox, which names its API):
// the in-process engine on goja, the worker pool, the worker protocol and
// the worker's loop.
//
// It imports goja, the script prelude and the standard library, and no
// logging, metrics or tracing library: a worker process runs only this
// package, and Go initialises a package once all its imports are
// initialised, so a program that serves its workers from package
// initialisation (broker/sandbox/workerinit) reaches the worker before
// Prometheus, OpenTelemetry, zap, net/http and whatever sorts between
// them in Go's order. Its diagnostics and counts go to a Logger and a
// Recorder that broker/sandbox implements with zap, Prometheus and
// OpenTelemetry (internal/observe).
package engine

import (
	"context"
	"encoding/json"
	"time"
)

// Status is the outcome class of a script, as in the meta:execute output table.
type Status string

// The statuses of a script result.
const (
	StatusOK            Status = "ok"
	StatusSyntaxError   Status = "syntax_error"
	StatusIllegalAccess Status = "illegal_access"
	StatusRuntimeError  Status = "runtime_error"
	StatusToolError     Status = "tool_error"
	StatusTimeout       Status = "timeout"
)

// Script error codes (meta-tools spec, "Errors"). CodeValidationError,
// CodeToolNotFound and CodeToolExecutionError are the codes every tool
// source shares, internal/tool's (a test checks they are the same): spelt
// out here because importing that package would link its JSON Schema
// validator, whose package init compiles the meta-schemas (~4.5 ms of CPU),
// into every worker, which never validates a tool input.
const (
	CodeSyntaxError          = "SYNTAX_ERROR"
	CodeValidationError      = "VALIDATION_ERROR"
	CodeSelfReferenceBlocked = "SELF_REFERENCE_BLOCKED"
	CodeToolNotFound         = "TOOL_NOT_FOUND"
	CodeAccessDenied         = "ACCESS_DENIED"
	CodeExecutionError       = "EXECUTION_ERROR"
	CodeTimeout              = "TIMEOUT"
	CodeToolExecutionError   = "TOOL_EXECUTION_ERROR"
)

// Engine and worker-pool error codes (meta-tools spec, "Worker pool errors").
const (
	CodeWorkerTimeout        = "WORKER_TIMEOUT"
	CodeWorkerMemoryExceeded = "WORKER_MEMORY_EXCEEDED"
	CodeWorkerCrashed        = "WORKER_CRASHED"
	CodePoolDisposed         = "POOL_DISPOSED"
	CodeQueueFull            = "QUEUE_FULL"
	CodeQueueTimeout         = "QUEUE_TIMEOUT"
	CodeExecutionAborted     = "EXECUTION_ABORTED"
	CodeMessageFlood         = "MESSAGE_FLOOD"
	CodeMessageInvalid       = "MESSAGE_INVALID"
	CodeMessageTooLarge      = "MESSAGE_TOO_LARGE"
	CodeWorkerStartupFailed  = "WORKER_STARTUP_FAILED"
	CodeTooManyPendingCalls  = "TOO_MANY_PENDING_CALLS"
)

// Result is what a script produced. Everything attributable to the script
// itself (its return value, its errors, its time or memory overrun, a worker
// that died running it) is reported here, never as a Go error.
type Result struct {
	Status Status `json:"status"`
	// Result is the script's return value as JSON; set only when Status is ok.
	// A script that returns undefined yields JSON null.
	Result json.RawMessage `json:"result,omitempty"`
	// Logs holds console output when console is allowed ("[warn] ..." and
	// "[error] ..." prefixes mark the level).
	Logs  []string     `json:"logs,omitempty"`
	Error *ScriptError `json:"error,omitempty"`
	// Stats describe the run; they are not part of the meta:execute output.
	Stats Stats `json:"-"`
}

// ScriptError is the error part of a Result. Which fields are set depends on
// the status, following the meta:execute output table.
type ScriptError struct {
	// Code is one of the script or engine error codes above.
	Code    string `json:"code"`
	Message string `json:"message"`
	// Kind is set for illegal_access, for example "IllegalBuiltinAccess".
	Kind string `json:"kind,omitempty"`
	// Name is the JavaScript error name for runtime_error, e.g. "TypeError".
	Name string `json:"name,omitempty"`
	// Source is "script" for runtime_error and "tool" for tool_error.
	Source string `json:"source,omitempty"`
	// ToolName is set for tool_error.
	ToolName string `json:"toolName,omitempty"`
	// Location is set for syntax_error and, where known, illegal_access.
	Location *Location `json:"location,omitempty"`
	// Stack is the script stack trace unless sanitization removes it.
	Stack string `json:"stack,omitempty"`
}

// Location is a 1-based line and column in the submitted script.
type Location struct {
	Line   int `json:"line"`
	Column int `json:"column"`
}

// Stats describe one execution.
type Stats struct {
	Duration  time.Duration
	ToolCalls int
	Steps     int64
}

// ToolCall is one callTool made by a script. Input is the JSON of the
// script's argument (never a Go value).
type ToolCall struct {
	// ID is unique within one execution.
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
}

// ToolError is a tool failure as the script sees it: callTool throws it (or
// returns it under `error` with throwOnError false). Codes NOT_FOUND and
// VALIDATION_ERROR are non-transient.
type ToolError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *ToolError) Error() string { return e.Code + ": " + e.Message }

// ToolInfo is what getTool(name) returns to a script. Signature, when the
// host has one, is the tool's compact TypeScript declaration (the
// meta-tools give it, as meta:describe does).
type ToolInfo struct {
	Name         string          `json:"name"`
	Description  string          `json:"description"`
	Signature    string          `json:"signature,omitempty"`
	InputSchema  json.RawMessage `json:"inputSchema,omitempty"`
	OutputSchema json.RawMessage `json:"outputSchema,omitempty"`
}

// Host connects scripts to tools. The broker and the meta-tools implement it.
// Methods are called from goroutines other than the script's and may be
// called concurrently.
type Host interface {
	// LookupTool reports a tool's metadata; ok false makes callTool fail with
	// TOOL_NOT_FOUND and getTool return null.
	LookupTool(name string) (info ToolInfo, ok bool)
	// CallTool runs one tool call and returns its result as JSON. A returned
	// *ToolError reaches the script with its code; any other error reaches it
	// as TOOL_EXECUTION_ERROR with the error's text. ctx ends when the
	// execution times out or is aborted.
	CallTool(ctx context.Context, call ToolCall) (json.RawMessage, error)
}

// LogHost is an optional Host capability: a Host that implements it sees each
// console entry as it is written (the broker streams them), in addition to
// Result.Logs.
type LogHost interface {
	Log(level, message string)
}

// ParkHost is an optional Host capability for schedulers. Parked is called
// on the script's goroutine when the script waits for tool results with
// nothing left to run (it holds no CPU until one arrives); settled is the
// number of tool results it has received so far. Resumed is called when a
// result arrives for it, before it runs again; it may block (waiting for a
// CPU slot) and returns false when the script should stop instead. The
// worker engine uses them to tell its parent which scripts run.
type ParkHost interface {
	Parked(settled int)
	Resumed() bool
}

// EndHost is an optional Host capability: Ended is called once when the
// execution is over (the script returned, failed or was stopped), before
// the engine cancels the tool calls still running and before Execute
// returns. A host whose calls wait for answers from outside closes them
// then: an answer from then on is refused (the broker's 409
// SESSION_FINISHED) instead of accepted for a script that will not read
// it. It is not called for a script the worker engine runs again on
// another worker (its worker died before the script made a tool call).
type EndHost interface {
	Ended()
}

// Request is one script to run.
type Request struct {
	// Code is the plan: the body of an async function.
	Code string
	// AllowedTools, when non-nil, is the whitelist of tool names the script
	// may call (ACCESS_DENIED otherwise).
	AllowedTools []string
	// Context is JSON exposed to the script, deep-frozen, as metaContext.
	// Empty means {}.
	Context json.RawMessage
	// Limits lower the engine's limits field by field (see LowerLimits);
	// zero fields keep the engine's value.
	Limits Limits
	// Principal names who asks (a user, an API key, a client address):
	// the worker pool shares its CPU slots and seats fairly among
	// principals and bounds what each holds. Empty is one anonymous
	// principal.
	Principal string
}

// Limits bound one execution. A zero field means "use the preset's value".
//
// An engine's limits (the preset with Options.Limits over it) are ceilings:
// Request.Limits can lower any of them and raise none (LowerLimits), except
// Timeout, the wall-clock bound of the whole execution, which belongs to the
// embedding layer (the broker bounds waits for caller-answered tools with
// it); the time a script spends running stays bounded by CPUTime.
type Limits struct {
	// Timeout bounds the whole execution, waits for tools included
	// (vm.timeoutMs).
	Timeout time.Duration
	// CPUTime bounds the time the script spends running JavaScript (and
	// compiling), waits for tools excluded. Presets set it to their
	// timeout.
	CPUTime           time.Duration
	MaxSteps          int64
	MaxToolCalls      int
	MaxCallDepth      int
	MaxSourceBytes    int
	MaxNestingDepth   int
	MaxResultBytes    int
	MaxConsoleEntries int
	MaxConsoleBytes   int
	// MemoryBytes caps a worker process (RLIMIT_DATA). The in-process engine
	// uses it for its heap watchdog and the size caps of built-ins.
	MemoryBytes int64
	// AllowConsole enables console.* capture (vm.allowConsole).
	AllowConsole bool
}

// Engine runs scripts. Execute returns a Result for every outcome the script
// caused; it returns a non-nil *Error only when the engine could not run the
// script at all (POOL_DISPOSED, QUEUE_FULL, QUEUE_TIMEOUT, EXECUTION_ABORTED,
// WORKER_STARTUP_FAILED).
type Engine interface {
	Execute(ctx context.Context, req Request, host Host) (*Result, error)
	Close() error
}

// EngineHealth is an engine's state, as GET /health reports it.
type EngineHealth struct {
	// Kind is "workers" (a pool of worker processes) or "inprocess".
	Kind string `json:"kind"`
	// Live, Idle, Busy, Starting and Queued count the pool's workers and
	// the executions waiting for one; Max and QueueSize are its bounds.
	Live      int `json:"live,omitempty"`
	Idle      int `json:"idle,omitempty"`
	Busy      int `json:"busy,omitempty"`
	Starting  int `json:"starting,omitempty"`
	Queued    int `json:"queued,omitempty"`
	Max       int `json:"max,omitempty"`
	QueueSize int `json:"queueSize,omitempty"`
	// Problems say why the engine cannot serve as configured; empty when
	// it can.
	Problems []string `json:"problems,omitempty"`
}

// LimitsReporter is an optional Engine capability: its effective limits
// (the ceilings of every request). Both engines implement it.
type LimitsReporter interface {
	Limits() Limits
}

// HealthReporter is an optional Engine capability: its state for health
// checks.
type HealthReporter interface {
	Health() EngineHealth
}

// Error is an engine failure with a stable code.
type Error struct {
	Code    string
	Message string

	// late marks a worker start that missed its handshake deadline with
	// the process alive (a stalled machine, not a broken binary).
	late bool
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }
