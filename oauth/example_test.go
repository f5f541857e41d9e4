package oauth_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/codemode-gateway/caddy-codemode/oauth"
)

// A development server: generated key, memory storage, demo login. Mount
// Handler at the issuer's root and check bearer tokens with
// VerifyAccessToken.
func ExampleNewServer() {
	srv, err := oauth.NewServer(oauth.ServerConfig{
		Issuer:      "http://127.0.0.1:8080",
		Development: true,
		Refresh:     oauth.RefreshConfig{Enabled: true},
		Clients:     []oauth.ClientConfig{{ID: "my-cli", RedirectURIs: []string{"http://127.0.0.1:9999/callback"}}},
	}, nil)
	if err != nil {
		panic(err)
	}
	defer srv.Close()

	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/.well-known/oauth-authorization-server", nil))
	fmt.Println(rec.Code, srv.Metadata(false).TokenEndpoint, srv.Metadata(false).CodeChallengeMethodsSupported)

	_, err = srv.VerifyAccessToken(context.Background(), "not-a-token", "https://gateway.example.com/mcp")
	fmt.Println(oauth.TokenReason(err))
	// Output:
	// 200 http://127.0.0.1:8080/oauth/token [S256]
	// malformed
}

// Making a signing key for JWT_SIGNING_KEY (or local.sign_key): an RSA key
// for RS256, or ecdsa.GenerateKey(elliptic.P256(), rand.Reader) for ES256.
func ExampleMarshalSigningKeyJWK() {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	jwk, err := oauth.MarshalSigningKeyJWK(key)
	if err != nil {
		panic(err)
	}
	var fields map[string]any
	_ = json.Unmarshal([]byte(jwk), &fields)
	fmt.Println(fields["kty"], fields["alg"], fields["d"] != nil)
	// Output: RSA RS256 true
}
