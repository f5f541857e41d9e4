package engine

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// workerInput is a worker's stdin when it is a non-blocking pipe: the
// parent's frames, read either by the serve loop or by a script that waits
// in its park grace for the answer to the call it just sent (pollInput).
//
// Why: when the serve loop reads a tool result and hands it to the waiting
// script, the script's goroutine is woken on another thread (the runtime
// wakes an idle processor for it) and the loop's thread sleeps in the
// poller until the next frame; on an idle virtual machine each sleep and
// wake-up of a thread costs tens of microseconds, more than the rest of
// the call. A script that polls the pipe itself reads its result on the
// thread that sent the call, with no hand-off; it yields the processor
// between tries (see yield), so on a busy machine the parent runs.
//
// Whoever holds mu reads and dispatches (turn). The serve loop waits in
// the poller for data without holding it; when it wakes while a script
// holds it, it sets missed and leaves the data to the holder, which reads
// again after it lets go (release). So every byte that arrives is read
// after it arrived: the loop waits only after a read that found the pipe
// empty (by it or by the holder), and the poller wakes it for any byte
// that arrives later.
//
// The input also has an owner (see take): the serve loop, or a script
// that polls. A descriptor in the runtime's poller wakes the thread asleep
// there (there is one whenever a timer is pending, and a script's limits
// are timers) at every write of the parent, whoever reads the data: a
// thread woken per tool result for nothing, paid by the parent's write
// (the wake-up, on the call's path) and by the worker (the thread's turn).
// So the pipe is watched by an epoll instance of its own (ep), which the
// runtime's poller watches for the serve loop; ep reports the pipe's data
// only while the loop owns the input. A polling script takes it (one
// epoll_ctl, no wake-up) and keeps it while it runs JavaScript between
// calls, until it parks, refuses to poll, waits for a lookup, ends, or has
// not polled for a whole period of the watch (look), which gives the input
// back: frames that arrive meanwhile (a cancel, another execution) wait
// at most about two periods.
type workerInput struct {
	raw    int                  // a descriptor of the pipe the poller does not watch
	name   string               // the pipe's, for errors
	serve  func(*wireMsg) error // the serve loop's handling of a frame
	mu     sync.Mutex
	missed atomic.Bool
	failed atomic.Bool // err is set; whoever sets it, under mu, wakes the serve loop

	// ep is an epoll instance watching raw; events is ep as a file the
	// runtime's poller watches (the serve loop waits on it). Ownership:
	// byScript while a script polls (take, giveBack, look; changed under
	// ownMu with the events ep reports).
	ep     int
	events *os.File
	owner  atomic.Int32
	ownMu  sync.Mutex
	closed bool // set under ownMu and mu when the serve loop ended

	// The watch: a timer armed while a script owns the input, every
	// period (inputWatchPeriod); polls counts the script's polls, seen is
	// the count at the watch's last look (its own).
	watch  *time.Timer
	period time.Duration
	armed  atomic.Bool
	polls  atomic.Uint64
	seen   uint64

	// Guarded by mu: the bytes read and not yet consumed (buf[r:w]), the
	// frame decoder, and the first error, which ends the serve loop.
	buf  []byte
	r, w int
	// small is the buffer of inputBufferBytes, kept while buf is a larger
	// one made for a large frame.
	small []byte
	fr    frameReader
	err   error
	// reads counts the pipe's reads (tests).
	reads uint64
}

const inputBufferBytes = 64 << 10

// Owners of the input.
const (
	byLoop int32 = iota
	byScript
)

// inputWatchPeriod is the period of the watch that gives the input back to
// the serve loop from a script that stopped polling (see workerInput).
const inputWatchPeriod = time.Millisecond

