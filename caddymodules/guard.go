package caddymodules

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/codemode-gateway/caddy-codemode/guard"
	"github.com/codemode-gateway/caddy-codemode/internal/telemetry"
	"go.uber.org/zap"
)

func init() {
	caddy.RegisterModule(Guard{})
}

// Guard is the `codemode_guard` HTTP handler: it applies an IP filter, a
// global and named rate limits, global and named concurrency limits (with
// queueing) and a request timeout to the requests it sees.
//
// Denials are answered with 403 (IP_BLOCKED, IP_NOT_ALLOWED), 429
// (RATE_LIMIT, CONCURRENCY_LIMIT, QUEUE_TIMEOUT; with Retry-After), 408
// (EXECUTION_TIMEOUT) or 503 (STORAGE_UNAVAILABLE, failure mode closed) and
// the body {"error":{"code":"...","message":"..."}}. When the server has
// `handle_errors` routes the handler writes no body and returns a
// caddyhttp.Error instead, so those routes answer; {http.error.status_code}
// and {http.vars.codemode_guard_code} name the denial.
//
// Counters and tickets live in a storage (memory or Redis) shared by every
// handler and reload with the same storage settings and key prefix; each
// handler's keys are namespaced by its zone.
//
// Partition values (partition_by) are global, ip, session, userId or a
// string with placeholders, e.g. {http.request.header.X-Agent}: each value
// gets its own counter (an empty value counts as "unknown").
type Guard struct {
	// Zone namespaces this handler's counters. Handlers (and gateways
	// sharing a Redis) with the same zone share counters. Default: a hash
	// of the handler's limits, its HTTP server's name and its place among
	// the server's handlers with the same limits, so two routes or sites
	// with the same limits (one snippet imported twice) count apart, an
	// unchanged config keeps its counters across reloads and a changed
	// one starts afresh.
	Zone string `json:"zone,omitempty"`

	// StorageRaw is the storage module (codemode.storage.memory or
	// codemode.storage.redis) holding the counters. Default memory.
	StorageRaw json.RawMessage `json:"storage,omitempty" caddy:"namespace=codemode.storage inline_key=module"`

	// KeyPrefix prefixes every storage key. Default: the storage's
	// key_prefix followed by "guard:" (codemode:guard:).
	KeyPrefix string `json:"key_prefix,omitempty"`

	// RateLimits are sliding-window rate limits; the one without a name is
	// the global limit. A request must pass all of them.
	RateLimits []GuardRateLimit `json:"rate_limits,omitempty"`

	// Concurrency limits simultaneous requests; the one without a name is
	// the global limit. A request holds a slot of each until it is served.
	Concurrency []GuardConcurrency `json:"concurrency,omitempty"`

	// Timeout bounds the time the rest of the route has to answer. When it
	// passes the request's context is cancelled and, if no response was
	// started, 408 EXECUTION_TIMEOUT is returned. Default none.
	Timeout caddy.Duration `json:"timeout,omitempty"`

	// IPFilter allows or denies clients by address.
	IPFilter *GuardIPFilter `json:"ip_filter,omitempty"`

	// SessionHeader is the request header holding the session id of the
	// `session` partition. Default "Mcp-Session-Id".
	SessionHeader string `json:"session_header,omitempty"`

	// User is the placeholder holding the user id of the `userId`
	// partition. Default "{http.auth.user.id}".
	User string `json:"user,omitempty"`

	// HideRateLimitHeaders leaves the RateLimit and RateLimit-Policy
	// header fields out of every response, for deployments that do not
	// tell clients their limits (429 still carries Retry-After). Default
	// false: the fields are sent.
	HideRateLimitHeaders bool `json:"hide_rate_limit_headers,omitempty"`

	// AddressPrefixes key the ip partition: every address of one IPv6 /64
	// (ipv6_prefix, default 64) or IPv4 /32 (ipv4_prefix, default 32)
	// shares a counter. The IP filter matches the exact address.
	AddressPrefixes

	manager     *guard.GuardManager
	storeKey    string
	server      *caddyhttp.Server // whose ordinals named the default zone
	rates       []guardRate
	policy      string // the RateLimit-Policy field value: every rate limit
	sems        []guardSem
	sessionKey  string // canonical SessionHeader
	needSession bool
	needUser    bool
	needRepl    bool // a partition needs the request's replacer
	needIP      bool // the IP filter or a partition needs the client address
	keyIP       bool // a partition needs the client address's key
	prefixes    guard.ClientPrefixes
	// admitFunc is g.admit: called as a function value, its receiver is
	// not an argument, so ServeHTTP reserves spill space for three words.
	admitFunc func(http.ResponseWriter, *http.Request) (*guardHold, bool, error)
	logger    *zap.Logger
}

