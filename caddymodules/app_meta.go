package caddymodules

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"

	"github.com/codemode-gateway/caddy-codemode/guard"
	"github.com/codemode-gateway/caddy-codemode/metatools"
)

// MetaConfig is the `meta` part of the codemode app: the meta-tools
// (meta:search, meta:describe, meta:execute, meta:invoke) served by the
// codemode_mcp handler and the codemode-mcp-stdio command. Script limits
// (vm.*) are the sandbox block's.
type MetaConfig struct {
	// Naming is how the meta-tools are named on MCP: "spec" (default:
	// meta:search, ...) or "safe" (meta_search, ...: letters, digits and
	// '_' only, for clients and model APIs that reject ':').
	Naming string `json:"naming,omitempty"`

	// SearchRaw is the search strategy module (embedding.strategy), named
	// by its "strategy" key: tfidf (codemode.search.tfidf) or embeddings
	// (codemode.search.embeddings). Default tfidf.
	SearchRaw json.RawMessage `json:"search,omitempty" caddy:"namespace=codemode.search inline_key=strategy"`

	// Sanitization strips details from script errors
	// (sanitization.removeStackTraces, sanitization.removeFilePaths),
	// in addition to the sandbox's own settings. Default: keep both.
	Sanitization *MetaSanitization `json:"sanitization,omitempty"`

	// Upstreams are MCP servers whose tools join the index as <name>:<tool>.
	Upstreams []MetaUpstream `json:"upstreams,omitempty"`

	// RateLimits are per-meta-tool rate limit rules enforced with the guard
	// library (code RATE_LIMIT). Default: none.
	RateLimits []MetaRateLimit `json:"rate_limits,omitempty"`

	// ConnectTimeout is how long start-up waits for each upstream's first
	// connection before serving without its tools (they join when it
	// connects). Default 10s.
	ConnectTimeout caddy.Duration `json:"connect_timeout,omitempty"`

	// NoBroker leaves the broker's tools (registry and OpenAPI catalog) out
	// of the index. Default false: they are in.
	NoBroker bool `json:"no_broker,omitempty"`

	// ProtocolVersions are the MCP revisions served by codemode_mcp and
	// codemode-mcp-stdio, e.g. ["2026-07-28", "2025-11-25"]. Default: every
	// revision the go-sdk speaks (2026-07-28, 2025-11-25, 2025-06-18,
	// 2025-03-26, 2024-11-05).
	ProtocolVersions []string `json:"protocol_versions,omitempty"`

	// ListTTL is the longest freshness (ttlMs) given to tools/list and
	// server/discover results; the freshness is a tenth of the time since
	// the tool index last changed, up to this. Default 5m.
	ListTTL caddy.Duration `json:"list_ttl,omitempty"`
}

// MetaSanitization is the sandbox's sanitization policy (same keys, same
// meaning), applied to what meta:execute and meta:invoke report.
type MetaSanitization = SandboxSanitization

// MetaUpstream is one upstream MCP server. Exactly one of URL and Command.
type MetaUpstream struct {
	// Name is the app id and tool-name prefix (letters, digits, '_', '-', '.').
	Name string `json:"name"`
	// URL is a Streamable HTTP endpoint.
	URL string `json:"url,omitempty"`
	// Command and Args start a stdio MCP server.
	Command string   `json:"command,omitempty"`
	Args    []string `json:"args,omitempty"`
	// Env adds KEY=VALUE entries to the command's environment; values may
	// use placeholders such as {env.TOKEN}.
	Env []string `json:"env,omitempty"`
	// Headers are sent with every request to a URL upstream, e.g.
	// Authorization: Bearer {env.GITHUB_TOKEN}. Values may use placeholders;
	// never logged.
	Headers map[string]string `json:"headers,omitempty"`
	// CallTimeout is the deadline of one tool call on this upstream (a
	// hung upstream answers TIMEOUT, not after the caller's own deadline).
	// Default 30s.
	CallTimeout caddy.Duration `json:"call_timeout,omitempty"`
	// Credential says whose credential a call carries: the headers for
	// everyone (static, the default) or the calling user's own (user,
	// user_or_static; URL upstreams only), see docs/credentials.md.
	Credential *SourceCredential `json:"credential,omitempty"`
}

