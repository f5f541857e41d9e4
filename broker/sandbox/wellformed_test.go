package sandbox

import "testing"

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
	} {
		if got := string(replaceLoneSurrogates([]byte(tc.in))); got != tc.want {
			t.Errorf("%s: got %s, want %s", tc.in, got, tc.want)
		}
	}
}
