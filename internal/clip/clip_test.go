package clip

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestString(t *testing.T) {
	for _, tc := range []struct {
		s    string
		n    int
		want string
	}{
		{"", 0, ""},
		{"", 5, ""},
		{"abc", 0, ""},
		{"abc", -1, ""},
		{"abc", 2, "ab"},
		{"abc", 3, "abc"},
		{"abc", 10, "abc"},
		{"aé", 2, "a"},   // é is two bytes: not split
		{"aé", 3, "aé"},  // fits exactly
		{"日本", 4, "日"},   // three-byte characters
		{"日本", 2, ""},    // not even the first fits
		{"a😀b", 4, "a"},  // a four-byte character
		{"a😀b", 5, "a😀"}, //
		// Invalid UTF-8 is cut at a byte that could start a character,
		// never scanned past the start of s.
		{"\x80\x80\x80", 2, ""},
		{"a\xffb", 2, "a\xff"},
	} {
		if got := String(tc.s, tc.n); got != tc.want {
			t.Errorf("String(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
	}
}

func TestStringKeepsValidUTF8(t *testing.T) {
	s := strings.Repeat("añ日😀", 50)
	for n := 0; n <= len(s)+1; n++ {
		got := String(s, n)
		if len(got) > n || !utf8.ValidString(got) || !strings.HasPrefix(s, got) {
			t.Fatalf("String(s, %d) = %q: over the budget, invalid or not a prefix", n, got)
		}
		if n < len(s) && len(got) < n-3 {
			t.Fatalf("String(s, %d) kept %d bytes: cut more than one character", n, len(got))
		}
	}
}

func TestEllipsis(t *testing.T) {
	if got := Ellipsis("abc", 3); got != "abc" {
		t.Errorf("Ellipsis of a fitting string = %q", got)
	}
	if got := Ellipsis("aéb", 2); got != "a…" {
		t.Errorf(`Ellipsis("aéb", 2) = %q, want "a…"`, got)
	}
}
