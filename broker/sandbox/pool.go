package sandbox

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

	"go.uber.org/zap"
)

// RuntimePoolOptions size the worker pool (the spec's RuntimePoolOptions).
// Utilisation is (running + queued executions) / (live + starting workers).
type RuntimePoolOptions struct {
	// MinSize is the number of workers started with the pool and kept alive:
	// dead or recycled workers below it are replaced. Default 1; a negative
	// value means 0 (workers start only on demand).
	MinSize int
	// MaxSize is the most workers alive at once, hence the most scripts
	// running at once. Default 4; at least MinSize and 1.
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
	// after that many scripts. Default 1000; negative means never.
	MaxExecutionsPerWorker int

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
	// Logger receives worker deaths and their stderr. Nil means no logging.
	Logger *zap.Logger
	// Metrics, when set, counts scripts, queue waits, worker starts and
	// deaths, and reports the pool's workers and queue when collected.
	// Several engines may share one. Nil records nothing.
	Metrics *Metrics
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
	DefaultMaxExecutionsPerWorker = 1000
)

// WorkerCommandName is the argument the default worker command passes: the
// name of the Caddy subcommand that serves a worker.
const WorkerCommandName = "codemode-worker"

// workerEnvVar marks a process started as a worker; MaybeServeWorker looks
// for it.
const workerEnvVar = "CODEMODE_SANDBOX_WORKER"

// passEnv are the variables a worker inherits from the parent when set.
var passEnv = []string{"PATH", "TMPDIR", "GOMAXPROCS", "GODEBUG", "GOTRACEBACK", "GORACE", "GOCOVERDIR"}

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
		return n, fmt.Errorf("pool maxSize %d must be at least 1 and at least minSize %d", n.MaxSize, n.MinSize)
	}
	if n.ScaleUpThreshold == 0 {
		n.ScaleUpThreshold = DefaultScaleUpThreshold
	}
	if n.ScaleDownThreshold == 0 {
		n.ScaleDownThreshold = min(DefaultScaleDownThreshold, n.ScaleUpThreshold/2)
	}
	if !(n.ScaleUpThreshold > 0 && n.ScaleUpThreshold <= 1) {
		return n, fmt.Errorf("pool scaleUpThreshold %v must be in (0, 1]", n.ScaleUpThreshold)
	}
	if !(n.ScaleDownThreshold >= 0 && n.ScaleDownThreshold < n.ScaleUpThreshold) {
		return n, fmt.Errorf("pool scaleDownThreshold %v must be in [0, scaleUpThreshold %v)", n.ScaleDownThreshold, n.ScaleUpThreshold)
	}
	if n.ScaleInterval == 0 {
		n.ScaleInterval = DefaultScaleInterval
	}
	if n.ScaleInterval < 10*time.Millisecond {
		return n, fmt.Errorf("pool scaleInterval %v must be at least 10ms", n.ScaleInterval)
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
		return n, fmt.Errorf("maxMessageBytes %d must be between 64 KiB and 1 GiB", n.MaxMessageBytes)
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
	if len(n.Command) == 0 {
		exe, err := os.Executable()
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
		n.Logger = zap.NewNop()
	}
	return n, nil
}

// workerPool is the worker-process Engine.
type workerPool struct {
	opts   PoolOptions
	engine workerEngineConfig
	limits Limits // the engine's effective limits before a request's own
	env    []string
	log    *zap.Logger

	// now and newTimer are the clock; tests replace them.
	now      func() time.Time
	newTimer func(time.Duration) (<-chan time.Time, func() bool)

	mu       sync.Mutex
	closed   bool
	draining bool // Shutdown: no new executions
	all      map[*worker]struct{}
	idle     []*worker // a stack: the most recently used on top
	busy     int
	starting int
	waiters  []*waiter // FIFO

	// spawnErr is the last failure to start a worker, until one starts.
	spawnErr error

	closing  chan struct{}
	execs    sync.WaitGroup // Execute calls in flight
	bg       sync.WaitGroup // spawners and the scaler
	procs    sync.WaitGroup // worker processes not yet reaped
	nextExec atomic.Uint64
}

// waiter is an execution queued for a worker.
type waiter struct {
	ch chan grant // buffered 1
}

