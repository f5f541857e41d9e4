package caddymodules

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	jose "github.com/go-jose/go-jose/v4"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/redis/go-redis/v9"
	"golang.org/x/crypto/bcrypt"

	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"
	"github.com/codemode-gateway/caddy-codemode/guard/redistest"
)

// reloadGateway is a Caddyfile using every block of the codemode app. Two
// variants differ in every block, so a reload from one to the other
// replaces every component. redisAddr, when set, puts the app's storage in
// that Redis (with a pool size that differs between the variants).
func reloadGateway(port, variant int, redisAddr string) string {
	hash, _ := bcrypt.GenerateFromPassword([]byte("pw"), bcrypt.MinCost)
	// A signing key of our own: development mode would generate an RSA
	// key for every new authorization server, a second each under -race.
	if os.Getenv("CODEMODE_TEST_SIGN_KEY") == "" {
		_ = os.Setenv("CODEMODE_TEST_SIGN_KEY", testSigningKey())
	}
	storage := ""
	if redisAddr != "" {
		// A command's timeout of 10 s is a backstop: these tests are not
		// about a slow Redis, and the default 500 ms ran out (i/o timeout)
		// on a loaded machine under -race.
		storage = fmt.Sprintf("storage redis %s {\n\t\t\tpool_size %d\n\t\t\ttimeout 10s\n\t\t}", redisAddr, 4+variant)
	}
	return fmt.Sprintf(`{
	admin off
	persist_config off
	codemode {
		%[5]s
		throttle {
			default_rate_limit %[2]d 1m session
		}
		sandbox {
			max_steps %[3]d
			pool {
				min 1
				max 2
			}
		}
		broker {
			demo_tools
			max_tool_calls %[4]d
			drain_timeout 1m
		}
		meta {
			rate_limit meta:search %[2]d 1m
		}
		auth {
			development
			issuer http://127.0.0.1:%[1]d
			user alice %[6]s
			local {
				sign_key {env.CODEMODE_TEST_SIGN_KEY}
			}
			refresh {
				access_token_ttl %[7]dm
			}
		}
	}
}

http://127.0.0.1:%[1]d {
	bind 127.0.0.1
	handle_path /broker/* {
		codemode_broker
	}
	codemode_mcp /mcp
	codemode_oauth
}
`, port, 1000+variant, 1000000+variant, 50+variant, storage, hash, 10+variant)
}

// testSigningKey is a P-256 private key as a JWK.
func testSigningKey() string {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	raw, _ := json.Marshal(jose.JSONWebKey{Key: k, KeyID: "test", Algorithm: "ES256", Use: "sig"})
	return string(raw)
}

// loadVariants adapts the two variants of a config that config(0) and
// config(1) write as JSON, and loads the first; the caller stops Caddy.
func loadVariants(t *testing.T, config func(v int) string) [2][]byte {
	t.Helper()
	var cfgs [2][]byte
	for v := range cfgs {
		raw, err := json.Marshal(adaptJSON(t, config(v)))
		if err != nil {
			t.Fatal(err)
		}
		cfgs[v] = raw
	}
	if err := caddy.Load(cfgs[0], true); err != nil {
		t.Fatal(err)
	}
	return cfgs
}

func adaptJSON(t *testing.T, src string) map[string]any {
	t.Helper()
	out, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(src), nil)
	if err != nil {
		t.Fatalf("adapt: %v", err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(out, &cfg); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// setPath sets the value at a dotted path of a JSON object, creating
// objects on the way.
func setPath(m map[string]any, path string, v any) {
	parts := strings.Split(path, ".")
	for _, p := range parts[:len(parts)-1] {
		next, ok := m[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[p] = next
		}
		m = next
	}
	m[parts[len(parts)-1]] = v
}

func loadJSON(cfg map[string]any) error {
	raw, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	return caddy.Load(raw, true)
}

// componentKeys lists the components alive in the pool.
func componentKeys() []string {
	var keys []string
	components.Range(func(k, _ any) bool {
		keys = append(keys, k.(string))
		return true
	})
	slices.Sort(keys)
	return keys
}

// childProcesses counts this process's live children (sandbox workers).
func childProcesses(t *testing.T) int {
	t.Helper()
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil || len(stats) == 0 {
		t.Fatalf("reading /proc: %v", err)
	}
	me := strconv.Itoa(os.Getpid())
	n := 0
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // exited meanwhile
		}
		// pid (comm) state ppid ...: comm may hold spaces, so cut at ')'.
		s := string(b)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) > 1 && fields[1] == me && fields[0] != "Z" {
			n++
		}
	}
	return n
}

