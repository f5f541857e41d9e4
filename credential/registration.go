package credential

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"
)

// Token endpoint authentication methods (RFC 7591 section 2) the gateway
// can use.
const (
	authNone  = "none"
	authBasic = "client_secret_basic"
	authPost  = "client_secret_post"
)

// maxRegistrationAnswer caps what is read of a registration answer; a
// client id or secret longer than maxClientField is refused.
const (
	maxRegistrationAnswer = 64 << 10
	maxClientField        = 4096
)

// registrationName is the client_name the gateway registers with.
const registrationName = "caddy-codemode gateway"

// oauthClient is who the gateway is at one authorization server: the
// configured client, or the one it registered there (RFC 7591).
type oauthClient struct {
	ID     string
	Secret string
	// Method is how the token endpoint authenticates the client: none,
	// client_secret_basic or client_secret_post.
	Method string
	// key and stored, for a client from dynamic registration: where and
	// as what it is kept, so that a refusal deletes exactly that one
	// (forgetRegistration); stored is nil when it could not be kept.
	key    string
	stored []byte
}

// authenticate puts the client's authentication on a token or revocation
// request: HTTP Basic (RFC 6749 section 2.3.1, form-encoded), the secret
// in the form, or client_id alone for a public client.
func (c oauthClient) authenticate(req *http.Request, form url.Values) {
	switch c.Method {
	case authBasic:
		req.SetBasicAuth(url.QueryEscape(c.ID), url.QueryEscape(c.Secret))
	case authPost:
		form.Set("client_id", c.ID)
		form.Set("client_secret", c.Secret)
	default:
		form.Set("client_id", c.ID)
	}
}

// registration is a client the gateway registered, as kept in the store
// under registration:{hash of service, issuer and redirect URI}; the
// secret is sealed with the vault key.
type registration struct {
	ClientID     string    `json:"client_id"`
	SealedSecret []byte    `json:"secret,omitempty"`
	Method       string    `json:"method"`
	ExpiresAt    time.Time `json:"expires_at,omitzero"`
}

// client returns the gateway's client at the authorization server of meta:
// the configured one, else the one registered there before (by this or
// another gateway sharing the store), else one registered now at the
// server's registration_endpoint. A registration belongs to the service,
// the issuer and the redirect URI: when the MCP server's metadata names
// another authorization server, the gateway registers there anew and
// never shows the old server's client to the new one (SEP-2352).
func (m *Manager) client(ctx context.Context, st *specState, meta asMetadata) (oauthClient, error) {
	o := st.spec.OAuth
	if o.ClientID != "" {
		if o.ClientSecret != "" {
			return oauthClient{ID: o.ClientID, Secret: o.ClientSecret, Method: authBasic}, nil
		}
		return oauthClient{ID: o.ClientID, Method: authNone}, nil
	}
	// The MCP authorization spec's order (2025-11-25, "Client
	// Registration Approaches"): a pre-registered client, then a Client ID
	// Metadata Document where the server takes one, then dynamic
	// registration. The document's URL is the client_id: nothing to
	// register or keep, and every gateway publishing the same document is
	// the same public client.
	if u := m.opts.ClientMetadataURL; u != "" && meta.CIMDSupported {
		return oauthClient{ID: u, Method: authNone}, nil
	}
	svc := st.spec.Service
	if meta.Issuer == "" {
		return oauthClient{}, registrationFailed(svc, "no authorization server metadata to register from; configure client_id", nil)
	}
	redirect := m.redirectURI(st)
	key := "registration:" + hashOf(svc+"\x00"+meta.Issuer+"\x00"+redirect)
	aad := []byte("caddy-codemode registration\x00" + key)
	// One registration at a time per service on this gateway: a burst of
	// first connections makes one client, not one each.
	st.regMu.Lock()
	defer st.regMu.Unlock()
	c, stale, ok := m.storedClient(ctx, key, aad)
	if ok {
		return c, nil
	}
	if stale != nil {
		// Its secret expired (kept without a time to live before the
		// twenty-fourth pass, or this clock is ahead of the one that
		// stored it): replaced below, else SetNX would keep it and every
		// connection register anew.
		_, _ = m.store.CompareAndSwap(ctx, key, stale, nil, 0)
	}
	if meta.RegistrationEndpoint == "" {
		return oauthClient{}, registrationFailed(svc, "the authorization server "+meta.Issuer+
			" offers no dynamic client registration (registration_endpoint); configure client_id", nil)
	}
	// A secret that has expired when it arrives (client_secret_expires_at
	// not after now) is no client: registered again once, and never kept.
	var reg registration
	var ttl time.Duration
	for attempt := 1; ; attempt++ {
		var err error
		if c, reg, err = m.register(ctx, st, meta, redirect, aad); err != nil {
			return oauthClient{}, err
		}
		if reg.ExpiresAt.IsZero() {
			break // 0: the secret does not expire; kept without a time to live
		}
		if ttl = reg.ExpiresAt.Sub(m.now()); ttl > 0 {
			break
		}
		if attempt == 2 {
			return oauthClient{}, registrationFailed(svc, fmt.Sprintf("the authorization server registered client secrets that had already expired (client_secret_expires_at %s), twice",
				reg.ExpiresAt.UTC().Format(time.RFC3339)), nil)
		}
	}
	b, _ := json.Marshal(reg)
	// Another gateway may have registered meanwhile: the first stored wins,
	// so every gateway uses the same client. Kept until its secret expires.
	stored, err := m.store.SetNX(ctx, key, b, ttl)
	if err != nil {
		return oauthClient{}, unavailable(svc, err)
	}
	if !stored {
		if theirs, _, ok := m.storedClient(ctx, key, aad); ok {
			return theirs, nil
		}
	} else {
		c.key, c.stored = key, b
	}
	m.log.Info("registered a client at the upstream's authorization server", zap.String("service", svc),
		zap.String("issuer", meta.Issuer), zap.String("token_endpoint_auth_method", c.Method))
	return c, nil
}

