package oauth

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// kvStore is the small key-value surface the server needs. Keys arrive
// without the prefix; each store adds it. Values expire after ttl (0 means
// never). Get and GetDel return errNotFound for a missing or expired key.
type kvStore interface {
	Set(ctx context.Context, key string, val []byte, ttl time.Duration) error
	// SetNX stores val only when key does not exist and reports whether it
	// did: the atomic step behind single use.
	SetNX(ctx context.Context, key string, val []byte, ttl time.Duration) (bool, error)
	// SetXX replaces the value only when key exists and reports whether it
	// did, so an update never resurrects a key deleted meanwhile.
	SetXX(ctx context.Context, key string, val []byte, ttl time.Duration) (bool, error)
	Get(ctx context.Context, key string) ([]byte, error)
	// GetDel returns the value and deletes the key in one atomic step.
	GetDel(ctx context.Context, key string) ([]byte, error)
	Del(ctx context.Context, keys ...string) error
	// Expire sets a new ttl on key; a missing key is not an error.
	Expire(ctx context.Context, key string, ttl time.Duration) error
	Ping(ctx context.Context) error
	Close() error
}

// memoryStore keeps everything in this process, expiring keys by the
// injected clock.
type memoryStore struct {
	now    func() time.Time
	mu     sync.Mutex
	m      map[string]memoryEntry
	writes int
}

type memoryEntry struct {
	val []byte
	exp time.Time // zero: never
}

func newMemoryStore(now func() time.Time) *memoryStore {
	return &memoryStore{now: now, m: make(map[string]memoryEntry)}
}

func (s *memoryStore) expiry(ttl time.Duration) time.Time {
	if ttl <= 0 {
		return time.Time{}
	}
	return s.now().Add(ttl)
}

// live returns the entry under key when it exists and has not expired.
// Callers hold s.mu.
func (s *memoryStore) live(key string) (memoryEntry, bool) {
	e, ok := s.m[key]
	if !ok {
		return e, false
	}
	if !e.exp.IsZero() && !s.now().Before(e.exp) {
		delete(s.m, key)
		return e, false
	}
	return e, true
}

// sweep drops expired entries every 1024 writes so memory stays bounded
// without a goroutine. Callers hold s.mu.
func (s *memoryStore) sweep() {
	s.writes++
	if s.writes%1024 != 0 {
		return
	}
	now := s.now()
	for k, e := range s.m {
		if !e.exp.IsZero() && !now.Before(e.exp) {
			delete(s.m, k)
		}
	}
}

func (s *memoryStore) Set(_ context.Context, key string, val []byte, ttl time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweep()
	s.m[key] = memoryEntry{val: append([]byte(nil), val...), exp: s.expiry(ttl)}
	return nil
}

func (s *memoryStore) SetNX(_ context.Context, key string, val []byte, ttl time.Duration) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.live(key); ok {
		return false, nil
	}
	s.sweep()
	s.m[key] = memoryEntry{val: append([]byte(nil), val...), exp: s.expiry(ttl)}
	return true, nil
}

func (s *memoryStore) SetXX(_ context.Context, key string, val []byte, ttl time.Duration) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.live(key); !ok {
		return false, nil
	}
	s.m[key] = memoryEntry{val: append([]byte(nil), val...), exp: s.expiry(ttl)}
	return true, nil
}

func (s *memoryStore) Get(_ context.Context, key string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.live(key)
	if !ok {
		return nil, errNotFound
	}
	return append([]byte(nil), e.val...), nil
}

func (s *memoryStore) GetDel(_ context.Context, key string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.live(key)
	if !ok {
		return nil, errNotFound
	}
	delete(s.m, key)
	return e.val, nil
}

func (s *memoryStore) Del(_ context.Context, keys ...string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		delete(s.m, k)
	}
	return nil
}

func (s *memoryStore) Expire(_ context.Context, key string, ttl time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.live(key); ok {
		e.exp = s.expiry(ttl)
		s.m[key] = e
	}
	return nil
}

func (s *memoryStore) Ping(context.Context) error { return nil }
func (s *memoryStore) Close() error               { return nil }

// redisStore keeps the records in Redis under a key prefix, so that several
// gateway instances share them.
type redisStore struct {
	c      redis.UniversalClient
	prefix string
	owned  bool // Close closes c
}

