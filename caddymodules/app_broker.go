package caddymodules

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/dustin/go-humanize"
	"go.uber.org/zap"

	"github.com/codemode-gateway/caddy-codemode/broker"
	"github.com/codemode-gateway/caddy-codemode/broker/catalog"
	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"
)

// BrokerConfig is the `broker` part of the codemode app: sessions, tools,
// the OpenAPI action catalog and session storage. The broker it describes
// is shared by every codemode_broker handler (and the meta-tools) and
// survives config reloads that leave this block, the sandbox, the throttle
// and the storage unchanged: running sessions, their pending tool calls and
// the catalog carry over. Otherwise a new broker is built; the old one
// finishes its running sessions in the background (up to drain_timeout,
// then aborts them), and tool results for them are handed to it.
//
// String values (keys, passwords, URLs, headers) may use runtime
// placeholders such as {env.API_TOKEN}.
type BrokerConfig struct {
	// SessionTimeout is how long a session record lives after creation
	// (an execution never runs longer). Default 5m.
	SessionTimeout caddy.Duration `json:"session_timeout,omitempty"`
	// MaxConcurrentSessions caps the pending and running sessions of this
	// gateway; more get 429 SESSION_LIMIT. Default 1000.
	MaxConcurrentSessions int `json:"max_concurrent_sessions,omitempty"`
	// ExecutionTimeout is an execution's timeout when the request gives
	// none, waits for caller-answered tools included. Default 30s.
	ExecutionTimeout caddy.Duration `json:"execution_timeout,omitempty"`
	// MaxExecutionTimeout is the most a request may ask for: a caller may
	// lower its timeout, never raise it above this (400 LIMIT_EXCEEDED).
	// Default: execution_timeout.
	MaxExecutionTimeout caddy.Duration `json:"max_execution_timeout,omitempty"`
	// MaxToolCalls is an execution's tool call limit when the request
	// gives none, and the most it may ask for (LIMIT_EXCEEDED above).
	// Default 100; at most the sandbox's max_tool_calls (else the load
	// fails), which also caps requests when it is lower.
	MaxToolCalls int `json:"max_tool_calls,omitempty"`
	// MaxSessionsPerPrincipal caps the pending and running sessions of one
	// principal (a user of a tenant, an API key, a client address) on this
	// gateway; more get 429 SESSION_LIMIT. Default a quarter of
	// max_concurrent_sessions.
	MaxSessionsPerPrincipal int `json:"max_sessions_per_principal,omitempty"`
	// MaxStreamBytes bounds what one session streams, in bytes; past it
	// the session ends with STREAM_LIMIT. Default 16 MiB.
	MaxStreamBytes int64 `json:"max_stream_bytes,omitempty"`
	// MaxFinishedBytes bounds the results, logs and error texts of the
	// finished sessions kept until they expire, in bytes; past it the
	// oldest are removed. With Redis, one bound for every gateway on the
	// storage's key_prefix. Default 256 MiB.
	MaxFinishedBytes int64 `json:"max_finished_bytes,omitempty"`
	// ToolTimeout is the deadline of a tool call answered by Go or the
	// catalog when throttle sets none. Default 30s.
	ToolTimeout caddy.Duration `json:"tool_timeout,omitempty"`
	// MaxAuthFailures bounds failed authentications per client address
	// and minute (counted in the request rate limit's bucket of that
	// address when the handler has one); past it 429 instead of 401.
	// Default 20; -1 means no bound.
	MaxAuthFailures int64 `json:"max_auth_failures,omitempty"`
	// MaxBodySize caps request bodies, in bytes; larger ones get 413.
	// Default 1 MiB.
	MaxBodySize int64 `json:"max_body_size,omitempty"`
	// DrainTimeout is how long a broker being replaced or stopped waits for
	// running sessions before aborting them. Default 10s.
	DrainTimeout caddy.Duration `json:"drain_timeout,omitempty"`
	// DemoTools registers the demo tools (math:add, text:upper, kv:set,
	// kv:get, client:prompt). Default false.
	DemoTools bool `json:"demo_tools,omitempty"`
	// StorageRaw is the storage module of sessions: with Redis, every
	// gateway sharing it serves them (keys under the storage's key_prefix
	// followed by "broker:"); with memory, this gateway only. Default: the
	// app's storage.
	StorageRaw json.RawMessage `json:"storage,omitempty" caddy:"namespace=codemode.storage inline_key=module"`
	// Authentication requires credentials on every endpoint but /health.
	// A user authenticated by Caddy ({http.auth.user.id}) is always
	// accepted. Unset means no authentication.
	Authentication *BrokerAuthConfig `json:"authentication,omitempty"`
	// OpenAPI lists the sources of the action catalog.
	OpenAPI []OpenAPISourceConfig `json:"openapi,omitempty"`
	// PollInterval is the time between two fetches of the OpenAPI sources.
	// Default 5m; negative disables polling.
	PollInterval caddy.Duration `json:"poll_interval,omitempty"`
	// OwnerTimeout (with Redis): a gateway that has not renewed its
	// liveness for this long is gone, and its running sessions end with
	// error OWNER_LOST on every gateway. Default 15s; at least 3 ×
	// StorageTimeout (a renewal every OwnerTimeout/3 may wait that long).
	OwnerTimeout caddy.Duration `json:"owner_timeout,omitempty"`
	// StorageTimeout bounds each operation on the session store, so that
	// no request waits longer on an unreachable Redis. Default 2s.
	StorageTimeout caddy.Duration `json:"storage_timeout,omitempty"`
	// StorageFailureMode says what /execute does while the session store
	// is unreachable: "closed" (default) answers 503 STORAGE_UNAVAILABLE,
	// "open" runs the session on this gateway and writes its record when
	// the store is back.
	StorageFailureMode string `json:"storage_failure_mode,omitempty"`
}

