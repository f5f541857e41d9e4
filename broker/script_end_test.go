package broker

import (
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"
	"github.com/redis/go-redis/v9"
)

// TestAnswerAfterScriptEnd: once the script has ended, an answer is 409
// SESSION_FINISHED although the final record is not written yet, with the
// worker and the in-process engine, the memory and the Redis store; an
// answer that came before the end was used. The script leaves call "a"
// waiting (never awaited) and returns the answer to "b". The broker is
// held where "a" stops waiting (the engine has reported the end, before it
// cancels its calls: sandbox.EndHost) or after the engine returned, before
// the final write. The calls used to close only after that write: an
// answer to "a" was accepted (200, nothing would read it) and one more to
// "b" was 409 CALL_ALREADY_ANSWERED; the worker engine, which waits for
// its calls before it returns, kept that window open after the last
// pass closed the calls before the final write.
func TestAnswerAfterScriptEnd(t *testing.T) {
	engines := map[string]func(t *testing.T) sandbox.Engine{
		"inprocess": func(*testing.T) sandbox.Engine { return testEngine() },
		"worker": func(t *testing.T) sandbox.Engine {
			eng, err := sandbox.NewWorkerPool(&sandbox.PoolOptions{RuntimePoolOptions: sandbox.RuntimePoolOptions{MinSize: 1, MaxSize: 1}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = eng.Close() })
			return eng
		},
	}
	for _, hold := range []string{"call", "final write"} {
		for _, engine := range []string{"inprocess", "worker"} {
			for _, store := range []string{"memory", "redis"} {
				t.Run(hold+"/"+engine+"/"+store, func(t *testing.T) {
					eng := engines[engine](t)
					b, srv := newTestBroker(t, func(o *BrokerOptions) {
						o.Engine = eng
						useStore(t, o, store)
					})
					held, release := make(chan string, 1), make(chan struct{})
					wait := func(id string) {
						held <- id
						<-release
					}
					if hold == "call" {
						b.callEnding = func(_, callID string) { wait(callID) }
					} else {
						b.finishing = wait
					}
					released := false
					unhold := func() {
						if !released {
							released = true
							close(release)
						}
					}
					defer unhold()
					s, sess, calls := twoPrompts(t, srv.URL)
					url := srv.URL + "/sessions/" + sess.ID + "/tool-result"
					if code, _, body := do(t, http.MethodPost, url, map[string]any{"callId": calls["b"], "result": "yes"}, nil); code != http.StatusOK {
						t.Fatalf("answer while the script waits: %d %s", code, body)
					}
					want := sess.ID
					if hold == "call" {
						want = calls["a"]
					}
					if id := <-held; id != want {
						t.Fatalf("held %s, want %s", id, want)
					}
					for _, q := range []string{"a", "b"} {
						code, _, body := do(t, http.MethodPost, url, map[string]any{"callId": calls[q], "result": 1}, nil)
						if code != http.StatusConflict || errorCode(t, body) != CodeSessionFinished {
							t.Errorf("answer to call %q after the script's end: %d %s", q, code, body)
						}
					}
					unhold()
					evs := s.rest()
					var res ResultPayload
					if len(evs) == 0 || evs[len(evs)-1].Type != EventResult {
						t.Fatalf("events after the answer: %s", types(evs))
					}
					evs[len(evs)-1].decode(t, &res)
					if string(res.Result) != `"yes"` {
						t.Errorf("result %s, want the answer that came before the end", res.Result)
					}
					code, _, body := do(t, http.MethodPost, url, map[string]any{"callId": calls["a"], "result": 1}, nil)
					if code != http.StatusConflict || errorCode(t, body) != CodeSessionFinished {
						t.Errorf("answer after the final record: %d %s", code, body)
					}
				})
			}
		}
	}
}

// twoPrompts starts a session on base that leaves client:prompt "a"
// waiting and returns the answer to client:prompt "b"; it returns once
// both calls are announced, with their ids by question.
func twoPrompts(t *testing.T, base string) (*stream, Session, map[string]string) {
	t.Helper()
	s := startExecute(t, base, map[string]any{"code": `
callTool("client:prompt", {question: "a"});
return await callTool("client:prompt", {question: "b"});`}, nil)
	var sess Session
	s.next().decode(t, &sess)
	calls := map[string]string{} // question -> call id
	for len(calls) < 2 {
		ev := s.next()
		if ev.Type != EventToolCall {
			continue
		}
		var c ToolCallPayload
		ev.decode(t, &c)
		var in struct{ Question string }
		if err := json.Unmarshal(c.Input, &in); err != nil {
			t.Fatal(err)
		}
		calls[in.Question] = c.CallID
	}
	return s, sess, calls
}

