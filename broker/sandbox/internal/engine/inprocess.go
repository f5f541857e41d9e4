package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/dlclark/regexp2/v2"
	"github.com/dop251/goja"

	"github.com/codemode-gateway/caddy-codemode/broker/sandbox/internal/prelude"
	"github.com/codemode-gateway/caddy-codemode/internal/clip"
)

// regexpMatchTimeout bounds one backtracking regular-expression scan. goja
// runs regexps that Go's linear-time engine cannot handle (backreferences,
// lookaround) on regexp2, whose matcher ignores runtime interrupts; a timed
// out scan counts as "no match". The prelude drives every loop over such
// scans from JavaScript, so a run stops at most one scan past its limits.
// Only goja uses regexp2/v2 in this module.
const regexpMatchTimeout = 250 * time.Millisecond

var (
	preludeOnce sync.Once
	preludePrg  *goja.Program
)

func preludeProgram() *goja.Program {
	preludeOnce.Do(func() {
		preludePrg = prelude.Program()
		if regexp2.DefaultMatchTimeout > regexpMatchTimeout {
			regexp2.DefaultMatchTimeout = regexpMatchTimeout
		}
	})
	return preludePrg
}

// InProcess runs each script in a fresh goja runtime on a goroutine of the
// calling process (plus one goroutine per tool call). It cannot cap memory:
// goja has no heap limit, so it is meant for trusted code, tests, and as the
// engine inside a memory-capped worker process.
type InProcess struct {
	limits   Limits
	sanitize Sanitization
	logger   Logger
	mem      *memWatch
	grace    time.Duration // hardDeadlineGrace; tests shorten it
	metrics  Recorder
	closed   atomic.Bool
	// warm prepares the runtime of the next script ahead of its request.
	warm warmRuntime
	// runners run the scripts' VMs and the runtime preparation on reused
	// goroutines.
	runners runners
	// abandoned counts VM goroutines still running after Execute answered
	// for them at the hard deadline.
	abandoned atomic.Int64
}

// Abandoned reports how many scripts are still running inside a built-in
// after Execute answered for them at the hard deadline. A worker process
// uses it to ask to be replaced instead of serving more scripts.
func (e *InProcess) Abandoned() int64 { return e.abandoned.Load() }

// NewInProcess returns an engine that runs scripts in the calling process.
// A nil opts means the secure preset with default sanitization.
func NewInProcess(opts *Options) Engine {
	limits, san, logger := opts.resolve()
	preludeProgram()
	e := &InProcess{limits: limits, sanitize: san, logger: logger, mem: newMemWatch(), grace: hardDeadlineGrace, metrics: nopRecorder{}}
	e.warm.goroutines = &e.runners
	if opts != nil && opts.Metrics != nil {
		e.metrics = opts.Metrics
	}
	return e
}

// Limits reports the engine's effective limits (before Request.Limits).
func (e *InProcess) Limits() Limits { return e.limits }

// Health implements HealthReporter: the in-process engine has no pool.
func (e *InProcess) Health() EngineHealth { return EngineHealth{Kind: "inprocess"} }

// Close makes later Execute calls fail with POOL_DISPOSED. Running scripts
// finish normally.
func (e *InProcess) Close() error {
	e.closed.Store(true)
	e.warm.close()
	e.runners.stop()
	return nil
}

// Execute runs one script. See Engine. Compilation runs inside the script's
// time and CPU budget, on the script's goroutine.
func (e *InProcess) Execute(ctx context.Context, req Request, host Host) (res *Result, err error) {
	ctx, done := begin(ctx, e.metrics, EngineInProcess)
	defer func() { done(res, err) }()
	if e.closed.Load() {
		return nil, &Error{Code: CodePoolDisposed, Message: "sandbox engine is closed"}
	}
	if err := ctx.Err(); err != nil {
		return nil, &Error{Code: CodeExecutionAborted, Message: "execution aborted before it started: " + err.Error()}
	}
	start := time.Now()
	limits := LowerLimits(e.limits, req.Limits)
	x := e.warm.take()
	if x == nil {
		x = &execution{rt: goja.New()}
	}
	x.init(ctx, limits, req, host)
	x.sanitize = e.sanitize
	x.mem = e.mem
	out := make(chan runOutcome, 1)
	// state: 0 running, 1 finished, 2 abandoned by Execute.
	var state atomic.Int32
	wall := time.AfterFunc(limits.Timeout, func() {
		x.stop(&abort{result: timeoutResult(limits.Timeout.Milliseconds())})
	})
	defer wall.Stop()
	e.runners.run(func() {
		defer func() {
			if p := recover(); p != nil {
				e.logger.Log(ctx, "error", "sandbox engine panic", "panic", p)
				out <- runOutcome{res: runtimeResult("Error", "internal error in the sandbox engine", "")}
			}
			if !state.CompareAndSwap(0, 1) {
				e.abandoned.Add(-1)
			}
		}()
		res, err := x.run()
		out <- runOutcome{res: res, err: err}
	})
	// The VM stops at the interrupt of whatever ended it (time, CPU,
	// memory, the caller); a built-in that ignores interrupts keeps it
	// busy until the built-in returns. Execute waits for that (so no CPU is
	// spent for a run after its answer) up to hardDeadlineGrace, then
	// answers anyway and abandons the VM goroutine, which stops at its next
	// JavaScript instruction.
	var o runOutcome
	select {
	case o = <-out:
	case <-x.stopCh:
		grace := time.NewTimer(e.grace)
		select {
		case o = <-out:
			grace.Stop()
		case <-grace.C:
			if !state.CompareAndSwap(0, 2) {
				o = <-out // finished just now
				break
			}
			e.abandoned.Add(1)
			e.logger.Log(ctx, "warn", "sandbox script ignored its stop inside a built-in; abandoning its goroutine",
				"timeout", limits.Timeout, "cpu_time", limits.CPUTime)
			o.res, o.err = x.stopped.outcome()
			if o.res != nil && o.res.Error != nil {
				o.res.Error.Message += " (the script was stuck in a built-in function and was abandoned)"
			}
			// The execution is over for the host, and the calls it left
			// end now, as at any other end, not when the goroutine
			// returns (whenever the built-in lets go): a host that waits
			// for its calls (the broker) waited with them.
			x.end()
			x.cancel(callsCause(o.res, o.err))
		}
	}
	if o.err != nil {
		return nil, o.err
	}
	if o.res == nil {
		o.res = runtimeResult("Error", "internal error in the sandbox engine: no result", "")
	}
	if err := ctx.Err(); err != nil {
		// The caller gave up; whatever the script did is moot.
		return nil, &Error{Code: CodeExecutionAborted, Message: "execution aborted: " + context.Cause(ctx).Error()}
	}
	o.res.Stats.Duration = time.Since(start)
	return e.finish(o.res), nil
}

