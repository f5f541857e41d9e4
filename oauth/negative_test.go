package oauth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"golang.org/x/oauth2"
)

// authorizeError asserts that an authorization request is bounced back to
// the client's redirect URI with the given error.
func authorizeError(t *testing.T, e *asEnv, q url.Values, wantErr string) {
	t.Helper()
	resp := e.get(e.srv.URL + "/oauth/authorize?" + q.Encode())
	back := location(t, resp, http.StatusFound)
	if got := back.Query().Get("error"); got != wantErr {
		t.Fatalf("error %q, want %q (redirect %s)", got, wantErr, back)
	}
	if !strings.HasPrefix(back.String(), asRedirect) {
		t.Fatalf("error redirect went to %s", back)
	}
}

func authQuery(verifier string) url.Values {
	return url.Values{
		"response_type":         {"code"},
		"client_id":             {asClientID},
		"redirect_uri":          {asRedirect},
		"state":                 {"st"},
		"scope":                 {"mcp"},
		"code_challenge":        {oauth2.S256ChallengeFromVerifier(verifier)},
		"code_challenge_method": {"S256"},
	}
}

func TestAuthorizeRejects(t *testing.T) {
	e := newAS(t, nil)
	v := oauth2.GenerateVerifier()
	cases := []struct {
		name    string
		edit    func(url.Values)
		wantErr string
	}{
		{"no PKCE", func(q url.Values) { q.Del("code_challenge"); q.Del("code_challenge_method") }, "invalid_request"},
		{"plain PKCE", func(q url.Values) { q.Set("code_challenge", v); q.Set("code_challenge_method", "plain") }, "invalid_request"},
		{"challenge without method", func(q url.Values) { q.Del("code_challenge_method") }, "invalid_request"},
		{"short challenge", func(q url.Values) { q.Set("code_challenge", "abc") }, "invalid_request"},
		{"missing state", func(q url.Values) { q.Del("state") }, "invalid_request"},
		{"implicit grant", func(q url.Values) { q.Set("response_type", "token") }, "unsupported_response_type"},
		{"unknown scope", func(q url.Values) { q.Set("scope", "mcp admin") }, "invalid_scope"},
		{"resource with fragment", func(q url.Values) { q.Set("resource", "https://x.test/mcp#f") }, "invalid_target"},
		{"relative resource", func(q url.Values) { q.Set("resource", "/mcp") }, "invalid_target"},
		{"request object", func(q url.Values) { q.Set("request", "eyJ.x.y") }, "request_not_supported"},
		{"fragment response mode", func(q url.Values) { q.Set("response_mode", "fragment") }, "invalid_request"},
		{"silent authorization", func(q url.Values) { q.Set("prompt", "none") }, "login_required"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			q := authQuery(v)
			tc.edit(q)
			authorizeError(t, e, q, tc.wantErr)
		})
	}
	// The public client's confidential sibling obeys the same PKCE rule:
	// op alone would let a confidential client skip PKCE.
	t.Run("confidential client without PKCE", func(t *testing.T) {
		q := authQuery(v)
		q.Set("client_id", asSecretID)
		q.Set("redirect_uri", asConfRedir)
		q.Del("code_challenge")
		q.Del("code_challenge_method")
		back := location(t, e.get(e.srv.URL+"/oauth/authorize?"+q.Encode()), http.StatusFound)
		if back.Query().Get("error") != "invalid_request" || !strings.HasPrefix(back.String(), asConfRedir) {
			t.Fatalf("redirect %s", back)
		}
	})
}

