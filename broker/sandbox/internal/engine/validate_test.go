package engine

import "testing"

// TestSyntaxErrorAtEndOfPlan: a plan left open (a parenthesis, bracket,
// call or expression) is reported as the end of the plan, at its end; the
// message named a token of the wrapper the plan runs in ("Unexpected token
// }" for `return (`), which the plan's author never wrote. An error inside
// the plan keeps the parser's message.
func TestSyntaxErrorAtEndOfPlan(t *testing.T) {
	for _, tc := range []struct {
		code, msg string
		line, col int
	}{
		{"return (", "Unexpected end of input", 1, 9},
		{"return 1 +", "Unexpected end of input", 1, 11},
		{"foo(", "Unexpected end of input", 1, 5},
		{"const a = [1,\n  2", "Unexpected end of input", 2, 4},
		{"const b = ;", "Unexpected token ;", 1, 11},
		{"return 1 }", "Unexpected token }", 1, 11}, // closes the body it runs in
	} {
		_, r := compilePlan(tc.code, Limits{})
		if r == nil || r.Error == nil || r.Error.Code != CodeSyntaxError {
			t.Fatalf("%q: result %+v, want a syntax error", tc.code, r)
		}
		if r.Error.Message != tc.msg || r.Error.Location == nil || *r.Error.Location != (Location{Line: tc.line, Column: tc.col}) {
			t.Errorf("%q: %q at %+v, want %q at %d:%d", tc.code, r.Error.Message, r.Error.Location, tc.msg, tc.line, tc.col)
		}
	}
}
