package catalog

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// kinTestdata returns the path of a document in the openapi3/testdata folder
// of the kin-openapi module (MIT licence), which `go mod download` puts in
// the module cache because this package imports kin-openapi: the test needs
// no network and no copy in this repository.
func kinTestdata(t testing.TB, name string) []byte {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/getkin/kin-openapi").Output()
	if err != nil {
		t.Fatalf("locating kin-openapi: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "openapi3", "testdata", name))
	if err != nil {
		t.Fatalf("reading kin-openapi test data: %v", err)
	}
	return b
}

// largeDocuments are public OpenAPI documents shipped in kin-openapi's test
// data: SendGrid's v3 API (1.5 MB of JSON) and Presalytics' OOXML
// automation API (270 KB of YAML, from the APIs.guru directory).
var largeDocuments = []struct {
	file    string
	name    string
	actions int
}{
	{"oai_v3_stoplight.json", "sendgrid", 334},
	{"issue796.yml", "ooxml", 148},
}

func TestLargeDocuments(t *testing.T) {
	for _, doc := range largeDocuments {
		t.Run(doc.name, func(t *testing.T) {
			data := kinTestdata(t, doc.file)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = w.Write(data)
			}))
			defer srv.Close()

			c, err := New([]Source{{Name: doc.name, SpecURL: srv.URL + "/" + doc.file}}, &Options{PollInterval: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			start := time.Now()
			if err := c.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			elapsed := time.Since(start)
			r := c.Response()
			t.Logf("%s: %d bytes, %d actions, fetched and built in %v", doc.file, len(data), len(r.Actions), elapsed)
			if len(r.Actions) != doc.actions || r.Services[0].ActionCount != doc.actions {
				t.Fatalf("actions = %d, want %d", len(r.Actions), doc.actions)
			}
			schemaBytes := 0
			for _, a := range r.Actions {
				if !strings.HasPrefix(a.Name, doc.name+"_") || len(a.Name) > MaxNameLength {
					t.Fatalf("bad name %q", a.Name)
				}
				for _, ch := range a.Name {
					if !(ch == '_' || ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9') {
						t.Fatalf("name %q has %q", a.Name, ch)
					}
				}
				var schema struct {
					Type       string         `json:"type"`
					Properties map[string]any `json:"properties"`
					Required   []string       `json:"required"`
				}
				if err := json.Unmarshal(a.InputSchema, &schema); err != nil || schema.Type != "object" {
					t.Fatalf("%s: input schema %s: %v", a.Name, a.InputSchema, err)
				}
				for _, req := range schema.Required {
					if _, ok := schema.Properties[req]; !ok {
						t.Fatalf("%s: required %q is not a property", a.Name, req)
					}
				}
				if strings.Contains(string(a.InputSchema), `"$ref"`) || strings.Contains(string(a.OutputSchema), `"$ref"`) {
					t.Fatalf("%s: unresolved $ref", a.Name)
				}
				schemaBytes += len(a.InputSchema) + len(a.OutputSchema)
			}
			t.Logf("%s: %d bytes of input and output schemas", doc.name, schemaBytes)
		})
	}
}

// TestLargeDocumentCall calls a SendGrid action against a local server
// standing in for api.sendgrid.com (BaseURL), with path, query and header
// parameters and a JSON body from the real document.
func TestLargeDocumentCall(t *testing.T) {
	data := kinTestdata(t, "oai_v3_stoplight.json")
	var got *http.Request
	var gotBody []byte
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Clone(context.Background())
		gotBody = make([]byte, r.ContentLength)
		_, _ = r.Body.Read(gotBody)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	defer api.Close()
	dir := t.TempDir()
	path := filepath.Join(dir, "sendgrid.json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := New([]Source{{Name: "sendgrid", SpecURL: path, BaseURL: api.URL + "/v3",
		Headers: map[string]string{"Authorization": "Bearer SG.test"}}}, &Options{PollInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	a, ok := c.Action("sendgrid_PATCH_api_keys_api_key_id")
	if !ok {
		t.Fatalf("action missing; have e.g. %v", actionNames(c.Response())[:5])
	}
	if a.Method != "PATCH" || a.Path != "/api_keys/{api_key_id}" {
		t.Fatalf("%s %s", a.Method, a.Path)
	}
	out, err := c.Call(context.Background(), a.Name, json.RawMessage(`{"api_key_id": "k/1", "on-behalf-of": "sub1", "body": {"name": "renamed"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != `{"ok":true}` {
		t.Fatalf("out %s", out)
	}
	if got.Method != "PATCH" || got.URL.EscapedPath() != "/v3/api_keys/k%2F1" || got.Header.Get("On-Behalf-Of") != "sub1" ||
		got.Header.Get("Authorization") != "Bearer SG.test" || string(gotBody) != `{"name": "renamed"}` {
		t.Fatalf("request %s %s headers %v body %s", got.Method, got.URL.EscapedPath(), got.Header, gotBody)
	}
}

// BenchmarkBuildLargeDocument measures parsing the SendGrid document and
// building its 334 actions (schemas inlined), without the fetch.
//
//	go test -run '^$' -bench BuildLargeDocument -benchmem ./broker/catalog/
func BenchmarkBuildLargeDocument(b *testing.B) {
	for _, doc := range largeDocuments {
		b.Run(doc.name, func(b *testing.B) {
			data := kinTestdata(b, doc.file)
			s, err := newSourceState(Source{Name: doc.name, SpecURL: "https://example.test/" + doc.file})
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				ops, err := buildOperations(s, data)
				if err != nil || len(ops) != doc.actions {
					b.Fatalf("%d ops, %v", len(ops), err)
				}
			}
		})
	}
}

// TestSwagger2Document loads the classic Swagger 2.0 petstore (kin-openapi's
// openapi2 test data), converted to OpenAPI 3, and calls a form-encoded
// operation and a header/path one.
func TestSwagger2Document(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/getkin/kin-openapi").Output()
	if err != nil {
		t.Fatalf("locating kin-openapi: %v", err)
	}
	path := filepath.Join(strings.TrimSpace(string(out)), "openapi2", "testdata", "swagger.json")
	up := newUpstream(t, nil)

	c, err := New([]Source{
		{Name: "petstore", SpecURL: path},
		{Name: "local", SpecURL: path, BaseURL: up.srv.URL + "/api/v1"},
	}, &Options{PollInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	r := c.Response()
	if r.Services[0].ActionCount != 20 {
		t.Fatalf("petstore actions %d", r.Services[0].ActionCount)
	}
	// host, basePath and the first scheme make the server.
	if op := c.snap.Load().ops["petstore_getPetById"]; op == nil || op.baseURL != "https://petstore.swagger.io/v2" {
		t.Fatalf("converted base URL: %+v", op)
	}
	a, _ := c.Action("local_updatePetWithForm")
	assertJSON(t, a.InputSchema, `{
		"type": "object", "additionalProperties": false, "required": ["petId"],
		"properties": {
			"petId": {"type": "integer", "format": "int64", "description": "ID of pet that needs to be updated"},
			"body": {"type": "object", "description": "Request body (application/x-www-form-urlencoded).", "properties": {
				"name": {"type": "string", "description": "Updated name of the pet"},
				"status": {"type": "string", "description": "Updated status of the pet"}}}
		}
	}`)
	res, err := c.Call(context.Background(), "local_updatePetWithForm", json.RawMessage(`{"petId": 7, "body": {"name": "Rex", "status": "sold"}}`))
	if err != nil {
		t.Fatal(err)
	}
	var e echo
	_ = json.Unmarshal(res, &e)
	if e.Method != "POST" || e.Path != "/api/v1/pet/7" || e.ContentType != "application/x-www-form-urlencoded" || e.Body != "name=Rex&status=sold" {
		t.Fatalf("form call %+v", e)
	}
	res, err = c.Call(context.Background(), "local_deletePet", json.RawMessage(`{"petId": 7, "api_key": "k"}`))
	if err != nil {
		t.Fatal(err)
	}
	_ = json.Unmarshal(res, &e)
	if e.Method != "DELETE" || e.Path != "/api/v1/pet/7" {
		t.Fatalf("delete call %+v", e)
	}
}