// newWorkerInput returns a workerInput for in when it is a non-blocking
// pipe (else nil); buffered holds the bytes read past the init frame. It
// closes in (which takes it out of the runtime's poller) and reads the
// pipe through a duplicate of its descriptor.
func newWorkerInput(in io.Reader, buffered *bufio.Reader, max int, serve func(*wireMsg) error) *workerInput {
	p, ok := in.(*rawPipe)
	if !ok {
		return nil
	}
	raw := -1
	if err := p.rc.Control(func(fd uintptr) {
		raw, _ = dupCloexec(int(fd))
	}); err != nil || raw < 0 {
		return nil
	}
	ep, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err == nil {
		err = syscall.SetNonblock(ep, true)
	}
	if err == nil {
		err = syscall.EpollCtl(ep, syscall.EPOLL_CTL_ADD, raw, &syscall.EpollEvent{Events: inputEvents})
	}
	if err != nil {
		_ = syscall.Close(raw)
		if ep >= 0 {
			_ = syscall.Close(ep)
		}
		return nil
	}
	wi := &workerInput{raw: raw, ep: ep, events: os.NewFile(uintptr(ep), "epoll"), name: p.f.Name(), serve: serve, period: inputWatchPeriod,
		buf: make([]byte, inputBufferBytes), fr: frameReader{max: max, fastResults: true}}
	wi.small = wi.buf
	_ = p.f.Close()
	wi.watch = time.AfterFunc(time.Hour, wi.look)
	wi.watch.Stop()
	if n := buffered.Buffered(); n > 0 {
		b, _ := buffered.Peek(n)
		wi.room(n)
		wi.w = copy(wi.buf, b)
	}
	return wi
}

// inputEvents are the events of the pipe that wake the serve loop while
// it owns the input: readable, and (always reported) hang-up and error.
const inputEvents = syscall.EPOLLIN | syscall.EPOLLRDHUP | epollET

// epollET is EPOLLET as the kernel has it: syscall.EPOLLET is negative on
// some architectures (386, amd64, arm) and positive on the others (arm64),
// so no one expression of it is a uint32 on all of them.
const epollET = 1 << 31

// dupCloexec duplicates fd, close-on-exec.
func dupCloexec(fd int) (int, error) {
	r, _, e := syscall.RawSyscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_DUPFD_CLOEXEC, 0)
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}

// run is the serve loop: it reads and dispatches frames until the stream
// ends (io.EOF) or fails. It waits in the runtime's poller for its epoll
// instance to become readable, and takes a turn each time unless a
// script owns the input.
func (wi *workerInput) run() error {
	defer wi.end()
	rc, err := wi.events.SyscallConn()
	if err == nil {
		// The turn runs inside the callback: RawConn.Read forgets a
		// readiness that came before its first callback, so a turn
		// before it could leave a byte unread (see rawPipe.readLoop).
		err = rc.Read(func(uintptr) bool {
			// While a script owns the input, ep reports only a hang-up
			// or an error of the pipe (the kernel always reports them):
			// the loop reads then, as the script may not poll again. The
			// hang-up is not reported again when the input is given
			// back (measured on Linux 6.18).
			if !wi.consumeEvents() && wi.owner.Load() == byScript {
				return wi.failed.Load()
			}
			return wi.turn()
		})
	}
	if ferr := wi.failure(); ferr != nil {
		return ferr
	}
	return err
}

// consumeEvents empties the epoll instance's ready list, so that the next
// event of the pipe makes it readable anew (the poller is edge-triggered);
// it reports whether there was an event.
func (wi *workerInput) consumeEvents() bool {
	var ev [1]syscall.EpollEvent
	for {
		n, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_PWAIT, uintptr(wi.ep), uintptr(unsafe.Pointer(&ev[0])), 1, 0, 0, 0)
		if e != syscall.EINTR {
			return e == 0 && n > 0
		}
	}
}

// wakeLoop makes the serve loop end its wait now (it has failed set).
func (wi *workerInput) wakeLoop() { _ = wi.events.SetReadDeadline(time.Unix(1, 0)) }

// end is the serve loop's: the watch stops, the descriptors close (under
// ownMu and mu, so that no epoll_ctl or read uses a closed descriptor's
// number, which the process may reuse).
func (wi *workerInput) end() {
	wi.watch.Stop()
	wi.ownMu.Lock()
	wi.mu.Lock()
	wi.closed = true
	_ = wi.events.Close()
	_ = syscall.Close(wi.raw)
	if wi.err == nil {
		wi.err = io.EOF // a script that polls from now on finds the end
	}
	wi.mu.Unlock()
	wi.ownMu.Unlock()
}

