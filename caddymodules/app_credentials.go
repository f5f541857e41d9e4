package caddymodules

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"go.uber.org/zap"

	"github.com/codemode-gateway/caddy-codemode/broker/catalog"
	"github.com/codemode-gateway/caddy-codemode/credential"
	"github.com/codemode-gateway/caddy-codemode/metatools"
	"github.com/codemode-gateway/caddy-codemode/oauth"
)

// CredentialsConfig is the `credentials` part of the codemode app: where
// users' own upstream credentials are kept (sources with `credential user`
// or `credential user_or_static`), the key that seals them and the
// connections pages (served by codemode_connections).
//
// String values may use placeholders such as {env.CODEMODE_VAULT_KEY}.
type CredentialsConfig struct {
	// StorageRaw is the storage module of the vault, the pages' sessions
	// and pending connections (keys under the storage's key_prefix
	// followed by "credentials:"). With Redis every gateway sharing it
	// sees every user's connections. Default: the app's storage.
	StorageRaw json.RawMessage `json:"storage,omitempty" caddy:"namespace=codemode.storage inline_key=module"`

	// Key is the vault key: 32 random bytes as base64 or hex, e.g.
	// {env.CODEMODE_VAULT_KEY} (`openssl rand -base64 32`). Required
	// outside development when a source takes user credentials; in
	// development a key is generated (and connections die with the
	// process). Never logged.
	Key string `json:"key,omitempty"`

	// PreviousKeys still open records sealed before a rotation; records
	// are re-sealed with Key as they are read and by a sweep at start.
	// Default none.
	PreviousKeys []string `json:"previous_keys,omitempty"`

	// ConnectURL is the absolute URL of the connections page that
	// CREDENTIAL_REQUIRED errors point users to, and below which
	// codemode_connections serves. Default: <issuer>/connections in
	// orchestrated mode, <origin of auth.resource>/connections in
	// transparent mode.
	ConnectURL string `json:"connect_url,omitempty"`

	// ClientMetadataURL is the https URL of the gateway's client metadata
	// document (a Client ID Metadata Document; codemode_connections
	// serves it at <connect_url>/client-metadata.json): with an upstream
	// authorization server that advertises
	// client_id_metadata_document_supported, the gateway's client_id
	// there instead of registering (a configured client_id still wins).
	// https, with a path, no fragment; checked at load. Default none: the
	// gateway registers a client (RFC 7591).
	ClientMetadataURL string `json:"client_metadata_url,omitempty"`

	// ConnectionTTL is how long a connection is kept after it was last
	// made, refreshed or used. Default 30d.
	ConnectionTTL caddy.Duration `json:"connection_ttl,omitempty"`

	// RefreshBefore refreshes an upstream OAuth access token this long
	// before it expires. Default 1m.
	RefreshBefore caddy.Duration `json:"refresh_before,omitempty"`

	// SessionTTL is how long a sign-in on the connections page lasts.
	// Default 1h.
	SessionTTL caddy.Duration `json:"session_ttl,omitempty"`
}

// SourceCredential is the `credential` block of an OpenAPI source or an
// upstream MCP server: whose credential a call carries and how.
type SourceCredential struct {
	// Mode is static (the source's headers, the same for everyone: the
	// default), user (the calling user's own credential; none gives
	// CREDENTIAL_REQUIRED) or user_or_static (the user's when connected,
	// else the headers).
	Mode string `json:"mode,omitempty"`
	// Title names the service on the connections page. Default: the
	// source's name.
	Title string `json:"title,omitempty"`
	// Header carries the credential. Default Authorization.
	Header string `json:"header,omitempty"`
	// Scheme goes before the credential: default Bearer in Authorization,
	// none in another header; "none" for a bare value in Authorization.
	Scheme string `json:"scheme,omitempty"`
	// Query carries the credential in this query parameter instead of a
	// header. Default none.
	Query string `json:"query,omitempty"`
	// OAuth connects users by signing in at the upstream (authorization
	// code with PKCE); the access token is refreshed before it expires.
	OAuth *CredentialOAuth `json:"oauth,omitempty"`
	// APIKey connects users by pasting a key into the connections page.
	// One of OAuth and APIKey is required for the user modes.
	APIKey *CredentialAPIKey `json:"api_key,omitempty"`
}

