package caddymodules

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestOlderRevisionPlanWaitsForItsClient: over the revisions with a
// session (2025-06-18, 2025-11-25) a meta:execute plan that asks its client
// (elicitation) waits for the answer up to the broker's execution_timeout,
// as /execute and the plans of 2026-07-28 do; the sandbox's timeout bounds
// the time the script runs. The client here answers after the sandbox's
// timeout (1s). Before, the plan's whole wall clock was the sandbox preset's
// (3.5 s by default), waits included: a person answering the form in more
// than 3.5 s got a TIMEOUT.
func TestOlderRevisionPlanWaitsForItsClient(t *testing.T) {
	port := freePort(t)
	startCaddyfile(t, fmt.Sprintf(`{
	admin off
	persist_config off
	codemode {
		sandbox {
			timeout 1s
		}
		broker {
			demo_tools
		}
	}
}

http://127.0.0.1:%d {
	codemode_mcp /mcp
}
`, port))
	for _, version := range []string{"2025-06-18", "2025-11-25"} {
		t.Run(version, func(t *testing.T) {
			opts := &mcp.ClientOptions{ElicitationHandler: func(ctx context.Context, _ *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
				select { // a person reading the form
				case <-time.After(1500 * time.Millisecond):
				case <-ctx.Done():
					return nil, ctx.Err()
				}
				return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"result": "Ada"}}, nil
			}}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			tr := &mcp.StreamableClientTransport{Endpoint: fmt.Sprintf("http://127.0.0.1:%d/mcp", port),
				HTTPClient: &http.Client{Transport: &http.Transport{}}}
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, opts).Connect(ctx, tr,
				&mcp.ClientSessionOptions{ProtocolVersion: version})
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			if got := cs.InitializeResult().ProtocolVersion; got != version {
				t.Fatalf("negotiated %s", got)
			}
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "meta:execute", Arguments: map[string]any{
				"script": `return "got " + await callTool("client:prompt", {question: "name?"})`}})
			if err != nil {
				t.Fatal(err)
			}
			if text := resultText(res); !strings.Contains(text, `"status":"ok"`) || !strings.Contains(text, "got Ada") {
				t.Fatalf("meta:execute: %s", text)
			}
		})
	}
}

// TestElicitationAnsweredAcrossReload: a meta:execute plan of an older
// revision waits for its client's answer (elicitation) while the config is
// reloaded; the answer, posted after the reload, reaches the plan and the
// call returns its result. Before, the new config adopted the session at
// that request and closed its old go-sdk session: the answer got 202 and
// went nowhere, the plan waited to its execution timeout, and the call's
// stream ended without a response.
func TestElicitationAnsweredAcrossReload(t *testing.T) {
	port := freePort(t)
	config := func(sessionTimeout string) string {
		return fmt.Sprintf(`{
	admin off
	persist_config off
	codemode {
		broker {
			demo_tools
			execution_timeout 10s
		}
	}
}

http://127.0.0.1:%d {
	codemode_mcp /mcp {
		session_timeout %s
	}
}
`, port, sessionTimeout)
	}
	startCaddyfile(t, config("30m"))
	opts := &mcp.ClientOptions{ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		loadCaddyfile(t, config("31m")) // the reload, while the plan waits
		return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"result": "Ada"}}, nil
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr := &mcp.StreamableClientTransport{Endpoint: fmt.Sprintf("http://127.0.0.1:%d/mcp", port), HTTPClient: reloadClient}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, opts).Connect(ctx, tr,
		&mcp.ClientSessionOptions{ProtocolVersion: "2025-06-18"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "meta:execute", Arguments: map[string]any{
		"script": `return "got " + await callTool("client:prompt", {question: "name?"})`}})
	if err != nil {
		t.Fatalf("meta:execute across the reload: %v", err)
	}
	if text := resultText(res); !strings.Contains(text, `"status":"ok"`) || !strings.Contains(text, "got Ada") {
		t.Fatalf("meta:execute across the reload: %s", text)
	}
}

// TestPlanOutlivesSandboxReload: a meta:execute plan of an older revision
// waits for its client's elicitation answer while a reload replaces the
// sandbox block (so the worker pool it runs on). The plan's limit is the
// broker's execution timeout, not the sandbox's: it is answered after the
// old pool's former drain (the sandbox's timeout + 2 s, here 3 s) and must
// still return its result. Before, it ended POOL_DISPOSED ("the sandbox
// worker pool is shut down") 3 s after the reload (5.5 s with the secure
// preset: found with `caddy reload` under an MCP client waiting on its SSE
// stream).
func TestPlanOutlivesSandboxReload(t *testing.T) {
	port := freePort(t)
	config := func(poolMax int) string {
		return fmt.Sprintf(`{
	admin off
	persist_config off
	codemode {
		sandbox {
			timeout 1s
			pool {
				min 1
				max %d
			}
		}
		broker {
			demo_tools
			execution_timeout 20s
		}
	}
}

http://127.0.0.1:%d {
	codemode_mcp /mcp
}
`, poolMax, port)
	}
	startCaddyfile(t, config(2))
	reloaded := make(chan struct{})
	opts := &mcp.ClientOptions{ElicitationHandler: func(ctx context.Context, _ *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		loadCaddyfile(t, config(3)) // a new pool; the plan's one drains
		close(reloaded)
		select { // past the old pool's former drain of 1 s + 2 s
		case <-time.After(4 * time.Second):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"result": "Ada"}}, nil
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr := &mcp.StreamableClientTransport{Endpoint: fmt.Sprintf("http://127.0.0.1:%d/mcp", port), HTTPClient: reloadClient}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, opts).Connect(ctx, tr,
		&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "meta:execute", Arguments: map[string]any{
		"script": `return "got " + await callTool("client:prompt", {question: "name?"})`}})
	if err != nil {
		t.Fatalf("meta:execute across the reload: %v", err)
	}
	select {
	case <-reloaded:
	default:
		// Once on a loaded machine (load 15), with no more said: the
		// answer says why the plan ended without asking.
		t.Fatalf("the plan never asked its client; it answered: %s", resultText(res))
	}
	if text := resultText(res); !strings.Contains(text, `"status":"ok"`) || !strings.Contains(text, "got Ada") {
		t.Fatalf("meta:execute across a reload replacing its pool: %s", text)
	}
}
