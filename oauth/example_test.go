package oauth_test

import (
	"context"
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