// CredentialOAuth is the gateway's client at an upstream's OAuth
// authorization server.
type CredentialOAuth struct {
	// AuthorizationServer is the issuer whose metadata (RFC 8414, else
	// OpenID Connect discovery) names the endpoints. Default for an MCP
	// upstream: the first authorization server of its protected resource
	// metadata (RFC 9728).
	AuthorizationServer string `json:"authorization_server,omitempty"`
	// AuthorizationEndpoint, TokenEndpoint and RevocationEndpoint replace
	// or override discovery (for servers without metadata, e.g. GitHub).
	AuthorizationEndpoint string `json:"authorization_endpoint,omitempty"`
	TokenEndpoint         string `json:"token_endpoint,omitempty"`
	// RevocationEndpoint (RFC 7009) revokes tokens on disconnect. Default
	// from the metadata; without one, tokens are only forgotten.
	RevocationEndpoint string `json:"revocation_endpoint,omitempty"`
	// ClientID is the gateway's client id there. Default: a client the
	// gateway registers (RFC 7591) at the registration_endpoint of the
	// authorization server's metadata, kept in the credential storage per
	// service and server, registered again when the server changes;
	// required when both endpoints are configured.
	ClientID string `json:"client_id,omitempty"`
	// ClientSecret makes the client confidential (HTTP Basic). Default
	// none: a public client with PKCE. Never logged.
	ClientSecret string `json:"client_secret,omitempty"`
	// Scopes are requested when a user connects. Default: for an MCP
	// upstream, the scope of its 401 challenge, else its protected
	// resource metadata's scopes_supported; else none.
	Scopes []string `json:"scopes,omitempty"`
	// Resource is sent as the RFC 8707 resource indicator. Default for an
	// MCP upstream: the resource its protected resource metadata names
	// (exactly as published), else its URL; none for an OpenAPI source.
	Resource string `json:"resource,omitempty"`
	// Callback is the redirect URI the gateway sends: "service" (the
	// default), the service's own <connect_url>/callback/<name>; or
	// "shared", <connect_url>/callback as before the sixteenth pass, for
	// an upstream where only that one is registered. An answer at the
	// shared URI is taken only with an iss (RFC 9207) naming the server,
	// so "shared" needs a server that sends iss and an authorization_server
	// (or an MCP upstream's discovery) to compare it with.
	Callback string `json:"callback,omitempty"`
}

// CredentialAPIKey is a key users paste into the connections page.
type CredentialAPIKey struct {
	// Hint is shown beside the key field (which key, where to make one).
	Hint string `json:"hint,omitempty"`
}

// connectionsClientID is the client of our own authorization server that
// the connections page signs users in with (orchestrated mode).
const connectionsClientID = "codemode-connections"

// credentialKeyPart is the credentials area's part of storage keys.
const credentialKeyPart = "credentials:"

// credentialsState is what the area keeps at run time.
type credentialsState struct {
	mgr *credential.Manager // nil when no source takes user credentials
	key string              // component key of mgr
}

// credentialsShared is the manager with what it holds; a component.
type credentialsShared struct {
	mgr     *credential.Manager
	closers []func() error
}

func (s *credentialsShared) destroy() error {
	var errs []error
	for i := len(s.closers) - 1; i >= 0; i-- {
		errs = append(errs, s.closers[i]())
	}
	return errors.Join(errs...)
}