// MetaRateLimit is one rule: at most max_requests calls of Tool per
// window, partitioned by global (default), session, ip or userId.
type MetaRateLimit struct {
	// Tool is a meta-tool in either spelling (meta:search or meta_search).
	// Required.
	Tool string `json:"tool"`
	RateLimit
}

// metaState is what the area keeps at run time.
type metaState struct {
	// rt is set once by provisionMeta, before any handler or Start runs,
	// and read-only afterwards (a pointer keeps App copyable): Cleanup
	// closes what it holds but leaves it set, since the old config's
	// servers still answer the requests under way when Caddy cleans the
	// config up on a reload.
	rt *metaRuntime
	// closed is set by cleanupMeta, the only reader and writer, so that a
	// second Cleanup does nothing.
	closed bool
}

type metaRuntime struct {
	index     *metatools.Index
	service   *metatools.Service
	server    *mcp.Server
	upstreams []*metatools.Upstream
	limiter   *guard.GuardManager
	// unlisten removes this config's listeners on the credential manager,
	// which may outlive it.
	unlisten []func()
	// connected ends the index's wait for the upstreams' first connection
	// (metatools.Index.Connecting); startMeta calls it.
	connected func()
}

// checkUpstreamName refuses a second upstream of a name: both servers would
// list their tools under one prefix, and the index keeps the first tool of
// a name, so a tool both offer would reach the first server only.
func checkUpstreamName(before []MetaUpstream, name string) error {
	for _, u := range before {
		if u.Name == name {
			return fmt.Errorf("upstream %q is defined twice (both would list tools as %s:<tool>, and a tool both offer would reach the first only)", name, name)
		}
	}
	return nil
}

