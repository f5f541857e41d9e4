package broker

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/codemode-gateway/caddy-codemode/guard/redistest"
)

// TestTwoGatewaysOneRedis runs a session on gateway A and answers its tool
// call through gateway B: the result travels A <- Redis pub/sub <- B.
func TestTwoGatewaysOneRedis(t *testing.T) {
	rdb, prefix := redistest.Client(t)
	shared := func(o *BrokerOptions) { o.Redis, o.KeyPrefix = rdb, prefix }
	_, a := newTestBroker(t, shared)
	bBroker, b := newTestBroker(t, shared)

	s := startExecute(t, a.URL, map[string]any{"code": `
const x = await callTool("client:prompt", {question: "x?"});
const y = await callTool("client:prompt", {question: "y?"});
return [x, y];`}, nil)
	var sess Session
	s.next().decode(t, &sess)

	for i, gw := range []string{b.URL, a.URL} { // first answer through B, second through A
		var call ToolCallPayload
		s.next().decode(t, &call)
		// B sees A's running session.
		code, _, body := do(t, http.MethodGet, b.URL+"/sessions/"+sess.ID, nil, nil)
		if code != 200 || !contains(body, `"status":"running"`) {
			t.Fatalf("GET on B: %d %s", code, body)
		}
		url := gw + "/sessions/" + sess.ID + "/tool-result"
		if code, _, body := do(t, http.MethodPost, url, map[string]any{"callId": "unknown", "result": 9}, nil); code != 404 {
			t.Errorf("unknown call: %d %s", code, body)
		}
		if code, _, body := do(t, http.MethodPost, url, map[string]any{"callId": call.CallID, "result": i}, nil); code != 200 {
			t.Fatalf("answer %d: %d %s", i, code, body)
		}
		// The call is answered everywhere: a second answer through the
		// other gateway is a conflict.
		other := a.URL
		if gw == a.URL {
			other = b.URL
		}
		code, _, body = do(t, http.MethodPost, other+"/sessions/"+sess.ID+"/tool-result", map[string]any{"callId": call.CallID, "result": 9}, nil)
		// After the last answer the session may already have finished.
		if c := errorCode(t, body); code != 409 || (c != CodeCallAlreadyAnswered && !(i == 1 && c == CodeSessionFinished)) {
			t.Errorf("second answer %d: %d %s", i, code, body)
		}
		ev := s.next()
		if ev.Type != EventToolResult {
			t.Fatalf("event %s %s", ev.Type, ev.Payload)
		}
	}
	var res ResultPayload
	s.next().decode(t, &res)
	if string(res.Result) != "[0,1]" {
		t.Errorf("result = %s", res.Result)
	}
	got, err := bBroker.GetSession(context.Background(), sess.ID)
	if err != nil || got == nil || got.Status != StatusCompleted || got.ToolCalls != 2 {
		t.Errorf("B sees %+v, %v", got, err)
	}
	code, _, body := do(t, http.MethodPost, b.URL+"/sessions/"+sess.ID+"/tool-result", map[string]any{"callId": "1", "result": 1}, nil)
	if code != 409 || errorCode(t, body) != CodeSessionFinished {
		t.Errorf("answer after finish via B: %d %s", code, body)
	}
}

