package caddymodules

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codemode-gateway/caddy-codemode/broker"
)

// TestExitWithOpenStreams sends SIGTERM to a real `caddy run` (no
// grace_period, Caddy's default) while an MCP client holds its GET stream
// open and an /execute session waits for its caller. Before exit.go, the
// GET stream kept Caddy's servers (and so the process) waiting forever and
// the session ran on to its execution timeout; now the GET stream ends,
// the session ends after the broker's drain_timeout with SHUTTING_DOWN,
// and the process exits.
func TestExitWithOpenStreams(t *testing.T) {
	cmd, exited, logs, base := runExitGateway(t, "", "")

	// An MCP session of 2025-06-18 with its GET stream open, as the SDKs
	// keep one.
	mcpPost := func(sid, body string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, base+"/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if sid != "" {
			req.Header.Set("Mcp-Session-Id", sid)
			req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
		}
		return doAndDrain(t, req)
	}
	resp := mcpPost("", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"exit-test","version":"1"}}}`)
	sid := resp.Header.Get("Mcp-Session-Id")
	if sid == "" {
		t.Fatalf("initialize: %s, no session id", resp.Status)
	}
	mcpPost(sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	req, _ := http.NewRequest(http.MethodGet, base+"/mcp", nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", sid)
	req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	get, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer get.Body.Close()
	if get.StatusCode != 200 {
		t.Fatalf("GET stream: %s", get.Status)
	}
	getEnded := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, get.Body)
		getEnded <- err
	}()

	// A session waiting for its caller, who can no longer reach a stopping
	// gateway.
	stream, err := http.Post(base+"/broker/execute", "application/json",
		strings.NewReader(`{"code":"return await callTool(\"client:prompt\", {question: \"?\"})"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Body.Close()
	events := bufio.NewScanner(stream.Body)
	var last broker.StreamEvent
	for events.Scan() {
		if err := json.Unmarshal(events.Bytes(), &last); err != nil {
			t.Fatalf("event %q: %v", events.Text(), err)
		}
		if last.Type == broker.EventToolCall {
			break
		}
	}
	if last.Type != broker.EventToolCall {
		t.Fatalf("no tool_call event; last %+v (%v)", last, events.Err())
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var final struct {
		Type    string              `json:"type"`
		Payload broker.ErrorPayload `json:"payload"`
	}
	for events.Scan() {
		if err := json.Unmarshal(events.Bytes(), &final); err != nil {
			t.Fatalf("event %q: %v", events.Text(), err)
		}
	}
	if final.Type != broker.EventError || final.Payload.Error.Code != broker.CodeShuttingDown {
		t.Errorf("last event of the waiting session = %+v, want error %s", final, broker.CodeShuttingDown)
	}
	wantExit(t, exited, logs, "")
	select {
	case <-getEnded:
	case <-time.After(10 * time.Second):
		t.Error("the MCP GET stream is still open after caddy exited")
	}
}

// runExitGateway runs the built gateway of the exit tests (globalOption
// in the global options, demo tools, the broker under /broker with a
// drain_timeout of 1s and brokerOption, MCP at /mcp) as runCaddy does, and
// returns its base URL too.
func runExitGateway(t *testing.T, globalOption, brokerOption string) (cmd *exec.Cmd, exited chan error, logs *strings.Builder, base string) {
	t.Helper()
	bin, err := caddyBinary()
	if err != nil {
		t.Fatal(err)
	}
	port, admin := freePort(t), freePort(t)
	base = fmt.Sprintf("http://localhost:%d", port)
	caddyfile := fmt.Sprintf(`{
	admin localhost:%d
	%s
	codemode {
		broker {
			demo_tools
			drain_timeout 1s
			%s
		}
	}
}

http://localhost:%d {
	bind 127.0.0.1
	handle_path /broker/* {
		codemode_broker
	}
	codemode_mcp /mcp
}
`, admin, globalOption, brokerOption, port)
	cmd, exited, logs = runCaddy(t, bin, caddyfile, base)
	return cmd, exited, logs, base
}

// runCaddy runs bin as `caddy run` of caddyfile until the test ends (its
// config and data directories in the test's), and waits until
// base/broker/health answers. logs gets what it prints on stderr; exited,
// cmd.Wait's result (see startCmd).
func runCaddy(t *testing.T, bin, caddyfile, base string) (cmd *exec.Cmd, exited chan error, logs *strings.Builder) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "Caddyfile")
	if err := os.WriteFile(path, []byte(caddyfile), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd = exec.Command(bin, "run", "--config", path, "--adapter", "caddyfile")
	// `caddy run` autosaves its config under the user's config directory.
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+home, "XDG_DATA_HOME="+home)
	logs = new(strings.Builder)
	cmd.Stdout, cmd.Stderr = io.Discard, logs
	exited = startCmd(t, cmd)
	eventually(t, "gateway answering", func() (bool, string) {
		resp, err := http.Get(base + "/broker/health")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == 200, resp.Status
	})
	return cmd, exited, logs
}

