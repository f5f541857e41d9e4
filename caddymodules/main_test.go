package caddymodules

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"
)

// TestMain lets this test binary serve as a sandbox worker, or as a second
// gateway process (serveCaddyfileEnv): the default
// sandbox adapter starts worker processes by re-executing the binary.
//
// Workers inherit GORACE: under the race detector a process sleeps 1 s at
// exit (atexit_sleep_ms) to let late reports in, so every worker a reload
// retires would hold the reload for a second. The variable is read at
// process start, so setting it here changes the workers only.
func TestMain(m *testing.M) {
	sandbox.MaybeServeWorker()
	if os.Getenv(stdioChildEnv) != "" {
		for { // a stdio server's child: runs until a signal ends it
			time.Sleep(time.Hour)
		}
	}
	if f := os.Getenv(stdioFamilyEnv); f != "" {
		serveStdioFamily(f)
		return
	}
	if f := os.Getenv(serveCaddyfileEnv); f != "" {
		serveCaddyfile(f)
		return
	}
	if _, set := os.LookupEnv("GORACE"); !set {
		_ = os.Setenv("GORACE", "atexit_sleep_ms=0")
	}
	code := m.Run()
	removeCaddyBinary()
	os.Exit(code)
}

// serveCaddyfileEnv names a Caddyfile this test binary runs as a gateway
// process of its own (a second gateway beside the one a test runs in
// process), until it is sent SIGTERM or SIGINT.
const serveCaddyfileEnv = "CODEMODE_TEST_SERVE_CADDYFILE"

func serveCaddyfile(path string) {
	src, err := os.ReadFile(path)
	if err == nil {
		var cfg []byte
		if cfg, _, err = caddyconfig.GetAdapter("caddyfile").Adapt(src, nil); err == nil {
			err = caddy.Load(cfg, true)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "serving", path+":", err)
		os.Exit(2)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	_ = caddy.Stop()
	os.Exit(0)
}

// stdioFamilyEnv names a file: this test binary is then a stdio MCP server
// (one tool, ping) that first starts a child (stdioChildEnv: it reads
// nothing and runs until a signal ends it, as node under npx) and writes
// its own pid and the child's to the file, one a line. It exits when its
// stdin ends; the child does not.
const (
	stdioFamilyEnv = "CODEMODE_TEST_STDIO_FAMILY"
	stdioChildEnv  = "CODEMODE_TEST_STDIO_CHILD"
)

func serveStdioFamily(pids string) {
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), stdioFamilyEnv+"=", stdioChildEnv+"=1") // the child is no server
	if err := child.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := os.WriteFile(pids, fmt.Appendf(nil, "%d\n%d\n", os.Getpid(), child.Process.Pid), 0o600); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: "family", Version: "v1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "ping", Description: "Answer pong"},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, map[string]string, error) {
			return nil, map[string]string{"pong": "yes"}, nil
		})
	_ = srv.Run(context.Background(), &mcp.StdioTransport{})
	os.Exit(0)
}