func (a *App) provisionMeta(ctx caddy.Context) error {
	cfg := a.Meta
	if cfg == nil {
		cfg = &MetaConfig{}
	}
	logger := a.logger.Named("meta")
	repl := caddy.NewReplacer()
	// Below zero each would be silently its default (the Caddyfile refuses
	// them; JSON took them).
	if cfg.ConnectTimeout < 0 {
		return fmt.Errorf("codemode meta: connect_timeout %v is negative", time.Duration(cfg.ConnectTimeout))
	}
	for _, u := range cfg.Upstreams {
		if u.CallTimeout < 0 {
			return fmt.Errorf("codemode meta: upstream %q: call_timeout %v is negative", u.Name, time.Duration(u.CallTimeout))
		}
	}

	naming := metatools.NamingSpec
	switch cfg.Naming {
	case "", "spec":
	case "safe":
		naming = metatools.NamingSafe
	default:
		return fmt.Errorf("codemode meta: naming %q: want spec or safe", cfg.Naming)
	}

	raw, err := withInlineKey(cfg.SearchRaw, "strategy", SearchStrategyTFIDF)
	if err != nil {
		return fmt.Errorf("codemode meta: search: %w", err)
	}
	cfg.SearchRaw = raw
	mod, err := ctx.LoadModule(cfg, "SearchRaw")
	if err != nil {
		return fmt.Errorf("codemode meta: search: %w", err)
	}
	iopts := &metatools.IndexOptions{Logger: logger, Strategy: mod.(SearchStrategy).Strategy()}

	var sources []metatools.ToolSource
	var plans metatools.PlanSessions
	if !cfg.NoBroker {
		b, err := a.SharedBroker()
		if err != nil {
			return fmt.Errorf("codemode meta: broker: %w", err)
		}
		if b != nil {
			// The broker's tools join the index, and its sessions carry the
			// plans whose caller-answered calls an MCP client answers over
			// several requests (with Redis, on any gateway).
			sources = append(sources, &metatools.BrokerSource{B: b})
			plans = b
		}
	}
	for i, u := range cfg.Upstreams {
		if err := checkUpstreamName(cfg.Upstreams[:i], u.Name); err != nil {
			return fmt.Errorf("codemode meta: %w", err)
		}
	}
	var ups []*metatools.Upstream
	var unlisten []func()
	for _, u := range cfg.Upstreams {
		env := make([]string, len(u.Env))
		for i, kv := range u.Env {
			env[i] = repl.ReplaceAll(kv, "")
		}
		var headers map[string]string
		if len(u.Headers) > 0 {
			headers = make(map[string]string, len(u.Headers))
			for k, v := range u.Headers {
				headers[k] = repl.ReplaceAll(v, "")
			}
		}
		uc := metatools.UpstreamConfig{Name: u.Name, URL: repl.ReplaceAll(u.URL, ""),
			Command: u.Command, Args: u.Args, Env: env, Headers: headers, CallTimeout: time.Duration(u.CallTimeout)}
		mgr := a.CredentialManager()
		user := false
		if mgr != nil {
			if _, user = mgr.Spec(u.Name); user {
				uc.Credential = upstreamCredential(mgr, u.Name)
				uc.HTTPClient = &http.Client{Transport: credentialTransport{mgr.Transport(u.Name, http.DefaultTransport)}}
				uc.ToolCache = toolCache{store: mgr.Store(), key: "tools:" + u.Name}
			}
		}
		up, err := metatools.NewUpstream(uc, logger)
		if err != nil {
			for _, f := range unlisten {
				f()
			}
			return fmt.Errorf("codemode meta: %w", err)
		}
		if user {
			// A user who connects this upstream's account lets it list its
			// tools when it serves signed-in users only.
			name := u.Name
			unlisten = append(unlisten, mgr.OnConnect(func(service, owner string, authorize func(*http.Request) error) {
				if service == name {
					up.Prime(owner, authorize)
				}
			}))
		}
		ups = append(ups, up)
		sources = append(sources, up)
	}
	index, err := metatools.NewIndex(sources, iopts)
	if err != nil {
		return fmt.Errorf("codemode meta: %w", err)
	}
	// The broker's tools are in the index before any request: Caddy starts
	// its apps in no fixed order, so this config's servers may answer
	// before startMeta lists every source (after connecting the upstreams,
	// up to connect_timeout). Before, a meta:execute sent right after the
	// process started or a reload got TOOL_NOT_FOUND for the broker's tools
	// and meta:search found nothing.
	if len(sources) > len(ups) {
		if err := index.ReloadSource(context.Background(), 0); err != nil {
			logger.Warn("meta-tools: listing the broker's tools failed", zap.Error(err))
		}
	}
	// The upstreams connect in Start (up to connect_timeout): a meta-tool
	// call that comes before their first attempt is over waits for it, up
	// to metatools.DefaultConnectWait, instead of missing their tools.
	connected := func() {}
	if len(ups) > 0 {
		connected = index.Connecting()
	}

	tm := processTelemetry()
	opts := &metatools.Options{Engine: a.Engine(), Naming: naming, Logger: logger, Sessions: plans,
		Metrics: tm.meta, ToolMetrics: tm.broker, Listener: metaEvents, RequestContext: mcpRequestContext}
	// A plan's wall clock, waits for tools and for the client's answers
	// (elicitation) included, is the broker's execution_timeout, as for
	// /execute and the plans of 2026-07-28; the sandbox's own timeout bounds
	// the time the script runs (sandbox.LowerLimits). Without it the whole
	// plan had the preset's 3.5 s, too little for a person to answer.
	bc := BrokerConfig{}
	if a.Broker != nil {
		bc = *a.Broker
	}
	opts.Limits.Timeout = time.Duration(bc.withDefaults().ExecutionTimeout)
	// One policy: the sandbox's, unless the meta block states its own.
	opts.Sanitize = a.sandbox.sanitize
	if s := cfg.Sanitization; s != nil {
		opts.Sanitize = s.policy()
	}
	var gm *guard.GuardManager
	if len(cfg.RateLimits) > 0 {
		lim, m, err := a.newMetaLimiter(ctx, cfg.RateLimits, logger)
		if err != nil {
			return err
		}
		opts.Limiter, gm = lim, m
	}
	if err := metatools.ValidateProtocolVersions(cfg.ProtocolVersions); err != nil {
		return fmt.Errorf("codemode meta: protocol_versions: %w", err)
	}
	if cfg.ListTTL < 0 {
		return fmt.Errorf("codemode meta: list_ttl must not be negative")
	}
	svc := metatools.NewService(index, opts)
	srv := metatools.NewServer(svc, &metatools.ServerOptions{ProtocolVersions: cfg.ProtocolVersions,
		ListTTL: time.Duration(cfg.ListTTL)})
	srv.AddReceivingMiddleware(stopCancelledCalls) // mcp_cancel.go
	a.meta.rt = &metaRuntime{index: index, service: svc, upstreams: ups, limiter: gm, unlisten: unlisten, server: srv, connected: connected}
	return nil
}