func TestAuthorizeNeverRedirectsToUnregisteredURI(t *testing.T) {
	e := newAS(t, nil)
	v := oauth2.GenerateVerifier()
	for name, edit := range map[string]func(url.Values){
		"one character differs": func(q url.Values) { q.Set("redirect_uri", "http://127.0.0.1:9999/callbacK") },
		"other port (loopback)": func(q url.Values) { q.Set("redirect_uri", "http://127.0.0.1:9998/callback") },
		"trailing slash":        func(q url.Values) { q.Set("redirect_uri", asRedirect+"/") },
		"extra query":           func(q url.Values) { q.Set("redirect_uri", asRedirect+"?x=1") },
		"missing":               func(q url.Values) { q.Del("redirect_uri") },
		"unknown client":        func(q url.Values) { q.Set("client_id", "nobody") },
		"repeated client_id":    func(q url.Values) { q.Add("client_id", asClientID) },
	} {
		t.Run(name, func(t *testing.T) {
			q := authQuery(v)
			edit(q)
			resp := e.get(e.srv.URL + "/oauth/authorize?" + q.Encode())
			b := body(t, resp)
			if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Location") != "" {
				t.Fatalf("status %d location %q", resp.StatusCode, resp.Header.Get("Location"))
			}
			if !strings.Contains(b, `"error":"invalid_`) {
				t.Fatalf("body %s", b)
			}
		})
	}
}

