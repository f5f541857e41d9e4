package credential

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/codemode-gateway/caddy-codemode/internal/clip"
)

// metadataTTL is how long discovered authorization server metadata is
// kept before it is read again.
const metadataTTL = time.Hour

// maxTokenResponse caps what is read from an authorization server.
const maxTokenResponse = 1 << 20

// asMetadata is the part of RFC 8414 metadata the connect flow uses.
type asMetadata struct {
	Issuer                        string   `json:"issuer"`
	AuthorizationEndpoint         string   `json:"authorization_endpoint"`
	TokenEndpoint                 string   `json:"token_endpoint"`
	RevocationEndpoint            string   `json:"revocation_endpoint,omitempty"`
	CodeChallengeMethodsSupported []string `json:"code_challenge_methods_supported,omitempty"`
	// IssParameterSupported: the server names itself in every
	// authorization response (RFC 9207), so an answer without iss is not
	// its own.
	IssParameterSupported bool `json:"authorization_response_iss_parameter_supported,omitempty"`
	// RegistrationEndpoint is where a gateway without a configured
	// client_id registers one (RFC 7591), with a token endpoint method
	// among TokenEndpointAuthMethods (registration.go).
	RegistrationEndpoint     string   `json:"registration_endpoint,omitempty"`
	TokenEndpointAuthMethods []string `json:"token_endpoint_auth_methods_supported,omitempty"`
	// CIMDSupported: the server takes an https URL of a client metadata
	// document as client_id (a Client ID Metadata Document), which the
	// gateway uses instead of registering when it publishes one
	// (Options.ClientMetadataURL, registration.go).
	CIMDSupported bool `json:"client_id_metadata_document_supported,omitempty"`
	// resourceScopes are the scopes an MCP server asks for: the scope of
	// its 401's challenge, else its RFC 9728 document's scopes_supported
	// (the MCP authorization spec's scope selection), requested when the
	// operator configured none.
	resourceScopes []string
	// resource is the resource identifier the MCP server's RFC 9728
	// document names, sent as the RFC 8707 resource indicator exactly as
	// published (Manager.resource); "" without a document.
	resource string
	// endpointFallback: no metadata exists at all, and the endpoints are
	// the 2025-03-26 revision's defaults at the MCP server's origin
	// (fallbackEndpoints).
	endpointFallback bool
	// issuerConfigured: Issuer is the operator's authorization_server, no
	// metadata document's (every endpoint configured).
	issuerConfigured bool
}

// endpoints returns the upstream's authorization, token and revocation
// endpoints: configured ones win, the rest come from metadata discovered
// (and cached) from the authorization server, or from the MCP server's
// protected resource metadata (RFC 9728) when no server is named.
func (m *Manager) endpoints(ctx context.Context, st *specState) (asMetadata, error) {
	o := st.spec.OAuth
	conf := asMetadata{AuthorizationEndpoint: o.AuthorizationEndpoint, TokenEndpoint: o.TokenEndpoint, RevocationEndpoint: o.RevocationEndpoint}
	if conf.AuthorizationEndpoint != "" && conf.TokenEndpoint != "" && (conf.RevocationEndpoint != "" || o.AuthorizationServer == "") {
		conf.Issuer = o.AuthorizationServer // what an iss in an answer must name
		conf.issuerConfigured = true
		return conf, nil
	}
	st.mu.Lock()
	if !st.metaAt.IsZero() && m.now().Sub(st.metaAt) < metadataTTL {
		meta := st.meta
		st.mu.Unlock()
		return merge(conf, meta), nil
	}
	st.mu.Unlock()

	meta, err := m.discoverFor(ctx, st)
	if err != nil {
		if ErrorCode(err) == CodeEndpointRefused {
			m.logRefused(st, err)
		}
		return asMetadata{}, err
	}
	st.mu.Lock()
	st.meta, st.metaAt = meta, m.now()
	st.mu.Unlock()
	return merge(conf, meta), nil
}

// upstreamLogEvery is how often the same trouble with an upstream (the
// same message and error) is logged again while it lasts.
const upstreamLogEvery = time.Hour