// storedClient reads a registration kept under key; ok is false when there
// is none, it is stale, or the vault key can no longer open its secret.
// stale is the stored value of a registration no gateway can use (to be
// replaced), nil otherwise.
func (m *Manager) storedClient(ctx context.Context, key string, aad []byte) (c oauthClient, stale []byte, ok bool) {
	b, err := m.store.Get(ctx, key)
	if err != nil {
		return oauthClient{}, nil, false
	}
	reg, usable := m.usableRegistration(b)
	if !usable {
		return oauthClient{}, b, false
	}
	c = oauthClient{ID: reg.ClientID, Method: reg.Method, key: key, stored: b}
	if len(reg.SealedSecret) > 0 {
		plain, _, err := m.opts.Keys.open(reg.SealedSecret, aad)
		if err != nil {
			return oauthClient{}, nil, false
		}
		c.Secret = string(plain)
	}
	return c, nil, true
}

// usableRegistration decodes a stored registration; false when no gateway
// can use it: not one (no JSON, no client id) or its secret expired.
func (m *Manager) usableRegistration(b []byte) (registration, bool) {
	var reg registration
	if json.Unmarshal(b, &reg) != nil || reg.ClientID == "" || !reg.ExpiresAt.IsZero() && !m.now().Before(reg.ExpiresAt) {
		return registration{}, false
	}
	return reg, true
}

// forgetRegistration deletes the registration c, which the authorization
// server no longer knows (it answered invalid_client to its
// authentication), so that the next connection registers anew instead of
// failing the same way until the store is cleared. Only if it is still
// the one stored: a gateway that registered meanwhile keeps its own.
func (m *Manager) forgetRegistration(ctx context.Context, st *specState, c oauthClient) {
	if c.key == "" || c.stored == nil {
		return
	}
	if ok, err := m.store.CompareAndSwap(context.WithoutCancel(ctx), c.key, c.stored, nil, 0); err == nil && ok {
		m.log.Info("the upstream's authorization server refused the gateway's registered client (invalid_client); the next connection registers anew",
			zap.String("service", st.spec.Service))
	}
}

