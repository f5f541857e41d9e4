package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/dop251/goja"
	"github.com/dop251/goja/ast"
	"github.com/dop251/goja/parser"
)

// loopCases are plans whose loops the validator may rewrite (loops.go),
// each with what tells a wrong rewrite apart: bindings captured per
// iteration, continue and break with and without labels, tests with side
// effects counted, const heads, the temporal dead zone, nesting.
var loopCases = []string{
	`let s = 0; for (let i = 0; i < 10; i++) s += i; return s`,
	`const fs = []; for (let i = 0; i < 3; i++) fs.push(() => i); return fs.map(f => f())`,
	`const fs = []; for (let i = 0, f = () => i; i < 3; i++) fs.push(f); return fs.map(f => f())`,
	`const fs = []; for (let i = 0; i < 3; i++) { if (i == 1) continue; fs.push(() => i) } return fs.map(f => f())`,
	`let s = ""; for (let i = 0; i < 6; i++) { if (i % 2) continue; s += i } return s`,
	`let s = ""; for (let i = 0; i < 6; i++) { if (i == 4) break; s += i } return s`,
	`let n = 0, t = 0; for (let i = 0; (t++, i < 5); i++) n += i; return [n, t]`,
	`let t = 0; for (let i = 0; (t++, i < 0); i++) {} return t`,
	`let s = ""; outer: for (let i = 0; i < 3; i++) for (let j = 0; j < 3; j++) { if (j == 1) continue outer; s += i + "" + j } return s`,
	`let s = ""; outer: for (let i = 0; i < 3; i++) { for (let j = 0; j < 3; j++) { if (i == 1) break outer; s += j } } return s`,
	`let s = ""; a: b: for (let i = 0; i < 4; i++) { if (i == 1) continue b; if (i == 3) break a; s += i } return s`,
	`let s = ""; L: for (let i = 0; i < 4; i++) { switch (i) { case 1: continue L; case 2: break; default: s += i } } return s`,
	`let s = ""; L: for (let i = 0; i < 4; i++) { switch (i) { case 2: break L; default: s += i } } return s`,
	`let i = 9; for (let i = 0; i < 2; i++) {} return i`,
	`let r = []; for (const c = 3; r.length < c;) r.push(r.length); return r`,
	`try { for (const c = 0; c < 2; c++) {} } catch (e) { return e.name }`,
	`try { for (let i = i; i < 2; i++) {} } catch (e) { return e.name }`,
	`var s = 0; for (var i = 0; i < 5; i++) s += i; return [s, i]`,
	`let i, s = 0; for (i = 0; i < 5; i++) s += i; return [s, i]`,
	`let i = 0, s = 0; for (; i < 5;) s += i++; return [s, i]`,
	`let s = 0; for (let i = 0; ; i++) { if (i > 4) break; s += i } return s`,
	`const a = [3, 1, 2]; let m = 0; for (let i = 0; i < a.length; i++) if (a[i] > m) m = a[i]; return m`,
	`const o = {n: 3}; let s = 0; for (let i = 0; i < o.n; i++) { if (i == 1) o.n = 5; s += i } return s`,
	"let s = 0; const tag = (x) => { s++; return x }; for (let i = 0; tag`x` && i < 3; i++) {} return s",
	`let s = 0; for (let i = 0; i < 3 && (() => true)(); i++) s++; return s`,
	`let i = 0, s = ""; while (i < 5) { i++; if (i == 2) continue; s += i } return s`,
	`let i = 0, s = ""; L: while (i < 5) { i++; for (;;) { if (i == 3) continue L; break } s += i } return s`,
	`let i = 0, s = ""; a: b: while (i < 5) { i++; if (i == 2) continue b; if (i == 4) break a; s += i } return s`,
	`let t = 0, i = 0; while ((t++, i++ < 3)) {} return [t, i]`,
	`let m, s = ""; const re = /a(\d)/g; while ((m = re.exec("a1 a2 a3")) !== null) s += m[1]; return s`,
	`let i = 0; const fs = []; while (i < 3) { const j = i++; fs.push(() => j) } return fs.map(f => f())`,
	`let n = 0; if (n < 1) for (let i = 0; i < 3; i++) n++; else for (let i = 0; i < 3; i++) n--; return n`,
	`let n = 0; for (let i = 0; i < 3; i++) for (let j = 0; j < 3; j++) while (n < i * j) n++; return n`,
	`async function f() { let s = 0; for (let i = 0; i < 3; i++) s += await i; return s } return await f()`,
	`function* g() { for (let i = 0; i < 3; i++) yield i } return [...g()]`,
	`let s = 0; for (let i = 0; i < 3; i++) { class C { m() { return i } } s += new C().m() } return s`,
	`let s = 0; for (let i = 0; i < 3; i++) { function f() { return i } s += f() } return s`,
	`let s = 0; for (let i = 0; i < 3n ** 1n; i++) s += i; return s`,
	`try { for (let i = 0; i < undefinedName; i++) {} } catch (e) { return e.name }`,
	`let s = 0; for (let i = 0; i < 3; i++) { let i = 10; s += i } return s`,
	`let s = 0; switch (1) { case 1: for (let i = 0; i < 3; i++) s += i }; return s`,
	`let s = 0, k = 0; do for (let i = 0; i < 3; i++) s += i; while (++k < 2); return s`,
	`let s = 0; try { for (let i = 0; i < 3; i++) { if (i == 2) throw i; s += i } } catch (e) { s += 10 * e } return s`,
	`let s = 0; for (let i = 0; i < 3; i++) L: { if (i == 1) break L; s += i } return s`,
	`const fs = []; for (var i = 0, f = () => i; i < 3; i++) fs.push(f()); return [fs, f()]`,
	`const o = {a: 1, b: 2}; let n = 0; while ("a" in o) { n++; delete o.a } return n`,
	`const o = {a: 1}; let n = 0; while (delete o.a && n < 3) n++; return n`,
	`let s = 0; for (let i = 0; i < 3; i++) ; return s`,
}

