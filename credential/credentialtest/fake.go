// Package credentialtest is a fake upstream for tests: an OAuth 2.1
// authorization server (metadata, authorize, token with refresh rotation,
// revocation), an HTTP API described by an OpenAPI document, and an MCP
// server, all of which record the credentials they receive.
package credentialtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Fake is the fake upstream.
type Fake struct {
	*httptest.Server
	// ClientID and ClientSecret are the gateway's registration here.
	ClientID, ClientSecret string
	// APIKeys maps an API key to its account (the api_key flavour).
	APIKeys map[string]string

	mu sync.Mutex
	// TokenTTL is the lifetime of access tokens issued from now on.
	tokenTTL  time.Duration
	codes     map[string]code
	access    map[string]grantToken
	refresh   map[string]grantToken
	families  map[string]bool // revoked families
	seen      []Seen
	refreshes int
	revoked   []string
	redirects []string
	// meta and resourceMeta replace keys of the metadata documents.
	meta, resourceMeta map[string]any
	tokenRequests      int
	// clients are the clients registered at /register (RFC 7591), by id;
	// registrations their requests' bodies.
	clients       map[string]Registered
	registrations []map[string]any
	// authorizations are the query strings /authorize received.
	authorizations []url.Values
	// challengeScope is the scope of the MCP server's 401, "" for none.
	challengeScope string
	// secretExpiry are the client_secret_expires_at of the next
	// registrations with a secret, in turn; the last one stays.
	secretExpiry []time.Time
	// metadataStatus, when not 0, is the answer of every metadata
	// document (RFC 8414 and RFC 9728) instead of the document.
	metadataStatus int
	// rootResource: the RFC 9728 document is at the root well-known URI,
	// naming the origin, and not at the path-based one.
	rootResource bool
}

// Registered is a client registered at the fake.
type Registered struct {
	ID, Secret, Method string
}

// Seen is one credential the API or MCP server received.
type Seen struct {
	Path       string
	Credential string // the raw Authorization / X-API-Key / api_key value
	Account    string // "" when the credential was not valid
}

type code struct {
	account, challenge, redirect, clientID, resource string
	expires                                          time.Time
}

type grantToken struct {
	account, family string
	expires         time.Time
	used            bool
}

// New starts a fake upstream over http.
func New() *Fake {
	f := newFake()
	f.Start()
	return f
}

// NewTLS starts a fake upstream over https, with httptest's certificate
// (valid for 127.0.0.1 and example.com; f.Client() trusts it).
func NewTLS() *Fake {
	f := newFake()
	f.StartTLS()
	return f
}