// BrokerAuthConfig checks static credentials.
type BrokerAuthConfig struct {
	// Type is bearer (Authorization: Bearer <key>) or api-key
	// (X-API-Key: <key>).
	Type string `json:"type"`
	// Keys are the accepted credentials and whom they identify.
	Keys []BrokerAuthKey `json:"keys,omitempty"`
}

// BrokerAuthKey is one accepted credential.
type BrokerAuthKey struct {
	// Key is the secret; use a placeholder such as {env.BROKER_KEY}.
	Key string `json:"key"`
	// UserID owns the sessions created with this key.
	UserID string `json:"user_id,omitempty"`
	// TenantID is the user's tenant.
	TenantID string `json:"tenant_id,omitempty"`
	// Permissions travel with the session to tool handlers.
	Permissions []string `json:"permissions,omitempty"`
}

// OpenAPISourceConfig is one OpenAPI 3 document whose operations become
// actions named <name>_<operation>.
type OpenAPISourceConfig struct {
	// Name is the service name: a letter, then up to 31 letters, digits or
	// underscores.
	Name string `json:"name"`
	// SpecURL is an http(s) URL, a file:// URL or a file path.
	SpecURL string `json:"spec_url"`
	// BaseURL overrides the document's servers.
	BaseURL string `json:"base_url,omitempty"`
	// Headers are added to every action request (credentials). Values may
	// use placeholders such as {env.API_TOKEN}. Never logged.
	Headers map[string]string `json:"headers,omitempty"`
	// SpecHeaders are added to the request fetching the document.
	SpecHeaders map[string]string `json:"spec_headers,omitempty"`
	// Timeout bounds one action call. Default 30s.
	Timeout caddy.Duration `json:"timeout,omitempty"`
	// MaxResponseSize caps an action's response body, in bytes. Default 10 MiB.
	MaxResponseSize int64 `json:"max_response_size,omitempty"`
	// Credential says whose credential a call carries: the headers for
	// everyone (static, the default) or the calling user's own (user,
	// user_or_static), see docs/credentials.md.
	Credential *SourceCredential `json:"credential,omitempty"`
}

// brokerState is what the area keeps at run time. It is a pointer so the
// App stays copyable (CaddyModule has a value receiver).
type brokerState struct{ *brokerRuntime }

type brokerRuntime struct {
	storage StorageBackend // of sessions
	mu      sync.Mutex
	key     string
	shared  *sharedBroker
	err     error
	// released is set by cleanupBroker, which releases the component
	// once but leaves shared set: the old config's handlers may still be
	// answering requests on a reload.
	released bool
}

// sessionDirectory lists the running sessions of every broker of this
// process, so that a tool result or status request reaching the broker of
// a new config is handed to a replaced broker still draining the session.
var sessionDirectory = broker.NewSessionDirectory()

// sharedBroker is a broker with what it owns; it is a component destroyed
// when the last config using it is cleaned up.
type sharedBroker struct {
	b       *broker.Broker
	cat     *catalog.Catalog
	deps    []string // component keys the broker holds (engine, guard, storage)
	drain   time.Duration
	logger  *zap.Logger
	started sync.Once
	stop    chan struct{} // closed by destroy
}

