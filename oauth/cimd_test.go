package oauth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/oauth2"
)

// docServer serves client metadata documents over TLS for the name
// "localhost" with a certificate of its own test CA, as a client's web
// server would.
type docServer struct {
	srv     *httptest.Server
	roots   *x509.CertPool
	base    string   // https://localhost:PORT
	fetches sync.Map // path -> *atomic.Int32
	release chan struct{}
}

func newDocServer(t *testing.T) *docServer {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "client metadata test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	d := &docServer{roots: x509.NewCertPool(), release: make(chan struct{})}
	d.roots.AddCert(cert)
	d.srv = httptest.NewUnstartedServer(http.HandlerFunc(d.serve))
	d.srv.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	d.srv.StartTLS()
	t.Cleanup(func() { close(d.release); d.srv.Close() })
	_, port, _ := net.SplitHostPort(d.srv.Listener.Addr().String())
	d.base = "https://localhost:" + port
	return d
}

func (d *docServer) count(path string) int32 {
	v, _ := d.fetches.LoadOrStore(path, new(atomic.Int32))
	return v.(*atomic.Int32).Load()
}

// document is the metadata of a client at path, edited by mutate.
func (d *docServer) document(path string, mutate func(map[string]any)) map[string]any {
	m := map[string]any{
		"client_id": d.base + path, "client_name": "Doc Client", "client_uri": d.base,
		"redirect_uris":  []string{"http://127.0.0.1:3000/callback", "http://localhost:3000/callback"},
		"grant_types":    []string{"authorization_code", "refresh_token"},
		"response_types": []string{"code"}, "token_endpoint_auth_method": "none",
	}
	if mutate != nil {
		mutate(m)
	}
	return m
}

func (d *docServer) serve(w http.ResponseWriter, r *http.Request) {
	v, _ := d.fetches.LoadOrStore(r.URL.Path, new(atomic.Int32))
	v.(*atomic.Int32).Add(1)
	write := func(doc any, header ...string) {
		w.Header().Set("Content-Type", "application/json")
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		_ = json.NewEncoder(w).Encode(doc)
	}
	switch r.URL.Path {
	case "/client.json", "/second.json":
		write(d.document(r.URL.Path, nil), "Cache-Control", "public, max-age=60")
	case "/no-store.json":
		write(d.document(r.URL.Path, nil), "Cache-Control", "no-store")
	case "/plain.json": // no caching headers
		write(d.document(r.URL.Path, nil))
	case "/other-id.json":
		write(d.document(r.URL.Path, func(m map[string]any) { m["client_id"] = d.base + "/client.json" }))
	case "/bidi-name.json":
		write(d.document(r.URL.Path, func(m map[string]any) { m["client_name"] = "\u202eelgooG" }))
	case "/no-name.json":
		write(d.document(r.URL.Path, func(m map[string]any) { delete(m, "client_name") }))
	case "/no-redirects.json":
		write(d.document(r.URL.Path, func(m map[string]any) { delete(m, "redirect_uris") }))
	case "/secret.json":
		write(d.document(r.URL.Path, func(m map[string]any) { m["client_secret"] = "s3cret" }))
	case "/basic.json":
		write(d.document(r.URL.Path, func(m map[string]any) { m["token_endpoint_auth_method"] = "client_secret_basic" }))
	case "/bad-redirect.json":
		write(d.document(r.URL.Path, func(m map[string]any) { m["redirect_uris"] = []string{"javascript:alert(1)"} }))
	case "/huge.json":
		write(d.document(r.URL.Path, func(m map[string]any) { m["padding"] = strings.Repeat("x", 8<<10) }))
	case "/text.json":
		w.Header().Set("Content-Type", "text/html")
		_ = json.NewEncoder(w).Encode(d.document(r.URL.Path, nil))
	case "/missing.json":
		http.NotFound(w, r)
	case "/to-private.json": // a redirect to an address nobody allowed
		http.Redirect(w, r, strings.Replace(d.base, "localhost", "127.0.0.1", 1)+"/client.json", http.StatusFound)
	case "/to-http.json":
		http.Redirect(w, r, "http://localhost/client.json", http.StatusFound)
	case "/moved.json": // a redirect within the allowed host
		http.Redirect(w, r, "/moved-target.json", http.StatusFound)
	case "/moved-target.json":
		write(d.document("/moved.json", nil))
	case "/slow.json":
		select { // never answers before the fetch timeout; released at cleanup
		case <-r.Context().Done():
		case <-d.release:
		}
	default:
		http.NotFound(w, r)
	}
}

