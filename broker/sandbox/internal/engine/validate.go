package engine

import (
	"fmt"
	"math/big"
	"strings"

	"github.com/dop251/goja"
	"github.com/dop251/goja/ast"
	"github.com/dop251/goja/file"
	"github.com/dop251/goja/parser"
	"github.com/dop251/goja/token"
	"github.com/dop251/goja/unistring"
)

// A plan is compiled as the body of an async function inside a factory that
// receives the step counter. The prefix stays on line 1 so line numbers of the
// plan are unchanged; only columns on line 1 shift by len(planPrefix).
const (
	stepName = "__cm$step"
	// stepProperty is the property of the step counter a step reads.
	stepProperty = "s"
	// spreadName checks the value an object spread or an object rest
	// pattern copies (see objectSource).
	spreadName = "__cm$obj"
	planPrefix = "(function(" + stepName + "," + spreadName + "){return async function(){"
	planSuffix = "\n}})"
	// reservedPrefix marks engine-internal names a plan may not mention.
	reservedPrefix = "__cm$"
	planFileName   = "plan.js"
)

// Kinds reported in ScriptError.Kind for illegal_access: with
// VALIDATION_ERROR for the validation rules, and KindSelfReference with
// SELF_REFERENCE_BLOCKED.
const (
	KindIllegalBuiltinAccess  = "IllegalBuiltinAccess"
	KindIllegalSyntax         = "IllegalSyntax"
	KindIllegalPropertyAccess = "IllegalPropertyAccess"
	KindReservedIdentifier    = "ReservedIdentifier"
	KindSourceTooLarge        = "SourceTooLarge"
	KindNestingTooDeep        = "NestingTooDeep"
	KindSelfReference         = "SelfReference"
)

// blockedIdentifiers are names a plan may neither reference nor bind: code
// factories, module loaders, timers (the sandbox has no event loop for them)
// and host globals of other JavaScript platforms.
var blockedIdentifiers = map[string]string{
	"eval":                   "eval is not available in the sandbox",
	"Function":               "the Function constructor is not available in the sandbox",
	"AsyncFunction":          "the AsyncFunction constructor is not available in the sandbox",
	"GeneratorFunction":      "the GeneratorFunction constructor is not available in the sandbox",
	"AsyncGeneratorFunction": "the AsyncGeneratorFunction constructor is not available in the sandbox",
	"require":                "modules cannot be loaded in the sandbox",
	"module":                 "modules cannot be loaded in the sandbox",
	"exports":                "modules cannot be loaded in the sandbox",
	"importScripts":          "modules cannot be loaded in the sandbox",
	"process":                "process is not available in the sandbox",
	"global":                 "global is not available in the sandbox",
	"globalThis":             "globalThis is not available in the sandbox",
	"window":                 "window is not available in the sandbox",
	"self":                   "self is not available in the sandbox",
	"setTimeout":             "timers are not available in the sandbox",
	"setInterval":            "timers are not available in the sandbox",
	"setImmediate":           "timers are not available in the sandbox",
	"clearTimeout":           "timers are not available in the sandbox",
	"clearInterval":          "timers are not available in the sandbox",
	"clearImmediate":         "timers are not available in the sandbox",
	"queueMicrotask":         "queueMicrotask is not available in the sandbox",
	"WebAssembly":            "WebAssembly is not available in the sandbox",
	// Typed arrays allocate their whole size in one Go call that ignores
	// interrupts. The global object is unreachable from a plan (globalThis
	// is blocked and plans are strict), so blocking the names suffices.
	"SharedArrayBuffer": "SharedArrayBuffer is not available in the sandbox",
	"ArrayBuffer":       "binary buffers are not available in the sandbox",
	"DataView":          "binary buffers are not available in the sandbox",
	"Int8Array":         "typed arrays are not available in the sandbox",
	"Uint8Array":        "typed arrays are not available in the sandbox",
	"Uint8ClampedArray": "typed arrays are not available in the sandbox",
	"Int16Array":        "typed arrays are not available in the sandbox",
	"Uint16Array":       "typed arrays are not available in the sandbox",
	"Int32Array":        "typed arrays are not available in the sandbox",
	"Uint32Array":       "typed arrays are not available in the sandbox",
	"Float32Array":      "typed arrays are not available in the sandbox",
	"Float64Array":      "typed arrays are not available in the sandbox",
	"BigInt64Array":     "typed arrays are not available in the sandbox",
	"BigUint64Array":    "typed arrays are not available in the sandbox",
	"Atomics":           "Atomics is not available in the sandbox",
	"fetch":             "network access is only possible through callTool",
	"XMLHttpRequest":    "network access is only possible through callTool",
	"WebSocket":         "network access is only possible through callTool",
}

// blockedProperties are property names whose access is the first step of
// the classic sandbox escapes (constructor chains to a code factory,
// prototype rewiring). Computed accesses with other spellings are harmless
// because the runtime removes the factories themselves.
var blockedProperties = map[string]string{
	"constructor":      "access to .constructor is not allowed in the sandbox",
	"__proto__":        "access to __proto__ is not allowed in the sandbox",
	"__defineGetter__": "legacy accessor methods are not allowed in the sandbox",
	"__defineSetter__": "legacy accessor methods are not allowed in the sandbox",
	"__lookupGetter__": "legacy accessor methods are not allowed in the sandbox",
	"__lookupSetter__": "legacy accessor methods are not allowed in the sandbox",
}

// checkSource applies the size and nesting limits before the parser sees the
// source, so that hostile input cannot exhaust the (recursive) parser.
func checkSource(code string, l Limits) *Result {
	if l.MaxSourceBytes > 0 && len(code) > l.MaxSourceBytes {
		return illegal(KindSourceTooLarge, fmt.Sprintf("script is %d bytes, more than the limit of %d bytes", len(code), l.MaxSourceBytes), nil)
	}
	if l.MaxNestingDepth > 0 {
		if depth, off := nestingDepth(code, l.MaxNestingDepth); depth > l.MaxNestingDepth {
			return illegal(KindNestingTooDeep, fmt.Sprintf("script nests brackets, arrow functions, labels or prefix operators deeper than the limit of %d levels", l.MaxNestingDepth), locationAt(code, off))
		}
	}
	return nil
}

