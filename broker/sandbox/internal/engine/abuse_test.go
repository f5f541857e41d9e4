package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"
)

// abuseCase is a script that once crashed the in-process engine, bypassed a
// size cap, or kept a goroutine burning CPU after the run had answered
// (issue 10). Each runs on both engines; check inspects the result.
type abuseCase struct {
	name  string
	code  string
	check func(t *testing.T, r *Result)
	// limits lower the engine's for this case (a case that tests a time
	// limit sets its own, so the engine's may be a generous backstop).
	limits Limits
}

func wantError(status Status, code, contains string) func(t *testing.T, r *Result) {
	return func(t *testing.T, r *Result) {
		t.Helper()
		if r.Status != status || r.Error == nil || (code != "" && r.Error.Code != code) || !strings.Contains(r.Error.Message, contains) {
			t.Fatalf("got %s, want %s %s containing %q", describeResult(r), status, code, contains)
		}
	}
}

func wantResult(want string) func(t *testing.T, r *Result) {
	return func(t *testing.T, r *Result) {
		t.Helper()
		var got, exp any
		if r.Status != StatusOK || json.Unmarshal(r.Result, &got) != nil || json.Unmarshal([]byte(want), &exp) != nil || !reflect.DeepEqual(got, exp) {
			t.Fatalf("got %s, want ok %s", describeResult(r), want)
		}
	}
}

// wantBounded accepts a result or a stop by a limit, not a crash.
func wantBounded(t *testing.T, r *Result) {
	t.Helper()
	if r.Status != StatusOK && r.Status != StatusRuntimeError && r.Status != StatusTimeout {
		t.Fatalf("got %s", describeResult(r))
	}
	if r.Error != nil && (r.Error.Code == CodeWorkerCrashed || r.Error.Code == CodeWorkerTimeout) {
		t.Fatalf("worker lost: %s", describeResult(r))
	}
}

