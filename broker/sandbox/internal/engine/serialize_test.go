package engine

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestSerializeCounters: the prelude's serializer counts with a native
// counter (no replacer: callTool input, the script result, JSON.stringify)
// or a JavaScript one (a replacer function of the script's). Both must give
// the same output and stop the same walks with the same errors; each case
// runs once through each (replacer "(k, v) => v" selects the JavaScript
// counter without changing the output).
func TestSerializeCounters(t *testing.T) {
	// A 16 MiB memory limit caps strings at 4 M characters: the walks
	// stopped by the size limit stay short under the race detector.
	engine := NewInProcess(&Options{Limits: Limits{MemoryBytes: 16 << 20, Timeout: 30 * time.Second, CPUTime: 30 * time.Second}})
	t.Cleanup(func() { _ = engine.Close() })
	cases := []struct {
		name, value string // value: a JavaScript expression; it may use statements before it via prep
		prep        string
		want        string // the JSON text, or "error: <substring>"
		nativeOnly  bool
	}{
		{name: "plain", value: `{a: [1, "x", {b: null}], c: undefined, d: () => 1, e: new Date(0), f: NaN, g: [undefined, () => 1, Symbol("s")]}`,
			want: `{"a":[1,"x",{"b":null}],"e":"1970-01-01T00:00:00.000Z","f":null,"g":[null,null,null]}`},
		{name: "symbol property omitted", value: `{s: Symbol("x"), t: 1}`, want: `{"t":1}`},
		{name: "functions of every kind", value: `[function () {}, async () => 1, async function () {}, function* () {}, class K {}, new Proxy(() => 1, {}), (() => 1).bind(null)]`,
			want: `[null,null,null,null,null,null,null]`},
		{name: "toJSON serializing inside", value: `{a: {toJSON() { return JSON.stringify({b: [1, 2]}) }}, c: [3]}`, want: `{"a":"{\"b\":[1,2]}","c":[3]}`},
		{name: "getter serializing inside", value: `{get a() { return JSON.stringify([{x: 1}]) }, b: {c: {d: 1}}}`, want: `{"a":"[{\"x\":1}]","b":{"c":{"d":1}}}`},
		{name: "proxy", value: `new Proxy({a: 1}, {get(t, k) { return k === "a" ? 2 : t[k] }})`, want: `{"a":2}`},
		{name: "unicode", value: `{"\u00e9\ud83d\ude00": "\ud800\u2028\n"}`, want: "{\"\u00e9\U0001F600\":\"\\ud800\u2028\\n\"}"},
		{name: "depth limit", prep: `let a = {}; for (let i = 0; i < 1500; i++) a = {a};`, value: `a`,
			want: "error: nests deeper than the limit of 1000 levels"},
		{name: "depth just inside", prep: `let a = 1; for (let i = 0; i < 1000; i++) a = [a];`, value: `a`, want: strings.Repeat("[", 1000) + "1" + strings.Repeat("]", 1000)},
		{name: "depth just past", prep: `let a = 1; for (let i = 0; i < 1001; i++) a = [a];`, value: `a`, want: "error: nests deeper than the limit of 1000 levels"},
		{name: "shared references past the size limit", prep: `let a = ["x".repeat(1000)]; for (let i = 0; i < 40; i++) a = [a, a];`, value: `a`,
			want: "error: is larger than the limit of"},
		// (through the script's replacer the step limit ends it first)
		{name: "sparse array of holes past the size limit", prep: `const a = []; a.length = 2 ** 32 - 1;`, value: `a`,
			want: "error: is larger than the limit of", nativeOnly: true},
		{name: "BigInt", value: `{a: {n: 1n}}`, want: "error: BigInt"},
		{name: "getter that throws", value: `{get a() { throw new RangeError("mine") }}`, want: "error: mine"},
		// A failure is read after the walk's state is gone: an inner walk
		// stopped by its counter says nothing about the outer one's failure.
		{name: "inner walk stopped, outer getter throws", prep: `let big = ["x".repeat(1000)]; for (let i = 0; i < 40; i++) big = [big, big];`,
			value: `{a: {toJSON() { try { JSON.stringify(big) } catch (e) {} return 1 }}, get b() { throw new RangeError("mine") }}`, want: "error: RangeError: mine"},
		{name: "inner walk stopped, its error through the outer", prep: `let big = ["x".repeat(1000)]; for (let i = 0; i < 40; i++) big = [big, big];`,
			value: `{a: {toJSON() { return JSON.stringify(big) }}}`, want: "error: is larger than the limit of"},
		{name: "after a failure the next one works", prep: `let big = ["x".repeat(1000)]; for (let i = 0; i < 40; i++) big = [big, big];
			try { JSON.stringify(big) } catch (e) {}
			let deep = {}; for (let i = 0; i < 1500; i++) deep = {deep};
			try { JSON.stringify(deep) } catch (e) {}`, value: `{ok: [1, {two: 2}]}`, want: `{"ok":[1,{"two":2}]}`},
	}
	for _, tc := range cases {
		for _, counter := range []struct{ name, replacer string }{{"native", ""}, {"script", ", (k, v) => v"}} {
			if tc.nativeOnly && counter.replacer != "" {
				continue
			}
			t.Run(tc.name+"/"+counter.name, func(t *testing.T) {
				code := tc.prep + "\ntry { return JSON.stringify(" + tc.value + counter.replacer + ") } catch (e) { return 'error: ' + e.name + ': ' + e.message }"
				r, err := engine.Execute(context.Background(), Request{Code: code}, newTestHost(nil))
				if err != nil || r.Status != StatusOK {
					t.Fatalf("%v %s", err, describeResult(r))
				}
				var got string
				if err := json.Unmarshal(r.Result, &got); err != nil {
					t.Fatal(err)
				}
				if strings.HasPrefix(tc.want, "error: ") {
					if !strings.HasPrefix(got, "error: ") || !strings.Contains(got, strings.TrimPrefix(tc.want, "error: ")) {
						t.Fatalf("got %q, want an error containing %q", got, tc.want)
					}
					return
				}
				if got != tc.want {
					t.Fatalf("got %s, want %s", got, tc.want)
				}
			})
		}
	}
}

