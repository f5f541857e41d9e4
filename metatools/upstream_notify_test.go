package metatools

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestUpstreamListChangedFloodCoalesced: an upstream that sends thousands of
// notifications/tools/list_changed (here in the answer to a call) gets one
// tools/list at a time from the gateway, and one more after it. Each
// notification started a read of its own: 20,000 of them had the gateway
// hold 13,000 goroutines and 8,500 tools/list requests open at once.
//
// The upstream is a minimal Streamable HTTP server of the 2025-06-18
// revision, written here so that it can send what no SDK sends. It holds
// every tools/list after the first (the one of the connect) until the test
// lets them go; the test fails as soon as two are open at once. With the
// fix that never happens, so the wait for it is only a backstop: the test
// passes at its end (a few seconds), never fails for being slow.
func TestUpstreamListChangedFloodCoalesced(t *testing.T) {
	const notifications = 2000
	var (
		mu             sync.Mutex
		lists, open    int
		maxOpen        int
		sawTwo         bool
		release        = make(chan struct{})
		firstHeld      = make(chan struct{})
		secondOpenSeen = make(chan struct{})
	)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		var msg struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		body, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(body, &msg)
		w.Header().Set("Mcp-Session-Id", "s1")
		if msg.ID == nil {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		answer := func(result string) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,%s}`, msg.ID, result)
		}
		switch msg.Method {
		case "initialize":
			answer(`"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{"listChanged":true}},"serverInfo":{"name":"noisy","version":"1"}}`)
		case "tools/list":
			mu.Lock()
			lists++
			n := lists
			open++
			if open > maxOpen {
				maxOpen = open
			}
			if open == 2 && !sawTwo {
				sawTwo = true
				close(secondOpenSeen)
			}
			mu.Unlock()
			if n == 2 {
				close(firstHeld)
			}
			if n > 1 {
				<-release
			}
			answer(`"result":{"tools":[{"name":"flood","inputSchema":{"type":"object"}}]}`)
			mu.Lock()
			open--
			mu.Unlock()
		case "tools/call":
			w.Header().Set("Content-Type", "text/event-stream")
			ev := "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\n\n"
			io.WriteString(w, strings.Repeat(ev, notifications))
			fmt.Fprintf(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"{}\"}]}}\n\n", msg.ID)
		default:
			answer(`"error":{"code":-32601,"message":"method not found"}`)
		}
	})
	hs := httptest.NewServer(h)
	var once sync.Once
	letGo := func() { once.Do(func() { close(release) }) }
	t.Cleanup(func() { letGo(); hs.Close() })
	u, err := NewUpstream(UpstreamConfig{Name: "noisy", URL: hs.URL + "/mcp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	u.Start(ctx)
	t.Cleanup(func() { letGo(); u.Close() })
	if out, err := u.Call(ctx, "noisy:flood", json.RawMessage(`{}`)); err != nil || string(out) != `{}` {
		t.Fatalf("call: %s %v", out, err)
	}
	select {
	case <-firstHeld:
	case <-ctx.Done():
		t.Fatal("no tools/list after the notifications")
	}
	select {
	case <-secondOpenSeen:
		mu.Lock()
		t.Errorf("two tools/list open at once after %d list_changed notifications (%d requests so far)", notifications, lists)
		mu.Unlock()
	case <-time.After(3 * time.Second): // backstop, see above
	}
	letGo()
	// The notifications that came during the held read ask for one more.
	for {
		mu.Lock()
		n, o, m := lists, open, maxOpen
		mu.Unlock()
		if n >= 3 && o == 0 {
			if n > 3 || m > 1 {
				t.Errorf("tools/list requests: %d (the connect's, one held, one after it), at most %d at once; want 3 and 1", n, m)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("tools/list requests: %d, %d open", n, o)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
