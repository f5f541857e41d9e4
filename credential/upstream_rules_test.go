package credential

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/codemode-gateway/caddy-codemode/credential/credentialtest"
)

// publicUpstream is the fake upstream over https as if it were
// https://example.com on the internet: the client dials its listener for
// example.com (httptest's certificate names it), everything else as usual.
func publicUpstream(t *testing.T) (*credentialtest.Fake, *http.Client) {
	t.Helper()
	f := credentialtest.NewTLS()
	t.Cleanup(f.Close)
	tr := f.Client().Transport.(*http.Transport).Clone()
	addr := f.Listener.Addr().String()
	tr.DialContext = func(ctx context.Context, network, a string) (net.Conn, error) {
		if a == "example.com:443" {
			a = addr
		}
		return (&net.Dialer{}).DialContext(ctx, network, a)
	}
	t.Cleanup(tr.CloseIdleConnections)
	const pub = "https://example.com"
	f.SetMetadata("issuer", pub)
	f.SetMetadata("authorization_endpoint", pub+"/authorize")
	f.SetMetadata("token_endpoint", pub+"/token")
	f.SetMetadata("revocation_endpoint", pub+"/revoke")
	f.SetResourceMetadata("resource", pub+"/mcp")
	f.SetResourceMetadata("authorization_servers", []string{pub})
	return f, &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// publicBrowser is a browser signed in at the test gateway as user and, at
// the public upstream, as account.
func publicBrowser(t *testing.T, h *harness, client *http.Client, user, account string) *http.Client {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Transport: client.Transport, Timeout: 10 * time.Second}
	for _, u := range []string{h.gw.URL + "/test-login?user=" + user, "https://example.com/login?account=" + account} {
		resp, err := c.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	return c
}

// TestConfiguredEndpointsNeedHTTPS: a configured authorization server,
// endpoint or discovering MCP server over plain http is refused at load
// outside loopback and development, with UPSTREAM_ENDPOINT_REFUSED.
func TestConfiguredEndpointsNeedHTTPS(t *testing.T) {
	oauth := func(o OAuthClient, resource string) Spec {
		o.ClientID = "c"
		return Spec{Service: "svc", Mode: ModeUser, Kind: KindOAuth, OAuth: &o, Resource: resource}
	}
	cases := []struct {
		name    string
		spec    Spec
		refused bool // outside development
	}{
		{"https server", oauth(OAuthClient{AuthorizationServer: "https://as.example.com"}, ""), false},
		{"http server", oauth(OAuthClient{AuthorizationServer: "http://as.example.com"}, ""), true},
		{"http server on loopback", oauth(OAuthClient{AuthorizationServer: "http://127.0.0.1:9"}, ""), false},
		{"http server on localhost", oauth(OAuthClient{AuthorizationServer: "http://localhost:9"}, ""), false},
		{"http server on ::1", oauth(OAuthClient{AuthorizationServer: "http://[::1]:9"}, ""), false},
		{"http server on a private address", oauth(OAuthClient{AuthorizationServer: "http://10.0.0.1"}, ""), true},
		{"http token endpoint", oauth(OAuthClient{AuthorizationEndpoint: "https://as.example.com/a", TokenEndpoint: "http://as.example.com/t"}, ""), true},
		{"http authorization endpoint", oauth(OAuthClient{AuthorizationEndpoint: "http://as.example.com/a", TokenEndpoint: "https://as.example.com/t"}, ""), true},
		{"http revocation endpoint", oauth(OAuthClient{AuthorizationServer: "https://as.example.com", RevocationEndpoint: "http://as.example.com/r"}, ""), true},
		{"http MCP server discovered from", oauth(OAuthClient{}, "http://mcp.example.com/mcp"), true},
		{"http MCP server, server configured", oauth(OAuthClient{AuthorizationServer: "https://as.example.com"}, "http://mcp.example.com/mcp"), false},
	}
	for _, c := range cases {
		for _, dev := range []bool{false, true} {
			_, err := NewManager([]Spec{c.spec}, &Options{Store: NewMemoryStore(nil), Keys: keyring(t, newKey(t)), Development: dev})
			want := c.refused && !dev
			if got := ErrorCode(err) == CodeEndpointRefused; got != want || (!want && err != nil) {
				t.Errorf("%s (development %v): %v, want refused %v", c.name, dev, err, want)
			}
			if want && !strings.Contains(err.Error(), "must be https") {
				t.Errorf("%s: unclear error %q", c.name, err)
			}
		}
	}
	// A shared redirect URI needs a server that names itself.
	_, err := NewManager([]Spec{oauth(OAuthClient{AuthorizationEndpoint: "https://as.example.com/a", TokenEndpoint: "https://as.example.com/t", SharedCallback: true}, "")},
		&Options{Store: NewMemoryStore(nil), Keys: keyring(t, newKey(t))})
	if err == nil || !strings.Contains(err.Error(), "callback shared") {
		t.Errorf("shared callback without an issuer: %v", err)
	}
}

// TestDiscoveredEndpointsRefused: metadata read from a public https server
// cannot send the token request (client secret, code, refresh token) over
// plain http or to an internal address; the connect page refuses with
// UPSTREAM_ENDPOINT_REFUSED, logs it, and nothing is sent there. The
// fake upstream is reached over real sockets as https://example.com.
func TestDiscoveredEndpointsRefused(t *testing.T) {
	fake, client := publicUpstream(t)
	fakeAddr := fake.Listener.Addr().String() // reachable: without the rule the request would go
	asSpec := func(f *credentialtest.Fake) []Spec {
		return []Spec{{Service: "forge", Title: "Fake Forge", Mode: ModeUser, Kind: KindOAuth,
			OAuth: &OAuthClient{AuthorizationServer: "https://example.com", ClientID: f.ClientID, ClientSecret: f.ClientSecret}}}
	}
	mcpSpec := func(f *credentialtest.Fake) []Spec {
		return []Spec{{Service: "tracker", Mode: ModeUser, Kind: KindOAuth, Resource: "https://example.com/mcp",
			OAuth: &OAuthClient{ClientID: f.ClientID, ClientSecret: f.ClientSecret}}}
	}
	cases := []struct {
		name    string
		specs   func(*credentialtest.Fake) []Spec
		service string
		doc     string // "as" or "resource"
		key     string
		value   any
	}{
		{"downgraded token endpoint", asSpec, "forge", "as", "token_endpoint", "http://example.com/token"},
		{"token endpoint on loopback", asSpec, "forge", "as", "token_endpoint", "https://" + fakeAddr + "/token"},
		{"token endpoint on a private address", asSpec, "forge", "as", "token_endpoint", "https://10.0.0.7/token"},
		{"token endpoint on localhost", asSpec, "forge", "as", "token_endpoint", "https://localhost/token"},
		{"token endpoint on a mapped loopback", asSpec, "forge", "as", "token_endpoint", "https://[::ffff:127.0.0.1]/token"},
		{"authorization endpoint on ::1", asSpec, "forge", "as", "authorization_endpoint", "https://[::1]/authorize"},
		{"authorization endpoint not http", asSpec, "forge", "as", "authorization_endpoint", "javascript:alert(1)"},
		{"revocation endpoint on link-local", asSpec, "forge", "as", "revocation_endpoint", "https://169.254.169.254/revoke"},
		{"downgraded authorization server (RFC 9728)", mcpSpec, "tracker", "resource", "authorization_servers", []string{"http://example.com"}},
		{"internal authorization server (RFC 9728)", mcpSpec, "tracker", "resource", "authorization_servers", []string{"https://192.168.1.5"}},
		{"downgraded token endpoint via RFC 9728", mcpSpec, "tracker", "as", "token_endpoint", "http://example.com/token"},
	}
	check := func(t *testing.T, specs func(*credentialtest.Fake) []Spec, service string) (int, string, *harness) {
		t.Helper()
		h := newHarnessWith(t, nil, nil, fake, specs(fake), client)
		c := publicBrowser(t, h, client, "alice", "a")
		csrf := h.csrf(t, c)
		status, _, body := post(t, noRedirect(c), h.gw.URL+"/connections/"+service+"/connect", url.Values{"csrf": {csrf}}, nil)
		return status, body, h
	}
	// The control: the same documents, all https on example.com, are taken.
	for _, spec := range []func(*credentialtest.Fake) []Spec{asSpec, mcpSpec} {
		h := newHarnessWith(t, nil, nil, fake, spec(fake), client)
		svc := h.m.order[0]
		c := publicBrowser(t, h, client, "alice", "a")
		csrf := h.csrf(t, c)
		authz := location(t, noRedirect(c), http.MethodPost, h.gw.URL+"/connections/"+svc+"/connect", url.Values{"csrf": {csrf}})
		if !strings.HasPrefix(authz, "https://example.com/authorize?") {
			t.Fatalf("%s: connect went to %s", svc, authz)
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			set := fake.SetMetadata
			if c.doc == "resource" {
				set = fake.SetResourceMetadata
			}
			old := map[string]any{"token_endpoint": "https://example.com/token", "authorization_endpoint": "https://example.com/authorize",
				"revocation_endpoint": "https://example.com/revoke", "authorization_servers": []string{"https://example.com"}}[c.key]
			set(c.key, c.value)
			defer set(c.key, old)
			status, body, h := check(t, c.specs, c.service)
			if status != http.StatusBadGateway || !refusedWith(body, CodeEndpointRefused) {
				t.Fatalf("connect: %d\n%s", status, body)
			}
			logged := h.logs.FilterMessage("upstream endpoint refused").All()
			if len(logged) == 0 || logged[0].ContextMap()["code"] != CodeEndpointRefused || logged[0].ContextMap()["service"] != c.service {
				t.Fatalf("not logged: %v", h.logs.All())
			}
		})
	}
	if n := fake.TokenRequests(); n != 0 {
		t.Errorf("the token endpoint was called %d times", n)
	}
}

