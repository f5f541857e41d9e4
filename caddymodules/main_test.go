package caddymodules

import (
	"os"
	"testing"

	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"
)

// TestMain lets this test binary serve as a sandbox worker: the default
// sandbox adapter starts worker processes by re-executing the binary.
//
// Workers inherit GORACE: under the race detector a process sleeps 1 s at
// exit (atexit_sleep_ms) to let late reports in, so every worker a reload
// retires would hold the reload for a second. The variable is read at
// process start, so setting it here changes the workers only.
func TestMain(m *testing.M) {
	sandbox.MaybeServeWorker()
	if _, set := os.LookupEnv("GORACE"); !set {
		_ = os.Setenv("GORACE", "atexit_sleep_ms=0")
	}
	code := m.Run()
	removeCaddyBinary()
	os.Exit(code)
}
