package credential

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/codemode-gateway/caddy-codemode/credential/credentialtest"
)

// mcpSpec is an MCP server on the fake whose authorization server the
// gateway discovers, with no client id: the gateway registers one.
func mcpSpec(f *credentialtest.Fake) Spec {
	return Spec{Service: "forge", Title: "Fake Forge", Mode: ModeUser, Kind: KindOAuth, Resource: f.URL + "/mcp", OAuth: &OAuthClient{}}
}

// TestOwnDocument: a protected resource metadata document is the MCP
// server's when it names the server's URL, or names a resource containing
// the server and was read at the well-known URI derived from that
// resource (RFC 9728 section 3.3).
func TestOwnDocument(t *testing.T) {
	mcp, _ := url.Parse("https://mcp.example/tenant/mcp")
	root := "https://mcp.example/.well-known/oauth-protected-resource"
	for _, tc := range []struct {
		doc, named string
		want       bool
	}{
		{root + "/tenant/mcp", "https://mcp.example/tenant/mcp", true},
		{root + "/tenant/mcp", "https://mcp.example/tenant/mcp/", true},
		{"https://mcp.example/custom.json", "https://mcp.example/tenant/mcp", true},
		{root, "https://mcp.example", true},                    // the origin's, at the root (auth/metadata-var2)
		{root + "/tenant", "https://mcp.example/tenant", true}, // a containing path's, at its own URI
		{root + "/tenant/mcp", "https://mcp.example", false},   // the origin named from the server's URI
		{"https://mcp.example/custom.json", "https://mcp.example", false},
		{root, "https://other.example", false}, // another host (auth/resource-mismatch)
		{root, "http://mcp.example", false},    // another scheme
		{"https://mcp.example:8443/.well-known/oauth-protected-resource", "https://mcp.example:8443", false},
		{root + "/ten", "https://mcp.example/ten", false}, // not a path segment of the server's
		{root + "/other", "https://mcp.example/other", false},
		{root, "https://mcp.example?x=1", false},
	} {
		if got := ownDocument(mcp, tc.doc, tc.named); got != tc.want {
			t.Errorf("document at %s naming %s: %v, want %v", tc.doc, tc.named, got, tc.want)
		}
	}
}

// TestRootDocumentNamingTheOrigin: an MCP server whose only protected
// resource metadata is at the root well-known URI, naming its origin, is
// connected, and the resource indicator sent is the origin exactly as the
// document names it (no slash added), at authorization and with the code
// (the fake refuses a code redeemed for another resource). Refused before
// the twenty-fifth pass (the conformance suite's auth/metadata-var2).
func TestRootDocumentNamingTheOrigin(t *testing.T) {
	fake := credentialtest.New()
	t.Cleanup(fake.Close)
	fake.EnableRegistration()
	fake.SetResourceMetadataAtRoot()
	h := newHarnessWith(t, nil, nil, fake, []Spec{mcpSpec(fake)}, nil)
	h.connect(t, h.browser(t, "alice", "gh-alice"))
	if auths := fake.Authorizations(); len(auths) != 1 || auths[0].Get("resource") != fake.URL {
		t.Fatalf("authorization requests %v, want resource %s", auths, fake.URL)
	}
	// A configured resource still wins.
	fake2 := credentialtest.New()
	t.Cleanup(fake2.Close)
	fake2.EnableRegistration()
	fake2.SetResourceMetadataAtRoot()
	spec := mcpSpec(fake2)
	spec.OAuth.Resource = fake2.URL + "/mcp"
	h2 := newHarnessWith(t, nil, nil, fake2, []Spec{spec}, nil)
	h2.connect(t, h2.browser(t, "alice", "gh-alice"))
	if got := fake2.Authorizations()[0].Get("resource"); got != fake2.URL+"/mcp" {
		t.Fatalf("resource %q, want the configured %s/mcp", got, fake2.URL)
	}
}

// TestEndpointFallback: an MCP server with no metadata at all (every
// document 404) is connected through the 2025-03-26 revision's default
// endpoints at its origin: registration at /register, the code with PKCE
// S256 from /authorize, the token from /token. A metadata location that
// fails otherwise than with 404 (a 503, the server down) is not taken for
// absence: no request goes to a guessed endpoint.
func TestEndpointFallback(t *testing.T) {
	fake := credentialtest.New()
	t.Cleanup(fake.Close)
	fake.SetMetadataStatus(http.StatusNotFound)
	h := newHarnessWith(t, nil, nil, fake, []Spec{mcpSpec(fake)}, nil)
	h.connect(t, h.browser(t, "alice", "gh-alice"))
	if n := len(fake.Registrations()); n != 1 {
		t.Fatalf("%d registrations at /register, want 1", n)
	}
	auths := fake.Authorizations()
	if len(auths) != 1 || auths[0].Get("code_challenge_method") != "S256" || auths[0].Get("resource") != fake.URL+"/mcp" {
		t.Fatalf("authorization requests %v", auths)
	}
	if _, got, err := h.call(t, as("alice"), "forge", "/api/whoami"); err != nil || got != "gh-alice" {
		t.Fatalf("alice's call: %q %v", got, err)
	}
	if !h.logged("default endpoints") {
		t.Error("the fallback was not logged")
	}

	for _, status := range []int{http.StatusServiceUnavailable, http.StatusForbidden} {
		fake := credentialtest.New()
		t.Cleanup(fake.Close)
		fake.SetMetadataStatus(status)
		h := newHarnessWith(t, nil, nil, fake, []Spec{mcpSpec(fake)}, nil)
		c := h.browser(t, "alice", "gh-alice")
		code, _, body := post(t, c, h.gw.URL+"/connections/forge/connect", url.Values{"csrf": {h.csrf(t, c)}}, nil)
		if code != http.StatusBadGateway || !strings.Contains(body, "unavailable") {
			t.Fatalf("metadata answering %d: %d %s", status, code, body)
		}
		if n, a := len(fake.Registrations()), len(fake.Authorizations()); n != 0 || a != 0 {
			t.Fatalf("metadata answering %d: %d registrations, %d authorization requests; want none", status, n, a)
		}
	}

	// An RFC 9728 document that names an authorization server without
	// metadata is not a server without metadata: no fallback.
	fake3 := credentialtest.New()
	t.Cleanup(fake3.Close)
	fake3.SetResourceMetadata("authorization_servers", []string{fake3.URL + "/tenant"})
	h3 := newHarnessWith(t, nil, nil, fake3, []Spec{mcpSpec(fake3)}, nil)
	if _, err := h3.m.endpoints(t.Context(), h3.m.specs["forge"]); err == nil {
		t.Fatal("an authorization server without metadata, named by the resource's document, got endpoints")
	}
}
