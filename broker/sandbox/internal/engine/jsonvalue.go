package engine

import (
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/dop251/goja"
)

// jsonValue builds in rt the value JSON.parse would make of text, a tool's
// result that json.Valid and checkJSON accepted. goja's JSON.parse reads its
// text through encoding/json's token stream (an allocation per token, an
// error value made and dropped at the end); this builds plain JavaScript
// values directly: objects with Object.prototype whose properties are
// created as JSON.parse creates them (own data properties, never through a
// setter a script put on Object.prototype, "__proto__" an own property
// too), genuine arrays, strings and numbers. Strings with escapes or
// invalid UTF-8 are decoded by encoding/json, as goja's JSON.parse decodes
// them (lone surrogates become U+FFFD). ok is false when the text is
// something it leaves to JSON.parse (a number out of range, which JSON.parse
// refuses with its own error; anything malformed); nothing of the value is
// visible to the script then.
func jsonValue(rt *goja.Runtime, text string) (v goja.Value, ok bool) {
	p := jsonBuilder{rt: rt, s: text}
	v, ok = p.value(0)
	if !ok {
		return nil, false
	}
	p.space()
	return v, p.i == len(p.s)
}

type jsonBuilder struct {
	rt *goja.Runtime
	s  string
	i  int
}

func (p *jsonBuilder) space() {
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *jsonBuilder) value(depth int) (goja.Value, bool) {
	p.space()
	if p.i >= len(p.s) || depth > MaxJSONDepth {
		return nil, false
	}
	switch c := p.s[p.i]; {
	case c == '{':
		p.i++
		o := p.rt.NewObject()
		p.space()
		if p.i < len(p.s) && p.s[p.i] == '}' {
			p.i++
			return o, true
		}
		for {
			p.space()
			k, ok := p.str()
			if !ok {
				return nil, false
			}
			p.space()
			if p.i >= len(p.s) || p.s[p.i] != ':' {
				return nil, false
			}
			p.i++
			v, ok := p.value(depth + 1)
			if !ok {
				return nil, false
			}
			if o.DefineDataProperty(k, v, goja.FLAG_TRUE, goja.FLAG_TRUE, goja.FLAG_TRUE) != nil {
				return nil, false
			}
			if more, ok := p.after('}'); !ok {
				return nil, false
			} else if !more {
				return o, true
			}
		}
	case c == '[':
		p.i++
		var items []any
		p.space()
		if p.i < len(p.s) && p.s[p.i] == ']' {
			p.i++
			return p.rt.NewArray(), true
		}
		for {
			v, ok := p.value(depth + 1)
			if !ok {
				return nil, false
			}
			items = append(items, v)
			if more, ok := p.after(']'); !ok {
				return nil, false
			} else if !more {
				return p.rt.NewArray(items...), true
			}
		}
	case c == '"':
		s, ok := p.str()
		if !ok {
			return nil, false
		}
		return p.rt.ToValue(s), true
	case c == 't':
		return goja.Value(p.rt.ToValue(true)), p.word("true")
	case c == 'f':
		return goja.Value(p.rt.ToValue(false)), p.word("false")
	case c == 'n':
		return goja.Null(), p.word("null")
	case c == '-' || (c >= '0' && c <= '9'):
		start := p.i
		p.i++
		for p.i < len(p.s) {
			c := p.s[p.i]
			if (c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-' {
				p.i++
				continue
			}
			break
		}
		num := p.s[start:p.i]
		f, err := strconv.ParseFloat(num, 64)
		if err != nil || !jsonNumber(num) {
			return nil, false
		}
		return p.rt.ToValue(f), true
	}
	return nil, false
}

// after reads what follows a member or element: a comma (more) or the
// closing bracket end; ok is false for anything else.
func (p *jsonBuilder) after(end byte) (more, ok bool) {
	p.space()
	if p.i >= len(p.s) {
		return false, false
	}
	switch p.s[p.i] {
	case ',':
		p.i++
		return true, true
	case end:
		p.i++
		return false, true
	}
	return false, false
}

func (p *jsonBuilder) word(w string) bool {
	if !strings.HasPrefix(p.s[p.i:], w) {
		return false
	}
	p.i += len(w)
	return true
}

// str reads a string token; p.i is at its opening quote.
func (p *jsonBuilder) str() (string, bool) {
	if p.i >= len(p.s) || p.s[p.i] != '"' {
		return "", false
	}
	start := p.i
	escaped := false
	for p.i++; p.i < len(p.s); p.i++ {
		switch c := p.s[p.i]; {
		case c == '\\':
			escaped = true
			p.i++
		case c < 0x20:
			escaped = true // not JSON; encoding/json refuses it below
		case c == '"':
			p.i++
			raw := p.s[start+1 : p.i-1]
			if !escaped && utf8.ValidString(raw) {
				return raw, true
			}
			var s string
			if json.Unmarshal([]byte(p.s[start:p.i]), &s) != nil {
				return "", false
			}
			return s, true
		}
	}
	return "", false
}

// jsonNumber reports whether s is a number in JSON's grammar:
// -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func jsonNumber(s string) bool {
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	digits := func() int {
		n := 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
			n++
		}
		return n
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case digits() == 0:
		return false
	}
	if i < len(s) && s[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(s)
}
