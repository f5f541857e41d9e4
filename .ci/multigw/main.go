// Command multigw is the multi-gateway test .ci/run runs against the built
// binary: three gateway processes (.ci/multigw/gateway.Caddyfile) sharing
// one real redis-server, Caddy's own reverse_proxy in front
// (.ci/multigw/lb.Caddyfile, round robin), and a user's path through them:
// OAuth sign-in, MCP tools, a plan calling a demo tool and an OpenAPI
// action, tools only the caller answers (answered on another gateway, over
// the broker's HTTP API and over MCP), a shared rate limit hit, a gateway
// killed, Redis restarted. Everything listens on 127.0.0.1; the whole run is
// bounded (-timeout). Run from the repository root:
//
//	go run ./.ci/multigw -caddy /path/to/caddy
package main

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/redis/go-redis/v9"
	"golang.org/x/oauth2"

	"github.com/codemode-gateway/caddy-codemode/internal/nettest"
)

type harness struct {
	caddy, work      string
	redisPort        int
	gwPorts          [3]int
	lbPort           int
	lb               string
	key              string
	prefix           string
	procs            map[string]*exec.Cmd
	mu               sync.Mutex
	passed, failed   int
	rdb              *redis.Client
	gatewayOfAnswers []string
}

func main() {
	caddyBin := flag.String("caddy", "", "the built caddy binary")
	timeout := flag.Duration("timeout", 5*time.Minute, "bound of the whole run")
	flag.Parse()
	if *caddyBin == "" {
		fmt.Fprintln(os.Stderr, "usage: multigw -caddy <binary>")
		os.Exit(2)
	}
	work, err := os.MkdirTemp("", "multigw")
	if err != nil {
		panic(err)
	}
	h := &harness{caddy: *caddyBin, work: work, procs: map[string]*exec.Cmd{}}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	code := 0
	func() {
		defer func() {
			if p := recover(); p != nil {
				fmt.Printf("FAIL %v\n", p)
				h.failed++
				h.dumpLogs()
			}
		}()
		h.run(ctx)
	}()
	cancel()
	h.stopAll()
	_ = os.RemoveAll(work)
	fmt.Printf("%d passed, %d failed\n", h.passed, h.failed)
	if h.failed > 0 {
		code = 1
	}
	os.Exit(code)
}

// check records one result; fatal ends the run.
func (h *harness) check(name string, ok bool, detail string) {
	if ok {
		h.passed++
		fmt.Printf("ok   %s: %s\n", name, detail)
		return
	}
	h.failed++
	fmt.Printf("FAIL %s: %s\n", name, detail)
}

func (h *harness) fatal(name string, err error) {
	panic(fmt.Sprintf("%s: %v", name, err))
}

func freePort() int {
	port, err := nettest.FreePort()
	if err != nil {
		panic(err)
	}
	return port
}

func (h *harness) start(name string, env []string, args ...string) {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), env...)
	logf, err := os.Create(filepath.Join(h.work, name+".log"))
	if err != nil {
		h.fatal("start "+name, err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		h.fatal("start "+name, err)
	}
	h.mu.Lock()
	h.procs[name] = cmd
	h.mu.Unlock()
}

// kill ends a process at once (SIGKILL), as a crash does.
func (h *harness) kill(name string) {
	h.mu.Lock()
	cmd := h.procs[name]
	delete(h.procs, name)
	h.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
	}
}

func (h *harness) stopAll() {
	h.mu.Lock()
	names := make([]string, 0, len(h.procs))
	for n := range h.procs {
		names = append(names, n)
	}
	h.mu.Unlock()
	for _, n := range names {
		h.kill(n)
	}
}

func (h *harness) dumpLogs() {
	entries, _ := os.ReadDir(h.work)
	for _, e := range entries {
		b, _ := os.ReadFile(filepath.Join(h.work, e.Name()))
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) > 30 {
			lines = lines[len(lines)-30:]
		}
		fmt.Printf("--- %s (last lines)\n%s\n", e.Name(), strings.Join(lines, "\n"))
	}
}

