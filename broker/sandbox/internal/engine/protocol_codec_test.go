package engine

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"testing"
	"time"
	"unsafe"
)

// TestAppendFastAsEncodingJSON: the hand-written encoder writes the frames
// of tool calls as encoding/json does (byte for byte when the raw input or
// data is compact without '<', '>', '&'; the same message when decoded
// otherwise), and leaves every other message to encoding/json.
func TestAppendFastAsEncodingJSON(t *testing.T) {
	fast := []*wireMsg{
		{T: msgCall, ID: 1, Call: 1, Name: "echo", CallID: "c1", Input: json.RawMessage(`{"i":1}`)},
		{T: msgCall, ID: math.MaxUint64, Call: math.MaxUint64, Name: "github.list_issues", Input: json.RawMessage(`null`)},
		{T: msgCall, ID: 7, Call: 3, Name: "echo", CallID: "x", Input: json.RawMessage(`{"s":"<a href=\"x\">&</a>", "u":"\u2028é"}`)},
		{T: msgCall, ID: 7, Call: 4, Name: "echo", Oversize: true},
		{T: msgCall, ID: 7, Call: 5, Input: json.RawMessage(`[1, 2 ,3]`)},
		{T: msgResult, ID: 2, Call: 9, Data: json.RawMessage(`{"ok":true,"n":[1,2,3]}`)},
		{T: msgResult, ID: 2, Call: 10, Data: json.RawMessage(" \"<tag>\"\n")},
		{T: msgWait, ID: 3},
		{T: msgWait, ID: 3, Seen: 42},
	}
	for _, m := range fast {
		want, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := appendFast(nil, m)
		if !ok {
			t.Errorf("%s: not encoded by hand", want)
			continue
		}
		compact := true
		for _, raw := range []json.RawMessage{m.Input, m.Data} {
			var buf bytes.Buffer
			if len(raw) > 0 && (json.Compact(&buf, raw) != nil || !bytes.Equal(buf.Bytes(), raw) || bytes.ContainsAny(raw, "<>&")) {
				compact = false
			}
		}
		if compact && !bytes.Equal(got, want) {
			t.Errorf("hand-written %s, encoding/json %s", got, want)
		}
		var a, b wireMsg
		if err := json.Unmarshal(got, &a); err != nil {
			t.Fatalf("%s: %v", got, err)
		}
		if err := json.Unmarshal(want, &b); err != nil {
			t.Fatal(err)
		}
		if !sameMsg(&a, &b) {
			t.Errorf("hand-written %s decodes as %+v, encoding/json's as %+v", got, a, b)
		}
	}
	slow := []*wireMsg{
		{T: msgCall, ID: 1, Call: 1, Name: `we"ird`, Input: json.RawMessage(`1`)},
		{T: msgCall, ID: 1, Call: 1, Name: "café", Input: json.RawMessage(`1`)},
		{T: msgCall, ID: 1, Call: 1, Name: "echo", CallID: "<id>", Input: json.RawMessage(`1`)},
		{T: msgCall, ID: 1, Call: 1, Name: "echo", Input: json.RawMessage(`{"i":`)}, // encoding/json says what is wrong
		{T: msgCall, ID: 1, Call: 1, Name: "echo"},
		{T: msgResult, ID: 1, Call: 1, Err: &wireToolErr{Message: "boom"}},
		{T: msgResult, ID: 1, Call: 1, Data: json.RawMessage(`{`)},
		{T: msgResult, ID: 1, Call: 1},
		{T: msgLookup, ID: 1, Call: 1, Name: "echo"},
		{T: msgLookup, ID: 1, Call: 1, Found: true, Tool: &ToolInfo{Name: "echo"}},
		{T: msgDone, ID: 1, Done: &wireDone{}},
		{T: msgExec, ID: 1, Exec: &wireExec{Code: "1"}},
		{T: msgInit, V: protocolVersion, Init: &wireInit{}},
		{T: msgReady, V: protocolVersion, PID: 9},
		{T: msgLog, ID: 1, Level: "log", Message: "x"},
		{T: msgCancel, ID: 1},
		{T: msgWait, ID: 1, Name: "x"},
	}
	for _, m := range slow {
		if b, ok := appendFast([]byte("keep"), m); ok || string(b) != "keep" {
			t.Errorf("%+v: encoded by hand (%q), want encoding/json", m, b)
		}
	}
}