func abuseCases() []abuseCase {
	var flat strings.Builder
	for range 70 {
		flat.WriteString("s = s.replace(/\\(/g, '');\n")
	}
	return []abuseCase{
		// --- caps computed once: getters, valueOf and proxies that answer
		// small, then huge --------------------------------------------------
		{name: "apply with a length getter", code: `let n = 0; const o = {get length() { n++; return n < 2 ? 10 : 4e9 }}; return Math.max.apply(null, o)`,
			check: wantResult("null")},
		{name: "Reflect.apply with a length getter", code: `let n = 0; const o = {get length() { n++; return n < 2 ? 3 : 4e9 }, 0: 1, 1: 5, 2: 2}; return Reflect.apply(Math.max, null, o)`,
			check: wantResult("5")},
		{name: "repeat count valueOf", code: `let n = 0; return "x".repeat({valueOf() { n++; return n < 2 ? 2 : 5e8 }}).length`, check: wantResult("2")},
		{name: "padStart valueOf", code: `let n = 0; return "x".padStart({valueOf() { n++; return n < 2 ? 3 : 5e8 }}).length`, check: wantResult("3")},
		{name: "receiver toString", code: `let n = 0; const o = {toString() { n++; return n < 2 ? "ab" : "y".repeat(3e7) }}; return String.prototype.repeat.call(o, 2)`, check: wantResult(`"abab"`)},
		{name: "array-like of length 2^32-1", code: `return Array.prototype.indexOf.call({length: 2 ** 32 - 1}, 1)`, check: wantError(StatusRuntimeError, CodeExecutionError, "exceeds the sandbox limit")},
		{name: "proxy whose length grows", code: `let n = 0; const p = new Proxy([1, 2], {get(t, k) { if (k === "length") { n++; return n < 2 ? 2 : 4e9 } return t[k] }}); return Array.prototype.slice.call(p)`,
			check: wantResult("[1,2]")},
		{name: "proxy array in concat", code: `let n = 0; const p = new Proxy([1], {get(t, k) { if (k === "length") { n++; return n < 2 ? 1 : 4e9 } return t[k] }}); return [].concat(p)`,
			check: wantResult("[1]")},
		{name: "isConcatSpreadable getter", code: `let n = 0; const o = {get [Symbol.isConcatSpreadable]() { n++; return n >= 2 }, length: 4e9}; return [].concat(o).length`, check: wantResult("1")},
		{name: "Array.from iterator getter", code: `let n = 0; const o = {get [Symbol.iterator]() { n++; return n < 2 ? function* () { yield 1 } : undefined }, length: 4e9}; return Array.from(o)`,
			check: wantResult("[1]")},
		{name: "mutating method on an array-like with a length getter", code: `const o = {get length() { return 4e9 }}; return Array.prototype.fill.call(o, 1)`,
			check: wantError(StatusRuntimeError, CodeExecutionError, "computed length")},
		// --- depth before Go recursion --------------------------------------
		{name: "JSON.parse of 1e7 nested arrays", code: `return JSON.parse("[".repeat(1e7) + "]".repeat(1e7)).length`, check: wantError(StatusRuntimeError, CodeExecutionError, "nested deeper than the limit of 1000")},
		{name: "RegExp with 1e6 nested groups", code: `return new RegExp("(".repeat(1e6) + "a" + ")".repeat(1e6)).test("a")`, check: wantError(StatusRuntimeError, CodeExecutionError, "Invalid regular expression")},
		{name: "string pattern with deep groups", code: `return "a".match("(".repeat(5000) + "a" + ")".repeat(5000))`, check: wantError(StatusRuntimeError, CodeExecutionError, "nests groups deeper")},
		{name: "JSON.stringify of deep nesting", code: `let a = []; for (let i = 0; i < 5000; i++) a = [a]; return JSON.stringify(a).length`, check: wantError(StatusRuntimeError, CodeExecutionError, "nests deeper than the limit of 1000")},
		{name: "result of deep nesting", code: `let a = {}; for (let i = 0; i < 5000; i++) a = {a}; return a`, check: wantError(StatusRuntimeError, CodeExecutionError, "nests deeper than the limit of 1000")},
		{name: "object spread of a huge string", code: `const s = "x".repeat(3e6); return Object.keys({...s}).length`, check: wantError(StatusRuntimeError, CodeExecutionError, "object spread of a string")},
		{name: "object rest of a huge string", code: `const s = "x".repeat(3e6); const {a, ...r} = s; return 1`, check: wantError(StatusRuntimeError, CodeExecutionError, "object spread of a string")},
		{name: "object rest patterns split out by the validator keep their meaning", code: `const out = [];
			for (let {a, ...r} = {a: 1, b: 2}; ;) { out.push(r); break }
			for (const {a, ...r} of [{a: 1, c: 3}]) out.push(r);
			for (var {length, ...r} in {ab: 1}) out.push(r);
			let q, w; for ([{...q}, w] of [[{d: 4}, 5]]) out.push(q, w);
			out.push((({a, ...r}, [{...t}] = [{e: 5}]) => [a, r, t])({a: 1, f: 6}));
			function f(x, {g, ...r} = {g: 7, h: 8}, ...[{...t}]) { return [x, r, t] }
			out.push(f(1, undefined, {i: 9}));
			class K { m({...r}) { return this.k + r.j } }; K.prototype.k = 10; out.push(new K().m({j: 1}));
			try { throw {m: 1, n: 2} } catch ({m, ...r}) { out.push(r) }
			const {a: {b, ...r2}, c: [{...s}] = [{o: 1}], ...rest} = {a: {b: 1, p: 2}, z: 3};
			out.push(r2, s, rest);
			let u, y; const got = ({a: {...u}, b: [y, {...u.inner}]} = {a: {k: 1}, b: [2, {l: 3}]}); out.push(u, y, got.b[0]);
			return out`,
			check: wantResult(`[{"b":2},{"c":3},{"0":"a","1":"b"},{"d":4},5,[1,{"f":6},{"e":5}],[1,{"h":8},{"i":9}],11,{"n":2},{"p":2},{"o":1},{"z":3},{"k":1,"inner":{"l":3}},2,2]`)},
		{name: "object rest of a huge string in a for head", code: `const s = "x".repeat(5000); for (let {...r} = s; ;) break; return 1`, check: wantError(StatusRuntimeError, CodeExecutionError, "object spread of a string"), limits: Limits{MemoryBytes: 64000}},
		{name: "object rest of a huge string in a var for head", code: `const s = "x".repeat(5000); for (var {a, ...r} = s; ;) break; return 1`, check: wantError(StatusRuntimeError, CodeExecutionError, "object spread of a string"), limits: Limits{MemoryBytes: 64000}},
		{name: "object rest of a huge string in a for-of head", code: `const s = "x".repeat(5000); for (const {...r} of [s]) break; return 1`, check: wantError(StatusRuntimeError, CodeExecutionError, "object spread of a string"), limits: Limits{MemoryBytes: 64000}},
		{name: "object rest of a huge string in a for-in head", code: `const s = "x".repeat(5000); const o = {}; o[s] = 1; for (const {...r} in o) break; return 1`, check: wantError(StatusRuntimeError, CodeExecutionError, "object spread of a string"), limits: Limits{MemoryBytes: 64000}},
		{name: "object rest of a huge string in a var for-of head", code: `const s = "x".repeat(5000); for (var {...r} of [s]) break; return 1`, check: wantError(StatusRuntimeError, CodeExecutionError, "object spread of a string"), limits: Limits{MemoryBytes: 64000}},
		{name: "object rest of a huge string in an assigning for-of head", code: `const s = "x".repeat(5000); let r; for ({...r} of [s]) break; return 1`, check: wantError(StatusRuntimeError, CodeExecutionError, "object spread of a string"), limits: Limits{MemoryBytes: 64000}},
		{name: "object rest of a huge string in a nested assigning for-of head", code: `const s = "x".repeat(5000); let r; for ([{...r}] of [[s]]) break; return 1`, check: wantError(StatusRuntimeError, CodeExecutionError, "object spread of a string"), limits: Limits{MemoryBytes: 64000}},
		{name: "object rest of a huge string in an arrow parameter", code: `const s = "x".repeat(5000); (({...r}) => r)(s); return 1`, check: wantError(StatusRuntimeError, CodeExecutionError, "object spread of a string"), limits: Limits{MemoryBytes: 64000}},
		{name: "object rest of a huge string in an arrow parameter with an expression body", code: `const s = "x".repeat(5000); const f = ({a, ...r}) => 1; f(s); return 1`, check: wantError(StatusRuntimeError, CodeExecutionError, "object spread of a string"), limits: Limits{MemoryBytes: 64000}},
		{name: "object rest of a huge string in a function parameter", code: `const s = "x".repeat(5000); function f({...r}) { return r } f(s); return 1`, check: wantError(StatusRuntimeError, CodeExecutionError, "object spread of a string"), limits: Limits{MemoryBytes: 64000}},
		{name: "object rest of a huge string in a second parameter", code: `const s = "x".repeat(5000); function f(x, {...r}) { return r } f(1, s); return 1`, check: wantError(StatusRuntimeError, CodeExecutionError, "object spread of a string"), limits: Limits{MemoryBytes: 64000}},
		{name: "object rest of a huge string in a method parameter", code: `const s = "x".repeat(5000); const o = {m({...r}) { return r }}; o.m(s); return 1`, check: wantError(StatusRuntimeError, CodeExecutionError, "object spread of a string"), limits: Limits{MemoryBytes: 64000}},
		{name: "object rest of a huge string in a class method parameter", code: `const s = "x".repeat(5000); class K { m({...r}) { return r } } new K().m(s); return 1`, check: wantError(StatusRuntimeError, CodeExecutionError, "object spread of a string"), limits: Limits{MemoryBytes: 64000}},
		{name: "object rest of a huge string in a default-valued parameter", code: `const s = "x".repeat(5000); function f({...r} = s) { return r } f(); return 1`, check: wantError(StatusRuntimeError, CodeExecutionError, "object spread of a string"), limits: Limits{MemoryBytes: 64000}},
		{name: "object rest of a huge string in a rest parameter", code: `const s = "x".repeat(5000); function f(...[{...r}]) { return r } f(s); return 1`, check: wantError(StatusRuntimeError, CodeExecutionError, "object spread of a string"), limits: Limits{MemoryBytes: 64000}},
		{name: "object rest of a huge string in a catch parameter", code: `const s = "x".repeat(5000); try { throw s } catch ({...r}) {}; return 1`, check: wantError(StatusRuntimeError, CodeExecutionError, "object spread of a string"), limits: Limits{MemoryBytes: 64000}},
		{name: "object rest of a huge string nested in an object pattern", code: `const s = "x".repeat(5000); let {a: {...r}} = {a: s}; return 1`, check: wantError(StatusRuntimeError, CodeExecutionError, "object spread of a string"), limits: Limits{MemoryBytes: 64000}},
		{name: "object rest of a huge string nested in an array pattern", code: `const s = "x".repeat(5000); let [{...r}] = [s]; return 1`, check: wantError(StatusRuntimeError, CodeExecutionError, "object spread of a string"), limits: Limits{MemoryBytes: 64000}},
		{name: "object rest of a huge string nested with a default", code: `const s = "x".repeat(5000); const {a: {...r} = s} = {}; return 1`, check: wantError(StatusRuntimeError, CodeExecutionError, "object spread of a string"), limits: Limits{MemoryBytes: 64000}},
		{name: "object rest of a huge string nested with an unused default", code: `const s = "x".repeat(5000); const {a: {...r} = 1} = {a: s}; return 1`, check: wantError(StatusRuntimeError, CodeExecutionError, "object spread of a string"), limits: Limits{MemoryBytes: 64000}},
		{name: "object rest of a huge string nested with a default in an assignment", code: `const s = "x".repeat(5000); let r; ({a: {...r} = 1} = {a: s}); return 1`, check: wantError(StatusRuntimeError, CodeExecutionError, "object spread of a string"), limits: Limits{MemoryBytes: 64000}},
		{name: "object rest of a huge string in a generator's parameter", code: `const s = "x".repeat(5000); function* g({...r}) { yield 1 } g(s).next(); return 1`, check: wantError(StatusRuntimeError, CodeExecutionError, "object spread of a string"), limits: Limits{MemoryBytes: 64000}},
		{name: "object rest of a huge string in a setter's parameter", code: `const s = "x".repeat(5000); const o = {set x({...r}) {}}; o.x = s; return 1`, check: wantError(StatusRuntimeError, CodeExecutionError, "object spread of a string"), limits: Limits{MemoryBytes: 64000}},
		{name: "object rest of a huge string nested in a var declaration", code: `const s = "x".repeat(5000); var {a: {...r}} = {a: s}; return 1`, check: wantError(StatusRuntimeError, CodeExecutionError, "object spread of a string"), limits: Limits{MemoryBytes: 64000}},
		{name: "await in an assignment pattern with a nested object rest is refused", code: `let r, b; ({a: {b = await 2, ...r}} = {a: {c: 1}}); return [b, r]`, check: wantError(StatusIllegalAccess, CodeValidationError, "with await or yield in it")},
		{name: "await in a declaration with a nested object rest", code: `const {a: {b = await 2, ...r}} = {a: {c: 1}}; for (const [{d = await 3, ...q}] of [[{e: 4}]]) return [b, r, d, q]`, check: wantResult(`[2,{"c":1},3,{"e":4}]`)},
		{name: "object rest of a huge string nested twice", code: `const s = "x".repeat(5000); const [{a: [{...r}]}] = [{a: [s]}]; return 1`, check: wantError(StatusRuntimeError, CodeExecutionError, "object spread of a string"), limits: Limits{MemoryBytes: 64000}},
		{name: "object rest of a huge string nested in an object assignment", code: `const s = "x".repeat(5000); let r; ({a: {...r}} = {a: s}); return 1`, check: wantError(StatusRuntimeError, CodeExecutionError, "object spread of a string"), limits: Limits{MemoryBytes: 64000}},
		{name: "object rest of a huge string nested in an array assignment", code: `const s = "x".repeat(5000); let r; [{...r}] = [s]; return 1`, check: wantError(StatusRuntimeError, CodeExecutionError, "object spread of a string"), limits: Limits{MemoryBytes: 64000}},
		{name: "object rest of a huge string nested in a parameter", code: `const s = "x".repeat(5000); (({a: {...r}}) => r)({a: s}); return 1`, check: wantError(StatusRuntimeError, CodeExecutionError, "object spread of a string"), limits: Limits{MemoryBytes: 64000}},
		{name: "object rest of a huge string nested in a catch parameter", code: `const s = "x".repeat(5000); try { throw [s] } catch ([{...r}]) {}; return 1`, check: wantError(StatusRuntimeError, CodeExecutionError, "object spread of a string"), limits: Limits{MemoryBytes: 64000}},
		{name: "object rest of a huge string nested in a for-of head", code: `const s = "x".repeat(5000); for (const [{...r}] of [[s]]) break; return 1`, check: wantError(StatusRuntimeError, CodeExecutionError, "object spread of a string"), limits: Limits{MemoryBytes: 64000}},
		// --- CPU: steps and built-ins bounded by the run's time -------------
		{name: "catastrophic regexp in a loop", code: `for (;;) /(?=(a+)+b)/.test("a".repeat(28))`, check: wantError(StatusTimeout, CodeTimeout, "time limit"), limits: Limits{Timeout: 2 * time.Second}},
		{name: "native callbacks count steps", code: `const a = new Array(200000).fill(0); a.map(Math.random); return 1`, check: wantError(StatusRuntimeError, CodeExecutionError, "step limit")},
		// A scan past regexpMatchTimeout counts as no match, so how far these
		// get depends on the machine; they must end within the limits.
		{name: "split on a backtracking pattern", code: `const s = ("a".repeat(20) + "x").repeat(4000); return s.split(/(?=(a|aa)+c)|x/).length`, check: wantBounded},
		{name: "spread of matchAll on a backtracking pattern", code: `const s = ("a".repeat(20) + "x").repeat(4000); return [...s.matchAll(/(?=(a|aa)+c)|x/g)].length`, check: wantBounded},
		{name: "backtracking patterns still work", code: `return ["a1b2c3".replace(/(?<=\d)(?=[a-z])/g, "-"), "aXbXc".split(/(?=X)/), "abcabc".match(/(?<=a)b/g), [..."a1a2".matchAll(/(?<=a)(\d)/g)].map(m => m[1]), "x1y2".replace(/(?<=x)(\d)/g, (m, d) => "<" + d + ">"), "ab".replace(/(?<n>b)(?=$)/, "[$<n>$1$&$$]")]`,
			check: wantResult(`["a1-b2-c3",["a","Xb","Xc"],["b","b"],["1","2"],"x<1>y2","a[bbb$]"]`)},
		// One wrapper per pattern method: its length check runs before the
		// backtracking loop, and replaceAll still refuses a non-global one.
		{name: "backtracking replaceAll and its checks", code: `const r = ["a1a2".replaceAll(/(?<=a)(\d)/g, "<$1>"), "xaxa".split(/(?=a)/, 1)];
try { "ab".replaceAll(/(?<=a)b/, "c"); r.push("no error"); } catch (e) { r.push(e.name + ": " + e.message); }
try { "a".repeat(3000).replace(/(?=a)/g, "$&".repeat(5000)); r.push("no error"); } catch (e) { r.push(e.name); }
return r`, check: wantResult(`["a<1>a<2>",["x"],"TypeError: replaceAll must be called with a global RegExp","RangeError"]`)},
		// --- bytes ------------------------------------------------------------
		{name: "huge error message", code: `throw new Error("x".repeat(4e6))`, check: func(t *testing.T, r *Result) {
			if r.Status != StatusRuntimeError || len(r.Error.Message) > MaxErrorBytes+100 || !strings.Contains(r.Error.Message, "more") {
				t.Fatalf("message of %d bytes: %.200s", len(r.Error.Message), describeResult(r))
			}
		}},
		{name: "30 MB tool name", code: `return await callTool("x".repeat(3e7), {})`, check: func(t *testing.T, r *Result) {
			if r.Status != StatusToolError || r.Error.Code != CodeToolNotFound || len(r.Error.Message) > 1000 || len(r.Error.ToolName) > 1000 {
				t.Fatalf("got %.300s", describeResult(r))
			}
		}},
		{name: "getTool over many names", code: `for (let i = 0; i < 2000; i++) getTool("t" + i); return 1`, check: wantError(StatusRuntimeError, CodeExecutionError, "tool lookup limit")},
		// --- information ------------------------------------------------------
		{name: "stacks show no engine frames", code: `const out = []; try { [1].map(() => { throw new Error("x") }) } catch (e) { out.push(e.stack) }
			try { await callTool("echo", {fail: true}) } catch (e) { out.push(e.stack) }
			try { "x".repeat(1e9) } catch (e) { out.push(e.stack) }
			return out.join("|")`, check: func(t *testing.T, r *Result) {
			if r.Status != StatusOK || strings.Contains(string(r.Result), "prelude") || strings.Contains(string(r.Result), "github.com") {
				t.Fatalf("got %s", describeResult(r))
			}
		}},
		// --- the nesting pre-scan reads regexp literals ----------------------
		{name: "70 flat replaces of a paren", code: "let s = '((';\n" + flat.String() + "return s", check: wantResult(`""`)},
		{name: "a quote in a regexp hides no nesting", code: `const t = /"/.test("a"); return ` + strings.Repeat("(", 80) + "1" + strings.Repeat(")", 80),
			check: wantError(StatusIllegalAccess, CodeValidationError, "deeper than the limit")},
		{name: "a backtick in a regexp hides no nesting", code: "const t = /`/.test('a');\nreturn " + strings.Repeat("[", 80) + "1" + strings.Repeat("]", 80) + "\n//`",
			check: wantError(StatusIllegalAccess, CodeValidationError, "deeper than the limit")},
	}
}

