package engine

import (
	"os"
	"testing"
	"time"
)

// TestMain lets the test binary act as a worker: the pool tests start it
// again as their worker command. testWorkerEnv selects a scripted worker
// for the pool mechanics; otherwise MaybeServeWorker serves the real engine.
func TestMain(m *testing.M) {
	if mode := os.Getenv(testWorkerEnv); mode != "" {
		os.Exit(runTestWorker(mode))
	}
	MaybeServeWorker()
	// Tests run ServeWorker in this process, which sets time.Local to UTC
	// unless it is already: set it before any goroutine reads it (every
	// time.Now does), so that no test's write races another's read.
	time.Local = time.UTC
	os.Exit(m.Run())
}
