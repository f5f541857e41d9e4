package sandbox

// preludeSource runs first in every fresh runtime. It evaluates to a setup
// function that hardens the runtime, defines the script API as read-only
// globals and returns the internal functions the Go side calls (settle,
// result, describe). The native hooks it receives take and return only
// strings and numbers, and it keeps them in its closure, out of the script's
// reach. It captures the intrinsics it uses before any plan code runs, so a
// plan that rewrites builtins only breaks itself.
const preludeSource = `(function () {
"use strict";
return function setup(nat, contextJSON, allowConsole, maxParallel, maxArrayLength, maxStringLength, maxResultBytes, maxConsoleBytes, hasGenerators) {
	const G = globalThis;
	const O = Object;
	const defineProperty = O.defineProperty;
	const getPrototypeOf = O.getPrototypeOf;
	const freeze = O.freeze;
	const isFrozen = O.isFrozen;
	const keys = O.keys;
	const apply = Reflect.apply;
	const jsonParse = JSON.parse;
	const jsonStringify = JSON.stringify;
	const isArray = Array.isArray;
	const PromiseC = Promise;
	const promiseAll = Promise.all;
	const promiseReject = Promise.reject;
	const ErrorC = Error, TypeErrorC = TypeError, RangeErrorC = RangeError;
	const StringC = String;
	// Each builtin goja has not yet instantiated costs about a hundred
	// allocations on first touch, so the prelude avoids Map, Set, WeakMap,
	// Symbol, Math and BigInt.
	const arrayPush = Array.prototype.push, arrayJoin = Array.prototype.join, arraySort = Array.prototype.sort;
	const arrayIndexOf = Array.prototype.indexOf;
	const getOwnPropertySymbols = O.getOwnPropertySymbols;
	const mathFloor = (x) => x - x % 1;
	const NumberC = Number, BooleanC = Boolean;
	const numberIsFinite = Number.isFinite;

	// --- no route to a code factory ---------------------------------------
	function codeGenerationBlocked() {
		throw new TypeErrorC("code generation from strings is disabled in the sandbox");
	}
	// The GeneratorFunction constructor is reachable only from a generator
	// function; goja creates its prototypes on first use, so they are
	// hardened (and paid for) only when the plan has generator syntax.
	const fnProtos = [
		getPrototypeOf(function () {}),
		getPrototypeOf(async function () {}),
	];
	if (hasGenerators) fnProtos[2] = getPrototypeOf(function* () {});
	for (let i = 0; i < fnProtos.length; i++) {
		defineProperty(fnProtos[i], "constructor", {value: codeGenerationBlocked, writable: false, enumerable: false, configurable: false});
	}
	delete G.eval;
	delete G.Function;

	// --- memory mitigations (goja built-ins ignore interrupts) ------------
	function tooLong(what, n) {
		throw new RangeErrorC(what + " of " + n + " exceeds the sandbox limit of " + (what.indexOf("array") >= 0 ? maxArrayLength : maxStringLength));
	}
	const wrapDesc = {value: undefined, writable: true, enumerable: false, configurable: true};
	function wrap(obj, name, check) {
		const orig = obj[name];
		if (typeof orig !== "function") return;
		wrapDesc.value = function (...args) { check(this, args); return apply(orig, this, args); };
		defineProperty(obj, name, wrapDesc);
	}
	// lenOf is the length a built-in would use (ToNumber of .length, so
	// {length: "1e9"} counts as 1e9).
	function lenOf(x) {
		if (x === null || x === undefined) return 0;
		const l = x.length;
		if (typeof l === "number") return l;
		if (l === undefined || typeof l === "symbol" || typeof l === "bigint") return 0;
		const n = NumberC(l);
		return n === n ? n : 0;
	}
	const SP = String.prototype, AP = Array.prototype, FP = getPrototypeOf(function () {});
	wrap(SP, "repeat", (s, a) => { const n = StringC(s).length * NumberC(a[0]); if (n > maxStringLength) tooLong("string length", n); });
	wrap(SP, "padStart", (s, a) => { const n = NumberC(a[0]); if (n > maxStringLength) tooLong("string length", n); });
	wrap(SP, "padEnd", (s, a) => { const n = NumberC(a[0]); if (n > maxStringLength) tooLong("string length", n); });
	// Every array method loops in Go over the receiver's length, which a
	// sparse array can set to 2^32-1 for free: check it first.
	const checkArray = (t) => { const n = lenOf(t); if (n > maxArrayLength) tooLong("array length", n); };
	const apNames = ["at", "copyWithin", "entries", "every", "fill", "filter", "find", "findIndex", "findLast", "findLastIndex",
		"flatMap", "forEach", "includes", "indexOf", "keys", "lastIndexOf", "map", "reduce", "reduceRight", "reverse",
		"shift", "slice", "some", "sort", "splice", "toLocaleString", "toReversed", "toSorted", "toSpliced", "toString",
		"unshift", "values", "with"];
	const apSymbols = getOwnPropertySymbols(AP);
	for (let i = 0; i < apSymbols.length; i++) {
		if (AP[apSymbols[i]] === AP.values) apply(arrayPush, apNames, [apSymbols[i]]); // Symbol.iterator
	}
	for (let i = 0; i < apNames.length; i++) wrap(AP, apNames[i], checkArray);
	wrap(AP, "concat", (t, a) => {
		let n = lenOf(t);
		// Any object may be spreadable (Symbol.isConcatSpreadable).
		for (let i = 0; i < a.length; i++) n += a[i] !== null && typeof a[i] === "object" ? lenOf(a[i]) : 1;
		if (n > maxArrayLength) tooLong("array length", n);
	});
	// join converts each element once here (so toString and getters run
	// once, as in the native join) and counts the output before the native
	// join concatenates: elements may share one big string, or be objects
	// whose toString returns one.
	const origJoin = AP.join;
	const joining = [];
	wrapDesc.value = function join(sep) {
		const o = O(this);
		for (let i = 0; i < joining.length; i++) if (joining[i] === o) return ""; // cycle, as goja does
		const n = lenOf(o);
		if (n > maxArrayLength) tooLong("array length", n);
		const s = sep === undefined ? "," : StringC(sep);
		let total = n > 0 ? s.length * (n - 1) : 0;
		if (total > maxStringLength) tooLong("string length", total);
		const parts = [];
		joining[joining.length] = o;
		try {
			for (let i = 0; i < n; i++) {
				const v = o[i];
				const str = v === undefined || v === null ? "" : StringC(v);
				total += str.length;
				if (total > maxStringLength) tooLong("string length", total);
				parts[i] = str;
			}
		} finally {
			joining.length--;
		}
		return apply(origJoin, parts, [s]);
	};
	defineProperty(AP, "join", wrapDesc);
	// flat expands shared references: [s, s] nested 40 times flattens to
	// 2^40 elements from a few bytes. Count before flattening.
	function flatCount(arr, depth, acc) {
		const n = lenOf(arr);
		for (let i = 0; i < n; i++) {
			const v = arr[i];
			if (depth >= 1 && isArray(v)) acc = flatCount(v, depth - 1, acc);
			else acc++;
			if (acc > maxArrayLength) tooLong("flattened array length", acc);
		}
		return acc;
	}
	wrap(AP, "flat", (t, a) => {
		checkArray(t);
		let depth = a[0] === undefined ? 1 : NumberC(a[0]);
		if (depth !== depth) depth = 0;
		flatCount(t, depth, 0);
	});
	// Splitting, matching and replacing produce, in one Go call, arrays of up
	// to one element per character and strings of up to (matches x
	// replacement) characters. Bound them before the call.
	const strIndexOf = SP.indexOf;
	const indexOfCall = FP.call.bind(strIndexOf); // (str, pat, from), no argument array
	function countOccurrences(str, pat, max) {
		let n = 0, i = 0;
		while ((i = indexOfCall(str, pat, i)) >= 0) {
			if (++n > max) break;
			i += pat.length;
		}
		return n;
	}
	wrap(SP, "split", (t, a) => {
		const str = StringC(t), sep = a[0];
		if (str.length < maxArrayLength || sep === undefined) return;
		const n = typeof sep === "string" && sep.length > 0 ? countOccurrences(str, sep, maxArrayLength) + 1 : str.length + 1;
		if (n > maxArrayLength) tooLong("array length", n);
	});
	const checkMatchAll = (t, a) => {
		const str = StringC(t);
		if (str.length >= maxArrayLength && (typeof a[0] !== "object" || a[0] === null || a[0].global !== false)) tooLong("array length", str.length + 1);
	};
	wrap(SP, "match", checkMatchAll);
	wrap(SP, "matchAll", checkMatchAll);
	function checkReplace(t, a, all) {
		const str = StringC(t), pat = a[0], repl = a[1];
		if (typeof repl === "function") {
			let total = str.length;
			a[1] = function (...m) {
				const r = StringC(apply(repl, this, m));
				total += r.length;
				if (total > maxStringLength) tooLong("string length", total);
				return r;
			};
			return;
		}
		const r = StringC(repl);
		// Any object pattern is treated as a regular expression.
		const isObj = pat !== null && typeof pat === "object";
		const global = all || (isObj && pat.global !== false);
		// $1, $& and $<name> expand to text of the matches, which do not
		// overlap: at most str.length per "$" in all. "$" + backquote and $'
		// expand to a prefix or suffix of the string per match.
		let dollars = 0, perMatch = r.length;
		for (let i = apply(strIndexOf, r, ["$"]); i >= 0; i = apply(strIndexOf, r, ["$", i + 1])) {
			const next = r[i + 1];
			if (next === "\x60" || next === "'") perMatch += str.length;
			else dollars++;
		}
		const fixed = str.length + dollars * str.length;
		if (fixed > maxStringLength) tooLong("string length", fixed);
		if (!global || perMatch === 0) {
			if (fixed + perMatch > maxStringLength) tooLong("string length", fixed + perMatch);
			return;
		}
		// Count matches only as far as needed to exceed the limit.
		const needed = mathFloor((maxStringLength - fixed) / perMatch) + 1;
		const p = isObj ? "" : StringC(pat);
		const matches = p === "" ? str.length + 1 : countOccurrences(str, p, needed);
		if (matches >= needed) tooLong("string length", fixed + matches * perMatch);
	}
	wrap(SP, "replace", (t, a) => checkReplace(t, a, false));
	wrap(SP, "replaceAll", (t, a) => checkReplace(t, a, true));
	// concat and String.raw convert their arguments once here and count.
	wrap(SP, "concat", (t, a) => {
		let n = StringC(t).length;
		for (let i = 0; i < a.length; i++) {
			a[i] = StringC(a[i]);
			n += a[i].length;
			if (n > maxStringLength) tooLong("string length", n);
		}
	});
	wrap(StringC, "raw", (t, a) => {
		const raw = a[0] === undefined || a[0] === null ? undefined : a[0].raw;
		const parts = lenOf(raw);
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
	// Percent-encoding writes up to 9 characters per UTF-16 unit.
	const checkEncode = (t, a) => { const n = StringC(a[0]).length * 9; if (n > maxStringLength) tooLong("string length", n); };
	wrap(G, "encodeURIComponent", checkEncode);
	wrap(G, "encodeURI", checkEncode);
	wrap(G, "escape", checkEncode);
	wrap(Array, "from", (t, a) => { const n = lenOf(a[0]); if (n > maxArrayLength) tooLong("array length", n); });
	// Spreading an argument list copies it in Go.
	wrap(getPrototypeOf(function () {}), "apply", (t, a) => { const n = lenOf(a[1]); if (n > maxArrayLength) tooLong("array length", n); });
	wrap(Reflect, "apply", (t, a) => { const n = lenOf(a[2]); if (n > maxArrayLength) tooLong("array length", n); });
	wrap(Reflect, "construct", (t, a) => { const n = lenOf(a[1]); if (n > maxArrayLength) tooLong("array length", n); });
	const ArrayC = Array;

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
	// every value it emits (after toJSON, before output): the replacer is
	// JavaScript, so the interrupt can stop a huge walk, and it counts an
	// estimate of the output, so a DAG cannot expand past the limit. Only a
	// property-list replacer, which cannot be combined with a function,
	// takes the slower walk written in JavaScript (serializeJS).
	function serialize(value, replacer, space, what, limit, strict) {
		if (isArray(replacer)) return serializeJS(value, replacer, space, what, limit, strict);
		const userFn = typeof replacer === "function" ? replacer : undefined;
		let size = 0;
		function counting(key, v) {
			if (userFn !== undefined) v = apply(userFn, this, [key, v]);
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
				return undefined;
			default:
				return v;
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
				else if (typeof v === "number" || v instanceof NumberC || v instanceof StringC) k = StringC(v);
				if (k !== undefined && apply(arrayIndexOf, propList, [k]) < 0) apply(arrayPush, propList, [k]);
			}
			st.propList = propList;
		}
		if (space !== undefined) {
			if (space instanceof NumberC) space = NumberC(space); else if (space instanceof StringC) space = StringC(space);
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
		throw new RangeErrorC(whatText(st.what) + " is larger than the limit of " + st.limit + " bytes of JSON");
	}
	function serFail(st, kind, key) {
		throw new TypeErrorC(whatText(st.what) + ": cannot serialize a " + kind + (key === "" ? "" : " (at key " + jsonStringify(StringC(key)) + ")") + " to JSON");
	}
	function serValue(st, key, holder, indent) {
		let value = holder[key];
		if (value !== null && (typeof value === "object" || typeof value === "bigint")) {
			const toJSON = value.toJSON;
			if (typeof toJSON === "function") value = apply(toJSON, value, [key]);
		}
		if (st.replacerFn !== undefined) value = apply(st.replacerFn, holder, [key, value]);
		if (value !== null && typeof value === "object" && !isArray(value) && getPrototypeOf(value) !== ObjectProto) {
			if (value instanceof NumberC) value = NumberC(value);
			else if (value instanceof StringC) value = StringC(value);
			else if (value instanceof BooleanC) value = apply(BooleanC.prototype.valueOf, value, []);
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
			throw new TypeErrorC("Do not know how to serialize a BigInt");
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
			if (path[i] === value) throw new TypeErrorC(whatText(st.what) + ": Converting circular structure to JSON");
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
	// what names the serialized value in error messages: a string, or a
	// tool name as {tool: name}, turned into text only when an error needs it.
	function whatText(what) {
		return typeof what === "string" ? what : "callTool(" + jsonStringify(what.tool) + ") input";
	}
	function toJSONText(value, what, limit) {
		try {
			return serialize(value, undefined, undefined, what, limit, true);
		} catch (e) {
			what = whatText(what);
			if (e instanceof ErrorC && StringC(e.message).indexOf(what) === 0) throw e;
			if (e instanceof RangeErrorC) throw e;
			const msg = (e !== null && typeof e === "object") ? StringC(e.message) : StringC(e);
			throw new TypeErrorC(what + " is not serializable to JSON: " + msg);
		}
	}
	defineProperty(JSON, "stringify", {
		value: {stringify(value, replacer, space) {
			return serialize(value, replacer, space, "JSON.stringify output", maxStringLength, false);
		}}.stringify,
		writable: true, enumerable: false, configurable: true,
	});

	// --- tool calls -------------------------------------------------------
	// Pending calls by id, and tool errors with their original fields (the
	// error objects are the keys; at most maxToolCalls of them exist).
	const pending = [];
	const toolErrorObjs = [], toolErrorRecs = [];
	function toolErrorRecord(e) {
		const i = apply(arrayIndexOf, toolErrorObjs, [e]);
		return i < 0 ? undefined : toolErrorRecs[i];
	}
	function toolError(toolName, code, message) {
		const e = new ErrorC(message);
		defineProperty(e, "name", {value: "ToolError", writable: true, enumerable: false, configurable: true});
		e.code = code;
		e.toolName = toolName;
		apply(arrayPush, toolErrorObjs, [e]);
		apply(arrayPush, toolErrorRecs, [{toolName: toolName, code: code, message: message}]);
		return e;
	}
	function outcome(rec, ok, payload) {
		if (ok) {
			const data = jsonParse(payload);
			return rec.soft ? {success: true, data: data, error: null} : data;
		}
		const err = jsonParse(payload);
		if (rec.soft) return {success: false, data: null, error: {message: err.message, code: err.code}};
		throw toolError(rec.name, err.code, err.message);
	}
	function callTool(name, input, options) {
		if (typeof name !== "string") return apply(promiseReject, PromiseC, [new TypeErrorC("callTool: the tool name must be a string")]);
		return invoke(name, name, input, options);
	}
	// invoke makes one call through the host: a tool, or searchTools and
	// describeTool under their reserved names (label is what errors show).
	function invoke(name, label, input, options) {
		let soft = false;
		if (options !== undefined && options !== null) {
			if (typeof options !== "object") return apply(promiseReject, PromiseC, [new TypeErrorC("callTool: options must be an object")]);
			soft = options.throwOnError === false;
		}
		let text;
		try {
			text = input === undefined ? "{}" : toJSONText(input, {tool: label}, maxStringLength);
			if (text === undefined) throw new TypeErrorC(whatText({tool: label}) + " is not serializable to JSON");
		} catch (e) {
			return apply(promiseReject, PromiseC, [e]);
		}
		const r = nat.call(name, text);
		const rec = {name: label, soft: soft};
		if (typeof r === "string") {
			try {
				return new PromiseC((resolve) => resolve(outcome(rec, false, r)));
			} catch (e) {
				return apply(promiseReject, PromiseC, [e]);
			}
		}
		return new PromiseC(function (resolve, reject) {
			rec.resolve = resolve;
			rec.reject = reject;
			pending[r] = rec;
		});
	}
	function settle(id, ok, payload) {
		const rec = pending[id];
		if (rec === undefined) return;
		delete pending[id];
		let v;
		try {
			v = outcome(rec, ok, payload);
		} catch (e) {
			rec.reject(e);
			return;
		}
		rec.resolve(v);
	}
	function getTool(name) {
		if (typeof name !== "string") throw new TypeErrorC("getTool: the tool name must be a string");
		const s = nat.getTool(name);
		return s === "" ? null : jsonParse(s);
	}

	// --- discovery inside the plan ----------------------------------------
	// searchTools and describeTool ask the host (see Discovery); each counts
	// as a tool call against the run's limits.
	function searchTools(query, options) {
		if (typeof query !== "string") return apply(promiseReject, PromiseC, [new TypeErrorC("searchTools: the query must be a string")]);
		const req = {query: query};
		if (options !== undefined && options !== null) {
			if (typeof options !== "object") return apply(promiseReject, PromiseC, [new TypeErrorC("searchTools: options must be an object")]);
			const ks = keys(options);
			for (let i = 0; i < ks.length; i++) {
				if (ks[i] !== "query") req[ks[i]] = options[ks[i]];
			}
		}
		return invoke("\u0000searchTools", "searchTools", req, undefined);
	}
	function describeTool(name) {
		if (typeof name !== "string") return apply(promiseReject, PromiseC, [new TypeErrorC("describeTool: the tool name must be a string")]);
		return invoke("\u0000describeTool", "describeTool", {name: name}, undefined);
	}

	// --- __safe_parallel ----------------------------------------------------
	function errorMessage(e) {
		if (e !== null && typeof e === "object") {
			const rec = toolErrorRecord(e);
			if (rec !== undefined) return rec.code + ": " + rec.message;
			try { return StringC(e.message); } catch (_) { return "unknown error"; }
		}
		try { return StringC(e); } catch (_) { return "unknown error"; }
	}
	async function __safe_parallel(fns, options) {
		if (!isArray(fns)) throw new TypeErrorC("__safe_parallel: the first argument must be an array of functions");
		const total = fns.length;
		if (total > maxParallel) throw new RangeErrorC("__safe_parallel: at most " + maxParallel + " operations are allowed, got " + total);
		for (let i = 0; i < total; i++) {
			if (typeof fns[i] !== "function") throw new TypeErrorC("__safe_parallel: operation " + i + " is not a function");
		}
		let limit = 10;
		if (options !== undefined && options !== null) {
			if (typeof options !== "object") throw new TypeErrorC("__safe_parallel: options must be an object");
			const mc = options.maxConcurrency;
			if (mc !== undefined) {
				if (typeof mc !== "number" || !(mc >= 1)) throw new TypeErrorC("__safe_parallel: options.maxConcurrency must be a number of at least 1");
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
			for (let i = 0; i < failures.length; i++) apply(arrayPush, parts, ["[" + failures[i].index + "] " + failures[i].message]);
			const e = new ErrorC(failures.length + " of " + total + " parallel operations failed: " + apply(arrayJoin, parts, ["; "]));
			defineProperty(e, "name", {value: "ParallelExecutionError", writable: true, enumerable: false, configurable: true});
			throw e;
		}
		return results;
	}

	// --- console --------------------------------------------------------------
	let consoleOpen = allowConsole;
	function logArg(a) {
		if (typeof a === "string") return a;
		if (a instanceof ErrorC) return errorMessage(a);
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

	// --- metaContext -----------------------------------------------------------
	function deepFreeze(v) {
		if (v !== null && typeof v === "object" && !isFrozen(v)) {
			freeze(v);
			const ks = keys(v);
			for (let i = 0; i < ks.length; i++) deepFreeze(v[ks[i]]);
		}
		return v;
	}
	const metaContext = deepFreeze(jsonParse(contextJSON));

	function define(name, value) {
		defineProperty(G, name, {value: value, writable: false, enumerable: false, configurable: false});
	}
	define("callTool", freeze(callTool));
	define("getTool", freeze(getTool));
	define("searchTools", freeze(searchTools));
	define("describeTool", freeze(describeTool));
	define("__safe_parallel", freeze(__safe_parallel));
	define("metaContext", metaContext);
	define("console", consoleObj);

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
				return jsonStringify({tool: true, toolName: rec.toolName, code: rec.code, message: rec.message, stack: stack});
			}
		}
		let name = "Error", message = "", stack = "";
		if (e !== null && (typeof e === "object" || typeof e === "function")) {
			try { const n = e.name; if (typeof n === "string" && n !== "") name = n; } catch (_) {}
			try { const m = e.message; message = m === undefined ? "" : StringC(m); } catch (_) { message = "uncaught exception"; }
			try { const s = e.stack; if (typeof s === "string") stack = s; } catch (_) {}
			if (message === "" && !(e instanceof ErrorC)) {
				try { message = "uncaught " + StringC(e); } catch (_) { message = "uncaught exception"; }
			}
		} else {
			try { message = StringC(e); } catch (_) { message = "uncaught exception"; }
		}
		return jsonStringify({tool: false, name: name, message: message, stack: stack});
	}
	return [settle, result, describe];
};
})()`
