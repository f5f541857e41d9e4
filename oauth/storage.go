package oauth

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
	"go.uber.org/zap"
)

// Key patterns (all under the configured prefix). Tokens and codes are
// never used as keys themselves: the key holds their SHA-256, so a dump of
// the store yields nothing a client could present.
func keyPending(id string) string      { return "pending:" + id }
func keyCode(code string) string       { return "code:" + digest(code) }
func keyCodeUsed(code string) string   { return "code:" + digest(code) + ":used" }
func keyRefresh(token string) string   { return "refresh:" + digest(token) }
func keyRotated(token string) string   { return keyRotatedDigest(digest(token)) }
func keyRotatedDigest(d string) string { return "refresh:" + d + ":rotated" }
func keyGraceUsed(token string) string { return "refresh:" + digest(token) + ":grace" }
func keySession(id string) string      { return "session:" + id }
func keyClient(clientID string) string { return "client:" + clientID }

// keyRegistrations is the sorted set that counts registered clients on
// Redis (redisRegistrations).
const keyRegistrations = "clients"

// keyPendings is the sorted set that counts pending authorizations on
// Redis (a redisRegistrations of their ids).
const keyPendings = "pendings"

func digest(s string) string {
	h := sha256.Sum256([]byte(s))
	return base64.RawURLEncoding.EncodeToString(h[:])
}

// authRequest is a pending authorization (pending:{id}).
type authRequest struct {
	ID              string                   `json:"id"`
	ClientID        string                   `json:"client_id"`
	RedirectURI     string                   `json:"redirect_uri"`
	State           string                   `json:"state"`
	Nonce           string                   `json:"nonce,omitempty"`
	Scopes          []string                 `json:"scopes"`
	ResponseType    oidc.ResponseType        `json:"response_type"`
	ResponseMode    oidc.ResponseMode        `json:"response_mode,omitempty"`
	Challenge       string                   `json:"code_challenge"`
	ChallengeMethod oidc.CodeChallengeMethod `json:"code_challenge_method"`
	Audience        []string                 `json:"audience"`
	// Client's display, taken at the authorization request so the pages do
	// not fetch a metadata document again.
	ClientName     string    `json:"client_name,omitempty"`
	ClientHost     string    `json:"client_host,omitempty"`     // a metadata document's host: the name is unverified
	SelfRegistered bool      `json:"self_registered,omitempty"` // dynamically registered: the name is unverified
	LocalRedirects bool      `json:"local_redirects,omitempty"`
	Subject        string    `json:"subject,omitempty"`
	AuthTime       time.Time `json:"auth_time,omitzero"`
	LoggedIn       bool      `json:"logged_in,omitempty"`
	Approved       bool      `json:"approved,omitempty"`
	CodeIssued     bool      `json:"code_issued,omitempty"`
	Failures       int       `json:"failures,omitempty"` // wrong passwords so far
	CSRF           string    `json:"csrf"`
	// SignIn is the SHA-256 of the secret the login answer hands to the
	// browser that signed in (base64url): the consent screen and the
	// callback go on only with it, so whoever else knows the id (the one
	// who started the authorization and sent the user its login link)
	// cannot approve or collect the code in the user's place.
	SignIn  string    `json:"signin,omitempty"`
	Expires time.Time `json:"expires"`
	// raw is the record as read (pending), which a change replaces
	// by compare-and-swap.
	raw []byte

	sid  string // session of this request's grant, named when its code was redeemed
	code string // the code it was fetched by, to record the code as used
}

func (a *authRequest) GetID() string         { return a.ID }
func (a *authRequest) GetACR() string        { return "" }
func (a *authRequest) GetAMR() []string      { return []string{"pwd"} }
func (a *authRequest) GetAudience() []string { return a.Audience }
func (a *authRequest) GetAuthTime() time.Time {
	return a.AuthTime
}
func (a *authRequest) GetClientID() string { return a.ClientID }
func (a *authRequest) GetCodeChallenge() *oidc.CodeChallenge {
	if a.Challenge == "" {
		return nil
	}
	return &oidc.CodeChallenge{Challenge: a.Challenge, Method: a.ChallengeMethod}
}
func (a *authRequest) GetNonce() string                   { return a.Nonce }
func (a *authRequest) GetRedirectURI() string             { return a.RedirectURI }
func (a *authRequest) GetResponseType() oidc.ResponseType { return a.ResponseType }
func (a *authRequest) GetResponseMode() oidc.ResponseMode { return a.ResponseMode }
func (a *authRequest) GetScopes() []string                { return a.Scopes }
func (a *authRequest) GetState() string                   { return a.State }
func (a *authRequest) GetSubject() string                 { return a.Subject }
func (a *authRequest) Done() bool                         { return a.LoggedIn && a.Approved }