// credentialSpecs lists the sources that take user credentials.
func (a *App) credentialSpecs() ([]credential.Spec, error) {
	repl := caddy.NewReplacer()
	var specs []credential.Spec
	add := func(kind, name, resource string, c *SourceCredential) error {
		if c == nil || c.Mode == "" || c.Mode == credential.ModeStatic {
			if c != nil && (c.OAuth != nil || c.APIKey != nil) {
				return fmt.Errorf("%s %q: credential static takes no oauth or api_key", kind, name)
			}
			return nil
		}
		s, err := c.spec(name, resource, repl)
		if err != nil {
			return fmt.Errorf("%s %q: %w", kind, name, err)
		}
		specs = append(specs, s)
		return nil
	}
	if a.Broker != nil {
		for _, s := range a.Broker.OpenAPI {
			if err := add("openapi source", s.Name, "", s.Credential); err != nil {
				return nil, err
			}
		}
	}
	if a.Meta != nil {
		for _, u := range a.Meta.Upstreams {
			if u.Credential != nil && u.Credential.Mode != "" && u.Credential.Mode != credential.ModeStatic && u.URL == "" {
				return nil, fmt.Errorf("upstream %q: user credentials apply to url upstreams only", u.Name)
			}
			if err := add("upstream", u.Name, repl.ReplaceAll(u.URL, ""), u.Credential); err != nil {
				return nil, err
			}
		}
	}
	return specs, nil
}

// spec is the block as a credential.Spec, placeholders replaced.
func (c *SourceCredential) spec(service, resource string, repl *caddy.Replacer) (credential.Spec, error) {
	s := credential.Spec{Service: service, Title: c.Title, Mode: c.Mode,
		Apply: credential.Apply{Header: c.Header, Scheme: c.Scheme, Query: c.Query}, Resource: resource}
	switch {
	case c.OAuth != nil && c.APIKey != nil:
		return s, errors.New("credential: set oauth or api_key, not both")
	case c.OAuth != nil:
		o := c.OAuth
		s.Kind = credential.KindOAuth
		s.OAuth = &credential.OAuthClient{
			AuthorizationServer:   repl.ReplaceAll(o.AuthorizationServer, ""),
			AuthorizationEndpoint: repl.ReplaceAll(o.AuthorizationEndpoint, ""),
			TokenEndpoint:         repl.ReplaceAll(o.TokenEndpoint, ""),
			RevocationEndpoint:    repl.ReplaceAll(o.RevocationEndpoint, ""),
			ClientID:              repl.ReplaceAll(o.ClientID, ""),
			ClientSecret:          repl.ReplaceAll(o.ClientSecret, ""),
			Scopes:                o.Scopes,
			Resource:              repl.ReplaceAll(o.Resource, ""),
		}
		switch o.Callback {
		case "", "service":
		case "shared":
			s.OAuth.SharedCallback = true
		default:
			return s, fmt.Errorf("credential: oauth callback %q must be service or shared", o.Callback)
		}
	case c.APIKey != nil:
		s.Kind = credential.KindAPIKey
		s.Hint = c.APIKey.Hint
	default:
		return s, fmt.Errorf("credential %s: how users connect is missing (an oauth block or api_key)", c.Mode)
	}
	return s, s.Validate()
}

// connectURL is the connections page's URL for the auth configuration
// given (with its defaults applied), or "".
func (a *App) connectURL(auth *AuthConfig) string {
	if a.Credentials != nil && a.Credentials.ConnectURL != "" {
		return strings.TrimSuffix(caddy.NewReplacer().ReplaceKnown(a.Credentials.ConnectURL, ""), "/")
	}
	if auth == nil {
		return ""
	}
	if auth.Mode == AuthModeOrchestrated && auth.Issuer != "" {
		return strings.TrimSuffix(auth.Issuer, "/") + "/connections"
	}
	if u, err := url.Parse(auth.Resource); err == nil && u.Host != "" {
		return u.Scheme + "://" + u.Host + "/connections"
	}
	return ""
}

