package broker

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"
	"github.com/codemode-gateway/caddy-codemode/guard"
)

func TestHTTPExecuteStreams(t *testing.T) {
	_, srv := newTestBroker(t, nil)
	s := startExecute(t, srv.URL, map[string]any{
		"code":    `const r = await callTool("math:add", {a: 1, b: 2}); return r.sum`,
		"timeout": 5000, "maxToolCalls": 5,
	}, nil)
	sessEv := s.next()
	if sessEv.Type != EventSession {
		t.Fatalf("first event %s", sessEv.Type)
	}
	var sess Session
	sessEv.decode(t, &sess)
	if s.resp.Header.Get("X-Session-Id") != sess.ID {
		t.Errorf("X-Session-Id = %q, want %q", s.resp.Header.Get("X-Session-Id"), sess.ID)
	}
	evs := s.rest()
	if got := types(evs); got != "tool_call,tool_result,result" {
		t.Fatalf("events = %s", got)
	}
	var res ResultPayload
	evs[2].decode(t, &res)
	if string(res.Result) != "3" || res.SessionID != sess.ID || res.ToolCalls != 1 {
		t.Errorf("result = %+v", res)
	}
	code, _, body := do(t, http.MethodGet, srv.URL+"/sessions/"+sess.ID, nil, nil)
	var got Session
	_ = json.Unmarshal(body, &got)
	if code != http.StatusOK || got.Status != StatusCompleted || got.ID != sess.ID || got.CreatedAt == 0 || got.ExpiresAt <= got.CreatedAt {
		t.Errorf("GET session: %d %s", code, body)
	}
}

// TestHTTPCallerAnsweredTools streams tool calls to the caller, who answers
// them through POST /sessions/{id}/tool-result, including every error path
// of that endpoint.
func TestHTTPCallerAnsweredTools(t *testing.T) {
	_, srv := newTestBroker(t, nil)
	s := startExecute(t, srv.URL, map[string]any{"code": `
const a = await callTool("client:prompt", {question: "first?"});
const b = await callTool("client:prompt", {question: "second?"}, {throwOnError: false});
return {a, b};`}, nil)
	var sess Session
	s.next().decode(t, &sess)
	resultURL := srv.URL + "/sessions/" + sess.ID + "/tool-result"

	// The session is running and waits: the stream has shown the call.
	ev := s.next()
	var call ToolCallPayload
	ev.decode(t, &call)
	if ev.Type != EventToolCall || !call.AwaitingResult || call.Tool != "client:prompt" || string(call.Input) != `{"question":"first?"}` {
		t.Fatalf("event %s %+v", ev.Type, call)
	}
	code, _, body := do(t, http.MethodGet, srv.URL+"/sessions/"+sess.ID, nil, nil)
	if code != http.StatusOK || !strings.Contains(string(body), `"status":"running"`) {
		t.Errorf("GET running session: %d %s", code, body)
	}

	// Errors that change nothing.
	for _, tc := range []struct {
		name   string
		url    string
		body   any
		status int
		code   string
	}{
		{"unknown call", resultURL, map[string]any{"callId": "nope", "result": 1}, 404, CodeNotFound},
		{"unknown session", srv.URL + "/sessions/nope/tool-result", map[string]any{"callId": call.CallID, "result": 1}, 404, CodeNotFound},
		{"missing callId", resultURL, map[string]any{"result": 1}, 400, CodeInvalidRequest},
		{"missing result", resultURL, map[string]any{"callId": call.CallID}, 400, CodeInvalidRequest},
		{"error without message", resultURL, map[string]any{"callId": call.CallID, "error": map[string]any{"code": "X"}}, 400, CodeInvalidRequest},
		{"unknown field", resultURL, map[string]any{"callId": call.CallID, "result": 1, "extra": 1}, 400, CodeInvalidRequest},
		{"bad json", resultURL, `{"callId":`, 400, CodeInvalidRequest},
	} {
		code, _, body := do(t, http.MethodPost, tc.url, tc.body, nil)
		if code != tc.status || errorCode(t, body) != tc.code {
			t.Errorf("%s: %d %s, want %d %s", tc.name, code, body, tc.status, tc.code)
		}
	}

	// The answer reaches the script; a second answer is a conflict.
	code, _, body = do(t, http.MethodPost, resultURL, map[string]any{"callId": call.CallID, "result": map[string]any{"answer": 42}}, nil)
	if code != http.StatusOK || strings.TrimSpace(string(body)) != `{"success":true}` {
		t.Fatalf("tool-result: %d %s", code, body)
	}
	code, _, body = do(t, http.MethodPost, resultURL, map[string]any{"callId": call.CallID, "result": 1}, nil)
	if code != http.StatusConflict || errorCode(t, body) != CodeCallAlreadyAnswered {
		t.Errorf("second answer: %d %s", code, body)
	}
	ev = s.next()
	var tr ToolResultPayload
	ev.decode(t, &tr)
	if ev.Type != EventToolResult || tr.CallID != call.CallID || string(tr.Result) != `{"answer":42}` {
		t.Fatalf("event %s %s", ev.Type, ev.Payload)
	}

	// The second call is answered with an error: the script sees it.
	var call2 ToolCallPayload
	s.next().decode(t, &call2)
	code, _, body = do(t, http.MethodPost, resultURL, map[string]any{"callId": call2.CallID, "result": "ignored", "error": map[string]any{"message": "user said no", "code": "DECLINED"}}, nil)
	if code != http.StatusOK {
		t.Fatalf("error answer: %d %s", code, body)
	}
	evs := s.rest()
	if got := types(evs); got != "tool_result,result" {
		t.Fatalf("events = %s", got)
	}
	var tr2 ToolResultPayload
	evs[0].decode(t, &tr2)
	if tr2.Error == nil || tr2.Error.Code != "DECLINED" || tr2.Result != nil {
		t.Errorf("tool_result = %+v", tr2)
	}
	var res ResultPayload
	evs[1].decode(t, &res)
	want := `{"a":{"answer":42},"b":{"success":false,"data":null,"error":{"message":"user said no","code":"DECLINED"}}}`
	if string(res.Result) != want {
		t.Errorf("result = %s\nwant %s", res.Result, want)
	}

	// The session is finished: late answers are conflicts.
	code, _, body = do(t, http.MethodPost, resultURL, map[string]any{"callId": call2.CallID, "result": 1}, nil)
	if code != http.StatusConflict || errorCode(t, body) != CodeSessionFinished {
		t.Errorf("answer after finish: %d %s", code, body)
	}
}

