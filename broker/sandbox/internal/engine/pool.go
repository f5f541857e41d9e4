package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// RuntimePoolOptions size the worker pool (the spec's RuntimePoolOptions).
// Utilisation is (running + queued executions) / (live + starting workers).
type RuntimePoolOptions struct {
	// MinSize is the number of workers started with the pool and kept alive:
	// dead or recycled workers below it are replaced. Default 1; a negative
	// value means 0 (workers start only on demand).
	MinSize int
	// MaxSize is the most scripts running JavaScript at once (CPU slots)
	// and the most workers started to run them (MaxWorkers may add workers
	// that only host waiting scripts). A script waiting for a tool result
	// holds no slot. Default 4; at least MinSize and 1.
	MaxSize int
	// ScaleUpThreshold is the utilisation (a fraction, e.g. 0.75) at or above
	// which the pool starts one more worker, checked whenever an execution
	// starts or queues and at every ScaleInterval. A script that finds no
	// idle worker always pushes utilisation above 1, so it starts a worker
	// when the pool is below MaxSize. Default 0.75; in (0, 1].
	ScaleUpThreshold float64
	// ScaleDownThreshold is the utilisation at or below which, at each
	// ScaleInterval, the pool stops one idle worker above MinSize (the least
	// recently used). Default 0.25; in [0, ScaleUpThreshold). Zero means the
	// default; use a tiny value such as 0.001 for "only when idle".
	ScaleDownThreshold float64
	// ScaleInterval is the period of the scaling check. Default 5s; at least
	// 10ms.
	ScaleInterval time.Duration
}

// PoolOptions configure the worker-process engine. The zero value (or nil)
// means the defaults stated on each field.
type PoolOptions struct {
	RuntimePoolOptions

	// Engine configures the in-process engine every worker runs scripts
	// with: preset, limits, sanitization (its Logger stays in the parent and
	// is not used). Nil means the secure preset. An unknown preset is an
	// error here.
	Engine *Options

	// MemoryBytes caps each worker's data segment (RLIMIT_DATA) above its
	// start-up size; a script that goes beyond it kills its worker and gets
	// WORKER_MEMORY_EXCEEDED. The Go runtime's soft limit is set to 3/4 of it
	// so the collector works hard first. Default: the engine's
	// Limits.MemoryBytes (from its preset: secure 128 MiB); negative means no
	// cap; at least 16 MiB. A request's Limits.MemoryBytes reaches the
	// worker's engine (its allocation checks) but cannot raise this cap.
	MemoryBytes int64
	// QueueSize is how many executions may wait for a worker; one more gets
	// QUEUE_FULL. Default 1000, the broker's default session cap, so a burst of
	// sessions waits (bounded by QueueTimeout) instead of failing; negative
	// means 0 (no waiting).
	QueueSize int
	// QueueTimeout is how long an execution waits for a worker before
	// QUEUE_TIMEOUT. Default 10s.
	QueueTimeout time.Duration
	// MaxMessageBytes bounds every protocol message in both directions; a
	// worker message above it is MESSAGE_TOO_LARGE. Default 8 MiB; at least
	// 64 KiB.
	MaxMessageBytes int
	// MaxPendingCalls bounds the tool calls one script has in flight at once
	// (TOO_MANY_PENDING_CALLS). Default 128.
	MaxPendingCalls int
	// FloodMessages is how many messages a worker may send within one
	// FloodInterval before MESSAGE_FLOOD. Default 10000.
	FloodMessages int
	// FloodInterval is the window of FloodMessages. Default 100ms.
	FloodInterval time.Duration
	// WatchdogGrace is added to a script's timeout before the parent kills
	// its worker (WORKER_TIMEOUT): the worker's own engine normally stops the
	// script at the timeout; the watchdog catches what ignores interrupts.
	// Default 1s.
	WatchdogGrace time.Duration
	// StartupTimeout bounds a worker's start-up handshake. Default 10s.
	StartupTimeout time.Duration
	// MaxExecutionsPerWorker recycles a worker (a fresh process replaces it)
	// after that many scripts. Default 10000; negative means never. A
	// recycle costs a process start and a cold heap (~70 ms of CPU for the
	// Caddy binary), which at 1000 was ~8% of a busy gateway's CPU;
	// memory is bounded apart from it (the half-cap recycle, the watchdog).
	MaxExecutionsPerWorker int
	// SpareWorkers is how many started workers the pool keeps ready (hosting
	// no execution, not recycling) beyond those in use, up to
	// MaxWorkers, so that a recycle, a memory kill or a crash hands the next
	// script to a process that is already up instead of making it wait for
	// one to start. The spare is started when the last ready worker takes a
	// script; an idle pool of MinSize workers needs none beyond them, and a
	// pool with MinSize 0 keeps none while nothing runs. Default 1;
	// negative means none (a replacement starts when a worker is gone).
	SpareWorkers int

	// SessionsPerWorker is how many executions one worker process hosts at
	// once, running or waiting for tool results. A waiting script holds no
	// CPU slot (MaxSize) but keeps its runtime in its worker, so a worker
	// death (a memory bomb of one script) ends the others it hosts with
	// WORKER_LOST: this is also the blast radius. Placement keeps each
	// principal's executions on workers of their own while fewer than
	// MaxWorkers are alive, so the radius spans other principals only at
	// MaxWorkers. Default 64.
	SessionsPerWorker int
	// MaxWorkers is the most worker processes: up to MaxSize run scripts;
	// beyond, workers only add room for waiting scripts. Executions of
	// different principals share a worker only when this many are alive
	// (see placeLocked). Default the larger
	// of MaxSize and 16 (16 x 64 = 1024 executions, above the broker's
	// default of 1000 sessions).
	MaxWorkers int
	// SessionMemoryBytes is added to each worker's memory cap per hosted
	// execution, for the runtimes of waiting scripts (about 150 KiB each,
	// measured). Default 1 MiB.
	SessionMemoryBytes int64
	// MaxRunningPerPrincipal bounds the CPU slots one principal (a user,
	// an API key, a client IP: Request.Principal) holds at once, so that
	// another always finds one. Default MaxSize - 1, at least 1.
	MaxRunningPerPrincipal int
	// MaxSessionsPerPrincipal bounds the executions one principal has in
	// the pool (running or waiting); more wait in the queue. Default a
	// quarter of MaxWorkers x SessionsPerWorker, at least 1.
	MaxSessionsPerPrincipal int
	// MaxQueuedPerPrincipal bounds one principal's executions waiting to
	// start (QUEUE_FULL beyond). Default a tenth of QueueSize, at least 1.
	MaxQueuedPerPrincipal int

	// Command starts a worker: the program and its arguments. Default: this
	// executable with the argument "codemode-worker" (the Caddy subcommand);
	// test binaries call MaybeServeWorker from TestMain instead, which the
	// same default reaches.
	Command []string
	// Env is added to the worker's environment. Workers do not inherit the
	// parent's environment (it may hold secrets): they get PATH, TMPDIR, the
	// Go runtime variables GOMAXPROCS, GODEBUG, GOTRACEBACK, GORACE and
	// GOCOVERDIR when set, the worker marker variable, and Env.
	Env []string
	// Logger receives worker deaths and their stderr: a *zap.Logger
	// through sandbox.ZapLogger. Nil means no logging.
	Logger Logger
	// Metrics, when set, counts scripts, queue waits, worker starts and
	// deaths, and reports the pool's workers and queue when collected.
	// Several engines may share one (sandbox.Metrics). Nil records
	// nothing (sandbox.NewWorkerPool makes spans still).
	Metrics Recorder
}