// destroy drains running sessions, then releases what the broker owns and
// its dependencies. When Caddy exits it drains before returning; on a
// reload that replaced the broker it drains in the background so the
// reload is not held up (the session directory routes tool results to it
// meanwhile).
func (s *sharedBroker) destroy() error {
	close(s.stop)
	retire(s.shutdown)
	return nil
}

// drainOnExit starts the broker's close when the process begins to exit,
// before Caddy's servers wait for the open streams (exit.go); shutdown,
// at cleanup, then finds it done or waits for it (Close runs once).
func (s *sharedBroker) drainOnExit() {
	ctx, cancel := context.WithTimeout(context.Background(), s.drain)
	defer cancel()
	_ = s.b.Close(ctx)
}

func (s *sharedBroker) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), s.drain)
	defer cancel()
	err := s.b.Close(ctx)
	s.closeOwned()
	if err != nil {
		s.logger.Warn("broker closed with sessions aborted", zap.Error(err))
	}
}

func (a *App) provisionBroker(ctx caddy.Context) error {
	a.broker.brokerRuntime = new(brokerRuntime)
	// The broker is built on first use (SharedBroker), so configs without a
	// codemode_broker handler or meta-tools pay nothing; a bad block still
	// fails here, at load.
	if err := a.validateBroker(); err != nil {
		return err
	}
	cfg := a.Broker
	if cfg == nil {
		cfg = &BrokerConfig{}
	}
	st, err := loadStorage(ctx, cfg, "StorageRaw", cfg.StorageRaw, a.storage)
	if err != nil {
		return fmt.Errorf("codemode broker: %w", err)
	}
	a.broker.storage = st.Backend()
	return nil
}

// withDefaults is the block with its defaults spelled out, for the
// component key: a block that states a default and one that leaves it out
// build the same broker. The storage is keyed separately.
func (c *BrokerConfig) withDefaults() BrokerConfig {
	d := *c
	d.StorageRaw = nil
	def := func(p *caddy.Duration, v time.Duration) {
		if *p == 0 {
			*p = caddy.Duration(v)
		}
	}
	def(&d.SessionTimeout, broker.DefaultSessionTimeout)
	def(&d.ExecutionTimeout, broker.DefaultExecutionTimeout)
	def(&d.DrainTimeout, broker.DefaultDrainTimeout)
	def(&d.PollInterval, catalog.DefaultPollInterval)
	def(&d.OwnerTimeout, broker.DefaultOwnerTimeout)
	def(&d.StorageTimeout, broker.DefaultStorageTimeout)
	if d.StorageFailureMode == "" {
		d.StorageFailureMode = broker.StorageFailClosed
	}
	if d.MaxConcurrentSessions == 0 {
		d.MaxConcurrentSessions = broker.DefaultMaxConcurrentSessions
	}
	if d.MaxToolCalls == 0 {
		d.MaxToolCalls = broker.DefaultMaxToolCalls
	}
	if d.MaxBodySize == 0 {
		d.MaxBodySize = broker.DefaultMaxBodyBytes
	}
	d.OpenAPI = make([]OpenAPISourceConfig, len(c.OpenAPI))
	for i, s := range c.OpenAPI {
		def(&s.Timeout, catalog.DefaultTimeout)
		if s.MaxResponseSize == 0 {
			s.MaxResponseSize = catalog.DefaultMaxResponseBytes
		}
		d.OpenAPI[i] = s
	}
	return d
}

// validateOwnerTimeout refuses an owner_timeout under 3 × storage_timeout
// (defaults applied). A gateway renews its liveness every owner_timeout/3
// and each renewal may wait storage_timeout on the store: with a shorter
// interval than that wait, one slow renewal or two let the owner key expire
// and the other gateways end the live gateway's sessions OWNER_LOST.
func (c *BrokerConfig) validateOwnerTimeout() error {
	d := c.withDefaults()
	if d.OwnerTimeout < 3*d.StorageTimeout {
		return fmt.Errorf("codemode broker: owner_timeout (%v) must be at least 3 × storage_timeout (%v): "+
			"a gateway renews its liveness every owner_timeout/3 and each renewal may wait storage_timeout",
			time.Duration(d.OwnerTimeout), 3*time.Duration(d.StorageTimeout))
	}
	return nil
}