// upstreamWarn logs trouble with st's upstream that every page view or
// call meets while it lasts (metadata refused or unreachable, not cached):
// once, then again when the error changes or upstreamLogEvery later, so a
// connections page viewed often does not repeat it each time.
func (m *Manager) upstreamWarn(st *specState, msg string, err error, fields ...zap.Field) {
	now := m.now()
	st.mu.Lock()
	last, seen := st.warned[msg]
	log := !seen || last.err != err.Error() || now.Sub(last.at) >= upstreamLogEvery
	if log {
		if st.warned == nil {
			st.warned = map[string]warned{}
		}
		st.warned[msg] = warned{err: err.Error(), at: now}
	}
	st.mu.Unlock()
	if log {
		m.log.Warn(msg, append(fields, zap.String("service", st.spec.Service), zap.Error(err))...)
	}
}

// logRefused logs a refusal by the rule of endpoints.go or dial.go: an
// operator's problem (or an upstream's attack), said wherever the request
// was for.
func (m *Manager) logRefused(st *specState, err error) {
	m.upstreamWarn(st, "upstream endpoint refused", err, zap.String("code", CodeEndpointRefused))
}

// discoverFor finds the spec's authorization server metadata and checks
// every URL in it that merge will use against the rule of endpoints.go.
func (m *Manager) discoverFor(ctx context.Context, st *specState) (asMetadata, error) {
	o, svc := st.spec.OAuth, st.spec.Service
	issuer := o.AuthorizationServer
	var scopes []string
	var published string // the resource the RFC 9728 document names
	var noPRM error      // the RFC 9728 document's absence, when the origin stands in
	if issuer == "" {
		resource, err := url.Parse(st.spec.Resource)
		if err != nil || resource.Host == "" {
			return asMetadata{}, fmt.Errorf("resource %q is not a URL", st.spec.Resource)
		}
		var prm resourceMetadata
		prm, err = m.protectedResourceAS(ctx, st.client, st.spec.Resource, svc)
		issuer, scopes, published = prm.AuthorizationServer, prm.Scopes, prm.Resource
		if errors.Is(err, errNoResourceMetadata) {
			// A server of the 2025-03-26 revision publishes no RFC 9728
			// document: its origin is its authorization server, whose
			// RFC 8414 metadata names the endpoints (and must name the
			// origin as its issuer). A document found and refused (another
			// resource's) is not passed over so.
			issuer, noPRM, err = resource.Scheme+"://"+resource.Host, err, nil
		}
		if err != nil {
			return asMetadata{}, err
		}
		if err := discoveredURL(svc, "authorization server", issuer, resource); err != nil {
			return asMetadata{}, err
		}
	}
	from, err := url.Parse(strings.TrimSuffix(issuer, "/"))
	if err != nil || from.Host == "" {
		return asMetadata{}, fmt.Errorf("authorization server %q is not a URL", issuer)
	}
	meta, err := m.discover(ctx, st.client, issuer)
	if err != nil && noPRM != nil && onlyNotFound(noPRM) && onlyNotFound(err) {
		// No metadata of any kind: every document the gateway looked for
		// answered 404 (not a failure, which must not change the flow).
		m.log.Info("the upstream publishes no OAuth metadata; using the 2025-03-26 revision's default endpoints at its origin",
			zap.String("service", svc), zap.String("origin", issuer))
		return fallbackEndpoints(issuer), nil
	}
	if err != nil {
		return asMetadata{}, errors.Join(noPRM, err)
	}
	for _, c := range []struct{ what, conf, found string }{
		{"authorization_endpoint", o.AuthorizationEndpoint, meta.AuthorizationEndpoint},
		{"token_endpoint", o.TokenEndpoint, meta.TokenEndpoint},
		{"revocation_endpoint", o.RevocationEndpoint, meta.RevocationEndpoint},
		{"registration_endpoint", "", meta.RegistrationEndpoint},
	} {
		if c.conf != "" || c.found == "" {
			continue // configured ones win and were checked at load
		}
		if err := discoveredURL(svc, c.what, c.found, from); err != nil {
			return asMetadata{}, err
		}
	}
	meta.resourceScopes, meta.resource = scopes, published
	return meta, nil
}

