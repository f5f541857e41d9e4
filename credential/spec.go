package credential

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
)

// Credential modes of a source.
const (
	// ModeStatic sends the source's configured headers, the same for every
	// caller (the default).
	ModeStatic = "static"
	// ModeUser sends the calling user's own credential from the vault; a
	// caller without one gets CREDENTIAL_REQUIRED.
	ModeUser = "user"
	// ModeUserOrStatic sends the caller's credential when there is one,
	// else the configured headers.
	ModeUserOrStatic = "user_or_static"
)

// Kinds of user credential.
const (
	// KindOAuth: the user signs in at the upstream's authorization server
	// (authorization code with PKCE); access tokens are refreshed.
	KindOAuth = "oauth"
	// KindAPIKey: the user pastes a key into the connections page.
	KindAPIKey = "api_key"
)

// Spec says how one source (an OpenAPI service or an upstream MCP server)
// takes its users' credentials.
type Spec struct {
	// Service is the source's name (the OpenAPI service or upstream name).
	Service string
	// Title is shown on the connections page; default Service.
	Title string
	// Mode is ModeUser or ModeUserOrStatic (ModeStatic sources need no Spec).
	Mode string
	// Kind is KindOAuth or KindAPIKey.
	Kind string
	// Apply places the credential on each request.
	Apply Apply
	// OAuth is the upstream's authorization server and our client there
	// (KindOAuth).
	OAuth *OAuthClient
	// Hint is shown beside the API key field (what key, where to make one).
	Hint string
	// Resource is the upstream URL an MCP server's protected resource
	// metadata (RFC 9728) is read from when OAuth names no authorization
	// server; for OpenAPI sources it is empty.
	Resource string
}

// Apply places a credential on an outbound request: in a header (with an
// optional scheme before it) or in a query parameter.
type Apply struct {
	// Header is the header that carries the credential. Default
	// Authorization (unless Query is set).
	Header string
	// Scheme goes before the credential, separated by a space: default
	// "Bearer" in the Authorization header, none in any other header;
	// "none" sends the bare credential in Authorization.
	Scheme string
	// Query is the query parameter that carries the credential instead of
	// a header (for APIs that want ?api_key=...).
	Query string
}

// OAuthClient is the gateway's registration at an upstream's OAuth 2
// authorization server.
type OAuthClient struct {
	// AuthorizationServer is the issuer whose RFC 8414 (or OpenID
	// Connect) metadata names the endpoints. Needed unless both endpoints
	// are given (or the source is an MCP server with RFC 9728 metadata).
	AuthorizationServer string
	// AuthorizationEndpoint and TokenEndpoint override or replace discovery.
	AuthorizationEndpoint string
	TokenEndpoint         string
	// RevocationEndpoint (RFC 7009) is where tokens are revoked on
	// disconnect; default from the metadata; none means tokens are only
	// forgotten.
	RevocationEndpoint string
	// ClientID and ClientSecret are the gateway's client at the upstream
	// (a public client when the secret is empty: PKCE only). Never logged.
	// Without a ClientID the gateway registers a client at the
	// authorization server the metadata names (RFC 7591, registration.go).
	ClientID     string
	ClientSecret string
	// Scopes are requested at authorization. None: an MCP server's own
	// (the scope of its 401, else its RFC 9728 scopes_supported).
	Scopes []string
	// Resource is sent as the RFC 8707 resource indicator (MCP servers
	// need it); default the MCP server's URL, none for OpenAPI sources.
	Resource string
	// SharedCallback sends the redirect URI all services shared until the
	// sixteenth pass, <connect URL>/callback, instead of the service's own
	// <connect URL>/callback/<service>. An answer there is taken only with
	// an iss naming the server the connection started at (RFC 9207): with
	// one redirect URI for several servers, iss is the only defence
	// against mix-up (RFC 9700 section 4.4). For upstreams where the old
	// URI is registered and cannot change yet, and whose server sends iss.
	SharedCallback bool
}

// reservedServices are path segments of the connections pages.
var reservedServices = []string{"signin", "signout", "callback", "static", clientMetadataName}

// header is where the credential goes: name and scheme ("" for none).
func (a Apply) header() (name, scheme string) {
	name = a.Header
	if name == "" {
		name = "Authorization"
	}
	scheme = a.Scheme
	switch {
	case strings.EqualFold(scheme, "none"):
		scheme = ""
	case scheme == "" && strings.EqualFold(name, "Authorization"):
		scheme = "Bearer"
	}
	return name, scheme
}

// Validate checks a spec at config load.
func (s Spec) Validate() error {
	if s.Service == "" {
		return errors.New("credential: service name is required")
	}
	if slices.Contains(reservedServices, strings.ToLower(s.Service)) {
		return fmt.Errorf("credential: service name %q is reserved by the connections pages", s.Service)
	}
	if s.Mode != ModeUser && s.Mode != ModeUserOrStatic {
		return fmt.Errorf("credential %q: mode %q must be %s or %s", s.Service, s.Mode, ModeUser, ModeUserOrStatic)
	}
	if s.Apply.Query != "" && s.Apply.Header != "" {
		return fmt.Errorf("credential %q: set a header or a query parameter, not both", s.Service)
	}
	if h := s.Apply.Header; h != "" && strings.ContainsAny(h, " \t\r\n:") {
		return fmt.Errorf("credential %q: invalid header name %q", s.Service, h)
	}
	if strings.ContainsAny(s.Apply.Scheme, " \t\r\n") {
		return fmt.Errorf("credential %q: invalid scheme %q", s.Service, s.Apply.Scheme)
	}
	switch s.Kind {
	case KindAPIKey:
		if s.OAuth != nil {
			return fmt.Errorf("credential %q: an api_key credential takes no oauth settings", s.Service)
		}
	case KindOAuth:
		o := s.OAuth
		if o == nil {
			return fmt.Errorf("credential %q: oauth settings are required", s.Service)
		}
		// Without a client_id the gateway registers one (RFC 7591) at the
		// server its metadata names: there must be metadata to read.
		if o.ClientID == "" && o.AuthorizationEndpoint != "" && o.TokenEndpoint != "" {
			return fmt.Errorf("credential %q: oauth with authorization_endpoint and token_endpoint configured needs a client_id (the gateway registers one only from an authorization server's metadata)", s.Service)
		}
		if o.ClientID == "" && o.ClientSecret != "" {
			return fmt.Errorf("credential %q: oauth has a client_secret without a client_id", s.Service)
		}
		if o.AuthorizationServer == "" && (o.AuthorizationEndpoint == "" || o.TokenEndpoint == "") && s.Resource == "" {
			return fmt.Errorf("credential %q: oauth needs authorization_server, or authorization_endpoint and token_endpoint", s.Service)
		}
		for _, u := range []string{o.AuthorizationServer, o.AuthorizationEndpoint, o.TokenEndpoint, o.RevocationEndpoint, o.Resource} {
			if u == "" {
				continue
			}
			p, err := url.Parse(u)
			if err != nil || (p.Scheme != "https" && p.Scheme != "http") || p.Host == "" {
				return fmt.Errorf("credential %q: %q is not an absolute http(s) URL", s.Service, u)
			}
		}
	default:
		return fmt.Errorf("credential %q: kind %q must be %s or %s", s.Service, s.Kind, KindOAuth, KindAPIKey)
	}
	return nil
}

func (s Spec) title() string {
	if s.Title != "" {
		return s.Title
	}
	return s.Service
}
