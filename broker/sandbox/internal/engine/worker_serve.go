package engine

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"syscall"
	"time"
)

// newWorkerEngine builds the engine a worker runs scripts with. Tests of the
// pool mechanics replace it (in the worker process) with a scripted fake.
var newWorkerEngine = func(c workerEngineConfig) (Engine, error) {
	return NewInProcess(&Options{Preset: c.Preset, Limits: c.Limits, Sanitization: c.Sanitization}), nil
}

// workerEngineConfig is the part of Options sent to a worker.
type workerEngineConfig struct {
	Preset       string       `json:"preset,omitempty"`
	Limits       Limits       `json:"limits"`
	Sanitization Sanitization `json:"sanitization"`
}

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
func MaybeServeWorker() bool {
	if os.Getenv(workerEnvVar) != "1" {
		return false
	}
	os.Exit(ServeWorkerStdio())
	return true
}

// workerStdout keeps the process's stdout files reachable (two *os.File
// for descriptor 1 once pollablePipe made one: either one's finaliser
// would close it).
var workerStdout [2]*os.File

// ServeWorkerStdio serves the worker protocol on the process's stdin and
// stdout and returns the process exit code. Anything else the process
// prints to stdout afterwards goes to stderr, so it cannot corrupt the
// protocol. The `caddy codemode-worker` subcommand calls it.
func ServeWorkerStdio() int {
	// A worker shares its gateway's process group and cgroup, so the
	// signals that ask the gateway to stop reach it too: Ctrl-C in a
	// terminal (SIGINT to the group), systemd's stop (SIGTERM to the
	// cgroup), a closed terminal (SIGHUP, which Caddy ignores). Dying then
	// would end the scripts the gateway is draining; the worker ends with
	// its gateway instead (its pipes close; Pdeathsig on Linux) or when
	// the pool kills it.
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	workerStdout[0] = os.Stdout
	os.Stdout = os.Stderr
	workerStdout[1] = pollablePipe(workerStdout[0])
	if err := ServeWorker(pollablePipe(os.Stdin), workerStdout[1]); err != nil {
		fmt.Fprintf(os.Stderr, "codemode worker: %v\n", err)
		return 1
	}
	return 0
}

// ServeWorker is the worker side of the pool: it reads its configuration
// from in, caps this process's memory, then runs the scripts it is sent
// with the in-process engine, each on its own goroutine (the parent decides
// how many this process hosts and when each may run), forwarding tool
// calls and console output to the parent over out. It returns nil when in
// ends. When in is an *os.File of a non-blocking pipe (on Linux), it is
// closed after the handshake and the pipe read through a duplicate of its
// descriptor (see workerInput).
func ServeWorker(in io.Reader, out io.Writer) error {
	// The script prelude compiles while the configuration is read and the
	// memory capped (NewInProcess waits for it); in a process the pool
	// started, it began during package initialisation (internal/prelude).
	go preludeProgram()
	in = rawReader(in)
	br := bufio.NewReaderSize(in, 64<<10)
	fr := &frameReader{r: br, max: 1 << 20}
	out = rawWriter(out)
	m, err := fr.read()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil
		}
		return fmt.Errorf("reading the configuration: %w", err)
	}
	if m.T != msgInit || m.Init == nil || m.V != protocolVersion {
		return fmt.Errorf("expected an init message of protocol version %d, got %q version %d", protocolVersion, m.T, m.V)
	}
	cfg := m.Init
	// Scripts see UTC: Date must not tell them the server's time zone.
	// (Written only when it differs: every time.Now reads it, and tests
	// serve in-process workers one after another in one process.)
	if time.Local != time.UTC {
		time.Local = time.UTC
	}
	if cfg.MemoryBytes > 0 {
		if err := capMemory(cfg.MemoryBytes); err != nil {
			return fmt.Errorf("capping memory: %w", err)
		}
	}
	if cfg.MaxMessageBytes < 64<<10 {
		return fmt.Errorf("message limit %d below 64 KiB", cfg.MaxMessageBytes)
	}
	fr.max = cfg.MaxMessageBytes
	fr.fastResults = true
	if sm := cfg.ScriptMemoryBytes; sm > 0 {
		l := &cfg.Engine.Limits
		if base, err := Preset(cfg.Engine.Preset); err == nil && (l.MemoryBytes == 0 && base.MemoryBytes > sm || l.MemoryBytes > sm) {
			l.MemoryBytes = sm
		}
	}
	engine, err := newWorkerEngine(cfg.Engine)
	if err != nil {
		return fmt.Errorf("building the engine: %w", err)
	}
	// The pool starts workers with GOGC=off (see workerEnv and below); a
	// worker started so paces its collector (see gcPacer).
	pacer := newGCPacer(cfg.ScriptMemoryBytes, nil)
	if ip, ok := engine.(*InProcess); ok {
		if cfg.MemoryBytes > 0 {
			// Scripts share this process's cap: when the live heap nears
			// it, the script holding the most is stopped before the kernel
			// stops them all.
			ip.mem.processLimit = uint64(cfg.MemoryBytes) * 6 / 10
		}
		if os.Getenv("GOGC") == "off" {
			pacer.minLimit = ip.mem.minLimit
			ip.mem.pacer = pacer
		}
	}
	s := &workerServer{
		memory:     cfg.ScriptMemoryBytes,
		baseMapped: goMappedBytes(),
		engine:     engine,
		out:        &frameWriter{w: out, max: cfg.MaxMessageBytes, delay: queueDelay},
		execs:      make(map[uint64]*serverExec),
		stopped:    make(chan struct{}),
		grace:      parkGraceDelay,
	}
	// On return the process exits; scripts still running are abandoned
	// (their pending tool calls end at once).
	defer func() {
		close(s.stopped)
		s.executors.stop()
		engine.Close()
	}()
	if err := s.out.write(&wireMsg{T: msgReady, V: protocolVersion, PID: os.Getpid(), Build: buildIdentity()}); err != nil {
		return fmt.Errorf("sending ready: %w", err)
	}
	// The pool starts workers with GOGC=off (see workerEnv), so that the
	// program's initialisation (a Caddy build allocates some 11 MB in init
	// functions) and the start-up above run without collections; until
	// here the memory cap's soft limit still bounds the heap. Collect
	// from now on, paced for a worker (see gcPacer), and return what the
	// start-up left behind to the OS once the worker is idle.
	if os.Getenv("GOGC") == "off" {
		pacer.start()
	}
	go s.releaseWhenIdle(idleReleaseDelay, debug.FreeOSMemory)
	if s.in = newWorkerInput(in, br, cfg.MaxMessageBytes, s.serve); s.in != nil {
		if err := s.in.run(); !errors.Is(err, io.EOF) {
			return err
		}
		return nil
	}
	for {
		m, err := fr.read()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if err := s.serve(m); err != nil {
			return err
		}
	}
}