// waitFor polls ok every 50 ms until it holds or d passes.
func waitFor(ctx context.Context, d time.Duration, ok func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if ok() {
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (h *harness) startRedis() {
	h.start("redis", nil, "redis-server", "--bind", "127.0.0.1", "--port", fmt.Sprint(h.redisPort),
		"--save", "", "--appendonly", "no", "--dir", h.work)
}

func (h *harness) gatewayEnv(i int) []string {
	return []string{
		fmt.Sprintf("GW_PORT=%d", h.gwPorts[i]), fmt.Sprintf("GW_NAME=gw%d", i),
		fmt.Sprintf("REDIS_ADDR=127.0.0.1:%d", h.redisPort), "REDIS_PREFIX=" + h.prefix,
		"ISSUER=" + h.lb, "JWT_SIGNING_KEY=" + h.key,
	}
}

func (h *harness) run(ctx context.Context) {
	h.redisPort, h.lbPort = freePort(), freePort()
	for i := range h.gwPorts {
		h.gwPorts[i] = freePort()
	}
	h.lb = fmt.Sprintf("http://127.0.0.1:%d", h.lbPort)
	var b [6]byte
	_, _ = rand.Read(b[:])
	h.prefix = "multigw:" + hex.EncodeToString(b[:]) + ":"
	priv, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	jwk, _ := json.Marshal(jose.JSONWebKey{Key: priv, KeyID: "multigw", Algorithm: "ES256", Use: "sig"})
	h.key = string(jwk)

	h.startRedis()
	h.rdb = redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", h.redisPort)})
	if !waitFor(ctx, 10*time.Second, func() bool { return h.rdb.Ping(ctx).Err() == nil }) {
		h.fatal("redis-server", errors.New("did not start"))
	}
	for i := range h.gwPorts {
		h.start(fmt.Sprintf("gw%d", i), h.gatewayEnv(i), h.caddy, "run", "--config", ".ci/multigw/gateway.Caddyfile")
	}
	h.start("lb", []string{fmt.Sprintf("LB_PORT=%d", h.lbPort),
		fmt.Sprintf("GW1=127.0.0.1:%d", h.gwPorts[0]), fmt.Sprintf("GW2=127.0.0.1:%d", h.gwPorts[1]), fmt.Sprintf("GW3=127.0.0.1:%d", h.gwPorts[2])},
		h.caddy, "run", "--config", ".ci/multigw/lb.Caddyfile")
	plain := &http.Client{Timeout: 10 * time.Second}
	up := func(u string) bool {
		resp, err := plain.Get(u)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}
	catalogLoaded := func(u string) bool {
		resp, err := plain.Get(u)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == 200 && strings.Contains(string(b), `"name":"demo","actions":3`)
	}
	for i, p := range h.gwPorts {
		// Up, with the demo API's actions in its catalog (the health check
		// lists the catalog's sources).
		base := fmt.Sprintf("http://127.0.0.1:%d", p)
		if !waitFor(ctx, 60*time.Second, func() bool { return up(base+"/healthz") && catalogLoaded(base+"/broker/health") }) {
			h.fatal(fmt.Sprintf("gateway %d", i), errors.New("did not start, or its catalog did not load"))
		}
	}
	if !waitFor(ctx, 20*time.Second, func() bool { return up(h.lb + "/healthz") }) {
		h.fatal("load balancer", errors.New("did not start"))
	}
	h.check("setup", true, fmt.Sprintf("redis-server, 3 gateways, load balancer on %s", h.lb))

	tok := h.signIn(ctx, 3)
	h.mcpTools(ctx, tok)
	h.callerAnswered(ctx, tok)
	h.limits(ctx, tok)
	h.gatewayKilled(ctx, tok)
	h.redisRestart(ctx)
}

// recorder adds the bearer token and keeps the X-Gateway of every answer.
type recorder struct {
	token string
	mu    sync.Mutex
	seq   []string
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	if r.token != "" {
		req.Header.Set("Authorization", "Bearer "+r.token)
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err == nil {
		r.mu.Lock()
		r.seq = append(r.seq, resp.Header.Get("X-Gateway"))
		r.mu.Unlock()
	}
	return resp, err
}

func (r *recorder) gateways() map[string]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := map[string]bool{}
	for _, g := range r.seq {
		if g != "" {
			m[g] = true
		}
	}
	return m
}

var hiddenField = regexp.MustCompile(`name="(id|csrf)" value="([^"]*)"`)

// signIn walks the MCP authorization path through the load balancer: 401,
// protected resource metadata, authorization server metadata, dynamic
// registration, PKCE with the resource indicator, the login and consent
// pages, the code exchange. Its requests land on all three gateways, which
// share the pending authorization through Redis.
func (h *harness) signIn(ctx context.Context, gateways int) string {
	rec := &recorder{}
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar, Transport: rec, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	must := func(step string, resp *http.Response, err error, want int) (*http.Response, string) {
		if err != nil {
			h.fatal("sign-in: "+step, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != want {
			h.fatal("sign-in: "+step, fmt.Errorf("status %d, want %d: %s", resp.StatusCode, want, b))
		}
		return resp, string(b)
	}
	get := func(step, u string, want int) (*http.Response, string) {
		resp, err := browser.Get(u)
		return must(step, resp, err, want)
	}
	postForm := func(step, u string, v url.Values, want int) (*http.Response, string) {
		resp, err := browser.PostForm(u, v)
		return must(step, resp, err, want)
	}
	resp, _ := get("401 from /mcp", h.lb+"/mcp", 401)
	m := regexp.MustCompile(`resource_metadata="([^"]+)"`).FindStringSubmatch(resp.Header.Get("WWW-Authenticate"))
	if m == nil {
		h.fatal("sign-in: challenge", fmt.Errorf("no resource_metadata in %q", resp.Header.Get("WWW-Authenticate")))
	}
	var prm struct {
		Resource             string   `json:"resource"`
		AuthorizationServers []string `json:"authorization_servers"`
	}
	_, body := get("resource metadata", m[1], 200)
	_ = json.Unmarshal([]byte(body), &prm)
	var asm struct {
		AuthorizationEndpoint string `json:"authorization_endpoint"`
		TokenEndpoint         string `json:"token_endpoint"`
		RegistrationEndpoint  string `json:"registration_endpoint"`
	}
	_, body = get("authorization server metadata", prm.AuthorizationServers[0]+"/.well-known/oauth-authorization-server", 200)
	_ = json.Unmarshal([]byte(body), &asm)
	redirect := "http://127.0.0.1:1/callback"
	reg, _ := json.Marshal(map[string]any{"redirect_uris": []string{redirect}, "client_name": "multigw",
		"token_endpoint_auth_method": "none", "application_type": "native"})
	resp, err := browser.Post(asm.RegistrationEndpoint, "application/json", strings.NewReader(string(reg)))
	_, body = must("dynamic registration", resp, err, 201)
	var client struct {
		ClientID string `json:"client_id"`
	}
	_ = json.Unmarshal([]byte(body), &client)
	conf := &oauth2.Config{ClientID: client.ClientID, RedirectURL: redirect, Scopes: []string{"mcp"},
		Endpoint: oauth2.Endpoint{AuthURL: asm.AuthorizationEndpoint, TokenURL: asm.TokenEndpoint, AuthStyle: oauth2.AuthStyleInParams}}
	verifier := oauth2.GenerateVerifier()
	authURL := conf.AuthCodeURL("st", oauth2.S256ChallengeOption(verifier), oauth2.SetAuthURLParam("resource", prm.Resource))
	abs := func(loc *url.URL) string { return h.lb + loc.RequestURI() }
	form := func(page string) url.Values {
		v := url.Values{}
		for _, f := range hiddenField.FindAllStringSubmatch(page, -1) {
			v.Set(f[1], f[2])
		}
		return v
	}
	resp, _ = get("authorize", authURL, http.StatusFound)
	loc, _ := resp.Location()
	_, page := get("login page", abs(loc), 200)
	v := form(page)
	v.Set("demo", "1")
	resp, _ = postForm("login", h.lb+"/oauth/login", v, http.StatusSeeOther)
	loc, _ = resp.Location()
	_, page = get("consent page", abs(loc), 200)
	v = form(page)
	v.Set("decision", "approve")
	resp, _ = postForm("consent", h.lb+"/oauth/consent", v, http.StatusSeeOther)
	loc, _ = resp.Location()
	resp, _ = get("callback", abs(loc), http.StatusFound)
	back, _ := resp.Location()
	tctx := context.WithValue(ctx, oauth2.HTTPClient, &http.Client{Transport: rec, Timeout: 30 * time.Second})
	tok, err := conf.Exchange(tctx, back.Query().Get("code"), oauth2.VerifierOption(verifier))
	if err != nil {
		h.fatal("sign-in: token", err)
	}
	gws := rec.gateways()
	h.check("OAuth sign-in through the load balancer", tok.AccessToken != "" && len(gws) == gateways,
		fmt.Sprintf("registration, PKCE, login, consent and token spread over gateways %v", keys(gws)))
	return tok.AccessToken
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func (h *harness) mcpClient(ctx context.Context, rec *recorder, version string, answer string) *mcp.ClientSession {
	opts := &mcp.ClientOptions{ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"result": answer}}, nil
	}}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "multigw", Version: "1"}, opts).Connect(cctx,
		&mcp.StreamableClientTransport{Endpoint: h.lb + "/mcp", HTTPClient: &http.Client{Transport: rec}},
		&mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		h.fatal("MCP connect "+version, err)
	}
	return cs
}

