package credential

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestProtectedResourceMetadataLocations: an MCP server's RFC 9728 document
// is found where the MCP authorization spec says a client looks: the
// resource_metadata URL of the server's 401 first, then the path-based
// well-known URI, then the root one; a document naming another resource is
// passed over. Until the twenty-second pass only the path-based URI was
// read: the root and the 401's URL cases failed (the conformance suite's
// auth/metadata-var2 and auth/metadata-var3 through a gateway).
func TestProtectedResourceMetadataLocations(t *testing.T) {
	cases := []struct {
		name string
		// docs maps a path to the resource its document names ("" for
		// the server's own /mcp) and the authorization server it names.
		docs      map[string][2]string
		challenge string // the resource_metadata of the 401, "" for none
		want      string
		wantErr   bool
	}{
		{name: "path-based", docs: map[string][2]string{"/.well-known/oauth-protected-resource/mcp": {"", "https://as-path.example"}}, want: "https://as-path.example"},
		{name: "root only", docs: map[string][2]string{"/.well-known/oauth-protected-resource": {"", "https://as-root.example"}}, want: "https://as-root.example"},
		{name: "named by the 401, absolute", docs: map[string][2]string{"/custom/metadata/location.json": {"", "https://as-custom.example"}},
			challenge: "SELF/custom/metadata/location.json", want: "https://as-custom.example"},
		{name: "named by the 401, relative", docs: map[string][2]string{"/custom/metadata/location.json": {"", "https://as-custom.example"}},
			challenge: "/custom/metadata/location.json", want: "https://as-custom.example"},
		{name: "the 401's before the well-known ones", docs: map[string][2]string{
			"/custom.json": {"", "https://as-custom.example"}, "/.well-known/oauth-protected-resource/mcp": {"", "https://as-path.example"}},
			challenge: "/custom.json", want: "https://as-custom.example"},
		{name: "a root document of another resource is passed over", docs: map[string][2]string{
			"/.well-known/oauth-protected-resource":     {"https://other.example/mcp", "https://as-trap.example"},
			"/.well-known/oauth-protected-resource/mcp": {"", "https://as-path.example"}}, want: "https://as-path.example"},
		{name: "only another resource's document", docs: map[string][2]string{
			"/.well-known/oauth-protected-resource": {"https://other.example/mcp", "https://as-trap.example"}}, wantErr: true},
		{name: "none", docs: map[string][2]string{}, wantErr: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var srv *httptest.Server
			srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/mcp" {
					if c.challenge != "" {
						w.Header().Set("WWW-Authenticate", `Bearer resource_metadata="`+strings.Replace(c.challenge, "SELF", srv.URL, 1)+`"`)
					}
					w.WriteHeader(http.StatusUnauthorized)
					return
				}
				d, ok := c.docs[r.URL.Path]
				if !ok || r.Method != http.MethodGet {
					http.NotFound(w, r)
					return
				}
				resource := d[0]
				if resource == "" {
					resource = srv.URL + "/mcp"
				}
				_ = json.NewEncoder(w).Encode(map[string]any{"resource": resource, "authorization_servers": []string{d[1]}})
			}))
			defer srv.Close()
			prm, err := (&Manager{}).protectedResourceAS(context.Background(), srv.Client(), srv.URL+"/mcp", "conf")
			got := prm.AuthorizationServer
			if c.wantErr {
				if err == nil {
					t.Fatalf("found %q, want an error", got)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("got %q, %v; want %q", got, err, c.want)
			}
		})
	}
}

// TestDiscoveryWithoutResourceMetadata: an MCP server of the 2025-03-26
// revision, which publishes no RFC 9728 document, has its origin as its
// authorization server (the conformance suite's
// auth/2025-03-26-oauth-metadata-backcompat); a server whose document is
// found but names another resource is refused, not passed over so.
func TestDiscoveryWithoutResourceMetadata(t *testing.T) {
	for _, otherResource := range []bool{false, true} {
		var srv *httptest.Server
		srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/mcp":
				w.WriteHeader(http.StatusUnauthorized)
			case "/.well-known/oauth-authorization-server":
				_ = json.NewEncoder(w).Encode(map[string]any{"issuer": srv.URL, "authorization_endpoint": srv.URL + "/oauth/authorize",
					"token_endpoint": srv.URL + "/oauth/token", "registration_endpoint": srv.URL + "/oauth/register"})
			case "/.well-known/oauth-protected-resource":
				if otherResource {
					_ = json.NewEncoder(w).Encode(map[string]any{"resource": "https://other.example/mcp", "authorization_servers": []string{srv.URL}})
					return
				}
				http.NotFound(w, r)
			default:
				http.NotFound(w, r)
			}
		}))
		defer srv.Close()
		m, err := NewManager([]Spec{{Service: "conf", Mode: ModeUser, Kind: KindOAuth, Resource: srv.URL + "/mcp", OAuth: &OAuthClient{}}},
			&Options{Store: NewMemoryStore(nil), Keys: keyring(t, newKey(t))})
		if err != nil {
			t.Fatal(err)
		}
		meta, err := m.endpoints(context.Background(), m.specs["conf"])
		if otherResource {
			if err == nil {
				t.Fatalf("another resource's document passed over: %+v", meta)
			}
			continue
		}
		if err != nil || meta.Issuer != srv.URL || meta.TokenEndpoint != srv.URL+"/oauth/token" || meta.RegistrationEndpoint != srv.URL+"/oauth/register" {
			t.Fatalf("got %+v, %v", meta, err)
		}
	}
}
