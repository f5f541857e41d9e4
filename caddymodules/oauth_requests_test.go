package caddymodules

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestOAuthEndpointHygiene: the authorization server's endpoints refuse an
// oversized body with 413 (also when chunked, with no Content-Length), a
// write method on a metadata document or the key set with 405 and Allow,
// a body or form value that is not UTF-8 with 400 and a body declared in
// another charset with 415, each as an OAuth JSON error; the documents still answer GET.
func TestOAuthEndpointHygiene(t *testing.T) {
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	startCaddy(t, caddyConfig(port, map[string]any{
		"development": true, "issuer": base, "dcr_enabled": true,
		"clients": []any{map[string]any{"id": "cli", "redirect_uris": []string{"http://127.0.0.1:1/cb"}}},
	}, standardRoutes(nil)))
	big := strings.Repeat("a", 1<<20)
	for _, tc := range []struct {
		name, method, path, ctype string
		body                      io.Reader
		status                    int
		code                      string
	}{
		{"register over the limit", "POST", "/oauth/register", "application/json", strings.NewReader(`{"x":"` + big + `"}`), 413, "invalid_request"},
		{"token over the limit, chunked", "POST", "/oauth/token", "application/x-www-form-urlencoded", io.MultiReader(strings.NewReader("code=" + big)), 413, "invalid_request"},
		{"POST on the key set", "POST", "/.well-known/jwks.json", "", nil, 405, "invalid_request"},
		{"DELETE on the metadata", "DELETE", "/.well-known/oauth-authorization-server", "", nil, 405, "invalid_request"},
		{"registration not UTF-8", "POST", "/oauth/register", "application/json",
			strings.NewReader("{\"redirect_uris\":[\"http://127.0.0.1:9/cb\"],\"client_name\":\"bad\xff\xfe\"}"), 400, "invalid_client_metadata"},
		// Read as UTF-8 whatever the charset said: now refused, 415.
		{"registration in UTF-16", "POST", "/oauth/register", "application/json; charset=utf-16",
			strings.NewReader(`{"redirect_uris":["http://127.0.0.1:9/cb"]}`), 415, "invalid_client_metadata"},
		// A form is percent-encoded ASCII whatever charset it declares
		// (Apache HttpClient declares ISO-8859-1 by default): it reaches
		// the endpoint, and its decoded values are held to UTF-8.
		{"token form in Latin-1", "POST", "/oauth/token", "application/x-www-form-urlencoded; charset=iso-8859-1", strings.NewReader("grant_type=urn:example:none"), 400, "unsupported_grant_type"},
		{"token form in Latin-1, value not UTF-8", "POST", "/oauth/token", "application/x-www-form-urlencoded; charset=iso-8859-1", strings.NewReader("grant_type=authorization_code&code=%E9"), 400, "invalid_request"},
		{"form value not UTF-8", "POST", "/oauth/token", "application/x-www-form-urlencoded", strings.NewReader("grant_type=authorization_code&code=%FF%FE"), 400, "invalid_request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, base+tc.path, tc.body)
			if tc.ctype != "" {
				req.Header.Set("Content-Type", tc.ctype)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status || !strings.Contains(string(b), `"error":"`+tc.code+`"`) {
				t.Fatalf("%d %s", resp.StatusCode, b)
			}
			if tc.status == 405 && resp.Header.Get("Allow") == "" {
				t.Error("405 without Allow")
			}
		})
	}
	for _, p := range []string{"/.well-known/jwks.json", "/.well-known/oauth-authorization-server"} {
		if resp, body := get(t, base+p, ""); resp.StatusCode != 200 || !strings.HasPrefix(body, "{") {
			t.Fatalf("GET %s: %d %s", p, resp.StatusCode, body)
		}
	}
}
