package credential

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"go.uber.org/zap"
	"golang.org/x/oauth2"

	"github.com/codemode-gateway/caddy-codemode/internal/clip"
)

// SignIn tells the connections page who is at the browser: an OpenID
// Connect authorization code flow with PKCE against the gateway's own
// authorization server, or the external identity provider in transparent
// mode.
type SignIn interface {
	// AuthCodeURL is where the browser goes to sign in; the server sends
	// it back to redirectURI with a code and state. An error whose code is
	// CodeIssuerMismatch (the provider's metadata names another issuer),
	// here or from Exchange, is shown on the page with that code.
	AuthCodeURL(ctx context.Context, redirectURI, state, nonce, codeChallenge string) (string, error)
	// Exchange redeems the code and returns who signed in.
	Exchange(ctx context.Context, redirectURI, code, codeVerifier, nonce string) (Owner, error)
}

// pendingTTL bounds a sign-in or a connection started and not finished.
const pendingTTL = 10 * time.Minute

// maxAPIKey is the longest API key accepted.
const maxAPIKey = 4096

// browserSession is a sign-in on the connections page.
type browserSession struct {
	Issuer  string    `json:"iss"`
	Subject string    `json:"sub"`
	CSRF    string    `json:"csrf"`
	Expires time.Time `json:"exp"`
}

func (s *browserSession) owner() Owner { return Owner{Issuer: s.Issuer, Subject: s.Subject} }

// pendingSignIn is a sign-in started at the authorization server. It is
// kept in the browser that started it, sealed with the vault key in the
// sign-in cookie, not in the storage: starting a sign-in is the answer to
// any anonymous GET of the page, and a record per request let a stranger
// with many addresses grow the storage without bound (344 bytes on Redis
// for 10 minutes each).
type pendingSignIn struct {
	State    string    `json:"state"` // hash of the state sent to the server
	Verifier string    `json:"verifier"`
	Nonce    string    `json:"nonce"`
	Next     string    `json:"next"`
	Expires  time.Time `json:"exp"`
}

// signInAAD binds a sealed pending sign-in to its use.
var signInAAD = []byte("codemode connections: pending sign-in")

// pendingConnect is a connection started at an upstream.
type pendingConnect struct {
	Session  string `json:"session"` // hash of the browser's session cookie
	Service  string `json:"service"`
	Verifier string `json:"verifier"`
	Issuer   string `json:"issuer,omitempty"`
	// RequireIss: the issuer's metadata says it sends iss (RFC 9207).
	RequireIss bool `json:"require_iss,omitempty"`
	// IssuerConfigured: Issuer is the operator's authorization_server
	// (every endpoint configured, no metadata read), whose trailing slash
	// is the operator's spelling; an issuer from metadata is compared
	// exactly.
	IssuerConfigured bool `json:"issuer_configured,omitempty"`
	// Redirect is the redirect URI the connection was started with, the
	// only one its answer is taken at; "" (a connection started before the
	// sixteenth pass) means the shared one.
	Redirect string `json:"redirect,omitempty"`
	// ClientID is the gateway's client the connection started with (the
	// configured or the registered one); its code is redeemed only by it.
	ClientID string `json:"client_id,omitempty"`
	// Scope is the scope asked for.
	Scope string `json:"scope,omitempty"`
	// Resource is the resource indicator asked for (RFC 8707), sent again
	// with the code.
	Resource string `json:"resource,omitempty"`
}

