// Package clip cuts text to a byte budget without splitting a UTF-8
// character, for the places that quote a caller's or an upstream's text
// back in an error message, a log entry, a span attribute or a prompt.
// A cut in the middle of a character leaves invalid UTF-8, which a JSON
// encoder turns into U+FFFD and a header or log line carries as is.
package clip

import "unicode/utf8"

// String is the longest prefix of s of at most n bytes that ends on a
// character boundary: s itself when it fits, "" when n <= 0.
func String(s string, n int) string {
	if len(s) <= n {
		return s
	}
	if n <= 0 {
		return ""
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Ellipsis is String(s, n) followed by "…" when s was cut, so a reader
// sees that there was more.
func Ellipsis(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return String(s, n) + "…"
}
