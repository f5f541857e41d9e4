package engine

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// inputUnderTest serves a workerInput on a fresh pipe; served receives
// every frame's call number in the order dispatched.
func inputUnderTest(t *testing.T, max int) (wi *workerInput, w *os.File, served chan uint64, done chan error) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); w.Close() })
	served = make(chan uint64, 10000)
	raw := rawReader(r)
	wi = newWorkerInput(raw, bufio.NewReader(strings.NewReader("")), max, func(m *wireMsg) error {
		served <- m.Call
		return nil
	})
	if wi == nil {
		t.Fatal("an os.Pipe is not read as a workerInput")
	}
	done = make(chan error, 1)
	go func() { done <- wi.run() }()
	return wi, w, served, done
}

func resultFrame(t *testing.T, call uint64, data string) []byte {
	t.Helper()
	fw := &frameWriter{max: 1 << 30}
	frame, err := fw.encode(&wireMsg{T: msgResult, ID: 1, Call: call, Data: []byte(data)})
	if err != nil {
		t.Fatal(err)
	}
	return frame
}

// TestWorkerInputServesEveryFrameOnce writes frames in odd pieces (split
// headers, split bodies, several frames per write, frames larger than the
// buffer) while a "script" polls the pipe as fast as it can: every frame
// is dispatched once, in order, whoever reads it, and the loop ends with
// io.EOF when the pipe closes.
func TestWorkerInputServesEveryFrameOnce(t *testing.T) {
	wi, w, served, done := inputUnderTest(t, 1<<20)
	const frames = 3000
	var stream []byte
	for i := uint64(1); i <= frames; i++ {
		data := `"x"`
		if i%500 == 0 {
			data = `"` + strings.Repeat("y", 100<<10) + `"` // larger than the buffer
		}
		stream = append(stream, resultFrame(t, i, data)...)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the script
		defer wg.Done()
		for !stop.Load() {
			wi.poll()
		}
	}()
	for off, n := 0, 1; off < len(stream); n = n%97 + 3 {
		end := min(off+n*n, len(stream))
		if _, err := w.Write(stream[off:end]); err != nil {
			t.Fatal(err)
		}
		off = end
		if n%5 == 0 {
			time.Sleep(time.Microsecond) // let either side find it empty
		}
	}
	for i := uint64(1); i <= frames; i++ {
		select {
		case got := <-served:
			if got != i {
				t.Fatalf("frame %d dispatched as number %d", got, i)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("frame %d never dispatched", i)
		}
	}
	closeExpectEOF(t, w, done)
	stop.Store(true)
	wg.Wait()
	select {
	case got := <-served:
		t.Fatalf("frame %d dispatched twice", got)
	default:
	}
}

// TestWorkerInputKeepsItsBuffer: a frame larger than the input's buffer
// gets a buffer of its own, and once it is read the input goes back to
// its first buffer (not a new one per large frame).
func TestWorkerInputKeepsItsBuffer(t *testing.T) {
	wi, w, served, done := inputUnderTest(t, 1<<20)
	first := &wi.small[0]
	for i := uint64(1); i <= 3; i++ {
		if _, err := w.Write(resultFrame(t, i, `"`+strings.Repeat("y", 200<<10)+`"`)); err != nil {
			t.Fatal(err)
		}
		select {
		case <-served:
		case <-time.After(10 * time.Second):
			t.Fatalf("frame %d never dispatched", i)
		}
	}
	closeExpectEOF(t, w, done)
	if len(wi.buf) != inputBufferBytes || &wi.buf[0] != first {
		t.Fatalf("after large frames the input reads into a buffer of %d bytes, not its first one", len(wi.buf))
	}
}

// TestWorkerInputErrorFoundByScript: a frame over the limit that a polling
// script reads ends the serve loop (which waits in the poller) with the
// protocol error, and nothing after it is dispatched.
func TestWorkerInputErrorFoundByScript(t *testing.T) {
	for _, tc := range []struct {
		name  string
		frame func() []byte
		code  string
	}{
		{"too large", func() []byte { return binary.BigEndian.AppendUint32(nil, 1<<20) }, CodeMessageTooLarge},
		{"empty", func() []byte { return make([]byte, frameHeader) }, CodeMessageInvalid},
		{"malformed", func() []byte { return append(binary.BigEndian.AppendUint32(nil, 3), "{x}"...) }, CodeMessageInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wi, w, served, done := inputUnderTest(t, 64<<10)
			if _, err := w.Write(resultFrame(t, 1, "1")); err != nil {
				t.Fatal(err)
			}
			if got := <-served; got != 1 {
				t.Fatalf("dispatched %d", got)
			}
			// Hold the lock as a polling script does, so that the serve
			// loop (woken by the write) leaves the bytes to the script.
			wi.mu.Lock()
			if _, err := w.Write(append(tc.frame(), resultFrame(t, 2, "2")...)); err != nil {
				t.Fatal(err)
			}
			time.Sleep(10 * time.Millisecond)
			wi.drain(true)
			wi.release()
			select {
			case err := <-done:
				var pe *protocolError
				if !errors.As(err, &pe) || pe.Code != tc.code {
					t.Fatalf("run ended with %v, want a %s protocol error", err, tc.code)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the serve loop did not end on the error the script found")
			}
			select {
			case got := <-served:
				t.Fatalf("frame %d dispatched after the error", got)
			default:
			}
		})
	}
}

// TestWorkerInputMissedTurn: data that arrives while a script holds the
// input is read when it lets go, by it, though the serve loop was woken
// for it and found the input held.
func TestWorkerInputMissedTurn(t *testing.T) {
	wi, w, served, _ := inputUnderTest(t, 64<<10)
	for i := uint64(1); i <= 200; i++ {
		wi.mu.Lock()
		if _, err := w.Write(resultFrame(t, i, "1")); err != nil {
			t.Fatal(err)
		}
		// Let the serve loop wake and miss its turn (most rounds).
		for j := 0; j < 100 && !wi.missed.Load(); j++ {
			time.Sleep(10 * time.Microsecond)
		}
		wi.release()
		select {
		case got := <-served:
			if got != i {
				t.Fatalf("dispatched %d, want %d", got, i)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("frame %d, which arrived while the input was held, was never read", i)
		}
	}
}

// TestProxyHostPollsOnlyQuickLoneWaits: a script polls its worker's stdin
// during the park grace only while the worker hosts it alone and its last
// wait was answered within the grace.
func TestProxyHostPollsOnlyQuickLoneWaits(t *testing.T) {
	wi, _, _, _ := inputUnderTest(t, 64<<10)
	wi.period = time.Hour // no watch: ownership moves only by take and giveBack
	se := &serverExec{id: 1}
	s := &workerServer{in: wi, grace: time.Millisecond, out: &frameWriter{w: io.Discard, max: 1 << 20},
		execs: map[uint64]*serverExec{1: se}}
	h := &proxyHost{s: s, se: se}
	wait := func(parks bool) bool {
		h.parkGrace()
		polled := h.pollInput()
		if owned := wi.owner.Load() == byScript; s.in != nil && owned != polled {
			t.Fatalf("polled %v, but the script owns the input: %v", polled, owned)
		}
		if parks {
			h.Parked(0)
			if wi.owner.Load() != byLoop {
				t.Fatal("a parked script still owns the input")
			}
		}
		return polled
	}
	for i, tc := range []struct {
		parks, want bool
		before      func()
	}{
		{want: true},              // first wait
		{parks: true, want: true}, // polled, then outlasted the grace
		{want: false},             // so this one sleeps
		{want: true},              // the last was answered within the grace
		{want: false, before: func() { s.execs[2] = &serverExec{id: 2} }},
		{want: true, before: func() { delete(s.execs, 2) }},
		{want: false, before: func() { s.in = nil }},
	} {
		if tc.before != nil {
			tc.before()
		}
		if got := wait(tc.parks); got != tc.want {
			t.Fatalf("wait %d: polled %v, want %v", i, got, tc.want)
		}
	}
}

// fakePoller runs do on each pollInput; refuses after refuseAfter calls.
type fakePoller struct {
	calls, refuseAfter int
	do                 func(n int)
}

func (p *fakePoller) pollInput() bool {
	p.calls++
	if p.refuseAfter > 0 && p.calls > p.refuseAfter {
		return false
	}
	if p.do != nil {
		p.do(p.calls)
	}
	return true
}

// TestPollGraceEnds: the engine's polled grace ends with the result that
// came, with the stop that came (a limit or a cancel while polling), or,
// when the host stops allowing it or the grace is spent, with what is left
// of the grace for the timer.
func TestPollGraceEnds(t *testing.T) {
	newX := func(p *fakePoller) *execution {
		return &execution{completions: make(chan completion, 1), stopCh: make(chan struct{}), poller: p}
	}
	p := &fakePoller{}
	x := newX(p)
	p.do = func(n int) {
		if n == 3 {
			x.completions <- completion{id: 7, ok: true}
		}
	}
	if c, ok, done, _ := x.pollGrace(time.Hour); !done || !ok || c.id != 7 || p.calls != 3 {
		t.Fatalf("result: %+v ok=%v done=%v after %d polls", c, ok, done, p.calls)
	}
	p = &fakePoller{}
	x = newX(p)
	p.do = func(n int) {
		if n == 2 {
			close(x.stopCh)
		}
	}
	if _, ok, done, _ := x.pollGrace(time.Hour); !done || ok {
		t.Fatalf("stop: ok=%v done=%v", ok, done)
	}
	p = &fakePoller{refuseAfter: 4}
	if _, _, done, left := newX(p).pollGrace(time.Hour); done || left <= 0 || left > time.Hour || p.calls != 5 {
		t.Fatalf("refused: done=%v left=%v after %d polls", done, left, p.calls)
	}
	p = &fakePoller{}
	if _, _, done, left := newX(p).pollGrace(50 * time.Microsecond); done || left > 0 {
		t.Fatalf("spent: done=%v left=%v", done, left)
	}
}

// pipeWatched reports whether an epoll instance of this process reports
// the data of the pipe whose write end is w (a registration of one of its
// descriptors other than w with EPOLLIN, as /proc lists them, by inode).
func pipeWatched(t *testing.T, w *os.File) bool {
	t.Helper()
	var st syscall.Stat_t
	wfd := -1
	rc, err := w.SyscallConn()
	if err == nil {
		err = rc.Control(func(fd uintptr) {
			wfd = int(fd)
			err = syscall.Fstat(wfd, &st)
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	ino := fmt.Sprintf(" ino:%x ", st.Ino)
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range fds {
		if l, _ := os.Readlink("/proc/self/fd/" + e.Name()); l != "anon_inode:[eventpoll]" {
			continue
		}
		info, err := os.ReadFile("/proc/self/fdinfo/" + e.Name())
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(info), "\n") {
			var tfd int
			var events uint32
			if _, err := fmt.Sscanf(line, "tfd: %d events: %x", &tfd, &events); err != nil || tfd == wfd {
				continue
			}
			if events&syscall.EPOLLIN != 0 && strings.Contains(line+" ", ino) {
				return true
			}
		}
	}
	return false
}

// TestWorkerInputUnwatchedWhileScriptPolls: while a script owns the input
// (it polled and has not given it back), no epoll instance reports the
// pipe's data, so the parent's writes wake no thread of the worker; frames
// still arrive through the script's polls. Given back, the serve loop
// watches the pipe again and reads what comes.
func TestWorkerInputUnwatchedWhileScriptPolls(t *testing.T) {
	wi, w, served, done := inputUnderTest(t, 64<<10)
	wi.period = time.Hour // no watch: ownership moves only by take and giveBack
	waitFor(t, "the serve loop to watch the pipe", func() bool { return pipeWatched(t, w) })
	wi.poll()
	waitFor(t, "the serve loop to stop watching the pipe", func() bool { return !pipeWatched(t, w) })
	for i := uint64(1); i <= 50; i++ {
		if _, err := w.Write(resultFrame(t, i, "1")); err != nil {
			t.Fatal(err)
		}
		var got uint64
		waitFor(t, "the polling script to read a frame", func() bool {
			wi.poll()
			select {
			case got = <-served:
				return true
			default:
				return false
			}
		})
		if got != i {
			t.Fatalf("dispatched %d, want %d", got, i)
		}
		if pipeWatched(t, w) {
			t.Fatal("the pipe is watched by the poller while a script owns the input")
		}
	}
	wi.giveBack()
	waitFor(t, "the serve loop to watch the pipe again", func() bool { return pipeWatched(t, w) })
	writeExpectServed(t, w, served, 51, "a frame written after the input was given back")
	closeExpectEOF(t, w, done)
}

// TestWorkerInputPollReadsOnce: a polling script's read that finds a whole
// result (less than the room it gave) ends its poll, without the read
// that would find the pipe empty (it was on every awaited call's path);
// the frame is dispatched, and one written afterwards is read by the
// next poll.
func TestWorkerInputPollReadsOnce(t *testing.T) {
	wi, w, served, done := inputUnderTest(t, 64<<10)
	wi.period = time.Hour // no watch: the script keeps the input
	wi.poll()
	waitFor(t, "the serve loop to stop watching the pipe", func() bool { return !pipeWatched(t, w) })
	reads := func() uint64 {
		wi.mu.Lock()
		defer wi.mu.Unlock()
		return wi.reads
	}
	for i := uint64(1); i <= 20; i++ {
		if _, err := w.Write(resultFrame(t, i, "1")); err != nil {
			t.Fatal(err)
		}
		before := reads()
		wi.poll()
		select {
		case got := <-served:
			if got != i {
				t.Fatalf("dispatched %d, want %d", got, i)
			}
		default:
			t.Fatalf("frame %d, written before the poll, was not dispatched by it", i)
		}
		if n := reads() - before; n != 1 {
			t.Fatalf("the poll that read frame %d read the pipe %d times, want 1", i, n)
		}
	}
	wi.giveBack()
	writeExpectServed(t, w, served, 21, "a frame written after the input was given back")
	closeExpectEOF(t, w, done)
}

// TestWorkerInputWatchGivesBack: a script that polled and then stopped
// without giving the input back (it computes, or blocks somewhere) loses
// it to the watch: frames written afterwards are read by the serve loop,
// and an EOF ends it, also one that comes while the script still owns the
// input (the parent gone while the script computes).
func TestWorkerInputWatchGivesBack(t *testing.T) {
	for round := range 20 {
		wi, w, served, done := inputUnderTest(t, 64<<10)
		wi.poll() // and never again: the watch gives the input back
		if round%2 == 1 {
			closeExpectEOF(t, w, done)
			continue
		}
		writeExpectServed(t, w, served, 1, fmt.Sprintf("round %d: the frame a script left unread", round))
		waitFor(t, "the input to be given back", func() bool { return wi.owner.Load() == byLoop })
		closeExpectEOF(t, w, done)
	}
}

// writeExpectServed writes the frame of call and waits until it is
// dispatched (what names it in the failure).
func writeExpectServed(t *testing.T, w *os.File, served chan uint64, call uint64, what string) {
	t.Helper()
	if _, err := w.Write(resultFrame(t, call, "1")); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-served:
		if got != call {
			t.Fatalf("dispatched %d, want %d", got, call)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s was never read", what)
	}
}

// closeExpectEOF closes the parent's end and waits until the serve loop
// ends with io.EOF.
func closeExpectEOF(t *testing.T, w *os.File, done chan error) {
	t.Helper()
	w.Close()
	select {
	case err := <-done:
		if !errors.Is(err, io.EOF) {
			t.Fatalf("run ended with %v, want io.EOF", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not end when the pipe closed")
	}
}

// TestWorkerInputPanicWhileScriptReads: a panic while a polling script
// dispatches a frame (a bug; the engine recovers its scripts' panics) ends
// the serve loop with an error, so that the worker exits and its parent
// replaces it, instead of leaving the input's lock held for good and the
// worker deaf to every later frame; the panic goes on to the script.
func TestWorkerInputPanicWhileScriptReads(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); w.Close() })
	served := make(chan uint64, 10)
	wi := newWorkerInput(rawReader(r), bufio.NewReader(strings.NewReader("")), 64<<10, func(m *wireMsg) error {
		if m.Call == 2 {
			panic("dispatching frame 2")
		}
		served <- m.Call
		return nil
	})
	done := make(chan error, 1)
	go func() { done <- wi.run() }()
	wi.period = time.Hour // no watch: the script keeps the input, the loop is not woken for data
	wi.poll()
	recovered := make(chan any, 1)
	go func() { // the script, whose panics the engine recovers
		defer func() { recovered <- recover() }()
		for {
			wi.poll()
		}
	}()
	var frames []byte
	for i := uint64(1); i <= 3; i++ {
		frames = append(frames, resultFrame(t, i, "1")...)
	}
	if _, err := w.Write(frames); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil || errors.Is(err, io.EOF) || !strings.Contains(err.Error(), "dispatching frame 2") {
			t.Fatalf("run ended with %v, want the panic as its error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the serve loop did not end after a panic while a script read the input")
	}
	if p := <-recovered; p != "dispatching frame 2" {
		t.Fatalf("the script recovered %v, want the panic", p)
	}
	if got := <-served; got != 1 {
		t.Fatalf("dispatched %d, want 1", got)
	}
	select {
	case got := <-served:
		t.Fatalf("frame %d dispatched after the panic", got)
	default:
	}
}