// take makes the calling script the owner of the input (see workerInput):
// the pipe's events no longer wake the serve loop, and the watch is
// armed. Only scripts call it, on their own goroutine.
func (wi *workerInput) take() {
	if wi.owner.Load() == byScript {
		return
	}
	wi.ownMu.Lock()
	if wi.owner.Load() == byLoop {
		wi.owner.Store(byScript)
		wi.listen(0)
	}
	wi.ownMu.Unlock()
	wi.arm()
}

// giveBack returns the input to the serve loop if a script owns it: the
// script is about to block, or no longer polls. The pipe's events wake
// the loop again (at once if the pipe holds data).
func (wi *workerInput) giveBack() {
	if wi.owner.Load() != byScript {
		return
	}
	wi.ownMu.Lock()
	if wi.owner.Load() == byScript {
		wi.owner.Store(byLoop)
		wi.listen(inputEvents)
	}
	wi.ownMu.Unlock()
}

// listen sets the events of the pipe the epoll instance reports (under
// ownMu; none once the loop ended). With none, a write of the parent wakes no one: the kernel's
// callback finds no waiter for it.
func (wi *workerInput) listen(events uint32) {
	if wi.closed {
		return
	}
	ev := syscall.EpollEvent{Events: events}
	_, _, _ = syscall.RawSyscall6(syscall.SYS_EPOLL_CTL, uintptr(wi.ep), syscall.EPOLL_CTL_MOD, uintptr(wi.raw), uintptr(unsafe.Pointer(&ev)), 0, 0)
}

// arm starts the watch unless it runs.
func (wi *workerInput) arm() {
	if !wi.armed.Swap(true) {
		wi.watch.Reset(wi.period)
	}
}

// look is the watch: the input goes back to the serve loop when the
// script that owns it has not polled since the last look (it runs
// JavaScript, or blocks where giveBack was not called); while a script
// owns it, the watch looks again a period later.
func (wi *workerInput) look() {
	if wi.owner.Load() == byScript {
		if p := wi.polls.Load(); p != wi.seen {
			wi.seen = p
			wi.watch.Reset(wi.period)
			return
		}
		wi.giveBack()
	}
	wi.armed.Store(false)
	if wi.owner.Load() == byScript {
		wi.arm() // a script took it meanwhile and saw the watch armed
	}
}

// turn is one turn of the serve loop; true ends it.
func (wi *workerInput) turn() bool {
	if wi.mu.TryLock() || wi.missedTurn() {
		wi.drain(false)
		wi.release()
	}
	return wi.failed.Load()
}

// missedTurn records that the serve loop found mu held; it takes mu if
// the holder let go meanwhile (else the holder reads for it).
func (wi *workerInput) missedTurn() bool {
	wi.missed.Store(true)
	return wi.mu.TryLock()
}

// poll is pollInput's turn: it reads and dispatches what arrived, unless
// the serve loop is at it (then the script's result comes through its
// completions as usual); it yields the processor when nothing came.
func (wi *workerInput) poll() {
	wi.polls.Add(1) // first: the watch armed by take must see this poll
	wi.take()
	if !wi.mu.TryLock() {
		yield()
		return
	}
	got := wi.drain(true)
	wi.release()
	if !got {
		yield()
	}
}

// release lets go of mu, first reading for the serve loop if it missed
// its turn meanwhile.
func (wi *workerInput) release() {
	for {
		wake := wi.err != nil && !wi.failed.Load()
		if wake {
			wi.failed.Store(true)
		}
		wi.mu.Unlock()
		if wake {
			wi.wakeLoop()
		}
		if !wi.missed.Swap(false) {
			return
		}
		wi.mu.Lock()
		wi.drain(false)
	}
}

// failure is the error that ends the serve loop, if any (io.EOF: the
// parent closed the pipe, which ServeWorker treats as a clean end).
func (wi *workerInput) failure() error {
	wi.mu.Lock()
	defer wi.mu.Unlock()
	return wi.err
}

