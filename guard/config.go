package guard

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Defaults of the spec.
const (
	// DefaultKeyPrefix prefixes every storage key.
	DefaultKeyPrefix = "mcp:guard:"
	// DefaultWindowMs is the rate-limit window when windowMs is 0.
	DefaultWindowMs int64 = 60000
	// DefaultTrustedProxyDepth is trustedProxyDepth when it is 0.
	DefaultTrustedProxyDepth = 1
	// DefaultTicketTTLSeconds is how long a semaphore ticket lives unless
	// released, so that a crashed holder's slot comes back.
	DefaultTicketTTLSeconds = 300
	// DefaultRedisPort is StorageConfig.Port when it is 0.
	DefaultRedisPort = 6379
)

// Storage providers.
const (
	ProviderMemory = "memory"
	ProviderRedis  = "redis"
)

// Failure modes for an unreachable storage backend.
const (
	// FailOpen lets requests through (and logs) while storage fails.
	FailOpen = "open"
	// FailClosed rejects guarded requests with STORAGE_UNAVAILABLE (503)
	// while storage fails.
	FailClosed = "closed"
)

// GuardConfig configures a GuardManager.
type GuardConfig struct {
	// Enabled turns every guard feature on. When false the manager allows
	// everything (no limits, no IP filter).
	Enabled bool `json:"enabled"`
	// Storage selects the backend. Unset means in-memory.
	Storage *StorageConfig `json:"storage,omitempty"`
	// KeyPrefix prefixes every storage key. Default "mcp:guard:".
	KeyPrefix string `json:"keyPrefix,omitempty"`
	// Global is the rate limit applied to all requests (CheckGlobalRateLimit).
	Global *RateLimitConfig `json:"global,omitempty"`
	// GlobalConcurrency is the concurrency limit applied to all requests
	// (AcquireGlobalSemaphore).
	GlobalConcurrency *ConcurrencyConfig `json:"globalConcurrency,omitempty"`
	// DefaultRateLimit applies to entities without their own rate limit.
	DefaultRateLimit *RateLimitConfig `json:"defaultRateLimit,omitempty"`
	// DefaultConcurrency applies to entities without their own concurrency limit.
	DefaultConcurrency *ConcurrencyConfig `json:"defaultConcurrency,omitempty"`
	// DefaultTimeout is the execution timeout of entities without their own.
	DefaultTimeout *TimeoutConfig `json:"defaultTimeout,omitempty"`
	// IpFilter configures IP allow/deny rules. Unset means no filtering.
	IpFilter *IpFilterConfig `json:"ipFilter,omitempty"`
}

// Validate reports the first invalid field, named by its JSON path.
func (c *GuardConfig) Validate() error {
	if c == nil {
		return nil
	}
	if c.Storage != nil {
		if err := c.Storage.Validate(); err != nil {
			return fmt.Errorf("storage: %w", err)
		}
	}
	for _, rl := range []struct {
		name string
		c    *RateLimitConfig
	}{{"global", c.Global}, {"defaultRateLimit", c.DefaultRateLimit}} {
		if err := rl.c.Validate(); err != nil {
			return fmt.Errorf("%s: %w", rl.name, err)
		}
	}
	for _, cc := range []struct {
		name string
		c    *ConcurrencyConfig
	}{{"globalConcurrency", c.GlobalConcurrency}, {"defaultConcurrency", c.DefaultConcurrency}} {
		if err := cc.c.Validate(); err != nil {
			return fmt.Errorf("%s: %w", cc.name, err)
		}
	}
	if err := c.DefaultTimeout.Validate(); err != nil {
		return fmt.Errorf("defaultTimeout: %w", err)
	}
	if err := c.IpFilter.Validate(); err != nil {
		return fmt.Errorf("ipFilter: %w", err)
	}
	return nil
}

