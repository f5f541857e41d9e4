package engine

import (
	"testing"

	"github.com/codemode-gateway/caddy-codemode/broker/sandbox/internal/prelude"
	"github.com/codemode-gateway/caddy-codemode/broker/sandbox/internal/threads"
)

// TestPreludeKnowsWorkers: the prelude and threads packages start their
// work in the processes the pool marks as workers, so all name the same
// variable.
func TestPreludeKnowsWorkers(t *testing.T) {
	if prelude.WorkerEnvVar != workerEnvVar {
		t.Fatalf("prelude looks for %q, the pool sets %q", prelude.WorkerEnvVar, workerEnvVar)
	}
	if threads.WorkerEnvVar != workerEnvVar {
		t.Fatalf("threads looks for %q, the pool sets %q", threads.WorkerEnvVar, workerEnvVar)
	}
}
