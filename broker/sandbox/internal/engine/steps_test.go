package engine

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dop251/goja"
)

// TestStepCountExact pins what one step is: every loop iteration, every call
// of a function the plan defines (functions, arrows, methods, accessors,
// constructors, generators, async functions, class static blocks) and every
// call of a native function passed to a built-in as a callback. A change in
// how steps are counted must keep these counts.
func TestStepCountExact(t *testing.T) {
	cases := []struct {
		code  string
		steps int64
	}{
		{`return 1`, 0},
		{`for (let i = 0; i < 10; i++) {} return 1`, 10},
		{`for (let i = 0; i < 10; i++) continue; return 1`, 10},
		{`let i = 0; while (i < 10) i++; return i`, 10},
		{`let i = 0; do { i++ } while (i < 10); return i`, 10},
		{`for (const k in {a: 1, b: 2, c: 3}) {} return 1`, 3},
		{`for (const v of [1, 2, 3]) {} return 1`, 3},
		{`outer: for (let i = 0; i < 3; i++) for (let j = 0; j < 3; j++) { if (j == 1) continue outer }; return 1`, 3 + 3*2},
		{`function f() {} f(); f(); return 1`, 2},
		{`const f = () => 1; f(); f(); return 1`, 2},
		{`const f = () => { return 1 }; f(); return 1`, 1},
		{`const o = { m() {}, get g() { return 1 }, set g(v) {} }; o.m(); o.g; o.g = 2; return 1`, 3},
		{`class C { static { } } return 1`, 1},
		{`class C { constructor() {} m() {} } new C().m(); return 1`, 2},
		{`class B { constructor() {} } class D extends B { constructor() { super() } } new D(); return 1`, 2},
		{`function* g() { yield 1; yield 2 } for (const v of g()) {} return 1`, 3},
		{`async function f() { await null } await f(); return 1`, 1},
		{`const f = async () => { for (let i = 0; i < 3; i++) await null }; await Promise.all([f(), f()]); return 1`, 2 + 2*3},
		{`[1, 2, 3].map(x => x); return 1`, 3},
		// Loops the validator rewrites (loops.go) count the same: one step
		// per iteration, none for a test that fails at once.
		{`for (let i = 0; i < 0; i++) {} return 1`, 0},
		{`for (let i = 0; i < 10; i++) { if (i == 4) break } return 1`, 5},
		{`for (var i = 0; i < 10; i++) {} return 1`, 10},
		{`let i = 0; while (i < 10) { i++; if (i % 2) continue } return 1`, 10},
		{`let i = 0; while (i < 0) {} return 1`, 0},
		{`L: for (let i = 0; i < 3; i++) { for (let j = 0; j < 3; j++) if (j == 1) break L } return 1`, 1 + 2},
		{`let n = 0; L: while (n < 3) { n++; for (;;) continue L } return 1`, 3 + 3},
		// Native callbacks are counted by the prelude's wrapper (in Go),
		// JavaScript ones by the plan's counter: both feed one count.
		{`[1, 2, 3].map(Math.abs); [4, 5].forEach(x => x); return 1`, 5},
		{`for (let i = 0; i < 4; i++) [0].forEach(Math.abs); return 1`, 8},
	}
	engine := NewInProcess(&Options{Limits: Limits{MaxSteps: 1000}})
	for _, tc := range cases {
		r, err := engine.Execute(context.Background(), Request{Code: tc.code}, newTestHost(nil))
		if err != nil || r.Status != StatusOK {
			t.Errorf("%s: %v %s", tc.code, err, describeResult(r))
			continue
		}
		if r.Stats.Steps != tc.steps {
			t.Errorf("%s: %d steps, want %d", tc.code, r.Stats.Steps, tc.steps)
		}
	}
}

