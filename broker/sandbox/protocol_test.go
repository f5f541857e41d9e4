package sandbox

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestFrameRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	fw := &frameWriter{w: &buf, max: 1 << 16}
	in := []*wireMsg{
		{T: msgReady, V: protocolVersion, PID: 42},
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
		{T: msgReady, V: protocolVersion},
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