// hardDeadlineGrace is how long Execute waits past a stop for a VM stuck in
// a built-in before it answers without it. The built-ins the sandbox leaves
// in Go are bounded by the size caps and regexpMatchTimeout (a linear scan
// of the largest string the memory limit allows takes a few seconds), so
// only a bug in that reasoning reaches it.
const hardDeadlineGrace = 5 * time.Second

type runOutcome struct {
	res *Result
	err error
}

// finish applies sanitization.
func (e *InProcess) finish(r *Result) *Result {
	if r.Error == nil {
		return r
	}
	r.Error.Message = clipText(r.Error.Message, MaxErrorBytes)
	r.Error.Stack = clipText(r.Error.Stack, MaxErrorBytes)
	e.sanitize.Error(r.Error)
	return r
}

// abort is the value a run is interrupted with; it carries the outcome.
// Once stored it is only read: outcome hands out copies, since Execute and
// the VM goroutine may both report it.
type abort struct {
	result *Result
	err    error
}

// outcome returns a copy of the result (and its error) and the error.
func (a *abort) outcome() (*Result, error) {
	if a.result == nil {
		return nil, a.err
	}
	r := *a.result
	if r.Error != nil {
		e := *r.Error
		r.Error = &e
	}
	return &r, a.err
}

// completion is a finished tool call on its way back to the VM goroutine.
type completion struct {
	id      int64
	ok      bool
	payload string
}

// execution is the state of one script run. Everything except the
// completions channel, the timers and ctx is touched only by the goroutine
// that runs the VM.
type execution struct {
	ctx    context.Context
	cancel context.CancelCauseFunc // with callsCause, as the worker engine
	// over is set once the host has been told the execution ended
	// (EndHost): by Execute for an abandoned run, else by run.
	over     atomic.Bool
	limits   Limits
	req      Request
	host     Host
	logHost  LogHost
	parkHost ParkHost
	starter  callStarter // the host, when its calls complete by callback
	gracer   parkGracer  // the host, when a park is costly
	poller   inputPoller // the host, when a waiting script may read its results
	allowed  map[string]bool

	rt         *goja.Runtime
	prelude    *preludeFns // nil until the prelude ran
	generators bool
	// unnamed: the gated globals the plan does not name (globals.go); 0
	// prepares all of them.
	unnamed     uint32
	done        chan struct{}
	stopOnce    sync.Once
	stopCh      chan struct{}
	stopped     *abort
	completions chan completion
	pending     int
	settled     int // tool results received
	nextID      int64
	calls       map[int64]pendingCall // by id, the calls not yet settled
	toolCalls   int
	lookups     map[string]bool
	steps       int64
	counts      []jsonCount // the serializations under way, innermost last
	countFail   string      // why the counter stopped the last serialization that ended
	logs        []string
	logBytes    int
	logFull     bool

	// CPU accounting: the running time of earlier stretches, the start of
	// the current one, and the timer that stops the script when the budget
	// is spent.
	cpuUsed  time.Duration
	cpuSince time.Time
	cpuTimer *time.Timer
	mem      *memWatch
	memAcct  memShare
	// sanitize is applied to every tool error the script sees.
	sanitize Sanitization

	// graceTimer bounds a wait for a result before the host is told the
	// script parked (see parkGracer).
	graceTimer *time.Timer
}

func newExecution(ctx context.Context, limits Limits, req Request, host Host) *execution {
	x := &execution{rt: goja.New()}
	x.init(ctx, limits, req, host)
	return x
}

// init gives x its request. x is fresh, or a runtime whose prelude ran
// before the request arrived (see warmRuntime) and that nothing else used.
func (x *execution) init(ctx context.Context, limits Limits, req Request, host Host) {
	x.ctx, x.cancel = context.WithCancelCause(ctx)
	x.over.Store(false)
	x.limits = limits
	x.req = req
	x.host = host
	x.done = make(chan struct{})
	x.stopCh = make(chan struct{})
	x.completions = make(chan completion, 16)
	x.logHost, _ = host.(LogHost)
	x.parkHost, _ = host.(ParkHost)
	x.starter, _ = host.(callStarter)
	x.gracer, _ = x.parkHost.(parkGracer)
	x.poller, _ = x.gracer.(inputPoller)
	if req.AllowedTools != nil {
		x.allowed = make(map[string]bool, len(req.AllowedTools))
		for _, n := range req.AllowedTools {
			x.allowed[n] = true
		}
	}
}