// serve handles one frame from the parent; an error ends the worker.
func (s *workerServer) serve(m *wireMsg) error {
	switch m.T {
	case msgExec:
		if m.Exec == nil || m.ID == 0 {
			return errors.New("exec message without a body")
		}
		se, err := s.start(m.ID)
		if err != nil {
			return err
		}
		// On a reused goroutine: a new one would grow its stack again
		// for every script (the done frame's encoding runs deep).
		s.executors.run(func() { s.execute(se, m.Exec) })
	case msgResult, msgLookup:
		s.deliver(m)
	case msgCancel:
		s.cancel(m.ID)
	default:
		return fmt.Errorf("unexpected %q message", m.T)
	}
	return nil
}

// workerServer is the state of a serving worker.
type workerServer struct {
	memory     int64  // the memory cap, 0 when none
	baseMapped uint64 // memory the Go runtime had mapped before any script
	engine     Engine
	out        *frameWriter
	grace      time.Duration // see parkGraceDelay
	// in is stdin when scripts may read it themselves (see workerInput),
	// else nil.
	in *workerInput

	// executors run execute, each script's report, on reused goroutines.
	executors runners

	mu      sync.Mutex
	execs   map[uint64]*serverExec
	begun   uint64        // executions started so far
	stopped chan struct{} // closed when ServeWorker returns
}

// idleReleaseDelay is how long a worker must have started no script and
// run none before it returns the memory its start-up left behind to the OS.
var idleReleaseDelay = 50 * time.Millisecond

// releaseWhenIdle calls release (debug.FreeOSMemory: a forced collection
// that returns the freed memory to the OS) the first time no script has
// started or run for quiet, so an idle worker holds only what it uses (its RSS in
// docs/sandbox.md). It costs some 3 ms of CPU, about a tenth of a Caddy
// worker's start; right after the handshake it would run beside the first
// script, which a pool growing under load sends at once. A worker that is
// never idle leaves it to the runtime's background scavenger.
// RLIMIT_DATA and baseMapped are unaffected: they count what is mapped,
// and scavenged memory stays mapped.
func (s *workerServer) releaseWhenIdle(quiet time.Duration, release func()) {
	t := time.NewTimer(quiet)
	defer t.Stop()
	seen := uint64(0)
	for {
		select {
		case <-s.stopped:
			return
		case <-t.C:
		}
		var idle bool
		if seen, idle = s.idleSince(seen); idle {
			release()
			return
		}
		t.Reset(quiet)
	}
}

