package engine

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// Hand-written codecs for the frames of every tool call: call and wait
// (worker to parent) and result (parent to worker) are encoded without
// reflection, and a worker decodes result frames without it. They write
// what encoding/json writes for the same message (same keys, same order,
// omitempty alike), except that a call's input and a result's data, JSON
// checked with json.Valid, are copied as they are where encoding/json
// would compact them and escape '<', '>' and '&' (the same JSON value).
// Any message outside their narrow shape goes through encoding/json. The
// parent decodes call frames by hand too (decodeCallFast), but only bodies
// that json.Unmarshal would decode to the very same message, so that every
// other body, every malformed one among them, takes encoding/json's path
// and gets the same error as before; validateFromWorker checks both alike.

// appendFast appends m's JSON body to b when m is a call, wait or result
// message of the usual shape; ok is false (and b unchanged) otherwise.
func appendFast(b []byte, m *wireMsg) (_ []byte, ok bool) {
	orig := b
	if m.V != 0 || m.Init != nil || m.PID != 0 || m.Exec != nil || m.Done != nil || m.Tool != nil ||
		m.Found || m.Level != "" || m.Message != "" {
		return b, false
	}
	switch m.T {
	case msgCall:
		if m.Err != nil || m.Data != nil || m.Seen != 0 {
			return b, false
		}
		if !m.Oversize && (len(m.Input) == 0 || !m.checked && !json.Valid(m.Input)) {
			return b, false // encoding/json reports what is wrong
		}
		if m.Oversize && len(m.Input) != 0 {
			return b, false
		}
		b = appendHead(b, `{"t":"call"`, m.ID, m.Call)
		var ok bool
		if m.Name != "" {
			b = append(b, `,"name":`...)
			if b, ok = appendPlainString(b, m.Name); !ok {
				return orig, false
			}
		}
		if m.CallID != "" {
			b = append(b, `,"callId":`...)
			if b, ok = appendPlainString(b, m.CallID); !ok {
				return orig, false
			}
		}
		if len(m.Input) != 0 {
			b = append(append(b, `,"input":`...), m.Input...)
		}
		if m.Oversize {
			b = append(b, `,"oversize":true`...)
		}
		return append(b, '}'), true
	case msgResult:
		if m.Err != nil || m.Name != "" || m.CallID != "" || m.Input != nil || m.Oversize || m.Seen != 0 ||
			len(m.Data) == 0 || !m.checked && !json.Valid(m.Data) {
			return b, false
		}
		b = appendHead(b, `{"t":"result"`, m.ID, m.Call)
		b = append(append(b, `,"data":`...), m.Data...)
		return append(b, '}'), true
	case msgWait:
		if m.Err != nil || m.Name != "" || m.CallID != "" || m.Input != nil || m.Data != nil || m.Oversize {
			return b, false
		}
		b = appendHead(b, `{"t":"wait"`, m.ID, m.Call)
		if m.Seen != 0 {
			b = strconv.AppendUint(append(b, `,"seen":`...), m.Seen, 10)
		}
		return append(b, '}'), true
	}
	return b, false
}

// appendHead appends the type and the id and call numbers (omitted when
// zero, as encoding/json's omitempty does).
func appendHead(b []byte, start string, id, call uint64) []byte {
	b = append(b, start...)
	if id != 0 {
		b = strconv.AppendUint(append(b, `,"id":`...), id, 10)
	}
	if call != 0 {
		b = strconv.AppendUint(append(b, `,"call":`...), call, 10)
	}
	return b
}

// appendPlainString appends s as a JSON string when it needs no escaping
// in encoding/json's eyes (printable ASCII without '"', '\\', '<', '>',
// '&'); ok is false otherwise.
func appendPlainString(b []byte, s string) (_ []byte, ok bool) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return b, false
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"'), true
}