// nestingDepth scans code for ( [ { and template substitutions outside
// strings, comments and regular-expression literals and returns the maximum
// depth reached, stopping at the first offset where it exceeds limit. Long
// runs of prefix operators (!!!!x, - - - x) nest the parser as deeply as
// brackets do, so each operator in a run counts as one level for that run.
//
// The scan must never report less than the nesting the parser meets, or
// hostile input reaches goja's recursive parser; where a character can be
// read two ways it leans to counting more:
//   - a "/" starts a regular expression where an operand is expected (after
//     an operator, a keyword such as return, the ")" of an if/for/while head,
//     the "}" of a block) and divides after an operand (a name, a literal, a
//     ")" or "]", the "}" of an object literal or of a function expression);
//   - brackets inside strings, regular expressions and templates count
//     towards the maximum too (a string holding 65 nested "(" is refused), so
//     a quote read wrongly cannot hide code from the count;
//   - a string or regular expression that reaches the end of its line is
//     not one (neither can span lines): it is read as code.
func nestingDepth(code string, limit int) (max int, at int) {
	// stack of open constructs: '(' '[' '{' or '$' for a template
	// substitution; templates themselves are lexed in place. kinds holds
	// what each construct's closing bracket ends (the k* constants).
	stack := make([]byte, 0, 64)
	kinds := make([]byte, 0, 64)
	depth := func(extra int) bool {
		d := len(stack) + extra
		if d > max {
			max = d
		}
		return max > limit
	}
	run := 0 // current run of prefix operators
	// arrows[d] counts the arrows at bracket depth d since the last , or ;
	// there: `x => y => z => ...` nests functions without brackets, and
	// goja's parser is superlinear in that nesting.
	var arrows []int
	afterArrow := false
	arrowAt := func(d int) *int {
		for len(arrows) <= d {
			arrows = append(arrows, 0)
		}
		return &arrows[d]
	}
	// labels[d] counts the colons at depth d since the last , or ; that
	// neither close a `?` nor end a `case`/`default`: labels nest statements
	// without brackets (`l: l: l: ...`), and goja's parser reports every
	// duplicate against every enclosing label, quadratic in time and memory.
	var labels, questions []int
	var sawCase []bool
	slot := func(s *[]int, d int) *int {
		for len(*s) <= d {
			*s = append(*s, 0)
		}
		return &(*s)[d]
	}
	caseAt := func(d int) *bool {
		for len(sawCase) <= d {
			sawCase = append(sawCase, false)
		}
		return &sawCase[d]
	}
	resetAt := func(d int) {
		*arrowAt(d) = 0
		*slot(&labels, d) = 0
		*slot(&questions, d) = 0
		*caseAt(d) = false
	}
	top := func() byte {
		if len(kinds) == 0 {
			return kBlock
		}
		return kinds[len(kinds)-1]
	}
	// shadow counts brackets in text that is probably not code (strings,
	// regular expressions, templates), for the maximum only.
	shadow := 0
	shadowAt := func(c byte) bool {
		switch c {
		case '(', '[', '{':
			shadow++
			return depth(shadow)
		case ')', ']', '}':
			if shadow > 0 {
				shadow--
			}
		}
		return false
	}
	// The grammar state the next token sees.
	exprEnd := false  // an operand just ended: "/" divides
	stmt := true      // a statement may start here: "{" opens a block
	word := ""        // the previous token when it was a word
	fnExpr := false   // the pending function or class is an expression
	pending := 0      // 1: after `function`/`class`; 2: after its parameter list
	pendingDepth := 0 // the depth of that keyword
	inTemplate := false
	i := 0
	n := len(code)
	for i < n {
		c := code[i]
		if inTemplate {
			switch c {
			case '\\':
				i += 2
				continue
			case '`':
				inTemplate = false
				shadow = 0
				exprEnd, stmt, word = true, false, ""
			case '$':
				if i+1 < n && code[i+1] == '{' {
					stack = append(stack, '$')
					kinds = append(kinds, kExpr)
					inTemplate = false
					shadow = 0
					exprEnd, stmt, word = false, false, ""
					if depth(0) {
						return max, i
					}
					i += 2
					continue
				}
			default:
				if shadowAt(c) {
					return max, i
				}
			}
			i++
			continue
		}
		switch c {
		case ' ', '\t', '\r':
			i++
			continue
		case '\n':
			// A new line ends an arrow chain unless it follows the arrow
			// (`x =>` newline `body`).
			if !afterArrow {
				*arrowAt(len(stack)) = 0
			}
			if exprEnd {
				stmt = true // `a` newline `{`: a block after the inserted semicolon
			}
			i++
			continue
		}
		if c != '/' || i+1 >= n || (code[i+1] != '/' && code[i+1] != '*') {
			afterArrow = false
		}
		switch c {
		case '"', '\'':
			j := i + 1
			shadow = 0
			for j < n && code[j] != c && code[j] != '\n' {
				if code[j] == '\\' {
					j++
				} else if shadowAt(code[j]) {
					return max, j
				}
				j++
			}
			shadow = 0
			run = 0
			if j >= n || code[j] == '\n' {
				// Not a string (none spans lines): read what follows as code.
				i++
				exprEnd, stmt, word = false, false, ""
				continue
			}
			i = j + 1
			exprEnd, stmt, word = true, false, ""
			continue
		case '`':
			inTemplate = true
			shadow = 0
			run = 0
			i++
			continue
		case '/':
			if i+1 < n && code[i+1] == '/' {
				for i < n && code[i] != '\n' {
					i++
				}
				continue
			}
			if i+1 < n && code[i+1] == '*' {
				end := strings.Index(code[i+2:], "*/")
				if end < 0 {
					return max, i
				}
				i += end + 4
				continue
			}
			if !exprEnd {
				// A regular-expression literal, unless it runs into the end
				// of its line (then the "/" divides after all).
				j, class := i+1, false
				shadow = 0
				for j < n && code[j] != '\n' && (class || code[j] != '/') {
					switch code[j] {
					case '\\':
						j += 2
						continue
					case '[':
						class = true
					case ']':
						class = false
					}
					if shadowAt(code[j]) {
						return max, j
					}
					j++
				}
				shadow = 0
				if j < n && code[j] == '/' {
					j++
					for j < n && isIdentByte(code[j]) {
						j++
					}
					i = j
					run = 0
					exprEnd, stmt, word = true, false, ""
					continue
				}
			}
		case '(', '[', '{':
			k := kExpr
			switch {
			case c == '(' && (word == "if" || word == "while" || word == "for" || word == "with"):
				k = kStmtHead
			case c == '(' && pending == 1 && len(stack) == pendingDepth:
				k, pending = kParams, 2
			case c == '{' && pending != 0 && len(stack) == pendingDepth:
				// A function or class body.
				k, pending = kBlock, 0
				if fnExpr {
					k = kFuncExpr
				}
			case c == '{' && (stmt || word == "=>"):
				k = kBlock
			}
			stack = append(stack, c)
			kinds = append(kinds, k)
			if depth(0) {
				return max, i
			}
			exprEnd, stmt, word = false, k == kBlock || k == kFuncExpr, ""
		case ')', ']':
			resetAt(len(stack))
			k := kExpr
			if len(stack) > 0 {
				k = top()
				stack, kinds = stack[:len(stack)-1], kinds[:len(kinds)-1]
			}
			// After `if (...)` a statement starts; after a parameter list a
			// body; after `f(...)` or `a[...]` an operand ended.
			exprEnd, stmt, word = k == kExpr, k == kStmtHead, ""
		case ',', ';':
			resetAt(len(stack))
			exprEnd, stmt, word = false, c == ';', ""
		case '?':
			if i+1 < n && (code[i+1] == '?' || code[i+1] == '.' && !(i+2 < n && code[i+2] >= '0' && code[i+2] <= '9')) {
				i += 2
				run = 0
				exprEnd, stmt, word = false, false, ""
				continue
			}
			*slot(&questions, len(stack))++
			exprEnd, stmt, word = false, false, ""
		case ':':
			d := len(stack)
			label := false
			if q := slot(&questions, d); *q > 0 {
				*q--
			} else if c := caseAt(d); *c {
				*c = false
				label = true
			} else if top() == kBlock {
				l := slot(&labels, d)
				*l++
				label = true
				if depth(*l - 1) {
					return max, i
				}
			}
			exprEnd, stmt, word = false, label, ""
		case '=':
			if i+1 < n && code[i+1] == '>' {
				a := arrowAt(len(stack))
				*a++
				afterArrow = true
				if depth(*a) {
					return max, i
				}
				i += 2
				run = 0
				exprEnd, stmt, word = false, false, "=>"
				continue
			}
			exprEnd, stmt, word = false, false, ""
		case '}':
			resetAt(len(stack))
			k := kBlock
			if len(stack) > 0 {
				t := stack[len(stack)-1]
				k = top()
				stack, kinds = stack[:len(stack)-1], kinds[:len(kinds)-1]
				if t == '$' {
					inTemplate = true
				}
			}
			exprEnd, stmt, word = k == kExpr || k == kFuncExpr, k == kBlock, ""
		case '!', '~', '+', '-':
			if (c == '+' || c == '-') && exprEnd && i+1 < n && code[i+1] == c {
				// Postfix ++ or --: the operand still ends here.
				i += 2
				run = 0
				stmt = false
				continue
			}
			run++
			if depth(run / 2) {
				return max, i
			}
			exprEnd, stmt, word = false, false, ""
			i++
			continue
		default:
			if isIdentByte(c) {
				j := i
				for j < n && isIdentByte(code[j]) {
					j++
				}
				w := code[i:j]
				member := i > 0 && code[i-1] == '.'
				if (w == "case" || w == "default") && !member {
					*caseAt(len(stack)) = true
				}
				switch {
				case member:
					exprEnd, stmt = true, false
				case w == "function" || w == "class":
					// An expression where an operand is expected, a
					// declaration where a statement starts.
					fnExpr = !stmt && word != "default"
					pending, pendingDepth = 1, len(stack)
					exprEnd, stmt = false, false
				case w == "else" || w == "do" || w == "try" || w == "finally":
					exprEnd, stmt = false, true
				default:
					exprEnd, stmt = !operatorKeyword[w], false
				}
				word = w
				if member {
					word = ""
				}
				run = 0
				i = j
				continue
			}
			// A number such as .5 ends an operand; any other punctuator
			// expects one.
			number := c == '.' && i+1 < n && code[i+1] >= '0' && code[i+1] <= '9'
			exprEnd, stmt, word = number, false, ""
		}
		run = 0
		i++
	}
	return max, 0
}

