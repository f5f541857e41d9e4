package credential

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// clientMetadataName is the connections pages' path segment of the
// gateway's client metadata document.
const clientMetadataName = "client-metadata.json"

// checkClientMetadataURL applies the rules of a Client ID Metadata
// Document's URL (draft-ietf-oauth-client-id-metadata-document section
// 3): https, a host, a path other than "/", no "." or ".." segment, no
// fragment, no user name or password. An authorization server refuses a
// client_id that breaks one, so the configuration is refused at load.
func checkClientMetadataURL(raw string) error {
	u, err := url.Parse(raw)
	bad := func(why string) error {
		return fmt.Errorf("credential: client metadata URL %q %s", raw, why)
	}
	switch {
	case err != nil || u.Scheme != "https" || u.Host == "" || u.Opaque != "":
		return bad("must be an absolute https URL")
	case u.Path == "" || u.Path == "/":
		return bad("must have a path (the document's, e.g. <connect_url>/" + clientMetadataName + ")")
	case u.Fragment != "" || strings.Contains(raw, "#"):
		return bad("must have no fragment")
	case u.User != nil:
		return bad("must have no user name or password")
	}
	for _, seg := range strings.Split(u.EscapedPath(), "/") {
		if seg == "." || seg == ".." || strings.EqualFold(seg, "%2e") || strings.EqualFold(seg, "%2e%2e") ||
			strings.EqualFold(seg, ".%2e") || strings.EqualFold(seg, "%2e.") {
			return bad("must have no . or .. path segment")
		}
	}
	return nil
}

// ClientMetadata is the gateway's client metadata document (a Client ID
// Metadata Document): the client the gateway is at authorization servers
// that take its URL as client_id. A public client (PKCE, no secret: the
// document is public) of the authorization code and refresh token grants,
// with the redirect URI of every OAuth connection that may use it (those
// with no configured client_id). Nil when no ClientMetadataURL is set.
func (m *Manager) ClientMetadata() []byte {
	if m.opts.ClientMetadataURL == "" || m.connect == nil {
		return nil
	}
	redirects := []string{}
	for _, name := range m.order {
		st := m.specs[name]
		if st.spec.Kind != KindOAuth || st.spec.OAuth.ClientID != "" {
			continue
		}
		if r := m.redirectURI(st); !slices.Contains(redirects, r) {
			redirects = append(redirects, r)
		}
	}
	b, _ := json.Marshal(map[string]any{
		"client_id": m.opts.ClientMetadataURL, "client_name": registrationName, "redirect_uris": redirects,
		"grant_types": []string{"authorization_code", "refresh_token"}, "response_types": []string{"code"},
		"token_endpoint_auth_method": authNone, "application_type": "web",
	})
	return b
}

// serveClientMetadata answers GET <connect URL>/client-metadata.json. An
// authorization server fetches it when a user connects, and may cache it
// by HTTP caching; an hour bounds how long a changed list of redirect URIs
// waits.
func (m *Manager) serveClientMetadata(w http.ResponseWriter, r *http.Request) {
	doc := m.ClientMetadata()
	if doc == nil {
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
	_, _ = w.Write(doc)
}