// codeRecord is an authorization code (code:{sha256(code)}), single use.
type codeRecord struct {
	RequestID string    `json:"request_id"`
	Expires   time.Time `json:"expires"`
}

// session is one grant: the chain of refresh tokens and the access tokens
// they minted (session:{id}). Deleting it revokes all of them.
type session struct {
	ID       string    `json:"id"`
	Subject  string    `json:"subject"`
	ClientID string    `json:"client_id"`
	Scopes   []string  `json:"scopes"`
	Audience []string  `json:"audience"`
	AuthTime time.Time `json:"auth_time"`
	Created  time.Time `json:"created"`
	Expires  time.Time `json:"expires"`
}

// refreshRecord is a refresh token (refresh:{sha256(token)}). It stays
// after rotation, until it expires, so that a reuse is recognised.
type refreshRecord struct {
	SessionID string    `json:"session_id"`
	Subject   string    `json:"subject"`
	ClientID  string    `json:"client_id"`
	Scopes    []string  `json:"scopes"`
	Audience  []string  `json:"audience"`
	AuthTime  time.Time `json:"auth_time"`
	Expires   time.Time `json:"expires"`
}

// rotation is the marker of a rotated refresh token
// (refresh:{sha256(token)}:rotated), set atomically by the one use that
// rotates it.
type rotation struct {
	At time.Time `json:"at"`
	// Next is the SHA-256 of the successor the rotation issued.
	Next string `json:"next,omitempty"`
	// Retired marks a successor whose answer was lost and that a grace use
	// of its predecessor replaced: it was never received by the client, so
	// any use of it is a reuse.
	Retired bool `json:"retired,omitempty"`
}

func parseRotation(b []byte) rotation {
	var r rotation
	if json.Unmarshal(b, &r) != nil {
		// Markers written before successors were recorded hold the time
		// alone; they allow no grace.
		r = rotation{}
	}
	return r
}

// refreshRequest is what op carries through a refresh_token grant.
type refreshRequest struct {
	rec     refreshRecord
	token   string
	scopes  []string
	inGrace bool
	rot     rotation // the presented token's rotation, when inGrace
}

func (r *refreshRequest) GetAMR() []string       { return []string{"pwd"} }
func (r *refreshRequest) GetAudience() []string  { return r.rec.Audience }
func (r *refreshRequest) GetAuthTime() time.Time { return r.rec.AuthTime }
func (r *refreshRequest) GetClientID() string    { return r.rec.ClientID }
func (r *refreshRequest) GetScopes() []string    { return r.scopes }
func (r *refreshRequest) GetSubject() string     { return r.rec.Subject }
func (r *refreshRequest) SetCurrentScopes(scopes []string) {
	r.scopes = scopes
}

// opStorage implements op.Storage on the server's kvStore.
type opStorage struct{ s *Server }

var _ op.Storage = opStorage{}
var _ op.CanGetPrivateClaimsFromRequest = opStorage{}

func (st opStorage) getJSON(ctx context.Context, key string, v any) error {
	b, err := st.s.store.Get(ctx, key)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

func (st opStorage) putJSON(ctx context.Context, key string, v any, ttl time.Duration) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encoding %s: %w", strings.SplitN(key, ":", 2)[0], err)
	}
	return st.s.store.Set(ctx, key, b, ttl)
}