// What the closing bracket of an open construct ends, which decides whether
// a "/" after it divides or starts a regular expression.
const (
	kExpr     byte = iota // an operand: a call, an index, an object literal
	kBlock                // a statement block or a declaration's body
	kStmtHead             // the head of if/for/while/with: a statement follows
	kParams               // a function's parameter list: its body follows
	kFuncExpr             // the body of a function or class expression: an operand
)

// operatorKeyword lists the words after which an operand is expected, so a
// "/" there starts a regular expression.
var operatorKeyword = map[string]bool{
	"return": true, "typeof": true, "instanceof": true, "in": true, "of": true, "new": true,
	"delete": true, "void": true, "throw": true, "case": true, "do": true, "else": true,
	"yield": true, "await": true, "extends": true,
}

// importKeyword reports the offset of an `import` keyword (not a property
// name) outside strings and comments, or -1. goja rejects import as a
// syntax error; the sandbox reports it as illegal access instead.
func importKeyword(code string) int {
	for i := 0; ; {
		j := strings.Index(code[i:], "import")
		if j < 0 {
			return -1
		}
		j += i
		before := byte(' ')
		if j > 0 {
			before = code[j-1]
		}
		after := byte(' ')
		if j+6 < len(code) {
			after = code[j+6]
		}
		if !isIdentByte(before) && before != '.' && !isIdentByte(after) {
			rest := strings.TrimLeft(code[j+6:], " \t\r\n")
			if strings.HasPrefix(rest, "(") || strings.HasPrefix(rest, ".") || strings.HasPrefix(rest, "{") ||
				strings.HasPrefix(rest, "*") || strings.HasPrefix(rest, "'") || strings.HasPrefix(rest, "\"") ||
				(len(rest) > 0 && isIdentByte(rest[0])) {
				return j
			}
		}
		i = j + 6
	}
}

func isIdentByte(c byte) bool {
	return c == '_' || c == '$' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c >= 0x80
}

// locationAt converts a byte offset in the plan to a 1-based location.
func locationAt(code string, off int) *Location {
	if off > len(code) {
		off = len(code)
	}
	line := 1 + strings.Count(code[:off], "\n")
	col := off - strings.LastIndexByte(code[:off], '\n')
	return &Location{Line: line, Column: col}
}

func illegal(kind, msg string, loc *Location) *Result {
	return &Result{Status: StatusIllegalAccess, Error: &ScriptError{
		Code: CodeValidationError, Kind: kind, Message: msg, Location: loc,
	}}
}

// astDepthFactor relates the syntax-tree depth limit to MaxNestingDepth: a
// bracket level is several tree levels (call, member, argument), and long
// operator chains nest without brackets.
const astDepthFactor = 8

// compiledPlan is a validated, instrumented plan ready to run.
type compiledPlan struct {
	prg *goja.Program
	// generators reports generator syntax in the plan (see the prelude).
	generators bool
	// regexps reports that the plan can make RegExp objects: it has a
	// regular-expression literal or names RegExp.
	regexps bool
	// unnamed has the bits of the gated globals the plan does not name
	// (globals.go): the prelude leaves those unprepared.
	unnamed uint32
}

