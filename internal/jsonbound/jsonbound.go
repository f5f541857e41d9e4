// Package jsonbound bounds the shape of a request's JSON text before it
// is decoded: how many object members (keys) and array items it holds in
// all, and how deep it nests. Decoding, validating against a schema and
// re-encoding cost far more per key or item than per byte of a string (4 µs a
// key against 18 ns a string byte in the tool-input validator), so a body
// within the byte limit could still cost seconds of CPU: a meta:invoke
// whose arguments held 200,000 keys cost the gateway 2.7 s. One pass over
// the bytes, before any decoding, refuses such a text.
package jsonbound

import (
	"bytes"
	"fmt"
)

// Limits are the bounds of one JSON text; 0 means no bound.
type Limits struct {
	// Members is the most object members (key-value pairs) in the whole
	// text, all objects together.
	Members int
	// Items is the most array items in the whole text, all arrays together.
	Items int
	// Depth is the deepest nesting of objects and arrays.
	Depth int
}

// Request is the bound of a request body on every entry of the gateway
// (MCP over HTTP, the broker's HTTP API). A model writes every key and
// every item of a call's arguments as at least one output token, and no
// model answers with more than about 128,000 tokens, so these are far
// above what an agent sends; at them the tool-input validator spends about
// as much as on a 4 MiB string (20,000 keys: 80 ms; 100,000 items: 90 ms).
var Request = Limits{Members: 20_000, Items: 100_000, Depth: 1_000}

// Excess says which bound a text passes.
type Excess struct {
	// What is "object members", "array items" or "levels of nesting".
	What  string
	Limit int
}

func (e *Excess) Error() string {
	return fmt.Sprintf("the JSON text has more than %d %s in all (the gateway's bound on one request)", e.Limit, e.What)
}

// Check reports whether buf passes one of l's bounds, nil when it does not.
// It counts the way a decoder would see buf, strings skipped, but does not
// validate it: a text that is not JSON is the decoder's to refuse. Most
// texts have fewer colons, commas and brackets than the bounds, which a
// count at memory speed tells; the others are scanned once.
func Check(buf []byte, l Limits) *Excess {
	if l == (Limits{}) {
		return nil
	}
	colons := bytes.Count(buf, []byte{':'})
	opens := bytes.Count(buf, []byte{'['})
	items := bytes.Count(buf, []byte{','}) + opens
	opens += bytes.Count(buf, []byte{'{'})
	if within(colons, l.Members) && within(items, l.Items) && within(opens, l.Depth) {
		return nil
	}
	return scan(buf, l)
}

func within(n, limit int) bool { return limit <= 0 || n <= limit }

func scan(buf []byte, l Limits) *Excess {
	// inArray[d] tells whether the container at depth d is an array; the
	// stack is bounded by l.Depth (a deeper text is refused on the way).
	var inArray []bool
	members, items := 0, 0
	first := false // right after '[': a value other than ']' is an item
	for i := 0; i < len(buf); i++ {
		c := buf[i]
		if first {
			switch c {
			case ' ', '\t', '\n', '\r':
				continue
			case ']':
			default:
				items++
			}
			first = false
		}
		switch c {
		case '"':
			// The string ends at the next quote after an even run of
			// backslashes (an odd one escapes it).
			for {
				j := bytes.IndexByte(buf[i+1:], '"')
				if j < 0 {
					return nil
				}
				i += 1 + j
				k := i - 1
				for buf[k] == '\\' {
					k--
				}
				if (i-1-k)%2 == 0 {
					break
				}
			}
		case '{', '[':
			inArray = append(inArray, c == '[')
			if !within(len(inArray), l.Depth) {
				return &Excess{What: "levels of nesting", Limit: l.Depth}
			}
			first = c == '['
		case '}', ']':
			if len(inArray) > 0 {
				inArray = inArray[:len(inArray)-1]
			}
		case ':':
			if len(inArray) > 0 && !inArray[len(inArray)-1] {
				if members++; !within(members, l.Members) {
					return &Excess{What: "object members", Limit: l.Members}
				}
			}
		case ',':
			if len(inArray) > 0 && inArray[len(inArray)-1] {
				items++
			}
		}
		if !within(items, l.Items) {
			return &Excess{What: "array items", Limit: l.Items}
		}
	}
	return nil
}
