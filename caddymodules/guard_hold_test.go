package caddymodules

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/codemode-gateway/caddy-codemode/guard"
)

// provisionGuard provisions g outside a server, cleaned up after tb.
func provisionGuard(tb testing.TB, g *Guard) {
	tb.Helper()
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	tb.Cleanup(cancel)
	if err := g.Provision(ctx); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = g.Cleanup() })
}

// guardRequest is a request with Caddy's context (replacer, vars) from
// 127.0.0.1 in session.
func guardRequest(session string) *http.Request {
	c := context.WithValue(context.Background(), caddy.ReplacerCtxKey, caddy.NewReplacer())
	c = context.WithValue(c, caddyhttp.VarsCtxKey, map[string]any{})
	r := httptest.NewRequest("GET", "/", nil).WithContext(c)
	r.RemoteAddr = "127.0.0.1:5555"
	r.Header.Set("Mcp-Session-Id", session)
	return r
}

// TestGuardHoldUnderConcurrency: requests served concurrently by handlers
// with two concurrency limits (tickets in the pooled holder's array) and
// with three (a slice of their own), with next handlers that panic, run
// into the timeout or serve a request whose client went away, never hold
// more slots than a limit has, and every
// slot is back afterwards: a pooled holder is not shared by two requests.
func TestGuardHoldUnderConcurrency(t *testing.T) {
	const slots = 2
	c := Concurrency{MaxConcurrent: slots}
	perSession := Concurrency{MaxConcurrent: slots, PartitionBy: "session"}
	// two's timeout has passed when next starts: its requests end in 408.
	two := &Guard{Zone: "hold2", Timeout: caddy.Duration(1), Concurrency: []GuardConcurrency{{Name: "a", Concurrency: c}, {Name: "b", Concurrency: perSession}}}
	three := &Guard{Zone: "hold3", Concurrency: []GuardConcurrency{{Name: "a", Concurrency: c}, {Name: "b", Concurrency: perSession}, {Name: "c", Concurrency: c}}}
	provisionGuard(t, two)
	provisionGuard(t, three)

	var inUse [2]atomic.Int64 // by handler: every limit but b's sessions is global
	var over atomic.Int64
	errPanic := errors.New("next panicked")
	serve := func(g *Guard, n *atomic.Int64, session string, i int) (err error) {
		defer func() {
			if v := recover(); v != nil {
				err = errPanic
			}
		}()
		w := httptest.NewRecorder()
		r := guardRequest(session)
		if i%5 == 4 {
			// The client went away before next starts.
			ctx, cancel := context.WithCancel(r.Context())
			cancel()
			r = r.WithContext(ctx)
		}
		return g.ServeHTTP(w, r, caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
			k := n.Add(1)
			for range 3 {
				runtime.Gosched()
				k = max(k, n.Load())
			}
			n.Add(-1)
			if k > slots {
				over.Store(k)
			}
			if i%7 == 3 {
				panic("next")
			}
			return nil
		}))
	}
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Go(func() {
			for i := range 200 {
				h, n := two, &inUse[0]
				if (g+i)%2 == 1 {
					h, n = three, &inUse[1]
				}
				_ = serve(h, n, fmt.Sprint("s", i%2), i)
			}
		})
	}
	wg.Wait()
	if k := over.Load(); k != 0 {
		t.Fatalf("%d requests ran at once under a limit of %d", k, slots)
	}
	now := time.Now().UnixMilli()
	for _, g := range []*Guard{two, three} {
		st := g.manager.Storage()
		for _, s := range g.sems {
			for _, part := range []string{guard.PartitionGlobal, "s0", "s1"} {
				key := guard.BuildStorageKey(s.entity, part, "sem")
				if n, _ := st.ActiveSlots(context.Background(), key, now); n != 0 {
					t.Fatalf("%s: %d slots held after every request", key, n)
				}
			}
		}
	}
}

// TestGuardReloadWhileHeld: a handler of the reloaded config (same limits)
// shares the counters and the slots of the old one; a slot the old
// handler's request holds across the reload comes back when it ends, after
// the old handler was cleaned up; different limits count afresh.
func TestGuardReloadWhileHeld(t *testing.T) {
	freezeGuardClock(t)
	newGuard := func(max int64) *Guard {
		return &Guard{
			RateLimits:  []GuardRateLimit{{RateLimit: RateLimit{MaxRequests: max, Window: caddy.Duration(time.Minute)}}},
			Concurrency: []GuardConcurrency{{Concurrency: Concurrency{MaxConcurrent: 1}}},
		}
	}
	ok := caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error { return nil })
	status := func(g *Guard, next caddyhttp.Handler) int {
		w := httptest.NewRecorder()
		if err := g.ServeHTTP(w, guardRequest("s"), next); err != nil {
			var he caddyhttp.HandlerError
			if errors.As(err, &he) {
				return he.StatusCode
			}
			t.Fatal(err)
		}
		return w.Code
	}
	old := newGuard(4)
	provisionGuard(t, old)
	renewed := newGuard(4)
	inner := -1
	if s := status(old, caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error {
		provisionGuard(t, renewed) // the reload, while this request holds the slot
		inner = status(renewed, ok)
		if err := old.Cleanup(); err != nil { // the old config is unloaded
			return err
		}
		return nil
	})); s != 200 {
		t.Fatalf("the held request: %d", s)
	}
	if inner != 429 {
		t.Fatalf("the new handler while the old one's request holds the slot: %d", inner)
	}
	// 2 of 4 counted so far (the refused one counted its rate).
	for i, want := range []int{200, 200, 429} {
		if s := status(renewed, ok); s != want {
			t.Fatalf("after the reload, request %d: %d, want %d", i, s, want)
		}
	}
	other := newGuard(5)
	provisionGuard(t, other)
	for i := range 5 {
		if s := status(other, ok); s != 200 {
			t.Fatalf("different limits, request %d: %d", i, s)
		}
	}
}

// servedCount is a next handler that is not a caddyhttp.HandlerFunc.
type servedCount struct{ n int }

func (s *servedCount) ServeHTTP(http.ResponseWriter, *http.Request) error {
	s.n++
	return nil
}

// TestGuardNextNotHandlerFunc: ServeHTTP calls a Caddy route's next (a
// HandlerFunc) as a function; any other caddyhttp.Handler is served too,
// and its slot comes back.
func TestGuardNextNotHandlerFunc(t *testing.T) {
	g := &Guard{Zone: "nexttype", Concurrency: []GuardConcurrency{{Concurrency: Concurrency{MaxConcurrent: 1}}}}
	provisionGuard(t, g)
	next := new(servedCount)
	for i := range 3 {
		w := httptest.NewRecorder()
		if err := g.ServeHTTP(w, guardRequest("s"), next); err != nil || w.Code != 200 {
			t.Fatalf("request %d: %d %v", i, w.Code, err)
		}
	}
	if next.n != 3 {
		t.Fatalf("next served %d of 3 requests", next.n)
	}
}
