package broker

import (
	"context"
	"net/http"
	"time"

	"github.com/codemode-gateway/caddy-codemode/broker/catalog"
	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"
	"github.com/codemode-gateway/caddy-codemode/guard"
	"github.com/codemode-gateway/caddy-codemode/internal/telemetry"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// Defaults of BrokerOptions and ExecuteOptions.
const (
	DefaultSessionTimeout        = 5 * time.Minute
	DefaultMaxConcurrentSessions = 1000
	DefaultExecutionTimeout      = 30 * time.Second
	DefaultMaxToolCalls          = 100
	DefaultMaxBodyBytes          = 1 << 20
	DefaultKeyPrefix             = "codemode:broker:"
	DefaultDrainTimeout          = 10 * time.Second
	DefaultOwnerTimeout          = 15 * time.Second
	DefaultStorageTimeout        = 2 * time.Second
	DefaultMaxStreamBytes        = 16 << 20
	DefaultMaxFinishedBytes      = 256 << 20
	DefaultToolTimeout           = 30 * time.Second
	DefaultMaxAuthFailures       = 20
)

// Storage failure modes (BrokerOptions.StorageFailureMode).
const (
	// StorageFailClosed refuses new executions while the session store is
	// unreachable (503 STORAGE_UNAVAILABLE): no session exists that the
	// other gateways cannot see.
	StorageFailClosed = "closed"
	// StorageFailOpen runs new executions on this gateway even then; their
	// records are written when the store answers again, and until then only
	// this gateway knows them.
	StorageFailOpen = "open"
)

// BrokerOptions configures a Broker. Only Engine is required.
type BrokerOptions struct {
	// Redis, when set, keeps sessions and caller-answered calls in Redis so
	// that every broker sharing it (and KeyPrefix) serves the same sessions.
	// Nil means in-memory state for this broker only. The broker does not
	// close the client. StorageTimeout bounds a read only on a client with
	// ContextTimeoutEnabled (go-redis applies a context's deadline to the
	// dial and the pool wait otherwise, and a read waits for ReadTimeout).
	Redis redis.UniversalClient
	// KeyPrefix prefixes every Redis key and the pub/sub channel. Default
	// "codemode:broker:".
	KeyPrefix string
	// SessionTimeout is how long a session record lives after creation; an
	// execution is never allowed to run longer. Default 5 minutes.
	SessionTimeout time.Duration
	// MaxConcurrentSessions caps the pending and running sessions of this
	// broker; more get SESSION_LIMIT (HTTP 429). Default 1000.
	MaxConcurrentSessions int
	// Tools is the registry of Go tools and caller-answered tools. Nil
	// means an empty registry.
	Tools *ToolRegistry
	// ToolHandler answers calls to registered tools that have no Handler of
	// their own. Nil means such calls are streamed to the caller.
	ToolHandler ToolHandler
	// Engine runs scripts. Required. The broker does not close it.
	Engine sandbox.Engine
	// Catalog, when set, contributes its OpenAPI actions as callable tools
	// and serves GET /code/actions. The broker does not start or close it.
	Catalog *catalog.Catalog
	// Authentication, when set, is required on every endpoint but /health.
	Authentication *AuthConfig
	// RateLimiting, when set, limits requests to every endpoint but /health.
	RateLimiting *RateLimitConfig
	// Guard enforces tool rate limits, concurrency and timeouts (the
	// per-tool ToolGuard, else the manager's defaults from `throttle`) and
	// RateLimiting. Nil means tool calls are not throttled and RateLimiting
	// uses a private in-memory manager.
	Guard *guard.GuardManager
	// ToolDefaults are the guard settings of tools (registry tools and
	// catalog actions) that have none of their own; nil fields fall back to
	// the guard manager's defaults (the throttle block). Needs Guard.
	ToolDefaults ToolGuard
	// DefaultTimeout is an execution's timeout when the request gives none.
	// Default 30 s; never more than SessionTimeout.
	DefaultTimeout time.Duration
	// MaxTimeout is the most a request may ask for (a caller may lower
	// its timeout, never raise it above this: 400 LIMIT_EXCEEDED). Default
	// DefaultTimeout; never more than SessionTimeout.
	MaxTimeout time.Duration
	// DefaultMaxToolCalls is an execution's tool call limit when the
	// request gives none, and the most it may ask for (LIMIT_EXCEEDED
	// above). Default 100.
	DefaultMaxToolCalls int
	// MaxSessionsPerPrincipal caps the pending and running sessions of one
	// principal (a user of a tenant, an API key, or a client address) on
	// this broker; more get SESSION_LIMIT. Default a quarter of
	// MaxConcurrentSessions.
	MaxSessionsPerPrincipal int
	// MaxStreamBytes bounds what one session streams (events' inputs,
	// results, messages); past it the session ends with STREAM_LIMIT.
	// Default 16 MiB.
	MaxStreamBytes int64
	// MaxFinishedBytes bounds the results, console logs and error texts of
	// the finished sessions the store keeps until they expire; past it the
	// oldest finished records are removed (a GET of one is 404, as after
	// its expiry; the newest is always kept). With Redis the bound is
	// shared by every broker on the key prefix (set it alike on all of
	// them: each finish trims to its own). Default 256 MiB.
	MaxFinishedBytes int64
	// ToolTimeout is the deadline of a tool call answered by Go or by the
	// catalog when the guard sets none (a call the caller answers waits up
	// to the execution's timeout). Default 30 s.
	ToolTimeout time.Duration
	// MaxAuthFailures bounds failed authentications per client address and
	// minute, counted with RateLimiting's bucket of that address when set,
	// else on their own; past it requests get 429 RATE_LIMIT instead of
	// 401. Default 20; negative means no bound.
	MaxAuthFailures int64
	// ClientPrefixes key an anonymous caller's address wherever the
	// broker counts per address (principals, RateLimiting's and
	// MaxAuthFailures' buckets, ip partitions of tool limits): every
	// address of an IPv6 /64 is one caller by default
	// (guard.ClientPrefixes.Key). The zero value is the defaults.
	ClientPrefixes guard.ClientPrefixes
	// MaxBodyBytes caps request bodies; larger ones get 413. Default 1 MiB.
	MaxBodyBytes int64
	// Directory, when set, lists this broker's running sessions so that
	// other brokers sharing it hand tool results and status requests for
	// them to this one (see SessionDirectory). Nil means none.
	Directory *SessionDirectory
	// OwnerTimeout is how long a broker sharing Redis may go without
	// renewing its liveness before its running sessions are ended with
	// OWNER_LOST (by whichever broker reads them, answers them or reaps
	// first; the reaper runs every OwnerTimeout/3). Default 15 s.
	OwnerTimeout time.Duration
	// StorageTimeout bounds every operation on the session store, so that
	// no request waits longer on an unreachable Redis. Default 2 s.
	StorageTimeout time.Duration
	// StorageFailureMode is StorageFailClosed (default) or StorageFailOpen.
	StorageFailureMode string
	// Logger receives operational logs. Nil means no logging.
	Logger *zap.Logger
	// Metrics, when set, counts sessions, executions, tool calls, caller
	// waits, streamed events and Redis errors (several brokers may share
	// one). Nil records nothing.
	Metrics *Metrics
	// Now is the clock; nil means time.Now. Tests inject one.
	Now func() time.Time
}

// Authentication types.
const (
	AuthBearer = "bearer"
	AuthAPIKey = "api-key"
	AuthCustom = "custom"
)

// AuthConfig is the authentication hook.
type AuthConfig struct {
	// Type is bearer (token from "Authorization: Bearer <token>"), api-key
	// (token from "X-API-Key: <token>") or custom (Token extracts it; by
	// default either header).
	Type string
	// Validate checks a token. A nil error with Valid false, or an error,
	// is a 401; errors are logged, never shown.
	Validate func(ctx context.Context, token string) (*AuthResult, error)
	// Token extracts the credential for type custom. Nil means the Bearer
	// token, else X-API-Key.
	Token func(r *http.Request) string
}

// AuthResult is the outcome of authentication; it travels with the session.
// The principal it names (UserID within TenantID) owns the session and
// its buckets. A credential validated without a UserID is given one of its
// own ("key:" and a digest of the credential), so that two keys configured
// without user ids never share sessions.
type AuthResult struct {
	Valid       bool     `json:"valid"`
	UserID      string   `json:"userId,omitempty"`
	TenantID    string   `json:"tenantId,omitempty"`
	Permissions []string `json:"permissions,omitempty"`
}

// RateLimitConfig limits HTTP requests per key with the guard's sliding
// window.
type RateLimitConfig struct {
	// WindowMs is the window length in milliseconds. Required (> 0).
	WindowMs int64
	// MaxRequests is the number of requests per window and key. Required (> 0).
	MaxRequests int64
	// KeyGenerator returns a request's bucket key. Nil, or an empty key,
	// means the authenticated user id, else the client address.
	KeyGenerator func(r *http.Request) string
}

// WithRequestID returns a context carrying the id an HTTP front end gave
// the request (Caddy's {http.request.uuid}); the broker's log lines and 5xx
// answers show it. Without one the broker's handler makes its own.
func WithRequestID(ctx context.Context, id string) context.Context {
	return telemetry.WithRequestID(ctx, id)
}

// Principal names who a request acts for, for fair sharing and buckets:
// "user:<tenant>/<user>" for an authenticated caller, else
// "ip:<address key>": clientIP, the client address Caddy determined
// (behind trusted proxies the original client's), keyed by
// guard.ClientPrefixes.Key ("ip:2001:db8:1:2::/64", "ip:203.0.113.7").
// The broker keys it with its ClientPrefixes; an address given unkeyed
// is its own principal.
func Principal(auth *AuthResult, clientIP string) string {
	if auth != nil && auth.UserID != "" {
		return "user:" + auth.TenantID + "/" + auth.UserID
	}
	return "ip:" + clientIP
}

type clientIPContextKey struct{}

// WithClientIP returns a context carrying the client address an HTTP front
// end determined (Caddy's client_ip, which honours trusted_proxies); the
// broker uses it instead of the connection's address.
func WithClientIP(ctx context.Context, ip string) context.Context {
	return context.WithValue(ctx, clientIPContextKey{}, ip)
}

type authContextKey struct{}

// WithAuth returns a context carrying an AuthResult from an authentication
// layer in front of the broker (for example Caddy's authentication
// handler). The broker's HTTP handler accepts it instead of checking a token.
func WithAuth(ctx context.Context, a *AuthResult) context.Context {
	return context.WithValue(ctx, authContextKey{}, a)
}

// AuthFromContext returns the AuthResult placed by WithAuth, or nil.
func AuthFromContext(ctx context.Context) *AuthResult {
	a, _ := ctx.Value(authContextKey{}).(*AuthResult)
	return a
}
