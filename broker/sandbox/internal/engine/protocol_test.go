package engine

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestFrameRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	fw := &frameWriter{w: &buf, max: 1 << 16}
	in := []*wireMsg{
		{T: msgReady, V: protocolVersion, PID: 42, Build: buildIdentity()},
		{T: msgCall, ID: 1, Call: 1, Name: "echo", Input: json.RawMessage(`{"a":[1,2]}`)},
		{T: msgDone, ID: 1, Done: &wireDone{Result: &Result{Status: StatusOK, Result: json.RawMessage(`2`)}}},
	}
	for _, m := range in {
		if err := fw.write(m); err != nil {
			t.Fatal(err)
		}
	}
	fr := &frameReader{r: &buf, max: 1 << 16}
	for _, want := range in {
		got, err := fr.read()
		if err != nil {
			t.Fatal(err)
		}
		if err := validateFromWorker(got); err != nil {
			t.Fatalf("%s: %v", got.T, err)
		}
		a, _ := json.Marshal(want)
		b, _ := json.Marshal(got)
		if !bytes.Equal(a, b) {
			t.Fatalf("got %s, want %s", b, a)
		}
	}
	if _, err := fr.read(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last frame: %v, want EOF", err)
	}

	// A message over the limit is refused before anything is written.
	buf.Reset()
	err := (&frameWriter{w: &buf, max: 100}).write(&wireMsg{T: msgLog, ID: 1, Level: "log", Message: strings.Repeat("x", 200)})
	var pe *protocolError
	if !errors.As(err, &pe) || pe.Code != CodeMessageTooLarge || buf.Len() != 0 {
		t.Fatalf("oversized write: %v, %d bytes written", err, buf.Len())
	}
}

// TestFrameReaderLargeCalls: the parent's reader keeps a large call's
// input in the frame's own buffer (decodeCall in place) and reads the
// next frames into another, so a decoded input never changes under its
// message: calls larger than the reader's retained buffer, then smaller
// ones, then large ones again, all read back as sent.
func TestFrameReaderLargeCalls(t *testing.T) {
	var buf bytes.Buffer
	fw := &frameWriter{w: &buf, max: 1 << 20}
	var sent []*wireMsg
	for i, size := range []int{100 << 10, 10, 70 << 10, 200 << 10, 5, 64 << 10, 300 << 10} {
		m := &wireMsg{T: msgCall, ID: 1, Call: uint64(i + 1), Name: "echo",
			Input: json.RawMessage(`"` + strings.Repeat(string(rune('a'+i)), size) + `"`)}
		if err := fw.write(m); err != nil {
			t.Fatal(err)
		}
		sent = append(sent, m)
	}
	fr := &frameReader{r: &buf, max: 1 << 20, fastCalls: true}
	var got []*wireMsg
	for range sent {
		m, err := fr.read()
		if err != nil {
			t.Fatal(err)
		}
		if err := validateFromWorker(m); err != nil {
			t.Fatal(err)
		}
		got = append(got, m)
	}
	for i, m := range got {
		if m.Call != sent[i].Call || !bytes.Equal(m.Input, sent[i].Input) {
			t.Fatalf("call %d: input of %d bytes read back as %d bytes starting %.20q", sent[i].Call, len(sent[i].Input), len(m.Input), m.Input)
		}
	}
}

func TestFrameReaderRejects(t *testing.T) {
	frame := func(n uint32, body string) []byte {
		b := binary.BigEndian.AppendUint32(nil, n)
		return append(b, body...)
	}
	cases := []struct {
		name string
		raw  []byte
		code string
	}{
		{"too large", frame(1<<30, ""), CodeMessageTooLarge},
		{"empty frame", frame(0, ""), CodeMessageInvalid},
		{"truncated header", []byte{0, 0}, CodeMessageInvalid},
		{"truncated body", frame(10, "{}"), CodeMessageInvalid},
		{"not JSON", frame(5, "hello"), CodeMessageInvalid},
		{"not an object", frame(2, "[]"), CodeMessageInvalid},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := (&frameReader{r: bytes.NewReader(c.raw), max: 1024}).read()
			var pe *protocolError
			if !errors.As(err, &pe) || pe.Code != c.code {
				t.Fatalf("got %v, want %s", err, c.code)
			}
		})
	}
}

