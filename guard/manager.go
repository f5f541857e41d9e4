package guard

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// Entity names the manager uses for its global limits.
const (
	GlobalEntity = "__global__"
)

// Key suffixes that keep rate-limit and semaphore state apart.
const (
	suffixRate = "rate"
	suffixSem  = "sem"
)

// ManagerOptions configures NewGuardManager; nil means defaults.
type ManagerOptions struct {
	// Logger receives storage failures and recoveries. Default zap.NewNop().
	Logger *zap.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Storage, when set, is used instead of building one from
	// GuardConfig.Storage (its failureMode still applies); Destroy does not
	// close it. Lets several managers share state, e.g. across a reload.
	Storage Storage
	// TicketTTLSeconds is the semaphore ticket time to live. Default 300.
	TicketTTLSeconds int
	// Metrics, when set, counts the manager's decisions (several managers
	// may share one). Nil records nothing.
	Metrics *Metrics
}

// GuardManager applies a GuardConfig: it checks rate limits, hands out
// semaphore tickets and filters IPs, for named entities and globally. It is
// safe for concurrent use.
type GuardManager struct {
	cfg       GuardConfig
	store     Storage
	ownsStore bool
	limiter   *SlidingWindowRateLimiter
	sem       *DistributedSemaphore
	mem       *MemoryStorage // store, when it is the memory storage: prepared limits use its key-buffer paths
	ipFilter  *IpFilter
	logger    *zap.Logger
	failOpen  bool
	now       func() time.Time
	realClock bool // now is time.Now: a duration needs only the monotonic clock
	degraded  atomic.Bool
	retryAtMs atomic.Int64 // while degraded, storage is skipped until then
	metrics   *Metrics
	ipMetrics ruleMetrics // the IP filter's decision series, looked up once

	// fixedKeys are the storage keys of limits whose partition is the same
	// for every request (global), by suffix and entity: built once instead
	// of concatenated per request. At most maxFixedKeys.
	fixedKeys  [2]sync.Map // [0] rate, [1] semaphore: entity -> key
	fixedCount atomic.Int32
}

// maxFixedKeys bounds fixedKeys (entity names normally come from a
// configuration; past this many they are built per request).
const maxFixedKeys = 4096

// storageKey is BuildStorageKey(entity, ResolvePartitionKey(p, pc), suffix).
func (m *GuardManager) storageKey(entity string, p PartitionKey, pc PartitionKeyContext, suffix string) string {
	if p.Func != nil || (p.Strategy != "" && p.Strategy != PartitionGlobal) {
		return BuildStorageKey(entity, ResolvePartitionKey(p, pc), suffix)
	}
	cache := &m.fixedKeys[0]
	if suffix == suffixSem {
		cache = &m.fixedKeys[1]
	}
	if k, ok := cache.Load(entity); ok {
		return k.(string)
	}
	k := BuildStorageKey(entity, PartitionGlobal, suffix)
	if m.fixedCount.Load() < maxFixedKeys {
		if _, loaded := cache.LoadOrStore(entity, k); !loaded {
			m.fixedCount.Add(1)
		}
	}
	return k
}

// storageRetryInterval is how long the manager applies the failure mode
// without asking storage after a failure, so that an outage costs each
// request nothing; then the next request probes storage again.
const storageRetryInterval = time.Second

