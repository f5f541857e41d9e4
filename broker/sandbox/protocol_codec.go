package sandbox

import (
	"encoding/json"
	"strconv"
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
		if !m.Oversize && (len(m.Input) == 0 || !json.Valid(m.Input)) {
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
			len(m.Data) == 0 || !json.Valid(m.Data) {
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
func decodeCallFast(body []byte) (_ *wireMsg, ok bool) {
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
	return &wireMsg{T: msgCall, ID: id, Call: call, Name: string(name), CallID: string(callID),
		Input: append(json.RawMessage(nil), input...)}, true
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
