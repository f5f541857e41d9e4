package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// redisStore keeps sessions in Redis so that every broker sharing the
// server and key prefix sees them. Keys:
//
//	{prefix}session:{id}  JSON of the Session, expiring at ExpiresAt
//	{prefix}calls:{id}    hash: "c:{callId}" -> pending|answered|abandoned, "ac:{callId}" -> the
//	                      answer, "i:{callId}" -> {tool, input}, "closed" once finished;
//	                      a finished record keeps the states and "closed" only
//	{prefix}answers       pub/sub channel carrying caller-supplied results and
//	                      change notices of sessions followed with Await
//	{prefix}owner:{owner} "1" while the broker owner heartbeats (expires after
//	                      the owner timeout)
//	{prefix}owners        set of the brokers that run, or ran, sessions
//	{prefix}owned:{owner} set of the sessions a broker runs
//	{prefix}finished      sorted set of the finished sessions counted against
//	                      max_finished_size, by finish time (Redis's clock, µs)
//	{prefix}finished:exp  the same ids by expiresAt (ms)
//	{prefix}finished:size hash: id -> what the record keeps (finishedSize),
//	                      "total" -> their sum
//
// The three finished keys change only in putScript, with the record, so
// the total is always the sum of the sizes; they expire with the
// longest-lived record they count, and a record gone without them (expired
// by Redis, deleted by a reader's clock) leaves them at a later finish.
//
// A result posted to any broker is checked, marked answered and stored by
// one Lua script, which also publishes it; the broker running the session
// picks it up from its subscription, or, should the message be lost while
// its subscription reconnects, by polling the stored answer.
//
// Liveness: every broker renews its owner key; a session whose owner key is
// gone is ended with OWNER_LOST by whichever broker notices first (a reader
// of the session, a tool result for it, or the periodic reaper). A finished
// record is never overwritten, so an owner that comes back after being
// declared lost cannot resurrect its sessions.
//
// A broker declares others lost only from a store it has reached without a
// gap for an owner timeout (judgeAfter): when the store was out of reach
// for everyone (Redis stopped or failing over, every gateway partitioned
// from it), every owner key expired although no gateway stopped, and the
// first broker back would otherwise end the others' sessions before they
// could renew.
type redisStore struct {
	rdb      redis.UniversalClient
	prefix   string
	self     string        // this broker's owner id
	ownerTTL time.Duration // liveness lapses after this
	timeout  time.Duration // bound of one storage operation
	now      func() time.Time
	deliver  func(*toolAnswer)
	logger   *zap.Logger

	// gap is set when a heartbeat fails; judgeAfter (Unix ms) is when the
	// broker may again declare other brokers lost: an owner timeout and a
	// storage timeout after the first heartbeat that follows a gap or finds
	// this broker's own key gone (the first of all included), by when every
	// live broker has renewed.
	gap        atomic.Bool
	judgeAfter atomic.Int64

	// maxFinished bounds the sizes of the finished records all brokers on
	// prefix keep (BrokerOptions.MaxFinishedBytes); finKeys are the index's
	// keys, KEYS[3:6] of putScript.
	maxFinished int64
	finKeys     [3]string

	ps   *redis.PubSub
	done chan struct{}
	once sync.Once
}

// A record cjson cannot decode is a finished session's: its result (the
// only part of a record a script shapes) may nest as deep as the sandbox
// allows, 1,000 levels, one more than cjson's bound with the record
// around it. Such a record made every answer for the session an error
// (503 STORAGE_UNAVAILABLE, the store marked failing) instead of 409.
var resolveScript = redis.NewScript(`
local rec = redis.call('GET', KEYS[1])
if not rec then return 0 end
local ok, s = pcall(cjson.decode, rec)
if not ok then return 3 end
if s['status'] == 'error' and type(s['error']) == 'table' and s['error']['code'] == 'OWNER_LOST' then return 6 end
if redis.call('HEXISTS', KEYS[2], 'closed') == 1 then return 3 end
if s['status'] == 'completed' or s['status'] == 'error' then return 3 end
local owner = s['owner']
if ARGV[4] ~= '' and owner and owner ~= '' and redis.call('EXISTS', ARGV[4] .. owner) == 0 then return 5 end
local st = redis.call('HGET', KEYS[2], ARGV[1])
if not st then return 1 end
if st == 'abandoned' then return 7 end
if st ~= 'pending' then return 2 end
redis.call('HSET', KEYS[2], ARGV[1], 'answered', 'a' .. ARGV[1], ARGV[2])
redis.call('PUBLISH', ARGV[3], ARGV[2])
return 4
`)

