package oauth

import (
	"crypto/x509"
	"fmt"
	"io"
	"math"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// ServerConfig mirrors the spec's auth.* keys for orchestrated mode.
type ServerConfig struct {
	// Issuer is the public base URL of the gateway (scheme and host, no
	// path), for example https://gateway.example.com. It is the iss claim
	// of every token and the base of every endpoint URL. Required. It must
	// use https unless Development is true.
	Issuer string `json:"issuer,omitempty"`

	// TokenStorage says where pending authorizations, codes, refresh
	// tokens, sessions and registered clients are kept.
	// Default: memory (one instance only).
	TokenStorage TokenStorageConfig `json:"token_storage,omitempty"`

	// Local holds the signing key and its rotation.
	Local LocalConfig `json:"local,omitempty"`

	// Refresh sets token lifetimes and refresh-token behaviour.
	Refresh RefreshConfig `json:"refresh,omitempty"`

	// Consent configures the consent screen.
	Consent ConsentConfig `json:"consent,omitempty"`

	// AllowDefaultPublic lets requests without a bearer token through as
	// the anonymous user. The authorization server only reports it (see
	// Server.AllowDefaultPublic); the Caddy authentication provider applies
	// it. Default false; must stay false in production.
	AllowDefaultPublic bool `json:"allow_default_public,omitempty"`

	// DCREnabled turns on RFC 7591 dynamic client registration at
	// /oauth/register. Default false (the endpoint answers 404).
	DCREnabled bool `json:"dcr_enabled,omitempty"`

	// ClientIDMetadata accepts Client ID Metadata Documents: a client_id
	// that is an https URL of a JSON document of the client's metadata,
	// fetched, validated and cached instead of a registration (MCP's
	// recommended registration). Default off.
	ClientIDMetadata ClientIDMetadataConfig `json:"client_id_metadata,omitzero"`

	// RegisteredClientTTL is how long, in seconds, a dynamically
	// registered client is kept after it last obtained tokens (at least as
	// long as its refresh tokens live). A registration that never obtains
	// a token is dropped after UnusedClientTTL (24 hours). Default 2592000
	// (30 days). A client used after that must register again.
	RegisteredClientTTL int `json:"registered_client_ttl,omitempty"`

	// MaxRegisteredClients bounds how many dynamically registered clients
	// are kept at once (on every instance sharing the storage): past it,
	// registration answers 503 temporarily_unavailable until one expires.
	// Default 10000; with a registration stored in at most 8 KiB
	// (MaxRegisteredClientBytes), open registration holds at most about
	// 80 MiB.
	MaxRegisteredClients int `json:"max_registered_clients,omitempty"`

	// MaxPendingAuthorizations bounds how many authorization requests wait
	// for their user at once (on every instance sharing the storage): each
	// is kept PendingTTL (10 minutes) until it completes, is denied or
	// expires, and past the bound /oauth/authorize answers 503
	// temporarily_unavailable until one ends. Default 10000; with a pending
	// authorization stored in at most about 5 KiB, about 50 MiB.
	MaxPendingAuthorizations int `json:"max_pending_authorizations,omitempty"`

	// PasswordCheckWait is how long a login waits, in seconds, for one of
	// the MaxPasswordChecks password comparisons when all are taken,
	// before it is answered 503 LOGIN_BUSY. Default 5 (PasswordCheckWait),
	// at most 60 (MaxPasswordCheckWait). Each comparison is one bcrypt
	// check (about 70 ms at cost 10, twice that per step of cost), so
	// the wait lets about wait x MaxPasswordChecks / check-time logins
	// queue: raise it for costly hashes on few CPUs.
	PasswordCheckWait int `json:"password_check_wait,omitempty"`

	// Development allows an http issuer, generates a signing key when none
	// is supplied, lets clients use http redirect URIs that are not
	// loopback, and enables the demo login. Default false. Never in
	// production.
	Development bool `json:"development,omitempty"`

	// Users are the local accounts of the login page.
	Users []User `json:"users,omitempty"`

	// Clients are pre-registered OAuth clients.
	Clients []ClientConfig `json:"clients,omitempty"`

	// Scopes are the scopes clients may request. A request without a
	// scope gets all of them. Default: ["mcp"].
	Scopes []string `json:"scopes,omitempty"`

	// Resources are the resources (RFC 8707 resource indicators: absolute
	// http(s) URIs) the server issues tokens for. An authorization or
	// token request that names any other is refused with invalid_target,
	// so the server is no token factory for resource servers it does not
	// serve that happen to trust its issuer. Compared in canonical form
	// (CanonicalResource). The issuer is always one: a request without a
	// resource gets it as audience. Default: the issuer alone
	// (Server.ResourceHandler lets a front end name the set later).
	Resources []string `json:"resources,omitempty"`

	// Redact names log fields whose values are replaced by "[REDACTED]"
	// (logging.redact). Tokens, codes, secrets and passwords are never
	// logged whatever this says.
	Redact []string `json:"redact,omitempty"`
}

// ClientIDMetadataConfig configures Client ID Metadata Documents
// (draft-ietf-oauth-client-id-metadata-document).
type ClientIDMetadataConfig struct {
	// Enabled accepts https URLs as client_id and advertises
	// client_id_metadata_document_supported. Default false.
	Enabled bool `json:"enabled,omitempty"`
	// MaxDocumentBytes bounds a document's size. Default 5120 bytes.
	MaxDocumentBytes int `json:"max_document_bytes,omitempty"`
	// FetchTimeout bounds one fetch, redirects included, in seconds.
	// Default 5.
	FetchTimeout int `json:"fetch_timeout,omitempty"`
	// MaxCacheTTL caps how long a document is kept, in seconds, whatever
	// its caching headers allow. Default 86400 (24 hours).
	MaxCacheTTL int `json:"max_cache_ttl,omitempty"`
	// AllowedPrivateHosts are host names whose documents may be fetched
	// although they resolve to loopback, private or link-local addresses
	// (an internal client registry, tests). Default none: a document is
	// never fetched from such an address, nor is a redirect followed there.
	AllowedPrivateHosts []string `json:"allowed_private_hosts,omitempty"`
	// RootCAs verifies the servers of the documents; nil means the system
	// roots. The Caddy side sets it from a trust pool.
	RootCAs *x509.CertPool `json:"-"`
}

// TokenStorageConfig is auth.tokenStorage.
type TokenStorageConfig struct {
	// Type is memory or redis. Default memory, which keeps everything in
	// this process: one instance only, lost on restart.
	Type string `json:"type,omitempty"`
	// Host of the Redis server. Default from REDIS_HOST, else localhost.
	Host string `json:"host,omitempty"`
	// Port of the Redis server. Default from REDIS_PORT, else 6379.
	Port int `json:"port,omitempty"`
	// Password of the Redis server. Default from REDIS_PASSWORD.
	Password string `json:"password,omitempty"`
	// TLS connects to Redis over TLS. Default false.
	TLS bool `json:"tls,omitempty"`
	// KeyPrefix is put before every key. Default "codemode:auth:".
	KeyPrefix string `json:"key_prefix,omitempty"`
	// Client, when set, is used instead of dialing Host:Port; the caller
	// keeps ownership of it (Close does not close it).
	Client redis.UniversalClient `json:"-"`
}

// LocalConfig is auth.local: the signing key.
type LocalConfig struct {
	// SignKey is the private signing key as a JSON Web Key (RSA for RS256,
	// P-256 EC for ES256). Default from JWT_SIGNING_KEY. Required unless
	// Development is true, in which case a key is generated (and lost on
	// restart).
	SignKey string `json:"sign_key,omitempty"`
	// KeyRotationDays is the rotation period in days; 0 disables rotation
	// and SignKey signs every token. With rotation, each period signs with
	// an ES256 key derived from SignKey (see the README). Recommended 30
	// to 90.
	KeyRotationDays int `json:"key_rotation_days,omitempty"`
	// MaxKeys is how many previous rotated keys stay in the key set so
	// tokens they signed still validate. Default 2.
	MaxKeys int `json:"max_keys,omitempty"`
}

// RefreshConfig is auth.refresh: lifetimes and refresh tokens.
type RefreshConfig struct {
	// Enabled issues refresh tokens. Default false.
	Enabled bool `json:"enabled,omitempty"`
	// SkewSeconds is the clock skew tolerated when checking expiry, in
	// seconds. Default 0.
	SkewSeconds int `json:"skew_seconds,omitempty"`
	// AccessTokenTTL is the access token lifetime in seconds. Default
	// 900 (15 minutes).
	AccessTokenTTL int `json:"access_token_ttl,omitempty"`
	// RefreshTokenTTL is the refresh token lifetime in seconds, which is
	// also the session lifetime. Default 604800 (7 days).
	RefreshTokenTTL int `json:"refresh_token_ttl,omitempty"`
	// RotateRefreshToken is accepted for compatibility with the spec's
	// key; refresh tokens are always rotated on every use (OAuth 2.1 and
	// production rule 5), so false is refused.
	RotateRefreshToken *bool `json:"rotate_refresh_token,omitempty"`
	// ReuseGraceSeconds lets the immediately previous refresh token of a
	// chain be redeemed once more within this many seconds of its rotation,
	// for a client that crashed or lost the answer of a refresh: the answer
	// is a new successor, and the lost one is retired (any use of it then
	// revokes the chain). Any other reuse still revokes the whole chain.
	// Default 0 (off); at most 300. Trade-off: a thief holding the previous
	// token may redeem it within the window if the client has not used its
	// new token yet; the client's next refresh then revokes the chain.
	ReuseGraceSeconds int `json:"reuse_grace_seconds,omitempty"`
}

// ConsentConfig is auth.consent.
type ConsentConfig struct {
	// Enabled shows the consent screen after login to configured clients.
	// Default false. Dynamically registered clients and metadata-document
	// clients always get it (their names are their own claims).
	Enabled bool `json:"enabled,omitempty"`
}

// User is a local account of the login page.
type User struct {
	// Username typed on the login page. Required.
	Username string `json:"username,omitempty"`
	// PasswordHash is the bcrypt hash of the password. Required.
	PasswordHash string `json:"password_hash,omitempty"`
	// Subject is the sub claim of the user's tokens. Default Username.
	Subject string `json:"subject,omitempty"`
}

// ClientConfig is a pre-registered client.
type ClientConfig struct {
	// ID is the client_id. Required.
	ID string `json:"id,omitempty"`
	// Secret makes the client confidential (client_secret_basic or
	// client_secret_post). Empty means a public client that relies on
	// PKCE alone.
	Secret string `json:"secret,omitempty"`
	// Name is shown on the consent screen. Default ID.
	Name string `json:"name,omitempty"`
	// RedirectURIs are matched exactly, character for character.
	// Required.
	RedirectURIs []string `json:"redirect_uris,omitempty"`
	// Scopes limits the scopes this client may get. Default: all of
	// ServerConfig.Scopes.
	Scopes []string `json:"scopes,omitempty"`
}

// ServerOptions are the optional collaborators of a Server; nil means
// defaults.
type ServerOptions struct {
	// Logger receives the server's logs. Default zap.NewNop().
	Logger *zap.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Rand is the source of randomness for tokens, codes and generated
	// keys. Default crypto/rand.
	Rand io.Reader
	// Metrics, when set, counts tokens, refresh reuse, revocations and
	// logins and reports the signing key's age until Close. Nil records
	// nothing.
	Metrics *Metrics
}

// Defaults and limits.
const (
	DefaultAccessTokenTTL  = 15 * time.Minute
	DefaultRefreshTokenTTL = 7 * 24 * time.Hour
	DefaultMaxKeys         = 2
	DefaultKeyPrefix       = "codemode:auth:"
	PendingTTL             = 10 * time.Minute
	CodeTTL                = 60 * time.Second
	// MaxReuseGrace bounds RefreshConfig.ReuseGraceSeconds.
	MaxReuseGrace = 5 * time.Minute
	// DefaultRegisteredClientTTL is RegisteredClientTTL's default.
	DefaultRegisteredClientTTL = 30 * 24 * time.Hour
	// UnusedClientTTL is how long a registered client that never obtains
	// a token is kept.
	UnusedClientTTL = 24 * time.Hour
	// DefaultMaxRegisteredClients is MaxRegisteredClients' default.
	DefaultMaxRegisteredClients = 10000
	// DefaultMaxPendingAuthorizations is MaxPendingAuthorizations' default.
	DefaultMaxPendingAuthorizations = 10000
	// MaxPasswordCheckWait bounds ServerConfig.PasswordCheckWait: a
	// browser's user waits no longer, and the proxies in front commonly
	// give up on an answer after a minute.
	MaxPasswordCheckWait = time.Minute
	// MaxRegisteredClientBytes bounds one registration as stored (its
	// JSON record): ten redirect URIs of MaxRedirectURILength would be
	// 20 KiB, and no client needs that.
	MaxRegisteredClientBytes = 8 << 10
	// MaxStateLength and MaxNonceLength bound what an authorization request
	// stores until the user signs in (bytes).
	MaxStateLength = 2048
	MaxNonceLength = 512
)

// Environment variable names read by ConfigFromEnv.
const (
	EnvRedisHost     = "REDIS_HOST"
	EnvRedisPort     = "REDIS_PORT"
	EnvRedisPassword = "REDIS_PASSWORD"
	EnvSigningKey    = "JWT_SIGNING_KEY"
)

// ConfigFromEnv fills the fields of cfg that are empty from the spec's
// environment variables (REDIS_HOST, REDIS_PORT, REDIS_PASSWORD,
// JWT_SIGNING_KEY), read through getenv (nil means os.Getenv). Values set
// in the configuration win. A REDIS_HOST with no storage type selects redis.
func ConfigFromEnv(cfg *ServerConfig, getenv func(string) string) error {
	if getenv == nil {
		getenv = os.Getenv
	}
	ts := &cfg.TokenStorage
	if h := getenv(EnvRedisHost); h != "" && ts.Host == "" {
		ts.Host = h
		if ts.Type == "" {
			ts.Type = "redis"
		}
	}
	if p := getenv(EnvRedisPort); p != "" && ts.Port == 0 {
		n, err := strconv.Atoi(p)
		if err != nil || n <= 0 || n > 65535 {
			return fmt.Errorf("%s=%q: not a port number", EnvRedisPort, p)
		}
		ts.Port = n
	}
	if pw := getenv(EnvRedisPassword); pw != "" && ts.Password == "" {
		ts.Password = pw
	}
	if k := getenv(EnvSigningKey); k != "" && cfg.Local.SignKey == "" {
		cfg.Local.SignKey = k
	}
	return nil
}

// settings are the validated, defaulted values the server runs on.
type settings struct {
	issuer        string
	accessTTL     time.Duration
	refreshTTL    time.Duration
	skew          time.Duration
	reuseGrace    time.Duration
	clientTTL     time.Duration
	maxClients    int
	maxPending    int
	passwordWait  time.Duration
	documents     bool
	rotation      time.Duration
	maxKeys       int
	scopes        []string
	resources     []string // canonical, the issuer first
	keyPrefix     string
	refreshOn     bool
	consentOn     bool
	development   bool
	dcr           bool
	defaultPublic bool
}

func (cfg *ServerConfig) settings() (settings, error) {
	var s settings
	u, err := url.Parse(cfg.Issuer)
	if cfg.Issuer == "" || err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return s, fmt.Errorf("issuer %q: must be an absolute http(s) URL", cfg.Issuer)
	}
	if u.Scheme == "http" && !cfg.Development {
		return s, fmt.Errorf("issuer %q: must use https outside development mode", cfg.Issuer)
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return s, fmt.Errorf("issuer %q: must have no path, query or fragment", cfg.Issuer)
	}
	s.issuer = strings.TrimSuffix(cfg.Issuer, "/")
	if s.resources, err = servedResources(s.issuer, cfg.Resources); err != nil {
		return s, err
	}
	r := cfg.Refresh
	if cfg.RegisteredClientTTL < 0 {
		return s, fmt.Errorf("registered_client_ttl must not be negative")
	}
	s.clientTTL = secondsOr(cfg.RegisteredClientTTL, DefaultRegisteredClientTTL)
	if cfg.MaxRegisteredClients < 0 {
		return s, fmt.Errorf("max_registered_clients must not be negative")
	}
	s.maxClients = cfg.MaxRegisteredClients
	if s.maxClients == 0 {
		s.maxClients = DefaultMaxRegisteredClients
	}
	if cfg.MaxPendingAuthorizations < 0 {
		return s, fmt.Errorf("max_pending_authorizations must not be negative")
	}
	s.maxPending = cfg.MaxPendingAuthorizations
	if s.maxPending == 0 {
		s.maxPending = DefaultMaxPendingAuthorizations
	}
	if cfg.PasswordCheckWait < 0 || cfg.PasswordCheckWait > int(MaxPasswordCheckWait/time.Second) {
		return s, fmt.Errorf("password_check_wait: %d seconds is not between 1 and %d", cfg.PasswordCheckWait, int(MaxPasswordCheckWait/time.Second))
	}
	s.passwordWait = secondsOr(cfg.PasswordCheckWait, PasswordCheckWait)
	if r.AccessTokenTTL < 0 || r.RefreshTokenTTL < 0 || r.SkewSeconds < 0 || r.ReuseGraceSeconds < 0 {
		return s, fmt.Errorf("refresh: lifetimes, skew and grace must not be negative")
	}
	if err := durationsFit(cfg); err != nil {
		return s, err
	}
	if time.Duration(r.ReuseGraceSeconds)*time.Second > MaxReuseGrace {
		return s, fmt.Errorf("refresh.reuse_grace_seconds: at most %d (the grace is for a lost answer, not a second life)", int(MaxReuseGrace/time.Second))
	}
	if r.RotateRefreshToken != nil && !*r.RotateRefreshToken {
		return s, fmt.Errorf("refresh.rotate_refresh_token: refresh tokens are always rotated (OAuth 2.1); false is not supported")
	}
	s.accessTTL = secondsOr(r.AccessTokenTTL, DefaultAccessTokenTTL)
	s.refreshTTL = secondsOr(r.RefreshTokenTTL, DefaultRefreshTokenTTL)
	s.skew = time.Duration(r.SkewSeconds) * time.Second
	s.reuseGrace = time.Duration(r.ReuseGraceSeconds) * time.Second
	s.refreshOn = r.Enabled
	if cfg.Local.KeyRotationDays < 0 || cfg.Local.MaxKeys < 0 {
		return s, fmt.Errorf("local: key_rotation_days and max_keys must not be negative")
	}
	s.rotation = time.Duration(cfg.Local.KeyRotationDays) * 24 * time.Hour
	s.maxKeys = cfg.Local.MaxKeys
	if s.maxKeys == 0 {
		s.maxKeys = DefaultMaxKeys
	}
	s.scopes = cfg.Scopes
	if len(s.scopes) == 0 {
		s.scopes = []string{"mcp"}
	}
	for _, sc := range s.scopes {
		if sc == "" || strings.ContainsAny(sc, " \"\\") {
			return s, fmt.Errorf("scope %q: not a valid scope token", sc)
		}
	}
	s.keyPrefix = cfg.TokenStorage.KeyPrefix
	if s.keyPrefix == "" {
		s.keyPrefix = DefaultKeyPrefix
	}
	s.consentOn = cfg.Consent.Enabled
	s.development = cfg.Development
	s.dcr = cfg.DCREnabled
	s.documents = cfg.ClientIDMetadata.Enabled
	if m := cfg.ClientIDMetadata; m.MaxDocumentBytes < 0 || m.FetchTimeout < 0 || m.MaxCacheTTL < 0 {
		return s, fmt.Errorf("client_id_metadata: sizes and durations must not be negative")
	}
	for _, c := range cfg.Clients {
		if isMetadataURL(c.ID) && cfg.ClientIDMetadata.Enabled {
			return s, fmt.Errorf("client %q: an https URL as client id names a metadata document; give the configured client another id", c.ID)
		}
	}
	s.defaultPublic = cfg.AllowDefaultPublic
	switch cfg.TokenStorage.Type {
	case "", "memory", "redis":
	default:
		return s, fmt.Errorf("token_storage.type %q: must be memory or redis", cfg.TokenStorage.Type)
	}
	seen := map[string]bool{}
	for i, u := range cfg.Users {
		if u.Username == "" || u.PasswordHash == "" {
			return s, fmt.Errorf("users[%d]: username and password_hash are required", i)
		}
		if !strings.HasPrefix(u.PasswordHash, "$2") {
			return s, fmt.Errorf("users[%d] %q: password_hash must be a bcrypt hash", i, u.Username)
		}
		if seen[u.Username] {
			return s, fmt.Errorf("users[%d]: duplicate username %q", i, u.Username)
		}
		seen[u.Username] = true
	}
	seen = map[string]bool{}
	for i, c := range cfg.Clients {
		if c.ID == "" || len(c.RedirectURIs) == 0 {
			return s, fmt.Errorf("clients[%d]: id and redirect_uris are required", i)
		}
		if seen[c.ID] {
			return s, fmt.Errorf("clients[%d]: duplicate id %q", i, c.ID)
		}
		seen[c.ID] = true
		for _, ru := range c.RedirectURIs {
			if err := checkRedirectURI(ru, cfg.Development); err != nil {
				return s, fmt.Errorf("clients[%d] %q: %w", i, c.ID, err)
			}
		}
	}
	return s, nil
}