// sameMsg compares two decoded messages, raw JSON by value.
func sameMsg(a, b *wireMsg) bool {
	ai, bi, ad, bd := a.Input, b.Input, a.Data, b.Data
	a.Input, b.Input, a.Data, b.Data = nil, nil, nil, nil
	defer func() { a.Input, b.Input, a.Data, b.Data = ai, bi, ad, bd }()
	return reflect.DeepEqual(a, b) && sameJSON(ai, bi) && sameJSON(ad, bd)
}

func sameJSON(a, b json.RawMessage) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}

// TestDecodeResultFast: a worker's hand-written decoding of result frames
// gives what encoding/json gives, for frames of either encoder, and leaves
// everything else to encoding/json.
func TestDecodeResultFast(t *testing.T) {
	for _, m := range []*wireMsg{
		{T: msgResult, ID: 1, Call: 1, Data: json.RawMessage(`null`)},
		{T: msgResult, ID: math.MaxUint64, Call: 123456789, Data: json.RawMessage(`{"a":[1,{"b":"}"}],"c":"\"}"}`)},
		{T: msgResult, ID: 5, Call: 6, Data: json.RawMessage(`"<&>"`)},
	} {
		hand, _ := appendFast(nil, m)
		std, _ := json.Marshal(m)
		for _, body := range [][]byte{hand, std} {
			got, ok := decodeResultFast(body)
			if !ok {
				t.Errorf("%s: not decoded by hand", body)
				continue
			}
			var want wireMsg
			if err := json.Unmarshal(body, &want); err != nil {
				t.Fatal(err)
			}
			if !sameMsg(got, &want) {
				t.Errorf("%s: by hand %+v, encoding/json %+v", body, got, want)
			}
			// The data does not alias the frame's buffer, which is reused.
			for i := range body {
				body[i] = 'x'
			}
			if !sameJSON(got.Data, m.Data) {
				t.Errorf("data %s changed with the buffer", got.Data)
			}
		}
	}
	for _, body := range []string{
		`{"t":"result","id":1,"call":2,"err":{"message":"boom"}}`,
		`{"t":"result","id":1,"call":2,"data":1,"seen":3}`,
		`{"t":"result","id":01,"call":2,"data":1}`,
		`{"t":"result","id":0,"call":2,"data":1}`,
		`{"t":"result","id":18446744073709551616,"call":2,"data":1}`,
		`{"t":"result","call":2,"id":1,"data":1}`,
		`{"t":"result","id":1,"call":2,"data":}`,
		`{"t":"result","id":1,"call":2,"data":1`,
		`{"t":"lookup","id":1,"call":2,"found":true}`,
		`{"t":"result", "id":1,"call":2,"data":1}`,
	} {
		if m, ok := decodeResultFast([]byte(body)); ok {
			t.Errorf("%s decoded by hand as %+v, want encoding/json", body, m)
		}
	}
}

// callFrameSeeds are call bodies for TestDecodeCallFast and
// FuzzDecodeCallFast: the usual shapes and near misses.
var callFrameSeeds = []string{
	`{"t":"call","id":1,"call":2,"name":"echo","callId":"c1","input":{"i":1}}`,
	`{"t":"call","id":1,"call":2,"name":"echo","input":null}`,
	`{"t":"call","id":18446744073709551615,"call":9,"name":"a<b>&","input":[1,"x",{"y":true}]}`,
	`{"t":"call","id":1,"call":2,"name":"echo","input":{"a":1},"oversize":true}`,
	`{"t":"call","id":1,"call":2,"name":"echo","input":{"a":1},"input":{"b":2}}`,
	`{"t":"call","id":1,"call":2,"name":"echo","input": {"a":1}}`,
	`{"t":"call","id":1,"call":2,"name":"echo","input":{"a":1} }`,
	`{"t":"call","id":1,"call":2,"name":"ec\"ho","input":1}`,
	`{"t":"call","id":1,"call":2,"name":"ecé","input":1}`,
	`{"t":"call","id":01,"call":2,"name":"echo","input":1}`,
	`{"t":"call","id":0,"call":2,"name":"echo","input":1}`,
	`{"t":"call","id":18446744073709551616,"call":2,"name":"echo","input":1}`,
	`{"t":"call","id":1,"call":2,"name":"echo","input":}`,
	`{"t":"call","id":1,"call":2,"name":"echo","input":{"a":1}`,
	`{"t":"call","id":1,"call":2,"name":"","input":1}`,
	`{"t":"call","id":1,"call":2,"name":"echo","callId":"","input":1}`,
	`{"t":"call","id":1,"call":2,"callId":"x","name":"echo","input":1}`,
	`{"t":"call","id":1,"call":2,"name":"echo","input":1}x`,
	`{"T":"call","id":1,"call":2,"name":"echo","input":1}`,
}