// compilePlan parses, validates, instruments and compiles a plan. A non-nil
// *Result is the script's outcome (syntax_error or illegal_access).
func compilePlan(code string, l Limits) (*compiledPlan, *Result) {
	if r := checkSource(code, l); r != nil {
		return nil, r
	}
	src := planPrefix + code + planSuffix
	prog, err := parser.ParseFile(nil, planFileName, src, 0, parser.WithDisableSourceMaps)
	if err != nil {
		if off := importKeyword(code); off >= 0 {
			return nil, illegal(KindIllegalSyntax, "import is not available in the sandbox", locationAt(code, off))
		}
		return nil, syntaxResult(code, err)
	}
	body, ok := planBody(prog, code)
	if !ok {
		return nil, &Result{Status: StatusSyntaxError, Error: &ScriptError{
			Code: CodeSyntaxError, Message: "unbalanced braces: the script closes the function body it runs in",
			Location: locationAt(code, len(code)),
		}}
	}
	v := &validator{file: prog.File, maxDepth: astDepthFactor * l.MaxNestingDepth}
	inner := prog.Body[0].(*ast.ExpressionStatement).Expression.(*ast.FunctionLiteral).Body.List[0].(*ast.ReturnStatement).Argument.(*ast.FunctionLiteral)
	v.vars = &inner.DeclarationList
	v.stmts(body.List)
	if v.fail != nil {
		return nil, v.fail
	}
	if v.named&globalBigInt != 0 {
		v.bigOps.rewrite()
	}
	prg, err := goja.CompileAST(prog, true)
	if err != nil {
		return nil, syntaxResult(code, err)
	}
	return &compiledPlan{prg: prg, generators: v.generators, regexps: v.regexps, unnamed: gatedGlobalsAll &^ v.named}, nil
}

// planBody returns the plan's function body if the parsed program has exactly
// the wrapper's shape with the plan between its braces (so a plan cannot
// close the wrapper and run code outside it).
func planBody(prog *ast.Program, code string) (*ast.BlockStatement, bool) {
	if len(prog.Body) != 1 {
		return nil, false
	}
	es, ok := prog.Body[0].(*ast.ExpressionStatement)
	if !ok {
		return nil, false
	}
	outer, ok := es.Expression.(*ast.FunctionLiteral)
	if !ok || outer.Body == nil || len(outer.Body.List) != 1 {
		return nil, false
	}
	ret, ok := outer.Body.List[0].(*ast.ReturnStatement)
	if !ok {
		return nil, false
	}
	inner, ok := ret.Argument.(*ast.FunctionLiteral)
	if !ok || !inner.Async || inner.Generator || inner.Body == nil {
		return nil, false
	}
	base := prog.File.Base()
	left := int(inner.Body.LeftBrace) - base
	right := int(inner.Body.RightBrace) - base
	if left != len(planPrefix)-1 || right != len(planPrefix)+len(code)+1 {
		return nil, false
	}
	return inner.Body, true
}

// syntaxResult maps a parser or compiler error to syntax_error with a
// location in the plan's coordinates.
func syntaxResult(code string, err error) *Result {
	msg := err.Error()
	loc := &Location{Line: 1, Column: 1}
	switch e := err.(type) {
	case parser.ErrorList:
		if len(e) > 0 {
			msg = endOfInput(code, e[0].Position.Line, e[0].Position.Column, e[0].Message)
			loc = planLocation(code, e[0].Position.Line, e[0].Position.Column)
		}
	case *parser.Error:
		msg = endOfInput(code, e.Position.Line, e.Position.Column, e.Message)
		loc = planLocation(code, e.Position.Line, e.Position.Column)
	case *goja.CompilerSyntaxError:
		msg = e.Message
		if e.File != nil {
			p := e.File.Position(e.Offset)
			loc = planLocation(code, p.Line, p.Column)
		}
	case *goja.CompilerReferenceError:
		msg = e.Message
		if e.File != nil {
			p := e.File.Position(e.Offset)
			loc = planLocation(code, p.Line, p.Column)
		}
	}
	msg = strings.TrimPrefix(msg, planFileName+": ")
	return &Result{Status: StatusSyntaxError, Error: &ScriptError{Code: CodeSyntaxError, Message: msg, Location: loc}}
}

// endOfInput names a parse error at the wrapper's first token after the
// plan (the brace closing its function body: the plan left a parenthesis,
// bracket or expression open) as the end of the plan: the parser's
// "Unexpected token }" named a token the plan's author never wrote. Errors
// further on (a plan that closes its function body itself) keep the
// parser's message.
func endOfInput(code string, line, col int, msg string) string {
	if line == strings.Count(code, "\n")+2 && col == 1 && strings.HasPrefix(msg, "Unexpected token") {
		return "Unexpected end of input"
	}
	return msg
}

// planLocation converts a position in the wrapped source to the plan's
// coordinates, clamping positions in the wrapper to the plan's end.
func planLocation(code string, line, col int) *Location {
	lines := strings.Count(code, "\n") + 1
	if line > lines {
		return locationAt(code, len(code))
	}
	if line == 1 {
		col -= len(planPrefix)
		if col < 1 {
			col = 1
		}
	}
	if line < 1 {
		line = 1
	}
	return &Location{Line: line, Column: col}
}

// validator walks the plan's syntax tree, rejecting blocked constructs and
// instrumenting loops and function bodies with the step counter.
type validator struct {
	file *file.File
	fail *Result
	// depth is the current syntax-tree depth; maxDepth bounds it because
	// goja's compiler is quadratic in the depth of expression chains
	// (`1+1+...+1`, `void void ... x`, `2**2**...`).
	depth, maxDepth int
	// generators is set when the plan defines a generator function.
	generators bool
	// regexps is set when the plan has a regexp literal or names RegExp.
	regexps bool
	// named has the bits (gatedGlobals) of the globals the plan names.
	named uint32
	// bigOps are the operators rewritten when the plan can make BigInts.
	bigOps bigOps
	// closures counts the functions, arrows and classes walked so far and
	// continues the continue statements: a loop rewrite (rewriteFor) looks
	// at how they grew while its loop was walked.
	closures, continues int
	// rewritten is the block that replaces the loop statement just walked
	// (see rewriteFor); stmtAt puts it in the loop's place.
	rewritten *loopRewrite
	// vars is the var declaration list of the function being walked: a
	// var pattern split by splitRest declares its names there.
	vars *[]*ast.VariableDeclaration
	// temps counts the temporaries splitRest made.
	temps int
	// defaults are the default values of binding patterns (markDefaults).
	defaults map[*ast.AssignExpression]bool
	// suspends counts the await and yield expressions walked so far: an
	// assignment pattern with one cannot be moved into a setter (sinkRest).
	suspends int
}

// enter descends one level of the syntax tree; it reports false (and
// rejects the plan) past maxDepth.
// The node's position is computed only on failure: Idx0 of a left-deep
// chain walks the whole chain.
func (v *validator) enter(n ast.Node) bool {
	v.depth++
	if v.maxDepth > 0 && v.depth > v.maxDepth {
		v.reject(KindNestingTooDeep, fmt.Sprintf("script nests expressions or statements deeper than the limit of %d levels", v.maxDepth), n.Idx0())
		return false
	}
	return true
}