func newDocAS(t *testing.T, d *docServer, mutate func(*ServerConfig)) *asEnv {
	return newAS(t, func(c *ServerConfig) {
		c.Consent.Enabled = false // a document's client gets the consent screen anyway
		c.ClientIDMetadata = ClientIDMetadataConfig{Enabled: true, AllowedPrivateHosts: []string{"localhost"},
			RootCAs: d.roots, FetchTimeout: 1, MaxDocumentBytes: 4096}
		if mutate != nil {
			mutate(c)
		}
	})
}

func docAuthQuery(clientID, redirect, verifier string) url.Values {
	q := authQuery(verifier)
	q.Set("client_id", clientID)
	q.Set("redirect_uri", redirect)
	return q
}

// TestClientIDMetadataDocumentFlow: a client whose client_id is the URL of
// its metadata document signs in (with a loopback redirect URI on a port
// the document does not list), sees the consent page with its name, the
// document's host marked unverified and the local-redirect warning,
// exchanges the code, refreshes and calls the resource.
func TestClientIDMetadataDocumentFlow(t *testing.T) {
	d := newDocServer(t)
	e := newDocAS(t, d, nil)
	if !e.s.Metadata(false).ClientIDMetadataDocumentSupported {
		t.Fatal("metadata does not advertise client_id_metadata_document_supported")
	}
	clientID := d.base + "/client.json"
	redirect := "http://127.0.0.1:49152/callback" // the document lists port 3000
	v := oauth2.GenerateVerifier()
	q := docAuthQuery(clientID, redirect, v)
	q.Set("resource", asResource)
	loginURL := location(t, e.get(e.srv.URL+"/oauth/authorize?"+q.Encode()), http.StatusFound)
	page := body(t, e.get(e.srv.URL+loginURL.RequestURI()))
	if !strings.Contains(page, "Doc Client") || !strings.Contains(page, "unverified") {
		t.Fatalf("login page does not show the client's unverified name: %s", page)
	}
	id, csrf := hidden(t, page)
	next := location(t, e.postForm(e.srv.URL+"/oauth/login", url.Values{"id": {id}, "csrf": {csrf}, "username": {asUser}, "password": {asPassword}}), http.StatusSeeOther)
	if next.Path != "/oauth/consent" {
		t.Fatalf("a document's client skipped the consent screen: %s", next)
	}
	page = body(t, e.get(e.srv.URL+next.RequestURI()))
	host := strings.TrimPrefix(d.base, "https://")
	for _, want := range []string{`<strong id="client">Doc Client</strong>`, `<code id="client-host">` + host + `</code>`, "<strong>unverified</strong>",
		`<strong id="redirect-host">127.0.0.1</strong>`, `id="local-warning"`} {
		if !strings.Contains(page, want) {
			t.Errorf("consent page lacks %s: %s", want, page)
		}
	}
	id, csrf = hidden(t, page)
	next = location(t, e.postForm(e.srv.URL+"/oauth/consent", url.Values{"id": {id}, "csrf": {csrf}, "decision": {"approve"}}), http.StatusSeeOther)
	back := location(t, e.get(e.srv.URL+next.RequestURI()), http.StatusFound)
	if !strings.HasPrefix(back.String(), redirect+"?") || back.Query().Get("code") == "" {
		t.Fatalf("callback %s", back)
	}
	cfg := &oauth2.Config{ClientID: clientID, RedirectURL: redirect, Endpoint: oauth2.Endpoint{TokenURL: e.srv.URL + "/oauth/token", AuthStyle: oauth2.AuthStyleInParams}}
	tok, err := cfg.Exchange(e.ctx(), back.Query().Get("code"), oauth2.VerifierOption(v))
	if err != nil {
		t.Fatalf("code exchange of a document's client: %v", err)
	}
	fresh, err := cfg.TokenSource(e.ctx(), &oauth2.Token{RefreshToken: tok.RefreshToken}).Token()
	if err != nil || fresh.RefreshToken == tok.RefreshToken {
		t.Fatalf("refresh: %v", err)
	}
	c, err := e.s.VerifyAccessToken(e.ctx(), fresh.AccessToken, asResource)
	if err != nil || c.ClientID != clientID {
		t.Fatalf("access token: %+v %v", c, err)
	}
	// One fetch for the whole flow: the document said max-age=60.
	if n := d.count("/client.json"); n != 1 {
		t.Errorf("document fetched %d times, want 1 (cached for max-age)", n)
	}
	// A secret is never accepted from a document's client.
	status, code, _ := e.postToken(url.Values{"grant_type": {"refresh_token"}, "refresh_token": {fresh.RefreshToken}, "client_id": {clientID}, "client_secret": {"x"}}, "", "")
	if status != 401 || code != "invalid_client" {
		t.Fatalf("document client with a secret: %d %s", status, code)
	}
}

