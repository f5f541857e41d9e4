package engine

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Why the parent killed a worker; it decides how its death is reported.
const (
	killNone = iota
	killTimeout
	killAborted
	killDisposed
	killProtocol
)

// stderrTail is how much of the head and of the tail of a worker's stderr
// is kept for diagnosis.
const stderrTail = 8 << 10

// errWorkerGone means a worker died before it received the script; the
// pool retries on another worker.
var errWorkerGone = errors.New("worker gone before the script was sent")

// maxPrefetchTools bounds the allowed tools looked up ahead of an execution.
const maxPrefetchTools = 256

// worker is one worker process as the parent sees it.
type worker struct {
	p   *workerPool
	cmd *exec.Cmd
	pid int
	in  io.WriteCloser
	out *frameWriter

	// Guarded by p.mu: executions started on it, hosted now, holding a
	// slot now; draining (takes no new execution); when it last got one.
	runs    int
	hosted  int
	running int
	// principals counts the executions it hosts by principal (placement
	// keeps principals apart: a worker death ends all it hosts).
	principals map[*principal]int
	draining   bool
	gone       bool // its process ended: nothing more is sent to it
	lastUsed   time.Time

	ready  chan struct{} // closed when the handshake arrives
	dead   chan struct{} // closed when the reader stops
	exited chan struct{} // closed once the process is reaped
	stderr *tailBuffer

	mu         sync.Mutex
	execs      map[uint64]*execState // the executions it hosts, by ID
	killReason int
	culprit    *execState // the execution a timeout kill was for
	// unresponsive: the watchdog found the process not running (stopped
	// from outside, or idle without answering) when it killed it.
	unresponsive bool
	readErr      error           // why the reader stopped
	state        *exec.ExitError // set when the process exited with a failure
	killOnce     sync.Once
	endOnce      sync.Once // counts the worker's death once
}

// ended counts the worker's death under cause; only the first call counts.
func (w *worker) ended(cause string) {
	w.endedAs(cause)
}

// endedAs is ended, reporting whether this call recorded the death (the
// first to do so).
func (w *worker) endedAs(cause string) (first bool) {
	w.endOnce.Do(func() {
		first = true
		w.p.opts.Metrics.Died(cause)
	})
	return first
}

// selfExe is this process's own image (Linux): see runningExecutable.
const selfExe = "/proc/self/exe"

