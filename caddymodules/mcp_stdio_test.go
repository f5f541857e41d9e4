package caddymodules

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddyconfig"
)

// TestMCPStdioAnswersBadLines: over stdio a line that is not JSON, JSON
// that is no JSON-RPC message, and a line over the bound each get a JSON-RPC
// error, and the session goes on (the go-sdk alone ended it, and the
// command exited).
func TestMCPStdioAnswersBadLines(t *testing.T) {
	up := mcpUpstream(t)
	caddyfile := fmt.Sprintf(`{
	admin off
	codemode {
		meta {
			upstream calc {
				url %s
			}
		}
	}
}
`, up)
	inW, outR, done := stdioSession(t, caddyfile, 4096)
	// On a failure too, standard input ends, so that the session ends and
	// lets the upstream's test server close (it waited for ever).
	sendLine, _ := stdioLines(t, inW, outR)
	send := func(line string) batchAnswer { t.Helper(); return stdioAnswer(t, sendLine(line)) }
	wantError := func(line string, code int, id string) {
		t.Helper()
		r := send(line)
		if r.Error == nil || r.Error.Code != code || string(r.ID) != id {
			t.Fatalf("%.40q: reply id %s error %+v, want code %d id %s", line, r.ID, r.Error, code, id)
		}
	}

	wantError(`not json {`, -32700, "null")
	wantError(`{"id": 7, "method": "initialize"}`, -32600, "7") // no "jsonrpc": "2.0"
	wantError(`[]`, -32600, "null")
	// Its message says what is wrong in JSON-RPC's words: the go-sdk's
	// named its Go types ("jsonrpc2.wireDecode").
	for _, line := range []string{`[1]`, `"ping"`, `{"jsonrpc":"2.0","id":3,"method":5}`} {
		if r := send(line); r.Error == nil || r.Error.Code != -32600 || strings.Contains(r.Error.Message, "Go value") || strings.Contains(r.Error.Message, "jsonrpc2.") {
			t.Fatalf("%s: %+v, want -32600 without Go type names", line, r.Error)
		}
	}
	// initialize "MUST NOT be part of a JSON-RPC batch" (2025-03-26): the
	// batch is refused whole, before and after the handshake (the go-sdk
	// opened the session, then answered a second one with code 0).
	batchedInit := `[{"jsonrpc":"2.0","id":6,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}]`
	wantError(batchedInit, -32600, "null")
	// A call before initialize: the go-sdk's own answer had code 0.
	wantError(`{"jsonrpc":"2.0","id":9,"method":"tools/list"}`, -32600, "9")
	wantError(`{"jsonrpc":"2.0","id":8,"method":"x","params":"`+strings.Repeat("a", 5000)+`"}`, -32600, "null")
	// Fields of the wrong type: the go-sdk answered code 0, naming its Go
	// types; -32602 names the field.
	if r := send(`{"jsonrpc":"2.0","id":4,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":5,"clientInfo":{"name":"t","version":"1"}}}`); r.Error == nil ||
		r.Error.Code != -32602 || string(r.ID) != "4" || !strings.Contains(r.Error.Message, "capabilities: got number, want object") {
		t.Fatalf("initialize with capabilities 5: %+v", r)
	}
	r := send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	if r.Error != nil || string(r.ID) != "1" || !strings.Contains(string(r.Result), `"protocolVersion"`) {
		t.Fatalf("initialize after bad lines: %+v", r)
	}
	wantError(`{"jsonrpc":"2.0","id":5,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`, -32600, "5")
	wantError(batchedInit, -32600, "null")
	if _, err := io.WriteString(inW, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n\n"); err != nil {
		t.Fatal(err)
	}
	wantError(`{"jsonrpc":"2.0","id":2,"method":"tools/list"`, -32700, "null") // cut short
	// Ids the go-sdk would answer as another id (1.5 as 1, 2^53+1 as
	// 2^53) or could not (true): MCP ids are strings or integers.
	// null too: the go-sdk took it for a notification and answered nothing.
	for _, id := range []string{"1.5", "9007199254740993", "true", "null"} {
		wantError(`{"jsonrpc":"2.0","id":`+id+`,"method":"tools/list"}`, -32600, "null")
		wantError(`[{"jsonrpc":"2.0","id":`+id+`,"method":"tools/list"}]`, -32600, "null")
	}
	// The go-sdk matches keys exactly: its id here is 2.5 (answered as 2),
	// not the "ID" 2.
	wantError(`{"jsonrpc":"2.0","id":2.5,"ID":2,"method":"tools/list"}`, -32600, "null")
	wantError(`{"jsonrpc":"2.0","id":null,"method":"notifications/initialized"}`, -32600, "null")
	// A batch is refused whole (decision, as over HTTP): its one answer is
	// the error, its other request is not run (the next answer is the
	// next request's).
	wantError(`[{"jsonrpc":"2.0","id":"ok","method":"ping"},{"jsonrpc":"2.0","id":1.5,"method":"tools/list"}]`, -32600, "null")
	if r := send(`{"jsonrpc":"2.0","id":77,"method":"ping"}`); r.Error != nil || string(r.ID) != "77" {
		t.Fatalf("ping after a refused batch: %+v", r)
	}
	if r := send(`{"jsonrpc":"2.0","id":9007199254740991,"method":"ping"}`); r.Error != nil || string(r.ID) != "9007199254740991" {
		t.Fatalf("ping with id 2^53-1: %+v", r)
	}
	r = send(`{"jsonrpc":"2.0","id":3,"method":"tools/list"}`)
	if r.Error != nil || !strings.Contains(string(r.Result), `"meta:execute"`) {
		t.Fatalf("tools/list: %+v", r)
	}
	// Params of the wrong type: -32602 saying what was expected, as over
	// HTTP (the go-sdk's message named its Go types).
	for line, want := range map[string]string{
		`{"jsonrpc":"2.0","id":10,"method":"tools/call","params":5}`:          "invalid params: tools/call: params: got number, want object",
		`{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":5}}`: "invalid params: tools/call: name: got number, want string",
	} {
		if r := send(line); r.Error == nil || r.Error.Code != -32602 || string(r.ID) != "10" || r.Error.Message != want {
			t.Fatalf("%s: %+v, want -32602 %q", line, r.Error, want)
		}
	}
	// An unknown method: -32601 and the one message of both transports.
	if r := send(`{"jsonrpc":"2.0","id":11,"method":"no/such/method"}`); r.Error == nil || r.Error.Code != -32601 || string(r.ID) != "11" ||
		r.Error.Message != `method not found: "no/such/method"` {
		t.Fatalf("unknown method: %+v", r)
	}
	// A batch holding notifications: JSON-RPC answers none of them and
	// ignores one the server does not know; the batch's requests are
	// answered (one array). The go-sdk never answered such a batch, known
	// notification or not.
	for _, line := range []string{
		`[{"jsonrpc":"2.0","method":"notifications/no_such"},{"jsonrpc":"2.0","id":"b1","method":"ping"}]`,
		`[{"jsonrpc":"2.0","id":"b1","method":"ping"},{"jsonrpc":"2.0","method":"notifications/roots/list_changed"},{"jsonrpc":"2.0","method":"notifications/no_such"}]`,
	} {
		if got := string(sendLine(line)); got != `[{"jsonrpc":"2.0","id":"b1","result":{}}]` {
			t.Fatalf("%s: %s", line, got)
		}
	}
	// Notifications only: nothing to answer; the next answer is the next
	// request's.
	if _, err := io.WriteString(inW, `[{"jsonrpc":"2.0","method":"notifications/no_such"},{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}]`+"\n"); err != nil {
		t.Fatal(err)
	}
	if r := send(`{"jsonrpc":"2.0","id":12,"method":"ping"}`); r.Error != nil || string(r.ID) != "12" {
		t.Fatalf("ping after a batch of notifications: %+v", r)
	}

	inW.Close() // standard input ends: the session and the command end
	go io.Copy(io.Discard, outR)
	stdioEnded(t, done)
}

