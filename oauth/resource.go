package oauth

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// ProtectedResourcePath is the RFC 9728 well-known path of protected
// resource metadata.
const ProtectedResourcePath = "/.well-known/oauth-protected-resource"

// ResourceMetadata is an RFC 9728 protected resource metadata document: it
// tells an MCP client which authorization server issues tokens for the
// resource and how to present them.
type ResourceMetadata struct {
	// Resource is the resource identifier: the absolute URL of the protected
	// endpoint (for MCP, the MCP endpoint URL). Tokens must carry it as
	// audience (RFC 8707).
	Resource string `json:"resource"`
	// AuthorizationServers are the issuer URLs of the servers that issue
	// tokens for this resource.
	AuthorizationServers []string `json:"authorization_servers,omitempty"`
	// ScopesSupported are the scopes the resource understands.
	ScopesSupported []string `json:"scopes_supported,omitempty"`
	// BearerMethodsSupported is how a token is sent; we accept only the
	// Authorization header. Default ["header"].
	BearerMethodsSupported []string `json:"bearer_methods_supported,omitempty"`
	// ResourceName is a human-readable name. Optional.
	ResourceName string `json:"resource_name,omitempty"`
	// ResourceDocumentation is a URL of human-readable documentation. Optional.
	ResourceDocumentation string `json:"resource_documentation,omitempty"`
}

// Validate checks that the resource is an absolute URL without fragment
// (RFC 9728 §1.2) and every authorization server is an absolute URL.
func (m *ResourceMetadata) Validate() error {
	if err := checkResourceURL(m.Resource); err != nil {
		return err
	}
	for _, as := range m.AuthorizationServers {
		u, err := url.Parse(as)
		if err != nil || !u.IsAbs() || u.Host == "" {
			return fmt.Errorf("oauth: authorization server %q is not an absolute URL", as)
		}
	}
	return nil
}

func checkResourceURL(resource string) error {
	if resource == "" {
		return errors.New("oauth: resource URL is required")
	}
	u, err := url.Parse(resource)
	if err != nil || !u.IsAbs() || u.Host == "" || u.Fragment != "" {
		return fmt.Errorf("oauth: resource %q must be an absolute URL without fragment", resource)
	}
	return nil
}

// CanonicalResource returns the canonical form of a resource identifier
// (RFC 8707, RFC 9728): scheme and host in lower case, no default port, no
// trailing slash on the path (so an origin has an empty path), no fragment.
// MCP clients send the same resource in different forms: the TypeScript SDK
// writes https://gw.example.com as https://gw.example.com/ (URL.href), so
// the server compares and stores audiences in this form. ok is false for
// what is not an absolute http(s) URL without fragment.
func CanonicalResource(raw string) (canon string, ok bool) {
	return canonicalResource(raw)
}

func canonicalResource(raw string) (string, bool) {
	u, err := url.Parse(raw)
	if err != nil || !u.IsAbs() || u.Host == "" || u.Fragment != "" || strings.Contains(raw, "#") || u.User != nil {
		return "", false
	}
	u.Scheme = strings.ToLower(u.Scheme)
	if u.Scheme != "https" && u.Scheme != "http" {
		return "", false
	}
	host, port := strings.ToLower(u.Hostname()), u.Port()
	if (u.Scheme == "https" && port == "443") || (u.Scheme == "http" && port == "80") {
		port = ""
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	u.Host = host
	if port != "" {
		u.Host += ":" + port
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	u.RawPath = strings.TrimSuffix(u.RawPath, "/")
	u.ForceQuery = false
	return u.String(), true
}

// MetadataURL returns where the metadata of resource is published: the
// well-known path inserted between host and path (RFC 9728 §3.1), so
// https://h/mcp gives https://h/.well-known/oauth-protected-resource/mcp.
func MetadataURL(resource string) string {
	u, err := url.Parse(resource)
	if err != nil {
		return ""
	}
	path := strings.TrimSuffix(u.Path, "/")
	return u.Scheme + "://" + u.Host + ProtectedResourcePath + path
}

// MetadataHandler serves the documents of every resource at their
// well-known URL path (and the first one also at the bare well-known path,
// for clients that do not insert the resource path). Other paths get 404.
func MetadataHandler(resources ...ResourceMetadata) http.Handler {
	byPath := make(map[string][]byte, len(resources)+1)
	for i, m := range resources {
		if len(m.BearerMethodsSupported) == 0 {
			m.BearerMethodsSupported = []string{"header"}
		}
		body, _ := json.Marshal(m)
		u, err := url.Parse(MetadataURL(m.Resource))
		if err != nil {
			continue
		}
		byPath[u.Path] = body
		if i == 0 {
			if _, ok := byPath[ProtectedResourcePath]; !ok {
				byPath[ProtectedResourcePath] = body
			}
		}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := byPath[strings.TrimSuffix(r.URL.Path, "/")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "public, max-age=3600")
		w.Header().Set("Access-Control-Allow-Origin", "*")
		_, _ = w.Write(body)
	})
}

// BearerChallenge builds the WWW-Authenticate value of a 401 (RFC 6750 §3,
// RFC 9728 §5.1). metadataURL may be empty. err is the reason the token was
// refused, nil when none was sent (then no error attribute, as RFC 6750
// asks). scope, when set, is the scope the resource needs.
func BearerChallenge(metadataURL string, err error, scope string) string {
	var b strings.Builder
	b.WriteString("Bearer")
	sep := " "
	attr := func(k, v string) {
		b.WriteString(sep)
		b.WriteString(k)
		b.WriteString(`="`)
		b.WriteString(quoteEscape(v))
		b.WriteString(`"`)
		sep = ", "
	}
	if metadataURL != "" {
		attr("resource_metadata", metadataURL)
	}
	if err != nil && TokenReason(err) != ReasonMissing {
		attr("error", "invalid_token")
		if r := TokenReason(err); r != "" {
			attr("error_description", r)
		}
	}
	if scope != "" {
		attr("scope", scope)
	}
	return b.String()
}

func quoteEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s)
}

// BearerToken returns the token of an "Authorization: Bearer <token>"
// header, or "" when there is none. The scheme is case-insensitive.
func BearerToken(r *http.Request) string {
	h := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(tok)
}