// startWorker starts a worker process and waits for its handshake.
func (p *workerPool) startWorker() (_ *worker, err error) {
	began := time.Now()
	defer func() {
		switch {
		case err == nil:
			p.opts.Metrics.Started(time.Since(began))
		case !isDisposed(err):
			p.opts.Metrics.StartFailed()
		}
	}()
	select {
	case <-p.closing:
		return nil, disposed()
	default:
	}
	argv := p.opts.Command
	cmd := exec.Command(argv[0], argv[1:]...)
	if argv[0] == selfExe {
		// ps shows the program's name, not /proc/self/exe.
		if name, err := os.Executable(); err == nil {
			cmd.Args[0] = name
		}
	}
	cmd.Env = p.env
	cmd.SysProcAttr = workerSysProcAttr()
	cmd.WaitDelay = time.Second
	w := &worker{
		p:          p,
		cmd:        cmd,
		ready:      make(chan struct{}),
		dead:       make(chan struct{}),
		exited:     make(chan struct{}),
		stderr:     &tailBuffer{max: stderrTail},
		execs:      make(map[uint64]*execState),
		lastUsed:   p.now(),
		principals: make(map[*principal]int),
	}
	cmd.Stderr = w.stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, startupFailed("creating the worker's stdin: %v", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, startupFailed("creating the worker's stdout: %v", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, startupFailed("starting worker command %q: %v", argv[0], err)
	}
	w.pid = cmd.Process.Pid
	w.in = stdin
	w.out = &frameWriter{w: rawWriter(stdin), max: p.opts.MaxMessageBytes}
	p.procs.Add(1)
	go w.readLoop(stdout)

	init := &wireMsg{T: msgInit, V: protocolVersion, Init: &wireInit{
		MemoryBytes:       p.workerCap(),
		ScriptMemoryBytes: p.opts.MemoryBytes,
		MaxMessageBytes:   p.opts.MaxMessageBytes,
		Engine:            p.engine,
	}}
	if err := w.out.write(init); err != nil {
		w.killAndDrain(killNone)
		return nil, startupFailed("worker %d did not accept its configuration: %v%s", w.pid, err, w.stderrSummary())
	}
	timeout, stop := p.newTimer(p.opts.StartupTimeout)
	defer stop()
	select {
	case <-w.ready:
		return w, nil
	case <-w.dead:
		w.killAndDrain(killNone)
		return nil, startupFailed("worker %d exited before its handshake (%s)%s", w.pid, w.deathCause(), w.stderrSummary())
	case <-timeout:
		w.killAndDrain(killNone)
		err := startupFailed("worker %d did not complete its handshake within %v%s", w.pid, p.opts.StartupTimeout, w.stderrSummary())
		err.late = true
		return nil, err
	case <-p.closing:
		w.killAndDrain(killDisposed)
		return nil, disposed()
	}
}

func startupFailed(format string, args ...any) *Error {
	return &Error{Code: CodeWorkerStartupFailed, Message: fmt.Sprintf(format, args...)}
}

// readLoop reads, limits and validates the worker's messages until the
// stream ends, then reaps the process (see reading).
func (w *worker) readLoop(stdout io.Reader) {
	rd := &reading{
		w:           w,
		fr:          &frameReader{r: bufio.NewReaderSize(rawReader(stdout), 64<<10), max: w.p.opts.MaxMessageBytes, fastCalls: true},
		windowStart: w.p.now(),
		first:       true,
	}
	w.p.watch.add(rd)
	w.read(rd)
}

// reading is the reading of one worker's frames. One goroutine at a time
// reads: the reader. A tool call that arrives with no frame behind it, of
// a tool whose previous call in the same execution returned at once, is
// run by the reader itself: the host's answer is then written without a
// goroutine hand-off (two thread wake-ups fewer per call). The reader
// must never be held up by a slow host, or by a worker that stops reading
// its stdin: the pool's watch (inlineWatch) makes another goroutine the
// reader when one stays in a call, and the goroutine in the call ends with
// it. inCall passes the reader's role: it is the number of the call the
// reader is in (0: none), and whoever moves it from that number to 0
// reads on.
type reading struct {
	w           *worker
	fr          *frameReader
	windowStart time.Time
	count       int
	first       bool
	calls       uint64 // the reader's calls so far
	inCall      atomic.Uint64
}

// read reads, limits and validates frames while this goroutine is the
// reader; when the stream ends it ends the worker.
func (w *worker) read(rd *reading) {
	p := w.p
	var err error
	for {
		var m *wireMsg
		m, err = rd.fr.read()
		if err != nil {
			break
		}
		if now := p.now(); now.Sub(rd.windowStart) >= p.opts.FloodInterval {
			rd.windowStart, rd.count = now, 0
		}
		rd.count++
		if rd.count > p.opts.FloodMessages {
			err = &protocolError{Code: CodeMessageFlood, Msg: fmt.Sprintf("worker sent more than %d messages within %v", p.opts.FloodMessages, p.opts.FloodInterval)}
			break
		}
		if err = validateFromWorker(m); err != nil {
			break
		}
		if rd.first != (m.T == msgReady) {
			err = invalidf("unexpected %s message %s the handshake", m.T, map[bool]string{true: "before", false: "after"}[rd.first])
			break
		}
		if rd.first {
			rd.first = false
			close(w.ready)
			continue
		}
		var call *execState
		if call, err = w.dispatch(m, rd.fr.buffered() == 0); err != nil {
			break
		}
		if call != nil {
			rd.calls++
			n := rd.calls
			rd.inCall.Store(n)
			p.watch.arm()
			w.callTool(call, m)
			if !rd.inCall.CompareAndSwap(n, 0) {
				return // another goroutine reads now
			}
		}
	}
	p.watch.remove(rd)
	w.stopReading(err)
}

// stopReading ends a worker whose stream ended (err says how).
func (w *worker) stopReading(err error) {
	p := w.p
	w.setReadErr(err)
	// Forget the worker before anyone can see it dead, so that no new
	// execution is placed on it.
	p.workerExited(w)
	var pe *protocolError
	if errors.As(err, &pe) {
		w.kill(killProtocol)
	} else {
		// The stream ended: the worker exited or closed stdout. Make sure
		// it is gone either way.
		w.kill(killNone)
	}
	close(w.dead)
	waitErr := w.cmd.Wait()
	var ee *exec.ExitError
	if errors.As(waitErr, &ee) {
		w.mu.Lock()
		w.state = ee
		w.mu.Unlock()
	}
	close(w.exited)
	if tail := w.stderr.String(); tail != "" {
		p.log.Log(context.Background(), "debug", "sandbox worker exited", "pid", w.pid, "stderr", tail)
	}
	p.procs.Done()
}

// kill ends the process; the first reason given is kept.
func (w *worker) kill(reason int) {
	w.killOnce.Do(func() {
		w.mu.Lock()
		w.killReason = reason
		w.mu.Unlock()
		_ = w.cmd.Process.Kill()
	})
}

// killAndDrain kills the process and waits until it is reaped, reading
// away whatever it still sent so that the reader can finish.
func (w *worker) killAndDrain(reason int) {
	w.kill(reason)
	<-w.exited
}

// retire ends an idle worker gently: it exits when its stdin closes.
func (w *worker) retire() {
	_ = w.in.Close()
	go func() {
		t, stop := w.p.newTimer(5 * time.Second)
		defer stop()
		select {
		case <-w.exited:
		case <-t:
			w.kill(killNone)
		}
	}()
}

func (w *worker) reason() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.killReason
}