// MetaProtocolVersions returns the MCP revisions the meta-tools are served
// in, newest first.
func (a *App) MetaProtocolVersions() []string {
	all := mcp.SupportedProtocolVersions()
	if a.Meta == nil || len(a.Meta.ProtocolVersions) == 0 {
		return all
	}
	return slices.DeleteFunc(all, func(v string) bool { return !slices.Contains(a.Meta.ProtocolVersions, v) })
}

// newMetaLimiter builds the guard manager that counts meta-tool calls, on
// the app's storage (memory or Redis, so limits hold across instances). It
// is always enabled: meta-tool rules apply even when the throttle block is
// off.
func (a *App) newMetaLimiter(ctx caddy.Context, rules []MetaRateLimit, logger *zap.Logger) (*metaLimiter, *guard.GuardManager, error) {
	l := &metaLimiter{rules: map[string]*guard.RateLimitConfig{}}
	for i, r := range rules {
		spec, ok := metaSpecName(r.Tool)
		if !ok {
			return nil, nil, fmt.Errorf("codemode meta: rate_limits[%d]: unknown meta-tool %q", i, r.Tool)
		}
		if err := r.validate(false); err != nil {
			return nil, nil, fmt.Errorf("codemode meta: rate_limits[%d]: %w", i, err)
		}
		l.rules[spec] = r.config()
	}
	backend := a.storage.Backend()
	prefix := backend.KeyPrefix + guardKeyPart
	storeKey, store, err := guardStorageOn(backend, prefix, logger)
	if err != nil {
		return nil, nil, fmt.Errorf("codemode meta: rate limits: %w", err)
	}
	a.hold(storeKey)
	m, err := guard.NewGuardManager(ctx, guard.GuardConfig{Enabled: true, KeyPrefix: prefix,
		Storage: &guard.StorageConfig{FailureMode: backend.FailureMode}},
		&guard.ManagerOptions{Logger: logger, Now: guardNow, Storage: store, Metrics: processTelemetry().guard})
	if err != nil {
		return nil, nil, fmt.Errorf("codemode meta: rate limits: %w", err)
	}
	l.m = m
	return l, m, nil
}

// metaSpecName maps either spelling of a meta-tool to its spec name.
func metaSpecName(name string) (string, bool) {
	for _, spec := range []string{metatools.MetaSearch, metatools.MetaDescribe, metatools.MetaExecute, metatools.MetaInvoke} {
		if name == spec || name == metatools.NamingSafe.ExposedName(spec) {
			return spec, true
		}
	}
	return "", false
}

// metaLimiter enforces MetaRateLimit rules through a guard manager.
type metaLimiter struct {
	m     *guard.GuardManager
	rules map[string]*guard.RateLimitConfig
}

func (l *metaLimiter) Check(ctx context.Context, ci metatools.CallInfo) error {
	rc := l.rules[ci.MetaTool]
	if rc == nil {
		return nil
	}
	pc := guard.PartitionKeyContext{SessionID: ci.SessionPartition(), ClientIP: ci.AddressKey(), UserID: ci.UserPartition()}
	res, err := l.m.CheckRateLimit(ctx, ci.MetaTool, rc, pc)
	if err != nil {
		var ge *guard.GuardError
		if errors.As(err, &ge) {
			return &metatools.Error{Code: ge.Code, Message: ge.Message, Transient: true, RetryAfterSeconds: int((ge.RetryAfterMs + 999) / 1000)}
		}
		return err
	}
	if !res.Allowed {
		ge := guard.NewRateLimitError(ci.MetaTool, rc.MaxRequests, res.RetryAfterMs)
		return &metatools.Error{Code: metatools.CodeRateLimit, Message: ge.Message, Transient: true,
			RetryAfterSeconds: int((res.RetryAfterMs + 999) / 1000)}
	}
	return nil
}