// idleSince reports whether no script runs now and none started since
// begun was seen; it returns begun now.
func (s *workerServer) idleSince(seen uint64) (begun uint64, idle bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.begun, s.begun == seen && len(s.execs) == 0
}

// serverExec is one execution hosted by a worker.
type serverExec struct {
	id     uint64
	ctx    context.Context
	cancel context.CancelFunc

	// sendMu keeps call numbers in order on the wire; mu guards the rest
	// and is not held while writing, so the reader can always deliver
	// replies (a blocked write must never stop the worker from reading).
	sendMu   sync.Mutex
	mu       sync.Mutex
	nextCall uint64
	replies  map[uint64]func(*wireMsg) // called once: the reply, or nil when the execution ends first
	ended    bool
}

// start registers a new execution.
func (s *workerServer) start(id uint64) (*serverExec, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.execs[id]; dup {
		return nil, fmt.Errorf("exec message for execution %d, which runs already", id)
	}
	ctx, cancel := context.WithCancel(context.Background())
	se := &serverExec{id: id, ctx: ctx, cancel: cancel, replies: make(map[uint64]func(*wireMsg))}
	s.execs[id] = se
	s.begun++
	return se, nil
}

func (s *workerServer) lookupExec(id uint64) *serverExec {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.execs[id]
}

// cancel stops an execution whose caller left; a stale ID is ignored.
func (s *workerServer) cancel(id uint64) {
	if se := s.lookupExec(id); se != nil {
		se.cancel()
	}
}

// execute runs one script and reports it with done.
func (s *workerServer) execute(se *serverExec, ex *wireExec) {
	start := time.Now()
	ph := &proxyHost{s: s, se: se, tools: make(map[string]*ToolInfo, len(ex.Tools)+len(ex.Missing))}
	for i := range ex.Tools {
		ph.tools[ex.Tools[i].Name] = &ex.Tools[i]
	}
	for _, name := range ex.Missing {
		ph.tools[name] = nil
	}
	var host Host = ph
	if ex.Stream {
		host = &proxyLogHost{ph}
	}
	req := Request{Code: ex.Code, Context: ex.Context, Limits: ex.Limits}
	if ex.HasAllowed {
		req.AllowedTools = ex.Allowed
		if req.AllowedTools == nil {
			req.AllowedTools = []string{}
		}
	}
	res, err := s.engine.Execute(se.ctx, req, host)
	s.inputBack()
	done := &wireDone{}
	switch {
	case err != nil:
		var e *Error
		if !errors.As(err, &e) {
			e = &Error{Code: CodeWorkerCrashed, Message: err.Error()}
		}
		done.Err = e
	case res == nil:
		done.Err = &Error{Code: CodeWorkerCrashed, Message: "engine returned no result"}
	default:
		done.Result = res
		done.Stats = wireStats{DurationNS: int64(res.Stats.Duration), ToolCalls: res.Stats.ToolCalls, Steps: res.Stats.Steps}
		if res.Stats.Duration == 0 {
			done.Stats.DurationNS = int64(time.Since(start))
		}
	}
	// Go never unmaps its heap, and RLIMIT_DATA counts what is mapped: a
	// worker that grew past half its cap leaves later scripts too little
	// room, so it asks to be replaced (it takes no new script and exits
	// when the ones it hosts end).
	if s.memory > 0 && goMappedBytes() > s.baseMapped+uint64(s.memory/2) {
		done.Recycle = true
	}
	// A script the engine gave up on may still be running inside a
	// built-in: this process is no longer fit to serve.
	if a, ok := s.engine.(interface{ Abandoned() int64 }); ok && a.Abandoned() > 0 {
		done.Recycle = true
	}
	se.mu.Lock()
	se.ended = true
	waiting := se.replies
	se.replies = map[uint64]func(*wireMsg){}
	se.mu.Unlock()
	for _, f := range waiting {
		f(nil)
	}
	se.cancel()
	s.mu.Lock()
	delete(s.execs, se.id)
	s.mu.Unlock()
	if err := s.out.write(&wireMsg{T: msgDone, ID: se.id, Done: done}); err != nil {
		var pe *protocolError
		if errors.As(err, &pe) {
			// The result outgrew the message limit.
			small := &wireDone{Result: &Result{Status: StatusRuntimeError, Error: &ScriptError{
				Code: CodeMessageTooLarge, Name: "MessageSizeError", Source: "script",
				Message: fmt.Sprintf("the script's result and logs exceed the worker message limit of %d bytes", s.out.max),
			}}, Recycle: done.Recycle}
			_ = s.out.write(&wireMsg{T: msgDone, ID: se.id, Done: small})
		}
	}
}