// brokeProtocol reports whether the reader killed w for a protocol
// violation.
func (w *worker) brokeProtocol() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	var pe *protocolError
	return errors.As(w.readErr, &pe)
}

// deathCause describes how the process ended, for operators.
func (w *worker) deathCause() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var pe *protocolError
	if errors.As(w.readErr, &pe) {
		// The pool killed it for what it sent: that is the cause, not
		// the kill.
		return w.readErr.Error()
	}
	if w.state != nil {
		return w.state.String()
	}
	if w.readErr != nil && !errors.Is(w.readErr, io.EOF) {
		return w.readErr.Error()
	}
	return "exit status 0"
}

func (w *worker) stderrSummary() string {
	s := strings.TrimSpace(w.stderr.String())
	if s == "" {
		return ""
	}
	if len(s) > 300 {
		s = "..." + s[len(s)-300:]
	}
	return "; stderr: " + s
}

// execState is the parent's bookkeeping of one execution.
type execState struct {
	id        uint64
	w         *worker
	pr        *principal
	lim       Limits
	lastCall  uint64
	toolCalls int
	logs      int
	pending   atomic.Int32
	calls     sync.WaitGroup
	ctx       context.Context
	host      Host
	logHost   LogHost
	done      chan *wireDone // the worker's final report, buffered 1

	// Scheduling, guarded by the pool's mu: whether it holds a CPU slot,
	// the results sent to it, the ticket it waits on to resume, the start
	// of its current running stretch and its running time before it.
	holds    bool
	finished bool
	// ranAtDeath records, when its worker died, whether the script held a
	// slot then (it caused or suffered the death) or waited.
	ranAtDeath bool
	sent       uint64
	resume     *ticket
	runStart   time.Time
	cpuUsed    time.Duration

	// mu orders the reader's dispatch against the end of the execution:
	// once closed, no more tool calls start. It also guards quick: by
	// tool, whether its last call returned within quickCall.
	mu     sync.Mutex
	closed bool
	quick  map[string]bool
}

// quickCall is how fast a tool call must return for the next call of the
// same tool in the execution to be run by the reader (see reading); tests
// change it. maxQuickTools bounds the tools an execution remembers.
var quickCall = 50 * time.Microsecond

const maxQuickTools = 64

// timed records how long a call of the tool name took.
func (st *execState) timed(name string, took time.Duration) {
	quick := took <= quickCall
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.quick == nil {
		st.quick = make(map[string]bool)
	}
	if _, known := st.quick[name]; known || len(st.quick) < maxQuickTools {
		st.quick[name] = quick
	}
}

// execByID returns the hosted execution with this ID.
func (w *worker) execByID(id uint64) *execState {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.execs[id]
}

