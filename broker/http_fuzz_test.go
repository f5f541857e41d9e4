package broker

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"
	"github.com/codemode-gateway/caddy-codemode/internal/goroutinetest"
)

// documentedErrors are the (status, code) pairs of docs/broker.md's
// "Errors" table that a caller of /execute and /sessions/{id}/... can
// cause with a body, a path and a Content-Type (no authentication and no
// rate limit are configured here, no Redis, no reload).
var documentedErrors = map[string]bool{
	"400 " + CodeInvalidRequest: true, "400 " + CodeValidationError: true, "400 " + CodeLimitExceeded: true,
	"404 " + CodeNotFound: true, "405 " + CodeMethodNotAllowed: true,
	"409 " + CodeCallAlreadyAnswered: true, "409 " + CodeSessionFinished: true,
	"413 " + CodePayloadTooLarge: true, "415 " + CodeUnsupportedMediaType: true,
	"429 " + CodeSessionLimit: true,
}

// checkErrorAnswer fails unless the answer is the broker's JSON error body
// with a documented status and code.
func checkErrorAnswer(t *testing.T, what string, status int, header http.Header, body []byte) {
	t.Helper()
	if ct := header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("%s: status %d with Content-Type %q: %q", what, status, ct, body)
	}
	var e struct {
		Error ErrorBody `json:"error"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil || e.Error.Code == "" || e.Error.Message == "" {
		t.Fatalf("%s: status %d, not an error body (%v): %q", what, status, err, body)
	}
	if !documentedErrors[fmt.Sprint(status, " ", e.Error.Code)] {
		t.Fatalf("%s: status %d with code %s is not in the documented set: %q", what, status, e.Error.Code, body)
	}
}

// fuzzBroker is the broker and server one fuzzing process drives.
type fuzzBroker struct {
	b      *Broker
	h      http.Handler
	srv    *httptest.Server
	client *http.Client
}

func newFuzzBroker(tb testing.TB) *fuzzBroker {
	// The real in-process engine with short limits: an iteration that
	// waits (a call nobody answers, a loop) costs at most the timeout.
	// The worker engine's process boundary is not what this target is
	// about, and the broker package has no worker entry point.
	engine := sandbox.NewInProcess(&sandbox.Options{Preset: sandbox.PresetLockedDown,
		Limits: sandbox.Limits{Timeout: time.Second, MemoryBytes: 64 << 20}})
	opts := &BrokerOptions{Engine: engine, Tools: NewToolRegistry(), DefaultTimeout: time.Second, MaxTimeout: time.Second,
		MaxConcurrentSessions: 4, MaxBodyBytes: 64 << 10}
	for _, d := range DemoTools() {
		opts.Tools.Register(d)
	}
	b, err := New(opts)
	if err != nil {
		tb.Fatal(err)
	}
	fb := &fuzzBroker{b: b, h: b.Handler()}
	fb.srv = httptest.NewServer(fb.h)
	// No keep-alive: a connection's goroutines end with its request, so
	// the goroutine count after an iteration is the one before.
	fb.client = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = b.Close(ctx)
		fb.srv.Close()
		_ = engine.Close()
	})
	return fb
}

// serve sends a request straight to the handler (the path as the handler
// sees it once a prefix is stripped, any bytes) and checks a non-200
// answer.
func (fb *fuzzBroker) serve(t *testing.T, method, path, contentType string, body []byte) (int, []byte) {
	t.Helper()
	r := httptest.NewRequest(method, "/", bytes.NewReader(body))
	r.URL.Path = path
	if contentType != "" {
		r.Header.Set("Content-Type", contentType)
	}
	w := httptest.NewRecorder()
	fb.h.ServeHTTP(w, r)
	what := method + " " + fmt.Sprintf("%q", path)
	if w.Code != http.StatusOK {
		checkErrorAnswer(t, what, w.Code, w.Header(), w.Body.Bytes())
	} else if !json.Valid(w.Body.Bytes()) {
		t.Fatalf("%s: 200 with a body that is not JSON: %q", what, w.Body.Bytes())
	}
	return w.Code, w.Body.Bytes()
}

// FuzzBrokerHTTP: POST /execute and POST /sessions/{id}/tool-result read
// bodies any caller writes (strict encoding/json: unknown fields, wrong
// types, trailing data), and the session id comes from the path. Every
// answer is the broker's JSON error with a documented status and code,
// or 200 with a valid NDJSON stream (known event types, at most one final
// event, last); nothing panics; every session the fuzzer starts ends, and
// an iteration leaves no goroutine behind.
//
// Inputs: the /execute body and its Content-Type, the session id of the
// tool-result path and the tool-result body. "$SESSION" in the id and
// "$CALL" in the result body stand for the ids the stream announced, so
// that answers reach a waiting session and its call.
func FuzzBrokerHTTP(f *testing.F) {
	for _, s := range []struct{ exec, ct, id, result string }{
		{`{"code":"return 1"}`, "application/json", "nope", `{"callId":"1","result":1}`},
		{`{"code":"return (await callTool(\"math:add\", {a: 2, b: 3})).sum","timeout":500,"maxToolCalls":2,"maxSteps":1000}`, "", "$SESSION", `{"callId":"$CALL","result":null}`},
		{`{"code":"return await callTool(\"client:prompt\", {message: \"hi\"})"}`, "application/json", "$SESSION", `{"callId":"$CALL","result":{"answer":"yes"}}`},
		{`{"code":"return await callTool(\"client:prompt\", {message: \"hi\"})","filter":{"types":["tool_call","result"],"blockedTypes":["log"]}}`, "application/json; charset=utf-8", "$SESSION", `{"callId":"$CALL","error":{"message":"no","code":"DENIED"}}`},
		{`{"code":"await callTool(\"client:prompt\", {}); return await callTool(\"client:prompt\", {})","context":{"a":[1,{"b":null}]},"allowedTools":["client:prompt"]}`, "application/vnd.x+json", "$SESSION", `{"callId":"$CALL","result":"x"}`},
		{`{"code":"console.log('x'); throw new Error('boom')"}`, "text/plain", "$SESSION/../x", `{"callId":"$CALL"}`},
		{`{"code":"","timeout":-1}`, "application/json", "", `{"callId":"","error":{"message":""}}`},
		{`{"code":"return 1","timeout":1e400}`, "application/json", "a/b", `{"callId":1}`},
		{`{"code":"return 1","maxToolCalls":1.5,"unknown":true}`, "application/json", "%2F", `{"callId":"1","result":1} {}`},
		{`{"code":"return 1","filter":{"types":["nope"]}}`, "application/json", "$SESSION", `[]`},
		{`{"code":"return 1"} trailing`, "application/json", "$SESSION", `{"callId":"$CALL","result":1,"error":null}`},
		{`null`, "application/json", "\x00", `null`},
	} {
		f.Add([]byte(s.exec), s.ct, s.id, []byte(s.result))
	}
	fb := newFuzzBroker(f)
	f.Fuzz(func(t *testing.T, exec []byte, ct, id string, result []byte) {
		before, _ := goroutines()
		fb.iterate(t, exec, ct, id, result)
		// The stream is closed: its session ends (aborted if it still
		// waited), and with it every goroutine of the iteration.
		deadline := time.Now().Add(20 * time.Second)
		for {
			active := fb.b.Stats().Active
			n, stacks := goroutines()
			if active == 0 && n <= before {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("after the iteration: %d sessions active, %d goroutines (%d before)\n%s", active, n, before, stacks)
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
}

func (fb *fuzzBroker) iterate(t *testing.T, exec []byte, ct, id string, result []byte) {
	// An answer to a session nobody started (or a path the id breaks).
	fb.serve(t, http.MethodPost, "/sessions/"+id+"/tool-result", "application/json", result)

	req, err := http.NewRequest(http.MethodPost, fb.srv.URL+"/execute", bytes.NewReader(exec))
	if err != nil {
		t.Fatal(err)
	}
	if ct != "" {
		req.Header["Content-Type"] = []string{ct}
	}
	resp, err := fb.client.Do(req)
	if err != nil {
		// A Content-Type the client refuses to send (a newline in it).
		if strings.ContainsAny(ct, "\r\n\x00") || !isPrintable(ct) {
			return
		}
		t.Fatalf("POST /execute: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		checkErrorAnswer(t, "POST /execute", resp.StatusCode, resp.Header, body)
		return
	}
	if got := resp.Header.Get("Content-Type"); got != "application/x-ndjson" {
		t.Fatalf("POST /execute: 200 with Content-Type %q", got)
	}
	sid := resp.Header.Get("X-Session-Id")
	if sid == "" {
		t.Fatal("POST /execute: 200 without X-Session-Id")
	}
	path := "/sessions/" + strings.ReplaceAll(id, "$SESSION", sid) + "/tool-result"
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var seen []string
	for sc.Scan() {
		var ev struct {
			Type    string          `json:"type"`
			Payload json.RawMessage `json:"payload"`
		}
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&ev); err != nil || len(ev.Payload) == 0 {
			t.Fatalf("stream line %d is not an event (%v): %q", len(seen)+1, err, sc.Bytes())
		}
		if !slices.Contains(eventTypes, ev.Type) {
			t.Fatalf("stream line %d: unknown event type %q", len(seen)+1, ev.Type)
		}
		if n := len(seen); n > 0 && (seen[n-1] == EventResult || seen[n-1] == EventError) {
			t.Fatalf("event %s after the final %s", ev.Type, seen[n-1])
		}
		if ev.Type == EventSession && len(seen) > 0 {
			t.Fatalf("session event after %v", seen)
		}
		seen = append(seen, ev.Type)
		if ev.Type != EventToolCall {
			continue
		}
		var call ToolCallPayload
		if err := json.Unmarshal(ev.Payload, &call); err != nil {
			t.Fatalf("tool_call payload %s: %v", ev.Payload, err)
		}
		if call.SessionID != sid {
			t.Fatalf("tool_call of session %q in the stream of %q", call.SessionID, sid)
		}
		if !call.AwaitingResult {
			continue
		}
		body := bytes.ReplaceAll(result, []byte("$CALL"), []byte(call.CallID))
		if status, _ := fb.serve(t, http.MethodPost, path, "application/json", body); status != http.StatusOK {
			// The fuzzed answer was refused: the session would wait for
			// its timeout; closing the stream aborts it.
			return
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("reading the stream after %v: %v", seen, err)
	}
	// The session is over (or the filter hid its end): a late answer and
	// a read of the session get documented answers too.
	fb.serve(t, http.MethodPost, path, "application/json", result)
	fb.serve(t, http.MethodGet, "/sessions/"+strings.ReplaceAll(id, "$SESSION", sid), "", nil)
}

// goroutines counts this process's goroutines, less the in-process
// engine's idle runners: it keeps up to 16 goroutines waiting for the next
// script (sandbox.maxIdleRunners), a bounded reserve, not a leak. It also
// returns the stacks it counted.
func goroutines() (int, string) {
	return goroutinetest.Count("engine.(*runners).serve")
}

func isPrintable(s string) bool {
	for _, r := range s {
		if r < ' ' || r == 0x7f {
			return false
		}
	}
	return true
}