func (v *validator) reject(kind, msg string, idx file.Idx) {
	if v.fail != nil {
		return
	}
	var loc *Location
	if idx > 0 && v.file != nil {
		p := v.file.Position(int(idx) - v.file.Base())
		loc = &Location{Line: p.Line, Column: p.Column}
		if loc.Line == 1 {
			loc.Column -= len(planPrefix)
		}
	}
	v.fail = illegal(kind, msg, loc)
}

// stepCall builds the expression `__cm$step.s` positioned at idx: reading
// the property of the engine's step counter (a Go dynamic object) counts
// one step. goja runs it as two instructions (load the binding, get the
// property) that call into Go without a call frame, about half the cost of
// calling a native function `__cm$step()` once per loop iteration.
func stepCall(idx file.Idx) ast.Expression {
	return &ast.DotExpression{
		Left:       &ast.Identifier{Name: unistring.String(stepName), Idx: idx},
		Identifier: ast.Identifier{Name: stepProperty, Idx: idx},
	}
}

func stepStmt(idx file.Idx) ast.Statement {
	return &ast.ExpressionStatement{Expression: stepCall(idx)}
}

// countBody prefixes a loop body with a step.
func (v *validator) countBody(body ast.Statement, idx file.Idx) ast.Statement {
	v.stmtAt(&body)
	return &ast.BlockStatement{LeftBrace: idx, List: []ast.Statement{stepStmt(idx), body}, RightBrace: idx}
}

func (v *validator) ident(id *ast.Identifier) {
	if id == nil {
		return
	}
	name := id.Name.String()
	if name == "RegExp" {
		v.regexps = true
	}
	v.named |= gatedGlobals[name]
	if msg, ok := blockedIdentifiers[name]; ok {
		v.reject(KindIllegalBuiltinAccess, msg, id.Idx)
		return
	}
	if strings.HasPrefix(name, reservedPrefix) {
		v.reject(KindReservedIdentifier, fmt.Sprintf("identifier %q is reserved by the sandbox", name), id.Idx)
	}
}

func (v *validator) property(name string, idx file.Idx) {
	if msg, ok := blockedProperties[name]; ok {
		v.reject(KindIllegalPropertyAccess, msg, idx)
	}
}

func (v *validator) stmts(list []ast.Statement) {
	for i := range list {
		if v.fail != nil {
			return
		}
		v.stmtAt(&list[i])
	}
}

// stmtAt walks the statement at *p and, when it was a loop the validator
// rewrote, puts the rewrite in its place.
func (v *validator) stmtAt(p *ast.Statement) {
	loop := *p
	v.stmt(loop)
	if r := v.rewritten; r != nil {
		v.rewritten = nil
		if r.loop == loop && v.fail == nil {
			*p = r.block
		}
	}
}

func (v *validator) stmt(s ast.Statement) {
	if v.fail != nil || s == nil {
		return
	}
	defer func() { v.depth-- }()
	if !v.enter(s) {
		return
	}
	switch s := s.(type) {
	case *ast.BlockStatement:
		v.stmts(s.List)
	case *ast.ExpressionStatement:
		v.expr(s.Expression)
	case *ast.VariableStatement:
		v.declarations(&s.List, true)
	case *ast.LexicalDeclaration:
		v.declarations(&s.List, false)
	case *ast.FunctionDeclaration:
		v.function(s.Function)
	case *ast.ClassDeclaration:
		v.class(s.Class)
	case *ast.IfStatement:
		v.expr(s.Test)
		v.stmtAt(&s.Consequent)
		if s.Alternate != nil {
			v.stmtAt(&s.Alternate)
		}
	case *ast.ForStatement:
		closures, continues := v.closures, v.continues
		switch in := s.Initializer.(type) {
		case *ast.ForLoopInitializerExpression:
			v.expr(in.Expression)
		case *ast.ForLoopInitializerVarDeclList:
			v.declarations(&in.List, true)
		case *ast.ForLoopInitializerLexicalDecl:
			v.declarations(&in.LexicalDeclaration.List, false)
		}
		v.expr(s.Test)
		v.expr(s.Update)
		s.Body = v.countBody(s.Body, s.For)
		v.rewriteFor(s, v.closures == closures, v.continues == continues)
	case *ast.ForInStatement:
		suspending := v.forInto(s.Into)
		v.expr(s.Source)
		s.Body = v.countBody(s.Body, s.For)
		s.Into, s.Body = v.forIntoRest(s.Into, s.Body, s.For, suspending)
	case *ast.ForOfStatement:
		suspending := v.forInto(s.Into)
		v.expr(s.Source)
		s.Body = v.countBody(s.Body, s.For)
		s.Into, s.Body = v.forIntoRest(s.Into, s.Body, s.For, suspending)
	case *ast.WhileStatement:
		v.expr(s.Test)
		s.Body = v.countBody(s.Body, s.While)
		v.rewriteWhile(s)
	case *ast.DoWhileStatement:
		s.Body = v.countBody(s.Body, s.Do)
		v.expr(s.Test)
	case *ast.LabelledStatement:
		v.stmt(s.Statement)
		if r := v.rewritten; r != nil && r.loop == s.Statement {
			// The label stays on the loop (a continue may name it); the
			// block replaces the labelled statement.
			s.Statement = *r.slot
			*r.slot = s
			r.loop = s
		}
	case *ast.ReturnStatement:
		v.expr(s.Argument)
	case *ast.ThrowStatement:
		v.expr(s.Argument)
	case *ast.TryStatement:
		v.stmt(s.Body)
		if s.Catch != nil {
			v.target(s.Catch.Parameter)
			v.stmt(s.Catch.Body)
			var e ast.Expression = s.Catch.Parameter
			if parts := v.splitChild(&e, nil); len(parts) > 0 {
				s.Catch.Parameter = e.(ast.BindingTarget)
				s.Catch.Body.List = append([]ast.Statement{&ast.LexicalDeclaration{Idx: s.Catch.Catch, Token: token.LET, List: restBindings(parts)}}, s.Catch.Body.List...)
			}
		}
		if s.Finally != nil {
			v.stmt(s.Finally)
		}
	case *ast.SwitchStatement:
		v.expr(s.Discriminant)
		for _, c := range s.Body {
			v.expr(c.Test)
			v.stmts(c.Consequent)
		}
	case *ast.CaseStatement:
		v.expr(s.Test)
		v.stmts(s.Consequent)
	case *ast.WithStatement:
		v.reject(KindIllegalSyntax, "with statements are not allowed in the sandbox", s.With)
	case *ast.DebuggerStatement:
		v.reject(KindIllegalSyntax, "debugger statements are not allowed in the sandbox", s.Debugger)
	case *ast.BranchStatement:
		if s.Token == token.CONTINUE {
			v.continues++
		}
	case *ast.EmptyStatement:
	case *ast.BadStatement:
		v.reject(KindIllegalSyntax, "unparsable statement", s.From)
	default:
		v.reject(KindIllegalSyntax, fmt.Sprintf("unsupported statement %T", s), s.Idx0())
	}
}