// end tells the host, once, that the execution is over (EndHost).
func (x *execution) end() {
	if x.over.CompareAndSwap(false, true) {
		ended(x.host)
	}
}

// interrupt stops the script with a final outcome that no script code can
// catch or change.
func (x *execution) interrupt(r *Result) {
	x.stop(&abort{result: r})
}

// stop ends the run with a; the first reason wins. It may be called from any
// goroutine.
func (x *execution) stop(a *abort) {
	x.stopOnce.Do(func() {
		x.stopped = a
		x.rt.Interrupt(a)
		close(x.stopCh)
	})
}

// resume starts a stretch of running JavaScript: the CPU timer gets what is
// left of the budget and the heap watchdog charges the script again.
func (x *execution) resume() {
	now := time.Now()
	x.cpuSince = now
	left := x.limits.CPUTime - x.cpuUsed
	if left <= 0 {
		left = time.Nanosecond
	}
	if x.cpuTimer == nil {
		ms := x.limits.CPUTime.Milliseconds()
		x.cpuTimer = time.AfterFunc(left, func() {
			x.stop(&abort{result: cpuTimeoutResult(ms)})
		})
	} else {
		x.cpuTimer.Reset(left)
	}
	if x.mem != nil && x.limits.MemoryBytes > 0 {
		x.mem.begin(x, now)
	}
}

// pause ends a stretch of running JavaScript.
func (x *execution) pause(finished bool) {
	now := time.Now()
	if x.cpuTimer != nil {
		x.cpuTimer.Stop()
	}
	x.cpuUsed += now.Sub(x.cpuSince)
	if x.mem != nil && x.limits.MemoryBytes > 0 {
		x.mem.end(x, now, finished)
	}
}

func (x *execution) run() (res *Result, err error) {
	x.resume()
	defer func() {
		x.pause(true)
		close(x.done)
		x.end()
		// The tool calls still running learn why (the worker engine's
		// cause, so a host reports both alike).
		x.cancel(callsCause(res, err))
		if res != nil {
			res.Stats.ToolCalls = x.toolCalls
			res.Stats.Steps = x.steps
		}
	}()
	plan, r := compilePlan(x.req.Code, x.limits)
	if r != nil {
		return r, nil
	}
	select {
	case <-x.stopCh:
		// Compiling took the whole budget (goja's compiler does not look
		// at interrupts).
		return x.stopped.outcome()
	default:
	}
	rt := x.rt
	if x.limits.MaxCallDepth > 0 {
		rt.SetMaxCallStackSize(x.limits.MaxCallDepth)
	}
	stopCtx := context.AfterFunc(x.ctx, func() {
		x.stop(&abort{err: &Error{Code: CodeExecutionAborted, Message: "execution aborted: " + context.Cause(x.ctx).Error()}})
	})
	defer stopCtx()

	x.generators = plan.generators
	x.unnamed = plan.unnamed
	settle, result, describe, objSource, res, err := x.setup(plan.regexps)
	if res != nil || err != nil {
		return res, err
	}

	v, gerr := rt.RunProgram(plan.prg)
	if gerr != nil {
		return x.failure(gerr, describe)
	}
	factory, _ := goja.AssertFunction(v)
	main, gerr := factory(goja.Undefined(), rt.NewDynamicObject(stepCounter{x}), objSource)
	if gerr != nil {
		return x.failure(gerr, describe)
	}
	mainFn, _ := goja.AssertFunction(main)
	pv, gerr := mainFn(goja.Undefined())
	if gerr != nil {
		return x.failure(gerr, describe)
	}
	promise, ok := pv.Export().(*goja.Promise)
	if !ok {
		return nil, &Error{Code: CodeExecutionError, Message: "internal error: plan did not return a promise"}
	}

	for promise.State() == goja.PromiseStatePending {
		if x.pending == 0 {
			r := runtimeResult("Error", "the script is waiting for a promise that can never settle (no tool call is pending)", "")
			r.Logs = x.logs
			return r, nil
		}
		var c completion
		select {
		case c = <-x.completions:
			// The script goes on at once: the calls the stretch that
			// just ended started go out now (a host that queues them
			// sends them with its wait otherwise).
			x.flushCalls()
		default:
			// Nothing to run until a tool answers: the script holds no
			// CPU (and is charged none) while it waits.
			if c, ok = x.wait(); !ok {
				r, err := x.stopped.outcome()
				if r != nil {
					r.Logs = x.logs
				}
				return r, err
			}
		}
		x.pending--
		x.settled++
		// A result is handed over as the value JSON.parse would make of
		// it, built here; an error (and any result jsonValue leaves to
		// JSON.parse) as its JSON text.
		var payload goja.Value
		built := false
		if c.ok {
			payload, built = jsonValue(rt, c.payload)
		}
		if !built {
			payload = rt.ToValue(c.payload)
		}
		if gerr := x.settleCall(c, payload, built, settle); gerr != nil {
			return x.failure(gerr, describe)
		}
	}

	if promise.State() == goja.PromiseStateRejected {
		d, gerr := describe(goja.Undefined(), promise.Result())
		if gerr != nil {
			return x.failure(gerr, nil)
		}
		return x.described(d), nil
	}
	out, gerr := result(goja.Undefined(), promise.Result())
	if gerr != nil {
		return x.failure(gerr, describe)
	}
	text, ok := out.Export().(string)
	b := []byte(text)
	if !ok || !json.Valid(b) {
		return runtimeResult("TypeError", "the script result is not serializable to JSON", ""), nil
	}
	if x.limits.MaxResultBytes > 0 && len(text) > x.limits.MaxResultBytes {
		return runtimeResult("RangeError", fmt.Sprintf("the script result is %d bytes of JSON, more than the limit of %d bytes", len(text), x.limits.MaxResultBytes), ""), nil
	}
	return &Result{Status: StatusOK, Result: replaceLoneSurrogates(b), Logs: x.logs}, nil
}