// StorageConfig selects and configures the storage backend.
type StorageConfig struct {
	// Provider is "memory" (default) or "redis".
	Provider string `json:"provider,omitempty"`
	// Host of the Redis server. Default "127.0.0.1".
	Host string `json:"host,omitempty"`
	// Port of the Redis server. Default 6379.
	Port int `json:"port,omitempty"`
	// Password of the Redis server, if any. Never logged.
	Password string `json:"password,omitempty"`
	// DB is the Redis database number. Default 0.
	DB int `json:"db,omitempty"`
	// TLS connects to Redis over TLS. Default false.
	TLS bool `json:"tls,omitempty"`
	// FailureMode says what happens while Redis is unreachable: "open"
	// (default: requests pass, an error is logged once per outage) or
	// "closed" (guarded requests fail with STORAGE_UNAVAILABLE, 503).
	FailureMode string `json:"failureMode,omitempty"`
	// TimeoutMs bounds each Redis command, in milliseconds. Default 500.
	TimeoutMs int64 `json:"timeoutMs,omitempty"`
	// Client is an existing Redis client to use instead of Host/Port; the
	// manager does not close it.
	Client redis.UniversalClient `json:"-"`
}

// Validate reports the first invalid field.
func (c *StorageConfig) Validate() error {
	if c == nil {
		return nil
	}
	switch c.Provider {
	case "", ProviderMemory, ProviderRedis:
	default:
		return fmt.Errorf("provider: must be %q or %q, got %q", ProviderMemory, ProviderRedis, c.Provider)
	}
	if c.Port < 0 || c.Port > 65535 {
		return fmt.Errorf("port: must be between 0 and 65535, got %d", c.Port)
	}
	if c.DB < 0 {
		return fmt.Errorf("db: must not be negative, got %d", c.DB)
	}
	switch c.FailureMode {
	case "", FailOpen, FailClosed:
	default:
		return fmt.Errorf("failureMode: must be %q or %q, got %q", FailOpen, FailClosed, c.FailureMode)
	}
	if c.TimeoutMs < 0 {
		return fmt.Errorf("timeoutMs: must not be negative, got %d", c.TimeoutMs)
	}
	return nil
}

// RateLimitConfig is a sliding-window rate limit.
type RateLimitConfig struct {
	// MaxRequests is the number of requests allowed per window. Required (> 0).
	MaxRequests int64 `json:"maxRequests"`
	// WindowMs is the window length in milliseconds. Default 60000.
	WindowMs int64 `json:"windowMs,omitempty"`
	// PartitionBy says what gets its own counter. Default global.
	PartitionBy PartitionKey `json:"partitionBy,omitzero"`
}

// Validate reports the first invalid field.
func (c *RateLimitConfig) Validate() error {
	if c == nil {
		return nil
	}
	if c.MaxRequests <= 0 {
		return fmt.Errorf("maxRequests: must be positive, got %d", c.MaxRequests)
	}
	if c.WindowMs < 0 {
		return fmt.Errorf("windowMs: must not be negative, got %d", c.WindowMs)
	}
	if err := c.PartitionBy.Validate(); err != nil {
		return fmt.Errorf("partitionBy: %w", err)
	}
	return nil
}

// Window returns WindowMs or its default.
func (c *RateLimitConfig) Window() int64 {
	if c.WindowMs <= 0 {
		return DefaultWindowMs
	}
	return c.WindowMs
}

// ConcurrencyConfig is a distributed-semaphore concurrency limit.
type ConcurrencyConfig struct {
	// MaxConcurrent is the number of simultaneous executions. Required (> 0).
	MaxConcurrent int64 `json:"maxConcurrent"`
	// QueueTimeoutMs is the longest wait for a slot, in milliseconds.
	// Default 0: reject at once when no slot is free.
	QueueTimeoutMs int64 `json:"queueTimeoutMs,omitempty"`
	// PartitionBy says what gets its own slots. Default global.
	PartitionBy PartitionKey `json:"partitionBy,omitzero"`
}