// fallbackEndpoints are the endpoints of an MCP server that publishes no
// metadata at all, as the 2025-03-26 revision of the MCP authorization
// spec tells its clients to use them: /authorize, /token and /register at
// the MCP server's origin (the "authorization base URL"). Only the origin
// the operator configured, only when every metadata location answered
// 404, and with PKCE S256 like every connection; the origin is the
// authorization server, so an iss in an answer must name it. The revision
// after it (2025-06-18) dropped the fallback; servers of that revision and
// later publish metadata and never get here. docs/credentials.md gives the
// reasoning.
func fallbackEndpoints(origin string) asMetadata {
	return asMetadata{Issuer: origin, AuthorizationEndpoint: origin + "/authorize", TokenEndpoint: origin + "/token",
		RegistrationEndpoint: origin + "/register", CodeChallengeMethodsSupported: []string{"S256"}, endpointFallback: true, issuerConfigured: true}
}

// notFoundError is a metadata document's 404: the document does not exist.
type notFoundError struct{ url string }

func (e *notFoundError) Error() string { return "GET " + e.url + ": status 404 Not Found" }

// onlyNotFound reports whether err says only that documents do not exist:
// each error joined or wrapped in it is a 404 or errNoResourceMetadata.
func onlyNotFound(err error) bool {
	switch e := err.(type) {
	case nil:
		return false
	case *notFoundError:
		return true
	case interface{ Unwrap() []error }:
		for _, c := range e.Unwrap() {
			if !onlyNotFound(c) {
				return false
			}
		}
		return true
	case interface{ Unwrap() error }:
		return onlyNotFound(e.Unwrap())
	}
	return err == errNoResourceMetadata
}

func merge(conf, meta asMetadata) asMetadata {
	if conf.AuthorizationEndpoint == "" {
		conf.AuthorizationEndpoint = meta.AuthorizationEndpoint
	}
	if conf.TokenEndpoint == "" {
		conf.TokenEndpoint = meta.TokenEndpoint
	}
	if conf.RevocationEndpoint == "" {
		conf.RevocationEndpoint = meta.RevocationEndpoint
	}
	conf.Issuer = meta.Issuer
	conf.CodeChallengeMethodsSupported = meta.CodeChallengeMethodsSupported
	conf.IssParameterSupported = meta.IssParameterSupported
	conf.RegistrationEndpoint, conf.TokenEndpointAuthMethods = meta.RegistrationEndpoint, meta.TokenEndpointAuthMethods
	conf.resourceScopes, conf.resource = meta.resourceScopes, meta.resource
	conf.CIMDSupported, conf.endpointFallback = meta.CIMDSupported, meta.endpointFallback
	if meta.issuerConfigured {
		conf.issuerConfigured = true
	}
	return conf
}

// discover reads RFC 8414 metadata, then OpenID Connect discovery, and
// checks that the document is the issuer's own (RFC 8414 section 3.3).
func (m *Manager) discover(ctx context.Context, client *http.Client, issuer string) (asMetadata, error) {
	issuer = strings.TrimSuffix(issuer, "/")
	u, err := url.Parse(issuer)
	if err != nil || u.Host == "" {
		return asMetadata{}, fmt.Errorf("authorization server %q is not a URL", issuer)
	}
	var errs []error
	for _, doc := range []string{
		u.Scheme + "://" + u.Host + "/.well-known/oauth-authorization-server" + u.Path,
		issuer + "/.well-known/openid-configuration",
	} {
		var meta asMetadata
		if err := getJSON(ctx, client, doc, &meta); err != nil {
			errs = append(errs, err)
			continue
		}
		if strings.TrimSuffix(meta.Issuer, "/") != issuer {
			errs = append(errs, fmt.Errorf("%s names issuer %q, not %q", doc, meta.Issuer, issuer))
			continue
		}
		if meta.AuthorizationEndpoint == "" || meta.TokenEndpoint == "" {
			errs = append(errs, fmt.Errorf("%s lacks the authorization or token endpoint", doc))
			continue
		}
		return meta, nil
	}
	return asMetadata{}, fmt.Errorf("discovering authorization server %s: %w", issuer, errors.Join(errs...))
}

