package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// redisStore keeps sessions in Redis so that every broker sharing the
// server and key prefix sees them. Keys:
//
//	{prefix}session:{id}  JSON of the Session, expiring at ExpiresAt
//	{prefix}calls:{id}    hash: "c:{callId}" -> pending|answered, "ac:{callId}" -> the
//	                      answer, "i:{callId}" -> {tool, input}, "closed" once finished
//	{prefix}answers       pub/sub channel carrying caller-supplied results and
//	                      change notices of sessions followed with Await
//
// A result posted to any broker is checked, marked answered and stored by
// one Lua script, which also publishes it; the broker running the session
// picks it up from its subscription, or, should the message be lost while
// its subscription reconnects, by polling the stored answer.
type redisStore struct {
	rdb     redis.UniversalClient
	prefix  string
	now     func() time.Time
	deliver func(*toolAnswer)
	logger  *zap.Logger

	ps   *redis.PubSub
	done chan struct{}
	once sync.Once
}

var resolveScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if redis.call('HEXISTS', KEYS[2], 'closed') == 1 then return 3 end
local st = redis.call('HGET', KEYS[2], ARGV[1])
if not st then return 1 end
if st ~= 'pending' then return 2 end
redis.call('HSET', KEYS[2], ARGV[1], 'answered', 'a' .. ARGV[1], ARGV[2])
redis.call('PUBLISH', ARGV[3], ARGV[2])
return 4
`)

var dropScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], ARGV[1]) == 'pending' then redis.call('HDEL', KEYS[1], ARGV[1]) end
return 0
`)

func newRedisStore(ctx context.Context, rdb redis.UniversalClient, prefix string, now func() time.Time, deliver func(*toolAnswer), logger *zap.Logger) (*redisStore, error) {
	r := &redisStore{rdb: rdb, prefix: prefix, now: now, deliver: deliver, logger: logger, done: make(chan struct{})}
	r.ps = rdb.Subscribe(ctx, r.channel())
	// Wait for the subscription so no answer published after New returns is missed.
	if _, err := r.ps.Receive(ctx); err != nil {
		_ = r.ps.Close()
		return nil, fmt.Errorf("subscribing to %s: %w", r.channel(), err)
	}
	go r.listen()
	return r, nil
}

func (r *redisStore) sessionKey(id string) string { return r.prefix + "session:" + id }
func (r *redisStore) callsKey(id string) string   { return r.prefix + "calls:" + id }
func (r *redisStore) channel() string             { return r.prefix + "answers" }

func (r *redisStore) ttl(s *Session) time.Duration {
	d := time.Duration(s.ExpiresAt-r.now().UnixMilli()) * time.Millisecond
	if d < time.Millisecond {
		d = time.Millisecond
	}
	return d
}

func (r *redisStore) listen() {
	defer close(r.done)
	for msg := range r.ps.Channel() {
		var a toolAnswer
		if err := json.Unmarshal([]byte(msg.Payload), &a); err != nil {
			r.logger.Warn("ignoring malformed tool answer", zap.Error(err))
			continue
		}
		r.deliver(&a)
	}
}

func (r *redisStore) put(ctx context.Context, s *Session) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	if err := r.rdb.Set(ctx, r.sessionKey(s.ID), b, r.ttl(s)).Err(); err != nil {
		return fmt.Errorf("storing session %s: %w", s.ID, err)
	}
	return nil
}

func (r *redisStore) get(ctx context.Context, id string) (*Session, error) {
	b, err := r.rdb.Get(ctx, r.sessionKey(id)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading session %s: %w", id, err)
	}
	var s Session
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("decoding session %s: %w", id, err)
	}
	if s.ExpiresAt <= r.now().UnixMilli() {
		// Redis expires keys on its own clock; this keeps an injected clock honest.
		if err := r.rdb.Del(ctx, r.sessionKey(id), r.callsKey(id)).Err(); err != nil {
			return nil, fmt.Errorf("deleting expired session %s: %w", id, err)
		}
		return nil, nil
	}
	return &s, nil
}

func (r *redisStore) addCall(ctx context.Context, s *Session, call PendingCall) error {
	info, err := json.Marshal(call)
	if err != nil {
		return err
	}
	_, err = r.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, r.callsKey(s.ID), "c:"+call.CallID, "pending", "i:"+call.CallID, info)
		p.PExpire(ctx, r.callsKey(s.ID), r.ttl(s))
		return nil
	})
	if err != nil {
		return fmt.Errorf("recording call %s of session %s: %w", call.CallID, s.ID, err)
	}
	return nil
}

func (r *redisStore) pendingCalls(ctx context.Context, sessionID string) ([]PendingCall, error) {
	h, err := r.rdb.HGetAll(ctx, r.callsKey(sessionID)).Result()
	if err != nil {
		return nil, fmt.Errorf("reading calls of session %s: %w", sessionID, err)
	}
	if _, closed := h["closed"]; closed {
		return nil, nil
	}
	var out []PendingCall
	for k, v := range h {
		id, ok := strings.CutPrefix(k, "c:")
		if !ok || v != "pending" {
			continue
		}
		c := PendingCall{CallID: id}
		if info, ok := h["i:"+id]; ok {
			if err := json.Unmarshal([]byte(info), &c); err != nil {
				return nil, fmt.Errorf("decoding call %s of session %s: %w", id, sessionID, err)
			}
		}
		out = append(out, c)
	}
	sortCalls(out)
	return out, nil
}

func (r *redisStore) notify(ctx context.Context, sessionID string) error {
	b, _ := json.Marshal(&toolAnswer{SessionID: sessionID, Changed: true})
	if err := r.rdb.Publish(ctx, r.channel(), b).Err(); err != nil {
		return fmt.Errorf("announcing a change of session %s: %w", sessionID, err)
	}
	return nil
}

func (r *redisStore) dropCall(ctx context.Context, sessionID, callID string) error {
	return dropScript.Run(ctx, r.rdb, []string{r.callsKey(sessionID)}, "c:"+callID).Err()
}

func (r *redisStore) closeCalls(ctx context.Context, s *Session) error {
	_, err := r.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, r.callsKey(s.ID), "closed", "1")
		p.PExpire(ctx, r.callsKey(s.ID), r.ttl(s))
		return nil
	})
	return err
}

func (r *redisStore) resolveCall(ctx context.Context, a *toolAnswer) error {
	payload, err := json.Marshal(a)
	if err != nil {
		return err
	}
	n, err := resolveScript.Run(ctx, r.rdb, []string{r.sessionKey(a.SessionID), r.callsKey(a.SessionID)},
		"c:"+a.CallID, payload, r.channel()).Int()
	if err != nil {
		return fmt.Errorf("submitting result of call %s: %w", a.CallID, err)
	}
	switch n {
	case 0:
		return errSessionGone
	case 1:
		return errCallUnknown
	case 2:
		return errCallAnswered
	case 3:
		return errCallClosed
	}
	return nil
}

// fetchAnswer returns the stored answer of a call, or nil.
func (r *redisStore) fetchAnswer(ctx context.Context, sessionID, callID string) (*toolAnswer, error) {
	b, err := r.rdb.HGet(ctx, r.callsKey(sessionID), "ac:"+callID).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var a toolAnswer
	if err := json.Unmarshal(b, &a); err != nil {
		return nil, err
	}
	return &a, nil
}

func (r *redisStore) sweep(int64) {}

func (r *redisStore) close() error {
	var err error
	r.once.Do(func() {
		err = r.ps.Close()
		<-r.done
	})
	return err
}
