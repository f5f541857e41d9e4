package oauth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
	"go.uber.org/zap"
)

// The token endpoint is the server's own; op's exchange is not used. op
// signs every token with typ JWT (RFC 9068 access tokens need at+jwt),
// builds the ID token's claims from the userinfo it sets from scopes (which
// overwrote sub with an empty subject), reads client credentials from
// whichever method a client sends, and decodes repeated parameters
// differently from the form parser before it. Here every rule is in one
// place: one client authentication method, the one the client registered;
// no repeated parameter; PKCE S256 always; RFC 9068 access tokens; an ID
// token for openid only, with sub; no caching of any answer.

// errGrant marks a grant that is unknown, used, expired, revoked or not the
// client's: invalid_grant. Other errors of the storage are server-side.
var errGrant = errors.New("invalid grant")

func grantErr(format string, a ...any) error {
	return fmt.Errorf("%w: %s", errGrant, fmt.Sprintf(format, a...))
}

// tokenResponse is the RFC 6749 section 5.1 body.
type tokenResponse struct {
	AccessToken  string `json:"access_token"`
	TokenType    string `json:"token_type"`
	ExpiresIn    int64  `json:"expires_in"`
	RefreshToken string `json:"refresh_token,omitempty"`
	Scope        string `json:"scope,omitempty"`
	IDToken      string `json:"id_token,omitempty"`
}

// issued is what the two grants hand to the token signer.
type issued struct {
	subject   string
	clientID  string
	scopes    []string // of the access token (offline_access included)
	granted   []string // of the grant, for the ID token's decision
	audience  []string
	authTime  time.Time
	sessionID string
	jti       string
	nonce     string
	expires   time.Time
	refresh   string
}

// token serves /oauth/token: authorization_code (with PKCE) and
// refresh_token (when enabled).
func (s *Server) token(w http.ResponseWriter, r *http.Request) {
	// RFC 6749 section 5.1: no cache may keep a token; errors too.
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Pragma", "no-cache")
	if !parsePostForm(w, r) {
		return
	}
	if p := repeatedParam(r.PostForm, "resource"); p != "" {
		writeOAuthError(w, http.StatusBadRequest, "invalid_request", p+" is repeated (RFC 6749 section 3.2)")
		return
	}
	grant := r.PostForm.Get("grant_type")
	switch grant {
	case "":
		writeOAuthError(w, http.StatusBadRequest, "invalid_request", "grant_type is required")
		return
	case string(oidc.GrantTypeCode):
	case string(oidc.GrantTypeRefreshToken):
		if !s.cfg.refreshOn {
			writeOAuthError(w, http.StatusBadRequest, "unsupported_grant_type", "refresh tokens are not enabled")
			return
		}
	default:
		writeOAuthError(w, http.StatusBadRequest, "unsupported_grant_type", "grant_type must be authorization_code or refresh_token")
		return
	}
	c, ok := s.authenticateClient(w, r)
	if !ok {
		return
	}
	if !slices.Contains(c.Grants, oidc.GrantType(grant)) {
		writeOAuthError(w, http.StatusBadRequest, "unauthorized_client", "the client is not registered for grant type "+grant)
		return
	}
	var is *issued
	var err error
	if grant == string(oidc.GrantTypeCode) {
		is, err = s.exchangeCode(r.Context(), c, r.PostForm)
	} else {
		is, err = s.refreshGrant(r.Context(), c, r.PostForm)
	}
	if err != nil {
		s.writeTokenError(w, r, c, err)
		return
	}
	resp, err := s.tokenResponse(is)
	if err != nil {
		s.reqLog(r).Error("signing tokens", errField(err))
		writeOAuthError(w, http.StatusInternalServerError, "server_error", "tokens could not be signed")
		return
	}
	s.metrics.tokenIssued(grant)
	writeJSON(w, http.StatusOK, resp)
}

// repeatedParam returns the first parameter given more than once, apart
// from those allowed to repeat (RFC 6749 section 3.1 and 3.2: parameters
// must not be included more than once).
func repeatedParam(v url.Values, allowed ...string) string {
	for k, vs := range v {
		if len(vs) > 1 && !slices.Contains(allowed, k) {
			return k
		}
	}
	return ""
}

// requestError is an RFC 6749 error a grant answers with.
type requestError struct{ code, desc string }

func (e *requestError) Error() string { return e.code + ": " + e.desc }

