package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestPresets(t *testing.T) {
	timeouts := map[string]time.Duration{
		PresetLockedDown:   2 * time.Second,
		PresetSecure:       3500 * time.Millisecond,
		PresetBalanced:     5 * time.Second,
		PresetExperimental: 30 * time.Second,
	}
	for _, name := range PresetNames() {
		l, err := Preset(name)
		if err != nil {
			t.Fatal(err)
		}
		if l.Timeout != timeouts[name] {
			t.Errorf("%s timeout = %v, want %v", name, l.Timeout, timeouts[name])
		}
		if l.MaxSteps == 0 || l.MaxToolCalls == 0 || l.MaxCallDepth == 0 || l.MaxSourceBytes == 0 || l.MaxNestingDepth == 0 ||
			l.MaxResultBytes == 0 || l.MaxConsoleEntries == 0 || l.MaxConsoleBytes == 0 || l.MemoryBytes == 0 {
			t.Errorf("%s leaves a limit unset: %+v", name, l)
		}
	}
	def, err := Preset("")
	if err != nil || def != presets[PresetSecure] {
		t.Errorf("default preset = %+v, %v; want secure", def, err)
	}
	if _, err := Preset("yolo"); err == nil || !strings.Contains(err.Error(), "yolo") {
		t.Errorf("unknown preset error = %v", err)
	}
	// Presets are ordered by strictness.
	order := []string{PresetLockedDown, PresetSecure, PresetBalanced, PresetExperimental}
	for i := 1; i < len(order); i++ {
		a, b := presets[order[i-1]], presets[order[i]]
		if a.MaxSteps >= b.MaxSteps || a.MaxToolCalls >= b.MaxToolCalls || a.MemoryBytes >= b.MemoryBytes {
			t.Errorf("%s is not stricter than %s", order[i-1], order[i])
		}
	}
}

func TestMergeLimits(t *testing.T) {
	base := presets[PresetSecure]
	got := MergeLimits(base, Limits{Timeout: time.Second, MaxSteps: 7, AllowConsole: true})
	want := base
	want.Timeout, want.MaxSteps, want.AllowConsole = time.Second, 7, true
	if got != want {
		t.Errorf("MergeLimits = %+v, want %+v", got, want)
	}
	if MergeLimits(base, Limits{}) != base {
		t.Error("zero override changed the limits")
	}
}

func TestNewInProcessOptions(t *testing.T) {
	if l := NewInProcess(nil).(*InProcess).Limits(); l != presets[PresetSecure] {
		t.Errorf("nil options: %+v", l)
	}
	if l := NewInProcess(&Options{Preset: "nope"}).(*InProcess).Limits(); l != presets[PresetSecure] {
		t.Errorf("unknown preset should fall back to secure: %+v", l)
	}
	l := NewInProcess(&Options{Preset: PresetBalanced, Limits: Limits{MaxToolCalls: 3}}).(*InProcess).Limits()
	if l.Timeout != 5*time.Second || l.MaxToolCalls != 3 {
		t.Errorf("balanced with override: %+v", l)
	}
}

// execCase is a script with its expected outcome.
type execCase struct {
	name    string
	code    string
	req     Request
	status  Status
	result  string // exact JSON of the result for ok
	errCode string
	errName string
	message string // substring of the error message
}

