package caddymodules

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"

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
