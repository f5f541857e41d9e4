package credential

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/codemode-gateway/caddy-codemode/credential/credentialtest"
)

// refusing is an upstream that answers every request with status and the
// WWW-Authenticate challenge.
func refusing(t *testing.T, status int, challenge string) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("WWW-Authenticate", challenge)
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// send makes a request to u over the manager's Transport for forge, with
// user's credential when user is not "".
func send(t *testing.T, h *harness, user, u string) (*http.Response, error) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, u, nil)
	if user != "" {
		_, authorize, err := h.m.SessionFor(as(user), "forge")
		if err != nil {
			t.Fatal(err)
		}
		if err := authorize(req); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := (&http.Client{Transport: h.m.Transport("forge", http.DefaultTransport)}).Do(req)
	if err == nil {
		resp.Body.Close()
	}
	return resp, err
}

// TestStepUpAsksForTheUnion: a 403 insufficient_scope for a scope the
// connection did not ask for fails the request with CREDENTIAL_REQUIRED,
// and the user's next connection asks for the scopes asked for before and
// the challenged one; a 403 for a scope asked for already passes through
// (another sign-in would not help); a request without a user's token is
// not touched.
func TestStepUpAsksForTheUnion(t *testing.T) {
	h := newHarness(t, nil, nil, nil)
	c := h.browser(t, "alice", "gh-alice")
	h.connect(t, c)
	up := refusing(t, http.StatusForbidden, `Bearer error="insufficient_scope", scope="write", resource_metadata="https://x.test/.well-known/oauth-protected-resource"`)
	_, err := send(t, h, "alice", up.URL)
	if e := wantCode(t, err, CodeCredentialRequired); !strings.Contains(e.Message, "(write)") {
		t.Fatalf("message %q does not name the scope", e.Message)
	}
	h.connect(t, c)
	auths := h.fake.Authorizations()
	if len(auths) != 2 || auths[0].Get("scope") != "read" || auths[1].Get("scope") != "read write" {
		t.Fatalf("scopes asked for: %v", auths)
	}
	resp, err := send(t, h, "alice", up.URL)
	if err != nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a 403 for a scope asked for already: %v %v", resp, err)
	}
	if resp, err := send(t, h, "", up.URL); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a request without a user's token: %v %v", resp, err)
	}
}

// TestRefusedTokenRefreshedOrReconnected: a 401 to a user's token
// refreshes it at once (the request fails with CREDENTIAL_UNAVAILABLE, to
// be retried with the new one) and reads the MCP server's metadata again;
// when that now names another authorization server, the next 401 forgets
// the connection (CREDENTIAL_REQUIRED) without sending the refresh token
// anywhere.
func TestRefusedTokenRefreshedOrReconnected(t *testing.T) {
	as1, as2 := credentialtest.New(), credentialtest.New()
	t.Cleanup(as1.Close)
	t.Cleanup(as2.Close)
	spec := Spec{Service: "forge", Title: "Fake Forge", Mode: ModeUser, Kind: KindOAuth, Resource: as1.URL + "/mcp",
		OAuth: &OAuthClient{ClientID: as1.ClientID, ClientSecret: as1.ClientSecret}}
	h := newHarnessWith(t, nil, nil, as1, []Spec{spec}, nil)
	h.connect(t, h.browser(t, "alice", "gh-alice"))
	up := refusing(t, http.StatusUnauthorized, `Bearer error="invalid_token"`)
	_, err := send(t, h, "alice", up.URL)
	wantCode(t, err, CodeCredentialUnavailable)
	if as1.Refreshes() != 1 {
		t.Fatalf("%d refreshes after a 401, want 1", as1.Refreshes())
	}
	h.clock.add(time.Minute)
	as1.SetResourceMetadata("authorization_servers", []string{as2.URL})
	_, err = send(t, h, "alice", up.URL)
	wantCode(t, err, CodeCredentialRequired)
	if as1.Refreshes() != 1 || as2.TokenRequests() != 0 {
		t.Fatalf("the refresh token went out: %d refreshes at the first server, %d token requests at the second", as1.Refreshes(), as2.TokenRequests())
	}
	if _, err := h.m.Vault().Get(t.Context(), Owner{testIssuer, "alice"}.Key(), "forge"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the connection is kept: %v", err)
	}
}
