package broker

import (
	"context"
	"errors"
)

// countedRedisStore is the Redis store with its failed round trips counted
// in Metrics. The refusals the store reports (storeRefusals: an unknown
// session or call, a second answer, an abandoned call, a finished session,
// a lost owner, a session already ended) are answers, not failures.
type countedRedisStore struct {
	*redisStore
	m *Metrics
}

// storeRefusals are the store's answers that are no failure of Redis.
var storeRefusals = []error{errSessionGone, errCallUnknown, errCallAnswered, errCallAbandoned, errCallClosed, errOwnerLost, errSessionEnded}

// failed counts err for op unless it is nil or one of storeRefusals.
func (c countedRedisStore) failed(op string, err error) error {
	for _, r := range storeRefusals {
		if errors.Is(err, r) {
			return err
		}
	}
	return c.m.redisFailed(op, err)
}

func (c countedRedisStore) put(ctx context.Context, s *Session) error {
	return c.failed("put_session", c.redisStore.put(ctx, s))
}

func (c countedRedisStore) get(ctx context.Context, id string) (*Session, error) {
	s, err := c.redisStore.get(ctx, id)
	return s, c.failed("get_session", err)
}

func (c countedRedisStore) addCall(ctx context.Context, s *Session, call PendingCall) error {
	return c.failed("add_call", c.redisStore.addCall(ctx, s, call))
}

func (c countedRedisStore) pendingCalls(ctx context.Context, sessionID string) ([]PendingCall, error) {
	calls, err := c.redisStore.pendingCalls(ctx, sessionID)
	return calls, c.failed("pending_calls", err)
}

func (c countedRedisStore) notify(ctx context.Context, sessionID string) error {
	return c.failed("notify", c.redisStore.notify(ctx, sessionID))
}

func (c countedRedisStore) abandonCall(ctx context.Context, sessionID, callID string) (*toolAnswer, error) {
	a, err := c.redisStore.abandonCall(ctx, sessionID, callID)
	return a, c.failed("drop_call", err)
}

func (c countedRedisStore) closeCalls(ctx context.Context, s *Session) error {
	return c.failed("close_calls", c.redisStore.closeCalls(ctx, s))
}

func (c countedRedisStore) resolveCall(ctx context.Context, a *toolAnswer) error {
	return c.failed("resolve_call", c.redisStore.resolveCall(ctx, a))
}

func (c countedRedisStore) fetchAnswer(ctx context.Context, sessionID, callID string) (*toolAnswer, error) {
	a, err := c.redisStore.fetchAnswer(ctx, sessionID, callID)
	return a, c.failed("fetch_answer", err)
}

func (c countedRedisStore) restore(ctx context.Context, s *Session, calls runCalls) error {
	return c.failed("restore_session", c.redisStore.restore(ctx, s, calls))
}