// abandonScript marks a call that stopped waiting abandoned, dropping its
// input; the mark expires with the hash, so a late answer is 409
// CALL_ABANDONED, not 404 as for an id never issued. A call already
// answered stays so and its answer is returned: the answer came first, its
// caller was told 200, and the call uses it. ARGV: the call's "c:", "i:"
// and "ac:" fields.
var abandonScript = redis.NewScript(`
local st = redis.call('HGET', KEYS[1], ARGV[1])
if st == 'pending' then
  redis.call('HSET', KEYS[1], ARGV[1], 'abandoned')
  redis.call('HDEL', KEYS[1], ARGV[2])
elseif st == 'answered' then
  return redis.call('HGET', KEYS[1], ARGV[3])
end
return false
`)

// restoreSettledScript writes back the calls of a session being restored
// that no longer wait: the abandoned ones (the ARGV[2] ids from ARGV[3]) as
// abandonScript leaves them, a call the hash holds as answered staying so,
// and the answered ones (the rest) as answered, so that one more answer is
// 409 CALL_ALREADY_ANSWERED, not 404 as for an id never issued.
// ARGV[1]: the hash's time to live (ms).
var restoreSettledScript = redis.NewScript(`
local last = 2 + tonumber(ARGV[2])
for i = 3, #ARGV do
  local f = 'c:' .. ARGV[i]
  local st = redis.call('HGET', KEYS[1], f)
  if i > last then
    if st ~= 'answered' then
      redis.call('HSET', KEYS[1], f, 'answered')
      redis.call('HDEL', KEYS[1], 'i:' .. ARGV[i])
    end
  elseif not st or st == 'pending' then
    redis.call('HSET', KEYS[1], f, 'abandoned')
    redis.call('HDEL', KEYS[1], 'i:' .. ARGV[i])
  end
end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 0
`)

