package broker

import (
	"context"
	"errors"
)

// countedRedisStore is the Redis store with its failed round trips counted
// in Metrics. The refusals the store reports (resolveCall: unknown session
// or call, a second answer, an abandoned call, a finished session, a lost
// owner; put: a session already ended) are answers, not failures.
type countedRedisStore struct {
	*redisStore
	m *Metrics
}

func (c countedRedisStore) put(ctx context.Context, s *Session) error {
	err := c.redisStore.put(ctx, s)
	if errors.Is(err, errSessionEnded) {
		return err
	}
	return c.m.redisFailed("put_session", err)
}

func (c countedRedisStore) get(ctx context.Context, id string) (*Session, error) {
	s, err := c.redisStore.get(ctx, id)
	return s, c.m.redisFailed("get_session", err)
}

func (c countedRedisStore) addCall(ctx context.Context, s *Session, call PendingCall) error {
	return c.m.redisFailed("add_call", c.redisStore.addCall(ctx, s, call))
}

func (c countedRedisStore) pendingCalls(ctx context.Context, sessionID string) ([]PendingCall, error) {
	calls, err := c.redisStore.pendingCalls(ctx, sessionID)
	return calls, c.m.redisFailed("pending_calls", err)
}

func (c countedRedisStore) notify(ctx context.Context, sessionID string) error {
	return c.m.redisFailed("notify", c.redisStore.notify(ctx, sessionID))
}

func (c countedRedisStore) dropCall(ctx context.Context, sessionID, callID string) error {
	return c.m.redisFailed("drop_call", c.redisStore.dropCall(ctx, sessionID, callID))
}

func (c countedRedisStore) closeCalls(ctx context.Context, s *Session) error {
	return c.m.redisFailed("close_calls", c.redisStore.closeCalls(ctx, s))
}

func (c countedRedisStore) resolveCall(ctx context.Context, a *toolAnswer) error {
	err := c.redisStore.resolveCall(ctx, a)
	switch {
	case err == nil, errors.Is(err, errSessionGone), errors.Is(err, errCallUnknown),
		errors.Is(err, errCallAnswered), errors.Is(err, errCallAbandoned), errors.Is(err, errCallClosed),
		errors.Is(err, errOwnerLost):
		return err
	}
	return c.m.redisFailed("resolve_call", err)
}

func (c countedRedisStore) fetchAnswer(ctx context.Context, sessionID, callID string) (*toolAnswer, error) {
	a, err := c.redisStore.fetchAnswer(ctx, sessionID, callID)
	return a, c.m.redisFailed("fetch_answer", err)
}
