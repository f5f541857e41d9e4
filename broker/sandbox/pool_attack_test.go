package sandbox

import (
	"testing"
	"time"
)

// newRealPool starts a worker pool running the real engine (the test binary
// serves as the worker through MaybeServeWorker in TestMain).
func newRealPool(t testing.TB, opts PoolOptions) Engine {
	t.Helper()
	p, err := NewWorkerPool(&opts)
	if err != nil {
		t.Fatalf("NewWorkerPool: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// TestAttackSuiteWorkers runs the attack suite against the worker engine,
// including the cases only a separate process can stop (memory bombs that
// reach RLIMIT_DATA, built-ins that ignore interrupts).
func TestAttackSuiteWorkers(t *testing.T) {
	runAttackSuite(t, func(t *testing.T) Engine {
		return newRealPool(t, PoolOptions{
			RuntimePoolOptions: RuntimePoolOptions{MinSize: 1, MaxSize: 2},
			WatchdogGrace:      500 * time.Millisecond,
		})
	})
}
