package caddymodules

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestSignInRefusesAnotherIssuersDiscovery: in transparent mode the
// connections page signs its users in at the identity provider found by
// discovery. A discovery document whose issuer is not provider_url
// (OpenID Connect Discovery 1.0 section 4.3, RFC 8414 section 3.3) is not
// the provider's own: the sign-in is refused with ISSUER_MISMATCH (502,
// logged), the browser is not sent to the authorization endpoint it names,
// and the refusal is not cached. Before, the browser was sent there (303)
// and the code, with the client secret, would have gone to its token
// endpoint. A trailing slash on either side is no difference.
func TestSignInRefusesAnotherIssuersDiscovery(t *testing.T) {
	var mu sync.Mutex
	issuer := "" // what the discovery document names
	var idp *httptest.Server
	idp = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/.well-known/openid-configuration" {
			http.NotFound(w, r)
			return
		}
		mu.Lock()
		iss := issuer
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"issuer": iss, "authorization_endpoint": idp.URL + "/authorize",
			"token_endpoint": idp.URL + "/token", "jwks_uri": idp.URL + "/jwks"})
	}))
	defer idp.Close()
	spec := httptest.NewServer(http.FileServer(http.Dir("testdata/demo")))
	defer spec.Close()
	k := make([]byte, 32)
	_, _ = rand.Read(k)
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	logPath := filepath.Join(t.TempDir(), "caddy.log")
	startCaddyfile(t, fmt.Sprintf(`{
	admin off
	persist_config off
	log {
		output file %[5]s
	}
	codemode {
		broker {
			openapi demo %[1]s/openapi.json {
				credential user {
					query key
					api_key Paste any key
				}
			}
		}
		auth {
			development
			mode transparent
			provider_url %[2]s/
			expected_audience %[3]s/mcp
			client_id gateway
			client_secret gateway-idp-secret
		}
		credentials {
			key %[4]s
		}
	}
}

%[3]s {
	bind 127.0.0.1
	codemode_connections
}
`, spec.URL, idp.URL, base, base64.StdEncoding.EncodeToString(k), logPath))

	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	open := func() (int, string, string) {
		t.Helper()
		resp, err := noRedirect.Get(base + "/connections")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Location"), string(b)
	}
	for _, other := range []string{"https://login.example.com", idp.URL + "/realms/other", strings.Replace(idp.URL, "http:", "https:", 1), ""} {
		mu.Lock()
		issuer = other
		mu.Unlock()
		status, location, page := open()
		if status != http.StatusBadGateway || location != "" || !strings.Contains(page, `<code id="code">ISSUER_MISMATCH</code>`) {
			t.Fatalf("discovery naming issuer %q: %d %q\n%.1000s", other, status, location, page)
		}
	}
	logs, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(logs), `"code":"ISSUER_MISMATCH"`) || !strings.Contains(string(logs), `https://login.example.com`) {
		t.Fatalf("the refusal is not logged with its code and the issuer named:\n%s", logs)
	}
	// provider_url has a trailing slash, the document names the issuer
	// with one too (with none, as before, is the same). The refusals were
	// not cached.
	mu.Lock()
	issuer = idp.URL + "/"
	mu.Unlock()
	if status, location, page := open(); status != http.StatusSeeOther || !strings.HasPrefix(location, idp.URL+"/authorize?") {
		t.Fatalf("discovery naming issuer %q: %d %q\n%.1000s", idp.URL+"/", status, location, page)
	}
}
