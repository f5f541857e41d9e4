package broker

import (
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"
	"github.com/codemode-gateway/caddy-codemode/internal/proctest"
)

// childPIDs lists the processes whose parent is this one (the sandbox's
// workers).
func childPIDs(t *testing.T) []int {
	t.Helper()
	return proctest.Children(os.Getpid())
}

// TestToolResultNamesWorkerDeath: a caller-answered call cut short because
// the worker hosting its script was killed (SIGKILL from outside) reports
// the worker's death in its tool_result event (WORKER_LOST or
// WORKER_CRASHED), as the session's final error does.
// Before, the tool_result said TIMEOUT "the execution ended before the tool
// answered" (the sandbox cancelled the call without a cause).
func TestToolResultNamesWorkerDeath(t *testing.T) {
	eng, err := sandbox.NewWorkerPool(&sandbox.PoolOptions{RuntimePoolOptions: sandbox.RuntimePoolOptions{MinSize: 1, MaxSize: 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Close() })
	b, _ := newTestBroker(t, func(o *BrokerOptions) { o.Engine = eng })
	var toolResult *ToolResultPayload
	var final *ErrorPayload
	for ev, err := range b.Execute(t.Context(), `return await callTool("client:prompt", {question: "x?"});`, ExecuteOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		switch p := ev.Payload.(type) {
		case *ToolCallPayload:
			if !p.AwaitingResult {
				t.Fatalf("client:prompt is not awaiting the caller: %+v", p)
			}
			// The pool may keep a spare beside the worker hosting the
			// script: kill every worker (only this test starts any).
			pids := childPIDs(t)
			if len(pids) == 0 {
				t.Fatal("no worker process")
			}
			for _, pid := range pids {
				if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
			}
		case *ToolResultPayload:
			toolResult = p
		case *ErrorPayload:
			final = p
		}
	}
	// WORKER_LOST when the script had parked its wait (released its slot),
	// WORKER_CRASHED when the kill came first.
	if final == nil || (final.Error.Code != sandbox.CodeWorkerLost && final.Error.Code != sandbox.CodeWorkerCrashed) {
		t.Fatalf("final error: %+v, want %s or %s", final, sandbox.CodeWorkerLost, sandbox.CodeWorkerCrashed)
	}
	if toolResult == nil || toolResult.Error == nil {
		t.Fatalf("tool_result: %+v, want an error", toolResult)
	}
	if toolResult.Error.Code != final.Error.Code || !strings.Contains(toolResult.Error.Message, "signal: killed") {
		t.Fatalf("tool_result error: %+v, want %s naming the worker's death", toolResult.Error, final.Error.Code)
	}
}