// NewGuardManager validates cfg, creates its storage backend (in-memory when
// cfg.Storage is unset; Redis is pinged, and an unreachable Redis is logged,
// not fatal: the failure mode applies until it answers) and returns the
// manager. Call Destroy when done.
func NewGuardManager(ctx context.Context, cfg GuardConfig, opts *ManagerOptions) (*GuardManager, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid guard config: %w", err)
	}
	if opts == nil {
		opts = &ManagerOptions{}
	}
	m := &GuardManager{cfg: cfg, logger: opts.Logger, failOpen: true, now: opts.Now, metrics: opts.Metrics,
		ipMetrics: opts.Metrics.forDecisions(RuleIPFilter, OutcomeIPBlocked)}
	if m.now == nil {
		m.now, m.realClock = time.Now, true
	}
	if m.logger == nil {
		m.logger = zap.NewNop()
	}
	if m.cfg.KeyPrefix == "" {
		m.cfg.KeyPrefix = DefaultKeyPrefix
	}
	if cfg.Storage != nil && cfg.Storage.FailureMode == FailClosed {
		m.failOpen = false
	}
	if cfg.IpFilter != nil {
		f, err := NewIpFilter(*cfg.IpFilter)
		if err != nil {
			return nil, fmt.Errorf("invalid guard config: ipFilter: %w", err)
		}
		m.ipFilter = f
	}
	switch {
	case opts.Storage != nil:
		m.store = opts.Storage
	case cfg.Storage != nil && cfg.Storage.Provider == ProviderRedis:
		rs, err := NewRedisStorage(*cfg.Storage, m.cfg.KeyPrefix, &RedisStorageOptions{Logger: m.logger})
		if err != nil {
			return nil, err
		}
		if err := rs.Ping(ctx); err != nil {
			m.logger.Warn("guard storage: redis is unreachable at start; applying the failure mode until it answers",
				zap.String("failure_mode", m.failureMode()), zap.Error(err))
			m.degraded.Store(true)
			m.retryAtMs.Store(m.now().Add(storageRetryInterval).UnixMilli())
		}
		m.store, m.ownsStore = rs, true
	default:
		m.store, m.ownsStore = NewMemoryStorage(&MemoryStorageOptions{Now: opts.Now}), true
	}
	lo := &LimiterOptions{Now: opts.Now, TicketTTLSeconds: opts.TicketTTLSeconds}
	m.limiter = NewSlidingWindowRateLimiter(m.store, lo)
	m.sem = NewDistributedSemaphore(m.store, lo)
	m.mem, _ = m.store.(*MemoryStorage)
	return m, nil
}

// Config returns the manager's configuration with defaults applied.
func (m *GuardManager) Config() GuardConfig { return m.cfg }

// Storage returns the manager's storage backend.
func (m *GuardManager) Storage() Storage { return m.store }

// RateLimiter returns the manager's limiter (e.g. to Reset a key).
func (m *GuardManager) RateLimiter() *SlidingWindowRateLimiter { return m.limiter }

// Semaphore returns the manager's semaphore (e.g. to ForceReset a key).
func (m *GuardManager) Semaphore() *DistributedSemaphore { return m.sem }

// CheckRateLimit counts a request of entityName against cfg, else against
// defaultRateLimit. When no config applies (or the guard is disabled) it
// allows with Remaining Unlimited. A storage failure gives an allowed result
// (failure mode open) or a STORAGE_UNAVAILABLE *GuardError (closed).
func (m *GuardManager) CheckRateLimit(ctx context.Context, entityName string, cfg *RateLimitConfig, pc PartitionKeyContext) (RateLimitResult, error) {
	if cfg == nil {
		cfg = m.cfg.DefaultRateLimit
	}
	return m.checkRate(ctx, entityName, cfg, pc)
}

// CheckGlobalRateLimit counts a request against the global rate limit;
// allowed when it is unset.
func (m *GuardManager) CheckGlobalRateLimit(ctx context.Context, pc PartitionKeyContext) (RateLimitResult, error) {
	return m.checkRate(ctx, GlobalEntity, m.cfg.Global, pc)
}

func (m *GuardManager) checkRate(ctx context.Context, entityName string, cfg *RateLimitConfig, pc PartitionKeyContext) (RateLimitResult, error) {
	if cfg == nil || !m.cfg.Enabled {
		return allowAll, nil
	}
	key := m.storageKey(entityName, cfg.PartitionBy, pc, suffixRate)
	rm := ruleMetrics{rule: rateRule(entityName), denied: OutcomeRateLimited}
	return m.checkRateKey(ctx, key, &rm, cfg, m.now().UnixMilli())
}

// checkRateKey counts a request against the rate limit cfg stored at key,
// at nowMs.
func (m *GuardManager) checkRateKey(ctx context.Context, key string, rm *ruleMetrics, cfg *RateLimitConfig, nowMs int64) (RateLimitResult, error) {
	var r RateLimitResult
	err := m.skipStorage()
	if err == nil {
		r, err = m.limiter.CheckAt(ctx, key, cfg.MaxRequests, cfg.Window(), nowMs)
	}
	if err != nil {
		if ctx.Err() == nil {
			m.metrics.storageUnavailable(rm.rule, m.failOpen)
		}
		if err := m.storageFailed(ctx, "rate limit", err); err != nil {
			return RateLimitResult{}, err
		}
		return RateLimitResult{Allowed: true, Limit: cfg.MaxRequests, Remaining: cfg.MaxRequests}, nil
	}
	m.storageOK()
	rm.decide(m.metrics, r.Allowed)
	return r, nil
}