// eventually polls cond for up to 30 s: the machine may be loaded, and a
// leak never passes however long we wait.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s", what, state)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// pendingSession is an /execute stream whose script waits for the answer
// to a caller-answered tool call (client:prompt).
type pendingSession struct {
	id, callID string
	sc         *bufio.Scanner
}

func startPendingSession(t *testing.T, base string) *pendingSession {
	t.Helper()
	resp, sc := postExecute(t, base+"/broker/execute", `return "answer: " + await callTool("client:prompt", {question: "?"})`, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("execute: %d", resp.StatusCode)
	}
	var sess struct {
		ID string `json:"id"`
	}
	ev := nextEvent(t, sc)
	if ev.Type != "session" || json.Unmarshal(ev.Payload, &sess) != nil {
		t.Fatalf("first event %s %s", ev.Type, ev.Payload)
	}
	var call struct {
		CallID string `json:"callId"`
	}
	ev = nextEvent(t, sc)
	if ev.Type != "tool_call" || json.Unmarshal(ev.Payload, &call) != nil {
		t.Fatalf("second event %s %s", ev.Type, ev.Payload)
	}
	return &pendingSession{id: sess.ID, callID: call.CallID, sc: sc}
}

// answer posts the tool result to base (the current config's handler) and
// checks that the script finishes with it.
func (p *pendingSession) answer(t *testing.T, base, value string) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"callId": p.callID, "result": value})
	resp, err := reloadClient.Post(base+"/broker/sessions/"+p.id+"/tool-result", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("tool-result: %d", resp.StatusCode)
	}
	var last ndjsonEvent
	for p.sc.Scan() {
		_ = json.Unmarshal(p.sc.Bytes(), &last)
	}
	if last.Type != "result" || !strings.Contains(string(last.Payload), `"result":"answer: `+value+`"`) {
		t.Fatalf("session after the answer: %s %s", last.Type, last.Payload)
	}
}

// checkServes runs a script with a tool call through the broker and a
// meta-tool over MCP: the engine, guard, broker and meta-tools of the
// running config all answer.
func checkServes(t *testing.T, base string) {
	t.Helper()
	resp, sc := postExecute(t, base+"/broker/execute", `return (await callTool("math:add", {a: 2, b: 3})).sum`, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("execute: %d", resp.StatusCode)
	}
	var last ndjsonEvent
	for sc.Scan() {
		_ = json.Unmarshal(sc.Bytes(), &last)
	}
	if last.Type != "result" || !strings.Contains(string(last.Payload), `"result":5`) {
		t.Fatalf("execute: last event %s %s", last.Type, last.Payload)
	}
	cs := connectMCP(t, &mcp.StreamableClientTransport{Endpoint: base + "/mcp", HTTPClient: reloadClient})
	defer cs.Close()
	res := callMeta(t, cs, "meta:execute", map[string]any{"script": `return (await callTool("math:add", {a: 1, b: 1})).sum`})
	if res.IsError || !strings.Contains(resultText(res), `"result":2`) {
		t.Fatalf("meta:execute: %s", resultText(res))
	}
	resp2, err := reloadClient.Get(base + "/.well-known/oauth-authorization-server")
	if err != nil {
		t.Fatal(err)
	}
	resp2.Body.Close()
	if resp2.StatusCode != http.StatusOK {
		t.Fatalf("authorization server metadata: %d", resp2.StatusCode)
	}
}

