package engine

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dop251/goja"
)

// TestGatedGlobalsNamed: every way a plan can refer to a global counts as
// naming it; property names and strings do not (they cannot reach the
// global).
func TestGatedGlobalsNamed(t *testing.T) {
	cases := []struct {
		code  string
		named uint32
	}{
		{`return 1 + 1`, 0},
		{`return typeof Reflect`, globalReflect},
		{`const {apply} = Reflect; return 1`, globalReflect},
		{`const o = {JSON}; return 1`, globalJSON},
		{`const {a = Proxy} = {}; return 1`, globalProxy},
		{"return `${escape}`", globalEscape},
		{`return [1].map(x => encodeURI)`, globalEncodeURI},
		{`class K { m() { return encodeURIComponent } } return 1`, globalEncodeURIComponent},
		{`async function f() { return await callTool("x") } return 1`, globalCallTool},
		{`return (() => () => getTool)()()`, globalGetTool},
		{`return [searchTools, describeTool, __safe_parallel, console, metaContext]`,
			globalSearchTools | globalDescribeTool | globalSafeParallel | globalConsole | globalMetaContext},
		{`try { null.x } catch (e) { return e instanceof TypeError || e instanceof Error }`, globalTypeError | globalError},
		{`return [RangeError, SyntaxError, Number(1), Boolean(0)]`, globalRangeError | globalSyntaxError | globalNumber | globalBoolean},
		{`\u0052eflect; return 1`, globalReflect},
		{`return String(2n ** 3n)`, globalBigInt},
		{`return typeof BigInt`, globalBigInt},
		// Not references to the globals.
		{`const o = {Reflect: 1, JSON: 2}; return [o.Reflect, o["Proxy"], "console", o.callTool]`, 0},
		{`// Reflect JSON console
		return 1`, 0},
	}
	for _, tc := range cases {
		plan, r := compilePlan(tc.code, presets[PresetSecure])
		if r != nil {
			t.Fatalf("%s: %s", tc.code, describeResult(r))
		}
		if want := gatedGlobalsAll &^ tc.named; plan.unnamed != want {
			t.Errorf("%s: unnamed %#x, want %#x", tc.code, plan.unnamed, want)
		}
	}
	seen := uint32(0)
	for name, bit := range gatedGlobals {
		if bit == 0 || bit&(bit-1) != 0 || bit&gatedGlobalsAll != bit || seen&bit != 0 {
			t.Errorf("%s: bit %#x is not a single bit of its own", name, bit)
		}
		seen |= bit
	}
	if seen != gatedGlobalsAll {
		t.Errorf("bits %#x, want %#x", seen, gatedGlobalsAll)
	}
}

// TestGatedGlobalsPrepared: configure prepares each gated global exactly
// when its bit says the plan names it (so the prelude's bit values match
// globals.go), and a configuration without the analysis prepares all.
func TestGatedGlobalsPrepared(t *testing.T) {
	// prepared reports whether name is in the state configure gives a plan
	// that names it: defined (the script API) or wrapped (the built-ins).
	prepared := func(rt *goja.Runtime, name string) bool {
		var fn goja.Value
		switch name {
		case "Reflect":
			fn = rt.Get("Reflect").ToObject(rt).Get("apply")
		case "JSON":
			fn = rt.Get("JSON").ToObject(rt).Get("parse")
		case "Proxy", "encodeURIComponent", "encodeURI", "escape":
			fn = rt.Get(name)
		default:
			v := rt.Get(name)
			return v != nil && !goja.IsUndefined(v)
		}
		return !strings.Contains(fn.String(), "[native code]")
	}
	setUp := func(t *testing.T, unnamed uint32, omit bool) *goja.Runtime {
		x := newExecution(context.Background(), presets[PresetSecure], Request{}, nil)
		if err := x.runPrelude(); err != nil {
			t.Fatal(err)
		}
		if omit {
			if _, err := x.prelude.configure(goja.Undefined(), x.rt.ToValue(`{}`), x.rt.NewObject()); err != nil {
				t.Fatal(err)
			}
			return x.rt
		}
		x.unnamed = unnamed
		if _, _, _, _, res, err := x.setup(false); res != nil || err != nil {
			t.Fatalf("setup: %v %v", res, err)
		}
		return x.rt
	}
	for name, bit := range gatedGlobals {
		switch name {
		case "Error", "TypeError", "RangeError", "SyntaxError", "Number", "Boolean":
			continue // captured, not changed: TestGatedGlobalsRebound
		case "BigInt":
			continue // prepared by the Go side: the attack suite's BigInt cases
		}
		t.Run(name, func(t *testing.T) {
			if !prepared(setUp(t, gatedGlobalsAll&^bit, false), name) {
				t.Errorf("%s named but not prepared", name)
			}
			if rt := setUp(t, gatedGlobalsAll, false); prepared(rt, name) {
				t.Errorf("%s not named but prepared", name)
			}
			if rt := setUp(t, bit, false); prepared(rt, name) {
				t.Errorf("%s prepared when only it is unnamed", name)
			}
			if !prepared(setUp(t, 0, true), name) {
				t.Errorf("%s not prepared without the analysis", name)
			}
		})
	}
}