func callText(ctx context.Context, cs *mcp.ClientSession, tool string, args map[string]any) (string, bool, error) {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	res, err := cs.CallTool(cctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		return "", true, err
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String(), res.IsError, nil
}

// mcpTools: MCP clients of 2026-07-28 and 2025-11-25 with the token,
// through the load balancer; the plan calls a demo tool and an OpenAPI
// action of the demo API.
func (h *harness) mcpTools(ctx context.Context, tok string) {
	for _, version := range []string{"2026-07-28", "2025-11-25"} {
		rec := &recorder{token: tok}
		cs := h.mcpClient(ctx, rec, version, "")
		lt, err := cs.ListTools(ctx, nil)
		h.check("MCP "+version+": tools/list", err == nil && len(lt.Tools) == 4, fmt.Sprint(err))
		text, isErr, err := callText(ctx, cs, "meta:invoke", map[string]any{"tool": "math:add", "input": map[string]any{"a": 20, "b": 22}})
		h.check("MCP "+version+": meta:invoke math:add", err == nil && !isErr && strings.Contains(text, `"sum":42`), text+fmt.Sprint(err))
		text, isErr, err = callText(ctx, cs, "meta:execute", map[string]any{"script": `
const g = await callTool("demo_getGreeting", {name: "Ada", greeting: "Hi"});
const s = await callTool("math:add", {a: 2, b: 3});
return {message: g.message, sum: s.sum};`})
		h.check("MCP "+version+": a plan calling an OpenAPI action and a demo tool", err == nil && !isErr &&
			strings.Contains(text, `"message":"Hi, Ada`) && strings.Contains(text, `"sum":5`), text+fmt.Sprint(err))
		gws := rec.gateways()
		h.check("MCP "+version+": requests on every gateway", len(gws) == 3, fmt.Sprint(keys(gws)))
		cs.Close()
	}
}

// execute starts POST /broker/execute through the load balancer and reads
// the session and the first tool call; it returns the stream, the session
// id, the call id and the gateway running the session.
func (h *harness) execute(ctx context.Context, tok, code string) (*bufio.Scanner, io.Closer, string, string, string) {
	body, _ := json.Marshal(map[string]any{"code": code, "timeout": 60000})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.lb+"/broker/execute", strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.fatal("execute", err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		h.fatal("execute", fmt.Errorf("%s from %s: %s", resp.Status, resp.Header.Get("X-Gateway"), b))
	}
	sc := bufio.NewScanner(resp.Body)
	var sess, call struct {
		Payload struct {
			ID     string `json:"id"`
			CallID string `json:"callId"`
		} `json:"payload"`
	}
	if !sc.Scan() || json.Unmarshal(sc.Bytes(), &sess) != nil || !sc.Scan() || json.Unmarshal(sc.Bytes(), &call) != nil {
		h.fatal("execute", errors.New("no session and tool_call events"))
	}
	return sc, resp.Body, sess.Payload.ID, call.Payload.CallID, resp.Header.Get("X-Gateway")
}

func (h *harness) do(ctx context.Context, tok, method, path string, body any) (int, string, string) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = strings.NewReader(string(b))
	}
	req, _ := http.NewRequestWithContext(ctx, method, h.lb+path, rd)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return 0, err.Error(), ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header.Get("X-Gateway")
}