// resourceMetadata is what the connect flow takes from an MCP server's
// RFC 9728 document: its first authorization server, the resource
// identifier as published, and the scopes to ask for.
type resourceMetadata struct {
	AuthorizationServer string
	Resource            string
	Scopes              []string
}

// protectedResourceAS reads an MCP server's RFC 9728 metadata: its first
// authorization server, its resource identifier, and the scopes to ask
// for: the scope of the server's 401 challenge, else the document's
// scopes_supported. The document is looked for where the MCP
// authorization spec says a client looks: the resource_metadata URL of the
// server's 401 (RFC 9728 section 5.1), then the path-based well-known URI,
// then the root one. Until the twenty-second pass only the path-based one
// was read, and a server whose document is at the root or at a URL only its
// 401 names could not be connected (the conformance suite's
// auth/metadata-var2 and auth/metadata-var3). Every document must be the
// resource's own (section 3.3), wherever it was found (ownDocument).
func (m *Manager) protectedResourceAS(ctx context.Context, client *http.Client, resource, service string) (resourceMetadata, error) {
	u, err := url.Parse(resource)
	if err != nil || u.Host == "" {
		return resourceMetadata{}, fmt.Errorf("resource %q is not a URL", resource)
	}
	var candidates []string
	named, challenged := challenge(ctx, client, u)
	if named != nil {
		if err := discoveredURL(service, "protected resource metadata", named.String(), u); err != nil {
			return resourceMetadata{}, err
		}
		candidates = append(candidates, named.String())
	}
	path := strings.TrimSuffix(u.Path, "/")
	candidates = append(candidates, u.Scheme+"://"+u.Host+"/.well-known/oauth-protected-resource"+path)
	if path != "" {
		candidates = append(candidates, u.Scheme+"://"+u.Host+"/.well-known/oauth-protected-resource")
	}
	var errs []error
	read := false
	for _, c := range candidates {
		var doc struct {
			Resource             string   `json:"resource"`
			AuthorizationServers []string `json:"authorization_servers"`
			ScopesSupported      []string `json:"scopes_supported"`
		}
		if err := getJSON(ctx, client, c, &doc); err != nil {
			errs = append(errs, err)
			continue
		}
		read = true
		if !ownDocument(u, c, doc.Resource) {
			errs = append(errs, fmt.Errorf("%s names resource %q", c, doc.Resource))
			continue
		}
		if len(doc.AuthorizationServers) == 0 {
			errs = append(errs, fmt.Errorf("%s names no authorization server", c))
			continue
		}
		if challenged == nil {
			challenged = scopeList(doc.ScopesSupported)
		}
		return resourceMetadata{AuthorizationServer: doc.AuthorizationServers[0], Resource: doc.Resource, Scopes: challenged}, nil
	}
	if !read {
		errs = append(errs, errNoResourceMetadata)
	}
	return resourceMetadata{}, fmt.Errorf("reading the protected resource metadata of %s: %w", resource, errors.Join(errs...))
}

// ownDocument reports whether a protected resource metadata document read
// at docURL, naming named as its resource, is the MCP server's at mcp:
// it names the MCP server's URL (a trailing slash aside), or it names a
// resource that contains the server (the same scheme and host, the
// server's path at or below its path: the origin, typically) and was read
// at exactly the well-known URI derived from that resource (RFC 9728
// section 3.3: the resource value is the identifier into which the
// well-known string was inserted). So a document at the root naming the
// origin is the origin's, and the MCP server is part of it (the
// conformance suite's auth/metadata-var2); a document naming another
// resource, or naming the origin from another URL, is not
// (auth/resource-mismatch).
func ownDocument(mcp *url.URL, docURL, named string) bool {
	if strings.TrimSuffix(named, "/") == strings.TrimSuffix(mcp.String(), "/") {
		return true
	}
	r, err := url.Parse(named)
	if err != nil || r.Scheme != mcp.Scheme || r.Host != mcp.Host || r.RawQuery != "" || r.Fragment != "" || r.User != nil {
		return false
	}
	path := strings.TrimSuffix(r.Path, "/")
	if mcp.Path != path && !strings.HasPrefix(mcp.Path, path+"/") {
		return false
	}
	return docURL == r.Scheme+"://"+r.Host+"/.well-known/oauth-protected-resource"+path
}

