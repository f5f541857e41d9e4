package oauth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
	"go.uber.org/zap"
	"golang.org/x/crypto/bcrypt"

	"github.com/codemode-gateway/caddy-codemode/internal/kv"
	"github.com/codemode-gateway/caddy-codemode/internal/telemetry"
)

// Endpoint paths, relative to the issuer.
const (
	pathAuthorize = "/oauth/authorize"
	pathCallback  = "/oauth/authorize/callback"
	pathToken     = "/oauth/token"
	pathRegister  = "/oauth/register"
	pathRevoke    = "/oauth/revoke"
	pathLogin     = "/oauth/login"
	pathConsent   = "/oauth/consent"
	pathJWKS      = "/.well-known/jwks.json"
	pathASMeta    = "/.well-known/oauth-authorization-server"
	pathOIDCMeta  = "/.well-known/openid-configuration"
)

// Server is the OAuth 2.1 authorization server of orchestrated mode.
type Server struct {
	cfg      settings
	log      *zap.Logger
	now      func() time.Time
	rand     io.Reader
	store    kvStore
	regs     registrations // the live registered clients, counted
	pendings registrations // the live pending authorizations, counted
	keys     *keyRing
	provider *op.Provider
	users    map[string]User
	// dummyHash stands in for an unknown user's password hash; nil when
	// there are no users (every login is then refused before bcrypt).
	dummyHash []byte
	clients   map[string]*client
	docs      *documentResolver // nil unless client_id_metadata is enabled
	handler   http.Handler
	verifier  *Verifier // of our own access tokens (newTokenVerifier)
	metrics   *Metrics
	started   time.Time
	revoked   revocationListeners

	// passwordChecks holds a token per password comparison running
	// (MaxPasswordChecks); passwordWait is how long a login waits for one
	// (ServerConfig.PasswordCheckWait). comparePassword is bcrypt's comparison.
	passwordChecks  chan struct{}
	passwordWait    time.Duration
	comparePassword func(hash, password []byte) error
}

