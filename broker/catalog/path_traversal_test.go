package catalog

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestPathValueCannotLeaveTheOperation: a path parameter whose value holds
// slashes or backslashes around dot segments ("../time", "a/../../x",
// "..\\x") is refused before any request: percent-encoding sends "../time"
// as "..%2Ftime", and a server that decodes the path before it cleans it
// (Caddy does; so do many proxies and frameworks) resolves it to another
// operation, or out of the source's base path. Values with slashes but no
// dot segment still go out encoded. The server here resolves paths as
// Caddy does: decoded, then cleaned.
func TestPathValueCannotLeaveTheOperation(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	mux := http.NewServeMux()
	var srv *httptest.Server
	mux.HandleFunc("/openapi.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"openapi":"3.0.3","info":{"title":"t","version":"1"},
			"servers":[{"url":"` + srv.URL + `/api"}],
			"paths":{"/greet/{name}":{"get":{"operationId":"greet",
				"parameters":[{"name":"name","in":"path","required":true,"schema":{"type":"string"}}],
				"responses":{"200":{"description":"ok"}}}}}}`))
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		resolved := path.Clean(r.URL.Path) // r.URL.Path is decoded: %2F is a slash here
		mu.Lock()
		seen = append(seen, resolved)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"path": resolved})
	})
	srv = httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	c, err := New([]Source{{Name: "t", SpecURL: srv.URL + "/openapi.json"}}, &Options{PollInterval: -1, Now: func() time.Time { return fixedNow }})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)

	for _, v := range []string{"../time", "a/../../admin", "../../x", "./x", "x/..", "..\\time", "a\\..\\..\\admin"} {
		t.Run(v, func(t *testing.T) {
			mu.Lock()
			before := len(seen)
			mu.Unlock()
			in, _ := json.Marshal(map[string]string{"name": v})
			out, err := c.Call(context.Background(), "t_greet", in)
			mu.Lock()
			reached := seen[before:]
			mu.Unlock()
			if ErrorCode(err) != CodeValidationError || !strings.Contains(err.Error(), "which a server would resolve to another path") {
				t.Fatalf("got %s, %v (the server resolved %v), want VALIDATION_ERROR", out, err, reached)
			}
			if len(reached) != 0 {
				t.Fatalf("a request went out: %v", reached)
			}
		})
	}
	for v, want := range map[string]string{"a/b": "/api/greet/a/b", "..a/b..": "/api/greet/..a/b..", "%2e%2e/time": "/api/greet/%2e%2e/time", "a\\b": "/api/greet/a\\b"} {
		in, _ := json.Marshal(map[string]string{"name": v})
		out, err := c.Call(context.Background(), "t_greet", in)
		if err != nil || !strings.Contains(string(out), `"path":"`+strings.ReplaceAll(want, `\`, `\\`)+`"`) {
			t.Fatalf("%q: got %s, %v, want the server to see %s", v, out, err, want)
		}
	}
}
