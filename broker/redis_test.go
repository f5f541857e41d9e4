package broker

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/codemode-gateway/caddy-codemode/guard/redistest"
	"github.com/redis/go-redis/v9"
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

// finishedIndex reads the Redis store's finished index: its ids oldest
// first, the stored total and the sum of the stored sizes.
func finishedIndex(t *testing.T, rdb *redis.Client, prefix string) (ids []string, total, sum int64) {
	t.Helper()
	ctx := context.Background()
	ids = rdb.ZRange(ctx, prefix+"finished", 0, -1).Val()
	for k, v := range rdb.HGetAll(ctx, prefix+"finished:size").Val() {
		n, _ := strconv.ParseInt(v, 10, 64)
		if k == "total" {
			total = n
		} else {
			sum += n
		}
	}
	for _, k := range []string{"finished", "finished:exp", "finished:size"} {
		if ttl := rdb.PTTL(ctx, prefix+k).Val(); ttl <= 0 {
			t.Errorf("%s: PTTL %v, want an expiry", k, ttl)
		}
	}
	return ids, total, sum
}

// TestRedisFinishedSessionsBounded: two gateways on one Redis prefix keep
// at most MaxFinishedBytes of finished results between them; past it the
// oldest records go, whichever gateway ran them, and read as expired ones
// (404 as for an unknown id, their keys gone). Without the bound one caller
// returning 1 MB strings filled the shared Redis until the results expired.
func TestRedisFinishedSessionsBounded(t *testing.T) {
	rdb, prefix := redistest.Client(t)
	shared := func(o *BrokerOptions) {
		o.Engine, o.Redis, o.KeyPrefix, o.MaxFinishedBytes = bigResultEngine(), rdb, prefix, 3<<20
	}
	_, a := newTestBroker(t, shared)
	_, b := newTestBroker(t, shared)
	gws := []string{a.URL, b.URL}
	var ids []string
	for i := range 6 {
		code, hdr, body := do(t, http.MethodPost, gws[i%2]+"/execute", map[string]any{"code": fmt.Sprintf(`return "x".repeat(1000000) + %d`, i)}, nil)
		if code != 200 || !strings.Contains(string(body), `"type":"result"`) {
			t.Fatalf("script %d: %d %.200s", i, code, body)
		}
		ids = append(ids, hdr.Get("X-Session-Id"))
	}
	unknownCode, _, unknown := do(t, http.MethodGet, a.URL+"/sessions/"+newID(), nil, nil)
	ctx := context.Background()
	for i, id := range ids {
		gw := gws[(i+1)%2] // read through the gateway that did not run it
		code, _, body := do(t, http.MethodGet, gw+"/sessions/"+id, nil, nil)
		if i >= len(ids)-3 { // 3 MiB holds three results of 1 MB, not four
			if code != 200 || !strings.Contains(string(body), fmt.Sprintf(`x%d"`, i)) {
				t.Errorf("session %d of %d: %d %.100s, want its result", i, len(ids), code, body)
			}
			continue
		}
		if code != unknownCode || errorCode(t, body) != errorCode(t, unknown) {
			t.Errorf("session %d of %d: %d %s, want %d %s as for an expired session", i, len(ids), code, body, unknownCode, unknown)
		}
		code, _, body = do(t, http.MethodPost, gw+"/sessions/"+id+"/tool-result", map[string]any{"callId": "1", "result": 1}, nil)
		if code != 404 || errorCode(t, body) != errorCode(t, unknown) {
			t.Errorf("answer to trimmed session %d: %d %s", i, code, body)
		}
		if n := rdb.Exists(ctx, prefix+"session:"+id, prefix+"calls:"+id).Val(); n != 0 {
			t.Errorf("session %d: %d keys left", i, n)
		}
	}
	kept, total, sum := finishedIndex(t, rdb, prefix)
	if len(kept) != 3 || kept[0] != ids[3] || kept[2] != ids[5] || total != sum || total > 3<<20 {
		t.Errorf("index %v (want %v), total %d, sizes %d", kept, ids[3:], total, sum)
	}
}

// TestRedisFinishedIndexHeals: records gone from Redis without the index
// (expired by Redis, deleted by a reader's clock, lost in a restart) leave
// it at a later finish instead of counting against the bound, which made a
// live record trimmed in their place; and a total made wrong from outside
// (an evicted or edited key) is rebuilt once its records expire.
//
// The records expire by the fake clock only: the gateway gives Redis a TTL
// of ExpiresAt minus its (frozen) clock, the session timeout, which Redis
// counts in real time. With a timeout of a minute, a run slower than that
// (its 1 MB scripts under -race on a loaded machine) found session 0
// expired by Redis and failed, as a 4 s timeout does at load 16 every
// time; an hour is far beyond any run.
func TestRedisFinishedIndexHeals(t *testing.T) {
	const timeout = time.Hour
	rdb, prefix := redistest.Client(t)
	ctx := context.Background()
	t.Cleanup(func() { // after the broker's close: the records live an hour
		if keys := rdb.Keys(ctx, prefix+"*").Val(); len(keys) > 0 {
			rdb.Del(ctx, keys...)
		}
	})
	clock := &fakeClock{t: time.Now()}
	_, srv := newTestBroker(t, func(o *BrokerOptions) {
		o.Engine, o.Redis, o.KeyPrefix, o.MaxFinishedBytes, o.Now, o.SessionTimeout = bigResultEngine(), rdb, prefix, 3<<20, clock.Now, timeout
	})
	run := func(i int) string {
		code, hdr, body := do(t, http.MethodPost, srv.URL+"/execute", map[string]any{"code": fmt.Sprintf(`return "x".repeat(1000000) + %d`, i)}, nil)
		if code != 200 {
			t.Fatalf("script %d: %d %.200s", i, code, body)
		}
		return hdr.Get("X-Session-Id")
	}
	ids := []string{run(0), run(1), run(2)}
	// The records of sessions 1 and 2 vanish, the index still counts them.
	rdb.Del(ctx, prefix+"session:"+ids[1], prefix+"session:"+ids[2])
	ids = append(ids, run(3))
	if code, _, body := do(t, http.MethodGet, srv.URL+"/sessions/"+ids[0], nil, nil); code != 200 || !contains(body, `x0"`) {
		t.Errorf("live session 0 trimmed for records already gone: %d %.100s", code, body)
	}
	kept, total, sum := finishedIndex(t, rdb, prefix)
	if len(kept) != 2 || kept[0] != ids[0] || kept[1] != ids[3] || total != sum || total != 2*1000003 {
		t.Errorf("index %v, total %d, sizes %d; want [%s %s], 2000006", kept, total, sum, ids[0], ids[3])
	}

	// A total wrong by 1 GiB heals once the records it counts expired.
	rdb.HIncrBy(ctx, prefix+"finished:size", "total", 1<<30)
	clock.Add(timeout)
	last := run(4)
	kept, total, sum = finishedIndex(t, rdb, prefix)
	if len(kept) != 1 || kept[0] != last || total != sum || total != 1000003 {
		t.Errorf("after expiry: index %v, total %d, sizes %d; want [%s], 1000003", kept, total, sum, last)
	}
}