// dispatch serves one message of a hosted execution. A tool call is run
// on a goroutine of the pool's runners, or, when inline allows, left to
// the caller: then dispatch returns its execution, and the caller must
// run w.callTool(st, m).
func (w *worker) dispatch(m *wireMsg, inline bool) (*execState, error) {
	st := w.execByID(m.ID)
	if st == nil {
		return nil, invalidf("%s message for execution %d, which this worker does not run", m.T, m.ID)
	}
	switch m.T {
	case msgDone:
		// Anything after done is a violation.
		w.mu.Lock()
		delete(w.execs, m.ID)
		w.mu.Unlock()
		st.done <- m.Done
		return nil, nil
	case msgWait:
		w.p.parked(st, m.Seen)
		return nil, nil
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed {
		return nil, nil
	}
	if inline, err := w.handle(st, m, inline); err != nil || !inline {
		return nil, err
	}
	return st, nil
}

// run executes one script on w, which admit reserved a slot and a seat on.
// errWorkerGone means the worker died before the script reached it.
func (w *worker) run(ctx context.Context, id uint64, req Request, host Host, pr *principal) (res *Result, err error) {
	p := w.p
	lim := LowerLimits(p.limits, req.Limits)
	callCtx, cancelCalls := context.WithCancelCause(ctx)
	st := &execState{id: id, w: w, pr: pr, lim: lim, ctx: callCtx, host: host, done: make(chan *wireDone, 1)}
	st.logHost, _ = host.(LogHost)
	p.mu.Lock()
	st.holds = true
	st.runStart = p.now()
	idle := st.runStart.Sub(w.lastUsed)
	w.lastUsed = st.runStart
	p.mu.Unlock()
	var recycle bool
	defer func() {
		w.mu.Lock()
		delete(w.execs, id)
		w.mu.Unlock()
		st.mu.Lock()
		st.closed = true
		st.mu.Unlock()
		if err != errWorkerGone {
			ended(host)
		}
		cancelCalls(callsCause(res, err))
		st.calls.Wait()
		if recycle || p.opts.MaxExecutionsPerWorker <= w.runsNow() {
			p.drain(w)
		}
		p.release(w, pr, st)
	}()

	ex := &wireExec{
		Code:    req.Code,
		Context: req.Context,
		Limits:  req.Limits,
		Stream:  st.logHost != nil,
	}
	if req.AllowedTools != nil {
		ex.HasAllowed = true
		ex.Allowed = req.AllowedTools
		if len(req.AllowedTools) <= maxPrefetchTools {
			seen := make(map[string]bool, len(req.AllowedTools))
			for _, name := range req.AllowedTools {
				if seen[name] || validToolName(name) != nil {
					continue
				}
				seen[name] = true
				if info, ok := safeLookup(host, name); ok {
					info.Name = name
					ex.Tools = append(ex.Tools, info)
				} else {
					ex.Missing = append(ex.Missing, name)
				}
			}
		}
	}
	if idle >= idleCheckAfter && w.stoppedIdle(ctx, p.log) {
		return nil, errWorkerGone
	}
	w.mu.Lock()
	w.execs[id] = st
	w.mu.Unlock()
	if err := w.out.write(&wireMsg{T: msgExec, ID: id, Exec: ex}); err != nil {
		var pe *protocolError
		if errors.As(err, &pe) {
			// Nothing was written: the worker is intact.
			return failure(StatusRuntimeError, CodeMessageTooLarge, "MessageSizeError",
				fmt.Sprintf("the script and its context exceed the worker message limit of %d bytes", p.opts.MaxMessageBytes)), nil
		}
		// The worker died: nothing of this script ran.
		w.ended(DeathCrash)
		w.killAndDrain(killNone)
		return nil, errWorkerGone
	}

	// The wall-clock watchdog: the worker's engine stops the script at its
	// timeout; past it plus the grace, the worker ignores it (a built-in
	// stuck in Go) and is killed. The CPU watchdog does the same for a
	// script that holds its slot past its running time.
	watchdog, stop := p.newTimer(lim.Timeout + p.opts.WatchdogGrace)
	defer stop()
	cpu := time.NewTicker(cpuWatchPeriod)
	defer cpu.Stop()
	for {
		select {
		case d := <-st.done:
			res, err, again := w.finish(st, d)
			recycle = !again
			return res, err
		case <-w.dead:
			<-w.exited
			// The reader hands over done before it reads the next message,
			// so a report that is here came before the protocol violation
			// that killed the worker (a message after done): the script
			// finished and its result stands.
			select {
			case d := <-st.done:
				if w.brokeProtocol() {
					w.ended(DeathProtocol)
					res, err, _ := w.finish(st, d)
					return res, err
				}
			default:
			}
			if w.diedUnseen(st) {
				// Nothing of the script reached the outside: it runs again
				// on another worker (Execute), as if it had never been sent.
				w.ended(DeathCrash)
				p.log.Log(ctx, "warn", "sandbox worker killed from outside before its script made a tool call; running the script again",
					"pid", w.pid, "exit", w.deathCause())
				return nil, errWorkerGone
			}
			return w.deathResult(ctx, st, p.log), nil
		case <-watchdog:
			w.killFor(st)
			return w.deathResult(ctx, st, p.log), nil
		case <-cpu.C:
			if p.overCPU(st) {
				w.killFor(st)
				return w.deathResult(ctx, st, p.log), nil
			}
		case <-ctx.Done():
			// Ask the worker to stop the script; a worker that cannot is
			// killed (with whatever else it hosts).
			_ = w.out.write(&wireMsg{T: msgCancel, ID: id})
			grace, stopGrace := p.newTimer(p.opts.WatchdogGrace)
			select {
			case <-st.done:
			case <-w.dead:
			case <-grace:
				w.ended(DeathAborted)
				w.killAndDrain(killAborted)
			case <-p.closing:
				w.ended(DeathShutdown)
				w.killAndDrain(killDisposed)
			}
			stopGrace()
			return nil, aborted(context.Cause(ctx))
		case <-p.closing:
			w.ended(DeathShutdown)
			w.killAndDrain(killDisposed)
			return nil, disposed()
		}
	}
}

// callsCause is why the tool calls still running when an execution ended
// were cancelled, as a *ToolError a host can report (context.Cause of the
// call's context): the worker's death or the execution's failure. nil
// (plain context.Canceled, or the cause of the context the execution was
// given) when the script ended by itself, its own timeout included.
func callsCause(res *Result, err error) error {
	var e *Error
	switch {
	case errors.As(err, &e):
		return &ToolError{Code: e.Code, Message: "the execution ended before the tool answered: " + e.Message}
	case err != nil || res == nil || res.Error == nil:
		return nil
	}
	switch c := res.Error.Code; c {
	case CodeWorkerLost, CodeWorkerTimeout, CodeWorkerCrashed, CodeWorkerMemoryExceeded,
		CodeMessageInvalid, CodeMessageTooLarge, CodeMessageFlood, CodeTooManyPendingCalls:
		return &ToolError{Code: c, Message: "the execution ended before the tool answered: " + res.Error.Message}
	}
	return nil
}

// cpuWatchPeriod is how often an execution's CPU watchdog looks.
const cpuWatchPeriod = 250 * time.Millisecond

// overCPU reports a script holding its slot past its running time plus the
// watchdog's grace: its worker's engine should have stopped it.
func (p *workerPool) overCPU(st *execState) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !st.holds {
		return false
	}
	used := st.cpuUsed + p.now().Sub(st.runStart)
	return used > st.lim.CPUTime+p.opts.WatchdogGrace
}

