package oauth

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
)

type whoamiOut struct {
	Subject string   `json:"subject"`
	Scopes  []string `json:"scopes"`
}

type claimsKey struct{}

// TestMCPClientSignsIn has the go-sdk MCP client, with its OAuth handler,
// find the server the MCP way (401 + WWW-Authenticate resource_metadata,
// RFC 9728, RFC 8414), register (RFC 7591), sign in with PKCE and call a
// tool with the token: the path a real MCP client takes.
func TestMCPClientSignsIn(t *testing.T) {
	e := newAS(t, func(c *ServerConfig) {
		c.DCREnabled = true
		c.Resources = append(c.Resources, c.Issuer+"/mcp") // the protected resource below
	})
	resource := e.srv.URL + "/mcp"

	server := mcp.NewServer(&mcp.Implementation{Name: "protected", Version: "1"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "whoami", Description: "who the token says you are"},
		func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, whoamiOut, error) {
			cl, _ := ctx.Value(claimsKey{}).(*Claims)
			if cl == nil {
				return nil, whoamiOut{}, errors.New("no claims")
			}
			return nil, whoamiOut{Subject: cl.Subject, Scopes: cl.Scopes}, nil
		})
	var seen *Claims
	mcpHandler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil)
	protected := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cl, err := e.s.VerifyAccessToken(r.Context(), BearerToken(r), resource)
		if err != nil {
			w.Header().Set("WWW-Authenticate", BearerChallenge(MetadataURL(resource), err, "mcp"))
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		seen = cl
		mcpHandler.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), claimsKey{}, cl)))
	})
	mux := http.NewServeMux()
	mux.Handle("/mcp", protected)
	mux.Handle("/.well-known/oauth-protected-resource/", MetadataHandler(ResourceMetadata{
		Resource: resource, AuthorizationServers: []string{e.srv.URL}, ScopesSupported: []string{"mcp"},
	}))
	mux.Handle("/", e.s.Handler())
	e.mount(mux)

	redirect := "http://127.0.0.1:47123/callback"
	handler, err := auth.NewAuthorizationCodeHandler(&auth.AuthorizationCodeHandlerConfig{
		DynamicClientRegistrationConfig: &auth.DynamicClientRegistrationConfig{Metadata: &oauthex.ClientRegistrationMetadata{
			RedirectURIs: []string{redirect}, ClientName: "go-sdk test client", TokenEndpointAuthMethod: "none",
			GrantTypes: []string{"authorization_code", "refresh_token"},
		}},
		RequestRefreshToken: true,
		Client:              e.http,
		AuthorizationCodeFetcher: func(ctx context.Context, args *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
			back := e.signIn(args.URL) // the user's browser: login and consent
			q := back.Query()
			return &auth.AuthorizationResult{Code: q.Get("code"), State: q.Get("state"), Iss: q.Get("iss")}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, nil)
	cs, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{
		Endpoint: resource, HTTPClient: e.http, OAuthHandler: handler, DisableStandaloneSSE: true,
	}, nil)
	if err != nil {
		t.Fatalf("connect with OAuth: %v", err)
	}
	defer cs.Close()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "whoami", Arguments: map[string]any{}})
	if err != nil || res.IsError {
		t.Fatalf("call: %v %+v", err, res)
	}
	if seen == nil || seen.Subject != asUser || !seen.HasScope("mcp") || !strings.HasPrefix(seen.ClientID, "mcp_") {
		t.Fatalf("server saw %+v", seen)
	}
	ts, err := handler.TokenSource(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	tok, err := ts.Token()
	if err != nil || tok.RefreshToken == "" {
		t.Fatalf("token source: %v (refresh token %t)", err, tok != nil && tok.RefreshToken != "")
	}
	e.assertNoSecretsLogged(tok.AccessToken, tok.RefreshToken)
}
