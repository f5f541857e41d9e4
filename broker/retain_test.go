package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/codemode-gateway/caddy-codemode/guard/redistest"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// TestFinishedSessionKeepsNoAnswers: a finished session keeps its record
// (result, logs, error: what max_finished_size counts) and, of its
// caller-answered calls, only what a late answer needs, not their inputs
// nor the caller's answers. In Redis the calls hash kept every answer and
// input until it expired, finished sessions included, uncounted: 4 answers
// of 200 KB and inputs of 20 KB made a finished session whose counted
// size is 1 byte hold 880 KB, past a bound of 64 KiB. A late answer stays
// 409 SESSION_FINISHED and GET of the session returns its result.
func TestFinishedSessionKeepsNoAnswers(t *testing.T) {
	const calls, inputSize, answerSize, bound = 4, 20_000, 200_000, 64 << 10
	for _, store := range []string{"memory", "redis"} {
		t.Run(store, func(t *testing.T) {
			var rdb redis.UniversalClient
			var prefix string
			b, srv := newTestBroker(t, func(o *BrokerOptions) {
				useStore(t, o, store)
				rdb, prefix, o.MaxFinishedBytes = o.Redis, o.KeyPrefix, bound
			})
			s := startExecute(t, srv.URL, map[string]any{"code": fmt.Sprintf(`
let n = 0;
for (let i = 0; i < %d; i++) n += (await callTool("client:prompt", {question: "q".repeat(%d)})).length;
return n === %d ? 1 : n;`, calls, inputSize, calls*answerSize)}, nil)
			var sess Session
			s.next().decode(t, &sess)
			url := srv.URL + "/sessions/" + sess.ID + "/tool-result"
			answer := strings.Repeat("a", answerSize)
			var ids []string
			for range calls {
				var call ToolCallPayload
				if ev := s.next(); ev.Type != EventToolCall {
					t.Fatalf("event %s %.200s, want a tool call", ev.Type, ev.Payload)
				} else {
					ev.decode(t, &call)
				}
				if code, _, body := do(t, http.MethodPost, url, map[string]any{"callId": call.CallID, "result": answer}, nil); code != http.StatusOK {
					t.Fatalf("answer to call %s: %d %s", call.CallID, code, body)
				}
				ids = append(ids, call.CallID)
				if ev := s.next(); ev.Type != EventToolResult {
					t.Fatalf("event %s %.200s, want the tool result", ev.Type, ev.Payload)
				}
			}
			var res ResultPayload
			if evs := s.rest(); len(evs) == 0 || evs[len(evs)-1].Type != EventResult {
				t.Fatalf("final events %s", types(evs))
			} else {
				evs[len(evs)-1].decode(t, &res)
			}
			if string(res.Result) != "1" {
				t.Fatalf("result %s, want 1 (every answer reached the script)", res.Result)
			}

			// What the store keeps of the finished session.
			if store == "redis" {
				ctx := context.Background()
				h, err := rdb.HGetAll(ctx, prefix+"calls:"+sess.ID).Result()
				if err != nil {
					t.Fatal(err)
				}
				kept := 0
				for k, v := range h {
					kept += len(k) + len(v)
					if !strings.HasPrefix(k, "c:") && k != "closed" {
						t.Errorf("finished session's calls hash keeps %s (%d bytes)", k, len(v))
					}
				}
				rec := rdb.StrLen(ctx, prefix+"session:"+sess.ID).Val()
				t.Logf("finished session: calls hash MEMORY USAGE %d bytes, %d fields; record %d bytes",
					rdb.MemoryUsage(ctx, prefix+"calls:"+sess.ID).Val(), len(h), rec)
				if kept+int(rec) > bound {
					t.Errorf("finished session keeps %d bytes of calls and a %d-byte record, past max_finished_size %d", kept, rec, bound)
				}
				for _, id := range ids {
					if h["c:"+id] != "answered" {
						t.Errorf("call %s kept as %q, want answered", id, h["c:"+id])
					}
				}
				if ttl := rdb.PTTL(ctx, prefix+"calls:"+sess.ID).Val(); ttl <= 0 {
					t.Errorf("calls hash TTL %v", ttl)
				}
			} else {
				m := b.store.(*memoryStore)
				m.mu.Lock()
				e := m.sessions[sess.ID]
				if e == nil || !e.closed || len(e.calls) != 0 {
					t.Errorf("finished session in memory: %+v", e)
				}
				m.mu.Unlock()
			}

			// What a finished session must still answer.
			for _, id := range append(ids, "99") {
				code, _, body := do(t, http.MethodPost, url, map[string]any{"callId": id, "result": 1}, nil)
				if code != http.StatusConflict || errorCode(t, body) != CodeSessionFinished {
					t.Errorf("late answer to call %s: %d %s", id, code, body)
				}
			}
			code, _, body := do(t, http.MethodGet, srv.URL+"/sessions/"+sess.ID, nil, nil)
			if code != http.StatusOK || !contains(body, `"status":"completed"`) || !contains(body, `"result":1`) || !contains(body, fmt.Sprintf(`"toolCalls":%d`, calls)) {
				t.Errorf("GET of the finished session: %d %.300s", code, body)
			}
		})
	}
}

// TestRedisFinishPrunesManyCalls: the final write drops the inputs and
// answers of more calls than one HDEL takes (500 fields), answered, waiting
// and abandoned alike, and keeps every call's state.
func TestRedisFinishPrunesManyCalls(t *testing.T) {
	const n = 700
	rdb, prefix := redistest.Client(t)
	ctx := context.Background()
	rs, err := newRedisStore(ctx, rdb, prefix, "a", time.Minute, 5*time.Second, 1<<20, time.Now, func(*toolAnswer) {}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rs.close() }()
	now := time.Now().UnixMilli()
	s := &Session{ID: newID(), Status: StatusRunning, CreatedAt: now, UpdatedAt: now, ExpiresAt: now + time.Minute.Milliseconds(), Owner: "a"}
	if err := rs.put(ctx, s); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for i := 1; i <= n; i++ {
		id := strconv.Itoa(i)
		if err := rs.addCall(ctx, s, PendingCall{CallID: id, Tool: "client:prompt", Input: json.RawMessage(`"question"`)}); err != nil {
			t.Fatal(err)
		}
		want["c:"+id] = "pending"
		switch i % 3 {
		case 0:
			if err := rs.resolveCall(ctx, &toolAnswer{SessionID: s.ID, CallID: id, Result: json.RawMessage(`"answer"`)}); err != nil {
				t.Fatal(err)
			}
			want["c:"+id] = "answered"
		case 1:
			if _, err := rs.abandonCall(ctx, s.ID, id); err != nil {
				t.Fatal(err)
			}
			want["c:"+id] = "abandoned"
		}
	}
	if err := rs.closeCalls(ctx, s); err != nil {
		t.Fatal(err)
	}
	want["closed"] = "1"
	fin := s.clone()
	fin.Status, fin.Result = StatusCompleted, json.RawMessage("1")
	if err := rs.put(ctx, fin); err != nil {
		t.Fatal(err)
	}
	h, err := rdb.HGetAll(ctx, rs.callsKey(s.ID)).Result()
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(h, want) {
		extra := 0
		for k := range h {
			if _, ok := want[k]; !ok {
				extra++
			}
		}
		t.Errorf("finished session's calls hash: %d fields, %d not states (want %d states and closed)", len(h), extra, n)
	}
}
