package caddymodules

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddytls"
	"go.uber.org/zap"

	"github.com/codemode-gateway/caddy-codemode/guard"
	"github.com/codemode-gateway/caddy-codemode/oauth"
)

// Authentication modes (auth.mode).
const (
	AuthModeOrchestrated = "orchestrated"
	AuthModeTransparent  = "transparent"
)

// Environment variables of transparent mode (the orchestrated ones are read
// by oauth.ConfigFromEnv).
const (
	EnvIDPProviderURL      = "IDP_PROVIDER_URL"
	EnvIDPClientID         = "IDP_CLIENT_ID"
	EnvIDPClientSecret     = "IDP_CLIENT_SECRET"
	EnvIDPExpectedAudience = "IDP_EXPECTED_AUDIENCE"
)

// AuthConfig is the `auth` part of the codemode app: the spec's auth.* keys.
//
// In orchestrated mode the gateway is the OAuth 2.1 authorization server
// (package oauth): issuer, token_storage, local, refresh, consent and the
// fields of oauth.ServerConfig apply (allow_default_public, dcr_enabled,
// max_registered_clients, max_pending_authorizations, development, users, clients, scopes, resources,
// redact); resources
// defaults here to the issuer, resource and the resources the
// configuration's codemode_oauth and codemode_auth handlers name. In
// transparent mode an external identity provider issues the tokens and the
// gateway only validates them (provider_url, expected_audience, jwks_url).
//
// String values may use Caddy placeholders such as {env.JWT_SIGNING_KEY};
// empty values fall back to the spec's environment variables (REDIS_HOST,
// REDIS_PORT, REDIS_PASSWORD, JWT_SIGNING_KEY, IDP_PROVIDER_URL,
// IDP_CLIENT_ID, IDP_CLIENT_SECRET, IDP_EXPECTED_AUDIENCE).
type AuthConfig struct {
	// Mode is orchestrated (we issue tokens) or transparent (an external
	// identity provider does). Default orchestrated.
	Mode string `json:"mode,omitempty"`

	oauth.ServerConfig

	// TokenStorageRaw is the storage module of pending authorizations,
	// codes, refresh tokens, sessions and registered clients
	// (keys under the storage's key_prefix followed by "auth:"). Default:
	// the app's storage, or Redis at REDIS_HOST:REDIS_PORT when that is set
	// and no storage is configured.
	TokenStorageRaw json.RawMessage `json:"token_storage,omitempty" caddy:"namespace=codemode.storage inline_key=module"`

	// Local holds the signing key and its rotation (orchestrated mode).
	Local *AuthLocal `json:"local,omitempty"`

	// Refresh sets token lifetimes and refresh-token behaviour
	// (orchestrated mode).
	Refresh *AuthRefresh `json:"refresh,omitempty"`

	// Consent configures the consent screen (orchestrated mode).
	Consent *oauth.ConsentConfig `json:"consent,omitempty"`

	// ClientIDMetadata accepts Client ID Metadata Documents: a client_id
	// that is the https URL of a JSON document of the client's metadata,
	// fetched, validated and cached instead of a registration
	// (orchestrated mode). Default off.
	ClientIDMetadata *AuthClientIDMetadata `json:"client_id_metadata,omitempty"`

	// RegisteredClientTTL is how long a dynamically registered client is
	// kept after it last obtained tokens (at least as long as its refresh
	// tokens live), in whole seconds. A registration that never obtains a
	// token is dropped after 24 hours. Default 30d.
	RegisteredClientTTL caddy.Duration `json:"registered_client_ttl,omitempty"`

	// PasswordCheckWait is how long a login waits, in whole seconds, for a
	// password check when every one is taken (half the CPUs compare
	// passwords at once) before it is answered 503 LOGIN_BUSY
	// (orchestrated mode). Default 5s, at most 1m. A bcrypt check of cost
	// 10 takes about 70 ms of a CPU, twice that per step of cost:
	// raise it for costly hashes on few CPUs (docs/oauth.md).
	PasswordCheckWait caddy.Duration `json:"password_check_wait,omitempty"`

	// ProviderURL is the external provider's issuer URL (transparent mode;
	// IDP_PROVIDER_URL). Its discovery document and key set are fetched
	// from it. Must be https outside development.
	ProviderURL string `json:"provider_url,omitempty"`

	// ClientID is the gateway's client id at the provider (IDP_CLIENT_ID).
	// Used as the expected audience when ExpectedAudience is empty (with a
	// warning).
	ClientID string `json:"client_id,omitempty"`

	// ClientSecret is the gateway's client secret at the provider
	// (IDP_CLIENT_SECRET). JWT validation does not need it; it is kept for
	// upstream token exchange and never logged.
	ClientSecret string `json:"client_secret,omitempty"`

	// ExpectedAudience is the aud value every token must carry in
	// transparent mode (IDP_EXPECTED_AUDIENCE). Required in transparent mode
	// (production rule 6).
	ExpectedAudience string `json:"expected_audience,omitempty"`

	// JWKSURL reads the provider's key set from this URL instead of the
	// one named by its discovery document. Optional.
	JWKSURL string `json:"jwks_url,omitempty"`

	// Resource is the canonical URL of the protected resource (for MCP the
	// MCP endpoint, e.g. https://gw.example.com/mcp). It is the resource in
	// the RFC 9728 metadata, and in orchestrated mode the audience a token
	// must carry (RFC 8707). Default: the issuer URL in orchestrated mode,
	// the expected audience in transparent mode when it is a URL. A bearer
	// provider may name its own.
	Resource string `json:"resource,omitempty"`

	// TokenRateLimit limits requests to the token, registration,
	// revocation and login endpoints with the guard library. Default 30
	// requests per 1m per client IP. Cannot be turned off (rule 9).
	TokenRateLimit *RateLimit `json:"token_rate_limit,omitempty"`

	// BehindTLSProxy declares that a proxy in front of Caddy terminates
	// TLS, so the authentication endpoints may be served over plain HTTP
	// on a non-loopback listener. Default false. Logged as a warning.
	BehindTLSProxy bool `json:"behind_tls_proxy,omitempty"`
}

