//go:build linux

package caddymodules

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/codemode-gateway/caddy-codemode/internal/proctest"
)

// TestStdioUpstreamChildrenEnd: a stdio upstream that started a child (as
// npx starts node) leaves no process behind, neither when a reload drops
// the upstream nor when the gateway stops: the server exits as its stdin
// closes, and its child, which reads nothing, gets SIGTERM with the
// server's process group after the grace. Before, the child ran on.
func TestStdioUpstreamChildrenEnd(t *testing.T) {
	caddyMu.Lock()
	defer caddyMu.Unlock()
	defer func() { _ = caddy.Stop() }()
	port, dir := freePort(t), t.TempDir()
	config := func(pids string) string {
		upstream := ""
		if pids != "" {
			upstream = fmt.Sprintf(`
			upstream family {
				command %s -test.run=^$
				env %s=%s
			}`, os.Args[0], stdioFamilyEnv, pids)
		}
		return fmt.Sprintf(`{
	admin off
	persist_config off
	codemode {
		sandbox {
			adapter inprocess
			trusted_callers
		}
		meta {
			no_broker%s
		}
	}
}

http://127.0.0.1:%d {
	bind 127.0.0.1
	codemode_mcp /mcp
}
`, upstream, port)
	}
	started := func(pids string) []int {
		t.Helper()
		t.Cleanup(func() { proctest.KillLeftovers(t, proctest.PidFile(t, pids)) })
		loadCaddyfile(t, config(pids))
		// Start connected the upstream (it waits for that), after the
		// server wrote its pids.
		got := proctest.PidFile(t, pids)
		if len(got) != 2 {
			t.Fatalf("pids %v, want the server's and its child's", got)
		}
		for _, pid := range got {
			if !proctest.Running(pid) {
				t.Fatalf("process %d of %v not running", pid, got)
			}
		}
		return got
	}
	gone := func(when string, pids []int) {
		t.Helper()
		deadline := time.Now().Add(time.Minute) // a backstop: Close waits for them
		for _, pid := range pids {
			for proctest.Running(pid) {
				if time.Now().After(deadline) {
					t.Fatalf("%s: process %d of %v still runs", when, pid, pids)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}

	first := started(filepath.Join(dir, "first"))
	loadCaddyfile(t, config("")) // a reload without the upstream
	gone("after a reload that dropped the upstream", first)

	second := started(filepath.Join(dir, "second"))
	if err := caddy.Stop(); err != nil {
		t.Fatal(err)
	}
	gone("after the gateway stopped", second)
}