func TestScriptAPI(t *testing.T) {
	engine := NewInProcess(nil)
	cases := []execCase{
		{name: "arithmetic", code: `return 1 + 1`, status: StatusOK, result: `2`},
		{name: "undefined result is null", code: `const a = 1`, status: StatusOK, result: `null`},
		{name: "top-level await", code: `const x = await Promise.resolve(4); return x * 2`, status: StatusOK, result: `8`},
		{name: "strict mode", code: `undeclared = 1`, status: StatusRuntimeError, errName: "ReferenceError"},
		{name: "this is undefined", code: `return typeof this`, status: StatusOK, result: `"undefined"`},
		{name: "callTool result", code: `return await callTool("add", {a: 2, b: 3})`, status: StatusOK, result: `5`},
		{name: "callTool without input", code: `return await callTool("echo")`, status: StatusOK, result: `{}`},
		{name: "callTool returns a promise", code: `const p = callTool("echo", {x: 1}); return [p instanceof Promise, await p]`, status: StatusOK, result: `[true,{"x":1}]`},
		{name: "throwOnError false success", code: `return await callTool("add", {a: 1, b: 1}, {throwOnError: false})`, status: StatusOK, result: `{"success":true,"data":2,"error":null}`},
		{name: "throwOnError false failure", code: `return await callTool("fail", {}, {throwOnError: false})`, status: StatusOK, result: `{"success":false,"data":null,"error":{"message":"slow down","code":"RATE_LIMIT"}}`},
		{name: "throwOnError false not found", code: `return (await callTool("zzz", {}, {throwOnError: false})).error.code`, status: StatusOK, result: `"TOOL_NOT_FOUND"`},
		{name: "tool error fields", code: `try { await callTool("fail", {}) } catch (e) { return [e.name, e.code, e.toolName, e.message, e instanceof Error] }`, status: StatusOK, result: `["ToolError","RATE_LIMIT","fail","slow down",true]`},
		{name: "uncaught tool error", code: `await callTool("fail", {})`, status: StatusToolError, errCode: "RATE_LIMIT", message: "slow down"},
		{name: "plain Go error", code: `await callTool("boom", {})`, status: StatusToolError, errCode: CodeToolExecutionError, message: "exploded"},
		{name: "tool error rethrown after catch", code: `try { await callTool("fail", {}) } catch (e) { throw e }`, status: StatusToolError, errCode: "RATE_LIMIT"},
		{name: "forged tool error is a script error", code: `const e = new Error("x"); e.name = "ToolError"; e.code = "RATE_LIMIT"; throw e`, status: StatusRuntimeError, errCode: CodeExecutionError, errName: "ToolError"},
		{name: "getTool", code: `return getTool("echo")`, status: StatusOK, result: `{"name":"echo","description":"test tool echo","inputSchema":{"type":"object"}}`},
		{name: "getTool unknown", code: `return getTool("nope")`, status: StatusOK, result: `null`},
		{name: "getTool meta", code: `return getTool("meta:execute")`, status: StatusOK, result: `null`},
		{name: "getTool not allowed", code: `return getTool("add")`, req: Request{AllowedTools: []string{"echo"}}, status: StatusOK, result: `null`},
		{name: "allowed tool", code: `return await callTool("echo", {a: 1})`, req: Request{AllowedTools: []string{"echo"}}, status: StatusOK, result: `{"a":1}`},
		{name: "empty whitelist", code: `return await callTool("echo", {a: 1})`, req: Request{AllowedTools: []string{}}, status: StatusToolError, errCode: CodeAccessDenied},
		{name: "metaContext", code: `return [metaContext.user.id, Object.isFrozen(metaContext.user), Object.isFrozen(metaContext.list)]`,
			req: Request{Context: json.RawMessage(`{"user":{"id":7},"list":[1,2]}`)}, status: StatusOK, result: `[7,true,true]`},
		{name: "metaContext default", code: `return metaContext`, status: StatusOK, result: `{}`},
		{name: "runtime error", code: `null.x`, status: StatusRuntimeError, errCode: CodeExecutionError, errName: "TypeError"},
		{name: "thrown string", code: `throw "plain"`, status: StatusRuntimeError, errName: "Error", message: "plain"},
		{name: "thrown object", code: `throw {message: "obj"}`, status: StatusRuntimeError, message: "obj"},
		{name: "custom error class", code: `class MyError extends Error { constructor(m) { super(m); this.name = "MyError" } } throw new MyError("mine")`,
			status: StatusRuntimeError, errName: "MyError", message: "mine"},
		{name: "syntax error", code: "let = ;", status: StatusSyntaxError, errCode: CodeSyntaxError},
		{name: "strict-mode syntax error", code: "var public = 1", status: StatusSyntaxError, errCode: CodeSyntaxError},
		{name: "parallel order", code: `return await __safe_parallel([3, 1, 2].map(n => async () => { await callTool("echo", {n}); return n }))`, status: StatusOK, result: `[3,1,2]`},
		{name: "parallel empty", code: `return await __safe_parallel([])`, status: StatusOK, result: `[]`},
		{name: "parallel bad options", code: `return await __safe_parallel([() => 1], {maxConcurrency: "x"})`, status: StatusRuntimeError, errName: "TypeError"},
		{name: "parallel non-function", code: `return await __safe_parallel([1])`, status: StatusRuntimeError, errName: "TypeError", message: "operation 0"},
		{name: "parallel non-array", code: `return await __safe_parallel("x")`, status: StatusRuntimeError, errName: "TypeError"},
		{name: "parallel failure message", code: `return await __safe_parallel([() => 1, () => callTool("fail", {})])`, status: StatusRuntimeError,
			message: "1 of 2 parallel operations failed: [1] RATE_LIMIT: slow down"},
		{name: "modern syntax", code: `const o = {a: {b: null}}; const {a, ...rest} = {a: 1, b: 2}; class K { #p = 1; get p() { return this.#p } }
			return [o?.a?.b ?? "d", a, rest, new K().p, [1, [2, [3]]].flat(2), 2n ** 3n > 7n, "x".padStart(3, "-"), Object.fromEntries([["k", 1]])]`,
			status: StatusOK, result: `["d",1,{"b":2},1,[1,2,3],true,"--x",{"k":1}]`},
		{name: "JSON.stringify semantics", code: `return JSON.stringify({a: [1, "x", {b: null}], c: undefined, d: () => 1, e: new Date(0), f: NaN, g: [undefined]}, null, 1)`,
			status: StatusOK, result: `"{\n \"a\": [\n  1,\n  \"x\",\n  {\n   \"b\": null\n  }\n ],\n \"e\": \"1970-01-01T00:00:00.000Z\",\n \"f\": null,\n \"g\": [\n  null\n ]\n}"`},
		{name: "JSON.stringify replacer list", code: `return JSON.stringify({a: 1, b: 2, c: {a: 3, d: 4}}, ["a", "c"])`, status: StatusOK, result: `"{\"a\":1,\"c\":{\"a\":3}}"`},
		{name: "JSON.stringify shared reference", code: `const o = {x: 1}; return JSON.stringify([o, o])`, status: StatusOK, result: `"[{\"x\":1},{\"x\":1}]"`},
		{name: "JSON.stringify BigInt", code: `return JSON.stringify({n: 1n})`, status: StatusRuntimeError, errName: "TypeError", message: "BigInt"},
		{name: "regexp", code: `return "a1b22".match(/\d+/g)`, status: StatusOK, result: `["1","22"]`},
		{name: "join and concat semantics", code: `const a = [1, null, undefined, "x", {toString() { return "o" }}]; const c = [1, 2]; c.push(c);
			let calls = 0; const g = {get 0() { calls++; return "g" }, length: 1};
			return [a.join(), a.join("-"), c.join(), String(c), Array.prototype.join.call(g, ""), calls, "a".concat(1, null, {toString() { return "z" }}), String.raw({raw: ["a", "b", "c"]}, 1, 2), String.raw` + "`x${1}y`" + `]`,
			status: StatusOK, result: `["1,,,x,o","1---x-o","1,2,","1,2,","g",1,"a1nullz","a1b2c","x1y"]`},
		{name: "string methods under caps", code: `const t = "a-b-c".repeat(1000);
			return [t.split("-").length, t.replace(/(\w)/g, "<$1>").length, t.replaceAll("-", "--").length, t.replace("a", () => "A")[0],
				(t.match(/b/g) || []).length, [...t.matchAll(/c/g)].length, "a$b".replace("$", "$$"), "x".replace("x", "$&$&")]`,
			status: StatusOK, result: `[2001,11000,7000,"A",1000,1000,"a$b","xx"]`},
		{name: "API functions are frozen and no constructors", code: `const fs = [callTool, getTool, searchTools, describeTool];
			return fs.map(f => [f.name, Object.isFrozen(f), "prototype" in f, (() => { try { new f("echo"); return "constructed" } catch (e) { return e.name } })()])`,
			status: StatusOK, result: `[["callTool",true,false,"TypeError"],["getTool",true,false,"TypeError"],["searchTools",true,false,"TypeError"],["describeTool",true,false,"TypeError"]]`},
		{name: "dates work", code: `return typeof Date.now()`, status: StatusOK, result: `"number"`},
	}
	runExecCases(t, engine, cases)
}