// servedResources is the issuer and resources in canonical form, without
// repetitions.
func servedResources(issuer string, resources []string) ([]string, error) {
	iss, _ := canonicalResource(issuer)
	out := []string{iss}
	for _, r := range resources {
		c, ok := canonicalResource(r)
		if !ok {
			return nil, fmt.Errorf("resources: %q is not an absolute http(s) URI without fragment or user information", r)
		}
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out, nil
}

// durationsFit refuses a count of seconds or days that a time.Duration
// cannot hold: past 292 years it would wrap around to another duration,
// perhaps a short or a negative one.
func durationsFit(cfg *ServerConfig) error {
	for _, f := range []struct {
		name string
		n    int
		unit time.Duration
	}{
		{"registered_client_ttl", cfg.RegisteredClientTTL, time.Second},
		{"refresh.access_token_ttl", cfg.Refresh.AccessTokenTTL, time.Second},
		{"refresh.refresh_token_ttl", cfg.Refresh.RefreshTokenTTL, time.Second},
		{"refresh.skew_seconds", cfg.Refresh.SkewSeconds, time.Second},
		{"refresh.reuse_grace_seconds", cfg.Refresh.ReuseGraceSeconds, time.Second},
		{"local.key_rotation_days", cfg.Local.KeyRotationDays, 24 * time.Hour},
		{"client_id_metadata.fetch_timeout", cfg.ClientIDMetadata.FetchTimeout, time.Second},
		{"client_id_metadata.max_cache_ttl", cfg.ClientIDMetadata.MaxCacheTTL, time.Second},
	} {
		if int64(f.n) > math.MaxInt64/int64(f.unit) {
			return fmt.Errorf("%s: %d is past the longest duration (%d)", f.name, f.n, math.MaxInt64/int64(f.unit))
		}
	}
	return nil
}

func secondsOr(n int, def time.Duration) time.Duration {
	if n == 0 {
		return def
	}
	return time.Duration(n) * time.Second
}