// TestRestoreAfterScriptEnd: a session whose script has ended, its final
// record not yet written, that the store loses (Redis restarted without
// persistence) is restored with its calls closed: every answer is 409
// SESSION_FINISHED, as before the loss. The restore wrote the record as
// running and its waiting and abandoned calls without the closed mark: the
// abandoned call "a" was 409 CALL_ABANDONED (200 had it still been
// waiting), the answered "b" and an id never issued 404. The engine holds
// the run after the script's end; the test deletes the session's keys and
// the gateway's liveness, as a restart does, and runs the keep-alive's tick.
func TestRestoreAfterScriptEnd(t *testing.T) {
	eng := newHoldingEngine()
	var rdb *redis.Client
	var prefix string
	b, srv := newTestBroker(t, func(o *BrokerOptions) {
		eng.Engine, o.Engine = o.Engine, eng
		useStore(t, o, "redis")
		rdb, prefix = o.Redis.(*redis.Client), o.KeyPrefix
	})
	defer eng.release()
	completed := make(chan string, 2)
	if err := b.On(OnToolCompleted, func(ev Event) { completed <- ev.CallID }); err != nil {
		t.Fatal(err)
	}
	s, sess, calls := twoPrompts(t, srv.URL)
	url := srv.URL + "/sessions/" + sess.ID + "/tool-result"
	if code, _, body := do(t, http.MethodPost, url, map[string]any{"callId": calls["b"], "result": "yes"}, nil); code != http.StatusOK {
		t.Fatalf("answer while the script waits: %d %s", code, body)
	}
	<-eng.ended
	for range 2 { // both calls have ended: "a" abandoned, "b" answered
		<-completed
	}
	ctx := t.Context()
	if err := rdb.Del(ctx, prefix+"session:"+sess.ID, prefix+"calls:"+sess.ID, prefix+"owner:"+b.owner).Err(); err != nil {
		t.Fatal(err)
	}
	b.tick(ctx)
	code, _, body := do(t, http.MethodGet, srv.URL+"/sessions/"+sess.ID, nil, nil)
	if code != http.StatusOK || !contains(body, `"status":"running"`) {
		t.Fatalf("the session after the restore: %d %s", code, body)
	}
	for _, id := range []string{calls["a"], calls["b"], "99"} {
		code, _, body := do(t, http.MethodPost, url, map[string]any{"callId": id, "result": 1}, nil)
		if code != http.StatusConflict || errorCode(t, body) != CodeSessionFinished {
			t.Errorf("answer to call %s after the restore: %d %s", id, code, body)
		}
	}
	eng.release()
	expectResult(t, s, `"yes"`)
}

// TestCallStartedAfterScriptEnd: a caller-answered call that reaches the
// broker after its script has ended (the in-process engine runs calls on
// goroutines of their own, and does not wait for them) ends with the
// script's end, and the Redis store is not taken for failing. The call's
// record was written under the ended context, and its failure ("context
// canceled") marked the store unavailable (logged as such, /health
// degraded until the next tick). A listener holds the call until the
// engine has returned; the engine holds the run until the call is over.
func TestCallStartedAfterScriptEnd(t *testing.T) {
	eng := newHoldingEngine()
	b, srv := newTestBroker(t, func(o *BrokerOptions) {
		eng.Engine, o.Engine = o.Engine, eng
		useStore(t, o, "redis")
		o.OwnerTimeout = time.Hour // no keep-alive tick clears the failure meanwhile
	})
	completed := make(chan Event, 1)
	for name, l := range map[string]Listener{
		OnToolCalled:    func(Event) { <-eng.ended },
		OnToolCompleted: func(ev Event) { completed <- ev },
	} {
		if err := b.On(name, l); err != nil {
			t.Fatal(err)
		}
	}
	s := startExecute(t, srv.URL, map[string]any{"code": `callTool("client:prompt", {question: "a"}).catch(() => {}); return 1`}, nil)
	ev := <-completed
	eng.release()
	expectResult(t, s, `1`)
	if ev.Err == nil {
		t.Fatalf("the call after the script's end: %s, want an error", ev.Result)
	}
	if ok, err, _ := b.StorageStatus(); !ok {
		t.Errorf("the store is taken for failing: %v (the call's error: %v)", err, ev.Err)
	}
}

