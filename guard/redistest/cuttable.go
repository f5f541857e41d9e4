package redistest

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Cuttable is a client of a real Redis whose connections a test can cut
// and refuse, then let through again: a network partition between one
// gateway and its store, or a failover that outlasts a liveness timeout,
// while the server keeps its keys and expires them on its own clock.
type Cuttable struct {
	*redis.Client
	mu    sync.Mutex
	cut   bool
	conns []net.Conn
}

// NewCuttable returns a client of the server at addr (no retries, the
// caller's deadline applied to reads), closed when the test ends.
func NewCuttable(tb testing.TB, addr string) *Cuttable {
	c := &Cuttable{}
	c.Client = redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.cut {
				return nil, errors.New("redistest: partitioned from redis")
			}
			conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err == nil {
				c.conns = append(c.conns, conn)
			}
			return conn, err
		}})
	tb.Cleanup(func() { _ = c.Client.Close() })
	return c
}

// SetCut closes every connection and refuses new ones (true), or lets them
// through again (false).
func (c *Cuttable) SetCut(cut bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cut = cut
	if cut {
		for _, conn := range c.conns {
			_ = conn.Close()
		}
		c.conns = nil
	}
}
