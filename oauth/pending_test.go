package oauth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"golang.org/x/crypto/bcrypt"
	"golang.org/x/oauth2"
)

// Tests of the pending authorization's writers: logins, consents and
// callbacks change one record, at once on any number of gateways.

const (
	otherUser     = "bob"
	unknownUser   = "nobody"
	wrongPassword = "not the password"
)

var (
	slowHashOnce sync.Once
	slowHash     string
)

// pendingAS is an authorization server on the named storage with a second
// user, bob, whose password is alice's, and a third whose hash costs 8:
// the hash an unknown user's password is compared with costs as much, so a
// wrong password keeps its request between its read and its write for
// milliseconds, where others' writes fall.
func pendingAS(t *testing.T, storage string, mutate func(*ServerConfig)) *asEnv {
	t.Helper()
	slowHashOnce.Do(func() {
		h, err := bcrypt.GenerateFromPassword([]byte("carol's password"), 8)
		if err != nil {
			panic(err)
		}
		slowHash = string(h)
	})
	both := func(c *ServerConfig) {
		c.Users = append(c.Users, User{Username: otherUser, PasswordHash: c.Users[0].PasswordHash}, User{Username: "carol", PasswordHash: slowHash})
		if mutate != nil {
			mutate(c)
		}
	}
	if storage == "redis" {
		e, _, _ := newRedisAS(t, both)
		return e
	}
	return newAS(t, both)
}

// browserOf is another browser of e's user agent kind: its own cookies,
// redirects not followed.
func (e *asEnv) browserOf() *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Transport: e.http.Transport, CheckRedirect: e.http.CheckRedirect, Jar: jar}
}

// started is a fresh authorization of the public client: its id and the
// CSRF token of its login page.
func (e *asEnv) started(t *testing.T, verifier string) (id, csrf string) {
	t.Helper()
	cfg := e.oauth2(asClientID, asRedirect)
	loginURL := location(t, e.get(cfg.AuthCodeURL("st", oauth2.S256ChallengeOption(verifier))), http.StatusFound)
	return hidden(t, body(t, e.get(e.srv.URL+loginURL.RequestURI())))
}

// answer is what a page said: its status, where it sent the browser, the
// page itself.
type answer struct {
	status   int
	location string
	page     string
}

func postAs(t *testing.T, c *http.Client, u string, form url.Values) answer {
	t.Helper()
	resp, err := c.PostForm(u, form)
	if err != nil {
		t.Error(err)
		return answer{}
	}
	a := answer{status: resp.StatusCode, location: resp.Header.Get("Location")}
	a.page = body(t, resp)
	return a
}

// together runs fs at once and waits for all of them.
func together(fs ...func()) {
	start := make(chan struct{})
	var wg sync.WaitGroup
	for _, f := range fs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			f()
		}()
	}
	close(start)
	wg.Wait()
}

func loginForm(id, csrf, user, password string) url.Values {
	return url.Values{"id": {id}, "csrf": {csrf}, "username": {user}, "password": {password}}
}

const wrongPage = "Wrong username or password."