// validate refuses negative durations (0 is the default); nil is valid.
func (c *CredentialsConfig) validate() error {
	if c == nil {
		return nil
	}
	return noNegativeDuration(namedDuration{"connection_ttl", c.ConnectionTTL}, namedDuration{"refresh_before", c.RefreshBefore},
		namedDuration{"session_ttl", c.SessionTTL})
}

// namedDuration is a duration option and its name in the configuration.
type namedDuration struct {
	name string
	d    caddy.Duration
}

// noNegativeDuration names the first of ds below zero.
func noNegativeDuration(ds ...namedDuration) error {
	for _, f := range ds {
		if f.d < 0 {
			return fmt.Errorf("%s: %v is negative", f.name, time.Duration(f.d))
		}
	}
	return nil
}

// connectionsClient is the client the connections page signs in with at
// our own authorization server, when some source takes user credentials.
func (a *App) connectionsClient(auth *AuthConfig) (oauth.ClientConfig, bool) {
	specs, err := a.credentialSpecs()
	if err != nil || len(specs) == 0 || auth.Mode != AuthModeOrchestrated {
		return oauth.ClientConfig{}, false
	}
	u := a.connectURL(auth)
	if u == "" {
		return oauth.ClientConfig{}, false
	}
	return oauth.ClientConfig{ID: connectionsClientID, Name: "Connections of this gateway", RedirectURIs: []string{u + "/signin/callback"}}, true
}

func (a *App) provisionCredentials(ctx caddy.Context) error {
	specs, err := a.credentialSpecs()
	if err != nil {
		return fmt.Errorf("codemode credentials: %w", err)
	}
	logger := a.logger.Named("credentials")
	// Checked whether or not a source takes user credentials: a bad value
	// fails this load, not the first one that adds such a source.
	if err := a.Credentials.validate(); err != nil {
		return fmt.Errorf("codemode credentials: %w", err)
	}
	if len(specs) == 0 {
		if a.Credentials != nil {
			logger.Warn("a credentials block is configured but no source takes user credentials (credential user or user_or_static)")
		}
		return nil
	}
	if !a.AuthEnabled() {
		return errors.New("codemode credentials: sources with user credentials need the auth block: the credential is the signed-in user's")
	}
	cfg := CredentialsConfig{}
	if a.Credentials != nil {
		cfg = *a.Credentials
	}
	auth := a.auth.cfg
	cfg.ConnectURL = a.connectURL(auth)
	if cfg.ConnectURL == "" {
		return errors.New("codemode credentials: connect_url is required (the connections page's URL; in transparent mode it defaults from auth.resource)")
	}
	if u, err := url.Parse(cfg.ConnectURL); err != nil || u.Host == "" || (u.Scheme != "https" && !(u.Scheme == "http" && auth.Development)) {
		return fmt.Errorf("codemode credentials: connect_url %q must be an absolute https URL (http only in development)", cfg.ConnectURL)
	}
	def := func(p *caddy.Duration, v time.Duration) {
		if *p == 0 {
			*p = caddy.Duration(v)
		}
	}
	def(&cfg.ConnectionTTL, credential.DefaultConnectionTTL)
	def(&cfg.RefreshBefore, credential.DefaultRefreshBefore)
	def(&cfg.SessionTTL, credential.DefaultSessionTTL)
	repl := caddy.NewReplacer()
	keys, err := vaultKeys(repl.ReplaceAll(cfg.Key, ""), cfg.PreviousKeys, repl, auth.Development, logger)
	if err != nil {
		return fmt.Errorf("codemode credentials: %w", err)
	}
	if auth.Mode == AuthModeTransparent && (auth.ClientID == "" || auth.ProviderURL == "") {
		return errors.New("codemode credentials: in transparent mode the connections page signs users in at the provider: auth client_id (IDP_CLIENT_ID) is required")
	}

	st, err := loadStorage(ctx, &cfg, "StorageRaw", cfg.StorageRaw, a.storage)
	if err != nil {
		return fmt.Errorf("codemode credentials: storage: %w", err)
	}
	backend := st.Backend()
	storeKey, store, err := credentialStoreOn(backend)
	if err != nil {
		return fmt.Errorf("codemode credentials: %w", err)
	}
	defer func() { _ = release(storeKey) }() // the manager retains its own reference

	keyCfg := cfg
	keyCfg.StorageRaw = nil
	key, err := componentKey("credentials", struct {
		Config      CredentialsConfig
		Specs       []credential.Spec
		Development bool
	}{keyCfg, specs, auth.Development}, storeKey, a.auth.poolKey)
	if err != nil {
		return fmt.Errorf("codemode credentials: %w", err)
	}
	shared, err := acquire(key, func() (*credentialsShared, func() error, error) {
		s, err := a.buildCredentials(specs, cfg, keys, storeKey, store, logger)
		if err != nil {
			return nil, nil, err
		}
		return s, s.destroy, nil
	})
	if err != nil {
		return fmt.Errorf("codemode credentials: %w", err)
	}
	a.hold(key)
	a.credentials = credentialsState{mgr: shared.mgr, key: key}
	return nil
}

