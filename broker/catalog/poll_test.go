package catalog

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// A path that the shop document does not have, to add and remove.
const extraPath = `  /toys:
    get:
      operationId: listToys
      responses:
        "200":
          description: Toys.
`

func withExtraPath(doc []byte) []byte {
	return bytes.Replace(doc, []byte("paths:\n"), []byte("paths:\n"+extraPath), 1)
}

func TestVersionChangesExactlyWhenActionsComeOrGo(t *testing.T) {
	base := readTestdata(t, "shop.yaml")
	up := newUpstream(t, base)
	now := fixedNow
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func() { mu.Lock(); now = now.Add(time.Minute); mu.Unlock() }

	c, err := New([]Source{{Name: "shop", SpecURL: up.srv.URL + "/openapi.yaml"}}, &Options{PollInterval: -1, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	var changes atomic.Int32
	c.OnChange(func() { changes.Add(1) })
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	v0 := c.Version()
	if changes.Load() != 1 {
		t.Fatalf("first load: %d change notifications", changes.Load())
	}

	refresh := func(step string) CatalogResponse {
		t.Helper()
		advance()
		if err := c.Refresh(context.Background()); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		return c.Response()
	}

	// Same document: a 304, nothing changes but lastUpdated.
	r := refresh("unchanged")
	if r.Version != v0 || changes.Load() != 1 || r.Services[0].LastUpdated != "2026-11-22T15:05:05.123Z" {
		t.Fatalf("unchanged: version %s (was %s), %d changes, %+v", r.Version, v0, changes.Load(), r.Services[0])
	}
	if _, notModified := up.counts(); notModified != 1 {
		t.Fatalf("expected one conditional 304, got %d", notModified)
	}

	// Whitespace and comments only: the version and the actions stay.
	up.setSpec(append([]byte("# reformatted\n\n"), bytes.ReplaceAll(base, []byte("\n"), []byte("  \n"))...), 0)
	if r = refresh("whitespace"); r.Version != v0 || changes.Load() != 1 {
		t.Fatalf("whitespace: version %s (was %s), %d changes", r.Version, v0, changes.Load())
	}

	// A description changes: same action set, so the same version, but
	// listeners (the tool index) hear about it.
	up.setSpec(bytes.Replace(base, []byte("summary: List pets"), []byte("summary: List all the pets"), 1), 0)
	r = refresh("description")
	if r.Version != v0 || changes.Load() != 2 {
		t.Fatalf("description: version %s (was %s), %d changes", r.Version, v0, changes.Load())
	}
	if a, _ := c.Action("shop_listPets_2"); a.Summary != "List all the pets" {
		t.Fatalf("summary %q", a.Summary)
	}

	// An action is added: a new version.
	up.setSpec(withExtraPath(base), 0)
	r = refresh("added")
	v1 := r.Version
	if v1 == v0 || r.Services[0].ActionCount != 10 || changes.Load() != 3 {
		t.Fatalf("added: version %s (was %s), %+v, %d changes", v1, v0, r.Services[0], changes.Load())
	}
	if _, ok := c.Action("shop_listToys"); !ok {
		t.Fatal("shop_listToys missing")
	}

	// A failed poll keeps the last good catalog and its lastUpdated.
	before := r.Services[0].LastUpdated
	up.setSpec(nil, 500)
	advance()
	err = c.Refresh(context.Background())
	if err == nil || !strings.Contains(err.Error(), `loading catalog source "shop": fetching document: status 500`) {
		t.Fatalf("failed poll err = %v", err)
	}
	r = c.Response()
	if r.Version != v1 || len(r.Actions) != 10 || r.Services[0].LastUpdated != before || r.Services[0].LastError == "" {
		t.Fatalf("after failed poll: version %s, %d actions, %+v", r.Version, len(r.Actions), r.Services[0])
	}
	// So does a document that no longer parses.
	up.setSpec([]byte("openapi: 3.0.3\npaths: [not, a, map]\n"), 0)
	if err := c.Refresh(context.Background()); err == nil || !strings.Contains(err.Error(), "parsing OpenAPI document") {
		t.Fatalf("bad document err = %v", err)
	}
	if r = c.Response(); r.Version != v1 || len(r.Actions) != 10 {
		t.Fatalf("after bad document: version %s, %d actions", r.Version, len(r.Actions))
	}
	if _, err := c.Call(context.Background(), "shop_listToys", nil); err != nil {
		t.Fatalf("calls keep working on the last good catalog: %v", err)
	}

	// The action is removed again: the version is the first one again
	// (it depends on the action set only).
	up.setSpec(base, 0)
	r = refresh("removed")
	if r.Version != v0 || r.Services[0].ActionCount != 9 || r.Services[0].LastError != "" {
		t.Fatalf("removed: version %s (want %s), %+v", r.Version, v0, r.Services[0])
	}
	if _, ok := c.Action("shop_listToys"); ok {
		t.Fatal("shop_listToys still there")
	}
}

func TestVersionIsDeterministicAcrossCatalogs(t *testing.T) {
	doc := readTestdata(t, "shop.yaml")
	versions := map[string]bool{}
	for i := 0; i < 3; i++ {
		up := newUpstream(t, doc)
		c, err := New([]Source{{Name: "shop", SpecURL: up.srv.URL + "/openapi.yaml"}, {Name: "empty", SpecURL: "testdata/does-not-exist.yaml"}}, &Options{PollInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		_ = c.Start(context.Background())
		versions[c.Version()] = true
		c.Close()
	}
	if len(versions) != 1 {
		t.Fatalf("versions differ: %v", versions)
	}
	// The order of the sources does not matter.
	upA, upB := newUpstream(t, doc), newUpstream(t, withExtraPath(doc))
	var orders []string
	for _, names := range [][2]string{{"a", "b"}, {"b", "a"}} {
		byName := map[string]string{"a": upA.srv.URL + "/openapi.yaml", "b": upB.srv.URL + "/openapi.yaml"}
		c, err := New([]Source{{Name: names[0], SpecURL: byName[names[0]]}, {Name: names[1], SpecURL: byName[names[1]]}}, &Options{PollInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		orders = append(orders, c.Version())
		c.Close()
	}
	if orders[0] != orders[1] {
		t.Fatalf("source order changed the version: %v", orders)
	}
	// A different service name with the same document is a different catalog.
	up := newUpstream(t, doc)
	c, _ := New([]Source{{Name: "other", SpecURL: up.srv.URL + "/openapi.yaml"}}, &Options{PollInterval: -1})
	_ = c.Start(context.Background())
	defer c.Close()
	if versions[c.Version()] {
		t.Fatal("renamed service kept the version")
	}
}

// TestPollingLoop drives the background loop with an injected timer: a
// source that failed its first fetch is retried at RetryInterval, a loaded
// one at PollInterval, and a tick picks up a changed document.
func TestPollingLoop(t *testing.T) {
	base := readTestdata(t, "shop.yaml")
	up := newUpstream(t, nil)
	up.setSpec(nil, 503) // the service is not up yet

	waits := make(chan time.Duration, 10)
	ticks := make(chan time.Time)
	after := func(d time.Duration) <-chan time.Time {
		waits <- d
		return ticks
	}
	c, err := New([]Source{{Name: "shop", SpecURL: up.srv.URL + "/openapi.yaml"}}, &Options{
		PollInterval: time.Hour, RetryInterval: 3 * time.Second, After: after,
	})
	if err != nil {
		t.Fatal(err)
	}
	changed := make(chan string, 10)
	c.OnChange(func() { changed <- c.Version() })

	if err := c.Start(context.Background()); err == nil {
		t.Fatal("Start: want the first fetch error")
	}
	if len(c.Response().Actions) != 0 {
		t.Fatal("actions before the source is up")
	}
	// Retries back off 1s, 2s, 4s... capped by the retry interval.
	for i, want := range []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 3 * time.Second} {
		if d := <-waits; d != want {
			t.Fatalf("retry wait %d: %v, want %v", i, d, want)
		}
		if i < 3 {
			ticks <- time.Time{} // the source is still down
		}
	}

	up.setSpec(base, 0)
	ticks <- time.Time{}
	<-changed
	if n := len(c.Response().Actions); n != 9 {
		t.Fatalf("%d actions after the retry", n)
	}
	if d := <-waits; d != time.Hour {
		t.Fatalf("wait after loading %v, want the poll interval", d)
	}

	up.setSpec(withExtraPath(base), 0)
	ticks <- time.Time{}
	<-changed
	if _, ok := c.Action("shop_listToys"); !ok {
		t.Fatal("poll did not pick up the new action")
	}
	<-waits

	done := make(chan struct{})
	go func() { c.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not stop the loop")
	}
	if err := c.Start(context.Background()); err == nil {
		t.Fatal("second Start succeeded")
	}
}

// TestCloseInterruptsStart closes the catalog while Start waits on a
// document server that never answers: Close returns once Start has given up.
func TestCloseInterruptsStart(t *testing.T) {
	hang := make(chan struct{})
	reached := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-hang:
		}
	}))
	defer srv.Close()
	defer close(hang)
	c, err := New([]Source{{Name: "slow", SpecURL: srv.URL + "/openapi.json"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan error)
	go func() { started <- c.Start(context.Background()) }()
	<-reached // the first fetch is in flight
	c.Close()
	if err := <-started; err == nil || !strings.Contains(err.Error(), "context canceled") {
		t.Fatalf("Start after Close: %v", err)
	}
	if err := c.Start(context.Background()); err == nil {
		t.Fatal("Start after Close succeeded")
	}
}

func TestCloseWithoutStart(t *testing.T) {
	c, err := New(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	r := c.Response()
	if !reflect.DeepEqual(r, EmptyResponse()) {
		t.Fatalf("empty catalog response %+v, want %+v", r, EmptyResponse())
	}
	if b, _ := json.Marshal(r); string(b) != `{"actions":[],"services":[],"version":"`+EmptyResponse().Version+`"}` {
		t.Fatalf("empty catalog JSON %s", b)
	}
}

// TestConcurrentCallsDuringRefresh runs calls and reads while refreshes swap
// the catalog between two documents (run with -race).
func TestConcurrentCallsDuringRefresh(t *testing.T) {
	base := readTestdata(t, "shop.yaml")
	up := newUpstream(t, base)
	c, err := New([]Source{{Name: "shop", SpecURL: up.srv.URL + "/openapi.yaml"}}, &Options{PollInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var changes atomic.Int32
	c.OnChange(func() { changes.Add(1) })
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 25; i++ {
				if _, err := c.Call(context.Background(), "shop_pets_get_by_id", json.RawMessage(`{"petId": "p1"}`)); err != nil {
					t.Error(err)
					return
				}
				if r := c.Response(); len(r.Actions) != 9 && len(r.Actions) != 10 {
					t.Errorf("%d actions", len(r.Actions))
					return
				}
			}
		}()
	}
	for i := 0; i < 10; i++ {
		if i%2 == 0 {
			up.setSpec(withExtraPath(base), 0)
		} else {
			up.setSpec(base, 0)
		}
		if err := c.Refresh(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	if changes.Load() != 11 {
		t.Fatalf("%d change notifications, want 11", changes.Load())
	}
}

// A catalog's first load is logged at debug as a load; only a later change
// of its actions is an info line (a reload builds a new catalog each time).
func TestFirstLoadIsNotLoggedAsChange(t *testing.T) {
	base := readTestdata(t, "shop.yaml")
	up := newUpstream(t, base)
	core, logs := observer.New(zap.DebugLevel)
	c, err := New([]Source{{Name: "shop", SpecURL: up.srv.URL + "/openapi.yaml"}}, &Options{PollInterval: -1, Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := logs.FilterMessage("action catalog changed").Len(); n != 0 {
		t.Fatalf("first load logged as a change %d times", n)
	}
	if e := logs.FilterMessage("action catalog loaded").All(); len(e) != 1 || e[0].Level != zap.DebugLevel {
		t.Fatalf("first load: %+v, want one debug line", e)
	}
	up.setSpec(withExtraPath(base), 0)
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if e := logs.FilterMessage("action catalog changed").All(); len(e) != 1 || e[0].Level != zap.InfoLevel {
		t.Fatalf("a new action: %+v, want one info line", e)
	}
}
