package sandbox

import (
	"bufio"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
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
type workerInput struct {
	pipe   *rawPipe
	serve  func(*wireMsg) error // the serve loop's handling of a frame
	mu     sync.Mutex
	missed atomic.Bool
	failed atomic.Bool // err is set; whoever sets it, under mu, wakes the serve loop

	// Guarded by mu: the bytes read and not yet consumed (buf[r:w]), the
	// frame decoder, and the first error, which ends the serve loop.
	buf  []byte
	r, w int
	fr   frameReader
	err  error
}

const inputBufferBytes = 64 << 10

// newWorkerInput returns a workerInput for in when it is a non-blocking
// pipe (else nil); buffered holds the bytes read past the init frame.
func newWorkerInput(in io.Reader, buffered *bufio.Reader, max int, serve func(*wireMsg) error) *workerInput {
	p, ok := in.(*rawPipe)
	if !ok {
		return nil
	}
	wi := &workerInput{pipe: p, serve: serve, buf: make([]byte, inputBufferBytes), fr: frameReader{max: max, fastResults: true}}
	if n := buffered.Buffered(); n > 0 {
		b, _ := buffered.Peek(n)
		wi.room(n)
		wi.w = copy(wi.buf, b)
	}
	return wi
}

// run is the serve loop: it reads and dispatches frames until the stream
// ends (io.EOF) or fails.
func (wi *workerInput) run() error {
	err := wi.pipe.readLoop(wi.turn)
	if ferr := wi.failure(); ferr != nil {
		return ferr
	}
	return err
}

// turn is one turn of the serve loop; true ends it.
func (wi *workerInput) turn() bool {
	if wi.mu.TryLock() || wi.missedTurn() {
		wi.drain()
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
	if !wi.mu.TryLock() {
		yield()
		return
	}
	got := wi.drain()
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
			wi.pipe.wake()
		}
		if !wi.missed.Swap(false) {
			return
		}
		wi.mu.Lock()
		wi.drain()
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
func (wi *workerInput) drain() (got bool) {
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
		n, errno := wi.pipe.tryRead(wi.buf[wi.w:])
		switch {
		case errno == syscall.EAGAIN:
			return got
		case errno != 0:
			wi.err = &os.PathError{Op: "read", Path: wi.pipe.f.Name(), Err: errno}
		case n == 0:
			if wi.w > wi.r {
				wi.err = invalidf("stream ended inside a frame")
			} else {
				wi.err = io.EOF
			}
		default:
			wi.w += n
			got = true
		}
	}
	return got
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
		if len(wi.buf) > inputBufferBytes {
			wi.buf = make([]byte, inputBufferBytes) // do not pin one huge frame
		}
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
