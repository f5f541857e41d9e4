package engine

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/dop251/goja"
)

// sameAsParse is a JavaScript function (built, text) that reports how the
// value jsonValue built differs from the intrinsic JSON.parse of the same
// text ("" when it does not): prototypes, own keys in order, property
// attributes, array-ness, and primitives by Object.is.
const sameAsParse = `(function () {
	const parse = JSON.parse;
	function diff(a, b, path) {
		if (typeof a !== typeof b) return path + ": typeof " + typeof a + " vs " + typeof b;
		if (a === null || typeof a !== "object") return Object.is(a, b) ? "" : path + ": " + String(a) + " vs " + String(b);
		if (b === null) return path + ": null";
		if (Object.getPrototypeOf(a) !== Object.getPrototypeOf(b)) return path + ": prototype";
		if (Array.isArray(a) !== Array.isArray(b)) return path + ": array";
		const ka = Reflect.ownKeys(a), kb = Reflect.ownKeys(b);
		if (ka.length !== kb.length) return path + ": keys " + JSON.stringify(ka) + " vs " + JSON.stringify(kb);
		for (let i = 0; i < ka.length; i++) {
			if (ka[i] !== kb[i]) return path + ": key " + String(ka[i]) + " vs " + String(kb[i]);
			const da = Object.getOwnPropertyDescriptor(a, ka[i]), db = Object.getOwnPropertyDescriptor(b, kb[i]);
			if (da.writable !== db.writable || da.enumerable !== db.enumerable || da.configurable !== db.configurable) return path + "." + ka[i] + ": attributes";
			const d = diff(da.value, db.value, path + "." + String(ka[i]));
			if (d !== "") return d;
		}
		return "";
	}
	return (built, text) => diff(built, parse(text), "$");
})()`

var jsonValueCorpus = []string{
	`null`, `true`, `false`, `0`, `-0`, `1`, `-1`, `1.5`, `1e3`, `1E-7`, `-2.5e+10`, `9007199254740993`, `123456789012345678901234567890`,
	`0.1`, `5e-324`, `1.7976931348623157e308`, `2147483648`, `-2147483649`, `4294967295`, `1.0`, `100`,
	`""`, `"x"`, `"héllo ☃ 😀"`, `"\u00e9\ud83d\ude00"`, `"\ud800"`, `"\udc00x"`, `"a\"b\\c\/d\b\f\n\r\t"`, `"\u0000"`,
	`[]`, `{}`, ` [ 1 , "a" , null , true , [ ] , { } ] `, "\t{\n\"a\"\r: 1}\n",
	`{"a":1,"b":{"c":[1,2,{"d":null}]}}`, `{"a":1,"a":2}`, `{"a":1,"b":2,"a":3}`, `{"__proto__":{"x":1}}`, `{"__proto__":null,"y":2}`,
	`{"constructor":1,"toString":2,"hasOwnProperty":3,"valueOf":{}}`, `{"0":1,"1":2,"b":3,"10":4,"-1":5,"4294967295":6}`,
	`{"":1,"\u00e9":2,"\ud800":3,"a\nb":4}`, `[[[[[[[[[[1]]]]]]]]]]`, `[1,[2,[3,[4]]],{"a":[{"b":[]}]}]`,
	`{"id":7,"name":"Ada","email":"ada@example.com","tags":["a","b"],"active":true,"score":98.5,"address":{"city":"X","zip":"12345"}}`,
}

// TestJSONValueMatchesParse: what jsonValue builds is indistinguishable from
// JSON.parse of the same text.
func TestJSONValueMatchesParse(t *testing.T) {
	rt := goja.New()
	v, err := rt.RunString(sameAsParse)
	if err != nil {
		t.Fatal(err)
	}
	cmp, _ := goja.AssertFunction(v)
	for _, text := range jsonValueCorpus {
		checkJSONValue(t, rt, cmp, text)
	}
}

func checkJSONValue(t *testing.T, rt *goja.Runtime, cmp goja.Callable, text string) {
	t.Helper()
	built, ok := jsonValue(rt, text)
	d, err := cmp(goja.Undefined(), builtOrUndefined(built), rt.ToValue(text))
	if !ok {
		// Left to JSON.parse: only where JSON.parse itself refuses.
		if err == nil {
			t.Fatalf("%q: not built, but JSON.parse accepts it", text)
		}
		return
	}
	if err != nil {
		t.Fatalf("%q: built, but JSON.parse says %v", text, err)
	}
	if d.String() != "" {
		t.Fatalf("%q: %s", text, d)
	}
}

func builtOrUndefined(v goja.Value) goja.Value {
	if v == nil {
		return goja.Undefined()
	}
	return v
}

// FuzzJSONValue: the same for any valid JSON text (go test runs the seeds;
// go test -fuzz FuzzJSONValue searches further).
func FuzzJSONValue(f *testing.F) {
	for _, s := range jsonValueCorpus {
		f.Add(s)
	}
	rt := goja.New()
	v, err := rt.RunString(sameAsParse)
	if err != nil {
		f.Fatal(err)
	}
	cmp, _ := goja.AssertFunction(v)
	f.Fuzz(func(t *testing.T, text string) {
		if !json.Valid([]byte(text)) || checkJSON(text, MaxJSONDepth, 0) != "" {
			if _, ok := jsonValue(rt, text); ok && !json.Valid([]byte(text)) {
				t.Fatalf("%q: invalid JSON built", text)
			}
			return
		}
		checkJSONValue(t, rt, cmp, text)
	})
}

// TestToolResultsAreParsedValues: through the engine, a tool's result is a
// plain value of the script's runtime, immune to setters on
// Object.prototype, and a result JSON.parse refuses is still the tool
// error it always was.
func TestToolResultsAreParsedValues(t *testing.T) {
	engine := NewInProcess(nil)
	t.Cleanup(func() { _ = engine.Close() })
	h := newTestHost(map[string]func(json.RawMessage) (json.RawMessage, error){
		"fixed": func(json.RawMessage) (json.RawMessage, error) {
			return json.RawMessage(`{"id":1,"__proto__":{"polluted":true},"list":[1,"two",{"three":3}],"s":"\ud800\u00e9"}`), nil
		},
		"huge": func(json.RawMessage) (json.RawMessage, error) { return json.RawMessage(`{"n":1e400}`), nil },
	})
	cases := []struct{ name, code, want string }{
		{"plain values", `const r = await callTool("fixed", {});
			return [Object.getPrototypeOf(r) === Object.prototype, Array.isArray(r.list), r.polluted === undefined, Object.keys(r), r.list[2].three, r.s.length, r.s.charCodeAt(0)]`,
			`[true,true,true,["id","__proto__","list","s"],3,2,65533]`},
		{"setters on Object.prototype are not called", `let called = 0;
			Object.defineProperty(Object.prototype, "id", {set(v) { called++ }, get() { return "getter" }, configurable: true});
			const r = await callTool("fixed", {});
			return [called, r.id, Object.getOwnPropertyDescriptor(r, "id").value]`, `[0,1,1]`},
		{"soft result", `return (await callTool("fixed", {}, {throwOnError: false})).data.list`, `[1,"two",{"three":3}]`},
		{"number out of range", `try { return await callTool("huge", {}) } catch (e) { return e.name }`, `"SyntaxError"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := engine.Execute(context.Background(), Request{Code: tc.code}, h)
			if err != nil {
				t.Fatal(err)
			}
			wantResult(tc.want)(t, r)
		})
	}
}
