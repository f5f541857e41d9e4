package engine

import "bytes"

// replaceLoneSurrogates rewrites, in place, every \u escape of a lone
// surrogate in the JSON text b as \ufffd, and returns b. goja's
// JSON.stringify, where a script's value becomes JSON, writes a lone
// surrogate ("\ud800") as such an escape (well-formed JSON.stringify,
// ES2019): valid for JSON's grammar, but a string no UTF-8 can hold, which
// strict parsers (serde_json, for one) refuse, while Go's decoder turns it
// into U+FFFD. Every JSON text that leaves the sandbox (the result, a tool
// call's input) passes here, so every client reads the same U+FFFD. An
// escaped pair (a high surrogate followed by a low one) is kept; the
// replacement is as long as the escape, so nothing moves.
//
// The text is searched once, for the first "\u" before a d or D; the
// rewrite starts at the run of backslashes that "\u" ends. In JSON a
// backslash is found only in a string and always starts an escape, and the
// byte before such a run ends a character or an escape, so an escape
// starts there.
func replaceLoneSurrogates(b []byte) []byte {
	start := surrogateEscapeIndex(b)
	if start < 0 {
		return b
	}
	for start > 0 && b[start-1] == '\\' {
		start--
	}
	return replaceFrom(b, start)
}

// replaceFrom is replaceLoneSurrogates of b from start, where an escape
// or a character starts.
func replaceFrom(b []byte, start int) []byte {
	for i := start; i < len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		i++ // the escaped character: a backslash escaped is no escape
		switch surrogateAt(b, i) {
		case 'h':
			if surrogateAt(b, i+6) == 'l' && b[i+5] == '\\' {
				i += 10 // a pair: its low half is consumed with it
				continue
			}
			copy(b[i+1:i+5], "fffd")
		case 'l':
			copy(b[i+1:i+5], "fffd")
		}
	}
	return b
}

// surrogateEscapeIndex is the index of the first "\u" of b followed by d
// or D, -1 when there is none.
func surrogateEscapeIndex(b []byte) int {
	for off := 0; ; {
		i := bytes.Index(b[off:], []byte(`\u`))
		if i < 0 {
			return -1
		}
		off += i + 2
		if off < len(b) && (b[off] == 'd' || b[off] == 'D') {
			return off - 2
		}
	}
}

// surrogateAt says whether b[i:] is the "uXXXX" of an escape of a high
// ('h') or low ('l') surrogate; 0 when it is neither.
func surrogateAt(b []byte, i int) byte {
	if i+5 > len(b) || b[i] != 'u' || (b[i+1] != 'd' && b[i+1] != 'D') || !isHex(b[i+3]) || !isHex(b[i+4]) {
		return 0
	}
	switch c := b[i+2]; {
	case c == '8' || c == '9' || c == 'a' || c == 'b' || c == 'A' || c == 'B':
		return 'h'
	case (c >= 'c' && c <= 'f') || (c >= 'C' && c <= 'F'):
		return 'l'
	}
	return 0
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}
