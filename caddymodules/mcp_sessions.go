package caddymodules

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// mcpSessionDirectory shares the MCP sessions of the handshake revisions
// (2025-11-25 and older) among gateways behind a load balancer without
// affinity. A go-sdk session lives in the memory of the gateway that
// answered its initialize; that gateway records the session id in Redis
// (beside the broker's sessions) with the URL where other gateways reach
// it, and renews its own liveness. A gateway that gets a request for a
// session it does not hold forwards it there (the answer, SSE streams
// included, is streamed back); the forwarded request goes through the
// holder's whole route again, authentication included, so nothing is
// trusted on the way. When the holder is gone (its liveness lapsed, or it
// does not answer) the request gets 404 with a JSON-RPC error, on which an
// MCP client starts a new session on any gateway: the clean fallback.
//
// Keys: {prefix}mcp:session:{id} -> {"gw":…,"url":…} (expires after the
// session's idle timeout, renewed while used), {prefix}mcp:gateway:{gw} ->
// "1" (expires after mcpGatewayTTL, renewed every third of it).
type mcpSessionDirectory struct {
	rdb     redis.UniversalClient
	prefix  string
	self    string        // this gateway's id, the same across reloads
	idKey   string        // its key in mcpGatewayIDs
	url     string        // where the other gateways reach this handler
	idle    time.Duration // a session's registration lifetime without use
	timeout time.Duration // bound of one Redis operation
	logger  *zap.Logger
	proxy   *httputil.ReverseProxy

	mu    sync.Mutex
	local map[string]time.Time // sessions held here -> last renewal

	// gap is set when a beat fails; judgeAfter (Unix ms) is when this
	// gateway may again report another gone for want of liveness:
	// mcpGatewayTTL and a Redis timeout after its first beat that follows
	// a gap. When Redis was out of reach for every gateway, every liveness
	// lapsed although none stopped; until then a session is forwarded to
	// its holder, which answers or is reported gone when it does not.
	gap        atomic.Bool
	judgeAfter atomic.Int64

	stop chan struct{}
	done chan struct{}
}

// mcpGatewayTTL is how long a gateway's MCP liveness lasts unrenewed: past
// it, its sessions are reported gone and clients start new ones.
var mcpGatewayTTL = 15 * time.Second

// mcpForwardedHeader marks a request forwarded by another gateway: it is
// never forwarded again.
const mcpForwardedHeader = "Codemode-Mcp-Forwarded"

type mcpSessionEntry struct {
	Gateway string `json:"gw"`
	URL     string `json:"url"`
}

// mcpGatewayIDs gives the directories of one endpoint (key prefix and URL)
// in this process one gateway id across config reloads: a reload builds a
// new directory before the old one closes, and the sessions recorded under
// the id stay this gateway's (the new config serves them). The pool counts
// the directories of an id; the last to close withdraws its liveness.
var mcpGatewayIDs = caddy.NewUsagePool()

// mcpGatewayID is a gateway id in mcpGatewayIDs.
type mcpGatewayID string

// Destruct implements caddy.Destructor: an id owns nothing.
func (mcpGatewayID) Destruct() error { return nil }

func acquireMCPGatewayID(key string) string {
	v, _, _ := mcpGatewayIDs.LoadOrNew(key, func() (caddy.Destructor, error) {
		var b [12]byte
		_, _ = rand.Read(b[:])
		return mcpGatewayID(hex.EncodeToString(b[:])), nil
	})
	return string(v.(mcpGatewayID))
}

func newMCPSessionDirectory(rdb redis.UniversalClient, prefix, selfURL string, idle time.Duration, logger *zap.Logger) *mcpSessionDirectory {
	idKey := prefix + "mcp: " + selfURL
	d := &mcpSessionDirectory{rdb: rdb, prefix: prefix + "mcp:", self: acquireMCPGatewayID(idKey), idKey: idKey, url: selfURL,
		idle: idle, timeout: 2 * time.Second, logger: logger, local: map[string]time.Time{},
		stop: make(chan struct{}), done: make(chan struct{})}
	if d.idle <= 0 {
		d.idle = 24 * time.Hour // sessions that never idle out: renewed while used
	}
	d.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			target := pr.In.Context().Value(mcpTargetKey{}).(*url.URL)
			pr.SetURL(target)
			pr.Out.URL.Path, pr.Out.URL.RawPath = target.Path, target.RawPath
			// The holder serves the same site: keep the client's Host, as a
			// load balancer does (its Origin check compares the two).
			pr.Out.Host = pr.In.Host
			pr.Out.Header.Set(mcpForwardedHeader, d.self)
			pr.SetXForwarded()
		},
		FlushInterval: -1, // SSE answers stream as they come
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			d.logger.Warn("the gateway holding an MCP session does not answer; reporting the session gone", zap.Error(err))
			writeJSONRPCError(w, http.StatusNotFound, nil, rpcSessionNotFound,
				"session not found: the gateway holding it does not answer; send initialize without Mcp-Session-Id to start a new one", nil)
		},
	}
	go d.keepAlive()
	return d
}

type mcpTargetKey struct{}

