package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"golang.org/x/oauth2"
)

// oauthGateway is the Caddyfile and environment of the auth/ scenarios'
// gateway: the client id the scenario pre-registers (auth/pre-registration
// gives one, with a secret, in MCP_CONFORMANCE_CONTEXT), else none, and the
// gateway registers one at the scenario's authorization server (RFC 7591).
// For auth/basic-cimd the gateway's client metadata URL is the one that
// scenario expects as client_id (its authorization server does not fetch
// it: no gateway can serve that host); the other scenarios run without
// one, as a gateway whose operator configured none.
func oauthGateway(upstreamURL string) ([]byte, []string, error) {
	var c struct {
		ClientID     string `json:"client_id"`
		ClientSecret string `json:"client_secret"`
	}
	if s := os.Getenv("MCP_CONFORMANCE_CONTEXT"); s != "" {
		if err := json.Unmarshal([]byte(s), &c); err != nil {
			return nil, nil, fmt.Errorf("MCP_CONFORMANCE_CONTEXT: %w", err)
		}
	}
	config := oauthCaddyfile
	env := []string{"CONF_URL=" + upstreamURL}
	if c.ClientID != "" {
		config = bytes.ReplaceAll(config, []byte("#client\t"), nil)
		env = append(env, "CONF_CLIENT_ID="+c.ClientID)
	}
	if c.ClientSecret != "" {
		config = bytes.ReplaceAll(config, []byte("#secret\t"), nil)
		env = append(env, "CONF_CLIENT_SECRET="+c.ClientSecret)
	}
	if os.Getenv("MCP_CONFORMANCE_SCENARIO") == "auth/basic-cimd" {
		config = bytes.ReplaceAll(config, []byte("#cimd\t"), nil)
	}
	return config, env, nil
}

var (
	loginFields = regexp.MustCompile(`name="(id|csrf)" value="([^"]*)"`)
	pageCSRF    = regexp.MustCompile(`name="csrf" value="([^"]+)"`)
	pageCode    = regexp.MustCompile(`<code id="code">([^<]*)</code>`)
	pageError   = regexp.MustCompile(`<p id="error">([^<]*)</p>`)
)

// connectUpstream does what the user does in a browser: opens the
// connections page for conf, signs in at the gateway as demo, presses
// Connect, and follows the gateway to the upstream's authorization server
// (the scenario's, which answers at once) and back.
func connectUpstream(ctx context.Context, base string) error {
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar, Timeout: 20 * time.Second}
	final, page, err := signIn(ctx, browser, base+"/connections/conf")
	if err != nil {
		return fmt.Errorf("connections page sign-in: %w", err)
	}
	m := pageCSRF.FindStringSubmatch(page)
	if final.Path != "/connections/conf" || m == nil {
		return fmt.Errorf("connections page sign-in ended at %s: %.2000s", final, page)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/connections/conf/connect", strings.NewReader(url.Values{"csrf": {m[1]}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", base)
	resp, err := browser.Do(req)
	if err != nil {
		return fmt.Errorf("connecting conf: %w", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.Request.URL.Query().Get("connected") != "conf" {
		code, reason := "", ""
		if m := pageCode.FindStringSubmatch(string(b)); m != nil {
			code = m[1]
		}
		if m := pageError.FindStringSubmatch(string(b)); m != nil {
			reason = m[1]
		}
		return fmt.Errorf("connecting conf ended at %s with %d %s: %s", resp.Request.URL, resp.StatusCode, code, reason)
	}
	fmt.Println("connected conf on the connections page")
	return nil
}

// stillConnected opens the connections page as demo and reports whether
// conf is shown connected (a Disconnect button): the gateway forgets a
// connection whose token the upstream refused.
func stillConnected(ctx context.Context, base string) (bool, error) {
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar, Timeout: 20 * time.Second}
	final, page, err := signIn(ctx, browser, base+"/connections/conf")
	if err != nil {
		return false, fmt.Errorf("connections page sign-in: %w", err)
	}
	if final.Path != "/connections/conf" {
		return false, fmt.Errorf("connections page sign-in ended at %s: %.2000s", final, page)
	}
	return strings.Contains(page, `/conf/disconnect"`), nil
}

// agentToken signs demo in as the MCP client "agent" (authorization code
// with PKCE) and returns its access token for /mcp.
func agentToken(ctx context.Context, base string) (string, error) {
	conf := &oauth2.Config{ClientID: "agent", RedirectURL: "http://127.0.0.1:1/cb", Scopes: []string{"mcp"},
		Endpoint: oauth2.Endpoint{AuthURL: base + "/oauth/authorize", TokenURL: base + "/oauth/token", AuthStyle: oauth2.AuthStyleInParams}}
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar, Timeout: 20 * time.Second, CheckRedirect: func(r *http.Request, _ []*http.Request) error {
		if r.URL.Host == "127.0.0.1:1" {
			return http.ErrUseLastResponse // the agent's redirect URI: stop there
		}
		return nil
	}}
	verifier := oauth2.GenerateVerifier()
	back, page, err := signIn(ctx, browser, conf.AuthCodeURL("st", oauth2.S256ChallengeOption(verifier)))
	if err != nil {
		return "", fmt.Errorf("agent sign-in: %w", err)
	}
	if back.Query().Get("code") == "" {
		return "", fmt.Errorf("agent sign-in ended at %s: %.2000s", back, page)
	}
	tok, err := conf.Exchange(ctx, back.Query().Get("code"), oauth2.VerifierOption(verifier))
	if err != nil {
		return "", fmt.Errorf("agent token: %w", err)
	}
	return tok.AccessToken, nil
}

// signIn follows start to the gateway's login page, signs in as demo, and
// returns where the redirects ended and that page.
func signIn(ctx context.Context, browser *http.Client, start string) (*url.URL, string, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, start, nil)
	resp, err := browser.Do(req)
	if err != nil {
		return nil, "", err
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(resp.Request.URL.Path, "/oauth/login") {
		return nil, "", fmt.Errorf("%s led to %s, not the login page: %.2000s", start, resp.Request.URL, page)
	}
	form := url.Values{"username": {"demo"}, "password": {"demo-password"}}
	for _, m := range loginFields.FindAllStringSubmatch(string(page), -1) {
		form.Set(m[1], m[2])
	}
	login := resp.Request.URL.Scheme + "://" + resp.Request.URL.Host + "/oauth/login"
	req, _ = http.NewRequestWithContext(ctx, http.MethodPost, login, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err = browser.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	loc, _ := resp.Location()
	if loc == nil {
		loc = resp.Request.URL
	}
	return loc, string(b), nil
}

type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}