// putScript writes a session unless its record is finished: 1 written,
// 0 kept (the session had ended). A running session joins its owner's set,
// a finished one leaves it.
//
// A finished record's calls hash (KEYS[6]) loses the calls' inputs and
// the caller's answers ("i:", "ac:"), keeping the states and the closed
// mark: the script and its calls are over (run.finish writes the record
// after waitCalls), every later answer is 409 SESSION_FINISHED on the
// record alone, and a GET returns the record. Kept, they held up to
// max_tool_calls answers of max_body_size each for the session timeout,
// outside max_finished_size (TestFinishedSessionKeepsNoAnswers).
//
// A finished record is counted in the finished index (KEYS[3] by finish
// time, KEYS[4] by expiry, KEYS[5] sizes and their total) and the oldest
// finished records past ARGV[9] bytes are deleted as expiry would, the
// newest always kept: each may keep a result of the sandbox's
// max_result_bytes for the session timeout, and one caller could fill the
// shared Redis (its maxmemory reached, OAuth tokens and guard counters
// too). Before that, up to 64 records expired by the gateway's clock
// (ARGV[8]) leave the index (the index is reset when that empties it), and
// before trimming, those of the oldest 4 whose record is gone: an entry
// without a record counts until its expiry at the latest, and none at the
// head of the queue makes a live record trimmed in its place.
var putScript = redis.NewScript(dropCallBodies + `
local cur = redis.call('GET', KEYS[1])
if cur then
	local ok, s = pcall(cjson.decode, cur)
	if not ok or s['status'] == 'completed' or s['status'] == 'error' then return 0 end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
if ARGV[4] ~= '' then
	if ARGV[3] == '1' then redis.call('SREM', KEYS[2], ARGV[5]) else redis.call('SADD', KEYS[2], ARGV[5]) end
end
if ARGV[3] ~= '1' then return 1 end
drop_call_bodies(KEYS[6])
local fin, exp, size, id, p = KEYS[3], KEYS[4], KEYS[5], ARGV[5], ARGV[10]
local function drop(d)
	local n = tonumber(redis.call('HGET', size, d) or 0)
	redis.call('HDEL', size, d)
	redis.call('HINCRBY', size, 'total', -n)
	redis.call('ZREM', fin, d)
	redis.call('ZREM', exp, d)
	redis.call('DEL', p .. 'session:' .. d, p .. 'calls:' .. d)
end
local gone = redis.call('ZRANGEBYSCORE', exp, '-inf', ARGV[8], 'LIMIT', 0, 64)
for _, d in ipairs(gone) do
	if d ~= id then drop(d) end
end
if #gone > 0 and redis.call('ZCARD', fin) == 0 then redis.call('DEL', exp, size) end
local old = tonumber(redis.call('HGET', size, id) or 0)
redis.call('HSET', size, id, ARGV[6])
local total = redis.call('HINCRBY', size, 'total', tonumber(ARGV[6]) - old)
local t = redis.call('TIME')
redis.call('ZADD', fin, t[1] .. string.format('%06d', tonumber(t[2])), id)
redis.call('ZADD', exp, ARGV[7], id)
local max = tonumber(ARGV[9])
if total > max then
	for _, d in ipairs(redis.call('ZRANGE', fin, 0, 3)) do
		if d ~= id and redis.call('EXISTS', p .. 'session:' .. d) == 0 then drop(d) end
	end
	total = tonumber(redis.call('HGET', size, 'total'))
end
while total > max and redis.call('ZCARD', fin) > 1 do
	drop(redis.call('ZRANGE', fin, 0, 0)[1])
	total = tonumber(redis.call('HGET', size, 'total'))
end
local ttl = tonumber(ARGV[2])
for _, k in ipairs({fin, exp, size}) do
	if redis.call('PTTL', k) < ttl then redis.call('PEXPIRE', k, ttl) end
end
return 1
`)

// dropCallBodies defines drop_call_bodies(key): it deletes the calls' inputs
// and the caller's answers ("i:", "ac:") from the calls hash key, keeping
// the calls' states and the closed mark, which answer everything once the
// session has ended.
const dropCallBodies = `
local function drop_call_bodies(key)
	local bodies = {}
	for _, f in ipairs(redis.call('HKEYS', key)) do
		if string.sub(f, 1, 2) == 'i:' or string.sub(f, 1, 3) == 'ac:' then bodies[#bodies + 1] = f end
	end
	for i = 1, #bodies, 500 do
		redis.call('HDEL', key, unpack(bodies, i, math.min(i + 499, #bodies)))
	end
end
`

// loseScript ends a session whose owner is gone: when the owner key
// (KEYS[3]) is missing and the record is still exactly ARGV[1] (not
// finished meanwhile), the record becomes ARGV[2] and its calls close,
// dropping their inputs and answers as a finished record's do: a retry or
// a late answer gets OWNER_LOST from the record, and the script's secrets
// do not outlive its run.
var loseScript = redis.NewScript(dropCallBodies + `
if redis.call('EXISTS', KEYS[3]) == 1 then return 0 end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL')
redis.call('HSET', KEYS[2], 'closed', '1')
drop_call_bodies(KEYS[2])
local ttl = redis.call('PTTL', KEYS[1])
if ttl > 0 then redis.call('PEXPIRE', KEYS[2], ttl) end
return 1
`)

// heartbeatScript renews an owner key; 0 when it was missing.
var heartbeatScript = redis.NewScript(`
local existed = redis.call('EXISTS', KEYS[1])
redis.call('SET', KEYS[1], '1', 'PX', ARGV[2])
redis.call('SADD', KEYS[2], ARGV[1])
return existed
`)