func newRedisStore(cfg TokenStorageConfig, prefix string) (*redisStore, error) {
	if cfg.Client != nil {
		return &redisStore{c: cfg.Client, prefix: prefix}, nil
	}
	host, port := cfg.Host, cfg.Port
	if host == "" {
		host = "localhost"
	}
	if port == 0 {
		port = 6379
	}
	opts := &redis.Options{Addr: net.JoinHostPort(host, strconv.Itoa(port)), Password: cfg.Password}
	if cfg.TLS {
		opts.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, ServerName: host}
	}
	return &redisStore{c: redis.NewClient(opts), prefix: prefix, owned: true}, nil
}

func (s *redisStore) k(key string) string { return s.prefix + key }

func storageErr(op string, err error) error {
	return newError(CodeStorage, 503, "token storage "+op, err)
}

func (s *redisStore) Set(ctx context.Context, key string, val []byte, ttl time.Duration) error {
	if err := s.c.Set(ctx, s.k(key), val, ttl).Err(); err != nil {
		return storageErr("set", err)
	}
	return nil
}

func (s *redisStore) SetNX(ctx context.Context, key string, val []byte, ttl time.Duration) (bool, error) {
	err := s.c.SetArgs(ctx, s.k(key), val, redis.SetArgs{Mode: "NX", TTL: ttl}).Err()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	if err != nil {
		return false, storageErr("setnx", err)
	}
	return true, nil
}

func (s *redisStore) SetXX(ctx context.Context, key string, val []byte, ttl time.Duration) (bool, error) {
	err := s.c.SetArgs(ctx, s.k(key), val, redis.SetArgs{Mode: "XX", TTL: ttl}).Err()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	if err != nil {
		return false, storageErr("setxx", err)
	}
	return true, nil
}

func (s *redisStore) Get(ctx context.Context, key string) ([]byte, error) {
	b, err := s.c.Get(ctx, s.k(key)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, errNotFound
	}
	if err != nil {
		return nil, storageErr("get", err)
	}
	return b, nil
}

func (s *redisStore) GetDel(ctx context.Context, key string) ([]byte, error) {
	b, err := s.c.GetDel(ctx, s.k(key)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, errNotFound
	}
	if err != nil {
		return nil, storageErr("getdel", err)
	}
	return b, nil
}

func (s *redisStore) Del(ctx context.Context, keys ...string) error {
	if len(keys) == 0 {
		return nil
	}
	full := make([]string, len(keys))
	for i, k := range keys {
		full[i] = s.k(k)
	}
	if err := s.c.Del(ctx, full...).Err(); err != nil {
		return storageErr("del", err)
	}
	return nil
}

func (s *redisStore) Expire(ctx context.Context, key string, ttl time.Duration) error {
	if err := s.c.PExpire(ctx, s.k(key), ttl).Err(); err != nil {
		return storageErr("expire", err)
	}
	return nil
}

func (s *redisStore) Ping(ctx context.Context) error {
	if err := s.c.Ping(ctx).Err(); err != nil {
		return storageErr("ping", fmt.Errorf("redis: %w", err))
	}
	return nil
}

func (s *redisStore) Close() error {
	if s.owned {
		return s.c.Close()
	}
	return nil
}

// prefixedMemory makes a memory store honour the key prefix too, so both
// backends show the same keys in tests and debugging.
type prefixedMemory struct {
	*memoryStore
	prefix string
}

func (p prefixedMemory) Set(ctx context.Context, key string, val []byte, ttl time.Duration) error {
	return p.memoryStore.Set(ctx, p.prefix+key, val, ttl)
}
func (p prefixedMemory) SetNX(ctx context.Context, key string, val []byte, ttl time.Duration) (bool, error) {
	return p.memoryStore.SetNX(ctx, p.prefix+key, val, ttl)
}
func (p prefixedMemory) SetXX(ctx context.Context, key string, val []byte, ttl time.Duration) (bool, error) {
	return p.memoryStore.SetXX(ctx, p.prefix+key, val, ttl)
}
func (p prefixedMemory) Get(ctx context.Context, key string) ([]byte, error) {
	return p.memoryStore.Get(ctx, p.prefix+key)
}
func (p prefixedMemory) GetDel(ctx context.Context, key string) ([]byte, error) {
	return p.memoryStore.GetDel(ctx, p.prefix+key)
}
func (p prefixedMemory) Del(ctx context.Context, keys ...string) error {
	full := make([]string, len(keys))
	for i, k := range keys {
		full[i] = p.prefix + k
	}
	return p.memoryStore.Del(ctx, full...)
}
func (p prefixedMemory) Expire(ctx context.Context, key string, ttl time.Duration) error {
	return p.memoryStore.Expire(ctx, p.prefix+key, ttl)
}