// decodeResultFast decodes a result frame as appendFast writes it
// ({"t":"result","id":N,"call":N,"data":...}); ok is false for any other
// body, which the caller decodes with encoding/json. Only a worker uses it:
// it trusts the parent, yet the data must be one JSON value as
// json.Unmarshal would require (it scans it all as well). The data is copied (the body's buffer is reused).
func decodeResultFast(body []byte) (_ *wireMsg, ok bool) {
	id, call, rest, ok := cutIDs(body, `{"t":"result","id":`)
	if !ok {
		return nil, false
	}
	if rest, ok = cutPrefix(rest, `,"data":`); !ok || len(rest) < 2 {
		return nil, false
	}
	data := rest[:len(rest)-1]
	if !json.Valid(data) { // more keys after data, say
		return nil, false
	}
	return &wireMsg{T: msgResult, ID: id, Call: call, Data: append(json.RawMessage(nil), data...)}, true
}

// cutIDs reads the start of a frame body as appendFast writes it: head
// (`{"t":"…","id":`), the execution's ID, `,"call":` and the call number;
// the body must end with '}'. rest is what follows the call number.
func cutIDs(body []byte, head string) (id, call uint64, rest []byte, ok bool) {
	if rest, ok = cutPrefix(body, head); !ok || body[len(body)-1] != '}' {
		return 0, 0, nil, false
	}
	if id, rest, ok = cutUint(rest); !ok {
		return 0, 0, nil, false
	}
	if rest, ok = cutPrefix(rest, `,"call":`); !ok {
		return 0, 0, nil, false
	}
	if call, rest, ok = cutUint(rest); !ok {
		return 0, 0, nil, false
	}
	return id, call, rest, true
}

// cutUint reads a JSON unsigned integer without leading zeros at the start
// of b.
func cutUint(b []byte) (n uint64, rest []byte, ok bool) {
	i := 0
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	if i == 0 || i > 20 || (b[0] == '0' && i > 1) {
		return 0, b, false
	}
	n, err := strconv.ParseUint(string(b[:i]), 10, 64)
	if err != nil || n == 0 {
		return 0, b, false
	}
	return n, b[i:], true
}

// decodeCallFast decodes a call frame as appendFast writes it for a tool
// name and call ID that need no escaping:
// {"t":"call","id":N,"call":N,"name":"…"[,"callId":"…"],"input":…}. It
// accepts only bodies that json.Unmarshal decodes to the same message (a
// narrower language: exact keys in this order, strings of printable ASCII
// without escapes, no white space around the input); ok is false for any
// other body, which the caller decodes with encoding/json. The parent uses
// it on what a worker sends (FuzzDecodeCallFast holds it to that). Strings
// and input are copied (the body's buffer is reused).
func decodeCallFast(body []byte) (_ *wireMsg, ok bool) { return decodeCall(body, false, nil) }

// decodeCall is decodeCallFast; with inPlace the input is not copied but
// kept in body, which the caller gives up. names, when not nil, is the tool
// name of the caller's previous call frame: the message takes that string
// when the name is the same, and names becomes this frame's name.
func decodeCall(body []byte, inPlace bool, names *string) (_ *wireMsg, ok bool) {
	id, call, rest, ok := cutIDs(body, `{"t":"call","id":`)
	if !ok {
		return nil, false
	}
	var name, callID []byte
	if rest, ok = cutPrefix(rest, `,"name":`); !ok {
		return nil, false
	}
	if name, rest, ok = cutPlainString(rest); !ok {
		return nil, false
	}
	if r, found := cutPrefix(rest, `,"callId":`); found {
		if callID, rest, ok = cutPlainString(r); !ok {
			return nil, false
		}
	}
	if rest, ok = cutPrefix(rest, `,"input":`); !ok || len(rest) < 2 {
		return nil, false
	}
	input := rest[:len(rest)-1]
	if isJSONSpace(input[0]) || isJSONSpace(input[len(input)-1]) || !json.Valid(input) {
		return nil, false // more keys after input, say
	}
	if !inPlace {
		input = append([]byte(nil), input...)
	}
	var nameText string
	switch {
	case names == nil:
		nameText = string(name)
	case *names == string(name):
		nameText = *names
	default:
		nameText = string(name)
		*names = nameText
	}
	return &wireMsg{T: msgCall, ID: id, Call: call, Name: nameText, CallID: string(callID),
		Input: input, checked: true}, true
}