func hashOf(s string) string {
	sum := sha256.Sum256([]byte(s))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

func (m *Manager) secureCookies() bool { return m.connect != nil && m.connect.Scheme == "https" }

func (m *Manager) cookieName(suffix string) string {
	if m.secureCookies() {
		return "__Host-codemode_connections" + suffix
	}
	return "codemode_connections" + suffix
}

func (m *Manager) setCookie(w http.ResponseWriter, suffix, value string, maxAge time.Duration) {
	path := "/"
	if !m.secureCookies() {
		path = m.basePath()
	}
	c := &http.Cookie{Name: m.cookieName(suffix), Value: value, Path: path, HttpOnly: true, Secure: m.secureCookies(),
		SameSite: http.SameSiteLaxMode, MaxAge: int(maxAge / time.Second)}
	if maxAge < 0 {
		c.MaxAge = -1
	}
	http.SetCookie(w, c)
}

func (m *Manager) basePath() string {
	if m.connect == nil || m.connect.Path == "" {
		return "/"
	}
	return m.connect.Path
}

func (m *Manager) pageURL(rel string) string { return m.connect.String() + rel }

// RedirectURI is the redirect URI the gateway sends to service's
// authorization server, the one to register there: the service's own
// <connect URL>/callback/<service>, or the shared <connect URL>/callback
// when its OAuthClient.SharedCallback is set. "" without a connect URL or
// for a service that does not connect with OAuth.
func (m *Manager) RedirectURI(service string) string {
	st, ok := m.specs[service]
	if !ok || m.connect == nil || st.spec.OAuth == nil {
		return ""
	}
	return m.redirectURI(st)
}

func (m *Manager) redirectURI(st *specState) string {
	if st.spec.OAuth.SharedCallback {
		return m.pageURL("/callback")
	}
	return m.pageURL("/callback/" + url.PathEscape(st.spec.Service))
}

// Handler serves the connections pages below the connect URL's path:
//
//	GET  {base}[/{service}]           the user's connections (signs in first)
//	GET  {base}/signin/callback       end of the sign-in
//	POST {base}/{service}/connect     start an OAuth connection (form, CSRF)
//	GET  {base}/callback/{service}    end of an OAuth connection
//	GET  {base}/callback              the same, for services that share it
//	POST {base}/{service}/api_key     store a pasted key (form, CSRF)
//	POST {base}/{service}/disconnect  revoke and forget (form, CSRF)
//	POST {base}/signout               end the page's sign-in
//	GET  {base}/client-metadata.json  the gateway's client metadata document (cimd.go)
func (m *Manager) Handler() http.Handler {
	return http.HandlerFunc(m.serve)
}

func (m *Manager) serve(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	// same-origin, not no-referrer: with no-referrer browsers send
	// "Origin: null" on the page's own form posts, a value a hostile page
	// can produce too, so it could not be refused.
	h.Set("Referrer-Policy", "same-origin")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	if m.connect != nil && r.URL.Path == strings.TrimSuffix(m.basePath(), "/")+"/"+clientMetadataName {
		m.serveClientMetadata(w, r) // public: an authorization server reads it, signed in or not
		return
	}
	if m.connect == nil || m.opts.SignIn == nil {
		m.page(w, r, http.StatusServiceUnavailable, pageData{Error: "Connections are not configured on this gateway."})
		return
	}
	base := strings.TrimSuffix(m.basePath(), "/")
	rest, ok := strings.CutPrefix(r.URL.Path, base)
	if !ok || (rest != "" && !strings.HasPrefix(rest, "/")) {
		http.NotFound(w, r)
		return
	}
	parts := strings.Split(strings.Trim(rest, "/"), "/")
	if parts[0] == "" {
		parts = nil
	}
	switch {
	case len(parts) == 2 && parts[0] == "signin" && parts[1] == "callback" && r.Method == http.MethodGet:
		m.signInCallback(w, r)
	case len(parts) == 1 && parts[0] == "callback" && r.Method == http.MethodGet:
		m.connectCallback(w, r, m.pageURL("/callback"))
	case len(parts) == 2 && parts[0] == "callback" && r.Method == http.MethodGet:
		m.connectCallback(w, r, m.pageURL("/callback/"+url.PathEscape(parts[1])))
	case len(parts) == 1 && parts[0] == "signout" && r.Method == http.MethodPost:
		m.signOut(w, r)
	case len(parts) <= 1 && r.Method == http.MethodGet:
		focus := ""
		if len(parts) == 1 {
			focus = parts[0]
			if _, ok := m.specs[focus]; !ok {
				m.page(w, r, http.StatusNotFound, pageData{Error: "This gateway has no connection by that name."})
				return
			}
		}
		m.list(w, r, focus)
	case len(parts) == 2 && r.Method == http.MethodPost:
		st, ok := m.specs[parts[0]]
		if !ok {
			m.page(w, r, http.StatusNotFound, pageData{Error: "This gateway has no connection by that name."})
			return
		}
		switch parts[1] {
		case "connect":
			m.startConnect(w, r, st)
		case "api_key":
			m.saveAPIKey(w, r, st)
		case "disconnect":
			m.disconnect(w, r, st)
		default:
			http.NotFound(w, r)
		}
	case len(parts) <= 2:
		w.Header().Set("Allow", "GET, POST")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	default:
		http.NotFound(w, r)
	}
}

// session returns the browser's sign-in, if any.
func (m *Manager) session(r *http.Request) (*browserSession, string, error) {
	c, err := r.Cookie(m.cookieName(""))
	if err != nil || c.Value == "" {
		return nil, "", nil
	}
	h := hashOf(c.Value)
	b, err := m.store.Get(r.Context(), "session:"+h)
	if errors.Is(err, ErrNotFound) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", err
	}
	var s browserSession
	if err := json.Unmarshal(b, &s); err != nil || !m.now().Before(s.Expires) {
		return nil, "", nil
	}
	return &s, h, nil
}

