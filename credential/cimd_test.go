package credential

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/codemode-gateway/caddy-codemode/credential/credentialtest"
)

// cimdURL is where the tests' gateway says its client metadata document is
// published (an authorization server that takes it fetches it there; the
// fake takes it without fetching: AllowClient).
const cimdURL = "https://gw.example.com/connections/client-metadata.json"

func withClientMetadata(o *Options) { o.ClientMetadataURL = cimdURL }

// TestClientIDMetadataDocument: with a client metadata URL configured, a
// server whose metadata says client_id_metadata_document_supported gets
// the URL as client_id (a public client: no secret, PKCE) and no
// registration, for the code, the refresh and the revocation; the pages
// serve the document (client_id the URL, the connection's redirect URI,
// token_endpoint_auth_method none) to anyone, signed in or not. The
// order is the MCP authorization spec's: a configured client_id first,
// and a server without the flag still gets a registration.
func TestClientIDMetadataDocument(t *testing.T) {
	fake := credentialtest.New()
	t.Cleanup(fake.Close)
	fake.EnableRegistration()
	fake.SetMetadata("client_id_metadata_document_supported", true)
	fake.AllowClient(cimdURL)
	h := newHarnessWith(t, nil, nil, fake, registeringSpecs(fake), nil, withClientMetadata)

	resp, err := http.Get(h.gw.URL + "/connections/client-metadata.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		ClientID     string   `json:"client_id"`
		ClientName   string   `json:"client_name"`
		RedirectURIs []string `json:"redirect_uris"`
		GrantTypes   []string `json:"grant_types"`
		AuthMethod   string   `json:"token_endpoint_auth_method"`
		Secret       *string  `json:"client_secret"`
	}
	err = json.NewDecoder(resp.Body).Decode(&doc)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("document: %d %s %v", resp.StatusCode, resp.Header.Get("Content-Type"), err)
	}
	if doc.ClientID != cimdURL || doc.ClientName == "" || doc.AuthMethod != authNone || doc.Secret != nil ||
		!slices.Equal(doc.RedirectURIs, []string{h.gw.URL + "/connections/callback/forge"}) ||
		!slices.Equal(doc.GrantTypes, []string{"authorization_code", "refresh_token"}) {
		t.Fatalf("document %+v", doc)
	}

	h.connect(t, h.browser(t, "alice", "gh-alice"))
	if n := len(fake.Registrations()); n != 0 {
		t.Fatalf("%d registrations, want none: the document's URL is the client", n)
	}
	auths := fake.Authorizations()
	if len(auths) != 1 || auths[0].Get("client_id") != cimdURL {
		t.Fatalf("authorization requests %v, want client_id %s", auths, cimdURL)
	}
	if _, got, err := h.call(t, as("alice"), "forge", "/api/whoami"); err != nil || got != "gh-alice" {
		t.Fatalf("alice's call: %q %v", got, err)
	}
	h.clock.add(2 * time.Hour) // the fake refuses a refresh by any other client
	if _, got, err := h.call(t, as("alice"), "forge", "/api/whoami"); err != nil || got != "gh-alice" || fake.Refreshes() != 1 {
		t.Fatalf("alice's call after the refresh: %q %v (%d refreshes)", got, err, fake.Refreshes())
	}
	if err := h.m.Disconnect(t.Context(), Owner{testIssuer, "alice"}, "forge"); err != nil || len(fake.Revoked()) != 2 {
		t.Fatalf("disconnect: %v, %d revoked", err, len(fake.Revoked()))
	}

	t.Run("a configured client_id first", func(t *testing.T) {
		fake := credentialtest.New()
		t.Cleanup(fake.Close)
		fake.SetMetadata("client_id_metadata_document_supported", true)
		h := newHarnessWith(t, nil, nil, fake, forgeSpecs(fake), nil, withClientMetadata)
		h.connect(t, h.browser(t, "alice", "gh-alice"))
		if got := fake.Authorizations()[0].Get("client_id"); got != fake.ClientID {
			t.Fatalf("client_id %q, want the configured %q", got, fake.ClientID)
		}
		// The document lists only connections that may use it.
		if doc := h.m.ClientMetadata(); !strings.Contains(string(doc), `"redirect_uris":[]`) {
			t.Fatalf("document %s lists a connection with a configured client_id", doc)
		}
	})
	t.Run("registration where the server takes no document", func(t *testing.T) {
		fake := credentialtest.New()
		t.Cleanup(fake.Close)
		fake.EnableRegistration()
		h := newHarnessWith(t, nil, nil, fake, registeringSpecs(fake), nil, withClientMetadata)
		h.connect(t, h.browser(t, "alice", "gh-alice"))
		if n := len(fake.Registrations()); n != 1 || fake.Authorizations()[0].Get("client_id") == cimdURL {
			t.Fatalf("%d registrations, client_id %q", n, fake.Authorizations()[0].Get("client_id"))
		}
	})
	t.Run("no document without the option", func(t *testing.T) {
		fake := credentialtest.New()
		t.Cleanup(fake.Close)
		fake.EnableRegistration()
		fake.SetMetadata("client_id_metadata_document_supported", true)
		h := newHarnessWith(t, nil, nil, fake, registeringSpecs(fake), nil)
		if status, _, _ := open(t, http.DefaultClient, h.gw.URL+"/connections/client-metadata.json"); status != http.StatusNotFound {
			t.Fatalf("document without a client metadata URL: %d, want 404", status)
		}
		h.connect(t, h.browser(t, "alice", "gh-alice"))
		if n := len(fake.Registrations()); n != 1 {
			t.Fatalf("%d registrations, want 1", n)
		}
	})
}

// TestClientMetadataURLChecked: a client metadata URL an authorization
// server would refuse as a client_id fails at load.
func TestClientMetadataURLChecked(t *testing.T) {
	specs := []Spec{{Service: "forge", Mode: ModeUser, Kind: KindOAuth, OAuth: &OAuthClient{AuthorizationServer: "https://as.example"}}}
	for _, tc := range []struct {
		url, connect, want string
	}{
		{"http://gw.example.com/connections/client-metadata.json", "", "absolute https URL"},
		{"client-metadata.json", "", "absolute https URL"},
		{"https://gw.example.com", "", "must have a path"},
		{"https://gw.example.com/", "", "must have a path"},
		{"https://gw.example.com/client.json#me", "", "no fragment"},
		{"https://gw.example.com/client.json#", "", "no fragment"},
		{"https://user:pw@gw.example.com/client.json", "", "no user name"},
		{"https://gw.example.com/a/../client.json", "", "no . or .."},
		{"https://gw.example.com/a/%2E/client.json", "", "no . or .."},
		{"https://gw.example.com/client.json", "none", "needs the connect URL"},
		{"https://gw.example.com/connections/client-metadata.json", "", ""},
		{"https://gw.example.com/client.json?v=1", "", ""},
	} {
		connect := "https://gw.example.com/connections"
		if tc.connect == "none" {
			connect = ""
		}
		_, err := NewManager(specs, &Options{Store: NewMemoryStore(nil), Keys: keyring(t, newKey(t)), ConnectURL: connect, ClientMetadataURL: tc.url})
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want %q", tc.url, err, tc.want)
		}
	}
}
