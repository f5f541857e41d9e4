package broker

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"
)

// postedAnswer is the outcome of a tool result posted from a goroutine.
type postedAnswer struct {
	code int
	body []byte
	err  error
}

// postAnswer posts result for callID to url (a session's tool-result
// endpoint) without the test's helpers, which may not fail a test off its
// goroutine.
func postAnswer(url, callID string, result any) postedAnswer {
	raw, _ := json.Marshal(map[string]any{"callId": callID, "result": result})
	resp, err := http.Post(url, "application/json", bytes.NewReader(raw))
	if err != nil {
		return postedAnswer{err: err}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return postedAnswer{code: resp.StatusCode, body: body, err: err}
}

// TestAnswerRacingTheCallsEnd: an answer the store accepted (200) while
// the call waited is the call's outcome, although the call's context ended
// before the answer reached it, in the memory and the Redis store, for a
// call under a guard timeout too. The broker holds the accepted answer on
// its way to the waiting call; the caller of /execute leaves meanwhile, and
// the answer is let through once the call has seen its context end. The
// call used to end with EXECUTION_ABORTED (its select took the context, and
// guard.WithTimeout did not wait for the call), and the 200 was for an
// answer nothing read.
func TestAnswerRacingTheCallsEnd(t *testing.T) {
	for _, store := range []string{"memory", "redis"} {
		for _, tool := range []string{"client:prompt", "client:quick"} {
			t.Run(store+"/"+tool, func(t *testing.T) {
				quickTool := withQuickTool(t, 60_000)
				b, srv := newTestBroker(t, func(o *BrokerOptions) {
					quickTool(o)
					useStore(t, o, store)
				})
				b.answerPoll = time.Hour // the answer comes by delivery only
				held, release := make(chan struct{}, 1), make(chan struct{})
				b.delivering = func(*toolAnswer) {
					held <- struct{}{}
					<-release
				}
				ending := make(chan string, 1)
				b.callEnding = func(_, callID string) { ending <- callID }
				completed := make(chan Event, 1)
				if err := b.On(OnToolCompleted, func(ev Event) { completed <- ev }); err != nil {
					t.Fatal(err)
				}
				s := startExecute(t, srv.URL, map[string]any{"code": `return await callTool("` + tool + `", {question: "x?"})`}, nil)
				var sess Session
				s.next().decode(t, &sess)
				var call ToolCallPayload
				s.next().decode(t, &call)
				posted := make(chan postedAnswer, 1)
				go func() { posted <- postAnswer(srv.URL+"/sessions/"+sess.ID+"/tool-result", call.CallID, "late") }()
				<-held // accepted, on its way to the call
				s.resp.Body.Close()
				if id := <-ending; id != call.CallID {
					t.Fatalf("call %s ended, want %s", id, call.CallID)
				}
				close(release)
				p := <-posted
				if p.err != nil || p.code != http.StatusOK {
					t.Fatalf("answer: %d %s %v", p.code, p.body, p.err)
				}
				ev := <-completed
				if ev.Err != nil || string(ev.Result) != `"late"` {
					t.Errorf("the call ended with %s, error %v; want the accepted answer", ev.Result, ev.Err)
				}
			})
		}
	}
}