// NewServer validates cfg and builds the server. The caller must Close it.
func NewServer(cfg ServerConfig, opts *ServerOptions) (*Server, error) {
	if opts == nil {
		opts = &ServerOptions{}
	}
	st, err := cfg.settings()
	if err != nil {
		return nil, fmt.Errorf("oauth: %w", err)
	}
	s := &Server{cfg: st, log: opts.Logger, now: opts.Now, rand: opts.Rand, metrics: opts.Metrics}
	if s.log == nil {
		s.log = zap.NewNop()
	}
	s.log = redactLogger(s.log, cfg.Redact)
	if s.now == nil {
		s.now = time.Now
	}
	s.started = s.now()
	if s.rand == nil {
		s.rand = rand.Reader
	}

	var root *signingKey
	switch {
	case cfg.Local.SignKey != "":
		if root, err = parseSigningKey(cfg.Local.SignKey); err != nil {
			return nil, fmt.Errorf("oauth: %w", err)
		}
	case st.development:
		if root, err = generateSigningKey(s.rand); err != nil {
			return nil, fmt.Errorf("oauth: %w", err)
		}
		s.log.Warn("DEVELOPMENT MODE: generated a throwaway signing key; every token dies with this process. Supply local.sign_key or JWT_SIGNING_KEY in production",
			zap.String("kid", root.id))
	default:
		return nil, errors.New("oauth: local.sign_key (or JWT_SIGNING_KEY) is required outside development mode")
	}
	if s.keys, err = newKeyRing(root, st.rotation, st.maxKeys, s.now); err != nil {
		return nil, fmt.Errorf("oauth: %w", err)
	}
	if s.verifier, err = s.newTokenVerifier(); err != nil {
		return nil, fmt.Errorf("oauth: %w", err)
	}

	s.users = make(map[string]User, len(cfg.Users))
	for _, u := range cfg.Users {
		if u.Subject == "" {
			u.Subject = u.Username
		}
		s.users[u.Username] = u
	}
	if len(cfg.Users) > 0 {
		s.dummyHash = newDummyHash(cfg.Users)
	}
	s.passwordChecks = make(chan struct{}, MaxPasswordChecks())
	s.passwordWait = st.passwordWait
	s.comparePassword = bcrypt.CompareHashAndPassword
	s.clients = make(map[string]*client, len(cfg.Clients))
	for _, cc := range cfg.Clients {
		c := &client{ID: cc.ID, Name: cc.Name, URIs: cc.RedirectURIs, Grants: s.grantTypes(),
			AllowedScope: cc.Scopes, AuthMeth: oidc.AuthMethodNone, dev: st.development, ttl: st.accessTTL, configured: true}
		if len(c.AllowedScope) == 0 {
			c.AllowedScope = st.scopes
		}
		for _, sc := range c.AllowedScope {
			if !slices.Contains(st.scopes, sc) {
				return nil, fmt.Errorf("oauth: client %q: scope %q is not in scopes", cc.ID, sc)
			}
		}
		if cc.Secret != "" {
			h := sha256.Sum256([]byte(cc.Secret))
			c.SecretHash, c.AuthMeth = h[:], oidc.AuthMethodBasic
		}
		s.clients[cc.ID] = c
	}

	switch cfg.TokenStorage.Type {
	case "redis":
		s.store, s.regs, s.pendings = newRedisStore(cfg.TokenStorage, st.keyPrefix)
	default:
		s.store, s.regs, s.pendings = kv.NewMemory(s.now, st.keyPrefix), newMemoryRegistrations(), newMemoryRegistrations()
		s.log.Warn("oauth token storage is in memory: for one instance only, and every session is lost on restart")
	}
	if st.documents {
		s.docs = newDocumentResolver(s, cfg.ClientIDMetadata)
		if len(cfg.ClientIDMetadata.AllowedPrivateHosts) > 0 && !st.development {
			s.log.Warn("client metadata documents may be fetched from private addresses of these hosts", zap.Strings("hosts", cfg.ClientIDMetadata.AllowedPrivateHosts))
		}
	}

	if st.development {
		s.log.Warn("DEVELOPMENT MODE: http issuer allowed, demo login enabled; never use in production")
	}
	if st.defaultPublic && !st.development {
		s.log.Warn("allow_default_public is on: requests without a token pass as anonymous (production rule 7)")
	}
	if len(cfg.Users) == 0 && !st.development {
		s.log.Warn("no local users are configured: nobody can sign in")
	}
	if st.dcr && !st.development {
		s.log.Warn("dynamic client registration is on: anyone can register a client (production rule 7)")
	}

	var cryptoKey [32]byte
	if _, err := io.ReadFull(s.rand, cryptoKey[:]); err != nil {
		return nil, fmt.Errorf("oauth: reading randomness: %w", err)
	}
	opCfg := &op.Config{
		CryptoKey:             cryptoKey,
		CodeMethodS256:        true,
		AuthMethodPost:        true,
		GrantTypeRefreshToken: st.refreshOn,
		SupportedScopes:       st.scopes,
	}
	opOpts := []op.Option{
		op.WithCustomAuthEndpoint(op.NewEndpoint(pathAuthorize)),
		op.WithCustomTokenEndpoint(op.NewEndpoint(pathToken)),
		op.WithCustomRevocationEndpoint(op.NewEndpoint(pathRevoke)),
		op.WithCustomKeysEndpoint(op.NewEndpoint(pathJWKS)),
		op.WithCustomIntrospectionEndpoint(op.NewEndpoint("/oauth/introspect")),
		op.WithCustomUserinfoEndpoint(op.NewEndpoint("/oauth/userinfo")),
		op.WithCustomEndSessionEndpoint(op.NewEndpoint("/oauth/end_session")),
		op.WithCustomDeviceAuthorizationEndpoint(op.NewEndpoint("/oauth/device_authorization")),
	}
	if st.development {
		opOpts = append(opOpts, op.WithAllowInsecure())
	}
	s.provider, err = op.NewProvider(opCfg, opStorage{s}, op.StaticIssuer(st.issuer), opOpts...)
	if err != nil {
		_ = s.store.Close()
		return nil, fmt.Errorf("oauth: building provider: %w", err)
	}
	s.handler = s.routes()
	s.metrics.track(s)
	return s, nil
}

// Close releases the token storage (a Redis client the caller supplied in
// TokenStorage.Client stays open).
func (s *Server) Close() error {
	s.metrics.untrack(s)
	return s.store.Close()
}

// Handler serves every endpoint of the authorization server at its path
// below the issuer. It issues tokens for ServerConfig.Resources.
func (s *Server) Handler() http.Handler { return s.handler }

type servedKey struct{}

// ResourceHandler is Handler issuing tokens for resources instead of
// ServerConfig.Resources (the issuer is always one). It is for a front end
// that learns the resources it serves after the server is built: Caddy
// shares one server between configurations, and each configuration's
// routes name their own. A request naming another resource is refused with
// invalid_target, as with Handler.
func (s *Server) ResourceHandler(resources []string) (http.Handler, error) {
	served, err := servedResources(s.cfg.issuer, resources)
	if err != nil {
		return nil, fmt.Errorf("oauth: %w", err)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.handler.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), servedKey{}, served)))
	}), nil
}