// GuardRateLimit is a named rate limit of the handler.
type GuardRateLimit struct {
	// Name of the limit; empty for the global limit.
	Name string `json:"name,omitempty"`
	RateLimit
}

// GuardConcurrency is a named concurrency limit of the handler.
type GuardConcurrency struct {
	// Name of the limit; empty for the global limit.
	Name string `json:"name,omitempty"`
	Concurrency
}

// GuardIPFilter allows or denies clients by address.
type GuardIPFilter struct {
	// Allow lists IPs and CIDR ranges always allowed.
	Allow []string `json:"allow,omitempty"`
	// Deny lists IPs and CIDR ranges always blocked; it wins over Allow.
	Deny []string `json:"deny,omitempty"`
	// DefaultAction for addresses on neither list: "allow" (default) or
	// "deny".
	DefaultAction string `json:"default_action,omitempty"`
	// TrustProxy takes the client address from X-Forwarded-For, read from
	// the right. Ignored when the server has Caddy's trusted_proxies set:
	// then Caddy's client IP is used.
	TrustProxy bool `json:"trust_proxy,omitempty"`
	// TrustedProxyDepth is the most proxy hops to trust. Default 1.
	TrustedProxyDepth int `json:"trusted_proxy_depth,omitempty"`
}

type guardRate struct {
	entity string
	cfg    guard.RateLimitConfig
	part   guardPartition
	item   string // `"<name>";r=`: the start of this limit's RateLimit item
	limit  *guard.PreparedRateLimit
}

type guardSem struct {
	entity string
	cfg    guard.ConcurrencyConfig
	part   guardPartition
	sem    *guard.PreparedSemaphore
}

// guardPartition is where a limit's partition value comes from, decided at
// provisioning, so that a request resolves it with a switch on src (a
// global or per-IP limit without copying the strategy and the request's
// partition context into guard.ResolvePartitionKey).
type guardPartition struct {
	src  partitionSource
	tmpl string             // placeholder partition (partitionTemplate)
	key  guard.PartitionKey // any other (partitionOther)
	// addr: tmpl is the client's address alone (clientAddressPlaceholders),
	// keyed as the ip partition is, by prefixes.
	addr     bool
	prefixes guard.ClientPrefixes
}

// clientAddressPlaceholders are the placeholders whose value is the
// client's address (the Caddyfile's {remote_host}, {remote}, {client_ip}):
// a partition that is one of them alone counts an IPv6 client by its /64,
// as partition_by ip and every other per-address limit do; it counted each
// address apart, so a host with a /64 had 2^64 partitions.
// {http.request.remote.host/V4,V6} names its own prefixes and is kept.
var clientAddressPlaceholders = map[string]bool{
	"{http.request.remote.host}": true,
	"{http.request.remote}":      true,
	"{http.vars.client_ip}":      true,
}

type partitionSource uint8

// needsIP reports whether the partition's value may be the client address
// (ip, or a strategy other than session and userId).
func (p *guardPartition) needsIP() bool {
	switch p.src {
	case partitionIP:
		return true
	case partitionOther:
		return p.key.Func != nil || (p.key.Strategy != guard.PartitionSession && p.key.Strategy != guard.PartitionUserID)
	}
	return false
}

const (
	partitionGlobal partitionSource = iota
	partitionIP
	partitionTemplate
	partitionOther // session, userId: guard.ResolvePartitionKey
)

// newGuardPartition is the source of a limit partitioned by partitionBy
// (its config's key p).
func newGuardPartition(partitionBy string, p guard.PartitionKey, prefixes guard.ClientPrefixes) guardPartition {
	switch {
	case isPlaceholderPartition(partitionBy):
		gp := guardPartition{src: partitionTemplate, tmpl: partitionBy}
		if clientAddressPlaceholders[strings.TrimSpace(partitionBy)] {
			gp.addr, gp.prefixes = true, prefixes
		}
		return gp
	case p.Func == nil && (p.Strategy == "" || p.Strategy == guard.PartitionGlobal):
		return guardPartition{src: partitionGlobal}
	case p.Func == nil && p.Strategy == guard.PartitionIP:
		return guardPartition{src: partitionIP}
	}
	return guardPartition{src: partitionOther, key: p}
}

// CaddyModule returns the Caddy module information.
func (Guard) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.codemode_guard",
		New: func() caddy.Module { return new(Guard) },
	}
}