// TestHTTPCallerLeaves: a caller that closes the /execute response ends its
// session EXECUTION_ABORTED with a message saying so; it said "execution
// aborted: context canceled". A codemode_guard timeout (a deadline on the
// request) still ends it as a deadline.
func TestHTTPCallerLeaves(t *testing.T) {
	_, srv := newTestBroker(t, nil)
	finished := func(id string) Session {
		t.Helper()
		for {
			code, _, body := do(t, http.MethodGet, srv.URL+"/sessions/"+id, nil, nil)
			var sess Session
			if err := json.Unmarshal(body, &sess); code != http.StatusOK || err != nil {
				t.Fatalf("GET session: %d %s", code, body)
			}
			if sess.Status == StatusError || sess.Status == StatusCompleted {
				return sess
			}
			time.Sleep(5 * time.Millisecond) // waiting for the state, not for a clock
		}
	}
	s := startExecute(t, srv.URL, map[string]any{"code": `return await callTool("client:prompt", {question: "?"})`}, nil)
	var sess Session
	s.next().decode(t, &sess)
	s.next() // the call waits for the caller, who leaves
	s.resp.Body.Close()
	got := finished(sess.ID)
	want := "execution aborted: the caller closed the event stream before the session finished"
	if got.Error == nil || got.Error.Code != sandbox.CodeExecutionAborted || got.Error.Message != want {
		t.Fatalf("session %+v, want EXECUTION_ABORTED %q", got.Error, want)
	}

	// A deadline on the request (codemode_guard's timeout) is a deadline.
	h, _ := newTestBroker(t, nil)
	timed := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 50*time.Millisecond)
		defer cancel()
		h.Handler().ServeHTTP(w, r.WithContext(ctx))
	}))
	defer timed.Close()
	evs := startExecute(t, timed.URL, map[string]any{"code": `return await callTool("client:prompt", {question: "?"})`}, nil).rest()
	if len(evs) == 0 {
		t.Fatal("the stream ended with no event, want the deadline's error")
	}
	var p ErrorPayload
	evs[len(evs)-1].decode(t, &p)
	if p.Error.Code != sandbox.CodeExecutionAborted || !strings.Contains(p.Error.Message, "deadline exceeded") {
		t.Fatalf("last event %+v", p)
	}
}

// TestHTTPCallerTimeout: a script waiting for a call nobody answers ends
// with a timeout, and an answer after it is refused. The script's time limit
// counts from the start of the execution, so a loaded machine can spend it
// all before the call is even announced: the session then ends with the
// same timeout (that is no defect) and the test tries again with a longer
// limit, up to the engine's ceiling, so that a fast machine still waits
// only 100 ms.
func TestHTTPCallerTimeout(t *testing.T) {
	_, srv := newTestBroker(t, nil)
	limits := []int{100, 400, 1600, int(testEngine().(*sandbox.InProcess).Limits().Timeout.Milliseconds())}
	for i, timeout := range limits {
		s := startExecute(t, srv.URL, map[string]any{"code": `return await callTool("client:prompt", {question: "?"})`, "timeout": timeout}, nil)
		var sess Session
		s.next().decode(t, &sess)
		evs := s.rest() // nobody answers: the execution times out
		if len(evs) == 0 {
			t.Fatalf("timeout %d ms: the stream ended after the session event", timeout)
		}
		last := evs[len(evs)-1]
		var p ErrorPayload
		last.decode(t, &p)
		if last.Type != EventError || p.ScriptStatus != "timeout" {
			t.Fatalf("timeout %d ms: events %s, last %s", timeout, types(evs), last.Payload)
		}
		if len(evs) == 1 && i < len(limits)-1 {
			continue // timed out before the call was announced
		}
		var call ToolCallPayload
		evs[0].decode(t, &call)
		if evs[0].Type != EventToolCall || call.CallID == "" {
			t.Fatalf("timeout %d ms: events %s, want the call first", timeout, types(evs))
		}
		code, _, body := do(t, http.MethodPost, srv.URL+"/sessions/"+sess.ID+"/tool-result", map[string]any{"callId": call.CallID, "result": 1}, nil)
		if code != http.StatusConflict {
			t.Errorf("answer after timeout: %d %s", code, body)
		}
		return
	}
}

