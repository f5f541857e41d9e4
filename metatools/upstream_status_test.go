package metatools

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/codemode-gateway/caddy-codemode/broker/catalog"
)

// TestInvokeUpstreamStatusTransient: a tool of an OpenAPI source whose
// upstream answers outside 2xx fails with UPSTREAM_ERROR, its status, and
// transient only when the same call may succeed later (408, 425, 429, most
// 5xx; tool.StatusTransient). Every UPSTREAM_ERROR was transient: a client
// told to retry a 404 or a 403 retried it.
func TestInvokeUpstreamStatusTransient(t *testing.T) {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/openapi.json" {
			fmt.Fprintf(w, `{"openapi":"3.0.3","info":{"title":"s","version":"1"},"servers":[{"url":%q}],
				"paths":{"/status/{code}":{"get":{"operationId":"answer","parameters":[{"name":"code","in":"path","required":true,"schema":{"type":"string"}}],
				"responses":{"200":{"description":"ok"}}}}}}`, "http://"+r.Host)
			return
		}
		code, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/status/"))
		if err != nil {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		fmt.Fprintf(w, `{"status":%d}`, code)
	}))
	defer hs.Close()
	cat, s := catalogService(t, []catalog.Source{{Name: "s", SpecURL: hs.URL + "/openapi.json"}})
	var name string
	for _, a := range cat.Response().Actions {
		name = a.Name
	}
	for _, tc := range []struct {
		status    int
		transient bool
	}{
		{300, false}, {304, false}, {400, false}, {401, false}, {403, false}, {404, false}, {409, false}, {410, false},
		{422, false}, {408, true}, {425, true}, {429, true}, {500, true}, {501, false}, {502, true}, {503, true},
		{504, true}, {505, false}, {511, false},
	} {
		_, e := s.CallTool(context.Background(), name, json.RawMessage(fmt.Sprintf(`{"code":"%d"}`, tc.status)))
		if e == nil || e.Code != catalog.CodeUpstreamError || e.Status != tc.status || e.Transient != tc.transient {
			t.Errorf("upstream %d: %#v, want UPSTREAM_ERROR with its status, transient %v", tc.status, e, tc.transient)
		}
	}
}

// TestCatalogFaultsNotTransient: a call of a service without a usable base
// URL (its configuration) and one whose answer exceeds the source's cap (the
// same request gets the same answer) fail as not transient; both were marked
// transient, and a client retried what could not pass.
func TestCatalogFaultsNotTransient(t *testing.T) {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"items":["a long enough answer"]}`)
	}))
	defer hs.Close()
	doc := func(server string) string {
		return `{"openapi":"3.0.3","info":{"title":"s","version":"1"},"servers":[{"url":"` + server + `"}],
			"paths":{"/items":{"get":{"operationId":"list","responses":{"200":{"description":"ok"}}}}}}`
	}
	dir := t.TempDir()
	relative, absolute := dir+"/relative.json", dir+"/absolute.json"
	if err := os.WriteFile(relative, []byte(doc("/api")), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(absolute, []byte(doc(hs.URL)), 0o600); err != nil {
		t.Fatal(err)
	}
	_, s := catalogService(t, []catalog.Source{
		{Name: "nobase", SpecURL: relative},
		{Name: "capped", SpecURL: absolute, MaxResponseBytes: 8},
		{Name: "fine", SpecURL: absolute},
	})
	if _, e := s.CallTool(context.Background(), "fine_list", nil); e != nil {
		t.Fatalf("fine_list: %#v", e)
	}
	for name, code := range map[string]string{"nobase_list": catalog.CodeNoBaseURL, "capped_list": catalog.CodeResponseTooLarge} {
		_, e := s.CallTool(context.Background(), name, nil)
		if e == nil || e.Code != code || e.Transient {
			t.Errorf("%s: %#v, want %s, not transient", name, e, code)
		}
	}
}

// TestCredentialFaultsNotTransient: a call that needs the user to connect
// (CREDENTIAL_REQUIRED) or whose refresh would go where the gateway does not
// send credentials (UPSTREAM_ENDPOINT_REFUSED) fails as not transient, as
// credentials.md says: a retry gets the same answer until the user acts.
// Both were marked transient (every code Transient did not list was), so a
// client retried them; CREDENTIAL_UNAVAILABLE (the storage or the token
// endpoint unreachable) stays transient.
func TestCredentialFaultsNotTransient(t *testing.T) {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{}`)
	}))
	defer hs.Close()
	spec := t.TempDir() + "/api.json"
	doc := `{"openapi":"3.0.3","info":{"title":"s","version":"1"},"servers":[{"url":"` + hs.URL + `"}],
		"paths":{"/me":{"get":{"operationId":"me","responses":{"200":{"description":"ok"}}}}}}`
	if err := os.WriteFile(spec, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	var code atomic.Value
	_, s := catalogServiceWith(t, []catalog.Source{{Name: "api", SpecURL: spec}}, &catalog.Options{PollInterval: -1,
		Authorize: func(ctx context.Context, service string, r *http.Request) error {
			return &catalog.Error{Code: code.Load().(string), Message: "connect at https://gw/connections/" + service}
		}})
	for c, transient := range map[string]bool{"CREDENTIAL_REQUIRED": false, "UPSTREAM_ENDPOINT_REFUSED": false, "CREDENTIAL_UNAVAILABLE": true} {
		code.Store(c)
		_, e := s.CallTool(context.Background(), "api_me", nil)
		if e == nil || e.Code != c || e.Transient != transient {
			t.Errorf("%s: %#v, want transient %v", c, e, transient)
		}
	}
}

// catalogService is the meta-tools' service over a started catalog of
// sources (closed when the test ends).
func catalogService(t *testing.T, sources []catalog.Source) (*catalog.Catalog, *Service) {
	t.Helper()
	return catalogServiceWith(t, sources, &catalog.Options{PollInterval: -1})
}

// catalogServiceWith is catalogService with the catalog's options.
func catalogServiceWith(t *testing.T, sources []catalog.Source, opts *catalog.Options) (*catalog.Catalog, *Service) {
	t.Helper()
	cat, err := catalog.New(sources, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := cat.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	ix, err := NewIndex([]ToolSource{&CatalogSource{C: cat}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ix.Reload(context.Background())
	return cat, NewService(ix, nil)
}
