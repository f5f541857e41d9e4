package guard

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// Every read-modify-write is one script, so that concurrent gateways sharing
// a Redis see exact limits.
var (
	// KEYS[1] hash {w: window start, p: previous count, c: current count}.
	// ARGV: window start, window ms, now ms, max requests.
	scriptSlidingWindow = redis.NewScript(`
local ws = tonumber(ARGV[1])
local win = tonumber(ARGV[2])
local now = tonumber(ARGV[3])
local max = tonumber(ARGV[4])
local h = redis.call('HMGET', KEYS[1], 'w', 'p', 'c')
local w = tonumber(h[1])
local p, c = 0, 0
if w ~= nil then
  if w == ws then
    p = tonumber(h[2]) or 0; c = tonumber(h[3]) or 0
  elseif w == ws - win then
    p = tonumber(h[3]) or 0
  elseif w > ws then
    ws = w; p = tonumber(h[2]) or 0; c = tonumber(h[3]) or 0
  end
end
local r = (now - ws) / win
if r < 0 then r = 0 elseif r > 1 then r = 1 end
local ok = 0
if p * (1 - r) + c < max then
  c = c + 1
  ok = 1
end
redis.call('HSET', KEYS[1], 'w', string.format('%d', ws), 'p', p, 'c', c)
redis.call('PEXPIRE', KEYS[1], win * 2)
return {ok, p, c, string.format('%d', ws)}
`)
	// KEYS[1] sorted set ticket -> expiry ms. ARGV: now, max, expiry, ticket,
	// ttl ms, then pairs of a ticket whose acquire's answer was lost and its
	// expiry ms, withdrawn first. A withdrawn ticket that is not there yet
	// may still come (its command delayed on the way): the mark
	// "withdrawn:<ticket>", scored minus its expiry, makes that acquire take
	// nothing. Marks have negative scores: the count of held slots is of the
	// positive ones, and a mark goes at its ticket's expiry as a ticket does.
	scriptAcquire = redis.NewScript(`
local now = tonumber(ARGV[1])
for i = 6, #ARGV - 1, 2 do
  if redis.call('ZREM', KEYS[1], ARGV[i]) == 0 then
    redis.call('ZADD', KEYS[1], -tonumber(ARGV[i + 1]), 'withdrawn:' .. ARGV[i])
    if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[5]) then redis.call('PEXPIRE', KEYS[1], ARGV[5]) end
  end
end
if redis.call('ZREM', KEYS[1], 'withdrawn:' .. ARGV[4]) > 0 then
  return 0
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], 0, now)
redis.call('ZREMRANGEBYSCORE', KEYS[1], -now, '(0')
if redis.call('ZCOUNT', KEYS[1], '(0', '+inf') < tonumber(ARGV[2]) then
  redis.call('ZADD', KEYS[1], ARGV[3], ARGV[4])
  redis.call('PEXPIRE', KEYS[1], ARGV[5])
  return 1
end
return 0
`)
	// KEYS[1] sorted set. ARGV: ticket, unprefixed key, release channel
	// (an argument, not a key, so that the script stays on one cluster slot).
	scriptRelease = redis.NewScript(`
if redis.call('ZREM', KEYS[1], ARGV[1]) > 0 then
  redis.call('PUBLISH', ARGV[3], ARGV[2])
end
return 0
`)
	// KEYS[1] sorted set. ARGV: unprefixed key, release channel. The
	// tickets (positive scores) go; the withdrawal marks (negative) stay, so
	// that an acquire withdrawn before the reset and reaching Redis after it
	// still takes nothing. A key left with no member is gone.
	scriptResetSlots = redis.NewScript(`
redis.call('ZREMRANGEBYSCORE', KEYS[1], '(0', '+inf')
redis.call('PUBLISH', ARGV[2], ARGV[1])
return 0
`)
)

// RedisStorage keeps state in Redis (go-redis v9), shared by every gateway
// using the same server and key prefix. Semaphore releases are published on
// the channel "<prefix>sem:release" so that waiters in any gateway wake at
// once.
type RedisStorage struct {
	client  redis.UniversalClient
	owns    bool
	prefix  string
	channel string
	logger  *zap.Logger

	lost lostSlots

	mu      sync.Mutex
	pubsub  *redis.PubSub
	waiters map[string]map[chan struct{}]struct{}
	closed  bool
	done    chan struct{}
}

// RedisStorageOptions configures NewRedisStorage; nil means defaults.
type RedisStorageOptions struct {
	// Logger receives pub/sub problems. Default zap.NewNop().
	Logger *zap.Logger
}