// vaultKeys builds the keyring from the configured keys, or a generated
// key in development.
func vaultKeys(current string, previous []string, repl *caddy.Replacer, development bool, logger *zap.Logger) (*credential.Keyring, error) {
	var cur []byte
	if current == "" {
		if !development {
			return nil, errors.New("key (the vault key, e.g. {env.CODEMODE_VAULT_KEY}: `openssl rand -base64 32`) is required when a source takes user credentials")
		}
		cur = make([]byte, credential.KeySize)
		if _, err := rand.Read(cur); err != nil {
			return nil, err
		}
		logger.Warn("DEVELOPMENT MODE: generated a throwaway vault key; users' connections die with this process and other gateways cannot read them. Set credentials key in production")
	} else {
		var err error
		if cur, err = credential.ParseKey(current); err != nil {
			return nil, fmt.Errorf("key: %w", err)
		}
	}
	var prev [][]byte
	for i, p := range previous {
		k, err := credential.ParseKey(repl.ReplaceAll(p, ""))
		if err != nil {
			return nil, fmt.Errorf("previous key %d: %w", i+1, err)
		}
		prev = append(prev, k)
	}
	return credential.NewKeyring(cur, prev...)
}

// credentialStoreOn acquires the vault's store on a storage backend, a
// component shared by every config with the same storage (so in-memory
// connections survive reloads). The caller releases the returned key.
func credentialStoreOn(b StorageBackend) (string, credential.Store, error) {
	prefix := b.KeyPrefix + credentialKeyPart
	key, err := componentKey("credential-store", prefix, b.key())
	if err != nil {
		return "", nil, err
	}
	st, err := acquire(key, func() (credential.Store, func() error, error) {
		if b.Component == "" {
			return credential.NewMemoryStore(nil), nil, nil
		}
		if err := retain(b.Component); err != nil {
			return nil, nil, err
		}
		return credential.NewRedisStore(b.Redis, prefix), func() error { return release(b.Component) }, nil
	})
	return key, st, err
}

