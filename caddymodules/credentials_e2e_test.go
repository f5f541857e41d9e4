package caddymodules

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/redis/go-redis/v9"
	"golang.org/x/crypto/bcrypt"
	"golang.org/x/oauth2"

	"github.com/codemode-gateway/caddy-codemode/credential/credentialtest"
	"github.com/codemode-gateway/caddy-codemode/guard/redistest"
	"github.com/codemode-gateway/caddy-codemode/oauth"
)

// credGateway is a gateway whose OpenAPI source and upstream MCP server
// (both on a fake upstream) take users' own credentials, with the
// authorization server signing in two users, all state in one Redis.
type credGateway struct {
	port, admin int
	base        string
	fake        *credentialtest.Fake
	redisAddr   string
	prefix      string
	key         string
	logPath     string
	passwords   map[string]string
	extra       string // more lines for the credentials block
	issuer      string // default base; a second gateway keeps the first's
	signKey     bool   // sign with {env.CODEMODE_TEST_SIGN_KEY} (shared by two gateways)
}

func newCredGateway(t *testing.T) *credGateway {
	t.Helper()
	fake := credentialtest.New()
	t.Cleanup(fake.Close)
	rc, prefix := redistest.Client(t)
	k := make([]byte, 32)
	_, _ = rand.Read(k)
	port := freePort(t)
	g := &credGateway{port: port, admin: freePort(t), base: fmt.Sprintf("http://127.0.0.1:%d", port), fake: fake,
		redisAddr: rc.Options().Addr, prefix: prefix, key: base64.StdEncoding.EncodeToString(k),
		logPath:   filepath.Join(t.TempDir(), "caddy.log"),
		passwords: map[string]string{"alice": "alice-password-1", "bob": "bob-password-2"}}
	return g
}

func (g *credGateway) caddyfile(t *testing.T) string {
	t.Helper()
	var users strings.Builder
	for u, p := range g.passwords {
		h, err := bcrypt.GenerateFromPassword([]byte(p), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&users, "\t\t\tuser %s %s\n", u, h)
	}
	signing := ""
	if g.signKey {
		signing = "\t\t\tlocal {\n\t\t\t\tsign_key {env.CODEMODE_TEST_SIGN_KEY}\n\t\t\t}\n"
	}
	return fmt.Sprintf(`{
	admin 127.0.0.1:%[2]d
	persist_config off
	log {
		output file %[5]s
		level DEBUG
	}
	events {
		on session:created codemode_test_recorder
		on session:completed codemode_test_recorder
		on session:error codemode_test_recorder
		on tool:called codemode_test_recorder
		on tool:completed codemode_test_recorder
	}
	codemode {
		storage redis %[6]s {
			key_prefix %[7]s
		}
		sandbox {
			adapter inprocess
			trusted_callers
		}
		broker {
			openapi forge %[3]s/openapi.json {
				credential user {
					title Fake Forge
					oauth {
						authorization_server %[3]s
						client_id gateway-client
						client_secret gateway-secret
						scopes read
					}
				}
			}
		}
		meta {
			upstream fakemcp {
				url %[3]s/mcp
				credential user {
					oauth {
						client_id gateway-client
						client_secret gateway-secret
					}
				}
			}
		}
		auth {
			development
			issuer %[10]s
%[4]s%[11]s			client agent {
				redirect_uri http://127.0.0.1:1/cb
			}
			refresh {
				enabled
			}
		}
		credentials {
			key %[8]s
%[9]s		}
	}
}

http://127.0.0.1:%[1]d {
	bind 127.0.0.1
	codemode_oauth
	codemode_connections
	route /mcp {
		codemode_auth {
			scopes mcp
		}
		codemode_mcp
	}
	handle_path /broker/* {
		codemode_auth
		codemode_broker
	}
}
`, g.port, g.admin, g.fake.URL, users.String(), g.logPath, g.redisAddr, g.prefix, g.key, g.extra, g.issuerURL(), signing)
}

