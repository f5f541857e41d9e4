package oauth

import (
	"context"
	"crypto/subtle"
	"errors"
	"html/template"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"time"

	"go.uber.org/zap"
	"golang.org/x/crypto/bcrypt"
)

// DemoUser is the subject the development-only demo login signs in as.
const DemoUser = "demo"

// MaxLoginFailures is how many wrong passwords one pending authorization
// takes before it is dropped and the client must start again. Rate limits
// per address are the Caddy side's.
const MaxLoginFailures = 5

var pageTemplates = template.Must(template.New("page").Parse(`{{define "head"}}<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}}</title>
<style>body{font-family:system-ui,sans-serif;max-width:26rem;margin:3rem auto;padding:0 1rem;color:#222}
label{display:block;margin:.8rem 0 .2rem}input[type=text],input[type=password]{width:100%;padding:.45rem;box-sizing:border-box}
button{margin-top:1rem;padding:.5rem 1.2rem}.error{color:#b00020}.dev{border:2px dashed #b36b00;padding:.5rem;margin-top:1.5rem}
ul.scopes li{margin:.3rem 0}.warn{border-left:4px solid #b36b00;padding-left:.6rem}</style></head><body>{{end}}
{{define "login"}}{{template "head" .}}
<h1>Sign in</h1>
<p><strong id="client">{{.Client}}</strong>{{template "origin" .}} asks to use your account.</p>
{{if .Error}}<p class="error" id="error">{{.Error}}</p>{{end}}
<form method="post" action="{{.Action}}" id="login">
<input type="hidden" name="id" value="{{.ID}}"><input type="hidden" name="csrf" value="{{.CSRF}}">
<label for="username">Username</label><input type="text" id="username" name="username" autocomplete="username" required autofocus>
<label for="password">Password</label><input type="password" id="password" name="password" autocomplete="current-password" required>
<button type="submit" id="submit">Sign in</button>
</form>
{{if .Demo}}<form method="post" action="{{.Action}}" class="dev" id="demo-form">
<input type="hidden" name="id" value="{{.ID}}"><input type="hidden" name="csrf" value="{{.CSRF}}"><input type="hidden" name="demo" value="1">
<p>Development mode: sign in as <code>{{.DemoUser}}</code> without a password.</p><button type="submit" id="demo">Demo login</button>
</form>{{end}}
</body></html>{{end}}
{{define "consent"}}{{template "head" .}}
<h1>Allow access?</h1>
<p><strong id="client">{{.Client}}</strong>{{template "origin" .}} asks for access to your account <strong id="subject">{{.Subject}}</strong> with these permissions:</p>
<ul class="scopes" id="scopes">{{range .Scopes}}<li>{{.}}</li>{{end}}</ul>
{{if .Resource}}<p>The access is for <code id="resource">{{.Resource}}</code>.</p>{{end}}
<p>It will be sent back to <code id="redirect">{{.Redirect}}</code>{{if .RedirectHost}} on <strong id="redirect-host">{{.RedirectHost}}</strong>{{end}}.</p>
{{if .LocalRedirects}}<p class="warn" id="local-warning">This application receives the answer on this computer ({{.RedirectHost}}): any program running here could use its name. Allow it only if you started it yourself just now.</p>{{end}}
<form method="post" action="{{.Action}}" id="consent">
<input type="hidden" name="id" value="{{.ID}}"><input type="hidden" name="csrf" value="{{.CSRF}}">
<button type="submit" name="decision" value="approve" id="approve">Allow</button>
<button type="submit" name="decision" value="deny" id="deny">Deny</button>
</form>
</body></html>{{end}}
{{define "origin"}}{{if .ClientHost}} <span id="unverified">(described by <code id="client-host">{{.ClientHost}}</code>; <strong>unverified</strong>: the name is the application's own claim)</span>{{else if .SelfRegistered}} <span id="unverified">(registered by itself; <strong>unverified</strong>: the name is the application's own claim)</span>{{end}}{{end}}
{{define "refused"}}{{template "head" .}}<h1>Request refused</h1>
<p>The sign-in request of <strong id="client">{{.Client}}</strong>{{template "origin" .}} was refused: <span class="error" id="error">{{.Error}}</span></p>
<p>Go back to the application at <strong id="redirect-host">{{.RedirectHost}}</strong> only if you started this sign-in yourself: <a id="continue" href="{{.Continue}}">return to the application</a>.</p>
</body></html>{{end}}
{{define "error"}}{{template "head" .}}<h1>Sign-in failed</h1><p class="error" id="error">{{.Error}}</p>{{if .Code}}<p>Code: <code id="code">{{.Code}}</code></p>{{end}}</body></html>{{end}}`))