// Defaults of PoolOptions.
const (
	DefaultPoolMinSize            = 1
	DefaultPoolMaxSize            = 4
	DefaultScaleUpThreshold       = 0.75
	DefaultScaleDownThreshold     = 0.25
	DefaultScaleInterval          = 5 * time.Second
	DefaultQueueSize              = 1000
	DefaultQueueTimeout           = 10 * time.Second
	DefaultMaxMessageBytes        = 8 << 20
	DefaultMaxPendingCalls        = 128
	DefaultFloodMessages          = 10000
	DefaultFloodInterval          = 100 * time.Millisecond
	DefaultWatchdogGrace          = time.Second
	DefaultWorkerStartupTimeout   = 10 * time.Second
	DefaultMaxExecutionsPerWorker = 10000
	DefaultSpareWorkers           = 1
	DefaultSessionsPerWorker      = 64
	DefaultSessionMemoryBytes     = 1 << 20
)

// WorkerCommandName is the argument the default worker command passes: the
// name of the Caddy subcommand that serves a worker.
const WorkerCommandName = "codemode-worker"

// workerEnvVar marks a process started as a worker; MaybeServeWorker looks
// for it.
const workerEnvVar = "CODEMODE_SANDBOX_WORKER"

// passEnv are the variables a worker inherits from the parent when set.
var passEnv = []string{"PATH", "TMPDIR", "GOMAXPROCS", "GODEBUG", "GOTRACEBACK", "GORACE", "GOCOVERDIR"}

// PoolOptionError is a PoolOptions value NewWorkerPool refuses: the field
// Field (a PoolOptions field name) holds Value, which breaks Rule, alone or
// against the field Other holding OtherValue. Its fields let a
// configuration layer name the options as its user wrote them (Message).
type PoolOptionError struct {
	Field      string
	Value      any
	Rule       string
	Other      string
	OtherValue any
}

// Error names the fields as the spec's RuntimePoolOptions do (maxSize).
func (e *PoolOptionError) Error() string {
	return "pool " + e.Message(func(field string) string { return strings.ToLower(field[:1]) + field[1:] })
}

// Message is the error without its "pool" prefix, each field named by
// name.
func (e *PoolOptionError) Message(name func(field string) string) string {
	m := fmt.Sprintf("%s %v %s", name(e.Field), e.Value, e.Rule)
	if e.Other != "" {
		m += fmt.Sprintf(" %s %v", name(e.Other), e.OtherValue)
	}
	return m
}