func newRedisStore(ctx context.Context, rdb redis.UniversalClient, prefix, self string, ownerTTL, timeout time.Duration, maxFinished int64, now func() time.Time, deliver func(*toolAnswer), logger *zap.Logger) (*redisStore, error) {
	r := &redisStore{rdb: rdb, prefix: prefix, self: self, ownerTTL: ownerTTL, timeout: timeout, maxFinished: maxFinished, now: now, deliver: deliver, logger: logger, done: make(chan struct{})}
	r.finKeys = [3]string{prefix + "finished", prefix + "finished:exp", prefix + "finished:size"}
	r.ps = rdb.Subscribe(ctx, r.channel())
	// Wait for the subscription so no answer published after New returns is missed.
	if _, err := r.ps.Receive(ctx); err != nil {
		_ = r.ps.Close()
		return nil, fmt.Errorf("subscribing to %s: %w", r.channel(), err)
	}
	if _, err := r.heartbeat(ctx); err != nil {
		_ = r.ps.Close()
		return nil, err
	}
	go r.listen()
	return r, nil
}

func (r *redisStore) sessionKey(id string) string { return r.prefix + "session:" + id }
func (r *redisStore) callsKey(id string) string   { return r.prefix + "calls:" + id }
func (r *redisStore) channel() string             { return r.prefix + "answers" }
func (r *redisStore) ownerKey(o string) string    { return r.prefix + "owner:" + o }
func (r *redisStore) ownedKey(o string) string    { return r.prefix + "owned:" + o }
func (r *redisStore) ownersKey() string           { return r.prefix + "owners" }
func (r *redisStore) healthKey() string           { return r.prefix + "health:" + r.self }

// bound limits one storage operation to the store's timeout, so that no
// request waits on an unreachable Redis longer than that.
func (r *redisStore) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, r.timeout)
}

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
	ctx, cancel := r.bound(ctx)
	defer cancel()
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	var n int
	if s.finished() {
		n, err = putScript.Run(ctx, r.rdb, []string{r.sessionKey(s.ID), r.ownedKey(s.Owner), r.finKeys[0], r.finKeys[1], r.finKeys[2], r.callsKey(s.ID)},
			b, r.ttl(s).Milliseconds(), "1", s.Owner, s.ID,
			finishedSize(s), s.ExpiresAt, r.now().UnixMilli(), r.maxFinished, r.prefix).Int()
	} else {
		n, err = putScript.Run(ctx, r.rdb, []string{r.sessionKey(s.ID), r.ownedKey(s.Owner)},
			b, r.ttl(s).Milliseconds(), "0", s.Owner, s.ID).Int()
	}
	if err != nil {
		return fmt.Errorf("storing session %s: %w", s.ID, err)
	}
	if n == 0 {
		return errSessionEnded
	}
	return nil
}

func (r *redisStore) get(ctx context.Context, id string) (*Session, error) {
	ctx, cancel := r.bound(ctx)
	defer cancel()
	for range 3 { // a record that changes under a loss check is read again
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
		if s.finished() || s.Owner == "" || s.Owner == r.self || !r.mayJudge() {
			return &s, nil
		}
		lost, err := r.loseIfOrphaned(ctx, &s, b)
		if err != nil {
			return nil, err
		}
		if !lost {
			return &s, nil
		}
	}
	return nil, fmt.Errorf("reading session %s: the record kept changing", id)
}

// loseIfOrphaned ends a running session (read as raw) whose owner is gone;
// it reports whether the record was changed (by this call or another).
func (r *redisStore) loseIfOrphaned(ctx context.Context, s *Session, raw []byte) (bool, error) {
	alive, err := r.rdb.Exists(ctx, r.ownerKey(s.Owner)).Result()
	if err != nil {
		return false, fmt.Errorf("checking the owner of session %s: %w", s.ID, err)
	}
	if alive == 1 {
		return false, nil
	}
	lost := s.clone()
	lost.Status = StatusError
	lost.UpdatedAt = r.now().UnixMilli()
	lost.Error = &SessionError{Code: CodeOwnerLost, ScriptStatus: "engine_error",
		Message: fmt.Sprintf("the gateway running this session stopped (no heartbeat for %s); its outcome is unknown", r.ownerTTL)}
	nb, err := json.Marshal(lost)
	if err != nil {
		return false, err
	}
	n, err := loseScript.Run(ctx, r.rdb, []string{r.sessionKey(s.ID), r.callsKey(s.ID), r.ownerKey(s.Owner)}, raw, nb).Int()
	if err != nil {
		return false, fmt.Errorf("ending session %s of a lost gateway: %w", s.ID, err)
	}
	if n == 1 {
		r.logger.Warn("session ended: its gateway is gone", zap.String("session", s.ID), zap.String("owner", s.Owner))
		// Await on any broker wakes now instead of at its next poll.
		_ = r.notify(ctx, s.ID)
	}
	return true, nil
}

