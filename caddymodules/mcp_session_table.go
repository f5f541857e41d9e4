package caddymodules

import (
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// mcpSessionTable is this process's record of the MCP sessions of the
// handshake revisions (2025-11-25 and older) that its codemode_mcp handlers
// opened. It bounds them (each idle session holds memory and a goroutine
// in the go-sdk until session_timeout, and initialize is open to anyone),
// and it lets a session outlive a config reload: the go-sdk's session
// table belongs to one handler, which a reload replaces, so without it
// every client of an older revision got 404 after each `caddy reload`.
type mcpSessionTable struct {
	mu        sync.Mutex
	byID      map[string]*mcpSessionRecord
	perClient map[string]int
	swept     time.Time
}

type mcpSessionRecord struct {
	client string           // who opened it: "user:<tenant>/<id>" or "ip:<address>"
	last   time.Time        // last request
	idle   time.Duration    // the go-sdk closes it after this long unused; 0 never
	owner  *mcpSessionOwner // the handler whose go-sdk table holds it, or that adopted it
	server *mcp.Server      // the server holding its go-sdk session; nil once adopted
	// handler is the go-sdk handler holding its go-sdk session (nil once
	// adopted): the client's answers to that session's own requests still
	// go there after a reload (answers).
	handler http.Handler
}

var mcpSessions = &mcpSessionTable{byID: map[string]*mcpSessionRecord{}, perClient: map[string]int{}}

// mcpSessionOwner stands for one codemode_mcp handler (one config's):
// the go-sdk session table that holds a session, gone once the config is
// unloaded.
type mcpSessionOwner struct {
	gone atomic.Bool
	cfg  *App // the handler's config: its other codemode_mcp handlers share it
}

// mcpRoute is where a request for a known session id goes.
type mcpRoute int

const (
	mcpRouteGoSDK   mcpRoute = iota // this handler's go-sdk table holds it, or nobody knows it (404)
	mcpRouteAdopt                   // opened under a config that is gone: served without a go-sdk session
	mcpRouteForeign                 // such a session, asked for by another client: 404, the session stays
	// a session of another config that is not gone yet: during a reload
	// the new config's servers and the old one's answer at once (the old
	// ones the requests under way and on their kept-alive connections),
	// each for sessions the other opened.
	mcpRouteOtherConfig
)

// route tells where a request of client for session id goes, and renews
// the session's last use. A session is bound to its user when it has one;
// one opened without authentication is its id's, whatever the client
// address (addresses change, and another gateway forwarding the request
// has its own), as in the go-sdk.
func (t *mcpSessionTable) route(id, client string, h *mcpSessionOwner) mcpRoute {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	rec := t.byID[id]
	switch {
	case rec == nil:
		return mcpRouteGoSDK
	case rec.idle > 0 && now.Sub(rec.last) > rec.idle:
		t.removeLocked(id, rec) // the go-sdk closed it too
		return mcpRouteGoSDK
	case strings.HasPrefix(rec.client, "user:") && rec.client != client:
		// A signed-in user's session, asked for with another user's token:
		// the go-sdk binds a session to its user only when it authenticates
		// the request itself, which codemode_auth does instead.
		return mcpRouteForeign
	case rec.owner == h && rec.server != nil:
		rec.last = now
		return mcpRouteGoSDK
	case rec.owner != h && !rec.owner.gone.Load() && rec.owner.cfg != h.cfg:
		rec.last = now
		return mcpRouteOtherConfig
	case rec.owner != h && !rec.owner.gone.Load():
		return mcpRouteGoSDK // another handler's of this config (another path)
	default:
		rec.last = now
		return mcpRouteAdopt // adopted already, or now
	}
}

// holds tells whether session id is open in h's go-sdk table.
func (t *mcpSessionTable) holds(id string, h *mcpSessionOwner) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	rec := t.byID[id]
	return rec != nil && rec.owner == h && rec.server != nil
}

