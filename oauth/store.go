package oauth

import (
	"context"
	"crypto/tls"
	"net"
	"strconv"

	"github.com/codemode-gateway/caddy-codemode/internal/kv"
	"github.com/redis/go-redis/v9"
)

// kvStore is where the server keeps its records: internal/kv's memory or
// Redis store under the server's key prefix, Get and GetDel answering
// errNotFound for a missing or expired key.
type kvStore interface {
	kv.Store
	Ping(ctx context.Context) error
	Close() error
}

// storageErr is a Redis failure as the server reports it: 503 STORAGE.
func storageErr(op string, err error) error {
	return newError(CodeStorage, 503, "token storage "+op, err)
}

// ownedRedis is a Redis store on a client the server dialled itself, so
// closing the store closes the client.
type ownedRedis struct {
	*kv.Redis
	c redis.UniversalClient
}

func (s ownedRedis) Close() error { return s.c.Close() }

// newRedisStore returns a store on cfg.Client (the caller's) or on a client
// dialled from cfg (closed with the store), every key under prefix, and
// the counts of registered clients and of pending authorizations in the
// same Redis.
func newRedisStore(cfg TokenStorageConfig, prefix string) (kvStore, registrations, registrations) {
	if cfg.Client != nil {
		return kv.NewRedis(cfg.Client, prefix, storageErr), redisRegistrations{cfg.Client, prefix + keyRegistrations, "registered clients"}, redisRegistrations{cfg.Client, prefix + keyPendings, "pending authorizations"}
	}
	host, port := cfg.Host, cfg.Port
	if host == "" {
		host = "localhost"
	}
	if port == 0 {
		port = 6379
	}
	// A caller's deadline bounds a read too, as on the caddymodules and
	// guard clients: without ContextTimeoutEnabled go-redis keeps to its own
	// 3 s read timeout whatever the request's context says.
	opts := &redis.Options{Addr: net.JoinHostPort(host, strconv.Itoa(port)), Password: cfg.Password, ContextTimeoutEnabled: true}
	if cfg.TLS {
		opts.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, ServerName: host}
	}
	c := redis.NewClient(opts)
	return ownedRedis{kv.NewRedis(c, prefix, storageErr), c}, redisRegistrations{c, prefix + keyRegistrations, "registered clients"}, redisRegistrations{c, prefix + keyPendings, "pending authorizations"}
}