func (w *worker) runsNow() int {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	return w.runs
}

// killFor kills the worker because st ignored its time limit, or because
// the worker did not answer at all (see notRunning).
func (w *worker) killFor(st *execState) {
	gone := w.notRunning()
	w.mu.Lock()
	if w.culprit == nil {
		w.culprit = st
		w.unresponsive = gone
	}
	w.mu.Unlock()
	w.killAndDrain(killTimeout)
}

// unresponsiveSample is how long notRunning watches a worker's CPU time.
const unresponsiveSample = 100 * time.Millisecond

// notRunning tells a worker that is not running at all (stopped by a
// SIGSTOP, or blocked without using the CPU) from one whose script is stuck
// in a built-in, which uses the CPU all the time. It is asked only when the
// watchdog is about to kill the worker (the script's timeout plus the grace
// are over), so its sample costs nothing to the scripts that end in time.
func (w *worker) notRunning() bool {
	stopped, before, ok := processActivity(w.pid)
	if !ok || stopped {
		return stopped
	}
	time.Sleep(unresponsiveSample)
	stopped, after, ok := processActivity(w.pid)
	return ok && (stopped || after == before)
}

// idleCheckAfter is how long a worker must have been idle for run to look
// whether it was stopped before giving it a script: one read of
// /proc/<pid>/stat, which workers in steady use never pay.
const idleCheckAfter = time.Second

// stoppedIdle kills an idle worker found stopped (a SIGSTOP from outside)
// before it is given a script, which it would hold until the watchdog
// (the script's timeout plus the grace); run then tries another worker.
func (w *worker) stoppedIdle(ctx context.Context, log Logger) bool {
	if stopped, _, _ := processActivity(w.pid); !stopped {
		return false
	}
	w.mu.Lock()
	w.unresponsive = true
	w.mu.Unlock()
	w.ended(DeathUnresponsive)
	log.Log(ctx, "warn", "sandbox worker found stopped (SIGSTOP from outside) before it was given a script; killed and replaced", "pid", w.pid)
	w.killAndDrain(killNone)
	return true
}

// setReadErr records a protocol violation found by the execution loop
// unless the reader already recorded one.
func (w *worker) setReadErr(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var pe *protocolError
	if !errors.As(w.readErr, &pe) {
		w.readErr = err
	}
}