func (d *mcpSessionDirectory) key(id string) string { return d.prefix + "session:" + id }
func (d *mcpSessionDirectory) gw(g string) string   { return d.prefix + "gateway:" + g }

func (d *mcpSessionDirectory) bound() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d.timeout)
}

// keepAlive renews this gateway's liveness and forgets local sessions
// that went unused for their idle time.
func (d *mcpSessionDirectory) keepAlive() {
	defer close(d.done)
	beat := func() {
		ctx, cancel := d.bound()
		defer cancel()
		if err := d.rdb.Set(ctx, d.gw(d.self), "1", mcpGatewayTTL).Err(); err != nil {
			d.gap.Store(true)
			d.logger.Warn("renewing the MCP session directory's liveness", zap.Error(err))
		} else if d.gap.Swap(false) {
			d.judgeAfter.Store(time.Now().Add(mcpGatewayTTL + d.timeout).UnixMilli())
		}
		d.mu.Lock()
		for id, t := range d.local {
			if time.Since(t) > d.idle {
				delete(d.local, id)
			}
		}
		d.mu.Unlock()
	}
	beat()
	t := time.NewTicker(mcpGatewayTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-d.stop:
			if last, _ := mcpGatewayIDs.Delete(d.idKey); last { // not a reload: the gateway stops
				ctx, cancel := d.bound()
				_ = d.rdb.Del(ctx, d.gw(d.self)).Err() // the others report our sessions gone at once
				cancel()
			}
			return
		case <-t.C:
			beat()
		}
	}
}

func (d *mcpSessionDirectory) close() {
	close(d.stop)
	<-d.done
}

// holds reports whether this gateway holds session id, renewing its
// registration once a tenth of its idle time has passed.
func (d *mcpSessionDirectory) holds(id string) bool {
	d.mu.Lock()
	t, ok := d.local[id]
	renew := ok && time.Since(t) > d.idle/10
	if renew {
		d.local[id] = time.Now()
	}
	d.mu.Unlock()
	if renew {
		d.register(id)
	}
	return ok
}

// register records a session this gateway just opened (or renews it).
func (d *mcpSessionDirectory) register(id string) {
	d.mu.Lock()
	d.local[id] = time.Now()
	d.mu.Unlock()
	b, _ := json.Marshal(mcpSessionEntry{Gateway: d.self, URL: d.url})
	ctx, cancel := d.bound()
	defer cancel()
	// The liveness goes with the entry, in the same round trip: keepAlive's
	// first beat runs on its own goroutine, and a session registered before
	// it would be reported gone (and its entry deleted) by the first other
	// gateway asked for it.
	_, err := d.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, d.key(id), b, d.idle)
		p.Set(ctx, d.gw(d.self), "1", mcpGatewayTTL)
		return nil
	})
	if err != nil {
		d.logger.Warn("recording an MCP session; only this gateway can serve it", zap.Error(err))
	}
}

// forget drops a session that ended here (DELETE, or unknown to the go-sdk).
func (d *mcpSessionDirectory) forget(id string) {
	d.mu.Lock()
	delete(d.local, id)
	d.mu.Unlock()
	ctx, cancel := d.bound()
	defer cancel()
	_ = d.rdb.Del(ctx, d.key(id)).Err()
}

// forward serves a request for a session this gateway does not hold: it
// proxies it to the holder, or answers 404 when the holder is gone. It
// returns false when the directory does not know the session (the go-sdk
// answers then).
func (d *mcpSessionDirectory) forward(w http.ResponseWriter, r *http.Request, id string) bool {
	ctx, cancel := d.bound()
	raw, err := d.rdb.Get(ctx, d.key(id)).Bytes()
	var alive int64
	var e mcpSessionEntry
	if err == nil {
		if err = json.Unmarshal(raw, &e); err == nil && e.Gateway != d.self {
			alive, err = d.rdb.Exists(ctx, d.gw(e.Gateway)).Result()
		}
	}
	cancel()
	switch {
	case errors.Is(err, redis.Nil) || e.Gateway == d.self:
		return false
	case err != nil:
		d.logger.Warn("looking up an MCP session in the directory", zap.Error(err))
		writeJSONRPCError(w, http.StatusServiceUnavailable, nil, rpcInternalError, "the session directory is unavailable; retry shortly", nil)
		return true
	case alive == 0 && time.Now().UnixMilli() >= d.judgeAfter.Load():
		ctx, cancel := d.bound()
		_ = d.rdb.Del(ctx, d.key(id)).Err()
		cancel()
		writeJSONRPCError(w, http.StatusNotFound, nil, rpcSessionNotFound,
			"session not found: the gateway holding it is gone; send initialize without Mcp-Session-Id to start a new one", nil)
		return true
	}
	target, err := url.Parse(e.URL)
	if err != nil {
		writeJSONRPCError(w, http.StatusNotFound, nil, rpcSessionNotFound, "session not found", nil)
		return true
	}
	if mw, ok := w.(*mcpWriter); ok {
		r = mw.unstripped(r) // the holder answers the whole batch
	}
	d.proxy.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), mcpTargetKey{}, target)))
	return true
}
