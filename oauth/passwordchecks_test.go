package oauth

import (
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
	"golang.org/x/oauth2"
)

// TestPasswordChecksBounded: logins sent at once, each on an authorization
// of its own (as from many addresses, each within the rate limit), compare
// at most MaxPasswordChecks passwords at a time; the others wait their
// turn. They all ran at once, and 200 addresses guessing passwords made
// every other request of the gateway wait on bcrypt.
func TestPasswordChecksBounded(t *testing.T) {
	e := newAS(t, nil)
	e.s.passwordWait = time.Minute // waiting is not what this test is about
	var inside, most atomic.Int32
	overlap := make(chan struct{})
	var once sync.Once
	e.s.comparePassword = func(hash, password []byte) error {
		n := inside.Add(1)
		defer inside.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		if n > int32(MaxPasswordChecks()) {
			once.Do(func() { close(overlap) })
		}
		// Give the other logins the time to come in beside this one.
		select {
		case <-overlap:
		case <-time.After(200 * time.Millisecond):
		}
		return bcrypt.CompareHashAndPassword(hash, password)
	}
	logins := MaxPasswordChecks() + 3
	forms := make([]url.Values, logins)
	for i := range forms {
		id, csrf := e.started(t, oauth2.GenerateVerifier())
		forms[i] = url.Values{"id": {id}, "csrf": {csrf}, "username": {asUser}, "password": {"wrong"}}
	}
	statuses := make([]int, logins)
	var wg sync.WaitGroup
	for i, f := range forms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := e.http.PostForm(e.srv.URL+"/oauth/login", f)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			statuses[i] = resp.StatusCode
		}()
	}
	wg.Wait()
	if got := most.Load(); got > int32(MaxPasswordChecks()) {
		t.Fatalf("%d password comparisons ran at once, want at most %d", got, MaxPasswordChecks())
	}
	for i, st := range statuses {
		if st != http.StatusUnauthorized {
			t.Fatalf("login %d: status %d, want 401 (wrong password)", i, st)
		}
	}
}

// TestLoginBusy: a login that finds no password check free within the
// wait gets 503 with Retry-After and the stable code LOGIN_BUSY, and counts
// no failure against its authorization; once a check is free the same
// login goes through.
func TestLoginBusy(t *testing.T) {
	e := newAS(t, nil)
	e.s.passwordWait = 20 * time.Millisecond
	for range MaxPasswordChecks() {
		e.s.passwordChecks <- struct{}{} // every check taken
	}
	id, csrf := e.started(t, oauth2.GenerateVerifier())
	form := url.Values{"id": {id}, "csrf": {csrf}, "username": {asUser}, "password": {asPassword}}
	resp := e.postForm(e.srv.URL+"/oauth/login", form)
	page := body(t, resp)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" ||
		!strings.Contains(page, `<code id="code">`+CodeLoginBusy+`</code>`) {
		t.Fatalf("status %d, Retry-After %q, page %s; want 503, 1 and %s", resp.StatusCode, resp.Header.Get("Retry-After"), page, CodeLoginBusy)
	}
	if a, err := e.s.pending(e.ctx(), id); err != nil || a.Failures != 0 || a.LoggedIn {
		t.Fatalf("after a busy login: %+v, %v; want no failure counted, not signed in", a, err)
	}
	for range MaxPasswordChecks() {
		<-e.s.passwordChecks
	}
	if next := location(t, e.postForm(e.srv.URL+"/oauth/login", form), http.StatusSeeOther); next.Path != "/oauth/consent" {
		t.Fatalf("login once a check is free led to %s", next)
	}
}

// TestPasswordCheckWaitConfigured: ServerConfig.PasswordCheckWait sets how
// long a login waits for a password check (default PasswordCheckWait), and
// a wait below zero or above MaxPasswordCheckWait fails the server's
// construction; it was a constant, too short for costly hashes on few CPUs.
func TestPasswordCheckWaitConfigured(t *testing.T) {
	if e := newAS(t, nil); e.s.passwordWait != PasswordCheckWait {
		t.Errorf("default wait %v, want %v", e.s.passwordWait, PasswordCheckWait)
	}
	if e := newAS(t, func(c *ServerConfig) { c.PasswordCheckWait = 30 }); e.s.passwordWait != 30*time.Second {
		t.Errorf("password_check_wait 30: wait %v, want 30s", e.s.passwordWait)
	}
	for _, n := range []int{-1, 61, 1 << 62} {
		cfg := ServerConfig{Issuer: "https://as.example.com", Development: true, PasswordCheckWait: n}
		if _, err := NewServer(cfg, nil); err == nil || !strings.Contains(err.Error(), "password_check_wait") {
			t.Errorf("password_check_wait %d: %v, want an error naming it", n, err)
		}
	}
}