func cutPrefix(b []byte, prefix string) ([]byte, bool) {
	if len(b) < len(prefix) || string(b[:len(prefix)]) != prefix {
		return b, false
	}
	return b[len(prefix):], true
}

// cutPlainString reads a JSON string of printable ASCII without escapes
// at the start of b and returns its contents.
func cutPlainString(b []byte) (s, rest []byte, ok bool) {
	if len(b) == 0 || b[0] != '"' {
		return nil, b, false
	}
	for i := 1; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			return b[1:i], b[i+1:], true
		case c < 0x20 || c >= 0x7f || c == '\\':
			return nil, b, false
		}
	}
	return nil, b, false
}

func isJSONSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// decodeExecFast decodes an exec frame as encoding/json writes the
// parent's exec message when it carries no tool metadata:
// {"t":"exec","id":N,"exec":{"code":"…"[,"allowed":[…],"hasAllowed":true]
// [,"context":{…}],"limits":{…}[,"missing":[…]][,"stream":true]}}, the
// limits' twelve fields in their order; ok is false for any other body
// (encoding/json decodes it). Only a worker uses it: it trusts its parent,
// yet the message is the one json.Unmarshal makes of the same body
// (strings with escapes or outside UTF-8 are unquoted by encoding/json;
// TestDecodeExecFast, FuzzDecodeExecFast). Nothing aliases body.
func decodeExecFast(body []byte) (_ *wireMsg, ok bool) {
	rest, ok := cutPrefix(body, `{"t":"exec","id":`)
	if !ok {
		return nil, false
	}
	id, rest, ok := cutUint(rest)
	if !ok {
		return nil, false
	}
	if rest, ok = cutPrefix(rest, `,"exec":{"code":`); !ok {
		return nil, false
	}
	ex := &wireExec{}
	if ex.Code, rest, ok = cutString(rest); !ok {
		return nil, false
	}
	if r, found := cutPrefix(rest, `,"allowed":`); found {
		if ex.Allowed, rest, ok = cutStrings(r); !ok {
			return nil, false
		}
	}
	if r, found := cutPrefix(rest, `,"hasAllowed":true`); found {
		ex.HasAllowed, rest = true, r
	}
	if r, found := cutPrefix(rest, `,"context":`); found {
		n := objectEnd(r)
		if n < 0 || !json.Valid(r[:n]) {
			return nil, false
		}
		ex.Context, rest = append(json.RawMessage(nil), r[:n]...), r[n:]
	}
	if rest, ok = cutPrefix(rest, `,"limits":`); !ok {
		return nil, false
	}
	if rest, ok = cutLimits(rest, &ex.Limits); !ok {
		return nil, false
	}
	if r, found := cutPrefix(rest, `,"missing":`); found {
		if ex.Missing, rest, ok = cutStrings(r); !ok {
			return nil, false
		}
	}
	if r, found := cutPrefix(rest, `,"stream":true`); found {
		ex.Stream, rest = true, r
	}
	if string(rest) != "}}" {
		return nil, false
	}
	return &wireMsg{T: msgExec, ID: id, Exec: ex}, true
}

