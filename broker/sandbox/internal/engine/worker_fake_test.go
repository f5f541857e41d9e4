package engine

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
)

// testWorkerEnv selects a scripted worker in the test binary (see TestMain).
const testWorkerEnv = "SANDBOX_TEST_WORKER"

// runTestWorker runs the test binary as a worker in one of these modes:
//
//	fake     the real protocol with fakeEngine instead of goja, whose
//	         "scripts" are commands that also misbehave on purpose
//	exit     exits at once with status 3
//	silent   reads its configuration and never answers
//	garbage  writes text instead of frames
//	otherbuild  a real worker that says it is another build (a
//	         standalone codemode-worker of another version)
func runTestWorker(mode string) int {
	switch mode {
	case "fake":
		out := os.Stdout
		os.Stdout = os.Stderr
		raw := &rawOut{w: out}
		newWorkerEngine = func(workerEngineConfig) (Engine, error) { return &fakeEngine{raw: raw}, nil }
		if err := ServeWorker(pollablePipe(os.Stdin), raw); err != nil {
			fmt.Fprintln(os.Stderr, "fake worker:", err)
			return 1
		}
		return 0
	case "otherbuild":
		buildIdentity = func() string { return "v0.1.0 goja v0 prelude 000000000000" }
		return ServeWorkerStdio()
	case "exit":
		fmt.Fprintln(os.Stderr, "refusing to start")
		return 3
	case "silent":
		_, _ = io.Copy(io.Discard, os.Stdin)
		return 0
	case "garbage":
		fmt.Println("hello, I am not a worker")
		_, _ = io.Copy(io.Discard, os.Stdin)
		return 0
	}
	fmt.Fprintln(os.Stderr, "unknown test worker mode", mode)
	return 2
}

// rawOut is the worker's stdout, shared by the protocol and by fakeEngine's
// deliberate protocol violations.
type rawOut struct {
	mu sync.Mutex
	w  io.Writer
}

func (r *rawOut) Write(b []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.w.Write(b)
}

// frame writes one length-prefixed frame with an arbitrary body.
func (r *rawOut) frame(body []byte) {
	hdr := make([]byte, 4, 4+len(body))
	binary.BigEndian.PutUint32(hdr, uint32(len(body)))
	_, _ = r.Write(append(hdr, body...))
}

func (r *rawOut) msg(m *wireMsg) {
	b, _ := json.Marshal(m)
	r.frame(b)
}

// fakeEngine interprets a script as one command with arguments:
//
//	ok JSON          return JSON
//	pid              return the worker's process ID
//	calls TOOL N     N awaited calls of TOOL with input {"i":k}; return N
//	bigcalls TOOL N SIZE  N awaited calls of TOOL, each input a JSON
//	                 string of SIZE bytes; return N
//	par TOOL N       N concurrent calls of TOOL; return N
//	lookup TOOL      return LookupTool's info, or null
//	log N            N console entries (streamed when the host is a LogHost)
//	sleep            block until the engine's context ends (never: it is
//	                 Background), i.e. a script that ignores interrupts
//	alloc            allocate until the memory cap kills the process
//	crash            exit with status 7
//	flood N          send N log frames as fast as possible
//	invalid          send a frame that is not JSON
//	huge             send a frame header announcing 1 GiB
//	badtype          send a message of an unknown type
//	wrongid          send a log message for another execution
//	batchbad         send, in one write, a valid call and a call that
//	                 repeats its number
//	baddone          send a done message with an unknown status
//	chatter          send done, then a log message, then hang
//	gc               return the worker's collector settings:
//	                 {"gogc": GOGC (-1: off), "memlimit": soft memory limit}
type fakeEngine struct {
	raw *rawOut
}

func (e *fakeEngine) Close() error { return nil }