// goMappedBytes is the memory the Go runtime has mapped read-write (it
// includes memory released to the OS but still mapped).
func goMappedBytes() uint64 {
	sample := []metrics.Sample{{Name: "/memory/classes/total:bytes"}}
	metrics.Read(sample)
	if sample[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return sample[0].Value.Uint64()
}

// deliver hands a reply to the call or lookup waiting for it; replies to
// calls that gave up or to executions that ended are dropped.
func (s *workerServer) deliver(m *wireMsg) {
	se := s.lookupExec(m.ID)
	if se == nil {
		return
	}
	se.mu.Lock()
	f, ok := se.replies[m.Call]
	delete(se.replies, m.Call)
	se.mu.Unlock()
	if ok {
		f(m)
	}
}

// requestChan sends a call or lookup and returns the channel its reply
// arrives on; the channel is closed if the execution ends first.
func (s *workerServer) requestChan(se *serverExec, m *wireMsg) (chan *wireMsg, error) {
	ch := make(chan *wireMsg, 1)
	err := s.request(se, m, false, func(reply *wireMsg) {
		if reply == nil {
			close(ch)
		} else {
			ch <- reply
		}
	})
	if err != nil {
		return nil, err
	}
	return ch, nil
}

// request sends a call or lookup; onReply is called once, on the reader's
// goroutine, with the reply (it must not block), or with nil if the
// execution ends first. It is not called when request fails. queue queues
// the frame (see frameWriter) instead of writing it at once.
func (s *workerServer) request(se *serverExec, m *wireMsg, queue bool, onReply func(*wireMsg)) error {
	se.sendMu.Lock()
	defer se.sendMu.Unlock()
	se.mu.Lock()
	if se.ended {
		se.mu.Unlock()
		return errors.New("execution ended")
	}
	se.nextCall++
	m.Call = se.nextCall
	se.replies[m.Call] = onReply
	se.mu.Unlock()
	send := s.out.write
	if queue {
		send = s.out.queue
	}
	if err := send(m); err != nil {
		se.forget(m.Call)
		return err
	}
	return nil
}

func (se *serverExec) forget(call uint64) {
	se.mu.Lock()
	defer se.mu.Unlock()
	delete(se.replies, call)
}

// proxyHost is the Host a worker's engine sees for one execution: it
// forwards to the parent.
type proxyHost struct {
	s     *workerServer
	se    *serverExec
	mu    sync.Mutex
	tools map[string]*ToolInfo // nil value: known not to exist
	// started: a call was sent in the current stretch of JavaScript;
	// parked: the script's last wait outlasted the park grace; poll: this
	// wait's grace is spent polling stdin (see pollInput). Touched only on
	// the VM goroutine.
	started bool
	parked  bool
	poll    bool
}

var _ ParkHost = (*proxyHost)(nil)

func (h *proxyHost) LookupTool(name string) (ToolInfo, bool) {
	h.mu.Lock()
	info, known := h.tools[name]
	h.mu.Unlock()
	if known {
		if info == nil {
			return ToolInfo{}, false
		}
		return *info, true
	}
	if validToolName(name) != nil {
		return ToolInfo{}, false
	}
	ch, err := h.s.requestChan(h.se, &wireMsg{T: msgLookup, ID: h.se.id, Name: name})
	if err != nil {
		return ToolInfo{}, false
	}
	h.s.inputBack() // the serve loop reads the reply
	var reply *wireMsg
	select {
	case reply = <-ch:
	case <-h.s.stopped:
	}
	if reply == nil {
		return ToolInfo{}, false
	}
	if !reply.Found || reply.Tool == nil {
		info = nil
	} else {
		info = reply.Tool
	}
	h.mu.Lock()
	h.tools[name] = info
	h.mu.Unlock()
	if info == nil {
		return ToolInfo{}, false
	}
	return *info, true
}

// forwardsDiscovery: searchTools and describeTool go to the parent as
// calls; the parent's host answers them.
func (h *proxyHost) forwardsDiscovery() {}

// CallTool forwards a call. Every outcome the script sees comes from the
// parent (an input too large to send is sent as such and answered with an
// error), so that the parent counts every result the script receives.
func (h *proxyHost) CallTool(ctx context.Context, call ToolCall) (json.RawMessage, error) {
	m := h.callMsg(call)
	ch, err := h.s.requestChan(h.se, m)
	if err != nil {
		return nil, err
	}
	h.s.inputBack() // the serve loop reads the reply
	select {
	case reply, ok := <-ch:
		if !ok {
			return nil, errors.New("execution ended")
		}
		return callOutcome(reply)
	case <-ctx.Done():
		h.se.forget(m.Call)
		return nil, ctx.Err()
	case <-h.s.stopped:
		return nil, errors.New("worker stopping")
	}
}

// startCall is CallTool for the in-process engine (callStarter): the reply
// is handed to done by the reader, with no goroutine waiting for it. The
// first call of a stretch of JavaScript is written at once, so that the
// parent works on it while the script goes on; the frames of later calls
// of the same stretch (a Promise.all) are queued and leave together, in
// one write, when the engine ends the stretch (flushCalls, also before the
// park grace), with the next frame written, or queueDelay later.
func (h *proxyHost) startCall(_ context.Context, call ToolCall, done func(json.RawMessage, error)) {
	queue := h.started
	h.started = true
	m := h.callMsg(call)
	m.checked = true // the engine's call scanned the input (callStarter)
	err := h.s.request(h.se, m, queue, func(reply *wireMsg) {
		if reply != nil { // nil: the execution ended, no one waits
			done(callOutcome(reply))
		}
	})
	if err != nil {
		done(nil, err)
	}
}

// callMsg is the call message of a tool call.
func (h *proxyHost) callMsg(call ToolCall) *wireMsg {
	input := call.Input
	if len(input) == 0 {
		input = json.RawMessage("null")
	}
	m := &wireMsg{T: msgCall, ID: h.se.id, Name: call.Name, CallID: call.ID, Input: input}
	if validToolName(call.Name) != nil {
		m.Name = "?"
	}
	// The frame of a call is its input plus a small envelope.
	if len(input)+len(call.Name)+len(call.ID)+256 > h.s.out.max {
		m.Input, m.Oversize = nil, true
	}
	return m
}

// callOutcome is what a call's reply means to the engine.
func callOutcome(reply *wireMsg) (json.RawMessage, error) {
	if reply.Err != nil {
		if reply.Err.Plain {
			return nil, errors.New(reply.Err.Message)
		}
		return nil, &ToolError{Code: reply.Err.Code, Message: reply.Err.Message}
	}
	return reply.Data, nil
}

// flushCalls sends the queued frames: the engine calls it when a stretch
// of JavaScript ends and the script goes on at once, without a wait.
func (h *proxyHost) flushCalls() {
	h.started = false
	h.s.out.flush()
}

var _ callStarter = (*proxyHost)(nil)

// Parked tells the parent the script waits with nothing to run (the
// frames the script queued before go out with it, in one write).
func (h *proxyHost) Parked(settled int) {
	h.started = false
	h.parked = true
	h.s.inputBack() // the serve loop reads the result
	_ = h.s.out.write(&wireMsg{T: msgWait, ID: h.se.id, Seen: uint64(settled)})
}

// parkGraceDelay is how long a worker's script waits for a tool result
// before it tells the parent it waits (parkGracer): a round trip to a host
// that answers at once takes some tens of microseconds. Tests change it.
var parkGraceDelay = 100 * time.Microsecond

func (h *proxyHost) parkGrace() time.Duration {
	h.poll = h.s.in != nil && !h.parked && h.s.hosting() == 1
	h.parked = false
	return h.s.grace
}

var _ parkGracer = (*proxyHost)(nil)

// pollInput reads the parent's frames on the script's goroutine while it
// waits in the park grace (see workerInput), when the worker hosts only
// this execution (with more, the others' scripts need the processor) and
// its last wait was answered within the grace (a tool that takes longer
// would only burn the grace's CPU).
func (h *proxyHost) pollInput() bool {
	if !h.poll {
		h.s.inputBack()
		return false
	}
	h.s.in.poll()
	return true
}

var _ inputPoller = (*proxyHost)(nil)

// inputBack gives stdin back to the serve loop if a script polled it (see
// workerInput): the script is about to block, or ended.
func (s *workerServer) inputBack() {
	if s.in != nil {
		s.in.giveBack()
	}
}

// hosting is the number of executions the worker hosts.
func (s *workerServer) hosting() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.execs)
}

// Resumed: the result that woke the script was the parent's leave to run.
func (h *proxyHost) Resumed() bool { return true }

// proxyLogHost also streams console entries to the parent.
type proxyLogHost struct{ *proxyHost }

func (h *proxyLogHost) Log(level, message string) {
	_ = h.s.out.queue(&wireMsg{T: msgLog, ID: h.se.id, Level: level, Message: message})
}