// validateBroker checks the broker block without building the broker.
func (a *App) validateBroker() error {
	c := a.Broker
	if c == nil {
		return nil
	}
	// A negative value would silently mean the default (poll_interval and
	// max_auth_failures alone give it a meaning: off).
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"session_timeout", int64(c.SessionTimeout)}, {"execution_timeout", int64(c.ExecutionTimeout)},
		{"max_execution_timeout", int64(c.MaxExecutionTimeout)}, {"tool_timeout", int64(c.ToolTimeout)},
		{"drain_timeout", int64(c.DrainTimeout)}, {"owner_timeout", int64(c.OwnerTimeout)},
		{"storage_timeout", int64(c.StorageTimeout)}, {"max_concurrent_sessions", int64(c.MaxConcurrentSessions)},
		{"max_sessions_per_principal", int64(c.MaxSessionsPerPrincipal)}, {"max_tool_calls", int64(c.MaxToolCalls)},
		{"max_stream_bytes", c.MaxStreamBytes}, {"max_body_size", c.MaxBodySize},
		{"max_finished_bytes", c.MaxFinishedBytes},
	} {
		if f.v < 0 {
			return fmt.Errorf("codemode broker: %s must not be negative", f.name)
		}
	}
	if err := c.validateOwnerTimeout(); err != nil {
		return err
	}
	switch c.StorageFailureMode {
	case "", broker.StorageFailClosed, broker.StorageFailOpen:
	default:
		return fmt.Errorf("codemode broker: storage_failure_mode must be open or closed, got %q", c.StorageFailureMode)
	}
	if au := c.Authentication; au != nil {
		if au.Type != broker.AuthBearer && au.Type != broker.AuthAPIKey {
			return fmt.Errorf("codemode broker: authentication type must be bearer or api-key, got %q", au.Type)
		}
		if len(au.Keys) == 0 {
			return errors.New("codemode broker: authentication needs at least one key")
		}
	}
	seen := map[string]bool{}
	for _, s := range c.OpenAPI {
		if s.Name == "" || s.SpecURL == "" {
			return errors.New("codemode broker: every openapi source needs a name and a spec URL")
		}
		if seen[s.Name] {
			return fmt.Errorf("codemode broker: duplicate openapi source %q", s.Name)
		}
		if s.Timeout < 0 || s.MaxResponseSize < 0 {
			return fmt.Errorf("codemode broker: openapi source %q: timeout and max_response_size must not be negative", s.Name)
		}
		seen[s.Name] = true
	}
	// The engine stops every script at its own tool-call limit: a higher
	// max_tool_calls would be accepted from requests and never reached.
	if lr, ok := a.sandbox.engine.(sandbox.LimitsReporter); ok && c.MaxToolCalls > 0 {
		if l := lr.Limits().MaxToolCalls; l > 0 && c.MaxToolCalls > l {
			return fmt.Errorf("codemode broker: max_tool_calls %d is above the sandbox's max_tool_calls %d, which stops every script first: raise the sandbox's (max_tool_calls or preset) or lower the broker's", c.MaxToolCalls, l)
		}
	}
	return nil
}

// SharedBroker returns the broker of this config, building it on first use.
// Every codemode_broker handler and the meta-tools share it. The broker is a
// component keyed by the broker block and the keys of the engine and guard
// manager it is built with: a reload that changes any of them gets a new
// broker and leaves the running one exactly as it was.
func (a *App) SharedBroker() (*broker.Broker, error) {
	if a.broker.brokerRuntime == nil {
		return nil, errors.New("codemode broker: the codemode app is not provisioned")
	}
	a.broker.mu.Lock()
	defer a.broker.mu.Unlock()
	if a.broker.shared != nil || a.broker.err != nil {
		return a.sharedBrokerLocked()
	}
	if a.broker.released {
		// Acquiring now would hold a component nobody releases.
		return nil, errors.New("codemode broker: the codemode app was cleaned up")
	}
	cfg := a.Broker
	if cfg == nil {
		cfg = &BrokerConfig{}
	}
	if a.sandbox.engine == nil {
		return nil, errors.New("codemode broker: the codemode app has no sandbox engine")
	}
	// Held while the broker lives: its engine, guard and Redis client.
	deps := []string{a.sandbox.key}
	if a.throttle.key != "" {
		deps = append(deps, a.throttle.key)
	}
	store := a.broker.storage
	if store.Component != "" {
		deps = append(deps, store.Component)
	}
	if a.credentials.key != "" {
		deps = append(deps, a.credentials.key) // the catalog puts users' credentials on calls
	}
	key, err := componentKey("broker", cfg.withDefaults(), append(deps, store.key(), fmt.Sprint(a.prefixes))...)
	if err != nil {
		return nil, err
	}
	sb, err := acquire(key, func() (*sharedBroker, func() error, error) {
		sb, err := a.newSharedBroker(cfg, deps)
		if err != nil {
			return nil, nil, err
		}
		return sb, sb.destroy, nil
	})
	if err != nil {
		a.broker.err = err
		return nil, err
	}
	a.broker.key, a.broker.shared = key, sb
	return sb.b, nil
}