// buildCredentials builds the manager: its store and the auth component
// are retained while it lives; in orchestrated mode a revoked gateway
// session clears the user's connections.
func (a *App) buildCredentials(specs []credential.Spec, cfg CredentialsConfig, keys *credential.Keyring, storeKey string,
	store credential.Store, logger *zap.Logger) (_ *credentialsShared, err error) {
	s := &credentialsShared{}
	defer func() {
		if err != nil {
			_ = s.destroy()
		}
	}()
	for _, k := range []string{storeKey, a.auth.poolKey} {
		if err := retain(k); err != nil {
			return nil, err
		}
		s.closers = append(s.closers, func() error { return release(k) })
	}
	signIn, err := newSignIn(a.auth.shared, a.auth.cfg)
	if err != nil {
		return nil, err
	}
	mgr, err := credential.NewManager(specs, &credential.Options{
		Store: store, Keys: keys, ConnectURL: cfg.ConnectURL, SignIn: signIn, Logger: logger, Development: a.auth.cfg.Development,
		ConnectionTTL: time.Duration(cfg.ConnectionTTL), RefreshBefore: time.Duration(cfg.RefreshBefore), SessionTTL: time.Duration(cfg.SessionTTL),
		ClientMetadataURL: caddy.NewReplacer().ReplaceAll(cfg.ClientMetadataURL, ""),
	})
	if err != nil {
		return nil, err
	}
	s.mgr = mgr
	s.closers = append(s.closers, func() error { mgr.Close(); return nil })
	for _, sp := range specs {
		if sp.Kind == credential.KindOAuth {
			// What the operator registers at each upstream (it changed in
			// the sixteenth pass: one redirect URI per service).
			logger.Info("connections: the redirect URI to register at the upstream", zap.String("service", sp.Service),
				zap.String("redirect_uri", mgr.RedirectURI(sp.Service)))
		}
	}
	if srv := a.auth.shared.server; srv != nil {
		issuer := srv.Issuer()
		remove := srv.OnSessionRevoked(func(ctx context.Context, ev oauth.SessionRevoked) {
			if ev.ClientID == connectionsClientID {
				return // the connections page's own sign-in
			}
			if err := mgr.Forget(ctx, credential.Owner{Issuer: issuer, Subject: ev.Subject}); err != nil {
				logger.Error("clearing a revoked session's connections", zap.Error(err))
				return
			}
			logger.Info("gateway session revoked: the user's connections are cleared", zap.String("reason", ev.Reason))
		})
		s.closers = append(s.closers, func() error { remove(); return nil })
	}
	if len(cfg.PreviousKeys) > 0 {
		// Re-seal what older keys sealed, so they can be dropped. Safe on
		// several gateways at once.
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			st, err := mgr.Vault().Rekey(ctx)
			if err != nil && ctx.Err() == nil {
				logger.Error("re-sealing the vault with the current key", zap.Error(err))
				return
			}
			logger.Info("vault re-sealed with the current key", zap.String("key_id", keys.CurrentID()),
				zap.Int("records", st.Records), zap.Int("resealed", st.Resealed), zap.Int("unreadable", st.Unreadable))
		}()
		s.closers = append(s.closers, func() error { cancel(); <-done; return nil })
	}
	return s, nil
}

// credentialError turns a credential failure into the error of the tool
// source: the stable code, a message with the connect URL, and whether a
// retry may help.
func credentialError(err error) (code, msg string, transient bool) {
	var ce *credential.Error
	if errors.As(err, &ce) {
		return ce.Code, ce.Message, ce.Transient
	}
	return credential.CodeCredentialUnavailable, "the credential could not be read right now; retry later", true
}

// catalogAuthorize is the catalog's Authorize hook on mgr.
func catalogAuthorize(mgr *credential.Manager) func(context.Context, string, *http.Request) error {
	return func(ctx context.Context, service string, req *http.Request) error {
		if _, err := mgr.Authorize(ctx, service, req); err != nil {
			code, msg, _ := credentialError(err)
			return &catalog.Error{Code: code, Message: msg}
		}
		return nil
	}
}

// upstreamCredential is an upstream's Credential hook on mgr.
func upstreamCredential(mgr *credential.Manager, name string) func(context.Context) (string, func(*http.Request) error, error) {
	wrap := func(err error) error {
		code, msg, transient := credentialError(err)
		return &metatools.Error{Code: code, Message: msg, Transient: transient}
	}
	return func(ctx context.Context) (string, func(*http.Request) error, error) {
		user, authorize, err := mgr.SessionFor(ctx, name)
		if err != nil {
			return "", nil, wrap(err)
		}
		if authorize == nil {
			return "", nil, nil
		}
		return user, func(r *http.Request) error {
			if err := authorize(r); err != nil {
				return wrap(err)
			}
			return nil
		}, nil
	}
}