// settleCall settles the promise of the call c completed: a result built
// in Go (the common case) resolves it directly, anything else takes the
// prelude's settle (a tool error object, a soft call's envelope, a result
// left to JSON.parse), whose throw rejects it. The error returned is one
// the script cannot catch (an interrupt), as from any call into the runtime.
func (x *execution) settleCall(c completion, payload goja.Value, built bool, settle goja.Callable) error {
	pc, ok := x.calls[c.id]
	if !ok {
		return nil
	}
	delete(x.calls, c.id)
	if c.ok && built && !pc.soft {
		return pc.resolve(payload)
	}
	rt := x.rt
	v, err := settle(goja.Undefined(), rt.ToValue(pc.label), rt.ToValue(pc.soft), rt.ToValue(c.ok), payload, rt.ToValue(built))
	if err != nil {
		var ex *goja.Exception
		if !errors.As(err, &ex) {
			return err
		}
		return pc.reject(ex.Value())
	}
	return pc.resolve(v)
}

// wait parks the script until a tool call completes; ok is false when the
// run was stopped meanwhile.
func (x *execution) wait() (completion, bool) {
	x.pause(false)
	var c completion
	if x.gracer != nil {
		if d := x.gracer.parkGrace(); d > 0 {
			// The calls started go out now, then a result that comes
			// within the grace needs no word to the host.
			x.flushCalls()
			if x.poller != nil {
				var ended, ok bool
				if c, ok, ended, d = x.pollGrace(d); ended {
					if ok {
						x.resume()
					}
					return c, ok
				}
			}
			if d > 0 {
				if x.graceTimer == nil {
					x.graceTimer = time.NewTimer(d)
				} else {
					x.graceTimer.Reset(d)
				}
				select {
				case c = <-x.completions:
					x.graceTimer.Stop()
					x.resume()
					return c, true
				case <-x.stopCh:
					x.graceTimer.Stop()
					return c, false
				case <-x.graceTimer.C:
				}
			}
		}
	}
	if x.parkHost != nil {
		x.parkHost.Parked(x.settled)
	}
	select {
	case c = <-x.completions:
	case <-x.stopCh:
		return c, false
	}
	if x.parkHost != nil && !x.parkHost.Resumed() {
		x.stop(&abort{err: &Error{Code: CodeExecutionAborted, Message: "execution aborted while waiting to resume"}})
		return c, false
	}
	x.resume()
	return c, true
}

// pollGrace spends up to d of the park grace polling the host's input
// (see inputPoller). done reports that the wait ended (with a result: ok,
// or stopped); otherwise left is what remains of the grace.
func (x *execution) pollGrace(d time.Duration) (c completion, ok, done bool, left time.Duration) {
	start := time.Now()
	for {
		select {
		case c = <-x.completions:
			return c, true, true, 0
		case <-x.stopCh:
			return c, false, true, 0
		default:
		}
		left = d - time.Since(start)
		if left <= 0 || !x.poller.pollInput() {
			return c, false, false, left
		}
	}
}

// preludeFns are the prelude's internal functions in one runtime.
type preludeFns struct {
	settle, result, describe, configure goja.Callable
	objSource                           goja.Value
	// nat holds the native hooks; setup adds those only the script API
	// and JSON use when the plan names them.
	nat *goja.Object
}

// runPrelude runs the prelude's request-independent setup in x's runtime,
// with native hooks bound to x (they read x's request only when called).
func (x *execution) runPrelude() error {
	rt := x.rt
	text := x.jsonTextFunc() // before any JavaScript runs
	v, err := rt.RunProgram(preludeProgram())
	if err != nil {
		return err
	}
	setupFn, _ := goja.AssertFunction(v)
	nat := rt.NewObject()
	_ = nat.Set("call", x.callFunc())
	_ = nat.Set("step", x.stepFunc())
	_ = nat.Set("text", text)
	_ = nat.Set("countFailure", x.jsonFailure)
	_ = nat.Set("pattern", func(call goja.FunctionCall) goja.Value {
		s, _ := call.Argument(0).Export().(string)
		return rt.ToValue(checkPattern(s))
	})
	if v, err = setupFn(goja.Undefined(), nat); err != nil {
		return err
	}
	// The functions are taken as JavaScript values: a round trip through
	// Export would wrap them in Go functions whose names show in stacks.
	fns := v.ToObject(rt)
	p := &preludeFns{objSource: fns.Get("3"), nat: nat}
	p.settle, _ = goja.AssertFunction(fns.Get("0"))
	p.result, _ = goja.AssertFunction(fns.Get("1"))
	p.describe, _ = goja.AssertFunction(fns.Get("2"))
	p.configure, _ = goja.AssertFunction(fns.Get("4"))
	x.prelude = p
	return nil
}

