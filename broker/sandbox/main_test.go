package sandbox

import (
	"os"
	"testing"
)

// TestMain lets the test binary act as a worker: the pool tests start it
// again as their worker command. testWorkerEnv selects a scripted worker
// for the pool mechanics; otherwise MaybeServeWorker serves the real engine.
func TestMain(m *testing.M) {
	if mode := os.Getenv(testWorkerEnv); mode != "" {
		os.Exit(runTestWorker(mode))
	}
	MaybeServeWorker()
	os.Exit(m.Run())
}
