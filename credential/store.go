package credential

import (
	"fmt"
	"time"

	"github.com/codemode-gateway/caddy-codemode/internal/kv"
	"github.com/redis/go-redis/v9"
)

// ErrNotFound is what a Store returns for a missing or expired key.
var ErrNotFound = kv.ErrNotFound

// Store is the key-value surface the vault and the connection pages keep
// their records in (internal/kv, the one the authorization server uses
// too). Keys arrive without a prefix; each store adds its own. A ttl of 0
// means no expiry.
type Store = kv.Store

// MemoryStore keeps everything in this process, expiring keys by its
// clock. It is for one gateway (and tests).
type MemoryStore = kv.Memory

// NewMemoryStore returns an empty store; now nil means time.Now.
func NewMemoryStore(now func() time.Time) *MemoryStore { return kv.NewMemory(now, "") }

// RedisStore keeps the records in Redis under a prefix, so every gateway
// using the same Redis and prefix sees the same connections.
type RedisStore = kv.Redis

// NewRedisStore returns a store on c (which the caller closes) with every
// key under prefix.
func NewRedisStore(c redis.UniversalClient, prefix string) *RedisStore {
	return kv.NewRedis(c, prefix, func(op string, err error) error {
		return fmt.Errorf("credential store: %s: %w", op, err)
	})
}