func rateRule(entityName string) string {
	if entityName == GlobalEntity {
		return RuleGlobalRateLimit
	}
	return RuleRateLimit
}

func concurrencyRule(entityName string) string {
	if entityName == GlobalEntity {
		return RuleGlobalConcurrency
	}
	return RuleConcurrency
}

// PreparedRateLimit is one entity's rate limit set up for repeated checks
// (PrepareRateLimit): its rule and, when its partition is global, its
// storage key are resolved once, and the caller reads the clock once for
// all the checks of a request. Safe for concurrent use.
type PreparedRateLimit struct {
	m         *GuardManager
	cfg       RateLimitConfig
	metrics   ruleMetrics
	keyPrefix string     // "<entity>:", the entity escaped (EscapeKeyPart)
	fixedKey  string     // the storage key of a global partition, else ""
	memKey    *memoryKey // fixedKey in the memory storage, when that is the storage
}

// PrepareRateLimit prepares the rate limit cfg of entityName. Checks of the
// result count against the same counters as CheckRateLimit(entityName, &cfg).
func (m *GuardManager) PrepareRateLimit(entityName string, cfg RateLimitConfig) *PreparedRateLimit {
	p := &PreparedRateLimit{m: m, cfg: cfg, metrics: m.metrics.forRule(rateRule(entityName), OutcomeRateLimited), keyPrefix: EscapeKeyPart(entityName) + ":"}
	if fixedPartition(cfg.PartitionBy) {
		p.fixedKey = BuildStorageKey(entityName, PartitionGlobal, suffixRate)
		if m.mem != nil {
			p.memKey = m.mem.fixedKey(p.fixedKey)
		}
	}
	return p
}

// Check counts a request of partition at now, like CheckRateLimit.
// partition is the request's partition value (ResolvePartitionKey of the
// limit's PartitionBy, or the caller's own); it is ignored when the limit
// is global.
func (p *PreparedRateLimit) Check(ctx context.Context, partition string, now time.Time) (RateLimitResult, error) {
	if !p.m.cfg.Enabled {
		return allowAll, nil
	}
	if mem := p.m.mem; mem != nil {
		r := p.checkMemory(mem, partition, now.UnixMilli())
		p.metrics.decide(p.m.metrics, r.Allowed) // the memory storage does not fail
		return r, nil
	}
	key := p.fixedKey
	if key == "" {
		key = p.keyPrefix + EscapeKeyPart(partition) + ":" + suffixRate
	}
	return p.m.checkRateKey(ctx, key, &p.metrics, &p.cfg, now.UnixMilli())
}

// checkMemory is Check on the memory storage: a global partition's window
// is kept by memKey; a partition's key is written in a buffer on the stack
// (copied only the first time the storage sees it).
func (p *PreparedRateLimit) checkMemory(mem *MemoryStorage, partition string, nowMs int64) RateLimitResult {
	maxRequests, windowMs := p.cfg.MaxRequests, p.cfg.Window()
	start := nowMs - nowMs%windowMs
	var st WindowState
	if p.memKey != nil {
		st = p.memKey.slidingWindow(start, windowMs, nowMs, maxRequests)
	} else {
		var buf [128]byte
		st = mem.slidingWindowBytes(appendKey(buf[:0], p.keyPrefix, partition, suffixRate), start, windowMs, nowMs, maxRequests)
	}
	return windowResult(st, maxRequests, windowMs, nowMs)
}

// appendKey appends to b the storage key of a prepared limit's partition
// (BuildStorageKey's): prefix (its escaped entity and a colon), partition
// escaped, a colon and suffix.
func appendKey(b []byte, prefix, partition, suffix string) []byte {
	b = append(b, prefix...)
	b = appendKeyPart(b, partition)
	b = append(b, ':')
	return append(b, suffix...)
}

// PreparedSemaphore is one entity's concurrency limit set up for repeated
// acquisitions (PrepareSemaphore), as PreparedRateLimit is for a rate
// limit. Safe for concurrent use.
type PreparedSemaphore struct {
	m         *GuardManager
	entity    string
	cfg       ConcurrencyConfig
	metrics   ruleMetrics
	keyPrefix string
	fixedKey  string
	memKey    *memoryKey // as PreparedRateLimit's
	// holdMs is how long a ticket lives unless released (0: the ticket
	// TTL); see WithTimeout.
	holdMs int64
	owner  ticketOwner // of every ticket it hands out
}