func newFake() *Fake {
	f := &Fake{ClientID: "gateway-client", ClientSecret: "gateway-secret", tokenTTL: time.Hour,
		codes: map[string]code{}, access: map[string]grantToken{}, refresh: map[string]grantToken{}, families: map[string]bool{},
		APIKeys: map[string]string{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/oauth-authorization-server", f.metadata)
	mux.HandleFunc("GET /.well-known/oauth-protected-resource/mcp", f.resourceMetadata)
	mux.HandleFunc("GET /.well-known/oauth-protected-resource", f.resourceMetadata)
	mux.HandleFunc("GET /login", f.login)
	mux.HandleFunc("GET /authorize", f.authorize)
	mux.HandleFunc("POST /token", f.token)
	mux.HandleFunc("POST /revoke", f.revoke)
	mux.HandleFunc("POST /register", f.register)
	mux.HandleFunc("GET /openapi.json", f.openapi)
	mux.HandleFunc("GET /api/whoami", f.whoami)
	mux.HandleFunc("GET /api/key/whoami", f.keyWhoami)
	mux.Handle("/mcp", f.challenged(f.mcpHandler()))
	f.Server = httptest.NewUnstartedServer(mux)
	return f
}

// SetMetadata sets key of the authorization server metadata document
// (RFC 8414) to value; nil removes it. The default document names the
// fake's own URL for every endpoint.
func (f *Fake) SetMetadata(key string, value any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.meta == nil {
		f.meta = map[string]any{}
	}
	f.meta[key] = value
}

// SetResourceMetadata sets key of the MCP server's protected resource
// metadata document (RFC 9728) to value; nil removes it.
func (f *Fake) SetResourceMetadata(key string, value any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.resourceMeta == nil {
		f.resourceMeta = map[string]any{}
	}
	f.resourceMeta[key] = value
}

// EnableRegistration advertises the fake's /register (RFC 7591) in its
// metadata, with methods as token_endpoint_auth_methods_supported (none
// given: the key is left out). A registration gets the method the request
// asks for when it is among methods (or methods is empty), else the
// first of methods, and a secret unless that method is none.
func (f *Fake) EnableRegistration(methods ...string) {
	f.SetMetadata("registration_endpoint", f.URL+"/register")
	if len(methods) > 0 {
		f.SetMetadata("token_endpoint_auth_methods_supported", methods)
	}
}

// SetSecretExpiry makes the next registrations that get a secret answer
// client_secret_expires_at: the first the first time, and so on, the last
// for every one after it.
func (f *Fake) SetSecretExpiry(at ...time.Time) {
	f.mu.Lock()
	f.secretExpiry = at
	f.mu.Unlock()
}

// SetMetadataStatus makes every metadata document (the authorization
// server's and the MCP server's) answer status with no document; 0 serves
// them again. 404 is a server that publishes none (the 2025-03-26
// revision's server without metadata).
func (f *Fake) SetMetadataStatus(status int) {
	f.mu.Lock()
	f.metadataStatus = status
	f.mu.Unlock()
}

// SetResourceMetadataAtRoot moves the MCP server's protected resource
// metadata to the root well-known URI, naming the origin (f.URL) as the
// resource; the path-based URI then answers 404.
func (f *Fake) SetResourceMetadataAtRoot() {
	f.mu.Lock()
	f.rootResource = true
	f.mu.Unlock()
}

// AllowClient makes id a public client of the fake (no secret, PKCE), as
// a server that took id as a Client ID Metadata Document URL would.
func (f *Fake) AllowClient(id string) {
	f.mu.Lock()
	if f.clients == nil {
		f.clients = map[string]Registered{}
	}
	f.clients[id] = Registered{ID: id, Method: "none"}
	f.mu.Unlock()
}

// ForgetClients deletes every registered client, as a server that expired
// or revoked them: their token requests get invalid_client.
func (f *Fake) ForgetClients() {
	f.mu.Lock()
	clear(f.clients)
	f.mu.Unlock()
}

// Registrations returns the bodies of the registration requests received.
func (f *Fake) Registrations() []map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]map[string]any(nil), f.registrations...)
}

// Clients returns the clients registered, in no order.
func (f *Fake) Clients() []Registered {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]Registered, 0, len(f.clients))
	for _, c := range f.clients {
		out = append(out, c)
	}
	return out
}

// Authorizations returns the query strings of the authorization requests
// received.
func (f *Fake) Authorizations() []url.Values {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]url.Values(nil), f.authorizations...)
}

// SetChallengeScope makes the MCP server's 401 to a request without a
// token name scope in its WWW-Authenticate challenge ("" for none).
func (f *Fake) SetChallengeScope(scope string) {
	f.mu.Lock()
	f.challengeScope = scope
	f.mu.Unlock()
}

func (f *Fake) challenged(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		scope := f.challengeScope
		f.mu.Unlock()
		if scope != "" && r.Header.Get("Authorization") == "" {
			w.Header().Set("WWW-Authenticate", `Bearer resource_metadata="`+f.URL+`/.well-known/oauth-protected-resource/mcp", scope="`+scope+`"`)
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "invalid_token"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (f *Fake) register(w http.ResponseWriter, r *http.Request) {
	var body map[string]any
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_client_metadata"})
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.registrations = append(f.registrations, body)
	var methods []string
	if m, ok := f.meta["token_endpoint_auth_methods_supported"].([]string); ok {
		methods = m
	}
	method, _ := body["token_endpoint_auth_method"].(string)
	if len(methods) > 0 && !contains(methods, method) {
		method = methods[0]
	}
	if method == "" {
		method = "client_secret_basic"
	}
	c := Registered{ID: random("client-"), Method: method}
	if method != "none" {
		c.Secret = random("secret-")
	}
	if f.clients == nil {
		f.clients = map[string]Registered{}
	}
	f.clients[c.ID] = c
	ans := map[string]any{"client_id": c.ID, "token_endpoint_auth_method": method, "redirect_uris": body["redirect_uris"]}
	if c.Secret != "" {
		ans["client_secret"] = c.Secret
		if n := len(f.secretExpiry); n > 0 {
			ans["client_secret_expires_at"] = f.secretExpiry[0].Unix()
			if n > 1 {
				f.secretExpiry = f.secretExpiry[1:]
			}
		}
	}
	writeJSON(w, http.StatusCreated, ans)
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

// TokenRequests counts the requests the token endpoint received.
func (f *Fake) TokenRequests() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.tokenRequests
}

func (f *Fake) override(doc map[string]any, resource bool) map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	with := f.meta
	if resource {
		with = f.resourceMeta
	}
	for k, v := range with {
		if v == nil {
			delete(doc, k)
		} else {
			doc[k] = v
		}
	}
	return doc
}

// SetTokenTTL sets the lifetime of access tokens issued from now on.
func (f *Fake) SetTokenTTL(d time.Duration) {
	f.mu.Lock()
	f.tokenTTL = d
	f.mu.Unlock()
}

// Seen returns every credential received so far.
func (f *Fake) Seen() []Seen {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Seen(nil), f.seen...)
}