// TestRefreshRefusedWhenMetadataTurns: a connection made while the
// metadata was sound is not refreshed once the metadata names a plain http
// token endpoint: the refresh token is not sent, and the call fails with
// UPSTREAM_ENDPOINT_REFUSED (not transient).
func TestRefreshRefusedWhenMetadataTurns(t *testing.T) {
	fake, client := publicUpstream(t)
	h := newHarnessWith(t, nil, nil, fake, []Spec{{Service: "forge", Title: "Fake Forge", Mode: ModeUser, Kind: KindOAuth,
		OAuth: &OAuthClient{AuthorizationServer: "https://example.com", ClientID: fake.ClientID, ClientSecret: fake.ClientSecret}}}, client)
	alice := publicBrowser(t, h, client, "alice", "alice-at-forge")
	h.connect(t, alice)
	refreshRefused(t, h, fake, "http://example.com/token")
}

// refreshRefused turns the token endpoint of alice's connection (made,
// one token request so far) to endpoint and checks that her next call's
// refresh fails with UPSTREAM_ENDPOINT_REFUSED (not transient), sends
// nothing there and authorizes nothing; it returns the error.
func refreshRefused(t *testing.T, h *harness, fake *credentialtest.Fake, endpoint string) *Error {
	t.Helper()
	if n := fake.TokenRequests(); n != 1 {
		t.Fatalf("token requests after connecting: %d", n)
	}
	fake.SetMetadata("token_endpoint", endpoint)
	h.clock.add(2 * time.Hour) // past the access token's expiry and the metadata's cache
	req, _ := http.NewRequest(http.MethodGet, "https://example.com/api/whoami", nil)
	_, err := h.m.Authorize(as("alice"), "forge", req)
	var ce *Error
	if !errors.As(err, &ce) || ce.Code != CodeEndpointRefused || ce.Transient {
		t.Fatalf("refresh: %v", err)
	}
	if n := fake.TokenRequests(); n != 1 {
		t.Errorf("the refresh token went out: %d token requests", n)
	}
	if req.Header.Get("Authorization") != "" {
		t.Errorf("request authorized anyway")
	}
	return ce
}