func lastLine(sc *bufio.Scanner) string {
	last := ""
	for sc.Scan() {
		last = sc.Text()
	}
	return last
}

// callerAnswered: a tool only the caller answers, answered through another
// gateway than the one running the session: over the broker's HTTP API
// (tool-result) and over MCP (multi round-trip requests, 2026-07-28).
func (h *harness) callerAnswered(ctx context.Context, tok string) {
	sc, closer, id, callID, runner := h.execute(ctx, tok, `return "hello " + await callTool("client:prompt", {question: "name?"})`)
	defer closer.Close()
	code, body, answeredBy := h.do(ctx, tok, http.MethodPost, "/broker/sessions/"+id+"/tool-result", map[string]any{"callId": callID, "result": "Ada"})
	last := lastLine(sc)
	h.check("broker: a caller-answered call answered on another gateway", code == 200 && answeredBy != runner &&
		strings.Contains(last, `"result":"hello Ada"`), fmt.Sprintf("run on %s, answered on %s: %d %s; last event %s", runner, answeredBy, code, body, last))

	rec := &recorder{token: tok}
	cs := h.mcpClient(ctx, rec, "2026-07-28", "Grace")
	defer cs.Close()
	text, isErr, err := callText(ctx, cs, "meta:execute", map[string]any{"script": `return "hi " + await callTool("client:prompt", {question: "name?"})`})
	h.check("MCP 2026-07-28: a plan's caller-answered call over multi round-trip requests", err == nil && !isErr &&
		strings.Contains(text, `"result":"hi Grace"`), text+fmt.Sprint(err))
}