// Provision builds the guard manager on the shared storage.
func (g *Guard) Provision(ctx caddy.Context) error {
	g.logger = ctx.Logger()
	if err := g.Validate(); err != nil {
		return err
	}
	st, err := loadStorage(ctx, g, "StorageRaw", g.StorageRaw, MemoryStorage{})
	if err != nil {
		return fmt.Errorf("codemode_guard: %w", err)
	}
	backend := st.Backend()
	if g.KeyPrefix == "" {
		g.KeyPrefix = backend.KeyPrefix + guardKeyPart
	}
	if g.SessionHeader == "" {
		g.SessionHeader = "Mcp-Session-Id"
	}
	if g.User == "" {
		g.User = "{http.auth.user.id}"
	}
	if g.Zone == "" {
		b, _ := json.Marshal([]any{g.RateLimits, g.Concurrency})
		sum := sha256.Sum256(b)
		g.Zone = hex.EncodeToString(sum[:6])
		g.Zone, g.server = defaultGuardZone(ctx, g.Zone)
	}
	cfg := guard.GuardConfig{Enabled: true, KeyPrefix: g.KeyPrefix,
		Storage: &guard.StorageConfig{FailureMode: backend.FailureMode}}
	if g.IPFilter != nil {
		cfg.IpFilter = g.IPFilter.config()
	}
	g.sessionKey = textproto.CanonicalMIMEHeaderKey(g.SessionHeader)
	g.rates, g.sems = nil, nil
	g.needSession, g.needUser = false, false
	for _, p := range g.partitions() {
		g.needSession = g.needSession || p == guard.PartitionSession
		g.needUser = g.needUser || p == guard.PartitionUserID
	}
	g.needRepl = g.needUser
	g.prefixes = g.clientPrefixes()
	var policies []string
	for _, rl := range g.RateLimits {
		r := guardRate{entity: g.entity(rl.Name), cfg: *rl.config()}
		name := sfString(g.displayName(r.entity))
		r.item = name + ";r="
		policies = append(policies, rateLimitPolicy(name, r.cfg.MaxRequests, r.cfg.Window()))
		r.part = newGuardPartition(rl.PartitionBy, r.cfg.PartitionBy, g.prefixes)
		if r.part.src == partitionTemplate {
			r.cfg.PartitionBy = perRequestPartition
			g.needRepl = true
		}
		g.rates = append(g.rates, r)
	}
	g.policy = strings.Join(policies, ", ")
	for _, cc := range g.Concurrency {
		s := guardSem{entity: g.entity(cc.Name), cfg: *cc.config()}
		s.part = newGuardPartition(cc.PartitionBy, s.cfg.PartitionBy, g.prefixes)
		if s.part.src == partitionTemplate {
			s.cfg.PartitionBy = perRequestPartition
			g.needRepl = true
		}
		g.sems = append(g.sems, s)
	}
	g.keyIP = false
	for _, p := range g.rates {
		g.keyIP = g.keyIP || p.part.needsIP()
	}
	for _, p := range g.sems {
		g.keyIP = g.keyIP || p.part.needsIP()
	}
	g.needIP = g.IPFilter != nil || g.keyIP
	key, store, err := guardStorageOn(backend, cfg.KeyPrefix, g.logger)
	if err != nil {
		return fmt.Errorf("codemode_guard: %w", err)
	}
	m, err := guard.NewGuardManager(ctx, cfg, &guard.ManagerOptions{Logger: g.logger, Storage: store, Now: guardNow,
		Metrics: processTelemetry().guard})
	if err != nil {
		_ = release(key)
		return fmt.Errorf("codemode_guard: %w", err)
	}
	for i := range g.rates {
		g.rates[i].limit = m.PrepareRateLimit(g.rates[i].entity, g.rates[i].cfg)
	}
	for i := range g.sems {
		// The guard releases a slot by its timeout; with one, a ticket of
		// a killed gateway expires soon after (guard.HoldMs).
		g.sems[i].sem = m.PrepareSemaphore(g.sems[i].entity, g.sems[i].cfg).WithTimeout(time.Duration(g.Timeout).Milliseconds())
	}
	g.manager, g.storeKey = m, key
	g.admitFunc = g.admit
	return nil
}

func (g *Guard) partitions() []string {
	var ps []string
	for _, rl := range g.RateLimits {
		ps = append(ps, rl.PartitionBy)
	}
	for _, cc := range g.Concurrency {
		ps = append(ps, cc.PartitionBy)
	}
	return ps
}

// displayName is the limit's name as configured ("global" for the unnamed
// one), for error messages.
func (g *Guard) displayName(entity string) string {
	name := strings.TrimPrefix(entity, g.Zone+":")
	if name == guard.GlobalEntity {
		return "global"
	}
	return name
}

func (g *Guard) entity(name string) string {
	if name == "" {
		name = guard.GlobalEntity
	}
	return g.Zone + ":" + name
}