type pageData struct {
	Title, Client, Subject, Redirect, Error, ID, CSRF, Action, DemoUser string
	// Code is the stable code of an error page, when it has one.
	Code string
	// ClientHost is a metadata document's host (the name is unverified);
	// RedirectHost the host the answer goes to; LocalRedirects warns that
	// every redirect URI of the client is on this computer.
	ClientHost, RedirectHost string
	Scopes                   []string
	Demo, LocalRedirects     bool
	// SelfRegistered marks a dynamically registered client (its name is
	// unverified too).
	SelfRegistered bool
	// Resource is the RFC 8707 resource the token will be for, when the
	// client named one other than this server.
	Resource string
	// Continue is the error response a refused request of a client nobody
	// vouched for links to.
	Continue template.URL
}

// clientDisplay is the client's name as the pending authorization recorded
// it (older records: looked up).
func (s *Server) clientDisplay(r *http.Request, a *authRequest) string {
	if a.ClientName != "" {
		return a.ClientName
	}
	return s.clientName(r, a.ClientID)
}

func redirectHost(redirect string) string {
	u, err := url.Parse(redirect)
	if err != nil {
		return ""
	}
	if u.Host == "" {
		return u.Scheme + ":" // a native app's private-use scheme
	}
	return u.Hostname()
}

// newDummyHash returns a bcrypt hash of a filler string at the highest cost
// of the configured users' hashes: comparing against it when the user is
// unknown keeps the answer time the same as for a wrong password. NewServer
// computes it (tens of milliseconds at the default cost), never package
// init: every process start would pay it, sandbox workers included.
func newDummyHash(users []User) []byte {
	cost := bcrypt.MinCost
	for _, u := range users {
		if c, err := bcrypt.Cost([]byte(u.PasswordHash)); err == nil && c > cost {
			cost = c
		}
	}
	h, _ := bcrypt.GenerateFromPassword([]byte("no such user: constant-time filler"), cost)
	return h
}

func (s *Server) render(w http.ResponseWriter, status int, name string, d pageData) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Frame-Options", "DENY")
	// Browsers apply form-action to the redirects that follow a form
	// submission too, and the login and consent forms end in a redirect to
	// the client: its origin must be allowed.
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'"+formTarget(d.Redirect)+"; frame-ancestors 'none'")
	h.Set("Referrer-Policy", "no-referrer")
	w.WriteHeader(status)
	if err := pageTemplates.ExecuteTemplate(w, name, d); err != nil {
		s.log.Error("rendering page", zap.String("page", name), errField(err))
	}
}

// formTarget is the CSP source of a redirect URI: its origin, or its
// scheme for a native app's private-use scheme.
func formTarget(redirect string) string {
	u, err := url.Parse(redirect)
	if err != nil || u.Scheme == "" {
		return ""
	}
	src := u.Scheme + ":"
	if u.Host != "" {
		src = u.Scheme + "://" + u.Host
	}
	if strings.ContainsAny(src, " ;,'\"") {
		return ""
	}
	return " " + src
}