// limits: meta:search allows 5 calls a minute per user, one counter in
// Redis for all gateways.
func (h *harness) limits(ctx context.Context, tok string) {
	rec := &recorder{token: tok}
	cs := h.mcpClient(ctx, rec, "2026-07-28", "")
	defer cs.Close()
	ok, limited := 0, 0
	// The limit counts in windows aligned to the minute (docs/guard.md):
	// calls that straddle a minute's end are weighed with the previous
	// window's share and let one more in. The seven run within one minute.
	if now := time.Now(); now.Truncate(time.Minute).Add(time.Minute).Sub(now) < 15*time.Second {
		time.Sleep(time.Until(now.Truncate(time.Minute).Add(time.Minute)) + 100*time.Millisecond)
	}
	for range 7 {
		text, isErr, err := callText(ctx, cs, "meta:search", map[string]any{"queries": []string{"add numbers"}})
		switch {
		case err == nil && !isErr:
			ok++
		case err == nil && strings.Contains(text, "RATE_LIMIT"):
			limited++
		}
	}
	h.check("a shared rate limit hit across gateways", ok == 5 && limited == 2 && len(rec.gateways()) == 3,
		fmt.Sprintf("%d allowed, %d RATE_LIMIT over gateways %v", ok, limited, keys(rec.gateways())))
}