// AuthLocal is auth.local: the signing key.
type AuthLocal struct {
	// SignKey is the private signing key as a JSON Web Key (RSA for RS256,
	// P-256 EC for ES256). Default from JWT_SIGNING_KEY. Required unless
	// development is on, in which case a key is generated (and lost on
	// restart). Never logged.
	SignKey string `json:"sign_key,omitempty"`
	// KeyRotation is the rotation period, in whole days (e.g. 30d); each
	// period signs with an ES256 key derived from SignKey. Default 0: no
	// rotation. Recommended 30 to 90 days.
	KeyRotation caddy.Duration `json:"key_rotation,omitempty"`
	// MaxKeys is how many previous rotated keys stay in the key set so
	// tokens they signed still validate. Default 2.
	MaxKeys int `json:"max_keys,omitempty"`
}

// AuthRefresh is auth.refresh: lifetimes and refresh tokens.
type AuthRefresh struct {
	// Enabled issues refresh tokens. Default false.
	Enabled bool `json:"enabled,omitempty"`
	// Skew is the clock skew tolerated when checking expiry, in whole
	// seconds. Default 0.
	Skew caddy.Duration `json:"skew,omitempty"`
	// AccessTokenTTL is the access token lifetime, in whole seconds.
	// Default 15m.
	AccessTokenTTL caddy.Duration `json:"access_token_ttl,omitempty"`
	// RefreshTokenTTL is the refresh token lifetime, which is also the
	// session lifetime, in whole seconds. Default 7d.
	RefreshTokenTTL caddy.Duration `json:"refresh_token_ttl,omitempty"`
	// RotateRefreshToken is accepted for the spec's key; refresh tokens are
	// always rotated on use (OAuth 2.1, production rule 5), so false is
	// refused. Default true.
	RotateRefreshToken *bool `json:"rotate_refresh_token,omitempty"`
	// ReuseGrace lets a refresh token that was just rotated be used again
	// within this time without revoking the chain, for clients that lose
	// the response in flight, in whole seconds. Default 0: any reuse
	// revokes the chain.
	ReuseGrace caddy.Duration `json:"reuse_grace,omitempty"`
}