// withDefaults validates o and fills in the defaults.
func (o *PoolOptions) withDefaults() (PoolOptions, error) {
	var n PoolOptions
	if o != nil {
		n = *o
	}
	switch {
	case n.MinSize == 0:
		n.MinSize = DefaultPoolMinSize
	case n.MinSize < 0:
		n.MinSize = 0
	}
	if n.MaxSize == 0 {
		n.MaxSize = max(DefaultPoolMaxSize, n.MinSize)
	}
	if n.MaxSize < 1 || n.MaxSize < n.MinSize {
		return n, &PoolOptionError{Field: "MaxSize", Value: n.MaxSize, Rule: "must be at least 1 and at least", Other: "MinSize", OtherValue: n.MinSize}
	}
	if n.ScaleUpThreshold == 0 {
		n.ScaleUpThreshold = DefaultScaleUpThreshold
	}
	if n.ScaleDownThreshold == 0 {
		n.ScaleDownThreshold = min(DefaultScaleDownThreshold, n.ScaleUpThreshold/2)
	}
	if !(n.ScaleUpThreshold > 0 && n.ScaleUpThreshold <= 1) {
		return n, &PoolOptionError{Field: "ScaleUpThreshold", Value: n.ScaleUpThreshold, Rule: "must be in (0, 1]"}
	}
	if !(n.ScaleDownThreshold >= 0 && n.ScaleDownThreshold < n.ScaleUpThreshold) {
		return n, &PoolOptionError{Field: "ScaleDownThreshold", Value: n.ScaleDownThreshold, Rule: "must be at least 0 and below",
			Other: "ScaleUpThreshold", OtherValue: n.ScaleUpThreshold}
	}
	if n.ScaleInterval == 0 {
		n.ScaleInterval = DefaultScaleInterval
	}
	if n.ScaleInterval < 10*time.Millisecond {
		return n, &PoolOptionError{Field: "ScaleInterval", Value: n.ScaleInterval, Rule: "must be at least 10ms"}
	}
	switch {
	case n.QueueSize == 0:
		n.QueueSize = DefaultQueueSize
	case n.QueueSize < 0:
		n.QueueSize = 0
	}
	if n.QueueTimeout <= 0 {
		n.QueueTimeout = DefaultQueueTimeout
	}
	if n.MaxMessageBytes == 0 {
		n.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if n.MaxMessageBytes < 64<<10 || n.MaxMessageBytes > 1<<30 {
		return n, &PoolOptionError{Field: "MaxMessageBytes", Value: n.MaxMessageBytes, Rule: "must be between 64 KiB and 1 GiB"}
	}
	if n.MaxPendingCalls <= 0 {
		n.MaxPendingCalls = DefaultMaxPendingCalls
	}
	if n.FloodMessages <= 0 {
		n.FloodMessages = DefaultFloodMessages
	}
	if n.FloodInterval <= 0 {
		n.FloodInterval = DefaultFloodInterval
	}
	if n.WatchdogGrace <= 0 {
		n.WatchdogGrace = DefaultWatchdogGrace
	}
	if n.StartupTimeout <= 0 {
		n.StartupTimeout = DefaultWorkerStartupTimeout
	}
	switch {
	case n.MaxExecutionsPerWorker == 0:
		n.MaxExecutionsPerWorker = DefaultMaxExecutionsPerWorker
	case n.MaxExecutionsPerWorker < 0:
		n.MaxExecutionsPerWorker = math.MaxInt
	}
	switch {
	case n.SpareWorkers == 0:
		n.SpareWorkers = DefaultSpareWorkers
	case n.SpareWorkers < 0:
		n.SpareWorkers = 0
	}
	if n.SessionsPerWorker <= 0 {
		n.SessionsPerWorker = DefaultSessionsPerWorker
	}
	if n.MaxWorkers <= 0 {
		n.MaxWorkers = max(n.MaxSize, 16)
	}
	if n.MaxWorkers < n.MaxSize {
		return n, &PoolOptionError{Field: "MaxWorkers", Value: n.MaxWorkers, Rule: "must be at least", Other: "MaxSize", OtherValue: n.MaxSize}
	}
	if n.SessionMemoryBytes <= 0 {
		n.SessionMemoryBytes = DefaultSessionMemoryBytes
	}
	if n.MaxRunningPerPrincipal <= 0 {
		n.MaxRunningPerPrincipal = max(1, n.MaxSize-1)
	}
	if n.MaxSessionsPerPrincipal <= 0 {
		n.MaxSessionsPerPrincipal = max(1, n.MaxWorkers*n.SessionsPerWorker/4)
	}
	if n.MaxQueuedPerPrincipal <= 0 {
		n.MaxQueuedPerPrincipal = max(1, n.QueueSize/10)
	}
	if len(n.Command) == 0 {
		exe, err := runningExecutable()
		if err != nil {
			return n, fmt.Errorf("finding this executable for the worker command: %w", err)
		}
		n.Command = []string{exe, WorkerCommandName}
	} else {
		n.Command = append([]string(nil), n.Command...)
	}
	for _, kv := range n.Env {
		if !strings.Contains(kv, "=") {
			return n, fmt.Errorf("worker environment entry %q is not KEY=value", kv)
		}
	}
	if n.Logger == nil {
		n.Logger = nopLogger{}
	}
	if n.Metrics == nil {
		n.Metrics = nopRecorder{}
	}
	return n, nil
}

// workerPool is the worker-process Engine.
//
// Scheduling. CPU is the scarce resource, not the runtime: MaxSize slots
// let that many scripts run JavaScript at once. A script that waits for a
// tool result (a slow tool, a caller who answers later) gives its slot back
// (its worker sends wait) and keeps only its runtime, in the worker that
// hosts it; the parent holds the result that wakes it until a slot is free,
// so a waiting script runs nothing without one. Workers host up to
// SessionsPerWorker executions each. Executions that wait to start or to
// resume queue per principal and are served round-robin across principals,
// each principal holding at most MaxRunningPerPrincipal slots and
// MaxSessionsPerPrincipal executions, so one caller's burst cannot starve
// the others.
type workerPool struct {
	opts   PoolOptions
	engine workerEngineConfig
	limits Limits // the engine's effective limits before a request's own
	env    []string
	log    Logger

	// now and newTimer are the clock; tests replace them.
	now      func() time.Time
	newTimer func(time.Duration) (<-chan time.Time, func() bool)

	// runners run the host side of tool calls and lookups (those a
	// worker's reader does not run itself: see reading); watch keeps the
	// readers reading.
	runners runners
	watch   inlineWatch

	mu       sync.Mutex
	closed   bool
	draining bool // Shutdown: no new executions
	// lastEnd is the latest time an execution admitted so far may still
	// be running: its queue wait, its own time limit (a request may raise
	// the wall-clock timeout: plans that wait for their caller) and the
	// watchdog's grace. Shutdown waits no longer.
	lastEnd    time.Time
	all        map[*worker]struct{}
	starting   int
	running    int // CPU slots held
	queued     int // executions waiting to start
	principals map[string]*principal
	ring       []*principal // principals with waiting tickets, served in turn
	next       int          // the ring position served next

	// spawnErr is the last failure to start a worker, until one starts.
	spawnErr error

	closing  chan struct{}
	execs    sync.WaitGroup // Execute calls in flight
	bg       sync.WaitGroup // spawners and the scaler
	procs    sync.WaitGroup // worker processes not yet reaped
	nextExec atomic.Uint64
}

// principal is the scheduler's account of one caller (guarded by the
// pool's mu).
type principal struct {
	name    string
	running int // slots held
	hosted  int // executions in workers
	queued  int // executions waiting to start
	waiting []*ticket
	inRing  bool
}

// ticket is an execution waiting for a slot: to start (st nil; the grant
// arrives on ch) or to resume (st set; its held results are sent when
// granted).
type ticket struct {
	pr      *principal
	st      *execState
	replies []*wireMsg
	ch      chan grant // buffered 1; new executions only
}

// grant hands a worker (with a slot and a seat reserved) or a failure to a
// waiting execution.
type grant struct {
	w   *worker
	err error
}

// NewWorkerPool starts a pool of worker processes that run scripts with the
// in-process engine, each process capping its own memory. It starts MinSize
// workers before returning and fails with a *Error coded
// WORKER_STARTUP_FAILED when they cannot start, or with a plain error when
// opts are invalid.
func NewWorkerPool(opts *PoolOptions) (Engine, error) {
	return newWorkerPool(opts, nil)
}

// newWorkerPool lets tests set the clock before workers start.
func newWorkerPool(opts *PoolOptions, setup func(*workerPool)) (*workerPool, error) {
	if os.Getenv(workerEnvVar) == "1" {
		// A worker that builds a pool would start workers recursively (a
		// test binary without the TestMain hook runs its tests instead).
		return nil, startupFailed("refusing to start a worker pool inside a sandbox worker; a test binary needs sandbox.MaybeServeWorker in TestMain")
	}
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	var eo Options
	if o.Engine != nil {
		eo = *o.Engine
	}
	if _, err := Preset(eo.Preset); err != nil {
		return nil, err
	}
	eo.Logger = nil
	limits, _, _ := eo.resolve()
	switch {
	case o.MemoryBytes == 0:
		o.MemoryBytes = limits.MemoryBytes
	case o.MemoryBytes < 0:
		o.MemoryBytes = 0
	}
	if o.MemoryBytes != 0 && o.MemoryBytes < 16<<20 {
		return nil, fmt.Errorf("worker memory %d bytes is below the minimum of 16 MiB", o.MemoryBytes)
	}
	p := &workerPool{
		opts:       o,
		engine:     workerEngineConfig{Preset: eo.Preset, Limits: eo.Limits, Sanitization: eo.Sanitization},
		limits:     limits,
		env:        workerEnv(o.Env),
		log:        o.Logger,
		now:        time.Now,
		all:        make(map[*worker]struct{}),
		principals: make(map[string]*principal),
		closing:    make(chan struct{}),
		newTimer: func(d time.Duration) (<-chan time.Time, func() bool) {
			t := time.NewTimer(d)
			return t.C, t.Stop
		},
	}
	if setup != nil {
		setup(p)
	}
	// Start MinSize workers in parallel; any failure fails the pool. A
	// worker that was alive but missed its handshake deadline gets a
	// second start first: a host that stalls for seconds (a loaded
	// machine, a paused VM) would otherwise fail the config being loaded,
	// a reload included. A worker that exits or cannot be started would
	// fail the same way again.
	errs := make(chan error, o.MinSize)
	for range o.MinSize {
		go func() {
			w, err := p.startWorker()
			if se, ok := err.(*Error); ok && se.late {
				p.log.Log(context.Background(), "info", "starting another worker after a missed handshake deadline", "error", err)
				w, err = p.startWorker()
			}
			if err == nil {
				p.mu.Lock()
				p.all[w] = struct{}{}
				p.mu.Unlock()
			}
			errs <- err
		}()
	}
	var first error
	for range o.MinSize {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		p.Close()
		return nil, first
	}
	p.bg.Add(1)
	go p.scaler()
	o.Metrics.Track(p)
	return p, nil
}

// Limits reports the engine's effective limits (before Request.Limits).
func (p *workerPool) Limits() Limits { return p.limits }

// workerCap is a worker's memory cap: one script's memory and room for
// the runtimes of the waiting scripts it hosts.
func (p *workerPool) workerCap() int64 {
	if p.opts.MemoryBytes <= 0 {
		return 0
	}
	return p.opts.MemoryBytes + int64(p.opts.SessionsPerWorker)*p.opts.SessionMemoryBytes
}

// workerEnv builds a worker's environment. GOGC=off spares the start-up
// the collections the program's initialisation would cause (a Caddy build
// allocates some 11 MB in init functions, two or three cycles); the worker
// turns the collector back on first thing (ServeWorker).
func workerEnv(extra []string) []string {
	env := []string{workerEnvVar + "=1", "GOGC=off"}
	for _, k := range passEnv {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return append(env, extra...)
}

func disposed() error {
	return &Error{Code: CodePoolDisposed, Message: "the sandbox worker pool is shut down"}
}

// isDisposed reports the error of a start the pool's shutdown interrupted:
// the worker was no longer wanted, which is neither a failure to count nor
// one to warn of (every reload shuts a pool down, maybe mid-start).
func isDisposed(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == CodePoolDisposed
}

func aborted(cause error) error {
	return &Error{Code: CodeExecutionAborted, Message: fmt.Sprintf("execution aborted: %v", cause)}
}

// Execute runs one script in a worker.
func (p *workerPool) Execute(ctx context.Context, req Request, host Host) (res *Result, err error) {
	ctx, done := begin(ctx, p.opts.Metrics, EngineWorker)
	defer func() { done(res, err) }()
	if host == nil {
		return nil, errors.New("sandbox: nil host")
	}
	p.mu.Lock()
	if p.closed || p.draining {
		p.mu.Unlock()
		return nil, disposed()
	}
	p.execs.Add(1)
	if end := time.Now().Add(p.opts.QueueTimeout + LowerLimits(p.limits, req.Limits).Timeout + p.opts.WatchdogGrace); end.After(p.lastEnd) {
		p.lastEnd = end
	}
	p.mu.Unlock()
	defer p.execs.Done()

	if err := ctx.Err(); err != nil {
		return nil, aborted(context.Cause(ctx))
	}
	for attempt := 0; ; attempt++ {
		w, pr, err := p.admit(ctx, req.Principal)
		if err != nil {
			return nil, err
		}
		res, err := w.run(ctx, p.nextExec.Add(1), req, host, pr)
		if err == errWorkerGone {
			if attempt < 2 {
				continue
			}
			return nil, &Error{Code: CodeWorkerCrashed, Message: "sandbox workers keep dying before they receive a script"}
		}
		return res, err
	}
}

// principalLocked returns the account of a principal, creating it.
func (p *workerPool) principalLocked(name string) *principal {
	pr := p.principals[name]
	if pr == nil {
		pr = &principal{name: name}
		p.principals[name] = pr
	}
	return pr
}

// forgetLocked drops an account with nothing in it.
func (p *workerPool) forgetLocked(pr *principal) {
	if pr.running == 0 && pr.hosted == 0 && pr.queued == 0 && len(pr.waiting) == 0 {
		delete(p.principals, pr.name)
	}
}

// admit reserves a slot and a seat for a new execution, queueing fairly
// when none is free.
func (p *workerPool) admit(ctx context.Context, name string) (*worker, *principal, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, nil, disposed()
	}
	pr := p.principalLocked(name)
	if len(pr.waiting) == 0 && p.canStartLocked(pr) {
		if w := p.placeLocked(pr); w != nil {
			p.reserveLocked(w, pr)
			p.scaleUpLocked()
			p.mu.Unlock()
			return w, pr, nil
		}
	}
	if p.queued >= p.opts.QueueSize {
		p.forgetLocked(pr)
		p.mu.Unlock()
		return nil, nil, &Error{Code: CodeQueueFull, Message: fmt.Sprintf("all %d sandbox slots are busy and %d executions are queued", p.opts.MaxSize, p.opts.QueueSize)}
	}
	if pr.queued >= p.opts.MaxQueuedPerPrincipal {
		p.forgetLocked(pr)
		p.mu.Unlock()
		return nil, nil, &Error{Code: CodeQueueFull, Message: fmt.Sprintf("this caller already has %d executions queued, the most allowed", p.opts.MaxQueuedPerPrincipal)}
	}
	t := &ticket{pr: pr, ch: make(chan grant, 1)}
	pr.waiting = append(pr.waiting, t)
	pr.queued++
	p.queued++
	p.enterRingLocked(pr)
	p.scaleUpLocked()
	p.mu.Unlock()

	timeout, stop := p.newTimer(p.opts.QueueTimeout)
	defer stop()
	queuedAt := p.now()
	var fail error
	select {
	case g := <-t.ch:
		p.opts.Metrics.Waited(WaitAcquired, p.now().Sub(queuedAt))
		return g.w, pr, g.err
	case <-ctx.Done():
		p.opts.Metrics.Waited(WaitAborted, p.now().Sub(queuedAt))
		fail = aborted(context.Cause(ctx))
	case <-timeout:
		p.opts.Metrics.Waited(WaitQueueTimeout, p.now().Sub(queuedAt))
		fail = &Error{Code: CodeQueueTimeout, Message: fmt.Sprintf("no sandbox slot became free within %v", p.opts.QueueTimeout)}
	case <-p.closing:
		fail = disposed()
	}
	p.mu.Lock()
	if p.dropTicketLocked(t) {
		pr.queued--
		p.queued--
		p.forgetLocked(pr)
		p.mu.Unlock()
		return nil, nil, fail
	}
	p.mu.Unlock()
	// A grant raced the failure: give the reservation back.
	if g := <-t.ch; g.w != nil {
		p.release(g.w, pr, nil)
	}
	return nil, nil, fail
}

// canStartLocked: a slot is free and the principal is within its quotas.
func (p *workerPool) canStartLocked(pr *principal) bool {
	return p.running < p.opts.MaxSize && pr.running < p.opts.MaxRunningPerPrincipal &&
		pr.hosted < p.opts.MaxSessionsPerPrincipal
}

// placeLocked picks the worker for a new execution of pr, or starts one
// and returns nil (the execution waits for it).
//
// Principal affinity: a worker that dies (a script past RLIMIT_DATA, a
// built-in that ignores its deadline) ends every execution it hosts with
// WORKER_LOST, so principals share a worker only when they must. A worker
// with a free seat that hosts only pr's executions, or nothing, is taken
// first: the fewest running scripts, then one that already hosts pr (so a
// principal's waiting scripts pack into few workers and an empty one stays
// spare for others), then the fewest hosted, then the one that has run the
// most (so a spare stays spare and the workers' recycles do not fall due
// together). When there is none, a new worker is started, up to
// MaxWorkers. Only at MaxWorkers, none starting, does pr join a worker that
// hosts other principals: the one hosting the fewest of them, then by the
// same order. A new worker is also started (and nil returned) when the
// chosen worker runs a script and fewer than MaxSize are alive, so that up
// to MaxSize scripts run in processes of their own.
func (p *workerPool) placeLocked(pr *principal) *worker {
	var clean, mixed *worker
	better := func(a, b *worker) bool {
		if a.running != b.running {
			return a.running < b.running
		}
		if ah, bh := a.principals[pr] > 0, b.principals[pr] > 0; ah != bh {
			return ah
		}
		if a.hosted != b.hosted {
			return a.hosted < b.hosted
		}
		return a.runs > b.runs
	}
	for w := range p.all {
		if w.draining || w.hosted >= p.opts.SessionsPerWorker {
			continue
		}
		switch others := w.othersLocked(pr); {
		case others == 0:
			if clean == nil || better(w, clean) {
				clean = w
			}
		case mixed == nil || others < mixed.othersLocked(pr) ||
			others == mixed.othersLocked(pr) && better(w, mixed):
			mixed = w
		}
	}
	alive := len(p.all) + p.starting
	best := clean
	if best == nil {
		if alive < p.opts.MaxWorkers || p.starting > 0 || mixed == nil {
			// A worker of its own: on its way, or started now.
			if alive < p.opts.MaxWorkers && p.starting == 0 {
				p.spawnLocked()
			}
			return nil
		}
		best = mixed
	}
	if best.running > 0 && len(p.all) < p.opts.MaxSize {
		// Wait for a worker of its own (on its way, or started now).
		if alive < p.opts.MaxSize && p.starting == 0 {
			p.spawnLocked()
		}
		return nil
	}
	return best
}

// othersLocked counts the principals other than pr that w hosts.
func (w *worker) othersLocked(pr *principal) int {
	n := len(w.principals)
	if w.principals[pr] > 0 {
		n--
	}
	return n
}

// reserveLocked takes a slot and a seat on w for pr.
func (p *workerPool) reserveLocked(w *worker, pr *principal) {
	p.running++
	pr.running++
	pr.hosted++
	w.running++
	w.hosted++
	w.principals[pr]++
	w.runs++
	p.spareLocked()
}

func (p *workerPool) enterRingLocked(pr *principal) {
	if !pr.inRing {
		pr.inRing = true
		p.ring = append(p.ring, pr)
	}
}

// dropTicketLocked removes t from its principal's queue; false when it was
// already served.
func (p *workerPool) dropTicketLocked(t *ticket) bool {
	pr := t.pr
	for i, x := range pr.waiting {
		if x == t {
			pr.waiting = append(pr.waiting[:i], pr.waiting[i+1:]...)
			if len(pr.waiting) == 0 {
				p.leaveRingLocked(pr)
			}
			return true
		}
	}
	return false
}

func (p *workerPool) leaveRingLocked(pr *principal) {
	for i, x := range p.ring {
		if x == pr {
			p.ring = append(p.ring[:i], p.ring[i+1:]...)
			if p.next > i {
				p.next--
			}
			break
		}
	}
	pr.inRing = false
	if p.next >= len(p.ring) {
		p.next = 0
	}
}

// sendOp is a held result to write once the pool's lock is released.
type sendOp struct {
	w *worker
	m *wireMsg
}

// dispatchLocked serves waiting tickets while slots are free, one
// principal after the other. It returns the held results to send.
func (p *workerPool) dispatchLocked() (ops []sendOp) {
	if p.closed {
		return nil
	}
	for p.running < p.opts.MaxSize && len(p.ring) > 0 {
		served := false
		for k := 0; k < len(p.ring); k++ {
			i := (p.next + k) % len(p.ring)
			pr := p.ring[i]
			t := pr.waiting[0]
			if pr.running >= p.opts.MaxRunningPerPrincipal {
				continue
			}
			if t.st == nil {
				if pr.hosted >= p.opts.MaxSessionsPerPrincipal {
					continue
				}
				w := p.placeLocked(pr)
				if w == nil {
					continue
				}
				p.reserveLocked(w, pr)
				pr.queued--
				p.queued--
				t.ch <- grant{w: w}
			} else {
				if !t.st.w.gone {
					p.resumeLocked(t.st, len(t.replies))
					for _, m := range t.replies {
						ops = append(ops, sendOp{w: t.st.w, m: m})
					}
				}
				t.st.resume = nil
			}
			pr.waiting = pr.waiting[1:]
			p.next = i + 1
			if len(pr.waiting) == 0 {
				p.leaveRingLocked(pr)
			}
			if p.next >= len(p.ring) {
				p.next = 0
			}
			served = true
			break
		}
		if !served {
			break
		}
	}
	return ops
}

// resumeLocked gives a waiting execution a slot again; the caller sends
// its n held results.
func (p *workerPool) resumeLocked(st *execState, n int) {
	st.holds = true
	p.running++
	st.pr.running++
	st.w.running++
	st.sent += uint64(n)
	st.runStart = p.now()
}

func send(ops []sendOp) {
	for _, op := range ops {
		_ = op.w.out.write(op.m)
	}
}

// deliverResult passes a tool result to a script: at once when it holds a
// slot, else when it gets one (the result is its leave to run).
func (p *workerPool) deliverResult(st *execState, m *wireMsg) {
	p.mu.Lock()
	switch {
	case st.finished, st.w.gone:
		// The script ended, or its worker did (its run reports why).
		p.mu.Unlock()
		return
	case st.holds:
		st.sent++
		p.mu.Unlock()
		_ = st.w.out.write(m)
		return
	case st.resume != nil:
		st.resume.replies = append(st.resume.replies, m)
		p.mu.Unlock()
		return
	}
	pr := st.pr
	if p.running < p.opts.MaxSize && pr.running < p.opts.MaxRunningPerPrincipal && len(p.ring) == 0 {
		// A slot is free and no one waits for one: the common case of a
		// script that gave its slot up on wait and gets it straight back.
		p.resumeLocked(st, 1)
		p.mu.Unlock()
		_ = st.w.out.write(m)
		return
	}
	// Resuming scripts go first in their principal's turn: they hold a
	// seat and their waits are what a caller's answer is for.
	t := &ticket{pr: pr, st: st, replies: []*wireMsg{m}}
	st.resume = t
	pr.waiting = append([]*ticket{t}, pr.waiting...)
	p.enterRingLocked(pr)
	ops := p.dispatchLocked()
	p.mu.Unlock()
	send(ops)
}

// parked releases the slot of a script that waits with nothing to run,
// unless results it has not seen yet are on their way to it.
func (p *workerPool) parked(st *execState, seen uint64) {
	p.mu.Lock()
	if !st.holds || st.finished || seen != st.sent {
		p.mu.Unlock()
		return
	}
	st.holds = false
	st.cpuUsed += p.now().Sub(st.runStart)
	p.running--
	st.pr.running--
	st.w.running--
	ops := p.dispatchLocked()
	p.mu.Unlock()
	// Called by a worker's reader, which must never block on a write.
	if len(ops) > 0 {
		go send(ops)
	}
}

// release ends an execution's hold on its slot (if any) and seat; st is
// nil for a reservation that was never used.
func (p *workerPool) release(w *worker, pr *principal, st *execState) {
	p.mu.Lock()
	holds := true
	if st != nil {
		st.finished = true
		holds = st.holds
		st.holds = false
		if st.resume != nil {
			p.dropTicketLocked(st.resume)
			st.resume = nil
		}
	}
	if holds {
		p.running--
		pr.running--
		w.running--
	}
	pr.hosted--
	w.hosted--
	if w.principals[pr]--; w.principals[pr] <= 0 {
		delete(w.principals, pr)
	}
	p.forgetLocked(pr)
	if w.draining && w.hosted == 0 {
		if _, ok := p.all[w]; ok {
			delete(p.all, w)
			w.ended(DeathRecycle)
			w.retire()
		}
	}
	p.replenishLocked()
	ops := p.dispatchLocked()
	p.mu.Unlock()
	send(ops)
}

// drain makes a worker take no new executions; it is retired when the
// ones it hosts end.
func (p *workerPool) drain(w *worker) {
	p.mu.Lock()
	defer p.mu.Unlock()
	w.draining = true
}

// replenishLocked starts workers up to MinSize and for queued executions.
func (p *workerPool) replenishLocked() {
	if p.closed {
		return
	}
	for len(p.all)+p.starting < p.opts.MinSize {
		p.spawnLocked()
	}
	p.scaleUpLocked()
	p.spareLocked()
}

// readyLocked counts the workers that would take a new script of any
// principal at once (hosting nothing, not draining: placement keeps
// principals apart, so a worker that hosts one principal's waiting scripts
// is no spare for another), and tells whether the pool is in use (a script
// hosted or queued).
func (p *workerPool) readyLocked() (ready int, inUse bool) {
	for w := range p.all {
		if w.hosted > 0 {
			inUse = true
		} else if !w.draining {
			ready++
		}
	}
	return ready, inUse || p.queued > 0
}

// spareWantedLocked is how many ready workers the pool keeps now.
func (p *workerPool) spareWantedLocked(inUse bool) int {
	if p.opts.MinSize == 0 && !inUse {
		return 0
	}
	return p.opts.SpareWorkers
}

// spareLocked starts workers until SpareWorkers are ready or starting, so
// that no recycle or worker death puts a process start on a caller's path.
// Workers starting for waiting executions count too: the next reservation
// checks again once they are taken.
func (p *workerPool) spareLocked() {
	if p.closed || p.draining {
		return
	}
	ready, inUse := p.readyLocked()
	for want := p.spareWantedLocked(inUse); ready+p.starting < want && len(p.all)+p.starting < p.opts.MaxWorkers; {
		p.spawnLocked()
	}
}

// utilisationLocked is (running + queued) / (live + starting workers).
func (p *workerPool) utilisationLocked() float64 {
	demand := p.running + p.queued
	capacity := len(p.all) + p.starting
	if capacity == 0 {
		if demand == 0 {
			return 0
		}
		return math.Inf(1)
	}
	return float64(demand) / float64(capacity)
}

// scaleUpLocked starts one worker when utilisation reaches the threshold
// (up to MaxSize workers: the ones that run scripts).
func (p *workerPool) scaleUpLocked() {
	if p.closed || len(p.all)+p.starting >= p.opts.MaxSize {
		return
	}
	if p.running+p.queued > 0 && p.utilisationLocked() >= p.opts.ScaleUpThreshold {
		p.spawnLocked()
	}
}

// spawnLocked starts a worker in the background.
func (p *workerPool) spawnLocked() {
	p.starting++
	p.bg.Add(1)
	go func() {
		defer p.bg.Done()
		w, err := p.startWorker()
		p.mu.Lock()
		p.starting--
		p.spawnErr = err
		if err != nil {
			if !isDisposed(err) {
				p.log.Log(context.Background(), "warn", "sandbox worker failed to start", "error", err)
			}
			// Nobody else will serve the queue: fail it rather than let it
			// wait for the timeout.
			if len(p.all)+p.starting == 0 {
				p.failQueueLocked(err)
			}
			p.mu.Unlock()
			return
		}
		if p.closed {
			p.mu.Unlock()
			w.ended(DeathShutdown)
			w.kill(killNone)
			return
		}
		p.all[w] = struct{}{}
		ops := p.dispatchLocked()
		p.scaleUpLocked()
		p.mu.Unlock()
		send(ops)
	}()
}

// failQueueLocked fails every execution waiting to start.
func (p *workerPool) failQueueLocked(err error) {
	for _, pr := range append([]*principal(nil), p.ring...) {
		kept := pr.waiting[:0]
		for _, t := range pr.waiting {
			if t.st == nil {
				pr.queued--
				p.queued--
				t.ch <- grant{err: err}
			} else {
				kept = append(kept, t)
			}
		}
		pr.waiting = kept
		if len(kept) == 0 {
			p.leaveRingLocked(pr)
		}
		p.forgetLocked(pr)
	}
}

// workerExited forgets a worker that died (its executions, if any, notice
// on their own and release their seats).
func (p *workerPool) workerExited(w *worker) {
	p.mu.Lock()
	defer p.mu.Unlock()
	w.gone = true
	w.mu.Lock()
	for _, st := range w.execs {
		st.ranAtDeath = st.holds
	}
	w.mu.Unlock()
	if _, ok := p.all[w]; !ok {
		return
	}
	delete(p.all, w)
	if w.hosted == 0 && w.reason() == killNone {
		w.ended(DeathCrash) // died on its own while idle
	}
	p.replenishLocked()
}

// scaler runs the periodic scaling check until the pool closes.
func (p *workerPool) scaler() {
	defer p.bg.Done()
	t := time.NewTicker(p.opts.ScaleInterval)
	defer t.Stop()
	for {
		select {
		case <-p.closing:
			return
		case <-t.C:
			p.scaleTick()
		}
	}
}

// scaleTick stops one idle worker (hosting nothing) above MinSize when
// utilisation is at or below ScaleDownThreshold, and starts one when it is
// at or above ScaleUpThreshold.
func (p *workerPool) scaleTick() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	ready, inUse := p.readyLocked()
	if len(p.all) > p.opts.MinSize && p.utilisationLocked() <= p.opts.ScaleDownThreshold &&
		ready > p.spareWantedLocked(inUse) {
		var oldest *worker
		for w := range p.all {
			if w.hosted == 0 && (oldest == nil || w.lastUsed.Before(oldest.lastUsed)) {
				oldest = w
			}
		}
		if oldest != nil {
			delete(p.all, oldest)
			oldest.ended(DeathScaleDown)
			oldest.retire()
			return
		}
	}
	p.replenishLocked()
}