// NewRedisStorage returns a storage on cfg.Client or, when that is nil, on
// a new client for cfg's host, port, password, db and tls. Every key is
// prefixed with keyPrefix. It does not connect: the first command does.
func NewRedisStorage(cfg StorageConfig, keyPrefix string, opts *RedisStorageOptions) (*RedisStorage, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &RedisStorage{
		client: cfg.Client, prefix: keyPrefix, channel: keyPrefix + "sem:release",
		logger: zap.NewNop(), waiters: make(map[string]map[chan struct{}]struct{}), done: make(chan struct{}),
	}
	if opts != nil && opts.Logger != nil {
		s.logger = opts.Logger
	}
	if s.client == nil {
		host, port := cfg.Host, cfg.Port
		if host == "" {
			host = "127.0.0.1"
		}
		if port == 0 {
			port = DefaultRedisPort
		}
		timeout := time.Duration(cfg.TimeoutMs) * time.Millisecond
		if timeout == 0 {
			timeout = 500 * time.Millisecond
		}
		o := &redis.Options{
			Addr: net.JoinHostPort(host, strconv.Itoa(port)), Password: cfg.Password, DB: cfg.DB,
			DialTimeout: 2 * timeout, ReadTimeout: timeout, WriteTimeout: timeout,
			PoolTimeout: 2 * timeout, MaxRetries: 1,
			// A caller's context deadline bounds reads and writes too.
			ContextTimeoutEnabled: true,
			// Fail fast while Redis is down: the failure mode answers instead.
			DialerRetries: 1,
		}
		if cfg.TLS {
			o.TLSConfig = &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}
		}
		s.client, s.owns = redis.NewClient(o), true
	}
	return s, nil
}

// Client returns the Redis client.
func (s *RedisStorage) Client() redis.UniversalClient { return s.client }

// Ping checks that Redis answers.
func (s *RedisStorage) Ping(ctx context.Context) error {
	return s.client.Ping(ctx).Err()
}

// SlidingWindow implements Storage.
func (s *RedisStorage) SlidingWindow(ctx context.Context, key string, windowStartMs, windowMs, nowMs, maxRequests int64) (WindowState, error) {
	v, err := scriptSlidingWindow.Run(ctx, s.client, []string{s.prefix + key}, windowStartMs, windowMs, nowMs, maxRequests).Slice()
	if err != nil {
		return WindowState{}, err
	}
	if len(v) != 4 {
		return WindowState{}, errors.New("redis sliding window script: unexpected reply")
	}
	ok, _ := v[0].(int64)
	p, _ := v[1].(int64)
	c, _ := v[2].(int64)
	wsStr, _ := v[3].(string)
	ws, err := strconv.ParseInt(wsStr, 10, 64)
	if err != nil {
		return WindowState{}, errors.New("redis sliding window script: bad window start")
	}
	return WindowState{WindowStartMs: ws, Previous: p, Current: c, Allowed: ok == 1}, nil
}

// ResetWindow implements Storage.
func (s *RedisStorage) ResetWindow(ctx context.Context, key string) error {
	return s.client.Del(ctx, s.prefix+key).Err()
}

// AcquireSlot implements Storage. An acquire that fails without Redis's
// answer (a timeout, a connection lost) may still run: a command waiting in
// the socket buffer of a server that stalled runs when it continues, and
// takes a slot that nobody holds until the ticket expires. Its ticket is
// withdrawn by the next acquire of the key that Redis answers; when it has
// not run yet, that acquire leaves a mark that makes it take nothing when
// it comes.
func (s *RedisStorage) AcquireSlot(ctx context.Context, key, ticket string, maxConcurrent, nowMs, expiresAtMs int64) (bool, error) {
	keys := []string{s.prefix + key}
	var cmd *redis.Cmd
	lost := s.lost.of(key, nowMs)
	if lost == nil {
		cmd = scriptAcquire.Run(ctx, s.client, keys, nowMs, maxConcurrent, expiresAtMs, ticket, max(expiresAtMs-nowMs, 1))
	} else {
		cmd = scriptAcquire.Run(ctx, s.client, keys, append([]any{nowMs, maxConcurrent, expiresAtMs, ticket, max(expiresAtMs-nowMs, 1)}, lost...)...)
	}
	n, err := cmd.Int()
	if err != nil {
		var reply redis.Error
		if !errors.As(err, &reply) {
			s.lost.add(key, ticket, expiresAtMs)
		}
		return false, err
	}
	if lost != nil {
		s.lost.withdrawn(key, lost)
	}
	return n == 1, nil
}