// stdioSession runs serveMCPStdio on caddyfile (maxLine 0: the go-sdk's
// bound) behind pipes, holding caddyMu until the test ends: in is its
// standard input, out its standard output, which ends with the session.
func stdioSession(t *testing.T, caddyfile string, maxLine int) (in *io.PipeWriter, out *io.PipeReader, done <-chan error) {
	t.Helper()
	raw, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(caddyfile), nil)
	if err != nil {
		t.Fatal(err)
	}
	caddyMu.Lock()
	t.Cleanup(caddyMu.Unlock)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ended := make(chan error, 1)
	go func() {
		ended <- serveMCPStdio(context.Background(), raw, &checkedStdio{in: inR, out: outW, maxLine: maxLine})
		outW.Close()
	}()
	return inW, outR, ended
}

// stdioLines ends a stdio session's input when the test ends (on a failure
// too, so that the session ends) and returns send, which writes line to
// the session and returns its one reply line, and the scanner of the
// replies for a test that reads more itself.
func stdioLines(t *testing.T, in *io.PipeWriter, out *io.PipeReader) (send func(line string) []byte, replies *bufio.Scanner) {
	t.Cleanup(func() {
		in.Close()
		go io.Copy(io.Discard, out)
	})
	replies = bufio.NewScanner(out)
	replies.Buffer(nil, 8<<20)
	return func(line string) []byte {
		t.Helper()
		if _, err := io.WriteString(in, line+"\n"); err != nil {
			t.Fatalf("writing %.40q: %v", line, err)
		}
		if !replies.Scan() {
			t.Fatalf("no reply to %.60q: %v", line, replies.Err())
		}
		return replies.Bytes()
	}, replies
}