// grant hands a worker (or a failure) to a waiter.
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
		opts:    o,
		engine:  workerEngineConfig{Preset: eo.Preset, Limits: eo.Limits, Sanitization: eo.Sanitization},
		limits:  limits,
		env:     workerEnv(o.Env),
		log:     o.Logger,
		now:     time.Now,
		all:     make(map[*worker]struct{}),
		closing: make(chan struct{}),
		newTimer: func(d time.Duration) (<-chan time.Time, func() bool) {
			t := time.NewTimer(d)
			return t.C, t.Stop
		},
	}
	if setup != nil {
		setup(p)
	}
	// Start MinSize workers in parallel; any failure fails the pool.
	errs := make(chan error, o.MinSize)
	for range o.MinSize {
		go func() {
			w, err := p.startWorker()
			if err == nil {
				p.mu.Lock()
				p.all[w] = struct{}{}
				p.idle = append(p.idle, w)
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
	o.Metrics.track(p)
	return p, nil
}

// workerEnv builds a worker's environment.
func workerEnv(extra []string) []string {
	env := []string{workerEnvVar + "=1"}
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

func aborted(cause error) error {
	return &Error{Code: CodeExecutionAborted, Message: fmt.Sprintf("execution aborted: %v", cause)}
}

// Execute runs one script in a worker.
func (p *workerPool) Execute(ctx context.Context, req Request, host Host) (res *Result, err error) {
	ctx, done := p.opts.Metrics.begin(ctx, EngineWorker)
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
	p.mu.Unlock()
	defer p.execs.Done()

	if err := ctx.Err(); err != nil {
		return nil, aborted(context.Cause(ctx))
	}
	for attempt := 0; ; attempt++ {
		w, err := p.acquire(ctx)
		if err != nil {
			return nil, err
		}
		res, err, reusable := w.run(ctx, p.nextExec.Add(1), req, host)
		p.release(w, reusable)
		if err == errWorkerGone {
			if attempt < 2 {
				continue
			}
			return nil, &Error{Code: CodeWorkerCrashed, Message: "sandbox workers keep dying before they receive a script"}
		}
		return res, err
	}
}

// acquire takes an idle worker or queues for one.
func (p *workerPool) acquire(ctx context.Context) (*worker, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, disposed()
	}
	if n := len(p.idle); n > 0 {
		w := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.busy++
		p.scaleUpLocked()
		p.mu.Unlock()
		return w, nil
	}
	if len(p.waiters) >= p.opts.QueueSize {
		p.mu.Unlock()
		return nil, &Error{Code: CodeQueueFull, Message: fmt.Sprintf("all %d sandbox workers are busy and %d executions are queued", p.opts.MaxSize, p.opts.QueueSize)}
	}
	wt := &waiter{ch: make(chan grant, 1)}
	p.waiters = append(p.waiters, wt)
	p.scaleUpLocked()
	p.mu.Unlock()

	timeout, stop := p.newTimer(p.opts.QueueTimeout)
	defer stop()
	queued := p.now()
	var fail error
	select {
	case g := <-wt.ch:
		p.opts.Metrics.waited("acquired", p.now().Sub(queued))
		return g.w, g.err
	case <-ctx.Done():
		p.opts.Metrics.waited("aborted", p.now().Sub(queued))
		fail = aborted(context.Cause(ctx))
	case <-timeout:
		p.opts.Metrics.waited("queue_timeout", p.now().Sub(queued))
		fail = &Error{Code: CodeQueueTimeout, Message: fmt.Sprintf("no sandbox worker became free within %v", p.opts.QueueTimeout)}
	}
	p.mu.Lock()
	for i, x := range p.waiters {
		if x == wt {
			p.waiters = append(p.waiters[:i], p.waiters[i+1:]...)
			p.mu.Unlock()
			return nil, fail
		}
	}
	p.mu.Unlock()
	// A grant raced the timeout: pass the worker on.
	if g := <-wt.ch; g.w != nil {
		p.release(g.w, true)
	}
	return nil, fail
}

// release returns a worker after an execution; a worker that is not
// reusable has been killed and is replaced if the pool is below MinSize.
func (p *workerPool) release(w *worker, reusable bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.busy--
	w.runs++
	switch {
	case p.closed || !reusable:
		if p.closed {
			w.ended(DeathShutdown)
		}
		w.ended(DeathRecycle) // unless its death was counted already
		w.kill(killNone)
		delete(p.all, w)
	case w.runs >= p.opts.MaxExecutionsPerWorker:
		delete(p.all, w)
		w.ended(DeathRecycle)
		w.retire()
	default:
		p.handOffLocked(w)
	}
	p.replenishLocked()
}

// handOffLocked gives w to the first waiter or makes it idle.
func (p *workerPool) handOffLocked(w *worker) {
	if len(p.waiters) > 0 {
		wt := p.waiters[0]
		p.waiters = p.waiters[1:]
		p.busy++
		wt.ch <- grant{w: w}
		return
	}
	p.idle = append(p.idle, w)
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
}

// utilisationLocked is (running + queued) / (live + starting workers).
func (p *workerPool) utilisationLocked() float64 {
	demand := p.busy + len(p.waiters)
	capacity := len(p.all) + p.starting
	if capacity == 0 {
		if demand == 0 {
			return 0
		}
		return math.Inf(1)
	}
	return float64(demand) / float64(capacity)
}

// scaleUpLocked starts one worker when utilisation reaches the threshold.
func (p *workerPool) scaleUpLocked() {
	if p.closed || len(p.all)+p.starting >= p.opts.MaxSize {
		return
	}
	if p.busy+len(p.waiters) > 0 && p.utilisationLocked() >= p.opts.ScaleUpThreshold {
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
		defer p.mu.Unlock()
		p.starting--
		p.spawnErr = err
		if err != nil {
			p.log.Warn("sandbox worker failed to start", zap.Error(err))
			// Nobody else will serve the queue: fail it rather than let it
			// wait for the timeout.
			if len(p.all)+p.starting == 0 {
				for _, wt := range p.waiters {
					wt.ch <- grant{err: err}
				}
				p.waiters = nil
			}
			return
		}
		if p.closed {
			w.ended(DeathShutdown)
			w.kill(killNone)
			return
		}
		p.all[w] = struct{}{}
		p.handOffLocked(w)
		p.scaleUpLocked()
	}()
}

// workerExited forgets a worker that died on its own while idle.
func (p *workerPool) workerExited(w *worker) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.all[w]; !ok {
		return
	}
	for i, x := range p.idle {
		if x == w {
			p.idle = append(p.idle[:i], p.idle[i+1:]...)
			delete(p.all, w)
			w.ended(DeathCrash)
			p.replenishLocked()
			return
		}
	}
	// A busy worker: its execution loop notices and releases it.
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

// scaleTick stops one idle worker above MinSize when utilisation is at or
// below ScaleDownThreshold, and starts one when it is at or above
// ScaleUpThreshold.
func (p *workerPool) scaleTick() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	if len(p.all) > p.opts.MinSize && len(p.idle) > 0 && p.utilisationLocked() <= p.opts.ScaleDownThreshold {
		w := p.idle[0]
		p.idle = p.idle[1:]
		delete(p.all, w)
		w.ended(DeathScaleDown)
		w.retire()
		return
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
	p.opts.Metrics.untrack(p)
	for _, wt := range p.waiters {
		wt.ch <- grant{err: disposed()}
	}
	p.waiters = nil
	idle := p.idle
	p.idle = nil
	for _, w := range idle {
		delete(p.all, w)
	}
	p.mu.Unlock()
	for _, w := range idle {
		w.ended(DeathShutdown)
		w.kill(killNone)
	}
	p.execs.Wait()
	p.bg.Wait()
	p.procs.Wait()
	return nil
}

// Shutdown refuses new executions (POOL_DISPOSED), lets the executions in
// flight and in the queue finish until ctx ends, then closes the pool.
func (p *workerPool) Shutdown(ctx context.Context) error {
	p.mu.Lock()
	p.draining = true
	p.mu.Unlock()
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
	return err
}

// Health implements HealthReporter.
func (p *workerPool) Health() EngineHealth {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := EngineHealth{Kind: "workers", Live: len(p.all), Idle: len(p.idle), Busy: p.busy, Starting: p.starting,
		Queued: len(p.waiters), Max: p.opts.MaxSize, QueueSize: p.opts.QueueSize}
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
		h.Problems = append(h.Problems, fmt.Sprintf("the queue is full (%d executions wait for a worker)", h.Queued))
	}
	return h
}

// stats reports the pool's size, for tests and metrics.
func (p *workerPool) stats() (live, idle, busy, starting, queued int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.all), len(p.idle), p.busy, p.starting, len(p.waiters)
}

// gauges reports what the metrics show of the pool: the pids of its live
// workers and its counts.
func (p *workerPool) gauges() (pids []int, idle, busy, starting, queued int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pids = make([]int, 0, len(p.all))
	for w := range p.all {
		pids = append(pids, w.pid)
	}
	return pids, len(p.idle), p.busy, p.starting, len(p.waiters)
}
