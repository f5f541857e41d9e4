package broker

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/codemode-gateway/caddy-codemode/guard/redistest"
)

// outageOwnerTimeout is the owner timeout of the outage tests. A gateway
// judges the others an owner and a storage timeout after it reaches the
// store again, and the others must have renewed by then; but a go-redis
// client whose dials failed as often as its pool size (a cut of a second
// or more, longer under load) dials again only from a probe that retries
// once a second, so each gateway comes back at its own moment within that
// second. With 300 ms the first one back declared the other lost (409
// SESSION_FINISHED for its answer, 1 run in 12 at load 20-25); this
// leaves twice the probe's interval. Production's default is 15 s.
const outageOwnerTimeout = 2 * time.Second

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
	const ownerTimeout = outageOwnerTimeout
	clients := [2]*redistest.Cuttable{redistest.NewCuttable(t, srv.Addr), redistest.NewCuttable(t, srv.Addr)}
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
		s, id, callID := promptSession(t, urls[i], 30000)
		sessions[i] = waiting{s, id, callID}
	}

	// A third gateway with a waiting session, which stops during the outage.
	c := redistest.NewCuttable(t, srv.Addr)
	stopped, cSrv := newTestBroker(t, func(o *BrokerOptions) {
		onRedis(c, prefix, ownerTimeout)(o)
		o.StorageTimeout = 200 * time.Millisecond
	})
	_, stoppedID, _ := waitingSession(t, cSrv.URL)

	for _, c := range append(clients[:], c) {
		c.SetCut(true)
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
		c.SetCut(false)
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
			_, _, sess := do(t, http.MethodGet, other+"/sessions/"+w.id, nil, nil)
			t.Errorf("session of gateway %d answered on the other after the outage: %d %s (the session: %s)", i, code, body, sess)
			continue
		}
		expectResult(t, w.s, `"got Ada"`)
	}
}

// TestGatewayStartedAfterStoreOutage: a gateway started while another is
// still cut off from the store (its liveness lapsed, its process alive)
// does not judge it at once: a tool result posted to the new gateway is
// stored, and the session completes with it when its own gateway reaches
// the store again. A new gateway judges others an owner timeout after it
// starts, as after an outage.
func TestGatewayStartedAfterStoreOutage(t *testing.T) {
	srv := redistest.Start(t)
	prefix := redistest.Prefix(t)
	const ownerTimeout = outageOwnerTimeout
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { rdb.Close() })
	c := redistest.NewCuttable(t, srv.Addr)
	a, aSrv := newTestBroker(t, func(o *BrokerOptions) {
		onRedis(c, prefix, ownerTimeout)(o)
		o.StorageTimeout = 200 * time.Millisecond
	})
	a.answerPoll = 50 * time.Millisecond
	s, id, callID := promptSession(t, aSrv.URL, 30000)

	c.SetCut(true)
	waitUntil(t, "A's liveness to lapse", func() bool { return rdb.Exists(context.Background(), prefix+"owner:"+a.owner).Val() == 0 })
	_, bSrv := newTestBroker(t, onRedis(rdb, prefix, ownerTimeout))
	code, _, body := do(t, http.MethodPost, bSrv.URL+"/sessions/"+id+"/tool-result", map[string]any{"callId": callID, "result": "Ada"}, nil)
	if code != http.StatusOK {
		t.Fatalf("answer on a gateway started during A's outage: %d %s", code, body)
	}
	c.SetCut(false)
	expectResult(t, s, `"got Ada"`)
}