// runExecCases runs each case on engine with the echo tools as host.
func runExecCases(t *testing.T, engine Engine, cases []execCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := tc.req
			req.Code = tc.code
			r, err := engine.Execute(context.Background(), req, newTestHost(echoTools()))
			if err != nil {
				t.Fatal(err)
			}
			checkResult(t, r, tc)
		})
	}
}

func checkResult(t *testing.T, r *Result, tc execCase) {
	t.Helper()
	desc := describeResult(r)
	if r.Status != tc.status {
		t.Fatalf("status %s, want %s: %s", r.Status, tc.status, desc)
	}
	if tc.status == StatusOK {
		if tc.result != "" && string(r.Result) != tc.result {
			t.Errorf("result %s, want %s", r.Result, tc.result)
		}
		if r.Error != nil {
			t.Errorf("ok result has an error: %s", desc)
		}
		return
	}
	if r.Error == nil {
		t.Fatalf("no error: %s", desc)
	}
	if tc.errCode != "" && r.Error.Code != tc.errCode {
		t.Errorf("code %s, want %s: %s", r.Error.Code, tc.errCode, desc)
	}
	if tc.errName != "" && r.Error.Name != tc.errName {
		t.Errorf("name %q, want %q: %s", r.Error.Name, tc.errName, desc)
	}
	if tc.message != "" && !strings.Contains(r.Error.Message, tc.message) {
		t.Errorf("message %q does not contain %q", r.Error.Message, tc.message)
	}
	// Shapes of the meta:execute output table.
	e := r.Error
	switch r.Status {
	case StatusSyntaxError:
		if e.Location == nil || e.Code != CodeSyntaxError {
			t.Errorf("syntax_error shape: %s", desc)
		}
	case StatusIllegalAccess:
		if e.Kind == "" {
			t.Errorf("illegal_access without kind: %s", desc)
		}
	case StatusRuntimeError:
		if e.Source != "script" || e.Name == "" {
			t.Errorf("runtime_error shape: %s", desc)
		}
	case StatusToolError:
		if e.Source != "tool" || e.ToolName == "" || e.Code == "" {
			t.Errorf("tool_error shape: %s", desc)
		}
	case StatusTimeout:
		if e.Code != CodeTimeout || !strings.Contains(e.Message, " ms") {
			t.Errorf("timeout shape: %s", desc)
		}
	}
}

