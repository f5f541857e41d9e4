package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/codemode-gateway/caddy-codemode/broker/catalog"
	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"
	"github.com/codemode-gateway/caddy-codemode/guard/redistest"
)

// crash stops a broker's heartbeats without withdrawing its liveness, as a
// killed process does; its runs stay where they are.
func crash(b *Broker) {
	close(b.live.stop)
	<-b.live.done
	b.live.stop = nil
}

// waitUntil polls ok until it holds, failing after a generous deadline.
func waitUntil(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func onRedis(rdb redis.UniversalClient, prefix string, ownerTimeout time.Duration) func(*BrokerOptions) {
	return func(o *BrokerOptions) { o.Redis, o.KeyPrefix, o.OwnerTimeout = rdb, prefix, ownerTimeout }
}

// waitingSession starts a session on base that waits for client:prompt and
// returns its id and call id. Its time limit (30 s) outlasts what the tests
// wait for: a crashed gateway's run still goes on in the test's process,
// and one that timed out wrote its own end (TIMEOUT) before the reaper's
// OWNER_LOST, which a loaded machine (-race, load 20) delayed past 4 s
// (a fresh gateway judges others an owner and a storage timeout after it
// starts, and again after each lapse of its own liveness). The stream is
// closed when the test ends, which ends the run.
func waitingSession(t *testing.T, base string) (*stream, string, string) {
	t.Helper()
	s := startExecute(t, base, map[string]any{"code": `return await callTool("client:prompt", {question: "?"})`, "timeout": 30000}, nil)
	var sess Session
	s.next().decode(t, &sess)
	var call ToolCallPayload
	s.next().decode(t, &call)
	return s, sess.ID, call.CallID
}

// promptSession starts a session on base whose script returns "got " and
// the caller's answer to client:prompt, within timeoutMs; it returns the
// stream once the call is announced, with the session and call ids.
func promptSession(t *testing.T, base string, timeoutMs int) (*stream, string, string) {
	t.Helper()
	s := startExecute(t, base, map[string]any{"code": `return "got " + await callTool("client:prompt", {question: "?"})`, "timeout": timeoutMs}, nil)
	var sess Session
	s.next().decode(t, &sess)
	var call ToolCallPayload
	s.next().decode(t, &call)
	return s, sess.ID, call.CallID
}

// expectResult reads the rest of s and fails unless it ends with a result
// of want (JSON).
func expectResult(t *testing.T, s *stream, want string) {
	t.Helper()
	evs := s.rest()
	if len(evs) == 0 {
		t.Fatalf("the stream ended with no event, want the result %s", want)
	}
	var res ResultPayload
	evs[len(evs)-1].decode(t, &res)
	if evs[len(evs)-1].Type != EventResult || string(res.Result) != want {
		t.Errorf("events %s, result %s, want %s", types(evs), res.Result, want)
	}
}

// TestOwnerLost: when the gateway running a session stops heartbeating, the
// session ends with OWNER_LOST on every gateway, a tool result for it is
// refused (409 OWNER_LOST, never success), and a caller whose stream was cut
// reads the final state with GET /sessions/{id}. The end comes from a
// reader noticing (lazily) or from the reaper of any live gateway.
func TestOwnerLost(t *testing.T) {
	rdb, prefix := redistest.Client(t)
	const ownerTimeout = 300 * time.Millisecond

	t.Run("noticed by a reader", func(t *testing.T) {
		a, aSrv := newTestBroker(t, onRedis(rdb, prefix+"r:", ownerTimeout))
		b, bSrv := newTestBroker(t, onRedis(rdb, prefix+"r:", time.Hour)) // its reaper never runs here
		// As a gateway that has reached the store for an owner timeout (a
		// fresh one waits that long before it judges others: TestStoreOutageForEveryGateway).
		b.store.(*redisStore).judgeAfter.Store(0)
		_, id, callID := waitingSession(t, aSrv.URL)
		crash(a)
		waitUntil(t, "A's liveness to lapse", func() bool { return rdb.Exists(context.Background(), prefix+"r:owner:"+a.owner).Val() == 0 })
		code, _, body := do(t, http.MethodPost, bSrv.URL+"/sessions/"+id+"/tool-result", map[string]any{"callId": callID, "result": "late"}, nil)
		if code != http.StatusConflict || errorCode(t, body) != CodeOwnerLost {
			t.Fatalf("tool result for a lost session: %d %s", code, body)
		}
		code, _, body = do(t, http.MethodGet, bSrv.URL+"/sessions/"+id, nil, nil)
		var s Session
		json.Unmarshal(body, &s)
		if code != 200 || s.Status != StatusError || s.Error == nil || s.Error.Code != CodeOwnerLost {
			t.Fatalf("GET of a lost session: %d %s", code, body)
		}
	})

	t.Run("ended by the reaper", func(t *testing.T) {
		a, aSrv := newTestBroker(t, onRedis(rdb, prefix+"p:", ownerTimeout))
		newTestBroker(t, onRedis(rdb, prefix+"p:", ownerTimeout)) // a live gateway, whose reaper runs
		_, id, _ := waitingSession(t, aSrv.URL)
		crash(a)
		// Nobody reads the session: the record itself changes, within the
		// owner timeout and a reaper period.
		waitUntil(t, "the reaper to end the session", func() bool {
			var s Session
			raw, _ := rdb.Get(context.Background(), prefix+"p:session:"+id).Bytes()
			if json.Unmarshal(raw, &s) == nil && s.finished() && (s.Error == nil || s.Error.Code != CodeOwnerLost) {
				t.Fatalf("the session ended otherwise than OWNER_LOST: %s", raw)
			}
			return s.Status == StatusError && s.Error.Code == CodeOwnerLost
		})
		// The reaper forgets the gateway's set after ending its sessions:
		// wait for that too rather than read it the moment the record changed.
		waitUntil(t, "the reaper to forget the lost gateway's sessions", func() bool {
			return rdb.SCard(context.Background(), prefix+"p:owned:"+a.owner).Val() == 0
		})
	})

	t.Run("a lost session keeps no call inputs or answers", func(t *testing.T) {
		// The inputs of its calls and the caller's answers (a script's
		// secrets, as a finished record: TestFinishedSessionKeepsNoAnswers)
		// do not outlive the run: the record, the calls' states and the
		// closed mark answer everything after the loss.
		a, aSrv := newTestBroker(t, onRedis(rdb, prefix+"l:", ownerTimeout))
		newTestBroker(t, onRedis(rdb, prefix+"l:", ownerTimeout)) // a live gateway, whose reaper runs
		s := startExecute(t, aSrv.URL, map[string]any{"timeout": 30000, "code": `
const key = await callTool("client:prompt", {question: "input-secret-1"});
return await callTool("client:prompt", {question: "input-secret-2 " + key});`}, nil)
		var sess Session
		s.next().decode(t, &sess)
		var call ToolCallPayload
		s.next().decode(t, &call)
		if code, _, body := do(t, http.MethodPost, aSrv.URL+"/sessions/"+sess.ID+"/tool-result", map[string]any{"callId": call.CallID, "result": "answer-secret"}, nil); code != http.StatusOK {
			t.Fatalf("answer: %d %s", code, body)
		}
		for ev := s.next(); ev.Type != EventToolCall; ev = s.next() {
		}
		calls := prefix + "l:calls:" + sess.ID
		bodies := func() []string {
			var out []string
			for k, v := range rdb.HGetAll(context.Background(), calls).Val() {
				if !strings.HasPrefix(k, "c:") && k != "closed" {
					out = append(out, k+"="+v)
				}
			}
			return out
		}
		if len(bodies()) == 0 {
			t.Fatal("the running session's calls hash holds no input: the check below would prove nothing")
		}
		crash(a)
		waitUntil(t, "the reaper to end the session", func() bool {
			var got Session
			raw, _ := rdb.Get(context.Background(), prefix+"l:session:"+sess.ID).Bytes()
			return json.Unmarshal(raw, &got) == nil && got.Status == StatusError && got.Error.Code == CodeOwnerLost
		})
		if b := bodies(); len(b) != 0 {
			t.Errorf("the lost session's calls hash keeps %v", b)
		}
		if rdb.HExists(context.Background(), calls, "closed").Val() != true {
			t.Error("the lost session's calls are not closed")
		}
	})

	t.Run("a finished session is never changed", func(t *testing.T) {
		a, aSrv := newTestBroker(t, onRedis(rdb, prefix+"f:", ownerTimeout))
		_, bSrv := newTestBroker(t, onRedis(rdb, prefix+"f:", ownerTimeout))
		s := startExecute(t, aSrv.URL, map[string]any{"code": "return 7"}, nil)
		var sess Session
		s.next().decode(t, &sess)
		s.rest()
		crash(a)
		waitUntil(t, "A's liveness to lapse", func() bool { return rdb.Exists(context.Background(), prefix+"f:owner:"+a.owner).Val() == 0 })
		_, _, body := do(t, http.MethodGet, bSrv.URL+"/sessions/"+sess.ID, nil, nil)
		var got Session
		json.Unmarshal(body, &got)
		if got.Status != StatusCompleted || string(got.Result) != "7" {
			t.Fatalf("completed session after its gateway stopped: %s", body)
		}
	})
}

// TestRedisRestartMidSession restarts a real redis-server (no persistence)
// while a session waits for its caller: the gateway running it writes it
// back, and the answer posted to the other gateway completes it.
func TestRedisRestartMidSession(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	prefix := redistest.Prefix(t)
	a, aSrv := newTestBroker(t, onRedis(rdb, prefix, 300*time.Millisecond))
	_, bSrv := newTestBroker(t, onRedis(rdb, prefix, 300*time.Millisecond))
	a.answerPoll = 50 * time.Millisecond
	s, id, callID := promptSession(t, aSrv.URL, 20000)

	srv.Restart() // empty: no persistence
	waitUntil(t, "the running session to be written back", func() bool {
		code, _, body := do(t, http.MethodGet, bSrv.URL+"/sessions/"+id, nil, nil)
		return code == 200 && contains(body, `"status":"running"`)
	})
	code, _, body := do(t, http.MethodPost, bSrv.URL+"/sessions/"+id+"/tool-result", map[string]any{"callId": callID, "result": "Ada"}, nil)
	if code != 200 {
		t.Fatalf("answer after the restart: %d %s", code, body)
	}
	expectResult(t, s, `"got Ada"`)
}

// TestStorageFailureModes stops the redis-server: requests that need it
// fail fast with 503 STORAGE_UNAVAILABLE (bounded by the storage timeout)
// in mode closed; in mode open /execute still runs sessions on the
// gateway, whose records appear once Redis is back.
func TestStorageFailureModes(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	prefix := redistest.Prefix(t)
	core, logs := observer.New(zap.ErrorLevel)
	closed, cSrv := newTestBroker(t, func(o *BrokerOptions) {
		onRedis(rdb, prefix, 300*time.Millisecond)(o)
		o.StorageTimeout = 500 * time.Millisecond
		o.Logger = zap.New(core)
	})
	open, oSrv := newTestBroker(t, func(o *BrokerOptions) {
		onRedis(rdb, prefix, 300*time.Millisecond)(o)
		o.StorageTimeout = 500 * time.Millisecond
		o.StorageFailureMode = StorageFailOpen
	})
	srv.Stop()

	started := time.Now()
	code, hdr, body := do(t, http.MethodPost, cSrv.URL+"/execute", map[string]any{"code": "return 1"}, nil)
	if code != http.StatusServiceUnavailable || errorCode(t, body) != CodeStorageUnavailable || hdr.Get("Retry-After") == "" {
		t.Fatalf("closed, /execute without Redis: %d %s", code, body)
	}
	// The 5xx names its request; the log has it with the cause.
	rid := hdr.Get("X-Request-Id")
	if rid == "" || !contains(body, `"requestId":"`+rid+`"`) {
		t.Fatalf("5xx without its request id: %q %s", rid, body)
	}
	found := false
	for _, e := range logs.FilterMessage("broker request failed").All() {
		if e.ContextMap()["request_id"] == rid && strings.Contains(fmt.Sprint(e.ContextMap()["error"]), "creating session") {
			found = true
		}
	}
	if !found {
		t.Fatalf("no log line for request %s: %v", rid, logs.All())
	}
	code, _, body = do(t, http.MethodGet, cSrv.URL+"/sessions/abc", nil, nil)
	if code != http.StatusServiceUnavailable || errorCode(t, body) != CodeStorageUnavailable {
		t.Fatalf("closed, GET without Redis: %d %s", code, body)
	}
	if d := time.Since(started); d > 20*time.Second {
		t.Errorf("requests without Redis took %s", d) // a backstop; the bound is the storage timeout
	}
	waitUntil(t, "the closed gateway to report its storage down", func() bool {
		ok, _, _ := closed.StorageStatus()
		return !ok
	})
	// /health: degraded with the reason; 503 where no session can start.
	code, _, body = do(t, http.MethodGet, cSrv.URL+"/health", nil, nil)
	var hr HealthResponse
	json.Unmarshal(body, &hr)
	if code != http.StatusServiceUnavailable || hr.Status != "degraded" || hr.Storage.Status != "unavailable" || len(hr.Reasons) == 0 {
		t.Fatalf("closed, /health without Redis: %d %s", code, body)
	}
	code, _, body = do(t, http.MethodGet, oSrv.URL+"/health", nil, nil)
	if code != http.StatusOK || !contains(body, `"status":"degraded"`) || !contains(body, "session store unavailable") {
		t.Fatalf("open, /health without Redis: %d %s", code, body)
	}

	s := startExecute(t, oSrv.URL, map[string]any{"code": "return 2"}, nil)
	var sess Session
	s.next().decode(t, &sess)
	evs := s.rest()
	if evs[len(evs)-1].Type != EventResult {
		t.Fatalf("open, /execute without Redis: %s", types(evs))
	}
	srv.Restart()
	waitUntil(t, "the open gateway's session record to be written", func() bool {
		code, _, body := do(t, http.MethodGet, cSrv.URL+"/sessions/"+sess.ID, nil, nil)
		return code == 200 && contains(body, `"status":"completed"`)
	})
	waitUntil(t, "both gateways to report their storage up", func() bool {
		a, _, _ := closed.StorageStatus()
		b, _, _ := open.StorageStatus()
		return a && b
	})
	// /health pings the store itself; go-redis's dial breaker may still
	// answer one ping with the last dial error for up to a second after a
	// status check got through, so recovery is waited for, not sampled.
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, _, body := do(t, http.MethodGet, cSrv.URL+"/health", nil, nil)
		if code == 200 && contains(body, `"status":"ok"`) && contains(body, `"kind":"redis"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/health after Redis is back: %d %s", code, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestHealthCatalogAndWorkers: a catalog source that fails to load and a
// sandbox that reports a problem make /health degraded, each with its
// reason, and still 200.
func TestHealthCatalogAndWorkers(t *testing.T) {
	cat, err := catalog.New([]catalog.Source{{Name: "gone", SpecURL: "http://127.0.0.1:1/openapi.json"}}, &catalog.Options{PollInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	cat.Start(context.Background()) // fails: nothing listens on port 1
	t.Cleanup(cat.Close)
	_, srv := newTestBroker(t, func(o *BrokerOptions) {
		o.Catalog = cat
		o.Engine = sickEngine{o.Engine}
	})
	code, _, body := do(t, http.MethodGet, srv.URL+"/health", nil, nil)
	var hr HealthResponse
	json.Unmarshal(body, &hr)
	if code != 200 || hr.Status != "degraded" || len(hr.Reasons) != 2 ||
		!strings.HasPrefix(hr.Reasons[0], "sandbox: no worker") || !strings.HasPrefix(hr.Reasons[1], "catalog source gone: ") ||
		hr.Workers == nil || len(hr.Catalog) != 1 || hr.Storage.Kind != "memory" {
		t.Fatalf("/health: %d %s", code, body)
	}
	// Anyone may read /health: its texts name no address (the source's URL
	// and its dial error's host:port were there for any caller to read).
	if contains(body, "127.0.0.1") || !contains(body, "[url]") && !contains(body, "[host]") {
		t.Errorf("/health shows an address: %s", body)
	}
}

// sickEngine is an engine that reports a problem.
type sickEngine struct{ sandbox.Engine }

func (sickEngine) Health() sandbox.EngineHealth {
	return sandbox.EngineHealth{Kind: "workers", Problems: []string{"no worker can start"}}
}

// TestRestoredSessionKeepsAbandonedCalls: a running session whose store
// lost its keys (Redis restarted empty, or evicted them) is written back by
// its gateway with its abandoned calls as well as its waiting ones: a late
// answer to a call that stopped waiting is still 409 CALL_ABANDONED on the
// other gateway, not 404 as for an id never issued, and the waiting call
// is answered there as usual. Only the waiting calls were written back.
func TestRestoredSessionKeepsAbandonedCalls(t *testing.T) {
	rdb, prefix := redistest.Client(t)
	quickTool := withQuickTool(t, 200)
	a, aSrv := newTestBroker(t, func(o *BrokerOptions) {
		onRedis(rdb, prefix, 300*time.Millisecond)(o)
		quickTool(o)
	})
	_, bSrv := newTestBroker(t, onRedis(rdb, prefix, 300*time.Millisecond))
	a.answerPoll = 50 * time.Millisecond
	s, sess, quick, prompt := quickThenPrompt(t, aSrv.URL)

	ctx := context.Background()
	if err := rdb.Del(ctx, prefix+"session:"+sess.ID, prefix+"calls:"+sess.ID, prefix+"owner:"+a.owner).Err(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the running session to be written back", func() bool {
		code, _, body := do(t, http.MethodGet, bSrv.URL+"/sessions/"+sess.ID, nil, nil)
		return code == http.StatusOK && contains(body, `"status":"running"`)
	})
	answerQuickThenPrompt(t, bSrv.URL+"/sessions/"+sess.ID+"/tool-result", quick, prompt, "after the restore")
	expectResult(t, s, `["EXECUTION_TIMEOUT","y"]`)
}

// TestRestoreAbandonedCalls: the stores' restore writes an abandoned call
// as abandonCall leaves one (an answer is errCallAbandoned), whether the store
// lost the call or still holds it pending, and keeps one it holds as
// answered so (a second answer is errCallAnswered), memory and Redis. An
// answered call the store lost is written answered (it was not written,
// and one more answer was errCallUnknown, 404).
func TestRestoreAbandonedCalls(t *testing.T) {
	ctx := context.Background()
	for _, name := range []string{"memory", "redis"} {
		t.Run(name, func(t *testing.T) {
			var st store = newMemoryStore(time.Now, func(*toolAnswer) {}, 1<<20)
			if name == "redis" {
				rdb, prefix := redistest.Client(t)
				rs, err := newRedisStore(ctx, rdb, prefix, "a", time.Minute, 5*time.Second, 1<<20, time.Now, func(*toolAnswer) {}, zap.NewNop())
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = rs.close() })
				st = rs
			}
			s := &Session{ID: "s1", Owner: "a", Status: StatusRunning, ExpiresAt: time.Now().Add(time.Minute).UnixMilli()}
			if err := st.put(ctx, s); err != nil {
				t.Fatal(err)
			}
			for _, id := range []string{"2", "3"} {
				if err := st.addCall(ctx, s, PendingCall{CallID: id, Tool: "client:prompt"}); err != nil {
					t.Fatal(err)
				}
			}
			if err := st.resolveCall(ctx, &toolAnswer{SessionID: s.ID, CallID: "3", Result: json.RawMessage("1")}); err != nil {
				t.Fatal(err)
			}
			// "1" is lost, "2" still pending in the store, "3" answered; "4"
			// waits; "6", answered, is lost.
			if err := st.restore(ctx, s, runCalls{pending: []PendingCall{{CallID: "4", Tool: "client:prompt"}}, abandoned: []string{"1", "2", "3"}, answered: []string{"6"}}); err != nil {
				t.Fatal(err)
			}
			for id, want := range map[string]error{"1": errCallAbandoned, "2": errCallAbandoned, "3": errCallAnswered, "4": nil, "5": errCallUnknown, "6": errCallAnswered} {
				if err := st.resolveCall(ctx, &toolAnswer{SessionID: s.ID, CallID: id, Result: json.RawMessage("1")}); !errors.Is(err, want) {
					t.Errorf("answer to call %s after the restore: %v, want %v", id, err, want)
				}
			}
			if calls, err := st.pendingCalls(ctx, s.ID); err != nil || len(calls) != 0 {
				t.Errorf("pending calls after the restore and the answer: %v %v", calls, err)
			}
		})
	}
}

// TestHealthSeesRefusedWrites: a Redis that answers PING but refuses every
// write (past its maxmemory with noeviction; a replica after a failover)
// refused each /execute with 503 STORAGE_UNAVAILABLE while /health answered
// 200 "ok", since its check was a PING: neither a load balancer nor an
// operator saw the outage (the built binary, `CONFIG SET maxmemory 1mb`).
// The check is a write now.
func TestHealthSeesRefusedWrites(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	_, hSrv := newTestBroker(t, onRedis(rdb, redistest.Prefix(t), 10*time.Second))
	ctx := context.Background()
	if err := rdb.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	code, _, body := do(t, http.MethodPost, hSrv.URL+"/execute", map[string]any{"code": "return 1"}, nil)
	if code != http.StatusServiceUnavailable || errorCode(t, body) != CodeStorageUnavailable {
		t.Fatalf("/execute on a Redis refusing writes: %d %s", code, body)
	}
	code, _, body = do(t, http.MethodGet, hSrv.URL+"/health", nil, nil)
	if code != http.StatusServiceUnavailable || !contains(body, `"status":"unavailable"`) || !contains(body, "OOM") {
		t.Fatalf("/health on a Redis refusing writes: %d %s", code, body)
	}
	if err := rdb.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	code, _, body = do(t, http.MethodGet, hSrv.URL+"/health", nil, nil)
	if code != http.StatusOK || !contains(body, `"status":"ok"`) {
		t.Fatalf("/health once Redis takes writes again: %d %s", code, body)
	}
}

// TestCallerHangUpIsNoStoreFailure: a request whose caller hung up while
// its store operation ran (its context cancelled) leaves the store's status
// as it was: GET /health, a session read and a tool result made by a
// caller that left were each logged "session store unavailable" (an error)
// and reported so on /health until the next store operation succeeded, so
// anyone could raise that at will by closing requests (a Python client
// closing 17,114 GET /broker/health requests in 20 s: 276 such errors
// logged against a Redis that never failed). A store past its deadline
// still counts.
func TestCallerHangUpIsNoStoreFailure(t *testing.T) {
	rdb, prefix := redistest.Client(t)
	b, _ := newTestBroker(t, onRedis(rdb, prefix, 10*time.Second))
	gone, hangUp := context.WithCancel(context.Background())
	hangUp()
	checks := []struct {
		name string
		run  func() error
	}{
		{"health", func() error {
			if h := b.Health(gone); h.Storage.Status != "ok" {
				return fmt.Errorf("health says %s: %s", h.Storage.Status, h.Storage.Error)
			}
			return nil
		}},
		{"session read", func() error { _, err := b.GetSession(gone, "0123456789abcdef0123456789abcdef"); return err }},
		{"tool result", func() error {
			return b.SubmitToolResult(gone, "0123456789abcdef0123456789abcdef", ToolResult{CallID: "1", Result: json.RawMessage(`1`)})
		}},
		{"execute", func() error { _, err := b.Start(gone, "return 1", ExecuteOptions{}); return err }},
	}
	for _, c := range checks {
		b.storageOK() // each check on its own
		err := c.run()
		if ok, serr, _ := b.StorageStatus(); !ok {
			t.Errorf("%s by a caller that left (%v): the store is reported unavailable: %v", c.name, err, serr)
		}
	}
	// A store that does not answer before the deadline is a failure still.
	late, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	if h := b.Health(late); h.Storage.Status != "unavailable" {
		t.Fatalf("a ping past its deadline: health says %s", h.Storage.Status)
	}
}