func TestHTTPErrors(t *testing.T) {
	_, srv := newTestBroker(t, func(o *BrokerOptions) { o.MaxBodyBytes = 1024 })
	big := fmt.Sprintf(`{"code":%q}`, strings.Repeat("x", 2048))
	for _, tc := range []struct {
		name, method, path string
		body               any
		ctype              string
		status             int
		code               string
	}{
		{"unknown route", "GET", "/nope", nil, "", 404, CodeNotFound},
		{"unknown session", "GET", "/sessions/nope", nil, "", 404, CodeNotFound},
		{"sessions without id", "GET", "/sessions/", nil, "", 404, CodeNotFound},
		{"wrong method", "GET", "/execute", nil, "", 405, CodeMethodNotAllowed},
		{"wrong method health", "POST", "/health", "{}", "", 405, CodeMethodNotAllowed},
		{"invalid json", "POST", "/execute", `{"code":`, "", 400, CodeInvalidRequest},
		{"not an object", "POST", "/execute", `[1]`, "", 400, CodeInvalidRequest},
		{"unknown field", "POST", "/execute", `{"code":"return 1","bogus":1}`, "", 400, CodeInvalidRequest},
		{"missing code", "POST", "/execute", `{}`, "", 400, CodeValidationError},
		{"negative timeout", "POST", "/execute", `{"code":"return 1","timeout":-1}`, "", 400, CodeValidationError},
		{"huge timeout", "POST", "/execute", `{"code":"return 1","timeout":1e12}`, "", 400, CodeLimitExceeded},
		{"maxToolCalls above the ceiling", "POST", "/execute", `{"code":"return 1","maxToolCalls":1000000}`, "", 400, CodeLimitExceeded},
		{"maxSteps above the engine", "POST", "/execute", `{"code":"return 1","maxSteps":1e9}`, "", 400, CodeLimitExceeded},
		{"fractional maxToolCalls", "POST", "/execute", `{"code":"return 1","maxToolCalls":1.5}`, "", 400, CodeValidationError},
		{"bad filter", "POST", "/execute", `{"code":"return 1","filter":{"types":["nope"]}}`, "", 400, CodeValidationError},
		// The sandbox takes a context nested 64 deep at most: a deeper one
		// was a session that ended at once with the engine's
		// MESSAGE_INVALID, the caller's mistake reported as the gateway's.
		{"context nested too deep", "POST", "/execute", `{"code":"return 1","context":` + strings.Repeat(`{"a":`, 65) + "1" + strings.Repeat("}", 66), "", 400, CodeValidationError},
		{"too large", "POST", "/execute", big, "", 413, CodePayloadTooLarge},
		{"wrong content type", "POST", "/execute", `{"code":"return 1"}`, "text/plain", 415, CodeUnsupportedMediaType},
		// The body was read as UTF-8 whatever charset it was declared in.
		{"utf-16 charset", "POST", "/execute", `{"code":"return 1"}`, "application/json; charset=utf-16", 415, CodeUnsupportedMediaType},
		{"latin-1 charset", "POST", "/execute", `{"code":"return 1"}`, "application/json;charset=ISO-8859-1", 415, CodeUnsupportedMediaType},
		{"tool-result in utf-16", "POST", "/sessions/x/tool-result", `{"callId":"c","result":1}`, "application/json; charset=UTF-16LE", 415, CodeUnsupportedMediaType},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h http.Header
			if tc.ctype != "" {
				h = http.Header{"Content-Type": {tc.ctype}}
			}
			code, hdr, body := do(t, tc.method, srv.URL+tc.path, tc.body, h)
			if code != tc.status || errorCode(t, body) != tc.code {
				t.Errorf("%d %s, want %d %s", code, body, tc.status, tc.code)
			}
			if hdr.Get("Content-Type") != "application/json" {
				t.Errorf("Content-Type = %q", hdr.Get("Content-Type"))
			}
		})
	}
	// A chunked body over the limit (no Content-Length) is also refused.
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/execute", strings.NewReader(big))
	req.ContentLength = -1
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("chunked large body: %d", resp.StatusCode)
	}
}

