package catalog

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// upstream is a real HTTP server that serves an OpenAPI document (mutable,
// with an ETag) and an API under /api/v1/ that echoes what it received.
type upstream struct {
	srv *httptest.Server

	mu           sync.Mutex
	spec         []byte
	specStatus   int // non-zero: answer the document request with this status
	specRequests int
	notModified  int
}

var fixedNow = time.Date(2026, 11, 22, 15, 4, 5, 123e6, time.UTC)

func newUpstream(t testing.TB, spec []byte) *upstream {
	t.Helper()
	u := &upstream{spec: spec}
	mux := http.NewServeMux()
	mux.HandleFunc("/openapi.yaml", u.serveSpec)
	mux.HandleFunc("/api/v1/", u.serveAPI)
	u.srv = httptest.NewServer(mux)
	t.Cleanup(u.srv.Close)
	return u
}

func (u *upstream) setSpec(spec []byte, status int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.spec, u.specStatus = spec, status
}

func (u *upstream) counts() (requests, notModified int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.specRequests, u.notModified
}

func (u *upstream) serveSpec(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.specRequests++
	if u.specStatus != 0 {
		http.Error(w, "spec unavailable", u.specStatus)
		return
	}
	etag := fmt.Sprintf(`"%x"`, len(u.spec)) + fmt.Sprintf(`%q`, shortHash(u.spec))
	if r.Header.Get("If-None-Match") == etag {
		u.notModified++
		w.WriteHeader(http.StatusNotModified)
		return
	}
	w.Header().Set("ETag", etag)
	w.Header().Set("Content-Type", "application/yaml")
	_, _ = w.Write(u.spec)
}

func shortHash(b []byte) string {
	h := uint32(2166136261)
	for _, c := range b {
		h = (h ^ uint32(c)) * 16777619
	}
	return fmt.Sprintf("%08x", h)
}

// echo is what the upstream API answers by default.
type echo struct {
	Method      string `json:"method"`
	Path        string `json:"path"`
	Query       string `json:"query"`
	RequestID   string `json:"requestId"`
	XTags       string `json:"xTags"`
	Cookie      string `json:"cookie"`
	Auth        string `json:"auth"`
	APIKey      string `json:"apiKey"`
	ContentType string `json:"contentType"`
	Body        string `json:"body"`
}

func (u *upstream) serveAPI(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	switch r.URL.EscapedPath() {
	case "/api/v1/pets/missing":
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"error":"no such pet"}`)
		return
	case "/api/v1/pets/broken":
		w.WriteHeader(http.StatusBadGateway)
		_, _ = io.WriteString(w, "<html>bad gateway</html>")
		return
	case "/api/v1/pets/huge":
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"data":"`+strings.Repeat("x", 64<<10)+`"}`)
		return
	case "/api/v1/pets/slow":
		<-r.Context().Done() // answers only when the caller gives up
		return
	case "/api/v1/pets/away":
		http.Redirect(w, r, "http://127.0.0.2:1/elsewhere", http.StatusFound)
		return
	case "/api/v1/pets/here":
		http.Redirect(w, r, "/api/v1/pets/moved", http.StatusFound)
		return
	case "/api/v1/pets/gone":
		if r.Method == http.MethodDelete {
			w.WriteHeader(http.StatusNoContent)
			return
		}
	case "/api/v1/pets/p1/photo":
		w.Header().Set("Content-Type", "image/png")
		_, _ = w.Write([]byte{0x89, 'P', 'N', 'G', 0xff, 0x00})
		return
	case "/api/v1/notes":
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "stored: "+string(body))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(echo{
		Method:      r.Method,
		Path:        r.URL.EscapedPath(),
		Query:       r.URL.RawQuery,
		RequestID:   r.Header.Get("X-Request-Id"),
		XTags:       r.Header.Get("X-Tags"),
		Cookie:      r.Header.Get("Cookie"),
		Auth:        r.Header.Get("Authorization"),
		APIKey:      r.Header.Get("X-API-Key"),
		ContentType: r.Header.Get("Content-Type"),
		Body:        string(body),
	})
}

func readTestdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// startShop returns a started catalog over the shop document served by a
// real upstream.
func startShop(t *testing.T, mutate func(*Source)) (*Catalog, *upstream) {
	t.Helper()
	up := newUpstream(t, readTestdata(t, "shop.yaml"))
	src := Source{
		Name:    "shop",
		SpecURL: up.srv.URL + "/openapi.yaml",
		Headers: map[string]string{"Authorization": "Bearer s3cret", "X-API-Key": "k1"},
	}
	if mutate != nil {
		mutate(&src)
	}
	c, err := New([]Source{src}, &Options{PollInterval: -1, Now: func() time.Time { return fixedNow }})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, up
}

func actionNames(r CatalogResponse) []string {
	var names []string
	for _, a := range r.Actions {
		names = append(names, a.Name)
	}
	return names
}

func TestCatalogFromDocument(t *testing.T) {
	c, up := startShop(t, nil)
	r := c.Response()

	want := []string{
		"shop_createNote", "shop_createPet", "shop_delete_pets_by_petId", "shop_getPhoto",
		"shop_listPets", "shop_listPets_2", "shop_pets_get_by_id", "shop_updatePet", "shop_whoAmI",
	}
	if got := actionNames(r); !reflect.DeepEqual(got, want) {
		t.Fatalf("actions = %v, want %v", got, want)
	}
	wantSvc := []CatalogService{{Name: "shop", SpecURL: up.srv.URL + "/openapi.yaml", LastUpdated: "2026-11-22T15:04:05.123Z", ActionCount: 9}}
	if !reflect.DeepEqual(r.Services, wantSvc) {
		t.Fatalf("services = %+v, want %+v", r.Services, wantSvc)
	}
	if len(r.Version) != 16 {
		t.Fatalf("version %q: want 16 hex digits", r.Version)
	}

	// GET /pets lost the plain name to GET /duplicate (path order).
	list, ok := c.Action("shop_listPets_2")
	if !ok {
		t.Fatal("shop_listPets_2 missing")
	}
	if list.Method != "GET" || list.Path != "/pets" || list.OperationID != "listPets" {
		t.Fatalf("listPets_2 = %s %s %q", list.Method, list.Path, list.OperationID)
	}
	if list.Description != "List pets\n\nReturns the pets, filtered." || list.Summary != "List pets" {
		t.Fatalf("description %q summary %q", list.Description, list.Summary)
	}
	if !reflect.DeepEqual(list.Tags, []string{"pets"}) || list.Deprecated {
		t.Fatalf("tags %v deprecated %v", list.Tags, list.Deprecated)
	}
	wantAnn := Annotations{Title: "List pets", ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: true}
	if list.Annotations != wantAnn {
		t.Fatalf("annotations %+v", list.Annotations)
	}
	assertJSON(t, list.InputSchema, `{
		"type": "object",
		"additionalProperties": false,
		"properties": {
			"limit": {"type": "integer", "maximum": 100, "description": "Largest number of pets to return."},
			"tags": {"type": "array", "items": {"type": "string"}},
			"X-Request-Id": {"type": "string"},
			"filter": {"type": "object", "properties": {"color": {"type": "string"}, "age": {"type": "integer"}}}
		}
	}`)
	assertJSON(t, list.OutputSchema, `{
		"type": "array",
		"items": {
			"type": "object",
			"required": ["name"],
			"properties": {
				"id": {"type": "integer", "readOnly": true},
				"name": {"type": ["string", "null"]},
				"tags": {"type": "array", "items": {"type": "string"}},
				"parent": {"type": "object", "description": "recursive reference to Pet"}
			}
		}
	}`)

	get, _ := c.Action("shop_pets_get_by_id")
	if !get.Deprecated || !reflect.DeepEqual(get.Tags, []string{"pets", "legacy"}) || get.OperationID != "pets.get-by-id" {
		t.Fatalf("pets_get_by_id: %+v", get)
	}
	assertJSON(t, get.InputSchema, `{
		"type": "object", "additionalProperties": false, "required": ["petId"],
		"properties": {"petId": {"type": "string"}, "fields": {"type": "array", "items": {"type": "string"}}}
	}`)

	create, _ := c.Action("shop_createPet")
	if create.Annotations.ReadOnlyHint || create.Annotations.IdempotentHint || create.Annotations.DestructiveHint {
		t.Fatalf("createPet annotations %+v", create.Annotations)
	}
	var in struct {
		Required   []string                   `json:"required"`
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if err := json.Unmarshal(create.InputSchema, &in); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in.Required, []string{"body"}) {
		t.Fatalf("createPet required %v", in.Required)
	}
	assertJSON(t, in.Properties["body"], `{
		"type": "object", "required": ["name"], "description": "The pet to create.",
		"properties": {
			"id": {"type": "integer", "readOnly": true},
			"name": {"type": ["string", "null"]},
			"tags": {"type": "array", "items": {"type": "string"}},
			"parent": {"type": "object", "description": "recursive reference to Pet"}
		}
	}`)

	del, _ := c.Action("shop_delete_pets_by_petId")
	if del.OperationID != "" || !del.Annotations.DestructiveHint || !del.Annotations.IdempotentHint || del.Annotations.ReadOnlyHint {
		t.Fatalf("delete: %+v", del)
	}
	put, _ := c.Action("shop_updatePet")
	if !put.Annotations.IdempotentHint || put.Annotations.DestructiveHint {
		t.Fatalf("put annotations %+v", put.Annotations)
	}

	// The query parameter named body yields to the request body.
	note, _ := c.Action("shop_createNote")
	assertJSON(t, note.InputSchema, `{
		"type": "object", "additionalProperties": false, "required": ["body"],
		"properties": {
			"body_query": {"type": "string", "description": "A query parameter that happens to be called body."},
			"body": {"type": "string", "description": "Request body (text/plain)."}
		}
	}`)

	// The wire form carries exactly the spec's fields.
	raw, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var wire struct {
		Actions  []map[string]json.RawMessage `json:"actions"`
		Services []map[string]json.RawMessage `json:"services"`
		Version  string                       `json:"version"`
	}
	if err := json.Unmarshal(raw, &wire); err != nil {
		t.Fatal(err)
	}
	allowed := map[string]bool{"name": true, "description": true, "inputSchema": true, "service": true, "tags": true, "deprecated": true}
	for _, a := range wire.Actions {
		for k := range a {
			if !allowed[k] {
				t.Fatalf("action JSON has field %q", k)
			}
		}
	}
	if got := keys(wire.Services[0]); !reflect.DeepEqual(got, []string{"actionCount", "lastUpdated", "name", "specUrl"}) {
		t.Fatalf("service JSON fields %v", got)
	}
}