// TestSerializeStrict: callTool input and the script result are serialized
// strictly (a BigInt or Symbol anywhere is an error naming its key) and
// within their own limits, with the errors scripts have always seen.
// The time limits are backstops: serializing the too-large result up to
// the 1 MiB bound under -race at load 20 ran past the secure preset's 3.5 s.
func TestSerializeStrict(t *testing.T) {
	engine := NewInProcess(&Options{Limits: Limits{Timeout: 2 * time.Minute, CPUTime: 2 * time.Minute}})
	t.Cleanup(func() { _ = engine.Close() })
	cases := []struct{ name, code, want string }{
		{"input BigInt", `try { await callTool("echo", {a: {n: 1n}}) } catch (e) { return e.name + ": " + e.message }`,
			`TypeError: callTool("echo") input: cannot serialize a BigInt (at key "n") to JSON`},
		{"input Symbol", `try { await callTool("echo", [Symbol("s")]) } catch (e) { return e.name + ": " + e.message }`,
			`TypeError: callTool("echo") input: cannot serialize a Symbol (at key "0") to JSON`},
		{"input BigInt at the root", `try { await callTool("echo", 5n) } catch (e) { return e.name + ": " + e.message }`,
			`TypeError: callTool("echo") input: cannot serialize a BigInt to JSON`},
		{"input too deep", `let a = {}; for (let i = 0; i < 1500; i++) a = {a}; try { await callTool("echo", a) } catch (e) { return e.name + ": " + e.message }`,
			`RangeError: callTool("echo") input nests deeper than the limit of 1000 levels`},
		{"input failing after a call made by its toJSON", `try { await callTool("echo", {a: {toJSON() { callTool("add", {}); return 1 }}, b: 1n}) } catch (e) { return e.name + ": " + e.message }`,
			`TypeError: callTool("echo") input: cannot serialize a BigInt (at key "b") to JSON`},
		{"input function", `return await callTool("echo", {f() {}, a: [() => 1]})`, `{"a":[null]}`},
		{"input getter that throws", `try { await callTool("echo", {get a() { throw new Error("no") }}) } catch (e) { return e.name + ": " + e.message }`,
			`TypeError: callTool("echo") input is not serializable to JSON: no`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := engine.Execute(context.Background(), Request{Code: tc.code}, newTestHost(echoTools()))
			if err != nil || r.Status != StatusOK {
				t.Fatalf("%v %s", err, describeResult(r))
			}
			want, _ := json.Marshal(tc.want)
			if strings.HasPrefix(tc.want, "{") {
				want = []byte(tc.want)
			}
			if string(r.Result) != string(want) {
				t.Fatalf("got %s, want %s", r.Result, want)
			}
		})
	}
	results := []struct{ name, code, want string }{
		{"result Symbol", `return {s: Symbol("x")}`, `the script result: cannot serialize a Symbol (at key "s") to JSON`},
		{"result BigInt", `return [1n]`, `the script result: cannot serialize a BigInt (at key "0") to JSON`},
		{"result too large", `let a = ["x".repeat(1000)]; for (let i = 0; i < 40; i++) a = [a, a]; return a`, `the script result is larger than the limit of`},
	}
	for _, tc := range results {
		t.Run(tc.name, func(t *testing.T) {
			r, err := engine.Execute(context.Background(), Request{Code: tc.code}, newTestHost(nil))
			if err != nil {
				t.Fatal(err)
			}
			wantError(StatusRuntimeError, CodeExecutionError, tc.want)(t, r)
		})
	}
}
