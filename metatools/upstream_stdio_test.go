package metatools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/codemode-gateway/caddy-codemode/broker/catalog"
)

// stdioModeEnv makes the test binary a stdio MCP server that misbehaves
// as named (see TestMain and serveHostileStdioForTest); stdioPidsEnv names
// a file where each such process appends its pid.
const (
	stdioModeEnv = "METATOOLS_TEST_STDIO_MODE"
	stdioPidsEnv = "METATOOLS_TEST_STDIO_PIDS"
)

// The hostile server's stdout replaces these markers in a tool's text:
// with MaxUpstreamMessageBytes of filler, or with filler that never ends.
const (
	overBoundMarker = "@@over-bound@@"
	endlessMarker   = "@@endless@@"
)

// serveHostileStdioForTest is a go-sdk stdio MCP server with the tools
// echo, over (answers with a line over the bound), endless (a line that
// never ends) and shout (8 MiB on stderr, then an answer). mode
// "stderr-flood" writes 16 MiB to stderr before serving; "stubborn"
// ignores SIGTERM and stays after its stdin closes; "lingering" stays
// after its stdin closes until a signal ends it. "parent" and
// "stubborn-parent" first start a child (mode "child" or "stubborn-child":
// it reads nothing and runs until a signal ends it, the stubborn one
// ignoring SIGTERM), as npx starts node, and write its pid too; then
// "parent" serves as a well-behaved server and "stubborn-parent" as a
// stubborn one.
func serveHostileStdioForTest(mode string) {
	if strings.HasSuffix(mode, "child") {
		if mode == "stubborn-child" {
			signal.Ignore(syscall.SIGTERM)
		}
		for {
			time.Sleep(time.Hour)
		}
	}
	pids := []int{os.Getpid()}
	if strings.HasSuffix(mode, "parent") {
		child := exec.Command(os.Args[0], "-test.run=^$")
		child.Env = append(os.Environ(), stdioModeEnv+"="+strings.TrimSuffix(mode, "parent")+"child")
		if err := child.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		pids = append(pids, child.Process.Pid)
		mode = strings.TrimSuffix(strings.TrimSuffix(mode, "parent"), "-")
	}
	if f := os.Getenv(stdioPidsEnv); f != "" {
		if pf, err := os.OpenFile(f, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600); err == nil {
			for _, pid := range pids {
				fmt.Fprintln(pf, pid)
			}
			pf.Close()
		}
	}
	if mode == "stubborn" {
		signal.Ignore(syscall.SIGTERM)
	}
	if mode == "stderr-flood" {
		floodStderr(16 << 20)
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: "hostile-stdio", Version: "v1"}, nil)
	text := func(name, text string, before func()) {
		mcp.AddTool(srv, &mcp.Tool{Name: name, Description: name},
			func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
				if before != nil {
					before()
				}
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, nil, nil
			})
	}
	text("echo", "ok", nil)
	text("over", overBoundMarker, nil)
	text("endless", endlessMarker, nil)
	text("shout", "ok", func() { floodStderr(8 << 20) })
	srv.Run(context.Background(), &mcp.IOTransport{Reader: os.Stdin, Writer: fillingWriter{os.Stdout}})
	if mode == "stubborn" || mode == "lingering" {
		for {
			time.Sleep(time.Hour)
		}
	}
}

// floodStderr writes n bytes to stderr: a 1 MiB line, then lines of 100
// bytes.
func floodStderr(n int) {
	os.Stderr.Write(append(bytes.Repeat([]byte("x"), 1<<20), '\n'))
	line := append(bytes.Repeat([]byte("e"), 99), '\n')
	block := bytes.Repeat(line, 640)
	for written := 1 << 20; written < n; written += len(block) {
		os.Stderr.Write(block)
	}
}

// fillingWriter is the hostile server's stdout (one Write a message line).
type fillingWriter struct{ w io.Writer }

func (f fillingWriter) Write(p []byte) (int, error) {
	filler := bytes.Repeat([]byte("a"), 1<<20)
	for _, m := range []string{overBoundMarker, endlessMarker} {
		i := bytes.Index(p, []byte(m))
		if i < 0 {
			continue
		}
		if _, err := f.w.Write(p[:i]); err != nil {
			return 0, err
		}
		for n := 0; m == endlessMarker || n <= MaxUpstreamMessageBytes; n += len(filler) {
			if _, err := f.w.Write(filler); err != nil {
				return 0, err
			}
		}
		_, err := f.w.Write(p[i+len(m):])
		return len(p), err
	}
	return f.w.Write(p)
}

func (fillingWriter) Close() error { return nil }

