package caddymodules

import (
	"encoding/json"
	"testing"
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
