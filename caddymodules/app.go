// Package caddymodules puts the codemode libraries (guard, broker, metatools,
// oauth) into Caddy: the codemode app, the HTTP handlers, the Caddyfile
// directives and the command-line subcommands. It is the only package of this
// module that imports Caddy.
package caddymodules

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/codemode-gateway/caddy-codemode/guard"
)

func init() {
	caddy.RegisterModule(App{})
}

// App is the `codemode` app. It owns what every codemode handler shares: the
// guard manager built from `throttle`, the sandbox engine, the broker, the
// meta-tool index and the authorization server. Handlers find it with
// ctx.App("codemode"), so a config without a `codemode` block still gets an
// app with embedded defaults (in-memory state, no secrets).
//
// Each area keeps its configuration type and its provision/cleanup hooks in its
// own file (app_<area>.go); this file only orders them.
type App struct {
	// StorageRaw is the storage module (codemode.storage.memory or
	// codemode.storage.redis) of every area that does not name its own:
	// the throttle's counters, the broker's sessions, the authorization
	// server's tokens. Default memory.
	StorageRaw json.RawMessage `json:"storage,omitempty" caddy:"namespace=codemode.storage inline_key=module"`

	// Throttle is the server-level GuardConfig: rate limits, concurrency,
	// timeouts and the IP filter applied per tool and per agent by the broker
	// and the meta-tools. Unset means no per-entity limits.
	Throttle *ThrottleConfig `json:"throttle,omitempty"`

	// SandboxRaw is the engine module that runs scripts
	// (codemode.engines.worker or codemode.engines.inprocess, named by the
	// "engine" key) with its limits. Default: the worker engine with the
	// secure preset.
	SandboxRaw json.RawMessage `json:"sandbox,omitempty" caddy:"namespace=codemode.engines inline_key=engine"`

	// Broker configures sessions, tools, the OpenAPI catalog and session
	// storage. Unset means an in-memory broker with no tools.
	Broker *BrokerConfig `json:"broker,omitempty"`

	// Meta configures the meta-tools (search strategy, tool naming, upstream
	// MCP servers, per-meta-tool rate limits).
	Meta *MetaConfig `json:"meta,omitempty"`

	// Auth configures the OAuth 2.1 authorization server (orchestrated mode)
	// or the validation of an external identity provider's tokens
	// (transparent mode). Unset means no authentication.
	Auth *AuthConfig `json:"auth,omitempty"`

	// Credentials configures users' own upstream credentials: the vault
	// key, its storage and the connections pages. Used when a source has
	// `credential user` or `user_or_static`.
	Credentials *CredentialsConfig `json:"credentials,omitempty"`

	// AddressPrefixes key a client address in every per-address limit of
	// the app (ip partitions of the throttle and the meta-tools, the
	// broker's anonymous callers, the auth endpoints and connections
	// pages): ipv6_prefix (default 64) and ipv4_prefix (default 32).
	AddressPrefixes

	// Run-time state of each area, declared in its app_<area>.go.
	storage     Storage
	storageSet  bool // the config names the app's storage
	throttle    throttleState
	sandbox     sandboxState
	broker      brokerState
	meta        metaState
	auth        authState
	credentials credentialsState
	prefixes    guard.ClientPrefixes // AddressPrefixes

	held   holder // component keys, released by Cleanup
	ctx    caddy.Context
	logger *zap.Logger
	events *eventSink // this config's events app (observability.go)
}

// hold records a component key acquired for this config.
func (a *App) hold(key string) { a.held.hold(key) }

// CaddyModule returns the Caddy module information.
func (App) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "codemode",
		New: func() caddy.Module { return new(App) },
	}
}

// Provision builds every area in dependency order: the guard first (the
// broker and the meta-tools use it), then the sandbox, authentication,
// users' credentials (they need the signed-in user), the broker and the
// meta-tools (their sources carry the credentials).
func (a *App) Provision(ctx caddy.Context) error {
	a.ctx = ctx
	a.logger = ctx.Logger()
	if err := a.AddressPrefixes.validate(); err != nil {
		return fmt.Errorf("codemode: %w", err)
	}
	a.prefixes = a.clientPrefixes()
	steps := []func(caddy.Context) error{
		a.provisionTelemetry,
		a.provisionStorage,
		a.provisionThrottle,
		a.provisionSandbox,
		a.provisionAuth,
		a.provisionCredentials,
		a.provisionBroker,
		a.provisionMeta,
	}
	for _, step := range steps {
		if err := step(ctx); err != nil {
			return err
		}
	}
	return nil
}

// provisionStorage loads the app's storage module (memory by default).
func (a *App) provisionStorage(ctx caddy.Context) error {
	a.storageSet = len(a.StorageRaw) > 0
	st, err := loadStorage(ctx, a, "StorageRaw", a.StorageRaw, MemoryStorage{})
	if err != nil {
		return fmt.Errorf("codemode: storage: %w", err)
	}
	a.storage = st
	return nil
}

// Start starts background work (catalog polling, upstream connections).
func (a *App) Start() error {
	for _, step := range []func() error{a.startTelemetry, a.startBroker, a.startMeta} {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// Stop stops background work started by Start.
func (a *App) Stop() error {
	var first error
	for _, step := range []func() error{a.stopMeta, a.stopBroker, a.stopTelemetry} {
		if err := step(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Cleanup releases what Provision acquired, in reverse order: the areas'
// own per-config objects, then the references to shared components. It
// also runs when Provision failed half-way, so every step tolerates an
// area that was never provisioned. On a reload Caddy calls it once the old
// servers' shutdown has started, not ended: their handlers still answer
// the requests under way, and read the app's fields per request. Cleanup
// therefore closes and releases but never resets what a handler reads;
// each step keeps its own flag so that a second Cleanup does nothing.
func (a *App) Cleanup() error {
	var errs []error
	for _, step := range []func() error{a.cleanupAuth, a.cleanupMeta, a.cleanupBroker} {
		errs = append(errs, step())
	}
	errs = append(errs, a.held.releaseAll())
	return errors.Join(errs...)
}

// Interface guards
var (
	_ caddy.App          = (*App)(nil)
	_ caddy.Provisioner  = (*App)(nil)
	_ caddy.CleanerUpper = (*App)(nil)
)

// clientKey is the key of a client address in the app's per-address
// limits (guard.ClientPrefixes.Key with the app's prefixes).
func (a *App) clientKey(ip string) string { return a.prefixes.Key(ip) }