// forInto walks a for-in/of head and reports await or yield in it.
func (v *validator) forInto(into ast.ForInto) bool {
	suspends := v.suspends
	switch in := into.(type) {
	case *ast.ForIntoVar:
		v.binding(in.Binding)
	case *ast.ForDeclaration:
		v.target(in.Target)
	case *ast.ForIntoExpression:
		v.expr(in.Expression)
	}
	return v.suspends != suspends
}

func (v *validator) bindings(list []*ast.Binding) {
	for _, b := range list {
		v.binding(b)
	}
}

func (v *validator) binding(b *ast.Binding) {
	if b == nil {
		return
	}
	v.target(b.Target)
	v.expr(b.Initializer)
}

// declarations validates the bindings of a var, let or const statement or
// a for loop's head: an object rest pattern at the top gets its source
// checked (objectSource), and one nested deeper is split out (splitRest)
// into a binding of its own after the one it was in.
func (v *validator) declarations(list *[]*ast.Binding, isVar bool) {
	var out []*ast.Binding
	for _, b := range *list {
		v.binding(b)
		if b == nil || b.Initializer == nil {
			out = append(out, b)
			continue
		}
		if hasObjectRest(b.Target) {
			b.Initializer = objectSource(b.Initializer)
		}
		parts := v.splitRest(b.Target, false, nil)
		out = append(out, b)
		if len(parts) > 0 {
			out = append(out, v.declareRest(parts, isVar)...)
		}
	}
	*list = out
}

// A restPart is an object pattern with a rest element that splitRest took
// out of a binding or assignment pattern: temp took its place there, and
// the pattern is destructured from the checked temp right after.
type restPart struct {
	pattern ast.Expression
	temp    *ast.Identifier
}

// splitRest replaces each object pattern with a rest element nested in the
// pattern t (and t itself when top) by a fresh temporary, and returns them
// outermost first. Only a declaration or an assignment at the top checks
// the source it copies; everywhere else (parameters, catch and for-in/of
// heads, nested patterns) the copy would be unchecked.
func (v *validator) splitRest(t ast.Expression, top bool, parts []restPart) []restPart {
	switch p := t.(type) {
	case *ast.ObjectPattern:
		if p.Rest != nil && top {
			parts = append(parts, restPart{pattern: p, temp: v.newTemp(p.Idx0())})
		}
		for _, prop := range p.Properties {
			if k, ok := prop.(*ast.PropertyKeyed); ok {
				parts = v.splitChild(&k.Value, parts)
			}
		}
	case *ast.ArrayPattern:
		for i := range p.Elements {
			parts = v.splitChild(&p.Elements[i], parts)
		}
		parts = v.splitChild(&p.Rest, parts)
	case *ast.Binding: // a default value in a binding pattern
		var e ast.Expression = p.Target
		parts = v.splitChild(&e, parts)
		p.Target = e.(ast.BindingTarget)
	case *ast.AssignExpression: // a default value in an assignment pattern
		parts = v.splitChild(&p.Left, parts)
	}
	return parts
}

// splitChild splits the pattern at *e, replacing it by its temporary.
func (v *validator) splitChild(e *ast.Expression, parts []restPart) []restPart {
	if *e == nil {
		return parts
	}
	n := len(parts)
	parts = v.splitRest(*e, true, parts)
	if len(parts) > n && parts[n].pattern == *e {
		*e = parts[n].temp
	}
	return parts
}

// restBindings destructures each split pattern from its checked temporary.
func restBindings(parts []restPart) []*ast.Binding {
	list := make([]*ast.Binding, len(parts))
	for i, p := range parts {
		list[i] = &ast.Binding{Target: p.pattern.(ast.BindingTarget), Initializer: objectSource(p.temp)}
	}
	return list
}

// declareRest returns the bindings of split patterns; var ones also go to
// the function's hoisted declarations, which goja binds names from.
func (v *validator) declareRest(parts []restPart, isVar bool) []*ast.Binding {
	list := restBindings(parts)
	if isVar && v.vars != nil {
		*v.vars = append(*v.vars, &ast.VariableDeclaration{Var: parts[0].temp.Idx, List: list})
	}
	return list
}

// forIntoRest moves an object rest pattern of a for-in/of head into the
// body: the head binds a temporary, the body starts with the pattern's
// checked destructuring and goes on with the loop's own (walked) body in a
// block of its own.
func (v *validator) forIntoRest(into ast.ForInto, body ast.Statement, idx file.Idx, suspending bool) (ast.ForInto, ast.Statement) {
	var first ast.Statement
	switch in := into.(type) {
	case *ast.ForIntoVar:
		var e ast.Expression = in.Binding.Target
		if parts := v.splitChild(&e, nil); len(parts) > 0 {
			in.Binding.Target = e.(ast.BindingTarget)
			first = &ast.VariableStatement{Var: idx, List: v.declareRest(parts, true)}
			if v.vars != nil {
				*v.vars = append(*v.vars, &ast.VariableDeclaration{Var: idx, List: []*ast.Binding{{Target: in.Binding.Target}}})
			}
		}
	case *ast.ForDeclaration:
		var e ast.Expression = in.Target
		if parts := v.splitChild(&e, nil); len(parts) > 0 {
			in.Target = e.(ast.BindingTarget)
			tok := token.LET
			if in.IsConst {
				tok = token.CONST
			}
			first = &ast.LexicalDeclaration{Idx: idx, Token: tok, List: restBindings(parts)}
		}
	case *ast.ForIntoExpression:
		if hasObjectRestIn(in.Expression) {
			temp := v.newTemp(idx)
			assign := &ast.AssignExpression{Operator: token.ASSIGN, Left: in.Expression, Right: temp}
			v.assignRest(assign, suspending)
			into = &ast.ForDeclaration{Idx: idx, Target: temp}
			first = &ast.ExpressionStatement{Expression: assign}
		}
	}
	if first == nil {
		return into, body
	}
	return into, &ast.BlockStatement{LeftBrace: idx, List: []ast.Statement{first, body}, RightBrace: idx}
}