func (r *redisStore) addCall(ctx context.Context, s *Session, call PendingCall) error {
	ctx, cancel := r.bound(ctx)
	defer cancel()
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
	ctx, cancel := r.bound(ctx)
	defer cancel()
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
	ctx, cancel := r.bound(ctx)
	defer cancel()
	b, _ := json.Marshal(&toolAnswer{SessionID: sessionID, Changed: true})
	if err := r.rdb.Publish(ctx, r.channel(), b).Err(); err != nil {
		return fmt.Errorf("announcing a change of session %s: %w", sessionID, err)
	}
	return nil
}

func (r *redisStore) abandonCall(ctx context.Context, sessionID, callID string) (*toolAnswer, error) {
	ctx, cancel := r.bound(ctx)
	defer cancel()
	b, err := abandonScript.Run(ctx, r.rdb, []string{r.callsKey(sessionID)}, "c:"+callID, "i:"+callID, "ac:"+callID).Text()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("abandoning call %s of session %s: %w", callID, sessionID, err)
	}
	return decodeAnswer(b)
}

// decodeAnswer decodes a stored answer ("ac:" field).
func decodeAnswer(b string) (*toolAnswer, error) {
	var a toolAnswer
	if err := json.Unmarshal([]byte(b), &a); err != nil {
		return nil, fmt.Errorf("decoding a stored tool answer: %w", err)
	}
	return &a, nil
}

func (r *redisStore) closeCalls(ctx context.Context, s *Session) error {
	ctx, cancel := r.bound(ctx)
	defer cancel()
	_, err := r.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, r.callsKey(s.ID), "closed", "1")
		p.PExpire(ctx, r.callsKey(s.ID), r.ttl(s))
		return nil
	})
	return err
}

func (r *redisStore) resolveCall(ctx context.Context, a *toolAnswer) error {
	ctx, cancel := r.bound(ctx)
	defer cancel()
	payload, err := json.Marshal(a)
	if err != nil {
		return err
	}
	ownerPrefix := "" // no owner check right after a gap: the answer is kept
	if r.mayJudge() {
		ownerPrefix = r.prefix + "owner:"
	}
	n, err := resolveScript.Run(ctx, r.rdb, []string{r.sessionKey(a.SessionID), r.callsKey(a.SessionID)},
		"c:"+a.CallID, payload, r.channel(), ownerPrefix).Int()
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
	case 5:
		// The owner is gone: end the session for everyone, then refuse.
		if _, err := r.get(ctx, a.SessionID); err != nil {
			return err
		}
		return errOwnerLost
	case 6:
		return errOwnerLost
	case 7:
		return errCallAbandoned
	}
	return nil
}

// fetchAnswer returns the stored answer of a call, or nil.
func (r *redisStore) fetchAnswer(ctx context.Context, sessionID, callID string) (*toolAnswer, error) {
	ctx, cancel := r.bound(ctx)
	defer cancel()
	b, err := r.rdb.HGet(ctx, r.callsKey(sessionID), "ac:"+callID).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return decodeAnswer(b)
}