// TestLoopRewritesKeepSemantics runs each plan in the sandbox and the same
// source unchanged in a bare goja runtime (strict, in an async function):
// the results must be equal.
func TestLoopRewritesKeepSemantics(t *testing.T) {
	engine := NewInProcess(&Options{Limits: Limits{MaxSteps: 100000}})
	for _, code := range loopCases {
		r, err := engine.Execute(context.Background(), Request{Code: code}, newTestHost(nil))
		if err != nil || r.Status != StatusOK {
			t.Errorf("%s: %v %s", code, err, describeResult(r))
			continue
		}
		want := bareGojaResult(t, code)
		if got := string(r.Result); got != want {
			t.Errorf("%s: sandbox %s, bare goja %s", code, got, want)
		}
	}
}

// bareGojaResult runs code as the body of a strict async function in a
// fresh goja runtime and returns its result as JSON.
func bareGojaResult(t *testing.T, code string) string {
	t.Helper()
	rt := goja.New()
	_, err := rt.RunString(`"use strict"; var out; (async function() {` + code + "\n})().then(v => { out = JSON.stringify(v) }, e => { out = 'threw ' + e })")
	if err != nil {
		t.Fatalf("%s: bare goja: %v", code, err)
	}
	v := rt.Get("out")
	var raw json.RawMessage
	if err := json.Unmarshal([]byte(v.String()), &raw); err != nil {
		t.Fatalf("%s: bare goja: %s", code, v)
	}
	return v.String()
}

// TestLoopRewrites pins which loops are rewritten and into what (the shape
// of the statement after validation; loops.go says why each condition).
func TestLoopRewrites(t *testing.T) {
	cases := []struct{ code, shape string }{
		{`for (let i = 0; i < 3; i++) {}`, "{let if(do-while)}"},
		{`for (const c = 0; c < 3;) break`, "{let if(do-while)}"},
		{`for (var i = 0; i < 3; i++) {}`, "{var if(do-while)}"},
		{`let i; for (i = 0; i < 3; i++) {}`, "{expr if(do-while)}"},
		{`let i = 0; for (; i < 3; i++) {}`, "{if(do-while)}"},
		{`while (true) {}`, "if(do-while)"},
		{`let i = 0; while (i < 3) { i++; continue }`, "if(do-while)"},
		{`L: while (true) { continue L }`, "if(L:do-while)"},
		{`a: b: for (let i = 0; i < 3; i++) { break a }`, "{let if(a:b:do-while)}"},
		// Continue: the let moves out, the loop stays a for.
		{`for (let i = 0; i < 3; i++) { continue }`, "{let for}"},
		{`L: for (let i = 0; i < 3; i++) { continue L }`, "{let L:for}"},
		// No test: nothing to rotate.
		{`for (let i = 0; ; i++) { break }`, "{let for}"},
		{`for (;;) { break }`, "for"},
		// A closure anywhere in the loop keeps a let in the head.
		{`for (let i = 0; i < 3; i++) { [].map(x => x) }`, "for"},
		{`for (let i = 0, f = () => 0; i < 3; i++) {}`, "for"},
		{`for (let i = 0; i < 3; i++) { class C {} }`, "for"},
		{`for (let i = 0; i < 3; i++) { function f() {} }`, "for"},
		{`for (var i = 0; i < 3; i++) { [].map(x => x) }`, "{var if(do-while)}"},
		// Tests that may not be written twice.
		{`for (let i = 0; i < [].length; i++) {}`, "{let for}"},
		{"const tag = (x) => x; for (var i = 0; tag`x` && i < 3; i++) {}", "for"},
		{`while ((() => false)()) {}`, "while"},
		{`while (/a/.test("b")) {}`, "while"},
		{`while ({}.x) {}`, "while"},
	}
	for _, tc := range cases {
		src := planPrefix + tc.code + planSuffix
		prog, err := parser.ParseFile(nil, planFileName, src, 0, parser.WithDisableSourceMaps)
		if err != nil {
			t.Fatalf("%s: %v", tc.code, err)
		}
		body, ok := planBody(prog, tc.code)
		if !ok {
			t.Fatalf("%s: no plan body", tc.code)
		}
		v := &validator{file: prog.File}
		v.stmts(body.List)
		if v.fail != nil {
			t.Fatalf("%s: %s", tc.code, describeResult(v.fail))
		}
		last := body.List[len(body.List)-1]
		if got := loopShape(last); got != tc.shape {
			t.Errorf("%s: %s, want %s", tc.code, got, tc.shape)
		}
	}
}

// loopShape names the statements a loop became, down to the loop.
func loopShape(s ast.Statement) string {
	switch s := s.(type) {
	case *ast.BlockStatement:
		var parts []string
		for _, x := range s.List {
			parts = append(parts, loopShape(x))
		}
		return "{" + strings.Join(parts, " ") + "}"
	case *ast.LexicalDeclaration:
		return "let"
	case *ast.VariableStatement:
		return "var"
	case *ast.ExpressionStatement:
		return "expr"
	case *ast.IfStatement:
		return "if(" + loopShape(s.Consequent) + ")"
	case *ast.LabelledStatement:
		return s.Label.Name.String() + ":" + loopShape(s.Statement)
	case *ast.DoWhileStatement:
		return "do-while"
	case *ast.ForStatement:
		return "for"
	case *ast.WhileStatement:
		return "while"
	}
	return fmt.Sprintf("%T", s)
}