// setup runs the prelude unless it ran in advance, configures it for the
// request and returns the internal functions.
func (x *execution) setup(regexps bool) (settle, result, describe goja.Callable, objSource goja.Value, res *Result, err error) {
	ctxJSON := "{}"
	if len(x.req.Context) > 0 {
		if msg := CheckContext(x.req.Context); msg != "" {
			return nil, nil, nil, nil, nil, &Error{Code: CodeMessageInvalid, Message: "request " + msg}
		}
		ctxJSON = string(x.req.Context)
	}
	var gerr error
	if x.prelude == nil {
		gerr = x.runPrelude()
	}
	if gerr == nil {
		rt := x.rt
		// The hooks of getTool, console and JSON.parse, for the plans that
		// name them (see globals.go).
		if nat := x.prelude.nat; nat != nil {
			if x.unnamed&globalGetTool == 0 {
				_ = nat.Set("getTool", x.getToolFunc())
			}
			if x.unnamed&globalConsole == 0 {
				_ = nat.Set("log", x.logFunc())
			}
			if x.unnamed&globalJSON == 0 {
				_ = nat.Set("json", func(call goja.FunctionCall) goja.Value {
					s, _ := call.Argument(0).Export().(string)
					maxArray, _ := memoryCaps(x.limits)
					return rt.ToValue(checkJSON(s, MaxJSONDepth, maxArray))
				})
			}
		}
		maxArray, maxString := memoryCaps(x.limits)
		cfg := rt.NewObject()
		_ = cfg.Set("allowConsole", x.limits.AllowConsole)
		_ = cfg.Set("maxParallel", maxParallelOps)
		_ = cfg.Set("maxArrayLength", maxArray)
		_ = cfg.Set("maxStringLength", maxString)
		_ = cfg.Set("maxResultBytes", positiveOr(x.limits.MaxResultBytes, maxString))
		_ = cfg.Set("maxConsoleBytes", positiveOr(x.limits.MaxConsoleBytes, maxString))
		_ = cfg.Set("hasGenerators", x.generators)
		_ = cfg.Set("hasRegExps", regexps)
		_ = cfg.Set("unnamed", x.unnamed)
		_ = cfg.Set("maxJSONDepth", MaxJSONDepth)
		_ = cfg.Set("maxErrorChars", MaxErrorBytes)
		_, gerr = x.prelude.configure(goja.Undefined(), rt.ToValue(ctxJSON), cfg)
		if gerr == nil && x.unnamed&globalBigInt == 0 {
			x.prepareBigInt(x.prelude.objSource)
		}
	}
	if gerr != nil {
		if r, e := interrupted(gerr); r != nil || e != nil {
			return nil, nil, nil, nil, r, e
		}
		return nil, nil, nil, nil, nil, &Error{Code: CodeExecutionError, Message: "internal error: sandbox setup failed: " + gerr.Error()}
	}
	p := x.prelude
	return p.settle, p.result, p.describe, p.objSource, nil, nil
}

func memoryResult(limit int64) *Result {
	return &Result{Status: StatusRuntimeError, Error: &ScriptError{
		Code: CodeWorkerMemoryExceeded, Source: "script", Name: "WorkerMemoryError",
		Message: fmt.Sprintf("script exceeded the memory limit of %d MiB", limit>>20),
	}}
}

func positiveOr(v int, def int64) int64 {
	if v > 0 {
		return int64(v)
	}
	return def
}

// maxParallelOps is the __safe_parallel operation limit (spec rule 2).
const maxParallelOps = 100

// memoryCaps derives the built-in size caps from the memory budget: an array
// element costs goja at least 16 bytes, a string character 1 to 2 bytes.
func memoryCaps(l Limits) (maxArray, maxString int64) {
	mem := l.MemoryBytes
	if mem <= 0 {
		mem = presets[DefaultPreset].MemoryBytes
	}
	return mem / 64, mem / 4
}

// interrupted maps an uncatchable goja error to its outcome.
func interrupted(gerr error) (*Result, error) {
	var ie *goja.InterruptedError
	if errors.As(gerr, &ie) {
		if a, ok := ie.Value().(*abort); ok {
			return a.outcome()
		}
		return runtimeResult("Error", "script interrupted", ""), nil
	}
	var so *goja.StackOverflowError
	if errors.As(gerr, &so) {
		return runtimeResult("RangeError", "maximum call stack size exceeded", ""), nil
	}
	return nil, nil
}

// failure maps an error returned by goja to the script's outcome.
func (x *execution) failure(gerr error, describe goja.Callable) (*Result, error) {
	var so *goja.StackOverflowError
	if errors.As(gerr, &so) {
		r := runtimeResult("RangeError", fmt.Sprintf("maximum call stack size of %d frames exceeded", x.limits.MaxCallDepth), "")
		r.Logs = x.logs
		return r, nil
	}
	if r, e := interrupted(gerr); r != nil || e != nil {
		if r != nil {
			r.Logs = x.logs
		}
		return r, e
	}
	var ex *goja.Exception
	if errors.As(gerr, &ex) && describe != nil {
		d, derr := describe(goja.Undefined(), ex.Value())
		if derr == nil {
			return x.described(d), nil
		}
		if r, e := interrupted(derr); r != nil || e != nil {
			return r, e
		}
	}
	return runtimeResult("Error", "uncaught exception", ""), nil
}