// formRequest loads the pending authorization a page works on. On POST it
// checks the CSRF token bound to that authorization and, when the browser
// sends one, that Origin is the issuer.
func (s *Server) formRequest(w http.ResponseWriter, r *http.Request) (*authRequest, bool) {
	if r.Method != http.MethodGet && r.Method != http.MethodPost {
		w.Header().Set("Allow", "GET, POST")
		s.render(w, http.StatusMethodNotAllowed, "error", pageData{Title: "Error", Error: "Method not allowed."})
		return nil, false
	}
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	if err := r.ParseForm(); err != nil {
		s.render(w, http.StatusBadRequest, "error", pageData{Title: "Error", Error: "The form could not be read."})
		return nil, false
	}
	a, err := s.pending(r.Context(), r.Form.Get("id"))
	if err != nil {
		s.render(w, http.StatusBadRequest, "error", pageData{Title: "Error", Error: "This sign-in request is unknown or has expired. Start again from the application."})
		return nil, false
	}
	if r.Method == http.MethodPost {
		if o := r.Header.Get("Origin"); o != "" && o != "null" && !strings.EqualFold(o, s.cfg.issuer) {
			s.render(w, http.StatusForbidden, "error", pageData{Title: "Error", Error: "Cross-site form submission refused."})
			return nil, false
		}
		if subtle.ConstantTimeCompare([]byte(r.PostForm.Get("csrf")), []byte(a.CSRF)) != 1 {
			s.log.Warn("login form with a wrong CSRF token", logClientID(a.ClientID))
			s.render(w, http.StatusForbidden, "error", pageData{Title: "Error", Error: "The form has expired or was not sent by this page. Start again from the application."})
			return nil, false
		}
	}
	return a, true
}

func (s *Server) clientName(r *http.Request, id string) string {
	if c, err := s.client(r.Context(), id); err == nil {
		return c.displayName()
	}
	return id
}

// CodeLoginBusy is the stable code of the 503 page (with Retry-After) that
// answers a login while MaxPasswordChecks comparisons run for longer than
// the wait (ServerConfig.PasswordCheckWait). A bcrypt comparison takes tens of milliseconds of CPU,
// and logins from many addresses (each within the endpoints' rate limit)
// ran as many at once as were sent: 200 addresses guessing made every other
// request of the gateway wait.
const CodeLoginBusy = "LOGIN_BUSY"

// PasswordCheckWait is how long a login waits by default for a password
// check to finish before it is answered with CodeLoginBusy
// (ServerConfig.PasswordCheckWait sets it): at bcrypt's cost 10 about 70
// logins per check running at once.
const PasswordCheckWait = 5 * time.Second

// MaxPasswordChecks is how many password comparisons run at once: half the
// CPUs Go uses, at least one, so that the other half serves everything else.
func MaxPasswordChecks() int { return max(1, runtime.GOMAXPROCS(0)/2) }