// CreateAuthRequest stores the validated authorization as pending for ten
// minutes. The resource indicator and CSRF token come from the authorize
// wrapper through the context.
func (st opStorage) CreateAuthRequest(ctx context.Context, req *oidc.AuthRequest, _ string) (op.AuthRequest, error) {
	s := st.s
	extra, _ := ctx.Value(authorizeExtraKey{}).(*authorizeExtra)
	if extra == nil {
		return nil, errors.New("authorize request did not pass the server's checks")
	}
	a := &authRequest{
		ID:              extra.id,
		ClientID:        req.ClientID,
		RedirectURI:     req.RedirectURI,
		State:           req.State,
		Nonce:           req.Nonce,
		Scopes:          []string(req.Scopes),
		ResponseType:    req.ResponseType,
		ResponseMode:    req.ResponseMode,
		Challenge:       req.CodeChallenge,
		ChallengeMethod: req.CodeChallengeMethod,
		Audience:        extra.audience,
		ClientName:      extra.client.displayName(),
		ClientHost:      extra.client.documentHost,
		SelfRegistered:  extra.client.selfRegistered(),
		LocalRedirects:  (extra.client.document || extra.client.selfRegistered()) && extra.client.onlyLocalRedirects(),
		CSRF:            s.randomToken(24),
		Expires:         extra.expires,
	}
	if err := st.putJSON(ctx, keyPending(a.ID), a, PendingTTL); err != nil {
		return nil, err
	}
	extra.created = true
	return a, nil
}

func (st opStorage) AuthRequestByID(ctx context.Context, id string) (op.AuthRequest, error) {
	return st.s.pending(ctx, id)
}

// AuthRequestByCode is op's way to redeem a code; the server's token
// endpoint calls redeemCode itself.
func (st opStorage) AuthRequestByCode(ctx context.Context, code string) (op.AuthRequest, error) {
	return st.s.redeemCode(ctx, code)
}

// redeemCode consumes the code: whatever happens next (a wrong verifier, a
// wrong redirect URI), the code cannot be used again. A code that is not
// redeemable is errGrant.
//
// The code is used by whoever marks it used first (SET NX): the mark names
// the grant its exchange is about to create, so that a replay, however
// soon after, revokes that grant (OAuth 2.1 section 4.1.3). The code was
// consumed by GETDEL and marked only once its grant was stored, and a
// replay in between found neither and revoked nothing.
func (s *Server) redeemCode(ctx context.Context, code string) (*authRequest, error) {
	b, err := s.store.Get(ctx, keyCode(code))
	if errors.Is(err, errNotFound) {
		// A code presented again after a successful exchange was stolen
		// or replayed: the tokens it bought are revoked.
		s.codeReused(ctx, code)
		return nil, grantErr("code unknown, used or expired")
	}
	if err != nil {
		return nil, err
	}
	var c codeRecord
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("decoding code record: %w", err)
	}
	if !s.now().Before(c.Expires) {
		return nil, grantErr("code expired")
	}
	sid := s.randomToken(18)
	first, err := s.store.SetNX(ctx, keyCodeUsed(code), []byte(sid), PendingTTL)
	if err != nil {
		return nil, err
	}
	if !first {
		s.codeReused(ctx, code)
		return nil, grantErr("code unknown, used or expired")
	}
	if err := s.store.Del(ctx, keyCode(code)); err != nil {
		return nil, err
	}
	a, err := s.pending(ctx, c.RequestID)
	if err != nil {
		s.codeBoughtNothing(ctx, code, sid)
		return nil, grantErr("the authorization of the code is gone")
	}
	a.code, a.sid = code, sid
	return a, nil
}

// codeRevoked ends the mark of a used code whose grant a replay revoked.
const codeRevoked = " revoked"

// codeReused revokes the grant that code bought, if it bought one. Its
// exchange may still be creating it: the mark, changed to say revoked,
// makes that exchange give the grant up (newSession).
func (s *Server) codeReused(ctx context.Context, code string) {
	b, err := s.store.Get(ctx, keyCodeUsed(code))
	if err != nil {
		return
	}
	sid, revoked := strings.CutSuffix(string(b), codeRevoked)
	if sid == "" {
		return // its exchange was refused: no grant
	}
	if !revoked {
		if _, err := s.store.CompareAndSwap(ctx, keyCodeUsed(code), b, []byte(sid+codeRevoked), PendingTTL); err != nil {
			s.log.Error("marking a replayed code's grant revoked", errField(err))
		}
	}
	s.revokeSession(ctx, sid, revokedCodeReuse)
}

