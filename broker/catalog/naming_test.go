package catalog

import (
	"strings"
	"testing"
)

func TestOperationNames(t *testing.T) {
	cases := []struct {
		operationID, method, path string
		want                      string
	}{
		{"getUser", "GET", "/users/{id}", "getUser"},                               // camelCase kept
		{"repos/get-content", "GET", "/x", "repos_get_content"},                    // separators become _
		{"GET_api_keys-api_key_id", "GET", "/x", "GET_api_keys_api_key_id"},        // case kept
		{"  weird..name!!  ", "GET", "/x", "weird_name"},                           // runs collapse, ends trimmed
		{"a__b", "GET", "/x", "a_b"},                                               // underscores collapse too
		{"über-größe", "GET", "/x", "ber_gr_e"},                                    // non-ASCII is a separator
		{"", "GET", "/users/{id}/posts", "get_users_by_id_posts"},                  // fallback
		{"", "DELETE", "/pets/{petId}", "delete_pets_by_petId"},                    // fallback keeps case of segments
		{"", "GET", "/", "get"},                                                    // root
		{"", "POST", "/v1/files:upload", "post_v1_files_upload"},                   // unsafe segment chars
		{"!!!", "PUT", "/things/{thing-id}/parts", "put_things_by_thing_id_parts"}, // unusable operationId
	}
	for _, tc := range cases {
		if got := operationName(tc.operationID, tc.method, tc.path); got != tc.want {
			t.Errorf("operationName(%q, %s %s) = %q, want %q", tc.operationID, tc.method, tc.path, got, tc.want)
		}
	}
}

func TestActionNameLengthAndCollisions(t *testing.T) {
	long1 := actionName("svc", strings.Repeat("a", 80)+"One")
	long2 := actionName("svc", strings.Repeat("a", 80)+"Two")
	if len(long1) != MaxNameLength || len(long2) != MaxNameLength || long1 == long2 {
		t.Fatalf("long names %q (%d), %q (%d)", long1, len(long1), long2, len(long2))
	}
	if long1 != actionName("svc", strings.Repeat("a", 80)+"One") {
		t.Fatal("long name not deterministic")
	}
	if got := actionName("svc", "short"); got != "svc_short" {
		t.Fatalf("short name %q", got)
	}

	taken := map[string]bool{}
	got := []string{uniqueName("s_x", taken), uniqueName("s_x", taken), uniqueName("s_x", taken), uniqueName("s_x_2", taken)}
	want := []string{"s_x", "s_x_2", "s_x_3", "s_x_2_2"}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("uniqueName sequence %v, want %v", got, want)
		}
	}
	full := strings.Repeat("b", MaxNameLength)
	taken = map[string]bool{full: true}
	if n := uniqueName(full, taken); len(n) != MaxNameLength || !strings.HasSuffix(n, "_2") {
		t.Fatalf("suffix on a full-length name: %q", n)
	}
}

func TestFallbackNameNeverDisplacesAnOperationID(t *testing.T) {
	doc := []byte(`{"openapi": "3.0.0", "info": {"title": "t", "version": "1"}, "paths": {
		"/a": {"get": {"responses": {"200": {"description": "no operationId"}}}},
		"/b": {"get": {"operationId": "get_a", "responses": {"200": {"description": "ok"}}}}}}`)
	ops := testOperations(t, doc)
	got := map[string]string{}
	for _, op := range ops {
		got[op.action.Path] = op.action.Name
	}
	if got["/b"] != "t_get_a" || got["/a"] != "t_get_a_2" {
		t.Fatalf("names %v", got)
	}
	if ops[0].baseURL != "https://example.test" {
		t.Fatalf("no servers: base URL %q, want the spec's origin", ops[0].baseURL)
	}
}

// TestFullNameOfCutName: an action whose operationId is cut at
// MaxNameLength keeps its full name for tool indexes; one that fits, or
// whose name the catalog made of its method and path (the path holds what
// a cut lost), has none.
func TestFullNameOfCutName(t *testing.T) {
	long := "classroom.courses.courseWork.studentSubmissions.modifyAttachments"
	doc := []byte(`{"openapi": "3.0.0", "info": {"title": "t", "version": "1"}, "paths": {
		"/a": {"post": {"operationId": "` + long + `", "responses": {"200": {"description": "ok"}}}},
		"/b": {"get": {"operationId": "short", "responses": {"200": {"description": "ok"}}}},
		"/c/{aVeryLongParameterName}/d/{anotherVeryLongParameterName}/e": {"get": {"responses": {"200": {"description": "ok"}}}}}}`)
	ops := testOperations(t, doc)
	got := map[string]string{}
	for _, op := range ops {
		got[op.action.Path] = op.action.FullName
		if len(op.action.Name) > MaxNameLength {
			t.Errorf("%s: name %q longer than %d", op.action.Path, op.action.Name, MaxNameLength)
		}
	}
	if want := "t_" + sanitize(long); got["/a"] != want {
		t.Errorf("full name of the cut name %q, want %q", got["/a"], want)
	}
	if got["/b"] != "" || got["/c/{aVeryLongParameterName}/d/{anotherVeryLongParameterName}/e"] != "" {
		t.Errorf("full names of names not cut or made of the path: %v", got)
	}
}

// testOperations builds the operations of doc as the source "t" would.
func testOperations(t *testing.T, doc []byte) []*operation {
	t.Helper()
	s, err := newSourceState(Source{Name: "t", SpecURL: "https://example.test/openapi.json"})
	if err != nil {
		t.Fatal(err)
	}
	ops, err := buildOperations(s, doc)
	if err != nil {
		t.Fatal(err)
	}
	return ops
}
