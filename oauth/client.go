package oauth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// client is a pre-registered or dynamically registered client.
type client struct {
	ID           string           `json:"client_id"`
	SecretHash   []byte           `json:"secret_hash,omitempty"` // SHA-256 of the secret
	Name         string           `json:"client_name,omitempty"`
	URIs         []string         `json:"redirect_uris"`
	AuthMeth     oidc.AuthMethod  `json:"token_endpoint_auth_method"`
	Grants       []oidc.GrantType `json:"grant_types"`
	AllowedScope []string         `json:"scopes"`
	IssuedAt     int64            `json:"client_id_issued_at,omitempty"`

	dev bool
	ttl time.Duration
	// configured marks a client of the configuration: it may authenticate
	// with client_secret_basic or client_secret_post (the configuration
	// names no method) and never expires.
	configured bool
	// document marks a client described by a Client ID Metadata Document
	// at documentHost: public, its name its own unverified claim.
	document     bool
	documentHost string
}

var _ op.Client = (*client)(nil)

func (c *client) checkSecret(secret string) bool {
	if len(c.SecretHash) == 0 {
		return false
	}
	h := sha256.Sum256([]byte(secret))
	return subtle.ConstantTimeCompare(h[:], c.SecretHash) == 1
}

func (c *client) public() bool { return len(c.SecretHash) == 0 }

// selfRegistered reports a client of dynamic registration: anyone may
// register any name and redirect URI, so its name is its own claim.
func (c *client) selfRegistered() bool { return !c.configured && !c.document }

// acceptsMethod reports whether a confidential client may authenticate
// with m: a registered client only with the method it registered.
func (c *client) acceptsMethod(m oidc.AuthMethod) bool {
	if c.configured {
		return m == oidc.AuthMethodBasic || m == oidc.AuthMethodPost
	}
	return m == c.AuthMeth
}

func (c *client) displayName() string {
	if c.Name != "" {
		return c.Name
	}
	return c.ID
}

func (c *client) GetID() string                    { return c.ID }
func (c *client) RedirectURIs() []string           { return c.URIs }
func (c *client) PostLogoutRedirectURIs() []string { return nil }

// ApplicationType is native so op accepts loopback http redirect URIs; the
// server's own exact-match check runs before op and refuses op's loopback
// port leniency.
func (c *client) ApplicationType() op.ApplicationType { return op.ApplicationTypeNative }
func (c *client) AuthMethod() oidc.AuthMethod         { return c.AuthMeth }
func (c *client) ResponseTypes() []oidc.ResponseType {
	return []oidc.ResponseType{oidc.ResponseTypeCode}
}
func (c *client) GrantTypes() []oidc.GrantType        { return c.Grants }
func (c *client) LoginURL(id string) string           { return pathLogin + "?id=" + id }
func (c *client) AccessTokenType() op.AccessTokenType { return op.AccessTokenTypeJWT }
func (c *client) IDTokenLifetime() time.Duration      { return c.ttl }
func (c *client) DevMode() bool                       { return c.dev }
func (c *client) RestrictAdditionalIdTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}
func (c *client) RestrictAdditionalAccessTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}
func (c *client) IsScopeAllowed(scope string) bool     { return slices.Contains(c.AllowedScope, scope) }
func (c *client) IDTokenUserinfoClaimsAssertion() bool { return false }
func (c *client) ClockSkew() time.Duration             { return 0 }

// client finds a client by id: configuration first, then registrations.
func (s *Server) client(ctx context.Context, id string) (*client, error) {
	if c, ok := s.clients[id]; ok {
		return c, nil
	}
	if s.docs != nil && isMetadataURL(id) {
		return s.docs.lookup(ctx, id)
	}
	if id == "" || !s.cfg.dcr {
		return nil, errors.New("unknown client")
	}
	b, err := s.store.Get(ctx, keyClient(id))
	if errors.Is(err, errNotFound) {
		return nil, errors.New("unknown client")
	}
	if err != nil {
		// Not the client's fault: an invalid_client here would make MCP
		// clients forget their registration (the TypeScript SDK does).
		return nil, storageErr("reading a registered client", err)
	}
	c := new(client)
	if err := json.Unmarshal(b, c); err != nil {
		return nil, errors.New("unknown client")
	}
	c.dev, c.ttl = s.cfg.development, s.cfg.accessTTL
	return c, nil
}

