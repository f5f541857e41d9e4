package caddymodules

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// slowUpstream is a real go-sdk MCP server over Streamable HTTP with the
// tool "add" that answers no request until release is closed: an upstream
// slow to connect.
func slowUpstream(t *testing.T) (url string, release chan struct{}) {
	t.Helper()
	srv := mcp.NewServer(&mcp.Implementation{Name: "slow", Version: "v1"}, nil)
	type in struct{ A, B int }
	mcp.AddTool(srv, &mcp.Tool{Name: "add", Description: "Add two integers"},
		func(_ context.Context, _ *mcp.CallToolRequest, v in) (*mcp.CallToolResult, map[string]int, error) {
			return nil, map[string]int{"sum": v.A + v.B}, nil
		})
	release = make(chan struct{})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	return hs.URL, release
}

// TestMetaCallWaitsForUpstreamConnect: a meta-tool call that arrives after
// the config is provisioned but before its upstreams' first connection is
// over (right after a start or a reload: Caddy may serve the new config's
// requests before the codemode app's Start has connected them) waits for
// the connection and finds the upstream's tools. Before, meta:invoke
// answered TOOL_NOT_FOUND for calc:add and meta:search found nothing.
func TestMetaCallWaitsForUpstreamConnect(t *testing.T) {
	quietCaddy(t)
	up, release := slowUpstream(t)
	app, unload, err := loadApp(fmt.Appendf(nil, `{"meta":{"connect_timeout":%d,"upstreams":[{"name":"calc","url":%q}]}}`,
		int64(20*time.Second), up))
	if err != nil {
		t.Fatal(err)
	}
	defer unload()
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	started := make(chan error, 1)
	go func() { started <- app.Start() }()
	defer func() {
		open()
		if err := <-started; err != nil {
			t.Error(err)
		}
		_ = app.Stop()
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	serverT, clientT := mcp.NewInMemoryTransports()
	ss, err := app.MetaServer().Connect(ctx, serverT, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	cs := connectMCP(t, clientT)
	type answer struct {
		res *mcp.CallToolResult
		err error
	}
	invoked, searched := make(chan answer, 1), make(chan answer, 1)
	go func() {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "meta:invoke", Arguments: map[string]any{"tool": "calc:add", "input": map[string]any{"A": 2, "B": 3}}})
		invoked <- answer{res, err}
	}()
	go func() {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "meta:search", Arguments: map[string]any{"queries": []string{"add two integers"}}})
		searched <- answer{res, err}
	}()
	// The upstream connects only after the calls had the time to be
	// answered without it (were the pause too short, the test would pass
	// without proving anything, never fail wrongly).
	time.Sleep(300 * time.Millisecond)
	open()
	a := <-invoked
	if a.err != nil || a.res.IsError || !strings.Contains(resultText(a.res), `"sum":5`) {
		t.Errorf("meta:invoke calc:add before the upstream connected: %v %s", a.err, resultTextOf(a.res))
	}
	a = <-searched
	if a.err != nil || a.res.IsError || !strings.Contains(resultText(a.res), `"calc:add"`) {
		t.Errorf("meta:search before the upstream connected: %v %s", a.err, resultTextOf(a.res))
	}
}

// resultTextOf is resultText of a result that may be nil.
func resultTextOf(res *mcp.CallToolResult) string {
	if res == nil {
		return "(no result)"
	}
	return resultText(res)
}