// errNoResourceMetadata: no protected resource metadata document could be
// read at any of the places looked at.
var errNoResourceMetadata = errors.New("no protected resource metadata document")

// resourceMetadataParam is the resource_metadata of a WWW-Authenticate
// challenge (RFC 9728 section 5.1), scopeParam its scope (RFC 6750
// section 3).
var (
	resourceMetadataParam = regexp.MustCompile(`(?i)resource_metadata="([^"]+)"`)
	scopeParam            = regexp.MustCompile(`(?i)(?:^|[\s,])scope="([^"]*)"`)
)

// maxScopes and maxScope bound the scopes taken from an upstream's
// challenge or metadata (they go into the authorization request).
const (
	maxScopes = 32
	maxScope  = 128
)

// scopeList keeps the scopes of an upstream that are RFC 6749 scope tokens
// (printable ASCII but space, quote and backslash), at most maxScopes of
// at most maxScope bytes each; nil when none is left.
func scopeList(in []string) []string {
	var out []string
	for _, s := range in {
		if s == "" || len(s) > maxScope || len(out) == maxScopes || slices.Contains(out, s) {
			continue
		}
		if strings.IndexFunc(s, func(r rune) bool { return r <= 0x20 || r > 0x7e || r == '"' || r == '\\' }) >= 0 {
			continue
		}
		out = append(out, s)
	}
	return out
}

// challenge asks the MCP server without a token (a JSON-RPC ping, which a
// server that needs none answers harmlessly) and returns the
// resource_metadata URL of its 401, resolved against the server's URL, and
// the scopes it names; nil for either that it does not name.
func challenge(ctx context.Context, client *http.Client, resource *url.URL) (*url.URL, []string) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, resource.String(), strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	if err != nil {
		return nil, nil
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := client.Do(req)
	if err != nil {
		return nil, nil
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		return nil, nil
	}
	var named *url.URL
	var scopes []string
	for _, h := range resp.Header.Values("WWW-Authenticate") {
		if m := resourceMetadataParam.FindStringSubmatch(h); m != nil && named == nil {
			if u, err := resource.Parse(m[1]); err == nil {
				named = u
			}
		}
		if m := scopeParam.FindStringSubmatch(h); m != nil && scopes == nil {
			scopes = scopeList(strings.Fields(m[1]))
		}
	}
	return named, scopes
}

func getJSON(ctx context.Context, client *http.Client, u string, dst any) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return scrubURLError(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return &notFoundError{url: u}
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: status %s", u, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxTokenResponse))
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, dst); err != nil {
		return fmt.Errorf("GET %s: %w", u, err)
	}
	return nil
}

// tokenResponse is RFC 6749 section 5.1.
type tokenResponse struct {
	AccessToken  string          `json:"access_token"`
	TokenType    string          `json:"token_type"`
	ExpiresIn    json.Number     `json:"expires_in"`
	RefreshToken string          `json:"refresh_token"`
	Scope        string          `json:"scope"`
	Error        string          `json:"error"`
	ErrorDesc    string          `json:"error_description"`
	Extra        json.RawMessage `json:"-"`
}

// oauthError is an error answer of a token endpoint (RFC 6749 5.2).
type oauthError struct {
	Status      int
	Code        string
	Description string
}

func (e *oauthError) Error() string {
	s := fmt.Sprintf("token endpoint answered %d %s", e.Status, e.Code)
	if e.Description != "" {
		s += ": " + e.Description
	}
	return s
}