func TestRedisSessionExpiry(t *testing.T) {
	rdb, prefix := redistest.Client(t)
	clock := &fakeClock{t: time.Now()}
	b, _ := newTestBroker(t, func(o *BrokerOptions) {
		o.Redis, o.KeyPrefix, o.Now, o.SessionTimeout = rdb, prefix, clock.Now, time.Minute
	})
	evs, err := collect(t, b, `return 1`, ExecuteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	id := evs[0].Payload.(*Session).ID
	ctx := context.Background()
	ttl := rdb.PTTL(ctx, prefix+"session:"+id).Val()
	if ttl <= 0 || ttl > time.Minute {
		t.Errorf("session key TTL = %v, want (0, 1m]", ttl)
	}
	if n := rdb.Exists(ctx, prefix+"calls:"+id).Val(); n != 1 {
		t.Errorf("calls key missing")
	}
	clock.Add(time.Minute)
	if s, err := b.GetSession(ctx, id); s != nil || err != nil {
		t.Errorf("expired session: %+v, %v", s, err)
	}
	if n := rdb.Exists(ctx, prefix+"session:"+id, prefix+"calls:"+id).Val(); n != 0 {
		t.Errorf("%d keys of the expired session left in Redis", n)
	}
}

// TestRedisDeepResult: a session whose result nests as deep as the sandbox
// allows (1,000 levels, a record Redis's cjson cannot decode) is finished
// to every later answer, 409 SESSION_FINISHED; it was 503
// STORAGE_UNAVAILABLE, and the store marked failing, for any caller who
// could run a script.
func TestRedisDeepResult(t *testing.T) {
	rdb, prefix := redistest.Client(t)
	b, srv := newTestBroker(t, func(o *BrokerOptions) { o.Redis, o.KeyPrefix = rdb, prefix })
	s := startExecute(t, srv.URL, map[string]any{"code": `
await callTool("client:prompt", {question: "x?"});
let a = 1; for (let i = 0; i < 1000; i++) a = [a];
return a`}, nil)
	var sess Session
	s.next().decode(t, &sess)
	var call ToolCallPayload
	s.next().decode(t, &call)
	url := srv.URL + "/sessions/" + sess.ID + "/tool-result"
	if code, _, body := do(t, http.MethodPost, url, map[string]any{"callId": call.CallID, "result": 1}, nil); code != 200 {
		t.Fatalf("answer: %d %s", code, body)
	}
	s.next() // tool_result
	var res ResultPayload
	s.next().decode(t, &res)
	if !strings.HasPrefix(string(res.Result), strings.Repeat("[", 1000)+"1") {
		t.Fatalf("result %.100s", res.Result)
	}
	code, _, body := do(t, http.MethodPost, url, map[string]any{"callId": call.CallID, "result": 1}, nil)
	if code != 409 || errorCode(t, body) != CodeSessionFinished {
		t.Errorf("answer after the end: %d %s", code, body)
	}
	if ok, err, _ := b.StorageStatus(); !ok {
		t.Errorf("store marked failing: %v", err)
	}
	got, err := b.GetSession(context.Background(), sess.ID)
	if err != nil || got == nil || got.Status != StatusCompleted || !strings.HasPrefix(string(got.Result), strings.Repeat("[", 1000)) {
		t.Errorf("GET: %v %v", got, err)
	}
}

func contains(b []byte, s string) bool { return strings.Contains(string(b), s) }

// TestRedisLostAnswerIsPolled answers a call without the pub/sub message
// reaching the gateway (as when its subscription reconnects): the waiting
// call finds the stored answer by polling.
func TestRedisLostAnswerIsPolled(t *testing.T) {
	rdb, prefix := redistest.Client(t)
	b, srv := newTestBroker(t, func(o *BrokerOptions) { o.Redis, o.KeyPrefix = rdb, prefix })
	b.answerPoll = 10 * time.Millisecond
	s := startExecute(t, srv.URL, map[string]any{"code": `return await callTool("client:prompt", {question: "?"})`}, nil)
	var sess Session
	s.next().decode(t, &sess)
	var call ToolCallPayload
	s.next().decode(t, &call)
	rs := b.store.(*redisStore)
	payload := `{"sessionId":"` + sess.ID + `","callId":"` + call.CallID + `","result":"polled"}`
	n, err := resolveScript.Run(context.Background(), rdb, []string{rs.sessionKey(sess.ID), rs.callsKey(sess.ID)},
		"c:"+call.CallID, payload, prefix+"nobody-listens", prefix+"owner:").Int()
	if err != nil || n != 4 {
		t.Fatalf("resolve: %d, %v", n, err)
	}
	evs := s.rest()
	var res ResultPayload
	evs[len(evs)-1].decode(t, &res)
	if string(res.Result) != `"polled"` {
		t.Errorf("events %s, result %s", types(evs), res.Result)
	}
}