// TestHTTPOriginRule: a web page of another origin cannot use the broker.
// A page may POST a body without Content-Type (no CORS preflight: a
// "simple" request), so on an open broker any site the user visits could
// run code with the gateway's tools. Browsers always send Origin on such a
// POST; clients that are not browsers send none.
// TestHTTPDecodeErrorsSpeakJSON: a body of the wrong shape is described in
// JSON's words (field, got, want), never with the Go struct, package and
// type names encoding/json reports.
func TestHTTPDecodeErrorsSpeakJSON(t *testing.T) {
	_, srv := newTestBroker(t, nil)
	for _, tc := range []struct{ path, body, want string }{
		{"/execute", `{"code":1}`, "invalid JSON body: code: got number, want string"},
		{"/execute", `{"code":"return 1","timeout":1e400}`, "invalid JSON body: timeout: number 1e400 is out of range"},
		{"/execute", `{"code":"return 1","context":5}`, "invalid JSON body: context: got number, want object"},
		{"/execute", `{"code":"return 1","filter":[]}`, "invalid JSON body: filter: got array, want object"},
		{"/execute", `{"code":"return 1","allowedTools":"x"}`, "invalid JSON body: allowedTools: got string, want array"},
		{"/execute", `{"code":"return 1","bogus":1}`, `invalid JSON body: unknown field "bogus"`},
		{"/execute", `"x"`, "invalid JSON body: got string, want object"},
		{"/sessions/nope/tool-result", `{"callId":5}`, "invalid JSON body: callId: got number, want string"},
	} {
		code, _, body := do(t, "POST", srv.URL+tc.path, tc.body, nil)
		var got struct{ Error ErrorBody }
		_ = json.Unmarshal(body, &got)
		if code != 400 || got.Error.Message != tc.want {
			t.Errorf("%s: %d %s, want 400 %q", tc.body, code, body, tc.want)
		}
		if strings.Contains(string(body), "Go ") || strings.Contains(string(body), "broker.") {
			t.Errorf("%s: the answer names Go internals: %s", tc.body, body)
		}
	}
}

func TestHTTPOriginRule(t *testing.T) {
	b, _ := newTestBroker(t, nil)
	h := b.HTTPHandler(&HandlerOptions{AllowedOrigins: []string{"https://app.example.com/"}})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	for _, tc := range []struct {
		name, origin string
		status       int
	}{
		{"cross-site page", "https://evil.example", 403},
		{"same host on another port", "http://" + strings.Split(host, ":")[0] + ":1", 403},
		{"opaque origin", "null", 403},
		{"configured origin", "https://app.example.com", 200},
		{"own origin", "http://" + host, 200},
		{"no Origin (not a browser)", "", 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/execute", strings.NewReader(`{"code":"return 1"}`))
			if tc.origin != "" {
				req.Header.Set("Origin", tc.origin)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("%d %s, want %d", resp.StatusCode, body, tc.status)
			}
			if tc.status == 403 && errorCode(t, body) != CodeOriginNotAllowed {
				t.Fatalf("body %s, want %s", body, CodeOriginNotAllowed)
			}
			if tc.status == 200 && !strings.Contains(string(body), `"result":1`) {
				t.Fatalf("body %s, want the result", body)
			}
			// A page the handler serves may read the answer (CORS); a
			// preflight of its JSON POST is answered; another page's is
			// refused.
			if acao := resp.Header.Get("Access-Control-Allow-Origin"); (tc.origin != "" && tc.status == 200) != (acao == tc.origin && acao != "") {
				t.Fatalf("Access-Control-Allow-Origin %q for origin %q (status %d)", acao, tc.origin, tc.status)
			}
			if tc.origin == "" {
				return
			}
			pre, _ := http.NewRequest(http.MethodOptions, srv.URL+"/execute", nil)
			pre.Header.Set("Origin", tc.origin)
			pre.Header.Set("Access-Control-Request-Method", "POST")
			pre.Header.Set("Access-Control-Request-Headers", "content-type,x-api-key")
			presp, err := http.DefaultClient.Do(pre)
			if err != nil {
				t.Fatal(err)
			}
			presp.Body.Close()
			want := http.StatusNoContent
			if tc.status == 403 {
				want = 403
			}
			if presp.StatusCode != want || (want == 204 && (presp.Header.Get("Access-Control-Allow-Origin") != tc.origin ||
				!strings.Contains(presp.Header.Get("Access-Control-Allow-Methods"), "POST") ||
				presp.Header.Get("Access-Control-Allow-Headers") != "content-type,x-api-key")) {
				t.Fatalf("preflight: %d %v, want %d", presp.StatusCode, presp.Header, want)
			}
		})
	}
}

func TestHTTPHealthAndActions(t *testing.T) {
	clock := &fakeClock{t: time.Now()}
	b, srv := newTestBroker(t, func(o *BrokerOptions) { o.Now = clock.Now })
	if _, err := collect(t, b, "return 1", ExecuteOptions{}); err != nil {
		t.Fatal(err)
	}
	clock.Add(90 * time.Second)
	code, _, body := do(t, http.MethodGet, srv.URL+"/health", nil, nil)
	var h HealthResponse
	if err := json.Unmarshal(body, &h); err != nil || code != 200 || h.Status != "ok" || h.Uptime != 90 || h.Sessions.Active != 0 || h.Sessions.Total != 1 {
		t.Errorf("health: %d %s", code, body)
	}
	code, _, body = do(t, http.MethodGet, srv.URL+"/code/actions", nil, nil)
	if code != 200 || !strings.HasPrefix(string(body), `{"actions":[],"services":[],"version":"`) {
		t.Errorf("actions: %d %s", code, body)
	}
}