func (g *credGateway) issuerURL() string {
	if g.issuer != "" {
		return g.issuer
	}
	return g.base
}

func (g *credGateway) start(t *testing.T) {
	t.Helper()
	startCaddyfile(t, g.caddyfile(t))
}

var loginFields = regexp.MustCompile(`name="(id|csrf)" value="([^"]*)"`)

// signIn drives the authorization server's login page in c from start
// (a URL that redirects to it) and returns the final response's URL and
// body; stop, when set, ends the redirects at a URL it accepts.
func signIn(t *testing.T, c *http.Client, start, user, password string) (*url.URL, string) {
	t.Helper()
	resp, err := c.Get(start)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(resp.Request.URL.Path, "/oauth/login") {
		t.Fatalf("%s led to %s, not the login page: %s", start, resp.Request.URL, page)
	}
	form := url.Values{"username": {user}, "password": {password}}
	for _, m := range loginFields.FindAllStringSubmatch(string(page), -1) {
		form.Set(m[1], m[2])
	}
	login := resp.Request.URL.Scheme + "://" + resp.Request.URL.Host + "/oauth/login"
	resp, err = c.PostForm(login, form)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	loc, _ := resp.Location()
	if loc == nil {
		loc = resp.Request.URL
	}
	return loc, string(b)
}

// agentToken signs user in as the MCP client "agent" (authorization code
// with PKCE) and returns its access and refresh tokens.
func (g *credGateway) agentToken(t *testing.T, user string) *oauth2.Token {
	t.Helper()
	conf := &oauth2.Config{ClientID: "agent", RedirectURL: "http://127.0.0.1:1/cb", Scopes: []string{"mcp"},
		Endpoint: oauth2.Endpoint{AuthURL: g.base + "/oauth/authorize", TokenURL: g.base + "/oauth/token", AuthStyle: oauth2.AuthStyleInParams}}
	if g.issuer != "" {
		t.Fatal("sign agents in at the first gateway")
	}
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 10 * time.Second, CheckRedirect: func(r *http.Request, _ []*http.Request) error {
		if r.URL.Host == "127.0.0.1:1" {
			return http.ErrUseLastResponse // the agent's redirect URI: stop there
		}
		return nil
	}}
	verifier := oauth2.GenerateVerifier()
	back, body := signIn(t, c, conf.AuthCodeURL("st", oauth2.S256ChallengeOption(verifier)), user, g.passwords[user])
	if back.Query().Get("code") == "" {
		t.Fatalf("agent sign-in of %s ended at %s: %s", user, back, body)
	}
	tok, err := conf.Exchange(context.Background(), back.Query().Get("code"), oauth2.VerifierOption(verifier))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// connect signs user in on the connections page in a browser already
// signed in at the fake upstream as account, and connects services.
func (g *credGateway) connect(t *testing.T, user, account string, services ...string) (*http.Client, []string) {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 10 * time.Second}
	resp, err := c.Get(g.fake.URL + "/login?account=" + account)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var pages []string
	final, page := signIn(t, c, g.issuerURL()+"/connections/"+services[0], user, g.passwords[user])
	if final.Path != "/connections/"+services[0] || !strings.Contains(page, `id="subject">`+user+`<`) {
		t.Fatalf("connections sign-in of %s ended at %s: %s", user, final, page)
	}
	pages = append(pages, page)
	csrf := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(page)[1]
	for _, svc := range services {
		resp, err := c.PostForm(g.issuerURL()+"/connections/"+svc+"/connect", url.Values{"csrf": {csrf}})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Request.URL.Query().Get("connected") != svc {
			t.Fatalf("connecting %s for %s: %d %s\n%s", svc, user, resp.StatusCode, resp.Request.URL, b)
		}
		pages = append(pages, string(b))
	}
	return c, pages
}

