package broker

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"
)

// surrogateEscape matches an escaped surrogate pair or, failing that, one
// escaped surrogate alone.
var surrogateEscape = regexp.MustCompile(`\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}|\\u[dD][89a-fA-F][0-9a-fA-F]{2}`)

// loneSurrogates returns the escapes of lone surrogates in the JSON text
// line: strict parsers (serde_json) refuse them.
func loneSurrogates(line string) []string {
	var lone []string
	for _, m := range surrogateEscape.FindAllString(strings.ReplaceAll(line, `\\`, ""), -1) {
		if len(m) == 6 {
			lone = append(lone, m)
		}
	}
	return lone
}

// TestHTTPStreamWellFormed: a script's lone surrogates (in its result, a
// tool call's input, a log line and an error's message) reach the NDJSON
// stream as U+FFFD, not as "\ud800" escapes a strict JSON parser refuses;
// a surrogate pair is kept.
func TestHTTPStreamWellFormed(t *testing.T) {
	_, srv := newTestBroker(t, nil)
	for _, tc := range []struct {
		name, code string
		last       string
	}{
		{"result, input and log", `
console.log("log \ud800", {k: "\udc00"});
await callTool("text:upper", {text: "a\ud800b"});
return {s: "\ud800", pair: "\ud83d\ude00", ["k\udfff"]: ["\udc00\ud800"]};`, EventResult},
		{"error message", `throw new Error("bad \ud800 input");`, EventError},
		{"tool error message", `await callTool("kv:get", {key: 5, "\ud800": 1}); return 1;`, EventError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startExecute(t, srv.URL, map[string]any{"code": tc.code}, nil)
			var lines []string
			for s.sc.Scan() {
				lines = append(lines, s.sc.Text())
			}
			var last event
			for _, l := range lines {
				if !utf8.ValidString(l) {
					t.Errorf("not UTF-8: %q", l)
				}
				if lone := loneSurrogates(l); len(lone) > 0 {
					t.Errorf("lone surrogates %v in %s", lone, l)
				}
				if err := json.Unmarshal([]byte(l), &last); err != nil {
					t.Fatalf("%s: %v", l, err)
				}
			}
			if last.Type != tc.last {
				t.Fatalf("last event %s: %s", last.Type, strings.Join(lines, "\n"))
			}
			if tc.last == EventResult {
				var res struct {
					Result map[string]any `json:"result"`
				}
				last.decode(t, &res)
				if res.Result["s"] != "\uFFFD" || res.Result["pair"] != "\U0001F600" {
					t.Errorf("result %v", res.Result)
				}
			}
		})
	}
}

// TestHTTPStreamResultNotInflated: a result of 900 KB of "<" (within the
// sandbox's 1 MiB result bound) reaches the NDJSON stream at about its own
// size: encoding/json's HTML escaping wrote each "<" as \u003c, six bytes,
// and the stream carried 5.4 MB for it.
func TestHTTPStreamResultNotInflated(t *testing.T) {
	// bigResultEngine: building the 900 KiB result under -race on a loaded
	// machine ran past the secure preset's 3.5 s (TIMEOUT, -count=2 of
	// ./... at load 20-25); a time limit is not what this test is about.
	_, srv := newTestBroker(t, func(o *BrokerOptions) { o.Engine = bigResultEngine() })
	const n = 900 << 10
	code, _, body := do(t, http.MethodPost, srv.URL+"/execute", map[string]any{"code": `return "<&>".repeat(` + fmt.Sprint(n/3) + `);`}, nil)
	lines := strings.Split(strings.TrimSpace(string(body)), "\n")
	wire, last := len(body), lines[len(lines)-1]
	if code != http.StatusOK {
		t.Fatalf("%d %.200s", code, body)
	}
	var ev event
	var res struct {
		Result string `json:"result"`
	}
	if err := json.Unmarshal([]byte(last), &ev); err != nil || ev.Type != EventResult {
		t.Fatalf("last event: %.200s", last)
	}
	ev.decode(t, &res)
	if len(res.Result) != n {
		t.Fatalf("result of %d bytes, want %d", len(res.Result), n)
	}
	t.Logf("a result of %d bytes: %d bytes of NDJSON", n, wire)
	if limit := bigResultEngine().(sandbox.LimitsReporter).Limits().MaxResultBytes; wire > limit {
		t.Errorf("%d bytes on the wire for a %d-byte result, over the %d-byte result bound", wire, n, limit)
	}
}
