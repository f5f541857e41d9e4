// Command goclient is a client of MCP revision 2026-07-28 (the go-sdk
// client) run by .ci/run through a round-robin load balancer over two
// gateways: tools/list, meta:search, a meta:execute plan that calls a demo
// tool and a tool only the client answers, meta:invoke. Every request must
// land on the other gateway than the one before, and no Mcp-Session-Id may
// be sent or received.
//
//	go run ./.ci/mcp2026/goclient http://127.0.0.1:LB_PORT/mcp
package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// recorder keeps the X-Gateway of each answer and counts session headers.
type recorder struct {
	mu       sync.Mutex
	gateways []string
	sessions int
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(req)
	r.mu.Lock()
	defer r.mu.Unlock()
	if req.Header.Get("Mcp-Session-Id") != "" {
		r.sessions++
	}
	if err == nil {
		r.gateways = append(r.gateways, resp.Header.Get("X-Gateway"))
		if resp.Header.Get("Mcp-Session-Id") != "" {
			r.sessions++
		}
	}
	return resp, err
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: goclient <mcp url>")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	passed, failed := 0, 0
	check := func(name string, ok bool, detail string) {
		status := "ok  "
		if ok {
			passed++
		} else {
			status = "FAIL"
			failed++
		}
		fmt.Printf("%s %s: %s\n", status, name, detail)
	}
	var asked []string
	rec := &recorder{}
	client := mcp.NewClient(&mcp.Implementation{Name: "ci-lb-2026-go", Version: "1.0.0"}, &mcp.ClientOptions{
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			asked = append(asked, req.Params.Message)
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"result": "Grace"}}, nil
		},
	})
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: os.Args[1], HTTPClient: &http.Client{Transport: rec}},
		&mcp.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
	if err != nil {
		fmt.Println("FAIL connect:", err)
		os.Exit(1)
	}
	defer cs.Close()
	v := cs.InitializeResult().ProtocolVersion
	check("negotiated 2026-07-28", v == "2026-07-28", v)

	text := func(res *mcp.CallToolResult) string {
		var b strings.Builder
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				b.WriteString(tc.Text)
			}
		}
		return b.String()
	}
	call := func(name string, args map[string]any) *mcp.CallToolResult {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}}}
		}
		return res
	}

	lt, err := cs.ListTools(ctx, nil)
	var names []string
	if err == nil {
		for _, t := range lt.Tools {
			names = append(names, t.Name)
		}
		sort.Strings(names)
		check("tools/list: the four meta-tools, cacheable", strings.Join(names, " ") == "meta:describe meta:execute meta:invoke meta:search" && lt.CacheScope == "public",
			fmt.Sprintf("%v ttlMs=%d cacheScope=%s", names, lt.TTLMs, lt.CacheScope))
	} else {
		check("tools/list", false, err.Error())
	}
	res := call("meta:search", map[string]any{"queries": []string{"make text upper case"}})
	check("meta:search finds text:upper", !res.IsError && strings.Contains(text(res), "text:upper"), first(text(res), 200))
	res = call("meta:execute", map[string]any{"script": `const s = await callTool("math:add", {a: 40, b: 2}); const n = await callTool("client:prompt", {question: "name?"}); return n + " " + s.sum`})
	check("meta:execute: a plan answered by the client over multi round-trip requests", !res.IsError && strings.Contains(text(res), `"result":"Grace 42"`), first(text(res), 300))
	check("the client was asked once", len(asked) == 1 && strings.Contains(asked[0], "client:prompt"), fmt.Sprint(len(asked)))
	res = call("meta:invoke", map[string]any{"tool": "math:add", "input": map[string]any{"a": 1, "b": 2}})
	check("meta:invoke math:add", !res.IsError && strings.Contains(text(res), `"sum":3`), text(res))

	rec.mu.Lock()
	seq, sessions := append([]string(nil), rec.gateways...), rec.sessions
	rec.mu.Unlock()
	alternating := len(seq) >= 6
	for i := range seq {
		if seq[i] == "" || (i > 0 && seq[i] == seq[i-1]) {
			alternating = false
		}
	}
	check("each request on the other gateway", alternating, strings.Join(seq, " "))
	check("no Mcp-Session-Id sent or received", sessions == 0, fmt.Sprint(sessions))
	fmt.Printf("%d passed, %d failed\n", passed, failed)
	if failed > 0 {
		os.Exit(1)
	}
}

func first(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