// Close kills every worker; executions in flight and later calls fail with
// POOL_DISPOSED. It returns when all worker processes are reaped.
func (p *workerPool) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.procs.Wait()
		return nil
	}
	p.closed = true
	close(p.closing)
	p.opts.Metrics.Untrack(p)
	var idle []*worker
	for w := range p.all {
		if w.hosted == 0 {
			idle = append(idle, w)
			delete(p.all, w)
		}
	}
	p.mu.Unlock()
	for _, w := range idle {
		w.ended(DeathShutdown)
		w.kill(killNone)
	}
	p.execs.Wait()
	p.mu.Lock()
	rest := make([]*worker, 0, len(p.all))
	for w := range p.all {
		rest = append(rest, w)
	}
	p.all = map[*worker]struct{}{}
	p.mu.Unlock()
	for _, w := range rest {
		w.ended(DeathShutdown)
		w.kill(killNone)
	}
	p.bg.Wait()
	p.procs.Wait()
	// Every execution ended, and with it every call (run waits for them).
	p.runners.close()
	return nil
}

// Shutdown refuses new executions (POOL_DISPOSED), lets the executions in
// flight and in the queue finish until ctx ends or the last of them reaches
// its own time limit (each one's watchdog ends it by then; a second past it
// is the bound should one not), then closes the pool. A reload that
// replaces the pool passes no deadline: a plan that waits for its caller
// (meta:execute over an MCP session, whose limit is the broker's
// execution timeout) keeps what it was promised when it started.
func (p *workerPool) Shutdown(ctx context.Context) error {
	return <-p.BeginShutdown(ctx)
}