func TestHTTPAuthentication(t *testing.T) {
	keys := map[string]*AuthResult{
		"alice-key": {Valid: true, UserID: "alice", TenantID: "acme", Permissions: []string{"run"}},
		"bob-key":   {Valid: true, UserID: "bob"},
	}
	validate := func(_ context.Context, token string) (*AuthResult, error) {
		if r, ok := keys[token]; ok {
			return r, nil
		}
		if token == "broken" {
			return nil, fmt.Errorf("backend down")
		}
		return &AuthResult{Valid: false}, nil
	}
	for _, typ := range []string{AuthBearer, AuthAPIKey, AuthCustom} {
		t.Run(typ, func(t *testing.T) {
			_, srv := newTestBroker(t, func(o *BrokerOptions) {
				o.Authentication = &AuthConfig{Type: typ, Validate: validate}
			})
			cred := func(token string) http.Header {
				if typ == AuthAPIKey {
					return http.Header{"X-Api-Key": {token}}
				}
				return http.Header{"Authorization": {"Bearer " + token}}
			}
			// /health needs no credentials.
			if code, _, _ := do(t, http.MethodGet, srv.URL+"/health", nil, nil); code != 200 {
				t.Errorf("health: %d", code)
			}
			for _, h := range []http.Header{nil, cred("wrong"), cred("broken")} {
				code, hdr, body := do(t, http.MethodPost, srv.URL+"/execute", `{"code":"return 1"}`, h)
				if code != 401 || errorCode(t, body) != CodeUnauthorized || hdr.Get("WWW-Authenticate") == "" {
					t.Errorf("execute with %v: %d %s", h, code, body)
				}
			}
			if code, _, _ := do(t, http.MethodGet, srv.URL+"/code/actions", nil, nil); code != 401 {
				t.Errorf("actions without credentials: %d", code)
			}
			s := startExecute(t, srv.URL, map[string]any{"code": `return await callTool("client:prompt", {question: "?"})`}, cred("alice-key"))
			var sess Session
			s.next().decode(t, &sess)
			var call ToolCallPayload
			s.next().decode(t, &call)
			if sess.UserID != "alice" || sess.TenantID != "acme" {
				t.Errorf("session owner %q/%q", sess.UserID, sess.TenantID)
			}
			// Bob can neither read nor answer Alice's session.
			if code, _, body := do(t, http.MethodGet, srv.URL+"/sessions/"+sess.ID, nil, cred("bob-key")); code != 404 {
				t.Errorf("bob reads alice's session: %d %s", code, body)
			}
			resultURL := srv.URL + "/sessions/" + sess.ID + "/tool-result"
			if code, _, body := do(t, http.MethodPost, resultURL, map[string]any{"callId": call.CallID, "result": "bob"}, cred("bob-key")); code != 404 {
				t.Errorf("bob answers alice's call: %d %s", code, body)
			}
			if code, _, _ := do(t, http.MethodGet, srv.URL+"/sessions/"+sess.ID, nil, cred("alice-key")); code != 200 {
				t.Errorf("alice reads her session: %d", code)
			}
			if code, _, body := do(t, http.MethodPost, resultURL, map[string]any{"callId": call.CallID, "result": "alice"}, cred("alice-key")); code != 200 {
				t.Fatalf("alice answers: %d %s", code, body)
			}
			evs := s.rest()
			var res ResultPayload
			evs[len(evs)-1].decode(t, &res)
			if string(res.Result) != `"alice"` {
				t.Errorf("result = %s", res.Result)
			}
		})
	}
}

func TestHTTPAuthFromOuterLayer(t *testing.T) {
	b, _ := newTestBroker(t, func(o *BrokerOptions) {
		o.Authentication = &AuthConfig{Type: AuthBearer, Validate: func(context.Context, string) (*AuthResult, error) {
			return &AuthResult{Valid: false}, nil
		}}
	})
	outer := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-User") != "" {
			r = r.WithContext(WithAuth(r.Context(), &AuthResult{Valid: true, UserID: r.Header.Get("X-User")}))
		}
		b.Handler().ServeHTTP(w, r)
	})
	srv := newServer(t, outer)
	code, _, body := do(t, http.MethodPost, srv+"/execute", `{"code":"return 1"}`, http.Header{"X-User": {"carol"}})
	if code != 200 || !strings.Contains(string(body), `"userId":"carol"`) {
		t.Errorf("outer auth: %d %s", code, body)
	}
	if code, _, _ := do(t, http.MethodPost, srv+"/execute", `{"code":"return 1"}`, nil); code != 401 {
		t.Errorf("no outer auth: %d", code)
	}
}

