package oauth

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestMetadataURL(t *testing.T) {
	cases := map[string]string{
		"https://h.example/mcp":       "https://h.example/.well-known/oauth-protected-resource/mcp",
		"https://h.example/":          "https://h.example/.well-known/oauth-protected-resource",
		"https://h.example":           "https://h.example/.well-known/oauth-protected-resource",
		"http://127.0.0.1:8080/a/b/":  "http://127.0.0.1:8080/.well-known/oauth-protected-resource/a/b",
		"https://h.example:8443/x?y=": "https://h.example:8443/.well-known/oauth-protected-resource/x",
	}
	for in, want := range cases {
		if got := MetadataURL(in); got != want {
			t.Errorf("MetadataURL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestResourceMetadataValidate(t *testing.T) {
	good := ResourceMetadata{Resource: "https://h.example/mcp", AuthorizationServers: []string{"https://h.example"}}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, m := range []ResourceMetadata{
		{},
		{Resource: "/mcp"},
		{Resource: "https://h.example/mcp#frag"},
		{Resource: "https://h.example/mcp", AuthorizationServers: []string{"not a url"}},
	} {
		if err := m.Validate(); err == nil {
			t.Errorf("%+v accepted", m)
		}
	}
}

func TestMetadataHandler(t *testing.T) {
	srv := httptest.NewServer(MetadataHandler(
		ResourceMetadata{Resource: "https://h.example/mcp", AuthorizationServers: []string{"https://h.example"}, ScopesSupported: []string{"mcp:tools"}},
		ResourceMetadata{Resource: "https://h.example/api", AuthorizationServers: []string{"https://idp.example"}},
	))
	defer srv.Close()
	get := func(path string) (*http.Response, ResourceMetadata) {
		t.Helper()
		resp, err := srv.Client().Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m ResourceMetadata
		if resp.StatusCode == 200 {
			if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
				t.Fatal(err)
			}
		}
		return resp, m
	}
	resp, m := get("/.well-known/oauth-protected-resource/mcp")
	if resp.StatusCode != 200 || m.Resource != "https://h.example/mcp" || m.BearerMethodsSupported[0] != "header" ||
		m.AuthorizationServers[0] != "https://h.example" || m.ScopesSupported[0] != "mcp:tools" {
		t.Fatalf("mcp: %d %+v", resp.StatusCode, m)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("content type %q", ct)
	}
	if _, m := get("/.well-known/oauth-protected-resource"); m.Resource != "https://h.example/mcp" {
		t.Fatalf("bare path: %+v", m)
	}
	if _, m := get("/.well-known/oauth-protected-resource/api"); m.AuthorizationServers[0] != "https://idp.example" {
		t.Fatalf("api: %+v", m)
	}
	if resp, _ := get("/.well-known/oauth-protected-resource/nope"); resp.StatusCode != 404 {
		t.Fatalf("unknown: %d", resp.StatusCode)
	}
	r, err := srv.Client().Post(srv.URL+"/.well-known/oauth-protected-resource", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST: %d", r.StatusCode)
	}
}

func TestBearerChallenge(t *testing.T) {
	md := "https://h.example/.well-known/oauth-protected-resource/mcp"
	cases := []struct {
		err   error
		scope string
		want  string
	}{
		{nil, "", `Bearer resource_metadata="` + md + `"`},
		{&TokenError{Reason: ReasonMissing}, "", `Bearer resource_metadata="` + md + `"`},
		{&TokenError{Reason: ReasonExpired}, "", `Bearer resource_metadata="` + md + `", error="invalid_token", error_description="expired"`},
		{errors.New("boom"), "mcp:tools", `Bearer resource_metadata="` + md + `", error="invalid_token", scope="mcp:tools"`},
	}
	for _, tc := range cases {
		if got := BearerChallenge(md, tc.err, tc.scope); got != tc.want {
			t.Errorf("got  %s\nwant %s", got, tc.want)
		}
	}
	if got := BearerChallenge("", nil, ""); got != "Bearer" {
		t.Errorf("bare: %q", got)
	}
}

func TestBearerToken(t *testing.T) {
	cases := map[string]string{
		"Bearer abc":   "abc",
		"bearer  abc ": "abc",
		"Basic abc":    "",
		"Bearer":       "",
		"":             "",
	}
	for h, want := range cases {
		r := httptest.NewRequest("GET", "/", nil)
		if h != "" {
			r.Header.Set("Authorization", h)
		}
		if got := BearerToken(r); got != want {
			t.Errorf("%q: got %q want %q", h, got, want)
		}
	}
}