// TestClientIDMetadataDocumentRefusals: what the draft and MCP forbid is
// refused at the authorization endpoint with a 400 naming the reason, and
// never redirected to the (unverified) redirect URI.
func TestClientIDMetadataDocumentRefusals(t *testing.T) {
	d := newDocServer(t)
	e := newDocAS(t, d, nil)
	v := oauth2.GenerateVerifier()
	redirect := "http://127.0.0.1:3000/callback"
	private := strings.Replace(d.base, "localhost", "127.0.0.1", 1)
	cases := []struct {
		name, clientID, redirect, want string
		fetched                        bool // the server fetched the document
	}{
		{"client_id differs from the URL", d.base + "/other-id.json", redirect, "is not its URL", true},
		{"no client_name", d.base + "/no-name.json", redirect, "client_name", true},
		{"client_name with a bidi override", d.base + "/bidi-name.json", redirect, "bidirectional formatting character U+202E", true},
		{"no redirect_uris", d.base + "/no-redirects.json", redirect, "redirect_uris", true},
		{"a client secret", d.base + "/secret.json", redirect, "client_secret", true},
		{"shared-secret authentication", d.base + "/basic.json", redirect, "token_endpoint_auth_method", true},
		{"forbidden redirect URI scheme", d.base + "/bad-redirect.json", redirect, "not allowed", true},
		{"larger than the limit", d.base + "/huge.json", redirect, "larger than 4096 bytes", true},
		{"not JSON", d.base + "/text.json", redirect, "not JSON", true},
		{"not found", d.base + "/missing.json", redirect, "answered 404", true},
		{"redirect to a private address", d.base + "/to-private.json", redirect, "loopback, private or link-local", true},
		{"redirect to http", d.base + "/to-http.json", redirect, "not https", true},
		{"slower than the fetch timeout", d.base + "/slow.json", redirect, "fetching the client metadata document", true},
		{"a private address nobody allowed", private + "/client.json", redirect, "loopback, private or link-local", false},
		{"http URL", strings.Replace(d.base, "https", "http", 1) + "/client.json", redirect, "unknown client_id", false},
		{"no path", d.base + "/", redirect, "must have a path", false},
		{"dot segment", d.base + "/a/../client.json", redirect, "dot segments", false},
		{"user information", "https://user@" + strings.TrimPrefix(d.base, "https://") + "/client.json", redirect, "user information", false},
		{"redirect URI not in the document", d.base + "/second.json", "http://127.0.0.1:3000/other", "redirect_uri is missing or not registered", true},
		// /second.json is cached from the case above: no fetch.
		{"another port on localhost (only loopback IPs take any port)", d.base + "/second.json", "http://localhost:4000/callback", "redirect_uri is missing or not registered", false},
		{"another loopback address", d.base + "/second.json", "http://127.0.0.2:3000/callback", "redirect_uri is missing or not registered", false},
		// Any port, but nothing else differs: no fragment (RFC 6749
		// section 3.1.2), no user information, no other path or query.
		{"a fragment on another port", d.base + "/second.json", "http://127.0.0.1:4000/callback#x", "redirect_uri is missing or not registered", false},
		{"an empty fragment on another port", d.base + "/second.json", "http://127.0.0.1:4000/callback#", "redirect_uri is missing or not registered", false},
		{"a query on another port", d.base + "/second.json", "http://127.0.0.1:4000/callback?a=1", "redirect_uri is missing or not registered", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := "/" + strings.SplitN(strings.TrimPrefix(strings.TrimPrefix(tc.clientID, "https://"), "http://"), "/", 2)[1]
			before := d.count(path)
			resp := e.get(e.srv.URL + "/oauth/authorize?" + docAuthQuery(tc.clientID, tc.redirect, v).Encode())
			b := body(t, resp)
			if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Location") != "" || !strings.Contains(b, tc.want) {
				t.Fatalf("%d %q %s, want 400 naming %q", resp.StatusCode, resp.Header.Get("Location"), b, tc.want)
			}
			if fetched := d.count(path) > before; fetched != tc.fetched && !strings.Contains(tc.name, "private address nobody") {
				t.Errorf("fetched %v, want %v", fetched, tc.fetched)
			}
		})
	}
	// A refused document is remembered for DocumentErrorTTL: one fetch.
	before := d.count("/missing.json")
	for range 3 {
		body(t, e.get(e.srv.URL+"/oauth/authorize?"+docAuthQuery(d.base+"/missing.json", redirect, v).Encode()))
	}
	if n := d.count("/missing.json") - before; n != 0 {
		t.Errorf("a refused document was fetched %d more times within %v", n, DocumentErrorTTL)
	}
	e.clock.Add(DocumentErrorTTL + time.Second)
	body(t, e.get(e.srv.URL+"/oauth/authorize?"+docAuthQuery(d.base+"/missing.json", redirect, v).Encode()))
	if n := d.count("/missing.json") - before; n != 1 {
		t.Errorf("after %v a refused document was fetched %d times, want 1", DocumentErrorTTL, n)
	}
	// A redirect within an allowed host is followed, and the document's
	// client_id must still be the URL it was asked for.
	resp := e.get(e.srv.URL + "/oauth/authorize?" + docAuthQuery(d.base+"/moved.json", redirect, v).Encode())
	if resp.StatusCode != http.StatusFound {
		t.Errorf("a moved document: %d %s", resp.StatusCode, body(t, resp))
	}
}