func TestToolInputReachesHostAsJSON(t *testing.T) {
	h := newTestHost(echoTools())
	r, err := NewInProcess(nil).Execute(context.Background(), Request{Code: `
		await callTool("echo", {s: "x", n: 1.5, b: true, z: null, a: [1, undefined, () => 1], d: new Date(0), skip: undefined});
		await callTool("echo")`}, h)
	if err != nil || r.Status != StatusOK {
		t.Fatalf("%v %s", err, describeResult(r))
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.calls) != 2 {
		t.Fatalf("calls = %d", len(h.calls))
	}
	if got := string(h.calls[0].Input); got != `{"s":"x","n":1.5,"b":true,"z":null,"a":[1,null,null],"d":"1970-01-01T00:00:00.000Z"}` {
		t.Errorf("input = %s", got)
	}
	if string(h.calls[1].Input) != `{}` || h.calls[0].ID == h.calls[1].ID {
		t.Errorf("second call = %+v", h.calls[1])
	}
}

func TestConsole(t *testing.T) {
	h := newTestHost(echoTools())
	engine := NewInProcess(&Options{Limits: Limits{AllowConsole: true}})
	r, err := engine.Execute(context.Background(), Request{Code: `
		console.log("a", 1, {b: [2]}, null, undefined);
		console.warn("careful");
		console.error(new TypeError("bad"));
		console.info(10n);
		return 1`}, h)
	if err != nil || r.Status != StatusOK {
		t.Fatalf("%v %s", err, describeResult(r))
	}
	want := []string{`a 1 {"b":[2]} null undefined`, "[warn] careful", "[error] bad", "10"}
	if strings.Join(r.Logs, "|") != strings.Join(want, "|") {
		t.Errorf("logs = %q, want %q", r.Logs, want)
	}
	h.mu.Lock()
	if len(h.logs) != 4 || h.logs[1] != "warn: [warn] careful" {
		t.Errorf("LogHost saw %q", h.logs)
	}
	h.mu.Unlock()

	// Logs survive a failing script.
	r, _ = engine.Execute(context.Background(), Request{Code: `console.log("before"); null.x`}, h)
	if r.Status != StatusRuntimeError || len(r.Logs) != 1 {
		t.Errorf("logs of a failed script: %s", describeResult(r))
	}
}

// concurrencyHost counts concurrent tool calls.
type concurrencyHost struct {
	*testHost
	cur, max atomic.Int32
	release  chan struct{}
}

func TestParallelConcurrency(t *testing.T) {
	for _, tc := range []struct {
		opt  string
		want int32
	}{{"", 10}, {"{maxConcurrency: 3}", 3}, {"{maxConcurrency: 1000}", 20}, {"{maxConcurrency: 2.7}", 2}} {
		t.Run(tc.opt, func(t *testing.T) {
			var cur, max atomic.Int32
			var mu sync.Mutex
			h := newTestHost(map[string]func(json.RawMessage) (json.RawMessage, error){
				"slow": func(in json.RawMessage) (json.RawMessage, error) {
					n := cur.Add(1)
					mu.Lock()
					if n > max.Load() {
						max.Store(n)
					}
					mu.Unlock()
					runtime.Gosched()
					for i := 0; i < 1000 && cur.Load() < tc.want; i++ {
						runtime.Gosched()
					}
					cur.Add(-1)
					return in, nil
				},
			})
			code := fmt.Sprintf(`const r = await __safe_parallel(Array.from({length: 60}, (_, i) => () => callTool("slow", {i})), %s); return r.map(x => x.i).join(",") === Array.from({length: 60}, (_, i) => i).join(",")`, tc.opt)
			if tc.opt == "" {
				code = strings.Replace(code, ", )", ")", 1)
			}
			r, err := NewInProcess(&Options{Limits: Limits{MaxToolCalls: 100}}).Execute(context.Background(), Request{Code: code}, h)
			if err != nil || r.Status != StatusOK || string(r.Result) != "true" {
				t.Fatalf("%v %s", err, describeResult(r))
			}
			if max.Load() > tc.want {
				t.Errorf("max concurrency %d, want at most %d", max.Load(), tc.want)
			}
		})
	}
}

func TestStepLimit(t *testing.T) {
	engine := NewInProcess(&Options{Limits: Limits{MaxSteps: 1000}})
	r, _ := engine.Execute(context.Background(), Request{Code: `let n = 0; for (let i = 0; i < 900; i++) n++; return n`}, newTestHost(nil))
	if r.Status != StatusOK || r.Stats.Steps != 900 {
		t.Errorf("900 iterations: %s steps=%d", describeResult(r), r.Stats.Steps)
	}
	r, _ = engine.Execute(context.Background(), Request{Code: `let n = 0; for (let i = 0; i < 1001; i++) n++; return n`}, newTestHost(nil))
	if r.Status != StatusRuntimeError || !strings.Contains(r.Error.Message, "step limit of 1000") {
		t.Errorf("1001 iterations: %s", describeResult(r))
	}
	// Function calls count too, so recursion through callbacks is bounded.
	r, _ = engine.Execute(context.Background(), Request{Code: `[...Array(600)].map(() => 1); [...Array(600)].map(() => 1)`}, newTestHost(nil))
	if r.Status != StatusRuntimeError || r.Stats.Steps != 1001 {
		t.Errorf("callbacks: %s steps=%d", describeResult(r), r.Stats.Steps)
	}
	// A request may lower the limit, never raise it.
	r, _ = engine.Execute(context.Background(), Request{Code: `for (let i = 0; i < 5000; i++); return 1`, Limits: Limits{MaxSteps: 10000}}, newTestHost(nil))
	if r.Status != StatusRuntimeError || !strings.Contains(r.Error.Message, "step limit of 1000 ") {
		t.Errorf("raised limit: %s", describeResult(r))
	}
	r, _ = engine.Execute(context.Background(), Request{Code: `for (let i = 0; i < 500; i++); return 1`, Limits: Limits{MaxSteps: 100}}, newTestHost(nil))
	if r.Status != StatusRuntimeError || !strings.Contains(r.Error.Message, "step limit of 100 ") {
		t.Errorf("lowered limit: %s", describeResult(r))
	}
}