func runAbuseCases(t *testing.T, e Engine) {
	h := newTestHost(echoTools())
	for _, c := range abuseCases() {
		t.Run(c.name, func(t *testing.T) {
			r, err := e.Execute(context.Background(), Request{Code: c.code, Limits: c.limits}, h)
			if err != nil {
				t.Fatalf("engine error: %v", err)
			}
			c.check(t, r)
			assertServes(t, e)
		})
	}
}

// TestAbuseInProcess: the in-process engine survives every case, and no
// goroutine of a stopped run keeps going (issue 10: seven cases killed the
// gateway, two left it burning CPU after answering).
func TestAbuseInProcess(t *testing.T) {
	e := NewInProcess(&Options{Limits: limitsForRace()}).(*InProcess)
	before := runtime.NumGoroutine()
	runAbuseCases(t, e)
	if n := e.Abandoned(); n != 0 {
		t.Errorf("%d runs abandoned in a built-in", n)
	}
	// Close ends the engine's idle goroutines (kept for the next script);
	// a run's goroutine still going would still be counted.
	e.Close()
	waitGoroutines(t, before)
}

// TestAbuseWorkers: the same cases through the worker pool.
func TestAbuseWorkers(t *testing.T) {
	var memory int64
	if raceEnabled {
		memory = 1 << 30 // the race runtime's shadow memory counts against RLIMIT_DATA
	}
	runAbuseCases(t, newRealPool(t, PoolOptions{
		RuntimePoolOptions: RuntimePoolOptions{MinSize: 1, MaxSize: 2},
		Engine:             &Options{Limits: limitsForRace()},
		MemoryBytes:        memory,
	}))
}