func (e *fakeEngine) Execute(ctx context.Context, req Request, host Host) (*Result, error) {
	f := strings.Fields(req.Code)
	if len(f) == 0 {
		return &Result{Status: StatusSyntaxError, Error: &ScriptError{Code: CodeSyntaxError, Message: "empty"}}, nil
	}
	arg := func(i int) string {
		if i < len(f) {
			return f[i]
		}
		return ""
	}
	n, _ := strconv.Atoi(arg(2))
	if f[0] == "log" || f[0] == "flood" {
		n, _ = strconv.Atoi(arg(1))
	}
	ok := func(v any) (*Result, error) {
		b, _ := json.Marshal(v)
		return &Result{Status: StatusOK, Result: b, Stats: Stats{ToolCalls: n}}, nil
	}
	id := hostExecID(host)
	switch f[0] {
	case "ok":
		return &Result{Status: StatusOK, Result: json.RawMessage(arg(1))}, nil
	case "pid":
		return ok(os.Getpid())
	case "calls":
		for i := range n {
			if _, err := host.CallTool(ctx, ToolCall{ID: strconv.Itoa(i), Name: arg(1), Input: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))}); err != nil {
				return toolFailure(arg(1), err), nil
			}
		}
		return ok(n)
	case "bigcalls":
		size, _ := strconv.Atoi(arg(3))
		input := json.RawMessage(`"` + strings.Repeat("x", max(size-2, 0)) + `"`)
		for i := range n {
			if _, err := host.CallTool(ctx, ToolCall{ID: strconv.Itoa(i), Name: arg(1), Input: input}); err != nil {
				return toolFailure(arg(1), err), nil
			}
		}
		return ok(n)
	case "par":
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for i := range n {
			wg.Go(func() {
				if _, err := host.CallTool(ctx, ToolCall{ID: strconv.Itoa(i), Name: arg(1), Input: json.RawMessage(`{}`)}); err != nil {
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			return toolFailure(arg(1), err), nil
		}
		return ok(n)
	case "lookup":
		info, found := host.LookupTool(arg(1))
		if !found {
			return ok(nil)
		}
		return ok(info)
	case "log":
		var logs []string
		lh, _ := host.(LogHost)
		for i := range n {
			msg := fmt.Sprintf("entry %d", i)
			logs = append(logs, msg)
			if lh != nil {
				lh.Log("log", msg)
			}
		}
		r, _ := ok(n)
		r.Logs = logs
		return r, nil
	case "sleep":
		<-ctx.Done()
		select {}
	case "alloc":
		var keep [][]byte
		for {
			b := make([]byte, 1<<20)
			for i := range b {
				b[i] = byte(i)
			}
			keep = append(keep, b)
		}
	case "crash":
		os.Exit(7)
	case "flood":
		for range n {
			e.raw.msg(&wireMsg{T: msgLog, ID: id, Level: "log", Message: "x"})
		}
	case "invalid":
		e.raw.frame([]byte("{not json"))
	case "huge":
		hdr := make([]byte, 4)
		binary.BigEndian.PutUint32(hdr, 1<<30)
		_, _ = e.raw.Write(hdr)
	case "badtype":
		e.raw.msg(&wireMsg{T: "surprise", ID: id})
	case "batchbad":
		var b []byte
		for range 2 {
			body, _ := json.Marshal(&wireMsg{T: msgCall, ID: id, Call: 1, Name: "echo", Input: json.RawMessage(`{}`)})
			b = binary.BigEndian.AppendUint32(b, uint32(len(body)))
			b = append(b, body...)
		}
		_, _ = e.raw.Write(b)
	case "wrongid":
		e.raw.msg(&wireMsg{T: msgLog, ID: id + 1000, Level: "log", Message: "x"})
	case "baddone":
		e.raw.msg(&wireMsg{T: msgDone, ID: id, Done: &wireDone{Result: &Result{Status: "weird", Error: &ScriptError{Code: "X"}}}})
	case "gc":
		s := []metrics.Sample{{Name: "/gc/gogc:percent"}, {Name: "/gc/gomemlimit:bytes"}}
		metrics.Read(s)
		return ok(map[string]int64{"gogc": int64(s[0].Value.Uint64()), "memlimit": int64(s[1].Value.Uint64())})
	case "chatter":
		e.raw.msg(&wireMsg{T: msgDone, ID: id, Done: &wireDone{Result: &Result{Status: StatusOK, Result: json.RawMessage(`"early"`)}}})
		e.raw.msg(&wireMsg{T: msgLog, ID: id, Level: "log", Message: "after done"})
	default:
		return &Result{Status: StatusSyntaxError, Error: &ScriptError{Code: CodeSyntaxError, Message: "unknown command " + f[0]}}, nil
	}
	select {} // the violation kills this worker
}

// hostExecID is the execution in progress, for hand-made messages.
func hostExecID(h Host) uint64 {
	switch ph := h.(type) {
	case *proxyHost:
		return ph.se.id
	case *proxyLogHost:
		return ph.se.id
	}
	return 0
}

func toolFailure(name string, err error) *Result {
	var te *ToolError
	code, msg := CodeToolExecutionError, err.Error()
	if errors.As(err, &te) {
		code, msg = te.Code, te.Message
	}
	return &Result{Status: StatusToolError, Error: &ScriptError{Code: code, Message: msg, Source: "tool", ToolName: name}}
}
