package oauth

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// TestDiscoveryOrder: Discover tries the well-known documents in the order
// of the MCP authorization spec (RFC 8414 with the issuer's path inserted,
// then OpenID Connect with the path inserted, then OpenID Connect with the
// path appended; without a path RFC 8414 then OpenID Connect), and passes
// over a document that names another issuer (RFC 8414 section 3.3) as it
// does a missing one. Each provider here, over a real socket, serves some
// of the documents, some naming another issuer. Before, Discover read the
// OpenID Connect document appended to the issuer first and took it whatever
// issuer it named (the verifier then refused it, never looking at the
// provider's RFC 8414 document), and never asked for the path-inserted
// OpenID Connect form.
func TestDiscoveryOrder(t *testing.T) {
	const (
		asInserted   = "/.well-known/oauth-authorization-server"
		oidcInserted = "/.well-known/openid-configuration"
		oidcAppended = "/.well-known/openid-configuration#appended"
	)
	cases := []struct {
		name  string
		path  string          // the issuer's path
		serve map[string]bool // document -> names the issuer (false: another one)
		want  string          // the document found, "" for none
		tried []string        // the documents asked for, in order
		bare  string          // a document served without jwks_uri
	}{
		{"RFC 8414 only, with a path", "/tenant1", map[string]bool{asInserted: true}, asInserted,
			[]string{asInserted}, ""},
		{"OIDC names another issuer, RFC 8414 right", "", map[string]bool{oidcInserted: false, asInserted: true}, asInserted,
			[]string{asInserted}, ""},
		{"RFC 8414 names another issuer, OIDC right", "", map[string]bool{asInserted: false, oidcInserted: true}, oidcInserted,
			[]string{asInserted, oidcInserted}, ""},
		{"OIDC path inserted only", "/tenant1", map[string]bool{oidcInserted: true}, oidcInserted,
			[]string{asInserted, oidcInserted}, ""},
		{"OIDC path appended only", "/realms/main", map[string]bool{oidcAppended: true}, oidcAppended,
			[]string{asInserted, oidcInserted, oidcAppended}, ""},
		{"each names another issuer", "/tenant1", map[string]bool{asInserted: false, oidcInserted: false, oidcAppended: false}, "",
			[]string{asInserted, oidcInserted, oidcAppended}, ""},
		{"none served", "", nil, "", []string{asInserted, oidcInserted}, ""},
		{"RFC 8414 without jwks_uri, OIDC with", "", map[string]bool{asInserted: true, oidcInserted: true}, oidcInserted,
			[]string{asInserted, oidcInserted}, asInserted},
		{"RFC 8414 without jwks_uri only", "/t", map[string]bool{asInserted: true}, asInserted,
			[]string{asInserted, oidcInserted, oidcAppended}, asInserted},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var tried []string
			var srv *httptest.Server
			srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				doc := ""
				switch {
				case tc.path != "" && r.URL.Path == "/.well-known/oauth-authorization-server"+tc.path,
					tc.path == "" && r.URL.Path == "/.well-known/oauth-authorization-server":
					doc = asInserted
				case tc.path != "" && r.URL.Path == "/.well-known/openid-configuration"+tc.path,
					tc.path == "" && r.URL.Path == "/.well-known/openid-configuration":
					doc = oidcInserted
				case tc.path != "" && r.URL.Path == tc.path+"/.well-known/openid-configuration":
					doc = oidcAppended
				default:
					t.Errorf("unexpected request %s", r.URL.Path)
				}
				mu.Lock()
				tried = append(tried, doc)
				mu.Unlock()
				own, ok := tc.serve[doc]
				if !ok {
					http.NotFound(w, r)
					return
				}
				iss := srv.URL + tc.path
				if !own {
					iss = srv.URL + "/another"
				}
				keys := srv.URL + "/keys"
				if doc == tc.bare {
					keys = ""
				}
				_ = json.NewEncoder(w).Encode(ProviderMetadata{Issuer: iss, JWKSURI: keys, TokenEndpoint: srv.URL + "/token#" + doc})
			}))
			defer srv.Close()
			md, err := Discover(context.Background(), srv.Client(), srv.URL+tc.path+"/")
			mu.Lock()
			defer mu.Unlock()
			if !slices.Equal(tried, tc.tried) {
				t.Errorf("asked for %q, want %q", tried, tc.tried)
			}
			if tc.want == "" {
				if err == nil {
					t.Fatalf("found %+v", md)
				}
				mismatch := false
				for _, own := range tc.serve {
					mismatch = mismatch || !own
				}
				if got := ErrorCode(err); mismatch != (got == CodeIssuerMismatch) {
					t.Errorf("code %q (%v)", got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if md.Issuer != srv.URL+tc.path || md.TokenEndpoint != srv.URL+"/token#"+tc.want {
				t.Errorf("found %+v, want the document %s", md, tc.want)
			}
		})
	}
}

// TestVerifierDiscoversPastAnotherIssuersDocument: a provider whose OpenID
// Connect document names another issuer and whose RFC 8414 document names
// its own has its tokens verified (the key set is the RFC 8414 document's).
// A provider whose only document names another issuer is refused with
// ISSUER_MISMATCH.
func TestVerifierDiscoversPastAnotherIssuersDocument(t *testing.T) {
	p := newIDP(t, "")
	s := newSigner(t, "k1", jose.ES256)
	p.publish(s)
	p.oidcOther = true
	c := &clock{t: time.Unix(1_900_000_000, 0)}
	v := newTestVerifier(t, p, c)
	if _, err := v.Verify(context.Background(), s.sign(t, claimsAt(p.issuer(), c.Now()))); err != nil {
		t.Fatal(err)
	}

	only := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/openid-configuration") {
			http.NotFound(w, r)
			return
		}
		_ = json.NewEncoder(w).Encode(ProviderMetadata{Issuer: "https://elsewhere.example.test", JWKSURI: "https://elsewhere.example.test/keys"})
	}))
	defer only.Close()
	v2, err := NewVerifier(VerifierConfig{Issuer: only.URL, Audience: testAudience}, &VerifierOptions{HTTPClient: only.Client()})
	if err != nil {
		t.Fatal(err)
	}
	if err := v2.Refresh(context.Background()); ErrorCode(err) != CodeIssuerMismatch {
		t.Fatalf("refresh: %v (code %q), want %s", err, ErrorCode(err), CodeIssuerMismatch)
	}
}