// limitsForRace leaves the secure preset as it is, but gives the race
// detector's slower runs room: the cases assert what stops a script, not
// how fast ("30 MB tool name" once outran 12 s under -race on a loaded
// machine).
func limitsForRace() Limits {
	if raceEnabled {
		return Limits{Timeout: attackTimeout}
	}
	return Limits{}
}

// waitGoroutines polls until the goroutine count is back to before (a
// leak never comes back).
func waitGoroutines(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for runtime.NumGoroutine() > before+2 {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("goroutines: %d, before %d\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestCompilationInsideTheBudget: compiling counts as running time, so a
// source that takes long to compile ends with TIMEOUT at the CPU limit.
func TestCompilationInsideTheBudget(t *testing.T) {
	e := NewInProcess(&Options{Preset: PresetExperimental, Limits: Limits{CPUTime: time.Millisecond}})
	var src strings.Builder
	for i := range 14000 {
		fmt.Fprintf(&src, "const v%d = [%d, {a: %d}];\n", i, i, i)
	}
	r, err := e.Execute(context.Background(), Request{Code: src.String() + "return 1"}, newTestHost(nil))
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != StatusTimeout || !strings.Contains(r.Error.Message, "1 ms") {
		t.Fatalf("got %s", describeResult(r))
	}
}

// TestCPUTimeExcludesWaits: a script that waits for a slow tool longer
// than its CPU time succeeds (waiting costs no CPU), while one that runs
// for as long is stopped.
func TestCPUTimeExcludesWaits(t *testing.T) {
	h := newTestHost(map[string]func(json.RawMessage) (json.RawMessage, error){
		"slow": func(json.RawMessage) (json.RawMessage, error) {
			time.Sleep(300 * time.Millisecond)
			return json.RawMessage(`1`), nil
		},
	})
	e := NewInProcess(&Options{Limits: Limits{Timeout: 20 * time.Second, CPUTime: 200 * time.Millisecond}})
	r, err := e.Execute(context.Background(), Request{Code: `return (await callTool("slow")) + (await callTool("slow"))`}, h)
	if err != nil || r.Status != StatusOK || string(r.Result) != "2" {
		t.Fatalf("waiting script: %v %s", err, describeResult(r))
	}
	r, _ = e.Execute(context.Background(), Request{Code: `for (;;) /(?=(a+)+b)/.test("a".repeat(24))`}, h)
	if r.Status != StatusTimeout || !strings.Contains(r.Error.Message, "200 ms of running time") {
		t.Fatalf("running script: %s", describeResult(r))
	}
}

// TestWorkerTimeZoneIsUTC: a worker's scripts see UTC whatever the zone
// of the machine.
func TestWorkerTimeZoneIsUTC(t *testing.T) {
	p := newRealPool(t, PoolOptions{Env: []string{"TZ=America/New_York"}})
	r := mustRun(t, p, `return [new Date(0).getTimezoneOffset(), new Date(0).toString()]`, newTestHost(nil))
	if r.Status != StatusOK || !strings.HasPrefix(string(r.Result), `[0,`) {
		t.Fatalf("got %s", describeResult(r))
	}
}