func (s *Server) writeTokenError(w http.ResponseWriter, r *http.Request, c *client, err error) {
	var re *requestError
	var oe *oidc.Error
	switch {
	case errors.As(err, &re):
		writeOAuthError(w, http.StatusBadRequest, re.code, re.desc)
	case errors.Is(err, errGrant):
		s.log.Info("token request refused", logClientID(c.ID), zap.String("error", "invalid_grant"), errField(err))
		writeOAuthError(w, http.StatusBadRequest, "invalid_grant", strings.TrimPrefix(err.Error(), errGrant.Error()+": "))
	case errors.As(err, &oe):
		writeOAuthError(w, http.StatusBadRequest, string(oe.ErrorType), oe.Description)
	default:
		s.reqLog(r).Error("token request failed", logClientID(c.ID), errField(err))
		writeStorageUnavailable(w)
	}
}

// exchangeCode redeems an authorization code. The code is consumed first,
// so a failed exchange (wrong verifier, wrong redirect URI) cannot be
// retried with it.
func (s *Server) exchangeCode(ctx context.Context, c *client, f url.Values) (*issued, error) {
	code, verifier := f.Get("code"), f.Get("code_verifier")
	switch {
	case code == "":
		return nil, &requestError{"invalid_request", "code is required"}
	case verifier == "":
		return nil, &requestError{"invalid_request", "code_verifier is required (PKCE)"}
	case !validVerifier(verifier):
		return nil, &requestError{"invalid_request", "code_verifier must be 43 to 128 characters of A-Z a-z 0-9 - . _ ~ (RFC 7636)"}
	case f.Get("redirect_uri") == "":
		return nil, &requestError{"invalid_request", "redirect_uri is required"}
	}
	st := opStorage{s}
	a, err := s.redeemCode(ctx, code)
	if err != nil {
		return nil, err
	}
	// A refused exchange buys no grant: a replay of its code has nothing
	// to revoke.
	refuse := func(err error) (*issued, error) {
		s.codeBoughtNothing(ctx, code, a.sid)
		return nil, err
	}
	switch {
	case a.ClientID != c.ID:
		return refuse(grantErr("the code was issued to another client"))
	case f.Get("redirect_uri") != a.RedirectURI:
		return refuse(grantErr("redirect_uri differs from the authorization request"))
	case !a.Done():
		return refuse(grantErr("the authorization is not complete"))
	case a.ChallengeMethod != oidc.CodeChallengeMethodS256 || !s256Matches(verifier, a.Challenge):
		return refuse(grantErr("code_verifier does not match the code_challenge"))
	}
	audience, err := s.tokenAudience(ctx, f["resource"], a.Audience)
	if err != nil {
		return refuse(err)
	}
	is := &issued{subject: a.Subject, clientID: c.ID, scopes: a.Scopes, granted: a.Scopes, audience: audience,
		authTime: a.AuthTime, nonce: a.Nonce}
	// A refresh token for every client registered for the refresh_token
	// grant, whether or not it asked for offline_access (OAuth 2.1 leaves
	// it to the server; MCP clients signal it by the grant type, and may add
	// offline_access because the metadata lists it).
	if s.cfg.refreshOn && slices.Contains(c.Grants, oidc.GrantTypeRefreshToken) {
		is.jti, is.refresh, is.expires, err = st.CreateAccessAndRefreshTokens(ctx, a, "")
	} else {
		is.jti, is.expires, err = st.CreateAccessToken(ctx, a)
	}
	if err != nil {
		return nil, err
	}
	is.sessionID = a.sid
	if err := st.DeleteAuthRequest(ctx, a.ID); err != nil {
		s.log.Warn("deleting a redeemed authorization", errField(err))
	}
	s.touchClient(ctx, c)
	return is, nil
}

// refreshGrant rotates a refresh token. A token that is not the client's is
// refused before anything changes.
func (s *Server) refreshGrant(ctx context.Context, c *client, f url.Values) (*issued, error) {
	token := f.Get("refresh_token")
	if token == "" {
		return nil, &requestError{"invalid_request", "refresh_token is required"}
	}
	st := opStorage{s}
	req, err := st.TokenRequestByRefreshToken(ctx, token)
	if errors.Is(err, op.ErrInvalidRefreshToken) {
		return nil, grantErr("refresh token unknown, expired, used or revoked")
	}
	if err != nil {
		return nil, err
	}
	rr := req.(*refreshRequest)
	if rr.rec.ClientID != c.ID {
		return nil, grantErr("the refresh token was issued to another client")
	}
	if f.Has("scope") {
		// RFC 6749 section 6: a subset of the grant's scopes, which narrows
		// the new access token only.
		want := uniqueFields(f.Get("scope"))
		for _, sc := range want {
			if !slices.Contains(rr.rec.Scopes, sc) {
				return nil, &requestError{"invalid_scope", "scope " + sc + " was not granted"}
			}
		}
		rr.SetCurrentScopes(want)
	}
	audience, err := s.tokenAudience(ctx, f["resource"], rr.rec.Audience)
	if err != nil {
		return nil, err
	}
	is := &issued{subject: rr.rec.Subject, clientID: c.ID, granted: rr.rec.Scopes, audience: audience, authTime: rr.rec.AuthTime}
	is.jti, is.refresh, is.expires, err = st.CreateAccessAndRefreshTokens(ctx, rr, token)
	var oe *oidc.Error
	if errors.As(err, &oe) && oe.ErrorType == oidc.InvalidGrant {
		return nil, grantErr("%s", oe.Description)
	}
	if err != nil {
		return nil, err
	}
	is.scopes, is.sessionID = rr.GetScopes(), rr.rec.SessionID
	s.touchClient(ctx, c)
	return is, nil
}