// codeBoughtNothing clears the grant from the mark of a used code whose
// exchange was refused, so that a replay of it revokes nothing.
func (s *Server) codeBoughtNothing(ctx context.Context, code, sid string) {
	if _, err := s.store.CompareAndSwap(ctx, keyCodeUsed(code), []byte(sid), []byte{}, PendingTTL); err != nil {
		s.log.Warn("clearing a refused code's grant", errField(err))
	}
}

// SaveAuthCode stores the code for 60 seconds; a pending authorization
// yields one code only, however many callbacks race for it (on any number
// of gateways): the record marks the code issued by compare-and-swap. A
// record changed meanwhile otherwise (a failed login elsewhere counted)
// is read again, not taken for a code issued.
func (st opStorage) SaveAuthCode(ctx context.Context, id, code string) error {
	presented, _ := ctx.Value(signInKey{}).(string)
	var extended bool
	a, err := st.s.changePending(ctx, id, func(a *authRequest) error {
		extended = false
		if a.CodeIssued {
			return errCodeIssued
		}
		if !a.signedInWith(presented) {
			return errNotSignedInHere
		}
		a.CodeIssued = true
		// The authorization must outlive its code, even when the login took
		// nearly the whole ten minutes.
		if floor := st.s.now().Add(CodeTTL); a.Expires.Before(floor) {
			a.Expires, extended = floor, true
		}
		return nil
	})
	if err != nil {
		return err
	}
	// Its place in the count lives as long as the record (a place freed
	// up to a minute early, if this fails).
	if extended {
		if err := st.s.pendings.extend(ctx, id, a.Expires); err != nil {
			st.s.log.Warn("extending a pending authorization's place", errField(err))
		}
	}
	return st.putJSON(ctx, keyCode(code), codeRecord{RequestID: id, Expires: st.s.now().Add(CodeTTL)}, CodeTTL)
}

// DeleteAuthRequest ends a pending authorization (redeemed, denied, locked
// out) and frees its place in the count.
func (st opStorage) DeleteAuthRequest(ctx context.Context, id string) error {
	if err := st.s.store.Del(ctx, keyPending(id)); err != nil {
		return err
	}
	return st.s.pendings.forget(ctx, id)
}

// newSession starts the grant a code exchange creates, under the id the
// code's mark names (redeemCode).
func (st opStorage) newSession(ctx context.Context, a *authRequest, ttl time.Duration) (*session, error) {
	now := st.s.now()
	if a.sid == "" {
		a.sid = st.s.randomToken(18)
	}
	ss := &session{
		ID: a.sid, Subject: a.Subject, ClientID: a.ClientID, Scopes: a.Scopes,
		Audience: a.Audience, AuthTime: a.AuthTime, Created: now, Expires: now.Add(ttl),
	}
	if err := st.putJSON(ctx, keySession(ss.ID), ss, ttl); err != nil {
		return nil, err
	}
	if a.code != "" {
		// A replay of the code while this grant was being stored found no
		// grant to revoke, and marked the code revoked: the grant is given
		// up. The mark is read after the grant is stored, and a replay
		// marks before it revokes, so one of the two sees the other.
		b, err := st.s.store.Get(ctx, keyCodeUsed(a.code))
		if err != nil && !errors.Is(err, errNotFound) {
			return nil, err
		}
		if strings.HasSuffix(string(b), codeRevoked) {
			st.s.revokeSession(ctx, ss.ID, revokedCodeReuse)
			return nil, grantErr("the code was presented again during its exchange; the grant is revoked")
		}
	}
	return ss, nil
}

// CreateAccessToken is the code exchange without refresh tokens: the
// session lives as long as the access token.
func (st opStorage) CreateAccessToken(ctx context.Context, req op.TokenRequest) (string, time.Time, error) {
	a, ok := req.(*authRequest)
	if !ok {
		return "", time.Time{}, oidc.ErrUnsupportedGrantType()
	}
	if _, err := st.newSession(ctx, a, st.s.cfg.accessTTL); err != nil {
		return "", time.Time{}, err
	}
	return st.s.randomToken(16), st.s.now().Add(st.s.cfg.accessTTL), nil
}