func TestTimeoutWhileToolPending(t *testing.T) {
	started := make(chan struct{})
	var hostCtxDone atomic.Bool
	h := newTestHost(map[string]func(json.RawMessage) (json.RawMessage, error){})
	blocking := &ctxHost{testHost: h, fn: func(ctx context.Context) (json.RawMessage, error) {
		close(started)
		<-ctx.Done()
		hostCtxDone.Store(true)
		return nil, ctx.Err()
	}}
	// The script must reach the tool within its limit: with 100 ms, a
	// script compiled on a starved core under -race timed out before it
	// called the tool, and the wait below, then unbounded, hung the
	// package until go test's timeout (44 min in a -count=2 run at load 20-30).
	r, err := NewInProcess(&Options{Limits: Limits{Timeout: 2 * time.Second, AllowConsole: true}}).Execute(context.Background(),
		Request{Code: `console.log("calling"); await callTool("block", {})`}, blocking)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(30 * time.Second): // a backstop: the call was made, or never will be
		t.Fatalf("the tool was never called: %s", describeResult(r))
	}
	if r.Status != StatusTimeout || r.Error.Message != "script exceeded the time limit of 2000 ms" || r.Error.Code != CodeTimeout {
		t.Errorf("result: %s", describeResult(r))
	}
	if len(r.Logs) != 1 || r.Logs[0] != "calling" {
		t.Errorf("logs of a timed-out script: %q", r.Logs)
	}
	for i := 0; i < 1000 && !hostCtxDone.Load(); i++ {
		runtime.Gosched()
	}
}

// ctxHost serves one tool, "block", with a function of the call's context.
type ctxHost struct {
	*testHost
	fn func(ctx context.Context) (json.RawMessage, error)
}

func (h *ctxHost) LookupTool(name string) (ToolInfo, bool) {
	return ToolInfo{Name: name}, name == "block"
}

func (h *ctxHost) CallTool(ctx context.Context, call ToolCall) (json.RawMessage, error) {
	return h.fn(ctx)
}

func TestCancelAbortsExecution(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	h := &ctxHost{testHost: newTestHost(nil), fn: func(c context.Context) (json.RawMessage, error) {
		cancel()
		<-c.Done()
		return nil, c.Err()
	}}
	r, err := NewInProcess(nil).Execute(ctx, Request{Code: `await callTool("block", {})`}, h)
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeExecutionAborted || r != nil {
		t.Fatalf("got %v, %v; want EXECUTION_ABORTED", describeResult(r), err)
	}
	// Canceled before it starts.
	_, err = NewInProcess(nil).Execute(ctx, Request{Code: `return 1`}, h)
	if !errors.As(err, &e) || e.Code != CodeExecutionAborted {
		t.Fatalf("pre-canceled: %v", err)
	}
	// Canceled while the script loops.
	ctx2, cancel2 := context.WithCancel(context.Background())
	h2 := newTestHost(map[string]func(json.RawMessage) (json.RawMessage, error){
		"cancel": func(json.RawMessage) (json.RawMessage, error) { cancel2(); return json.RawMessage(`1`), nil },
	})
	_, err = NewInProcess(&Options{Limits: Limits{MaxSteps: 1 << 50}}).Execute(ctx2, Request{Code: `await callTool("cancel", {}); for (;;) {}`}, h2)
	if !errors.As(err, &e) || e.Code != CodeExecutionAborted {
		t.Fatalf("canceled in a loop: %v", err)
	}
}

func TestClose(t *testing.T) {
	e := NewInProcess(nil)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := e.Execute(context.Background(), Request{Code: `return 1`}, newTestHost(nil))
	var pe *Error
	if !errors.As(err, &pe) || pe.Code != CodePoolDisposed {
		t.Errorf("after Close: %v", err)
	}
}