// Refreshes counts refresh-token grants that succeeded.
func (f *Fake) Refreshes() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.refreshes
}

// Revoked lists the tokens revoked at /revoke.
func (f *Fake) Revoked() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.revoked...)
}

// RedirectURIs lists the redirect URIs /authorize was asked for.
func (f *Fake) RedirectURIs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.redirects...)
}

// AccessTokens returns the live access tokens of account.
func (f *Fake) AccessTokens(account string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for t, g := range f.access {
		if g.account == account && !f.families[g.family] {
			out = append(out, t)
		}
	}
	return out
}

// Tokens returns every access and refresh token ever issued (to grep
// outputs for them).
func (f *Fake) Tokens() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for t := range f.access {
		out = append(out, t)
	}
	for t := range f.refresh {
		out = append(out, t)
	}
	return out
}

func random(prefix string) string {
	b := make([]byte, 18)
	_, _ = rand.Read(b)
	return prefix + base64.RawURLEncoding.EncodeToString(b)
}

func (f *Fake) metadata(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	status := f.metadataStatus
	f.mu.Unlock()
	if status != 0 {
		http.Error(w, http.StatusText(status), status)
		return
	}
	writeJSON(w, http.StatusOK, f.override(map[string]any{
		"issuer": f.URL, "authorization_endpoint": f.URL + "/authorize", "token_endpoint": f.URL + "/token",
		"revocation_endpoint": f.URL + "/revoke", "code_challenge_methods_supported": []string{"S256"},
		"response_types_supported": []string{"code"}, "grant_types_supported": []string{"authorization_code", "refresh_token"},
		"authorization_response_iss_parameter_supported": true,
	}, false))
}

func (f *Fake) resourceMetadata(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	status, root := f.metadataStatus, f.rootResource
	f.mu.Unlock()
	atRoot := r.URL.Path == "/.well-known/oauth-protected-resource"
	if status == 0 && atRoot != root {
		status = http.StatusNotFound
	}
	if status != 0 {
		http.Error(w, http.StatusText(status), status)
		return
	}
	resource := f.URL + "/mcp"
	if root {
		resource = f.URL
	}
	writeJSON(w, http.StatusOK, f.override(map[string]any{"resource": resource, "authorization_servers": []string{f.URL}}, true))
}

// login signs a browser in at the fake (a cookie naming the account), as
// if the user were already signed in at the real service.
func (f *Fake) login(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: "account", Value: r.URL.Query().Get("account"), Path: "/"})
	w.Header().Set("Content-Type", "text/html")
	fmt.Fprintf(w, "<!doctype html><p id=signed-in>signed in at the fake upstream as %s</p>", template(r.URL.Query().Get("account")))
}

func template(s string) string {
	return strings.NewReplacer("<", "&lt;", ">", "&gt;", "&", "&amp;").Replace(s)
}

