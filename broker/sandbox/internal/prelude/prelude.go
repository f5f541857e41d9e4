package prelude

// Source runs first in every fresh runtime. It evaluates to a setup
// function that hardens the runtime, defines the script API as read-only
// globals and returns the internal functions the Go side calls (settle,
// result, describe, objSource, configure). The native hooks it receives take
// and return only strings and numbers, and it keeps them in its closure, out
// of the script's reach. It captures the intrinsics it uses before any plan
// code runs, so a plan that rewrites builtins only breaks itself.
//
// setup depends on nothing of a request: a runtime may be set up before its
// request arrives (see the sandbox's warmRuntime). configure, called once
// before the plan runs, brings the request's part: the limits, the
// hardening that only plans with generators or regular expressions need,
// and metaContext. Until then every limit is 0, so nothing can pass a
// check before it is configured.
const Source = `(function () {
"use strict";
return function setup(nat) {
	let allowConsole = false, maxParallel = 0, maxArrayLength = 0, maxStringLength = 0, maxResultBytes = 0,
		maxConsoleBytes = 0, maxJSONDepth = 0, maxErrorChars = 0, configured = false;
	const step = nat.step;
	const G = globalThis;
	const O = Object;
	const defineProperty = O.defineProperty;
	const getPrototypeOf = O.getPrototypeOf;
	const freeze = O.freeze;
	const isFrozen = O.isFrozen;
	const keys = O.keys;
	const getOwnPropertyDescriptor = O.getOwnPropertyDescriptor;
	// Reflect, the error constructors, Number and Boolean are read from the
	// global object when first needed, or by configure when the plan names
	// them: a plan that does not name a global cannot rebind it, so what is
	// read later is what set-up would have read (globals.go). Each built-in
	// touched costs set-up time, and most plans never need these.
	let reflect, reflectConstruct;
	function loadReflect() {
		if (reflect !== undefined) return;
		reflect = G.Reflect;
		apply = reflect.apply;
		reflectConstruct = reflect.construct;
	}
	// apply is Reflect.apply once loaded; until then a stand-in that loads it.
	let apply = function (f, t, a) {
		loadReflect();
		return apply(f, t, a);
	};
	const jsonParse = JSON.parse;
	const jsonStringify = JSON.stringify;
	const isArray = Array.isArray;
	const PromiseC = Promise;
	const promiseAll = Promise.all;
	const promiseReject = Promise.reject;
	let ErrorC, TypeErrorC, RangeErrorC, SyntaxErrorC, NumberC, BooleanC;
	function intrinsic(name) {
		switch (name) {
		case "Error": return ErrorC !== undefined ? ErrorC : (ErrorC = G.Error);
		case "TypeError": return TypeErrorC !== undefined ? TypeErrorC : (TypeErrorC = G.TypeError);
		case "RangeError": return RangeErrorC !== undefined ? RangeErrorC : (RangeErrorC = G.RangeError);
		case "SyntaxError": return SyntaxErrorC !== undefined ? SyntaxErrorC : (SyntaxErrorC = G.SyntaxError);
		case "Number": return NumberC !== undefined ? NumberC : (NumberC = G.Number);
		case "Boolean": return BooleanC !== undefined ? BooleanC : (BooleanC = G.Boolean);
		}
	}
	const StringC = String;
	// Each builtin goja has not yet instantiated costs about a hundred
	// allocations on first touch, so the prelude avoids Map, Set, WeakMap,
	// Symbol, Math and BigInt.
	const arrayPush = Array.prototype.push, arrayJoin = Array.prototype.join, arraySort = Array.prototype.sort;
	const arrayIndexOf = Array.prototype.indexOf;
	const getOwnPropertySymbols = O.getOwnPropertySymbols;
	const mathFloor = (x) => x - x % 1;
	const numberIsFinite = (v) => typeof v === "number" && v - v === 0; // Number.isFinite

	// --- no route to a code factory ---------------------------------------
	function codeGenerationBlocked() {
		throw new (intrinsic("TypeError"))("code generation from strings is disabled in the sandbox");
	}
	// Function and AsyncFunction prototypes here; GeneratorFunction's in
	// configure.
	function blockConstructor(proto) {
		defineProperty(proto, "constructor", {value: codeGenerationBlocked, writable: false, enumerable: false, configurable: false});
	}
	blockConstructor(getPrototypeOf(function () {}));
	blockConstructor(getPrototypeOf(async function () {}));
	delete G.eval;
	delete G.Function;
	// The global object inherits nothing: a name no binding declares is
	// looked up on it, and a getter a plan defines on Object.prototype
	// would run with the global object as this, handing out what strict
	// mode and the blocked identifiers keep out of reach (globals.go).
	O.setPrototypeOf(G, null);

	// --- memory and CPU mitigations (goja built-ins ignore interrupts) -------
	// A native built-in runs in Go: it ignores the interrupt that enforces
	// the time limit and allocates without the heap watchdog seeing it. Each
	// wrapper below converts what the built-in will read ONCE (lengths,
	// counts, receivers, patterns), checks it, and hands the built-in the
	// converted primitive or a snapshot, so a getter, valueOf or proxy that
	// answers differently the second time cannot pass the check with a small
	// value and the built-in with a huge one. Long loops that call back into
	// code (callbacks, comparators, regular-expression scans) are driven so
	// that JavaScript runs between steps and the interrupt is seen.
	const SP = String.prototype, AP = Array.prototype, FP = getPrototypeOf(function () {});
	const strSplit = SP.split;
	const strIndexOf = SP.indexOf, strSlice = SP.slice;
	let proxies; // the proxies this runtime made (a WeakSet once one exists)
	function remember(p) {
		if (proxies === undefined) proxies = new WeakSet();
		proxies.add(p);
	}
	function isProxy(x) { return proxies !== undefined && x !== null && typeof x === "object" && proxies.has(x); }
	// A genuine array's length is a data property no getter or trap can vary.
	const genuine = (x) => isArray(x) && !isProxy(x);
	// clip bounds text the engine passes on (error messages, names).
	function clip(s, n) {
		return s.length > n ? apply(strSlice, s, [0, n]) + "... (" + (s.length - n) + " more characters)" : s;
	}
	function tooLong(what, n) {
		throw new (intrinsic("RangeError"))(what + " of " + n + " exceeds the sandbox limit of " + (what.indexOf("array") >= 0 ? maxArrayLength : maxStringLength));
	}
	// Stacks a script sees never show the engine's own frames.
	const stackFile = "prelude.js";
	function scrub(e) {
		if (e !== null && typeof e === "object" && e instanceof intrinsic("Error")) {
			try {
				const s = e.stack;
				if (typeof s === "string" && apply(strIndexOf, s, [stackFile]) >= 0) {
					const lines = apply(strSplit, s, ["\n"]), kept = [];
					for (let i = 0; i < lines.length; i++) if (apply(strIndexOf, lines[i], [stackFile]) < 0) kept[kept.length] = lines[i];
					e.stack = apply(arrayJoin, kept, ["\n"]);
				}
			} catch (_) {}
		}
		return e;
	}
	const wrapDesc = {value: undefined, writable: true, enumerable: false, configurable: true};
	// wrap replaces obj[name] by a function that runs check(this, args)
	// first; check may rewrite args and returns the receiver to use
	// (undefined keeps this).
	function wrap(obj, name, check) {
		const orig = obj[name];
		if (typeof orig !== "function") return;
		wrapDesc.value = function (...args) {
			// Like the built-ins, the wrappers cannot be called with new.
			if (new.target !== undefined) throw new (intrinsic("TypeError"))("not a constructor");
			try {
				const t = check(this, args, name);
				return apply(orig, t === undefined ? this : t, args);
			} catch (e) {
				throw scrub(e);
			}
		};
		defineProperty(obj, name, wrapDesc);
	}
	// toNum is ToNumber, run once (valueOf runs once; BigInt and Symbol
	// throw as in the built-in).
	const toNum = (v) => +v;
	// lenOf is the length a built-in would use (ToNumber of .length, so
	// {length: "1e9"} counts as 1e9), read once.
	function lenOf(x) {
		if (x === null || x === undefined) return 0;
		const l = x.length;
		if (typeof l === "number") return l;
		if (l === undefined) return 0;
		const n = toNum(l);
		return n === n ? n : 0;
	}
	function toLen(n) {
		if (!(n > 0)) return 0;
		return n > 9007199254740991 ? 9007199254740991 : mathFloor(n);
	}
	// snapshot copies an array-like into a genuine array, reading each
	// index once (holes stay holes).
	function snapshot(o, n) {
		const a = [];
		for (let i = 0; i < n; i++) if (i in o) a[i] = o[i];
		a.length = n;
		return a;
	}
	// arrayThis checks the receiver of an Array.prototype method. Genuine
	// arrays are checked in place; proxies and array-likes are read once
	// into a snapshot the built-in works on (mutating methods refuse them,
	// since a snapshot would not show the mutation).
	function arrayThis(t, mutates, name) {
		if (genuine(t)) {
			if (t.length > maxArrayLength) tooLong("array length", t.length);
			return t;
		}
		if (t === null || t === undefined) return undefined; // the built-in throws
		const o = O(t);
		if (mutates) {
			if (isProxy(o) || !plainLength(o)) throw new (intrinsic("TypeError"))("Array.prototype." + name + " on a proxy or on an array-like with a computed length is not supported in the sandbox");
			const n = lenOf(o);
			if (n > maxArrayLength) tooLong("array length", n);
			return o;
		}
		const n = toLen(lenOf(o));
		if (n > maxArrayLength) tooLong("array length", n);
		return snapshot(o, n);
	}
	// plainLength: length is a data property holding a primitive.
	function plainLength(o) {
		for (let p = o; p !== null; p = getPrototypeOf(p)) {
			if (isProxy(p)) return false;
			const d = getOwnPropertyDescriptor(p, "length");
			if (d !== undefined) return "value" in d && (d.value === null || typeof d.value !== "object");
		}
		return true;
	}
	// Native functions as callbacks run in Go without a step; they get a
	// JavaScript wrapper that counts one step per call and lets the
	// interrupt stop the loop.
	const fnToString = FP.toString;
	function callback(f) {
		if (typeof f !== "function") return f;
		let s = "[native code]";
		try { s = apply(fnToString, f, []); } catch (_) {}
		if (s.length > 200 || apply(strIndexOf, s, ["[native code]"]) < 0) return f;
		return function (...args) { step(); return apply(f, this, args); };
	}
	// str is ToString of a String.prototype receiver, once.
	const str = (t) => (t === null || t === undefined) ? t : StringC(t);
	wrap(SP, "repeat", (t, a) => {
		const s = str(t), n = toNum(a[0]);
		a[0] = n;
		if (s !== undefined && s !== null && s.length * n > maxStringLength) tooLong("string length", s.length * n);
		return s;
	});
	const checkPad = (t, a) => {
		const s = str(t), n = toNum(a[0]);
		a[0] = n;
		if (a.length > 1 && a[1] !== undefined) a[1] = StringC(a[1]);
		if (n > maxStringLength) tooLong("string length", n);
		return s;
	};
	wrap(SP, "padStart", checkPad);
	wrap(SP, "padEnd", checkPad);
	// Every array method loops in Go over the receiver's length, which a
	// sparse array can set to 2^32-1 for free.
	const readOnly = ["at", "entries", "includes", "indexOf", "keys", "lastIndexOf",
		"slice", "toLocaleString", "toReversed", "toSpliced", "toString", "values", "with"];
	const mutating = ["copyWithin", "fill", "reverse", "shift", "splice", "unshift"];
	// Read-only methods whose first argument is a callback.
	const withCallback = ["every", "filter", "find", "findIndex", "findLast", "findLastIndex", "forEach", "map", "reduce", "reduceRight", "some"];
	const apSymbols = getOwnPropertySymbols(AP);
	for (let i = 0; i < apSymbols.length; i++) {
		if (AP[apSymbols[i]] === AP.values) readOnly[readOnly.length] = apSymbols[i];
	}
	const checkReadOnly = (t) => arrayThis(t, false, "");
	const checkWithCallback = (t, a) => {
		a[0] = callback(a[0]);
		return arrayThis(t, false, "");
	};
	const checkMutating = (t, a, name) => arrayThis(t, true, name);
	for (let i = 0; i < readOnly.length; i++) wrap(AP, readOnly[i], checkReadOnly);
	for (let i = 0; i < withCallback.length; i++) wrap(AP, withCallback[i], checkWithCallback);
	for (let i = 0; i < mutating.length; i++) wrap(AP, mutating[i], checkMutating);
	// sort: past sortNativeMax elements the default order runs as a
	// JavaScript comparator, so a huge native sort can be interrupted.
	const sortNativeMax = 10000;
	function defaultCompare(x, y) {
		const a = StringC(x), b = StringC(y);
		return a < b ? -1 : a > b ? 1 : 0;
	}
	const checkSort = (mutates, name) => (t, a) => {
		const r = arrayThis(t, mutates, name);
		const n = r === undefined ? 0 : lenOf(r);
		if (a[0] === undefined) {
			if (n > sortNativeMax) a[0] = defaultCompare;
		} else {
			a[0] = callback(a[0]);
		}
		return r;
	};
	wrap(AP, "sort", checkSort(true, "sort"));
	wrap(AP, "toSorted", checkSort(false, "toSorted"));
	// concat: whether an argument spreads (Symbol.isConcatSpreadable, which a
	// getter may answer differently each time) and its length are read once
	// here; the built-in then gets arguments whose answer cannot change: a
	// plain genuine array, a snapshot, or [v] for a value that does not
	// spread (a one-element array spreads to exactly v).
	let isSpreadableSym;
	function noSpreadSymbol(v) {
		if (getPrototypeOf(v) !== AP || getOwnPropertyDescriptor(v, isSpreadableSym) !== undefined) return false;
		return getOwnPropertyDescriptor(AP, isSpreadableSym) === undefined && getOwnPropertyDescriptor(O.prototype, isSpreadableSym) === undefined;
	}
	wrap(AP, "concat", (t, a) => {
		const r = arrayThis(t, false, "concat");
		let n = r === undefined ? 0 : r.length;
		for (let i = 0; i < a.length; i++) {
			const v = a[i];
			if (v === null || (typeof v !== "object" && typeof v !== "function")) {
				n++;
				continue;
			}
			if (isSpreadableSym === undefined) isSpreadableSym = Symbol.isConcatSpreadable;
			const s = v[isSpreadableSym];
			if (s !== undefined ? !!s : isArray(v)) {
				if (genuine(v) && noSpreadSymbol(v)) {
					n += v.length;
				} else {
					const k = toLen(lenOf(v));
					if (n + k > maxArrayLength) tooLong("array length", n + k);
					a[i] = snapshot(v, k);
					n += k;
				}
			} else {
				a[i] = [v];
				n++;
			}
			if (n > maxArrayLength) tooLong("array length", n);
		}
		return r;
	});
	// join converts each element once here (so toString and getters run
	// once, as in the native join) and counts the output before the native
	// join concatenates: elements may share one big string, or be objects
	// whose toString returns one.
	const origJoin = AP.join;
	const joining = [];
	wrapDesc.value = function (sep) {
		if (new.target !== undefined) throw new (intrinsic("TypeError"))("not a constructor");
		try {
			const o = O(this);
			for (let i = 0; i < joining.length; i++) if (joining[i] === o) return ""; // cycle, as goja does
			const n = toLen(lenOf(o));
			if (n > maxArrayLength) tooLong("array length", n);
			const s = sep === undefined ? "," : StringC(sep);
			let total = n > 0 ? s.length * (n - 1) : 0;
			if (total > maxStringLength) tooLong("string length", total);
			const parts = [];
			joining[joining.length] = o;
			try {
				for (let i = 0; i < n; i++) {
					const v = o[i];
					const text = v === undefined || v === null ? "" : StringC(v);
					total += text.length;
					if (total > maxStringLength) tooLong("string length", total);
					parts[i] = text;
				}
			} finally {
				joining.length--;
			}
			return apply(origJoin, parts, [s]);
		} catch (e) {
			throw scrub(e);
		}
	};
	defineProperty(AP, "join", wrapDesc);
	// flat and flatMap expand shared references ([s, s] nested 40 times
	// flattens to 2^40 elements from a few bytes) and read nested lengths
	// again: they are done here, in JavaScript, counting as they go.
	function flatInto(out, src, depth) {
		const n = toLen(lenOf(src));
		if (n > maxArrayLength) tooLong("array length", n);
		for (let i = 0; i < n; i++) {
			if (!(i in src)) continue;
			const v = src[i];
			if (depth > 0 && isArray(v)) flatInto(out, v, depth - 1);
			else {
				if (out.length >= maxArrayLength) tooLong("flattened array length", out.length + 1);
				out[out.length] = v;
			}
		}
	}
	defineProperty(AP, "flat", {value: function (depth) {
		if (new.target !== undefined) throw new (intrinsic("TypeError"))("not a constructor");
		try {
			const o = O(this);
			let d = depth === undefined ? 1 : toNum(depth);
			if (d !== d) d = 0;
			const out = [];
			flatInto(out, o, d);
			return out;
		} catch (e) {
			throw scrub(e);
		}
	}, writable: true, enumerable: false, configurable: true});
	defineProperty(AP, "flatMap", {value: function (fn, thisArg) {
		if (new.target !== undefined) throw new (intrinsic("TypeError"))("not a constructor");
		try {
			const o = O(this);
			if (typeof fn !== "function") throw new (intrinsic("TypeError"))("flatMap mapper function is not callable");
			const n = toLen(lenOf(o));
			if (n > maxArrayLength) tooLong("array length", n);
			const out = [];
			for (let i = 0; i < n; i++) {
				if (!(i in o)) continue;
				const v = apply(fn, thisArg, [o[i], i, o]);
				if (isArray(v)) flatInto(out, v, 0);
				else {
					if (out.length >= maxArrayLength) tooLong("flattened array length", out.length + 1);
					out[out.length] = v;
				}
			}
			return out;
		} catch (e) {
			throw scrub(e);
		}
	}, writable: true, enumerable: false, configurable: true});
	// Splitting, matching and replacing produce, in one Go call, arrays of up
	// to one element per character and strings of up to (matches x
	// replacement) characters. Bound them before the call.
	const indexOfCall = FP.call.bind(strIndexOf); // (str, pat, from), no argument array
	function countOccurrences(s, pat, max) {
		let n = 0, i = 0;
		while ((i = indexOfCall(s, pat, i)) >= 0) {
			if (++n > max) break;
			i += pat.length;
		}
		return n;
	}
	// Regular expressions: goja runs patterns with lookaround or
	// backreferences on a backtracking matcher whose scans are bounded one
	// by one (regexpMatchTimeout) but which a native split, match or
	// replace runs once per match, in Go. For such patterns the loop over
	// matches runs here instead, a step per scan.
	const objToString = O.prototype.toString;
	const isRegExp = (v) => v !== null && typeof v === "object" && apply(objToString, v, []) === "[object RegExp]";
	// The loops over scans are built on first use: each function a runtime
	// creates costs set-up time, and most plans never use them.
	let reTools;
	function regexpTools() {
		if (reTools !== undefined) return reTools;
		function backtracks(src) {
			if (apply(strIndexOf, src, ["(?="]) >= 0 || apply(strIndexOf, src, ["(?!"]) >= 0 ||
				apply(strIndexOf, src, ["(?<="]) >= 0 || apply(strIndexOf, src, ["(?<!"]) >= 0 || apply(strIndexOf, src, ["\\k<"]) >= 0) return true;
			for (let i = apply(strIndexOf, src, ["\\"]); i >= 0; i = apply(strIndexOf, src, ["\\", i + 2])) {
				const c = src[i + 1];
				if (c >= "1" && c <= "9") return true;
			}
			for (let i = apply(strIndexOf, src, ["{"]); i >= 0; i = apply(strIndexOf, src, ["{", i + 1])) {
				let j = i + 1;
				while (src[j] >= "0" && src[j] <= "9") j++;
				if (j - i > 4) return true; // a repeat count Go's engine refuses
			}
			return false;
		}
		function advance(s, i, unicode) {
			if (!unicode || i + 1 >= s.length) return i + 1;
			const c = s.charCodeAt(i);
			return c >= 0xd800 && c <= 0xdbff ? i + 2 : i + 1;
		}
		function execOnce(re, s) {
			step();
			const exec = re.exec;
			if (typeof exec !== "function") throw new (intrinsic("TypeError"))("RegExp exec method is not a function");
			const m = apply(exec, re, [s]);
			if (m !== null && (typeof m !== "object")) throw new (intrinsic("TypeError"))("RegExp exec method returned something other than an Object or null");
			return m;
		}
		// allMatches runs a global regexp over s (RegExpBuiltinExec's loop).
		function allMatches(re, s) {
			const unicode = apply(strIndexOf, StringC(re.flags), ["u"]) >= 0;
			re.lastIndex = 0;
			const out = [];
			for (;;) {
				const m = execOnce(re, s);
				if (m === null) return out;
				if (out.length >= maxArrayLength) tooLong("array length", out.length + 1);
				out[out.length] = m;
				if (StringC(m[0]) === "") re.lastIndex = advance(s, toLen(re.lastIndex), unicode);
			}
		}
		function slowMatch(re, s) {
			if (apply(strIndexOf, StringC(re.flags), ["g"]) < 0) return execOnce(re, s);
			const ms = allMatches(re, s), out = [];
			for (let i = 0; i < ms.length; i++) out[i] = StringC(ms[i][0]);
			return out.length === 0 ? null : out;
		}
		function slowSplit(re, s, limit) {
			const lim = limit === undefined ? 4294967295 : limit >>> 0;
			const out = [];
			if (lim === 0) return out;
			let flags = StringC(re.flags);
			const unicode = apply(strIndexOf, flags, ["u"]) >= 0;
			if (apply(strIndexOf, flags, ["g"]) < 0) flags += "g";
			flags = apply(arrayJoin, apply(strSplit, flags, ["y"]), [""]);
			const rx = newRegExp(re, flags);
			const size = s.length;
			if (size === 0) {
				rx.lastIndex = 0;
				const m = execOnce(rx, s);
				return m !== null && m.index === 0 ? out : [s];
			}
			let p = 0, q = 0;
			while (q < size) {
				rx.lastIndex = q;
				const m = execOnce(rx, s);
				if (m === null) break;
				const i = toLen(m.index);
				if (i >= size) break;
				let e = toLen(rx.lastIndex);
				if (e > size) e = size;
				if (e === p) {
					q = advance(s, i, unicode);
					continue;
				}
				out[out.length] = apply(strSlice, s, [p, i]);
				if (out.length === lim) return out;
				const k = lenOf(m);
				for (let j = 1; j < k; j++) {
					out[out.length] = m[j];
					if (out.length === lim) return out;
				}
				if (out.length > maxArrayLength) tooLong("array length", out.length);
				p = e;
				q = p;
			}
			out[out.length] = apply(strSlice, s, [p, size]);
			return out;
		}
		// slowMatchAll is matchAll's iterator with next() in JavaScript, so a
		// spread of it (a loop in Go) still runs JavaScript between scans.
		function slowMatchAll(re, s) {
			const flags = StringC(re.flags);
			if (apply(strIndexOf, flags, ["g"]) < 0) throw new (intrinsic("TypeError"))("matchAll must be called with a global RegExp");
			const rx = newRegExp(re, flags);
			rx.lastIndex = toLen(re.lastIndex);
			const unicode = apply(strIndexOf, flags, ["u"]) >= 0;
			let done = false;
			if (iteratorSym === undefined) iteratorSym = Symbol.iterator;
			const it = {next() {
				if (done) return {value: undefined, done: true};
				const m = execOnce(rx, s);
				if (m === null) {
					done = true;
					return {value: undefined, done: true};
				}
				if (StringC(m[0]) === "") rx.lastIndex = advance(s, toLen(rx.lastIndex), unicode);
				return {value: m, done: false};
			}};
			it[iteratorSym] = function () { return this; };
			return it;
		}
		// substitution is GetSubstitution: $$, $&, $ plus backquote and $', $n and $nn, $<name>.
		function substitution(matched, s, pos, caps, named, repl) {
			let out = "";
			for (let i = 0; i < repl.length; i++) {
				const c = repl[i];
				if (c !== "$" || i + 1 >= repl.length) { out += c; continue; }
				const d = repl[i + 1];
				if (d === "$") { out += "$"; i++; }
				else if (d === "&") { out += matched; i++; }
				else if (d === "\x60") { out += apply(strSlice, s, [0, pos]); i++; }
				else if (d === "'") { out += apply(strSlice, s, [pos + matched.length]); i++; }
				else if (d >= "0" && d <= "9") {
					const two = i + 2 < repl.length && repl[i + 2] >= "0" && repl[i + 2] <= "9" ? +(d + repl[i + 2]) : -1;
					if (two >= 1 && two <= caps.length) { const v = caps[two - 1]; out += v === undefined ? "" : v; i += 2; }
					else if (+d >= 1 && +d <= caps.length) { const v = caps[+d - 1]; out += v === undefined ? "" : v; i++; }
					else out += "$";
				} else if (d === "<" && named !== undefined) {
					const end = apply(strIndexOf, repl, [">", i + 2]);
					if (end < 0) { out += "$"; continue; }
					const v = named[apply(strSlice, repl, [i + 2, end])];
					out += v === undefined ? "" : StringC(v);
					i = end;
				} else out += "$";
				if (out.length > maxStringLength) tooLong("string length", out.length);
			}
			return out;
		}
		function slowReplace(re, s, repl) {
			const global = apply(strIndexOf, StringC(re.flags), ["g"]) >= 0;
			let ms;
			if (global) ms = allMatches(re, s);
			else { const m = execOnce(re, s); ms = m === null ? [] : [m]; }
			const fn = typeof repl === "function" ? repl : undefined;
			const replText = fn === undefined ? StringC(repl) : "";
			let acc = "", next = 0;
			for (let i = 0; i < ms.length; i++) {
				const m = ms[i];
				const matched = StringC(m[0]);
				let pos = toLen(toNum(m.index));
				if (pos > s.length) pos = s.length;
				const caps = [], k = toLen(lenOf(m));
				for (let j = 1; j < k; j++) caps[j - 1] = m[j] === undefined ? undefined : StringC(m[j]);
				let named = m.groups;
				let r;
				if (fn !== undefined) {
					const args = [matched];
					for (let j = 0; j < caps.length; j++) args[args.length] = caps[j];
					args[args.length] = pos;
					args[args.length] = s;
					if (named !== undefined) args[args.length] = named;
					r = StringC(apply(fn, undefined, args));
				} else {
					if (named !== undefined) named = O(named);
					r = substitution(matched, s, pos, caps, named, replText);
				}
				if (pos >= next) {
					acc += apply(strSlice, s, [next, pos]) + r;
					next = pos + matched.length;
				}
				if (acc.length > maxStringLength) tooLong("string length", acc.length);
			}
			if (next >= s.length) return acc;
			acc += apply(strSlice, s, [next]);
			if (acc.length > maxStringLength) tooLong("string length", acc.length);
			return acc;
		}
		function slowReplaceAll(re, s, repl) {
			if (apply(strIndexOf, StringC(re.flags), ["g"]) < 0) throw new (intrinsic("TypeError"))("replaceAll must be called with a global RegExp");
			return slowReplace(re, s, repl);
		}
		reTools = {backtracks: backtracks, slowMatch: slowMatch, slowSplit: slowSplit, slowMatchAll: slowMatchAll, slowReplace: slowReplace,
			slowReplaceAll: slowReplaceAll};
		return reTools;
	}
	const slow = (re) => isRegExp(re) && regexpTools().backtracks(StringC(re.source));
	// newRegExp is set below when the plan can make regexps at all.
	let newRegExp = (re, flags) => { const C = getPrototypeOf(re).constructor; return new C(re, flags); };
	// Patterns given as strings become regular expressions inside the
	// built-in: their size and nesting are checked first (regexp2's
	// analyzer recurses once per group).
	function checkPattern(p) {
		const msg = nat.pattern(p);
		if (msg !== "") throw new (intrinsic("SyntaxError"))("Invalid regular expression: " + msg);
	}
	// The checks of String.prototype methods taking a pattern (see wrapRe).
	const checkSplit = (t, a) => {
		const s = str(t), sep = a[0];
		if (s === undefined || s === null) return s;
		if (sep === undefined || (sep !== null && typeof sep === "object")) {
			if (s.length >= maxArrayLength && sep !== undefined) tooLong("array length", s.length + 1);
			return s;
		}
		a[0] = StringC(sep);
		if (s.length < maxArrayLength) return s;
		const n = a[0].length > 0 ? countOccurrences(s, a[0], maxArrayLength) + 1 : s.length + 1;
		if (n > maxArrayLength) tooLong("array length", n);
		return s;
	};
	const checkMatchAll = (t, a) => {
		const s = str(t);
		if (s !== undefined && s !== null && s.length >= maxArrayLength && (typeof a[0] !== "object" || a[0] === null || a[0].global !== false)) tooLong("array length", s.length + 1);
		return s;
	};
	function checkReplace(t, a, name) {
		const all = name === "replaceAll";
		const s = str(t), pat = a[0], repl = a[1];
		if (s === undefined || s === null) return s;
		const isObj = pat !== null && typeof pat === "object";
		if (!isObj) a[0] = StringC(pat);
		if (typeof repl === "function") {
			let total = s.length;
			a[1] = function (...m) {
				const r = StringC(apply(repl, this, m));
				total += r.length;
				if (total > maxStringLength) tooLong("string length", total);
				return r;
			};
			return s;
		}
		const r = StringC(repl);
		a[1] = r;
		// Any object pattern is treated as a regular expression.
		const global = all || (isObj && pat.global !== false);
		// $1, $& and $<name> expand to text of the matches, which do not
		// overlap: at most s.length per "$" in all. "$" + backquote and $'
		// expand to a prefix or suffix of the string per match.
		let dollars = 0, perMatch = r.length;
		for (let i = apply(strIndexOf, r, ["$"]); i >= 0; i = apply(strIndexOf, r, ["$", i + 1])) {
			const next = r[i + 1];
			if (next === "\x60" || next === "'") perMatch += s.length;
			else dollars++;
		}
		const fixed = s.length + dollars * s.length;
		if (fixed > maxStringLength) tooLong("string length", fixed);
		if (!global || perMatch === 0) {
			if (fixed + perMatch > maxStringLength) tooLong("string length", fixed + perMatch);
			return s;
		}
		// Count matches only as far as needed to exceed the limit.
		const needed = mathFloor((maxStringLength - fixed) / perMatch) + 1;
		const p = isObj ? "" : a[0];
		const matches = p === "" ? s.length + 1 : countOccurrences(s, p, needed);
		if (matches >= needed) tooLong("string length", fixed + matches * perMatch);
		return s;
	}
	// wrapRe wraps a String.prototype method taking a pattern. check runs
	// first, as in wrap; then slow regexps take the loop above (the
	// regexpTools function named impl), and strings are checked as patterns
	// when the method compiles them. One wrapper per method: a second
	// layer would cost every runtime a function more per method.
	function wrapRe(name, impl, compiles, check) {
		const orig = SP[name];
		wrapDesc.value = function (...args) {
			if (new.target !== undefined) throw new (intrinsic("TypeError"))("not a constructor");
			try {
				let self = this;
				if (check !== undefined) {
					const t = check(self, args, name);
					if (t !== undefined) self = t;
				}
				if (self === null || self === undefined) return apply(orig, self, args);
				const pat = args[0];
				if (impl !== undefined && slow(pat)) return regexpTools()[impl](pat, StringC(self), args[1]);
				const s = StringC(self);
				if (compiles && (pat === undefined || pat === null || typeof pat !== "object")) checkPattern(pat === undefined ? "(?:)" : StringC(pat));
				return apply(orig, s, args);
			} catch (e) {
				throw scrub(e);
			}
		};
		defineProperty(SP, name, wrapDesc);
	}
	wrapRe("match", "slowMatch", true, checkMatchAll);
	wrapRe("matchAll", "slowMatchAll", true, checkMatchAll);
	wrapRe("search", undefined, true, undefined);
	wrapRe("split", "slowSplit", false, checkSplit);
	wrapRe("replace", "slowReplace", false, checkReplace);
	wrapRe("replaceAll", "slowReplaceAll", false, checkReplace);
	// concat and String.raw convert their arguments once here and count.
	wrap(SP, "concat", (t, a) => {
		const s = str(t);
		if (s === undefined || s === null) return s;
		let n = s.length;
		for (let i = 0; i < a.length; i++) {
			a[i] = StringC(a[i]);
			n += a[i].length;
			if (n > maxStringLength) tooLong("string length", n);
		}
		return s;
	});
	wrap(StringC, "raw", (t, a) => {
		const raw = a[0] === undefined || a[0] === null ? undefined : a[0].raw;
		const parts = toLen(lenOf(raw));
		if (parts > maxArrayLength) tooLong("array length", parts);
		if (parts === 0) return;
		const strs = [];
		let n = 0;
		for (let i = 0; i < parts; i++) {
			strs[i] = StringC(raw[i]);
			n += strs[i].length;
			if (i + 1 < parts && i + 1 < a.length) {
				a[i + 1] = StringC(a[i + 1]);
				n += a[i + 1].length;
			}
			if (n > maxStringLength) tooLong("string length", n);
		}
		a[0] = {raw: strs};
	});
	// Strings as array-likes: one element or key per character.
	const checkStringArg = (v) => {
		if ((typeof v === "string" || v instanceof StringC) && v.length > maxArrayLength) tooLong("array length", v.length);
	};
	const ArrayC = Array;
	wrap(ArrayC, "from", (t, a) => {
		const src = a[0];
		if (a.length > 1) a[1] = callback(a[1]);
		if (src === null || src === undefined) return;
		if (typeof src === "string" || src instanceof StringC) { checkStringArg(src); return; }
		if (genuine(src)) { if (src.length > maxArrayLength) tooLong("array length", src.length); return; }
		if (typeof src !== "object" && typeof src !== "function") return;
		if (iteratorSym === undefined) iteratorSym = Symbol.iterator;
		const m = src[iteratorSym];
		if (m !== undefined && m !== null) {
			// Iterated through next(), which the built-in calls for each
			// element; the method read here is the one used.
			const it = {};
			it[iteratorSym] = function () { return apply(m, src, []); };
			a[0] = it;
			return;
		}
		const n = toLen(lenOf(src));
		if (n > maxArrayLength) tooLong("array length", n);
		a[0] = snapshot(src, n);
	});
	let iteratorSym;
	{
		const sps = getOwnPropertySymbols(SP);
		for (let i = 0; i < sps.length; i++) wrap(SP, sps[i], (t) => { const s = str(t); checkStringArg(s); return s; });
	}
	const objectNames = ["keys", "values", "entries", "getOwnPropertyNames", "assign"];
	const checkStringArgs = (t, a) => { for (let j = 0; j < a.length; j++) checkStringArg(a[j]); };
	for (let i = 0; i < objectNames.length; i++) wrap(O, objectNames[i], checkStringArgs);
	// Spreading an argument list copies it in Go: the list is read once.
	function argList(v) {
		if (v === null || v === undefined) return v;
		if (genuine(v)) {
			if (v.length > maxArrayLength) tooLong("array length", v.length);
			return v;
		}
		if (typeof v !== "object" && typeof v !== "function") return v; // the built-in throws
		const n = toLen(lenOf(v));
		if (n > maxArrayLength) tooLong("array length", n);
		return snapshot(v, n);
	}
	wrap(FP, "apply", (t, a) => { if (a.length > 1) a[1] = argList(a[1]); });

	// --- serialization ------------------------------------------------------
	// goja's native JSON.stringify runs in Go, ignores interrupts and expands
	// shared references, so a small object graph (a DAG of doubling arrays)
	// can produce gigabytes in one call. serialize is JSON.stringify written
	// in JavaScript: interruptible, and bounded by an output size limit.
	const objectKeys = O.keys;
	const ObjectProto = O.prototype;
	const stringSlice = SP.slice;
	const origRepeat = SP.repeat;
	// serialize runs the native JSON.stringify with a replacer that sees
	// every value it emits (after toJSON, before output) and counts an
	// estimate of the output, so a DAG cannot expand past the limit, and
	// the depth (goja's stringify recurses in Go once per level). Without a
	// replacer of the caller's (callTool input, the script result, most
	// JSON.stringify calls) the counter is native (nat.count, jsoncount.go):
	// no JavaScript runs per value, and it looks every few hundred values
	// whether the run was stopped, since the interrupt is seen only where
	// JavaScript runs. A caller's replacer function runs inside a
	// JavaScript counter (counting, below), which is interruptible. Only a
	// property-list replacer, which cannot be combined with a function,
	// takes the slower walk written in JavaScript (serializeJS).
	// nat.text(value, space, limit, strict) is that native walk in one
	// call: the intrinsic JSON.stringify with the counter, its state pushed
	// before and popped after; when the walk threw, nat.countFailure says
	// whether the counter stopped it.
	const natText = nat.text, countFailure = nat.countFailure;
	function serialize(value, replacer, space, what, limit, strict) {
		if (replacer !== undefined) {
			if (isArray(replacer)) return ser().serializeJS(value, replacer, space, what, limit, strict);
			if (typeof replacer === "function") return ser().serializeWith(value, replacer, space, what, limit, strict);
		}
		try {
			return natText(value, space, limit, strict);
		} catch (e) {
			const why = countFailure();
			if (why === "L") ser().serTooLarge({what: what, limit: limit});
			if (why === "D") ser().serTooDeep(what);
			if (why !== "") ser().serFail({what: what}, why[0] === "B" ? "BigInt" : "Symbol", apply(stringSlice, why, [1]));
			throw e;
		}
	}
	// The serializer's slower paths (a caller's replacer) and its errors are
	// made on first use: each function a runtime creates costs set-up time.
	let serTools;
	function ser() {
		if (serTools !== undefined) return serTools;
		function serTooDeep(what) {
			throw new (intrinsic("RangeError"))(whatText(what) + " nests deeper than the limit of " + maxJSONDepth + " levels");
		}
		// serializeWith is serialize with the caller's replacer function, which
		// the counter calls first; the same estimates as nat.count.
		function serializeWith(value, userFn, space, what, limit, strict) {
			let size = 0;
			// holders is the path from the root to the value being written: the
			// walk is depth-first, so the holder of each call is on it.
			const holders = [];
			let depth = 0;
			function counting(key, v) {
				v = apply(userFn, this, [key, v]);
				while (depth > 0 && holders[depth - 1] !== this) depth--;
				if (v !== null && typeof v === "object") {
					if (depth >= maxJSONDepth) serTooDeep(what);
					holders[depth++] = v;
				}
				switch (typeof v) {
				case "string":
					size += v.length + 2;
					break;
				case "number":
					size += 8;
					break;
				case "boolean":
					size += 5;
					break;
				case "object":
					size += v === null ? 4 : 2;
					break;
				case "bigint":
					if (strict) serFail({what: what}, "BigInt", key);
					break;
				case "symbol":
					if (strict) serFail({what: what}, "Symbol", key);
					v = undefined;
					size += 4;
					break;
				default:
					// undefined or a function: written as null in an array
					// (a sparse array of 2^32-1 holes is 4 bytes each) and
					// omitted in an object; counted as null either way.
					size += 4;
				}
				size += key.length + 3;
				if (size > limit) serTooLarge({what: what, limit: limit});
				return v;
			}
			return jsonStringify(value, counting, space);
		}

		// Serialization state is one object per call; the functions below are
		// created once per runtime, not per call.
		function serializeJS(value, replacer, space, what, limit, strict) {
			const st = {size: 0, path: [], replacerFn: undefined, propList: undefined, gap: "", what: what, limit: limit, strict: strict};
			if (typeof replacer === "function") {
				st.replacerFn = replacer;
			} else if (isArray(replacer)) {
				const propList = [];
				const n = lenOf(replacer);
				for (let i = 0; i < n; i++) {
					const v = replacer[i];
					let k;
					if (typeof v === "string") k = v;
					else if (typeof v === "number" || v instanceof intrinsic("Number") || v instanceof StringC) k = StringC(v);
					if (k !== undefined && apply(arrayIndexOf, propList, [k]) < 0) apply(arrayPush, propList, [k]);
				}
				st.propList = propList;
			}
			if (space !== undefined) {
				if (space instanceof intrinsic("Number")) space = intrinsic("Number")(space); else if (space instanceof StringC) space = StringC(space);
				if (typeof space === "number") {
					const n = space > 10 ? 10 : mathFloor(space);
					if (n >= 1) st.gap = apply(origRepeat, " ", [n]);
				} else if (typeof space === "string") {
					st.gap = apply(stringSlice, space, [0, 10]);
				}
			}
			return serValue(st, "", {"": value}, "");
		}
		function serTooLarge(st) {
			throw new (intrinsic("RangeError"))(whatText(st.what) + " is larger than the limit of " + st.limit + " bytes of JSON");
		}
		function serFail(st, kind, key) {
			throw new (intrinsic("TypeError"))(whatText(st.what) + ": cannot serialize a " + kind + (key === "" ? "" : " (at key " + jsonStringify(StringC(key)) + ")") + " to JSON");
		}
		function serValue(st, key, holder, indent) {
			let value = holder[key];
			if (value !== null && (typeof value === "object" || typeof value === "bigint")) {
				const toJSON = value.toJSON;
				if (typeof toJSON === "function") value = apply(toJSON, value, [key]);
			}
			if (st.replacerFn !== undefined) value = apply(st.replacerFn, holder, [key, value]);
			if (value !== null && typeof value === "object" && !isArray(value) && getPrototypeOf(value) !== ObjectProto) {
				if (value instanceof intrinsic("Number")) value = intrinsic("Number")(value);
				else if (value instanceof StringC) value = StringC(value);
				else if (value instanceof intrinsic("Boolean")) value = apply(intrinsic("Boolean").prototype.valueOf, value, []);
			}
			switch (typeof value) {
			case "string": {
				const q = jsonStringify(value);
				st.size += q.length;
				if (st.size > st.limit) serTooLarge(st);
				return q;
			}
			case "number": {
				const t = numberIsFinite(value) ? "" + value : "null";
				st.size += t.length;
				if (st.size > st.limit) serTooLarge(st);
				return t;
			}
			case "boolean":
				st.size += 5;
				if (st.size > st.limit) serTooLarge(st);
				return value ? "true" : "false";
			case "bigint":
				if (st.strict) serFail(st, "BigInt", key);
				throw new (intrinsic("TypeError"))("Do not know how to serialize a BigInt");
			case "symbol":
				if (st.strict) serFail(st, "Symbol", key);
				return undefined;
			case "undefined":
			case "function":
				return undefined;
			}
			if (value === null) {
				st.size += 4;
				if (st.size > st.limit) serTooLarge(st);
				return "null";
			}
			const path = st.path;
			for (let i = 0; i < path.length; i++) {
				if (path[i] === value) throw new (intrinsic("TypeError"))(whatText(st.what) + ": Converting circular structure to JSON");
			}
			path[path.length] = value;
			const gap = st.gap;
			const inner = indent + gap;
			const parts = [];
			let out;
			if (isArray(value)) {
				const n = lenOf(value);
				if (n > maxArrayLength) tooLong("array length", n);
				for (let i = 0; i < n; i++) {
					const v = serValue(st, "" + i, value, inner);
					parts[i] = v === undefined ? "null" : v;
				}
				st.size += n + 2;
				if (st.size > st.limit) serTooLarge(st);
				if (n === 0) out = "[]";
				else if (gap === "") out = "[" + apply(arrayJoin, parts, [","]) + "]";
				else out = "[\n" + inner + apply(arrayJoin, parts, [",\n" + inner]) + "\n" + indent + "]";
			} else {
				const ks = st.propList !== undefined ? st.propList : objectKeys(value);
				for (let i = 0; i < ks.length; i++) {
					const k = ks[i];
					const v = serValue(st, k, value, inner);
					if (v === undefined) continue;
					const q = jsonStringify(k);
					st.size += q.length + 2;
					parts[parts.length] = q + (gap === "" ? ":" : ": ") + v;
				}
				st.size += 2;
				if (st.size > st.limit) serTooLarge(st);
				if (parts.length === 0) out = "{}";
				else if (gap === "") out = "{" + apply(arrayJoin, parts, [","]) + "}";
				else out = "{\n" + inner + apply(arrayJoin, parts, [",\n" + inner]) + "\n" + indent + "}";
			}
			path.length--;
			if (gap !== "") {
				st.size += parts.length * (inner.length + 2);
				if (st.size > st.limit) serTooLarge(st);
			}
			return out;
		}
		serTools = {serializeWith: serializeWith, serializeJS: serializeJS, serTooLarge: serTooLarge, serFail: serFail, serTooDeep: serTooDeep};
		return serTools;
	}
	// what names the serialized value in error messages: a string, or a
	// tool call's record (its name is the label errors show), turned into
	// text only when an error needs it.
	function whatText(what) {
		return typeof what === "string" ? what : "callTool(" + jsonStringify(clip(what.name, 100)) + ") input";
	}
	function toJSONText(value, what, limit) {
		try {
			return serialize(value, undefined, undefined, what, limit, true);
		} catch (e) {
			what = whatText(what);
			if (e instanceof intrinsic("Error") && StringC(e.message).indexOf(what) === 0) throw e;
			if (e instanceof intrinsic("RangeError")) throw e;
			const msg = (e !== null && typeof e === "object") ? StringC(e.message) : StringC(e);
			throw new (intrinsic("TypeError"))(what + " is not serializable to JSON: " + msg);
		}
	}

	// --- tool calls -------------------------------------------------------
	// Tool errors with their original fields (the error objects are the
	// keys; at most maxToolCalls of them exist).
	const toolErrorObjs = [], toolErrorRecs = [];
	function toolErrorRecord(e) {
		const i = apply(arrayIndexOf, toolErrorObjs, [e]);
		return i < 0 ? undefined : toolErrorRecs[i];
	}
	function toolError(toolName, code, message) {
		const e = new (intrinsic("Error"))(message);
		defineProperty(e, "name", {value: "ToolError", writable: true, enumerable: false, configurable: true});
		e.code = code;
		e.toolName = toolName;
		apply(arrayPush, toolErrorObjs, [e]);
		apply(arrayPush, toolErrorRecs, [{toolName: toolName, code: code, message: message}]);
		return scrub(e);
	}
	// outcome is what a call's promise settles with. payload is JSON text,
	// or for a result the value the Go side built from it (built).
	function outcome(rec, ok, payload, built) {
		if (ok) {
			const data = built === true ? payload : jsonParse(payload);
			return rec.soft ? {success: true, data: data, error: null} : data;
		}
		const err = jsonParse(payload);
		if (rec.soft) return {success: false, data: null, error: {message: err.message, code: err.code}};
		throw toolError(rec.name, err.code, err.message);
	}
	// What serialization errors name a call's input by (whatText): one
	// record per runtime, not one per call, named for the call whose input
	// is being serialized (a toJSON may make another call meanwhile, whose
	// name is put back after it).
	const inputWhat = {name: ""};
	// invoke makes one call through the host: a tool, or searchTools and
	// describeTool under their reserved names (label is what errors show).
	function invoke(name, label, input, options) {
		let soft = false;
		if (options !== undefined && options !== null) {
			if (typeof options !== "object") return apply(promiseReject, PromiseC, [new (intrinsic("TypeError"))("callTool: options must be an object")]);
			soft = options.throwOnError === false;
		}
		let text;
		const outer = inputWhat.name;
		inputWhat.name = label;
		try {
			text = input === undefined ? "{}" : toJSONText(input, inputWhat, maxStringLength);
			if (text === undefined) throw new (intrinsic("TypeError"))(whatText(inputWhat) + " is not serializable to JSON");
		} catch (e) {
			return apply(promiseReject, PromiseC, [scrub(e)]);
		} finally {
			inputWhat.name = outer;
		}
		// The call's promise, made on the Go side, which settles it (a
		// result it built directly, anything else through settle), or the
		// JSON text of the tool error the call failed with at once.
		const r = nat.call(name, text, label, soft);
		if (typeof r === "string") {
			const rec = {name: label, soft: soft};
			try {
				return new PromiseC((resolve) => resolve(outcome(rec, false, r)));
			} catch (e) {
				return apply(promiseReject, PromiseC, [e]);
			}
		}
		return r;
	}
	// settle is what a call's promise settles with when the Go side did not
	// build it: the value it resolves with, or a throw it rejects with.
	function settle(label, soft, ok, payload, built) {
		return outcome({name: label, soft: soft}, ok, payload, built);
	}

	// --- __safe_parallel and console ---------------------------------------
	function errorMessage(e) {
		if (e !== null && typeof e === "object") {
			const rec = toolErrorRecord(e);
			if (rec !== undefined) return rec.code + ": " + rec.message;
			try { return StringC(e.message); } catch (_) { return "unknown error"; }
		}
		try { return StringC(e); } catch (_) { return "unknown error"; }
	}
	let consoleOpen = false;
	// define makes a global of the script API (see configure).
	function define(name, value) {
		defineProperty(G, name, {value: value, writable: false, enumerable: false, configurable: false});
	}

	// --- the result and errors as the Go side sees them -------------------
	function result(v) {
		if (v === undefined) return "null";
		const s = toJSONText(v, "the script result", maxResultBytes);
		return s === undefined ? "null" : s;
	}
	function describe(e) {
		if (e !== null && typeof e === "object") {
			const rec = toolErrorRecord(e);
			if (rec !== undefined) {
				let stack = "";
				try { stack = StringC(e.stack || ""); } catch (_) {}
				return jsonStringify({tool: true, toolName: clip(rec.toolName, 200), code: clip(rec.code, 100), message: clip(rec.message, maxErrorChars), stack: clip(stack, maxErrorChars)});
			}
		}
		let name = "Error", message = "", stack = "";
		if (e !== null && (typeof e === "object" || typeof e === "function")) {
			try { const n = e.name; if (typeof n === "string" && n !== "") name = n; } catch (_) {}
			try { const m = e.message; message = m === undefined ? "" : StringC(m); } catch (_) { message = "uncaught exception"; }
			try { const s = e.stack; if (typeof s === "string") stack = s; } catch (_) {}
			if (message === "" && !(e instanceof intrinsic("Error"))) {
				try { message = "uncaught " + StringC(e); } catch (_) { message = "uncaught exception"; }
			}
		} else {
			try { message = StringC(e); } catch (_) { message = "uncaught exception"; }
		}
		return jsonStringify({tool: false, name: clip(name, 100), message: clip(message, maxErrorChars), stack: clip(stack, maxErrorChars)});
	}
	// objSource is __cm$obj, which the validator wraps around what an
	// object spread or object rest copies: a string is copied one property
	// per character in one Go call no interrupt stops.
	function objSource(v) {
		if ((typeof v === "string" || v instanceof StringC) && v.length > maxArrayLength) {
			throw scrub(new (intrinsic("TypeError"))("object spread of a string of " + v.length + " characters exceeds the sandbox limit of " + maxArrayLength));
		}
		return v;
	}
	// objSource.sink(f) is an assignment target for an object rest pattern
	// nested in an assignment pattern: the validator puts
	// __cm$obj.sink((x) => (pattern = __cm$obj(x))).v in its place.
	objSource.sink = function (f) { return {set v(x) { f(x); }}; };
	// configure brings the request's limits and context; once only, and
	// before any plan code runs (the Go side calls it right after setup or
	// after taking a runtime set up in advance).
	function configure(contextJSON, cfg) {
		if (configured) throw new (intrinsic("TypeError"))("sandbox already configured");
		configured = true;
		allowConsole = cfg.allowConsole;
		maxParallel = cfg.maxParallel;
		maxArrayLength = cfg.maxArrayLength;
		maxStringLength = cfg.maxStringLength;
		maxResultBytes = cfg.maxResultBytes;
		maxConsoleBytes = cfg.maxConsoleBytes;
		maxJSONDepth = cfg.maxJSONDepth;
		maxErrorChars = cfg.maxErrorChars;
		consoleOpen = allowConsole;
		// The GeneratorFunction constructor is reachable only from a
		// generator function; goja creates its prototypes on first use, so
		// they are hardened (and paid for) only when the plan has generator
		// syntax.
		if (cfg.hasGenerators) blockConstructor(getPrototypeOf(function* () {}));
		// What the plan does not name stays unprepared (globals.go; the
		// bits are globalReflect... there). Without the analysis (unnamed
		// absent) everything is prepared.
		const gReflect = 1, gProxy = 2, gJSON = 4, gEncodeURIComponent = 8, gEncodeURI = 16, gEscape = 32,
			gConsole = 64, gCallTool = 128, gGetTool = 256, gSearchTools = 512, gDescribeTool = 1024,
			gSafeParallel = 2048, gMetaContext = 4096, gError = 8192, gTypeError = 16384, gRangeError = 32768,
			gSyntaxError = 65536, gNumber = 131072, gBoolean = 262144;
		const unnamed = cfg.unnamed | 0;
		const named = (bit) => (unnamed & bit) === 0;
		if (named(gError)) intrinsic("Error");
		if (named(gTypeError)) intrinsic("TypeError");
		if (named(gRangeError)) intrinsic("RangeError");
		if (named(gSyntaxError)) intrinsic("SyntaxError");
		if (named(gNumber)) intrinsic("Number");
		if (named(gBoolean)) intrinsic("Boolean");
		// Reflect is wrapped only for plans that name it.
		if (named(gReflect)) {
			loadReflect();
			wrap(reflect, "apply", (t, a) => { if (a.length > 2) a[2] = argList(a[2]); });
			wrap(reflect, "construct", (t, a) => { if (a.length > 1) a[1] = argList(a[1]); });
		}
		// RegExp objects exist only when the plan writes a regexp literal or
		// names RegExp: only then are the constructor and the prototype's
		// pattern methods hardened (each builtin touched costs set-up time).
		if (cfg.hasRegExps) {
			loadReflect();
			const RegExpC = RegExp, RP = RegExpC.prototype;
			newRegExp = (re, flags) => new RegExpC(re, flags);
			const R = {RegExp: function RegExp(pattern, flags) {
				try {
					if (!isRegExp(pattern)) checkPattern(pattern === undefined ? "(?:)" : StringC(pattern));
					if (new.target === undefined) return RegExpC(pattern, flags);
					return reflectConstruct(RegExpC, [pattern, flags], new.target);
				} catch (e) {
					throw scrub(e);
				}
			}}.RegExp;
			R.prototype = RP;
			defineProperty(RP, "constructor", {value: R, writable: true, enumerable: false, configurable: true});
			defineProperty(G, "RegExp", {value: R, writable: true, enumerable: false, configurable: true});
			wrap(RP, "compile", (t, a) => { if (!isRegExp(a[0])) checkPattern(a[0] === undefined ? "(?:)" : StringC(a[0])); });
			const rps = getOwnPropertySymbols(RP);
			for (let i = 0; i < rps.length; i++) {
				const name = StringC(rps[i]);
				let impl;
				if (name === "Symbol(Symbol.split)") impl = (re, s, a) => regexpTools().slowSplit(re, s, a[1]);
				else if (name === "Symbol(Symbol.replace)") impl = (re, s, a) => regexpTools().slowReplace(re, s, a[1]);
				else if (name === "Symbol(Symbol.match)") impl = (re, s) => regexpTools().slowMatch(re, s);
				else continue;
				const orig = RP[rps[i]];
				wrapDesc.value = function (...args) {
					if (new.target !== undefined) throw new (intrinsic("TypeError"))("not a constructor");
					try {
						if (slow(this)) return impl(this, StringC(args[0]), args);
						return apply(orig, this, args);
					} catch (e) {
						throw scrub(e);
					}
				};
				defineProperty(RP, rps[i], wrapDesc);
			}
		}
		// Proxy is wrapped only for plans that name it: no other route leads
		// to a proxy, and isProxy is false without one.
		if (named(gProxy)) {
			const ProxyC = Proxy, proxyRevocable = Proxy.revocable;
			const P = {Proxy: function Proxy(target, handler) {
				if (new.target === undefined) throw new (intrinsic("TypeError"))("Constructor Proxy requires 'new'");
				const p = new ProxyC(target, handler);
				remember(p);
				return p;
			}}.Proxy;
			defineProperty(P, "revocable", {value: function revocable(target, handler) {
				const r = apply(proxyRevocable, ProxyC, [target, handler]);
				remember(r.proxy);
				return r;
			}, writable: true, enumerable: false, configurable: true});
			defineProperty(G, "Proxy", {value: P, writable: true, enumerable: false, configurable: true});
		}
		// JSON is reachable only by its name: parse and stringify are
		// replaced for plans that name it. JSON.parse: the text is checked
		// for nesting depth (goja's parser recurses in Go once per level)
		// and value count before parsing.
		if (named(gJSON)) {
			defineProperty(JSON, "parse", {value: function (text, reviver) {
				if (new.target !== undefined) throw new (intrinsic("TypeError"))("not a constructor");
				try {
					const s = StringC(text);
					const msg = nat.json(s);
					if (msg !== "") throw new (intrinsic("RangeError"))("JSON.parse: " + msg);
					return apply(jsonParse, JSON, reviver === undefined ? [s] : [s, callback(reviver)]);
				} catch (e) {
					throw scrub(e);
				}
			}, writable: true, enumerable: false, configurable: true});
			defineProperty(JSON, "stringify", {
				value: {stringify(value, replacer, space) {
					return serialize(value, replacer, space, "JSON.stringify output", maxStringLength, false);
				}}.stringify,
				writable: true, enumerable: false, configurable: true,
			});
		}
		// Percent-encoding writes up to 9 characters per UTF-16 unit.
		if (named(gEncodeURIComponent) || named(gEncodeURI) || named(gEscape)) {
			const checkEncode = (t, a) => {
				a[0] = StringC(a[0]);
				const n = a[0].length * 9;
				if (n > maxStringLength) tooLong("string length", n);
			};
			if (named(gEncodeURIComponent)) wrap(G, "encodeURIComponent", checkEncode);
			if (named(gEncodeURI)) wrap(G, "encodeURI", checkEncode);
			if (named(gEscape)) wrap(G, "escape", checkEncode);
		}
		// The script API: each global only when the plan names it.
		if (named(gCallTool)) {
			const callTool = (name, input, options) => {
				if (typeof name !== "string") return apply(promiseReject, PromiseC, [new (intrinsic("TypeError"))("callTool: the tool name must be a string")]);
				return invoke(name, name, input, options);
			};
			define("callTool", freeze(callTool));
		}
		if (named(gGetTool)) {
			const getTool = (name) => {
				if (typeof name !== "string") throw new (intrinsic("TypeError"))("getTool: the tool name must be a string");
				const s = nat.getTool(name);
				return s === "" ? null : jsonParse(s);
			};
			define("getTool", freeze(getTool));
		}
		// searchTools and describeTool ask the host (see Discovery); each
		// counts as a tool call against the run's limits.
		if (named(gSearchTools)) {
			const searchTools = (query, options) => {
				if (typeof query !== "string") return apply(promiseReject, PromiseC, [new (intrinsic("TypeError"))("searchTools: the query must be a string")]);
				const req = {query: query};
				if (options !== undefined && options !== null) {
					if (typeof options !== "object") return apply(promiseReject, PromiseC, [new (intrinsic("TypeError"))("searchTools: options must be an object")]);
					const ks = keys(options);
					for (let i = 0; i < ks.length; i++) {
						if (ks[i] !== "query") req[ks[i]] = options[ks[i]];
					}
				}
				return invoke("\u0000searchTools", "searchTools", req, undefined);
			};
			define("searchTools", freeze(searchTools));
		}
		if (named(gDescribeTool)) {
			const describeTool = (name) => {
				if (typeof name !== "string") return apply(promiseReject, PromiseC, [new (intrinsic("TypeError"))("describeTool: the tool name must be a string")]);
				return invoke("\u0000describeTool", "describeTool", {name: name}, undefined);
			};
			define("describeTool", freeze(describeTool));
		}
		if (named(gSafeParallel)) {
			async function __safe_parallel(fns, options) {
				if (!isArray(fns)) throw new (intrinsic("TypeError"))("__safe_parallel: the first argument must be an array of functions");
				const total = fns.length;
				if (total > maxParallel) throw new (intrinsic("RangeError"))("__safe_parallel: at most " + maxParallel + " operations are allowed, got " + total);
				for (let i = 0; i < total; i++) {
					if (typeof fns[i] !== "function") throw new (intrinsic("TypeError"))("__safe_parallel: operation " + i + " is not a function");
				}
				let limit = 10;
				if (options !== undefined && options !== null) {
					if (typeof options !== "object") throw new (intrinsic("TypeError"))("__safe_parallel: options must be an object");
					const mc = options.maxConcurrency;
					if (mc !== undefined) {
						if (typeof mc !== "number" || !(mc >= 1)) throw new (intrinsic("TypeError"))("__safe_parallel: options.maxConcurrency must be a number of at least 1");
						limit = mc > 20 ? 20 : mathFloor(mc);
					}
				}
				const results = new ArrayC(total);
				const failures = [];
				let next = 0;
				async function lane() {
					while (next < total) {
						const i = next++;
						try {
							results[i] = await fns[i]();
						} catch (e) {
							apply(arrayPush, failures, [{index: i, message: errorMessage(e)}]);
						}
					}
				}
				const lanes = [];
				const n = limit < total ? limit : total;
				for (let i = 0; i < n; i++) apply(arrayPush, lanes, [lane()]);
				await apply(promiseAll, PromiseC, [lanes]);
				if (failures.length > 0) {
					apply(arraySort, failures, [(a, b) => a.index - b.index]);
					const parts = [];
					for (let i = 0; i < failures.length; i++) apply(arrayPush, parts, ["[" + failures[i].index + "] " + clip(failures[i].message, 1000)]);
					const e = new (intrinsic("Error"))(failures.length + " of " + total + " parallel operations failed: " + apply(arrayJoin, parts, ["; "]));
					defineProperty(e, "name", {value: "ParallelExecutionError", writable: true, enumerable: false, configurable: true});
					throw scrub(e);
				}
				return results;
			}
			define("__safe_parallel", freeze(__safe_parallel));
		}
		if (named(gConsole)) {
			function logArg(a) {
				if (typeof a === "string") return a;
				if (a instanceof intrinsic("Error")) return errorMessage(a);
				if (a === undefined || typeof a === "function" || typeof a === "symbol" || typeof a === "bigint") return StringC(a);
				try {
					const s = serialize(a, (k, v) => typeof v === "bigint" ? StringC(v) : v, undefined, "console argument", maxConsoleBytes, false);
					return s === undefined ? StringC(a) : s;
				} catch (_) {
					return StringC(a);
				}
			}
			function logger(level) {
				return function (...args) {
					if (!consoleOpen) return;
					const parts = [];
					for (let i = 0; i < args.length; i++) apply(arrayPush, parts, [logArg(args[i])]);
					consoleOpen = nat.log(level, apply(arrayJoin, parts, [" "]));
				};
			}
			const consoleObj = freeze({log: logger("log"), info: logger("log"), debug: logger("log"), warn: logger("warn"), error: logger("error")});
			define("console", consoleObj);
		}
		if (named(gMetaContext)) {
			function deepFreeze(v) {
				if (v !== null && typeof v === "object" && !isFrozen(v)) {
					freeze(v);
					const ks = keys(v);
					for (let i = 0; i < ks.length; i++) deepFreeze(v[ks[i]]);
				}
				return v;
			}
			define("metaContext", deepFreeze(jsonParse(contextJSON)));
		}
	}
	return [settle, result, describe, objSource, configure];
};
})()`