func TestValidateFromWorker(t *testing.T) {
	ok := &Result{Status: StatusOK, Result: json.RawMessage(`1`)}
	bad := []*wireMsg{
		{T: "surprise"},
		{T: msgReady, V: 99},
		{T: msgReady, V: protocolVersion}, // no build
		{T: msgReady, V: protocolVersion, Build: "v9.9.9 goja v0 prelude 000000000000"}, // another build
		{T: msgCall, ID: 1, Call: 1, Name: "", Input: json.RawMessage(`{}`)},
		{T: msgCall, ID: 1, Call: 1, Name: strings.Repeat("n", maxToolNameBytes+1), Input: json.RawMessage(`{}`)},
		{T: msgCall, ID: 1, Name: "echo", Input: json.RawMessage(`{}`)},
		{T: msgCall, ID: 1, Call: 1, Name: "echo"},
		{T: msgLookup, ID: 1, Call: 1},
		{T: msgLog, ID: 1, Level: "shout"},
		{T: msgLog, Level: "log"},
		{T: msgDone, ID: 1},
		{T: msgDone, ID: 1, Done: &wireDone{}},
		{T: msgDone, ID: 1, Done: &wireDone{Result: ok, Err: &Error{Code: "X"}}},
		{T: msgDone, ID: 1, Done: &wireDone{Result: &Result{Status: StatusOK}}},
		{T: msgDone, ID: 1, Done: &wireDone{Result: &Result{Status: StatusOK, Result: json.RawMessage(`1`), Error: &ScriptError{Code: "X"}}}},
		{T: msgDone, ID: 1, Done: &wireDone{Result: &Result{Status: StatusRuntimeError}}},
		{T: msgDone, ID: 1, Done: &wireDone{Result: &Result{Status: StatusRuntimeError, Result: json.RawMessage(`1`), Error: &ScriptError{Code: "X"}}}},
		{T: msgDone, ID: 1, Done: &wireDone{Result: &Result{Status: "weird", Error: &ScriptError{Code: "X"}}}},
		{T: msgDone, ID: 1, Done: &wireDone{Result: ok, Stats: wireStats{ToolCalls: -1}}},
		{T: msgDone, ID: 1, Done: &wireDone{Err: &Error{}}},
	}
	for i, m := range bad {
		if err := validateFromWorker(m); err == nil {
			t.Errorf("case %d (%s) accepted", i, m.T)
		}
	}
	good := []*wireMsg{
		{T: msgReady, V: protocolVersion, Build: buildIdentity()},
		{T: msgCall, ID: 1, Call: 1, Name: "echo", Input: json.RawMessage(`null`)},
		{T: msgLookup, ID: 1, Call: 2, Name: "echo"},
		{T: msgLog, ID: 1, Level: "warn", Message: ""},
		{T: msgDone, ID: 1, Done: &wireDone{Result: ok}},
		{T: msgDone, ID: 1, Done: &wireDone{Result: &Result{Status: StatusTimeout, Error: &ScriptError{Code: CodeTimeout}}}},
		{T: msgDone, ID: 1, Done: &wireDone{Err: &Error{Code: CodeWorkerCrashed}}},
	}
	for i, m := range good {
		if err := validateFromWorker(m); err != nil {
			t.Errorf("good case %d (%s): %v", i, m.T, err)
		}
	}
}

// writeLog records each Write as one chunk.
type writeLog struct {
	mu     sync.Mutex
	chunks [][]byte
}

func (l *writeLog) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.chunks = append(l.chunks, bytes.Clone(b))
	return len(b), nil
}

func (l *writeLog) snapshot() [][]byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([][]byte(nil), l.chunks...)
}

// frames decodes every frame of one chunk.
func chunkFrames(t *testing.T, chunk []byte) []*wireMsg {
	t.Helper()
	fr := &frameReader{r: bytes.NewReader(chunk), max: 1 << 20}
	var out []*wireMsg
	for {
		m, err := fr.read()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("chunk %q: %v", chunk, err)
		}
		out = append(out, m)
	}
}

