package caddymodules

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/codemode-gateway/caddy-codemode/guard"
)

func init() {
	caddy.RegisterModule(MemoryStorage{})
	caddy.RegisterModule(RedisStorage{})
}

// Storage is a `codemode.storage.*` module: where the guard's counters and
// tickets, the broker's sessions and the authorization server's codes and
// tokens live. The app's `storage` is used by every area that does not name
// its own. A module for another Redis topology (sentinel, cluster) only has
// to hand out a redis.UniversalClient.
type Storage interface {
	// Backend describes the provisioned storage.
	Backend() StorageBackend
}

// StorageBackend is what the areas build on.
type StorageBackend struct {
	// Component is the key of the shared backend in the component pool (the
	// Redis client), which every component built on this storage retains;
	// empty for in-process state.
	Component string
	// Redis is the client, or nil for in-process state.
	Redis redis.UniversalClient
	// KeyPrefix is put before every key; each area appends its own part
	// ("guard:", "broker:", "auth:").
	KeyPrefix string
	// FailureMode is what rate and concurrency limits do while the storage
	// is unreachable: "open" (let requests through) or "closed" (refuse
	// them with 503 STORAGE_UNAVAILABLE).
	FailureMode string
}

// Storage module names and the key parts each area adds to the prefix.
const (
	storageMemory = "memory"
	storageRedis  = "redis"

	DefaultStorageKeyPrefix = "codemode:"
	guardKeyPart            = "guard:"
	brokerKeyPart           = "broker:"
	authKeyPart             = "auth:"
)

// key is the part of a dependent component's key that names its storage:
// the backend, prefix and failure mode.
func (b StorageBackend) key() string {
	c := b.Component
	if c == "" {
		c = storageMemory
	}
	return c + "|" + b.KeyPrefix + "|" + b.FailureMode
}

// MemoryStorage keeps state in this Caddy process: it survives config
// reloads, not restarts, and is not shared with other gateways. It is the
// default.
type MemoryStorage struct{}

// CaddyModule returns the Caddy module information.
func (MemoryStorage) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "codemode.storage.memory",
		New: func() caddy.Module { return new(MemoryStorage) },
	}
}

// Backend implements Storage: in-process state does not fail.
func (MemoryStorage) Backend() StorageBackend {
	return StorageBackend{KeyPrefix: DefaultStorageKeyPrefix, FailureMode: guard.FailOpen}
}

// RedisStorage keeps state in a Redis server shared by every gateway that
// uses it with the same key prefix: rate limits hold across gateways, any
// gateway answers a session's tool results, tokens survive restarts. One
// connection pool serves every area using the same settings.
//
// String values may use placeholders such as {env.REDIS_PASSWORD}.
type RedisStorage struct {
	// Address is the server's host:port. Default 127.0.0.1:6379.
	Address string `json:"address,omitempty"`
	// DB is the database number. Default 0.
	DB int `json:"db,omitempty"`
	// Username authenticates with Redis 6 ACLs. Default none (the
	// `default` user).
	Username string `json:"username,omitempty"`
	// Password authenticates the connection. Default none. Never logged.
	Password string `json:"password,omitempty"`
	// TLS connects over TLS when set. Default: plain TCP.
	TLS *RedisTLS `json:"tls,omitempty"`
	// KeyPrefix is put before every key and pub/sub channel; gateways that
	// share state use the same prefix. The guard adds "guard:", the broker
	// "broker:" and the authorization server "auth:". Default "codemode:".
	KeyPrefix string `json:"key_prefix,omitempty"`
	// PoolSize is the most connections to the server. Default 10 per CPU.
	PoolSize int `json:"pool_size,omitempty"`
	// DialTimeout bounds connecting. Default 1s.
	DialTimeout caddy.Duration `json:"dial_timeout,omitempty"`
	// Timeout bounds reading or writing one command. Default 500ms: a
	// rate-limit check must not hold a request long while Redis is unwell.
	Timeout caddy.Duration `json:"timeout,omitempty"`
	// FailureMode is what rate and concurrency limits do while Redis is
	// unreachable: "open" lets requests through (logged once per outage),
	// "closed" refuses them with 503 STORAGE_UNAVAILABLE. Sessions and
	// tokens cannot work without Redis either way. Default "open".
	FailureMode string `json:"failure_mode,omitempty"`

	key    string // of the client component
	client redis.UniversalClient
}

// RedisTLS configures TLS to Redis.
type RedisTLS struct {
	// ServerName is the name the server certificate must carry. Default:
	// the host of Address.
	ServerName string `json:"server_name,omitempty"`
	// CAFile is a PEM file of the certificate authorities to trust.
	// Default: the system's.
	CAFile string `json:"ca_file,omitempty"`
}