// touchClient keeps a registered client for RegisteredClientTTL after it
// last obtained tokens, and at least as long as the grant just made or
// refreshed. Registrations that never obtain a token go after
// UnusedClientTTL, so open registration cannot fill the storage.
func (s *Server) touchClient(ctx context.Context, c *client) {
	if c.configured || c.document {
		return
	}
	ttl := max(s.cfg.clientTTL, s.cfg.refreshTTL, s.cfg.accessTTL)
	if err := s.store.Expire(ctx, keyClient(c.ID), ttl); err != nil {
		s.log.Warn("extending a registered client's lifetime", logClientID(c.ID), errField(err))
		return
	}
	if err := s.regs.extend(ctx, c.ID, s.now().Add(ttl)); err != nil {
		s.log.Warn("extending a registered client's lifetime in the count", logClientID(c.ID), errField(err))
	}
}

func (s *Server) grantTypes() []oidc.GrantType {
	g := []oidc.GrantType{oidc.GrantTypeCode}
	if s.cfg.refreshOn {
		g = append(g, oidc.GrantTypeRefreshToken)
	}
	return g
}

// applicationType honours OpenID Connect Dynamic Registration's
// application_type, which MCP clients must send (MCP 2026-07-28): a web
// client's redirect URIs are https on a host that is not loopback (any
// http host in development), a native client's are loopback http, a
// private-use scheme or https. When the client names none, the type is
// inferred from its redirect URIs and answered, instead of OIDC's default
// "web", which would refuse the loopback redirects MCP clients use.
func applicationType(declared string, uris []string, development bool) (string, error) {
	native := func(raw string) bool {
		u, _ := url.Parse(raw)
		sch := strings.ToLower(u.Scheme)
		return (sch == "http" && isLoopbackHost(u.Hostname())) || (sch != "http" && sch != "https")
	}
	switch declared {
	case "":
		if slices.ContainsFunc(uris, native) {
			return "native", nil
		}
		return "web", nil
	case "web":
		for _, raw := range uris {
			u, _ := url.Parse(raw)
			if native(raw) || (strings.ToLower(u.Scheme) == "http" && !development) {
				return "", fmt.Errorf("redirect uri %q: a web client redirects to https on a host that is not loopback", raw)
			}
		}
		return "web", nil
	case "native":
		for _, raw := range uris {
			u, _ := url.Parse(raw)
			if strings.ToLower(u.Scheme) == "http" && !isLoopbackHost(u.Hostname()) && !development {
				return "", fmt.Errorf("redirect uri %q: a native client redirects to loopback http, https or a private-use scheme", raw)
			}
		}
		return "native", nil
	}
	return "", fmt.Errorf("application_type %q: must be web or native", declared)
}

// checkClientName refuses a client name the login and consent pages could
// not show faithfully: longer than 200 bytes, or with a control character
// or a bidirectional formatting character. The name is the client's own
// claim, shown to the user who decides whether to let it in; "\u202e"
// (right-to-left override) followed by a reversed name displays as a name
// the client does not have.
func checkClientName(name string) error {
	if len(name) > 200 {
		return errors.New("is longer than 200 characters")
	}
	for _, r := range name {
		switch {
		case unicode.IsControl(r):
			return fmt.Errorf("has the control character %U", r)
		case unicode.Is(unicode.Bidi_Control, r):
			return fmt.Errorf("has the bidirectional formatting character %U", r)
		}
	}
	return nil
}