// TestPendingWritersKeepEachOthersFields: the writers of a pending
// authorization each change their own fields, at once: wrong passwords
// (the count of failures) while the user signs in (subject, sign-in
// secret), then the user's consent (approval) while the user's browser
// sends wrong passwords. Each read the record, changed its field and wrote
// the whole record back, so the last write undid the others': a sign-in
// lost, an approval lost, or failures uncounted (more guesses than
// MaxLoginFailures).
func TestPendingWritersKeepEachOthersFields(t *testing.T) {
	for _, storage := range []string{"memory", "redis"} {
		t.Run(storage, func(t *testing.T) {
			e := pendingAS(t, storage, nil)
			// Three logins at once queue for MaxPasswordChecks (one on two
			// CPUs), each comparing at the cost of carol's hash (8): under
			// -race on a loaded machine a comparison took seconds and the
			// last in line was answered LOGIN_BUSY. Waiting is not what
			// this test is about (TestLoginBusy is), nor is the cost.
			e.s.passwordWait = time.Minute
			e.s.dummyHash, _ = bcrypt.GenerateFromPassword([]byte("no such user"), bcrypt.MinCost)
			cfg := e.oauth2(asClientID, asRedirect)
			// Rounds, each a fresh authorization: a round may happen to
			// run its writers one after another.
			for round := range 6 {
				verifier := oauth2.GenerateVerifier()
				id, csrf := e.started(t, verifier)
				var login answer
				answers := make([]answer, 2)
				fs := []func(){func() { login = postAs(t, e.http, e.srv.URL+"/oauth/login", loginForm(id, csrf, asUser, asPassword)) }}
				for i := range answers {
					other := e.browserOf()
					fs = append(fs, func() {
						answers[i] = postAs(t, other, e.srv.URL+"/oauth/login", loginForm(id, csrf, unknownUser, wrongPassword))
					})
				}
				together(fs...)
				if login.status != http.StatusSeeOther || !strings.HasPrefix(login.location, "/oauth/consent") {
					t.Fatalf("round %d: the user's login: %d %s %s", round, login.status, login.location, login.page)
				}
				failures := 0
				for _, a := range answers {
					if strings.Contains(a.page, wrongPage) {
						failures++
					}
				}
				a, err := e.s.pending(context.Background(), id)
				if err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
				signin := e.signInCookie(id)
				if !a.LoggedIn || a.Subject != asUser || !a.signedInWith(signin) || a.Failures != failures {
					t.Fatalf("round %d: after a login and %d wrong passwords answered at once the record holds logged in %v, subject %q, the user's secret %v, %d failures",
						round, failures, a.LoggedIn, a.Subject, a.signedInWith(signin), a.Failures)
				}

				// The user approves while the same browser sends two
				// wrong passwords.
				var consent answer
				fs = []func(){func() {
					consent = postAs(t, e.http, e.srv.URL+"/oauth/consent", url.Values{"id": {id}, "csrf": {csrf}, "decision": {"approve"}})
				}}
				for i := range answers {
					fs = append(fs, func() {
						answers[i] = postAs(t, e.http, e.srv.URL+"/oauth/login", loginForm(id, csrf, unknownUser, wrongPassword))
					})
				}
				together(fs...)
				if consent.status != http.StatusSeeOther || !strings.HasPrefix(consent.location, "/oauth/authorize/callback") {
					t.Fatalf("round %d: the approval: %d %s %s", round, consent.status, consent.location, consent.page)
				}
				for _, x := range answers {
					if !strings.Contains(x.page, wrongPage) {
						t.Fatalf("round %d: a wrong password of the user's browser: %d %s", round, x.status, x.page)
					}
				}
				if a, err = e.s.pending(context.Background(), id); err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
				if !a.Approved || !a.LoggedIn || !a.signedInWith(signin) || a.Failures != failures+len(answers) {
					t.Fatalf("round %d: after an approval and %d more wrong passwords the record holds approved %v, logged in %v, the user's secret %v, %d failures, want %d",
						round, len(answers), a.Approved, a.LoggedIn, a.signedInWith(signin), a.Failures, failures+len(answers))
				}

				back := location(t, e.get(e.srv.URL+consent.location), http.StatusFound)
				tok, err := cfg.Exchange(e.ctx(), back.Query().Get("code"), oauth2.VerifierOption(verifier))
				if err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
				if cl, err := e.s.VerifyAccessToken(context.Background(), tok.AccessToken, ""); err != nil || cl.Subject != asUser {
					t.Fatalf("round %d: the token: %v %v", round, cl, err)
				}
			}
		})
	}
}

