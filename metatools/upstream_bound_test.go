package metatools

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codemode-gateway/caddy-codemode/broker/catalog"
)

// TestUpstreamAnswerBounded: a URL upstream that answers a call with more
// than MaxUpstreamMessageBytes, as JSON, as a small gzip body the transport
// inflates or as one server-sent event, fails that call with
// RESPONSE_TOO_LARGE; the gateway read the whole answer into memory before
// (a 1.5 GB answer from a hostile upstream took the gateway to 6 GB
// resident as JSON, 11 GB as an event). An answer within the bound
// passes, and the upstream is reconnected for the next call.
func TestUpstreamAnswerBounded(t *testing.T) {
	old := upstreamMinBackoff
	upstreamMinBackoff = time.Millisecond
	t.Cleanup(func() { upstreamMinBackoff = old })

	srv := mcp.NewServer(&mcp.Implementation{Name: "hostile", Version: "v1"}, nil)
	for _, name := range []string{"huge", "bomb", "fits"} {
		mcp.AddTool(srv, &mcp.Tool{Name: name, Description: name},
			func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, map[string]string, error) {
				return nil, map[string]string{}, nil
			})
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "ping", Description: "Ping"},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, map[string]string, error) {
			return nil, map[string]string{"pong": "yes"}, nil
		})
	sdk := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	// The calls of huge, bomb and fits are answered here, as JSON, with a
	// text of the given size.
	sizes := map[string]int{"huge": MaxUpstreamMessageBytes + 1<<20, "bomb": MaxUpstreamMessageBytes + 1<<20,
		"event": MaxUpstreamMessageBytes + 1<<20, "fits": 1 << 20}
	// The bomb is two gzip members (a reader reads on into the next): the
	// answer's head with its id, compressed per call, and the rest,
	// compressed once here, before any call's deadline runs.
	gzipped := func(s string) []byte {
		var b bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&b, gzip.BestSpeed)
		zw.Write([]byte(s))
		zw.Close()
		return b.Bytes()
	}
	bombRest := gzipped(strings.Repeat("a", sizes["bomb"]) + `"}]}}`)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var msg struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				Name string `json:"name"`
			} `json:"params"`
		}
		_ = json.Unmarshal(body, &msg)
		n, ok := sizes[msg.Params.Name]
		if msg.Method != "tools/call" || !ok {
			r.Body = io.NopCloser(bytes.NewReader(body))
			sdk.ServeHTTP(w, r)
			return
		}
		head := `{"jsonrpc":"2.0","id":` + string(msg.ID) + `,"result":{"content":[{"type":"text","text":"`
		if msg.Params.Name == "event" {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "event: message\ndata: "+head+strings.Repeat("a", n)+`"}]}}`+"\n\n")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if msg.Params.Name == "bomb" {
			w.Header().Set("Content-Encoding", "gzip")
			w.Write(gzipped(head))
			w.Write(bombRest)
			return
		}
		io.WriteString(w, head+strings.Repeat("a", n)+`"}]}}`)
	})
	hs := httptest.NewServer(h)
	t.Cleanup(func() { hs.Close() })
	u, err := NewUpstream(UpstreamConfig{Name: "hostile", URL: hs.URL + "/mcp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	u.Start(ctx)
	t.Cleanup(func() { u.Close() })

	call := func(tool string) (json.RawMessage, error) { return callConnected(ctx, u, "hostile:"+tool) }
	if out, err := call("fits"); err != nil || len(out) != sizes["fits"]+2 {
		t.Fatalf("an answer of 1 MiB: %d bytes, %v", len(out), err)
	}
	for _, tool := range []string{"huge", "bomb", "event"} {
		out, err := call(tool)
		var me *Error
		if !errors.As(err, &me) || me.Code != catalog.CodeResponseTooLarge {
			t.Fatalf("%s: %d bytes, %v; want RESPONSE_TOO_LARGE", tool, len(out), err)
		}
		if Transient(me.Code) {
			t.Errorf("%s: %s marked transient; the same call gets the same answer", tool, me.Code)
		}
		if out, err := call("ping"); err != nil || string(out) != `{"pong":"yes"}` {
			t.Fatalf("ping after %s: %s %v", tool, out, err)
		}
	}
}