// AuthClientIDMetadata is auth.client_id_metadata: Client ID Metadata
// Documents (draft-ietf-oauth-client-id-metadata-document).
type AuthClientIDMetadata struct {
	// Enabled accepts https URLs as client_id and advertises
	// client_id_metadata_document_supported. Default false (the Caddyfile
	// block turns it on).
	Enabled bool `json:"enabled,omitempty"`
	// MaxDocumentBytes bounds a document's size, in bytes. Default 5120.
	MaxDocumentBytes int `json:"max_document_bytes,omitempty"`
	// FetchTimeout bounds one fetch, redirects included, in whole seconds.
	// Default 5s.
	FetchTimeout caddy.Duration `json:"fetch_timeout,omitempty"`
	// MaxCacheTTL caps how long a document is kept whatever its caching
	// headers allow, in whole seconds. Default 24h.
	MaxCacheTTL caddy.Duration `json:"max_cache_ttl,omitempty"`
	// AllowedPrivateHosts are host names whose documents may be fetched
	// although they resolve to loopback, private or link-local addresses.
	// Default none.
	AllowedPrivateHosts []string `json:"allowed_private_hosts,omitempty"`
	// TrustPoolRaw verifies the documents' servers: a tls.ca_pool.source
	// module, as reverse_proxy's tls_trust_pool (e.g. {"provider":
	// "pki_root", "authority": ["local"]} for Caddy's internal CA).
	// Default: the system roots.
	TrustPoolRaw json.RawMessage `json:"trust_pool,omitempty" caddy:"namespace=tls.ca_pool.source inline_key=provider"`
}

// wholeSeconds converts d, which must be whole seconds.
func wholeSeconds(name string, d caddy.Duration) (int, error) {
	if d < 0 || time.Duration(d)%time.Second != 0 {
		return 0, fmt.Errorf("%s: %v is not a non-negative whole number of seconds", name, time.Duration(d))
	}
	return int(time.Duration(d) / time.Second), nil
}

// serverParts fills the embedded oauth.ServerConfig's local, refresh and
// consent from their Caddy-shaped fields.
func (c *AuthConfig) serverParts() error {
	if l := c.Local; l != nil {
		if l.KeyRotation < 0 || time.Duration(l.KeyRotation)%(24*time.Hour) != 0 {
			return fmt.Errorf("local: key_rotation: %v is not a whole number of days", time.Duration(l.KeyRotation))
		}
		c.ServerConfig.Local = oauth.LocalConfig{SignKey: l.SignKey, MaxKeys: l.MaxKeys,
			KeyRotationDays: int(time.Duration(l.KeyRotation) / (24 * time.Hour))}
	}
	if r := c.Refresh; r != nil {
		o := oauth.RefreshConfig{Enabled: r.Enabled, RotateRefreshToken: r.RotateRefreshToken}
		// Checked here so that the error names the Caddyfile's key and
		// unit, not the library's reuse_grace_seconds.
		if g := time.Duration(r.ReuseGrace); g > oauth.MaxReuseGrace {
			return fmt.Errorf("refresh: reuse_grace %v is more than %v (the grace is for a lost answer, not a second life)", g, oauth.MaxReuseGrace)
		}
		var err error
		for _, f := range []struct {
			name string
			d    caddy.Duration
			dst  *int
		}{{"skew", r.Skew, &o.SkewSeconds}, {"access_token_ttl", r.AccessTokenTTL, &o.AccessTokenTTL},
			{"refresh_token_ttl", r.RefreshTokenTTL, &o.RefreshTokenTTL}, {"reuse_grace", r.ReuseGrace, &o.ReuseGraceSeconds}} {
			if *f.dst, err = wholeSeconds(f.name, f.d); err != nil {
				return fmt.Errorf("refresh: %w", err)
			}
		}
		c.ServerConfig.Refresh = o
	}
	if c.Consent != nil {
		c.ServerConfig.Consent = *c.Consent
	}
	ttl, err := wholeSeconds("registered_client_ttl", c.RegisteredClientTTL)
	if err != nil {
		return err
	}
	c.ServerConfig.RegisteredClientTTL = ttl
	if w := time.Duration(c.PasswordCheckWait); w > oauth.MaxPasswordCheckWait {
		return fmt.Errorf("password_check_wait: %v is more than %v (a browser's user, and the proxies in front, wait no longer)", w, oauth.MaxPasswordCheckWait)
	}
	if c.ServerConfig.PasswordCheckWait, err = wholeSeconds("password_check_wait", c.PasswordCheckWait); err != nil {
		return err
	}
	if m := c.ClientIDMetadata; m != nil {
		o := oauth.ClientIDMetadataConfig{Enabled: m.Enabled, MaxDocumentBytes: m.MaxDocumentBytes,
			AllowedPrivateHosts: m.AllowedPrivateHosts}
		if o.FetchTimeout, err = wholeSeconds("client_id_metadata: fetch_timeout", m.FetchTimeout); err != nil {
			return err
		}
		if o.MaxCacheTTL, err = wholeSeconds("client_id_metadata: max_cache_ttl", m.MaxCacheTTL); err != nil {
			return err
		}
		c.ServerConfig.ClientIDMetadata = o
	}
	return nil
}

