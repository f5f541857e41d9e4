package credential

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrNotFound is what a Store returns for a missing or expired key.
var ErrNotFound = errors.New("credential store: not found")

// Store is the small key-value surface the vault and the connection pages
// need. Keys arrive without a prefix; each store adds its own. A ttl of 0
// means no expiry.
type Store interface {
	Get(ctx context.Context, key string) ([]byte, error)
	Set(ctx context.Context, key string, val []byte, ttl time.Duration) error
	// SetNX stores val only when key is absent and reports whether it did.
	SetNX(ctx context.Context, key string, val []byte, ttl time.Duration) (bool, error)
	// GetDel returns the value and deletes the key in one step (single use).
	GetDel(ctx context.Context, key string) ([]byte, error)
	// CompareAndSwap replaces key's value with val (deletes it when val is
	// nil) only while it still holds old, and reports whether it did.
	CompareAndSwap(ctx context.Context, key string, old, val []byte, ttl time.Duration) (bool, error)
	Del(ctx context.Context, keys ...string) error
	// Expire gives key a new ttl; a missing key is not an error.
	Expire(ctx context.Context, key string, ttl time.Duration) error
	// Scan calls fn with every key that starts with prefix (without the
	// store's own prefix). Keys written during a scan may be missed.
	Scan(ctx context.Context, prefix string, fn func(key string) error) error
}

// MemoryStore keeps everything in this process, expiring keys by its
// clock. It is for one gateway (and tests).
type MemoryStore struct {
	now    func() time.Time
	mu     sync.Mutex
	m      map[string]memoryEntry
	writes int
}

// memorySweepEvery is how many writes pass between two sweeps of expired
// keys, so keys nobody reads again do not pile up.
const memorySweepEvery = 1024

type memoryEntry struct {
	val []byte
	exp time.Time // zero: never
}

// NewMemoryStore returns an empty store; now nil means time.Now.
func NewMemoryStore(now func() time.Time) *MemoryStore {
	if now == nil {
		now = time.Now
	}
	return &MemoryStore{now: now, m: make(map[string]memoryEntry)}
}

// put stores an entry and sweeps now and then. s.mu is held.
func (s *MemoryStore) put(key string, val []byte, ttl time.Duration) {
	s.m[key] = memoryEntry{val: bytes.Clone(val), exp: s.expiry(ttl)}
	s.writes++
	if s.writes%memorySweepEvery == 0 {
		for k := range s.m {
			s.live(k)
		}
	}
}

func (s *MemoryStore) expiry(ttl time.Duration) time.Time {
	if ttl <= 0 {
		return time.Time{}
	}
	return s.now().Add(ttl)
}

// live returns the entry under key, dropping it when expired. s.mu is held.
func (s *MemoryStore) live(key string) (memoryEntry, bool) {
	e, ok := s.m[key]
	if ok && !e.exp.IsZero() && !s.now().Before(e.exp) {
		delete(s.m, key)
		return memoryEntry{}, false
	}
	return e, ok
}

// Get implements Store.
func (s *MemoryStore) Get(_ context.Context, key string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.live(key)
	if !ok {
		return nil, ErrNotFound
	}
	return bytes.Clone(e.val), nil
}

// Set implements Store.
func (s *MemoryStore) Set(_ context.Context, key string, val []byte, ttl time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.put(key, val, ttl)
	return nil
}

// SetNX implements Store.
func (s *MemoryStore) SetNX(_ context.Context, key string, val []byte, ttl time.Duration) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.live(key); ok {
		return false, nil
	}
	s.put(key, val, ttl)
	return true, nil
}

// GetDel implements Store.
func (s *MemoryStore) GetDel(_ context.Context, key string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.live(key)
	if !ok {
		return nil, ErrNotFound
	}
	delete(s.m, key)
	return e.val, nil
}

// CompareAndSwap implements Store.
func (s *MemoryStore) CompareAndSwap(_ context.Context, key string, old, val []byte, ttl time.Duration) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.live(key)
	if !ok || !bytes.Equal(e.val, old) {
		return false, nil
	}
	if val == nil {
		delete(s.m, key)
		return true, nil
	}
	s.put(key, val, ttl)
	return true, nil
}

// Del implements Store.
func (s *MemoryStore) Del(_ context.Context, keys ...string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		delete(s.m, k)
	}
	return nil
}