// CreateAccessAndRefreshTokens issues a refresh token with the access
// token: on a code exchange it starts a session, on a refresh it rotates
// the presented token (which stays on record, marked, to catch reuse).
func (st opStorage) CreateAccessAndRefreshTokens(ctx context.Context, req op.TokenRequest, current string) (string, string, time.Time, error) {
	s := st.s
	now := s.now()
	var rec refreshRecord
	var token string
	switch r := req.(type) {
	case *authRequest:
		ss, err := st.newSession(ctx, r, s.cfg.refreshTTL)
		if err != nil {
			return "", "", time.Time{}, err
		}
		rec = refreshRecord{SessionID: ss.ID, Subject: r.Subject, ClientID: r.ClientID, Scopes: r.Scopes, Audience: r.Audience, AuthTime: r.AuthTime}
	case *refreshRequest:
		// The successor is drawn first so that the marker can name it. The
		// atomic marker decides a race between two uses of the same token:
		// only the first rotates; another is a reuse, which only the grace
		// (below) may let through.
		token = s.randomToken(32)
		ttl := max(r.rec.Expires.Sub(now), time.Second)
		if !r.inGrace {
			mark, err := json.Marshal(rotation{At: now, Next: digest(token)})
			if err != nil {
				return "", "", time.Time{}, err
			}
			first, err := s.store.SetNX(ctx, keyRotated(current), mark, ttl)
			if err != nil {
				return "", "", time.Time{}, err
			}
			if !first {
				b, err := s.store.Get(ctx, keyRotated(current))
				if err != nil && !errors.Is(err, errNotFound) {
					return "", "", time.Time{}, err
				}
				r.rot = parseRotation(b)
				if ok, err := s.graceOpen(ctx, current, r.rot); err != nil {
					return "", "", time.Time{}, err
				} else if !ok {
					s.revokeSession(ctx, r.rec.SessionID, revokedRefreshReuse)
					return "", "", time.Time{}, oidc.ErrInvalidGrant().WithDescription("refresh token was already used; the grant is revoked")
				}
				r.inGrace = true
			}
		}
		if r.inGrace {
			if err := s.useGrace(ctx, current, r, ttl); err != nil {
				return "", "", time.Time{}, err
			}
		}
		// The new refresh token keeps the grant's scopes (RFC 6749 section
		// 6); a narrower scope parameter only narrows the access token.
		rec = r.rec
		var ss session
		if err := st.getJSON(ctx, keySession(rec.SessionID), &ss); err != nil {
			return "", "", time.Time{}, oidc.ErrInvalidGrant().WithDescription("grant revoked or expired")
		}
		// Slide the session, but only if it still exists: a revocation
		// racing with this refresh must win.
		ss.Expires = now.Add(s.cfg.refreshTTL)
		b, err := json.Marshal(&ss)
		if err != nil {
			return "", "", time.Time{}, fmt.Errorf("encoding session: %w", err)
		}
		if ok, err := s.store.SetXX(ctx, keySession(ss.ID), b, s.cfg.refreshTTL); err != nil {
			return "", "", time.Time{}, err
		} else if !ok {
			return "", "", time.Time{}, oidc.ErrInvalidGrant().WithDescription("grant revoked or expired")
		}
	default:
		return "", "", time.Time{}, oidc.ErrUnsupportedGrantType()
	}
	rec.Expires = now.Add(s.cfg.refreshTTL)
	if token == "" {
		token = s.randomToken(32)
	}
	if err := st.putJSON(ctx, keyRefresh(token), rec, s.cfg.refreshTTL); err != nil {
		return "", "", time.Time{}, err
	}
	if r, ok := req.(*refreshRequest); ok {
		r.rec.SessionID = rec.SessionID
	}
	return s.randomToken(16), token, now.Add(s.cfg.accessTTL), nil
}