// list shows the connections, signing in first.
func (m *Manager) list(w http.ResponseWriter, r *http.Request, focus string) {
	s, _, err := m.session(r)
	if err != nil {
		m.fail(w, r, "reading the page session", err)
		return
	}
	if s == nil {
		next := m.basePath()
		if focus != "" {
			next = strings.TrimSuffix(m.basePath(), "/") + "/" + url.PathEscape(focus)
		}
		m.startSignIn(w, r, next)
		return
	}
	conns, err := m.Connections(r.Context(), s.owner())
	if err != nil {
		m.fail(w, r, "reading connections", err)
		return
	}
	d := pageData{Subject: s.Subject, CSRF: s.CSRF, Focus: focus, Base: strings.TrimSuffix(m.basePath(), "/")}
	q := r.URL.Query()
	for _, c := range conns {
		// The notice after a connect or disconnect says what is true: a
		// link naming a service in ?disconnected= showed "... is
		// disconnected." above a connection that was not.
		if q.Get("connected") == c.Service && c.Connected {
			d.Notice = c.Title + " is connected."
		}
		if q.Get("disconnected") == c.Service && !c.Connected {
			d.Notice = c.Title + " is disconnected."
		}
		row := row{Connection: c, Focus: c.Service == focus}
		if c.Kind == KindOAuth {
			meta, err := m.endpoints(r.Context(), m.specs[c.Service])
			if err != nil {
				row.Unavailable = true
				if ErrorCode(err) != CodeEndpointRefused { // logged by endpoints
					m.upstreamWarn(m.specs[c.Service], "connections page: upstream authorization server unavailable", err)
				}
			} else if u, err := url.Parse(meta.AuthorizationEndpoint); err == nil {
				d.formOrigins = append(d.formOrigins, u.Scheme+"://"+u.Host)
			}
		}
		d.Rows = append(d.Rows, row)
	}
	m.page(w, r, http.StatusOK, d)
}

func (m *Manager) startSignIn(w http.ResponseWriter, r *http.Request, next string) {
	state, nonce := m.randomToken(), m.randomToken()
	verifier := oauth2.GenerateVerifier()
	p, _ := json.Marshal(pendingSignIn{State: hashOf(state), Verifier: verifier, Nonce: nonce, Next: next, Expires: m.now().Add(pendingTTL)})
	sealed, err := m.vault.keys.seal(m.rand, p, signInAAD)
	if err != nil {
		m.fail(w, r, "starting the sign-in", err)
		return
	}
	target, err := m.opts.SignIn.AuthCodeURL(r.Context(), m.pageURL("/signin/callback"), state, nonce, oauth2.S256ChallengeFromVerifier(verifier))
	if ErrorCode(err) == CodeIssuerMismatch {
		m.signInRefused(w, r, err)
		return
	}
	if err != nil {
		m.fail(w, r, "starting the sign-in", err)
		return
	}
	m.setCookie(w, "_signin", base64.RawURLEncoding.EncodeToString(sealed), pendingTTL)
	http.Redirect(w, r, target, http.StatusSeeOther)
}

// pendingSignInOf opens the browser's sign-in cookie; nil when it has none
// the key opens.
func (m *Manager) pendingSignInOf(r *http.Request) *pendingSignIn {
	c, err := r.Cookie(m.cookieName("_signin"))
	if err != nil {
		return nil
	}
	sealed, err := base64.RawURLEncoding.DecodeString(c.Value)
	if err != nil {
		return nil
	}
	plain, _, err := m.vault.keys.open(sealed, signInAAD)
	if err != nil {
		return nil
	}
	var p pendingSignIn
	if json.Unmarshal(plain, &p) != nil {
		return nil
	}
	return &p
}