// TestFailedReloadLeavesRunningConfig loads config A, starts a session that
// waits for a caller-answered tool, then loads config B, which changes
// every block (so it builds a new component for each) and fails at one
// provision step. Whatever the step, A keeps serving exactly as before: its
// engine, guard, broker, meta-tools and authorization server answer, the
// session completes, and nothing B built is left alive.
func TestFailedReloadLeavesRunningConfig(t *testing.T) {
	caddyMu.Lock()
	defer caddyMu.Unlock()
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	cfgA := adaptJSON(t, reloadGateway(port, 0, ""))
	if err := loadJSON(cfgA); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = caddy.Stop() }()
	checkServes(t, base)
	keysA := componentKeys()
	workersA := childProcesses(t)

	for _, step := range []struct {
		name   string
		inject func(map[string]any)
	}{
		{"storage", func(c map[string]any) {
			setPath(c, "apps.codemode.storage", map[string]any{"module": "redis", "failure_mode": "weird"})
		}},
		{"throttle", func(c map[string]any) {
			setPath(c, "apps.codemode.throttle.default_rate_limit.max_requests", -1)
		}},
		{"sandbox", func(c map[string]any) { setPath(c, "apps.codemode.sandbox.preset", "reckless") }},
		{"broker", func(c map[string]any) {
			// Fails inside the broker's construction, after it took its
			// engine and guard.
			setPath(c, "apps.codemode.broker.openapi", []any{map[string]any{"name": "9 not a name", "spec_url": "file:///nonexistent"}})
		}},
		{"meta", func(c map[string]any) { setPath(c, "apps.codemode.meta.naming", "weird") }},
		{"auth", func(c map[string]any) { setPath(c, "apps.codemode.auth.mode", "weird") }},
		{"handler after the app", func(c map[string]any) {
			srv := c["apps"].(map[string]any)["http"].(map[string]any)["servers"].(map[string]any)["srv0"].(map[string]any)
			srv["routes"] = append(srv["routes"].([]any), map[string]any{"handle": []any{map[string]any{"handler": "codemode_broker", "prefix": "no-slash"}}})
		}},
	} {
		t.Run(step.name, func(t *testing.T) {
			pending := startPendingSession(t, base)
			cfgB := adaptJSON(t, reloadGateway(port, 1, ""))
			step.inject(cfgB)
			if err := loadJSON(cfgB); err == nil {
				t.Fatal("config B loaded; the injected failure did not fail it")
			}
			checkServes(t, base)
			// A broker B built is destroyed in the background (it drains
			// first), and it releases B's engine and guard after that.
			eventually(t, "components after the failed load", func() (bool, string) {
				got := componentKeys()
				return slices.Equal(got, keysA), fmt.Sprintf("%v, want A's %v", got, keysA)
			})
			pending.answer(t, base, step.name)
			eventually(t, "worker processes of B", func() (bool, string) {
				n := childProcesses(t)
				return n <= workersA, fmt.Sprintf("%d children, %d before", n, workersA)
			})
		})
	}
}

// TestReloadKeepsSessionsAnswerable: a reload that changes any one block
// leaves a session waiting for a caller-answered tool answerable through
// the new config's handler, including when the change replaced the broker
// (the old one drains the session; the session directory routes the answer
// to it).
func TestReloadKeepsSessionsAnswerable(t *testing.T) {
	caddyMu.Lock()
	defer caddyMu.Unlock()
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	cfg := adaptJSON(t, reloadGateway(port, 0, ""))
	if err := loadJSON(cfg); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = caddy.Stop() }()
	changed := adaptJSON(t, reloadGateway(port, 1, ""))["apps"].(map[string]any)["codemode"].(map[string]any)
	rc, prefix := redistest.Client(t)
	changed["storage"] = map[string]any{"module": "redis", "address": rc.Options().Addr, "key_prefix": prefix,
		"timeout": "10s"} // a backstop, as reloadGateway's
	for _, block := range []string{"storage", "throttle", "sandbox", "broker", "meta", "auth"} {
		t.Run(block, func(t *testing.T) {
			pending := startPendingSession(t, base)
			before := componentKeys()
			app := cfg["apps"].(map[string]any)["codemode"].(map[string]any)
			app[block] = changed[block]
			if err := loadJSON(cfg); err != nil {
				t.Fatal(err)
			}
			if slices.Equal(componentKeys(), before) && block != "meta" {
				t.Errorf("changing %s built no new component", block)
			}
			pending.answer(t, base, block)
			checkServes(t, base)
		})
	}
}