// TokenRequestByRefreshToken resolves a presented refresh token. A token
// that was already rotated is a reuse: the whole chain is revoked, unless
// the configured grace period covers it.
func (st opStorage) TokenRequestByRefreshToken(ctx context.Context, token string) (op.RefreshTokenRequest, error) {
	s := st.s
	var rec refreshRecord
	if err := st.getJSON(ctx, keyRefresh(token), &rec); err != nil {
		if errors.Is(err, errNotFound) {
			return nil, op.ErrInvalidRefreshToken
		}
		return nil, err
	}
	now := s.now()
	if !now.Before(rec.Expires) {
		return nil, op.ErrInvalidRefreshToken
	}
	if _, err := s.store.Get(ctx, keySession(rec.SessionID)); err != nil {
		if errors.Is(err, errNotFound) {
			return nil, op.ErrInvalidRefreshToken
		}
		return nil, err
	}
	req := &refreshRequest{rec: rec, token: token, scopes: rec.Scopes}
	b, err := s.store.Get(ctx, keyRotated(token))
	switch {
	case errors.Is(err, errNotFound):
	case err != nil:
		return nil, err
	default:
		req.rot = parseRotation(b)
		ok, err := s.graceOpen(ctx, token, req.rot)
		if err != nil {
			return nil, err
		}
		if !ok {
			s.revokeSession(ctx, rec.SessionID, revokedRefreshReuse)
			return nil, op.ErrInvalidRefreshToken
		}
		req.inGrace = true
	}
	return req, nil
}

// graceOpen reports whether a rotated refresh token may be redeemed once
// more: the grace is on, the token is the immediate predecessor of the
// newest token of its chain (its successor was never used), it rotated less
// than the grace ago, it was not itself a retired successor, and its one
// grace use is not spent. Anything else is a reuse.
func (s *Server) graceOpen(ctx context.Context, token string, rot rotation) (bool, error) {
	if s.cfg.reuseGrace <= 0 || rot.Retired || rot.Next == "" || !s.now().Before(rot.At.Add(s.cfg.reuseGrace)) {
		return false, nil
	}
	if _, err := s.store.Get(ctx, keyGraceUsed(token)); err == nil {
		return false, nil
	} else if !errors.Is(err, errNotFound) {
		return false, err
	}
	if _, err := s.store.Get(ctx, keyRotatedDigest(rot.Next)); err == nil {
		return false, nil // the successor was used: not the newest chain link
	} else if !errors.Is(err, errNotFound) {
		return false, err
	}
	return true, nil
}

// useGrace spends the grace of a rotated token and retires its lost
// successor, both atomically: of two concurrent grace uses one wins, and a
// successor that was used meanwhile ends the grace. Either loss revokes the
// grant.
func (s *Server) useGrace(ctx context.Context, token string, r *refreshRequest, ttl time.Duration) error {
	revoke := func() error {
		s.revokeSession(ctx, r.rec.SessionID, revokedRefreshReuse)
		return oidc.ErrInvalidGrant().WithDescription("refresh token was already used; the grant is revoked")
	}
	now := s.now()
	first, err := s.store.SetNX(ctx, keyGraceUsed(token), []byte(now.UTC().Format(time.RFC3339Nano)), ttl)
	if err != nil {
		return err
	}
	if !first {
		return revoke()
	}
	mark, err := json.Marshal(rotation{At: now, Retired: true})
	if err != nil {
		return err
	}
	// The successor's record lives a full refresh lifetime from now; so
	// must its retirement.
	first, err = s.store.SetNX(ctx, keyRotatedDigest(r.rot.Next), mark, s.cfg.refreshTTL)
	if err != nil {
		return err
	}
	if !first {
		return revoke()
	}
	s.metrics.refreshReused("grace")
	s.log.Info("refresh token redeemed again within the reuse grace; its lost successor is retired",
		zap.String("client_id", r.rec.ClientID), zap.String("session", shortID(r.rec.SessionID)))
	return nil
}

func (st opStorage) TerminateSession(context.Context, string, string) error { return nil }

