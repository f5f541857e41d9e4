package caddymodules

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
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
// (package oauth) and the fields of oauth.ServerConfig apply (issuer,
// token_storage, local, refresh, consent, allow_default_public, dcr_enabled,
// development, users, clients, scopes, redact). In transparent mode an
// external identity provider issues the tokens and the gateway only
// validates them (provider_url, expected_audience, jwks_url).
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
	// requests per 60000 ms per client IP. Cannot be turned off (rule 9).
	TokenRateLimit *guard.RateLimitConfig `json:"token_rate_limit,omitempty"`

	// BehindTLSProxy declares that a proxy in front of Caddy terminates
	// TLS, so the authentication endpoints may be served over plain HTTP
	// on a non-loopback listener. Default false. Logged as a warning.
	BehindTLSProxy bool `json:"behind_tls_proxy,omitempty"`
}

// authState is what the area keeps at run time.
type authState struct {
	cfg      *AuthConfig // with defaults and environment applied
	shared   *authShared
	poolKey  string
	metrics  *authMetrics
	resource string // default protected resource
	logger   *zap.Logger
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
const (
	defaultTokenMaxRequests = 30
	defaultTokenWindowMs    = 60000
)

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
	cfg.warn(logger)

	metrics, err := newAuthMetrics(ctx.GetMetricsRegistry())
	if err != nil {
		return fmt.Errorf("codemode auth: metrics: %w", err)
	}
	key, err := cfg.poolKey()
	if err != nil {
		return fmt.Errorf("codemode auth: %w", err)
	}
	shared, err := acquire(key, func() (*authShared, func() error, error) {
		s, err := buildAuth(&cfg, logger)
		if err != nil {
			return nil, nil, err
		}
		return s, s.Destruct, nil
	})
	if err != nil {
		return fmt.Errorf("codemode auth: %w", err)
	}
	a.auth = authState{
		cfg:      &cfg,
		shared:   shared,
		poolKey:  key,
		metrics:  metrics,
		resource: cfg.Resource,
		logger:   logger,
	}
	return nil
}

func (a *App) cleanupAuth() error {
	if a.auth.poolKey == "" {
		return nil
	}
	err := release(a.auth.poolKey)
	a.auth = authState{}
	return err
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

// AuthServer returns the authorization server of orchestrated mode (for
// its token vault), or nil.
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
	repl := caddy.NewReplacer()
	for _, p := range []*string{&c.Mode, &c.Issuer, &c.Local.SignKey, &c.TokenStorage.Host,
		&c.TokenStorage.Password, &c.TokenStorage.KeyPrefix, &c.ProviderURL, &c.ClientID,
		&c.ClientSecret, &c.ExpectedAudience, &c.JWKSURL, &c.Resource} {
		*p = repl.ReplaceKnown(*p, "")
	}
	for i := range c.Clients {
		c.Clients[i].Secret = repl.ReplaceKnown(c.Clients[i].Secret, "")
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
	if c.TokenRateLimit == nil {
		c.TokenRateLimit = &guard.RateLimitConfig{MaxRequests: defaultTokenMaxRequests, WindowMs: defaultTokenWindowMs,
			PartitionBy: guard.PartitionKey{Strategy: guard.PartitionIP}}
	}
	return nil
}

// validate applies the production rules that are enforced at load.
func (c *AuthConfig) validate() error {
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
	case AuthModeOrchestrated:
		if c.Issuer == "" {
			return errors.New("orchestrated mode: issuer (the gateway's public base URL) is required")
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
	if err := c.TokenRateLimit.Validate(); err != nil {
		return fmt.Errorf("token_rate_limit: %w", err)
	}
	return nil
}

// warn logs the production rules that are not enforced but broken.
func (c *AuthConfig) warn(l *zap.Logger) {
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
	if c.TokenStorage.Type == "" || c.TokenStorage.Type == "memory" {
		w(2, "token storage is in memory: one instance only, every session is lost on restart; use redis with TLS in production")
	} else if !c.TokenStorage.TLS {
		w(2, "redis token storage without TLS")
	}
	if c.Local.SignKey == "" {
		w(3, "no signing key (local.sign_key / JWT_SIGNING_KEY): a key is generated and lost on restart, invalidating every token")
	}
	if c.Local.KeyRotationDays == 0 {
		w(3, "signing keys are not rotated (local.key_rotation_days); 30 to 90 days is recommended")
	} else if c.Local.KeyRotationDays < 30 || c.Local.KeyRotationDays > 90 {
		w(3, "key_rotation_days outside the recommended 30 to 90", zap.Int("key_rotation_days", c.Local.KeyRotationDays))
	}
	if c.Refresh.RotateRefreshToken != nil && !*c.Refresh.RotateRefreshToken {
		w(5, "rotate_refresh_token is false")
	}
	if c.Refresh.ReuseGraceSeconds > 0 {
		w(5, "refresh token reuse grace is on: the previous refresh token of a chain can be redeemed once more within the grace, by the client or by whoever took it", zap.Int("reuse_grace_seconds", c.Refresh.ReuseGraceSeconds))
	}
	if c.DCREnabled {
		w(7, "dcr_enabled is true: anyone can register a client")
	}
	if !c.Consent.Enabled {
		w(8, "the consent screen is off")
	}
	if ttl := time.Duration(c.Refresh.AccessTokenTTL) * time.Second; ttl > time.Hour {
		w(0, "access tokens live longer than 1 hour (15 minutes is the production guidance)", zap.Duration("access_token_ttl", ttl))
	}
	if ttl := time.Duration(c.Refresh.RefreshTokenTTL) * time.Second; ttl > 30*24*time.Hour {
		w(0, "refresh tokens live longer than 30 days", zap.Duration("refresh_token_ttl", ttl))
	}
}

// poolKey identifies a configuration: reloads with the same auth config
// reuse the server and its in-memory state.
func (c *AuthConfig) poolKey() (string, error) { return componentKey("auth", c) }

// buildAuth constructs what the mode needs.
func buildAuth(cfg *AuthConfig, logger *zap.Logger) (*authShared, error) {
	s := &authShared{mode: cfg.Mode}
	prefix := cfg.TokenStorage.KeyPrefix
	if prefix == "" {
		prefix = oauth.DefaultKeyPrefix
	}
	lim, err := guard.NewGuardManager(context.Background(), guard.GuardConfig{Enabled: true, KeyPrefix: prefix + "ratelimit:",
		Storage: cfg.rateLimitStorage()}, &guard.ManagerOptions{Logger: logger, Now: guardNow})
	if err != nil {
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

// rateLimitStorage shares the token storage's Redis with the limiter so the
// limit holds across instances.
func (c *AuthConfig) rateLimitStorage() *guard.StorageConfig {
	if c.Mode != AuthModeOrchestrated || c.TokenStorage.Type != "redis" {
		return nil
	}
	return &guard.StorageConfig{Provider: "redis", Host: c.TokenStorage.Host, Port: c.TokenStorage.Port,
		Password: c.TokenStorage.Password, TLS: c.TokenStorage.TLS}
}