func (f *Fake) authorize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f.mu.Lock()
	f.redirects = append(f.redirects, q.Get("redirect_uri"))
	f.authorizations = append(f.authorizations, q)
	_, registered := f.clients[q.Get("client_id")]
	f.mu.Unlock()
	if q.Get("client_id") != f.ClientID && !registered || q.Get("response_type") != "code" || q.Get("code_challenge_method") != "S256" ||
		len(q.Get("code_challenge")) != 43 || q.Get("state") == "" || q.Get("redirect_uri") == "" {
		http.Error(w, "bad authorization request", http.StatusBadRequest)
		return
	}
	c, err := r.Cookie("account")
	if err != nil || c.Value == "" {
		http.Error(w, "not signed in at the fake upstream", http.StatusUnauthorized)
		return
	}
	if q.Get("deny") != "" {
		http.Redirect(w, r, q.Get("redirect_uri")+"?error=access_denied&state="+url.QueryEscape(q.Get("state")), http.StatusFound)
		return
	}
	cd := random("code-")
	f.mu.Lock()
	f.codes[cd] = code{account: c.Value, challenge: q.Get("code_challenge"), redirect: q.Get("redirect_uri"), clientID: q.Get("client_id"),
		resource: q.Get("resource"), expires: time.Now().Add(time.Minute)}
	f.mu.Unlock()
	f.mu.Lock()
	iss, ok := f.meta["issuer"].(string) // the issuer it says it is
	f.mu.Unlock()
	if !ok {
		iss = f.URL
	}
	v := url.Values{"code": {cd}, "state": {q.Get("state")}, "iss": {iss}}
	if q.Get("no_iss") != "" { // a mix-up attacker's answer, or a server that lost it
		v.Del("iss")
	}
	http.Redirect(w, r, q.Get("redirect_uri")+"?"+v.Encode(), http.StatusFound)
}

// clientOK checks the client's authentication: the configured client by
// HTTP Basic (or client_id alone when it has no secret), a registered one
// by the method it registered with, and nothing else.
func (f *Fake) clientOK(r *http.Request) bool {
	id, secret, basic := r.BasicAuth()
	if basic {
		id, _ = url.QueryUnescape(id)
		secret, _ = url.QueryUnescape(secret)
	}
	f.mu.Lock()
	c, registered := f.clients[r.PostForm.Get("client_id")]
	if basic {
		c, registered = f.clients[id]
	}
	f.mu.Unlock()
	switch {
	case registered && c.Method == "client_secret_basic":
		return basic && secret == c.Secret && r.PostForm.Get("client_secret") == ""
	case registered && c.Method == "client_secret_post":
		return !basic && r.PostForm.Get("client_secret") == c.Secret
	case registered:
		return !basic && r.PostForm.Get("client_secret") == ""
	case basic:
		return id == f.ClientID && secret == f.ClientSecret
	}
	return r.PostForm.Get("client_id") == f.ClientID && f.ClientSecret == ""
}

func (f *Fake) issue(account, family string) map[string]any {
	at, rt := random("at-"+account+"-"), random("rt-"+account+"-")
	exp := time.Now().Add(f.tokenTTL)
	f.access[at] = grantToken{account: account, family: family, expires: exp}
	f.refresh[rt] = grantToken{account: account, family: family, expires: time.Now().Add(24 * time.Hour)}
	return map[string]any{"access_token": at, "token_type": "Bearer", "expires_in": int(f.tokenTTL / time.Second),
		"refresh_token": rt, "scope": "read"}
}

func (f *Fake) token(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.tokenRequests++
	f.mu.Unlock()
	if err := r.ParseForm(); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_request"})
		return
	}
	if !f.clientOK(r) {
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "invalid_client"})
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch r.PostForm.Get("grant_type") {
	case "authorization_code":
		c, ok := f.codes[r.PostForm.Get("code")]
		delete(f.codes, r.PostForm.Get("code"))
		sum := sha256.Sum256([]byte(r.PostForm.Get("code_verifier")))
		if !ok || time.Now().After(c.expires) || c.redirect != r.PostForm.Get("redirect_uri") ||
			base64.RawURLEncoding.EncodeToString(sum[:]) != c.challenge || c.resource != r.PostForm.Get("resource") {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_grant"})
			return
		}
		writeJSON(w, http.StatusOK, f.issue(c.account, random("family-")))
	case "refresh_token":
		rt := r.PostForm.Get("refresh_token")
		g, ok := f.refresh[rt]
		if !ok || f.families[g.family] || time.Now().After(g.expires) {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_grant"})
			return
		}
		if g.used { // reuse of a rotated token: the family is revoked
			f.families[g.family] = true
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_grant", "error_description": "refresh token reused"})
			return
		}
		g.used = true
		f.refresh[rt] = g
		f.refreshes++
		writeJSON(w, http.StatusOK, f.issue(g.account, g.family))
	default:
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "unsupported_grant_type"})
	}
}

