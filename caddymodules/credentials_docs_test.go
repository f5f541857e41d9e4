package caddymodules

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/codemode-gateway/caddy-codemode/credential"
	"github.com/codemode-gateway/caddy-codemode/guard/redistest"
	"github.com/codemode-gateway/caddy-codemode/internal/identity"
)

// docsCaddyfile returns the first caddyfile block after heading in a page
// of docs/.
func docsCaddyfile(t *testing.T, page, heading string) string {
	t.Helper()
	_, rest, ok := strings.Cut(docsAfter(t, page, heading), "```caddyfile\n")
	if !ok {
		t.Fatalf("docs/%s: no caddyfile block under %q", page, heading)
	}
	block, _, ok := strings.Cut(rest, "\n```")
	if !ok {
		t.Fatalf("docs/%s: the caddyfile block under %q does not end", page, heading)
	}
	return block
}

// TestDocsGitHubCaddyfile: the GitHub example of docs/credentials.md
// adapts, its source takes each user's own GitHub account through GitHub's
// OAuth endpoints, and its codemode app provisions (with its Redis and
// spec made local: the test stays on loopback). A caller who has not
// connected gets CREDENTIAL_REQUIRED with the page's URL, as the docs say.
func TestDocsGitHubCaddyfile(t *testing.T) {
	quietCaddy(t)
	src := docsCaddyfile(t, "credentials.md", "## Example: GitHub with each user's own account")
	cfg := adaptGolden(t, "docs/credentials.md", src)
	app := cfg["apps"].(map[string]any)["codemode"].(map[string]any)

	var source map[string]any
	for _, s := range app["broker"].(map[string]any)["openapi"].([]any) {
		if s := s.(map[string]any); s["name"] == "github" {
			source = s
		}
	}
	if source == nil {
		t.Fatalf("no github source in %v", app["broker"])
	}
	cred, _ := json.Marshal(source["credential"])
	var got SourceCredential
	if err := json.Unmarshal(cred, &got); err != nil {
		t.Fatal(err)
	}
	if got.Mode != credential.ModeUser || got.OAuth == nil ||
		got.OAuth.AuthorizationEndpoint != "https://github.com/login/oauth/authorize" ||
		got.OAuth.TokenEndpoint != "https://github.com/login/oauth/access_token" ||
		got.OAuth.ClientSecret != "{env.GITHUB_CLIENT_SECRET}" {
		t.Fatalf("the github source's credential: %s", cred)
	}

	// Provision it: the environment the docs name, Redis and the spec local.
	rc, prefix := redistest.Client(t)
	localize(app, rc.Options().Addr, prefix, "")
	spec := filepath.Join(t.TempDir(), "github.json")
	if err := os.WriteFile(spec, []byte(`{"openapi":"3.0.3","info":{"title":"GitHub","version":"1"},
		"paths":{"/user/repos":{"get":{"operationId":"repos/list-for-authenticated-user","responses":{"200":{"description":"ok"}}}}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	source["spec_url"] = spec
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	jwk, _ := json.Marshal(jose.JSONWebKey{Key: key, KeyID: "docs", Algorithm: "ES256", Use: "sig"})
	vaultKey := make([]byte, 32)
	_, _ = rand.Read(vaultKey)
	for k, v := range map[string]string{"JWT_SIGNING_KEY": string(jwk), "ALICE_HASH": cheapHash, "BOB_HASH": cheapHash,
		"GITHUB_CLIENT_ID": "Iv1.docs", "GITHUB_CLIENT_SECRET": "docs-secret",
		"CODEMODE_VAULT_KEY": base64.StdEncoding.EncodeToString(vaultKey)} {
		t.Setenv(k, v)
	}
	// The token endpoint over plain http is refused at load (outside
	// development): it would carry the client secret and the users' codes.
	oauthCfg := source["credential"].(map[string]any)["oauth"].(map[string]any)
	oauthCfg["token_endpoint"] = "http://github.com/login/oauth/access_token"
	raw, _ := json.Marshal(app)
	if _, _, err := loadApp(raw); err == nil || !strings.Contains(err.Error(), credential.CodeEndpointRefused) {
		t.Fatalf("a plain http token endpoint: %v", err)
	}
	oauthCfg["token_endpoint"] = "https://github.com/login/oauth/access_token"
	// A client metadata URL an authorization server would refuse as a
	// client_id (not https, or no path) fails the load; a good one is
	// the client_id of the document the pages serve.
	creds := app["credentials"].(map[string]any)
	for _, bad := range []string{"http://gw.example.com/connections/client-metadata.json", "https://gw.example.com"} {
		creds["client_metadata_url"] = bad
		raw, _ = json.Marshal(app)
		if _, _, err := loadApp(raw); err == nil || !strings.Contains(err.Error(), "client metadata URL") {
			t.Fatalf("client_metadata_url %s: %v", bad, err)
		}
	}
	creds["client_metadata_url"] = "https://gw.example.com/connections/client-metadata.json"
	raw, _ = json.Marshal(app)
	a, unload, err := loadApp(raw)
	if err != nil {
		t.Fatalf("the docs' Caddyfile does not provision: %v\n%s", err, raw)
	}
	defer unload()
	mgr := a.credentials.mgr
	if mgr == nil {
		t.Fatal("no credential manager")
	}
	if doc := string(mgr.ClientMetadata()); !strings.Contains(doc, `"client_id":"https://gw.example.com/connections/client-metadata.json"`) {
		t.Fatalf("client metadata document %s", doc)
	}
	if s, ok := mgr.Spec("github"); !ok || s.Mode != credential.ModeUser || s.OAuth == nil || s.OAuth.ClientID != "Iv1.docs" {
		t.Fatalf("github spec: %+v", s)
	}
	// The redirect URI to register at GitHub is the service's own, as the
	// example's comment says.
	if got := mgr.RedirectURI("github"); got != "https://gw.example.com/connections/callback/github" {
		t.Fatalf("github's redirect URI: %q", got)
	}
	req, _ := http.NewRequest(http.MethodGet, "https://api.github.com/user/repos", nil)
	ctx := identity.With(context.Background(), &identity.Identity{Issuer: "https://gw.example.com", Subject: "alice"})
	_, err = mgr.Authorize(ctx, "github", req)
	var ce *credential.Error
	if !errors.As(err, &ce) || ce.Code != credential.CodeCredentialRequired || ce.ConnectURL != "https://gw.example.com/connections/github" {
		t.Fatalf("alice before connecting: %v", err)
	}
	if req.Header.Get("Authorization") != "" {
		t.Fatal("a request went out with a credential nobody connected")
	}
}
