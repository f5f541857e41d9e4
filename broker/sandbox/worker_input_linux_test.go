package sandbox

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
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
	body, err := fw.encode(&wireMsg{T: msgResult, ID: 1, Call: call, Data: []byte(data)})
	if err != nil {
		t.Fatal(err)
	}
	var hdr [frameHeader]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(len(body)))
	return append(hdr[:], body...)
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
	w.Close()
	select {
	case err := <-done:
		if !errors.Is(err, io.EOF) {
			t.Fatalf("run ended with %v, want io.EOF", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not end when the pipe closed")
	}
	stop.Store(true)
	wg.Wait()
	select {
	case got := <-served:
		t.Fatalf("frame %d dispatched twice", got)
	default:
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
			wi.drain()
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