// reboundUpstream is publicUpstream whose client also reaches the fake
// upstream as https://rebound.example.net: a public name whose DNS answer
// is a loopback address (rebinding), which discovery, judging the name as
// written, takes.
func reboundUpstream(t *testing.T) (*credentialtest.Fake, *http.Client) {
	t.Helper()
	fake, client := publicUpstream(t)
	tr := client.Transport.(*http.Transport).Clone()
	inner := tr.DialContext
	tr.DialContext = func(ctx context.Context, network, a string) (net.Conn, error) {
		if a == "rebound.example.net:443" {
			a = "example.com:443"
		}
		return inner(ctx, network, a)
	}
	tr.TLSClientConfig.ServerName = "example.com" // httptest's certificate names only example.com
	t.Cleanup(tr.CloseIdleConnections)
	return fake, &http.Client{Transport: tr, Timeout: client.Timeout}
}

// TestReboundEndpointRefusedAtDial: a discovered token endpoint whose
// public name resolves to an internal address is refused when dialled,
// with UPSTREAM_ENDPOINT_REFUSED, logged, and neither the code nor the
// refresh token is sent; the configured server's own name resolving there
// is the operator's choice and keeps working.
func TestReboundEndpointRefusedAtDial(t *testing.T) {
	fake, client := reboundUpstream(t)
	h := newHarnessWith(t, nil, nil, fake, []Spec{{Service: "forge", Title: "Fake Forge", Mode: ModeUser, Kind: KindOAuth,
		OAuth: &OAuthClient{AuthorizationServer: "https://example.com", ClientID: fake.ClientID, ClientSecret: fake.ClientSecret}}}, client)
	t.Cleanup(h.m.Close)
	alice := publicBrowser(t, h, client, "alice", "alice-at-forge")
	h.connect(t, alice) // all on example.com (loopback, but configured)
	if ce := refreshRefused(t, h, fake, "https://rebound.example.net/token"); !strings.Contains(ce.Message, "rebound.example.net") {
		t.Fatalf("refresh: %v", ce)
	}

	bob := publicBrowser(t, h, client, "bob", "bob-at-forge")
	status, _, body := post(t, bob, h.gw.URL+"/connections/forge/connect", url.Values{"csrf": {h.csrf(t, bob)}}, nil)
	if status != http.StatusBadGateway || !refusedWith(body, CodeEndpointRefused) {
		t.Fatalf("connect: %d\n%s", status, body)
	}
	if n := fake.TokenRequests(); n != 1 {
		t.Errorf("the code went out: %d token requests", n)
	}
	logged := h.logs.FilterMessage("upstream endpoint refused").All()
	if len(logged) == 0 || logged[0].ContextMap()["code"] != CodeEndpointRefused || logged[0].ContextMap()["service"] != "forge" {
		t.Fatalf("not logged: %v", h.logs.All())
	}
}

