package metatools

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// revisionUpstream is a go-sdk MCP server on a fixed loopback address that
// a test can stop and start again: stateless and speaking only 2026-07-28
// (modern), or through the handshake with revisions up to 2025-11-25.
type revisionUpstream struct {
	t       testing.TB
	modern  bool
	addr    string
	srv     *mcp.Server
	mu      sync.Mutex
	hs      *http.Server
	methods []string // MCP methods received, in order
}

func newRevisionUpstream(t testing.TB, modern bool) *revisionUpstream {
	t.Helper()
	versions := []string{"2025-11-25", "2025-06-18"}
	if modern {
		versions = []string{"2026-07-28"}
	}
	u := &revisionUpstream{t: t, modern: modern,
		srv: mcp.NewServer(&mcp.Implementation{Name: "up", Version: "v1"}, &mcp.ServerOptions{SupportedProtocolVersions: versions})}
	mcp.AddTool(u.srv, &mcp.Tool{Name: "echo", Description: "Echo a text"},
		func(_ context.Context, _ *mcp.CallToolRequest, in struct{ Text string }) (*mcp.CallToolResult, map[string]string, error) {
			return nil, map[string]string{"echo": in.Text}, nil
		})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u.addr = ln.Addr().String()
	u.serve(ln)
	t.Cleanup(u.stop)
	return u
}

func (u *revisionUpstream) serve(ln net.Listener) {
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return u.srv }, &mcp.StreamableHTTPOptions{Stateless: u.modern})
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var msg struct{ Method string }
		if r.Method == http.MethodPost {
			body := make([]byte, 0, 512)
			buf := make([]byte, 512)
			for {
				n, err := r.Body.Read(buf)
				body = append(body, buf[:n]...)
				if err != nil {
					break
				}
			}
			json.Unmarshal(body, &msg)
			r.Body = readCloser{strings.NewReader(string(body))}
			u.mu.Lock()
			u.methods = append(u.methods, msg.Method)
			u.mu.Unlock()
		}
		h.ServeHTTP(w, r)
	})}
	u.mu.Lock()
	u.hs = hs
	u.mu.Unlock()
	go hs.Serve(ln)
}

type readCloser struct{ *strings.Reader }

func (readCloser) Close() error { return nil }

func (u *revisionUpstream) stop() {
	u.mu.Lock()
	hs := u.hs
	u.hs = nil
	u.mu.Unlock()
	if hs != nil {
		hs.Close()
	}
}

// restart stops the server and serves again on the same address.
func (u *revisionUpstream) restart() {
	u.stop()
	var ln net.Listener
	var err error
	for range 50 { // the old listener's port may take a moment to free
		if ln, err = net.Listen("tcp", u.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		u.t.Fatal(err)
	}
	u.serve(ln)
}

func (u *revisionUpstream) saw(method string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, m := range u.methods {
		if m == method {
			return true
		}
	}
	return false
}

// TestUpstreamsOfEitherRevision: the gateway's client speaks 2026-07-28 to
// an upstream that offers it (server/discover, no initialize) and the
// handshake of 2025-11-25 to one that does not; both upstreams' tools are
// indexed and called, also after the upstream restarted, and a tool added
// later reaches the index from each.
func TestUpstreamsOfEitherRevision(t *testing.T) {
	oldBackoff, oldRecheck := upstreamMinBackoff, upstreamRecheck
	upstreamMinBackoff, upstreamRecheck = 10*time.Millisecond, 50*time.Millisecond
	t.Cleanup(func() { upstreamMinBackoff, upstreamRecheck = oldBackoff, oldRecheck })

	kinds := map[string]*revisionUpstream{"modern": newRevisionUpstream(t, true), "legacy": newRevisionUpstream(t, false)}
	var sources []ToolSource
	ups := map[string]*Upstream{}
	for name, ru := range kinds {
		u, err := NewUpstream(UpstreamConfig{Name: name, URL: "http://" + ru.addr}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ups[name] = u
		sources = append(sources, u)
	}
	ix, err := NewIndex(sources, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, u := range ups {
		u.Start(ctx)
		t.Cleanup(func() { u.Close() })
	}
	ix.Reload(ctx)
	if v := ups["modern"].ProtocolVersion(); v != "2026-07-28" {
		t.Errorf("modern upstream negotiated %q", v)
	}
	if v := ups["legacy"].ProtocolVersion(); v != "2025-11-25" {
		t.Errorf("legacy upstream negotiated %q", v)
	}
	if !kinds["modern"].saw("server/discover") || kinds["modern"].saw("initialize") {
		t.Errorf("modern upstream saw %v", kinds["modern"].methods)
	}
	if !kinds["legacy"].saw("initialize") {
		t.Errorf("legacy upstream saw %v", kinds["legacy"].methods)
	}
	s := NewService(ix, nil)
	call := func(name, text string) bool {
		out, cerr := s.CallTool(ctx, name+":echo", json.RawMessage(fmt.Sprintf(`{"Text":%q}`, text)))
		return cerr == nil && string(out) == fmt.Sprintf(`{"echo":%q}`, text)
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for !ok() {
			select {
			case <-ctx.Done():
				t.Fatalf("timed out waiting for %s", what)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	for name := range kinds {
		if !call(name, "hi") {
			t.Fatalf("%s:echo failed", name)
		}
	}
	for name, ru := range kinds {
		ru.restart()
		waitFor(name+":echo after a restart", func() bool { return call(name, "again") })
		mcp.AddTool(ru.srv, &mcp.Tool{Name: "later", Description: "Added later"},
			func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
				return nil, map[string]bool{"ok": true}, nil
			})
		waitFor(name+":later in the index", func() bool {
			_, ok := ix.Lookup(name + ":later")
			return ok
		})
	}
}