func TestHTTPRateLimiting(t *testing.T) {
	clock := &fakeClock{t: time.Now()}
	_, srv := newTestBroker(t, func(o *BrokerOptions) {
		o.Now = clock.Now
		o.RateLimiting = &RateLimitConfig{WindowMs: 60000, MaxRequests: 2, KeyGenerator: func(r *http.Request) string { return r.Header.Get("X-Client") }}
	})
	a := http.Header{"X-Client": {"a"}}
	for i := 0; i < 2; i++ {
		if code, _, body := do(t, http.MethodGet, srv.URL+"/code/actions", nil, a); code != 200 {
			t.Fatalf("request %d: %d %s", i, code, body)
		}
	}
	code, hdr, body := do(t, http.MethodGet, srv.URL+"/code/actions", nil, a)
	if code != 429 || errorCode(t, body) != CodeRateLimit || hdr.Get("Retry-After") == "" {
		t.Errorf("third request: %d %s (Retry-After %q)", code, body, hdr.Get("Retry-After"))
	}
	if code, _, _ := do(t, http.MethodGet, srv.URL+"/code/actions", nil, http.Header{"X-Client": {"b"}}); code != 200 {
		t.Errorf("other key limited: %d", code)
	}
	if code, _, _ := do(t, http.MethodGet, srv.URL+"/health", nil, a); code != 200 {
		t.Errorf("health limited: %d", code)
	}
	clock.Add(2 * time.Minute)
	if code, _, _ := do(t, http.MethodGet, srv.URL+"/code/actions", nil, a); code != 200 {
		t.Errorf("after the window: %d", code)
	}
}

func TestHTTPSessionLimitAndShutdown(t *testing.T) {
	b, srv := newTestBroker(t, func(o *BrokerOptions) { o.MaxConcurrentSessions = 1 })
	s := startExecute(t, srv.URL, map[string]any{"code": `return await callTool("client:prompt", {question: "?"})`}, nil)
	var sess Session
	s.next().decode(t, &sess)
	var call ToolCallPayload
	s.next().decode(t, &call)

	code, hdr, body := do(t, http.MethodPost, srv.URL+"/execute", `{"code":"return 1"}`, nil)
	if code != 429 || errorCode(t, body) != CodeSessionLimit || hdr.Get("Retry-After") != "1" {
		t.Errorf("over the session cap: %d %s %v", code, body, hdr)
	}

	// Close drains: new executions get 503 while the running session may
	// still be answered and finish.
	closed := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		closed <- b.Close(ctx)
	}()
	for {
		code, hdr, body = do(t, http.MethodPost, srv.URL+"/execute", `{"code":"return 1"}`, nil)
		if code == 503 {
			break
		}
		if code != 429 {
			t.Fatalf("during close: %d %s", code, body)
		}
	}
	if errorCode(t, body) != CodeShuttingDown || hdr.Get("Retry-After") == "" {
		t.Errorf("503 body %s, headers %v", body, hdr)
	}
	if code, _, body := do(t, http.MethodPost, srv.URL+"/sessions/"+sess.ID+"/tool-result", map[string]any{"callId": call.CallID, "result": "late"}, nil); code != 200 {
		t.Fatalf("answer while draining: %d %s", code, body)
	}
	if got := types(s.rest()); got != "tool_result,result" {
		t.Errorf("events = %s", got)
	}
	if err := <-closed; err != nil {
		t.Errorf("Close: %v", err)
	}
}

func TestCloseAbortsAfterDeadline(t *testing.T) {
	b, srv := newTestBroker(t, nil)
	s := startExecute(t, srv.URL, map[string]any{"code": `return await callTool("client:prompt", {question: "?"})`}, nil)
	var sess Session
	s.next().decode(t, &sess)
	s.next()
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // no time to drain
	if err := b.Close(ctx); err == nil {
		t.Error("Close with a spent deadline reported no aborted session")
	}
	evs := s.rest()
	if len(evs) == 0 || evs[len(evs)-1].Type != EventError {
		t.Fatalf("events after abort = %s", types(evs))
	}
	// The caller learns why: the gateway shut down, not that someone
	// aborted its execution.
	var p ErrorPayload
	evs[len(evs)-1].decode(t, &p)
	if p.Error.Code != CodeShuttingDown || p.ScriptStatus != "engine_error" {
		t.Errorf("final event after abort = %+v", p)
	}
	// Close also ends a broker a config reload replaced: the message names
	// both causes and does not claim the gateway shut down.
	if msg := p.Error.Message; strings.Contains(msg, "gateway shut down") || !strings.Contains(msg, "reload") || !strings.Contains(msg, "drain_timeout") {
		t.Errorf("abort message %q: want the broker's close named, a reload among its causes", msg)
	}
	if st := b.Stats(); st.Active != 0 {
		t.Errorf("active sessions after Close: %d", st.Active)
	}
}

