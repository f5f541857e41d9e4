package oauth

import (
	"net/http"
	"strings"
	"testing"
)

// TestFormsOfManyFieldsRefused: the authorization server's form bodies
// are bounded in bytes (16 KiB for authorize, 64 KiB for token and
// revoke), and within those Go's form parser takes at most 10,000 fields
// (net/url's urlmaxqueryparams): a token or revocation body of 20,000
// fields, or an authorize body over 16 KiB, is invalid_request. Forms of
// 5,000 and 9,000 fields are read (linear in their bytes) and answered as
// their fields say. The server then issues tokens.
func TestFormsOfManyFieldsRefused(t *testing.T) {
	e := newAS(t, nil)
	many := func(n int, name string) string { return strings.Repeat(name+"=&", n-1) + name + "=" }
	post := func(path, contentType, b string) (int, string) {
		t.Helper()
		resp, err := e.http.Post(e.srv.URL+path, contentType, strings.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, body(t, resp)
	}
	const form = "application/x-www-form-urlencoded"
	for _, tc := range []struct {
		name, path, contentType, body, want string
	}{
		{"token, 20,000 fields", "/oauth/token", form, many(20_000, "a"), `"error":"invalid_request"`},
		{"revoke, 20,000 fields", "/oauth/revoke", form, many(20_000, "a"), `"error":"invalid_request"`},
		{"token, 9,000 resources", "/oauth/token", form, "grant_type=authorization_code&" + many(9_000, "resource"), `"error":"invalid_`},
		{"authorize, 5,000 fields in 15 KB", "/oauth/authorize", form, many(5_000, "a"), `"error":"invalid_client"`},
		{"authorize, 6,000 fields in 18 KB", "/oauth/authorize", form, many(6_000, "a"), `"error":"invalid_request"`},
	} {
		status, got := post(tc.path, tc.contentType, tc.body)
		if status != http.StatusBadRequest || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %d %s, want 400 %s", tc.name, status, got, tc.want)
		}
	}
	cfg := e.oauth2(asClientID, asRedirect)
	if tok := e.token(cfg); tok.AccessToken == "" {
		t.Fatal("no token after the refusals")
	}
}
