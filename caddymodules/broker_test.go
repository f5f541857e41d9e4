package caddymodules

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"golang.org/x/crypto/bcrypt"
)

// brokerCaddyfile is a gateway with demo tools: /broker/* open (with a
// request limit keyed by a header), /private/* behind basic_auth, and the
// broker's own api-key authentication.
func brokerCaddyfile(port int, extra string) string {
	hash, _ := bcrypt.GenerateFromPassword([]byte("pw"), bcrypt.MinCost)
	return fmt.Sprintf(`{
	admin off
	persist_config off
	codemode {
		broker {
			demo_tools
			max_sessions 10
			%s
		}
	}
}

http://127.0.0.1:%d {
	handle_path /broker/* {
		codemode_broker {
			rate_limit 3 1m {
				key {http.request.header.X-Client}
			}
		}
	}
	handle /private/* {
		basic_auth {
			alice %s
		}
		codemode_broker {
			prefix /private
		}
	}
}
`, extra, port, hash)
}

func loadCaddyfile(t *testing.T, src string) {
	t.Helper()
	cfg, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(src), nil)
	if err != nil {
		t.Fatalf("adapt: %v", err)
	}
	if err := caddy.Load(cfg, true); err != nil {
		t.Fatalf("caddy.Load: %v", err)
	}
}

// brokerClient opens a connection per request (a config reload closes the
// old server's idle connections, which would fail a reused POST) and resends
// a request the old server dropped unanswered while shutting down.
var brokerClient = reloadClient

type ndjsonEvent struct {
	Type    string          `json:"type"`
	Payload json.RawMessage `json:"payload"`
}

func postExecute(t *testing.T, url, code string, header http.Header) (*http.Response, *bufio.Scanner) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"code": code})
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := brokerClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp, bufio.NewScanner(resp.Body)
}

func nextEvent(t *testing.T, sc *bufio.Scanner) ndjsonEvent {
	t.Helper()
	if !sc.Scan() {
		t.Fatalf("stream ended: %v", sc.Err())
	}
	var e ndjsonEvent
	if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
		t.Fatalf("bad line %q", sc.Text())
	}
	return e
}