// TestDialGuardChecksBeforeConnecting: with the default dialer the
// address is refused before a connection is made (net.Dialer.Control); a
// host the configuration names is dialled as it resolves.
func TestDialGuardChecksBeforeConnecting(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan string, 4) // the remote addresses, in order
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c.RemoteAddr().String()
			c.Close()
		}
	}()
	g := &dialGuard{service: "svc", trusted: map[string]bool{"configured.example": true}}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	_, err = g.dial(nil)(context.Background(), "tcp", net.JoinHostPort("127.0.0.1", port))
	if ErrorCode(err) != CodeEndpointRefused {
		t.Fatalf("untrusted loopback dial: %v", err)
	}
	// The trusted dial's connection is the first accepted: had the
	// refused one connected, it would have been.
	g.trusted["127.0.0.1"] = true
	c, err := g.dial(nil)(context.Background(), "tcp", net.JoinHostPort("127.0.0.1", port))
	if err != nil {
		t.Fatalf("trusted dial: %v", err)
	}
	defer c.Close()
	if first := <-accepted; first != c.LocalAddr().String() {
		t.Fatalf("the refused dial connected (from %s)", first)
	}
}

// The client a service gets by default (no transport of the operator's)
// checks before connecting too: its transport's dialer is the guard's own.
func TestGuardedDefaultClientChecksBeforeConnecting(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan struct{}, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- struct{}{}
			c.Close()
		}
	}()
	c, tr := guardedClient(&http.Client{Timeout: 5 * time.Second},
		Spec{Service: "svc", OAuth: &OAuthClient{AuthorizationServer: "https://auth.example"}})
	if tr == nil {
		t.Fatal("no guarded transport for a public authorization server")
	}
	defer tr.CloseIdleConnections()
	_, err = c.Get("http://" + ln.Addr().String() + "/token")
	if ErrorCode(err) != CodeEndpointRefused {
		t.Fatalf("a discovered loopback endpoint: %v", err)
	}
	select {
	case <-accepted:
		t.Fatal("the refused request connected before it was refused")
	case <-time.After(100 * time.Millisecond):
	}
}

// TestRefusedUpstreamLoggedOnce: refused metadata is not cached, so every
// view of the connections page meets it again; it is logged once, again
// when the reason changes, and again an hour later while it lasts.
func TestRefusedUpstreamLoggedOnce(t *testing.T) {
	fake, client := publicUpstream(t)
	h := newHarnessWith(t, nil, nil, fake, []Spec{{Service: "forge", Title: "Fake Forge", Mode: ModeUser, Kind: KindOAuth,
		OAuth: &OAuthClient{AuthorizationServer: "https://example.com", ClientID: fake.ClientID, ClientSecret: fake.ClientSecret}}}, client)
	fake.SetMetadata("token_endpoint", "http://example.com/token")
	alice := publicBrowser(t, h, client, "alice", "a")
	lines := func() (refused, unavailable int) {
		return h.logs.FilterMessage("upstream endpoint refused").Len(),
			h.logs.FilterMessage("connections page: upstream authorization server unavailable").Len()
	}
	view := func(n int) {
		for range n {
			if status, _, body := open(t, alice, h.gw.URL+"/connections"); status != http.StatusOK || !strings.Contains(body, "Fake Forge") {
				t.Fatalf("page: %d\n%s", status, body)
			}
		}
	}
	view(5)
	if r, u := lines(); r != 1 || u != 0 {
		t.Fatalf("after 5 views: %d refusals and %d unavailable logged, want 1 and 0", r, u)
	}
	fake.SetMetadata("token_endpoint", "https://10.0.0.7/token")
	view(3)
	if r, _ := lines(); r != 2 {
		t.Fatalf("another reason: %d refusals logged, want 2", r)
	}
	h.clock.add(time.Hour)
	view(3)
	if r, _ := lines(); r != 3 {
		t.Fatalf("an hour later: %d refusals logged, want 3", r)
	}
}