// cutString reads a JSON string at the start of b. One of valid UTF-8
// without escapes or control characters is copied as it is; any other is
// left to encoding/json, which unquotes it (or refuses it) as json.Unmarshal would.
func cutString(b []byte) (s string, rest []byte, ok bool) {
	if len(b) == 0 || b[0] != '"' {
		return "", b, false
	}
	plain := true
	for i := 1; i < len(b); i++ {
		switch c := b[i]; {
		case c == '\\':
			plain = false
			i++
		case c == '"':
			if plain && utf8.Valid(b[1:i]) {
				return string(b[1:i]), b[i+1:], true
			}
			if err := json.Unmarshal(b[:i+1], &s); err != nil {
				return "", b, false
			}
			return s, b[i+1:], true
		case c < 0x20:
			return "", b, false
		}
	}
	return "", b, false
}

// cutStrings reads a JSON array of strings at the start of b; an empty
// one is an empty slice, as json.Unmarshal makes it.
func cutStrings(b []byte) (list []string, rest []byte, ok bool) {
	if rest, ok = cutPrefix(b, "["); !ok {
		return nil, b, false
	}
	list = []string{}
	if r, found := cutPrefix(rest, "]"); found {
		return list, r, true
	}
	for {
		var s string
		if s, rest, ok = cutString(rest); !ok {
			return nil, b, false
		}
		list = append(list, s)
		if r, found := cutPrefix(rest, "]"); found {
			return list, r, true
		}
		if rest, ok = cutPrefix(rest, ","); !ok {
			return nil, b, false
		}
	}
}

// objectEnd is the length of the JSON object at the start of b (found by
// its brackets outside strings; the caller checks it is valid JSON), or -1.
func objectEnd(b []byte) int {
	if len(b) == 0 || b[0] != '{' {
		return -1
	}
	depth, in := 0, false
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case in && c == '\\':
			i++
		case c == '"':
			in = !in
		case in:
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			if depth--; depth == 0 {
				return i + 1
			}
		}
	}
	return -1
}

// limitsFields are the keys encoding/json writes for Limits, in order.
var limitsFields = [...]string{"Timeout", "CPUTime", "MaxSteps", "MaxToolCalls", "MaxCallDepth", "MaxSourceBytes",
	"MaxNestingDepth", "MaxResultBytes", "MaxConsoleEntries", "MaxConsoleBytes", "MemoryBytes", "AllowConsole"}

// cutLimits reads Limits as encoding/json writes them: every field, in
// order, integers without fraction or exponent.
func cutLimits(b []byte, l *Limits) (rest []byte, ok bool) {
	rest = b
	ints := [...]*int64{(*int64)(&l.Timeout), (*int64)(&l.CPUTime), &l.MaxSteps, nil, nil, nil, nil, nil, nil, nil, &l.MemoryBytes}
	plain := [...]*int{nil, nil, nil, &l.MaxToolCalls, &l.MaxCallDepth, &l.MaxSourceBytes, &l.MaxNestingDepth,
		&l.MaxResultBytes, &l.MaxConsoleEntries, &l.MaxConsoleBytes, nil}
	for i, name := range limitsFields {
		sep := ","
		if i == 0 {
			sep = "{"
		}
		if rest, ok = cutPrefix(rest, sep+`"`+name+`":`); !ok {
			return b, false
		}
		if i == len(limitsFields)-1 {
			switch {
			case bytes.HasPrefix(rest, []byte("true")):
				l.AllowConsole, rest = true, rest[4:]
			case bytes.HasPrefix(rest, []byte("false")):
				rest = rest[5:]
			default:
				return b, false
			}
			break
		}
		j := 0
		if j < len(rest) && rest[j] == '-' {
			j++
		}
		k := j
		for k < len(rest) && rest[k] >= '0' && rest[k] <= '9' {
			k++
		}
		if k == j || (rest[j] == '0' && k > j+1) {
			return b, false
		}
		bits := 64
		if ints[i] == nil {
			bits = strconv.IntSize
		}
		n, err := strconv.ParseInt(string(rest[:k]), 10, bits)
		if err != nil {
			return b, false
		}
		if ints[i] != nil {
			*ints[i] = n
		} else {
			*plain[i] = int(n)
		}
		rest = rest[k:]
	}
	return cutPrefix(rest, "}")
}