// TestClientIDMetadataDocumentCaching: documents are kept as their HTTP
// caching headers say, within the configured cap.
func TestClientIDMetadataDocumentCaching(t *testing.T) {
	d := newDocServer(t)
	e := newDocAS(t, d, func(c *ServerConfig) { c.ClientIDMetadata.MaxCacheTTL = 600 })
	lookups := func(path string, n int) int32 {
		t.Helper()
		before := d.count(path)
		for range n {
			if _, err := e.s.client(e.ctx(), d.base+path); err != nil {
				t.Fatal(err)
			}
		}
		return d.count(path) - before
	}
	if n := lookups("/client.json", 5); n != 1 {
		t.Errorf("max-age=60: %d fetches for 5 lookups, want 1", n)
	}
	e.clock.Add(61 * time.Second)
	if n := lookups("/client.json", 2); n != 1 {
		t.Errorf("max-age=60, 61 s later: %d fetches, want 1", n)
	}
	if n := lookups("/no-store.json", 3); n != 3 {
		t.Errorf("no-store: %d fetches for 3 lookups, want 3", n)
	}
	if n := lookups("/plain.json", 3); n != 1 {
		t.Errorf("no caching headers: %d fetches, want 1", n)
	}
	e.clock.Add(DocumentCacheTTL - time.Second)
	if n := lookups("/plain.json", 1); n != 0 {
		t.Errorf("no caching headers, within %v: %d fetches", DocumentCacheTTL, n)
	}
	e.clock.Add(2 * time.Second)
	if n := lookups("/plain.json", 1); n != 1 {
		t.Errorf("no caching headers, after %v: %d fetches", DocumentCacheTTL, n)
	}
	for hdr, want := range map[string]time.Duration{
		"max-age=3600":           600 * time.Second, // capped
		"max-age=30":             30 * time.Second,
		"no-cache":               0,
		"private, max-age=10":    10 * time.Second,
		"max-age=-1":             DocumentCacheTTL,
		"public, max-age=\"45\"": 45 * time.Second,
	} {
		if got := e.s.docs.cacheTTL(http.Header{"Cache-Control": {hdr}}); got != want {
			t.Errorf("Cache-Control %q: %v, want %v", hdr, got, want)
		}
	}
	h := http.Header{"Cache-Control": {"max-age=100"}, "Age": {"40"}}
	if got := e.s.docs.cacheTTL(h); got != 60*time.Second {
		t.Errorf("max-age=100 with Age 40: %v", got)
	}
	h = http.Header{"Expires": {e.clock.Now().Add(90 * time.Second).UTC().Format(http.TimeFormat)}}
	if got := e.s.docs.cacheTTL(h); got < 89*time.Second || got > 90*time.Second {
		t.Errorf("Expires in 90 s: %v", got)
	}
	if got := e.s.docs.cacheTTL(http.Header{"Expires": {"0"}}); got != 0 {
		t.Errorf("invalid Expires: %v", got)
	}
}

func TestForbiddenAddresses(t *testing.T) {
	for _, a := range []string{"127.0.0.1", "::1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254", "fe80::1",
		"fc00::1", "100.64.0.1", "0.0.0.0", "::", "224.0.0.1", "::ffff:127.0.0.1", "::ffff:10.0.0.1"} {
		if !forbiddenAddress(mustAddr(t, a)) {
			t.Errorf("%s is allowed", a)
		}
	}
	for _, a := range []string{"8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "93.184.216.34"} {
		if forbiddenAddress(mustAddr(t, a)) {
			t.Errorf("%s is forbidden", a)
		}
	}
}

func mustAddr(t *testing.T, s string) netip.Addr {
	t.Helper()
	a, err := netip.ParseAddr(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
