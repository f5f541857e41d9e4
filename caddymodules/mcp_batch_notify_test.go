package caddymodules

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestMCPBatchUnknownNotification: revision 2025-03-26's batches. JSON-RPC
// 2.0 answers no notification, and a server ignores one it does not know;
// the batch's requests are answered. The go-sdk refused a batch holding a
// notification of a method it does not handle whole (400, -32601 with id
// null), its requests unanswered, while it accepts the same notification
// alone (202). Now the batch's requests are answered, a batch of unknown
// notifications only is answered as one alone (202), and a known
// notification in a batch still reaches the go-sdk (its ping answered).
func TestMCPBatchUnknownNotification(t *testing.T) {
	port := freePort(t)
	startCaddy(t, mcpCaddyConfig(port, map[string]any{}))
	url := fmt.Sprintf("http://127.0.0.1:%d/mcp", port)
	status, sid, body := rawMCP(t, url, nil, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	if status != http.StatusOK || sid == "" {
		t.Fatalf("initialize: %d %q %s", status, sid, body)
	}
	h := map[string]string{"Mcp-Session-Id": sid, "Mcp-Protocol-Version": "2025-03-26"}
	rawMCP(t, url, h, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	for _, tc := range []struct {
		batch  string
		status int
		ids    []string // the requests answered
	}{
		{`[{"jsonrpc":"2.0","method":"notifications/no_such"},{"jsonrpc":"2.0","id":2,"method":"ping"},{"jsonrpc":"2.0","id":"three","method":"ping"}]`, 200, []string{`"id":2`, `"id":"three"`}},
		{`[{"jsonrpc":"2.0","id":4,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/roots/list_changed"},{"jsonrpc":"2.0","method":"x/y","params":{}}]`, 200, []string{`"id":4`}},
		{`[{"jsonrpc":"2.0","method":"notifications/no_such"},{"jsonrpc":"2.0","method":"notifications/other"}]`, 202, nil},
	} {
		resp, b := mcpRequest(t, http.MethodPost, url, h, strings.NewReader(tc.batch))
		if resp.StatusCode != tc.status || strings.Contains(string(b), `"error"`) {
			t.Errorf("%s: %d %s, want %d", tc.batch, resp.StatusCode, b, tc.status)
			continue
		}
		for _, id := range tc.ids {
			if !strings.Contains(string(b), id+`,"result":{}`) {
				t.Errorf("%s: %s, want an answer with %s", tc.batch, b, id)
			}
		}
	}
}

// TestMCPBatchNotificationsOfTheSDK holds sdkNotifications and
// sdkRequests, the methods left in a batch, to the go-sdk's own list of
// those it handles from a client (serverMethodInfos in its source): a
// notification it handles and the gateway left out would be lost in
// batches, a request answered -32601.
func TestMCPBatchNotificationsOfTheSDK(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/modelcontextprotocol/go-sdk").Output()
	if err != nil {
		t.Fatal(err)
	}
	dir := strings.TrimSpace(string(out))
	server, err := os.ReadFile(filepath.Join(dir, "mcp", "server.go"))
	if err != nil {
		t.Fatal(err)
	}
	protocol, err := os.ReadFile(filepath.Join(dir, "mcp", "protocol.go"))
	if err != nil {
		t.Fatal(err)
	}
	table := server[bytes.Index(server, []byte("var serverMethodInfos = ")):]
	table = table[:bytes.Index(table, []byte("\n}\n"))]
	var notifications, requests []string
	for _, m := range regexp.MustCompile(`(?m)^\s*(\w+):\s*(\w+)\((.*)$`).FindAllSubmatch(table, -1) {
		c := regexp.MustCompile(`(?m)^\s*` + string(m[1]) + `\s*=\s*"([^"]+)"`).FindSubmatch(protocol)
		if c == nil {
			t.Fatalf("no value for %s in the go-sdk's protocol.go", m[1])
		}
		if regexp.MustCompile(`\bnotification\b`).Match(m[3]) {
			notifications = append(notifications, string(c[1]))
		} else {
			requests = append(requests, string(c[1]))
		}
	}
	for _, l := range []struct {
		name string
		got  []string
		ours map[string]bool
	}{{"notifications", notifications, sdkNotifications}, {"requests", requests, sdkRequests}} {
		var want []string
		for n := range l.ours {
			want = append(want, n)
		}
		slices.Sort(l.got)
		slices.Sort(want)
		if len(l.got) == 0 || !slices.Equal(l.got, want) {
			t.Errorf("the go-sdk handles %s %q, the gateway's list has %q", l.name, l.got, want)
		}
	}
}