// TestLoginFailuresCountedAtOnce: wrong passwords sent at once on one
// authorization are each counted before their check, so no more than
// MaxLoginFailures are checked and the last of them drops the
// authorization. Counted after the check by a read and a write back, a
// burst of guesses each read the same count and wrote it back plus one:
// any number of guesses, and the authorization stayed.
func TestLoginFailuresCountedAtOnce(t *testing.T) {
	for _, storage := range []string{"memory", "redis"} {
		t.Run(storage, func(t *testing.T) {
			e := pendingAS(t, storage, nil)
			e.s.passwordWait = time.Minute // the checked ones queue (TestPasswordChecksBounded)
			id, csrf := e.started(t, oauth2.GenerateVerifier())
			answers := make([]answer, 4*MaxLoginFailures)
			var fs []func()
			for i := range answers {
				b := e.browserOf()
				fs = append(fs, func() {
					answers[i] = postAs(t, b, e.srv.URL+"/oauth/login", loginForm(id, csrf, unknownUser, wrongPassword))
				})
			}
			together(fs...)
			wrong, locked := 0, 0
			for _, a := range answers {
				switch {
				case strings.Contains(a.page, wrongPage):
					wrong++
				case a.status == http.StatusUnauthorized && strings.Contains(a.page, "Too many failed attempts"),
					a.status == http.StatusBadRequest && strings.Contains(a.page, "unknown or has expired"):
					locked++
				default:
					t.Errorf("a wrong password answered %d %s", a.status, a.page)
				}
			}
			if wrong != MaxLoginFailures-1 || locked != len(answers)-wrong {
				t.Errorf("%d wrong passwords at once: %d answered as a wrong password, %d as too many; want %d and %d",
					len(answers), wrong, locked, MaxLoginFailures-1, len(answers)-MaxLoginFailures+1)
			}
			if _, err := e.s.pending(context.Background(), id); err == nil {
				t.Errorf("the authorization outlived %d wrong passwords", len(answers))
			}
		})
	}
}

