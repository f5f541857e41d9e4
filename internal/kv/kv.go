// Package kv is the small key-value store with expiry that the OAuth
// server and the credential vault keep their records in: one in-process
// implementation and one on Redis, with the same contract.
package kv

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
var ErrNotFound = errors.New("not found")

// Store keeps byte values under string keys. Keys arrive without a prefix;
// each store adds its own. A ttl of 0 means no expiry.
type Store interface {
	Get(ctx context.Context, key string) ([]byte, error)
	Set(ctx context.Context, key string, val []byte, ttl time.Duration) error
	// SetNX stores val only when key is absent and reports whether it did:
	// the atomic step behind single use.
	SetNX(ctx context.Context, key string, val []byte, ttl time.Duration) (bool, error)
	// SetXX replaces the value only when key exists and reports whether it
	// did, so an update never resurrects a key deleted meanwhile.
	SetXX(ctx context.Context, key string, val []byte, ttl time.Duration) (bool, error)
	// GetDel returns the value and deletes the key in one atomic step.
	GetDel(ctx context.Context, key string) ([]byte, error)
	// CompareAndSwap replaces key's value with val (deletes it when val is
	// nil) only while it still holds old, and reports whether it did.
	CompareAndSwap(ctx context.Context, key string, old, val []byte, ttl time.Duration) (bool, error)
	Del(ctx context.Context, keys ...string) error
	// Expire gives key a new ttl (0: none); a missing key is not an error.
	Expire(ctx context.Context, key string, ttl time.Duration) error
	// Scan calls fn with every key that starts with prefix (without the
	// store's own prefix). Keys written during a scan may be missed.
	Scan(ctx context.Context, prefix string, fn func(key string) error) error
}

// Memory keeps everything in this process, expiring keys by its clock. It
// is for one gateway (and tests).
type Memory struct {
	now    func() time.Time
	prefix string
	mu     sync.Mutex
	m      map[string]memoryEntry
	writes int
}

// sweepEvery is how many writes pass between two sweeps of expired keys,
// so keys nobody reads again do not pile up without a goroutine.
const sweepEvery = 1024

type memoryEntry struct {
	val []byte
	exp time.Time // zero: never
}

// NewMemory returns an empty store whose keys are kept under prefix (so
// both backends show the same keys); now nil means time.Now.
func NewMemory(now func() time.Time, prefix string) *Memory {
	if now == nil {
		now = time.Now
	}
	return &Memory{now: now, prefix: prefix, m: make(map[string]memoryEntry)}
}

func (s *Memory) expiry(ttl time.Duration) time.Time {
	if ttl <= 0 {
		return time.Time{}
	}
	return s.now().Add(ttl)
}

// live returns the entry under the full key, dropping it when expired.
// s.mu is held.
func (s *Memory) live(key string) (memoryEntry, bool) {
	e, ok := s.m[key]
	if ok && !e.exp.IsZero() && !s.now().Before(e.exp) {
		delete(s.m, key)
		return memoryEntry{}, false
	}
	return e, ok
}

// put stores an entry under the full key and sweeps now and then. s.mu is
// held.
func (s *Memory) put(key string, val []byte, ttl time.Duration) {
	s.m[key] = memoryEntry{val: bytes.Clone(val), exp: s.expiry(ttl)}
	s.writes++
	if s.writes%sweepEvery == 0 {
		for k := range s.m {
			s.live(k)
		}
	}
}

// Get implements Store.
func (s *Memory) Get(_ context.Context, key string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.live(s.prefix + key)
	if !ok {
		return nil, ErrNotFound
	}
	return bytes.Clone(e.val), nil
}

// Set implements Store.
func (s *Memory) Set(_ context.Context, key string, val []byte, ttl time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.put(s.prefix+key, val, ttl)
	return nil
}

// SetNX implements Store.
func (s *Memory) SetNX(_ context.Context, key string, val []byte, ttl time.Duration) (bool, error) {
	return s.setIf(key, false, val, ttl), nil
}

// SetXX implements Store.
func (s *Memory) SetXX(_ context.Context, key string, val []byte, ttl time.Duration) (bool, error) {
	return s.setIf(key, true, val, ttl), nil
}

// setIf stores val when the key's presence is exists.
func (s *Memory) setIf(key string, exists bool, val []byte, ttl time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	key = s.prefix + key
	if _, ok := s.live(key); ok != exists {
		return false
	}
	s.put(key, val, ttl)
	return true
}

// GetDel implements Store.
func (s *Memory) GetDel(_ context.Context, key string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key = s.prefix + key
	e, ok := s.live(key)
	if !ok {
		return nil, ErrNotFound
	}
	delete(s.m, key)
	return e.val, nil
}

// CompareAndSwap implements Store.
func (s *Memory) CompareAndSwap(_ context.Context, key string, old, val []byte, ttl time.Duration) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key = s.prefix + key
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
func (s *Memory) Del(_ context.Context, keys ...string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		delete(s.m, s.prefix+k)
	}
	return nil
}

// Expire implements Store.
func (s *Memory) Expire(_ context.Context, key string, ttl time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	key = s.prefix + key
	if e, ok := s.live(key); ok {
		e.exp = s.expiry(ttl)
		s.m[key] = e
	}
	return nil
}

