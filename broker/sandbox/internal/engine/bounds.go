package engine

import (
	"encoding/json"
	"fmt"

	"github.com/codemode-gateway/caddy-codemode/internal/clip"
)

// Bounds the engine applies whatever the limits: they keep hostile input
// from reaching recursive Go code (goja's JSON parser and stringify,
// regexp2's analyzer) or from being copied into messages without end.
const (
	// MaxJSONDepth is the deepest nesting of arrays and objects the sandbox
	// parses or writes as JSON (JSON.parse, JSON.stringify, tool inputs and
	// results, the script's result). goja recurses in Go once per level.
	MaxJSONDepth = 1000
	// MaxToolNameBytes bounds a tool name: callTool and getTool answer a
	// longer name as unknown without looking it up.
	MaxToolNameBytes = maxToolNameBytes
	// MaxErrorBytes bounds the message of an error a script sees or
	// reports (tool errors, uncaught errors) and of every error text the
	// engine returns; longer texts are cut and marked.
	MaxErrorBytes = 8 << 10
	// maxRegExpSource and maxRegExpNesting bound a pattern given as a
	// string (new RegExp(s), s.match(p)): regexp2's analyzer recurses once
	// per group, and a huge pattern compiles to a huge program.
	maxRegExpSource  = 256 << 10
	maxRegExpNesting = 100
	// maxLookups bounds the distinct tool names one script may look up
	// beyond its tool-call budget (getTool and callTool of unknown names):
	// each is a round trip and a cache entry outside the script's memory.
	maxLookupsExtra = 256
	// MaxContextDepth is the deepest nesting of Request.Context (the
	// script's metaContext, which the prelude copies and freezes level by
	// level).
	MaxContextDepth = 64
)

// CheckContext reports why ctx may not be a script's context: not JSON,
// or nested deeper than MaxContextDepth; "" means it may. Execute refuses
// such a context with MESSAGE_INVALID, an engine error; the layers that
// take a context from a caller (the broker's /execute, meta:execute) check
// it first, so that a caller's mistake is refused as the caller's, not
// reported as the engine's (which a client is told it may retry).
func CheckContext(ctx json.RawMessage) string {
	if !json.Valid(ctx) {
		return "context is not valid JSON"
	}
	if msg := checkJSON(string(ctx), MaxContextDepth, 0); msg != "" {
		return "context: " + msg
	}
	return ""
}

// checkJSON reports why text may not be parsed: nesting deeper than
// maxDepth or more than maxValues values. It does not validate the syntax
// (the parser does); "" means go ahead.
func checkJSON(text string, maxDepth int, maxValues int64) string {
	depth := 0
	var values int64 = 1
	inString := false
	for i := 0; i < len(text); i++ {
		c := text[i]
		if inString {
			switch c {
			case '\\':
				i++
			case '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '[', '{':
			depth++
			if depth > maxDepth {
				return fmt.Sprintf("JSON nested deeper than the limit of %d levels", maxDepth)
			}
		case ']', '}':
			depth--
		case ',':
			values++
			if maxValues > 0 && values > maxValues {
				return fmt.Sprintf("JSON text has more than the sandbox limit of %d values", maxValues)
			}
		}
	}
	return ""
}

// checkPattern reports why a regular-expression source may not be
// compiled; "" means it may.
func checkPattern(p string) string {
	if len(p) > maxRegExpSource {
		return fmt.Sprintf("pattern of %d bytes exceeds the sandbox limit of %d bytes", len(p), maxRegExpSource)
	}
	depth := 0
	class := false
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case c == '\\':
			i++
		case class:
			if c == ']' {
				class = false
			}
		case c == '[':
			class = true
		case c == '(':
			depth++
			if depth > maxRegExpNesting {
				return fmt.Sprintf("pattern nests groups deeper than the sandbox limit of %d", maxRegExpNesting)
			}
		case c == ')':
			if depth > 0 {
				depth--
			}
		}
	}
	return ""
}

// clipText cuts s to at most n bytes (on a UTF-8 boundary) and says how
// much was cut.
func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := clip.String(s, n)
	return cut + fmt.Sprintf("... (%d more bytes)", len(s)-len(cut))
}

// clipName shortens a tool name for a message.
func clipName(name string) string { return clipText(name, 100) }
