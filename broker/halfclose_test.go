package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestHalfClosedCallerEndsItsSession pins a decision: a caller that sends
// its whole /execute request and then half-closes its connection (TCP
// shutdown of its write side, still reading) ends its session as
// EXECUTION_ABORTED, "the caller closed the event stream". HTTP/1.1 does
// not forbid the half-close, but Go's net/http server (Caddy's) reads the
// connection in the background once the body is read, and cancels the
// request's context at EOF: a half-close and a caller that left look the
// same there until a write fails, which on a quiet stream may be long
// after. A session lives as long as its response, and knowing at once that
// the caller left is worth more than serving the rare client that
// half-closes (docs/broker.md).
func TestHalfClosedCallerEndsItsSession(t *testing.T) {
	tools := NewToolRegistry()
	started := make(chan struct{}, 1)
	tools.Register(ToolDefinition{Name: "test:wait", Description: "waits for its context",
		Handler: func(ctx context.Context, _ map[string]any, _ *ExecutionContext) (any, error) {
			started <- struct{}{}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(20 * time.Second):
				return "not stopped", nil
			}
		}})
	b, err := New(&BrokerOptions{Engine: testEngine(), Tools: tools})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(context.Background())
	srv := httptest.NewServer(b.Handler())
	defer srv.Close()

	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body, _ := json.Marshal(map[string]any{"code": `return await callTool("test:wait", {})`})
	if _, err := fmt.Fprintf(conn, "POST /execute HTTP/1.1\r\nHost: broker\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body); err != nil {
		t.Fatal(err)
	}
	<-started
	if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(15 * time.Second))
	stream, _ := io.ReadAll(conn)
	if !strings.Contains(string(stream), "EXECUTION_ABORTED") || strings.Contains(string(stream), "not stopped") {
		t.Fatalf("the stream of a half-closed caller:\n%s", stream)
	}
}