func (a *App) sharedBrokerLocked() (*broker.Broker, error) {
	if a.broker.err != nil {
		return nil, a.broker.err
	}
	return a.broker.shared.b, nil
}

// newSharedBroker builds the broker on this config's engine and guard,
// holding a reference to each (deps) until it is destroyed.
func (a *App) newSharedBroker(cfg *BrokerConfig, deps []string) (_ *sharedBroker, err error) {
	repl := caddy.NewReplacer()
	logger := a.logger.Named("broker")
	sb := &sharedBroker{drain: time.Duration(cfg.DrainTimeout), logger: logger, stop: make(chan struct{})}
	if sb.drain == 0 {
		sb.drain = broker.DefaultDrainTimeout
	}
	for _, k := range deps {
		if err := retain(k); err != nil {
			sb.closeOwned()
			return nil, err
		}
		sb.deps = append(sb.deps, k)
	}
	defer func() {
		if err != nil {
			sb.closeOwned()
		}
	}()
	opts := &broker.BrokerOptions{
		SessionTimeout:          time.Duration(cfg.SessionTimeout),
		MaxConcurrentSessions:   cfg.MaxConcurrentSessions,
		DefaultTimeout:          time.Duration(cfg.ExecutionTimeout),
		MaxTimeout:              time.Duration(cfg.MaxExecutionTimeout),
		DefaultMaxToolCalls:     cfg.MaxToolCalls,
		MaxSessionsPerPrincipal: cfg.MaxSessionsPerPrincipal,
		MaxStreamBytes:          cfg.MaxStreamBytes,
		MaxFinishedBytes:        cfg.MaxFinishedBytes,
		ToolTimeout:             time.Duration(cfg.ToolTimeout),
		MaxAuthFailures:         cfg.MaxAuthFailures,
		ClientPrefixes:          a.prefixes,
		MaxBodyBytes:            cfg.MaxBodySize,
		Tools:                   broker.NewToolRegistry(),
		Engine:                  a.sandbox.engine,
		Guard:                   a.throttle.manager,
		Directory:               sessionDirectory,
		OwnerTimeout:            time.Duration(cfg.OwnerTimeout),
		StorageTimeout:          time.Duration(cfg.StorageTimeout),
		StorageFailureMode:      cfg.StorageFailureMode,
		Logger:                  logger,
		Metrics:                 processTelemetry().broker,
	}
	if cfg.DemoTools {
		for _, t := range broker.DemoTools() {
			opts.Tools.Register(t)
		}
	}
	if store := a.broker.storage; store.Redis != nil {
		opts.Redis = store.Redis
		opts.KeyPrefix = store.KeyPrefix + brokerKeyPart
	}
	if au := cfg.Authentication; au != nil {
		if opts.Authentication, err = staticKeys(au, repl); err != nil {
			return nil, fmt.Errorf("codemode broker: authentication: %w", err)
		}
	}
	if len(cfg.OpenAPI) > 0 {
		var sources []catalog.Source
		for _, s := range cfg.OpenAPI {
			src := catalog.Source{
				Name: s.Name, SpecURL: repl.ReplaceAll(s.SpecURL, ""), BaseURL: repl.ReplaceAll(s.BaseURL, ""),
				Timeout: time.Duration(s.Timeout), MaxResponseBytes: s.MaxResponseSize,
				Headers: replaceMap(repl, s.Headers), SpecHeaders: replaceMap(repl, s.SpecHeaders),
			}
			// A local document that cannot be read fails the load (see
			// checkSpecFile); a malformed URL is New's to refuse.
			if err := checkSpecFile(src); err != nil {
				return nil, fmt.Errorf("codemode broker: %w", err)
			}
			sources = append(sources, src)
		}
		copts := &catalog.Options{PollInterval: time.Duration(cfg.PollInterval), Logger: logger.Named("catalog"),
			Metrics: processTelemetry().catalog}
		if mgr := a.CredentialManager(); mgr != nil {
			copts.Authorize = catalogAuthorize(mgr)
		}
		cat, err := catalog.New(sources, copts)
		if err != nil {
			return nil, fmt.Errorf("codemode broker: %w", err)
		}
		sb.cat = cat
		opts.Catalog = cat
	}
	b, err := broker.New(opts)
	if err != nil {
		return nil, fmt.Errorf("codemode broker: %w", err)
	}
	sb.b = b
	if err := forwardBrokerEvents(b); err != nil {
		return nil, fmt.Errorf("codemode broker: %w", err)
	}
	return sb, nil
}

