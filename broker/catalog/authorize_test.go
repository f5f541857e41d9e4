package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

type userKey struct{}

// TestAuthorizeHook: the hook sees each request with the caller's context
// after the static headers, its *Error keeps its code, and a credential it
// put in the query never reaches an error message.
func TestAuthorizeHook(t *testing.T) {
	var seen []string
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, r.Header.Get("Authorization")+"|"+r.Header.Get("X-Static")+"|"+r.URL.Query().Get("key"))
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	defer api.Close()
	doc := `{"openapi":"3.0.3","info":{"title":"t","version":"1"},"servers":[{"url":"` + api.URL + `"}],
	"paths":{"/me":{"get":{"operationId":"me","responses":{"200":{"description":"ok"}}}}}}`
	spec := filepath.Join(t.TempDir(), "api.json")
	if err := os.WriteFile(spec, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	refuse := errors.New("storage down")
	c, err := New([]Source{{Name: "api", SpecURL: spec, Headers: map[string]string{"X-Static": "s", "Authorization": "Bearer shared"}}},
		&Options{PollInterval: -1, Authorize: func(ctx context.Context, service string, r *http.Request) error {
			switch u, _ := ctx.Value(userKey{}).(string); u {
			case "":
				return &Error{Code: "CREDENTIAL_REQUIRED", Message: "connect at https://gw/connections/" + service}
			case "broken":
				return refuse
			default:
				r.Header.Set("Authorization", "Bearer token-of-"+u)
				q := r.URL.Query()
				q.Set("key", "qsecret-"+u)
				r.URL.RawQuery = q.Encode()
				return nil
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Under a recorded span: the call's client span names the path
	// template and host, never the credential.
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	root, span := tp.Tracer("test").Start(context.Background(), "plan")
	for _, u := range []string{"alice", "bob"} {
		out, err := c.Call(context.WithValue(root, userKey{}, u), "api_me", nil)
		if err != nil || !json.Valid(out) {
			t.Fatalf("%s: %s %v", u, out, err)
		}
	}
	span.End()
	if len(rec.Ended()) < 3 {
		t.Fatalf("%d spans recorded", len(rec.Ended()))
	}
	for _, s := range rec.Ended() {
		text := fmt.Sprint(s.Name(), s.Attributes(), s.Events(), s.Status())
		if strings.Contains(text, "token-of-") || strings.Contains(text, "qsecret") {
			t.Fatalf("a span carries the credential: %s", text)
		}
	}
	if strings.Join(seen, ",") != "Bearer token-of-alice|s|qsecret-alice,Bearer token-of-bob|s|qsecret-bob" {
		t.Fatalf("upstream saw %v", seen)
	}
	_, err = c.Call(context.Background(), "api_me", nil)
	if ErrorCode(err) != "CREDENTIAL_REQUIRED" || !strings.Contains(err.Error(), "https://gw/connections/api") {
		t.Fatalf("hook's error: %v", err)
	}
	_, err = c.Call(context.WithValue(context.Background(), userKey{}, "broken"), "api_me", nil)
	if ErrorCode(err) != CodeUpstreamUnreachable || !errors.Is(err, refuse) {
		t.Fatalf("other error: %v", err)
	}
	if len(seen) != 2 {
		t.Fatal("a refused call reached the upstream")
	}
	// The API goes away: the error names the URL without its query.
	api.Close()
	_, err = c.Call(context.WithValue(context.Background(), userKey{}, "carol"), "api_me", nil)
	if ErrorCode(err) != CodeUpstreamUnreachable || strings.Contains(err.Error(), "qsecret") {
		t.Fatalf("unreachable: %v", err)
	}
}