// authState is what the area keeps at run time.
type authState struct {
	cfg        *AuthConfig // with defaults and environment applied
	tokenLimit *guard.RateLimitConfig
	shared     *authShared
	poolKey    string
	released   bool // by cleanupAuth, its only reader and writer
	metrics    *authMetrics
	resource   string           // default protected resource
	served     *servedResources // orchestrated mode
	logger     *zap.Logger
}

// authShared outlives a config reload when the auth config does not change:
// the authorization server (with in-memory sessions) and the rate limiter.
type authShared struct {
	mode     string
	verify   func(ctx context.Context, token, audience string) (*oauth.VerifiedToken, error)
	handler  http.Handler // authorization server endpoints; nil in transparent mode
	issuer   string       // the authorization server of the resource
	limiter  *guard.GuardManager
	closers  []func() error
	verifier *oauth.Verifier // transparent mode
	server   *oauth.Server   // orchestrated mode
}

// Destruct implements caddy.Destructor: it closes the server and limiter.
func (s *authShared) Destruct() error {
	var first error
	for i := len(s.closers) - 1; i >= 0; i-- {
		if err := s.closers[i](); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Default token-endpoint rate limit (the spec names none): 30 per minute
// per client IP.
const defaultTokenMaxRequests = 30

func (a *App) provisionAuth(ctx caddy.Context) error {
	if a.Auth == nil {
		return nil
	}
	logger := a.logger.Named("auth")
	cfg := *a.Auth
	cfg.Clients = slices.Clone(cfg.Clients) // applyDefaults rewrites secrets
	if err := cfg.applyDefaults(os.Getenv); err != nil {
		return fmt.Errorf("codemode auth: %w", err)
	}
	if err := cfg.validate(); err != nil {
		return fmt.Errorf("codemode auth: %w", err)
	}
	if c, ok := a.connectionsClient(&cfg); ok {
		// The connections page signs users in as a client of this server.
		cfg.Clients = append(cfg.Clients, c)
	}
	if len(cfg.TokenStorageRaw) == 0 && !a.storageSet {
		cfg.TokenStorageRaw = redisFromEnv(os.Getenv)
	}
	var store Storage = nil
	if len(cfg.TokenStorageRaw) > 0 {
		var err error
		if store, err = loadStorage(ctx, &cfg, "TokenStorageRaw", cfg.TokenStorageRaw, nil); err != nil {
			return fmt.Errorf("codemode auth: token_storage: %w", err)
		}
	} else if a.storageSet {
		store = a.storage
	}
	backend := MemoryStorage{}.Backend()
	if store != nil {
		backend = store.Backend()
	}
	cfg.ServerConfig.TokenStorage = oauth.TokenStorageConfig{Type: storageMemory, KeyPrefix: backend.KeyPrefix + authKeyPart}
	if backend.Redis != nil {
		cfg.ServerConfig.TokenStorage.Type, cfg.ServerConfig.TokenStorage.Client = storageRedis, backend.Redis
	}
	cfg.warn(logger, store)
	var served *servedResources
	if cfg.Mode == AuthModeOrchestrated {
		var err error
		if served, err = newServedResources(&cfg); err != nil {
			return fmt.Errorf("codemode auth: %w", err)
		}
		// Applied per configuration (servedResources), not by the shared
		// server: a reload that changes only the resources keeps it.
		cfg.ServerConfig.Resources = nil
	}

	metrics := processTelemetry().auth // registered by provisionTelemetry
	key, err := componentKey("auth", cfg, backend.key())
	if err != nil {
		return fmt.Errorf("codemode auth: %w", err)
	}
	if m := cfg.ClientIDMetadata; m != nil && m.TrustPoolRaw != nil {
		// After the component key, which the module's JSON is part of:
		// loading clears the raw field (of a copy: a.Auth stays as loaded).
		mc := *m
		cfg.ClientIDMetadata = &mc
		mod, err := ctx.LoadModule(&mc, "TrustPoolRaw")
		if err != nil {
			return fmt.Errorf("codemode auth: client_id_metadata trust pool: %w", err)
		}
		ca, ok := mod.(caddytls.CA)
		if !ok {
			return fmt.Errorf("codemode auth: client_id_metadata trust pool: %T is not a CA pool", mod)
		}
		cfg.ServerConfig.ClientIDMetadata.RootCAs = ca.CertPool()
	}
	shared, err := acquire(key, func() (*authShared, func() error, error) {
		s, err := buildAuth(&cfg, backend, logger)
		if err != nil {
			return nil, nil, err
		}
		return s, s.Destruct, nil
	})
	if err != nil {
		return fmt.Errorf("codemode auth: %w", err)
	}
	a.auth = authState{
		tokenLimit: cfg.TokenRateLimit.config(),
		cfg:        &cfg,
		shared:     shared,
		poolKey:    key,
		metrics:    metrics,
		resource:   cfg.Resource,
		served:     served,
		logger:     logger,
	}
	return nil
}

func (a *App) cleanupAuth() error {
	if a.auth.poolKey == "" || a.auth.released {
		return nil
	}
	// The rest stays set: the old config's handlers read it per request,
	// and Caddy cleans the config up while they still answer on a reload.
	a.auth.released = true
	return release(a.auth.poolKey)
}

// AuthEnabled reports whether the app has an `auth` configuration.
func (a *App) AuthEnabled() bool { return a.auth.shared != nil }

// AuthMode returns orchestrated or transparent, or "" without auth.
func (a *App) AuthMode() string {
	if a.auth.shared == nil {
		return ""
	}
	return a.auth.shared.mode
}

// AuthServer returns the authorization server of orchestrated mode, or
// nil.
func (a *App) AuthServer() *oauth.Server {
	if a.auth.shared == nil {
		return nil
	}
	return a.auth.shared.server
}

// VerifyBearer validates an access token for audience (empty means the
// app's default resource or expected audience). It is the one validation
// path of both modes: our own server's tokens (including revocation) or the
// external provider's. Rejections are *oauth.TokenError.
func (a *App) VerifyBearer(ctx context.Context, token, audience string) (*oauth.VerifiedToken, error) {
	if a.auth.shared == nil {
		return nil, errors.New("codemode auth: not configured")
	}
	if audience == "" {
		audience = a.auth.defaultAudience()
	}
	return a.auth.shared.verify(ctx, token, audience)
}

func (s *authState) defaultAudience() string {
	if s.cfg.Mode == AuthModeTransparent {
		return s.cfg.ExpectedAudience
	}
	return s.resource
}

// applyDefaults fills the mode, the environment fallbacks, placeholders
// and defaults.
func (c *AuthConfig) applyDefaults(getenv func(string) string) error {
	if err := c.serverParts(); err != nil {
		return err
	}
	repl := caddy.NewReplacer()
	for _, p := range []*string{&c.Mode, &c.Issuer, &c.ServerConfig.Local.SignKey, &c.ProviderURL, &c.ClientID,
		&c.ClientSecret, &c.ExpectedAudience, &c.JWKSURL, &c.Resource} {
		*p = repl.ReplaceKnown(*p, "")
	}
	for i := range c.Clients {
		c.Clients[i].Secret = repl.ReplaceKnown(c.Clients[i].Secret, "")
	}
	c.Resources = slices.Clone(c.Resources)
	for i := range c.Resources {
		c.Resources[i] = repl.ReplaceKnown(c.Resources[i], "")
	}
	// Password hashes are secrets too: `user alice {env.ALICE_HASH}`
	// (docs/credentials.md) keeps them out of the config.
	for i := range c.Users {
		u := &c.Users[i]
		u.Username = repl.ReplaceKnown(u.Username, "")
		raw := u.PasswordHash
		u.PasswordHash = repl.ReplaceKnown(raw, "")
		u.Subject = repl.ReplaceKnown(u.Subject, "")
		if raw != "" && u.PasswordHash == "" {
			// The server would say "users[0]: username and password_hash
			// are required", naming neither the user nor the variable.
			return fmt.Errorf("user %q: password hash %s is empty (an unset environment variable or an empty file?)", u.Username, raw)
		}
	}
	if c.Mode == "" {
		c.Mode = AuthModeOrchestrated
		if c.ProviderURL != "" || (getenv(EnvIDPProviderURL) != "" && c.Issuer == "") {
			c.Mode = AuthModeTransparent
		}
	}
	switch c.Mode {
	case AuthModeOrchestrated:
		if err := oauth.ConfigFromEnv(&c.ServerConfig, getenv); err != nil {
			return err
		}
		c.Issuer = strings.TrimSuffix(c.Issuer, "/")
		if c.Resource == "" {
			c.Resource = c.Issuer
		}
	case AuthModeTransparent:
		fill := func(p *string, env string) {
			if *p == "" {
				*p = getenv(env)
			}
		}
		fill(&c.ProviderURL, EnvIDPProviderURL)
		fill(&c.ClientID, EnvIDPClientID)
		fill(&c.ClientSecret, EnvIDPClientSecret)
		fill(&c.ExpectedAudience, EnvIDPExpectedAudience)
		if c.ExpectedAudience == "" {
			c.ExpectedAudience = c.ClientID
		}
		if c.Resource == "" {
			if u, err := url.Parse(c.ExpectedAudience); err == nil && u.IsAbs() && u.Host != "" {
				c.Resource = c.ExpectedAudience
			}
		}
	default:
		return fmt.Errorf("mode %q: must be orchestrated or transparent", c.Mode)
	}
	rl := RateLimit{MaxRequests: defaultTokenMaxRequests, PartitionBy: guard.PartitionIP}
	if c.TokenRateLimit != nil {
		rl = *c.TokenRateLimit
		if rl.PartitionBy == "" {
			rl.PartitionBy = guard.PartitionIP
		}
	}
	rl = rl.withDefaults()
	c.TokenRateLimit = &rl
	return nil
}

// validate applies the production rules that are enforced at load.
func (c *AuthConfig) validate() error {
	// The authorization server checks these in orchestrated mode; in
	// transparent mode they are unused, and a bad value would wait there
	// for the day the mode changes.
	counts := []namedCount{{"max_registered_clients", int64(c.MaxRegisteredClients), 0}, {"max_pending_authorizations", int64(c.MaxPendingAuthorizations), 0}}
	if c.Local != nil {
		counts = append(counts, namedCount{"local: max_keys", int64(c.Local.MaxKeys), 0})
	}
	if c.ClientIDMetadata != nil {
		counts = append(counts, namedCount{"client_id_metadata: max_document_bytes", int64(c.ClientIDMetadata.MaxDocumentBytes), 0})
	}
	for _, f := range counts {
		if f.n < 0 {
			return fmt.Errorf("%s: %d is negative", f.name, f.n)
		}
	}
	switch c.Mode {
	case AuthModeTransparent:
		if c.ProviderURL == "" {
			return errors.New("transparent mode: provider_url (IDP_PROVIDER_URL) is required")
		}
		u, err := url.Parse(c.ProviderURL)
		if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
			return fmt.Errorf("provider_url %q: must be an absolute http(s) URL", c.ProviderURL)
		}
		if u.Scheme == "http" && !c.Development {
			return fmt.Errorf("provider_url %q: must use https outside development mode (production rule 1)", c.ProviderURL)
		}
		if c.ExpectedAudience == "" {
			return errors.New("transparent mode: expected_audience (IDP_EXPECTED_AUDIENCE) is required (production rule 6)")
		}
		if len(c.Resources) > 0 {
			return errors.New("transparent mode: resources belongs to orchestrated mode (the provider decides which resources it issues tokens for)")
		}
	case AuthModeOrchestrated:
		if c.Issuer == "" {
			return errors.New("orchestrated mode: issuer (the gateway's public base URL) is required")
		}
		// Checked before the resource, which defaults to the issuer: a
		// wrong issuer is reported as such.
		if u, err := url.Parse(c.Issuer); err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
			return fmt.Errorf("issuer %q: must be an absolute http(s) URL, the gateway's public base URL (e.g. https://gw.example.com)", c.Issuer)
		}
		if c.ProviderURL != "" || c.ExpectedAudience != "" || c.JWKSURL != "" {
			return errors.New("orchestrated mode: provider_url, expected_audience and jwks_url belong to transparent mode")
		}
	}
	if c.Resource != "" {
		if err := (&oauth.ResourceMetadata{Resource: c.Resource}).Validate(); err != nil {
			return err
		}
	}
	if c.Mode == AuthModeOrchestrated {
		if _, err := newServedResources(c); err != nil {
			return err
		}
	}
	if err := c.TokenRateLimit.validate(false); err != nil {
		return fmt.Errorf("token_rate_limit: %w", err)
	}
	return nil
}