func TestTokenEndpointRejects(t *testing.T) {
	e := newAS(t, nil)
	cfg := e.oauth2(asClientID, asRedirect)

	t.Run("wrong verifier", func(t *testing.T) {
		v := oauth2.GenerateVerifier()
		code := e.code(cfg, v)
		_, err := cfg.Exchange(e.ctx(), code, oauth2.VerifierOption(oauth2.GenerateVerifier()))
		if !isOAuthError(err, "invalid_grant") {
			t.Fatalf("err %v, want invalid_grant", err)
		}
		// The failed attempt consumed the code.
		if _, err := cfg.Exchange(e.ctx(), code, oauth2.VerifierOption(v)); !isOAuthError(err, "invalid_grant") {
			t.Fatalf("retry with the right verifier: %v, want invalid_grant", err)
		}
	})
	t.Run("missing verifier", func(t *testing.T) {
		code := e.code(cfg, oauth2.GenerateVerifier())
		if _, err := cfg.Exchange(e.ctx(), code); !isOAuthError(err, "invalid_request") {
			t.Fatalf("err %v, want invalid_request", err)
		}
	})
	t.Run("code reused", func(t *testing.T) {
		v := oauth2.GenerateVerifier()
		code := e.code(cfg, v)
		tok, err := cfg.Exchange(e.ctx(), code, oauth2.VerifierOption(v))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cfg.Exchange(e.ctx(), code, oauth2.VerifierOption(v)); !isOAuthError(err, "invalid_grant") {
			t.Fatalf("second use: %v, want invalid_grant", err)
		}
		// The replay revokes what the code bought (OAuth 2.1 section 4.1.3).
		if _, err := e.s.VerifyAccessToken(context.Background(), tok.AccessToken, ""); TokenReason(err) != ReasonRevoked {
			t.Fatalf("token of a replayed code: %v, want revoked", err)
		}
	})
	t.Run("code expired", func(t *testing.T) {
		v := oauth2.GenerateVerifier()
		code := e.code(cfg, v)
		e.clock.Add(CodeTTL + time.Second)
		if _, err := cfg.Exchange(e.ctx(), code, oauth2.VerifierOption(v)); !isOAuthError(err, "invalid_grant") {
			t.Fatalf("expired code: %v, want invalid_grant", err)
		}
	})
	t.Run("code still valid just before 60 s", func(t *testing.T) {
		v := oauth2.GenerateVerifier()
		code := e.code(cfg, v)
		e.clock.Add(CodeTTL - time.Second)
		if _, err := cfg.Exchange(e.ctx(), code, oauth2.VerifierOption(v)); err != nil {
			t.Fatalf("code at 59 s: %v", err)
		}
	})
	t.Run("redirect_uri differs at the token endpoint", func(t *testing.T) {
		v := oauth2.GenerateVerifier()
		code := e.code(cfg, v)
		other := *cfg
		other.RedirectURL = asRedirect + "x"
		if _, err := other.Exchange(e.ctx(), code, oauth2.VerifierOption(v)); !isOAuthError(err, "invalid_grant") {
			t.Fatalf("err %v, want invalid_grant", err)
		}
	})
	t.Run("code of another client", func(t *testing.T) {
		v := oauth2.GenerateVerifier()
		code := e.code(cfg, v)
		resp := e.postForm(e.srv.URL+"/oauth/token", url.Values{"grant_type": {"authorization_code"}, "code": {code},
			"code_verifier": {v}, "redirect_uri": {asRedirect}, "client_id": {asSecretID}, "client_secret": {asSecret}})
		if b := body(t, resp); resp.StatusCode != http.StatusBadRequest || !strings.Contains(b, "invalid_grant") {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
	})
	for _, gt := range []string{"client_credentials", "password", "implicit", "urn:ietf:params:oauth:grant-type:jwt-bearer", "urn:ietf:params:oauth:grant-type:token-exchange", ""} {
		t.Run("grant "+gt, func(t *testing.T) {
			resp := e.postForm(e.srv.URL+"/oauth/token", url.Values{"grant_type": {gt}, "client_id": {asSecretID}, "client_secret": {asSecret}})
			b := body(t, resp)
			want := "unsupported_grant_type"
			if gt == "" {
				want = "invalid_request"
			}
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(b, `"error":"`+want+`"`) {
				t.Fatalf("%d %s", resp.StatusCode, b)
			}
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
				t.Fatalf("content type %q", ct)
			}
		})
	}
	t.Run("GET", func(t *testing.T) {
		resp := e.get(e.srv.URL + "/oauth/token?grant_type=authorization_code")
		if b := body(t, resp); resp.StatusCode != http.StatusMethodNotAllowed || !strings.Contains(b, "invalid_request") {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
	})
}

func TestRefreshReuseRevokesChain(t *testing.T) {
	e := newAS(t, nil)
	cfg := e.oauth2(asClientID, asRedirect)
	tok := e.token(cfg)
	refresh := func(rt string) (*oauth2.Token, error) {
		return cfg.TokenSource(e.ctx(), &oauth2.Token{RefreshToken: rt, Expiry: time.Now().Add(-time.Minute)}).Token()
	}
	tok2, err := refresh(tok.RefreshToken)
	if err != nil {
		t.Fatal(err)
	}
	tok3, err := refresh(tok2.RefreshToken)
	if err != nil {
		t.Fatal(err)
	}
	// tok2's refresh token was rotated: presenting it again is a reuse.
	if _, err := refresh(tok2.RefreshToken); !isOAuthError(err, "invalid_grant") {
		t.Fatalf("reuse: %v, want invalid_grant", err)
	}
	// The whole chain is gone: the newest refresh token and every access token.
	if _, err := refresh(tok3.RefreshToken); !isOAuthError(err, "invalid_grant") {
		t.Fatalf("newest token after reuse: %v, want invalid_grant", err)
	}
	for _, at := range []string{tok.AccessToken, tok3.AccessToken} {
		if _, err := e.s.VerifyAccessToken(context.Background(), at, ""); TokenReason(err) != ReasonRevoked {
			t.Fatalf("access token after reuse: %v, want revoked", err)
		}
	}
	e.assertNoSecretsLogged(tok.RefreshToken, tok2.RefreshToken, tok3.RefreshToken, tok3.AccessToken)
}

// TestRefreshReuseGrace: with refresh.reuse_grace_seconds, the immediately
// previous refresh token of a chain may be redeemed once more within the
// window (a client that lost the answer of a refresh); the answer is a new
// successor and the lost one is retired. Every other reuse revokes the
// chain: outside the window, a second grace use, a token two rotations
// back, the retired successor. The clock is the injected one.
func TestRefreshReuseGrace(t *testing.T) {
	e := newAS(t, func(c *ServerConfig) { c.Refresh.ReuseGraceSeconds = 30 })
	cfg := e.oauth2(asClientID, asRedirect)
	refresh := func(rt string) (*oauth2.Token, error) {
		return cfg.TokenSource(e.ctx(), &oauth2.Token{RefreshToken: rt, Expiry: time.Now().Add(-time.Minute)}).Token()
	}
	mustRefresh := func(rt string) *oauth2.Token {
		t.Helper()
		tok, err := refresh(rt)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	alive := func(tok *oauth2.Token) bool {
		_, err := e.s.VerifyAccessToken(context.Background(), tok.AccessToken, "")
		return err == nil
	}
	refused := func(what, rt string) {
		t.Helper()
		if _, err := refresh(rt); !isOAuthError(err, "invalid_grant") {
			t.Fatalf("%s: %v, want invalid_grant", what, err)
		}
	}

	t.Run("lost answer within the window keeps the session", func(t *testing.T) {
		t1 := e.token(cfg)
		lost := mustRefresh(t1.RefreshToken) // the client never saw this answer
		e.clock.Add(10 * time.Second)
		t3 := mustRefresh(t1.RefreshToken)
		if t3.RefreshToken == lost.RefreshToken || !alive(t3) {
			t.Fatalf("grace answer: new successor %v, alive %v", t3.RefreshToken != lost.RefreshToken, alive(t3))
		}
		t4 := mustRefresh(t3.RefreshToken) // the chain goes on from the new successor
		refused("the retired successor", lost.RefreshToken)
		if alive(t4) {
			t.Fatal("the chain survived a use of the retired successor")
		}
	})
	t.Run("second grace use revokes", func(t *testing.T) {
		t1 := e.token(cfg)
		mustRefresh(t1.RefreshToken)
		t3 := mustRefresh(t1.RefreshToken)
		refused("a second grace use", t1.RefreshToken)
		if alive(t3) {
			t.Fatal("the chain survived a second grace use")
		}
	})
	t.Run("outside the window revokes", func(t *testing.T) {
		t1 := e.token(cfg)
		t2 := mustRefresh(t1.RefreshToken)
		e.clock.Add(31 * time.Second)
		refused("reuse after the window", t1.RefreshToken)
		refused("the chain after a late reuse", t2.RefreshToken)
		if alive(t2) {
			t.Fatal("access token alive after a late reuse")
		}
	})
	t.Run("a token two rotations back revokes", func(t *testing.T) {
		t1 := e.token(cfg)
		t2 := mustRefresh(t1.RefreshToken)
		t3 := mustRefresh(t2.RefreshToken) // t2 was received and used: t1 is no longer the previous one
		refused("reuse of the first token", t1.RefreshToken)
		if alive(t3) {
			t.Fatal("the chain survived the reuse of an older token")
		}
	})
	t.Run("more than five minutes is refused at load", func(t *testing.T) {
		c := ServerConfig{Issuer: "https://as.example.test", Development: true, Refresh: RefreshConfig{Enabled: true, ReuseGraceSeconds: 301}}
		if _, err := NewServer(c, nil); err == nil || !strings.Contains(err.Error(), "reuse_grace") {
			t.Fatalf("grace of 301 s: %v", err)
		}
	})
}

func TestConcurrentRefreshOnlyOneWins(t *testing.T) {
	e := newAS(t, nil)
	cfg := e.oauth2(asClientID, asRedirect)
	tok := e.token(cfg)
	const n = 8
	errs := make(chan error, n)
	for range n {
		go func() {
			_, err := cfg.TokenSource(e.ctx(), &oauth2.Token{RefreshToken: tok.RefreshToken, Expiry: time.Now().Add(-time.Minute)}).Token()
			errs <- err
		}()
	}
	ok := 0
	for range n {
		if <-errs == nil {
			ok++
		}
	}
	if ok > 1 {
		t.Fatalf("%d concurrent refreshes with one token succeeded, want at most 1", ok)
	}
}

func TestVerifyAccessTokenRejects(t *testing.T) {
	e := newAS(t, nil)
	cfg := e.oauth2(asClientID, asRedirect)
	cfg.Scopes = []string{"mcp", "openid"} // for an ID token
	tok := e.token(cfg)
	ctx := context.Background()
	at := tok.AccessToken
	parts := strings.Split(at, ".")

	// A token signed by a key the server does not know, under a kid it
	// does not publish, and one signed by a foreign key under our kid.
	foreign, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
	signWith := func(kid string) string {
		sig, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: jose.JSONWebKey{Key: foreign, KeyID: kid}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		obj, err := sig.Sign(payload)
		if err != nil {
			t.Fatal(err)
		}
		s, _ := obj.CompactSerialize()
		return s
	}
	cur, _ := e.s.keys.current()
	// The claims of a genuine access token, signed by our own key, but
	// typed as a plain JWT (as an ID token is): not an RFC 9068 token.
	plainJWT, err := signJWT(cur, "JWT", json.RawMessage(payload))
	if err != nil {
		t.Fatal(err)
	}
	tamperedPayload := strings.Replace(string(payload), asUser, "mallory", 1)

	cases := []struct {
		name, token, aud, reason string
	}{
		{"empty", "", "", ReasonMissing},
		{"garbage", "not-a-jwt", "", ReasonMalformed},
		{"wrong audience", at, "https://other.example.test/mcp", ReasonWrongAudience},
		{"unknown kid", signWith("no-such-kid"), "", ReasonUnknownKey},
		{"foreign key under our kid", signWith(cur.id), "", ReasonBadAlgorithm},
		{"tampered payload", parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(tamperedPayload)) + "." + parts[2], "", ReasonBadSignature},
		{"tampered signature", parts[0] + "." + parts[1] + "." + flip(parts[2]), "", ReasonBadSignature},
		{"alg none", base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","kid":"`+cur.id+`"}`)) + "." + parts[1] + ".", "", ReasonBadAlgorithm},
		{"id token as access token", tok.Extra("id_token").(string), "", ReasonMalformed},
		{"access claims with typ JWT", plainJWT, "", ReasonMalformed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.s.VerifyAccessToken(ctx, tc.token, tc.aud)
			if got := TokenReason(err); got != tc.reason {
				t.Fatalf("reason %q (%v), want %q", got, err, tc.reason)
			}
		})
	}
	if _, err := e.s.VerifyAccessToken(ctx, at, asResource); err != nil {
		t.Fatalf("the untouched token: %v", err)
	}
	t.Run("expired", func(t *testing.T) {
		e.clock.Add(time.Hour)
		if _, err := e.s.VerifyAccessToken(ctx, at, ""); TokenReason(err) != ReasonExpired {
			t.Fatalf("%v, want expired", err)
		}
	})
}

func TestSkewTolerance(t *testing.T) {
	e := newAS(t, func(c *ServerConfig) { c.Refresh.SkewSeconds = 30 })
	cfg := e.oauth2(asClientID, asRedirect)
	tok := e.token(cfg)
	e.clock.Add(time.Hour + 20*time.Second)
	if _, err := e.s.VerifyAccessToken(context.Background(), tok.AccessToken, ""); err != nil {
		t.Fatalf("inside the skew: %v", err)
	}
	e.clock.Add(11 * time.Second)
	if _, err := e.s.VerifyAccessToken(context.Background(), tok.AccessToken, ""); TokenReason(err) != ReasonExpired {
		t.Fatalf("past the skew: %v", err)
	}
}

func flip(sig string) string {
	b := []byte(sig)
	if b[5] == 'A' {
		b[5] = 'B'
	} else {
		b[5] = 'A'
	}
	return string(b)
}

func TestAuthorizeAcceptsOpenIDScopes(t *testing.T) {
	e := newAS(t, nil)
	q := authQuery(oauth2.GenerateVerifier())
	q.Set("scope", "openid profile email mcp")
	if u := location(t, e.get(e.srv.URL+"/oauth/authorize?"+q.Encode()), http.StatusFound); u.Path != "/oauth/login" {
		t.Fatalf("redirected to %s", u)
	}
}

// TestUnvouchedClientsErrorsArePages: a refused authorization request of a
// client that registered itself is answered with a page that links to its
// redirect URI, never a redirect (RFC 9700 section 4.11.2): anyone can
// register a phishing page as a redirect URI and send users a request made
// to fail, which bounced them from this server's URL to that page at once.
// A denied consent too. A configured client's errors still redirect.
func TestUnvouchedClientsErrorsArePages(t *testing.T) {
	e := newAS(t, func(c *ServerConfig) { c.DCREnabled = true })
	const phishing = "https://phishing.example/cb"
	status, out := register(t, e, map[string]any{"redirect_uris": []string{phishing}, "client_name": "Claude"})
	if status != http.StatusCreated {
		t.Fatalf("register: %d %v", status, out)
	}
	v := oauth2.GenerateVerifier()
	for name, edit := range map[string]func(url.Values){
		"unknown scope": func(q url.Values) { q.Set("scope", "mcp Your_account_is_locked_call_555-0100") },
		"prompt=none":   func(q url.Values) { q.Set("prompt", "none") },
		"no PKCE":       func(q url.Values) { q.Del("code_challenge") },
	} {
		t.Run(name, func(t *testing.T) {
			q := authQuery(v)
			q.Set("client_id", out["client_id"].(string))
			q.Set("redirect_uri", phishing)
			edit(q)
			resp := e.get(e.srv.URL + "/oauth/authorize?" + q.Encode())
			page := body(t, resp)
			if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Location") != "" {
				t.Fatalf("%d Location %q, want a 400 page", resp.StatusCode, resp.Header.Get("Location"))
			}
			m := regexp.MustCompile(`id="continue" href="([^"]*)"`).FindStringSubmatch(page)
			if m == nil || !strings.Contains(page, `id="redirect-host">phishing.example<`) || !strings.Contains(page, "registered by itself") ||
				strings.Contains(html.UnescapeString(strings.Replace(page, m[0], "", 1)), "account_is_locked") {
				t.Fatalf("page: %s", page)
			}
			link, err := url.Parse(html.UnescapeString(m[1]))
			if err != nil || !strings.HasPrefix(link.String(), phishing+"?") || link.Query().Get("error") == "" ||
				link.Query().Get("state") != q.Get("state") || link.Query().Get("iss") != e.srv.URL {
				t.Fatalf("link back to the client: %s (%v)", m[1], err)
			}
		})
	}
	t.Run("consent denied", func(t *testing.T) {
		// The user who denies because the request looks wrong is not
		// sent to the phishing page either.
		q := authQuery(v)
		q.Set("client_id", out["client_id"].(string))
		q.Set("redirect_uri", phishing)
		loginURL := location(t, e.get(e.srv.URL+"/oauth/authorize?"+q.Encode()), http.StatusFound)
		id, csrf := hidden(t, body(t, e.get(e.srv.URL+loginURL.RequestURI())))
		location(t, e.postForm(e.srv.URL+"/oauth/login", url.Values{"id": {id}, "csrf": {csrf}, "username": {asUser}, "password": {asPassword}}), http.StatusSeeOther)
		resp := e.postForm(e.srv.URL+"/oauth/consent", url.Values{"id": {id}, "csrf": {csrf}, "decision": {"deny"}})
		page := body(t, resp)
		m := regexp.MustCompile(`id="continue" href="([^"]*)"`).FindStringSubmatch(page)
		if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Location") != "" || m == nil {
			t.Fatalf("%d Location %q: %s", resp.StatusCode, resp.Header.Get("Location"), page)
		}
		if link, _ := url.Parse(html.UnescapeString(m[1])); link.Query().Get("error") != "access_denied" || link.Query().Get("state") != "st" {
			t.Fatalf("link back to the client: %s", m[1])
		}
	})
	q := authQuery(v)
	q.Set("scope", "mcp root")
	if loc := location(t, e.get(e.srv.URL+"/oauth/authorize?"+q.Encode()), http.StatusFound); loc.Query().Get("error") != "invalid_scope" {
		t.Fatalf("configured client: %s", loc)
	}
}