// described turns the prelude's JSON description of a thrown value into a
// result.
func (x *execution) described(d goja.Value) *Result {
	text, _ := d.Export().(string)
	var desc struct {
		Tool     bool   `json:"tool"`
		ToolName string `json:"toolName"`
		Code     string `json:"code"`
		Name     string `json:"name"`
		Message  string `json:"message"`
		Stack    string `json:"stack"`
	}
	if err := json.Unmarshal([]byte(text), &desc); err != nil {
		return runtimeResult("Error", "uncaught exception", "")
	}
	var r *Result
	if desc.Tool {
		r = &Result{Status: StatusToolError, Error: &ScriptError{
			Code: desc.Code, Source: "tool", ToolName: desc.ToolName, Message: desc.Message, Stack: planStack(desc.Stack),
		}}
	} else {
		r = runtimeResult(desc.Name, desc.Message, planStack(desc.Stack))
	}
	r.Logs = x.logs
	return r
}

func runtimeResult(name, msg, stack string) *Result {
	return &Result{Status: StatusRuntimeError, Error: &ScriptError{
		Code: CodeExecutionError, Source: "script", Name: name, Message: msg, Stack: stack,
	}}
}

// cpuTimeoutResult reports a script that ran (rather than waited) past
// its CPU time.
func cpuTimeoutResult(ms int64) *Result {
	return &Result{Status: StatusTimeout, Error: &ScriptError{
		Code: CodeTimeout, Message: fmt.Sprintf("script exceeded the time limit of %d ms of running time (waits for tools excluded)", ms),
	}}
}

func timeoutResult(ms int64) *Result {
	return &Result{Status: StatusTimeout, Error: &ScriptError{
		Code: CodeTimeout, Message: fmt.Sprintf("script exceeded the time limit of %d ms", ms),
	}}
}