// register asks the authorization server for a client (RFC 7591): a web
// application with the gateway's redirect URI, authorization code and
// refresh token grants, public (token_endpoint_auth_method none) unless
// the server's metadata says its token endpoint takes only secrets.
func (m *Manager) register(ctx context.Context, st *specState, meta asMetadata, redirect string, aad []byte) (oauthClient, registration, error) {
	svc := st.spec.Service
	method := authNone
	if s := meta.TokenEndpointAuthMethods; len(s) > 0 && !slices.Contains(s, authNone) {
		switch {
		case slices.Contains(s, authBasic):
			method = authBasic
		case slices.Contains(s, authPost):
			method = authPost
		default:
			return oauthClient{}, registration{}, registrationFailed(svc, fmt.Sprintf("the token endpoint of %s takes none of the methods the gateway can use (%s, %s, %s): it offers %s",
				meta.Issuer, authNone, authBasic, authPost, strings.Join(s, ", ")), nil)
		}
	}
	body, _ := json.Marshal(map[string]any{
		"client_name": registrationName, "redirect_uris": []string{redirect}, "application_type": "web",
		"grant_types": []string{"authorization_code", "refresh_token"}, "response_types": []string{"code"},
		"token_endpoint_auth_method": method,
	})
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, meta.RegistrationEndpoint, strings.NewReader(string(body)))
	if err != nil {
		return oauthClient{}, registration{}, registrationFailed(svc, "building the registration request", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := st.client.Do(req)
	if err != nil {
		err = scrubURLError(err)
		if ErrorCode(err) == CodeEndpointRefused {
			return oauthClient{}, registration{}, err
		}
		return oauthClient{}, registration{}, registrationFailed(svc, "the registration endpoint did not answer", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxRegistrationAnswer+1))
	if err != nil {
		return oauthClient{}, registration{}, registrationFailed(svc, "reading the registration answer", err)
	}
	if len(b) > maxRegistrationAnswer {
		return oauthClient{}, registration{}, registrationFailed(svc, fmt.Sprintf("the registration answer is over %d bytes", maxRegistrationAnswer), nil)
	}
	var ans struct {
		ClientID     string `json:"client_id"`
		ClientSecret string `json:"client_secret"`
		Method       string `json:"token_endpoint_auth_method"`
		ExpiresAt    int64  `json:"client_secret_expires_at"`
		Error        string `json:"error"`
		ErrorDesc    string `json:"error_description"`
	}
	if err := json.Unmarshal(b, &ans); err != nil {
		return oauthClient{}, registration{}, registrationFailed(svc, fmt.Sprintf("the registration endpoint answered %d with a body that is not JSON", resp.StatusCode), nil)
	}
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK || ans.Error != "" {
		return oauthClient{}, registration{}, registrationFailed(svc, fmt.Sprintf("the registration endpoint refused: %d %s %s",
			resp.StatusCode, oauthCode(ans.Error), oauthCode(ans.ErrorDesc)), nil)
	}
	if ans.ClientID == "" || len(ans.ClientID) > maxClientField || len(ans.ClientSecret) > maxClientField {
		return oauthClient{}, registration{}, registrationFailed(svc, "the registration answer has no client_id, or a client_id or client_secret over 4096 bytes", nil)
	}
	// The method the server registered is the one to use (RFC 7591
	// section 3.2.1); without one, a secret means HTTP Basic (the
	// default of section 2).
	switch {
	case ans.Method == "" && ans.ClientSecret != "":
		ans.Method = authBasic
	case ans.Method == "":
		ans.Method = authNone
	case ans.Method != authNone && ans.Method != authBasic && ans.Method != authPost:
		return oauthClient{}, registration{}, registrationFailed(svc, fmt.Sprintf("the server registered token_endpoint_auth_method %q, which the gateway cannot use", oauthCode(ans.Method)), nil)
	}
	if ans.Method != authNone && ans.ClientSecret == "" {
		return oauthClient{}, registration{}, registrationFailed(svc, "the server registered "+ans.Method+" without a client_secret", nil)
	}
	reg := registration{ClientID: ans.ClientID, Method: ans.Method}
	// client_secret_expires_at is the secret's (RFC 7591 section 3.2.1):
	// a public client has none to expire.
	if ans.ExpiresAt > 0 && ans.ClientSecret != "" {
		reg.ExpiresAt = time.Unix(ans.ExpiresAt, 0)
	}
	if ans.ClientSecret != "" {
		if reg.SealedSecret, err = m.opts.Keys.seal(m.rand, []byte(ans.ClientSecret), aad); err != nil {
			return oauthClient{}, registration{}, registrationFailed(svc, "sealing the client secret", err)
		}
	}
	return oauthClient{ID: ans.ClientID, Secret: ans.ClientSecret, Method: ans.Method}, reg, nil
}

func registrationFailed(service, why string, cause error) *Error {
	return &Error{Code: CodeRegistrationFailed, Service: service, Err: cause,
		Message: "credential " + service + ": registering the gateway at the upstream's authorization server failed: " + why}
}

// errRegistrationChanged: the client a connection started with is no
// longer the gateway's registration (it expired, or the authorization
// server changed meanwhile).
var errRegistrationChanged = errors.New("the gateway's registration at the upstream changed")