// handle serves one call, lookup or log message. A call is left to the
// caller (it reports true) when inline allows and the previous call of the
// same tool in this execution returned at once (see reading).
func (w *worker) handle(st *execState, m *wireMsg, inline bool) (bool, error) {
	switch m.T {
	case msgCall, msgLookup:
		if m.Call <= st.lastCall {
			return false, invalidf("%s number %d does not follow %d", m.T, m.Call, st.lastCall)
		}
		st.lastCall = m.Call
	}
	switch m.T {
	case msgLookup:
		// Answered off the reader, which must never block on a write.
		st.calls.Add(1)
		w.p.runners.run(func() { w.lookup(st, m) })
	case msgCall:
		st.toolCalls++
		if st.lim.MaxToolCalls > 0 && st.toolCalls > st.lim.MaxToolCalls {
			return false, invalidf("worker exceeded maxToolCalls %d", st.lim.MaxToolCalls)
		}
		if int(st.pending.Load()) >= w.p.opts.MaxPendingCalls {
			return false, &protocolError{Code: CodeTooManyPendingCalls, Msg: fmt.Sprintf("the script has more than %d tool calls in flight", w.p.opts.MaxPendingCalls)}
		}
		st.pending.Add(1)
		st.calls.Add(1)
		if inline && (m.Oversize || st.quick[m.Name]) {
			return true, nil
		}
		w.p.runners.run(func() { w.callTool(st, m) })
	case msgLog:
		st.logs++
		if st.lim.MaxConsoleEntries > 0 && st.logs > st.lim.MaxConsoleEntries {
			return false, nil // the engine counts too; extra entries are dropped
		}
		if st.logHost != nil {
			st.logHost.Log(m.Level, m.Message)
		}
	}
	return false, nil
}

// lookup answers a worker's LookupTool.
func (w *worker) lookup(st *execState, m *wireMsg) {
	defer st.calls.Done()
	info, ok := safeLookup(st.host, m.Name)
	reply := &wireMsg{T: msgLookup, ID: st.id, Call: m.Call, Found: ok}
	if ok {
		info.Name = m.Name
		reply.Tool = &info
	}
	if err := w.out.write(reply); err != nil {
		reply.Tool = &ToolInfo{Name: m.Name, Description: "(metadata too large)"}
		_ = w.out.write(reply)
	}
}

// callTool runs one tool call on the host and passes the result on (when
// the script may run: see deliverResult).
func (w *worker) callTool(st *execState, m *wireMsg) {
	defer st.calls.Done()
	callID := m.CallID
	if callID == "" {
		callID = strconv.FormatUint(m.Call, 10)
	}
	var data json.RawMessage
	var toolErr *wireToolErr
	if m.Oversize {
		toolErr = &wireToolErr{Code: CodeToolExecutionError, Message: fmt.Sprintf("tool input exceeds the worker message limit of %d bytes", w.p.opts.MaxMessageBytes)}
	} else {
		began := time.Now()
		var err error
		data, err = safeCall(st.ctx, st.host, ToolCall{ID: callID, Name: m.Name, Input: m.Input})
		st.timed(m.Name, time.Since(began))
		if err != nil {
			data, toolErr = nil, toWireToolErr(err)
		} else {
			if len(data) == 0 {
				data = json.RawMessage("null")
			}
			// The frame of a result is its data plus a small envelope.
			if len(data)+256 > w.p.opts.MaxMessageBytes {
				data, toolErr = nil, &wireToolErr{Code: CodeToolExecutionError, Message: fmt.Sprintf("tool %s returned more than the worker message limit of %d bytes", clipName(m.Name), w.p.opts.MaxMessageBytes)}
			}
		}
	}
	// The call's message becomes the reply: nothing holds it once the call
	// is made (the host has the input, not the message), and one message
	// fewer per call is one allocation fewer on the awaited call's path.
	*m = wireMsg{T: msgResult, ID: st.id, Call: m.Call, Data: data, Err: toolErr, checked: data != nil} // safeCall scanned data
	st.pending.Add(-1)
	w.p.deliverResult(st, m)
}

func toWireToolErr(err error) *wireToolErr {
	var te *ToolError
	if errors.As(err, &te) {
		return &wireToolErr{Code: te.Code, Message: clipText(te.Message, MaxErrorBytes)}
	}
	return &wireToolErr{Message: clipText(err.Error(), MaxErrorBytes), Plain: true}
}

// safeLookup and safeCall keep a panicking host from taking the pool down.
func safeLookup(h Host, name string) (info ToolInfo, ok bool) {
	defer func() {
		if recover() != nil {
			info, ok = ToolInfo{}, false
		}
	}()
	return h.LookupTool(name)
}

// ended tells a host that implements EndHost that its execution is over;
// a panic there is the host's, not the engine's.
func ended(h Host) {
	if eh, ok := h.(EndHost); ok {
		defer func() { _ = recover() }()
		eh.Ended()
	}
}