// restore writes the calls, pending and abandoned, before the session
// record: a reader that sees the restored session running (another gateway
// answering a tool result) then also finds its calls. The other order left
// a window in which a session listed as running had "no pending call".
// Calls written for a session that turns out to be ended expire with their
// hash. The calls of a script that has ended are written closed, as
// closeCalls left them: the restore wrote them without the mark, and until
// the final record an answer was accepted, or 404, instead of 409
// SESSION_FINISHED.
func (r *redisStore) restore(ctx context.Context, s *Session, calls runCalls) error {
	if calls.closed {
		if err := r.closeCalls(ctx, s); err != nil {
			return fmt.Errorf("restoring the closed calls of session %s: %w", s.ID, err)
		}
		return r.put(ctx, s)
	}
	for _, c := range calls.pending {
		if err := r.addCall(ctx, s, c); err != nil {
			return err
		}
	}
	if len(calls.abandoned)+len(calls.answered) > 0 {
		args := make([]any, 0, len(calls.abandoned)+len(calls.answered)+2)
		args = append(args, r.ttl(s).Milliseconds(), len(calls.abandoned))
		for _, id := range calls.abandoned {
			args = append(args, id)
		}
		for _, id := range calls.answered {
			args = append(args, id)
		}
		bctx, cancel := r.bound(ctx)
		err := restoreSettledScript.Run(bctx, r.rdb, []string{r.callsKey(s.ID)}, args...).Err()
		cancel()
		if err != nil {
			return fmt.Errorf("restoring the answered and abandoned calls of session %s: %w", s.ID, err)
		}
	}
	return r.put(ctx, s)
}

func (r *redisStore) heartbeat(ctx context.Context) (bool, error) {
	ctx, cancel := r.bound(ctx)
	defer cancel()
	existed, err := heartbeatScript.Run(ctx, r.rdb, []string{r.ownerKey(r.self), r.ownersKey()},
		r.self, r.ownerTTL.Milliseconds()).Int()
	if err != nil {
		r.gap.Store(true)
		return false, fmt.Errorf("renewing the liveness of gateway %s: %w", r.self, err)
	}
	if r.gap.Swap(false) || existed == 0 {
		r.judgeAfter.Store(r.now().Add(r.ownerTTL + r.timeout).UnixMilli())
	}
	return existed == 0, nil
}

// mayJudge reports whether this broker has reached the store without a gap
// long enough to tell a stopped broker (no heartbeat) from one that could
// not reach the store either.
func (r *redisStore) mayJudge() bool {
	return r.now().UnixMilli() >= r.judgeAfter.Load()
}

func (r *redisStore) reapLost(ctx context.Context) ([]string, error) {
	if !r.mayJudge() {
		return nil, nil
	}
	ctx, cancel := r.bound(ctx)
	defer cancel()
	owners, err := r.rdb.SMembers(ctx, r.ownersKey()).Result()
	if err != nil {
		return nil, fmt.Errorf("listing gateways: %w", err)
	}
	var lost []string
	for _, o := range owners {
		if o == r.self {
			continue
		}
		alive, err := r.rdb.Exists(ctx, r.ownerKey(o)).Result()
		if err != nil {
			return lost, fmt.Errorf("checking gateway %s: %w", o, err)
		}
		if alive == 1 {
			continue
		}
		ids, err := r.rdb.SMembers(ctx, r.ownedKey(o)).Result()
		if err != nil {
			return lost, fmt.Errorf("listing the sessions of gateway %s: %w", o, err)
		}
		for _, id := range ids {
			s, err := r.get(ctx, id) // ends it when still running
			if err != nil {
				return lost, err
			}
			if s != nil && s.Error != nil && s.Error.Code == CodeOwnerLost {
				lost = append(lost, id)
			}
		}
		// Forget the gateway; should it come back, its heartbeat adds it again.
		if _, err := r.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Del(ctx, r.ownedKey(o))
			p.SRem(ctx, r.ownersKey(), o)
			return nil
		}); err != nil {
			return lost, fmt.Errorf("forgetting gateway %s: %w", o, err)
		}
	}
	return lost, nil
}

func (r *redisStore) resign(ctx context.Context) error {
	ctx, cancel := r.bound(ctx)
	defer cancel()
	return r.rdb.Del(ctx, r.ownerKey(r.self), r.healthKey()).Err()
}

// ping checks that the store takes a write, of this broker's own key
// ({prefix}health:{owner}, expiring after the owner timeout): a Redis past
// its maxmemory with noeviction, or a replica after a failover, answers
// PING but refuses every write, and /health said ok while every session
// failed to start.
func (r *redisStore) ping(ctx context.Context) error {
	ctx, cancel := r.bound(ctx)
	defer cancel()
	if err := r.rdb.Set(ctx, r.healthKey(), "1", r.ownerTTL).Err(); err != nil {
		return fmt.Errorf("writing to the session store: %w", err)
	}
	return nil
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