// checkSpecFile fails the config load when a source's document is a local
// file that cannot be read now. The catalog would load without it (and
// retry every 10 s): its actions would be missing without an error, from a
// typo in the path or a process started in another directory (an MCP
// client's stdio server starts where the client runs). An http(s) source
// is fetched after the load, since its server may be this Caddy.
func checkSpecFile(src catalog.Source) error {
	p := catalog.LocalFile(src.SpecURL)
	if p == "" {
		return nil
	}
	where := ""
	if !filepath.IsAbs(p) {
		wd, _ := os.Getwd()
		where = fmt.Sprintf(" (a relative path is read from the working directory, %s)", wd)
	}
	f, err := os.Open(p)
	if err == nil {
		var fi os.FileInfo
		if fi, err = f.Stat(); err == nil && fi.IsDir() {
			err = errors.New("is a directory")
		}
		f.Close()
	}
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return fmt.Errorf("openapi source %q: spec file %s: %w%s", src.Name, p, err, where)
	}
	return nil
}

// closeOwned closes the catalog and releases the dependencies.
func (s *sharedBroker) closeOwned() {
	if s.cat != nil {
		s.cat.Close()
	}
	for i := len(s.deps) - 1; i >= 0; i-- {
		_ = release(s.deps[i])
	}
	s.deps = nil
}

func replaceMap(repl *caddy.Replacer, m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = repl.ReplaceAll(v, "")
	}
	return out
}

// staticKeys validates tokens against the configured keys in constant time.
// A key given twice is refused (the message numbers the keys, never shows
// them): the first identity would silently get every request made with it.
func staticKeys(au *BrokerAuthConfig, repl *caddy.Replacer) (*broker.AuthConfig, error) {
	type entry struct {
		key []byte
		n   int
		res broker.AuthResult
	}
	var keys []entry
	for i, k := range au.Keys {
		secret := repl.ReplaceAll(k.Key, "")
		if secret == "" {
			continue // an unset environment variable must not accept an empty key
		}
		for _, e := range keys {
			if string(e.key) == secret {
				return nil, fmt.Errorf("keys %d and %d are the same (one key identifies one user)", e.n, i+1)
			}
		}
		keys = append(keys, entry{[]byte(secret), i + 1, broker.AuthResult{Valid: true, UserID: k.UserID, TenantID: k.TenantID, Permissions: k.Permissions}})
	}
	return &broker.AuthConfig{
		Type: au.Type,
		Validate: func(ctx context.Context, token string) (*broker.AuthResult, error) {
			var found *broker.AuthResult
			for i := range keys {
				if subtle.ConstantTimeCompare(keys[i].key, []byte(token)) == 1 && found == nil {
					r := keys[i].res
					found = &r
				}
			}
			if found == nil {
				return &broker.AuthResult{Valid: false}, nil
			}
			// Caddy's access log names the user ("user_id"), as it does
			// after codemode_auth or basic_auth.
			if repl, ok := ctx.Value(caddy.ReplacerCtxKey).(*caddy.Replacer); ok && found.UserID != "" {
				repl.Set("http.auth.user.id", found.UserID)
			}
			return found, nil
		},
	}, nil
}

func (a *App) cleanupBroker() error {
	if a.broker.brokerRuntime == nil {
		return nil
	}
	a.broker.mu.Lock()
	defer a.broker.mu.Unlock()
	if a.broker.released {
		return nil
	}
	a.broker.released = true
	if a.broker.shared == nil {
		return nil
	}
	return release(a.broker.key)
}

// startBroker loads the catalog in the background: an OpenAPI source served
// by this very Caddy only answers once its servers are up, and the catalog
// retries sources that failed their first fetch.
func (a *App) startBroker() error {
	if a.broker.brokerRuntime == nil {
		return nil
	}
	a.broker.mu.Lock()
	sb := a.broker.shared
	a.broker.mu.Unlock()
	if sb == nil || sb.cat == nil {
		return nil
	}
	sb.started.Do(func() {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			err := sb.cat.Start(ctx)
			// A source served by this Caddy is refused until its server
			// listens, which may be just after this app started: retry a
			// few times soon, then leave it to the catalog's retry interval.
			for wait := 250 * time.Millisecond; err != nil && wait <= 2*time.Second; wait *= 2 {
				select {
				case <-sb.stop:
					return
				case <-time.After(wait):
				}
				err = sb.cat.Refresh(ctx)
			}
			if err != nil {
				sb.logger.Warn("openapi catalog: first fetch failed; retrying in the background", zap.Error(err))
			}
		}()
	})
	return nil
}

func (a *App) stopBroker() error { return nil }

