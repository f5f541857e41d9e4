package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestCallMapsEveryParameterLocation(t *testing.T) {
	c, _ := startShop(t, nil)
	cases := []struct {
		name   string
		action string
		input  string
		want   echo
	}{
		{
			name:   "query scalar, exploded array, header, deepObject; credentials added",
			action: "shop_listPets_2",
			input:  `{"limit": 5, "tags": ["a b", "c&d"], "X-Request-Id": "r-1", "filter": {"color": "red", "age": 3}}`,
			want: echo{Method: "GET", Path: "/api/v1/pets", Query: "limit=5&tags=a+b&tags=c%26d&filter%5Bage%5D=3&filter%5Bcolor%5D=red",
				RequestID: "r-1", Auth: "Bearer s3cret", APIKey: "k1"},
		},
		{
			name:   "no input at all",
			action: "shop_listPets_2",
			input:  ``,
			want:   echo{Method: "GET", Path: "/api/v1/pets", Auth: "Bearer s3cret", APIKey: "k1"},
		},
		{
			name:   "null fields are absent",
			action: "shop_listPets_2",
			input:  `{"limit": null, "tags": ["solo"]}`,
			want:   echo{Method: "GET", Path: "/api/v1/pets", Query: "tags=solo", Auth: "Bearer s3cret", APIKey: "k1"},
		},
		{
			name:   "path value escaped, form array not exploded",
			action: "shop_pets_get_by_id",
			input:  `{"petId": "a/b c?", "fields": ["id", "name"]}`,
			want:   echo{Method: "GET", Path: "/api/v1/pets/a%2Fb%20c%3F", Query: "fields=id,name", Auth: "Bearer s3cret", APIKey: "k1"},
		},
		{
			name:   "JSON body sent as given",
			action: "shop_createPet",
			input:  `{"body": {"name": "Rex", "tags": ["dog"], "big": 12345678901234567890}}`,
			want: echo{Method: "POST", Path: "/api/v1/pets", Auth: "Bearer s3cret", APIKey: "k1",
				ContentType: "application/json", Body: `{"name": "Rex", "tags": ["dog"], "big": 12345678901234567890}`},
		},
		{
			name:   "form-encoded body",
			action: "shop_updatePet",
			input:  `{"petId": "p1", "body": {"name": "Rex & co"}}`,
			want: echo{Method: "PUT", Path: "/api/v1/pets/p1", Auth: "Bearer s3cret", APIKey: "k1",
				ContentType: "application/x-www-form-urlencoded", Body: "name=Rex+%26+co"},
		},
		{
			name:   "cookie, array header, JSON-content query",
			action: "shop_whoAmI",
			input:  `{"session_id": "s 1", "X-Tags": ["x", "y"], "where": {"a": [1, 2]}}`,
			want: echo{Method: "GET", Path: "/api/v1/session", Query: "where=%7B%22a%22%3A%5B1%2C2%5D%7D", XTags: "x,y",
				Cookie: "session_id=s+1", Auth: "Bearer s3cret", APIKey: "k1"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := c.Call(context.Background(), tc.action, json.RawMessage(tc.input))
			if err != nil {
				t.Fatal(err)
			}
			var got echo
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatalf("%s: %v", out, err)
			}
			if got != tc.want {
				t.Fatalf("\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestCallResponses(t *testing.T) {
	c, _ := startShop(t, nil)
	ctx := context.Background()

	out, err := c.Call(ctx, "shop_getPhoto", json.RawMessage(`{"petId": "p1", "size": "small"}`))
	if err != nil {
		t.Fatal(err)
	}
	assertJSON(t, out, `{"status": 200, "contentType": "image/png", "base64": "iVBOR/8A"}`)

	out, err = c.Call(ctx, "shop_createNote", json.RawMessage(`{"body": "buy milk", "body_query": "q"}`))
	if err != nil {
		t.Fatal(err)
	}
	assertJSON(t, out, `{"status": 200, "contentType": "text/plain; charset=utf-8", "text": "stored: buy milk"}`)

	out, err = c.Call(ctx, "shop_delete_pets_by_petId", json.RawMessage(`{"petId": "gone"}`))
	if err != nil || string(out) != "null" {
		t.Fatalf("204: %s, %v", out, err)
	}

	// A same-host redirect is followed.
	out, err = c.Call(ctx, "shop_pets_get_by_id", json.RawMessage(`{"petId": "here"}`))
	if err != nil || !strings.Contains(string(out), `"/api/v1/pets/moved"`) {
		t.Fatalf("redirect: %s, %v", out, err)
	}
}

func TestCallErrors(t *testing.T) {
	c, up := startShop(t, func(s *Source) { s.MaxResponseBytes = 32 << 10; s.Timeout = 200 * time.Millisecond })
	cases := []struct {
		name    string
		action  string
		input   string
		code    string
		message string
	}{
		{"unknown action", "shop_nope", `{}`, CodeToolNotFound, `no catalog action named "shop_nope"`},
		{"not an object", "shop_listPets_2", `[1]`, CodeValidationError, "input must be a JSON object"},
		{"invalid JSON", "shop_listPets_2", `{"limit":`, CodeValidationError, "input is not valid JSON"},
		{"missing path parameter", "shop_pets_get_by_id", `{}`, CodeValidationError, `missing required property: petId`},
		{"missing cookie", "shop_whoAmI", `{}`, CodeValidationError, `missing required property: session_id`},
		{"missing body", "shop_createPet", `{}`, CodeValidationError, `missing required property: body`},
		{"unknown field", "shop_listPets_2", `{"limt": 3}`, CodeValidationError, `unknown property: limt (shop_listPets_2 takes: X-Request-Id, filter, limit, tags)`},
		{"number for a string", "shop_pets_get_by_id", `{"petId": 42}`, CodeValidationError, `petId: got number, want string`},
		{"array for scalar", "shop_listPets_2", `{"limit": [1, 2]}`, CodeValidationError, `limit: got array, want integer`},
		{"object for array", "shop_listPets_2", `{"tags": {"a": 1}}`, CodeValidationError, `tags: got object, want array`},
		{"nested array item", "shop_listPets_2", `{"tags": [[1]]}`, CodeValidationError, `tags.0: got array, want string`},
		{"dot-dot path value", "shop_pets_get_by_id", `{"petId": ".."}`, CodeValidationError, `path segment ".."`},
		{"dot path value", "shop_pets_get_by_id", `{"petId": "."}`, CodeValidationError, `path segment "."`},
		{"header line break", "shop_listPets_2", `{"X-Request-Id": "a\r\nX-Evil: 1"}`, CodeValidationError, "cannot contain line breaks"},
		{"header NUL", "shop_listPets_2", `{"X-Request-Id": "a\u0000b"}`, CodeValidationError, `field "X-Request-Id": a header value cannot contain control characters (U+0000 at byte 1)`},
		{"header DEL", "shop_listPets_2", `{"X-Request-Id": "ab\u007f"}`, CodeValidationError, "cannot contain control characters (U+007F at byte 2)"},
		{"header escape", "shop_listPets_2", `{"X-Request-Id": "\u001b[31m"}`, CodeValidationError, "cannot contain control characters (U+001B at byte 0)"},
		{"text body not a string", "shop_createNote", `{"body": {"a": 1}}`, CodeValidationError, `body: got object, want string`},
		{"form body not an object", "shop_updatePet", `{"petId": "p", "body": "x"}`, CodeValidationError, `body: got string, want object`},
		{"upstream 404", "shop_pets_get_by_id", `{"petId": "missing"}`, CodeUpstreamError, "GET /pets/{petId} answered 404 Not Found"},
		{"upstream 502 html", "shop_pets_get_by_id", `{"petId": "broken"}`, CodeUpstreamError, "answered 502 Bad Gateway"},
		{"too large", "shop_pets_get_by_id", `{"petId": "huge"}`, CodeResponseTooLarge, "exceeds the limit of 32768 bytes"},
		{"timeout", "shop_pets_get_by_id", `{"petId": "slow"}`, CodeTimeout, "timed out"},
		{"cross-host redirect", "shop_pets_get_by_id", `{"petId": "away"}`, CodeUpstreamUnreachable, "redirect to another host (127.0.0.2:1) refused"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := c.Call(context.Background(), tc.action, json.RawMessage(tc.input))
			if err == nil {
				t.Fatalf("no error, got %s", out)
			}
			var e *Error
			if !errors.As(err, &e) || e.Code != tc.code || !strings.Contains(e.Message, tc.message) {
				t.Fatalf("err = %v, want %s containing %q", err, tc.code, tc.message)
			}
		})
	}

	_, err := c.Call(context.Background(), "shop_pets_get_by_id", json.RawMessage(`{"petId": "missing"}`))
	var e *Error
	errors.As(err, &e)
	if e.Status != 404 || string(e.Body) != `{"error":"no such pet"}` {
		t.Fatalf("404 error: status %d body %s", e.Status, e.Body)
	}
	_, err = c.Call(context.Background(), "shop_pets_get_by_id", json.RawMessage(`{"petId": "broken"}`))
	errors.As(err, &e)
	if e.Status != 502 || string(e.Body) != `"<html>bad gateway</html>"` {
		t.Fatalf("502 error: status %d body %s", e.Status, e.Body)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Call(ctx, "shop_listPets_2", nil); ErrorCode(err) != CodeCanceled {
		t.Fatalf("canceled: %v", err)
	}

	up.srv.Close()
	if _, err := c.Call(context.Background(), "shop_listPets_2", nil); ErrorCode(err) != CodeUpstreamUnreachable {
		t.Fatalf("closed server: %v", err)
	}
}

// TestPresenceChecksNameEveryField: for an input schema that did not
// compile, the catalog's own presence checks stand in for the validator and
// name every missing and unknown field in one line, as it does.
func TestPresenceChecksNameEveryField(t *testing.T) {
	c, _ := startShop(t, nil)
	op := c.snap.Load().ops["shop_updatePet"]
	if op == nil {
		t.Fatal("no shop_updatePet")
	}
	op.schemaOnce.Do(func() {}) // as if the schema had not compiled: no validator
	_, err := c.Call(context.Background(), "shop_updatePet", json.RawMessage(`{"zeta": 1, "alpha": 2}`))
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeValidationError {
		t.Fatalf("err = %v, want VALIDATION_ERROR", err)
	}
	want := "missing required properties: petId, body; unknown properties: alpha, zeta (shop_updatePet takes: "
	if !strings.HasPrefix(e.Message, want) || strings.Contains(e.Message, "\n") {
		t.Fatalf("message %q, want it to start with %q", e.Message, want)
	}
	if !slices.Equal(e.Fields, []string{"petId", "body", "alpha", "zeta"}) || e.Field != "petId" {
		t.Fatalf("fields %v (first %q)", e.Fields, e.Field)
	}
}

func TestParameterStyles(t *testing.T) {
	arr := value{kind: "array", list: []string{"a b", "c"}}
	obj := value{kind: "object", pairs: [][2]string{{"r", "1"}, {"g", "2"}}}
	paths := []struct {
		style   string
		explode bool
		v       value
		want    string
	}{
		{"simple", false, value{scalar: "x/y"}, "x%2Fy"},
		{"simple", false, arr, "a%20b,c"},
		{"simple", false, obj, "r,1,g,2"},
		{"simple", true, obj, "r=1,g=2"},
		{"label", false, arr, ".a%20b,c"},
		{"label", true, arr, ".a%20b.c"},
		{"matrix", false, value{scalar: "5"}, ";id=5"},
		{"matrix", false, arr, ";id=a%20b,c"},
		{"matrix", true, arr, ";id=a%20b;id=c"},
		{"matrix", true, obj, ";r=1;g=2"},
	}
	for _, tc := range paths {
		if got := pathValue(paramSpec{name: "id", style: tc.style, explode: tc.explode}, tc.v); got != tc.want {
			t.Errorf("path %s explode=%v %+v = %q, want %q", tc.style, tc.explode, tc.v, got, tc.want)
		}
	}
	queries := []struct {
		style   string
		explode bool
		v       value
		want    string
	}{
		{"form", true, arr, "q=a+b&q=c"},
		{"form", false, arr, "q=a+b,c"},
		{"spaceDelimited", false, arr, "q=a+b%20c"},
		{"pipeDelimited", false, arr, "q=a+b|c"},
		{"form", true, obj, "r=1&g=2"},
		{"form", false, obj, "q=r,1,g,2"},
		{"deepObject", true, obj, "q%5Br%5D=1&q%5Bg%5D=2"},
	}
	for _, tc := range queries {
		if got := strings.Join(queryPairs(paramSpec{name: "q", style: tc.style, explode: tc.explode}, tc.v), "&"); got != tc.want {
			t.Errorf("query %s explode=%v %+v = %q, want %q", tc.style, tc.explode, tc.v, got, tc.want)
		}
	}
}

// TestRedirectsKeepHostAndTLS: a redirect is followed only to the same host
// (port included) and never from https down to http, where the source's
// credentials (Authorization, API keys, cookies) would travel in clear
// text. The same host name on both schemes means default ports, which a
// test cannot bind, so the rule is checked on the requests themselves.
func TestRedirectsKeepHostAndTLS(t *testing.T) {
	check := sameHostRedirects(nil)
	req := func(raw string) *http.Request {
		r, err := http.NewRequest(http.MethodGet, raw, nil)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	for _, tc := range []struct {
		from, to, err string
	}{
		{"https://api.example.com/v1/a", "https://api.example.com/v1/b", ""},
		{"http://api.example.com/v1/a", "http://api.example.com/v1/b", ""},
		{"http://api.example.com/v1/a", "https://api.example.com/v1/b", ""},
		{"https://api.example.com/v1/a", "http://api.example.com/v1/b", "redirect from https to http refused"},
		{"https://api.example.com/v1/a", "https://api.example.com:8443/v1/b", "redirect to another host (api.example.com:8443) refused"},
		{"https://api.example.com/v1/a", "https://evil.example/v1/b", "redirect to another host (evil.example) refused"},
	} {
		err := check(req(tc.to), []*http.Request{req(tc.from)})
		if (err == nil) != (tc.err == "") || (err != nil && err.Error() != tc.err) {
			t.Errorf("%s -> %s: %v, want %q", tc.from, tc.to, err, tc.err)
		}
	}
}

// TestUnsendableParametersAreLeftOut: a parameter no request can carry (a
// header named "" or with a space, as public documents have, a cookie
// with a separator, a query parameter named "") is not an input field; the
// operation's other parameters work. Before, the header named "" failed
// every call of the operation with UPSTREAM_UNREACHABLE ("invalid header
// field name").
func TestUnsendableParametersAreLeftOut(t *testing.T) {
	var got http.Header
	var query string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, query = r.Header.Clone(), r.URL.RawQuery
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{}`))
	}))
	t.Cleanup(srv.Close)
	doc := `{"openapi":"3.0.3","info":{"title":"t","version":"1"},"servers":[{"url":"` + srv.URL + `"}],"paths":{"/pages/{id}":{"get":{
	 "operationId":"getPage","responses":{"200":{"description":"ok"}},"parameters":[
	  {"in":"path","name":"id","required":true,"schema":{"type":"string"}},
	  {"in":"header","name":"Notion-Version","schema":{"type":"string"}},
	  {"in":"header","name":"","schema":{"type":"string"}},
	  {"in":"header","name":"Bad Name","schema":{"type":"string"}},
	  {"in":"cookie","name":"a;b","schema":{"type":"string"}},
	  {"in":"query","name":"","schema":{"type":"string"}},
	  {"in":"query","name":"q","schema":{"type":"string"}}]}}}}`
	path := filepath.Join(t.TempDir(), "doc.json")
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := New([]Source{{Name: "t", SpecURL: path}}, &Options{PollInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	a, ok := c.Action("t_getPage")
	if !ok {
		t.Fatal("no action t_getPage")
	}
	var schema struct{ Properties map[string]any }
	if err := json.Unmarshal(a.InputSchema, &schema); err != nil {
		t.Fatal(err)
	}
	var props []string
	for p := range schema.Properties {
		props = append(props, p)
	}
	slices.Sort(props)
	if strings.Join(props, ",") != "Notion-Version,id,q" {
		t.Fatalf("input fields %v, want Notion-Version, id, q", props)
	}
	if _, err := c.Call(context.Background(), "t_getPage", json.RawMessage(`{"id":"p1","Notion-Version":"2022-06-28","q":"x"}`)); err != nil {
		t.Fatal(err)
	}
	if got.Get("Notion-Version") != "2022-06-28" || query != "q=x" {
		t.Fatalf("headers %v, query %q", got, query)
	}
}