// hasObjectRestIn reports an object rest pattern anywhere in the pattern t.
func hasObjectRestIn(t ast.Expression) bool {
	switch p := t.(type) {
	case *ast.ObjectPattern:
		if p.Rest != nil {
			return true
		}
		for _, prop := range p.Properties {
			if k, ok := prop.(*ast.PropertyKeyed); ok && hasObjectRestIn(k.Value) {
				return true
			}
		}
	case *ast.ArrayPattern:
		for _, e := range p.Elements {
			if hasObjectRestIn(e) {
				return true
			}
		}
		return hasObjectRestIn(p.Rest)
	case *ast.AssignExpression:
		return hasObjectRestIn(p.Left)
	}
	return false
}

// assignRest checks what the pattern of an assignment copies: the source
// of a rest at the top, and for one nested deeper, the value assigned to
// it, by assigning that value to a setter (a target of an assignment
// pattern may be any reference) that destructures it from __cm$obj's
// check. e has been walked; what assignRest adds is not. A setter cannot
// await or yield: a pattern with await or yield in it (suspending) and a
// nested object rest is refused.
func (v *validator) assignRest(e *ast.AssignExpression, suspending bool) {
	if e.Operator != token.ASSIGN || v.defaults[e] {
		return
	}
	if hasObjectRest(e.Left) {
		e.Right = objectSource(e.Right)
	}
	v.sinkRest(e.Left, suspending)
}

// sinkRest replaces each object rest pattern nested in the assignment
// pattern t by `__cm$obj.sink((x) => {P = __cm$obj(x)}).v`.
func (v *validator) sinkRest(t ast.Expression, suspending bool) {
	var child func(e *ast.Expression)
	child = func(e *ast.Expression) {
		if *e == nil {
			return
		}
		v.sinkRest(*e, suspending)
		if hasObjectRest(*e) {
			if suspending {
				v.reject(KindIllegalSyntax, "an assignment pattern with await or yield in it cannot have an object rest pattern nested in it in the sandbox: assign the nested value first, then destructure it", (*e).Idx0())
				return
			}
			*e = v.sink(*e)
		}
	}
	switch p := t.(type) {
	case *ast.ObjectPattern:
		for _, prop := range p.Properties {
			if k, ok := prop.(*ast.PropertyKeyed); ok {
				child(&k.Value)
			}
		}
	case *ast.ArrayPattern:
		for i := range p.Elements {
			child(&p.Elements[i])
		}
		child(&p.Rest)
	case *ast.AssignExpression:
		child(&p.Left)
	}
}

// newTemp is a new temporary of splitRest's (a name the plan cannot write).
func (v *validator) newTemp(idx file.Idx) *ast.Identifier {
	v.temps++
	return &ast.Identifier{Name: unistring.String(fmt.Sprintf("%srest%d", reservedPrefix, v.temps)), Idx: idx}
}

func (v *validator) sink(p ast.Expression) ast.Expression {
	idx := p.Idx0()
	x := v.newTemp(idx)
	fn := &ast.ArrowFunctionLiteral{Start: idx,
		ParameterList: &ast.ParameterList{Opening: idx, List: []*ast.Binding{{Target: x}}, Closing: idx},
		Body:          &ast.ExpressionBody{Expression: &ast.AssignExpression{Operator: token.ASSIGN, Left: p, Right: objectSource(x)}},
	}
	return &ast.DotExpression{
		Left: &ast.CallExpression{
			Callee:          &ast.DotExpression{Left: &ast.Identifier{Name: unistring.String(spreadName), Idx: idx}, Identifier: ast.Identifier{Name: "sink", Idx: idx}},
			ArgumentList:    []ast.Expression{fn},
			LeftParenthesis: idx, RightParenthesis: idx,
		},
		Identifier: ast.Identifier{Name: "v", Idx: idx},
	}
}

// hasObjectRest reports an object pattern with a rest element at the top.
func hasObjectRest(t ast.Expression) bool {
	p, ok := t.(*ast.ObjectPattern)
	return ok && p.Rest != nil
}

// objectSource wraps e in a call of the engine's check of what an object
// spread or rest copies: a string is copied character by character, one
// property each, in one Go call no interrupt stops, so a string longer
// than the array cap is refused there.
func objectSource(e ast.Expression) ast.Expression {
	idx := e.Idx0()
	return &ast.CallExpression{
		Callee:           &ast.Identifier{Name: unistring.String(spreadName), Idx: idx},
		ArgumentList:     []ast.Expression{e},
		LeftParenthesis:  idx,
		RightParenthesis: idx,
	}
}

func (v *validator) target(t ast.Expression) {
	if t == nil {
		return
	}
	v.markDefaults(t)
	v.expr(t)
}

// markDefaults notes the default values of the binding pattern t: they are
// assignment expressions in goja's tree, but not assignments (assignRest
// leaves them to splitRest).
func (v *validator) markDefaults(t ast.Expression) {
	switch p := t.(type) {
	case *ast.ObjectPattern:
		for _, prop := range p.Properties {
			if k, ok := prop.(*ast.PropertyKeyed); ok {
				v.markDefaults(k.Value)
			}
		}
	case *ast.ArrayPattern:
		for _, e := range p.Elements {
			v.markDefaults(e)
		}
		v.markDefaults(p.Rest)
	case *ast.AssignExpression:
		if v.defaults == nil {
			v.defaults = make(map[*ast.AssignExpression]bool)
		}
		v.defaults[p] = true
		v.markDefaults(p.Left)
	case *ast.Binding:
		v.markDefaults(p.Target)
	}
}

// params validates a parameter list and returns the object rest patterns
// it split out (splitRest), which the body destructures first.
func (v *validator) params(p *ast.ParameterList) []restPart {
	if p == nil {
		return nil
	}
	v.bindings(p.List)
	v.expr(p.Rest)
	var parts []restPart
	for _, b := range p.List {
		var e ast.Expression = b.Target
		parts = v.splitChild(&e, parts)
		b.Target = e.(ast.BindingTarget)
	}
	return v.splitChild(&p.Rest, parts)
}

// restPrologue is the statement that destructures split parameters: a var
// statement, as a body may redeclare a parameter with var.
func (v *validator) restPrologue(parts []restPart, idx file.Idx) []ast.Statement {
	if len(parts) == 0 {
		return nil
	}
	return []ast.Statement{&ast.VariableStatement{Var: idx, List: v.declareRest(parts, true)}}
}

func (v *validator) function(f *ast.FunctionLiteral) {
	if f == nil {
		return
	}
	v.closures++
	if f.Generator {
		v.generators = true
	}
	if f.Name != nil {
		v.ident(f.Name)
	}
	vars := v.vars
	v.vars = &f.DeclarationList
	defer func() { v.vars = vars }()
	parts := v.params(f.ParameterList)
	if f.Body != nil {
		v.stmts(f.Body.List)
		f.Body.List = append(append([]ast.Statement{stepStmt(f.Body.LeftBrace)}, v.restPrologue(parts, f.Body.LeftBrace)...), f.Body.List...)
	}
}