// gatewayKilled: SIGKILL of the gateway that runs a waiting session and
// holds an MCP session of 2025-11-25.
func (h *harness) gatewayKilled(ctx context.Context, tok string) {
	rec := &recorder{token: tok}
	old := h.mcpClient(ctx, rec, "2025-11-25", "")
	holder := rec.seq[0] // the gateway that answered initialize
	var sc *bufio.Scanner
	var closer io.Closer
	var id, callID, runner string
	for range 6 { // until the waiting session runs on the holder
		sc, closer, id, callID, runner = h.execute(ctx, tok, `return await callTool("client:prompt", {question: "?"})`)
		if runner == holder {
			break
		}
		h.do(ctx, tok, http.MethodPost, "/broker/sessions/"+id+"/tool-result", map[string]any{"callId": callID, "result": "x"})
		closer.Close()
	}
	if runner != holder {
		h.fatal("gateway killed", fmt.Errorf("no session ran on %s", holder))
	}
	defer closer.Close()
	// A 2026-07-28 plan waiting for its MCP client's answer (multi
	// round-trip requests) on the same gateway.
	manual, plan, args := h.mrtrWaitingOn(ctx, tok, holder)
	defer manual.Close()
	idx := strings.TrimPrefix(holder, "gw")
	killedAt := time.Now()
	h.kill("gw" + idx)

	var final string
	ended := waitFor(ctx, 30*time.Second, func() bool {
		code, body, _ := h.do(ctx, tok, http.MethodGet, "/broker/sessions/"+id, nil)
		final = fmt.Sprint(code, " ", body)
		return code == 200 && strings.Contains(body, `"status":"error"`) && strings.Contains(body, `"OWNER_LOST"`)
	})
	h.check("killed gateway: its session ends with OWNER_LOST on the others", ended,
		fmt.Sprintf("after %s (owner_timeout 3s): %s", time.Since(killedAt).Round(100*time.Millisecond), final))
	code, body, _ := h.do(ctx, tok, http.MethodPost, "/broker/sessions/"+id+"/tool-result", map[string]any{"callId": callID, "result": "late"})
	h.check("killed gateway: a tool result for its session is refused, never success", code == 409 && strings.Contains(body, "OWNER_LOST"),
		fmt.Sprint(code, " ", body))
	last := lastLine(sc)
	h.check("killed gateway: the caller's stream was cut without a final event", !strings.Contains(last, `"type":"result"`), last)
	// The MCP client's retry with its answer reaches a live gateway: the
	// plan's outcome is unknown, which the result says (a transient tool
	// error), never a success nor a hang.
	var answer mcp.InputResponseMap = map[string]mcp.InputResponse{}
	for id := range plan.InputRequests {
		answer[id] = &mcp.ElicitResult{Action: "accept", Content: map[string]any{"result": "late"}}
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	res, err := manual.CallTool(rctx, &mcp.CallToolParams{Name: "meta:execute", Arguments: args, RequestState: plan.RequestState, InputResponses: answer})
	cancel()
	raw, _ := json.Marshal(res)
	h.check("killed gateway: a 2026-07-28 retry of its waiting plan is told OWNER_LOST", err == nil && res.IsError && strings.Contains(string(raw), "OWNER_LOST"),
		fmt.Sprint(err, " ", string(raw)))

	_, err = old.ListTools(ctx, nil)
	if err == nil {
		_, err = old.ListTools(ctx, nil) // the first may land on a live gateway that forwards... to the dead one
	}
	h.check("killed gateway: its MCP session is reported gone", err != nil, fmt.Sprint(err))
	old.Close()
	fresh := h.mcpClient(ctx, &recorder{token: tok}, "2025-11-25", "")
	lt, err := fresh.ListTools(ctx, nil)
	h.check("killed gateway: a new 2025-11-25 session works through the load balancer", err == nil && len(lt.Tools) == 4, fmt.Sprint(err))
	fresh.Close()
	modern := h.mcpClient(ctx, &recorder{token: tok}, "2026-07-28", "")
	text, isErr, err := callText(ctx, modern, "meta:invoke", map[string]any{"tool": "math:add", "input": map[string]any{"a": 1, "b": 1}})
	h.check("killed gateway: 2026-07-28 calls go on", err == nil && !isErr && strings.Contains(text, `"sum":2`), text+fmt.Sprint(err))
	modern.Close()
}

// mrtrWaitingOn starts, through the load balancer, 2026-07-28 meta:execute
// plans whose script waits for the MCP client's answer until one runs on
// gateway gw (the gateway that answered the first request runs it), and
// returns the client, which answers input requests itself, the interim
// result (input_required) and the call's arguments.
func (h *harness) mrtrWaitingOn(ctx context.Context, tok, gw string) (*mcp.ClientSession, *mcp.CallToolResult, map[string]any) {
	rec := &recorder{token: tok}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "multigw-mrtr", Version: "1"}, &mcp.ClientOptions{
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) { return nil, errors.New("unused") },
		MultiRoundTrip:     &mcp.MultiRoundTripOptions{Disabled: true},
	}).Connect(cctx, &mcp.StreamableClientTransport{Endpoint: h.lb + "/mcp", HTTPClient: &http.Client{Transport: rec}},
		&mcp.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
	if err != nil {
		h.fatal("MCP connect 2026-07-28", err)
	}
	args := map[string]any{"script": `return await callTool("client:prompt", {question: "?"})`}
	for range 6 {
		rec.mu.Lock()
		n := len(rec.seq)
		rec.mu.Unlock()
		res, err := cs.CallTool(cctx, &mcp.CallToolParams{Name: "meta:execute", Arguments: args})
		if err != nil || !res.NeedsInput() {
			h.fatal("2026-07-28 plan waiting for its client", fmt.Errorf("%v %+v", err, res))
		}
		rec.mu.Lock()
		runner := rec.seq[n]
		rec.mu.Unlock()
		if runner == gw {
			return cs, res, args
		}
	}
	h.fatal("2026-07-28 plan waiting for its client", fmt.Errorf("no plan ran on %s", gw))
	return nil, nil, nil
}

