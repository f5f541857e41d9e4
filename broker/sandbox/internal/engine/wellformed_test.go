package engine

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// TestReplaceLoneSurrogates: a lone surrogate's escape becomes \ufffd, a
// pair and an escaped backslash followed by "ud800" are kept.
func TestReplaceLoneSurrogates(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`"\ud800"`, `"\ufffd"`},
		{`"\udc00x"`, `"\ufffdx"`},
		{`"\uD800\uDC00"`, `"\uD800\uDC00"`},
		{`"\ud83d\ude00"`, `"\ud83d\ude00"`},
		{`"\ud83d\ud83d\ude00"`, `"\ufffd\ud83d\ude00"`},
		{`"\ude00\ud83d"`, `"\ufffd\ufffd"`},
		{`"\\ud800"`, `"\\ud800"`},
		{`"\\\ud800"`, `"\\\ufffd"`},
		{`{"\ud800":["\udfff",1]}`, `{"\ufffd":["\ufffd",1]}`},
		{`"\u0041\ud7ff\ue000"`, `"\u0041\ud7ff\ue000"`},
		{`"\ud8"`, `"\ud8"`},
		{`"ab\\\\\\ud800\ud800"`, `"ab\\\\\\ud800\ufffd"`},
		{`"\n\"\\\ud800"`, `"\n\"\\\ufffd"`},
	} {
		if got := string(replaceLoneSurrogates([]byte(tc.in))); got != tc.want {
			t.Errorf("%s: got %s, want %s", tc.in, got, tc.want)
		}
	}
}

// TestReplaceLoneSurrogatesStart: the rewrite, which starts at the first
// "\u" before a d or D (at the run of backslashes it ends), leaves what a
// rewrite of the whole text leaves, for JSON strings of escapes that
// border each other.
func TestReplaceLoneSurrogatesStart(t *testing.T) {
	tokens := []string{`a`, `u`, `d800`, `\\`, `\"`, `\n`, `\ud800`, `\uD800`, `\udc00`, `\ud83d\ude00`, `\u0041`, `\u00e9`}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		var sb strings.Builder
		sb.WriteByte('"')
		for range rng.IntN(12) {
			sb.WriteString(tokens[rng.IntN(len(tokens))])
		}
		sb.WriteByte('"')
		in := sb.String()
		whole := string(replaceFrom([]byte(in), 0))
		if got := string(replaceLoneSurrogates([]byte(in))); got != whole {
			t.Fatalf("%s: got %s, a rewrite of the whole text gives %s", in, got, whole)
		}
	}
}