// drain reads until the pipe is empty and dispatches every whole frame;
// got reports whether it read anything. It stops at the first error.
//
// With once (a script's poll), a read that filled less than the room it
// was given ends it after the frames it completed are dispatched: the
// pipe was empty then (a pipe's read returns what it holds, up to the
// room), so the read that would find it empty is skipped. It was on the
// path of every awaited call (the script resumes only when drain
// returns). Bytes that arrive later are read by the script's next poll,
// or, once it gives the input back, by the serve loop, whose events
// report what the pipe holds then (see giveBack and look), as for bytes
// that arrive just after a read that found the pipe empty. The serve
// loop's own turns always read until the pipe is empty: it waits only
// after such a read (see workerInput).
func (wi *workerInput) drain(once bool) (got bool) {
	defer wi.failOnPanic()
	emptied := false
	for wi.err == nil {
		for wi.err == nil {
			m, err := wi.next()
			if err != nil {
				wi.err = err
				return got
			}
			if m == nil {
				break
			}
			if err := wi.serve(m); err != nil {
				wi.err = err
				return got
			}
		}
		if emptied {
			return got
		}
		room := len(wi.buf) - wi.w
		n, errno := wi.tryRead(wi.buf[wi.w:])
		switch {
		case errno == syscall.EAGAIN:
			return got
		case errno != 0:
			wi.err = &os.PathError{Op: "read", Path: wi.name, Err: errno}
		case n == 0:
			if wi.w > wi.r {
				wi.err = invalidf("stream ended inside a frame")
			} else {
				wi.err = io.EOF
			}
		default:
			wi.w += n
			got = true
			emptied = once && n < room
		}
	}
	return got
}

// failOnPanic, deferred by drain (under mu), makes a panic while reading
// or dispatching the input's failure, which ends the serve loop (the
// worker exits, its parent replaces it), lets go of mu and panics on. The
// serve loop's goroutine does not recover, but a script's does (the
// engine turns a panic into the script's error): without this, mu would
// stay held and the worker would read no frame again.
func (wi *workerInput) failOnPanic() {
	if p := recover(); p != nil {
		if wi.err == nil {
			wi.err = fmt.Errorf("reading %s: panic: %v", wi.name, p)
		}
		wi.release()
		panic(p)
	}
}

// next decodes the next whole frame in the buffer; nil with no error
// means more bytes are needed, and then the buffer has room for them.
func (wi *workerInput) next() (*wireMsg, error) {
	if wi.w-wi.r < frameHeader {
		wi.room(frameHeader)
		return nil, nil
	}
	n, err := frameLength(wi.buf[wi.r:wi.r+frameHeader], wi.fr.max)
	if err != nil {
		return nil, err
	}
	if wi.w-wi.r < frameHeader+n {
		wi.room(frameHeader + n)
		return nil, nil
	}
	m, err := wi.fr.decode(wi.buf[wi.r+frameHeader : wi.r+frameHeader+n])
	wi.r += frameHeader + n
	if wi.r == wi.w {
		wi.r, wi.w = 0, 0
		wi.buf = wi.small // do not pin one huge frame
	}
	return m, err
}

// room makes buf[r:] hold at least need bytes (more than it holds: so
// there is space after w).
func (wi *workerInput) room(need int) {
	if wi.r+need <= len(wi.buf) {
		return
	}
	b := wi.buf
	if need > len(b) {
		b = make([]byte, need)
	}
	wi.w = copy(b, wi.buf[wi.r:wi.w])
	wi.r = 0
	wi.buf = b
}

// tryRead reads what the pipe holds into b without waiting (see
// rawPipe.tryRead), through the descriptor the poller does not watch.
func (wi *workerInput) tryRead(b []byte) (int, syscall.Errno) {
	if wi.closed {
		return 0, syscall.EBADF
	}
	wi.reads++
	for {
		r, _, e := syscall.RawSyscall(syscall.SYS_READ, uintptr(wi.raw), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
		if e != syscall.EINTR {
			return int(r), e
		}
	}
}