// tokenAudience is the audience of the new access token: the grant's, or
// the resources named at the token endpoint (RFC 8707 section 2.2), each of
// which must be one the grant was authorized for. Either way each must be a
// resource the server serves now: the set may have shrunk since the grant
// (a Caddy reload that dropped a route), and no token is minted for a
// resource the server no longer serves.
func (s *Server) tokenAudience(ctx context.Context, resources, grant []string) ([]string, error) {
	if len(resources) == 0 {
		for _, g := range grant {
			if !s.serves(ctx, g) {
				return nil, grantErr("the grant is for resource %s, which this server no longer serves; authorize again", g)
			}
		}
		return grant, nil
	}
	var out []string
	for _, r := range resources {
		cr, ok := canonicalResource(r)
		if ok && !s.serves(ctx, cr) {
			return nil, &requestError{"invalid_target", "this server issues no tokens for resource " + cr}
		}
		if !ok || !slices.Contains(grant, cr) {
			return nil, &requestError{"invalid_target", "resource " + r + " was not authorized for this grant"}
		}
		if !slices.Contains(out, cr) {
			out = append(out, cr)
		}
	}
	return out, nil
}

func validVerifier(v string) bool {
	if len(v) < 43 || len(v) > 128 {
		return false
	}
	for _, ch := range v {
		if !(ch >= 'A' && ch <= 'Z' || ch >= 'a' && ch <= 'z' || ch >= '0' && ch <= '9' || strings.ContainsRune("-._~", ch)) {
			return false
		}
	}
	return true
}

func s256Matches(verifier, challenge string) bool {
	h := sha256.Sum256([]byte(verifier))
	return subtle.ConstantTimeCompare([]byte(base64.RawURLEncoding.EncodeToString(h[:])), []byte(challenge)) == 1
}

// accessTokenClaims are RFC 9068's claims plus the two the server checks
// itself: sid (the grant, for revocation) and token_use.
type accessTokenClaims struct {
	Issuer    string   `json:"iss"`
	Subject   string   `json:"sub"`
	Audience  audience `json:"aud"`
	Expiry    int64    `json:"exp"`
	IssuedAt  int64    `json:"iat"`
	NotBefore int64    `json:"nbf"`
	ID        string   `json:"jti"`
	ClientID  string   `json:"client_id"`
	Scope     string   `json:"scope,omitempty"`
	AuthTime  int64    `json:"auth_time,omitempty"`
	SID       string   `json:"sid"`
	TokenUse  string   `json:"token_use"`
}

// idTokenClaims are OpenID Connect Core section 2's claims.
type idTokenClaims struct {
	Issuer   string   `json:"iss"`
	Subject  string   `json:"sub"`
	Audience audience `json:"aud"`
	Expiry   int64    `json:"exp"`
	IssuedAt int64    `json:"iat"`
	AuthTime int64    `json:"auth_time,omitempty"`
	Nonce    string   `json:"nonce,omitempty"`
	AMR      []string `json:"amr,omitempty"`
	AZP      string   `json:"azp"`
	AtHash   string   `json:"at_hash,omitempty"`
	SID      string   `json:"sid,omitempty"`
}

// AccessTokenType is the typ header of the access tokens (RFC 9068).
const AccessTokenType = "at+jwt"