// TestReloadLeaks alternates two configs that differ in every block 100
// times (each reload replaces every component, the Redis client of the
// app's storage included) and checks that goroutines, worker processes,
// Redis connections, components, index listeners and listed sessions come
// back to what one config holds.
func TestReloadLeaks(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("counts worker processes through /proc")
	}
	caddyMu.Lock()
	defer caddyMu.Unlock()
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	rs := redistest.Start(t) // private: other packages' tests share CODEMODE_TEST_REDIS_ADDR
	rc := redis.NewClient(&redis.Options{Addr: rs.Addr, PoolSize: 1})
	defer rc.Close()
	// redisClients counts the connections of clients no running component
	// owns (the storage names its connections after its component key): a
	// client of a replaced config that was never closed shows here.
	redisClients := func() int {
		list, err := rc.ClientList(context.Background()).Result()
		if err != nil {
			t.Fatal(err)
		}
		live := map[string]bool{}
		components.Range(func(_, v any) bool {
			if c, ok := v.(*component).value.(*redis.Client); ok {
				live[c.Options().ClientName] = true
			}
			return true
		})
		orphans := 0
		for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
			for _, f := range strings.Fields(line) {
				if name, ok := strings.CutPrefix(f, "name="); ok && strings.HasPrefix(name, "codemode-") && !live[name] {
					orphans++
				}
			}
		}
		return orphans
	}
	cfgs := loadVariants(t, func(v int) string { return reloadGateway(port, v, rs.Addr) })
	defer func() { _ = caddy.Stop() }()
	checkServes(t, base)
	reloadClient.CloseIdleConnections()

	// redis counts connections of clients no component owns any more.
	type counts struct{ goroutines, workers, redis, components, listeners, sessions int }
	measure := func() counts {
		c := counts{goroutines: runtime.NumGoroutine(), workers: childProcesses(t), redis: redisClients(),
			components: len(componentKeys()), sessions: sessionDirectory.Len()}
		app, err := caddy.ActiveContext().App("codemode")
		if err != nil {
			t.Fatal(err)
		}
		b, err := app.(*App).SharedBroker()
		if err != nil {
			t.Fatal(err)
		}
		c.listeners = b.ToolsChangeListeners()
		return c
	}
	// Let the first config settle (its first worker started) before the
	// baseline.
	time.Sleep(200 * time.Millisecond)
	base0 := measure()
	t.Logf("baseline: %+v", base0)

	const reloads = 100
	t0 := time.Now()
	stalled := 0
	for i := 1; i <= reloads; i++ {
		err := caddy.Load(cfgs[i%2], true)
		// A worker whose start a stalled machine held past the startup
		// timeout (10 s) fails the reload, and the running config stays:
		// load it again, a few times at most. The failed reload must
		// leak nothing either: the counts below include it.
		if err != nil && strings.Contains(err.Error(), sandbox.CodeWorkerStartupFailed) && stalled < 3 {
			stalled++
			t.Logf("reload %d failed, loaded again: %v", i, err)
			i--
			continue
		}
		if err != nil {
			t.Fatalf("reload %d: %v", i, err)
		}
	}
	t.Logf("%d reloads in %v (%d loaded again after a stalled worker start)", reloads, time.Since(t0), stalled)
	// An even number of reloads ends on config A again.
	checkServes(t, base)
	reloadClient.CloseIdleConnections()
	eventually(t, fmt.Sprintf("counts after %d reloads", reloads), func() (bool, string) {
		c := measure()
		// Workers: at most config A's pool (max 2) and the test's
		// redis-server; the baseline's count, taken 200 ms after the load,
		// may come before a worker start on a loaded machine.
		ok := c.workers <= 2+1 && c.redis == 0 && c.components == base0.components && c.listeners == 1 &&
			c.sessions == 0 && c.goroutines <= base0.goroutines+10
		return ok, fmt.Sprintf("%+v, baseline %+v", c, base0)
	})
	t.Logf("after %d reloads: %+v", reloads, measure())
}
