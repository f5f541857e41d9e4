package caddymodules

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
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

	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/crypto/bcrypt"
	"golang.org/x/oauth2"

	"github.com/codemode-gateway/caddy-codemode/credential/credentialtest"
	"github.com/codemode-gateway/caddy-codemode/guard/redistest"
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
		logPath: filepath.Join(t.TempDir(), "caddy.log"),
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
			issuer http://127.0.0.1:%[1]d
%[4]s			client agent {
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
`, g.port, g.admin, g.fake.URL, users.String(), g.logPath, g.redisAddr, g.prefix, g.key, g.extra)
}

func (g *credGateway) start(t *testing.T) {
	t.Helper()
	cfg, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(g.caddyfile(t)), nil)
	if err != nil {
		t.Fatal(err)
	}
	startCaddy(t, cfg)
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
	final, page := signIn(t, c, g.base+"/connections/"+services[0], user, g.passwords[user])
	if final.Path != "/connections/"+services[0] || !strings.Contains(page, `id="subject">`+user+`<`) {
		t.Fatalf("connections sign-in of %s ended at %s: %s", user, final, page)
	}
	pages = append(pages, page)
	csrf := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(page)[1]
	for _, svc := range services {
		resp, err := c.PostForm(g.base+"/connections/"+svc+"/connect", url.Values{"csrf": {csrf}})
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
	all := map[string]string{"logs": string(logs), "metrics": string(metrics), "events": events}
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
		req, _ := http.NewRequest(http.MethodPost, g.base+"/broker/execute", strings.NewReader(
			`{"code":"return (await callTool(\"forge_whoami\", {})).account"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+u.token.AccessToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		out.add(string(b))
		if !strings.Contains(string(b), `"result":"`+u.account+`"`) {
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
	g.noSecrets(t, out, g.secrets())
}

// readNDJSON reads a broker answer into its events.
func readNDJSON(t *testing.T, r io.Reader) []ndjsonEvent {
	t.Helper()
	var evs []ndjsonEvent
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		var e ndjsonEvent
		if json.Unmarshal(sc.Bytes(), &e) == nil {
			evs = append(evs, e)
		}
	}
	return evs
}
