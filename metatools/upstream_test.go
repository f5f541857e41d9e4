package metatools

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"
)

// stdioServerEnv makes the test binary act as a stdio MCP server (see
// TestMain), so that upstreams by command are tested against a real process.
const stdioServerEnv = "METATOOLS_TEST_STDIO_SERVER"

func TestMain(m *testing.M) {
	if os.Getenv(stdioServerEnv) == "1" {
		serveStdioForTest()
		return
	}
	if pids := os.Getenv(stdioGatewayEnv); pids != "" {
		serveStdioGatewayForTest(pids)
		return
	}
	if mode := os.Getenv(stdioModeEnv); mode != "" {
		serveHostileStdioForTest(mode)
		return
	}
	os.Exit(m.Run())
}

// serveStdioForTest is a stdio MCP server with "upper" and "exit" (which
// ends the process, to test reconnection).
func serveStdioForTest() {
	srv := mcp.NewServer(&mcp.Implementation{Name: "stdio-upstream", Version: "v1"}, nil)
	type in struct {
		Text string `json:"text"`
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "upper", Description: "Upper-case a text"},
		func(_ context.Context, _ *mcp.CallToolRequest, v in) (*mcp.CallToolResult, map[string]string, error) {
			b := []byte(v.Text)
			for i, c := range b {
				if c >= 'a' && c <= 'z' {
					b[i] = c - 32
				}
			}
			return nil, map[string]string{"text": string(b)}, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "exit", Description: "Exit the server process"},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			os.Exit(0)
			return nil, nil, nil
		})
	srv.Run(context.Background(), &mcp.StdioTransport{})
}

// textUpstream is an upstream by command running this test binary as the
// stdio server of serveStdioForTest, and an index over it.
func textUpstream(t *testing.T) (*Upstream, *Index) {
	t.Helper()
	u, err := NewUpstream(UpstreamConfig{Name: "text", Command: os.Args[0], Args: []string{"-test.run=^$"},
		Env: []string{stdioServerEnv + "=1"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ix, err := NewIndex([]ToolSource{u}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return u, ix
}

// TestUpstreamCommandAndReconnect connects an upstream by command (this
// test binary as a stdio server), calls it, kills it, and checks that the
// upstream reconnects to a new process and lists its tools again.
func TestUpstreamCommandAndReconnect(t *testing.T) {
	old := upstreamMinBackoff
	upstreamMinBackoff = time.Millisecond
	t.Cleanup(func() { upstreamMinBackoff = old })

	u, ix := textUpstream(t)
	reloads := make(chan int, 16)
	ix.OnReload(func(n int) {
		select {
		case reloads <- n:
		default:
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	u.Start(ctx)
	t.Cleanup(func() { u.Close() })
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for !ok() {
			select {
			case <-reloads:
			case <-ctx.Done():
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	waitFor("text:upper in the index", func() bool { _, ok := ix.Lookup("text:upper"); return ok })
	s := NewService(ix, nil)
	out, cerr := s.CallTool(ctx, "text:upper", json.RawMessage(`{"text":"abc"}`))
	if cerr != nil || string(out) != `{"text":"ABC"}` {
		t.Fatalf("upper: %s %v", out, cerr)
	}
	for len(reloads) > 0 {
		<-reloads
	}
	// The process exits mid-call; the session ends and a new process is
	// started and listed (a reload on reconnect).
	s.CallTool(ctx, "text:exit", json.RawMessage(`{}`))
	<-reloads
	waitFor("a working reconnected session", func() bool {
		out, cerr := s.CallTool(ctx, "text:upper", json.RawMessage(`{"text":"again"}`))
		return cerr == nil && string(out) == `{"text":"AGAIN"}`
	})
}

// TestUpstreamHeaders: a URL upstream behind a bearer token is reached with
// the configured headers.
func TestUpstreamHeaders(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "private", Version: "v1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "ping", Description: "Ping"},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, map[string]string, error) {
			return nil, map[string]string{"pong": "yes"}, nil
		})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer secret" {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	defer hs.Close()
	u, err := NewUpstream(UpstreamConfig{Name: "priv", URL: hs.URL, Headers: map[string]string{"Authorization": "Bearer secret"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	u.Start(ctx)
	defer u.Close()
	tools, _ := u.Tools(ctx)
	if len(tools) != 1 || tools[0].Name != "priv:ping" {
		t.Fatalf("tools = %+v", tools)
	}
	out, err := u.Call(ctx, "priv:ping", json.RawMessage(`{}`))
	if err != nil || string(out) != `{"pong":"yes"}` {
		t.Fatalf("call: %s %v", out, err)
	}
	if _, err := NewUpstream(UpstreamConfig{Name: "x", Command: "y", Headers: map[string]string{"a": "b"}}, nil); err == nil {
		t.Error("headers on a command upstream accepted")
	}
}

// TestUpstreamFailuresAreBoundedAndLabelled: a call on a hung upstream ends
// at the upstream's call deadline (TIMEOUT), and a call on an upstream that
// died is UPSTREAM_UNAVAILABLE, its address and dial error left in the log.
func TestUpstreamFailuresAreBoundedAndLabelled(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "flaky", Version: "v1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "hang", Description: "Hang"},
		func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, map[string]string, error) {
			select {
			case <-ctx.Done():
			case <-time.After(time.Minute):
			}
			return nil, map[string]string{}, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "ping", Description: "Ping"},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, map[string]string, error) {
			return nil, map[string]string{"pong": "yes"}, nil
		})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)}
	go hs.Serve(ln)
	defer hs.Close()
	addr := ln.Addr().String()
	u, err := NewUpstream(UpstreamConfig{Name: "flaky", URL: "http://" + addr + "/mcp", CallTimeout: 300 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	u.Start(ctx)
	defer u.Close()
	if out, err := u.Call(ctx, "flaky:ping", json.RawMessage(`{}`)); err != nil || string(out) != `{"pong":"yes"}` {
		t.Fatalf("ping: %s %v", out, err)
	}
	var me *Error
	if _, err := u.Call(ctx, "flaky:hang", json.RawMessage(`{}`)); !errors.As(err, &me) || me.Code != sandbox.CodeTimeout {
		t.Fatalf("hung call: %v, want TIMEOUT", err)
	}
	hs.Close() // the upstream dies: every connection and the listener
	_, err = u.Call(ctx, "flaky:ping", json.RawMessage(`{}`))
	if !errors.As(err, &me) || me.Code != "UPSTREAM_UNAVAILABLE" {
		t.Fatalf("call on a dead upstream: %v, want UPSTREAM_UNAVAILABLE", err)
	}
	port := addr[strings.LastIndexByte(addr, ':')+1:]
	for _, leak := range []string{"127.0.0.1", port, "dial", "Post", "http://"} {
		if strings.Contains(me.Message, leak) {
			t.Errorf("message %q shows %q", me.Message, leak)
		}
	}
}