// HoldMs is how long a semaphore ticket of a holder bound by timeoutMs
// lives unless released: twice the timeout plus 5 s (room for the clocks
// of several gateways to differ), at most the ticket TTL; 0 (the TTL)
// without a timeout. The holder releases its slot by its timeout, so the
// expiry matters only for a holder that could not: a gateway killed while
// it held slots gives them back after this, not after the 300 s TTL.
func HoldMs(timeoutMs int64) int64 {
	if timeoutMs <= 0 {
		return 0
	}
	return 2*timeoutMs + 5000
}

// WithTimeout returns a copy of p whose tickets expire HoldMs(timeoutMs)
// after they are taken: for holders cut off at timeoutMs (the guard's
// timeout).
func (p *PreparedSemaphore) WithTimeout(timeoutMs int64) *PreparedSemaphore {
	q := *p
	q.holdMs = HoldMs(timeoutMs)
	return &q
}

// PrepareSemaphore prepares the concurrency limit cfg of entityName. Its
// slots are the same as those of AcquireSemaphore(entityName, &cfg).
func (m *GuardManager) PrepareSemaphore(entityName string, cfg ConcurrencyConfig) *PreparedSemaphore {
	p := &PreparedSemaphore{m: m, entity: entityName, cfg: cfg, metrics: m.metrics.forRule(concurrencyRule(entityName), OutcomeConcurrencyLimited),
		keyPrefix: EscapeKeyPart(entityName) + ":"}
	p.owner = ticketOwner{sem: m.sem, manager: m, inUse: p.metrics.inUse}
	if fixedPartition(cfg.PartitionBy) {
		p.fixedKey = BuildStorageKey(entityName, PartitionGlobal, suffixSem)
		if m.mem != nil {
			p.memKey = m.mem.fixedKey(p.fixedKey)
		}
	}
	return p
}

// Acquire takes a slot of partition into t, which must be a zero
// SemaphoreTicket (so that a caller can hold its tickets without
// allocating them); release it with t.Release. Errors are those of
// AcquireSemaphore; on an error t holds nothing.
func (p *PreparedSemaphore) Acquire(ctx context.Context, partition string, t *SemaphoreTicket) error {
	return p.AcquireAt(ctx, partition, p.m.now(), t)
}

// AcquireAt is Acquire at now, a time of the manager's clock read by the
// caller (e.g. once for all the checks of a request, as for
// PreparedRateLimit.Check): the ticket's expiry counts from it, and so
// does the slot's wait in the queue-wait histogram.
func (p *PreparedSemaphore) AcquireAt(ctx context.Context, partition string, now time.Time, t *SemaphoreTicket) error {
	m := p.m
	if !m.cfg.Enabled {
		return nil
	}
	if m.mem != nil {
		// A numbered slot, its key kept or written on the stack (see
		// PreparedRateLimit.checkMemory): no ticket text, nothing allocated.
		nowMs := now.UnixMilli()
		expiresAtMs := nowMs + m.sem.ttl(p.holdMs)
		var sem *memorySem
		var n uint64
		if p.memKey != nil {
			sem, n = p.memKey.acquireNumbered(p.cfg.MaxConcurrent, nowMs, expiresAtMs)
		} else {
			var buf [128]byte
			sem, n = m.mem.acquireNumbered(appendKey(buf[:0], p.keyPrefix, partition, suffixSem), p.cfg.MaxConcurrent, nowMs, expiresAtMs)
		}
		if sem != nil {
			p.metrics.decide(m.metrics, true)
			if m.metrics != nil {
				p.metrics.acquired(m.metrics, m.since(now))
			}
			t.Key, t.slot, t.mem, t.owner = sem.key, n, sem, &p.owner
			return nil
		}
		if p.cfg.QueueTimeoutMs <= 0 {
			p.metrics.decide(m.metrics, false)
			return NewConcurrencyLimitError(p.entity, p.cfg.MaxConcurrent)
		}
		// All slots taken: wait in the queue as any ticket does.
	}
	key := p.fixedKey
	if key == "" {
		key = p.keyPrefix + EscapeKeyPart(partition) + ":" + suffixSem
	}
	return m.acquireKey(ctx, key, p.entity, &p.metrics, &p.cfg, p.holdMs, t, &p.owner, now)
}