// Scan implements Store, in key order.
func (s *Memory) Scan(ctx context.Context, prefix string, fn func(string) error) error {
	s.mu.Lock()
	var keys []string
	for k := range s.m {
		if _, ok := s.live(k); ok && strings.HasPrefix(k, s.prefix+prefix) {
			keys = append(keys, strings.TrimPrefix(k, s.prefix))
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

// Ping always succeeds: the store is this process.
func (s *Memory) Ping(context.Context) error { return nil }

// Close does nothing.
func (s *Memory) Close() error { return nil }

// Redis keeps the records in Redis under a key prefix, so that every
// gateway using the same Redis and prefix sees the same records.
type Redis struct {
	c      redis.UniversalClient
	prefix string
	wrap   func(op string, err error) error
}

// NewRedis returns a store on c (which the caller closes) with every key
// under prefix. wrap turns a Redis failure of op into the caller's error;
// nil wraps it as "kv: op: err".
func NewRedis(c redis.UniversalClient, prefix string, wrap func(op string, err error) error) *Redis {
	if wrap == nil {
		wrap = func(op string, err error) error { return fmt.Errorf("kv: %s: %w", op, err) }
	}
	return &Redis{c: c, prefix: prefix, wrap: wrap}
}

// fail wraps a non-nil err.
func (s *Redis) fail(op string, err error) error {
	if err == nil {
		return nil
	}
	return s.wrap(op, err)
}

// Get implements Store.
func (s *Redis) Get(ctx context.Context, key string) ([]byte, error) {
	b, err := s.c.Get(ctx, s.prefix+key).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, ErrNotFound
	}
	return b, s.fail("get", err)
}

// Set implements Store.
func (s *Redis) Set(ctx context.Context, key string, val []byte, ttl time.Duration) error {
	return s.fail("set", s.c.Set(ctx, s.prefix+key, val, ttl).Err())
}

// SetNX implements Store.
func (s *Redis) SetNX(ctx context.Context, key string, val []byte, ttl time.Duration) (bool, error) {
	return s.setArgs(ctx, "NX", key, val, ttl)
}

// SetXX implements Store.
func (s *Redis) SetXX(ctx context.Context, key string, val []byte, ttl time.Duration) (bool, error) {
	return s.setArgs(ctx, "XX", key, val, ttl)
}

func (s *Redis) setArgs(ctx context.Context, mode, key string, val []byte, ttl time.Duration) (bool, error) {
	err := s.c.SetArgs(ctx, s.prefix+key, val, redis.SetArgs{Mode: mode, TTL: ttl}).Err()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	if err != nil {
		return false, s.wrap("set"+strings.ToLower(mode), err)
	}
	return true, nil
}

// GetDel implements Store.
func (s *Redis) GetDel(ctx context.Context, key string) ([]byte, error) {
	b, err := s.c.GetDel(ctx, s.prefix+key).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, ErrNotFound
	}
	return b, s.fail("getdel", err)
}

// casScript swaps (or deletes) a key only while it holds the expected
// value.
var casScript = redis.NewScript(`
if redis.call("GET", KEYS[1]) ~= ARGV[1] then return 0 end
if ARGV[3] == "del" then redis.call("DEL", KEYS[1]) return 1 end
local ttl = tonumber(ARGV[4])
if ttl > 0 then redis.call("SET", KEYS[1], ARGV[2], "PX", ttl) else redis.call("SET", KEYS[1], ARGV[2]) end
return 1`)

// CompareAndSwap implements Store.
func (s *Redis) CompareAndSwap(ctx context.Context, key string, old, val []byte, ttl time.Duration) (bool, error) {
	op := "set"
	if val == nil {
		op = "del"
	}
	ms := ttl.Milliseconds()
	if ttl > 0 && ms == 0 {
		ms = 1 // under a millisecond is still a time to live, as go-redis's SET rounds it
	}
	n, err := casScript.Run(ctx, s.c, []string{s.prefix + key}, old, val, op, ms).Int()
	return n == 1, s.fail("compare and swap", err)
}

// Del implements Store.
func (s *Redis) Del(ctx context.Context, keys ...string) error {
	if len(keys) == 0 {
		return nil
	}
	full := make([]string, len(keys))
	for i, k := range keys {
		full[i] = s.prefix + k
	}
	return s.fail("del", s.c.Del(ctx, full...).Err())
}

// Expire implements Store. A ttl of 0 makes the key permanent, as in
// Memory (PEXPIRE 0 would delete it).
func (s *Redis) Expire(ctx context.Context, key string, ttl time.Duration) error {
	if ttl <= 0 {
		return s.fail("persist", s.c.Persist(ctx, s.prefix+key).Err())
	}
	return s.fail("expire", s.c.PExpire(ctx, s.prefix+key, ttl).Err())
}

// Scan implements Store with SCAN MATCH, 200 keys a round trip.
func (s *Redis) Scan(ctx context.Context, prefix string, fn func(string) error) error {
	it := s.c.Scan(ctx, 0, escapeGlob(s.prefix+prefix)+"*", 200).Iterator()
	for it.Next(ctx) {
		if err := fn(strings.TrimPrefix(it.Val(), s.prefix)); err != nil {
			return err
		}
	}
	return s.fail("scan", it.Err())
}

// Ping checks that Redis answers.
func (s *Redis) Ping(ctx context.Context) error {
	return s.fail("ping", s.c.Ping(ctx).Err())
}

// Close does nothing: the caller owns the client.
func (s *Redis) Close() error { return nil }

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
	_ Store = (*Memory)(nil)
	_ Store = (*Redis)(nil)
)