// planStack keeps the frames of a goja stack that belong to the plan and
// shifts line-1 columns back to the plan's coordinates.
func planStack(stack string) string {
	if stack == "" {
		return ""
	}
	lines := strings.Split(stack, "\n")
	out := lines[:0]
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if strings.Contains(t, "prelude.js") {
			continue
		}
		if i := strings.Index(l, planFileName+":1:"); i >= 0 {
			rest := l[i+len(planFileName)+3:]
			j := 0
			for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
				j++
			}
			if col, err := strconv.Atoi(rest[:j]); err == nil && col > len(planPrefix) {
				l = l[:i] + planFileName + ":1:" + strconv.Itoa(col-len(planPrefix)) + rest[j:]
			}
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

// --- native hooks (run on the VM goroutine) ---------------------------------

// step counts one step (a loop iteration, a function call, a callback of a
// built-in); the step past MaxSteps interrupts the run. It is small enough
// to inline into stepCounter.Get, which runs once per loop iteration.
func (x *execution) step() {
	x.steps++
	if x.steps > x.limits.MaxSteps && x.limits.MaxSteps > 0 {
		x.stepLimit()
	}
	if x.mem != nil && x.mem.gate.Load() != nil {
		x.mem.wait(x)
	}
}

// stepLimit interrupts the run at the step past MaxSteps.
func (x *execution) stepLimit() {
	x.interrupt(runtimeResult("RangeError", fmt.Sprintf("step limit of %d loop iterations and function calls exceeded", x.limits.MaxSteps), ""))
}

// stepFunc is the prelude's step: a native function for the steps the
// prelude counts (callbacks of built-ins, regular-expression scans).
func (x *execution) stepFunc() func(goja.FunctionCall) goja.Value {
	return func(goja.FunctionCall) goja.Value {
		x.step()
		return goja.Undefined()
	}
}

// stepCounter is the plan's step counter: each instrumented loop body and
// function body reads its property stepProperty, and every read of any
// property counts one step. The plan cannot name it (reserved prefix);
// should a reference leak, it can neither be written, deleted nor
// enumerated, and a read never reaches a prototype, so nothing a script
// does to Object.prototype changes what a read does.
type stepCounter struct{ x *execution }

func (c stepCounter) Get(string) goja.Value {
	c.x.step()
	return goja.Undefined()
}

func (stepCounter) Set(string, goja.Value) bool { return false }
func (stepCounter) Has(string) bool             { return false }
func (stepCounter) Delete(string) bool          { return false }
func (stepCounter) Keys() []string              { return nil }

// toolErrorJSON is what callTool's promise rejects with, as JSON. The
// message is bounded (MaxErrorBytes).
func toolErrorJSON(code, msg string) string {
	b, _ := json.Marshal(ToolError{Code: clipText(code, 100), Message: clipText(msg, MaxErrorBytes)})
	return string(b)
}

// pendingCall is a started call's promise, settled by the Go side: its
// resolving functions, and what the prelude's settle needs for any other
// outcome than a result built in Go (label: the name errors show; soft:
// the call asked for throwOnError false).
type pendingCall struct {
	resolve, reject func(any) error
	label           string
	soft            bool
}

// callFunc is the prelude's nat.call(name, input, label, soft): it checks
// and starts a tool call and returns its promise, or the JSON text of a
// tool error the call fails with at once. The promise is made here, not
// by the prelude's new Promise(executor): no executor runs and no record
// holds the resolving functions in JavaScript, and a result the Go side
// built settles it without JavaScript (see settleCall).
func (x *execution) callFunc() func(goja.FunctionCall) goja.Value {
	return func(call goja.FunctionCall) goja.Value {
		name, input := stringArg(call.Argument(0)), stringArg(call.Argument(1))
		if len(name) > MaxToolNameBytes {
			// No tool has such a name: answered without a lookup and
			// without copying it into the message.
			return x.rt.ToValue(toolErrorJSON(CodeToolNotFound, fmt.Sprintf("tool %q not found (names are at most %d bytes)", clipName(name), MaxToolNameBytes)))
		}
		discovery := isDiscovery(name)
		if !discovery && IsMetaTool(name) {
			x.interrupt(&Result{Status: StatusIllegalAccess, Error: &ScriptError{
				Code: CodeSelfReferenceBlocked, Kind: KindSelfReference,
				Message: fmt.Sprintf("scripts cannot call meta-tools (%q)", name),
			}})
			return goja.Undefined()
		}
		// searchTools and describeTool are no tools: allowedTools does not
		// list them, and the host answers them (see Discovery).
		if !discovery && x.allowed != nil && !x.allowed[name] {
			return x.rt.ToValue(toolErrorJSON(CodeAccessDenied, fmt.Sprintf("tool %q is not in allowedTools", name)))
		}
		// A call of an unknown tool still reaches the host, which answers
		// TOOL_NOT_FOUND: hosts see every call (their events and metrics
		// count it) and it counts against the tool call limit.
		known := true
		if !discovery {
			if _, known = x.lookup(name); !known {
				select {
				case <-x.stopCh:
					return goja.Undefined() // the lookup limit stopped the script
				default:
				}
			}
		}
		x.toolCalls++
		if x.limits.MaxToolCalls > 0 && x.toolCalls > x.limits.MaxToolCalls {
			x.interrupt(runtimeResult("RangeError", fmt.Sprintf("tool call limit of %d calls exceeded", x.limits.MaxToolCalls), ""))
			return goja.Undefined()
		}
		in := replaceLoneSurrogates([]byte(input))
		if !json.Valid(in) {
			if known {
				return x.rt.ToValue(toolErrorJSON(CodeToolExecutionError, "tool input is not valid JSON"))
			}
			in = []byte("null")
		}
		x.nextID++
		id := x.nextID
		x.pending++
		p, resolve, reject := x.rt.NewPromise()
		label := stringArg(call.Argument(2))
		if x.calls == nil {
			x.calls = make(map[int64]pendingCall)
		}
		x.calls[id] = pendingCall{resolve: resolve, reject: reject, label: label, soft: call.Argument(3).ToBoolean()}
		tc := ToolCall{ID: strconv.FormatInt(id, 10), Name: name, Input: in}
		if x.starter != nil {
			unknown := !known
			x.starter.startCall(x.ctx, tc, func(data json.RawMessage, err error) {
				x.deliver(x.complete(id, tc, unknown, data, err))
			})
		} else {
			go x.runTool(id, tc, !known)
		}
		return x.rt.ToValue(p)
	}
}

// stringArg is a native hook's string argument as a Go string, "" for any
// other value (as Export().(string) is, without boxing the string in an
// interface: an allocation per argument).
func stringArg(v goja.Value) string {
	if s, ok := v.(goja.String); ok {
		return s.String()
	}
	return ""
}

// lookup asks the host whether a tool exists. Each distinct name a script
// asks about counts: beyond its tool-call budget plus maxLookupsExtra the
// script is stopped (every lookup may be a round trip and a cache entry
// outside its memory).
func (x *execution) lookup(name string) (ToolInfo, bool) {
	if _, seen := x.lookups[name]; !seen {
		if x.lookups == nil {
			x.lookups = make(map[string]bool)
		}
		if max := x.limits.MaxToolCalls + maxLookupsExtra; len(x.lookups) >= max {
			x.interrupt(runtimeResult("RangeError", fmt.Sprintf("tool lookup limit of %d distinct names exceeded", max), ""))
			return ToolInfo{}, false
		}
		x.lookups[name] = true
	}
	return x.host.LookupTool(name)
}

// callStarter is a Host whose tool calls complete by callback: the
// worker's proxy host, which sends the call to the parent and hands the
// reply to the script from the goroutine that reads it. It saves a
// goroutine per call and two hand-offs between goroutines per awaited call.
// startCall is called on the VM goroutine and must not wait for the call;
// done is called exactly once, from any goroutine, unless the execution's
// context ends first (the run is over then). The host may hold the calls
// a stretch of JavaScript starts until the script waits (ParkHost.Parked)
// or flushCalls, which the engine calls when a stretch ends and the
// script goes on without waiting. The call's input is one JSON value
// (the engine checked it), which the host need not check again.
type callStarter interface {
	startCall(ctx context.Context, call ToolCall, done func(json.RawMessage, error))
	flushCalls()
}

// parkGracer is a ParkHost for which a park is costly (the worker's proxy
// host: Parked is a frame to the parent, which gives the script's CPU slot
// away and back). The engine waits up to parkGrace for a result before it
// calls Parked, so that a call answered at once costs no park. The script
// runs nothing meanwhile and is charged no CPU time; it keeps its slot a
// little longer, as if it still computed.
type parkGracer interface {
	parkGrace() time.Duration
}

// inputPoller is a parkGracer whose tool results the waiting script may
// read itself (the worker's proxy host; see workerInput): during the park
// grace the engine calls pollInput, which reads and hands over whatever
// arrived and yields the processor when nothing did, instead of sleeping
// until a result or the grace's timer wakes it (a thread wake-up each).
// pollInput returns false when this wait is not to be polled; the engine
// then sleeps for the rest of the grace.
type inputPoller interface {
	pollInput() bool
}

// flushCalls: see callStarter.
func (x *execution) flushCalls() {
	if x.starter != nil {
		x.starter.flushCalls()
	}
}

// runTool runs one tool call off the VM goroutine and hands the outcome
// back as JSON text.
func (x *execution) runTool(id int64, tc ToolCall, unknown bool) {
	data, err := callHost(x.ctx, x.host, tc)
	c := x.complete(id, tc, unknown, data, err)
	select {
	case x.completions <- c:
	case <-x.done:
	}
}

// deliver hands the outcome of a started call to the VM goroutine without
// blocking its caller (a worker's reader, which must keep reading): when
// the queue is full, a goroutine waits to hand it over.
func (x *execution) deliver(c completion) {
	select {
	case x.completions <- c:
	default:
		go func() {
			select {
			case x.completions <- c:
			case <-x.done:
			}
		}()
	}
}

// complete turns a tool call's outcome into what the script receives.
func (x *execution) complete(id int64, tc ToolCall, unknown bool, data json.RawMessage, err error) completion {
	c := completion{id: id}
	if unknown && err != nil {
		// Whatever the host calls it, the script sees the engine's code.
		err = &ToolError{Code: CodeToolNotFound, Message: fmt.Sprintf("tool %q not found", tc.Name)}
	}
	switch {
	case err != nil:
		var te *ToolError
		if errors.As(err, &te) {
			c.payload = toolErrorJSON(te.Code, x.sanitize.Text(clipText(te.Message, MaxErrorBytes)))
		} else {
			c.payload = toolErrorJSON(CodeToolExecutionError, x.sanitize.Text(clipText(err.Error(), MaxErrorBytes)))
		}
	case len(data) == 0:
		c.ok, c.payload = true, "null"
	case !json.Valid(data):
		c.payload = toolErrorJSON(CodeToolExecutionError, fmt.Sprintf("tool %q returned invalid JSON", tc.Name))
	default:
		if msg := checkJSON(string(data), MaxJSONDepth, 0); msg != "" {
			c.payload = toolErrorJSON(CodeToolExecutionError, fmt.Sprintf("tool %q returned %s", tc.Name, msg))
			break
		}
		c.ok, c.payload = true, string(data)
	}
	return c
}

// callHost calls the host, turning a panic into a tool error.
func callHost(ctx context.Context, h Host, tc ToolCall) (data json.RawMessage, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("tool %q failed: internal error", tc.Name)
		}
	}()
	return dispatch(ctx, h, tc)
}