// parseBroker parses the `broker` subdirective of the codemode global option:
//
//	broker {
//		session_timeout   <duration>        # default 5m
//		max_sessions      <n>               # default 1000
//		execution_timeout <duration>        # default 30s
//		max_execution_timeout <duration>    # most a request may ask; default execution_timeout
//		max_tool_calls    <n>               # default and most a request may ask; 100
//		max_sessions_per_principal <n>      # default max_sessions / 4
//		max_stream_size   <size>            # per session; default 16MiB
//		max_finished_size <size>            # finished sessions' results kept; default 256MiB
//		tool_timeout      <duration>        # a Go or catalog tool's deadline; default 30s
//		max_auth_failures <n>               # per client address and minute; default 20; -1 none
//		max_body_size     <size>            # default 1MiB
//		drain_timeout     <duration>        # default 10s
//		demo_tools
//		storage memory|redis ...            # default: the app's storage
//		redis [<address>] { ... }           # same as storage redis
//		authentication bearer|api-key {
//			key <secret> [<user_id> [<tenant_id> [<permission>...]]]
//		}
//		openapi <name> <spec_url> {
//			base_url          <url>
//			header            <name> <value>
//			spec_header       <name> <value>
//			timeout           <duration>
//			max_response_size <size>
//		}
//		poll_interval <duration>            # default 5m
//		owner_timeout <duration>            # default 15s (with redis); at least 3 × storage_timeout
//		storage_timeout <duration>          # default 2s
//		storage_failure_mode open|closed    # default closed
//	}
func parseBroker(d *caddyfile.Dispenser) (*BrokerConfig, error) {
	c := new(BrokerConfig)
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	seen := blockOptions{}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		if err := seen.once(d, "openapi"); err != nil {
			return nil, err
		}
		var err error
		switch d.Val() {
		case "session_timeout":
			err = parseDurationArg(d, &c.SessionTimeout)
		case "execution_timeout":
			err = parseDurationArg(d, &c.ExecutionTimeout)
		case "max_execution_timeout":
			err = parseDurationArg(d, &c.MaxExecutionTimeout)
		case "tool_timeout":
			err = parseDurationArg(d, &c.ToolTimeout)
		case "max_sessions_per_principal":
			err = positiveIntArg(d, &c.MaxSessionsPerPrincipal)
		case "max_stream_size":
			err = parseSizeArg(d, &c.MaxStreamBytes)
		case "max_finished_size":
			err = parseSizeArg(d, &c.MaxFinishedBytes)
		case "max_auth_failures":
			var s string
			if err = oneArg(d, &s); err == nil {
				n, perr := strconv.ParseInt(s, 10, 64)
				if perr != nil || n < -1 || n == 0 {
					err = d.Errf("max_auth_failures: want a positive integer or -1, got %q", s)
				}
				c.MaxAuthFailures = n
			}
		case "drain_timeout":
			err = parseDurationArg(d, &c.DrainTimeout)
		case "poll_interval":
			// Negative turns polling off (documented).
			err = parseDurationArgFrom(d, &c.PollInterval, math.MinInt64)
		case "owner_timeout":
			err = parseDurationArg(d, &c.OwnerTimeout)
		case "storage_timeout":
			err = parseDurationArg(d, &c.StorageTimeout)
		case "storage_failure_mode":
			if !d.AllArgs(&c.StorageFailureMode) {
				return nil, d.ArgErr()
			}
			if c.StorageFailureMode != broker.StorageFailOpen && c.StorageFailureMode != broker.StorageFailClosed {
				return nil, d.Errf("storage_failure_mode: %q is not open or closed", c.StorageFailureMode)
			}
		case "max_sessions":
			err = positiveIntArg(d, &c.MaxConcurrentSessions)
		case "max_tool_calls":
			err = positiveIntArg(d, &c.MaxToolCalls)
		case "max_body_size":
			err = parseSizeArg(d, &c.MaxBodySize)
		case "demo_tools":
			if d.NextArg() {
				return nil, d.ArgErr()
			}
			c.DemoTools = true
		case "storage":
			c.StorageRaw, err = parseStorage(d)
		case "redis":
			// The former spelling of `storage redis`.
			c.StorageRaw, err = storageModule(d, storageRedis)
		case "authentication":
			c.Authentication, err = parseBrokerAuth(d)
		case "openapi":
			var s OpenAPISourceConfig
			s, err = parseOpenAPISource(d)
			c.OpenAPI = append(c.OpenAPI, s)
		default:
			return nil, d.Errf("unrecognized broker subdirective %q", d.Val())
		}
		if err != nil {
			return nil, err
		}
	}
	return c, nil
}