// tokenResponse signs the access token and, for an openid grant, the ID
// token.
func (s *Server) tokenResponse(is *issued) (*tokenResponse, error) {
	key, err := s.keys.current()
	if err != nil {
		return nil, err
	}
	now := s.now()
	ac := accessTokenClaims{
		Issuer: s.cfg.issuer, Subject: is.subject, Audience: is.audience, Expiry: is.expires.Unix(),
		IssuedAt: now.Unix(), NotBefore: now.Unix(), ID: is.jti, ClientID: is.clientID,
		Scope: strings.Join(visibleScopes(is.scopes), " "), SID: is.sessionID, TokenUse: "access",
	}
	if !is.authTime.IsZero() {
		ac.AuthTime = is.authTime.Unix()
	}
	at, err := signJWT(key, AccessTokenType, ac)
	if err != nil {
		return nil, err
	}
	resp := &tokenResponse{AccessToken: at, TokenType: oidc.BearerToken, ExpiresIn: max(int64(is.expires.Sub(now)/time.Second), 0),
		RefreshToken: is.refresh, Scope: strings.Join(is.scopes, " ")}
	if slices.Contains(is.granted, oidc.ScopeOpenID) {
		atHash, err := oidc.ClaimHash(at, key.alg)
		if err != nil {
			return nil, err
		}
		ic := idTokenClaims{
			Issuer: s.cfg.issuer, Subject: is.subject, Audience: audience{is.clientID}, Expiry: now.Add(s.cfg.accessTTL).Unix(),
			IssuedAt: now.Unix(), Nonce: is.nonce, AMR: []string{"pwd"}, AZP: is.clientID, AtHash: atHash, SID: is.sessionID,
		}
		if !is.authTime.IsZero() {
			ic.AuthTime = is.authTime.Unix()
		}
		if resp.IDToken, err = signJWT(key, "JWT", ic); err != nil {
			return nil, err
		}
	}
	return resp, nil
}

func signJWT(k *signingKey, typ string, claims any) (string, error) {
	payload, err := json.Marshal(claims)
	if err != nil {
		return "", err
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: k.alg, Key: jose.JSONWebKey{Key: k.private, KeyID: k.id}},
		(&jose.SignerOptions{}).WithType(jose.ContentType(typ)))
	if err != nil {
		return "", fmt.Errorf("building signer: %w", err)
	}
	jws, err := signer.Sign(payload)
	if err != nil {
		return "", fmt.Errorf("signing: %w", err)
	}
	return jws.CompactSerialize()
}

// authenticateClient authenticates the client of a token or revocation
// request, by exactly one method (RFC 6749 section 2.3): HTTP Basic, a
// client_secret in the body, or none for a public client. A public client
// that sends a secret, a confidential client without one, and a registered
// client using another method than the one it registered are invalid_client.
// It answers the error itself.
func (s *Server) authenticateClient(w http.ResponseWriter, r *http.Request) (*client, bool) {
	f := r.PostForm
	id, secret, basic := r.BasicAuth()
	method := oidc.AuthMethodNone
	// invalid_client is 401; with the Basic challenge only when the client
	// tried Basic (RFC 6749 section 5.2), since a challenge tells a client
	// to authenticate that way.
	refuse := func(desc string) {
		if basic {
			w.Header().Set("WWW-Authenticate", `Basic realm="oauth"`)
		}
		writeOAuthError(w, http.StatusUnauthorized, "invalid_client", desc)
	}
	switch {
	case basic && f.Has("client_secret"):
		writeOAuthError(w, http.StatusBadRequest, "invalid_request", "more than one client authentication method")
		return nil, false
	case basic:
		var err1, err2 error
		id, err1 = url.QueryUnescape(id)
		secret, err2 = url.QueryUnescape(secret)
		if err1 != nil || err2 != nil {
			refuse("malformed client credentials")
			return nil, false
		}
		if fid := f.Get("client_id"); fid != "" && fid != id {
			writeOAuthError(w, http.StatusBadRequest, "invalid_request", "client_id differs from the authenticated client")
			return nil, false
		}
		method = oidc.AuthMethodBasic
	default:
		id = f.Get("client_id")
		if f.Has("client_secret") {
			secret, method = f.Get("client_secret"), oidc.AuthMethodPost
		}
	}
	if id == "" {
		refuse("client_id is required")
		return nil, false
	}
	c, err := s.client(r.Context(), id)
	if ErrorCode(err) == CodeStorage {
		s.reqLog(r).Error("authenticating a client", logClientID(id), errField(err))
		writeStorageUnavailable(w)
		return nil, false
	}
	if err != nil {
		refuse("unknown client")
		return nil, false
	}
	switch {
	case c.public() && method != oidc.AuthMethodNone:
		refuse("a public client must not send a client secret")
		return nil, false
	case c.public():
		return c, true
	case method == oidc.AuthMethodNone:
		refuse("client authentication is required")
		return nil, false
	case !c.acceptsMethod(method):
		refuse("the client is registered for " + string(c.AuthMeth))
		return nil, false
	case !c.checkSecret(secret):
		refuse("client authentication failed")
		return nil, false
	}
	return c, true
}
