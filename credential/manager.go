package credential

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/codemode-gateway/caddy-codemode/internal/identity"
)

// Defaults of Options fields left zero.
const (
	DefaultConnectionTTL = 30 * 24 * time.Hour
	DefaultRefreshBefore = time.Minute
	DefaultSessionTTL    = time.Hour
	// refreshLockTTL bounds how long one gateway may hold a refresh.
	refreshLockTTL = 20 * time.Second
	// refreshWait is how long a caller waits for another gateway's refresh
	// of an expired token before giving up.
	refreshWait = 10 * time.Second
	// touchEvery is how often a connection in use gets its lifetime renewed.
	touchEvery = time.Hour
)

// Options are the settings of a Manager. Store and Keys are required.
type Options struct {
	// Store holds the vault records, the connection pages' sessions and
	// the pending connections. Shared by every gateway (Redis) for
	// connections to work behind a load balancer.
	Store Store
	// Keys seal the vault records.
	Keys *Keyring
	// ConnectURL is the absolute URL of the connections page (for
	// example https://gw.example.com/connections); CREDENTIAL_REQUIRED
	// errors point users there.
	ConnectURL string
	// SignIn tells the connections page who is at the browser. Nil means
	// the pages refuse every request (calls still work).
	SignIn SignIn
	// HTTPClient talks to upstream authorization servers. Default: a client
	// with a 15 s timeout. Each service gets a copy whose transport (a
	// clone of this one's, when it is an *http.Transport) refuses to
	// connect to an internal address the configuration does not name
	// (dial.go).
	HTTPClient *http.Client
	// ConnectionTTL is how long a connection is kept after it was last
	// written or used. Default 30 days.
	ConnectionTTL time.Duration
	// RefreshBefore refreshes an OAuth access token this long before it
	// expires. Default 1 minute.
	RefreshBefore time.Duration
	// SessionTTL is the life of a sign-in on the connections page.
	// Default 1 hour.
	SessionTTL time.Duration
	// Logger receives operational logs (never a credential). Nil: none.
	Logger *zap.Logger
	// Development lets configured authorization servers, endpoints and
	// MCP servers use plain http on any address (outside it, only on a
	// loopback address): the token request carries the client secret and
	// the user's code or refresh token.
	Development bool
	// ClientMetadataURL is the https URL where the gateway's client
	// metadata document (Manager.ClientMetadata, served by the connections
	// pages at <ConnectURL>/client-metadata.json) is published: with an
	// authorization server whose metadata says
	// client_id_metadata_document_supported, it is the gateway's client_id
	// there instead of a registration (a configured client_id still wins).
	// It must reach the document the pages serve. Default none: the
	// gateway registers (RFC 7591).
	ClientMetadataURL string
	// Now and Rand are the clock and randomness; tests inject them.
	Now  func() time.Time
	Rand io.Reader
}

// Manager resolves the calling user's credential for a source and runs the
// connections pages. It is safe for concurrent use.
type Manager struct {
	specs   map[string]*specState
	order   []string
	vault   *Vault
	store   Store
	opts    Options
	connect *url.URL
	log     *zap.Logger
	now     func() time.Time
	rand    io.Reader
	// transports are the ones guardedClient made, closed by Close.
	transports []*http.Transport

	mu           sync.Mutex
	flights      map[string]*flight
	touched      map[string]time.Time
	placed       map[string]Owner // hash of service and secret: whose (Transport)
	listeners    map[int]func(service, user string, authorize func(*http.Request) error)
	nextListener int
}

type specState struct {
	spec   Spec
	client *http.Client // talks to the spec's upstream (dial.go)
	mu     sync.Mutex
	meta   asMetadata
	metaAt time.Time
	warned map[string]warned // by log message: upstreamWarn's last line
	// regMu serializes this gateway's registrations for the spec (one
	// client for a burst of first connections).
	regMu sync.Mutex
}

type warned struct {
	err string
	at  time.Time
}