// parseDurationArg reads a positive duration: each option read with it
// has a default that 0 (JSON's "unset") stands for, and none has a meaning
// below zero, so `0` or `-1s` here would be silently the default.
func parseDurationArg(d *caddyfile.Dispenser, dst *caddy.Duration) error {
	return parseDurationArgFrom(d, dst, 1)
}

// parseDurationArgFrom reads a duration of at least least nanoseconds
// (a negative least admits every negative duration, for the options where
// one means off); 0 always stands for the default and is refused.
func parseDurationArgFrom(d *caddyfile.Dispenser, dst *caddy.Duration, least time.Duration) error {
	name, s := d.Val(), ""
	if err := oneArg(d, &s); err != nil {
		return err
	}
	v, err := caddy.ParseDuration(s)
	if err != nil {
		return d.Errf("%s: invalid duration %q: %v", name, s, err)
	}
	if v == 0 || v < least {
		return d.Errf("%s: %q is not a positive duration (leave the option out for its default)", name, s)
	}
	*dst = caddy.Duration(v)
	return nil
}

func parseIntArg(d *caddyfile.Dispenser, dst *int) error {
	name, s := d.Val(), ""
	if err := oneArg(d, &s); err != nil {
		return err
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return d.Errf("%s: want a non-negative integer, got %q", name, s)
	}
	*dst = n
	return nil
}

func parseSizeArg(d *caddyfile.Dispenser, dst *int64) error {
	name, s := d.Val(), ""
	if err := oneArg(d, &s); err != nil {
		return err
	}
	n, err := humanize.ParseBytes(s)
	if err != nil || n > math.MaxInt64 {
		// humanize's own error ("strconv.ParseFloat: parsing \"\"") says
		// nothing an operator can act on; past 8 EiB the size would turn
		// negative.
		return d.Errf("%s: %q is not a size such as 1MiB", name, s)
	}
	*dst = int64(n)
	return nil
}

func parseBrokerAuth(d *caddyfile.Dispenser) (*BrokerAuthConfig, error) {
	if !d.NextArg() {
		return nil, d.ArgErr()
	}
	a := &BrokerAuthConfig{Type: d.Val()}
	if a.Type != broker.AuthBearer && a.Type != broker.AuthAPIKey {
		return nil, d.Errf("authentication: type must be bearer or api-key, got %q", a.Type)
	}
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		if d.Val() != "key" {
			return nil, d.Errf("unrecognized authentication subdirective %q", d.Val())
		}
		args := d.RemainingArgs()
		if len(args) == 0 {
			return nil, d.ArgErr()
		}
		k := BrokerAuthKey{Key: args[0]}
		if len(args) > 1 {
			k.UserID = args[1]
		}
		if len(args) > 2 {
			k.TenantID = args[2]
		}
		if len(args) > 3 {
			k.Permissions = args[3:]
		}
		a.Keys = append(a.Keys, k)
	}
	if len(a.Keys) == 0 {
		return nil, d.Err("authentication: at least one key is required")
	}
	return a, nil
}

func parseOpenAPISource(d *caddyfile.Dispenser) (OpenAPISourceConfig, error) {
	var s OpenAPISourceConfig
	args := d.RemainingArgs()
	if len(args) != 2 {
		return s, d.Err("openapi: want <name> <spec_url>")
	}
	s.Name, s.SpecURL = args[0], args[1]
	seen := blockOptions{}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		if err := seen.once(d, "header", "spec_header"); err != nil {
			return s, err
		}
		switch d.Val() {
		case "base_url":
			if !d.NextArg() {
				return s, d.ArgErr()
			}
			s.BaseURL = d.Val()
			if d.NextArg() {
				return s, d.ArgErr()
			}
		case "header", "spec_header":
			name := d.Val()
			args := d.RemainingArgs()
			if len(args) != 2 {
				return s, d.Errf("%s: want <name> <value>", name)
			}
			m := &s.Headers
			if name == "spec_header" {
				m = &s.SpecHeaders
			}
			if *m == nil {
				*m = map[string]string{}
			}
			(*m)[args[0]] = args[1]
		case "timeout":
			if err := parseDurationArg(d, &s.Timeout); err != nil {
				return s, err
			}
		case "max_response_size":
			if err := parseSizeArg(d, &s.MaxResponseSize); err != nil {
				return s, err
			}
		case "credential":
			c, err := parseSourceCredential(d)
			if err != nil {
				return s, err
			}
			s.Credential = c
		default:
			return s, d.Errf("unrecognized openapi subdirective %q", d.Val())
		}
	}
	return s, nil
}