// hostileUpstream starts an upstream running this test binary in mode;
// pids is the file its processes write their pids to.
func hostileUpstream(t *testing.T, ctx context.Context, mode string, logger *zap.Logger) (u *Upstream, pids string) {
	t.Helper()
	pids = filepath.Join(t.TempDir(), "pids")
	u, err := NewUpstream(UpstreamConfig{Name: "hostile", Command: os.Args[0], Args: []string{"-test.run=^$"},
		Env: []string{stdioModeEnv + "=" + mode, stdioPidsEnv + "=" + pids}}, logger)
	if err != nil {
		t.Fatal(err)
	}
	u.Start(ctx)
	t.Cleanup(func() { u.Close() })
	return u, pids
}

// callConnected calls tool on u, again while the upstream is being
// connected (again): a connection a cut answer failed is opened again in
// the background, and a call in between finds none.
func callConnected(ctx context.Context, u *Upstream, tool string) (json.RawMessage, error) {
	for {
		out, err := u.Call(ctx, tool, json.RawMessage(`{}`))
		var me *Error
		if !errors.As(err, &me) || me.Code != "UPSTREAM_UNAVAILABLE" || ctx.Err() != nil {
			return out, err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// processesGone waits until every process whose pid is in the file has
// ended and been reaped (kill 0 finds a zombie).
func processesGone(t *testing.T, ctx context.Context, file string, keep int) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(string(b))
	for _, f := range fields[:len(fields)-keep] {
		pid, _ := strconv.Atoi(f)
		for syscall.Kill(pid, 0) == nil {
			if ctx.Err() != nil {
				t.Fatalf("upstream process %d still exists (or is a zombie)", pid)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// TestStdioUpstreamLineBounded: a stdio upstream that answers a call with
// a line over MaxUpstreamMessageBytes, or with a line that never ends,
// fails that call with RESPONSE_TOO_LARGE (not transient), logged; the
// process is stopped and reaped, no more than the bound is held, and the
// next call is served by a new process. The go-sdk's CommandTransport
// failed such a call as UPSTREAM_UNAVAILABLE, logging nothing.
func TestStdioUpstreamLineBounded(t *testing.T) {
	old := upstreamMinBackoff
	upstreamMinBackoff = time.Millisecond
	t.Cleanup(func() { upstreamMinBackoff = old })
	core, logs := observer.New(zap.InfoLevel)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	u, pids := hostileUpstream(t, ctx, "bounded", zap.New(core))

	if out, err := callConnected(ctx, u, "hostile:echo"); err != nil || string(out) != `"ok"` {
		t.Fatalf("echo: %s %v", out, err)
	}
	for i, tool := range []string{"over", "endless"} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		out, err := callConnected(ctx, u, "hostile:"+tool)
		runtime.ReadMemStats(&after)
		var me *Error
		if !errors.As(err, &me) || me.Code != catalog.CodeResponseTooLarge {
			t.Fatalf("%s: %d bytes, %v; want RESPONSE_TOO_LARGE", tool, len(out), err)
		}
		if Transient(me.Code) {
			t.Errorf("%s: %s marked transient; the same call gets the same answer", tool, me.Code)
		}
		// The line is read to one byte past the bound, the buffer
		// growing by append; an unbounded read of the endless line
		// would not end.
		alloc := after.TotalAlloc - before.TotalAlloc
		t.Logf("%s: %d MiB allocated during the call", tool, alloc>>20)
		if alloc > 4*MaxUpstreamMessageBytes {
			t.Errorf("%s: %d bytes allocated during the call; the bound is %d", tool, alloc, MaxUpstreamMessageBytes)
		}
		if n := logs.FilterMessageSnippet("over the bound (RESPONSE_TOO_LARGE)").Len(); n != i+1 {
			t.Errorf("%s: %d warnings of a line over the bound, want %d", tool, n, i+1)
		}
		if out, err := callConnected(ctx, u, "hostile:echo"); err != nil || string(out) != `"ok"` {
			t.Fatalf("echo after %s: %s %v", tool, out, err)
		}
		processesGone(t, ctx, pids, 1)
	}
	u.Close()
	processesGone(t, ctx, pids, 0)
}

// TestStdioUpstreamStderrDrained: an upstream writing 16 MiB to stderr
// before serving and 8 MiB during a call (past a pipe's 64 KiB it blocks
// unless read) serves; its stderr is logged in pieces of at most 4 KiB, at
// most stderrPiecesPerSecond a second, the rest counted.
func TestStdioUpstreamStderrDrained(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	u, pids := hostileUpstream(t, ctx, "stderr-flood", zap.New(core))
	if out, err := callConnected(ctx, u, "hostile:shout"); err != nil || string(out) != `"ok"` {
		t.Fatalf("shout: %s %v", out, err)
	}
	u.Close()
	processesGone(t, ctx, pids, 0)
	pieces, dropped := 0, int64(0)
	for _, e := range logs.All() {
		switch e.Message {
		case "upstream MCP server stderr":
			pieces++
			if n := len(e.ContextMap()["line"].(string)); n > stderrPiece {
				t.Errorf("a stderr piece of %d bytes logged", n)
			}
		case "upstream MCP server stderr: pieces not logged (over the rate)":
			dropped += e.ContextMap()["pieces"].(int64)
		}
	}
	t.Logf("stderr: %d pieces logged, %d not", pieces, dropped)
	if pieces == 0 || dropped == 0 {
		t.Errorf("stderr: %d pieces logged, %d counted as not logged; want both", pieces, dropped)
	}
}

// startStdioEcho starts this test binary as a stdio server (env: the
// environment it adds, its mode first), connects a go-sdk client over the
// transport with the grace given and checks that the server's echo tool
// answers; logs holds what the transport logged.
func startStdioEcho(ctx context.Context, t *testing.T, grace time.Duration, env ...string) (cs *mcp.ClientSession, cmd *exec.Cmd, logs *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zap.InfoLevel)
	cmd = exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(cmd.Environ(), env...)
	tr := &stdioTransport{cmd: cmd, logger: zap.New(core), max: MaxUpstreamMessageBytes, grace: grace}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "v1"}, nil).Connect(ctx, tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo"}); err != nil || res.IsError {
		t.Fatalf("echo: %v %v", res, err)
	}
	return cs, cmd, logs
}

// TestStdioTransportShutdown: closing a stdio upstream closes its stdin;
// a server that exits then is not signalled, one that ignores both its
// stdin closing and SIGTERM is killed with SIGKILL after two graces. The
// process is reaped and the connection's goroutines end.
func TestStdioTransportShutdown(t *testing.T) {
	// A well-behaved server has all the time it needs (under load it takes
	// more than 200 ms to exit); a stubborn one the short grace.
	graces := map[string]time.Duration{"well-behaved": 30 * time.Second, "stubborn": 200 * time.Millisecond}
	for _, mode := range []string{"well-behaved", "stubborn"} {
		grace := graces[mode]
		t.Run(mode, func(t *testing.T) {
			goroutines := runtime.NumGoroutine()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cs, cmd, logs := startStdioEcho(ctx, t, grace, stdioModeEnv+"="+mode)
			start := time.Now()
			if err := cs.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
			took := time.Since(start)
			t.Logf("close took %v (grace %v)", took, grace)
			ps := cmd.ProcessState
			if ps == nil {
				t.Fatal("the process was not reaped")
			}
			ws := ps.Sys().(syscall.WaitStatus)
			signals := logs.FilterMessageSnippet("sending SIG").All()
			switch mode {
			case "well-behaved":
				if !ws.Exited() || ws.ExitStatus() != 0 || len(signals) != 0 {
					t.Errorf("exit %v, %d signals sent; want exit 0 on stdin closing", ps, len(signals))
				}
			case "stubborn":
				if !ws.Signaled() || ws.Signal() != syscall.SIGKILL || took < 2*grace {
					t.Errorf("%v after %v; want SIGKILL after two graces of %v", ps, took, grace)
				}
				if len(signals) != 2 || !strings.Contains(signals[0].Message, "SIGTERM") || !strings.Contains(signals[1].Message, "SIGKILL") {
					t.Errorf("logged %v; want SIGTERM then SIGKILL", signals)
				}
			}
			for runtime.NumGoroutine() > goroutines {
				if ctx.Err() != nil {
					buf := make([]byte, 1<<20)
					t.Fatalf("goroutines: %d, before %d\n%s", runtime.NumGoroutine(), goroutines, buf[:runtime.Stack(buf, true)])
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}

// TestStdioUpstreamEndToEnd: a well-behaved stdio upstream is listed and
// called through the meta-tools (tools/list, meta:invoke) over MCP.
func TestStdioUpstreamEndToEnd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	u, ix := textUpstream(t)
	u.Start(ctx)
	t.Cleanup(func() { u.Close() })
	for _, ok := ix.Lookup("text:upper"); !ok; _, ok = ix.Lookup("text:upper") {
		if ctx.Err() != nil {
			t.Fatal("text:upper never listed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cs := connectSized(t, NewService(ix, nil))
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "meta:invoke",
		Arguments: map[string]any{"tool": "text:upper", "input": map[string]any{"text": "abc"}}})
	if err != nil || res.IsError || !strings.Contains(text(res), `"ABC"`) {
		t.Fatalf("meta:invoke text:upper: %v %v", res, err)
	}
}