// credentialTransport is an upstream's transport on the credential manager
// (credential.Manager.Transport: a 401 or a step-up 403 to a user's token
// acted on), its refusals as the tool source's errors.
type credentialTransport struct{ rt http.RoundTripper }

func (t credentialTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.rt.RoundTrip(r)
	var ce *credential.Error
	if err != nil && errors.As(err, &ce) {
		code, msg, transient := credentialError(err)
		return nil, &metatools.Error{Code: code, Message: msg, Transient: transient}
	}
	return resp, err
}

// CredentialManager returns the manager of users' upstream credentials, or
// nil when no source takes them.
func (a *App) CredentialManager() *credential.Manager { return a.credentials.mgr }

// parseSourceCredential parses the `credential` block of an openapi
// source or an upstream:
//
//	credential static|user|user_or_static {
//		title  <display name...>
//		header <name>                     # default Authorization
//		scheme <scheme>|none               # default Bearer in Authorization
//		query  <param>                     # instead of a header
//		oauth {
//			authorization_server   <issuer-url>
//			authorization_endpoint <url>
//			token_endpoint         <url>
//			revocation_endpoint    <url>
//			client_id              <id>
//			client_secret          <secret>
//			scopes                 <scope...>
//			resource               <url>
//		}
//		api_key [<hint...>]
//	}
func parseSourceCredential(d *caddyfile.Dispenser) (*SourceCredential, error) {
	c := new(SourceCredential)
	if !d.NextArg() {
		return nil, d.Err("credential: want static, user or user_or_static")
	}
	c.Mode = d.Val()
	switch c.Mode {
	case credential.ModeStatic, credential.ModeUser, credential.ModeUserOrStatic:
	default:
		return nil, d.Errf("credential: mode %q must be static, user or user_or_static", c.Mode)
	}
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	seen := blockOptions{}
	for n := d.Nesting(); d.NextBlock(n); {
		if err := seen.once(d); err != nil {
			return nil, err
		}
		switch d.Val() {
		case "title":
			args := d.RemainingArgs()
			if len(args) == 0 {
				return nil, d.ArgErr()
			}
			c.Title = strings.Join(args, " ")
		case "header":
			if err := oneArg(d, &c.Header); err != nil {
				return nil, err
			}
		case "scheme":
			if err := oneArg(d, &c.Scheme); err != nil {
				return nil, err
			}
		case "query":
			if err := oneArg(d, &c.Query); err != nil {
				return nil, err
			}
		case "api_key":
			c.APIKey = &CredentialAPIKey{Hint: strings.Join(d.RemainingArgs(), " ")}
			seen := blockOptions{}
			for m := d.Nesting(); d.NextBlock(m); {
				if err := seen.once(d); err != nil {
					return nil, err
				}
				if d.Val() != "hint" {
					return nil, d.Errf("unrecognized api_key subdirective %q", d.Val())
				}
				c.APIKey.Hint = strings.Join(d.RemainingArgs(), " ")
			}
		case "oauth":
			if d.NextArg() {
				return nil, d.ArgErr()
			}
			o := new(CredentialOAuth)
			seen := blockOptions{}
			for m := d.Nesting(); d.NextBlock(m); {
				if err := seen.once(d); err != nil {
					return nil, err
				}
				var dst *string
				switch d.Val() {
				case "authorization_server":
					dst = &o.AuthorizationServer
				case "authorization_endpoint":
					dst = &o.AuthorizationEndpoint
				case "token_endpoint":
					dst = &o.TokenEndpoint
				case "revocation_endpoint":
					dst = &o.RevocationEndpoint
				case "client_id":
					dst = &o.ClientID
				case "client_secret":
					dst = &o.ClientSecret
				case "resource":
					dst = &o.Resource
				case "callback":
					if err := oneArg(d, &o.Callback); err != nil {
						return nil, err
					}
					if o.Callback != "service" && o.Callback != "shared" {
						return nil, d.Errf("oauth callback %q: want service or shared", o.Callback)
					}
					continue
				case "scopes":
					o.Scopes = d.RemainingArgs()
					if len(o.Scopes) == 0 {
						return nil, d.ArgErr()
					}
					continue
				default:
					return nil, d.Errf("unrecognized oauth subdirective %q", d.Val())
				}
				if err := oneArg(d, dst); err != nil {
					return nil, err
				}
			}
			c.OAuth = o
		default:
			return nil, d.Errf("unrecognized credential subdirective %q", d.Val())
		}
	}
	if c.Mode == credential.ModeStatic && (c.OAuth != nil || c.APIKey != nil) {
		return nil, d.Err("credential static: the source's headers are the credential; oauth and api_key are for user and user_or_static")
	}
	if c.Mode != credential.ModeStatic && (c.OAuth == nil) == (c.APIKey == nil) {
		return nil, d.Errf("credential %s: give exactly one of oauth { ... } and api_key", c.Mode)
	}
	return c, nil
}