func safeCall(ctx context.Context, h Host, call ToolCall) (data json.RawMessage, err error) {
	defer func() {
		if r := recover(); r != nil {
			data, err = nil, fmt.Errorf("tool %s failed unexpectedly", call.Name)
		}
	}()
	data, err = dispatch(ctx, h, call)
	if err == nil && len(data) > 0 && !json.Valid(data) {
		return nil, fmt.Errorf("tool %s returned invalid JSON", call.Name)
	}
	return data, err
}

// finish turns a worker's done message into the execution's outcome; again
// is false when the worker asked to be replaced.
func (w *worker) finish(st *execState, d *wireDone) (*Result, error, bool) {
	if d.Err != nil {
		return nil, &Error{Code: d.Err.Code, Message: d.Err.Message}, !d.Recycle
	}
	res := d.Result
	// The engine bounds the logs and may add one truncation notice.
	if n := st.lim.MaxConsoleEntries + 1; st.lim.MaxConsoleEntries > 0 && len(res.Logs) > n {
		res.Logs = res.Logs[:n]
	}
	res.Stats = Stats{
		Duration:  time.Duration(d.Stats.DurationNS),
		ToolCalls: d.Stats.ToolCalls,
		Steps:     d.Stats.Steps,
	}
	return res, nil, !d.Recycle
}

// diedUnseen reports a worker that SIGKILL ended from outside (an operator,
// the kernel's OOM killer; not the pool, which records its kills; not out
// of memory, which the worker reports on stderr) before st made a tool call
// or logged: the script had no effect outside its worker, so running it
// again is safe. Typically it was sent to an idle worker in the instant
// between the kill and the pool seeing the death. Lookups (getTool) are
// not effects.
func (w *worker) diedUnseen(st *execState) bool {
	w.mu.Lock()
	reason, readErr, state := w.killReason, w.readErr, w.state
	w.mu.Unlock()
	return state != nil && killedOutright(state.ProcessState) && st.toolCalls == 0 && st.logs == 0 &&
		w.unexplained(reason, readErr)
}

// unexplained reports a death that nothing the pool saw explains: no kill
// of its own, no protocol violation, no out-of-memory report on stderr.
func (w *worker) unexplained(reason int, readErr error) bool {
	var pe *protocolError
	return reason == killNone && !errors.As(readErr, &pe) && !isOutOfMemory(w.stderr.String())
}

// CodeWorkerLost reports a script that was waiting in a worker which
// another script it hosted brought down (a memory bomb, a built-in that
// ignored its deadline): the script itself did nothing wrong and may be
// run again.
const CodeWorkerLost = "WORKER_LOST"