// cleanupMeta closes this config's index (unregistering it from the broker,
// which may outlive the config), upstream connections and limiter. It runs
// for a config that failed to load too, which never started.
func (a *App) cleanupMeta() error {
	rt := a.meta.rt
	if rt == nil || a.meta.closed {
		return nil
	}
	a.meta.closed = true
	for _, f := range rt.unlisten {
		f()
	}
	rt.index.Close()
	for _, u := range rt.upstreams {
		u.Close()
	}
	if rt.limiter != nil {
		return rt.limiter.Destroy(context.Background())
	}
	return nil
}

func (a *App) startMeta() error {
	rt := a.meta.rt
	if rt == nil {
		return nil
	}
	ups, index := rt.upstreams, rt.index
	timeout := 10 * time.Second
	if a.Meta != nil && a.Meta.ConnectTimeout > 0 {
		timeout = time.Duration(a.Meta.ConnectTimeout)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, u := range ups {
		wg.Go(func() { u.Start(ctx) })
	}
	wg.Wait()
	if err := index.Reload(ctx); err != nil {
		a.logger.Warn("meta-tools: some tool sources failed to list; serving the others", zap.Error(err))
	}
	rt.connected()
	return nil
}

func (a *App) stopMeta() error {
	if rt := a.meta.rt; rt != nil {
		rt.index.Close()
		for _, u := range rt.upstreams {
			u.Close()
		}
	}
	return nil
}

// MetaServer returns the MCP server of the meta-tools (codemode_mcp and
// codemode-mcp-stdio serve it).
func (a *App) MetaServer() *mcp.Server {
	if a.meta.rt == nil {
		return nil
	}
	return a.meta.rt.server
}

// MetaService returns the meta-tools as Go methods.
func (a *App) MetaService() *metatools.Service {
	if a.meta.rt == nil {
		return nil
	}
	return a.meta.rt.service
}

// parseMeta parses the `meta` subdirective of the codemode global option:
//
//	meta {
//		naming spec|safe
//		search tfidf                        # default
//		search embeddings|hybrid {
//			url     <endpoint>
//			model   <name>
//			api_key <key>
//			timeout <duration>              # default 30s
//		}
//		sanitization {
//			remove_stack_traces [true|false]
//			remove_file_paths   [true|false]
//			remove_hosts        [true|false]
//			remove_env_values   [true|false]
//			remove_type_names   [true|false]
//		}
//		upstream <name> {
//			url     <streamable-http-url>
//			header  <name> <value>
//			command <program> [<args>...]
//			env     <KEY=VALUE>...
//			call_timeout <duration>         # one tool call's deadline; default 30s
//		}
//		rate_limit <meta-tool> <limit> [<window>] [global|session|ip|userId]
//		connect_timeout <duration>
//		no_broker
//		protocol_versions <version>...
//		list_ttl <duration>
//	}
func parseMeta(d *caddyfile.Dispenser) (*MetaConfig, error) {
	cfg := new(MetaConfig)
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	seen := blockOptions{}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		if err := seen.once(d, "upstream", "rate_limit", "protocol_versions"); err != nil {
			return nil, err
		}
		switch d.Val() {
		case "naming":
			if !d.NextArg() {
				return nil, d.ArgErr()
			}
			cfg.Naming = d.Val()
			if cfg.Naming != "spec" && cfg.Naming != "safe" {
				return nil, d.Errf("naming: want spec or safe, got %q", cfg.Naming)
			}
			if d.NextArg() {
				return nil, d.ArgErr()
			}
		case "search":
			if !d.NextArg() {
				return nil, d.ArgErr()
			}
			name := d.Val()
			unm, err := caddyfile.UnmarshalModule(d, "codemode.search."+name)
			if err != nil {
				return nil, err
			}
			cfg.SearchRaw = caddyconfig.JSONModuleObject(unm, "strategy", name, nil)
		case "embedding":
			raw, err := parseMetaEmbedding(d)
			if err != nil {
				return nil, err
			}
			cfg.SearchRaw = raw
		case "sanitization":
			s := new(MetaSanitization)
			if d.NextArg() {
				return nil, d.ArgErr()
			}
			seen := blockOptions{}
			for n := d.Nesting(); d.NextBlock(n); {
				if err := seen.once(d); err != nil {
					return nil, err
				}
				var dst *bool
				switch d.Val() {
				case "remove_stack_traces":
					dst = &s.RemoveStackTraces
				case "remove_file_paths":
					dst = &s.RemoveFilePaths
				case "remove_hosts":
					dst = &s.RemoveHosts
				case "remove_env_values":
					dst = &s.RemoveEnvValues
				case "remove_type_names":
					dst = &s.RemoveTypeNames
				default:
					return nil, d.Errf("unrecognized subdirective %q", d.Val())
				}
				v, err := parseMetaBool(d)
				if err != nil {
					return nil, err
				}
				*dst = v
			}
			cfg.Sanitization = s
		case "upstream":
			if d.NextArg() { // the name, reported at its own line
				if err := checkUpstreamName(cfg.Upstreams, d.Val()); err != nil {
					return nil, d.Err(err.Error())
				}
				d.Prev()
			}
			u, err := parseMetaUpstream(d)
			if err != nil {
				return nil, err
			}
			cfg.Upstreams = append(cfg.Upstreams, *u)
		case "rate_limit":
			args := d.RemainingArgs()
			if len(args) < 2 || len(args) > 4 {
				return nil, d.Errf("rate_limit: want <meta-tool> <limit> [<window>] [<partition>], got %d arguments", len(args))
			}
			if _, ok := metaSpecName(args[0]); !ok {
				return nil, d.Errf("rate_limit: unknown meta-tool %q (meta:search, meta:describe, meta:execute, meta:invoke or their _ spellings)", args[0])
			}
			limit, err := strconv.ParseInt(args[1], 10, 64)
			if err != nil || limit <= 0 {
				return nil, d.Errf("rate_limit: limit must be a positive integer, got %q", args[1])
			}
			r := MetaRateLimit{Tool: args[0], RateLimit: RateLimit{MaxRequests: limit}}
			for _, arg := range args[2:] {
				switch arg {
				case "global", "session", "ip", "userId":
					r.PartitionBy = arg
					continue
				}
				w, err := caddy.ParseDuration(arg)
				if err != nil || w <= 0 {
					return nil, d.Errf("rate_limit: window must be a duration like 1m, got %q", arg)
				}
				r.Window = caddy.Duration(w)
			}
			cfg.RateLimits = append(cfg.RateLimits, r)
		case "connect_timeout":
			if !d.NextArg() {
				return nil, d.ArgErr()
			}
			dur, err := caddy.ParseDuration(d.Val())
			if err != nil || dur <= 0 {
				return nil, d.Errf("connect_timeout: want a positive duration like 10s, got %q", d.Val())
			}
			cfg.ConnectTimeout = caddy.Duration(dur)
			if d.NextArg() {
				return nil, d.ArgErr()
			}
		case "no_broker":
			if d.NextArg() {
				return nil, d.ArgErr()
			}
			cfg.NoBroker = true
		case "protocol_versions":
			args := d.RemainingArgs()
			if len(args) == 0 {
				return nil, d.ArgErr()
			}
			if err := metatools.ValidateProtocolVersions(args); err != nil {
				return nil, d.Errf("protocol_versions: %v", err)
			}
			cfg.ProtocolVersions = append(cfg.ProtocolVersions, args...)
		case "list_ttl":
			if !d.NextArg() {
				return nil, d.ArgErr()
			}
			dur, err := caddy.ParseDuration(d.Val())
			if err != nil || dur <= 0 {
				// 0 is JSON's "unset": the default 5m, not "no freshness".
				return nil, d.Errf("list_ttl: want a positive duration like 5m, got %q", d.Val())
			}
			cfg.ListTTL = caddy.Duration(dur)
			if d.NextArg() {
				return nil, d.ArgErr()
			}
		default:
			return nil, d.Errf("unrecognized subdirective %q", d.Val())
		}
	}
	return cfg, nil
}

