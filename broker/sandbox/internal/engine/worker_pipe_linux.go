package engine

import (
	"io"
	"os"
	"syscall"
	"time"
	"unsafe"
)

// rawPipe reads or writes one end of a non-blocking pipe with raw system
// calls, waiting in the runtime's poller when the pipe is empty or full.
// It serves one reader and one writer at a time (a frameReader's goroutine;
// a frameWriter, under its lock).
//
// Why: in the call-by-call ping-pong of a tool call both processes go idle
// between frames, so the Go runtime's sysmon thread goes into its deep
// sleep; every read(2) and write(2) made through os.File enters the
// scheduler's system-call state, which wakes sysmon when it sleeps, and a
// woken sysmon polls every 20 µs for the next millisecond. In that
// ping-pong it never settles: measured at ~16% of the parent's CPU and ~5%
// of the worker's. A read or write of a non-blocking pipe never blocks (it
// answers EAGAIN instead), so it needs neither the system-call state nor
// sysmon, and RawSyscall skips both. Waiting for data or room is the
// poller's, as for any os.File.
type rawPipe struct {
	f  *os.File // kept reachable: its finaliser would close the descriptor
	rc syscall.RawConn

	// The state of the read and of the write in progress, and the
	// functions the RawConn calls (bound once: a closure per call would be
	// an allocation per frame).
	rb, wb         []byte
	rn, wn         int
	rerrno, werrno syscall.Errno
	readFn         func(fd uintptr) bool
	writeFn        func(fd uintptr) bool

	// tryRead's state and function (bound once).
	tb     []byte
	tn     int
	terrno syscall.Errno
	tryFn  func(fd uintptr)
}

// newRawPipe returns a rawPipe for v when it is an *os.File of a
// non-blocking descriptor, else nil (then v is used as it is).
func newRawPipe(v any) *rawPipe {
	f, ok := v.(*os.File)
	if !ok {
		return nil
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return nil
	}
	nonblocking := false
	if err := rc.Control(func(fd uintptr) {
		flags, _, e := syscall.RawSyscall(syscall.SYS_FCNTL, fd, syscall.F_GETFL, 0)
		nonblocking = e == 0 && flags&syscall.O_NONBLOCK != 0
	}); err != nil || !nonblocking {
		return nil
	}
	// os.File watches a descriptor with the poller when it was
	// non-blocking when the File was made (os.Pipe, os.NewFile on a
	// non-blocking descriptor), which is how the pool's pipes and the
	// worker's stdin and stdout are made.
	p := &rawPipe{f: f, rc: rc}
	p.readFn, p.writeFn = p.read, p.write
	p.tryFn = p.tryOnce
	return p
}

// rawReader is r read through a rawPipe when it can be, else r.
func rawReader(r io.Reader) io.Reader {
	if p := newRawPipe(r); p != nil {
		return p
	}
	return r
}

// rawWriter is w written through a rawPipe when it can be, else w.
func rawWriter(w io.Writer) io.Writer {
	if p := newRawPipe(w); p != nil {
		return p
	}
	return w
}

func (p *rawPipe) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	p.rb, p.rn, p.rerrno = b, 0, 0
	err := p.rc.Read(p.readFn)
	n, errno := p.rn, p.rerrno
	p.rb = nil
	switch {
	case err != nil:
		return 0, err
	case errno != 0:
		return 0, &os.PathError{Op: "read", Path: p.f.Name(), Err: errno}
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// read is one attempt of Read; false means wait until the pipe is readable.
func (p *rawPipe) read(fd uintptr) bool {
	for {
		r, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&p.rb[0])), uintptr(len(p.rb)))
		switch e {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		case 0:
			p.rn = int(r)
		default:
			p.rerrno = e
		}
		return true
	}
}

// yield gives the processor to another thread that waits for it, if any
// (sched_yield): a thread that polls for the peer's answer lets the peer
// run on a busy machine.
func yield() { syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }

// tryRead reads what the pipe holds into b without waiting: n is 0 with
// EAGAIN when it is empty, 0 with no error at its end. Any goroutine may
// call it while another waits in readLoop (through Control, which
// does not take the descriptor's read lock); the caller serialises reads.
func (p *rawPipe) tryRead(b []byte) (int, syscall.Errno) {
	p.tb, p.tn, p.terrno = b, 0, 0
	if err := p.rc.Control(p.tryFn); err != nil {
		p.terrno = syscall.EBADF
	}
	n, errno := p.tn, p.terrno
	p.tb = nil
	return n, errno
}

func (p *rawPipe) tryOnce(fd uintptr) {
	for {
		r, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&p.tb[0])), uintptr(len(p.tb)))
		if e == syscall.EINTR {
			continue
		}
		p.tn, p.terrno = int(r), e
		return
	}
}

// readLoop calls turn, which reads the pipe through tryRead, until it
// returns true, waiting in the poller after each call until the pipe
// becomes readable again (the poller is edge-triggered: it wakes for data
// that arrived after turn's last read found the pipe empty, at once if it
// arrived while turn ran). An error is the poller's: the file closed, or
// wake.
func (p *rawPipe) readLoop(turn func() bool) error {
	return p.rc.Read(func(uintptr) bool { return turn() })
}

// wake makes readLoop return an error now and from now on.
func (p *rawPipe) wake() { _ = p.f.SetReadDeadline(time.Unix(1, 0)) }

func (p *rawPipe) Write(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	p.wb, p.wn, p.werrno = b, 0, 0
	err := p.rc.Write(p.writeFn)
	n, errno := p.wn, p.werrno
	p.wb = nil
	if err == nil && errno != 0 {
		err = &os.PathError{Op: "write", Path: p.f.Name(), Err: errno}
	}
	return n, err
}

// write is one attempt of Write; false means wait until the pipe has room.
func (p *rawPipe) write(fd uintptr) bool {
	for p.wn < len(p.wb) {
		r, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&p.wb[p.wn])), uintptr(len(p.wb)-p.wn))
		switch e {
		case 0:
			p.wn += int(r)
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false
		default:
			p.werrno = e
			return true
		}
	}
	return true
}

// pollablePipe returns f, one of the process's standard files, when it is
// a pipe (as the pool starts workers), in non-blocking mode and watched by
// the runtime's poller; otherwise f itself. Reading stdin so, the goroutine
// that reads the parent's frames parks instead of holding a thread in
// read(2), and the script it wakes runs on the same thread at once instead
// of waiting for another thread to be woken (a cross-CPU wake-up per tool
// result); and rawReader and rawWriter can then read and write it without
// system-call state (see rawPipe). The new *os.File has a duplicate of f's
// descriptor, so closing it (a workerInput closes stdin's to take it out
// of the poller) leaves f's alone.
func pollablePipe(f *os.File) *os.File {
	if fi, err := f.Stat(); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		return f
	}
	fd, err := dupCloexec(int(f.Fd()))
	if err != nil {
		return f
	}
	if err := syscall.SetNonblock(fd, true); err != nil {
		_ = syscall.Close(fd)
		return f
	}
	return os.NewFile(uintptr(fd), f.Name())
}