// deathResult reports a worker that died or was killed while hosting st:
// the scripts that held a slot (ran) get the cause, the ones that were
// waiting WORKER_LOST.
func (w *worker) deathResult(ctx context.Context, st *execState, log Logger) *Result {
	w.mu.Lock()
	reason, readErr, state, culprit, unresponsive := w.killReason, w.readErr, w.state, w.culprit, w.unresponsive
	w.mu.Unlock()
	w.p.mu.Lock()
	ran := st.holds
	if w.gone {
		ran = st.ranAtDeath
	}
	w.p.mu.Unlock()
	if reason == killTimeout && unresponsive {
		w.ended(DeathUnresponsive)
		log.Log(ctx, "warn", "sandbox worker did not answer (stopped from outside, or blocked without using the CPU); killed and replaced", "pid", w.pid)
		if culprit == st {
			return failure(StatusTimeout, CodeWorkerTimeout, "WorkerTimeoutError",
				fmt.Sprintf("the sandbox worker given this script did not answer within the time limit of %d ms and the watchdog's grace (its process was stopped from outside or hung, not running the script); it was killed and replaced; the script may not have run and may be run again", st.lim.Timeout.Milliseconds()))
		}
		return failure(StatusRuntimeError, CodeWorkerLost, "WorkerLostError",
			"the sandbox worker hosting this script stopped answering (stopped from outside or hung) and was killed and replaced; this script was waiting for a tool result and may be run again")
	}
	if reason == killTimeout && culprit == st {
		w.ended(DeathTimeout)
		ms := st.lim.Timeout.Milliseconds()
		if st.lim.CPUTime > 0 && st.lim.CPUTime < st.lim.Timeout {
			ms = st.lim.CPUTime.Milliseconds()
		}
		return failure(StatusTimeout, CodeWorkerTimeout, "WorkerTimeoutError",
			fmt.Sprintf("script exceeded the time limit of %d ms and did not stop; its worker was killed", ms))
	}
	if !ran || (reason == killTimeout && culprit != st) {
		msg := "the sandbox worker hosting this script was stopped by another script it hosted (memory or time); this script was waiting for a tool result and may be run again"
		if w.unexplained(reason, readErr) {
			// A signal from outside, the kernel's OOM killer: do not
			// blame a script.
			how := "exit status 0"
			if state != nil {
				how = state.String()
			}
			msg = fmt.Sprintf("the sandbox worker hosting this script died (%s) while this script was waiting for a tool result; it may be run again", how)
			// Counted and logged once per worker (endOnce), whichever of
			// its waiting scripts sees the death first; a death a script
			// caused is counted by that script's own deathResult.
			if w.endedAs(DeathCrash) {
				log.Log(ctx, "warn", "sandbox worker died while its scripts waited for tool results", "pid", w.pid, "exit", how, "stderr", w.stderr.String())
			}
		}
		return failure(StatusRuntimeError, CodeWorkerLost, "WorkerLostError", msg)
	}
	var pe *protocolError
	if errors.As(readErr, &pe) {
		names := map[string]string{
			CodeMessageInvalid:      "MessageValidationError",
			CodeMessageTooLarge:     "MessageSizeError",
			CodeMessageFlood:        "MessageFloodError",
			CodeTooManyPendingCalls: "TooManyPendingCallsError",
		}
		w.ended(DeathProtocol)
		log.Log(ctx, "warn", "sandbox worker broke the protocol", "pid", w.pid, "code", pe.Code, "detail", pe.Msg)
		return failure(StatusRuntimeError, pe.Code, names[pe.Code], "worker stopped: "+pe.Msg)
	}
	tail := w.stderr.String()
	if isOutOfMemory(tail) {
		w.ended(DeathMemory)
		return failure(StatusRuntimeError, CodeWorkerMemoryExceeded, "WorkerMemoryError",
			fmt.Sprintf("script exceeded the worker memory limit of %s", formatBytes(w.p.opts.MemoryBytes)))
	}
	how := "exit status 0"
	if state != nil {
		how = state.String()
	}
	w.ended(DeathCrash)
	log.Log(ctx, "warn", "sandbox worker crashed", "pid", w.pid, "exit", how, "stderr", tail)
	return failure(StatusRuntimeError, CodeWorkerCrashed, "WorkerCrashedError",
		fmt.Sprintf("the worker running the script crashed (%s)", how))
}

// isOutOfMemory recognises how hitting RLIMIT_DATA shows: the Go runtime's
// and the race runtime's allocation failures, thread creation failing for
// want of memory for the thread's stack, and the collector's span queue
// faulting on memory it could not get: Go 1.26's newSpanSPMC does not
// check sysAlloc, so when mmap fails its ring is nil and the mark worker
// that fills it dies with SIGSEGV in runtime.(*spanQueue).tryDrain
// (about one in three of `String(1n << 8000000000n)` under a 32 MiB cap,
// racing the allocating thread's "out of memory").
func isOutOfMemory(stderr string) bool {
	s := strings.ToLower(stderr)
	for _, marker := range []string{
		"out of memory",
		"cannot allocate memory",
		"failed to allocate",
		"pthread_create failed",
		"failed to create new os thread",
	} {
		if strings.Contains(s, marker) {
			return true
		}
	}
	return strings.Contains(s, "sigsegv") && strings.Contains(s, "runtime.(*spanqueue).")
}

func failure(status Status, code, name, msg string) *Result {
	e := &ScriptError{Code: code, Message: msg}
	if status == StatusRuntimeError {
		e.Name = name
		e.Source = "script"
	}
	return &Result{Status: status, Error: e}
}

func formatBytes(n int64) string {
	switch {
	case n <= 0:
		return "unlimited"
	case n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// tailBuffer keeps the first and the last max bytes written to it: a Go
// runtime's fatal error is at the head, followed by long stack dumps.
type tailBuffer struct {
	mu   sync.Mutex
	max  int
	head []byte
	buf  []byte
	cut  bool
}

func (t *tailBuffer) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(b)
	if room := t.max - len(t.head); room > 0 {
		k := min(room, len(b))
		t.head = append(t.head, b[:k]...)
		b = b[k:]
	}
	t.buf = append(t.buf, b...)
	if len(t.buf) > t.max {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.max:]...)
		t.cut = true
	}
	return n, nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	sep := ""
	if t.cut {
		sep = "\n[...]\n"
	}
	return string(t.head) + sep + string(t.buf)
}
