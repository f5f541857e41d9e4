package broker

import (
	"os"
	"testing"

	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"
)

// TestMain lets the test binary serve as a sandbox worker: the tests that
// run scripts in worker processes start it again as their worker command.
func TestMain(m *testing.M) {
	sandbox.MaybeServeWorker()
	os.Exit(m.Run())
}