// TestDecodeCallFast: the parent's hand-written decoding of call frames
// takes every call the worker's encoder writes for plain names, and leaves
// the rest (oversize calls, escapes, white space, other key orders, bad
// numbers, broken JSON) to encoding/json.
func TestDecodeCallFast(t *testing.T) {
	for _, m := range []*wireMsg{
		{T: msgCall, ID: 7, Call: 1, Name: "echo", CallID: "x1", Input: json.RawMessage(`{"i":1}`)},
		{T: msgCall, ID: 7, Call: 3, Name: "search_tools", Input: json.RawMessage(`"q"`)},
	} {
		body, ok := appendFast(nil, m)
		if !ok {
			t.Fatalf("appendFast refused %+v", m)
		}
		got, ok := decodeCallFast(body)
		m.checked = true // decodeCallFast scanned the input
		if !ok || !reflect.DeepEqual(got, m) {
			t.Fatalf("decodeCallFast(%s) = %+v, %v; want %+v", body, got, ok, m)
		}
	}
	fast := map[string]bool{}
	for _, s := range callFrameSeeds {
		m, ok := decodeCallFast([]byte(s))
		fast[s] = ok
		checkCallFast(t, []byte(s), m, ok)
	}
	for i, s := range callFrameSeeds[3:] {
		if fast[s] && i+3 != 14 && i+3 != 15 { // empty strings decode alike
			t.Errorf("decodeCallFast took %s, which is not of its shape", s)
		}
	}
	if !fast[callFrameSeeds[0]] || !fast[callFrameSeeds[1]] || !fast[callFrameSeeds[2]] {
		t.Error("decodeCallFast refused a usual call")
	}
	// The body's buffer is reused: nothing may alias it.
	body := []byte(callFrameSeeds[0])
	m, _ := decodeCallFast(body)
	for i := range body {
		body[i] = 'X'
	}
	if m.Name != "echo" || m.CallID != "c1" || string(m.Input) != `{"i":1}` {
		t.Fatalf("decoded call aliases the frame buffer: %+v", m)
	}
}

// checkCallFast: whatever decodeCallFast takes, json.Unmarshal decodes to
// the very same message.
func checkCallFast(t *testing.T, body []byte, m *wireMsg, ok bool) {
	t.Helper()
	if !ok {
		return
	}
	want := new(wireMsg)
	if err := json.Unmarshal(body, want); err != nil {
		t.Fatalf("decodeCallFast took %q, which encoding/json refuses: %v", body, err)
	}
	// The input is marked as scanned, and it is JSON: validateFromWorker
	// and the encoders trust the mark.
	if !m.checked || !json.Valid(m.Input) {
		t.Fatalf("decodeCallFast(%q): input %q marked checked %v", body, m.Input, m.checked)
	}
	want.checked = true
	if !reflect.DeepEqual(m, want) {
		t.Fatalf("decodeCallFast(%q) = %+v, encoding/json %+v", body, m, want)
	}
}

// FuzzDecodeCallFast: the hand-written decoder of the frames a worker
// (hostile scripts' process) sends never accepts a body differently from
// encoding/json, so bad frames keep their errors.
func FuzzDecodeCallFast(f *testing.F) {
	for _, s := range callFrameSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		m, ok := decodeCallFast(body)
		checkCallFast(t, body, m, ok)
	})
}