// warn logs the production rules that are not enforced but broken; store
// is the token storage.
func (c *AuthConfig) warn(l *zap.Logger, store Storage) {
	w := func(rule int, msg string, fields ...zap.Field) {
		l.Warn("PRODUCTION RULE "+fmt.Sprint(rule)+": "+msg, fields...)
	}
	if c.Development {
		w(1, "auth development mode is on: plain HTTP on loopback, generated keys and the demo login are allowed; never use it in production")
	}
	if c.BehindTLSProxy {
		w(1, "behind_tls_proxy: authentication endpoints accept plain HTTP; make sure only a TLS-terminating proxy can reach this listener")
	}
	if c.AllowDefaultPublic {
		w(7, "allow_default_public is true: requests without a token pass as anonymous")
	}
	if c.Resource == "" {
		l.Warn("auth has no resource URL: the protected resource metadata (RFC 9728) is not served and MCP clients cannot discover the authorization server; set resource")
	}
	if c.Mode == AuthModeTransparent {
		if c.ExpectedAudience == c.ClientID && c.ClientID != "" {
			w(6, "expected_audience is not set; using the client id as audience", zap.String("audience", c.ExpectedAudience))
		}
		return
	}
	if store == nil || store.Backend().Redis == nil {
		w(2, "token storage is in memory: one instance only, every session is lost on restart; use redis with TLS in production")
	} else if r, ok := store.(*RedisStorage); ok && r.TLS == nil {
		w(2, "redis token storage without TLS")
	}
	local, refresh := c.ServerConfig.Local, c.ServerConfig.Refresh
	if local.SignKey == "" {
		w(3, "no signing key (local.sign_key / JWT_SIGNING_KEY): a key is generated and lost on restart, invalidating every token")
	}
	if local.KeyRotationDays == 0 {
		w(3, "signing keys are not rotated (local.key_rotation); 30 to 90 days is recommended")
	} else if local.KeyRotationDays < 30 || local.KeyRotationDays > 90 {
		w(3, "key_rotation outside the recommended 30 to 90 days", zap.Duration("key_rotation", time.Duration(local.KeyRotationDays)*24*time.Hour))
	}
	if refresh.RotateRefreshToken != nil && !*refresh.RotateRefreshToken {
		w(5, "rotate_refresh_token is false")
	}
	if refresh.ReuseGraceSeconds > 0 {
		w(5, "refresh token reuse grace is on: the previous refresh token of a chain can be redeemed once more within the grace, by the client or by whoever took it", zap.Duration("reuse_grace", time.Duration(refresh.ReuseGraceSeconds)*time.Second))
	}
	if c.DCREnabled {
		w(7, "dcr_enabled is true: anyone can register a client")
	}
	if !c.ServerConfig.Consent.Enabled {
		w(8, "the consent screen is off")
	}
	if ttl := time.Duration(refresh.AccessTokenTTL) * time.Second; ttl > time.Hour {
		w(0, "access tokens live longer than 1 hour (15 minutes is the production guidance)", zap.Duration("access_token_ttl", ttl))
	}
	if ttl := time.Duration(refresh.RefreshTokenTTL) * time.Second; ttl > 30*24*time.Hour {
		w(0, "refresh tokens live longer than 30 days", zap.Duration("refresh_token_ttl", ttl))
	}
}