// redisRestart: the redis-server restarts empty (no persistence) while a
// session waits for its caller; the gateway running it writes it back, and
// the answer completes it. Tokens lived in Redis: the user signs in again.
func (h *harness) redisRestart(ctx context.Context) {
	tok := h.signIn(ctx, 2)
	sc, closer, id, callID, runner := h.execute(ctx, tok, `return "after restart: " + await callTool("client:prompt", {question: "?"})`)
	defer closer.Close()
	h.kill("redis")
	h.startRedis()
	if !waitFor(ctx, 10*time.Second, func() bool { return h.rdb.Ping(ctx).Err() == nil }) {
		h.fatal("redis restart", errors.New("did not start"))
	}
	code, _, _ := h.do(ctx, tok, http.MethodGet, "/broker/sessions/"+id, nil)
	h.check("Redis restarted: tokens kept only in Redis are gone", code == 401, fmt.Sprint(code))
	tok = h.signIn(ctx, 2)
	var state string
	restored := waitFor(ctx, 30*time.Second, func() bool {
		code, body, _ := h.do(ctx, tok, http.MethodGet, "/broker/sessions/"+id, nil)
		state = fmt.Sprint(code, " ", body)
		return code == 200 && strings.Contains(body, `"status":"running"`)
	})
	h.check("Redis restarted: the running session is written back by its gateway", restored, state)
	code, body, answeredBy := h.do(ctx, tok, http.MethodPost, "/broker/sessions/"+id+"/tool-result", map[string]any{"callId": callID, "result": "Ada"})
	last := lastLine(sc)
	h.check("Redis restarted: the caller-answered session completes", code == 200 && strings.Contains(last, `"result":"after restart: Ada"`),
		fmt.Sprintf("run on %s, answered on %s: %d %s; last event %s", runner, answeredBy, code, body, last))
}