// Validate checks the configuration, so that a bad config fails at load.
func (g *Guard) Validate() error {
	names := map[string]bool{}
	for i, rl := range g.RateLimits {
		if names[rl.Name] {
			return fmt.Errorf("codemode_guard: rate_limits[%d]: duplicate name %q", i, rl.Name)
		}
		names[rl.Name] = true
		if err := rl.validate(true); err != nil {
			return fmt.Errorf("codemode_guard: rate_limits[%d]: %w", i, err)
		}
	}
	names = map[string]bool{}
	for i, cc := range g.Concurrency {
		if names[cc.Name] {
			return fmt.Errorf("codemode_guard: concurrency[%d]: duplicate name %q", i, cc.Name)
		}
		names[cc.Name] = true
		if err := cc.validate(true); err != nil {
			return fmt.Errorf("codemode_guard: concurrency[%d]: %w", i, err)
		}
	}
	if g.Timeout < 0 {
		return errors.New("codemode_guard: timeout: must not be negative")
	}
	if err := g.IPFilter.validate(); err != nil {
		return fmt.Errorf("codemode_guard: ip_filter: %w", err)
	}
	if err := g.AddressPrefixes.validate(); err != nil {
		return fmt.Errorf("codemode_guard: %w", err)
	}
	return nil
}

// guardOrdinals counts, per HTTP server of a loaded config, the handlers
// provisioned so far with each limits hash. Caddy provisions a server's
// routes in order, so the count names a handler the same way at every load
// of the same config, on every gateway.
var guardOrdinals sync.Map // *caddyhttp.Server -> *guardOrdinal

type guardOrdinal struct {
	mu sync.Mutex
	n  map[string]int
}

// defaultGuardZone is the zone of a handler that names none: the hash of
// its limits, its server's name and its ordinal among that server's
// handlers with the same hash. Outside a server (tests, embedding) the
// hash alone.
func defaultGuardZone(ctx caddy.Context, hash string) (string, *caddyhttp.Server) {
	srv, _ := ctx.Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server)
	if srv == nil {
		return hash, nil
	}
	v, _ := guardOrdinals.LoadOrStore(srv, &guardOrdinal{n: map[string]int{}})
	o := v.(*guardOrdinal)
	o.mu.Lock()
	o.n[hash]++
	n := o.n[hash]
	o.mu.Unlock()
	return hash + "-" + srv.Name() + "-" + strconv.Itoa(n), srv
}

// Cleanup releases the handler's hold on the shared storage.
func (g *Guard) Cleanup() error {
	if g.server != nil {
		// The config is unloaded (or failed to load): its servers are done.
		guardOrdinals.Delete(g.server)
		g.server = nil
	}
	if g.manager == nil {
		return nil
	}
	_ = g.manager.Destroy(context.Background())
	g.manager = nil
	err := release(g.storeKey)
	return err
}

// ServeHTTP applies the guard and, when it allows, calls next.
//
// Its own frame stays small (72 bytes) and it calls next's function
// directly: the rest of the route runs on top of it, and on a bare route
// Caddy's deepest calls (writing the response: a span refill of the
// allocator under the header's snapshot, the write deadline's timer) come
// within a few dozen bytes of the connection goroutine's 8 KB stack. Past
// it, the goroutine copies its stack to a larger one again after each GC
// shrank it. So the checks, with their larger frames, are in admit, which
// returns before next runs; the semaphore tickets are held in a pooled
// guardHold, whose release is a func value (deferred without a closure on
// this frame); and every call here takes at most three words of
// arguments, for which the frame reserves spill space (admit is called
// through admitFunc, which takes its receiver out of the arguments).
func (g *Guard) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	h, ok, err := g.admitFunc(w, r)
	if !ok {
		return err
	}
	if h != nil {
		// Concurrency slots are held until the request is served,
		// released even when the request was cancelled (a fresh context)
		// or next panicked. A ticket that took nothing releases nothing.
		defer h.done()
	}
	if g.Timeout > 0 {
		return g.serveWithTimeout(&timeoutWriter{ResponseWriterWrapper: caddyhttp.ResponseWriterWrapper{ResponseWriter: w}, next: next}, r)
	}
	return asHandlerFunc(next)(w, r)
}

// asHandlerFunc is h as a function. What Caddy's compiled routes give a
// middleware is a HandlerFunc already: calling the function is all its
// ServeHTTP does, without that method's 40-byte frame between the guard's
// and the rest of the route.
func asHandlerFunc(h caddyhttp.Handler) caddyhttp.HandlerFunc {
	if f, ok := h.(caddyhttp.HandlerFunc); ok {
		return f
	}
	return handlerFunc(h)
}