// lostSlots are the tickets of acquires whose answer was lost, by key, kept
// until an acquire of their key withdraws them or they expire.
type lostSlots struct {
	n  atomic.Int32 // entries, read on every acquire
	mu sync.Mutex
	m  map[string]map[string]int64 // key -> ticket -> expiry ms
}

// maxLostSlots bounds the tickets kept; past it a lost acquire's slot comes
// back when its ticket expires, as before.
const maxLostSlots = 4096

func (l *lostSlots) add(key, ticket string, expiresAtMs int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n.Load() >= maxLostSlots {
		return
	}
	if l.m == nil {
		l.m = make(map[string]map[string]int64)
	}
	if l.m[key] == nil {
		l.m[key] = make(map[string]int64)
	}
	if _, ok := l.m[key][ticket]; !ok {
		l.m[key][ticket] = expiresAtMs
		l.n.Add(1)
	}
}

// of returns the unexpired lost tickets of key, each followed by its
// expiry ms (nil: none), forgetting the expired ones.
func (l *lostSlots) of(key string, nowMs int64) []any {
	if l.n.Load() == 0 {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []any
	for t, exp := range l.m[key] {
		if exp <= nowMs {
			l.forget(key, t)
			continue
		}
		out = append(out, t, exp)
	}
	return out
}

// withdrawn forgets tickets an acquire that Redis answered has removed or
// marked (pairs of a ticket and its expiry, as of returns them).
func (l *lostSlots) withdrawn(key string, lost []any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := 0; i < len(lost); i += 2 {
		l.forget(key, lost[i].(string))
	}
}

func (l *lostSlots) forget(key, ticket string) {
	if _, ok := l.m[key][ticket]; !ok {
		return
	}
	delete(l.m[key], ticket)
	if len(l.m[key]) == 0 {
		delete(l.m, key)
	}
	l.n.Add(-1)
}

// ReleaseSlot implements Storage. A release that fails without Redis's
// answer is left to the next acquire of the key, as a lost acquire is.
func (s *RedisStorage) ReleaseSlot(ctx context.Context, key, ticket string) error {
	err := scriptRelease.Run(ctx, s.client, []string{s.prefix + key}, ticket, key, s.channel).Err()
	if err != nil {
		var reply redis.Error
		if !errors.As(err, &reply) {
			s.lost.add(key, ticket, time.Now().Add(lostReleaseLife).UnixMilli())
		}
	}
	return err
}

// lostReleaseLife is how long a failed release is remembered: the storage
// does not know the ticket's expiry, and a ticket lives at most the
// semaphore's TTL (300 s by default).
const lostReleaseLife = 10 * time.Minute

// ActiveSlots implements Storage.
func (s *RedisStorage) ActiveSlots(ctx context.Context, key string, nowMs int64) (int64, error) {
	return s.client.ZCount(ctx, s.prefix+key, "("+strconv.FormatInt(nowMs, 10), "+inf").Result()
}

// ResetSlots implements Storage.
func (s *RedisStorage) ResetSlots(ctx context.Context, key string) error {
	return scriptResetSlots.Run(ctx, s.client, []string{s.prefix + key}, key, s.channel).Err()
}

// WatchReleases implements ReleaseNotifier with one pub/sub subscription
// per storage, started on first use; go-redis re-subscribes after a
// reconnect, and waiters also poll, so a lost message only delays a wake-up.
func (s *RedisStorage) WatchReleases(key string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ch, func() {}
	}
	if s.pubsub == nil {
		s.pubsub = s.client.Subscribe(context.Background(), s.channel)
		go s.dispatch(s.pubsub.Channel())
	}
	set := s.waiters[key]
	if set == nil {
		set = make(map[chan struct{}]struct{})
		s.waiters[key] = set
	}
	set[ch] = struct{}{}
	return ch, func() {
		s.mu.Lock()
		delete(set, ch)
		if len(set) == 0 && len(s.waiters[key]) == 0 {
			delete(s.waiters, key)
		}
		s.mu.Unlock()
	}
}

func (s *RedisStorage) dispatch(msgs <-chan *redis.Message) {
	defer close(s.done)
	for msg := range msgs {
		s.mu.Lock()
		for ch := range s.waiters[msg.Payload] {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
		s.mu.Unlock()
	}
}

// Close ends the subscription and closes the client when this storage
// created it.
func (s *RedisStorage) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	ps := s.pubsub
	s.mu.Unlock()
	var err error
	if ps != nil {
		err = ps.Close()
		<-s.done
	}
	if s.owns {
		if cerr := s.client.Close(); err == nil {
			err = cerr
		}
	}
	return err
}

var (
	_ Storage         = (*RedisStorage)(nil)
	_ ReleaseNotifier = (*RedisStorage)(nil)
)