// serves reports whether the server issues tokens for the canonical
// resource res when answering a request with context ctx.
func (s *Server) serves(ctx context.Context, res string) bool {
	served, ok := ctx.Value(servedKey{}).([]string)
	if !ok {
		served = s.cfg.resources
	}
	return slices.Contains(served, res)
}

// Issuer is the iss of every token.
func (s *Server) Issuer() string { return s.cfg.issuer }

// AllowDefaultPublic reports allow_default_public, for the authentication
// provider.
func (s *Server) AllowDefaultPublic() bool { return s.cfg.defaultPublic }

// Development reports whether development mode is on.
func (s *Server) Development() bool { return s.cfg.development }

// JWKS returns the public key set: the key that signs now and the ones
// still accepted.
func (s *Server) JWKS() (jose.JSONWebKeySet, error) { return s.keys.JWKS() }

// SessionRevoked describes a grant ended before its time: revoked by its
// client (RFC 7009), or by the server when a code or refresh token was
// replayed (taken to be theft). A session that merely expires is not
// reported.
type SessionRevoked struct {
	SessionID string
	Subject   string
	ClientID  string
	Reason    string
}

// OnSessionRevoked registers fn, called after each revocation this server
// performs (other instances sharing the storage call their own); it
// returns the function that unregisters fn.
func (s *Server) OnSessionRevoked(fn func(context.Context, SessionRevoked)) (remove func()) {
	return s.revoked.add(fn)
}

// revocationListeners are the OnSessionRevoked functions.
type revocationListeners struct {
	mu   sync.Mutex
	next int
	fns  map[int]func(context.Context, SessionRevoked)
}

func (l *revocationListeners) add(fn func(context.Context, SessionRevoked)) func() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fns == nil {
		l.fns = map[int]func(context.Context, SessionRevoked){}
	}
	id := l.next
	l.next++
	l.fns[id] = fn
	return func() {
		l.mu.Lock()
		delete(l.fns, id)
		l.mu.Unlock()
	}
}

func (l *revocationListeners) notify(ctx context.Context, ev SessionRevoked) {
	l.mu.Lock()
	fns := make([]func(context.Context, SessionRevoked), 0, len(l.fns))
	for _, fn := range l.fns {
		fns = append(fns, fn)
	}
	l.mu.Unlock()
	for _, fn := range fns {
		fn(ctx, ev)
	}
}

// Ping checks the token storage.
func (s *Server) Ping(ctx context.Context) error { return s.store.Ping(ctx) }

// Paths lists the endpoint paths the handler serves, for the Caddy side's
// routing and HTTPS checks.
func (s *Server) Paths() []string {
	p := []string{pathAuthorize, pathCallback, pathToken, pathRevoke, pathLogin, pathConsent, pathJWKS, pathASMeta, pathOIDCMeta}
	if s.cfg.dcr {
		p = append(p, pathRegister)
	}
	return p
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc(pathAuthorize, s.authorize)
	mux.Handle(pathCallback, s.callback(s.provider))
	mux.HandleFunc(pathToken, cors(s.token))
	mux.HandleFunc(pathRevoke, cors(s.revoke))
	if s.cfg.dcr {
		mux.HandleFunc(pathRegister, cors(post(s.register)))
	}
	mux.HandleFunc(pathLogin, s.login)
	mux.HandleFunc(pathConsent, s.consent)
	mux.HandleFunc(pathJWKS, cors(s.serveJWKS))
	mux.HandleFunc(pathASMeta, cors(s.serveMetadata(false)))
	mux.HandleFunc(pathOIDCMeta, cors(s.serveMetadata(true)))
	return mux
}

// issWriter adds the RFC 9207 iss parameter to op's authorization
// responses, which the server's own error redirects carry too: a client
// talking to several authorization servers can tell which one answered
// (mix-up attacks), and MCP SDKs check it when the metadata advertises it.
// codeIssued, when set, is called with the header of the redirect that
// hands out a code, before it is sent.
type issWriter struct {
	http.ResponseWriter
	issuer     string
	codeIssued func(http.Header)
	wrote      bool
}