// Expire implements Store.
func (s *MemoryStore) Expire(_ context.Context, key string, ttl time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.live(key); ok {
		e.exp = s.expiry(ttl)
		s.m[key] = e
	}
	return nil
}

// Scan implements Store, in key order.
func (s *MemoryStore) Scan(ctx context.Context, prefix string, fn func(string) error) error {
	s.mu.Lock()
	var keys []string
	for k := range s.m {
		if _, ok := s.live(k); ok && strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	s.mu.Unlock()
	sort.Strings(keys)
	for _, k := range keys {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(k); err != nil {
			return err
		}
	}
	return nil
}

// RedisStore keeps the records in Redis under a prefix, so every gateway
// using the same Redis and prefix sees the same connections.
type RedisStore struct {
	c      redis.UniversalClient
	prefix string
}

// NewRedisStore returns a store on c (which the caller closes) with every
// key under prefix.
func NewRedisStore(c redis.UniversalClient, prefix string) *RedisStore {
	return &RedisStore{c: c, prefix: prefix}
}

func wrapRedis(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("credential store: %s: %w", op, err)
}

// Get implements Store.
func (s *RedisStore) Get(ctx context.Context, key string) ([]byte, error) {
	b, err := s.c.Get(ctx, s.prefix+key).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, ErrNotFound
	}
	return b, wrapRedis("get", err)
}

// Set implements Store.
func (s *RedisStore) Set(ctx context.Context, key string, val []byte, ttl time.Duration) error {
	return wrapRedis("set", s.c.Set(ctx, s.prefix+key, val, ttl).Err())
}

// SetNX implements Store.
func (s *RedisStore) SetNX(ctx context.Context, key string, val []byte, ttl time.Duration) (bool, error) {
	ok, err := s.c.SetNX(ctx, s.prefix+key, val, ttl).Result()
	return ok, wrapRedis("setnx", err)
}

// GetDel implements Store.
func (s *RedisStore) GetDel(ctx context.Context, key string) ([]byte, error) {
	b, err := s.c.GetDel(ctx, s.prefix+key).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, ErrNotFound
	}
	return b, wrapRedis("getdel", err)
}

// casScript swaps (or deletes, for an empty new value and no ttl) a key
// only while it holds the expected value.
var casScript = redis.NewScript(`
if redis.call("GET", KEYS[1]) ~= ARGV[1] then return 0 end
if ARGV[3] == "del" then redis.call("DEL", KEYS[1]) return 1 end
local ttl = tonumber(ARGV[4])
if ttl > 0 then redis.call("SET", KEYS[1], ARGV[2], "PX", ttl) else redis.call("SET", KEYS[1], ARGV[2]) end
return 1`)

// CompareAndSwap implements Store.
func (s *RedisStore) CompareAndSwap(ctx context.Context, key string, old, val []byte, ttl time.Duration) (bool, error) {
	op := "set"
	if val == nil {
		op = "del"
	}
	n, err := casScript.Run(ctx, s.c, []string{s.prefix + key}, old, val, op, ttl.Milliseconds()).Int()
	return n == 1, wrapRedis("compare and swap", err)
}

// Del implements Store.
func (s *RedisStore) Del(ctx context.Context, keys ...string) error {
	if len(keys) == 0 {
		return nil
	}
	full := make([]string, len(keys))
	for i, k := range keys {
		full[i] = s.prefix + k
	}
	return wrapRedis("del", s.c.Del(ctx, full...).Err())
}

// Expire implements Store.
func (s *RedisStore) Expire(ctx context.Context, key string, ttl time.Duration) error {
	if ttl <= 0 {
		return wrapRedis("persist", s.c.Persist(ctx, s.prefix+key).Err())
	}
	return wrapRedis("expire", s.c.PExpire(ctx, s.prefix+key, ttl).Err())
}

// Scan implements Store with SCAN MATCH, 200 keys a round trip.
func (s *RedisStore) Scan(ctx context.Context, prefix string, fn func(string) error) error {
	it := s.c.Scan(ctx, 0, escapeGlob(s.prefix+prefix)+"*", 200).Iterator()
	for it.Next(ctx) {
		if err := fn(strings.TrimPrefix(it.Val(), s.prefix)); err != nil {
			return err
		}
	}
	return wrapRedis("scan", it.Err())
}

// escapeGlob quotes the characters SCAN MATCH treats as a pattern.
func escapeGlob(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Interface guards
var (
	_ Store = (*MemoryStore)(nil)
	_ Store = (*RedisStore)(nil)
)