// acquirePasswordCheck waits up to s.passwordWait for a password check of
// its own; false if none came free, or the request ended.
func (s *Server) acquirePasswordCheck(ctx context.Context) bool {
	select {
	case s.passwordChecks <- struct{}{}:
		return true
	default:
	}
	t := time.NewTimer(s.passwordWait)
	defer t.Stop()
	select {
	case s.passwordChecks <- struct{}{}:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

func (s *Server) releasePasswordCheck() { <-s.passwordChecks }

// loginBusy refuses a login that found no password check free; its
// attempt was taken off the authorization's failures.
func (s *Server) loginBusy(w http.ResponseWriter, a *authRequest) {
	s.metrics.login("busy")
	s.log.Info("login refused: every password check is taken", logClientID(a.ClientID), zap.String("code", CodeLoginBusy))
	w.Header().Set("Retry-After", "1")
	s.render(w, http.StatusServiceUnavailable, "error", pageData{Title: "Error", Error: "The server is busy checking other sign-ins. Try again in a moment.", Code: CodeLoginBusy})
}

// CodeAlreadySignedIn is the stable code of the 409 page that refuses a
// login on an authorization already signed in: from another browser than
// the one that signed in (whoever it names), as another user, or after the
// code was issued.
const CodeAlreadySignedIn = "ALREADY_SIGNED_IN"

// Outcomes of a login's changes to its pending authorization.
var (
	errSignedIn  = errors.New("the authorization is signed in already")
	errLockedOut = errors.New("too many failed logins")
)

// boundElsewhere reports whether a is closed to a login from the browser
// that presents the sign-in secret presented: a signed in with another
// browser, or a's code was issued.
func (a *authRequest) boundElsewhere(presented string) bool {
	return a.CodeIssued || a.LoggedIn && !a.signedInWith(presented)
}

// login serves the login page (GET) and checks the credentials (POST).
//
// An authorization is signed in once, by one user in one browser
// (docs/oauth.md, decisions): a login in that browser as the same user
// changes nothing and goes on where the first went; any other is refused
// (409, ALREADY_SIGNED_IN) and the authorization stays as it was. A login
// from another browser is refused before its password is checked, so it
// learns nothing about the password and counts no failure against the
// user's authorization.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	a, ok := s.formRequest(w, r)
	if !ok {
		return
	}
	presented := s.presentedSignIn(r, a)
	if a.boundElsewhere(presented) {
		s.alreadySignedIn(w, r, a, "This sign-in was completed in another browser already. Finish it there, or start again from the application.")
		return
	}
	d := pageData{Title: "Sign in", Client: s.clientDisplay(r, a), ClientHost: a.ClientHost, SelfRegistered: a.SelfRegistered, ID: a.ID, CSRF: a.CSRF, Action: pathLogin,
		Redirect: a.RedirectURI, Demo: s.cfg.development, DemoUser: DemoUser}
	if r.Method == http.MethodGet {
		s.render(w, http.StatusOK, "login", d)
		return
	}
	ctx := r.Context()
	var subject string
	demo := r.PostForm.Get("demo") != ""
	if demo {
		if !s.cfg.development {
			s.render(w, http.StatusForbidden, "error", pageData{Title: "Error", Error: "The demo login works only in development mode."})
			return
		}
		subject = DemoUser
	} else {
		// The attempt counts as a failure before its password is checked
		// (and no more once it proved right): of any number of attempts
		// sent at once, MaxLoginFailures are checked.
		counted, err := s.changePending(ctx, a.ID, func(c *authRequest) error {
			switch {
			case c.boundElsewhere(presented):
				return errSignedIn
			case c.Failures >= MaxLoginFailures:
				return errLockedOut
			}
			c.Failures++
			return nil
		})
		if err != nil {
			s.loginRefused(w, r, a, err)
			return
		}
		a = counted
		if !s.acquirePasswordCheck(ctx) {
			// Not checked, so not counted (a locked out attempt was
			// refused above without waiting).
			_, _ = s.changePending(ctx, a.ID, func(c *authRequest) error {
				if c.Failures > 0 {
					c.Failures--
				}
				return nil
			})
			s.loginBusy(w, a)
			return
		}
		name := r.PostForm.Get("username")
		u, known := s.users[name]
		hash := s.dummyHash
		if known {
			hash = []byte(u.PasswordHash)
		}
		wrong := s.comparePassword(hash, []byte(r.PostForm.Get("password"))) != nil || !known
		s.releasePasswordCheck()
		if wrong {
			s.log.Info("login failed", logClientID(a.ClientID), zap.Int("failures", a.Failures))
			if a.Failures >= MaxLoginFailures {
				s.metrics.login("locked_out")
				_ = opStorage{s}.DeleteAuthRequest(ctx, a.ID)
				s.render(w, http.StatusUnauthorized, "error", pageData{Title: "Error", Error: "Too many failed attempts. Start again from the application."})
				return
			}
			s.metrics.login("failure")
			d.Error = "Wrong username or password."
			s.render(w, http.StatusUnauthorized, "login", d)
			return
		}
		subject = u.Subject
	}
	// The id of a pending authorization is no secret from whoever started
	// it: that may be an attacker who sends the user the login link. The
	// rest of the sign-in belongs to this browser only (its cookie is the
	// one place the secret appears).
	signin := s.randomToken(32)
	var again, other bool
	signedIn, err := s.changePending(ctx, a.ID, func(c *authRequest) error {
		again, other = false, false
		if !demo && c.Failures > 0 {
			c.Failures-- // the attempt counted above proved right
		}
		switch {
		case c.boundElsewhere(presented) || c.LoggedIn && c.Subject != subject:
			other = true
		case c.LoggedIn:
			again = true
		default:
			c.Subject, c.AuthTime, c.LoggedIn = subject, s.now(), true
			c.SignIn = digest(signin) // what the pending authorization keeps of it
			// A metadata document's client always gets the consent screen:
			// its name is its own claim, and the user must see where it
			// comes from. So does a dynamically registered one: anyone can
			// register "Claude" with a redirect URI of their own and send
			// a user the authorization link; the consent screen is where
			// the user sees where the answer goes.
			c.Approved = !s.cfg.consentOn && c.ClientHost == "" && !c.SelfRegistered
			return nil
		}
		if demo {
			return errNoChange
		}
		return nil
	})
	if err == nil && other {
		err = errSignedIn
	}
	if err != nil {
		s.loginRefused(w, r, a, err)
		return
	}
	next := pathCallback
	if !signedIn.Approved {
		next = pathConsent
	}
	if again {
		// The same user in the same browser: the browser holds the secret
		// already, and goes on where its first login went.
		s.log.Info("user signed in again", logClientID(a.ClientID), zap.String("subject", subject))
		http.Redirect(w, r, next+"?id="+url.QueryEscape(a.ID), http.StatusSeeOther)
		return
	}
	if demo {
		s.metrics.login("demo")
	} else {
		s.metrics.login("success")
	}
	s.log.Info("user signed in", logClientID(a.ClientID), zap.String("subject", subject))
	s.setSignInCookie(w, signedIn, signin)
	http.Redirect(w, r, next+"?id="+url.QueryEscape(a.ID), http.StatusSeeOther)
}

// loginRefused answers a login whose change to its pending authorization
// failed: a is the authorization as the form found it.
func (s *Server) loginRefused(w http.ResponseWriter, r *http.Request, a *authRequest, err error) {
	switch {
	case errors.Is(err, errSignedIn):
		s.alreadySignedIn(w, r, a, "This sign-in is signed in already, in another browser or to another account. To use another account, start again from the application.")
	case errors.Is(err, errLockedOut):
		s.metrics.login("locked_out")
		s.render(w, http.StatusUnauthorized, "error", pageData{Title: "Error", Error: "Too many failed attempts. Start again from the application."})
	case errors.Is(err, errPendingUnknown):
		s.render(w, http.StatusBadRequest, "error", pageData{Title: "Error", Error: "This sign-in request is unknown or has expired. Start again from the application."})
	default:
		s.reqLog(r).Error("saving pending authorization", errField(err))
		s.render(w, http.StatusServiceUnavailable, "error", pageData{Title: "Error", Error: "Please try again later."})
	}
}

// alreadySignedIn refuses a login on an authorization that is signed in
// already; the authorization stays as it was.
func (s *Server) alreadySignedIn(w http.ResponseWriter, r *http.Request, a *authRequest, msg string) {
	if r.Method == http.MethodPost {
		s.metrics.login("refused")
	}
	s.log.Warn("login on an authorization signed in already", logClientID(a.ClientID), zap.String("code", CodeAlreadySignedIn))
	s.render(w, http.StatusConflict, "error", pageData{Title: "Error", Error: msg, Code: CodeAlreadySignedIn})
}

// signInCookiePath is the path of the sign-in cookies: that of the pages
// that read them (/oauth/consent, /oauth/authorize/callback), not the site's.
const signInCookiePath = "/oauth/"

// signInCookie names the cookie holding the sign-in secret of the pending
// authorization id: one per authorization, so that two sign-ins in one
// browser (two tabs) keep theirs. Over https the name carries the
// __Secure- prefix, which browsers accept only on a Secure cookie set over
// https: a page on plain http cannot plant one.
func (s *Server) signInCookie(id string) string {
	if s.secureCookies() {
		return "__Secure-codemode_signin_" + id
	}
	return "codemode_signin_" + id
}

// secureCookies reports whether the issuer is https (its scheme in any
// case, as the configuration accepts it: "HTTPS://…" too).
func (s *Server) secureCookies() bool {
	return len(s.cfg.issuer) >= len("https://") && strings.EqualFold(s.cfg.issuer[:len("https://")], "https://")
}

// setSignInCookie hands the browser that signed in to a the secret, for
// as long as a is pending. The secret stays out of every URL, so out of
// access logs, browser history and proxies' logs.
func (s *Server) setSignInCookie(w http.ResponseWriter, a *authRequest, secret string) {
	maxAge := int(a.Expires.Sub(s.now()) / time.Second)
	if maxAge < 1 {
		maxAge = 1
	}
	http.SetCookie(w, &http.Cookie{Name: s.signInCookie(a.ID), Value: secret, Path: signInCookiePath, MaxAge: maxAge,
		HttpOnly: true, Secure: s.secureCookies(), SameSite: http.SameSiteLaxMode})
}

// clearSignInCookie tells the browser to drop a's sign-in cookie: the
// authorization ended.
func (s *Server) clearSignInCookie(h http.Header, a *authRequest) {
	c := &http.Cookie{Name: s.signInCookie(a.ID), Value: "", Path: signInCookiePath, MaxAge: -1,
		HttpOnly: true, Secure: s.secureCookies(), SameSite: http.SameSiteLaxMode}
	h.Add("Set-Cookie", c.String())
}

// presentedSignIn is the sign-in secret of a that r carries ("" if none).
func (s *Server) presentedSignIn(r *http.Request, a *authRequest) string {
	c, err := r.Cookie(s.signInCookie(a.ID))
	if err != nil {
		return ""
	}
	return c.Value
}

// signedInHere reports whether the request carries the sign-in secret of
// the browser that signed in to a.
func (s *Server) signedInHere(r *http.Request, a *authRequest) bool {
	return a.signedInWith(s.presentedSignIn(r, a))
}

func (a *authRequest) signedInWith(presented string) bool {
	if a.SignIn == "" || presented == "" {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(digest(presented)), []byte(a.SignIn)) == 1
}

// notSignedInHere answers a step of a sign-in that another browser did.
func (s *Server) notSignedInHere(w http.ResponseWriter, a *authRequest) {
	s.log.Warn("sign-in step without the secret of the browser that signed in", logClientID(a.ClientID))
	s.render(w, http.StatusForbidden, "error", pageData{Title: "Error", Error: "This sign-in was not completed in this browser, or the browser does not keep this site's cookies. Start again from the application."})
}

// errNotSignedInHere refuses a change that only the browser that signed
// in may make.
var errNotSignedInHere = errors.New("the sign-in was not completed in this browser")

// signInKey carries the sign-in secret a callback request presented to
// SaveAuthCode.
type signInKey struct{}

// callback guards op's callback, which hands out the code: only the
// browser that signed in (and consented) may collect it. Its redirects
// carry iss (issWriter).
func (s *Server) callback(h http.Handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil {
			s.render(w, http.StatusBadRequest, "error", pageData{Title: "Error", Error: "The request could not be read."})
			return
		}
		// An unknown, expired or unfinished authorization is op's to refuse.
		a, err := s.pending(r.Context(), r.Form.Get("id"))
		if err != nil {
			h.ServeHTTP(&issWriter{ResponseWriter: w, issuer: s.cfg.issuer}, r)
			return
		}
		// Once the code is issued (its redirect dropped the cookie) op
		// refuses another: a reload of the callback is no sign-in from
		// another browser.
		if a.LoggedIn && !a.CodeIssued && !s.signedInHere(r, a) {
			s.notSignedInHere(w, a)
			return
		}
		// The user may sign in between this read and op's: SaveAuthCode
		// checks the secret again on the record it marks, the last read
		// before a code exists. The redirect with the code ends the
		// authorization, and the cookie with it; an error redirect leaves
		// the cookie, as the authorization may still be pending (a
		// callback reached before consent is refused, and the consent
		// screen still works): it expires with it.
		end := func(h http.Header) { s.clearSignInCookie(h, a) }
		h.ServeHTTP(&issWriter{ResponseWriter: w, issuer: s.cfg.issuer, codeIssued: end},
			r.WithContext(context.WithValue(r.Context(), signInKey{}, s.presentedSignIn(r, a))))
	}
}