func (v *validator) class(c *ast.ClassLiteral) {
	if c == nil {
		return
	}
	v.closures++
	if c.Name != nil {
		v.ident(c.Name)
	}
	v.expr(c.SuperClass)
	for _, el := range c.Body {
		switch el := el.(type) {
		case *ast.FieldDefinition:
			v.key(el.Key, el.Computed, false)
			v.expr(el.Initializer)
		case *ast.MethodDefinition:
			v.key(el.Key, el.Computed, false)
			v.function(el.Body)
		case *ast.ClassStaticBlock:
			if el.Block != nil {
				vars := v.vars
				v.vars = &el.DeclarationList
				v.stmts(el.Block.List)
				v.vars = vars
				el.Block.List = append([]ast.Statement{stepStmt(el.Static)}, el.Block.List...)
			}
		}
	}
}

// key checks an object or class member key. Computed keys are expressions.
// Defining a member named constructor or __proto__ is harmless (and class
// constructors are common), so plain keys are checked only where they read
// a property: in destructuring patterns (access true).
func (v *validator) key(k ast.Expression, computed, access bool) {
	if computed {
		v.expr(k)
		return
	}
	if !access {
		return
	}
	switch k := k.(type) {
	case *ast.StringLiteral:
		v.property(k.Value.String(), k.Idx)
	case *ast.Identifier:
		v.property(k.Name.String(), k.Idx)
	}
}

// prop checks an object literal member (access false) or a destructuring
// pattern member (access true: its key reads a property).
func (v *validator) prop(p ast.Property, access bool) {
	switch p := p.(type) {
	case *ast.PropertyShort:
		v.ident(&p.Name)
		if access {
			v.property(p.Name.Name.String(), p.Name.Idx)
		}
		v.expr(p.Initializer)
	case *ast.PropertyKeyed:
		v.key(p.Key, p.Computed, access)
		v.expr(p.Value)
	default:
		v.expr(p)
	}
}

func (v *validator) exprs(list []ast.Expression) {
	for _, e := range list {
		v.expr(e)
	}
}

func (v *validator) expr(e ast.Expression) {
	if v.fail != nil || e == nil {
		return
	}
	defer func() { v.depth-- }()
	if !v.enter(e) {
		return
	}
	switch e := e.(type) {
	case *ast.Identifier:
		v.ident(e)
	case *ast.ArrayLiteral:
		v.exprs(e.Value)
	case *ast.ArrayPattern:
		v.exprs(e.Elements)
		v.expr(e.Rest)
	case *ast.ObjectLiteral:
		for _, p := range e.Value {
			v.prop(p, false)
			if sp, ok := p.(*ast.SpreadElement); ok {
				sp.Expression = objectSource(sp.Expression)
			}
		}
	case *ast.ObjectPattern:
		for _, p := range e.Properties {
			v.prop(p, true)
		}
		v.expr(e.Rest)
	case *ast.PropertyShort:
		v.prop(e, false)
	case *ast.PropertyKeyed:
		v.prop(e, false)
	case *ast.SpreadElement:
		v.expr(e.Expression)
	case *ast.AssignExpression:
		suspends := v.suspends
		v.expr(e.Left)
		suspending := v.suspends != suspends
		v.expr(e.Right)
		v.bigOps.note(e)
		v.assignRest(e, suspending)
	case *ast.BinaryExpression:
		v.expr(e.Left)
		v.expr(e.Right)
		v.bigOps.note(e)
	case *ast.UnaryExpression:
		v.expr(e.Operand)
	case *ast.ConditionalExpression:
		v.expr(e.Test)
		v.expr(e.Consequent)
		v.expr(e.Alternate)
	case *ast.SequenceExpression:
		v.exprs(e.Sequence)
	case *ast.CallExpression:
		v.expr(e.Callee)
		v.exprs(e.ArgumentList)
	case *ast.NewExpression:
		v.expr(e.Callee)
		v.exprs(e.ArgumentList)
	case *ast.DotExpression:
		v.expr(e.Left)
		v.property(e.Identifier.Name.String(), e.Identifier.Idx)
	case *ast.PrivateDotExpression:
		v.expr(e.Left)
	case *ast.BracketExpression:
		v.expr(e.Left)
		v.expr(e.Member)
		if s, ok := e.Member.(*ast.StringLiteral); ok {
			v.property(s.Value.String(), s.Idx)
		}
	case *ast.OptionalChain:
		v.expr(e.Expression)
	case *ast.Optional:
		v.expr(e.Expression)
	case *ast.FunctionLiteral:
		v.function(e)
	case *ast.ArrowFunctionLiteral:
		v.closures++
		vars := v.vars
		v.vars = &e.DeclarationList
		parts := v.params(e.ParameterList)
		switch b := e.Body.(type) {
		case *ast.BlockStatement:
			v.stmts(b.List)
			b.List = append(append([]ast.Statement{stepStmt(b.LeftBrace)}, v.restPrologue(parts, b.LeftBrace)...), b.List...)
		case *ast.ExpressionBody:
			v.expr(b.Expression)
			if len(parts) > 0 {
				e.Body = &ast.BlockStatement{LeftBrace: e.Start, List: append(append([]ast.Statement{stepStmt(e.Start)}, v.restPrologue(parts, e.Start)...),
					&ast.ReturnStatement{Return: e.Start, Argument: b.Expression}), RightBrace: e.Start}
				break
			}
			b.Expression = &ast.SequenceExpression{Sequence: []ast.Expression{stepCall(e.Start), b.Expression}}
		}
		v.vars = vars
	case *ast.ClassLiteral:
		v.class(e)
	case *ast.TemplateLiteral:
		v.expr(e.Tag)
		v.exprs(e.Expressions)
	case *ast.AwaitExpression:
		v.suspends++
		v.expr(e.Argument)
	case *ast.YieldExpression:
		v.suspends++
		v.expr(e.Argument)
	case *ast.Binding:
		v.binding(e)
	case *ast.MetaProperty:
		if e.Meta != nil && e.Meta.Name == "import" {
			v.reject(KindIllegalSyntax, "import.meta is not available in the sandbox", e.Idx)
		}
	case *ast.RegExpLiteral:
		v.regexps = true
	case *ast.NumberLiteral:
		if _, ok := e.Value.(*big.Int); ok {
			v.named |= globalBigInt
		}
	case *ast.ThisExpression, *ast.SuperExpression, *ast.NullLiteral,
		*ast.StringLiteral, *ast.BooleanLiteral:
	case *ast.BadExpression:
		v.reject(KindIllegalSyntax, "unparsable expression", e.From)
	default:
		v.reject(KindIllegalSyntax, fmt.Sprintf("unsupported expression %T", e), e.Idx0())
	}
}
