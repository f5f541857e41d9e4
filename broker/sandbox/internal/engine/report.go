package engine

import (
	"context"
	"errors"
	"time"
)

// Logger receives an engine's diagnostics (never script data): worker
// deaths and their stderr, a panic of the engine. broker/sandbox adapts a
// *zap.Logger to it; this package imports no logging library, so that a
// worker process, which runs only this package, initialises none.
type Logger interface {
	// Log writes msg at level ("debug", "info", "warn" or "error") with
	// key-value pairs; ctx may carry the logger of a request.
	Log(ctx context.Context, level, msg string, kv ...any)
}

// Recorder counts what engines do (scripts, queue waits, worker starts and
// deaths) and makes a span of each script. broker/sandbox's Metrics
// implement it with Prometheus and OpenTelemetry, which this package does
// not import for the same reason as Logger.
type Recorder interface {
	// Begin starts one script's span; end counts the script by its status
	// and error code ("" when it succeeded) and ends the span.
	Begin(ctx context.Context, engine string) (_ context.Context, end func(status, code string))
	Died(cause string)
	Waited(outcome string, d time.Duration)
	// Started observes a worker's start, exec to handshake; StartFailed
	// counts one that did not complete it (a closed pool's are not counted).
	Started(d time.Duration)
	StartFailed()
	// Track and Untrack add and remove a pool, whose Gauges method reports
	// its state whenever the recorder reads it.
	Track(pool any)
	Untrack(pool any)
}

// DeathCauses are every cause a pool gives Recorder.Died; WaitOutcomes
// every outcome it gives Recorder.Waited.
var (
	DeathCauses  = []string{DeathMemory, DeathCrash, DeathProtocol, DeathTimeout, DeathAborted, DeathUnresponsive, DeathRecycle, DeathScaleDown, DeathShutdown}
	WaitOutcomes = []string{WaitAcquired, WaitQueueTimeout, WaitAborted}
)

// Engine kinds of the script metrics (label "engine").
const (
	EngineWorker    = "worker"
	EngineInProcess = "inprocess"
)

// Causes of worker deaths (label "cause" of
// codemode_sandbox_worker_deaths_total).
const (
	DeathMemory   = "memory"   // the script went over the worker's memory cap
	DeathCrash    = "crash"    // the process died on its own
	DeathProtocol = "protocol" // the worker broke the protocol and was killed
	DeathTimeout  = "timeout"  // the script ignored its timeout; the watchdog killed it
	DeathAborted  = "aborted"  // the execution was cancelled while running
	// DeathUnresponsive: the worker did not answer (stopped by a SIGSTOP
	// from outside, or hung without using the CPU) and was killed.
	DeathUnresponsive = "unresponsive"
	DeathRecycle      = "recycle"    // replaced after maxExecutionsPerWorker, or at its own request
	DeathScaleDown    = "scale_down" // an idle worker above minSize stopped by the scaler
	DeathShutdown     = "shutdown"   // the pool closed
)

// Outcomes of queue_wait_seconds.
const (
	WaitAcquired     = "acquired"
	WaitQueueTimeout = "queue_timeout"
	WaitAborted      = "aborted"
)

// nopLogger and nopRecorder stand in for a nil Logger and Recorder.
type nopLogger struct{}

func (nopLogger) Log(context.Context, string, string, ...any) {}

type nopRecorder struct{}

func (nopRecorder) Begin(ctx context.Context, _ string) (context.Context, func(string, string)) {
	return ctx, func(string, string) {}
}
func (nopRecorder) Died(string)                  {}
func (nopRecorder) Waited(string, time.Duration) {}
func (nopRecorder) Started(time.Duration)        {}
func (nopRecorder) StartFailed()                 {}
func (nopRecorder) Track(any)                    {}
func (nopRecorder) Untrack(any)                  {}

// begin starts a script's span on r and returns the function that ends it
// with the script's outcome.
func begin(ctx context.Context, r Recorder, engine string) (context.Context, func(*Result, error)) {
	ctx, end := r.Begin(ctx, engine)
	return ctx, func(res *Result, err error) { end(scriptOutcome(res, err)) }
}

// scriptOutcome is a script's status and error code ("" when it succeeded).
func scriptOutcome(res *Result, err error) (status, code string) {
	if err != nil {
		var e *Error
		if errors.As(err, &e) {
			return "engine_error", e.Code
		}
		return "engine_error", CodeExecutionAborted
	}
	if res == nil {
		return "engine_error", CodeExecutionError
	}
	if res.Error != nil && res.Status != StatusOK {
		return string(res.Status), res.Error.Code
	}
	return string(res.Status), ""
}