// stdioAnswer decodes one reply line of a stdio session.
func stdioAnswer(t *testing.T, line []byte) (r batchAnswer) {
	t.Helper()
	if err := json.Unmarshal(line, &r); err != nil {
		t.Fatalf("reply %q: %v", line, err)
	}
	return r
}

// stdioEnded waits for a stdio session whose input has ended to return.
func stdioEnded(t *testing.T, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serveMCPStdio: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("serveMCPStdio did not return after its input ended")
	}
}

// TestMCPStdioLogsOffStdout runs `caddy codemode-mcp-stdio` on a Caddyfile
// whose logs go to standard output (`log { output stdout }`, usual in
// containers): standard output carries MCP messages only, and the logs go
// to standard error. Before, Caddy's start-up lines came first on stdout,
// which MCP clients read as messages.
func TestMCPStdioLogsOffStdout(t *testing.T) {
	bin, err := caddyBinary()
	if err != nil {
		t.Fatal(err)
	}
	caddyfile := fmt.Sprintf(`{
	log {
		output stdout
		level DEBUG
	}
	codemode {
		broker {
			demo_tools
		}
	}
}

http://127.0.0.1:%d {
	log {
		output stdout
	}
	codemode_mcp
}
`, freePort(t))
	path := filepath.Join(t.TempDir(), "Caddyfile")
	if err := os.WriteFile(path, []byte(caddyfile), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "codemode-mcp-stdio", "--config", path)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	cmd.Stderr = &logs
	exited := startCmd(t, cmd)
	if _, err := io.WriteString(in, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`+"\n"); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(out)
	lines.Buffer(nil, 8<<20)
	for lines.Scan() {
		var msg struct {
			JSONRPC string          `json:"jsonrpc"`
			ID      json.RawMessage `json:"id"`
		}
		if err := json.Unmarshal(lines.Bytes(), &msg); err != nil || msg.JSONRPC != "2.0" {
			t.Fatalf("stdout carries a line that is no MCP message: %.300s", lines.Text())
		}
		if string(msg.ID) == "1" {
			break
		}
	}
	if err := lines.Err(); err != nil {
		t.Fatal(err)
	}
	in.Close() // the session and the command end
	select {
	case err := <-exited:
		exited <- err
		if err != nil {
			t.Fatalf("codemode-mcp-stdio: %v\n%s", err, logs.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("codemode-mcp-stdio did not exit after its input ended")
	}
	if !strings.Contains(logs.String(), `"admin endpoint disabled"`) {
		t.Errorf("the logs are not on stderr:\n%s", logs.String())
	}
}

// TestMCPStdioAnswersRequestsReadBeforeEOF: a client that writes its
// requests and closes standard input (`printf … | caddy codemode-mcp-stdio`)
// gets every answer before the command exits. Before, the go-sdk ended the
// session at the end of input and a request still running was never
// answered: the plan below, and a tools/list sent last.
func TestMCPStdioAnswersRequestsReadBeforeEOF(t *testing.T) {
	inW, outR, done := stdioSession(t, `{
	admin off
	codemode {
		broker {
			demo_tools
		}
	}
}
`, 0)
	lines := strings.Join([]string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"meta:execute","arguments":{"script":"const r = await callTool(\"math:add\", {a: 2, b: 3}); return r.sum"}}}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/list"}`,
	}, "\n") + "\n"
	go func() {
		_, _ = io.WriteString(inW, lines)
		inW.Close()
	}()
	got := map[string]string{}
	replies := bufio.NewScanner(outR)
	replies.Buffer(nil, 8<<20)
	for replies.Scan() {
		var r struct {
			ID     json.RawMessage `json:"id"`
			Result json.RawMessage `json:"result"`
		}
		if err := json.Unmarshal(replies.Bytes(), &r); err != nil {
			t.Fatalf("reply %q: %v", replies.Text(), err)
		}
		got[string(r.ID)] = string(r.Result)
	}
	stdioEnded(t, done)
	if !strings.Contains(got["2"], `"result":5`) {
		t.Errorf("the plan read before the end of input: answer %q, want its result 5", got["2"])
	}
	if !strings.Contains(got["3"], `"meta:execute"`) {
		t.Errorf("tools/list read before the end of input: answer %q", got["3"])
	}
}