func (m *Manager) signInCallback(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	state := q.Get("state")
	if state == "" {
		m.page(w, r, http.StatusBadRequest, pageData{Error: "The sign-in answer has no state.", Code: CodeStateInvalid})
		return
	}
	p := m.pendingSignInOf(r)
	if p == nil || subtle.ConstantTimeCompare([]byte(hashOf(state)), []byte(p.State)) != 1 {
		// A sign-in answer that another browser started (login CSRF), or
		// one this browser finished already (its cookie is gone).
		m.page(w, r, http.StatusForbidden, pageData{Error: "This sign-in was started in another browser, or is over; open the connections page again.", Code: CodeOtherBrowser})
		return
	}
	m.setCookie(w, "_signin", "", -1)
	if !m.now().Before(p.Expires) {
		m.page(w, r, http.StatusBadRequest, pageData{Error: "This sign-in is unknown or expired; open the connections page again.", Code: CodeStateInvalid})
		return
	}
	if e := q.Get("error"); e != "" {
		m.page(w, r, http.StatusForbidden, pageData{Error: "Sign-in was refused (" + oauthCode(e) + ")."})
		return
	}
	owner, err := m.opts.SignIn.Exchange(r.Context(), m.pageURL("/signin/callback"), q.Get("code"), p.Verifier, p.Nonce)
	if ErrorCode(err) == CodeIssuerMismatch {
		m.signInRefused(w, r, err)
		return
	}
	if err != nil {
		m.log.Warn("connections page: sign-in failed", zap.Error(err))
		m.page(w, r, http.StatusForbidden, pageData{Error: "Sign-in failed; open the connections page again."})
		return
	}
	sid := m.randomToken()
	s, _ := json.Marshal(browserSession{Issuer: owner.Issuer, Subject: owner.Subject, CSRF: m.randomToken(), Expires: m.now().Add(m.opts.SessionTTL)})
	if err := m.store.Set(r.Context(), "session:"+hashOf(sid), s, m.opts.SessionTTL); err != nil {
		m.fail(w, r, "saving the page session", err)
		return
	}
	m.setCookie(w, "", sid, m.opts.SessionTTL)
	next := p.Next
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") {
		next = m.basePath()
	}
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// signInRefused answers a sign-in whose identity provider's metadata is not
// its own (SignIn's CodeIssuerMismatch): the operator's to fix, and
// nothing more is sent there.
func (m *Manager) signInRefused(w http.ResponseWriter, r *http.Request, err error) {
	m.log.Error("connections page: sign-in refused", zap.String("code", CodeIssuerMismatch), zap.Error(err))
	m.page(w, r, http.StatusBadGateway, pageData{Error: "The sign-in's identity provider answers for another issuer; tell the gateway's operator.",
		Code: CodeIssuerMismatch})
}

// checkPost checks a form post of a signed-in browser: same origin and the
// session's CSRF token.
func (m *Manager) checkPost(w http.ResponseWriter, r *http.Request) (*browserSession, string, bool) {
	if o := r.Header.Get("Origin"); o != "" && !strings.EqualFold(o, m.connect.Scheme+"://"+m.connect.Host) {
		m.page(w, r, http.StatusForbidden, pageData{Error: "Cross-site request refused.", Code: CodeCrossSite})
		return nil, "", false
	}
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	if err := r.ParseForm(); err != nil || !validForm(r.Form) {
		m.page(w, r, http.StatusBadRequest, pageData{Error: "The form could not be read.", Code: CodeFormInvalid})
		return nil, "", false
	}
	s, h, err := m.session(r)
	if err != nil {
		m.fail(w, r, "reading the page session", err)
		return nil, "", false
	}
	if s == nil {
		m.page(w, r, http.StatusUnauthorized, pageData{Error: "Your sign-in on this page ended; open the connections page again.", Code: CodePageSignInRequired})
		return nil, "", false
	}
	if subtle.ConstantTimeCompare([]byte(r.PostForm.Get("csrf")), []byte(s.CSRF)) != 1 {
		m.page(w, r, http.StatusForbidden, pageData{Error: "The form is stale or forged; open the connections page again.", Code: CodeCSRFInvalid})
		return nil, "", false
	}
	return s, h, true
}