// TestStepCounterCannotBeBypassed: a plan can neither name, shadow, replace
// nor reset the step counter, and nothing it does to prototypes changes what
// a step does. Every script below would run forever without the counter: it
// must stop at exactly the step past the limit (a reset would show as more
// steps or a timeout, a bypass as a timeout).
func TestStepCounterCannotBeBypassed(t *testing.T) {
	const limit = 1000
	rejected := []string{
		`__cm$step.s`,
		`__cm$step = {}; while (true) {}`,
		`function f(__cm$step) { while (true) {} } f({})`,
		`const { __cm$step } = { __cm$step: {} }; while (true) {}`,
		`const f = (__cm$step = {}) => { while (true) {} }; f()`,
		`let __cm$step = {}; while (true) {}`,
		`class __cm$step {} while (true) {}`,
		`try { while (true) {} } catch (__cm$step) {}`,
	}
	stopped := []string{
		`try { Object.defineProperty(Object.prototype, "s", { get() { return 0 } }) } catch (e) {} while (true) {}`,
		`try { Object.prototype.s = 0 } catch (e) {} while (true) {}`,
		`try { Object.setPrototypeOf(Object.prototype, { get s() { return 0 } }) } catch (e) {} while (true) {}`,
		`try { Array.prototype.forEach = () => 0 } catch (e) {} for (;;) [0].forEach(Math.abs)`,
		`const o = { get x() { for (;;) {} } }; o.x`,
		`function* g() { for (;;) yield 1 } for (const v of g()) {}`,
		`const f = async () => { for (;;) await null }; await Promise.all([f(), f()])`,
		`async function f() { for (;;) await null } await f()`,
		`const f = () => 0; for (;;) { try { f() } catch (e) {} }`,
		`for (;;) { try { for (;;) {} } catch (e) {} finally { continue } }`,
		`[1].map(function again() { for (;;) {} })`,
		`for (;;) [0].forEach(Math.abs)`,
		`class C { static { for (;;) {} } }`,
		// Loops the validator rewrites into do-while loops (loops.go).
		`for (let i = 0; i >= 0; i++) {}`,
		`for (let i = 0; i >= 0; i++) { if (i < 0) break }`,
		`for (var i = 0; i >= 0; i++) { [].map(x => x) }`,
		`let i = 0; while (i >= 0) i++`,
		`L: while (true) { continue L }`,
		`a: b: for (let i = 0; i >= 0; i++) { if (i < 0) break a }`,
		`for (let i = 0; i >= 0; i++) { continue }`,
	}
	engine := NewInProcess(&Options{Limits: Limits{MaxSteps: limit, MaxCallDepth: 50, Timeout: 20 * time.Second}})
	for _, code := range rejected {
		r, err := engine.Execute(context.Background(), Request{Code: code}, newTestHost(nil))
		if err != nil || r.Status != StatusIllegalAccess || r.Error == nil || r.Error.Kind != KindReservedIdentifier {
			t.Errorf("%s: %v %s, want the reserved name refused", code, err, describeResult(r))
		}
	}
	for _, code := range stopped {
		r, err := engine.Execute(context.Background(), Request{Code: code}, newTestHost(nil))
		if err != nil || r.Status != StatusRuntimeError || !strings.Contains(r.Error.Message, "step limit of 1000 ") {
			t.Errorf("%s: %v %s, want the step limit", code, err, describeResult(r))
			continue
		}
		if r.Stats.Steps != limit+1 {
			t.Errorf("%s: stopped after %d steps, want %d", code, r.Stats.Steps, limit+1)
		}
	}
}

// TestStepCounterObject: should a reference to the plan's counter object
// ever leak, writing, deleting, redefining or enumerating its properties
// neither counts nor resets anything, and every read counts one step.
func TestStepCounterObject(t *testing.T) {
	x := newExecution(context.Background(), Limits{MaxSteps: 1000}, Request{}, newTestHost(nil))
	defer x.cancel(nil)
	rt := x.rt
	if err := rt.Set("o", rt.NewDynamicObject(stepCounter{x})); err != nil {
		t.Fatal(err)
	}
	v, err := rt.RunString(`"use strict";
		let refused = 0;
		for (const f of [
			() => { o.s = -1e9 },
			() => { delete o.s },
			() => Object.defineProperty(o, "s", { value: 0 }),
			() => Object.setPrototypeOf(o, null),
		]) { try { f() } catch (e) { refused++ } }
		refused + Object.keys(o).length + Object.getOwnPropertyNames(o).length + ("s" in o ? 100 : 0)`)
	if err != nil {
		t.Fatal(err)
	}
	if x.steps != 0 {
		t.Errorf("writes and enumeration counted %d steps", x.steps)
	}
	if v.ToInteger() < 3 {
		t.Errorf("only %d of the writes were refused", v.ToInteger())
	}
	if _, err := rt.RunString(`o.s; o.s; o.other; o["s"]`); err != nil {
		t.Fatal(err)
	}
	if x.steps != 4 {
		t.Errorf("4 reads counted %d steps", x.steps)
	}
	x.steps = 1000
	_, err = rt.RunString(`o.s; "not reached"`)
	if _, ok := err.(*goja.InterruptedError); !ok {
		t.Fatalf("the read past the limit did not interrupt: %v", err)
	}
}