func fixedPartition(p PartitionKey) bool {
	return p.Func == nil && (p.Strategy == "" || p.Strategy == PartitionGlobal)
}

// AcquireSemaphore takes a slot of entityName under cfg, else under
// defaultConcurrency. It returns (nil, nil) when no config applies, a
// CONCURRENCY_LIMIT *GuardError when all slots are taken and queueTimeoutMs
// is 0, and a QUEUE_TIMEOUT *GuardError when the wait expires. A storage
// failure gives a ticket whose Release does nothing (failure mode open) or
// a STORAGE_UNAVAILABLE *GuardError (closed).
func (m *GuardManager) AcquireSemaphore(ctx context.Context, entityName string, cfg *ConcurrencyConfig, pc PartitionKeyContext) (*SemaphoreTicket, error) {
	return m.AcquireSemaphoreTimed(ctx, entityName, cfg, pc, 0)
}

// AcquireSemaphoreTimed is AcquireSemaphore for a holder cut off at
// timeoutMs (0: none): its ticket expires HoldMs(timeoutMs) after it is
// taken unless released.
func (m *GuardManager) AcquireSemaphoreTimed(ctx context.Context, entityName string, cfg *ConcurrencyConfig, pc PartitionKeyContext, timeoutMs int64) (*SemaphoreTicket, error) {
	if cfg == nil {
		cfg = m.cfg.DefaultConcurrency
	}
	return m.acquire(ctx, entityName, cfg, pc, HoldMs(timeoutMs))
}

// AcquireGlobalSemaphore takes a slot of the global concurrency limit;
// (nil, nil) when it is unset.
func (m *GuardManager) AcquireGlobalSemaphore(ctx context.Context, pc PartitionKeyContext) (*SemaphoreTicket, error) {
	return m.acquire(ctx, GlobalEntity, m.cfg.GlobalConcurrency, pc, 0)
}

func (m *GuardManager) acquire(ctx context.Context, entityName string, cfg *ConcurrencyConfig, pc PartitionKeyContext, holdMs int64) (*SemaphoreTicket, error) {
	if cfg == nil || !m.cfg.Enabled {
		return nil, nil
	}
	key := m.storageKey(entityName, cfg.PartitionBy, pc, suffixSem)
	t := new(SemaphoreTicket)
	rm := ruleMetrics{rule: concurrencyRule(entityName), denied: OutcomeConcurrencyLimited}
	if err := m.acquireKey(ctx, key, entityName, &rm, cfg, holdMs, t, nil, m.now()); err != nil {
		return nil, err
	}
	return t, nil
}

// acquireKey takes a slot of the semaphore cfg stored at key into t, its
// ticket living holdMs (0: the ticket TTL) unless released, trying first
// at started (a time of m.now). The ticket's owner is owner (a prepared
// semaphore's), else one made for it.
func (m *GuardManager) acquireKey(ctx context.Context, key, entityName string, rm *ruleMetrics, cfg *ConcurrencyConfig, holdMs int64, t *SemaphoreTicket, owner *ticketOwner, started time.Time) error {
	ok := false
	err := m.skipStorage()
	if err == nil {
		ok, err = m.sem.acquire(ctx, key, cfg.MaxConcurrent, cfg.QueueTimeoutMs, entityName, started.UnixMilli(), holdMs, t)
	}
	if err != nil {
		var ge *GuardError
		if errors.As(err, &ge) {
			m.storageOK()
			if ge.Code == CodeQueueTimeout {
				m.metrics.decide(rm.rule, OutcomeQueueTimeout)
				m.metrics.waited(OutcomeQueueTimeout, m.since(started))
			}
			return err
		}
		if ctx.Err() == nil {
			m.metrics.storageUnavailable(rm.rule, m.failOpen)
		}
		if err := m.storageFailed(ctx, "semaphore", err); err != nil {
			return err
		}
		t.Ticket, t.Key = newUUID(), key // holds nothing: its Release does nothing
		return nil
	}
	m.storageOK()
	rm.decide(m.metrics, ok)
	if !ok {
		return NewConcurrencyLimitError(entityName, cfg.MaxConcurrent)
	}
	var g prometheus.Gauge
	if m.metrics != nil {
		g = rm.acquired(m.metrics, m.since(started))
	}
	if owner == nil {
		owner = &ticketOwner{sem: m.sem, manager: m, inUse: g}
	}
	t.owner = owner
	return nil
}