// FuzzDecodeResultFast: whatever the worker's hand-written decoder of
// result frames takes, encoding/json decodes to the same message (data
// compared as JSON values), so a frame of an unexpected shape can only
// fall back, never be misread.
func FuzzDecodeResultFast(f *testing.F) {
	for _, s := range []string{
		`{"t":"result","id":1,"call":2,"data":{"a":[1,{"b":"}"}]}}`,
		`{"t":"result","id":18446744073709551615,"call":9,"data":"<&>"}`,
		`{"t":"result","id":1,"call":2,"data": 1 }`,
		`{"t":"result","id":1,"call":2,"data":1,"data":2}`,
		`{"t":"result","id":1,"call":2,"data":1,"err":{"message":"x"}}`,
		`{"t":"result","id":1,"call":2,"data":"\u0000\ud800"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		m, ok := decodeResultFast(body)
		if !ok {
			return
		}
		want := new(wireMsg)
		if err := json.Unmarshal(body, want); err != nil {
			t.Fatalf("decodeResultFast took %q, which encoding/json refuses: %v", body, err)
		}
		// The data's bytes, as a RawMessage keeps them (sameMsg would
		// refuse numbers out of float64's range on both sides).
		got, wantData := bytes.TrimSpace(m.Data), bytes.TrimSpace(want.Data)
		m.Data, want.Data = nil, nil
		if !bytes.Equal(got, wantData) || !reflect.DeepEqual(m, want) {
			t.Fatalf("decodeResultFast(%q) = %+v %s, encoding/json %+v %s", body, m, got, want, wantData)
		}
	})
}

// execFrameSeeds are exec messages as the parent encodes them.
func execFrameSeeds(t testing.TB) [][]byte {
	full := Limits{Timeout: 30 * time.Second, CPUTime: -1, MaxSteps: math.MaxInt64, MaxToolCalls: 50, MaxCallDepth: 1,
		MaxSourceBytes: 2, MaxNestingDepth: 3, MaxResultBytes: 4, MaxConsoleEntries: 5, MaxConsoleBytes: 6, MemoryBytes: math.MinInt64, AllowConsole: true}
	execs := []*wireExec{
		{Code: "return 1"},
		{Code: "return 1+1", Context: json.RawMessage(`{"sessionId":"0123","n":[1,{"s":"}]\"{"}]}`), Limits: Limits{Timeout: time.Second, MaxToolCalls: 50, MaxSteps: 1000000}},
		{Code: "let s = \"a\\b\";\n\treturn s + '<&>' + `\u2028é😀`", Limits: full, Stream: true},
		{Code: "return \xff\xfe bad utf-8", Allowed: []string{"echo", "we\"ird", "café"}, HasAllowed: true, Missing: []string{"nope"}},
		{Code: "", HasAllowed: true},
		{Code: "return 1", Allowed: []string{"echo"}, HasAllowed: true, Tools: []ToolInfo{{Name: "echo", Description: "d"}}},
		{Code: "x", Context: json.RawMessage(`[1,2]`)},
		{Code: "x", Context: json.RawMessage(`null`)},
	}
	var out [][]byte
	for i, ex := range execs {
		b, err := json.Marshal(&wireMsg{T: msgExec, ID: uint64(i + 1), Exec: ex})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// TestDecodeExecFast: the worker's hand-written decoder of exec frames
// makes the message json.Unmarshal makes of the frames the parent writes,
// takes the usual ones (no tool metadata, an object or no context), and
// follows wireExec and Limits: a field added to either must be taught to
// it (or this test fails).
func TestDecodeExecFast(t *testing.T) {
	if n := reflect.TypeOf(wireExec{}).NumField(); n != 8 {
		t.Errorf("wireExec has %d fields; decodeExecFast knows 8", n)
	}
	lt := reflect.TypeOf(Limits{})
	if lt.NumField() != len(limitsFields) {
		t.Errorf("Limits has %d fields; decodeExecFast knows %d", lt.NumField(), len(limitsFields))
	}
	for i := 0; i < lt.NumField() && i < len(limitsFields); i++ {
		if f := lt.Field(i); f.Name != limitsFields[i] || f.Tag != "" {
			t.Errorf("Limits field %d is %s %q; decodeExecFast expects %s without a tag", i, f.Name, f.Tag, limitsFields[i])
		}
	}
	seeds := execFrameSeeds(t)
	for i, body := range seeds {
		m, ok := decodeExecFast(body)
		if want := i < 5; ok != want {
			t.Errorf("%s: decoded by hand %v, want %v", body, ok, want)
		}
		checkExecFast(t, body, m, ok)
	}
	for _, body := range []string{
		`{"t":"exec","id":0,"exec":{"code":"x","limits":{"Timeout":0,"CPUTime":0,"MaxSteps":0,"MaxToolCalls":0,"MaxCallDepth":0,"MaxSourceBytes":0,"MaxNestingDepth":0,"MaxResultBytes":0,"MaxConsoleEntries":0,"MaxConsoleBytes":0,"MemoryBytes":0,"AllowConsole":false}}}`,
		`{"t":"exec","id":1,"exec":{"code":"x","limits":{"Timeout":1e3,"CPUTime":0,"MaxSteps":0,"MaxToolCalls":0,"MaxCallDepth":0,"MaxSourceBytes":0,"MaxNestingDepth":0,"MaxResultBytes":0,"MaxConsoleEntries":0,"MaxConsoleBytes":0,"MemoryBytes":0,"AllowConsole":false}}}`,
		`{"t":"exec","id":1,"exec":{"code":"x","limits":{"Timeout":0,"CPUTime":0,"MaxSteps":0,"MaxToolCalls":0,"MaxCallDepth":0,"MaxSourceBytes":0,"MaxNestingDepth":0,"MaxResultBytes":0,"MaxConsoleEntries":0,"MaxConsoleBytes":0,"MemoryBytes":0,"AllowConsole":false}},"v":1}`,
		`{"t":"exec","id":1,"exec":{"code":"x","limits":{"Timeout":99999999999999999999,"CPUTime":0,"MaxSteps":0,"MaxToolCalls":0,"MaxCallDepth":0,"MaxSourceBytes":0,"MaxNestingDepth":0,"MaxResultBytes":0,"MaxConsoleEntries":0,"MaxConsoleBytes":0,"MemoryBytes":0,"AllowConsole":false}}}`,
		`{"t":"exec","id":1,"exec":{"code":"a` + "\x01" + `","limits":{"Timeout":0,"CPUTime":0,"MaxSteps":0,"MaxToolCalls":0,"MaxCallDepth":0,"MaxSourceBytes":0,"MaxNestingDepth":0,"MaxResultBytes":0,"MaxConsoleEntries":0,"MaxConsoleBytes":0,"MemoryBytes":0,"AllowConsole":false}}}`,
	} {
		if m, ok := decodeExecFast([]byte(body)); ok {
			t.Errorf("%s: decoded by hand as %+v, want encoding/json", body, m.Exec)
		}
	}
}

// checkExecFast: what decodeExecFast took, encoding/json decodes to the
// same message.
func checkExecFast(t *testing.T, body []byte, m *wireMsg, ok bool) {
	t.Helper()
	if !ok {
		return
	}
	want := new(wireMsg)
	if err := json.Unmarshal(body, want); err != nil {
		t.Fatalf("decodeExecFast took %q, which encoding/json refuses: %v", body, err)
	}
	if !reflect.DeepEqual(m, want) {
		t.Fatalf("decodeExecFast(%q) = %+v %+v, encoding/json %+v %+v", body, m, m.Exec, want, want.Exec)
	}
}

// FuzzDecodeExecFast: whatever the worker's hand-written decoder of exec
// frames takes, encoding/json decodes to the same message.
func FuzzDecodeExecFast(f *testing.F) {
	for _, s := range execFrameSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		m, ok := decodeExecFast(body)
		checkExecFast(t, body, m, ok)
	})
}

// TestDecodeCallReusesTheToolName: the parent's reader keeps the last
// call's tool name, and a call of the same tool takes that string instead
// of a new one (one allocation fewer per call); another name replaces it.
func TestDecodeCallReusesTheToolName(t *testing.T) {
	body := []byte(`{"t":"call","id":3,"call":9,"name":"echo","callId":"19","input":{"i":1}}`)
	var names string
	m, ok := decodeCall(body, false, &names)
	if !ok || m.Name != "echo" || names != "echo" {
		t.Fatalf("decoded %+v %v, remembered %q", m, ok, names)
	}
	again, _ := decodeCall(body, false, &names)
	if unsafe.StringData(again.Name) != unsafe.StringData(m.Name) {
		t.Fatal("the same tool name was made anew")
	}
	other, ok := decodeCall([]byte(`{"t":"call","id":3,"call":10,"name":"sum","input":[1]}`), false, &names)
	if !ok || other.Name != "sum" || names != "sum" || m.Name != "echo" {
		t.Fatalf("another tool: %+v %v, remembered %q, first %q", other, ok, names, m.Name)
	}
	fresh := testing.AllocsPerRun(100, func() { decodeCall(body, false, nil) })
	names = "echo"
	kept := testing.AllocsPerRun(100, func() { decodeCall(body, false, &names) })
	if kept != fresh-1 {
		t.Fatalf("%v allocations with the name kept, %v without, want one fewer", kept, fresh)
	}
}

// BenchmarkDecodeCall: the parent's decoding of a small call frame of the
// tool it decoded last (every awaited call).
func BenchmarkDecodeCall(b *testing.B) {
	body := []byte(`{"t":"call","id":3,"call":9,"name":"echo","callId":"19","input":{"i":1}}`)
	names := "echo"
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, ok := decodeCall(body, false, &names); !ok {
			b.Fatal("not decoded")
		}
	}
}
