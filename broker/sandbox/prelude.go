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
return function setup(nat, contextJSON, allowConsole, maxParallel, maxArrayLength, maxStringLength) {
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
	const MapC = Map;
	const mapGet = Map.prototype.get, mapSet = Map.prototype.set, mapDelete = Map.prototype.delete;
	const WeakMapC = WeakMap;
	const wmGet = WeakMap.prototype.get, wmSet = WeakMap.prototype.set;
	const arrayPush = Array.prototype.push, arrayJoin = Array.prototype.join, arraySort = Array.prototype.sort;
	const mathFloor = Math.floor;
	const numberIsFinite = Number.isFinite;

	// --- no route to a code factory ---------------------------------------
	function codeGenerationBlocked() {
		throw new TypeErrorC("code generation from strings is disabled in the sandbox");
	}
	const fnProtos = [
		getPrototypeOf(function () {}),
		getPrototypeOf(async function () {}),
		getPrototypeOf(function* () {}),
	];
	for (let i = 0; i < fnProtos.length; i++) {
		defineProperty(fnProtos[i], "constructor", {value: codeGenerationBlocked, writable: false, enumerable: false, configurable: false});
	}
	delete G.eval;
	delete G.Function;

	// --- memory mitigations (goja built-ins ignore interrupts) ------------
	function tooLong(what, n) {
		throw new RangeErrorC(what + " of " + n + " exceeds the sandbox limit of " + (what.indexOf("array") >= 0 ? maxArrayLength : maxStringLength));
	}
	function wrap(obj, name, check) {
		const orig = obj[name];
		const w = {[name](...args) { check(this, args); return apply(orig, this, args); }}[name];
		defineProperty(obj, name, {value: w, writable: false, enumerable: false, configurable: false});
	}
	function lenOf(x) {
		if (x === null || x === undefined) return 0;
		const l = x.length;
		return typeof l === "number" ? l : 0;
	}
	const SP = String.prototype, AP = Array.prototype;
	wrap(SP, "repeat", (s, a) => { const n = StringC(s).length * Number(a[0]); if (n > maxStringLength) tooLong("string length", n); });
	wrap(SP, "padStart", (s, a) => { const n = Number(a[0]); if (n > maxStringLength) tooLong("string length", n); });
	wrap(SP, "padEnd", (s, a) => { const n = Number(a[0]); if (n > maxStringLength) tooLong("string length", n); });
	wrap(AP, "fill", (t) => { const n = lenOf(t); if (n > maxArrayLength) tooLong("array length", n); });
	wrap(AP, "join", (t, a) => { const n = lenOf(t); if (n > maxArrayLength) tooLong("array length", n); });
	wrap(AP, "toString", (t) => { const n = lenOf(t); if (n > maxArrayLength) tooLong("array length", n); });
	wrap(AP, "keys", (t) => { const n = lenOf(t); if (n > maxArrayLength) tooLong("array length", n); });
	wrap(AP, "entries", (t) => { const n = lenOf(t); if (n > maxArrayLength) tooLong("array length", n); });
	wrap(AP, "values", (t) => { const n = lenOf(t); if (n > maxArrayLength) tooLong("array length", n); });
	wrap(AP, "copyWithin", (t) => { const n = lenOf(t); if (n > maxArrayLength) tooLong("array length", n); });
	wrap(AP, "reverse", (t) => { const n = lenOf(t); if (n > maxArrayLength) tooLong("array length", n); });
	wrap(AP, "sort", (t) => { const n = lenOf(t); if (n > maxArrayLength) tooLong("array length", n); });
	wrap(AP, "flat", (t) => { const n = lenOf(t); if (n > maxArrayLength) tooLong("array length", n); });
	wrap(AP, "slice", (t) => { const n = lenOf(t); if (n > maxArrayLength) tooLong("array length", n); });
	wrap(AP, "concat", (t, a) => { let n = lenOf(t); for (let i = 0; i < a.length; i++) n += lenOf(a[i]); if (n > maxArrayLength) tooLong("array length", n); });
	wrap(AP, "indexOf", (t) => { const n = lenOf(t); if (n > maxArrayLength) tooLong("array length", n); });
	wrap(AP, "lastIndexOf", (t) => { const n = lenOf(t); if (n > maxArrayLength) tooLong("array length", n); });
	wrap(AP, "includes", (t) => { const n = lenOf(t); if (n > maxArrayLength) tooLong("array length", n); });
	wrap(Array, "from", (t, a) => { const n = lenOf(a[0]); if (n > maxArrayLength) tooLong("array length", n); });
	const ArrayC = Array;
	// Typed arrays and ArrayBuffer allocate their whole size in one Go call.
	const bufferNames = ["ArrayBuffer", "DataView", "Int8Array", "Uint8Array", "Uint8ClampedArray", "Int16Array", "Uint16Array",
		"Int32Array", "Uint32Array", "Float32Array", "Float64Array", "BigInt64Array", "BigUint64Array", "SharedArrayBuffer"];
	for (let i = 0; i < bufferNames.length; i++) delete G[bufferNames[i]];

	// --- serialization ------------------------------------------------------
	function jsonReplacer(what) {
		return function (key, value) {
			const t = typeof value;
			if (t === "bigint") throw new TypeErrorC(what + ": cannot serialize a BigInt" + (key === "" ? "" : " (at key " + jsonStringify(key) + ")") + " to JSON");
			if (t === "symbol") throw new TypeErrorC(what + ": cannot serialize a Symbol" + (key === "" ? "" : " (at key " + jsonStringify(key) + ")") + " to JSON");
			return value;
		};
	}
	function toJSONText(value, what) {
		let s;
		try {
			s = jsonStringify(value, jsonReplacer(what));
		} catch (e) {
			if (e instanceof TypeErrorC && StringC(e.message).indexOf(what) === 0) throw e;
			const msg = (e !== null && typeof e === "object") ? StringC(e.message) : StringC(e);
			throw new TypeErrorC(what + " is not serializable to JSON: " + msg);
		}
		return s;
	}

	// --- tool calls -------------------------------------------------------
	const pending = new MapC();
	const toolErrors = new WeakMapC();
	function toolError(toolName, code, message) {
		const e = new ErrorC(message);
		defineProperty(e, "name", {value: "ToolError", writable: true, enumerable: false, configurable: true});
		e.code = code;
		e.toolName = toolName;
		apply(wmSet, toolErrors, [e, {toolName: toolName, code: code, message: message}]);
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
		let soft = false;
		if (options !== undefined && options !== null) {
			if (typeof options !== "object") return apply(promiseReject, PromiseC, [new TypeErrorC("callTool: options must be an object")]);
			soft = options.throwOnError === false;
		}
		let text;
		try {
			text = input === undefined ? "{}" : toJSONText(input, "callTool(" + jsonStringify(name) + ") input");
			if (text === undefined) throw new TypeErrorC("callTool(" + jsonStringify(name) + ") input is not serializable to JSON");
		} catch (e) {
			return apply(promiseReject, PromiseC, [e]);
		}
		const r = nat.call(name, text);
		const rec = {name: name, soft: soft};
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
			apply(mapSet, pending, [r, rec]);
		});
	}
	function settle(id, ok, payload) {
		const rec = apply(mapGet, pending, [id]);
		if (rec === undefined) return;
		apply(mapDelete, pending, [id]);
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

	// --- __safe_parallel ----------------------------------------------------
	function errorMessage(e) {
		if (e !== null && typeof e === "object") {
			const rec = apply(wmGet, toolErrors, [e]);
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
			const s = jsonStringify(a, (k, v) => typeof v === "bigint" ? StringC(v) : v);
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
	define("__safe_parallel", freeze(__safe_parallel));
	define("metaContext", metaContext);
	define("console", consoleObj);

	// --- the result and errors as the Go side sees them -------------------
	function result(v) {
		if (v === undefined) return "null";
		const s = toJSONText(v, "the script result");
		return s === undefined ? "null" : s;
	}
	function describe(e) {
		if (e !== null && typeof e === "object") {
			const rec = apply(wmGet, toolErrors, [e]);
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