// Validate reports the first invalid field.
func (c *ConcurrencyConfig) Validate() error {
	if c == nil {
		return nil
	}
	if c.MaxConcurrent <= 0 {
		return fmt.Errorf("maxConcurrent: must be positive, got %d", c.MaxConcurrent)
	}
	if c.QueueTimeoutMs < 0 {
		return fmt.Errorf("queueTimeoutMs: must not be negative, got %d", c.QueueTimeoutMs)
	}
	if err := c.PartitionBy.Validate(); err != nil {
		return fmt.Errorf("partitionBy: %w", err)
	}
	return nil
}

// TimeoutConfig is an execution timeout.
type TimeoutConfig struct {
	// ExecuteMs is the longest execution, in milliseconds. Required (> 0).
	ExecuteMs int64 `json:"executeMs"`
}

// Validate reports the first invalid field.
func (c *TimeoutConfig) Validate() error {
	if c == nil {
		return nil
	}
	if c.ExecuteMs <= 0 {
		return fmt.Errorf("executeMs: must be positive, got %d", c.ExecuteMs)
	}
	return nil
}

// Default actions of an IpFilterConfig.
const (
	ActionAllow = "allow"
	ActionDeny  = "deny"
)

// IpFilterConfig configures IP allow/deny rules.
type IpFilterConfig struct {
	// AllowList holds IPs or CIDR ranges (IPv4 or IPv6) always allowed.
	AllowList []string `json:"allowList,omitempty"`
	// DenyList holds IPs or CIDR ranges always blocked; it wins over AllowList.
	DenyList []string `json:"denyList,omitempty"`
	// DefaultAction applies to IPs on neither list: "allow" (default) or "deny".
	DefaultAction string `json:"defaultAction,omitempty"`
	// TrustProxy takes the client IP from X-Forwarded-For. Default false.
	TrustProxy bool `json:"trustProxy,omitempty"`
	// TrustedProxyDepth is the most proxy hops to trust, counted from the
	// right of X-Forwarded-For. Default 1.
	TrustedProxyDepth int `json:"trustedProxyDepth,omitempty"`
}

// Validate reports the first invalid field, including unparsable rules.
func (c *IpFilterConfig) Validate() error {
	if c == nil {
		return nil
	}
	for i, r := range c.AllowList {
		if _, err := ParseIPRule(r); err != nil {
			return fmt.Errorf("allowList[%d]: %w", i, err)
		}
	}
	for i, r := range c.DenyList {
		if _, err := ParseIPRule(r); err != nil {
			return fmt.Errorf("denyList[%d]: %w", i, err)
		}
	}
	switch c.DefaultAction {
	case "", ActionAllow, ActionDeny:
	default:
		return fmt.Errorf("defaultAction: must be %q or %q, got %q", ActionAllow, ActionDeny, c.DefaultAction)
	}
	if c.TrustedProxyDepth < 0 {
		return fmt.Errorf("trustedProxyDepth: must not be negative, got %d", c.TrustedProxyDepth)
	}
	return nil
}

// Partition strategies.
const (
	PartitionGlobal  = "global"
	PartitionIP      = "ip"
	PartitionSession = "session"
	PartitionUserID  = "userId"
)

// Values used when the partition's source is absent.
const (
	UnknownIP = "unknown-ip"
	Anonymous = "anonymous"
)

// PartitionKey says what gets its own counter or slots: a strategy
// ("global", "ip", "session", "userId") or, in Go, a function. The zero value
// means global. In JSON it is the strategy string.
type PartitionKey struct {
	// Strategy is one of global, ip, session, userId; ignored when Func is set.
	Strategy string
	// Func computes the partition from the request context.
	Func func(PartitionKeyContext) string
}

// Validate reports an unknown strategy.
func (p PartitionKey) Validate() error {
	if p.Func != nil {
		return nil
	}
	switch p.Strategy {
	case "", PartitionGlobal, PartitionIP, PartitionSession, PartitionUserID:
		return nil
	}
	return fmt.Errorf("unknown strategy %q (want global, ip, session or userId)", p.Strategy)
}

// IsZero reports whether p is unset (global).
func (p PartitionKey) IsZero() bool { return p.Func == nil && p.Strategy == "" }