// RevokeToken serves op's revocation path; the server's own /oauth/revoke
// handler is what is routed, this keeps op's contract.
func (st opStorage) RevokeToken(ctx context.Context, tokenOrID, _, clientID string) *oidc.Error {
	var rec refreshRecord
	if err := st.getJSON(ctx, keyRefresh(tokenOrID), &rec); err == nil && rec.ClientID == clientID {
		st.s.revokeSession(ctx, rec.SessionID, "revoked")
	}
	return nil
}

func (st opStorage) GetRefreshTokenInfo(ctx context.Context, clientID, token string) (string, string, error) {
	var rec refreshRecord
	if err := st.getJSON(ctx, keyRefresh(token), &rec); err != nil || rec.ClientID != clientID {
		return "", "", op.ErrInvalidRefreshToken
	}
	return rec.Subject, digest(token), nil
}

func (st opStorage) SigningKey(context.Context) (op.SigningKey, error) {
	return st.s.keys.opSigningKey()
}

func (st opStorage) SignatureAlgorithms(context.Context) ([]jose.SignatureAlgorithm, error) {
	keys, err := st.s.keys.published()
	if err != nil {
		return nil, err
	}
	var algs []jose.SignatureAlgorithm
	for _, k := range keys {
		if !slices.Contains(algs, k.alg) {
			algs = append(algs, k.alg)
		}
	}
	return algs, nil
}

func (st opStorage) KeySet(context.Context) ([]op.Key, error) { return st.s.keys.opKeySet() }

func (st opStorage) GetClientByClientID(ctx context.Context, id string) (op.Client, error) {
	return st.s.client(ctx, id)
}

func (st opStorage) AuthorizeClientIDSecret(ctx context.Context, id, secret string) error {
	c, err := st.s.client(ctx, id)
	if ErrorCode(err) == CodeStorage {
		return err
	}
	if err != nil {
		return oidc.ErrInvalidClient().WithDescription("unknown client")
	}
	if !c.checkSecret(secret) {
		return oidc.ErrInvalidClient().WithDescription("client authentication failed")
	}
	return nil
}

// SetUserinfoFromScopes keeps the subject: op copies this userinfo over
// the ID token's claims, sub included.
func (st opStorage) SetUserinfoFromScopes(_ context.Context, ui *oidc.UserInfo, subject, _ string, _ []string) error {
	ui.Subject = subject
	return nil
}

func (st opStorage) SetUserinfoFromToken(_ context.Context, ui *oidc.UserInfo, _, subject, _ string) error {
	ui.Subject = subject
	return nil
}

func (st opStorage) SetIntrospectionFromToken(context.Context, *oidc.IntrospectionResponse, string, string, string) error {
	return errors.New("introspection is not offered")
}

func (st opStorage) GetPrivateClaimsFromScopes(context.Context, string, string, []string) (map[string]any, error) {
	return nil, nil
}

// GetPrivateClaimsFromRequest adds the claims VerifyAccessToken relies on:
// token_use (so an ID token is never taken for an access token), scope and
// sid, the session that revocation deletes.
func (st opStorage) GetPrivateClaimsFromRequest(_ context.Context, req op.TokenRequest, _ []string) (map[string]any, error) {
	var sid string
	switch r := req.(type) {
	case *authRequest:
		sid = r.sid
	case *refreshRequest:
		sid = r.rec.SessionID
	}
	if sid == "" {
		return nil, errors.New("access token without a session")
	}
	return map[string]any{
		"token_use": "access",
		"scope":     strings.Join(visibleScopes(req.GetScopes()), " "),
		"sid":       sid,
	}, nil
}

// visibleScopes drops offline_access, which the server adds itself to make
// op issue refresh tokens.
func visibleScopes(scopes []string) []string {
	out := make([]string, 0, len(scopes))
	for _, sc := range scopes {
		if sc != oidc.ScopeOfflineAccess {
			out = append(out, sc)
		}
	}
	return out
}

func (st opStorage) GetKeyByIDAndClientID(context.Context, string, string) (*jose.JSONWebKey, error) {
	return nil, errors.New("jwt profile grants are not offered")
}

func (st opStorage) ValidateJWTProfileScopes(context.Context, string, []string) ([]string, error) {
	return nil, errors.New("jwt profile grants are not offered")
}

func (st opStorage) Health(ctx context.Context) error { return st.s.store.Ping(ctx) }
