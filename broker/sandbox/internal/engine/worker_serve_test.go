package engine

import (
	"encoding/json"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"
)

// servePipes runs ServeWorker with the fake engine over in-memory pipes and
// returns the parent's ends.
func servePipes(t *testing.T) (*frameWriter, *frameReader, <-chan error) {
	t.Helper()
	old := newWorkerEngine
	newWorkerEngine = func(workerEngineConfig) (Engine, error) { return &fakeEngine{raw: &rawOut{w: io.Discard}}, nil }
	t.Cleanup(func() { newWorkerEngine = old })
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := ServeWorker(inR, outW)
		outW.Close()
		done <- err
	}()
	t.Cleanup(func() { inW.Close(); outR.Close() })
	return &frameWriter{w: inW, max: 1 << 20}, &frameReader{r: outR, max: 1 << 20}, done
}

func TestServeWorkerSession(t *testing.T) {
	fw, fr, done := servePipes(t)
	send := func(m *wireMsg) {
		t.Helper()
		if err := fw.write(m); err != nil {
			t.Fatal(err)
		}
	}
	recv := func() *wireMsg {
		t.Helper()
		m, err := fr.read()
		if err != nil {
			t.Fatal(err)
		}
		if err := validateFromWorker(m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	send(&wireMsg{T: msgInit, V: protocolVersion, Init: &wireInit{MaxMessageBytes: 1 << 20}})
	if m := recv(); m.T != msgReady {
		t.Fatalf("got %s, want ready", m.T)
	}
	send(&wireMsg{T: msgExec, ID: 7, Exec: &wireExec{Code: "calls echo 2"}})
	for i := 1; i <= 2; i++ {
		m := recv()
		if m.T != msgCall || m.ID != 7 || m.Call != uint64(i) || m.Name != "echo" {
			t.Fatalf("call %d: %+v", i, m)
		}
		// A stale reply (another execution) is dropped, the right one used.
		send(&wireMsg{T: msgResult, ID: 6, Call: m.Call, Data: json.RawMessage(`"stale"`)})
		send(&wireMsg{T: msgResult, ID: 7, Call: m.Call, Data: m.Input})
	}
	if m := recv(); m.T != msgDone || string(m.Done.Result.Result) != "2" {
		t.Fatalf("done: %+v", m.Done)
	}
	// A tool error keeps its code; a plain error only its text.
	send(&wireMsg{T: msgExec, ID: 8, Exec: &wireExec{Code: "calls echo 1"}})
	m := recv()
	send(&wireMsg{T: msgResult, ID: 8, Call: m.Call, Err: &wireToolErr{Code: "RATE_LIMIT", Message: "slow down"}})
	if m := recv(); m.Done.Result.Error.Code != "RATE_LIMIT" {
		t.Fatalf("tool error: %+v", m.Done.Result.Error)
	}
	send(&wireMsg{T: msgExec, ID: 9, Exec: &wireExec{Code: "calls echo 1"}})
	m = recv()
	send(&wireMsg{T: msgResult, ID: 9, Call: m.Call, Err: &wireToolErr{Message: "boom", Plain: true}})
	if m := recv(); m.Done.Result.Error.Code != CodeToolExecutionError || m.Done.Result.Error.Message != "boom" {
		t.Fatalf("plain error: %+v", m.Done.Result.Error)
	}
	// Executions run side by side: one waits for its call while the next
	// finishes; each ends with its own done.
	send(&wireMsg{T: msgExec, ID: 10, Exec: &wireExec{Code: "calls echo 1"}})
	call := recv()
	send(&wireMsg{T: msgExec, ID: 11, Exec: &wireExec{Code: "ok 11"}})
	if m := recv(); m.T != msgDone || m.ID != 11 {
		t.Fatalf("second execution: %+v", m)
	}
	send(&wireMsg{T: msgResult, ID: 10, Call: call.Call, Data: call.Input})
	if m := recv(); m.T != msgDone || m.ID != 10 {
		t.Fatalf("first execution: %+v", m)
	}
	// An exec for an ID that runs already breaks the protocol.
	send(&wireMsg{T: msgExec, ID: 12, Exec: &wireExec{Code: "calls echo 1"}})
	recv()
	send(&wireMsg{T: msgExec, ID: 12, Exec: &wireExec{Code: "ok 1"}})
	if err := <-done; err == nil || !strings.Contains(err.Error(), "runs already") {
		t.Fatalf("ServeWorker: %v", err)
	}
}

func TestServeWorkerRejectsBadStart(t *testing.T) {
	fw, _, done := servePipes(t)
	_ = fw.write(&wireMsg{T: msgExec, ID: 1, Exec: &wireExec{Code: "ok 1"}})
	if err := <-done; err == nil || !strings.Contains(err.Error(), "expected an init message") {
		t.Fatalf("ServeWorker: %v", err)
	}
}

// abandoningEngine reports a script left running in a built-in.
type abandoningEngine struct{ fakeEngine }

func (abandoningEngine) Abandoned() int64 { return 1 }

func TestServeWorkerRecyclesAfterAbandonedScript(t *testing.T) {
	old := newWorkerEngine
	newWorkerEngine = func(workerEngineConfig) (Engine, error) { return &abandoningEngine{}, nil }
	t.Cleanup(func() { newWorkerEngine = old })
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	go func() { _ = ServeWorker(inR, outW); outW.Close() }()
	t.Cleanup(func() { inW.Close(); outR.Close() })
	fw, fr := &frameWriter{w: inW, max: 1 << 20}, &frameReader{r: outR, max: 1 << 20}
	_ = fw.write(&wireMsg{T: msgInit, V: protocolVersion, Init: &wireInit{MaxMessageBytes: 1 << 20}})
	if m, err := fr.read(); err != nil || m.T != msgReady {
		t.Fatalf("ready: %v %v", m, err)
	}
	_ = fw.write(&wireMsg{T: msgExec, ID: 1, Exec: &wireExec{Code: "ok 1"}})
	m, err := fr.read()
	if err != nil || m.T != msgDone || !m.Done.Recycle {
		t.Fatalf("done without recycle: %+v %v", m, err)
	}
}

// TestServeWorkerEndsItsExecutors: the goroutines that report scripts are
// reused from one script to the next, and none is left once ServeWorker
// returns.
func TestServeWorkerEndsItsExecutors(t *testing.T) {
	base := runtime.NumGoroutine()
	fw, fr, done := servePipes(t)
	if err := fw.write(&wireMsg{T: msgInit, V: protocolVersion, Init: &wireInit{MaxMessageBytes: 1 << 20}}); err != nil {
		t.Fatal(err)
	}
	if m, err := fr.read(); err != nil || m.T != msgReady {
		t.Fatalf("ready: %+v %v", m, err)
	}
	for id := uint64(1); id <= 5; id++ {
		if err := fw.write(&wireMsg{T: msgExec, ID: id, Exec: &wireExec{Code: "ok 1"}}); err != nil {
			t.Fatal(err)
		}
		if m, err := fr.read(); err != nil || m.T != msgDone || m.ID != id {
			t.Fatalf("execution %d: %+v %v", id, m, err)
		}
	}
	if err := fw.w.(io.Closer).Close(); err != nil { // the parent hangs up
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("ServeWorker: %v", err)
	}
	fr.r.(io.Closer).Close()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("goroutines: %d, before %d\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}