type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// planResult is meta:execute's output.
type planResult struct {
	Status string          `json:"status"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code     string `json:"code"`
		Message  string `json:"message"`
		ToolName string `json:"toolName"`
	} `json:"error"`
}

// runPlan runs code through meta:execute as the token's user and returns
// the output and its raw text.
func runPlan(t *testing.T, cs *mcp.ClientSession, code string) (planResult, string) {
	t.Helper()
	res := callMeta(t, cs, "meta:execute", map[string]any{"script": code})
	text := resultText(res)
	var out planResult
	if err := json.Unmarshal([]byte(text), &out); err != nil {
		t.Fatalf("meta:execute: %s", text)
	}
	return out, text
}

// runPlanUntil runs code until its outcome is not the error code while
// (a tool source still loading), for at most 15 seconds.
func runPlanUntil(t *testing.T, cs *mcp.ClientSession, code, while string) (planResult, string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		res, text := runPlan(t, cs, code)
		if res.Error == nil || res.Error.Code != while || time.Now().After(deadline) {
			return res, text
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// forgePlan is the plan every user runs: who the forge API and the MCP
// server think the caller is.
const forgePlan = `const f = await callTool("forge_whoami", {}); const m = await callTool("fakemcp:whoami", {}); return {forge: f.account, mcp: m.account};`

// outputs collects everything the gateway showed anyone, to grep for
// secrets at the end.
type outputs struct {
	mu   sync.Mutex
	text []string
}

func (o *outputs) add(s ...string) {
	o.mu.Lock()
	o.text = append(o.text, s...)
	o.mu.Unlock()
}

// noSecrets fails when any secret appears in what the gateway showed: the
// collected outputs, its log file, its metrics and its lifecycle events.
func (g *credGateway) noSecrets(t *testing.T, o *outputs, secrets []string) {
	t.Helper()
	logs, err := os.ReadFile(g.logPath)
	if err != nil {
		t.Fatal(err)
	}
	if len(logs) == 0 {
		t.Fatal("the gateway wrote no log")
	}
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", g.admin))
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	events := fmt.Sprint(takeEvents())
	all := map[string]string{"logs": string(logs), "metrics": string(metrics), "events": events,
		"stored records": storedText(t, g.redisAddr, g.prefix)}
	o.mu.Lock()
	all["responses"] = strings.Join(o.text, "\n")
	o.mu.Unlock()
	for where, text := range all {
		for _, s := range secrets {
			if s != "" && strings.Contains(text, s) {
				t.Fatalf("a secret (%.12s…) appears in the gateway's %s", s, where)
			}
		}
	}
	if !strings.Contains(string(metrics), "codemode_") || !strings.Contains(events, "tool:called") {
		t.Fatal("metrics or events were not collected")
	}
}

// storedText is every value the gateways keep in Redis under prefix
// (broker sessions and their results, OAuth grants, the vault's sealed
// records, limiter counters), read by type so that nothing is compressed.
func storedText(t *testing.T, addr, prefix string) string {
	t.Helper()
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	ctx := context.Background()
	var b strings.Builder
	keys := 0
	iter := rc.Scan(ctx, 0, prefix+"*", 500).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		keys++
		b.WriteString(k + "\n")
		var v any
		switch rc.Type(ctx, k).Val() {
		case "string":
			v = rc.Get(ctx, k).Val()
		case "hash":
			v = rc.HGetAll(ctx, k).Val()
		case "list":
			v = rc.LRange(ctx, k, 0, -1).Val()
		case "set":
			v = rc.SMembers(ctx, k).Val()
		case "zset":
			v = rc.ZRangeWithScores(ctx, k, 0, -1).Val()
		case "stream":
			v = rc.XRange(ctx, k, "-", "+").Val()
		}
		fmt.Fprintf(&b, "%v\n", v)
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	if keys == 0 {
		t.Fatalf("nothing stored under %q: the check would prove nothing", prefix)
	}
	return b.String()
}

func (g *credGateway) secrets(extra ...string) []string {
	s := append(g.fake.Tokens(), g.fake.ClientSecret, g.key)
	for _, p := range g.passwords {
		s = append(s, p)
	}
	return append(s, extra...)
}

// TestCredentialsEndToEnd: two users sign in (an MCP client each), are
// told to connect, connect each their own account at a fake OAuth upstream
// on the connections page, and run the same plan through meta:execute and
// the broker: the upstream's API and MCP server see each user's own token,
// and no token, secret, key or password appears in any answer, page, log
// line, metric or event.
func TestCredentialsEndToEnd(t *testing.T) {
	g := newCredGateway(t)
	g.start(t)
	takeEvents()
	out := &outputs{}
	type user struct {
		name, account string
		token         *oauth2.Token
		cs            *mcp.ClientSession
	}
	users := []*user{{name: "alice", account: "gh-alice"}, {name: "bob", account: "gh-bob"}}
	for _, u := range users {
		u.token = g.agentToken(t, u.name)
		u.cs = connectMCP(t, &mcp.StreamableClientTransport{Endpoint: g.base + "/mcp",
			HTTPClient: &http.Client{Transport: bearerTransport{u.token.AccessToken}}})
		// Not connected yet: a stable code and where to connect (once the
		// catalog has loaded the forge's document).
		res, text := runPlanUntil(t, u.cs, `return await callTool("forge_whoami", {})`, "TOOL_NOT_FOUND")
		out.add(text)
		if res.Status != "tool_error" || res.Error.Code != "CREDENTIAL_REQUIRED" ||
			!strings.Contains(res.Error.Message, g.base+"/connections/forge") {
			t.Fatalf("%s before connecting: %s", u.name, text)
		}
	}
	// The broker's /execute says the same to an API client.
	if b := brokerExecute(t, g.base, users[0].token.AccessToken, `return (await callTool("forge_whoami", {})).account`); !strings.Contains(b, `"code":"CREDENTIAL_REQUIRED"`) ||
		!strings.Contains(b, g.base+"/connections/forge") {
		t.Fatalf("broker before connecting: %s", b)
	} else {
		out.add(b)
	}
	for _, u := range users {
		_, pages := g.connect(t, u.name, u.account, "forge", "fakemcp")
		out.add(pages...)
	}
	// The MCP upstream lists its tools for signed-in users only: the first
	// connection made lists them.
	if res, text := runPlanUntil(t, users[0].cs, forgePlan, "TOOL_NOT_FOUND"); res.Status != "ok" {
		t.Fatalf("plan after connecting: %s", text)
	}
	var wg sync.WaitGroup
	for _, u := range users {
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, text := runPlan(t, u.cs, forgePlan)
				out.add(text)
				want := fmt.Sprintf(`{"forge":%q,"mcp":%q}`, u.account, u.account)
				if res.Status != "ok" || string(res.Result) != want {
					t.Errorf("%s's plan: %s, want result %s", u.name, text, want)
				}
			}()
		}
	}
	wg.Wait()
	// The broker's own /execute, with the same user's token.
	for _, u := range users {
		b := brokerExecute(t, g.base, u.token.AccessToken, `return (await callTool("forge_whoami", {})).account`)
		out.add(b)
		if !strings.Contains(b, `"result":"`+u.account+`"`) {
			t.Fatalf("broker /execute as %s: %s", u.name, b)
		}
	}
	// The upstream saw only valid tokens, each its own user's.
	perAccount := map[string]int{}
	for _, s := range g.fake.Seen() {
		if s.Account == "" {
			t.Fatalf("a call reached the upstream with a bad credential: %+v", s)
		}
		// Each user connected two services, so two grants (tokens) each.
		if tokens := g.fake.AccessTokens(s.Account); !slices.Contains(tokens, strings.TrimPrefix(s.Credential, "Bearer ")) || len(tokens) != 2 {
			t.Fatalf("the upstream saw %s's call with another credential", s.Account)
		}
		perAccount[s.Account]++
	}
	if perAccount["gh-alice"] < 10 || perAccount["gh-bob"] < 10 {
		t.Fatalf("calls per account: %v", perAccount)
	}
	var gatewayTokens []string
	for _, u := range users {
		gatewayTokens = append(gatewayTokens, u.token.AccessToken, u.token.RefreshToken)
	}
	g.noSecrets(t, out, g.secrets(gatewayTokens...))
}

// brokerExecute runs code through the broker's /execute with a bearer
// token and returns the NDJSON stream.
func brokerExecute(t *testing.T, base, token, code string) string {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"code": code})
	req, _ := http.NewRequest(http.MethodPost, base+"/broker/execute", strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// startSecondGateway runs g2 in a process of its own (this test binary,
// see serveCaddyfileEnv) and waits until it answers.
func startSecondGateway(t *testing.T, g2 *credGateway) {
	t.Helper()
	serveSecondGateway(t, g2.caddyfile(t), g2.base+"/.well-known/oauth-protected-resource")
}

func signingKeyJWK(t *testing.T) string {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(jose.JSONWebKey{Key: k, KeyID: "shared", Algorithm: "ES256", Use: "sig"})
	return string(b)
}

// TestCredentialsIsolation: two gateway processes share a Redis (one
// signs users in and serves the connections page, both run plans). Two
// users' plans run at once on both, with the upstream's tokens so short
// that every call refreshes (rotated each time: a refresh token used twice
// would make the upstream revoke the grant), and each call carries its own
// user's current token. A disconnect is refused at once on the other
// gateway; a revoked gateway session clears the user's connections there
// too.
func TestCredentialsIsolation(t *testing.T) {
	t.Setenv("CODEMODE_TEST_SIGN_KEY", signingKeyJWK(t))
	a := newCredGateway(t)
	a.signKey = true
	a.fake.SetTokenTTL(30 * time.Second) // inside refresh_before (1m): every use refreshes
	a.start(t)
	b := *a
	b.port, b.admin = freePort(t), freePort(t)
	b.base, b.issuer = fmt.Sprintf("http://127.0.0.1:%d", b.port), a.base
	b.logPath = filepath.Join(t.TempDir(), "caddy.log")
	startSecondGateway(t, &b)
	takeEvents()

	out := &outputs{}
	type user struct {
		name, account string
		token         *oauth2.Token
		on            map[string]*mcp.ClientSession // by gateway
	}
	session := func(g *credGateway, token string) *mcp.ClientSession {
		return connectMCP(t, &mcp.StreamableClientTransport{Endpoint: g.base + "/mcp",
			HTTPClient: &http.Client{Transport: bearerTransport{token}}})
	}
	users := []*user{{name: "alice", account: "gh-alice"}, {name: "bob", account: "gh-bob"}}
	browsers := map[string]*http.Client{}
	for _, u := range users {
		u.token = a.agentToken(t, u.name)
		u.on = map[string]*mcp.ClientSession{"a": session(a, u.token.AccessToken), "b": session(&b, u.token.AccessToken)}
		c, pages := a.connect(t, u.name, u.account, "forge", "fakemcp")
		browsers[u.name] = c
		out.add(pages...)
	}
	for _, gw := range []string{"a", "b"} {
		if res, text := runPlanUntil(t, users[0].on[gw], forgePlan, "TOOL_NOT_FOUND"); res.Status != "ok" {
			t.Fatalf("gateway %s: %s", gw, text)
		}
	}

	var wg sync.WaitGroup
	for _, u := range users {
		for _, gw := range []string{"a", "b", "a", "b", "a", "b"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, text := runPlan(t, u.on[gw], forgePlan)
				out.add(text)
				if want := fmt.Sprintf(`{"forge":%q,"mcp":%q}`, u.account, u.account); res.Status != "ok" || string(res.Result) != want {
					t.Errorf("%s on gateway %s: %s, want %s", u.name, gw, text, want)
				}
			}()
		}
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	if n := a.fake.Refreshes(); n < 2 {
		t.Fatalf("%d refreshes: the short-lived tokens were not refreshed", n)
	}
	for _, s := range a.fake.Seen() {
		if s.Account == "" {
			t.Fatalf("a call reached the upstream with a dead or foreign token: %+v", s)
		}
	}

	// Alice disconnects the forge (on gateway a's page): refused on b.
	page := browsers["alice"]
	status, _, body := pagePost(t, page, a.base+"/connections/forge/disconnect", a.base+"/connections")
	if status != 200 || !strings.Contains(body, "Fake Forge is disconnected.") {
		t.Fatalf("disconnect: %d %s", status, body)
	}
	res, text := runPlan(t, users[0].on["b"], `return await callTool("forge_whoami", {})`)
	out.add(text)
	if res.Error == nil || res.Error.Code != "CREDENTIAL_REQUIRED" {
		t.Fatalf("alice on b after disconnecting: %s", text)
	}
	if res, text := runPlan(t, users[0].on["b"], `return (await callTool("fakemcp:whoami", {})).account`); string(res.Result) != `"gh-alice"` {
		t.Fatalf("alice's other connection after disconnecting the forge: %s", text)
	}
	if res, text := runPlan(t, users[1].on["b"], forgePlan); res.Status != "ok" {
		t.Fatalf("bob after alice's disconnect: %s", text)
	}

	// Bob's gateway session is revoked (his client signs out, at a): his
	// connections are cleared, on b too, and revoked at the upstream.
	resp, err := http.PostForm(a.base+"/oauth/revoke", url.Values{"token": {users[1].token.RefreshToken}, "client_id": {"agent"}})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("revoke: %v %v", resp, err)
	}
	resp.Body.Close()
	again := a.agentToken(t, "bob")
	cs := session(&b, again.AccessToken)
	for _, code := range []string{`return await callTool("forge_whoami", {})`, `return await callTool("fakemcp:whoami", {})`} {
		res, text := runPlan(t, cs, code)
		out.add(text)
		if res.Error == nil || res.Error.Code != "CREDENTIAL_REQUIRED" {
			t.Fatalf("bob on b after his session was revoked: %s", text)
		}
	}
	// His client's old token is refused on b at the door.
	if _, err := users[1].on["b"].CallTool(context.Background(), &mcp.CallToolParams{Name: "meta:execute",
		Arguments: map[string]any{"script": forgePlan}}); err == nil || !strings.Contains(err.Error(), "Unauthorized") {
		t.Fatalf("bob's revoked token on b: %v", err)
	}
	// ... and revoked at the upstream: both grants (forge and MCP server)
	// of his account are gone there.
	deadline := time.Now().Add(10 * time.Second)
	for len(a.fake.AccessTokens("gh-bob")) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("bob's upstream grants were not revoked at the upstream")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(a.fake.AccessTokens("gh-alice")) == 0 {
		t.Fatal("alice's grants were revoked with bob's")
	}
	if res, text := runPlan(t, users[0].on["b"], `return (await callTool("fakemcp:whoami", {})).account`); string(res.Result) != `"gh-alice"` {
		t.Fatalf("alice after bob's revocation: %s", text)
	}

	secrets := a.secrets()
	a.noSecrets(t, out, secrets)
	logs, _ := os.ReadFile(b.logPath)
	mresp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", b.admin))
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	for _, s := range secrets {
		if strings.Contains(string(logs), s) || strings.Contains(string(metrics), s) {
			t.Fatalf("a secret (%.12s…) appears in the second gateway's log or metrics", s)
		}
	}
}

// pagePost submits a form of the connections page open in c at page.
func pagePost(t *testing.T, c *http.Client, action, page string) (int, string, string) {
	t.Helper()
	resp, err := c.Get(page)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(string(b))
	if m == nil {
		t.Fatalf("no form on %s: %s", page, b)
	}
	resp, err = c.PostForm(action, url.Values{"csrf": {m[1]}})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ = io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Request.URL.String(), string(b)
}

// TestCredentialsTransparentMode: with an external identity provider (our
// own authorization server, run apart, standing in for it) the agent's
// token and the connections page's sign-in come from the provider, and the
// connection made on the page serves the agent's plans.
func TestCredentialsTransparentMode(t *testing.T) {
	g := newCredGateway(t)
	hash, _ := bcrypt.GenerateFromPassword([]byte(g.passwords["alice"]), bcrypt.MinCost)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	idpURL := "http://" + ln.Addr().String()
	idp, err := oauth.NewServer(oauth.ServerConfig{Issuer: idpURL, Development: true,
		Resources: []string{g.base}, // the gateway: the provider issues tokens for it
		Users:     []oauth.User{{Username: "alice", PasswordHash: string(hash)}},
		Clients: []oauth.ClientConfig{
			{ID: "agent", RedirectURIs: []string{"http://127.0.0.1:1/cb"}},
			{ID: "gateway", Secret: "gateway-idp-secret", RedirectURIs: []string{g.base + "/connections/signin/callback"}},
		}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer idp.Close()
	hs := &http.Server{Handler: idp.Handler()}
	go func() { _ = hs.Serve(ln) }()
	defer hs.Close()

	src := fmt.Sprintf(`{
	admin off
	persist_config off
	codemode {
		sandbox {
			adapter inprocess
			trusted_callers
		}
		broker {
			openapi forge %[2]s/openapi.json {
				credential user {
					oauth {
						authorization_server %[2]s
						client_id gateway-client
						client_secret gateway-secret
					}
				}
			}
		}
		auth {
			development
			mode transparent
			provider_url %[3]s
			expected_audience %[1]s
			client_id gateway
			client_secret gateway-idp-secret
		}
		credentials {
			key %[4]s
		}
	}
}

%[1]s {
	bind 127.0.0.1
	codemode_oauth
	codemode_connections
	route /mcp {
		codemode_auth
		codemode_mcp
	}
}
`, g.base, g.fake.URL, idpURL, g.key)
	startCaddyfile(t, src)

	// The agent signs in at the provider, for the gateway's audience.
	conf := &oauth2.Config{ClientID: "agent", RedirectURL: "http://127.0.0.1:1/cb",
		Endpoint: oauth2.Endpoint{AuthURL: idpURL + "/oauth/authorize", TokenURL: idpURL + "/oauth/token", AuthStyle: oauth2.AuthStyleInParams}}
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, CheckRedirect: func(r *http.Request, _ []*http.Request) error {
		if r.URL.Host == "127.0.0.1:1" {
			return http.ErrUseLastResponse
		}
		return nil
	}}
	verifier := oauth2.GenerateVerifier()
	back, body := signIn(t, c, conf.AuthCodeURL("st", oauth2.S256ChallengeOption(verifier), oauth2.SetAuthURLParam("resource", g.base)),
		"alice", g.passwords["alice"])
	tok, err := conf.Exchange(context.Background(), back.Query().Get("code"), oauth2.VerifierOption(verifier))
	if err != nil {
		t.Fatalf("agent token: %v (%s)", err, body)
	}
	cs := connectMCP(t, &mcp.StreamableClientTransport{Endpoint: g.base + "/mcp",
		HTTPClient: &http.Client{Transport: bearerTransport{tok.AccessToken}}})
	res, text := runPlanUntil(t, cs, `return (await callTool("forge_whoami", {})).account`, "TOOL_NOT_FOUND")
	if res.Error == nil || res.Error.Code != "CREDENTIAL_REQUIRED" || !strings.Contains(res.Error.Message, g.base+"/connections/forge") {
		t.Fatalf("before connecting: %s", text)
	}
	// The page signs alice in at the provider, then she connects.
	g.connect(t, "alice", "gh-alice", "forge")
	if res, text := runPlan(t, cs, `return (await callTool("forge_whoami", {})).account`); string(res.Result) != `"gh-alice"` {
		t.Fatalf("after connecting: %s", text)
	}
}