// TestSecondLogin: an authorization is signed in once, by one user in one
// browser. A second login in the browser that signed in, as the same
// user, changes nothing; any other (another user, or a login from another
// browser, even as the same user) is refused with 409 and the code
// ALREADY_SIGNED_IN, and the authorization stays as it was: the first
// browser finishes it and the token is the first user's. A second login
// re-bound the authorization to whoever signed in last: the first browser
// got 403, and a login after the code was issued turned the code into a
// token for another account.
func TestSecondLogin(t *testing.T) {
	for _, tc := range []struct {
		storage string
		consent bool
	}{{"memory", true}, {"memory", false}, {"redis", true}, {"redis", false}} {
		t.Run(fmt.Sprintf("%s consent %v", tc.storage, tc.consent), func(t *testing.T) {
			e := pendingAS(t, tc.storage, func(c *ServerConfig) { c.Consent.Enabled = tc.consent })
			cfg := e.oauth2(asClientID, asRedirect)
			verifier := oauth2.GenerateVerifier()
			id, csrf := e.started(t, verifier)
			login := postAs(t, e.http, e.srv.URL+"/oauth/login", loginForm(id, csrf, asUser, asPassword))
			if login.status != http.StatusSeeOther {
				t.Fatalf("login: %d %s", login.status, login.page)
			}
			first, err := e.s.pending(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			signin := e.signInCookie(id)
			codeIssued := false
			unchanged := func(what string) {
				t.Helper()
				a, err := e.s.pending(context.Background(), id)
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				if a.Subject != first.Subject || !a.AuthTime.Equal(first.AuthTime) || a.SignIn != first.SignIn || !a.LoggedIn {
					t.Errorf("%s: the authorization changed: subject %q, auth time %v, secret changed %v", what, a.Subject, a.AuthTime, a.SignIn != first.SignIn)
				}
				if !codeIssued && e.signInCookie(id) != signin {
					t.Errorf("%s: the user's browser's cookie changed", what)
				}
			}
			refused := func(what string, a answer) {
				t.Helper()
				if a.status != http.StatusConflict || a.location != "" || !strings.Contains(a.page, `id="code">ALREADY_SIGNED_IN<`) {
					t.Errorf("%s: %d %s %s", what, a.status, a.location, a.page)
				}
				unchanged(what)
			}

			// Another browser signs in, as another user or as the same.
			other := e.browserOf()
			refused("another browser, another user", postAs(t, other, e.srv.URL+"/oauth/login", loginForm(id, csrf, otherUser, asPassword)))
			refused("another browser, the same user", postAs(t, other, e.srv.URL+"/oauth/login", loginForm(id, csrf, asUser, asPassword)))
			// Its login page says so at once.
			if resp := e.browserGet(t, other, e.srv.URL+"/oauth/login?id="+url.QueryEscape(id)); resp.status != http.StatusConflict || !strings.Contains(resp.page, "ALREADY_SIGNED_IN") {
				t.Errorf("another browser's login page: %d %s", resp.status, resp.page)
			}
			// The browser that signed in, as another user.
			refused("the same browser, another user", postAs(t, e.http, e.srv.URL+"/oauth/login", loginForm(id, csrf, otherUser, asPassword)))
			// The same browser, the same user: the answer of the first
			// login again, nothing changed.
			again := postAs(t, e.http, e.srv.URL+"/oauth/login", loginForm(id, csrf, asUser, asPassword))
			if again.status != http.StatusSeeOther || again.location != login.location {
				t.Errorf("the same user again: %d %s, want 303 %s", again.status, again.location, login.location)
			}
			unchanged("the same user again")

			next := login.location
			if tc.consent {
				consent := postAs(t, e.http, e.srv.URL+"/oauth/consent", url.Values{"id": {id}, "csrf": {csrf}, "decision": {"approve"}})
				if consent.status != http.StatusSeeOther {
					t.Fatalf("consent: %d %s", consent.status, consent.page)
				}
				next = consent.location
			}
			back := location(t, e.get(e.srv.URL+next), http.StatusFound)
			codeIssued = true // and the answer dropped the cookie
			// Between the code and its exchange, another user signs in.
			refused("after the code, another user", postAs(t, other, e.srv.URL+"/oauth/login", loginForm(id, csrf, otherUser, asPassword)))
			tok, err := cfg.Exchange(e.ctx(), back.Query().Get("code"), oauth2.VerifierOption(verifier))
			if err != nil {
				t.Fatal(err)
			}
			if cl, err := e.s.VerifyAccessToken(context.Background(), tok.AccessToken, ""); err != nil || cl.Subject != asUser {
				t.Fatalf("the token: %v %v", cl, err)
			}
		})
	}
}

// TestFirstLoginWins: logins of two users from several browsers at once
// on one authorization: one signs in, every other is refused, and the
// authorization is the winner's. Each wrote the record in turn, so several
// browsers were told they had signed in and the last write decided whose
// the authorization was.
func TestFirstLoginWins(t *testing.T) {
	for _, storage := range []string{"memory", "redis"} {
		t.Run(storage, func(t *testing.T) {
			e := pendingAS(t, storage, func(c *ServerConfig) { c.Consent.Enabled = false })
			for round := range 6 {
				id, csrf := e.started(t, oauth2.GenerateVerifier())
				// Fewer than MaxLoginFailures: each attempt counts until it
				// proves right, and a burst of more is answered as too many.
				browsers := make([]*http.Client, MaxLoginFailures-1)
				answers := make([]answer, len(browsers))
				var fs []func()
				for i := range browsers {
					browsers[i] = e.browserOf()
					user := []string{asUser, otherUser}[i%2]
					fs = append(fs, func() {
						answers[i] = postAs(t, browsers[i], e.srv.URL+"/oauth/login", loginForm(id, csrf, user, asPassword))
					})
				}
				together(fs...)
				winner := -1
				for i, a := range answers {
					switch a.status {
					case http.StatusSeeOther:
						if winner >= 0 {
							t.Fatalf("round %d: browsers %d and %d both signed in", round, winner, i)
						}
						winner = i
					case http.StatusConflict:
					default:
						t.Fatalf("round %d: browser %d: %d %s", round, i, a.status, a.page)
					}
				}
				if winner < 0 {
					t.Fatalf("round %d: nobody signed in", round)
				}
				a, err := e.s.pending(context.Background(), id)
				if err != nil {
					t.Fatal(err)
				}
				u, _ := url.Parse(e.srv.URL + "/oauth/")
				var secret string
				for _, c := range browsers[winner].Jar.Cookies(u) {
					if c.Name == e.s.signInCookie(id) {
						secret = c.Value
					}
				}
				if want := []string{asUser, otherUser}[winner%2]; a.Subject != want || !a.signedInWith(secret) {
					t.Fatalf("round %d: the authorization is %q's (the winner's secret %v), the winner is %q", round, a.Subject, a.signedInWith(secret), want)
				}
				back := location(t, e.browserDo(t, browsers[winner], e.srv.URL+answers[winner].location), http.StatusFound)
				if back.Query().Get("code") == "" {
					t.Fatalf("round %d: the winner's callback: %s", round, back)
				}
			}
		})
	}
}

func (e *asEnv) browserDo(t *testing.T, c *http.Client, u string) *http.Response {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func (e *asEnv) browserGet(t *testing.T, c *http.Client, u string) answer {
	t.Helper()
	resp := e.browserDo(t, c, u)
	a := answer{status: resp.StatusCode, location: resp.Header.Get("Location")}
	a.page = body(t, resp)
	return a
}

// TestPendingExpiredDuringChange: a pending authorization that expires
// while a change is applied to it (a login whose password check outlasts
// the record's last moments) is refused as unknown. The swap was written
// with the time left, zero or less, which both stores read as no time to
// live: the record stayed in Redis for ever.
func TestPendingExpiredDuringChange(t *testing.T) {
	for _, storage := range []string{"memory", "redis"} {
		t.Run(storage, func(t *testing.T) {
			var e *asEnv
			var rc *redis.Client
			if storage == "redis" {
				e, rc, _ = newRedisAS(t, nil)
			} else {
				e = newAS(t, nil)
			}
			id, _ := e.started(t, "verifier-of-an-expiring-authorization-0123456789")
			_, err := e.s.changePending(context.Background(), id, func(a *authRequest) error {
				e.clock.Add(PendingTTL)
				a.Failures++
				return nil
			})
			if !errors.Is(err, errPendingUnknown) {
				t.Fatalf("change of an expired authorization: %v, want %v", err, errPendingUnknown)
			}
			if rc == nil {
				return
			}
			keys := keysWith(t, rc, "*pending:"+id)
			if len(keys) != 1 {
				t.Fatalf("pending keys %v", keys)
			}
			if ttl := ttlOf(t, rc, keys[0]); ttl <= 0 {
				t.Fatalf("pending record's time to live %v", ttl)
			}
		})
	}
}

// Pending authorizations are bounded: at most MaxPendingAuthorizations
// wait for their user at once, counted on both storages (and across
// instances on one Redis); past it /oauth/authorize answers 503
// temporarily_unavailable, never a redirect, and a pending authorization
// that expires, is redeemed or denied frees its place. Before, a stranger
// with many addresses kept ten minutes of authorization requests each,
// without bound, in the gateway's memory or the Redis.
func TestPendingAuthorizationsCapped(t *testing.T) {
	const max = 3
	for _, storage := range []string{"memory", "redis"} {
		t.Run(storage, func(t *testing.T) {
			capped := func(c *ServerConfig) { c.MaxPendingAuthorizations = max }
			e, other := newCappedAS(t, storage, capped)
			cfg := e.oauth2(asClientID, asRedirect)
			authorize := func(e *asEnv) *http.Response {
				t.Helper()
				return e.get(e.oauth2(asClientID, asRedirect).AuthCodeURL("st", oauth2.S256ChallengeOption(oauth2.GenerateVerifier())))
			}
			started := func(what string) {
				t.Helper()
				if u := location(t, authorize(e), http.StatusFound); u.Path != "/oauth/login" {
					t.Fatalf("%s: sent to %s, want the login page", what, u)
				}
			}
			full := func(e *asEnv, what string) {
				t.Helper()
				resp := authorize(e)
				out := body(t, resp)
				if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(out, `"error":"temporarily_unavailable"`) {
					t.Fatalf("%s: %d %s %.80s, want 503 temporarily_unavailable", what, resp.StatusCode, resp.Header.Get("Location"), out)
				}
				// Retry-After says when the first pending authorization expires.
				if ra, _ := strconv.Atoi(resp.Header.Get("Retry-After")); ra < 1 || ra > int(PendingTTL/time.Second) {
					t.Fatalf("%s: Retry-After %q", what, resp.Header.Get("Retry-After"))
				}
			}
			// A stranger's flood takes every place; the next request, the
			// bystander's, is refused, on every instance.
			for i := range max {
				started(fmt.Sprintf("flood %d", i))
			}
			full(e, "the bystander's during the flood")
			if other != nil {
				full(other(), "the bystander's at another instance on the same Redis")
			}
			if n := testutil.ToFloat64(e.s.metrics.fulls.WithLabelValues("max_pending_authorizations")); n != 1 {
				t.Fatalf("refusals counted: %v, want 1", n)
			}
			// The flood expires; the bystander signs in, and its redeemed
			// authorization frees its place: the flood again takes all of
			// them, no more.
			e.clock.Add(PendingTTL + time.Second)
			e.token(cfg)
			for i := range max {
				started(fmt.Sprintf("second flood %d", i))
			}
			full(e, "past the cap again")
			// A denied authorization frees its place too.
			e.clock.Add(PendingTTL + time.Second)
			for i := range max - 1 {
				started(fmt.Sprintf("third flood %d", i))
			}
			id, csrf := e.started(t, oauth2.GenerateVerifier())
			next := location(t, e.postForm(e.srv.URL+"/oauth/login", loginForm(id, csrf, asUser, asPassword)), http.StatusSeeOther)
			id, csrf = hidden(t, body(t, e.get(e.srv.URL+next.RequestURI())))
			resp := e.postForm(e.srv.URL+"/oauth/consent", url.Values{"id": {id}, "csrf": {csrf}, "decision": {"deny"}})
			resp.Body.Close()
			started("after a denial")
			full(e, "past the cap after the denial")
		})
	}
}

// A code issued in the last minute of its authorization's ten keeps the
// authorization, and its place in the count, for the code's minute: the
// place is not freed while the record still lives.
func TestPendingPlaceOutlivesItsCode(t *testing.T) {
	for _, storage := range []string{"memory", "redis"} {
		t.Run(storage, func(t *testing.T) {
			e := pendingAS(t, storage, func(c *ServerConfig) { c.MaxPendingAuthorizations = 1; c.Consent.Enabled = false })
			v := oauth2.GenerateVerifier()
			id, csrf := e.started(t, v)
			e.clock.Add(PendingTTL - time.Second)
			next := location(t, e.postForm(e.srv.URL+"/oauth/login", loginForm(id, csrf, asUser, asPassword)), http.StatusSeeOther)
			back := location(t, e.get(e.srv.URL+next.RequestURI()), http.StatusFound)
			e.clock.Add(30 * time.Second) // past the ten minutes, within the code's
			cfg := e.oauth2(asClientID, asRedirect)
			authorize := func() *http.Response {
				return e.get(cfg.AuthCodeURL("st", oauth2.S256ChallengeOption(oauth2.GenerateVerifier())))
			}
			if resp := authorize(); resp.StatusCode != http.StatusServiceUnavailable {
				t.Fatalf("another request while the code's authorization lives: %d, want 503", resp.StatusCode)
			} else {
				resp.Body.Close()
			}
			if _, err := cfg.Exchange(e.ctx(), back.Query().Get("code"), oauth2.VerifierOption(v)); err != nil {
				t.Fatal(err)
			}
			location(t, authorize(), http.StatusFound)
		})
	}
}
