package caddymodules

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// TestStreamCapThroughCaddysWriter: a broker being replaced (a reload that
// changes it) aborts the sessions it still runs after its drain and caps
// their streams' write deadline from another goroutine than the stream's
// writer, so that a client reading nothing cannot hold the old config. Caddy
// wraps a response in its IdleTimeoutWriter (write_idle, a minute by
// default), whose SetWriteDeadline keeps the deadline in a field its writes
// read: the cap went through it, a data race that -race reported in the built
// binary (twentieth pass: caddy built with -race, SIGTERM under stalled
// /execute and MCP readers). The cap now reaches the connection under
// Caddy's writer and goes through the writer from the writer's own
// goroutine. Under -race, this test failed with the race; it also wants the
// stalled stream ended.
func TestStreamCapThroughCaddysWriter(t *testing.T) {
	port := freePort(t)
	startCaddyfile(t, brokerCaddyfile(port, "drain_timeout 1s"))

	conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.(*net.TCPConn).SetReadBuffer(4096)
	// 20 tool calls of 200 KB in and out (8 MB of events), then a question
	// nobody answers: the stream's writer blocks on the client.
	body, _ := json.Marshal(map[string]any{"code": `const big = "y".repeat(200000);
for (let i = 0; i < 20; i++) await callTool("text:upper", {text: big});
return await callTool("client:prompt", {question: "q"})`})
	if _, err := fmt.Fprintf(conn, "POST /broker/execute HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", port, len(body), body); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(time.Minute))
	status := make([]byte, len("HTTP/1.1 200"))
	if _, err := io.ReadFull(conn, status); err != nil || string(status) != "HTTP/1.1 200" {
		t.Fatalf("answer %q, %v", status, err)
	}
	// A new broker; the old one drains for a second, then aborts the session
	// and caps its stream.
	loadCaddyfile(t, brokerCaddyfile(port, "drain_timeout 2s"))
	// The stream ends (its write failed at the cap): read what the server
	// sent until it closes. The receive buffer grows first: a window under
	// one segment (64 KiB on loopback) is never advertised, and the rest
	// of the stream would trickle in on the sender's zero-window probes. A
	// minute is a backstop against a hang.
	_ = conn.(*net.TCPConn).SetReadBuffer(4 << 20)
	rest, err := io.ReadAll(conn)
	if err != nil {
		t.Fatalf("reading the stalled stream after the reload: %v (after %d bytes)", err, len(rest))
	}
	if strings.Contains(string(rest), `"type":"result"`) {
		t.Fatalf("the session completed: %s", rest[len(rest)-200:])
	}
}
