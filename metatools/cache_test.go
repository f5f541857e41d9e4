package metatools

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// changingSource is a tool source whose list a test replaces.
type changingSource struct {
	mu        sync.Mutex
	tools     []Tool
	listeners []func()
}

func (c *changingSource) Tools(context.Context) ([]Tool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Tool(nil), c.tools...), nil
}

func (c *changingSource) Call(context.Context, string, json.RawMessage) (json.RawMessage, error) {
	return json.RawMessage(`null`), nil
}

// fakeClock is a clock a test moves by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (f *fakeClock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.t
}

func (f *fakeClock) Add(d time.Duration) {
	f.mu.Lock()
	f.t = f.t.Add(d)
	f.mu.Unlock()
}

// TestIndexVersion: the version changes with the tool set and only then.
func TestIndexVersion(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1_800_000_000, 0)}
	src := &changingSource{tools: []Tool{{Name: "a:one", Description: "first"}}}
	ix, err := NewIndex([]ToolSource{src}, &IndexOptions{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ix.Reload(ctx)
	v1, at1 := ix.Version(), ix.ChangedAt()
	clock.Add(time.Minute)
	ix.Reload(ctx) // same tools
	if ix.Version() != v1 || !ix.ChangedAt().Equal(at1) {
		t.Fatalf("a rebuild with the same tools changed the version: %s %v -> %s %v", v1, at1, ix.Version(), ix.ChangedAt())
	}
	src.mu.Lock()
	src.tools = []Tool{{Name: "a:one", Description: "first, reworded"}}
	src.mu.Unlock()
	ix.Reload(ctx)
	if ix.Version() == v1 || !ix.ChangedAt().Equal(clock.Now()) {
		t.Fatalf("a changed description kept the version %s (changed at %v)", v1, ix.ChangedAt())
	}
}

// TestListsCacheable: tools/list and server/discover carry ttlMs (a tenth
// of the index's age, at most ListTTL) and cacheScope public; tools/list
// carries the index version in _meta.
func TestListsCacheable(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1_800_000_000, 0)}
	src := &changingSource{tools: []Tool{{Name: "a:one", Description: "first"}}}
	ix, err := NewIndex([]ToolSource{src}, &IndexOptions{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	ix.Reload(context.Background())
	srv := NewServer(NewService(ix, nil), &ServerOptions{Now: clock.Now, ListTTL: 2 * time.Minute})
	ctx := context.Background()
	for _, tc := range []struct {
		age  time.Duration
		want int
	}{{0, 0}, {100 * time.Second, 10_000}, {time.Hour, 120_000}} {
		clock.t = ix.ChangedAt().Add(tc.age)
		// A client per case: the go-sdk client itself caches the list for ttlMs.
		st, ct := mcp.NewInMemoryTransports()
		ss, err := srv.Connect(ctx, st, nil)
		if err != nil {
			t.Fatal(err)
		}
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(ctx, ct, nil)
		if err != nil {
			t.Fatal(err)
		}
		res, err := cs.ListTools(ctx, nil)
		cs.Close()
		ss.Close()
		if err != nil {
			t.Fatal(err)
		}
		if res.TTLMs != tc.want || res.CacheScope != "public" || res.Meta[MetaKeyToolIndexVersion] != ix.Version() {
			t.Errorf("index age %v: ttlMs %d (want %d), cacheScope %q, _meta %v", tc.age, res.TTLMs, tc.want, res.CacheScope, res.Meta)
		}
	}
	if listTTL(ix, ix.ChangedAt().Add(-time.Hour), time.Minute) != 0 {
		t.Error("a clock behind the index gave a negative ttl")
	}
}

func TestSessionPartition(t *testing.T) {
	for _, tc := range []struct {
		ci   CallInfo
		want string
	}{
		{CallInfo{SessionID: "s1", UserID: "ada", ClientIP: "10.0.0.1"}, "s1"},
		{CallInfo{UserID: "ada", ClientIP: "10.0.0.1"}, "user:ada"},
		{CallInfo{UserID: "ada", TenantID: "t1", ClientIP: "10.0.0.1"}, "user:t1/ada"},
		{CallInfo{ClientIP: "10.0.0.1"}, "ip:10.0.0.1"},
		// An IPv6 host is its /64 (the default prefix), or the key the
		// front end computed with its own prefixes.
		{CallInfo{ClientIP: "2001:db8:1:2::7"}, "ip:2001:db8:1:2::/64"},
		{CallInfo{ClientIP: "::ffff:10.0.0.1"}, "ip:10.0.0.1"},
		{CallInfo{ClientIP: "2001:db8:1:2::7", ClientKey: "2001:db8:1::/48"}, "ip:2001:db8:1::/48"},
		{CallInfo{}, ""},
	} {
		if got := tc.ci.SessionPartition(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.ci, got, tc.want)
		}
	}
}