func (w *issWriter) WriteHeader(code int) {
	if !w.wrote && code >= 300 && code < 400 {
		if u, err := url.Parse(w.Header().Get("Location")); err == nil {
			q := u.Query()
			if (q.Has("code") || q.Has("error")) && !q.Has("iss") {
				q.Set("iss", w.issuer)
				u.RawQuery = q.Encode()
				w.Header().Set("Location", u.String())
			}
			if w.codeIssued != nil && q.Has("code") {
				w.codeIssued(w.Header())
			}
		}
	}
	w.wrote = true
	w.ResponseWriter.WriteHeader(code)
}

func (w *issWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// cors lets browser-based MCP clients call the JSON endpoints.
func cors(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Access-Control-Allow-Origin", "*")
		if r.Method == http.MethodOptions {
			w.Header().Set("Access-Control-Allow-Methods", "GET, POST, OPTIONS")
			w.Header().Set("Access-Control-Allow-Headers", "Authorization, Content-Type, MCP-Protocol-Version")
			w.WriteHeader(http.StatusNoContent)
			return
		}
		h(w, r)
	}
}

func post(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", "POST")
			writeOAuthError(w, http.StatusMethodNotAllowed, "invalid_request", "use POST")
			return
		}
		h(w, r)
	}
}

// randomToken returns n random bytes, base64url encoded.
func (s *Server) randomToken(n int) string {
	b := make([]byte, n)
	if _, err := io.ReadFull(s.rand, b); err != nil {
		// A failing system random source leaves nothing safe to do.
		panic(fmt.Sprintf("oauth: reading randomness: %v", err))
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// pending loads a live pending authorization, with the stored record (raw)
// that a change replaces by compare-and-swap.
func (s *Server) pending(ctx context.Context, id string) (*authRequest, error) {
	if id == "" {
		return nil, errPendingUnknown
	}
	b, err := s.store.Get(ctx, keyPending(id))
	if errors.Is(err, errNotFound) {
		return nil, errPendingUnknown
	}
	if err != nil {
		return nil, err
	}
	a := new(authRequest)
	if err := json.Unmarshal(b, a); err != nil {
		return nil, fmt.Errorf("decoding pending authorization: %w", err)
	}
	if !s.now().Before(a.Expires) {
		return nil, errPendingUnknown
	}
	a.raw = b
	return a, nil
}

// errPendingUnknown is a pending authorization that does not exist (any
// more).
var errPendingUnknown = errors.New("authorization request unknown or expired")

// errCodeIssued refuses a change to an authorization whose code was
// issued: it yields one code only.
var errCodeIssued = errors.New("a code was already issued for this authorization")

// pendingTries bounds the compare-and-swap rounds of a change to a pending
// authorization. Every round lost is a write by someone else, and the
// writes one authorization sees are few: MaxLoginFailures counted
// attempts, one login, one approval, one code, and what the browser that
// signed in sends itself. The bound is far above them: no change fails for
// want of rounds unless that browser hammers its own authorization.
const pendingTries = 32

// errNoChange, returned by a change of changePending, leaves the record as
// it is and is no error.
var errNoChange = errors.New("nothing to change")

// changePending changes the pending authorization id by compare-and-swap:
// change sees the record as stored and changes its own fields; when
// another writer (a login, a consent, a callback, on any gateway) stored
// the record meanwhile, the record is read again and change applied to it
// again. So no writer's field is lost however the writers interleave, and
// whatever change checks (a code not issued yet, the browser that signed
// in) holds on the record it writes. An error of change ends the change
// with nothing written.
func (s *Server) changePending(ctx context.Context, id string, change func(a *authRequest) error) (*authRequest, error) {
	for range pendingTries {
		a, err := s.pending(ctx, id)
		if err != nil {
			return nil, err
		}
		old := a.raw
		if err := change(a); errors.Is(err, errNoChange) {
			return a, nil
		} else if err != nil {
			return nil, err
		}
		b, err := json.Marshal(a)
		if err != nil {
			return nil, fmt.Errorf("encoding pending authorization: %w", err)
		}
		// The record expired during change (a slow login): a swap without a
		// time to live would keep it forever, as both stores read 0 as none.
		ttl := a.Expires.Sub(s.now())
		if ttl <= 0 {
			return nil, errPendingUnknown
		}
		swapped, err := s.store.CompareAndSwap(ctx, keyPending(id), old, b, ttl)
		if err != nil {
			return nil, err
		}
		if swapped {
			a.raw = b
			return a, nil
		}
	}
	return nil, errors.New("the authorization kept changing meanwhile")
}

// revokeSession ends a grant: its refresh tokens stop working at once, its
// access tokens at the next VerifyAccessToken, and the OnSessionRevoked
// listeners (users' upstream credentials) learn whose it was.
func (s *Server) revokeSession(ctx context.Context, sid, why string) {
	b, err := s.store.GetDel(ctx, keySession(sid))
	if err != nil && !errors.Is(err, errNotFound) {
		s.log.Error("revoking session", zap.String("reason", why), errField(err))
		return
	}
	var ss session
	if b != nil && json.Unmarshal(b, &ss) == nil {
		s.revoked.notify(ctx, SessionRevoked{SessionID: sid, Subject: ss.Subject, ClientID: ss.ClientID, Reason: why})
	}
	switch why {
	case revokedRefreshReuse:
		s.metrics.grantRevoked("refresh_reuse")
		s.metrics.refreshReused("revoked")
	case revokedCodeReuse:
		s.metrics.grantRevoked("code_reuse")
	default:
		// A client signing out is ordinary traffic: info, not a warning.
		s.metrics.grantRevoked("revoked")
		s.log.Info("session revoked", zap.String("reason", why), zap.String("session", shortID(sid)))
		return
	}
	s.log.Warn("session revoked", zap.String("reason", why), zap.String("session", shortID(sid)))
}

// Reasons given to revokeSession for a replayed token.
const (
	revokedRefreshReuse = "refresh token reused"
	revokedCodeReuse    = "authorization code reused"
)

// reqLog is the server's logger with the request id an HTTP front end put
// in r's context: the log line of a 5xx answer names the request whose
// X-Request-Id the client saw.
func (s *Server) reqLog(r *http.Request) *zap.Logger { return telemetry.Logger(r.Context(), s.log) }

// shortID keeps log lines correlatable without writing a whole identifier.
func shortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

type authorizeExtraKey struct{}

// authorizeExtra carries what op's AuthRequest has no field for.
type authorizeExtra struct {
	audience []string
	client   *client
	// id and expires are the pending authorization's, counted before op
	// creates it (created) under max_pending_authorizations.
	id      string
	expires time.Time
	created bool
}

// authorize enforces what op leaves open, then hands over to op: a known
// client, an exactly registered redirect URI, response_type code, a state,
// PKCE with S256, known scopes, at most one resource indicator, one the
// server serves.
func (s *Server) authorize(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodPost {
		w.Header().Set("Allow", "GET, POST")
		writeOAuthError(w, http.StatusMethodNotAllowed, "invalid_request", "use GET or POST")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	if err := r.ParseForm(); err != nil {
		writeOAuthError(w, http.StatusBadRequest, "invalid_request", "cannot parse the request")
		return
	}
	q := r.Form
	for _, p := range []string{"client_id", "redirect_uri"} {
		if len(q[p]) > 1 {
			writeOAuthError(w, http.StatusBadRequest, "invalid_request", p+" is repeated")
			return
		}
	}
	c, err := s.client(r.Context(), q.Get("client_id"))
	if ErrorCode(err) == CodeStorage {
		// The redirect URI cannot be checked without the client: answered
		// here, never by redirect.
		s.reqLog(r).Error("authorization request failed", errField(err))
		writeStorageUnavailable(w)
		return
	}
	if err != nil {
		desc := "unknown client_id"
		if isMetadataURL(q.Get("client_id")) && s.docs != nil {
			desc = err.Error() // why the metadata document was refused
		}
		writeOAuthError(w, http.StatusBadRequest, "invalid_client", desc)
		return
	}
	redirect := q.Get("redirect_uri")
	if redirect == "" || !c.redirectAllowed(redirect) {
		// Never redirect to an unregistered URI (RFC 6749 section 4.1.2.1).
		writeOAuthError(w, http.StatusBadRequest, "invalid_request", "redirect_uri is missing or not registered for this client (exact match)")
		return
	}
	state := q.Get("state")
	fail := func(code, desc string) {
		s.log.Info("authorization request refused", logClientID(c.ID), zap.String("error", code), zap.String("reason", desc))
		if !c.configured {
			// RFC 9700 section 4.11.2: anyone may register a client (or
			// publish a metadata document) with a phishing page as its
			// redirect URI and a request made to fail, and a redirect
			// would bounce the user from this server's URL to that page
			// at once. The user decides instead, seeing the host.
			s.refusedPage(w, pageData{Client: c.displayName(), ClientHost: c.documentHost, SelfRegistered: c.selfRegistered()}, redirect, state, code, desc)
			return
		}
		redirectError(w, r, redirect, state, code, desc, s.cfg.issuer)
	}
	if p := repeatedParam(q, "resource"); p != "" {
		// RFC 6749 section 3.1: no parameter more than once (resource may
		// repeat by RFC 8707, and is refused below when it does).
		fail("invalid_request", p+" is repeated")
		return
	}
	switch {
	case len(state) > MaxStateLength:
		fail("invalid_request", fmt.Sprintf("state is longer than %d bytes", MaxStateLength))
		return
	case len(q.Get("nonce")) > MaxNonceLength:
		fail("invalid_request", fmt.Sprintf("nonce is longer than %d bytes", MaxNonceLength))
		return
	case q.Get("response_type") != "code":
		fail("unsupported_response_type", "response_type must be code")
		return
	case state == "":
		fail("invalid_request", "state is required")
		return
	case q.Get("code_challenge") == "":
		fail("invalid_request", "code_challenge is required (PKCE with S256)")
		return
	case q.Get("code_challenge_method") != "S256":
		fail("invalid_request", "code_challenge_method must be S256")
		return
	case !validChallenge(q.Get("code_challenge")):
		fail("invalid_request", "code_challenge must be 43 base64url characters")
		return
	case q.Has("request") || q.Has("request_uri"):
		fail("request_not_supported", "request objects are not supported")
		return
	}
	if slices.Contains(strings.Fields(q.Get("prompt")), "none") {
		// There is no login cookie, so a silent authorization is never possible.
		fail("login_required", "the user must sign in")
		return
	}
	if m := q.Get("response_mode"); m != "" && m != "query" {
		fail("invalid_request", "response_mode must be query")
		return
	}
	// A scope is named once in what is stored: "openid openid ..." passed
	// every check below and stored the request's whole 16 KiB with the
	// pending authorization, and later with its grant.
	scopes := uniqueFields(q.Get("scope"))
	if len(scopes) == 0 {
		scopes = slices.Clone(c.AllowedScope)
	}
	for _, sc := range scopes {
		if !oidcScope(sc) && !c.IsScopeAllowed(sc) {
			fail("invalid_scope", "scope "+sc+" is not allowed for this client")
			return
		}
	}
	if !s.cfg.refreshOn || !slices.Contains(c.Grants, oidc.GrantTypeRefreshToken) {
		// offline_access asks for a refresh token this client will not get.
		scopes = slices.DeleteFunc(scopes, func(sc string) bool { return sc == oidc.ScopeOfflineAccess })
	}
	issuerAud, _ := canonicalResource(s.cfg.issuer)
	audience := []string{issuerAud}
	if res := q["resource"]; len(res) > 0 {
		canon, ok := canonicalResource(res[0])
		if len(res) > 1 || !ok {
			fail("invalid_target", "resource must be one absolute http(s) URI without a fragment")
			return
		}
		if !s.serves(r.Context(), canon) {
			// RFC 8707 section 2: a resource this server does not issue
			// tokens for; the token would be good at another resource
			// server that trusts this issuer.
			fail("invalid_target", "this server issues no tokens for resource "+canon)
			return
		}
		// Stored and compared in canonical form: https://h/ and https://h
		// name one resource.
		audience = []string{canon}
	}
	q.Set("scope", strings.Join(scopes, " "))
	q.Del("prompt")
	q.Del("id_token_hint")
	r.Form = q
	r.URL.RawQuery = q.Encode()
	// The pending authorization takes its place in the count before op
	// stores it: past max_pending_authorizations, answered here and never
	// by redirect, like a full registration. A place op does not use (a
	// request op refused) is freed at once.
	now := s.now()
	extra := &authorizeExtra{audience: audience, client: c, id: s.randomToken(24), expires: now.Add(PendingTTL)}
	ok, free, err := s.pendings.admit(r.Context(), extra.id, now, extra.expires, s.cfg.maxPending)
	if err != nil {
		s.reqLog(r).Error("authorization request failed", errField(err))
		writeStorageUnavailable(w)
		return
	}
	if !ok {
		s.refuseFull(w, r, "authorization request", "max_pending_authorizations", s.cfg.maxPending, "pending authorizations", free.Sub(now))
		return
	}
	r = r.WithContext(context.WithValue(r.Context(), authorizeExtraKey{}, extra))
	s.provider.ServeHTTP(w, r)
	if !extra.created {
		if err := s.pendings.forget(context.WithoutCancel(r.Context()), extra.id); err != nil {
			s.reqLog(r).Warn("freeing an unused pending authorization's place", errField(err))
		}
	}
}

// oidcScope reports the OpenID scopes generic clients send by habit; they
// are accepted and grant nothing beyond the subject.
func oidcScope(sc string) bool {
	switch sc {
	case oidc.ScopeOpenID, oidc.ScopeOfflineAccess, oidc.ScopeProfile, oidc.ScopeEmail:
		return true
	}
	return false
}

// uniqueFields is strings.Fields without repeats, in first-seen order: a
// scope parameter names a set (RFC 6749 section 3.3).
func uniqueFields(s string) []string {
	f := strings.Fields(s)
	seen := make(map[string]bool, len(f))
	out := f[:0]
	for _, x := range f {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

func validChallenge(c string) bool {
	if len(c) != 43 {
		return false
	}
	for _, ch := range c {
		if !(ch >= 'A' && ch <= 'Z' || ch >= 'a' && ch <= 'z' || ch >= '0' && ch <= '9' || ch == '-' || ch == '_') {
			return false
		}
	}
	return true
}

// redirectError sends the browser back to the client with an RFC 6749
// section 4.1.2.1 error.
func redirectError(w http.ResponseWriter, r *http.Request, redirect, state, code, desc, issuer string) {
	u, err := errorResponseURL(redirect, state, code, desc, issuer)
	if err != nil {
		writeOAuthError(w, http.StatusBadRequest, code, desc)
		return
	}
	http.Redirect(w, r, u, http.StatusFound)
}

// errorResponseURL is the redirect URI with an RFC 6749 section 4.1.2.1
// error and the RFC 9207 iss.
func errorResponseURL(redirect, state, code, desc, issuer string) (string, error) {
	u, err := url.Parse(redirect)
	if err != nil {
		return "", err
	}
	v := u.Query()
	v.Set("error", code)
	v.Set("error_description", desc)
	if state != "" {
		v.Set("state", state)
	}
	v.Set("iss", issuer)
	u.RawQuery = v.Encode()
	return u.String(), nil
}

// refusedPage answers a refused authorization request of a client nobody
// vouched for with a page naming the error and a link back to the client
// (the error response the redirect would have carried), so that the
// user, not this server, decides to go to the client's redirect URI.
// d names the client.
func (s *Server) refusedPage(w http.ResponseWriter, d pageData, redirect, state, code, desc string) {
	u, err := errorResponseURL(redirect, state, code, desc, s.cfg.issuer)
	if err != nil {
		writeOAuthError(w, http.StatusBadRequest, code, desc)
		return
	}
	// The code only: the description may quote the request (a scope, a
	// resource), and whoever crafted it would write text on this
	// server's page. The link carries it to the client.
	d.Title, d.Error, d.Redirect, d.RedirectHost = "Request refused", code, redirect, redirectHost(redirect)
	// checkRedirectURI admitted the URI (no javascript:, data:, ...); a
	// native app's private-use scheme must survive the template.
	d.Continue = template.URL(u)
	s.render(w, http.StatusBadRequest, "refused", d)
}

// parsePostForm accepts a POST with a form body of at most 64 KiB and parses
// it; otherwise it writes the RFC 6749 error and reports false.
func parsePostForm(w http.ResponseWriter, r *http.Request) bool {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		writeOAuthError(w, http.StatusMethodNotAllowed, "invalid_request", "use POST")
		return false
	}
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil {
		writeOAuthError(w, http.StatusBadRequest, "invalid_request", "cannot parse the form body")
		return false
	}
	return true
}

// revoke serves RFC 7009: it ends the whole grant the token belongs to,
// whether a refresh or an access token is presented. Unknown tokens get 200
// as the RFC asks.
func (s *Server) revoke(w http.ResponseWriter, r *http.Request) {
	if !parsePostForm(w, r) {
		return
	}
	token := r.PostForm.Get("token")
	if token == "" {
		writeOAuthError(w, http.StatusBadRequest, "invalid_request", "token is required")
		return
	}
	c, ok := s.authenticateClient(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	var rec refreshRecord
	b, err := s.store.Get(ctx, keyRefresh(token))
	switch {
	case err == nil && json.Unmarshal(b, &rec) == nil:
		if rec.ClientID != c.ID {
			writeOAuthError(w, http.StatusBadRequest, "invalid_request", "the token was not issued to this client")
			return
		}
		s.revokeSession(ctx, rec.SessionID, "refresh token revoked by the client")
	case err != nil && !errors.Is(err, errNotFound):
		s.reqLog(r).Error("reading a token to revoke", errField(err))
		writeStorageUnavailable(w)
		return
	default:
		if cl, err := s.parseAccessToken(ctx, token); err == nil {
			if cl.ClientID != c.ID {
				writeOAuthError(w, http.StatusBadRequest, "invalid_request", "the token was not issued to this client")
				return
			}
			s.revokeSession(ctx, cl.SessionID, "access token revoked by the client")
		}
	}
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
}

func (s *Server) serveJWKS(w http.ResponseWriter, r *http.Request) {
	set, err := s.keys.JWKS()
	if err != nil {
		s.reqLog(r).Error("building key set", errField(err))
		writeOAuthError(w, http.StatusInternalServerError, "server_error", "key set unavailable")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "public, max-age=300")
	_ = json.NewEncoder(w).Encode(set)
}

// Metadata is the RFC 8414 authorization server metadata (and, with the
// OpenID fields, the discovery document).
type Metadata struct {
	Issuer                            string   `json:"issuer"`
	AuthorizationEndpoint             string   `json:"authorization_endpoint"`
	TokenEndpoint                     string   `json:"token_endpoint"`
	RegistrationEndpoint              string   `json:"registration_endpoint,omitempty"`
	RevocationEndpoint                string   `json:"revocation_endpoint"`
	JWKSURI                           string   `json:"jwks_uri"`
	ScopesSupported                   []string `json:"scopes_supported"`
	ResponseTypesSupported            []string `json:"response_types_supported"`
	ResponseModesSupported            []string `json:"response_modes_supported"`
	GrantTypesSupported               []string `json:"grant_types_supported"`
	TokenEndpointAuthMethodsSupported []string `json:"token_endpoint_auth_methods_supported"`
	RevocationEndpointAuthMethods     []string `json:"revocation_endpoint_auth_methods_supported"`
	CodeChallengeMethodsSupported     []string `json:"code_challenge_methods_supported"`
	AuthorizationResponseIssParameter bool     `json:"authorization_response_iss_parameter_supported"`
	SubjectTypesSupported             []string `json:"subject_types_supported,omitempty"`
	IDTokenSigningAlgValuesSupported  []string `json:"id_token_signing_alg_values_supported,omitempty"`
	ClaimsSupported                   []string `json:"claims_supported,omitempty"`
	ResourceIndicatorsSupported       bool     `json:"resource_indicators_supported,omitempty"`
	ClientIDMetadataDocumentSupported bool     `json:"client_id_metadata_document_supported,omitempty"`
}

// Metadata returns the server metadata document.
func (s *Server) Metadata(openid bool) Metadata {
	iss := s.cfg.issuer
	scopes := slices.Clone(s.cfg.scopes)
	if s.cfg.refreshOn {
		scopes = append(scopes, oidc.ScopeOfflineAccess)
	}
	m := Metadata{
		Issuer:                            iss,
		AuthorizationEndpoint:             iss + pathAuthorize,
		TokenEndpoint:                     iss + pathToken,
		RevocationEndpoint:                iss + pathRevoke,
		JWKSURI:                           iss + pathJWKS,
		ScopesSupported:                   scopes,
		ResponseTypesSupported:            []string{"code"},
		ResponseModesSupported:            []string{"query"},
		TokenEndpointAuthMethodsSupported: []string{"none", "client_secret_basic", "client_secret_post"},
		RevocationEndpointAuthMethods:     []string{"none", "client_secret_basic", "client_secret_post"},
		CodeChallengeMethodsSupported:     []string{"S256"},
		AuthorizationResponseIssParameter: true,
		ResourceIndicatorsSupported:       true,
	}
	for _, g := range s.grantTypes() {
		m.GrantTypesSupported = append(m.GrantTypesSupported, string(g))
	}
	if s.cfg.dcr {
		m.RegistrationEndpoint = iss + pathRegister
	}
	m.ClientIDMetadataDocumentSupported = s.docs != nil
	if openid {
		m.SubjectTypesSupported = []string{"public"}
		keys, _ := s.keys.published()
		for _, k := range keys {
			if !slices.Contains(m.IDTokenSigningAlgValuesSupported, string(k.alg)) {
				m.IDTokenSigningAlgValuesSupported = append(m.IDTokenSigningAlgValuesSupported, string(k.alg))
			}
		}
		m.ClaimsSupported = []string{"iss", "sub", "aud", "exp", "iat", "client_id", "scope", "sid"}
	}
	return m
}

func (s *Server) serveMetadata(openid bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "public, max-age=300")
		_ = json.NewEncoder(w).Encode(s.Metadata(openid))
	}
}