type flight struct {
	done chan struct{}
	rec  *Record
	err  error
}

// NewManager checks the specs and builds a manager.
func NewManager(specs []Spec, opts *Options) (*Manager, error) {
	if opts == nil || opts.Store == nil || opts.Keys == nil {
		return nil, errors.New("credential: a store and a keyring are required")
	}
	o := *opts
	if o.ConnectionTTL <= 0 {
		o.ConnectionTTL = DefaultConnectionTTL
	}
	if o.RefreshBefore <= 0 {
		o.RefreshBefore = DefaultRefreshBefore
	}
	if o.SessionTTL <= 0 {
		o.SessionTTL = DefaultSessionTTL
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Rand == nil {
		o.Rand = rand.Reader
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	m := &Manager{specs: make(map[string]*specState, len(specs)), store: o.Store, opts: o, log: o.Logger,
		now: o.Now, rand: o.Rand, flights: map[string]*flight{}, touched: map[string]time.Time{}, placed: map[string]Owner{},
		listeners: map[int]func(string, string, func(*http.Request) error){}}
	client := o.HTTPClient
	if client == nil {
		client = &http.Client{Timeout: 15 * time.Second}
	}
	if o.ConnectURL != "" {
		u, err := url.Parse(strings.TrimSuffix(o.ConnectURL, "/"))
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return nil, fmt.Errorf("credential: connect URL %q is not an absolute http(s) URL", o.ConnectURL)
		}
		m.connect = u
	}
	if o.ClientMetadataURL != "" {
		if err := checkClientMetadataURL(o.ClientMetadataURL); err != nil {
			return nil, err
		}
		if m.connect == nil {
			return nil, errors.New("credential: a client metadata URL needs the connect URL (its document lists the connections' redirect URIs)")
		}
	}
	for _, s := range specs {
		if err := s.Validate(); err != nil {
			return nil, err
		}
		if _, dup := m.specs[s.Service]; dup {
			return nil, fmt.Errorf("credential: service %q is configured twice", s.Service)
		}
		if err := checkConfiguredURLs(s, o.Development); err != nil {
			return nil, err
		}
		if s.OAuth != nil {
			o := *s.OAuth
			o.Scopes = append([]string(nil), o.Scopes...)
			s.OAuth = &o
		}
		c, tr := guardedClient(client, s)
		if tr != nil {
			m.transports = append(m.transports, tr)
		}
		m.specs[s.Service] = &specState{spec: s, client: c}
		m.order = append(m.order, s.Service)
	}
	m.vault = NewVault(o.Store, o.Keys, o.Rand, o.ConnectionTTL)
	return m, nil
}

// checkConfiguredURLs applies the rule of endpoints.go to the URLs a spec
// configures, and checks that a shared redirect URI can be told apart.
func checkConfiguredURLs(s Spec, development bool) error {
	o := s.OAuth
	if o == nil {
		return nil
	}
	for _, c := range []struct{ what, u string }{{"authorization_server", o.AuthorizationServer},
		{"authorization_endpoint", o.AuthorizationEndpoint}, {"token_endpoint", o.TokenEndpoint},
		{"revocation_endpoint", o.RevocationEndpoint}} {
		if c.u == "" {
			continue
		}
		if err := configuredURL(s.Service, c.what, c.u, development); err != nil {
			return err
		}
	}
	if resourceRoot(s) {
		if err := configuredURL(s.Service, "the MCP server", s.Resource, development); err != nil {
			return err
		}
	}
	if o.SharedCallback && o.AuthorizationServer == "" && !resourceRoot(s) {
		return fmt.Errorf("credential %q: callback shared needs an authorization server that names itself (iss, RFC 9207), "+
			"so authorization_server or discovery from the MCP server; with only the endpoints configured the service needs its own redirect URI", s.Service)
	}
	return nil
}

// resourceRoot reports whether the spec's authorization server is found
// through its MCP server's protected resource metadata (RFC 9728).
func resourceRoot(s Spec) bool {
	o := s.OAuth
	return o != nil && o.AuthorizationServer == "" && (o.AuthorizationEndpoint == "" || o.TokenEndpoint == "") && s.Resource != ""
}

// Close closes the idle connections of the transports the manager made
// for its services. The manager still works afterwards (it connects again
// as needed).
func (m *Manager) Close() {
	for _, tr := range m.transports {
		tr.CloseIdleConnections()
	}
}

// Vault is the manager's vault (for key rotation and tests).
func (m *Manager) Vault() *Vault { return m.vault }

// Spec returns the spec of service, if it takes user credentials.
func (m *Manager) Spec(service string) (Spec, bool) {
	st, ok := m.specs[service]
	if !ok {
		return Spec{}, false
	}
	return st.spec, true
}

// ConnectURL is where a user connects service (the connections page with
// that service in front).
func (m *Manager) ConnectURL(service string) string {
	if m.connect == nil {
		return ""
	}
	return m.connect.String() + "/" + url.PathEscape(service)
}

// Owner is the user whose credentials a record holds: the subject at an
// issuer.
type Owner struct {
	Issuer  string
	Subject string
}

// Key is the owner's id in storage: a hash, so a dump of the store names
// nobody.
func (o Owner) Key() string {
	sum := sha256.Sum256([]byte(o.Issuer + "\x00" + o.Subject))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// OwnerFrom returns the owner of the identity in ctx.
func OwnerFrom(ctx context.Context) (Owner, bool) {
	id, ok := identity.From(ctx)
	if !ok {
		return Owner{}, false
	}
	return Owner{Issuer: id.Issuer, Subject: id.Subject}, true
}

// errNoCredential is an owner without a record (user_or_static falls back).
var errNoCredential = errors.New("no credential")

// Authorize puts the calling user's credential for service on req. It
// reports false, with no error, when req should go out as it is: service
// takes no user credentials, or it is user_or_static and the caller has
// none. A user source without a usable credential gives an *Error with
// CREDENTIAL_REQUIRED and the connect URL.
func (m *Manager) Authorize(ctx context.Context, service string, req *http.Request) (bool, error) {
	st, ok := m.specs[service]
	if !ok {
		return false, nil
	}
	owner, ok := OwnerFrom(ctx)
	if !ok {
		if st.spec.Mode == ModeUserOrStatic {
			return false, nil
		}
		return false, m.required(service, service+" acts as the signed-in user and this call has no signed-in user; sign in to the gateway", nil)
	}
	secret, err := m.secret(ctx, owner, st)
	if errors.Is(err, errNoCredential) {
		if st.spec.Mode == ModeUserOrStatic {
			return false, nil
		}
		return false, m.required(service, service+" needs your own account and you have not connected it", nil)
	}
	if err != nil {
		return false, err
	}
	apply(req, st.spec.Apply, secret)
	return true, nil
}

// SessionFor is Authorize for a long-lived connection (an upstream MCP
// session per user): it reports the owner key the connection belongs to
// ("" when the shared connection should be used) and a function that
// places the owner's current credential on each of its requests.
func (m *Manager) SessionFor(ctx context.Context, service string) (owner string, authorize func(*http.Request) error, err error) {
	st, ok := m.specs[service]
	if !ok {
		return "", nil, nil
	}
	o, ok := OwnerFrom(ctx)
	if !ok {
		if st.spec.Mode == ModeUserOrStatic {
			return "", nil, nil
		}
		return "", nil, m.required(service, service+" acts as the signed-in user and this call has no signed-in user; sign in to the gateway", nil)
	}
	if _, err := m.secret(ctx, o, st); errors.Is(err, errNoCredential) {
		if st.spec.Mode == ModeUserOrStatic {
			return "", nil, nil
		}
		return "", nil, m.required(service, service+" needs your own account and you have not connected it", nil)
	} else if err != nil {
		return "", nil, err
	}
	return o.Key(), m.authorizer(o, st), nil
}

// authorizer places o's current credential for the source on a request.
func (m *Manager) authorizer(o Owner, st *specState) func(*http.Request) error {
	service := st.spec.Service
	return func(r *http.Request) error {
		secret, err := m.secret(r.Context(), o, st)
		if errors.Is(err, errNoCredential) {
			return m.required(service, service+" needs your own account and it is no longer connected", nil)
		}
		if err != nil {
			return err
		}
		if st.spec.Kind == KindOAuth {
			m.remember(st, o, secret)
		}
		apply(r, st.spec.Apply, secret)
		return nil
	}
}

// OnConnect registers fn, called after a user connects a service through
// this gateway's pages (with the user key and the function that places the
// user's credential, as SessionFor gives them); it returns the removal.
// An upstream MCP server that lists its tools for signed-in users only
// uses it to read its list over the first connection.
func (m *Manager) OnConnect(fn func(service, user string, authorize func(*http.Request) error)) (remove func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	id := m.nextListener
	m.nextListener++
	m.listeners[id] = fn
	return func() {
		m.mu.Lock()
		delete(m.listeners, id)
		m.mu.Unlock()
	}
}

func (m *Manager) connected(o Owner, st *specState) {
	m.mu.Lock()
	fns := make([]func(string, string, func(*http.Request) error), 0, len(m.listeners))
	for _, fn := range m.listeners {
		fns = append(fns, fn)
	}
	m.mu.Unlock()
	for _, fn := range fns {
		fn(st.spec.Service, o.Key(), m.authorizer(o, st))
	}
}

// Store is the manager's store (the Caddy side keeps upstream tool lists
// there for other gateways).
func (m *Manager) Store() Store { return m.store }

// apply places secret on r.
func apply(r *http.Request, a Apply, secret string) {
	if a.Query != "" {
		q := r.URL.Query()
		q.Set(a.Query, secret)
		r.URL.RawQuery = q.Encode()
		return
	}
	name, scheme := a.header()
	if scheme != "" {
		secret = scheme + " " + secret
	}
	r.Header.Set(name, secret)
}

// secret returns the owner's current credential for the source, refreshing
// an OAuth access token that is about to expire.
func (m *Manager) secret(ctx context.Context, o Owner, st *specState) (string, error) {
	svc := st.spec.Service
	ok := o.Key()
	rec, err := m.vault.Get(ctx, ok, svc)
	switch {
	case errors.Is(err, ErrNotFound):
		return "", errNoCredential
	case errors.Is(err, ErrUnreadable):
		return "", m.required(svc, "the stored credential for "+svc+" can no longer be read (the vault key changed)", err)
	case err != nil:
		return "", unavailable(svc, err)
	}
	if rec.Kind != st.spec.Kind {
		return "", m.required(svc, svc+" now takes a different kind of credential", nil)
	}
	m.touch(ctx, ok, svc)
	if rec.Kind == KindAPIKey {
		return rec.APIKey, nil
	}
	if !m.dueForRefresh(rec) {
		return rec.AccessToken, nil
	}
	if rec.RefreshToken == "" {
		if !m.expired(rec) {
			return rec.AccessToken, nil
		}
		_ = m.vault.Delete(ctx, ok, svc)
		return "", m.required(svc, "your "+svc+" connection expired", nil)
	}
	rec, err = m.refresh(ctx, ok, st, rec)
	if err != nil {
		return "", err
	}
	return rec.AccessToken, nil
}

func (m *Manager) dueForRefresh(r *Record) bool {
	return !r.Expiry.IsZero() && !m.now().Before(r.Expiry.Add(-m.opts.RefreshBefore))
}

func (m *Manager) expired(r *Record) bool {
	return !r.Expiry.IsZero() && !m.now().Before(r.Expiry)
}

// touch renews a connection's lifetime at most once per touchEvery.
func (m *Manager) touch(ctx context.Context, owner, svc string) {
	k := owner + ":" + svc
	now := m.now()
	m.mu.Lock()
	last, seen := m.touched[k]
	if seen && now.Sub(last) < touchEvery {
		m.mu.Unlock()
		return
	}
	if len(m.touched) > 10000 {
		clear(m.touched)
	}
	m.touched[k] = now
	m.mu.Unlock()
	if seen { // a fresh write already set the full lifetime
		_ = m.vault.Touch(ctx, owner, svc)
	}
}

// refresh renews an OAuth access token once per gateway at a time (one
// flight per owner and service) and once across gateways (a lock in the
// store): the upstream rotates refresh tokens, and two refreshes with the
// same token would look like theft to it.
func (m *Manager) refresh(ctx context.Context, owner string, st *specState, seen *Record) (*Record, error) {
	k := owner + ":" + st.spec.Service
	m.mu.Lock()
	if f, ok := m.flights[k]; ok {
		m.mu.Unlock()
		select {
		case <-f.done:
			return f.rec, f.err
		case <-ctx.Done():
			return nil, unavailable(st.spec.Service, ctx.Err())
		}
	}
	f := &flight{done: make(chan struct{})}
	m.flights[k] = f
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.flights, k)
		m.mu.Unlock()
		close(f.done)
	}()
	// The flight serves every waiter: it does not end with the first
	// caller's request.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), refreshLockTTL)
	defer cancel()
	f.rec, f.err = m.refreshLocked(fctx, owner, st, seen)
	return f.rec, f.err
}