func (m *Manager) startConnect(w http.ResponseWriter, r *http.Request, st *specState) {
	s, h, ok := m.checkPost(w, r)
	if !ok {
		return
	}
	if st.spec.Kind != KindOAuth {
		m.page(w, r, http.StatusBadRequest, pageData{Error: st.spec.title() + " takes an API key, not a sign-in."})
		return
	}
	meta, err := m.endpoints(r.Context(), st)
	if err != nil {
		m.upstreamUnavailable(w, r, st, err)
		return
	}
	client, err := m.client(r.Context(), st, meta)
	if err != nil {
		m.upstreamUnavailable(w, r, st, err)
		return
	}
	// The configured scopes, else those the MCP server asks for (its 401's
	// scope, else its scopes_supported), else none.
	scope := strings.Join(st.spec.OAuth.Scopes, " ")
	if scope == "" {
		scope = strings.Join(meta.resourceScopes, " ")
	}
	// Step-up: the upstream asked this user's connection for more scopes
	// (Transport); the new one asks for all of them.
	if rec, err := m.vault.Get(r.Context(), s.owner().Key(), st.spec.Service); err == nil && rec.StepUpScope != "" {
		scope = strings.Join(scopeList(slices.Concat(strings.Fields(scope), strings.Fields(rec.StepUpScope))), " ")
	}
	state, verifier, redirect := m.randomToken(), oauth2.GenerateVerifier(), m.redirectURI(st)
	p, _ := json.Marshal(pendingConnect{Session: h, Service: st.spec.Service, Verifier: verifier, Issuer: meta.Issuer,
		RequireIss: meta.Issuer != "" && meta.IssParameterSupported, IssuerConfigured: meta.issuerConfigured, Redirect: redirect,
		ClientID: client.ID, Scope: scope, Resource: m.resource(st, meta)})
	if err := m.store.Set(r.Context(), "connect:"+hashOf(state), p, pendingTTL); err != nil {
		m.fail(w, r, "starting the connection", err)
		return
	}
	v := url.Values{"response_type": {"code"}, "client_id": {client.ID}, "redirect_uri": {redirect},
		"state": {state}, "code_challenge": {oauth2.S256ChallengeFromVerifier(verifier)}, "code_challenge_method": {"S256"}}
	if scope != "" {
		v.Set("scope", scope)
	}
	if res := m.resource(st, meta); res != "" {
		v.Set("resource", res)
	}
	target := meta.AuthorizationEndpoint
	if strings.Contains(target, "?") {
		target += "&" + v.Encode()
	} else {
		target += "?" + v.Encode()
	}
	http.Redirect(w, r, target, http.StatusSeeOther)
}

// upstreamUnavailable answers a page whose upstream's endpoints cannot be
// had: its server is down, or what it names breaks the rule for where a
// client secret and a code may go (UPSTREAM_ENDPOINT_REFUSED, logged by
// logRefused).
func (m *Manager) upstreamUnavailable(w http.ResponseWriter, r *http.Request, st *specState, err error) {
	if ErrorCode(err) == CodeEndpointRefused {
		m.page(w, r, http.StatusBadGateway, pageData{Error: st.spec.title() + "'s sign-in points somewhere this gateway does not send credentials; tell the gateway's operator.",
			Code: CodeEndpointRefused})
		return
	}
	if ErrorCode(err) == CodeRegistrationFailed {
		m.upstreamWarn(st, "connections page: registering at the upstream's authorization server failed", err, zap.String("code", CodeRegistrationFailed))
		m.page(w, r, http.StatusBadGateway, pageData{Error: st.spec.title() + "'s sign-in cannot be used by this gateway (registering at its authorization server failed); tell the gateway's operator.",
			Code: CodeRegistrationFailed})
		return
	}
	m.upstreamWarn(st, "connections page: upstream authorization server unavailable", err)
	m.page(w, r, http.StatusBadGateway, pageData{Error: st.spec.title() + "'s sign-in is unavailable right now; try again later."})
}