// handlerFunc is h's ServeHTTP as a function (it allocates: not for the
// handlers of Caddy's routes).
//
//go:noinline
func handlerFunc(h caddyhttp.Handler) caddyhttp.HandlerFunc { return h.ServeHTTP }

// guardHold holds the semaphore tickets of a request being served.
type guardHold struct {
	held    [2]guard.SemaphoreTicket // room for the usual one or two limits
	tickets []guard.SemaphoreTicket  // one per concurrency limit
	done    func()                   // h.release, made once per guardHold
}

var guardHolds sync.Pool // of *guardHold

// hold returns a guardHold with a zero ticket for each concurrency limit.
func (g *Guard) hold() *guardHold {
	h, _ := guardHolds.Get().(*guardHold)
	if h == nil {
		h = new(guardHold)
		h.done = h.release
	}
	if n := len(g.sems); n <= len(h.held) {
		h.tickets = h.held[:n:n]
	} else {
		h.tickets = make([]guard.SemaphoreTicket, n)
	}
	return h
}

// release returns h's slots and h, its tickets zeroed, to the pool.
func (h *guardHold) release() {
	for i := range h.tickets {
		_ = h.tickets[i].Release(context.Background())
		h.tickets[i] = guard.SemaphoreTicket{}
	}
	h.tickets = nil
	guardHolds.Put(h)
}

// admit runs the IP filter, the rate limits and the concurrency limits. It
// reports whether the request may go on, with the slots it took of the
// concurrency limits (nil when the handler has none); when not, the
// denial has been answered, no slot is held and err is what ServeHTTP
// returns.
func (g *Guard) admit(w http.ResponseWriter, r *http.Request) (h *guardHold, ok bool, err error) {
	if len(g.sems) == 0 {
		ok, err = g.check(w, r, nil)
		return nil, ok, err
	}
	h = g.hold()
	defer func() {
		if !ok { // denied, or a check panicked: give back what was taken
			h.release()
			h = nil
		}
	}()
	ok, err = g.check(w, r, h)
	return h, ok, err
}

// check is admit's checks, taking a slot of each concurrency limit into
// h's tickets.
func (g *Guard) check(w http.ResponseWriter, r *http.Request, h *guardHold) (bool, error) {
	ctx := r.Context()
	var ip string
	var addr netip.Addr
	if g.needIP { // else neither Caddy's variables nor the address are read
		ip, addr = g.clientIP(r)
		if res := g.manager.CheckIpFilterAddr(ip, addr); res != nil && !res.Allowed {
			return false, g.deny(w, r, res.Err(ip))
		}
	}
	var repl *caddy.Replacer
	if g.needRepl {
		repl, _ = ctx.Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	}
	var pc guard.PartitionKeyContext
	if g.keyIP {
		pc.ClientIP = g.prefixes.KeyAddr(ip, addr)
	}
	if g.needSession {
		if v := r.Header[g.sessionKey]; len(v) > 0 {
			pc.SessionID = v[0]
		}
	}
	if g.needUser && repl != nil {
		pc.UserID = repl.ReplaceAll(g.User, "")
	}

	// Rate limits: all are counted, at one reading of the clock (which
	// the concurrency limits take too); the tightest is reported in the
	// RateLimit field.
	var tightest guard.RateLimitResult
	var tightestRate *guardRate
	var now time.Time
	if len(g.rates) > 0 || len(g.sems) > 0 {
		now = g.manager.Now()
	}
	for i := range g.rates {
		rl := &g.rates[i]
		key := rl.part.value(repl, &pc)
		res, err := rl.limit.Check(ctx, key, now)
		if err != nil {
			return false, g.deny(w, r, err)
		}
		if i == 0 || res.Remaining < tightest.Remaining {
			tightest, tightestRate = res, rl
		}
		if !res.Allowed {
			if !g.HideRateLimitHeaders {
				g.setRateLimitHeaders(w.Header(), rl, res)
			}
			return false, g.denyIn(w, r, res.Err(g.displayName(rl.entity)), ip, &rl.part, key)
		}
	}
	if tightestRate != nil && !g.HideRateLimitHeaders {
		g.setRateLimitHeaders(w.Header(), tightestRate, tightest)
	}

	for i := range g.sems {
		s := &g.sems[i]
		key := s.part.value(repl, &pc)
		if err := s.sem.AcquireAt(ctx, key, now, &h.tickets[i]); err != nil {
			var ge *guard.GuardError
			if errors.As(err, &ge) && ge.EntityName != "" {
				name := g.displayName(ge.EntityName)
				ge.Message = strings.ReplaceAll(ge.Message, strconv.Quote(ge.EntityName), strconv.Quote(name))
				ge.EntityName = name
			}
			return false, g.denyIn(w, r, err, ip, &s.part, key)
		}
	}
	return true, nil
}