// BeginShutdown is Shutdown without the wait: new executions are refused
// from its call on, and the channel receives Shutdown's result once the
// pool is closed. A caller that must not wait for the running scripts (a
// reload, which Caddy's Load would otherwise hold until the last of them
// ended) still gets the refusal at once.
func (p *workerPool) BeginShutdown(ctx context.Context) <-chan error {
	p.mu.Lock()
	p.draining = true
	ctx, cancel := context.WithDeadline(ctx, p.lastEnd.Add(time.Second))
	p.mu.Unlock()
	closed := make(chan error, 1)
	go func() {
		defer cancel()
		drained := make(chan struct{})
		go func() {
			p.execs.Wait()
			close(drained)
		}()
		select {
		case <-drained:
		case <-ctx.Done():
		}
		err := p.Close()
		<-drained
		closed <- err
	}()
	return closed
}

// Health implements HealthReporter. Busy is the CPU slots held; Max is
// MaxSize, the slots.
func (p *workerPool) Health() EngineHealth {
	live, idle, busy, starting, queued := p.stats()
	p.mu.Lock()
	defer p.mu.Unlock()
	h := EngineHealth{Kind: "workers", Live: live, Idle: idle, Busy: busy, Starting: starting,
		Queued: queued, Max: p.opts.MaxSize, QueueSize: p.opts.QueueSize}
	switch {
	case p.closed:
		h.Problems = append(h.Problems, "the worker pool is closed")
	case p.draining:
		h.Problems = append(h.Problems, "the worker pool is draining")
	}
	if p.spawnErr != nil {
		h.Problems = append(h.Problems, "worker processes fail to start: "+p.spawnErr.Error())
	}
	if !p.closed && h.QueueSize > 0 && h.Queued >= h.QueueSize {
		h.Problems = append(h.Problems, fmt.Sprintf("the queue is full (%d executions wait for a slot)", h.Queued))
	}
	return h
}

// gauges reports what the metrics show of the pool: the pids of its live
// workers and its counts.
func (p *workerPool) gauges() (pids []int, idle, busy, starting, queued int) {
	_, idle, busy, starting, queued = p.stats()
	p.mu.Lock()
	defer p.mu.Unlock()
	pids = make([]int, 0, len(p.all))
	for w := range p.all {
		pids = append(pids, w.pid)
	}
	return pids, idle, busy, starting, queued
}

// Gauges implements what a Recorder's Track reads of a pool: gauges, and
// its workers' memory cap.
func (p *workerPool) Gauges() (pids []int, idle, busy, starting, queued int, memoryBytes int64) {
	pids, idle, busy, starting, queued = p.gauges()
	return pids, idle, busy, starting, queued, p.opts.MemoryBytes
}

// stats reports the pool's size, for tests and metrics: live workers, idle
// ones (hosting nothing), slots held, workers starting, executions queued.
func (p *workerPool) stats() (live, idle, busy, starting, queued int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for w := range p.all {
		if w.hosted == 0 {
			idle++
		}
	}
	return len(p.all), idle, p.running, p.starting, p.queued
}