func TestSanitization(t *testing.T) {
	code := `await callTool("boom", {})`
	r, _ := NewInProcess(nil).Execute(context.Background(), Request{Code: code}, newTestHost(echoTools()))
	if !strings.Contains(r.Error.Message, "/srv/tools/boom.go") {
		t.Errorf("unsanitized: %s", describeResult(r))
	}
	r, _ = NewInProcess(&Options{Sanitization: Sanitization{RemoveFilePaths: true, RemoveStackTraces: true}}).Execute(
		context.Background(), Request{Code: code}, newTestHost(echoTools()))
	if r.Error.Message != "exploded in [path]" || r.Error.Stack != "" {
		t.Errorf("sanitized: %s", describeResult(r))
	}
	r, _ = NewInProcess(nil).Execute(context.Background(), Request{Code: "\n  null.x"}, newTestHost(nil))
	if !strings.Contains(r.Error.Stack, "plan.js:2:") {
		t.Errorf("stack: %q", r.Error.Stack)
	}
	r, _ = NewInProcess(nil).Execute(context.Background(), Request{Code: "null.x"}, newTestHost(nil))
	if !strings.Contains(r.Error.Stack, "plan.js:1:6(") {
		t.Errorf("line-1 column not shifted back: %q", r.Error.Stack)
	}
}

// TestSanitizationPolicy: each rule of the one policy, alone, on the kinds
// of text a tool error carries (issue 10: paths, hosts, env values, Go type
// names), and what each leaves alone.
func TestSanitizationPolicy(t *testing.T) {
	for _, tc := range []struct {
		policy   Sanitization
		in, want string
	}{
		{Sanitization{RemoveHosts: true}, `Post "http://127.0.0.1:43117/mcp": dial tcp 127.0.0.1:43117: connect: connection refused`, `Post "[url]": dial tcp [host]: connect: connection refused`},
		{Sanitization{RemoveHosts: true}, "dial tcp 10.0.0.5:5432 and [::1]:6379 and db.internal:5432 and localhost:8080", "dial tcp [host] and [host] and [host] and [host]"},
		{Sanitization{RemoveHosts: true}, "at plan.js:3:7(12) ratio 3:2", "at plan.js:3:7(12) ratio 3:2"},
		{Sanitization{RemoveHosts: true}, "open file:///etc/x.json", "open file:///etc/x.json"},
		{Sanitization{RemoveEnvValues: true}, `handler failed: API_KEY=abc123 DB_URL="postgres://u:p@h/db", TOKEN='s e c'`, `handler failed: API_KEY=[redacted] DB_URL=[redacted], TOKEN=[redacted]`},
		{Sanitization{RemoveEnvValues: true}, "a=1 and x.Y=2 and Name=z", "a=1 and x.Y=2 and Name=z"},
		{Sanitization{RemoveTypeNames: true}, "json: cannot unmarshal string into Go value of type map[string]interface {} (*json.UnmarshalTypeError)", "json: cannot unmarshal string into Go value of type [type] ([type])"},
		{Sanitization{RemoveTypeNames: true}, "*net.OpError: read: []main.Item and x.y is not a function", "[type]: read: [type] and x.y is not a function"},
		{Sanitization{RemoveFilePaths: true}, "open /etc/secret/config.yaml: denied", "open [path]: denied"},
		{Sanitization{}, "API_KEY=abc 10.0.0.5:5432 /etc/x/y *json.SyntaxError", "API_KEY=abc 10.0.0.5:5432 /etc/x/y *json.SyntaxError"},
	} {
		if got := tc.policy.Text(tc.in); got != tc.want {
			t.Errorf("%+v.Text(%q)\n = %q\nwant %q", tc.policy, tc.in, got, tc.want)
		}
	}
}

// TestToolErrorsAreSanitized: the policy reaches the error a script
// catches from callTool, not only the error a run ends with, in the engine
// and in a worker.
func TestToolErrorsAreSanitized(t *testing.T) {
	leaky := errors.New(`calling db:query: Post "http://10.1.2.3:8080/q": API_KEY=abc123 in /srv/app/handler.go (*url.Error)`)
	host := newTestHost(map[string]func(json.RawMessage) (json.RawMessage, error){
		"db:query": func(json.RawMessage) (json.RawMessage, error) { return nil, leaky },
	})
	code := `try { await callTool("db:query", {}) } catch (e) { return e.message }`
	all := Sanitization{RemoveFilePaths: true, RemoveHosts: true, RemoveEnvValues: true, RemoveTypeNames: true}
	r, err := NewInProcess(&Options{Sanitization: all}).Execute(context.Background(), Request{Code: code}, host)
	if err != nil || r.Status != StatusOK {
		t.Fatalf("%v %s", err, describeResult(r))
	}
	got := string(r.Result)
	for _, leak := range []string{"10.1.2.3", "8080", "abc123", "/srv/app", "url.Error"} {
		if strings.Contains(got, leak) {
			t.Errorf("caught message %s shows %q", got, leak)
		}
	}
	if !strings.Contains(got, "calling db:query") {
		t.Errorf("caught message %s lost its sense", got)
	}
	// Uncaught, the same text ends the run sanitized as well.
	r, _ = NewInProcess(&Options{Sanitization: all}).Execute(context.Background(), Request{Code: `await callTool("db:query", {})`}, host)
	if r.Error == nil || strings.Contains(r.Error.Message, "10.1.2.3") || strings.Contains(r.Error.Stack, "abc123") {
		t.Errorf("uncaught: %s", describeResult(r))
	}
	// No policy: the text is the tool's own.
	r, _ = NewInProcess(nil).Execute(context.Background(), Request{Code: code}, host)
	if !strings.Contains(string(r.Result), "10.1.2.3:8080") {
		t.Errorf("unsanitized: %s", describeResult(r))
	}
}