var errRequestTimeout = errors.New("codemode_guard: request timeout")

// serveWithTimeout runs tw's next with a deadline, writing to tw. It does
// not start a goroutine: next sees its context cancelled at the deadline,
// and when it returns without having started a response the guard answers
// 408.
func (g *Guard) serveWithTimeout(tw *timeoutWriter, r *http.Request) error {
	ctx, cancel := context.WithTimeoutCause(r.Context(), time.Duration(g.Timeout), errRequestTimeout)
	defer cancel()
	err := asHandlerFunc(tw.next)(tw, r.WithContext(ctx))
	if context.Cause(ctx) == errRequestTimeout && !tw.started {
		return g.timedOut(tw.ResponseWriter, r)
	}
	g.manager.ObserveTimeout(nil)
	return err
}

// timedOut answers a request whose timeout passed before next started a
// response (apart from serveWithTimeout, whose frame is under the rest of
// the route).
//
//go:noinline
func (g *Guard) timedOut(w http.ResponseWriter, r *http.Request) error {
	ms := time.Duration(g.Timeout).Milliseconds()
	te := guard.NewExecutionTimeoutError(r.URL.Path, ms)
	g.manager.ObserveTimeout(te)
	return g.deny(w, r, te)
}

// timeoutWriter notes whether a response was started; it carries the
// handler it is given to (so that ServeHTTP calls serveWithTimeout with
// fewer arguments).
type timeoutWriter struct {
	caddyhttp.ResponseWriterWrapper
	next    caddyhttp.Handler
	started bool
}

func (tw *timeoutWriter) WriteHeader(status int) {
	if status >= 200 || status == http.StatusSwitchingProtocols {
		tw.started = true
	}
	tw.ResponseWriterWrapper.WriteHeader(status)
}

func (tw *timeoutWriter) Write(b []byte) (int, error) {
	tw.started = true
	return tw.ResponseWriterWrapper.Write(b)
}

func (tw *timeoutWriter) ReadFrom(src io.Reader) (int64, error) {
	tw.started = true
	return tw.ResponseWriterWrapper.ReadFrom(src)
}

// Flush sends the headers, so it starts the response.
func (tw *timeoutWriter) Flush() {
	tw.started = true
	_ = http.NewResponseController(tw.ResponseWriterWrapper.ResponseWriter).Flush()
}

// clientIP is Caddy's client IP when the request came from one of the
// server's trusted_proxies (Caddy then did the X-Forwarded-For work), else
// the filter's own trust_proxy logic, else the peer address; with the
// address parsed (the zero Addr when it is not an IP or there is no filter
// to use it), so that the IP filter does not parse it again.
func (g *Guard) clientIP(r *http.Request) (string, netip.Addr) {
	if trusted, _ := caddyhttp.GetVar(r.Context(), caddyhttp.TrustedProxyVarKey).(bool); trusted {
		if ip, ok := caddyhttp.GetVar(r.Context(), caddyhttp.ClientIPVarKey).(string); ok && ip != "" {
			if a, err := guard.ParseClientIP(ip); err == nil {
				return a.String(), a
			}
			return ip, netip.Addr{}
		}
	}
	if f := g.manager.IpFilter(); f != nil {
		var xff []string
		if f.TrustsProxy() {
			xff = r.Header["X-Forwarded-For"]
		}
		return f.ClientAddr(r.RemoteAddr, xff)
	}
	return guard.ClientIPFromXFF(r.RemoteAddr, nil, 1), netip.Addr{}
}

// deny answers a guard error. Non-guard errors (a cancelled request) are
// returned as they are.
func (g *Guard) deny(w http.ResponseWriter, r *http.Request, err error) error {
	return g.denyIn(w, r, err, "", nil, "")
}