// Queued frames leave with the next write, in order and in one Write; a
// flush or the queue's timer sends them when no write follows.
func TestFrameWriterQueue(t *testing.T) {
	var l writeLog
	fw := &frameWriter{w: &l, max: 1 << 16, delay: time.Hour}
	for i := 1; i <= 3; i++ {
		if err := fw.queue(&wireMsg{T: msgCall, ID: 1, Call: uint64(i), Name: "echo", Input: json.RawMessage(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(l.snapshot()); n != 0 {
		t.Fatalf("%d writes before the flushing write", n)
	}
	if err := fw.write(&wireMsg{T: msgWait, ID: 1, Seen: 0}); err != nil {
		t.Fatal(err)
	}
	chunks := l.snapshot()
	if len(chunks) != 1 {
		t.Fatalf("%d writes, want 1", len(chunks))
	}
	ms := chunkFrames(t, chunks[0])
	if len(ms) != 4 || ms[3].T != msgWait {
		t.Fatalf("got %d frames %+v, want 3 calls and the wait", len(ms), ms)
	}
	for i, m := range ms[:3] {
		if err := validateFromWorker(m); err != nil || m.Call != uint64(i+1) {
			t.Fatalf("frame %d: %+v %v", i, m, err)
		}
	}

	// A message over the limit is refused and leaves the queue as it was.
	if err := fw.queue(&wireMsg{T: msgLog, ID: 1, Level: "log", Message: "kept"}); err != nil {
		t.Fatal(err)
	}
	var pe *protocolError
	if err := fw.queue(&wireMsg{T: msgLog, ID: 1, Level: "log", Message: strings.Repeat("x", 1<<17)}); !errors.As(err, &pe) || pe.Code != CodeMessageTooLarge {
		t.Fatalf("oversized queue: %v", err)
	}
	fw.flush()
	chunks = l.snapshot()
	if len(chunks) != 2 {
		t.Fatalf("%d writes after flush, want 2", len(chunks))
	}
	if ms := chunkFrames(t, chunks[1]); len(ms) != 1 || ms[0].Message != "kept" {
		t.Fatalf("flushed %+v", ms)
	}
	fw.flush() // nothing queued: no write
	if n := len(l.snapshot()); n != 2 {
		t.Fatalf("empty flush wrote: %d writes", n)
	}

	// Without a write or flush, the timer sends the queue.
	fw.delay = time.Millisecond
	if err := fw.queue(&wireMsg{T: msgLog, ID: 1, Level: "log", Message: "late"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the queue's timer", func() bool { return len(l.snapshot()) == 3 })
	if ms := chunkFrames(t, l.snapshot()[2]); len(ms) != 1 || ms[0].Message != "late" {
		t.Fatalf("timer flushed %+v", ms)
	}

	// A queue past maxQueuedBytes is written at once.
	fw.delay = time.Hour
	big := strings.Repeat("y", maxQueuedBytes/2)
	for range 2 {
		if err := fw.queue(&wireMsg{T: msgLog, ID: 1, Level: "log", Message: big}); err != nil {
			t.Fatal(err)
		}
	}
	if chunks := l.snapshot(); len(chunks) != 4 || len(chunkFrames(t, chunks[3])) != 2 {
		t.Fatalf("a full queue was not written: %d writes", len(chunks))
	}
}

// TestFrameWriterReusesItsBuffer: a tool call's frame written with nothing
// queued (a result, on every awaited call) is encoded in the writer's own
// buffer, kept for the next one: no allocation per frame. A frame larger
// than maxQueuedBytes is written whole but its buffer is not kept, and one
// over the limit is refused with nothing written.
func TestFrameWriterReusesItsBuffer(t *testing.T) {
	var l writeLog
	fw := &frameWriter{w: io.Discard, max: 1 << 20}
	m := &wireMsg{T: msgResult, ID: 7, Call: 1, Data: json.RawMessage(`{"i":1}`), checked: true}
	if n := testing.AllocsPerRun(100, func() {
		m.Call++
		if err := fw.write(m); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("%v allocations per result frame, want 0", n)
	}

	fw.w = &l
	big := json.RawMessage(`"` + strings.Repeat("x", maxQueuedBytes+10) + `"`)
	sent := []*wireMsg{
		{T: msgResult, ID: 7, Call: 1, Data: json.RawMessage(`1`), checked: true},
		{T: msgResult, ID: 7, Call: 2, Data: big, checked: true},
		{T: msgCall, ID: 7, Call: 3, Name: "echo", CallID: "3", Input: json.RawMessage(`{"a":2}`), checked: true},
	}
	for _, m := range sent {
		if err := fw.write(m); err != nil {
			t.Fatal(err)
		}
	}
	if c := cap(fw.buf); c > maxQueuedBytes {
		t.Fatalf("the writer kept a buffer of %d bytes", c)
	}
	var pe *protocolError
	if err := fw.write(&wireMsg{T: msgCall, ID: 7, Call: 4, Name: "echo", Input: json.RawMessage(`"` + strings.Repeat("y", 1<<20) + `"`), checked: true}); !errors.As(err, &pe) || pe.Code != CodeMessageTooLarge {
		t.Fatalf("oversized call: %v", err)
	}
	if err := fw.write(&wireMsg{T: msgResult, ID: 7, Call: 5, Data: json.RawMessage(`5`), checked: true}); err != nil {
		t.Fatal(err)
	}
	sent = append(sent, &wireMsg{T: msgResult, ID: 7, Call: 5, Data: json.RawMessage(`5`)})
	chunks := l.snapshot()
	if len(chunks) != len(sent) {
		t.Fatalf("%d writes, want %d (the oversized call must write nothing)", len(chunks), len(sent))
	}
	for i, chunk := range chunks {
		ms := chunkFrames(t, chunk)
		a, _ := json.Marshal(sent[i])
		if len(ms) != 1 {
			t.Fatalf("write %d holds %d frames", i, len(ms))
		}
		if b, _ := json.Marshal(ms[0]); !bytes.Equal(a, b) {
			t.Fatalf("frame %d: got %.200s, want %.200s", i, b, a)
		}
	}
}

// BenchmarkFrameWriterResult: the parent's write of a small result frame
// (every awaited call), to a writer that discards it.
func BenchmarkFrameWriterResult(b *testing.B) {
	fw := &frameWriter{w: io.Discard, max: 1 << 20}
	m := &wireMsg{T: msgResult, ID: 7, Data: json.RawMessage(`{"i":1}`), checked: true}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		m.Call = uint64(i + 1)
		if err := fw.write(m); err != nil {
			b.Fatal(err)
		}
	}
}
