package broker

import (
	"context"
	"net/http"
	"sync"
	"testing"

	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"
	"github.com/codemode-gateway/caddy-codemode/guard"
	"github.com/codemode-gateway/caddy-codemode/guard/redistest"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestLateAnswerToAbandonedCall: an answer to a call whose script timed
// out while it waited is 409 SESSION_FINISHED, in the memory and the Redis
// store, as soon as the engine has reported the script's end (the calls
// close then, sandbox.EndHost), an answer to an id never issued too. The
// call used to be deleted when it stopped waiting, and until the finished
// session closed its calls a late answer was 404
// (TestAbuseAgainstTheGateway saw one for a call whose worker was lost),
// then 409 CALL_ABANDONED. The engine holds the run after the script's
// end, before the session is written finished, and the answer comes once
// the call has stopped waiting: the window of that 404. A call that stops
// waiting while its session goes on is CALL_ABANDONED (tool timeout).
func TestLateAnswerToAbandonedCall(t *testing.T) {
	for _, store := range []string{"memory", "redis"} {
		t.Run(store+"/script timeout", func(t *testing.T) {
			eng := newHoldingEngine()
			m := NewMetrics()
			b, srv := newTestBroker(t, func(o *BrokerOptions) {
				eng.Engine, o.Engine, o.Metrics = o.Engine, eng, m
				useStore(t, o, store)
			})
			defer eng.release()
			callEnded := make(chan Event, 1)
			if err := b.On(OnToolCompleted, func(ev Event) { callEnded <- ev }); err != nil {
				t.Fatal(err)
			}
			s := startExecute(t, srv.URL, map[string]any{"code": `await callTool("client:prompt", {question: "x?"}); return 1`, "timeout": 1000}, nil)
			var sess Session
			s.next().decode(t, &sess)
			var call ToolCallPayload
			if ev := s.next(); ev.Type != EventToolCall {
				t.Fatalf("first event after the session: %s %s", ev.Type, ev.Payload)
			} else {
				ev.decode(t, &call)
			}
			<-eng.ended
			if ev := <-callEnded; ev.Err == nil || ev.CallID != call.CallID {
				t.Fatalf("the call ended %+v", ev)
			}
			url := srv.URL + "/sessions/" + sess.ID + "/tool-result"
			for _, id := range []string{call.CallID, "99"} {
				code, _, body := do(t, http.MethodPost, url, map[string]any{"callId": id, "result": 1}, nil)
				if code != http.StatusConflict || errorCode(t, body) != CodeSessionFinished {
					t.Errorf("answer to call %s after the script's end: %d %s", id, code, body)
				}
			}
			// A refused answer is no storage failure.
			if v := testutil.ToFloat64(m.redisErrors.WithLabelValues("resolve_call")); v != 0 {
				t.Errorf("redis errors of resolve_call: %v", v)
			}
			eng.release()
			evs := s.rest()
			if len(evs) == 0 || evs[len(evs)-1].Type != EventError {
				t.Fatalf("events after the call: %s", types(evs))
			}
			code, _, body := do(t, http.MethodPost, url, map[string]any{"callId": call.CallID, "result": 1}, nil)
			if code != http.StatusConflict || errorCode(t, body) != CodeSessionFinished {
				t.Errorf("answer after the session's end: %d %s", code, body)
			}
		})
		t.Run(store+"/tool timeout", func(t *testing.T) { lateAnswerAfterToolTimeout(t, store) })
	}
}

// lateAnswerAfterToolTimeout: a caller-answered tool whose guard timeout
// passed stops waiting while its session goes on; an answer to it is 409
// CALL_ABANDONED (404 before), one to an id never issued 404, and the
// session's next call is answered as usual, a second answer to it 409.
func lateAnswerAfterToolTimeout(t *testing.T, store string) {
	quickTool := withQuickTool(t, 1000)
	_, srv := newTestBroker(t, func(o *BrokerOptions) {
		quickTool(o)
		useStore(t, o, store)
	})
	s, sess, quick, prompt := quickThenPrompt(t, srv.URL)
	url := srv.URL + "/sessions/" + sess.ID + "/tool-result"
	if code, _, body := do(t, http.MethodPost, url, map[string]any{"callId": "99", "result": 1}, nil); code != http.StatusNotFound || errorCode(t, body) != CodeNotFound {
		t.Errorf("answer to a call never made: %d %s", code, body)
	}
	answerQuickThenPrompt(t, url, quick, prompt, "while the session runs")
	// The session may have finished by now.
	code, _, body := do(t, http.MethodPost, url, map[string]any{"callId": prompt.CallID, "result": "y"}, nil)
	if c := errorCode(t, body); code != http.StatusConflict || c != CodeCallAlreadyAnswered && c != CodeSessionFinished {
		t.Errorf("second answer: %d %s", code, body)
	}
	evs := s.rest()
	var res ResultPayload
	if len(evs) == 0 {
		t.Fatal("no final event")
	}
	evs[len(evs)-1].decode(t, &res)
	if string(res.Result) != `["EXECUTION_TIMEOUT","y"]` {
		t.Errorf("events %s, result %s", types(evs), res.Result)
	}
}

// withQuickTool gives a broker an enabled guard and client:quick, a tool
// the caller answers whose guard timeout is ms.
func withQuickTool(t *testing.T, ms int64) func(*BrokerOptions) {
	g, err := guard.NewGuardManager(context.Background(), guard.GuardConfig{Enabled: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Destroy(context.Background()) })
	return func(o *BrokerOptions) {
		o.Guard = g
		o.Tools.Register(ToolDefinition{Name: "client:quick", Guard: ToolGuard{Timeout: &guard.TimeoutConfig{ExecuteMs: ms}}})
	}
}

// quickThenPrompt starts a session on base whose client:quick call times
// out (its code is the first item of the result) and which then waits for
// client:prompt (the second); it returns once that call is announced.
func quickThenPrompt(t *testing.T, base string) (s *stream, sess Session, quick, prompt ToolCallPayload) {
	t.Helper()
	s = startExecute(t, base, map[string]any{"code": `
let first = "";
try { await callTool("client:quick", {}); } catch (e) { first = e.code; }
return [first, await callTool("client:prompt", {question: "y?"})];`}, nil)
	s.next().decode(t, &sess)
	s.next().decode(t, &quick)
	if ev := s.next(); ev.Type != EventToolResult {
		t.Fatalf("after the quick call: %s %s", ev.Type, ev.Payload)
	}
	s.next().decode(t, &prompt)
	return s, sess, quick, prompt
}

// answerQuickThenPrompt posts the answers to quickThenPrompt's calls to
// url: 409 CALL_ABANDONED for the timed-out one, 200 for the waiting one.
func answerQuickThenPrompt(t *testing.T, url string, quick, prompt ToolCallPayload, when string) {
	t.Helper()
	code, _, body := do(t, http.MethodPost, url, map[string]any{"callId": quick.CallID, "result": 1}, nil)
	if code != http.StatusConflict || errorCode(t, body) != CodeCallAbandoned {
		t.Errorf("answer to the timed-out call %s: %d %s", when, code, body)
	}
	if code, _, body := do(t, http.MethodPost, url, map[string]any{"callId": prompt.CallID, "result": "y"}, nil); code != http.StatusOK {
		t.Fatalf("answer to the waiting call %s: %d %s", when, code, body)
	}
}

// useStore points the broker at store: "memory" (its default) or "redis"
// (CODEMODE_TEST_REDIS_ADDR, else a redis-server of the test's own).
func useStore(t *testing.T, o *BrokerOptions, store string) {
	if store == "redis" {
		o.Redis, o.KeyPrefix = redistest.Client(t)
	}
}

// holdingEngine runs one script on a real engine and, once it has ended,
// closes ended and waits for resume before its result is handed back.
type holdingEngine struct {
	sandbox.Engine
	ended, resume chan struct{}
	once          sync.Once
}

func newHoldingEngine() *holdingEngine {
	return &holdingEngine{ended: make(chan struct{}), resume: make(chan struct{})}
}

// release lets the held run go on; it may be called more than once.
func (e *holdingEngine) release() { e.once.Do(func() { close(e.resume) }) }

func (e *holdingEngine) Execute(ctx context.Context, req sandbox.Request, host sandbox.Host) (*sandbox.Result, error) {
	res, err := e.Engine.Execute(ctx, req, host)
	close(e.ended)
	<-e.resume
	return res, err
}