// parseCredentials parses the `credentials` subdirective of the codemode
// global option:
//
//	credentials {
//		key            <base64-or-hex-32-bytes>   # {env.CODEMODE_VAULT_KEY}
//		previous_key   <key...>                   # still opens, re-sealed with key
//		connect_url    <url>                      # default <issuer>/connections
//		client_metadata_url <https-url>           # publish and use a client metadata document
//		connection_ttl <duration>                 # default 30d
//		refresh_before <duration>                 # default 1m
//		session_ttl    <duration>                 # default 1h
//		storage        memory|redis ...           # default the app's storage
//	}
func parseCredentials(d *caddyfile.Dispenser) (*CredentialsConfig, error) {
	c := new(CredentialsConfig)
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	seen := blockOptions{}
	for n := d.Nesting(); d.NextBlock(n); {
		if err := seen.once(d, "previous_key", "previous_keys"); err != nil {
			return nil, err
		}
		switch d.Val() {
		case "key":
			if err := oneArg(d, &c.Key); err != nil {
				return nil, err
			}
		case "previous_key", "previous_keys":
			args := d.RemainingArgs()
			if len(args) == 0 {
				return nil, d.ArgErr()
			}
			c.PreviousKeys = append(c.PreviousKeys, args...)
		case "connect_url":
			if err := oneArg(d, &c.ConnectURL); err != nil {
				return nil, err
			}
		case "client_metadata_url":
			if err := oneArg(d, &c.ClientMetadataURL); err != nil {
				return nil, err
			}
		case "connection_ttl":
			if err := parseDurationArg(d, &c.ConnectionTTL); err != nil {
				return nil, err
			}
		case "refresh_before":
			if err := parseDurationArg(d, &c.RefreshBefore); err != nil {
				return nil, err
			}
		case "session_ttl":
			if err := parseDurationArg(d, &c.SessionTTL); err != nil {
				return nil, err
			}
		case "storage":
			raw, err := parseStorage(d)
			if err != nil {
				return nil, err
			}
			c.StorageRaw = raw
		default:
			return nil, d.Errf("unrecognized credentials subdirective %q", d.Val())
		}
	}
	return c, nil
}

// toolCache keeps an upstream's tool list in the credentials' store, where
// every gateway sharing it finds the list a user's connection read.
type toolCache struct {
	store credential.Store
	key   string
}

// toolCacheTTL bounds a cached tool list nobody refreshes.
const toolCacheTTL = 7 * 24 * time.Hour

func (c toolCache) LoadTools(ctx context.Context) ([]byte, error) {
	b, err := c.store.Get(ctx, c.key)
	if errors.Is(err, credential.ErrNotFound) {
		return nil, nil
	}
	return b, err
}

func (c toolCache) SaveTools(ctx context.Context, tools []byte) error {
	return c.store.Set(ctx, c.key, tools, toolCacheTTL)
}
