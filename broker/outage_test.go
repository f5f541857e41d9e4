package broker

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/codemode-gateway/caddy-codemode/guard/redistest"
)

// cuttableClient is a client of the real Redis at addr whose connections a
// test can cut and refuse: a network partition between one gateway and its
// store, or a failover that outlasts the owner timeout, while Redis keeps
// its keys (and expires them on its own clock).
type cuttableClient struct {
	*redis.Client
	mu    sync.Mutex
	cut   bool
	conns []net.Conn
}

func newCuttableClient(t *testing.T, addr string) *cuttableClient {
	c := &cuttableClient{}
	c.Client = redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.cut {
				return nil, errors.New("test: partitioned from redis")
			}
			conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err == nil {
				c.conns = append(c.conns, conn)
			}
			return conn, err
		}})
	t.Cleanup(func() { c.Client.Close() })
	return c
}

func (c *cuttableClient) setCut(cut bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cut = cut
	if cut {
		for _, conn := range c.conns {
			conn.Close()
		}
		c.conns = nil
	}
}

// TestStoreOutageForEveryGateway: when the store is out of reach for every
// gateway longer than the owner timeout (Redis stopped or failing over, a
// partition of all gateways from it), every owner key expires, yet no
// gateway stopped. The first gateway to reach the store again must not
// declare the others' running sessions lost before they could renew: each
// session waiting for its caller completes when answered on the other
// gateway. (Before, whichever gateway beat first ended the other's sessions
// OWNER_LOST, and their gateway aborted them.) A gateway that stopped during
// the outage is still declared lost once the others have had time to renew.
func TestStoreOutageForEveryGateway(t *testing.T) {
	srv := redistest.Start(t)
	prefix := redistest.Prefix(t)
	const ownerTimeout = 300 * time.Millisecond
	clients := [2]*cuttableClient{newCuttableClient(t, srv.Addr), newCuttableClient(t, srv.Addr)}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { rdb.Close() })
	var brokers [2]*Broker
	var urls [2]string
	for i, c := range clients {
		b, s := newTestBroker(t, func(o *BrokerOptions) {
			onRedis(c, prefix, ownerTimeout)(o)
			o.StorageTimeout = 200 * time.Millisecond
		})
		b.answerPoll = 50 * time.Millisecond
		brokers[i], urls[i] = b, s.URL
	}
	type waiting struct {
		s          *stream
		id, callID string
	}
	var sessions [2]waiting
	for i := range sessions {
		s := startExecute(t, urls[i], map[string]any{"code": `return "got " + await callTool("client:prompt", {question: "?"})`, "timeout": 30000}, nil)
		var sess Session
		s.next().decode(t, &sess)
		var call ToolCallPayload
		s.next().decode(t, &call)
		sessions[i] = waiting{s, sess.ID, call.CallID}
	}

	// A third gateway with a waiting session, which stops during the outage.
	c := newCuttableClient(t, srv.Addr)
	stopped, cSrv := newTestBroker(t, func(o *BrokerOptions) {
		onRedis(c, prefix, ownerTimeout)(o)
		o.StorageTimeout = 200 * time.Millisecond
	})
	_, stoppedID, _ := waitingSession(t, cSrv.URL)

	for _, c := range append(clients[:], c) {
		c.setCut(true)
	}
	crash(stopped)
	waitUntil(t, "both gateways to see the store gone", func() bool {
		a, _, _ := brokers[0].StorageStatus()
		b, _, _ := brokers[1].StorageStatus()
		return !a && !b
	})
	waitUntil(t, "both owner keys to expire", func() bool {
		return rdb.Exists(context.Background(), prefix+"owner:"+brokers[0].owner, prefix+"owner:"+brokers[1].owner).Val() == 0
	})
	for _, c := range clients {
		c.setCut(false)
	}
	waitUntil(t, "both gateways to reach the store again", func() bool {
		a, _, _ := brokers[0].StorageStatus()
		b, _, _ := brokers[1].StorageStatus()
		return a && b
	})
	waitUntil(t, "the stopped gateway's session to end OWNER_LOST", func() bool {
		code, _, body := do(t, http.MethodGet, urls[0]+"/sessions/"+stoppedID, nil, nil)
		return code == 200 && contains(body, `"code":"OWNER_LOST"`)
	})
	for i, w := range sessions {
		other := urls[1-i]
		code, _, body := do(t, http.MethodPost, other+"/sessions/"+w.id+"/tool-result", map[string]any{"callId": w.callID, "result": "Ada"}, nil)
		if code != http.StatusOK {
			t.Errorf("session of gateway %d answered on the other after the outage: %d %s", i, code, body)
			continue
		}
		evs := w.s.rest()
		var res ResultPayload
		evs[len(evs)-1].decode(t, &res)
		if evs[len(evs)-1].Type != EventResult || string(res.Result) != `"got Ada"` {
			t.Errorf("session of gateway %d: events %s, result %s", i, types(evs), res.Result)
		}
	}
}