func TestRemoveFilePaths(t *testing.T) {
	for in, want := range map[string]string{
		"open /etc/passwd: denied":             "open [path]: denied",
		"at file:///home/u/x.js:1:2":           "at [path]",
		`C:\Users\x\a.txt missing`:             "[path] missing",
		"see https://example.com/a/b for more": "see https://example.com/a/b for more",
		"ratio 1/2 is fine":                    "ratio 1/2 is fine",
		"(/usr/lib/go/src/x.go:10)":            "([path]:10)",
	} {
		if got := RemoveFilePaths(in); got != want {
			t.Errorf("RemoveFilePaths(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestIsMetaTool(t *testing.T) {
	for name, want := range map[string]bool{
		"meta:search": true, "meta:describe": true, "meta:execute": true, "meta:invoke": true, "meta:anything": true,
		"meta_search": true, "meta_describe": true, "meta_execute": true, "meta_invoke": true,
		"META_Execute": true, " meta:invoke ": true, "meta-search": true, "meta.describe": true, "meta/invoke": true,
		"\u200bmeta_execute": true, "meta\u200b:execute": true,
		"metadata:get": false, "meta_data": false, "github:meta_search_x": false, "search": false, "": false, "meta": false,
	} {
		if got := IsMetaTool(name); got != want {
			t.Errorf("IsMetaTool(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestNestingDepth(t *testing.T) {
	for _, tc := range []struct {
		code string
		want int
	}{
		{`f(a[1], {b: 2})`, 2},
		// Brackets in strings count towards the maximum (a misread quote
		// must not hide code), not towards the depth after them.
		{`"((((((((" + '[[[[' + "\"(("`, 8},
		{`"(((" + f(x)`, 3},
		// Regular-expression literals: their brackets and quotes are theirs.
		{`s = s.replace(/\(/g, ''); t = f(a)`, 1},
		{`/"/.test(s); f(g(h(x)))`, 3},
		{"/`/.test(s); f(g(h(x)))", 3},
		{`if (x) /\(/.test(y); f(g(x))`, 2},
		{`x = a / (b) / c; f(g(x))`, 2},
		{`x = f(a) / g(b) / 2`, 1},
		{`function f() {} /\(/.test(s)`, 1},
		{`const o = {a: 1} / 2; f(g(x))`, 2},
		{`x = [1] / /[(]/.source.length`, 2},
		{`const f = function () {} / 2`, 1},
		// A "string" that runs into the end of its line is code.
		{"x = 1 \"(( ; f(g(h(x)))\ny", 5},
		{"`a ${ b({c: 1}) } (((`", 3},
		{"// ((((((\n/* [[[[ */ x", 0},
		{`!!!!!!x`, 3},
		{`a - -b`, 1},
		{`x => y => z => 1`, 3},
		{`(a) => (b) => 1`, 2},
		{"const f = x => 1\nconst g = y => 2\nconst h = z => 3", 1},
		{"const f = x =>\n  y =>\n  1", 2},
		{`xs.map(x => x.a).filter(y => y.b).map(z => [z])`, 2},
		{`f(a => 1, b => 2, c => 3)`, 2},
		{`l: m: n: x`, 2},
		{`const o = {a: 1, b: {c: 2}, d: x ? 1 : 2}`, 2},
		{`switch (x) { case 1: case 2: case 3: default: y = a ? b : c ? d : e }`, 1},
		{`a?.b ?? c ? d : e`, 0},
		{`x = a ? b : c; y = d ? e : f`, 0},
	} {
		if got, _ := nestingDepth(tc.code, 100); got != tc.want {
			t.Errorf("nestingDepth(%q) = %d, want %d", tc.code, got, tc.want)
		}
	}
}

func TestSyntaxErrorLocations(t *testing.T) {
	engine := NewInProcess(nil)
	for _, tc := range []struct {
		code      string
		line, col int
	}{
		{"return )", 1, 8},
		{"const a = 1;\n\nconst b = ;", 3, 11},
		{"eval(1)", 1, 1},
		{"const x = 1;\n  setTimeout(f)", 2, 3},
	} {
		r, err := engine.Execute(context.Background(), Request{Code: tc.code}, newTestHost(nil))
		if err != nil {
			t.Fatal(err)
		}
		if r.Error == nil || r.Error.Location == nil || r.Error.Location.Line != tc.line || r.Error.Location.Column != tc.col {
			t.Errorf("%q: %s, want %d:%d", tc.code, describeResult(r), tc.line, tc.col)
		}
	}
}

// TestConcurrentExecutions: 40 scripts at once each get their own results.
// The time limit is a backstop, not the subject: the secure preset's 3.5 s
// is measured on the clock, and 40 scripts sharing 2 loaded cores under
// -race took about that long, so some ended TIMEOUT.
func TestConcurrentExecutions(t *testing.T) {
	engine := NewInProcess(&Options{Limits: Limits{Timeout: time.Minute}})
	var wg sync.WaitGroup
	errs := make(chan string, 40)
	for i := 0; i < 40; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			code := fmt.Sprintf(`const r = await __safe_parallel([1, 2, 3].map(n => () => callTool("add", {a: n, b: %d}))); return r`, i)
			r, err := engine.Execute(context.Background(), Request{Code: code}, newTestHost(echoTools()))
			want := fmt.Sprintf("[%d,%d,%d]", i+1, i+2, i+3)
			if err != nil || r.Status != StatusOK || string(r.Result) != want {
				errs <- fmt.Sprintf("%d: %v %s", i, err, describeResult(r))
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

func TestNoGoroutineLeak(t *testing.T) {
	engine := NewInProcess(nil)
	run(engine, `return 1`)
	before := runtime.NumGoroutine()
	for i := 0; i < 30; i++ {
		run(engine, `await __safe_parallel([() => callTool("echo", {}), () => callTool("fail", {})]).catch(() => 1); return 1`)
		run(engine, `while (true) {}`)
	}
	after := runtime.NumGoroutine()
	for i := 0; i < 10000 && after > before+2; i++ {
		runtime.Gosched()
		after = runtime.NumGoroutine()
	}
	if after > before+2 {
		t.Errorf("goroutines: %d before, %d after", before, after)
	}
}

func TestHardDeadlineAbandonsStuckBuiltin(t *testing.T) {
	e := NewInProcess(nil).(*InProcess)
	e.grace = 20 * time.Millisecond
	// A host whose LookupTool blocks stands for a built-in that ignores
	// the interrupt: the VM goroutine waits in Go until released.
	h := &blockingLookupHost{entered: make(chan struct{}), release: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := e.Execute(ctx, Request{Code: `return await callTool("t", {})`}, h)
		done <- err
	}()
	<-h.entered
	cancel()
	err := <-done
	var se *Error
	if !errors.As(err, &se) || se.Code != CodeExecutionAborted {
		t.Fatalf("Execute: %v", err)
	}
	if n := e.Abandoned(); n != 1 {
		t.Errorf("Abandoned() = %d, want 1", n)
	}
	// The engine keeps serving while the abandoned goroutine waits.
	r, _ := e.Execute(context.Background(), Request{Code: `return 2`}, newTestHost(nil))
	if r.Status != StatusOK {
		t.Errorf("next script: %s", describeResult(r))
	}
	close(h.release)
	deadline := time.Now().Add(30 * time.Second)
	for e.Abandoned() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the abandoned goroutine did not finish once released")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// blockingLookupHost blocks in LookupTool until released.
type blockingLookupHost struct {
	entered, release chan struct{}
	once             sync.Once
}

func (h *blockingLookupHost) LookupTool(name string) (ToolInfo, bool) {
	h.once.Do(func() { close(h.entered) })
	<-h.release
	return ToolInfo{Name: name}, true
}

func (h *blockingLookupHost) CallTool(context.Context, ToolCall) (json.RawMessage, error) {
	return json.RawMessage(`1`), nil
}

// TestAbandonedRunEndsItsCalls: when Execute answers for a script stuck in
// a built-in (here past its timeout), the host is told the execution ended
// (EndHost) and the tool calls the script left are cancelled at once, as
// at any other end: the broker waits for a session's calls before it ends
// the session. They were cancelled only when the abandoned goroutine
// returned, whenever the built-in let go.
func TestAbandonedRunEndsItsCalls(t *testing.T) {
	e := NewInProcess(nil).(*InProcess)
	e.grace = 20 * time.Millisecond
	h := &stuckHost{called: make(chan context.Context, 1), release: make(chan struct{})}
	res, err := e.Execute(context.Background(), Request{
		Code:   `callTool("wait", {}).catch(() => {}); await callTool("echo", {}); return await callTool("stuck", {})`,
		Limits: Limits{Timeout: 200 * time.Millisecond},
	}, h)
	defer close(h.release)
	if err != nil || res.Status != StatusTimeout {
		t.Fatalf("Execute: %v %s", err, describeResult(res))
	}
	if !h.ended.Load() {
		t.Error("the host was not told the execution ended")
	}
	if ctx := <-h.called; ctx.Err() == nil {
		t.Error("the call the script left is still running after Execute answered")
	}
}

// stuckHost blocks in LookupTool("stuck") until released, answers echo,
// and holds wait until its context ends.
type stuckHost struct {
	called  chan context.Context
	release chan struct{}
	ended   atomic.Bool
}

func (h *stuckHost) LookupTool(name string) (ToolInfo, bool) {
	if name == "stuck" {
		<-h.release
	}
	return ToolInfo{Name: name}, true
}

func (h *stuckHost) CallTool(ctx context.Context, call ToolCall) (json.RawMessage, error) {
	if call.Name == "wait" {
		h.called <- ctx
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return json.RawMessage(`1`), nil
}

func (h *stuckHost) Ended() { h.ended.Store(true) }