func TestToolGuard(t *testing.T) {
	// A frozen clock at a window start: a sliding-window boundary between
	// the calls would let a call through that the test expects limited.
	at := time.Unix(1_800_000_000, 0)
	m, err := guard.NewGuardManager(context.Background(), guard.GuardConfig{Enabled: true}, &guard.ManagerOptions{Now: func() time.Time { return at }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Destroy(context.Background()) })
	release := make(chan struct{})
	b, srv := newTestBroker(t, func(o *BrokerOptions) {
		o.Guard = m
		o.Tools.Register(ToolDefinition{Name: "g:limited", Guard: ToolGuard{
			RateLimit: &guard.RateLimitConfig{MaxRequests: 2, WindowMs: 60000, PartitionBy: guard.PartitionKey{Strategy: guard.PartitionSession}},
		}, Handler: func(context.Context, map[string]any, *ExecutionContext) (any, error) { return 1, nil }})
		o.Tools.Register(ToolDefinition{Name: "g:single", Guard: ToolGuard{
			Concurrency: &guard.ConcurrencyConfig{MaxConcurrent: 1},
		}, Handler: func(ctx context.Context, _ map[string]any, _ *ExecutionContext) (any, error) {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return 1, nil
		}})
		o.Tools.Register(ToolDefinition{Name: "g:slow", Guard: ToolGuard{
			Timeout: &guard.TimeoutConfig{ExecuteMs: 20},
		}, Handler: func(ctx context.Context, _ map[string]any, _ *ExecutionContext) (any, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		}})
	})
	_ = srv
	codes := func(code string) string {
		t.Helper()
		evs, err := collect(t, b, code, ExecuteOptions{})
		if err != nil {
			t.Fatal(err)
		}
		last := evs[len(evs)-1]
		if last.Type != EventResult {
			t.Fatalf("last event %s %+v", last.Type, last.Payload)
		}
		return string(last.Payload.(*ResultPayload).Result)
	}
	soft := `(r) => r.success ? "ok" : r.error.code`
	got := codes(`const f = ` + soft + `; const out = [];
for (let i = 0; i < 3; i++) out.push(f(await callTool("g:limited", {}, {throwOnError: false})));
return out;`)
	if got != `["ok","ok","RATE_LIMIT"]` {
		t.Errorf("rate limit: %s", got)
	}
	// A new session has its own partition.
	if got := codes(`return (await callTool("g:limited", {}, {throwOnError: false})).success`); got != "true" {
		t.Errorf("rate limit in a new session: %s", got)
	}
	// Whichever call gets the slot holds it until the other was refused.
	var once sync.Once
	b.On(OnToolCompleted, func(ev Event) {
		if ev.Tool == "g:single" && ev.Err != nil {
			once.Do(func() { close(release) })
		}
	})
	got = codes(`const f = ` + soft + `;
const rs = await Promise.all([callTool("g:single", {}, {throwOnError: false}), callTool("g:single", {}, {throwOnError: false})]);
return rs.map(f).sort();`)
	if got != `["CONCURRENCY_LIMIT","ok"]` {
		t.Errorf("concurrency: %s", got)
	}
	if got := codes(`const r = await callTool("g:slow", {}, {throwOnError: false}); return r.error.code`); got != `"EXECUTION_TIMEOUT"` {
		t.Errorf("timeout: %s", got)
	}
	// ToolDefaults apply to tools without their own settings (math:add).
	b.opts.ToolDefaults = ToolGuard{RateLimit: &guard.RateLimitConfig{MaxRequests: 1, WindowMs: 60000, PartitionBy: guard.PartitionKey{Strategy: guard.PartitionSession}}}
	got = codes(`const f = ` + soft + `; return [f(await callTool("math:add", {a: 1}, {throwOnError: false})), f(await callTool("math:add", {a: 1}, {throwOnError: false}))]`)
	if got != `["ok","RATE_LIMIT"]` {
		t.Errorf("tool defaults: %s", got)
	}
}