func keys(m map[string]json.RawMessage) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// assertJSON compares two JSON texts by value.
func assertJSON(t *testing.T, got json.RawMessage, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("got invalid JSON %s: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("want invalid JSON: %v", err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("JSON mismatch\n got: %s\nwant: %s", got, want)
	}
}

func TestNewRejectsBadSources(t *testing.T) {
	cases := []struct {
		name string
		src  []Source
		want string
	}{
		{"empty name", []Source{{SpecURL: "x.json"}}, "must be a letter"},
		{"hyphen", []Source{{Name: "my-api", SpecURL: "x.json"}}, "must be a letter"},
		{"leading digit", []Source{{Name: "1api", SpecURL: "x.json"}}, "must be a letter"},
		{"duplicate", []Source{{Name: "a", SpecURL: "x.json"}, {Name: "a", SpecURL: "y.json"}}, "duplicate name"},
		{"no spec", []Source{{Name: "a"}}, "spec URL is required"},
		{"ftp", []Source{{Name: "a", SpecURL: "ftp://h/x.json"}}, `scheme "ftp"`},
		{"no host", []Source{{Name: "a", SpecURL: "http:///x.json"}}, "has no host"},
		{"relative base", []Source{{Name: "a", SpecURL: "x.json", BaseURL: "/api"}}, "absolute http(s) URL"},
		{"bad header", []Source{{Name: "a", SpecURL: "x.json", Headers: map[string]string{"X Key": "v"}}}, "invalid header name"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.src, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestFileSources(t *testing.T) {
	up := newUpstream(t, nil)
	abs, err := filepath.Abs(filepath.Join("testdata", "shop.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := New([]Source{
		{Name: "plain", SpecURL: filepath.Join("testdata", "shop.yaml")},
		{Name: "url", SpecURL: "file://" + filepath.ToSlash(abs), BaseURL: up.srv.URL + "/api/v1/"},
	}, &Options{PollInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := c.Response()
	if len(r.Actions) != 18 || r.Services[0].ActionCount != 9 || r.Services[1].ActionCount != 9 {
		t.Fatalf("actions %d, services %+v", len(r.Actions), r.Services)
	}
	// The file document's servers are relative: without a base URL there
	// is nowhere to send the request.
	_, err = c.Call(context.Background(), "plain_listPets_2", nil)
	if ErrorCode(err) != CodeNoBaseURL || !strings.Contains(err.Error(), "configure a base URL") {
		t.Fatalf("err = %v", err)
	}
	out, err := c.Call(context.Background(), "url_pets_get_by_id", json.RawMessage(`{"petId":"p7"}`))
	if err != nil {
		t.Fatal(err)
	}
	var e echo
	_ = json.Unmarshal(out, &e)
	if e.Path != "/api/v1/pets/p7" {
		t.Fatalf("path %q", e.Path)
	}
}

func TestStartReportsFailedSourcesAndServesTheOthers(t *testing.T) {
	up := newUpstream(t, readTestdata(t, "shop.yaml"))
	c, err := New([]Source{
		{Name: "good", SpecURL: up.srv.URL + "/openapi.yaml"},
		{Name: "missing", SpecURL: filepath.Join("testdata", "does-not-exist.yaml")},
		{Name: "broken", SpecURL: filepath.Join("testdata", "not-openapi.json")},
	}, &Options{PollInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	err = c.Start(context.Background())
	defer c.Close()
	if err == nil || !strings.Contains(err.Error(), `loading catalog source "missing"`) || !strings.Contains(err.Error(), `loading catalog source "broken"`) {
		t.Fatalf("Start err = %v", err)
	}
	r := c.Response()
	if len(r.Actions) != 9 {
		t.Fatalf("actions %d", len(r.Actions))
	}
	if r.Services[1].LastUpdated != "" || r.Services[1].ActionCount != 0 || r.Services[1].LastError == "" {
		t.Fatalf("missing service %+v", r.Services[1])
	}
	if !strings.Contains(r.Services[2].LastError, "no `openapi: 3.x`") {
		t.Fatalf("broken service %+v", r.Services[2])
	}
}

// TestDemoDocument loads the demo source that Caddyfile.example serves (as a
// file, so with a base URL) and checks its actions; .ci/smoke calls the
// demo API itself through Caddy.
func TestDemoDocument(t *testing.T) {
	up := newUpstream(t, nil)
	c, err := New([]Source{{
		Name:    "demo",
		SpecURL: filepath.Join("..", "..", "caddymodules", "testdata", "demo", "openapi.json"),
		BaseURL: up.srv.URL + "/api/v1",
	}}, &Options{PollInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := actionNames(c.Response()); !reflect.DeepEqual(got, []string{"demo_echo", "demo_getGreeting", "demo_get_time"}) {
		t.Fatalf("demo actions %v", got)
	}
	out, err := c.Call(context.Background(), "demo_getGreeting", json.RawMessage(`{"name": "Ada", "greeting": "Hi", "X-Punctuation": "?"}`))
	if err != nil {
		t.Fatal(err)
	}
	var e echo
	_ = json.Unmarshal(out, &e)
	if e.Path != "/api/v1/greet/Ada" || e.Query != "greeting=Hi" {
		t.Fatalf("demo call %+v", e)
	}
}
