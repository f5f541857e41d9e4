package caddymodules

import (
	"errors"
	"io"
	"net/http"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// unansweredRetry is a client transport for tests that reload Caddy. It
// sends each request on a fresh connection and resends it, on another fresh
// connection, when the server closed the connection without answering.
//
// Why: caddy.Load returns once the old servers' shutdowns have been started
// in goroutines, not once they have stopped accepting (Caddy's http app Stop
// says so: "the scheduler might still pause them right before calling
// Shutdown()"). A connection the old server accepts in that window is read
// and then dropped unanswered because the server is shutting down (net/http
// checks this after reading the request and before running any handler),
// and the client sees EOF or a reset. And Caddy binds each config's
// listener anew with SO_REUSEPORT: a connection the kernel queued on the
// old listener is reset when that closes, unanswered, even while it is
// being dialled ("connect: connection reset by peer"; docs/reloads.md). On
// a loaded machine these windows are wide enough to fail a test. A request that got any response, whatever its
// status, is returned as is, so a server that answers wrongly still fails
// the test; only "no answer at all" is retried, a bounded number of times.
type unansweredRetry struct{ base *http.Transport }

func (u unansweredRetry) RoundTrip(req *http.Request) (*http.Response, error) {
	deadline := time.Now().Add(10 * time.Second)
	r := req
	for {
		resp, err := u.base.RoundTrip(r)
		if err == nil || !unanswered(err) || req.Context().Err() != nil || time.Now().After(deadline) {
			return resp, err
		}
		if req.Body != nil && req.GetBody == nil {
			return resp, err // the body cannot be sent again
		}
		r = req.Clone(req.Context())
		if req.GetBody != nil {
			body, gerr := req.GetBody()
			if gerr != nil {
				return nil, err
			}
			r.Body = body
		}
		runtime.Gosched() // let the old server's shutdown goroutine run
	}
}

// unanswered reports whether err means the connection closed before any
// response arrived. net/http names one case itself, unexported: a request
// written on a kept-alive connection the server had just closed as idle
// ("http: server closed idle connection"; it resends only idempotent ones).
func unanswered(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		strings.Contains(err.Error(), "server closed idle connection")
}

// reloadClient talks to a Caddy that tests reload; see unansweredRetry.
var reloadClient = &http.Client{Transport: unansweredRetry{&http.Transport{DisableKeepAlives: true}}}

// untilReloaded waits, after caddy.Load, until answeredByNew has held three
// times in a row (at most 10 s): until then the outgoing config can still
// accept a connection and answer it normally, as its server's Shutdown has
// not run yet (see unansweredRetry), so a test that asks once right after a
// reload may get the old config's answer.
func untilReloaded(t *testing.T, answeredByNew func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for inARow := 0; inARow < 3; {
		if answeredByNew() {
			inARow++
			continue
		}
		inARow = 0
		if time.Now().After(deadline) {
			t.Fatal("the reloaded config did not answer within 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