func (x *execution) getToolFunc() func(goja.FunctionCall) goja.Value {
	return func(call goja.FunctionCall) goja.Value {
		name, _ := call.Argument(0).Export().(string)
		if len(name) > MaxToolNameBytes || IsMetaTool(name) || (x.allowed != nil && !x.allowed[name]) {
			return x.rt.ToValue("")
		}
		info, ok := x.lookup(name)
		if !ok {
			return x.rt.ToValue("")
		}
		if info.Name == "" {
			info.Name = name
		}
		b, err := json.Marshal(info)
		if err != nil {
			return x.rt.ToValue("")
		}
		return x.rt.ToValue(string(b))
	}
}

// logFunc records one console entry; it returns false once the budget is
// spent so the script stops formatting further entries.
func (x *execution) logFunc() func(goja.FunctionCall) goja.Value {
	return func(call goja.FunctionCall) goja.Value {
		level, _ := call.Argument(0).Export().(string)
		msg, _ := call.Argument(1).Export().(string)
		if x.logFull {
			return x.rt.ToValue(false)
		}
		if level != "log" {
			msg = "[" + level + "] " + msg
		}
		maxEntries, maxBytes := x.limits.MaxConsoleEntries, x.limits.MaxConsoleBytes
		if (maxEntries > 0 && len(x.logs) >= maxEntries) || (maxBytes > 0 && x.logBytes+len(msg) > maxBytes) {
			if maxBytes > 0 && len(x.logs) < maxEntries && x.logBytes < maxBytes {
				// Keep what fits of the entry that overflows the budget.
				msg = clip.String(msg, maxBytes-x.logBytes)
				x.appendLog(level, msg)
			}
			x.logFull = true
			x.logs = append(x.logs, fmt.Sprintf("[warn] console output truncated: limit of %d entries or %d bytes reached", maxEntries, maxBytes))
			return x.rt.ToValue(false)
		}
		x.appendLog(level, msg)
		return x.rt.ToValue(true)
	}
}

func (x *execution) appendLog(level, msg string) {
	x.logs = append(x.logs, msg)
	x.logBytes += len(msg)
	if x.logHost != nil {
		x.logHost.Log(level, msg)
	}
}

// metaToolNames are the meta-tools under their separator-free base names.
var metaToolNames = map[string]bool{"search": true, "describe": true, "execute": true, "invoke": true}

// IsMetaTool reports whether name designates a meta-tool, however it was
// spelled: any "meta:" name, and the four meta-tools with "_", "-", "." or
// "/" as separator, in any case, with surrounding space or invisible
// characters.
func IsMetaTool(name string) bool {
	n := strings.ToLower(strings.TrimFunc(name, func(r rune) bool {
		return unicode.IsSpace(r) || unicode.Is(unicode.Cf, r)
	}))
	n = strings.Map(func(r rune) rune {
		if unicode.Is(unicode.Cf, r) {
			return -1
		}
		return r
	}, n)
	if strings.HasPrefix(n, "meta:") {
		return true
	}
	if len(n) > 5 && strings.HasPrefix(n, "meta") && strings.ContainsRune("_-./", rune(n[4])) {
		return metaToolNames[n[5:]]
	}
	return false
}

var _ Engine = (*InProcess)(nil)