// denyIn is deny of a limit's refusal in its partition key (part's value
// for this request); ip is the client address when the checks read it.
// Its debug line names the client address and the partition, which it
// works out only then: the allow path pays nothing for them.
func (g *Guard) denyIn(w http.ResponseWriter, r *http.Request, err error, ip string, part *guardPartition, key string) error {
	var ge *guard.GuardError
	if !errors.As(err, &ge) {
		return err
	}
	caddyhttp.SetVar(r.Context(), "codemode_guard_code", ge.Code)
	h := w.Header()
	if ge.StatusCode == http.StatusTooManyRequests || ge.StatusCode == http.StatusServiceUnavailable {
		secs := int64(1)
		if ge.RetryAfterMs > 0 {
			secs = (ge.RetryAfterMs + 999) / 1000
		}
		h.Set("Retry-After", strconv.FormatInt(secs, 10))
	}
	if ge.StatusCode >= 500 {
		// The guard could not decide (storage down, failure mode closed):
		// the answer and the log line name the same request.
		r = withRequestID(w, r)
		g.logger.Error("request refused: guard unavailable", append(telemetry.LogFields(r.Context()),
			zap.String("code", ge.Code), zap.Int("status", ge.StatusCode), zap.Error(ge))...)
	} else if c := g.logger.Check(zap.DebugLevel, "request denied by guard"); c != nil {
		if ip == "" {
			ip = ge.ClientIP
		}
		if ip == "" { // the checks did not need it (the rate limits' errors never carried it)
			ip, _ = g.clientIP(r)
		}
		c.Write(zap.String("code", ge.Code), zap.String("client_ip", ip), zap.String("entity", ge.EntityName),
			zap.String("partition", part.logged(key)))
	}
	if hasErrorRoutes(r) {
		return caddyhttp.Error(ge.StatusCode, ge) // handle_errors writes the response
	}
	writeErrorBody(w, ge.StatusCode, ge.Code, ge.Message)
	return nil
}

// hasErrorRoutes reports whether r's server has handle_errors routes: a
// refusal is then theirs to answer (a caddyhttp.Error), else the handler
// writes its JSON body (returning an error there would make Caddy write
// the status a second time with an empty body). Error routes inside a JSON
// subroute are not seen.
func hasErrorRoutes(r *http.Request) bool {
	srv, ok := r.Context().Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server)
	return ok && srv != nil && srv.Errors != nil && len(srv.Errors.Routes) > 0
}

// writeErrorBody answers status with the body {"error":{"code","message"}}
// of every refusal of this module's handlers.
func writeErrorBody(w http.ResponseWriter, status int, code, message string) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(guardErrorBody{Error: guardErrorDetail{Code: code, Message: message}})
}

type guardErrorBody struct {
	Error guardErrorDetail `json:"error"`
}

type guardErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// sfMaxInteger is the largest Integer of RFC 9651 structured fields (15
// digits); larger quotas are reported as this (they are unlimited in
// practice).
const sfMaxInteger = 999_999_999_999_999

// setRateLimitHeaders sets the RateLimit-Policy and RateLimit fields of
// draft-ietf-httpapi-ratelimit-headers (-08 to -10): the policy lists
// every rate limit of the handler (the same text on every response), the
// RateLimit item names limit rl with its remaining quota r and t, the
// seconds until the window ends or, for a denial, until a request is
// allowed again.
func (g *Guard) setRateLimitHeaders(h http.Header, rl *guardRate, res guard.RateLimitResult) {
	if res.Limit == 0 { // no limit applied
		return
	}
	reset := res.ResetMs
	if !res.Allowed {
		reset = res.RetryAfterMs
	}
	// This runs on every request: the values and the RateLimit text are
	// written into a rateLimitFields taken from a slab (no allocation of
	// its own), the keys are set in their canonical form directly, and
	// each value slice has cap == len, so that a later Add copies it.
	f := newRateLimitFields()
	b := append(f.text[:0], rl.item...)
	b = strconv.AppendInt(b, min(res.Remaining, sfMaxInteger), 10)
	b = append(b, ";t="...)
	b = strconv.AppendInt(b, (reset+999)/1000, 10)
	f.values[0] = g.policy
	if len(b) <= len(f.text) {
		// b is still f.text, which nothing writes after this.
		f.values[1] = unsafe.String(&f.text[0], len(b))
	} else { // a long limit name: b was moved to its own array
		f.values[1] = string(b)
	}
	h["Ratelimit-Policy"] = f.values[0:1:1]
	h["Ratelimit"] = f.values[1:2:2]
}

// rateLimitFields are the values of one response's RateLimit-Policy and
// RateLimit fields, with room for the RateLimit text (the policy is the
// handler's constant; a shared slice could be changed in place by a later
// handler, e.g. Caddy's header replace).
type rateLimitFields struct {
	values [2]string
	text   [32]byte // 64 bytes in all: room for a short name and a 13-digit r
}

// rateLimitSlab hands out the rateLimitFields of many responses from one
// allocation. Each is given out once: the response's header map keeps
// pointing into it after the guard returned (Caddy's snapshot at
// WriteHeader, its logs), and the slab is freed when none does.
type rateLimitSlab struct {
	fields [rateLimitSlabLen]rateLimitFields
	next   int
}

// rateLimitSlabLen fills a 2,048-byte size class: 31 × 64 bytes and next.
const rateLimitSlabLen = 31

// rateLimitSlabs holds slabs with room left, one per processor as a rule.
var rateLimitSlabs sync.Pool // of *rateLimitSlab