// parseMetaEmbedding reads the former spelling of `search`:
// `embedding { strategy tfidf|ml; url ...; model ...; api_key ...; timeout ... }`.
func parseMetaEmbedding(d *caddyfile.Dispenser) (json.RawMessage, error) {
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	strategy, given := SearchStrategyTFIDF, ""
	var e SearchEmbeddings
	seen := blockOptions{}
	for n := d.Nesting(); d.NextBlock(n); {
		if err := seen.once(d); err != nil {
			return nil, err
		}
		if d.Val() != "strategy" {
			if err := e.unmarshalOption(d); err != nil {
				return nil, err
			}
			continue
		}
		if err := oneArg(d, &given); err != nil {
			return nil, err
		}
		switch strategy = given; strategy {
		case SearchStrategyTFIDF, SearchStrategyHybrid:
		case "ml", SearchStrategyEmbeddings:
			strategy = SearchStrategyEmbeddings
		default:
			return nil, d.Errf("strategy: want tfidf, ml or hybrid, got %q", strategy)
		}
	}
	if strategy == SearchStrategyTFIDF {
		return caddyconfig.JSONModuleObject(SearchTFIDF{}, "strategy", strategy, nil), nil
	}
	if e.URL == "" || e.Model == "" {
		return nil, d.Errf("embedding: strategy %s needs url and model", given)
	}
	return caddyconfig.JSONModuleObject(&e, "strategy", strategy, nil), nil
}