func (m *Manager) refreshLocked(ctx context.Context, owner string, st *specState, seen *Record) (*Record, error) {
	svc := st.spec.Service
	lockKey := "lock:" + owner + ":" + svc
	token := m.randomToken()
	deadline := m.now().Add(refreshWait)
	for {
		got, err := m.store.SetNX(ctx, lockKey, []byte(token), refreshLockTTL)
		if err != nil {
			if !m.expired(seen) {
				return seen, nil
			}
			return nil, unavailable(svc, err)
		}
		if got {
			break
		}
		// Another gateway is refreshing: the current token still works
		// meanwhile; an expired one waits for the new one.
		if !m.expired(seen) {
			return seen, nil
		}
		if cur, err := m.vault.Get(ctx, owner, svc); err == nil && cur.AccessToken != seen.AccessToken {
			return cur, nil
		} else if errors.Is(err, ErrNotFound) {
			return nil, m.required(svc, svc+" needs your own account and it is no longer connected", nil)
		}
		if m.now().After(deadline) {
			return nil, unavailable(svc, errors.New("waiting for another gateway's refresh"))
		}
		select {
		case <-ctx.Done():
			return nil, unavailable(svc, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	defer func() {
		_, _ = m.store.CompareAndSwap(context.WithoutCancel(ctx), lockKey, []byte(token), nil, 0)
	}()

	cur, sealed, err := m.vault.getSealed(ctx, owner, svc)
	switch {
	case errors.Is(err, ErrNotFound):
		return nil, m.required(svc, svc+" needs your own account and it is no longer connected", nil)
	case err != nil:
		return nil, unavailable(svc, err)
	}
	if cur.AccessToken != seen.AccessToken && !m.dueForRefresh(cur) {
		return cur, nil // refreshed elsewhere between our read and the lock
	}
	meta, err := m.endpoints(ctx, st)
	if err != nil {
		if ErrorCode(err) != CodeEndpointRefused { // logged by endpoints
			m.upstreamWarn(st, "refreshing a connection: authorization server metadata unavailable", err)
		}
		if !m.expired(cur) {
			return cur, nil
		}
		if ErrorCode(err) == CodeEndpointRefused {
			return nil, err // the refresh token is not sent there; retrying will not help
		}
		return nil, unavailable(svc, err)
	}
	// A refresh token is the client's at the server that issued it: when
	// the MCP server now names another authorization server, or the
	// gateway's registration there changed, it is not sent, and the user
	// connects again (SEP-2352).
	client, err := m.client(ctx, st, meta)
	if err == nil && !cur.issuedBy(meta.Issuer, client.ID) {
		err = m.required(svc, "your "+svc+" connection was made with another authorization server or client", errRegistrationChanged)
		m.log.Info("a connection's authorization server or client changed; the user must connect again", zap.String("service", svc))
		_, _ = m.store.CompareAndSwap(ctx, vaultKeyOf(owner, svc), sealed, nil, 0)
		return nil, err
	}
	if err != nil {
		if !m.expired(cur) {
			return cur, nil
		}
		return nil, err
	}
	form := url.Values{"grant_type": {"refresh_token"}, "refresh_token": {cur.RefreshToken}}
	if r := m.resource(st, meta); r != "" {
		form.Set("resource", r)
	}
	tr, err := m.tokenRequest(ctx, st, client, meta.TokenEndpoint, form)
	if err != nil {
		if ErrorCode(err) == CodeEndpointRefused {
			m.logRefused(st, err)
			if !m.expired(cur) {
				return cur, nil
			}
			return nil, err // the refresh token was not sent; retrying will not help
		}
		if refused(err) {
			m.log.Info("upstream refused to refresh a connection; the user must connect again", zap.String("service", svc), zap.Error(err))
			_, _ = m.store.CompareAndSwap(ctx, vaultKeyOf(owner, svc), sealed, nil, 0)
			return nil, m.required(svc, "your "+svc+" connection was refused by "+svc+" (expired or revoked)", err)
		}
		m.log.Warn("refreshing a connection failed", zap.String("service", svc), zap.Error(err))
		if !m.expired(cur) {
			return cur, nil
		}
		return nil, unavailable(svc, err)
	}
	next := m.record(tr, cur)
	for range 3 {
		ok, err := m.vault.replace(ctx, owner, svc, sealed, next)
		if err != nil {
			return nil, unavailable(svc, err)
		}
		if ok {
			return next, nil
		}
		// The record changed under the lock: re-sealed by a key rotation
		// (same tokens: write again), disconnected or connected anew
		// (theirs wins; the tokens just obtained are given back).
		again, s2, err := m.vault.getSealed(ctx, owner, svc)
		if err == nil && again.RefreshToken == cur.RefreshToken {
			sealed = s2
			continue
		}
		go m.revokeRecord(context.WithoutCancel(ctx), st, next)
		if errors.Is(err, ErrNotFound) {
			return nil, m.required(svc, svc+" needs your own account and it is no longer connected", nil)
		}
		if err != nil {
			return nil, unavailable(svc, err)
		}
		return again, nil
	}
	return nil, unavailable(svc, errors.New("the connection kept changing during a refresh"))
}

// resource is the RFC 8707 resource indicator sent to the upstream: the
// configured one, else the resource identifier the MCP server's RFC 9728
// document names, exactly as published (a document at the root names the
// origin: ownDocument), else the MCP server's URL; none for an OpenAPI
// source without one configured.
func (m *Manager) resource(st *specState, meta asMetadata) string {
	if st.spec.OAuth != nil && st.spec.OAuth.Resource != "" {
		return st.spec.OAuth.Resource
	}
	if meta.resource != "" {
		return meta.resource
	}
	return st.spec.Resource
}

// revokeRecord revokes an OAuth record's tokens at the upstream, best effort.
func (m *Manager) revokeRecord(ctx context.Context, st *specState, rec *Record) {
	if rec == nil || rec.Kind != KindOAuth || st.spec.OAuth == nil {
		return
	}
	meta, err := m.endpoints(ctx, st)
	if err != nil || meta.RevocationEndpoint == "" {
		return
	}
	client, err := m.client(ctx, st, meta)
	if err != nil || !rec.issuedBy(meta.Issuer, client.ID) {
		return // another server's tokens are not shown to this one
	}
	// The refresh token first: revoking it ends the grant at most servers.
	if err := m.revoke(ctx, st, client, meta.RevocationEndpoint, rec.RefreshToken, "refresh_token"); err != nil {
		m.log.Info("revoking an upstream refresh token failed", zap.String("service", st.spec.Service), zap.Error(err))
	}
	if err := m.revoke(ctx, st, client, meta.RevocationEndpoint, rec.AccessToken, "access_token"); err != nil {
		m.log.Info("revoking an upstream access token failed", zap.String("service", st.spec.Service), zap.Error(err))
	}
}

// Disconnect forgets the owner's credential for service, after revoking it
// at the upstream when it is an OAuth connection with a revocation
// endpoint.
func (m *Manager) Disconnect(ctx context.Context, o Owner, service string) error {
	st, ok := m.specs[service]
	if !ok {
		return fmt.Errorf("credential: unknown service %q", service)
	}
	rec, err := m.vault.Get(ctx, o.Key(), service)
	if err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrUnreadable) {
		return err
	}
	if err := m.vault.Delete(ctx, o.Key(), service); err != nil {
		return err
	}
	if rec != nil {
		m.revokeRecord(ctx, st, rec)
	}
	m.log.Info("connection removed", zap.String("service", service))
	return nil
}

// Forget removes every credential of the owner (the gateway session was
// revoked, perhaps because its refresh token was stolen), revoking OAuth
// tokens at the upstreams in the background.
func (m *Manager) Forget(ctx context.Context, o Owner) error {
	var errs []error
	for _, svc := range m.order {
		st := m.specs[svc]
		rec, err := m.vault.Get(ctx, o.Key(), svc)
		if err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrUnreadable) {
			errs = append(errs, err)
		}
		if err := m.vault.Delete(ctx, o.Key(), svc); err != nil {
			errs = append(errs, err)
			continue
		}
		if rec != nil && rec.Kind == KindOAuth {
			go m.revokeRecord(context.WithoutCancel(ctx), st, rec)
		}
	}
	return errors.Join(errs...)
}

// Connection describes one of a user's connections (for the page; no
// secret).
type Connection struct {
	Service     string
	Title       string
	Kind        string
	Connected   bool
	Unreadable  bool
	ConnectedAt time.Time
	Expiry      time.Time
	Scope       string
	Hint        string
}

// Connections lists the owner's connections, one per user source.
func (m *Manager) Connections(ctx context.Context, o Owner) ([]Connection, error) {
	out := make([]Connection, 0, len(m.order))
	for _, svc := range m.order {
		st := m.specs[svc]
		c := Connection{Service: svc, Title: st.spec.title(), Kind: st.spec.Kind, Hint: st.spec.Hint}
		rec, err := m.vault.Get(ctx, o.Key(), svc)
		switch {
		case err == nil:
			c.Connected, c.ConnectedAt, c.Expiry, c.Scope = true, rec.ConnectedAt, rec.Expiry, rec.Scope
		case errors.Is(err, ErrUnreadable):
			c.Unreadable = true
		case !errors.Is(err, ErrNotFound):
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// PutAPIKey stores a pasted API key as the owner's credential for service.
func (m *Manager) PutAPIKey(ctx context.Context, o Owner, service, key string) error {
	st, ok := m.specs[service]
	if !ok || st.spec.Kind != KindAPIKey {
		return fmt.Errorf("credential: %q does not take an API key", service)
	}
	if !validAPIKey(key) {
		return &Error{Code: CodeAPIKeyInvalid, Service: service,
			Message: "an API key is 1 to 4096 bytes of UTF-8, every character printable (no line break or invisible character)"}
	}
	if err := m.vault.Put(ctx, o.Key(), service, &Record{Kind: KindAPIKey, APIKey: key, ConnectedAt: m.now()}); err != nil {
		return err
	}
	m.connected(o, st)
	return nil
}

func (m *Manager) randomToken() string {
	b := make([]byte, 32)
	if _, err := io.ReadFull(m.rand, b); err != nil {
		panic("credential: reading randomness: " + err.Error())
	}
	return base64.RawURLEncoding.EncodeToString(b)
}