// TimeoutMs returns cfg's executeMs, else defaultTimeout's, else 0 (none).
func (m *GuardManager) TimeoutMs(cfg *TimeoutConfig) int64 {
	if !m.cfg.Enabled {
		return 0
	}
	if cfg == nil {
		cfg = m.cfg.DefaultTimeout
	}
	if cfg == nil {
		return 0
	}
	return cfg.ExecuteMs
}

// CheckIpFilter evaluates clientIP; nil when no filter is configured, the
// guard is disabled or clientIP is empty.
func (m *GuardManager) CheckIpFilter(clientIP string) *IpFilterResult {
	// Small enough to be inlined, so that the result stays on the
	// caller's stack.
	if r, ok := m.checkIP(clientIP, netip.Addr{}, false); ok {
		return &r
	}
	return nil
}

// CheckIpFilterAddr is CheckIpFilter of clientIP whose parsed form
// (ParseClientIP, IpFilter.ClientAddr) is addr, for a caller that parsed it
// already; the zero addr gets the default action.
func (m *GuardManager) CheckIpFilterAddr(clientIP string, addr netip.Addr) *IpFilterResult {
	if r, ok := m.checkIP(clientIP, addr, true); ok {
		return &r
	}
	return nil
}

func (m *GuardManager) checkIP(clientIP string, addr netip.Addr, parsed bool) (IpFilterResult, bool) {
	if m.ipFilter == nil || !m.cfg.Enabled || clientIP == "" {
		return IpFilterResult{}, false
	}
	if !parsed {
		addr, _ = ParseClientIP(clientIP)
	}
	r := m.ipFilter.CheckAddr(addr)
	m.ipMetrics.decide(m.metrics, r.Allowed)
	return r, true
}

// IsIpAllowListed reports whether a filter is configured, clientIP is given
// and it matches the allow list.
func (m *GuardManager) IsIpAllowListed(clientIP string) bool {
	if m.ipFilter == nil || !m.cfg.Enabled || clientIP == "" {
		return false
	}
	return m.ipFilter.IsAllowListed(clientIP)
}

// Now reads the manager's clock (ManagerOptions.Now), e.g. once for the
// prepared checks of a request.
func (m *GuardManager) Now() time.Time { return m.now() }

// since is the time passed since start, a time of m.now. With the real
// clock it reads only the monotonic clock (time.Since), not the wall clock.
func (m *GuardManager) since(start time.Time) time.Duration {
	if m.realClock {
		return time.Since(start)
	}
	return m.now().Sub(start)
}

// IpFilter returns the configured filter, or nil.
func (m *GuardManager) IpFilter() *IpFilter { return m.ipFilter }

// Destroy closes the storage backend when the manager created it.
func (m *GuardManager) Destroy(context.Context) error {
	if m.ownsStore {
		return m.store.Close()
	}
	return nil
}

func (m *GuardManager) failureMode() string {
	if m.failOpen {
		return FailOpen
	}
	return FailClosed
}

// errStorageSkipped stands for the last storage error while the manager
// waits before probing storage again.
var errStorageSkipped = errors.New("guard storage failed recently; not retried yet")

// skipStorage returns errStorageSkipped during an outage until the next
// probe is due.
func (m *GuardManager) skipStorage() error {
	if m.degraded.Load() && m.now().UnixMilli() < m.retryAtMs.Load() {
		return errStorageSkipped
	}
	return nil
}

// storageFailed logs the first failure of an outage and applies the failure
// mode: nil to fail open, a STORAGE_UNAVAILABLE error to fail closed. A
// cancelled ctx is returned as is.
func (m *GuardManager) storageFailed(ctx context.Context, op string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != errStorageSkipped {
		m.retryAtMs.Store(m.now().Add(storageRetryInterval).UnixMilli())
	}
	if m.degraded.CompareAndSwap(false, true) {
		m.logger.Error("guard storage unreachable; applying the failure mode until it recovers",
			zap.String("operation", op), zap.String("failure_mode", m.failureMode()), zap.Error(err))
	}
	if m.failOpen {
		return nil
	}
	return NewStorageUnavailableError(err)
}

func (m *GuardManager) storageOK() {
	if m.degraded.Load() && m.degraded.CompareAndSwap(true, false) {
		m.logger.Info("guard storage reachable again")
	}
}