// TestRestoreKeepsAnsweredCalls: a running session that the store lost
// (Redis restarted without persistence) is written back with the calls its
// caller answered: one more answer to such a call is 409
// CALL_ALREADY_ANSWERED, as before the loss, not 404 as for an id never
// issued, which told a caller retrying an answer that was used that its
// call did not exist. The session then goes on as usual.
func TestRestoreKeepsAnsweredCalls(t *testing.T) {
	var rdb *redis.Client
	var prefix string
	b, srv := newTestBroker(t, func(o *BrokerOptions) {
		useStore(t, o, "redis")
		rdb, prefix = o.Redis.(*redis.Client), o.KeyPrefix
	})
	s := startExecute(t, srv.URL, map[string]any{"code": `
const a = await callTool("client:prompt", {question: "a"});
return [a, await callTool("client:prompt", {question: "b"})];`}, nil)
	var sess Session
	s.next().decode(t, &sess)
	var a, bc ToolCallPayload
	s.next().decode(t, &a)
	url := srv.URL + "/sessions/" + sess.ID + "/tool-result"
	if code, _, body := do(t, http.MethodPost, url, map[string]any{"callId": a.CallID, "result": "x"}, nil); code != http.StatusOK {
		t.Fatalf("answer to a: %d %s", code, body)
	}
	for bc.CallID == "" {
		if ev := s.next(); ev.Type == EventToolCall {
			ev.decode(t, &bc)
		}
	}
	ctx := t.Context()
	if err := rdb.Del(ctx, prefix+"session:"+sess.ID, prefix+"calls:"+sess.ID, prefix+"owner:"+b.owner).Err(); err != nil {
		t.Fatal(err)
	}
	b.tick(ctx)
	code, _, body := do(t, http.MethodPost, url, map[string]any{"callId": a.CallID, "result": "again"}, nil)
	if code != http.StatusConflict || errorCode(t, body) != CodeCallAlreadyAnswered {
		t.Errorf("one more answer to a after the restore: %d %s", code, body)
	}
	if code, _, body := do(t, http.MethodPost, url, map[string]any{"callId": bc.CallID, "result": "y"}, nil); code != http.StatusOK {
		t.Fatalf("answer to b after the restore: %d %s", code, body)
	}
	expectResult(t, s, `["x","y"]`)
}

// TestSessionEndsAfterItsCalls: a session's final event comes after the
// tool_result of every call its script made, and session:completed after
// their tool:completed, with the in-process engine too, which does not
// wait for the calls it leaves when the script ends. The script leaves
// call "a" waiting; the broker holds it where it stops waiting until the
// session has finished (before: its tool_result was dropped, and
// tool:completed came after session:completed) or the run waits for it.
func TestSessionEndsAfterItsCalls(t *testing.T) {
	b, srv := newTestBroker(t, nil)
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	defer free()
	b.callEnding = func(string, string) { <-release }
	b.callsRunning = func(string) { free() }
	var mu sync.Mutex
	var order []string
	for _, name := range []string{OnToolCompleted, OnSessionCompleted} {
		if err := b.On(name, func(ev Event) {
			if name == OnSessionCompleted {
				free()
			}
			mu.Lock()
			order = append(order, ev.Name+" "+ev.CallID)
			mu.Unlock()
		}); err != nil {
			t.Fatal(err)
		}
	}
	s, sess, calls := twoPrompts(t, srv.URL)
	url := srv.URL + "/sessions/" + sess.ID + "/tool-result"
	if code, _, body := do(t, http.MethodPost, url, map[string]any{"callId": calls["b"], "result": "yes"}, nil); code != http.StatusOK {
		t.Fatalf("answer to b: %d %s", code, body)
	}
	evs := s.rest()
	results := map[string]bool{}
	for _, ev := range evs {
		if ev.Type == EventToolResult {
			var p ToolResultPayload
			ev.decode(t, &p)
			results[p.CallID] = true
		}
	}
	if !results[calls["a"]] || !results[calls["b"]] || evs[len(evs)-1].Type != EventResult {
		t.Errorf("events after the answer: %s, tool results of %v", types(evs), results)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(order) != 3 || order[2] != OnSessionCompleted+" " {
		t.Errorf("listeners in the order %q, want session:completed last", order)
	}
}