// consent shows the requested scopes (GET) and records the decision (POST).
func (s *Server) consent(w http.ResponseWriter, r *http.Request) {
	a, ok := s.formRequest(w, r)
	if !ok {
		return
	}
	if !a.LoggedIn {
		http.Redirect(w, r, pathLogin+"?id="+url.QueryEscape(a.ID), http.StatusSeeOther)
		return
	}
	if !s.signedInHere(r, a) {
		s.notSignedInHere(w, a)
		return
	}
	if r.Method == http.MethodGet {
		s.render(w, http.StatusOK, "consent", pageData{Title: "Allow access", Client: s.clientDisplay(r, a), ClientHost: a.ClientHost, SelfRegistered: a.SelfRegistered,
			Subject: a.Subject, Scopes: visibleScopes(a.Scopes), Redirect: a.RedirectURI, RedirectHost: redirectHost(a.RedirectURI),
			LocalRedirects: a.LocalRedirects, ID: a.ID, CSRF: a.CSRF, Action: pathConsent, Resource: s.namedResource(a)})
		return
	}
	if r.PostForm.Get("decision") != "approve" {
		_ = opStorage{s}.DeleteAuthRequest(r.Context(), a.ID)
		s.clearSignInCookie(w.Header(), a)
		s.log.Info("consent denied", logClientID(a.ClientID))
		if a.SelfRegistered || a.ClientHost != "" {
			// RFC 9700 section 4.11.2: a user who denies because the
			// request looks wrong is not sent to the redirect URI
			// nobody vouched for; the page links there.
			s.refusedPage(w, pageData{Client: s.clientDisplay(r, a), ClientHost: a.ClientHost, SelfRegistered: a.SelfRegistered},
				a.RedirectURI, a.State, "access_denied", "the user denied access")
			return
		}
		redirectError(w, r, a.RedirectURI, a.State, "access_denied", "the user denied access", s.cfg.issuer)
		return
	}
	presented := s.presentedSignIn(r, a)
	_, err := s.changePending(r.Context(), a.ID, func(c *authRequest) error {
		if !c.signedInWith(presented) {
			return errNotSignedInHere
		}
		if c.Approved {
			return errNoChange
		}
		c.Approved = true
		return nil
	})
	switch {
	case errors.Is(err, errNotSignedInHere):
		s.notSignedInHere(w, a)
		return
	case errors.Is(err, errPendingUnknown):
		s.render(w, http.StatusBadRequest, "error", pageData{Title: "Error", Error: "This sign-in request is unknown or has expired. Start again from the application."})
		return
	case err != nil:
		s.reqLog(r).Error("saving pending authorization", errField(err))
		s.render(w, http.StatusServiceUnavailable, "error", pageData{Title: "Error", Error: "Please try again later."})
		return
	}
	http.Redirect(w, r, pathCallback+"?id="+url.QueryEscape(a.ID), http.StatusSeeOther)
}

// namedResource is the resource an authorization asks a token for, when
// it is not this server itself: the consent screen says where the access
// goes (one of the resources the server serves).
func (s *Server) namedResource(a *authRequest) string {
	issuer, _ := canonicalResource(s.cfg.issuer)
	if len(a.Audience) == 0 || a.Audience[0] == issuer {
		return ""
	}
	return a.Audience[0]
}
