// Package sandbox runs untrusted JavaScript plans written by language models.
//
// A plan is the body of an async function run in a fresh goja runtime. It
// reaches the outside world only through callTool, which the sandbox forwards
// to a Host supplied by the caller (the broker or the meta-tools). Only JSON
// crosses the boundary in either direction.
//
// Engines: the worker-process engine (the default) runs each script in a
// separate process that caps its own memory; the in-process engine runs it in
// the calling process and cannot cap memory, so it is for trusted code and
// tests.
//
// The engines live in internal/engine, which imports no logging, metrics or
// tracing library so that a worker process initialises none; this package
// names their API and gives them zap (ZapLogger) and Prometheus and
// OpenTelemetry (Metrics).
package sandbox

import (
	"encoding/json"
	"io"

	"go.uber.org/zap"

	"github.com/codemode-gateway/caddy-codemode/broker/sandbox/internal/engine"
	"github.com/codemode-gateway/caddy-codemode/broker/sandbox/internal/observe"
)

// Metrics are the sandbox's Prometheus metrics: scripts by outcome, and for
// worker pools the workers by state, the queue, worker starts and deaths
// and the workers' resident memory. One Metrics serves any number of
// engines (give each the same one as Options.Metrics or
// PoolOptions.Metrics; register it once per registry); a nil *Metrics
// records nothing. Each script is also a span ("codemode.sandbox.run"),
// with or without Metrics.
type Metrics = observe.Metrics

// NewMetrics returns the sandbox's metrics, registered nowhere yet.
func NewMetrics() *Metrics { return observe.NewMetrics(engine.DeathCauses, engine.WaitOutcomes) }

// ZapLogger is l as an engine's Logger (Options.Logger, PoolOptions.Logger);
// a nil l gives nil, no logging.
func ZapLogger(l *zap.Logger) Logger {
	if l == nil {
		return nil
	}
	return observe.Zap{L: l}
}

// NewInProcess returns an engine that runs scripts in the calling process.
// A nil opts means the secure preset with default sanitization.
func NewInProcess(opts *Options) Engine {
	var o Options
	if opts != nil {
		o = *opts
	}
	o.Metrics = spans(o.Metrics)
	return engine.NewInProcess(&o)
}

// NewWorkerPool starts a pool of worker processes that run scripts with the
// in-process engine, each process capping its own memory. It starts MinSize
// workers before returning and fails with a *Error coded
// WORKER_STARTUP_FAILED when they cannot start, or with a plain error when
// opts are invalid.
func NewWorkerPool(opts *PoolOptions) (Engine, error) {
	var o PoolOptions
	if opts != nil {
		o = *opts
	}
	o.Metrics = spans(o.Metrics)
	return engine.NewWorkerPool(&o)
}

// spans is r, or when nil the recorder that makes the scripts' spans and
// counts nothing.
func spans(r Recorder) Recorder {
	if r == nil {
		return (*Metrics)(nil)
	}
	return r
}

// CheckContext reports why ctx may not be a script's context: not JSON,
// or nested deeper than MaxContextDepth; "" means it may. Execute refuses
// such a context with MESSAGE_INVALID, an engine error; the layers that
// take a context from a caller (the broker's /execute, meta:execute) check
// it first, so that a caller's mistake is refused as the caller's, not
// reported as the engine's (which a client is told it may retry).
func CheckContext(ctx json.RawMessage) string { return engine.CheckContext(ctx) }

// IsMetaTool reports whether name designates a meta-tool, however it was
// spelled: any "meta:" name, and the four meta-tools with "_", "-", "." or
// "/" as separator, in any case, with surrounding space or invisible
// characters.
func IsMetaTool(name string) bool { return engine.IsMetaTool(name) }

// Preset returns the limits of a named preset. The empty name is the default
// preset (secure). AllowConsole is false in every preset: console capture is
// a separate setting (vm.allowConsole).
func Preset(name string) (Limits, error) { return engine.Preset(name) }

// PresetNames lists the preset names in a stable order.
func PresetNames() []string { return engine.PresetNames() }

// MergeLimits returns base with every non-zero field of override applied
// ("zero field = keep"), raising or lowering. AllowConsole can only be
// switched on by an override. It is the operator's tool: Options.Limits over
// a preset. A request's limits go through LowerLimits instead.
func MergeLimits(base, override Limits) Limits { return engine.MergeLimits(base, override) }

// LowerLimits applies a request's limits to an engine's: every non-zero
// field of req that is below the engine's value lowers it; nothing is
// raised. Timeout is the exception (see Limits): a request's Timeout is
// taken as given, while the running time stays within CPUTime. Both engines
// apply Request.Limits with it.
func LowerLimits(engineLimits, req Limits) Limits { return engine.LowerLimits(engineLimits, req) }

// CheckLimits reports the first field of req that exceeds the ceiling as a
// *LimitError (code LIMIT_EXCEEDED), for layers that refuse such requests
// instead of lowering them.
func CheckLimits(ceiling, req Limits) error { return engine.CheckLimits(ceiling, req) }

// RemoveFilePaths replaces absolute file paths and file URLs in s with
// "[path]" (sanitization.removeFilePaths).
func RemoveFilePaths(s string) string { return engine.RemoveFilePaths(s) }

// MaybeServeWorker serves the worker protocol on stdin and stdout and exits
// the process when this process was started by a worker pool (the pool sets
// a marker variable in the worker's environment); otherwise it returns
// false at once. Test binaries that use the worker engine call it first
// thing in TestMain, since the pool re-executes the test binary:
//
//	func TestMain(m *testing.M) {
//		sandbox.MaybeServeWorker()
//		os.Exit(m.Run())
//	}
func MaybeServeWorker() bool { return engine.MaybeServeWorker() }

// ServeWorkerStdio serves the worker protocol on the process's stdin and
// stdout and returns the process exit code. Anything else the process
// prints to stdout afterwards goes to stderr, so it cannot corrupt the
// protocol. The `caddy codemode-worker` subcommand calls it.
func ServeWorkerStdio() int { return engine.ServeWorkerStdio() }

// ServeWorker is the worker side of the pool: it reads its configuration
// from in, caps this process's memory, then runs the scripts it is sent
// with the in-process engine, each on its own goroutine (the parent decides
// how many this process hosts and when each may run), forwarding tool
// calls and console output to the parent over out. It returns nil when in
// ends. When in is an *os.File of a non-blocking pipe (on Linux), it is
// closed after the handshake and the pipe read through a duplicate of its
// descriptor (see workerInput).
func ServeWorker(in io.Reader, out io.Writer) error { return engine.ServeWorker(in, out) }
