package caddymodules

import (
	"os"
	"testing"

	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"
)

// TestMain lets this test binary serve as a sandbox worker: the default
// sandbox adapter starts worker processes by re-executing the binary.
func TestMain(m *testing.M) {
	sandbox.MaybeServeWorker()
	os.Exit(m.Run())
}