// MarshalJSON writes the strategy string; a function cannot be marshalled.
func (p PartitionKey) MarshalJSON() ([]byte, error) {
	if p.Func != nil {
		return nil, errors.New("partitionBy: a function partition key has no JSON form")
	}
	return json.Marshal(p.Strategy)
}

// UnmarshalJSON reads a strategy string.
func (p *PartitionKey) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("partitionBy: must be a string: %w", err)
	}
	*p = PartitionKey{Strategy: strings.TrimSpace(s)}
	return p.Validate()
}

// PartitionKeyContext is what a partition is resolved from.
type PartitionKeyContext struct {
	// SessionID identifies the session (MCP session id).
	SessionID string
	// ClientIP is the client's address keyed by ClientPrefixes.Key (an
	// IPv6 address's /64, by default), the value of the ip partition;
	// empty when unknown. An address passed unkeyed is its own partition.
	ClientIP string
	// UserID is the authenticated user; empty when anonymous.
	UserID string
}

// ResolvePartitionKey returns the partition value of p for pc: "global" for
// the zero value and "global", the client IP or "unknown-ip" for "ip", the
// session id for "session", the user id or "anonymous" for "userId", and the
// function's result for a function.
func ResolvePartitionKey(p PartitionKey, pc PartitionKeyContext) string {
	if p.Func != nil {
		return p.Func(pc)
	}
	switch p.Strategy {
	case PartitionIP:
		if pc.ClientIP == "" {
			return UnknownIP
		}
		return pc.ClientIP
	case PartitionSession:
		return pc.SessionID
	case PartitionUserID:
		if pc.UserID == "" {
			return Anonymous
		}
		return pc.UserID
	}
	return PartitionGlobal
}

// BuildStorageKey returns "<entity>:<partition>", with ":<suffix>" appended
// when a suffix is given. Each part is escaped (EscapeKeyPart), so that the
// ':' an entity or a partition may hold (a tool "math:add", an IPv6
// address, a caller's header) cannot make two different parts one key: "a"
// partitioned "b:x" is "a:b%3Ax", "a:b" partitioned "x" is "a%3Ab:x". Parts
// holding neither ':' nor '%' are written as they are.
func BuildStorageKey(entityName, partitionKey string, suffix ...string) string {
	switch {
	case len(suffix) == 0 || (len(suffix) == 1 && suffix[0] == ""):
		return EscapeKeyPart(entityName) + ":" + EscapeKeyPart(partitionKey)
	case len(suffix) == 1: // one concatenation on the hot path
		return EscapeKeyPart(entityName) + ":" + EscapeKeyPart(partitionKey) + ":" + EscapeKeyPart(suffix[0])
	}
	k := EscapeKeyPart(entityName) + ":" + EscapeKeyPart(partitionKey)
	for _, s := range suffix {
		if s != "" {
			k += ":" + EscapeKeyPart(s)
		}
	}
	return k
}

// EscapeKeyPart returns s with '%' written "%25" and ':' written "%3A", the
// form of a storage key's part: no ':' is left to be taken for a separator,
// and no two parts escape alike. s itself, not a copy, when it holds neither.
func EscapeKeyPart(s string) string {
	if keyPartClean(s) {
		return s
	}
	return string(appendKeyPart(make([]byte, 0, len(s)+8), s))
}

// keyPartClean reports whether s holds neither ':' nor '%'.
func keyPartClean(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == ':' || s[i] == '%' {
			return false
		}
	}
	return true
}

// appendKeyPart appends EscapeKeyPart(s) to b, the runs between the
// escaped bytes copied whole.
func appendKeyPart(b []byte, s string) []byte {
	for {
		i := 0
		for i < len(s) && s[i] != ':' && s[i] != '%' {
			i++
		}
		b = append(b, s[:i]...)
		if i == len(s) {
			return b
		}
		if s[i] == ':' {
			b = append(b, "%3A"...)
		} else {
			b = append(b, "%25"...)
		}
		s = s[i+1:]
	}
}