// Redis defaults.
const (
	DefaultRedisAddress     = "127.0.0.1:6379"
	DefaultRedisDialTimeout = time.Second
	DefaultRedisTimeout     = 500 * time.Millisecond
)

// CaddyModule returns the Caddy module information.
func (RedisStorage) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "codemode.storage.redis",
		New: func() caddy.Module { return new(RedisStorage) },
	}
}

// replacePlaceholders resolves {env.*}, {file.*} and the other global
// placeholders in every string setting.
func (r *RedisStorage) replacePlaceholders() {
	repl := caddy.NewReplacer()
	for _, p := range []*string{&r.Address, &r.Username, &r.Password, &r.KeyPrefix} {
		*p = repl.ReplaceAll(*p, "")
	}
	if r.TLS != nil {
		t := *r.TLS // the config's own value stays as written
		t.ServerName = repl.ReplaceAll(t.ServerName, "")
		t.CAFile = repl.ReplaceAll(t.CAFile, "")
		r.TLS = &t
	}
}

// Provision resolves placeholders, applies defaults and acquires the shared
// client.
func (r *RedisStorage) Provision(ctx caddy.Context) error {
	written := r.Address
	r.replacePlaceholders()
	if written != "" && r.Address == "" {
		// `storage redis {env.REDIS_ADDR}` with the variable unset must not
		// fall back to a local Redis that other gateways do not share.
		return fmt.Errorf("codemode.storage.redis: address %q is empty once its placeholders are resolved (is the environment variable set?)", written)
	}
	if r.Address == "" {
		r.Address = DefaultRedisAddress
	}
	if r.KeyPrefix == "" {
		r.KeyPrefix = DefaultStorageKeyPrefix
	}
	if r.FailureMode == "" {
		r.FailureMode = guard.FailOpen
	}
	if r.DialTimeout == 0 {
		r.DialTimeout = caddy.Duration(DefaultRedisDialTimeout)
	}
	if r.Timeout == 0 {
		r.Timeout = caddy.Duration(DefaultRedisTimeout)
	}
	if err := r.Validate(); err != nil {
		return err
	}
	// The client depends on the connection settings only, so areas that
	// differ in key prefix or failure mode share one connection pool.
	conn := *r
	conn.KeyPrefix, conn.FailureMode = "", ""
	key, err := componentKey("redis", conn)
	if err != nil {
		return err
	}
	logger := ctx.Logger()
	client, err := acquire(key, func() (redis.UniversalClient, func() error, error) {
		opts, err := r.options()
		if err != nil {
			return nil, nil, err
		}
		opts.ClientName = redisClientName(key, redisClients.Add(1))
		pingAtStart(opts, logger)
		c := redis.NewClient(opts)
		return c, c.Close, nil
	})
	if err != nil {
		return fmt.Errorf("codemode.storage.redis: %w", err)
	}
	r.key, r.client = key, client
	return nil
}

// redisStartPingLimit bounds the ping a new client sends at start, whatever
// dial_timeout says: the ping only decides a warning, and it holds the
// config load (a reload's admin request included) while it waits.
const redisStartPingLimit = 5 * time.Second

// pingAtStart pings Redis once with a client of its own, whose dial, read
// and write timeouts are twice dial_timeout at most redisStartPingLimit
// (go-redis bounds a read by the client's timeout, not by a context), and
// warns with the code STORAGE_UNAVAILABLE when Redis does not answer: the
// areas using it apply their failure behaviour until it does. It reports
// whether Redis answered.
func pingAtStart(opts *redis.Options, logger *zap.Logger) bool {
	wait := min(2*opts.DialTimeout, redisStartPingLimit)
	o := *opts
	o.DialTimeout, o.ReadTimeout, o.WriteTimeout = min(o.DialTimeout, wait), wait, wait
	o.PoolSize, o.MinIdleConns, o.MaxRetries = 1, 0, -1
	c := redis.NewClient(&o)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	err := c.Ping(ctx).Err()
	if err == nil {
		return true
	}
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
		err = fmt.Errorf("no answer within %v: %w", wait, err)
	}
	logger.Warn("redis is unreachable at start; areas using it apply their failure behaviour until it answers",
		zap.String("code", guard.CodeStorageUnavailable), zap.String("address", o.Addr), zap.Duration("waited", wait), zap.Error(err))
	return false
}

// redisClients counts the clients this process built.
var redisClients atomic.Int64

// redisClientName names the connections of the n-th client, built for the
// component key (CLIENT LIST shows it), so that an operator, and the reload
// tests, can tell whose connections they are.
func redisClientName(key string, n int64) string {
	return fmt.Sprintf("codemode-%s-%d", strings.TrimPrefix(key, "redis:")[:12], n)
}

