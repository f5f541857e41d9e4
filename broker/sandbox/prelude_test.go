package sandbox

import (
	"testing"

	"github.com/codemode-gateway/caddy-codemode/broker/sandbox/internal/prelude"
)

// TestPreludeKnowsWorkers: the prelude package starts compiling in the
// processes the pool marks as workers, so both name the same variable.
func TestPreludeKnowsWorkers(t *testing.T) {
	if prelude.WorkerEnvVar != workerEnvVar {
		t.Fatalf("prelude looks for %q, the pool sets %q", prelude.WorkerEnvVar, workerEnvVar)
	}
}
