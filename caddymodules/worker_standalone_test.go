package caddymodules

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestStandaloneWorker runs a real `caddy run` (CODEMODE_CADDY_BINARY: the
// release build in CI) whose pool command is ./cmd/codemode-worker, the
// worker without Caddy, as docs/sandbox.md tells a user to: the gateway
// accepts it as its own build, and the plan it is sent runs in that
// program, tool call included.
func TestStandaloneWorker(t *testing.T) {
	bin, err := caddyBinary()
	if err != nil {
		t.Fatal(err)
	}
	worker, err := workerBinary()
	if err != nil {
		t.Fatal(err)
	}
	port, admin := freePort(t), freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	caddyfile := fmt.Sprintf(`{
	admin localhost:%d
	codemode {
		sandbox {
			pool {
				min 1
				max 1
				command %s
			}
		}
		broker {
			demo_tools
		}
	}
}

http://127.0.0.1:%d {
	handle_path /broker/* {
		codemode_broker
	}
}
`, admin, strconv.Quote(worker), port)
	cmd, _, logs := runCaddy(t, bin, caddyfile, base)

	resp, err := http.Post(base+"/broker/execute", "application/json",
		strings.NewReader(`{"code":"const { sum } = await callTool(\"math:add\", { a: 2, b: 3 }); return sum"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var last struct {
		Type    string          `json:"type"`
		Payload json.RawMessage `json:"payload"`
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if err := json.Unmarshal(sc.Bytes(), &last); err != nil {
			t.Fatalf("event %q: %v", sc.Text(), err)
		}
	}
	if last.Type != "result" || !strings.Contains(string(last.Payload), "5") {
		t.Fatalf("last event %s %s; gateway log:\n%s", last.Type, last.Payload, logs.String())
	}

	// The worker that ran it is the standalone program, a child of caddy.
	var children []string
	for _, pid := range childPIDs(cmd.Process.Pid) {
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		children = append(children, exe)
	}
	if !slices.Contains(children, worker) {
		t.Fatalf("no child of caddy runs %s: children %q", worker, children)
	}
}