func TestListenAndClose(t *testing.T) {
	b, err := New(&BrokerOptions{Engine: testEngine()})
	if err != nil {
		t.Fatal(err)
	}
	if b.Addr() != "" {
		t.Error("Addr before Listen")
	}
	if err := b.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	if err := b.Listen("127.0.0.1:0"); err == nil {
		t.Error("second Listen succeeded")
	}
	base := "http://" + b.Addr()
	if code, _, body := do(t, http.MethodGet, base+"/health", nil, nil); code != 200 || !strings.Contains(string(body), `"status":"ok"`) {
		t.Fatalf("health: %d %s", code, body)
	}
	if code, _, body := do(t, http.MethodPost, base+"/execute", `{"code":"return 1"}`, nil); code != 200 || !strings.Contains(string(body), `"type":"result"`) {
		t.Fatalf("execute: %d %s", code, body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get(base + "/health"); err == nil {
		t.Error("server still answers after Close")
	}
	if err := b.Listen("127.0.0.1:0"); err == nil {
		t.Error("Listen after Close succeeded")
	}
}

// writeCounter counts the writes made on the connections it accepts.
type writeCounter struct {
	net.Listener
	writes atomic.Int64
}

func (l *writeCounter) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countedConn{Conn: c, n: &l.writes}, nil
}

type countedConn struct {
	net.Conn
	n *atomic.Int64
}

func (c *countedConn) Write(p []byte) (int, error) {
	c.n.Add(1)
	return c.Conn.Write(p)
}

// TestHTTPSessionEventHold: the session event waits for the next event, so
// a quick script's whole response is one write; it never waits behind an
// event the caller must act on, and a script that runs on gets its session
// event once the hold ends.
func TestHTTPSessionEventHold(t *testing.T) {
	releases := make(chan chan struct{}, 1) // the next call of test:wait waits for the channel sent here
	b, _ := newTestBroker(t, func(o *BrokerOptions) {
		o.Tools.Register(ToolDefinition{Name: "test:wait", Description: "waits for the test", Handler: func(ctx context.Context, _ map[string]any, _ *ExecutionContext) (any, error) {
			release := <-releases
			select {
			case <-release:
				return map[string]any{"ok": true}, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}})
	})
	serve := func(hold time.Duration) (*httptest.Server, *writeCounter) {
		h := b.HTTPHandler(nil).(*httpHandler)
		h.sessionHold = hold
		srv := httptest.NewUnstartedServer(h)
		wc := &writeCounter{Listener: srv.Listener}
		srv.Listener = wc
		srv.Start()
		t.Cleanup(srv.Close)
		return srv, wc
	}

	for _, filter := range []any{nil, map[string]any{"types": []string{"result"}}} {
		t.Run(fmt.Sprintf("quick script, filter %v: one write", filter), func(t *testing.T) {
			srv, wc := serve(time.Hour)
			s := startExecute(t, srv.URL, map[string]any{"code": "return 1+1", "filter": filter}, nil)
			want := "session,result"
			if filter != nil {
				want = "result"
			}
			if got := types(s.rest()); got != want {
				t.Fatalf("events = %s", got)
			}
			if n := wc.writes.Load(); n != 1 {
				t.Errorf("the response took %d writes, want 1", n)
			}
		})
	}

	t.Run("a call for the caller goes out at once", func(t *testing.T) {
		srv, _ := serve(time.Hour)
		s := startExecute(t, srv.URL, map[string]any{"code": `return await callTool("client:prompt", {question: "?"})`, "timeout": 300}, nil)
		done := make(chan string, 1)
		go func() {
			ev := s.next()
			done <- ev.Type + "," + s.next().Type
		}()
		select {
		case got := <-done:
			if got != "session,tool_call" {
				t.Errorf("events = %s", got)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the session and tool_call events were held")
		}
		s.rest() // the call times out with the script
	})

	// A script that runs on without events: the headers (and the session
	// event when the filter lets it through) go out once the hold ends.
	for _, tc := range []struct{ filter, first string }{
		{`["session","result"]`, `{"type":"session"`},
		{`["result"]`, ""},
	} {
		t.Run("a script that runs on, filter "+tc.filter, func(t *testing.T) {
			srv, _ := serve(20 * time.Millisecond)
			release := make(chan struct{})
			// The run before may have ended (its client gone) before its
			// script called test:wait: its release was never taken, and
			// this send waited forever (seen under a load average of 30).
			select {
			case <-releases:
			default:
			}
			releases <- release
			body := `{"code":"return (await callTool(\"test:wait\", {})).ok","timeout":30000,"filter":{"types":` + tc.filter + `}}`
			first := make(chan string, 1)
			go func() {
				resp, err := http.Post(srv.URL+"/execute", "application/json", strings.NewReader(body))
				if err != nil {
					first <- err.Error()
					return
				}
				defer resp.Body.Close()
				if tc.first == "" { // nothing to read before the result
					first <- ""
					return
				}
				line, err := bufio.NewReader(resp.Body).ReadString('\n')
				if err != nil {
					first <- err.Error()
					return
				}
				first <- line
			}()
			select {
			case line := <-first:
				close(release)
				if !strings.HasPrefix(line, tc.first) {
					t.Errorf("first line %q, want %s...", line, tc.first)
				}
			case <-time.After(30 * time.Second):
				close(release)
				t.Fatal("the response did not start while the script ran")
			}
		})
	}
}

func TestOriginAllowedPorts(t *testing.T) {
	for _, tc := range []struct {
		origin, host string
		want         bool
	}{
		{"https://example.com", "example.com", true},
		{"https://example.com", "example.com:443", true},
		{"http://example.com", "example.com:80", true},
		{"https://example.com:443", "example.com", true},
		{"https://EXAMPLE.com", "example.COM", true},
		{"https://example.com:8443", "example.com:8443", true},
		{"http://[::1]:8080", "[::1]:8080", true},
		{"http://[::1]", "[::1]", true},
		{"https://example.com", "example.com:80", false},
		{"https://example.com", "example.com:8443", false},
		{"https://example.com:8443", "example.com", false},
		{"https://evil.example", "example.com", false},
		{"https://example.com.evil.example", "example.com", false},
		{"null", "example.com", false},
		{"https://", "", false},
	} {
		if got := OriginAllowed(tc.origin, tc.host, nil); got != tc.want {
			t.Errorf("OriginAllowed(%q, %q) = %v, want %v", tc.origin, tc.host, got, tc.want)
		}
	}
}

// TestForeignCharset: UTF-8 under any of its names, and its ASCII subset,
// is read as it is; any other declared charset is foreign.
func TestForeignCharset(t *testing.T) {
	for ct, want := range map[string]bool{
		"application/json":                                        false,
		"application/json; charset=utf-8":                         false,
		"application/json; charset=UTF-8":                         false,
		"application/json; charset=utf8":                          false,
		"application/json; charset=US-ASCII":                      false,
		"application/json; charset=utf-16":                        true,
		"application/json;charset=ISO-8859-1":                     true,
		"application/x-www-form-urlencoded; charset=windows-1252": true,
	} {
		if _, got := ForeignCharset(ct); got != want {
			t.Errorf("ForeignCharset(%q) = %v, want %v", ct, got, want)
		}
	}
}