// newRateLimitFields returns zeroed rateLimitFields that no other response
// uses.
func newRateLimitFields() *rateLimitFields {
	s, _ := rateLimitSlabs.Get().(*rateLimitSlab)
	if s == nil {
		s = new(rateLimitSlab)
	}
	f := &s.fields[s.next]
	if s.next++; s.next < len(s.fields) {
		rateLimitSlabs.Put(s)
	}
	return f
}

// rateLimitPolicy is one quota policy item: `"<name>";q=<max>;w=<seconds>`.
// The window is left out when it is not a whole number of seconds (the
// draft's w has no sub-second form).
func rateLimitPolicy(name string, maxRequests, windowMs int64) string {
	p := name + ";q=" + strconv.FormatInt(min(maxRequests, sfMaxInteger), 10)
	if windowMs%1000 == 0 {
		p += ";w=" + strconv.FormatInt(windowMs/1000, 10)
	}
	return p
}

// sfString is name as a structured-field String (RFC 9651 3.3.3): quoted,
// with " and \ escaped. Bytes a String cannot hold (outside printable
// ASCII) and % are percent-encoded, so that distinct names stay distinct.
func sfString(name string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c > 0x7e || c == '%':
			fmt.Fprintf(&b, "%%%02X", c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// perRequestPartition is the partition of a limit partitioned by a
// placeholder: not global, so its prepared limit takes the value the
// handler resolves for each request (guardPartition.value); never called.
var perRequestPartition = guard.PartitionKey{Func: func(guard.PartitionKeyContext) string { return "unknown" }}

// value is the request's partition of a limit: the placeholder partition
// resolved by Caddy's replacer ("unknown" when empty; the client address's
// key when it is the address), else the strategy's value from pc
// (guard.ResolvePartitionKey's).
func (p *guardPartition) value(repl *caddy.Replacer, pc *guard.PartitionKeyContext) string {
	switch p.src {
	case partitionGlobal:
		return guard.PartitionGlobal
	case partitionIP:
		if pc.ClientIP == "" {
			return guard.UnknownIP
		}
		return pc.ClientIP
	case partitionTemplate:
		v := ""
		if repl != nil {
			v = repl.ReplaceAll(p.tmpl, "")
		}
		if v == "" {
			return "unknown"
		}
		if p.addr {
			return p.prefixes.Key(v)
		}
		return v
	}
	return guard.ResolvePartitionKey(p.key, *pc)
}

// logged is a partition key as the deny log shows it: a session's is
// its fingerprint (a session id is the client's to keep), "" for no
// partition (the IP filter).
func (p *guardPartition) logged(key string) string {
	if p == nil {
		return ""
	}
	if p.src == partitionOther && p.key.Func == nil && p.key.Strategy == guard.PartitionSession && key != "" {
		sum := sha256.Sum256([]byte(key))
		return "session#" + hex.EncodeToString(sum[:6])
	}
	return key
}

// validate checks the rules, named by their JSON keys.
func (f *GuardIPFilter) validate() error {
	if f == nil {
		return nil
	}
	for i, r := range f.Allow {
		if _, err := guard.ParseIPRule(r); err != nil {
			return fmt.Errorf("allow[%d]: %w", i, err)
		}
	}
	for i, r := range f.Deny {
		if _, err := guard.ParseIPRule(r); err != nil {
			return fmt.Errorf("deny[%d]: %w", i, err)
		}
	}
	switch f.DefaultAction {
	case "", guard.ActionAllow, guard.ActionDeny:
	default:
		return fmt.Errorf("default_action: %q is not allow or deny", f.DefaultAction)
	}
	if f.TrustedProxyDepth < 0 {
		return errors.New("trusted_proxy_depth: must not be negative")
	}
	return nil
}

func (f *GuardIPFilter) config() *guard.IpFilterConfig {
	return &guard.IpFilterConfig{
		AllowList: f.Allow, DenyList: f.Deny, DefaultAction: f.DefaultAction,
		TrustProxy: f.TrustProxy, TrustedProxyDepth: f.TrustedProxyDepth,
	}
}

// guardNow is the clock of the guard managers built by codemode_guard and
// throttle (read when they are provisioned); nil is the real clock, which
// the managers read more cheaply when they know it is (a duration needs
// only the monotonic clock). Tests set it so that no rate-limit window
// boundary falls between their requests.
var guardNow func() time.Time

// Interface guards
var (
	_ caddy.Provisioner           = (*Guard)(nil)
	_ caddy.Validator             = (*Guard)(nil)
	_ caddy.CleanerUpper          = (*Guard)(nil)
	_ caddyhttp.MiddlewareHandler = (*Guard)(nil)
)
