package engine

// Globals the prelude prepares only for plans that name them.
//
// A fresh runtime's set-up is mostly the prelude touching built-ins (goja
// creates each on first touch) and wrapping them. Some of what it touches
// is reachable from a plan through one route only: its global binding. A
// plan cannot reach the global object (globalThis and its aliases are
// blocked identifiers, plans are strict, the code factories that would
// hand it out are removed, and the global object inherits nothing, so no
// getter on Object.prototype sees it as this), so a global binding is reachable only by a plan
// that writes its name as an identifier, which the validator sees (the
// same argument blocks the typed arrays by name and hardens RegExp only for
// plans that name it or write a regexp literal).
//
// For a plan that does not name such a global:
//   - Reflect, Proxy, encodeURIComponent, encodeURI and escape stay
//     unwrapped and untouched (no other route leads to these objects:
//     no built-in returns Reflect, only Proxy makes proxies);
//   - JSON.parse and JSON.stringify keep the intrinsics (the JSON object
//     is reachable only by its name);
//   - console, callTool, getTool, searchTools, describeTool,
//     __safe_parallel and metaContext are not defined;
//   - the prelude reads Reflect.apply, Reflect.construct and the
//     constructors Error, TypeError, RangeError, SyntaxError, Number and
//     Boolean from the global object when it first needs them instead of
//     at set-up. What set-up capture protects against is a plan that
//     rebinds the global name; without the name it cannot, and the objects
//     themselves are the same (a constructor reached through another
//     route, such as a computed "constructor", can be mutated but not
//     replaced, and the prelude reads none of their properties lazily
//     except Reflect's, which is reachable only by name).
//
// A plan that names one gets it exactly as before, set up by configure
// before any plan code runs. The bits name what a plan does NOT name, so
// the zero value (a runtime configured without a plan's analysis) prepares
// everything.
const (
	globalReflect uint32 = 1 << iota
	globalProxy
	globalJSON
	globalEncodeURIComponent
	globalEncodeURI
	globalEscape
	globalConsole
	globalCallTool
	globalGetTool
	globalSearchTools
	globalDescribeTool
	globalSafeParallel
	globalMetaContext
	globalError
	globalTypeError
	globalRangeError
	globalSyntaxError
	globalNumber
	globalBoolean
	// globalBigInt: the plan names BigInt or writes a BigInt literal (the
	// only ways to make a BigInt); see bigint.go.
	globalBigInt

	gatedGlobalsAll = globalBigInt<<1 - 1
)

// gatedGlobals maps each global name to its bit; the prelude uses the same
// bit values (prelude.Source, "unnamed").
var gatedGlobals = map[string]uint32{
	"Reflect":            globalReflect,
	"Proxy":              globalProxy,
	"JSON":               globalJSON,
	"encodeURIComponent": globalEncodeURIComponent,
	"encodeURI":          globalEncodeURI,
	"escape":             globalEscape,
	"console":            globalConsole,
	"callTool":           globalCallTool,
	"getTool":            globalGetTool,
	"searchTools":        globalSearchTools,
	"describeTool":       globalDescribeTool,
	"__safe_parallel":    globalSafeParallel,
	"metaContext":        globalMetaContext,
	"Error":              globalError,
	"TypeError":          globalTypeError,
	"RangeError":         globalRangeError,
	"SyntaxError":        globalSyntaxError,
	"Number":             globalNumber,
	"Boolean":            globalBoolean,
	"BigInt":             globalBigInt,
}