// registrationRequest is the RFC 7591 client metadata we read.
type registrationRequest struct {
	RedirectURIs            []string `json:"redirect_uris"`
	TokenEndpointAuthMethod string   `json:"token_endpoint_auth_method"`
	GrantTypes              []string `json:"grant_types"`
	ResponseTypes           []string `json:"response_types"`
	ClientName              string   `json:"client_name"`
	Scope                   string   `json:"scope"`
	ApplicationType         string   `json:"application_type"`
}

type registrationResponse struct {
	ClientID                string   `json:"client_id"`
	ClientSecret            string   `json:"client_secret,omitempty"`
	ClientIDIssuedAt        int64    `json:"client_id_issued_at"`
	ClientSecretExpiresAt   *int64   `json:"client_secret_expires_at,omitempty"`
	RedirectURIs            []string `json:"redirect_uris"`
	TokenEndpointAuthMethod string   `json:"token_endpoint_auth_method"`
	GrantTypes              []string `json:"grant_types"`
	ResponseTypes           []string `json:"response_types"`
	ClientName              string   `json:"client_name,omitempty"`
	Scope                   string   `json:"scope,omitempty"`
	ApplicationType         string   `json:"application_type"`
}

const maxRedirectURIs = 10

// register serves RFC 7591 dynamic client registration.
func (s *Server) register(w http.ResponseWriter, r *http.Request) {
	var req registrationRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	err := dec.Decode(&req)
	if err == nil {
		// One object and nothing after it: `{...} xyz` is as malformed as
		// any other body the decoder would refuse.
		if _, next := dec.Token(); next != io.EOF {
			err = errors.New("data after the JSON object")
		}
	}
	if err != nil {
		writeOAuthError(w, http.StatusBadRequest, "invalid_client_metadata", "body must be a JSON object of client metadata")
		return
	}
	if len(req.RedirectURIs) == 0 || len(req.RedirectURIs) > maxRedirectURIs {
		writeOAuthError(w, http.StatusBadRequest, "invalid_redirect_uri", "between 1 and 10 redirect_uris are required")
		return
	}
	for _, u := range req.RedirectURIs {
		if err := checkRedirectURI(u, s.cfg.development); err != nil {
			writeOAuthError(w, http.StatusBadRequest, "invalid_redirect_uri", err.Error())
			return
		}
	}
	appType, err := applicationType(req.ApplicationType, req.RedirectURIs, s.cfg.development)
	if err != nil {
		code := "invalid_redirect_uri"
		if req.ApplicationType != "web" && req.ApplicationType != "native" {
			code = "invalid_client_metadata"
		}
		writeOAuthError(w, http.StatusBadRequest, code, err.Error())
		return
	}
	method := oidc.AuthMethod(req.TokenEndpointAuthMethod)
	switch method {
	case "":
		method = oidc.AuthMethodNone
	case oidc.AuthMethodNone, oidc.AuthMethodBasic, oidc.AuthMethodPost:
	default:
		writeOAuthError(w, http.StatusBadRequest, "invalid_client_metadata", "token_endpoint_auth_method must be none, client_secret_basic or client_secret_post")
		return
	}
	grants := s.grantTypes()
	if len(req.GrantTypes) > 0 {
		grants = grants[:0:0]
		for _, g := range req.GrantTypes {
			gt := oidc.GrantType(g)
			if gt == oidc.GrantTypeRefreshToken && !s.cfg.refreshOn {
				// MCP clients ask for refresh_token by habit; registering
				// without it (RFC 7591 lets the server replace values) is
				// kinder than refusing the client.
				continue
			}
			if !slices.Contains(s.grantTypes(), gt) {
				writeOAuthError(w, http.StatusBadRequest, "invalid_client_metadata", "grant type "+g+" is not offered")
				return
			}
			if !slices.Contains(grants, gt) {
				grants = append(grants, gt)
			}
		}
		if !slices.Contains(grants, oidc.GrantTypeCode) {
			writeOAuthError(w, http.StatusBadRequest, "invalid_client_metadata", "grant_types must include authorization_code")
			return
		}
	}
	for _, rt := range req.ResponseTypes {
		if rt != "code" {
			writeOAuthError(w, http.StatusBadRequest, "invalid_client_metadata", "response_types must be [\"code\"]")
			return
		}
	}
	// A registered client may ask for every offered scope, whatever its
	// registration named: anyone can register anything, so a narrower
	// registration protects nothing, and MCP clients register with the
	// scopes of their first challenge and later step up to more (RFC 7591
	// section 3.2.1 lets the server replace the value; the answer says
	// what holds). The user's consent is what grants a scope.
	scopes := slices.Clone(s.cfg.scopes)
	if err := checkClientName(req.ClientName); err != nil {
		writeOAuthError(w, http.StatusBadRequest, "invalid_client_metadata", "client_name "+err.Error())
		return
	}
	now := s.now()
	c := &client{
		ID: "mcp_" + s.randomToken(16), Name: req.ClientName, URIs: req.RedirectURIs,
		AuthMeth: method, Grants: grants, AllowedScope: scopes, IssuedAt: now.Unix(),
	}
	var secret string
	if method != oidc.AuthMethodNone {
		secret = s.randomToken(32)
		h := sha256.Sum256([]byte(secret))
		c.SecretHash = h[:]
	}
	b, err := json.Marshal(c)
	if err != nil {
		s.reqLog(r).Error("encoding registered client", errField(err))
		writeOAuthError(w, http.StatusInternalServerError, "server_error", "cannot encode the registration")
		return
	}
	if len(b) > MaxRegisteredClientBytes {
		writeOAuthError(w, http.StatusBadRequest, "invalid_client_metadata", fmt.Sprintf("the registration is larger than %d bytes (redirect_uris and client_name together)", MaxRegisteredClientBytes))
		return
	}
	ok, free, err := s.regs.admit(r.Context(), c.ID, now, now.Add(UnusedClientTTL), s.cfg.maxClients)
	if err == nil && !ok {
		// Not the caller's fault, nor its rate: the server is full until
		// a registration expires.
		s.refuseFull(w, r, "registration", "max_registered_clients", s.cfg.maxClients, "registered clients", free.Sub(now))
		return
	}
	if err == nil {
		if err = s.store.Set(r.Context(), keyClient(c.ID), b, UnusedClientTTL); err != nil {
			_ = s.regs.forget(r.Context(), c.ID)
		}
	}
	if err != nil {
		s.reqLog(r).Error("storing registered client", errField(err))
		writeOAuthError(w, http.StatusServiceUnavailable, "server_error", "token storage unavailable")
		return
	}
	resp := registrationResponse{
		ClientID: c.ID, ClientSecret: secret, ClientIDIssuedAt: c.IssuedAt, RedirectURIs: c.URIs,
		TokenEndpointAuthMethod: string(method), ResponseTypes: []string{"code"}, ClientName: c.Name,
		Scope: strings.Join(scopes, " "), ApplicationType: appType,
	}
	for _, g := range grants {
		resp.GrantTypes = append(resp.GrantTypes, string(g))
	}
	if secret != "" {
		zero := int64(0)
		resp.ClientSecretExpiresAt = &zero
	}
	s.log.Info("client registered", logClientID(c.ID), logInt("redirect_uris", len(c.URIs)))
	writeJSON(w, http.StatusCreated, resp)
}

// refuseFull answers a request the server cannot take because it holds as
// many of what as limit allows (max_registered_clients,
// max_pending_authorizations): 503 temporarily_unavailable, never a
// redirect, with Retry-After until the first place frees; counted and
// logged under limit.
func (s *Server) refuseFull(w http.ResponseWriter, r *http.Request, request, limit string, n int, what string, untilFree time.Duration) {
	s.metrics.full(limit)
	s.reqLog(r).Warn(request+" refused: "+limit+" reached", logInt(limit, n))
	w.Header().Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(untilFree.Seconds())))))
	writeOAuthError(w, http.StatusServiceUnavailable, "temporarily_unavailable", "the server holds as many "+what+" as it may; try again later")
}