// connectCallback takes an upstream's answer that arrived at redirect, the
// redirect URI of the path it was sent to.
func (m *Manager) connectCallback(w http.ResponseWriter, r *http.Request, redirect string) {
	q := r.URL.Query()
	state := q.Get("state")
	if state == "" {
		m.page(w, r, http.StatusBadRequest, pageData{Error: "The answer has no state.", Code: CodeStateInvalid})
		return
	}
	s, h, err := m.session(r)
	if err != nil {
		m.fail(w, r, "reading the page session", err)
		return
	}
	key := "connect:" + hashOf(state)
	b, err := m.store.Get(r.Context(), key)
	if errors.Is(err, ErrNotFound) {
		m.page(w, r, http.StatusBadRequest, pageData{Error: "This connection is unknown or expired; start again from the connections page.", Code: CodeStateInvalid})
		return
	}
	if err != nil {
		m.fail(w, r, "finishing the connection", err)
		return
	}
	var p pendingConnect
	_ = json.Unmarshal(b, &p)
	// The state is bound to the browser's page session: an answer carried
	// to another browser (someone else's account, or a forged link) is
	// refused and does not consume the pending connection.
	if s == nil || subtle.ConstantTimeCompare([]byte(h), []byte(p.Session)) != 1 {
		m.page(w, r, http.StatusForbidden, pageData{Error: "This connection was started in another browser session.", Code: CodeOtherBrowser})
		return
	}
	if _, err := m.store.GetDel(r.Context(), key); err != nil {
		m.page(w, r, http.StatusBadRequest, pageData{Error: "This connection was already finished.", Code: CodeStateInvalid})
		return
	}
	st, ok := m.specs[p.Service]
	if !ok {
		m.page(w, r, http.StatusNotFound, pageData{Error: "This gateway has no connection by that name."})
		return
	}
	// Each service has its own redirect URI (RFC 9700 section 4.4.2): an
	// answer for this connection that arrives at another service's came
	// from another authorization server, which a hostile server of this
	// service sent the browser to with the state it was given (mix-up).
	// Its code is not sent anywhere.
	started := p.Redirect
	if started == "" {
		started = m.pageURL("/callback")
	}
	if redirect != started {
		m.log.Warn("connections page: an answer arrived at another redirect URI (mix-up?)", zap.String("code", CodeRedirectURIMismatch),
			zap.String("service", st.spec.Service), zap.String("arrived_at", r.URL.Path))
		m.page(w, r, http.StatusForbidden, pageData{Error: "The answer for " + st.spec.title() + " came back by another service's way; start again from the connections page.",
			Code: CodeRedirectURIMismatch})
		return
	}
	if e := q.Get("error"); e != "" {
		m.page(w, r, http.StatusForbidden, pageData{Error: st.spec.title() + " did not grant access (" + oauthCode(e) + ")."})
		return
	}
	// RFC 9207: an authorization server that names itself must be the one
	// the connection started at (mix-up defence), and one whose metadata
	// says it names itself must (section 2.4: a client MUST refuse such a
	// server's answer without iss; it was taken before).
	// At the redirect URI several services share, iss is the only way to
	// tell their servers apart: an answer there needs one. The comparison
	// with the issuer of the server's metadata is exact (section 2.4:
	// simple string comparison, RFC 3986 section 6.2.1); a trailing-slash
	// variant was taken until the twenty-second pass. Only an issuer the
	// operator configured without metadata keeps its slash optional.
	iss := q.Get("iss")
	shared := started == m.pageURL("/callback")
	sameIssuer := iss == p.Issuer || p.IssuerConfigured && strings.TrimSuffix(iss, "/") == strings.TrimSuffix(p.Issuer, "/")
	if (iss == "" && (p.RequireIss || shared)) || (shared && p.Issuer == "") || (iss != "" && p.Issuer != "" && !sameIssuer) {
		m.page(w, r, http.StatusForbidden, pageData{Error: "The answer came from another authorization server.", Code: CodeIssuerMismatch})
		return
	}
	meta, err := m.endpoints(r.Context(), st)
	if err != nil {
		m.upstreamUnavailable(w, r, st, err)
		return
	}
	client, err := m.client(r.Context(), st, meta)
	if err != nil {
		m.upstreamUnavailable(w, r, st, err)
		return
	}
	// The code is the client's the connection started with, at the server
	// it started at: not shown to another server, nor redeemed by another
	// client (a registration replaced meanwhile).
	if meta.Issuer != p.Issuer || p.ClientID != "" && client.ID != p.ClientID {
		m.log.Info("connections page: the authorization server or the gateway's client there changed during a connection", zap.String("service", st.spec.Service))
		m.page(w, r, http.StatusConflict, pageData{Error: st.spec.title() + "'s authorization server changed during the connection; start again from the connections page."})
		return
	}
	form := url.Values{"grant_type": {"authorization_code"}, "code": {q.Get("code")}, "redirect_uri": {started},
		"code_verifier": {p.Verifier}}
	// The resource asked for at authorization, in the token request too
	// (RFC 8707 section 2.2); a connection started before the twenty-fifth
	// pass kept none.
	res := p.Resource
	if res == "" {
		res = m.resource(st, meta)
	}
	if res != "" {
		form.Set("resource", res)
	}
	tr, err := m.tokenRequest(r.Context(), st, client, meta.TokenEndpoint, form)
	if err != nil {
		if ErrorCode(err) == CodeEndpointRefused {
			m.logRefused(st, err)
			m.upstreamUnavailable(w, r, st, err)
			return
		}
		m.log.Warn("connections page: code exchange failed", zap.String("service", st.spec.Service), zap.Error(err))
		m.page(w, r, http.StatusBadGateway, pageData{Error: st.spec.title() + " did not give a token; start again from the connections page."})
		return
	}
	rec := m.record(tr, nil)
	rec.Issuer, rec.ClientID, rec.RequestedScope = meta.Issuer, client.ID, p.Scope
	if err := m.vault.Put(r.Context(), s.owner().Key(), st.spec.Service, rec); err != nil {
		m.fail(w, r, "saving the connection", err)
		return
	}
	m.log.Info("connection made", zap.String("service", st.spec.Service), zap.String("kind", KindOAuth))
	m.connected(s.owner(), st)
	http.Redirect(w, r, strings.TrimSuffix(m.basePath(), "/")+"?connected="+url.QueryEscape(st.spec.Service), http.StatusSeeOther)
}