// refused reports whether the authorization server refused the grant for
// good (the connection must be made again), as opposed to being down.
func refused(err error) bool {
	var oe *oauthError
	if !errors.As(err, &oe) {
		return false
	}
	switch oe.Code {
	case "invalid_grant", "unauthorized_client", "invalid_client", "unsupported_grant_type":
		return true
	}
	return false
}

// tokenRequest posts a grant to the token endpoint with the client's
// authentication (oauthClient.authenticate): HTTP Basic or the secret in
// the form for a confidential client, client_id alone for a public one.
func (m *Manager) tokenRequest(ctx context.Context, st *specState, c oauthClient, endpoint string, form url.Values) (*tokenResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, nil)
	if err != nil {
		return nil, err
	}
	c.authenticate(req, form)
	setForm(req, form)
	req.Header.Set("Accept", "application/json")
	resp, err := st.client.Do(req)
	if err != nil {
		return nil, scrubURLError(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxTokenResponse))
	if err != nil {
		return nil, err
	}
	var tr tokenResponse
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if ct == "application/x-www-form-urlencoded" || ct == "text/plain" {
		// GitHub's form answer when Accept is ignored.
		v, _ := url.ParseQuery(string(b))
		tr = tokenResponse{AccessToken: v.Get("access_token"), TokenType: v.Get("token_type"), ExpiresIn: json.Number(v.Get("expires_in")),
			RefreshToken: v.Get("refresh_token"), Scope: v.Get("scope"), Error: v.Get("error"), ErrorDesc: v.Get("error_description")}
	} else if err := json.Unmarshal(b, &tr); err != nil {
		return nil, fmt.Errorf("token endpoint answered %d with a body that is not JSON", resp.StatusCode)
	}
	if tr.Error != "" || resp.StatusCode != http.StatusOK {
		if tr.Error == "invalid_client" {
			m.forgetRegistration(ctx, st, c)
		}
		return nil, &oauthError{Status: resp.StatusCode, Code: tr.Error, Description: clip.Ellipsis(tr.ErrorDesc, 200)}
	}
	if tr.AccessToken == "" {
		return nil, errors.New("token endpoint answered without an access_token")
	}
	return &tr, nil
}

// record turns a token response into a vault record.
func (m *Manager) record(tr *tokenResponse, prev *Record) *Record {
	now := m.now()
	rec := &Record{Kind: KindOAuth, ConnectedAt: now}
	if prev != nil {
		*rec = *prev
		rec.RefreshedAt = now
	}
	rec.AccessToken, rec.TokenType = tr.AccessToken, tr.TokenType
	if tr.RefreshToken != "" { // an upstream that does not rotate keeps the old one
		rec.RefreshToken = tr.RefreshToken
	}
	if tr.Scope != "" {
		rec.Scope = tr.Scope
	}
	rec.Expiry = time.Time{}
	if n, err := tr.ExpiresIn.Int64(); err == nil && n > 0 {
		rec.Expiry = now.Add(time.Duration(n) * time.Second)
	}
	return rec
}

// revoke asks the upstream to revoke token (RFC 7009); best effort.
func (m *Manager) revoke(ctx context.Context, st *specState, c oauthClient, endpoint, token, hint string) error {
	if endpoint == "" || token == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, nil)
	if err != nil {
		return err
	}
	form := url.Values{"token": {token}, "token_type_hint": {hint}}
	c.authenticate(req, form)
	setForm(req, form)
	resp, err := st.client.Do(req)
	if err != nil {
		return scrubURLError(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxTokenResponse))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("revocation endpoint answered %s", resp.Status)
	}
	return nil
}

// setForm makes form the body of req.
func setForm(req *http.Request, form url.Values) {
	body := form.Encode()
	req.Body = io.NopCloser(strings.NewReader(body))
	req.ContentLength = int64(len(body))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(body)), nil }
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
}

// scrubURLError drops the query of the URL in a transport error: it may
// carry a credential.
func scrubURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		if u, perr := url.Parse(ue.URL); perr == nil {
			u.RawQuery, u.User = "", nil
			return &url.Error{Op: ue.Op, URL: u.String(), Err: ue.Err}
		}
	}
	return err
}