func parseMetaUpstream(d *caddyfile.Dispenser) (*MetaUpstream, error) {
	u := new(MetaUpstream)
	if !d.NextArg() {
		return nil, d.ArgErr()
	}
	u.Name = d.Val()
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	seen := blockOptions{}
	for n := d.Nesting(); d.NextBlock(n); {
		if err := seen.once(d, "header", "env"); err != nil {
			return nil, err
		}
		switch d.Val() {
		case "url":
			if !d.NextArg() {
				return nil, d.ArgErr()
			}
			u.URL = d.Val()
			if d.NextArg() {
				return nil, d.ArgErr()
			}
		case "header":
			args := d.RemainingArgs()
			if len(args) != 2 {
				return nil, d.ArgErr()
			}
			if u.Headers == nil {
				u.Headers = map[string]string{}
			}
			u.Headers[args[0]] = args[1]
		case "command":
			args := d.RemainingArgs()
			if len(args) == 0 {
				return nil, d.ArgErr()
			}
			u.Command, u.Args = args[0], args[1:]
		case "credential":
			c, err := parseSourceCredential(d)
			if err != nil {
				return nil, err
			}
			u.Credential = c
		case "env":
			args := d.RemainingArgs()
			if len(args) == 0 {
				return nil, d.ArgErr()
			}
			for _, kv := range args {
				if !strings.Contains(kv, "=") {
					return nil, d.Errf("env: want KEY=VALUE, got %q", kv)
				}
			}
			u.Env = append(u.Env, args...)
		case "call_timeout":
			if err := parseDurationArg(d, &u.CallTimeout); err != nil {
				return nil, err
			}
		default:
			return nil, d.Errf("unrecognized subdirective %q", d.Val())
		}
	}
	if err := (metatools.UpstreamConfig{Name: u.Name, URL: u.URL, Command: u.Command, Headers: u.Headers}).Validate(); err != nil {
		return nil, d.Errf("upstream: %v", err)
	}
	return u, nil
}

// parseMetaBool reads an optional true/false argument; none means true.
func parseMetaBool(d *caddyfile.Dispenser) (bool, error) {
	if !d.NextArg() {
		return true, nil
	}
	v, err := strconv.ParseBool(d.Val())
	if err != nil {
		return false, d.Errf("%s: want true or false, got %q", d.Val(), d.Val())
	}
	if d.NextArg() {
		return false, d.ArgErr()
	}
	return v, nil
}