// startCmd starts cmd and kills it when the test ends. The channel gets
// cmd.Wait's result: a test that reads it puts it back for the cleanup.
func startCmd(t *testing.T, cmd *exec.Cmd) chan error {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	return exited
}

// TestExitWithWaitingPlan: a meta:execute plan of an older MCP revision
// runs inside its tools/call request (not as a broker session) and waits
// for its client's elicitation answer, which never comes. SIGTERM must end
// it drain_timeout after the exit began, answered with EXECUTION_ABORTED
// naming the stop, and the process must exit: Caddy's servers wait for
// every open request. Before, the plan held the exit for its execution
// timeout (here 5 minutes; 30 s by default), found by SIGTERM of a
// gateway under an MCP client that had not answered yet.
func TestExitWithWaitingPlan(t *testing.T) {
	cmd, exited, logs, base := runExitGateway(t, "", "execution_timeout 5m")

	asked := make(chan struct{})
	opts := &mcp.ClientOptions{ElicitationHandler: func(ctx context.Context, _ *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		close(asked)
		<-ctx.Done() // a person who never answers
		return nil, ctx.Err()
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, opts).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: base + "/mcp", HTTPClient: &http.Client{Transport: &http.Transport{}}},
		&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	type answer struct {
		res *mcp.CallToolResult
		err error
	}
	called := make(chan answer, 1)
	go func() {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "meta:execute", Arguments: map[string]any{
			"script": `return await callTool("client:prompt", {question: "name?"})`}})
		called <- answer{res, err}
	}()
	select {
	case <-asked:
	case a := <-called:
		t.Fatalf("the plan ended before asking its client: %v %s", a.err, resultText(a.res))
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// The minute is far less than the plan's 5 min.
	wantExit(t, exited, logs, " while a plan waited for its client")
	a := <-called
	if a.err != nil {
		t.Fatalf("meta:execute: %v, want its answer before the exit", a.err)
	}
	if text := resultText(a.res); !a.res.IsError || !strings.Contains(text, "EXECUTION_ABORTED") || !strings.Contains(text, "stopping") {
		t.Errorf("meta:execute at the exit: %s, want EXECUTION_ABORTED naming the stop", text)
	}
}

// TestExitWithStalledMCPReader: a client that sends an MCP request and then
// reads nothing of its answer (a real socket with a small receive buffer;
// the answer is 11 MB: 900,000 '<' escaped six bytes each, twice) must not
// hold the process's exit past drain_timeout and a grace: Caddy's servers
// wait for every open request, and the handler was blocked writing the
// answer for as long as the client kept its connection. Built binary,
// 2026-07-28 `meta:execute`, Caddy's write idle timeout turned off (Caddy
// before 2.11 had none; with 2.11's default of a minute the exit took 58 s
// against 11 s for the same client on /execute, whose events each get 30 s).
func TestExitWithStalledMCPReader(t *testing.T) {
	cmd, exited, logs, base := runExitGateway(t, "servers {\n\t\ttimeouts {\n\t\t\twrite_idle -1s\n\t\t}\n\t}", "")
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	port := u.Port()

	conn, err := net.Dial("tcp", "127.0.0.1:"+port)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.(*net.TCPConn).SetReadBuffer(4096)
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": map[string]any{
		"name": "meta:execute", "arguments": map[string]any{"script": `return "<".repeat(900000)`},
		"_meta": map[string]any{"io.modelcontextprotocol/protocolVersion": "2026-07-28",
			"io.modelcontextprotocol/clientInfo": map[string]any{"name": "t", "version": "1"}, "io.modelcontextprotocol/clientCapabilities": map[string]any{}}}})
	if _, err := fmt.Fprintf(conn, "POST /mcp HTTP/1.1\r\nHost: localhost:%s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"+
		"Mcp-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: meta:execute\r\nContent-Length: %d\r\n\r\n%s", port, len(body), body); err != nil {
		t.Fatal(err)
	}
	// The answer has begun (its status line is in), and is then left unread.
	_ = conn.SetReadDeadline(time.Now().Add(time.Minute))
	status := make([]byte, len("HTTP/1.1 200"))
	if _, err := io.ReadFull(conn, status); err != nil || string(status) != "HTTP/1.1 200" {
		t.Fatalf("answer %q, %v\n%s", status, err, logs.String())
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	wantExit(t, exited, logs, " while a client read nothing of its MCP answer")
}

// wantExit waits for the gateway sent SIGTERM to exit cleanly. A hang never
// passes however long we wait; a minute is far more than the 1 s drain
// (and the second's grace of a stream) on a loaded machine.
func wantExit(t *testing.T, exited chan error, logs *strings.Builder, while string) {
	t.Helper()
	select {
	case err := <-exited:
		exited <- err // for the cleanup
		if err != nil {
			t.Errorf("caddy exited with %v\n%s", err, logs.String())
		}
	case <-time.After(time.Minute):
		t.Fatalf("caddy did not exit within a minute of SIGTERM%s\n%s", while, logs.String())
	}
}

// doAndDrain sends req and reads its answer's body to the end, for tests
// that look only at the status and the header fields.
func doAndDrain(t *testing.T, req *http.Request) *http.Response {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}