func (m *Manager) saveAPIKey(w http.ResponseWriter, r *http.Request, st *specState) {
	s, _, ok := m.checkPost(w, r)
	if !ok {
		return
	}
	if st.spec.Kind != KindAPIKey {
		m.page(w, r, http.StatusBadRequest, pageData{Error: st.spec.title() + " is connected by signing in, not with a key."})
		return
	}
	key := strings.TrimSpace(r.PostForm.Get("api_key"))
	if !validAPIKey(key) {
		m.page(w, r, http.StatusBadRequest, pageData{Error: "Paste the key as one line of at most 4096 characters, without invisible characters.", Code: CodeAPIKeyInvalid})
		return
	}
	if err := m.PutAPIKey(r.Context(), s.owner(), st.spec.Service, key); err != nil {
		m.fail(w, r, "saving the key", err)
		return
	}
	m.log.Info("connection made", zap.String("service", st.spec.Service), zap.String("kind", KindAPIKey))
	http.Redirect(w, r, strings.TrimSuffix(m.basePath(), "/")+"?connected="+url.QueryEscape(st.spec.Service), http.StatusSeeOther)
}

func (m *Manager) disconnect(w http.ResponseWriter, r *http.Request, st *specState) {
	s, _, ok := m.checkPost(w, r)
	if !ok {
		return
	}
	if err := m.Disconnect(r.Context(), s.owner(), st.spec.Service); err != nil {
		m.fail(w, r, "removing the connection", err)
		return
	}
	http.Redirect(w, r, strings.TrimSuffix(m.basePath(), "/")+"?disconnected="+url.QueryEscape(st.spec.Service), http.StatusSeeOther)
}

func (m *Manager) signOut(w http.ResponseWriter, r *http.Request) {
	_, h, ok := m.checkPost(w, r)
	if !ok {
		return
	}
	if err := m.store.Del(r.Context(), "session:"+h); err != nil {
		m.fail(w, r, "signing out", err)
		return
	}
	m.setCookie(w, "", "", -1)
	m.page(w, r, http.StatusOK, pageData{Notice: "You are signed out of the connections page. Your connections stay."})
}

// validAPIKey reports whether key (trimmed) can be stored as given and sent
// as it was pasted: 1 to maxAPIKey bytes of UTF-8, every character
// printable (unicode.IsPrint: no control character or line break, no
// invisible format character such as U+200B, U+FEFF or a bidirectional
// override, no space but U+0020). The vault stores records as JSON, which
// turned a byte that is not UTF-8 into U+FFFD: the key sent was not the
// key pasted. An invisible character pasted with a key made every call
// fail at the upstream with 401, with nothing on the page to show why.
func validAPIKey(key string) bool {
	if key == "" || len(key) > maxAPIKey || !utf8.ValidString(key) {
		return false
	}
	return !strings.ContainsFunc(key, func(r rune) bool { return !unicode.IsPrint(r) })
}

// validForm reports whether every name and value of a form is UTF-8.
func validForm(form url.Values) bool {
	for k, vs := range form {
		if !utf8.ValidString(k) {
			return false
		}
		for _, v := range vs {
			if !utf8.ValidString(v) {
				return false
			}
		}
	}
	return true
}