// options are the client options; go-redis retries once and fails fast, so
// the failure mode answers while Redis is down. A caller's context deadline
// bounds a read and a write too (ContextTimeoutEnabled), not only the dial
// and the wait for a connection: without it, the broker's storage_timeout
// did not bound a read from a Redis that stopped answering, which waited
// for timeout however short storage_timeout was.
func (r *RedisStorage) options() (*redis.Options, error) {
	timeout := time.Duration(r.Timeout)
	o := &redis.Options{
		Addr: r.Address, Username: r.Username, Password: r.Password, DB: r.DB, PoolSize: r.PoolSize,
		DialTimeout: time.Duration(r.DialTimeout), ReadTimeout: timeout, WriteTimeout: timeout,
		PoolTimeout: 2 * timeout, MaxRetries: 1, DialerRetries: 1, ContextTimeoutEnabled: true,
	}
	if t := r.TLS; t != nil {
		tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
		if tc.ServerName == "" {
			if host, _, err := net.SplitHostPort(r.Address); err == nil {
				tc.ServerName = host
			}
		}
		if t.CAFile != "" {
			pem, err := os.ReadFile(t.CAFile)
			if err != nil {
				return nil, fmt.Errorf("tls: ca_file: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("tls: ca_file %q: no PEM certificate", t.CAFile)
			}
			tc.RootCAs = pool
		}
		o.TLSConfig = tc
	}
	return o, nil
}

// Validate checks the settings.
func (r *RedisStorage) Validate() error {
	if _, _, err := net.SplitHostPort(r.Address); err != nil {
		return fmt.Errorf("codemode.storage.redis: address %q: %w", r.Address, err)
	}
	if r.DB < 0 || r.PoolSize < 0 || r.DialTimeout < 0 || r.Timeout < 0 {
		return errors.New("codemode.storage.redis: db, pool_size and timeouts must not be negative")
	}
	switch r.FailureMode {
	case "", guard.FailOpen, guard.FailClosed:
	default:
		return fmt.Errorf("codemode.storage.redis: failure_mode %q: want open or closed", r.FailureMode)
	}
	return nil
}

// Cleanup releases the shared client.
func (r *RedisStorage) Cleanup() error {
	key := r.key
	r.key, r.client = "", nil
	return release(key)
}

// Backend implements Storage.
func (r *RedisStorage) Backend() StorageBackend {
	return StorageBackend{Component: r.key, Redis: r.client, KeyPrefix: r.KeyPrefix, FailureMode: r.FailureMode}
}

// loadStorage loads the storage module in field (a `…_raw` field of owner
// tagged with namespace codemode.storage), or returns def when the field is
// empty.
func loadStorage(ctx caddy.Context, owner any, field string, raw json.RawMessage, def Storage) (Storage, error) {
	if len(raw) == 0 {
		return def, nil
	}
	mod, err := ctx.LoadModule(owner, field)
	if err != nil {
		return nil, fmt.Errorf("loading storage module: %w", err)
	}
	return mod.(Storage), nil
}

// guardStorageOn acquires the guard's counters and tickets on s under
// prefix, a component shared by every guard (throttle, codemode_guard,
// meta-tool and token-endpoint limits) with the same storage and prefix, so
// that they survive a config reload. The caller releases the returned key.
func guardStorageOn(s StorageBackend, prefix string, logger *zap.Logger) (string, guard.Storage, error) {
	key, err := componentKey("guard-storage", prefix, s.key())
	if err != nil {
		return "", nil, err
	}
	st, err := acquire(key, func() (guard.Storage, func() error, error) {
		backend := s.Component
		if backend == "" {
			m := guard.NewMemoryStorage(nil)
			return m, m.Close, nil
		}
		if err := retain(backend); err != nil {
			return nil, nil, err
		}
		rs, err := guard.NewRedisStorage(guard.StorageConfig{Provider: guard.ProviderRedis, Client: s.Redis}, prefix,
			&guard.RedisStorageOptions{Logger: logger})
		if err != nil {
			_ = release(backend)
			return nil, nil, err
		}
		return rs, func() error { return errors.Join(rs.Close(), release(backend)) }, nil
	})
	if err != nil {
		return "", nil, err
	}
	return key, st, nil
}

// Interface guards
var (
	_ Storage               = MemoryStorage{}
	_ Storage               = (*RedisStorage)(nil)
	_ caddy.Provisioner     = (*RedisStorage)(nil)
	_ caddy.Validator       = (*RedisStorage)(nil)
	_ caddy.CleanerUpper    = (*RedisStorage)(nil)
	_ caddyfile.Unmarshaler = (*RedisStorage)(nil)
	_ caddyfile.Unmarshaler = (*MemoryStorage)(nil)
)