func TestBrokerHandlerInCaddy(t *testing.T) {
	caddyMu.Lock()
	defer caddyMu.Unlock()
	port := freePort(t)
	src := brokerCaddyfile(port, "authentication api-key {\n\t\t\t\tkey k-bob bob\n\t\t\t}")
	loadCaddyfile(t, src)
	defer func() { _ = caddy.Stop() }()
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	bob := http.Header{"X-Api-Key": {"k-bob"}}

	// Health is open; the rest needs a key or a Caddy-authenticated user.
	resp, err := brokerClient.Get(base + "/broker/health")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("health: %v %v", resp, err)
	}
	resp.Body.Close()
	resp, _ = postExecute(t, base+"/broker/execute", "return 1", nil)
	if resp.StatusCode != 401 {
		t.Fatalf("execute without key: %d", resp.StatusCode)
	}

	// A session waiting for its caller survives a reload of the same config.
	resp, sc := postExecute(t, base+"/broker/execute", `const r = await callTool("client:prompt", {question: "?"}); const s = await callTool("math:add", {a: r.n, b: 1}); return s.sum`, bob)
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("execute: %d %s", resp.StatusCode, b)
	}
	var sess struct {
		ID     string `json:"id"`
		UserID string `json:"userId"`
	}
	json.Unmarshal(nextEvent(t, sc).Payload, &sess)
	var call struct {
		CallID string `json:"callId"`
	}
	json.Unmarshal(nextEvent(t, sc).Payload, &call)
	if sess.UserID != "bob" || call.CallID == "" {
		t.Fatalf("session %+v call %+v", sess, call)
	}
	loadCaddyfile(t, src) // reload, same broker block

	req, _ := http.NewRequest(http.MethodPost, base+"/broker/sessions/"+sess.ID+"/tool-result",
		strings.NewReader(fmt.Sprintf(`{"callId":%q,"result":{"n":41}}`, call.CallID)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-Key", "k-bob")
	resp2, err := brokerClient.Do(req)
	if err != nil || resp2.StatusCode != 200 {
		t.Fatalf("tool-result after reload: %v %v", resp2, err)
	}
	resp2.Body.Close()
	var last ndjsonEvent
	for sc.Scan() {
		json.Unmarshal(sc.Bytes(), &last)
	}
	if last.Type != "result" || !strings.Contains(string(last.Payload), `"result":42`) {
		t.Fatalf("last event after reload: %s %s", last.Type, last.Payload)
	}

	// Caddy's basic_auth user owns the session; the prefix option routes.
	resp, sc = postExecute(t, base+"/private/execute", `return (await callTool("text:upper", {text: "hi"})).text`, http.Header{"Authorization": {"Basic YWxpY2U6cHc="}})
	if resp.StatusCode != 200 {
		t.Fatalf("private execute: %d", resp.StatusCode)
	}
	json.Unmarshal(nextEvent(t, sc).Payload, &sess)
	if sess.UserID != "alice" {
		t.Errorf("session owner via basic_auth = %q", sess.UserID)
	}
	for sc.Scan() {
		json.Unmarshal(sc.Bytes(), &last)
	}
	if last.Type != "result" || !strings.Contains(string(last.Payload), `"result":"HI"`) {
		t.Errorf("private result: %s", last.Payload)
	}
	// Bob cannot read Alice's session.
	req, _ = http.NewRequest(http.MethodGet, base+"/broker/sessions/"+sess.ID, nil)
	req.Header.Set("X-API-Key", "k-bob")
	if resp, _ := brokerClient.Do(req); resp.StatusCode != 404 {
		t.Errorf("bob reads alice's session: %d", resp.StatusCode)
	}

	// The request limit is keyed by the X-Client placeholder (3 per minute).
	statuses := []int{}
	for i := 0; i < 4; i++ {
		req, _ := http.NewRequest(http.MethodGet, base+"/broker/code/actions", nil)
		req.Header.Set("X-API-Key", "k-bob")
		req.Header.Set("X-Client", "c1")
		resp, err := brokerClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		statuses = append(statuses, resp.StatusCode)
		if resp.StatusCode == 429 && resp.Header.Get("Retry-After") == "" {
			t.Error("429 without Retry-After")
		}
	}
	if fmt.Sprint(statuses) != "[200 200 200 429]" {
		t.Errorf("rate limited statuses = %v", statuses)
	}
}

// TestBrokerReloadChangedBlock replaces the broker: the reload does not wait
// for the old broker's sessions, which are aborted after drain_timeout.
func TestBrokerReloadChangedBlock(t *testing.T) {
	caddyMu.Lock()
	defer caddyMu.Unlock()
	port := freePort(t)
	loadCaddyfile(t, brokerCaddyfile(port, "drain_timeout 200ms"))
	defer func() { _ = caddy.Stop() }()
	base := fmt.Sprintf("http://127.0.0.1:%d", port)

	resp, sc := postExecute(t, base+"/broker/execute", `return await callTool("client:prompt", {question: "?"})`, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("execute: %d", resp.StatusCode)
	}
	nextEvent(t, sc) // session
	nextEvent(t, sc) // tool_call, waiting for us

	t0 := time.Now()
	loadCaddyfile(t, brokerCaddyfile(port, "drain_timeout 200ms\n\t\t\tmax_tool_calls 7"))
	t.Logf("reload took %v", time.Since(t0))

	var last ndjsonEvent
	for sc.Scan() {
		json.Unmarshal(sc.Bytes(), &last)
	}
	t.Logf("old stream ended after %v", time.Since(t0))
	if last.Type != "error" {
		t.Errorf("old session's last event: %s %s", last.Type, last.Payload)
	}
	// The new broker serves.
	resp, sc = postExecute(t, base+"/broker/execute", `return 5`, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("execute on the new broker: %d", resp.StatusCode)
	}
	for sc.Scan() {
		json.Unmarshal(sc.Bytes(), &last)
	}
	if last.Type != "result" || !strings.Contains(string(last.Payload), `"result":5`) {
		t.Errorf("new broker: %s %s", last.Type, last.Payload)
	}
}

// TestBrokerUsesThrottle checks the wiring of the throttle block's guard
// into the broker: its default rate limit applies to every tool call.
func TestBrokerUsesThrottle(t *testing.T) {
	freezeGuardClock(t) // no window boundary between the three calls
	caddyMu.Lock()
	defer caddyMu.Unlock()
	port := freePort(t)
	src := fmt.Sprintf(`{
	admin off
	persist_config off
	codemode {
		throttle {
			default_rate_limit 2 1m session
		}
		sandbox {
			adapter inprocess
			trusted_callers
		}
		broker {
			demo_tools
		}
	}
}

http://127.0.0.1:%d {
	codemode_broker
}
`, port)
	loadCaddyfile(t, src)
	defer func() { _ = caddy.Stop() }()
	resp, sc := postExecute(t, fmt.Sprintf("http://127.0.0.1:%d/execute", port), `const out = [];
for (let i = 0; i < 3; i++) { const r = await callTool("math:add", {a: i}, {throwOnError: false}); out.push(r.success ? "ok" : r.error.code); }
return out;`, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("execute: %d", resp.StatusCode)
	}
	var last ndjsonEvent
	for sc.Scan() {
		json.Unmarshal(sc.Bytes(), &last)
	}
	if last.Type != "result" || !strings.Contains(string(last.Payload), `"result":["ok","ok","RATE_LIMIT"]`) {
		t.Errorf("last event %s %s", last.Type, last.Payload)
	}
}

// TestBrokerNegativeValuesRefused: a negative duration or limit in the
// broker block (JSON or Caddyfile) fails at load and names its key; it used
// to mean the default silently for tool_timeout, max_execution_timeout and
// the openapi sources' timeout and max_response_size.
func TestBrokerNegativeValuesRefused(t *testing.T) {
	for _, tc := range []struct {
		cfg  BrokerConfig
		want string
	}{
		{BrokerConfig{ToolTimeout: -1}, "tool_timeout must not be negative"},
		{BrokerConfig{MaxExecutionTimeout: -1}, "max_execution_timeout must not be negative"},
		{BrokerConfig{SessionTimeout: -1}, "session_timeout must not be negative"},
		{BrokerConfig{MaxSessionsPerPrincipal: -1}, "max_sessions_per_principal must not be negative"},
		{BrokerConfig{MaxStreamBytes: -1}, "max_stream_bytes must not be negative"},
		{BrokerConfig{OpenAPI: []OpenAPISourceConfig{{Name: "x", SpecURL: "http://127.0.0.1:1/o.json", Timeout: -1}}}, `openapi source "x": timeout and max_response_size must not be negative`},
		{BrokerConfig{OpenAPI: []OpenAPISourceConfig{{Name: "x", SpecURL: "http://127.0.0.1:1/o.json", MaxResponseSize: -1}}}, `openapi source "x": timeout and max_response_size`},
		{BrokerConfig{PollInterval: -1, MaxAuthFailures: -1}, ""}, // negative means off for these two
	} {
		a := &App{Broker: &tc.cfg}
		err := a.validateBroker()
		if tc.want == "" {
			if err != nil {
				t.Errorf("%+v: %v", tc.cfg, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want %q", tc.cfg, err, tc.want)
		}
	}
}

// TestBrokerOwnerTimeoutBound: an owner_timeout under 3 × storage_timeout
// (defaults applied) fails at load, in JSON and in a Caddyfile, naming the
// bound; a renewal every owner_timeout/3 may wait storage_timeout, and a
// shorter interval would let a live gateway's key expire.
func TestBrokerOwnerTimeoutBound(t *testing.T) {
	s := caddy.Duration(time.Second)
	for _, tc := range []struct {
		cfg  BrokerConfig
		want string
	}{
		{BrokerConfig{OwnerTimeout: 5 * s}, "owner_timeout (5s) must be at least 3 × storage_timeout (6s)"}, // storage_timeout's default 2s
		{BrokerConfig{OwnerTimeout: 2 * s, StorageTimeout: s}, "owner_timeout (2s) must be at least 3 × storage_timeout (3s)"},
		{BrokerConfig{StorageTimeout: 6 * s}, "owner_timeout (15s) must be at least 3 × storage_timeout (18s)"}, // owner_timeout's default 15s
		{BrokerConfig{OwnerTimeout: 3 * s, StorageTimeout: s}, ""},
		{BrokerConfig{OwnerTimeout: 6 * s}, ""},
		{BrokerConfig{}, ""},
	} {
		err := (&App{Broker: &tc.cfg}).validateBroker()
		if tc.want == "" {
			if err != nil {
				t.Errorf("%+v: %v", tc.cfg, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want %q", tc.cfg, err, tc.want)
		}
	}
	cfg, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(`{
	admin off
	persist_config off
	codemode {
		broker {
			owner_timeout 1s
			storage_timeout 500ms
		}
	}
}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := loadErr(t, cfg); err == nil || !strings.Contains(err.Error(), "owner_timeout (1s) must be at least 3 × storage_timeout (1.5s)") {
		t.Fatalf("Caddyfile: %v", err)
	}
}

// TestBrokerKeyUserInAccessLog: a request the broker authenticated with a
// key that names a user shows that user in Caddy's access log (user_id),
// as a request authenticated by codemode_auth or basic_auth does. Caddy
// logs X-API-Key (it redacts Authorization only): the log filter
// docs/observability.md gives keeps the key out.
func TestBrokerKeyUserInAccessLog(t *testing.T) {
	caddyMu.Lock()
	defer caddyMu.Unlock()
	port := freePort(t)
	logFile := filepath.Join(t.TempDir(), "access.log")
	loadCaddyfile(t, fmt.Sprintf(`{
	admin off
	persist_config off
	codemode {
		broker {
			authentication api-key {
				key k-carol-0123456789 carol
			}
		}
	}
}

http://127.0.0.1:%d {
	log {
		output file %s
		format filter {
			request>headers>X-Api-Key replace REDACTED
		}
	}
	handle_path /broker/* {
		codemode_broker
	}
}
`, port, logFile))
	defer func() { _ = caddy.Stop() }()
	resp, sc := postExecute(t, fmt.Sprintf("http://127.0.0.1:%d/broker/execute", port), "return 1",
		http.Header{"X-Api-Key": {"k-carol-0123456789"}})
	if resp.StatusCode != 200 {
		t.Fatalf("execute: %d", resp.StatusCode)
	}
	for sc.Scan() {
	}
	resp.Body.Close()
	var line string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		b, _ := os.ReadFile(logFile)
		if strings.Contains(string(b), `"/broker/execute"`) {
			line = string(b)
			break
		}
	}
	if line == "" {
		t.Fatal("no access log line for /broker/execute")
	}
	if !strings.Contains(line, `"user_id":"carol"`) {
		t.Errorf("access log without the key's user: %s", line)
	}
	if strings.Contains(line, "k-carol-0123456789") {
		t.Errorf("access log shows the key: %s", line)
	}
}

// TestBrokerPrefixLeavesTheSite: `codemode_broker { prefix /broker }` put
// in an existing site (it is ordered before respond, reverse_proxy and
// file_server) serves only its prefix; every other request goes on to the
// site's own handlers. It used to answer them all with its 404.
func TestBrokerPrefixLeavesTheSite(t *testing.T) {
	caddyMu.Lock()
	defer caddyMu.Unlock()
	port := freePort(t)
	loadCaddyfile(t, fmt.Sprintf(`{
	admin off
	persist_config off
	codemode {
		broker {
			demo_tools
		}
	}
}

http://127.0.0.1:%d {
	codemode_broker {
		prefix /broker
	}
	respond "the existing site" 200
}
`, port))
	defer func() { _ = caddy.Stop() }()
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	for _, tc := range []struct {
		path   string
		status int
		body   string
	}{
		{"/", 200, "the existing site"},
		{"/index.html", 200, "the existing site"},
		{"/brokerage", 200, "the existing site"},
		{"/broker/health", 200, `"status":"ok"`},
		{"/broker/no-such-endpoint", 404, "NOT_FOUND"},
	} {
		resp, err := brokerClient.Get(base + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || !strings.Contains(string(b), tc.body) {
			t.Errorf("GET %s: %d %q, want %d with %q", tc.path, resp.StatusCode, b, tc.status, tc.body)
		}
	}
}

// TestBrokerSpecFileMissingFailsLoad: an openapi source whose document is a
// local file that cannot be read fails the config load, naming the source,
// the path and, for a relative path, the working directory it was read
// from. Before, the load succeeded and the source's actions were missing
// with only a warning in the log (a typo in the path, or a stdio server an
// MCP client started in another directory).
func TestBrokerSpecFileMissingFailsLoad(t *testing.T) {
	dir := t.TempDir()
	spec := filepath.Join(dir, "todo.json")
	if err := os.WriteFile(spec, []byte(`{"openapi":"3.0.3","info":{"title":"t","version":"1"},"paths":{}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	wd, _ := os.Getwd()
	for _, tc := range []struct {
		spec string
		want string // "" means the load succeeds
	}{
		{spec, ""},
		{"file://" + filepath.ToSlash(spec), ""},
		{filepath.Join(dir, "todos.json"), `openapi source "todo": spec file ` + filepath.Join(dir, "todos.json") + `: no such file or directory`},
		{"file://" + filepath.ToSlash(filepath.Join(dir, "todos.json")), "no such file or directory"},
		{"todos-walk15.yaml", `openapi source "todo": spec file todos-walk15.yaml: no such file or directory (a relative path is read from the working directory, ` + wd + ")"},
		{dir, "is a directory"},
		{"http://127.0.0.1:1/openapi.json", ""}, // fetched after the load
	} {
		src := fmt.Sprintf(`{
	admin off
	persist_config off
	codemode {
		sandbox {
			engine inprocess
			trusted_callers
		}
		broker {
			openapi todo %s
			poll_interval -1s
		}
	}
}
http://127.0.0.1:0 {
	codemode_broker
}
`, tc.spec)
		cfg, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(src), nil)
		if err != nil {
			t.Fatalf("%s: adapt: %v", tc.spec, err)
		}
		var c caddy.Config
		if err := caddy.StrictUnmarshalJSON(cfg, &c); err != nil {
			t.Fatal(err)
		}
		caddyMu.Lock()
		err = caddy.Validate(&c)
		caddyMu.Unlock()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.spec, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: error %v, want %q", tc.spec, err, tc.want)
		}
	}
}