// oauthCode keeps an error code from a query string to the characters
// RFC 6749 allows, so nothing else is echoed into the page.
func oauthCode(s string) string {
	s = strings.Map(func(r rune) rune {
		if r >= 0x20 && r <= 0x7e && r != '"' && r != '\\' {
			return r
		}
		return -1
	}, s)
	return clip.Ellipsis(s, 64)
}

func (m *Manager) fail(w http.ResponseWriter, r *http.Request, what string, err error) {
	m.log.Error("connections page: "+what, zap.Error(err))
	m.page(w, r, http.StatusServiceUnavailable, pageData{Error: "The gateway cannot do that right now; try again later."})
}

type pageData struct {
	// Code is the stable code of a refusal (errors.go).
	Code        string
	Subject     string
	CSRF        string
	Base        string
	Focus       string
	Notice      string
	Error       string
	Rows        []row
	formOrigins []string
}

type row struct {
	Connection
	Focus       bool
	Unavailable bool
}

func (m *Manager) page(w http.ResponseWriter, _ *http.Request, status int, d pageData) {
	origins := slices.Compact(slices.Sorted(slices.Values(d.formOrigins)))
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self' "+
		strings.Join(origins, " ")+"; frame-ancestors 'none'; base-uri 'none'")
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_ = pageTemplate.Execute(w, d)
}

var pageTemplate = template.Must(template.New("connections").Funcs(template.FuncMap{
	"when": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format("2006-01-02 15:04 UTC")
	},
}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Connections</title>
<style>
body{font:16px/1.5 system-ui,sans-serif;max-width:44rem;margin:2rem auto;padding:0 1rem;color:#222}
table{border-collapse:collapse;width:100%}td,th{padding:.5rem;border-bottom:1px solid #ddd;text-align:left;vertical-align:top}
tr.focus{background:#fff7d6}.ok{color:#17692c}.no{color:#8a1c1c}.notice{background:#e8f5e9;padding:.5rem}.error{background:#fdecea;padding:.5rem}
form{display:inline}input[type=password]{width:14rem}small{color:#666}
</style></head><body>
<h1>Connections</h1>
{{if .Notice}}<p class="notice" id="notice">{{.Notice}}</p>{{end}}
{{if .Error}}<p class="error" id="error">{{.Error}}</p>{{if .Code}}<p>Code: <code id="code">{{.Code}}</code></p>{{end}}{{end}}
{{if .Subject}}
<p>Signed in as <strong id="subject">{{.Subject}}</strong>. Plans you run through the gateway call these services as you.</p>
<table><thead><tr><th>Service</th><th>Status</th><th></th></tr></thead><tbody>
{{range .Rows}}<tr id="svc-{{.Service}}"{{if .Focus}} class="focus"{{end}}>
<td><strong>{{.Title}}</strong>{{if .Hint}}<br><small>{{.Hint}}</small>{{end}}</td>
<td>{{if .Connected}}<span class="ok status">connected</span><br><small>since {{when .ConnectedAt}}{{if .Scope}}; scopes {{.Scope}}{{end}}</small>
{{else if .Unreadable}}<span class="no status">unreadable; connect again</span>
{{else}}<span class="no status">not connected</span>{{end}}</td>
<td>{{if .Connected}}<form method="post" action="{{$.Base}}/{{.Service}}/disconnect"><input type="hidden" name="csrf" value="{{$.CSRF}}"><button type="submit" name="disconnect">Disconnect</button></form>
{{else if eq .Kind "oauth"}}{{if .Unavailable}}<small>sign-in unavailable right now</small>{{else}}<form method="post" action="{{$.Base}}/{{.Service}}/connect"><input type="hidden" name="csrf" value="{{$.CSRF}}"><button type="submit" name="connect">Connect</button></form>{{end}}
{{else}}<form method="post" action="{{$.Base}}/{{.Service}}/api_key"><input type="hidden" name="csrf" value="{{$.CSRF}}"><input type="password" name="api_key" autocomplete="off" required aria-label="API key for {{.Title}}"> <button type="submit" name="save">Save key</button></form>{{end}}</td>
</tr>{{end}}
</tbody></table>
<p><form method="post" action="{{.Base}}/signout"><input type="hidden" name="csrf" value="{{.CSRF}}"><button type="submit" name="signout">Sign out of this page</button></form></p>
{{end}}
</body></html>
`))