func (f *Fake) revoke(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil || !f.clientOK(r) {
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "invalid_client"})
		return
	}
	t := r.PostForm.Get("token")
	f.mu.Lock()
	f.revoked = append(f.revoked, t)
	if g, ok := f.refresh[t]; ok {
		f.families[g.family] = true
	}
	if g, ok := f.access[t]; ok {
		g.expires = time.Time{}
		f.access[t] = g
	}
	f.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

// accountOf validates a bearer token.
func (f *Fake) accountOf(token string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	g, ok := f.access[token]
	if !ok || f.families[g.family] || time.Now().After(g.expires) {
		return ""
	}
	return g.account
}

func (f *Fake) record(path, cred, account string) {
	f.mu.Lock()
	f.seen = append(f.seen, Seen{Path: path, Credential: cred, Account: account})
	f.mu.Unlock()
}

func (f *Fake) whoami(w http.ResponseWriter, r *http.Request) {
	h := r.Header.Get("Authorization")
	account := ""
	if t, ok := strings.CutPrefix(h, "Bearer "); ok {
		account = f.accountOf(t)
	}
	f.record(r.URL.Path, h, account)
	if account == "" {
		w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
		writeJSON(w, http.StatusUnauthorized, map[string]string{"message": "bad credentials"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"account": account})
}

func (f *Fake) keyWhoami(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("X-API-Key")
	if key == "" {
		key = r.URL.Query().Get("api_key")
	}
	f.mu.Lock()
	account := f.APIKeys[key]
	f.mu.Unlock()
	f.record(r.URL.Path, key, account)
	if account == "" {
		writeJSON(w, http.StatusUnauthorized, map[string]string{"message": "bad key"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"account": account})
}

// AddAPIKey registers an API key for account.
func (f *Fake) AddAPIKey(key, account string) {
	f.mu.Lock()
	f.APIKeys[key] = account
	f.mu.Unlock()
}

func (f *Fake) openapi(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"openapi": "3.0.3",
		"info":    map[string]any{"title": "fake forge", "version": "1"},
		"servers": []any{map[string]any{"url": f.URL}},
		"paths": map[string]any{
			"/api/whoami": map[string]any{"get": map[string]any{"operationId": "whoami", "summary": "The account the credential belongs to",
				"responses": map[string]any{"200": map[string]any{"description": "ok", "content": map[string]any{"application/json": map[string]any{
					"schema": map[string]any{"type": "object", "properties": map[string]any{"account": map[string]any{"type": "string"}}}}}}}}},
			"/api/key/whoami": map[string]any{"get": map[string]any{"operationId": "keyWhoami", "summary": "The account the API key belongs to",
				"responses": map[string]any{"200": map[string]any{"description": "ok"}}}},
		},
	})
}

// mcpHandler is an MCP server whose whoami tool answers the account of the
// bearer token that reached it.
func (f *Fake) mcpHandler() http.Handler {
	srv := mcp.NewServer(&mcp.Implementation{Name: "fake-upstream", Version: "1"}, nil)
	type empty struct{}
	type who struct {
		Account string `json:"account"`
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "whoami", Description: "The account of the caller's token"},
		func(_ context.Context, req *mcp.CallToolRequest, _ empty) (*mcp.CallToolResult, who, error) {
			return nil, who{Account: req.Extra.TokenInfo.UserID}, nil
		})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	verify := func(_ context.Context, token string, r *http.Request) (*auth.TokenInfo, error) {
		account := f.accountOf(token)
		f.record("/mcp", "Bearer "+token, account)
		if account == "" {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{UserID: account, Expiration: time.Now().Add(time.Hour)}, nil
	}
	return auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{ResourceMetadataURL: "/.well-known/oauth-protected-resource/mcp"})(h)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// IssueToken issues an access token for account directly (tests that do
// not run the OAuth flow).
func (f *Fake) IssueToken(account string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.issue(account, random("family-"))["access_token"].(string)
}
