package jsonbound

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// shape counts what Check bounds by decoding: the reference.
func shape(v any, depth int) (members, items, deepest int) {
	switch v.(type) {
	case map[string]any, []any:
		deepest = depth
	}
	add := func(m, i, d int) {
		members, items = members+m, items+i
		deepest = max(deepest, d)
	}
	switch v := v.(type) {
	case map[string]any:
		members = len(v)
		for _, e := range v {
			add(shape(e, depth+1))
		}
	case []any:
		items = len(v)
		for _, e := range v {
			add(shape(e, depth+1))
		}
	}
	return members, items, deepest
}

// TestCheckCountsAsADecoder: on each text, a bound equal to what the
// decoder counts passes and one below it is refused, naming that bound;
// colons, commas and brackets inside strings (escaped quotes included)
// count for nothing.
func TestCheckCountsAsADecoder(t *testing.T) {
	many := `{"k":[` + strings.Repeat(`{"a":1,"b":[1,2,[]]},`, 50) + `{}]}`
	texts := []string{
		`{}`, `[]`, `[[]]`, `[ ]`, `[ 1 ]`, `{"a":{}}`, `[{},[],""]`,
		`{"a:b,c[":"x,y:z{[","b":[1,2,3]}`,
		`{"q\"::,,[[":["\\",",\\\"[,",{"x\\":[]}]}`,
		"[\n\t1 ,\r\n 2 ]",
		many,
	}
	for _, text := range texts {
		var v any
		if err := json.Unmarshal([]byte(text), &v); err != nil {
			t.Fatalf("%s: %v", text, err)
		}
		m, i, d := shape(v, 1)
		if e := scan([]byte(text), Limits{Members: m, Items: i, Depth: d}); e != nil {
			t.Errorf("%s: at its own counts (%d members, %d items, depth %d): %v", text, m, i, d, e)
		}
		if e := Check([]byte(text), Limits{Members: m, Items: i, Depth: d}); e != nil {
			t.Errorf("%s: Check at its own counts: %v", text, e)
		}
		for _, c := range []struct {
			l    Limits
			what string
			n    int
		}{
			{Limits{Members: m - 1}, "object members", m},
			{Limits{Items: i - 1}, "array items", i},
			{Limits{Depth: d - 1}, "levels of nesting", d},
		} {
			if c.n <= 1 {
				continue // a bound of 0 is no bound
			}
			e := Check([]byte(text), c.l)
			if e == nil || e.What != c.what {
				t.Errorf("%s: %+v: got %v, want %s refused", text, c.l, e, c.what)
			}
		}
	}
}

// TestCheckRefusesTheHostileShapes: the shapes of the twenty-second pass,
// each under the 4 MiB body limit, are refused; a 4 MiB string is not.
func TestCheckRefusesTheHostileShapes(t *testing.T) {
	var keys strings.Builder
	keys.WriteString(`{"tool":"math:add","input":{"a":1,"b":2`)
	for i := range 200_000 {
		fmt.Fprintf(&keys, `,"k%d":0`, i)
	}
	keys.WriteString(`}}`)
	items := `{"script":"return 1","allowedTools":[` + strings.Repeat(`"x",`, 300_000) + `"x"]}`
	for name, c := range map[string]struct {
		text, what string
	}{
		"200,000 keys":         {keys.String(), "object members"},
		"300,000 allowedTools": {items, "array items"},
		"deep":                 {strings.Repeat("[", 2000), "levels of nesting"},
		"a 4 MiB string":       {`{"s":"` + strings.Repeat("a:b,[c{", 600_000) + `"}`, ""},
	} {
		e := Check([]byte(c.text), Request)
		switch {
		case c.what == "" && e != nil:
			t.Errorf("%s: refused: %v", name, e)
		case c.what != "" && (e == nil || e.What != c.what):
			t.Errorf("%s: got %v, want %s refused", name, e, c.what)
		}
	}
}

func BenchmarkCheck(b *testing.B) {
	for name, text := range map[string]string{
		"plain 64 KiB":       `{"script":"` + strings.Repeat("x", 64<<10) + `"}`,
		"structured 200 KiB": `[` + strings.Repeat(`{"a":"b:c,d","e":[1,2]},`, 9_000) + `{}]`,
	} {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				Check([]byte(text), Request)
			}
		})
	}
}
