package broker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/codemode-gateway/caddy-codemode/guard/redistest"
)

// TestRedisErrorsCountOnlyFailures: the refusals the Redis store answers
// with (a tool result for a session whose gateway is gone, 409 OWNER_LOST;
// a write of a session the store already holds as ended) are not counted
// in redis_errors_total: Redis answered. Both were counted, so an alert on
// Redis errors fired on a caller answering a lost session.
func TestRedisErrorsCountOnlyFailures(t *testing.T) {
	rdb, prefix := redistest.Client(t)
	ctx := context.Background()
	open := func(self string) countedRedisStore {
		rs, err := newRedisStore(ctx, rdb, prefix, self, time.Minute, 5*time.Second, 0, time.Now, func(*toolAnswer) {}, zap.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rs.close() })
		return countedRedisStore{rs, NewMetrics()}
	}
	a, b := open("a"), open("b")
	// As a gateway that has reached the store for an owner timeout.
	b.judgeAfter.Store(0)
	s := &Session{ID: "s1", Owner: "a", Status: StatusRunning, ExpiresAt: time.Now().Add(time.Minute).UnixMilli()}
	if err := a.put(ctx, s); err != nil {
		t.Fatal(err)
	}
	if err := a.addCall(ctx, s, PendingCall{CallID: "1"}); err != nil {
		t.Fatal(err)
	}
	// Gateway a stops heartbeating: its liveness lapses.
	if err := rdb.Del(ctx, a.ownerKey("a")).Err(); err != nil {
		t.Fatal(err)
	}
	if err := b.resolveCall(ctx, &toolAnswer{SessionID: s.ID, CallID: "1"}); !errors.Is(err, errOwnerLost) {
		t.Fatalf("answer to a lost session: %v", err)
	}
	if err := a.put(ctx, s); !errors.Is(err, errSessionEnded) {
		t.Fatalf("write of a session ended in the store: %v", err)
	}
	for _, c := range []countedRedisStore{a, b} {
		for _, op := range redisOperations {
			if v := testutil.ToFloat64(c.m.redisErrors.WithLabelValues(op)); v != 0 {
				t.Errorf("gateway %s: redis errors of %s: %v", c.self, op, v)
			}
		}
	}
}

// TestRedisErrorsCountRestore: a failed restore of a running session (the
// re-write after Redis lost it) is counted as restore_session; the
// countedRedisStore did not wrap restore, so its failures went uncounted.
// A restore of a session the store holds as ended is an answer, not
// counted.
func TestRedisErrorsCountRestore(t *testing.T) {
	rdb, prefix := redistest.Client(t)
	ctx := context.Background()
	rs, err := newRedisStore(ctx, rdb, prefix, "a", time.Minute, 5*time.Second, 0, time.Now, func(*toolAnswer) {}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.close() })
	c := countedRedisStore{rs, NewMetrics()}
	s := &Session{ID: "s1", Owner: "a", Status: StatusRunning, ExpiresAt: time.Now().Add(time.Minute).UnixMilli()}
	if err := c.restore(ctx, s, runCalls{pending: []PendingCall{{CallID: "1"}}}); err != nil {
		t.Fatal(err)
	}
	ended := *s
	ended.Status = StatusCompleted
	if err := c.put(ctx, &ended); err != nil {
		t.Fatal(err)
	}
	if err := c.restore(ctx, s, runCalls{}); !errors.Is(err, errSessionEnded) {
		t.Fatalf("restore of a session ended in the store: %v", err)
	}
	if v := testutil.ToFloat64(c.m.redisErrors.WithLabelValues("restore_session")); v != 0 {
		t.Fatalf("redis errors of restore_session after a refusal: %v", v)
	}
	// Redis is gone (the client closed): the restore fails and is counted.
	broken := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr})
	_ = broken.Close()
	c.rdb = broken
	if err := c.restore(ctx, &Session{ID: "s2", Owner: "a", Status: StatusRunning, ExpiresAt: s.ExpiresAt}, runCalls{pending: []PendingCall{{CallID: "1"}}}); err == nil {
		t.Fatal("restore with Redis gone: no error")
	}
	if v := testutil.ToFloat64(c.m.redisErrors.WithLabelValues("restore_session")); v != 1 {
		t.Fatalf("redis errors of restore_session: %v, want 1", v)
	}
}