// TestGatedGlobalsRebound: what the prelude reads lazily is captured before
// the plan runs when the plan names it, so a plan that rebinds or rewrites
// those globals changes nothing the prelude does; and a plan that does not
// name them cannot reach them, also not through other routes.
//
// The time limits are backstops, not the subject: the hardened encoders'
// cases build a 5M-character string (just past what the secure preset's
// string cap lets them encode), which under -race at load 17 ran past the
// preset's 3.5 s in four rounds of ten.
func TestGatedGlobalsRebound(t *testing.T) {
	engine := NewInProcess(&Options{Limits: Limits{Timeout: 2 * time.Minute, CPUTime: 2 * time.Minute}})
	defer engine.Close()
	cases := []execCase{
		{name: "Reflect rebound", code: `const R = Reflect; Reflect = null; return [[1, 2, 3].map(x => x * 2), "ab".repeat(2), R.apply((a, b) => a + b, null, [1, 2])]`,
			status: StatusOK, result: `[[2,4,6],"abab",3]`},
		{name: "Reflect.apply rewritten", code: `Reflect.apply = () => "mine"; Reflect.construct = null; return [[3, 1].sort(), [1].concat([2]), "a,b".split(",")]`,
			status: StatusOK, result: `[[1,3],[1,2],["a","b"]]`},
		{name: "Reflect not named, Function.prototype rewritten", code: `const FP = Object.getPrototypeOf(() => 1); FP.call = null; FP.apply = null; FP.bind = null; return [[1, 2].map(x => x + 1), "x".repeat(3)]`,
			status: StatusOK, result: `[[2,3],"xxx"]`},
		{name: "Reflect not named, limits hold", code: `const a = []; a.length = 2 ** 32 - 1; return a.indexOf(1)`,
			status: StatusRuntimeError, errName: "RangeError", message: "exceeds the sandbox limit"},
		{name: "RangeError rebound", code: `const R = RangeError; RangeError = function () { return {fake: 1} }; try { "x".repeat(1e12) } catch (e) { return [e instanceof R, e.name] }`,
			status: StatusOK, result: `[true,"RangeError"]`},
		{name: "RangeError not named, reached and rewritten", code: `let R; try { "x".repeat(1e12) } catch (e) { R = e["constr" + "uctor"] } R.prototype.name = "Mine"; try { "x".repeat(1e12) } catch (e) { return [e instanceof R, e.name, e.message.indexOf("exceeds") > 0] }`,
			status: StatusOK, result: `[true,"Mine",true]`},
		{name: "TypeError rebound", code: `const T = TypeError; TypeError = function () { return {fake: 1} }; try { await callTool(1) } catch (e) { return [e instanceof T, e.message] }`,
			status: StatusOK, result: `[true,"callTool: the tool name must be a string"]`},
		{name: "SyntaxError rebound", code: `const S = SyntaxError; SyntaxError = null; try { "a".search("(") } catch (e) { return [e instanceof S, e.name] }`,
			status: StatusOK, result: `[true,"SyntaxError"]`},
		{name: "Error rebound", code: `const E = Error; Error = null; try { await __safe_parallel([() => { throw 1 }]) } catch (e) { return [e instanceof E, e.name] }`,
			status: StatusOK, result: `[true,"ParallelExecutionError"]`},
		{name: "Number rebound", code: `const N = Number; Number = () => "fake"; return JSON.stringify({a: new N(5), b: 1}, ["a", "b"])`,
			status: StatusOK, result: `"{\"a\":5,\"b\":1}"`},
		{name: "Boolean rebound", code: `const B = Boolean; Boolean = () => "fake"; return JSON.stringify({a: new B(false)}, ["a"])`,
			status: StatusOK, result: `"{\"a\":false}"`},
		{name: "JSON rebound", code: `const J = JSON; JSON = {stringify: () => "x", parse: () => 1}; return [J.stringify({a: 1}), await callTool("echo", {b: 2})]`,
			status: StatusOK, result: `["{\"a\":1}",{"b":2}]`},
		{name: "JSON named is hardened", code: `return JSON.parse("[".repeat(5000) + "]".repeat(5000))`,
			status: StatusRuntimeError, errName: "RangeError", message: "JSON.parse"},
		{name: "Proxy named is hardened", code: `let n = 0; const p = new Proxy([1, 2], {get(t, k) { if (k === "length") { n++; return n < 2 ? 2 : 4e9 } return t[k] }}); return Array.prototype.slice.call(p)`,
			status: StatusOK, result: `[1,2]`},
		{name: "encodeURIComponent named is hardened", code: `return encodeURIComponent("\u00e9".repeat(5e6)).length`,
			status: StatusRuntimeError, errName: "RangeError", message: "exceeds the sandbox limit"},
		{name: "encodeURI named is hardened", code: `return encodeURI("\u00e9".repeat(5e6)).length`,
			status: StatusRuntimeError, errName: "RangeError", message: "exceeds the sandbox limit"},
		{name: "escape named is hardened", code: `return escape("\u00e9".repeat(5e6)).length`,
			status: StatusRuntimeError, errName: "RangeError", message: "exceeds the sandbox limit"},
		{name: "console not named stays out of reach", code: `return [typeof this, (function () { return typeof this })(), [1].map(function () { return typeof this })[0]]`,
			status: StatusOK, result: `["undefined","undefined","undefined"]`},
	}
	runExecCases(t, engine, cases)
}