// redisFromEnv is the token storage named by the spec's REDIS_HOST,
// REDIS_PORT and REDIS_PASSWORD, or nil when REDIS_HOST is unset.
func redisFromEnv(getenv func(string) string) json.RawMessage {
	host := getenv(oauth.EnvRedisHost)
	if host == "" {
		return nil
	}
	port := getenv(oauth.EnvRedisPort)
	if port == "" {
		port = "6379"
	}
	raw, _ := json.Marshal(map[string]any{"module": storageRedis, "address": net.JoinHostPort(host, port),
		"password": getenv(oauth.EnvRedisPassword)})
	return raw
}

// buildAuth constructs what the mode needs.
func buildAuth(cfg *AuthConfig, backend StorageBackend, logger *zap.Logger) (*authShared, error) {
	s := &authShared{mode: cfg.Mode}
	if backend.Component != "" {
		if err := retain(backend.Component); err != nil {
			return nil, err
		}
		s.closers = append(s.closers, func() error { return release(backend.Component) })
	}
	// The endpoint limiter shares the token storage, so the limit holds
	// across gateways sharing a Redis.
	prefix := backend.KeyPrefix + authKeyPart + "ratelimit:"
	storeKey, store, err := guardStorageOn(backend, prefix, logger)
	if err != nil {
		_ = s.Destruct()
		return nil, fmt.Errorf("token endpoint rate limiter: %w", err)
	}
	s.closers = append(s.closers, func() error { return release(storeKey) })
	lim, err := guard.NewGuardManager(context.Background(), guard.GuardConfig{Enabled: true, KeyPrefix: prefix,
		Storage: &guard.StorageConfig{FailureMode: backend.FailureMode}}, &guard.ManagerOptions{Logger: logger, Now: guardNow, Storage: store,
		Metrics: processTelemetry().guard})
	if err != nil {
		_ = s.Destruct()
		return nil, fmt.Errorf("token endpoint rate limiter: %w", err)
	}
	s.limiter = lim
	s.closers = append(s.closers, func() error { return lim.Destroy(context.Background()) })
	switch cfg.Mode {
	case AuthModeTransparent:
		v, err := oauth.NewVerifier(oauth.VerifierConfig{Issuer: cfg.ProviderURL, Audience: cfg.ExpectedAudience, JWKSURL: cfg.JWKSURL},
			&oauth.VerifierOptions{Logger: logger})
		if err != nil {
			_ = s.Destruct()
			return nil, err
		}
		// Fetch the keys now so a misconfigured provider shows at start; a
		// provider that is down is not fatal (it may come back).
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := v.Refresh(ctx); err != nil {
			logger.Error("identity provider key set not reachable at start; tokens are refused until it is", zap.Error(err))
		}
		s.verifier = v
		s.issuer = v.Issuer()
		s.verify = v.VerifyAudience
	case AuthModeOrchestrated:
		if err := buildOrchestrated(s, cfg, logger); err != nil {
			_ = s.Destruct()
			return nil, err
		}
	}
	return s, nil
}
