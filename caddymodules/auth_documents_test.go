package caddymodules

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestStdioConfigKeepsThePKIApp: codemode-mcp-stdio runs the codemode app
// alone, but the auth block may trust a CA of the pki app
// (client_id_metadata { trust_pool pki_root local }), which must come
// along; the HTTP servers must not.
func TestStdioConfigKeepsThePKIApp(t *testing.T) {
	full := `{"admin":{"listen":"localhost:2019"},"apps":{"codemode":{"auth":{}},"pki":{"certificate_authorities":{"local":{"install_trust":false}}},"http":{"servers":{}},"tls":{}}}`
	out, err := codemodeOnlyConfig([]byte(full))
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Apps map[string]json.RawMessage `json:"apps"`
	}
	if err := json.Unmarshal(out, &cfg); err != nil {
		t.Fatal(err)
	}
	if _, ok := cfg.Apps["pki"]; !ok || len(cfg.Apps) != 2 || cfg.Apps["http"] != nil || cfg.Apps["tls"] != nil {
		t.Fatalf("apps kept: %s", out)
	}
}

// TestCaddyClientIDMetadataTrustPool: the auth block's client_id_metadata
// trusts Caddy's internal CA through `trust_pool pki_root local`, so a
// metadata document served by a `tls internal` site of the same Caddy is
// fetched and its client may start an authorization; a document's client
// from an address nobody allowed is refused.
func TestCaddyClientIDMetadataTrustPool(t *testing.T) {
	as, docs := freePort(t), freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", as)
	docBase := fmt.Sprintf("https://localhost:%d", docs)
	src := fmt.Sprintf(`{
	admin off
	persist_config off
	skip_install_trust
	auto_https disable_redirects
	storage file_system %[3]s
	codemode {
		auth {
			development
			issuer %[1]s
			client_id_metadata {
				allow_private_host localhost
				trust_pool pki_root local
			}
		}
	}
}

%[1]s {
	bind 127.0.0.1
	codemode_oauth
	respond "public"
}

%[2]s {
	bind 127.0.0.1
	tls internal
	header Content-Type application/json
	respond /client.json `+"`"+`{"client_id": "%[2]s/client.json", "client_name": "Doc", "redirect_uris": ["http://127.0.0.1:3000/cb"]}`+"`"+` 200
}
`, base, docBase, t.TempDir())
	startCaddyfile(t, src)
	authorize := func(clientID string) (int, string) {
		q := url.Values{"response_type": {"code"}, "client_id": {clientID}, "redirect_uri": {"http://127.0.0.1:49999/cb"},
			"state": {"s"}, "code_challenge": {"E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"}, "code_challenge_method": {"S256"}}
		c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := c.Get(base + "/oauth/authorize?" + q.Encode())
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Location") + string(b)
	}
	// The internal CA issues the site's certificate in the background; a
	// refused fetch is remembered for DocumentErrorTTL, so wait for the
	// site before the first authorization.
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
	defer tr.CloseIdleConnections()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := (&http.Client{Transport: tr}).Get(docBase + "/client.json")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the tls internal site never answered: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if code, out := authorize(docBase + "/client.json"); code != http.StatusFound || !strings.Contains(out, "/oauth/login") {
		t.Fatalf("a document of the internal CA's site: %d %s", code, out)
	}
	private := strings.Replace(docBase, "localhost", "127.0.0.1", 1) + "/client.json"
	if code, out := authorize(private); code != http.StatusBadRequest || !strings.Contains(out, "private") {
		t.Fatalf("a document from an address nobody allowed: %d %s", code, out)
	}
}