// adopt makes h the owner of session id and returns the server still
// holding its old go-sdk session, which nothing else can reach any more
// (nil when there is none).
func (t *mcpSessionTable) adopt(id string, h *mcpSessionOwner) *mcp.Server {
	t.mu.Lock()
	defer t.mu.Unlock()
	rec := t.byID[id]
	if rec == nil {
		return nil
	}
	old := rec.server
	rec.owner, rec.server, rec.handler = h, nil, nil
	return old
}

// answers returns the go-sdk handler still holding session id's go-sdk
// session after its config was unloaded, or nil. A plan of that session
// may be waiting for the client's answer to an elicitation it sent before
// the reload: the answer must reach that session, which a new config's
// temporary one cannot stand in for.
func (t *mcpSessionTable) answers(id string) http.Handler {
	t.mu.Lock()
	defer t.mu.Unlock()
	if rec := t.byID[id]; rec != nil && rec.server != nil && rec.owner.gone.Load() {
		return rec.handler
	}
	return nil
}

// holder returns the owner of session id and the go-sdk handler holding
// its go-sdk session (nil once adopted).
func (t *mcpSessionTable) holder(id string) (*mcpSessionOwner, http.Handler) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if rec := t.byID[id]; rec != nil {
		return rec.owner, rec.handler
	}
	return nil, nil
}

// admit decides whether client may open another session: past
// maxPerClient its least recently used session is dropped (returned, to be
// closed), past maxTotal the initialize is refused. A negative maximum is
// no limit.
func (t *mcpSessionTable) admit(client string, maxTotal, maxPerClient int) (victimID string, victim *mcpSessionRecord, ok bool) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if maxTotal >= 0 && len(t.byID) >= maxTotal && now.Sub(t.swept) >= time.Second {
		t.swept = now
		for id, rec := range t.byID {
			if rec.idle > 0 && now.Sub(rec.last) > rec.idle {
				t.removeLocked(id, rec)
			}
		}
	}
	if maxPerClient >= 0 && t.perClient[client] >= maxPerClient {
		for id, rec := range t.byID {
			if rec.client == client && (victim == nil || rec.last.Before(victim.last)) {
				victimID, victim = id, rec
			}
		}
		if victim != nil {
			t.removeLocked(victimID, victim)
		}
	}
	return victimID, victim, maxTotal < 0 || len(t.byID) < maxTotal
}

func (t *mcpSessionTable) add(id string, rec *mcpSessionRecord) {
	rec.last = time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if old := t.byID[id]; old != nil {
		t.removeLocked(id, old)
	}
	t.byID[id] = rec
	t.perClient[rec.client]++
}

// remove forgets session id if h owns it.
func (t *mcpSessionTable) remove(id string, h *mcpSessionOwner) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if rec := t.byID[id]; rec != nil && rec.owner == h {
		t.removeLocked(id, rec)
	}
}

func (t *mcpSessionTable) removeLocked(id string, rec *mcpSessionRecord) {
	delete(t.byID, id)
	if t.perClient[rec.client]--; t.perClient[rec.client] <= 0 {
		delete(t.perClient, rec.client)
	}
}

// count returns the sessions recorded, and those of client.
func (t *mcpSessionTable) count(client string) (total, ofClient int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byID), t.perClient[client]
}

// closeMCPSession ends the go-sdk session id held by server.
func closeMCPSession(server *mcp.Server, id string) {
	if server == nil {
		return
	}
	for ss := range server.Sessions() {
		if ss.ID() == id {
			_ = ss.Close()
			return
		}
	}
}

// mcpClientKey is whom a session is counted against: the authenticated
// user, else the client address's key (App.clientKey: its /64 for IPv6).
func mcpClientKey(userID, tenantID, clientKey string) string {
	if userID != "" {
		return "user:" + tenantID + "/" + userID
	}
	return "ip:" + clientKey
}
