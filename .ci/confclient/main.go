// Command confclient is the client the MCP conformance suite's client
// scenarios judge: a real gateway. It starts the Caddy binary it is given
// (built from the checkout) on gateway.Caddyfile, whose one upstream MCP
// server `conf` is the scenario's test server, and then works through the
// gateway's own /mcp as a user's MCP client would: tools/list, meta:search
// for the upstream's tools, meta:describe, and a call of each tool by
// meta:invoke or by a meta:execute script's callTool("conf:<tool>"). What
// the test server sees is the gateway's upstream client (metatools.Upstream,
// the go-sdk client) doing what a deployed gateway does. The suite runs it as
//
//	conformance client --command "confclient -caddy PATH [-via execute] [-oauth]" --scenario NAME
//
// appending the server's URL and naming the scenario in
// MCP_CONFORMANCE_SCENARIO; a scenario's calls, when it gives them, come in
// MCP_CONFORMANCE_CONTEXT ({"toolCalls":[{"name":...,"arguments":{...}}]}),
// else each tool is called with arguments made from its input schema. It
// exits non-zero when the gateway does not start, a meta-tool fails, or a
// call fails otherwise than with the tool's own error (which some scenarios
// ask for). An upstream the gateway could not connect to leaves its index
// empty; the scenario's own checks then fail. With -oauth (the auth/
// scenarios) the gateway is gateway-oauth.Caddyfile, where conf takes each
// user's own credential: the driver first connects conf on the gateway's
// connections page as a user would in a browser (oauth.go). With -answer
// (the scenarios whose test server asks its client a question during a
// call) the driver speaks 2025-11-25 to the gateway (or the revision of
// -answer-revision) and declares elicitation: the gateway passes the
// upstream's question on to it (over its session; at 2026-07-28 as its own
// input_required result, which its go-sdk answers by retrying), and it
// accepts with the form's defaults.
package main

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codemode-gateway/caddy-codemode/internal/nettest"
)

// gatewayCaddyfile is the gateway the scenarios judge; CONF_URL and
// CONF_PORT come from the environment of the Caddy process.
//
//go:embed gateway.Caddyfile
var gatewayCaddyfile []byte

// oauthCaddyfile is the gateway of the auth/ scenarios: conf takes each
// user's own credential (credential user { oauth { ... } }). Its
// client_id and client_secret lines are commented out ("#client",
// "#secret") unless the scenario pre-registers a client; without one the
// gateway registers at the scenario's authorization server.
//
//go:embed gateway-oauth.Caddyfile
var oauthCaddyfile []byte

func main() {
	caddyBin := flag.String("caddy", "", "the Caddy binary to run (built from the checkout: go build ./cmd/caddy)")
	via := flag.String("via", "invoke", "how the upstream's tools are called: invoke (meta:invoke, one call each) or execute (one meta:execute script calling each)")
	answer := flag.Bool("answer", false, "the driver is a user's client of revision 2025-11-25 (or -answer-revision) that declares elicitation and accepts every question the gateway passes on from the upstream, with the form's defaults (its go-sdk fills them in)")
	answerRevision := flag.String("answer-revision", "2025-11-25", "the MCP revision the driver speaks with -answer: 2025-11-25 (asked over its session) or 2026-07-28 (asked in its input_required results)")
	withOAuth := flag.Bool("oauth", false, "the upstream needs OAuth: sign in as a user on the gateway's connections page, connect conf there, then call /mcp with the user's token of the gateway")
	flag.Parse()
	if *caddyBin == "" || flag.NArg() != 1 || *via != "invoke" && *via != "execute" {
		fmt.Fprintln(os.Stderr, "usage: confclient -caddy PATH [-via invoke|execute] [-oauth] [-answer [-answer-revision R]] <server url> (run by conformance client --command)")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	revision := ""
	if *answer {
		revision = *answerRevision
	}
	if err := run(ctx, *caddyBin, *via, *withOAuth, revision, flag.Arg(0)); err != nil {
		fmt.Fprintln(os.Stderr, "confclient:", err)
		stop()
		os.Exit(1)
	}
}

// run drives the gateway; answerRevision, when set, is the revision of a
// driver that answers the upstream's questions (-answer).
func run(ctx context.Context, caddyBin, via string, withOAuth bool, answerRevision, upstreamURL string) error {
	ctx, cancel := context.WithTimeout(ctx, 80*time.Second)
	defer cancel()
	config, env := gatewayCaddyfile, []string{"CONF_URL=" + upstreamURL}
	if withOAuth {
		var err error
		if config, env, err = oauthGateway(upstreamURL); err != nil {
			return err
		}
	}
	gw, err := startGateway(ctx, caddyBin, config, env)
	if err != nil {
		return err
	}
	defer gw.stop()

	if !withOAuth {
		// Caddy serves once the upstream connected or connect_timeout (10 s)
		// passed; on a loaded machine the second comes first.
		select {
		case <-gw.connected:
		case <-ctx.Done():
			return errors.New("the gateway did not connect to the upstream (its log is on stderr)")
		}
	}
	transport := http.DefaultTransport
	if withOAuth {
		if err := connectUpstream(ctx, gw.url); err != nil {
			return err
		}
		token, err := agentToken(ctx, gw.url)
		if err != nil {
			return err
		}
		transport = bearer{token: token}
	}
	var copts *mcp.ClientOptions
	var sopts *mcp.ClientSessionOptions
	if answerRevision != "" {
		// The gateway passes an upstream's question on to a caller of an
		// older revision over its session, and to one of 2026-07-28 as its
		// own input_required result (docs/metatools.md, "An upstream's
		// questions").
		copts = &mcp.ClientOptions{ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			fmt.Printf("the gateway passed on the question %q: accepting it with the form's defaults\n", req.Params.Message)
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{}}, nil
		}}
		sopts = &mcp.ClientSessionOptions{ProtocolVersion: answerRevision}
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "ci-confclient", Version: "1.0.0"}, copts)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: gw.url + "/mcp", HTTPClient: &http.Client{Transport: transport}}, sopts)
	if err != nil {
		return fmt.Errorf("connecting to the gateway's /mcp: %w", err)
	}
	defer cs.Close()
	if v := cs.InitializeResult().ProtocolVersion; answerRevision != "" && v != answerRevision {
		return fmt.Errorf("the driver speaks %s with the gateway, not %s", v, answerRevision)
	}
	lt, err := cs.ListTools(ctx, nil)
	if err != nil {
		return fmt.Errorf("tools/list of the gateway: %w", err)
	}
	var listed []string
	for _, t := range lt.Tools {
		listed = append(listed, t.Name)
	}
	fmt.Printf("gateway %s, tools/list: %s\n", cs.InitializeResult().ProtocolVersion, strings.Join(listed, " "))
	for _, want := range []string{"meta:search", "meta:describe", "meta:invoke", "meta:execute"} {
		if !contains(listed, want) {
			return fmt.Errorf("the gateway's tools/list lacks %s", want)
		}
	}

	tools, err := upstreamTools(ctx, cs)
	if err != nil {
		return err
	}
	// What a user does when the upstream refused the connection just made
	// (its server moved: auth/authorization-server-migration): the page
	// shows conf not connected, and the user connects it again, once.
	reconnects := 1
	if withOAuth && len(tools) == 0 {
		if ok, err := stillConnected(ctx, gw.url); err != nil {
			return err
		} else if !ok {
			fmt.Println("conf is no longer connected on the page: connecting it again")
			reconnects--
			if err := connectUpstream(ctx, gw.url); err != nil {
				return err
			}
			if tools, err = upstreamTools(ctx, cs); err != nil {
				return err
			}
		}
	}
	names := make([]string, 0, len(tools))
	for n := range tools {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Printf("the upstream's tools in the gateway's index: %s\n", strings.Join(names, " "))

	calls, err := contextCalls()
	if err != nil {
		return err
	}
	if calls == nil {
		for _, n := range names {
			calls = append(calls, call{Name: strings.TrimPrefix(n, "conf:"), Arguments: argumentsFor(tools[n])})
		}
		echoSchema(tools, calls)
	}
	if via == "execute" {
		if calls == nil {
			calls = []call{} // the script runs with none
		}
		return callByScript(ctx, cs, calls)
	}
	for _, c := range calls {
		input := c.Arguments
		if len(input) == 0 || string(input) == "null" {
			input = json.RawMessage(`{}`)
		}
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "meta:invoke", Arguments: map[string]any{"tool": "conf:" + c.Name, "input": input}})
		if err != nil {
			return fmt.Errorf("meta:invoke of conf:%s: %w", c.Name, err)
		}
		text := resultText(res)
		if res.IsError {
			// The tool's own error answer passes; the gateway's (the
			// upstream unreachable, a timeout, a refused input) does not.
			var e struct {
				Error struct {
					Code string `json:"code"`
				} `json:"error"`
			}
			_ = json.Unmarshal(structured(res), &e)
			// CREDENTIAL_REQUIRED (the upstream asked for more scopes:
			// auth/scope-step-up) is what a user answers by connecting
			// again, once, before the call is made again.
			if e.Error.Code == "CREDENTIAL_REQUIRED" && withOAuth && reconnects > 0 {
				fmt.Printf("%s: %s: connecting conf again\n", c.Name, text)
				reconnects--
				if err := connectUpstream(ctx, gw.url); err != nil {
					return err
				}
				res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "meta:invoke", Arguments: map[string]any{"tool": "conf:" + c.Name, "input": input}})
				if err != nil {
					return fmt.Errorf("meta:invoke of conf:%s: %w", c.Name, err)
				}
				text, e.Error.Code = resultText(res), ""
				if !res.IsError {
					fmt.Printf("%s: %s\n", c.Name, text)
					continue
				}
				_ = json.Unmarshal(structured(res), &e)
			}
			if e.Error.Code != "TOOL_EXECUTION_ERROR" {
				return fmt.Errorf("meta:invoke of conf:%s answered the gateway's error %q: %s", c.Name, e.Error.Code, text)
			}
			fmt.Printf("%s: the tool's error: %s\n", c.Name, text)
			continue
		}
		fmt.Printf("%s: %s\n", c.Name, text)
	}
	return nil
}

// upstreamTools finds the upstream's tools as a model would, with meta:search
// (every tool's name carries its app, conf), and reads each one's input schema
// with meta:describe detail full. The upstream's first connection ends before
// Caddy's start returns, so an empty index means it failed.
func upstreamTools(ctx context.Context, cs *mcp.ClientSession) (map[string]json.RawMessage, error) {
	var found struct {
		Tools []struct {
			Name string `json:"name"`
		} `json:"tools"`
		TotalAvailableTools int `json:"totalAvailableTools"`
	}
	// The connection is logged before its tool list reaches the index: an
	// empty index is asked again for 2 s (some scenarios' servers have no
	// tool).
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "meta:search", Arguments: map[string]any{"queries": []string{"conf"}, "appIds": []string{"conf"}, "topK": 100}})
		if err != nil || res.IsError {
			return nil, fmt.Errorf("meta:search: %v %s", err, resultText(res))
		}
		if err := json.Unmarshal(structured(res), &found); err != nil {
			return nil, fmt.Errorf("meta:search's answer: %w", err)
		}
		if found.TotalAvailableTools > 0 || time.Now().After(deadline) {
			break
		}
	}
	tools := map[string]json.RawMessage{}
	if len(found.Tools) == 0 {
		if found.TotalAvailableTools == 0 {
			fmt.Println("the gateway's index is empty: the upstream lists no tool")
		}
		return tools, nil
	}
	var names []string
	for _, t := range found.Tools {
		names = append(names, t.Name)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "meta:describe", Arguments: map[string]any{"toolNames": names, "detail": "full"}})
	if err != nil || res.IsError {
		return nil, fmt.Errorf("meta:describe: %v %s", err, resultText(res))
	}
	var described struct {
		Tools []struct {
			Name        string          `json:"name"`
			InputSchema json.RawMessage `json:"inputSchema"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(structured(res), &described); err != nil {
		return nil, fmt.Errorf("meta:describe's answer: %w", err)
	}
	for _, t := range described.Tools {
		tools[t.Name] = t.InputSchema
	}
	return tools, nil
}

// callByScript makes the calls from one meta:execute script, in order, each
// answer or tool error returned to the driver.
func callByScript(ctx context.Context, cs *mcp.ClientSession, calls []call) error {
	const script = `const out = [];
for (const c of metaContext.calls) {
  try {
    out.push({name: c.name, result: await callTool("conf:" + c.name, c.arguments || {})});
  } catch (e) {
    out.push({name: c.name, error: {code: e.code, message: String(e.message)}});
  }
}
return out;`
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "meta:execute", Arguments: map[string]any{"script": script, "context": map[string]any{"calls": calls}}})
	if err != nil {
		return fmt.Errorf("meta:execute: %w", err)
	}
	var out struct {
		Status string `json:"status"`
		Result []struct {
			Name   string          `json:"name"`
			Result json.RawMessage `json:"result"`
			Error  *struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		} `json:"result"`
	}
	if err := json.Unmarshal(structured(res), &out); err != nil || out.Status != "ok" {
		return fmt.Errorf("meta:execute did not run the calls (%v): %s", err, resultText(res))
	}
	for _, r := range out.Result {
		switch {
		case r.Error != nil && r.Error.Code == "TOOL_EXECUTION_ERROR":
			fmt.Printf("%s: the tool's error: %s\n", r.Name, r.Error.Message)
		case r.Error != nil:
			return fmt.Errorf("callTool(conf:%s) in meta:execute failed with the gateway's error %q: %s", r.Name, r.Error.Code, r.Error.Message)
		default:
			fmt.Printf("%s: %s\n", r.Name, r.Result)
		}
	}
	return nil
}

// gateway is a running Caddy process.
type gateway struct {
	url  string
	cmd  *exec.Cmd
	done chan error
	dir  string
	// connected is closed when the gateway logs its first connection to
	// the upstream (its shared one; an auth/ scenario's upstream refuses
	// that one).
	connected chan struct{}
}

// startGateway runs caddyBin on the Caddyfile caddyfile with env, on a
// free loopback port (CONF_PORT), and waits for it to answer.
func startGateway(ctx context.Context, caddyBin string, caddyfile []byte, env []string) (*gateway, error) {
	dir, err := os.MkdirTemp("", "confclient-")
	if err != nil {
		return nil, err
	}
	config := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(config, caddyfile, 0o600); err != nil {
		return nil, err
	}
	port, err := nettest.FreePort()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(caddyBin, "run", "--config", config, "--adapter", "caddyfile")
	cmd.Env = append(append(os.Environ(), env...), "CONF_PORT="+strconv.Itoa(port), "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	// The log goes on to stderr (the suite prints it when a scenario
	// fails), read on the way for the upstream's first connection.
	logs, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", caddyBin, err)
	}
	g := &gateway{url: "http://127.0.0.1:" + strconv.Itoa(port), cmd: cmd, done: make(chan error, 1), dir: dir, connected: make(chan struct{})}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		sc := bufio.NewScanner(logs)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		once := sync.Once{}
		for sc.Scan() {
			line := sc.Bytes()
			if bytes.Contains(line, []byte(`"msg":"connected to upstream MCP server"`)) {
				once.Do(func() { close(g.connected) })
			}
			os.Stderr.Write(append(line, '\n'))
		}
		_, _ = io.Copy(os.Stderr, logs)
	}()
	go func() { <-copied; g.done <- cmd.Wait() }()
	for {
		resp, err := http.Get(g.url + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return g, nil
			}
		}
		select {
		case err := <-g.done:
			g.done <- err
			g.stop()
			return nil, fmt.Errorf("the gateway exited before answering: %v", err)
		case <-ctx.Done():
			g.stop()
			return nil, errors.New("the gateway did not answer /healthz in time")
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// stop ends the gateway as an operator would (SIGTERM, Caddy's graceful
// stop), killing it after 10 s.
func (g *gateway) stop() {
	_ = g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-g.done:
	case <-time.After(10 * time.Second):
		_ = g.cmd.Process.Kill()
		<-g.done
	}
	os.RemoveAll(g.dir)
}

type call struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// contextCalls are the calls the scenario names in MCP_CONFORMANCE_CONTEXT,
// nil when it names none.
func contextCalls() ([]call, error) {
	s := os.Getenv("MCP_CONFORMANCE_CONTEXT")
	if s == "" {
		return nil, nil
	}
	var c struct {
		ToolCalls []call `json:"toolCalls"`
	}
	if err := json.Unmarshal([]byte(s), &c); err != nil {
		return nil, fmt.Errorf("MCP_CONFORMANCE_CONTEXT: %w", err)
	}
	return c.ToolCalls, nil
}

// echoSchema gives a tool named json_schema_echo (json-schema-2020-12-
// preservation) the input schema meta:describe showed for the other tool
// listed, so the scenario sees what survived the gateway.
func echoSchema(tools map[string]json.RawMessage, calls []call) {
	for i, c := range calls {
		if c.Name != "json_schema_echo" {
			continue
		}
		for n, s := range tools {
			if n != "conf:json_schema_echo" && len(s) > 0 {
				calls[i].Arguments, _ = json.Marshal(map[string]json.RawMessage{"schema": s})
			}
		}
	}
}

// argumentsFor makes arguments that satisfy a plain object schema: each
// required property (all of them when none is marked) with a value of its
// type, objects filled the same way and local $refs ("#/$defs/address")
// followed: the gateway validates a call's input against the tool's schema
// before it leaves.
func argumentsFor(schema json.RawMessage) json.RawMessage {
	var root map[string]any
	_ = json.Unmarshal(schema, &root)
	b, _ := json.Marshal(valueFor(root, root, 0))
	return b
}

func valueFor(s, root map[string]any, depth int) any {
	if ref, ok := s["$ref"].(string); ok && depth < 8 {
		target := any(root)
		for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
			m, _ := target.(map[string]any)
			target = m[part]
		}
		if t, ok := target.(map[string]any); ok {
			return valueFor(t, root, depth+1)
		}
	}
	if c, ok := s["const"]; ok {
		return c
	}
	if e, ok := s["enum"].([]any); ok && len(e) > 0 {
		return e[0]
	}
	typ, _ := s["type"].(string)
	if l, ok := s["type"].([]any); ok && len(l) > 0 {
		typ, _ = l[0].(string)
	}
	props, _ := s["properties"].(map[string]any)
	if typ == "" && props != nil {
		typ = "object"
	}
	switch typ {
	case "number", "integer":
		return 1
	case "boolean":
		return true
	case "array":
		return []any{}
	case "object":
		var names []string
		required, _ := s["required"].([]any)
		for _, n := range required {
			if n, ok := n.(string); ok {
				names = append(names, n)
			}
		}
		if len(names) == 0 {
			for n := range props {
				names = append(names, n)
			}
		}
		obj := map[string]any{}
		for _, n := range names {
			p, _ := props[n].(map[string]any)
			obj[n] = valueFor(p, root, depth+1)
		}
		return obj
	default:
		return "conformance"
	}
}

// structured is a result's structuredContent, else its first text.
func structured(res *mcp.CallToolResult) []byte {
	if res == nil {
		return nil
	}
	if res.StructuredContent != nil {
		b, _ := json.Marshal(res.StructuredContent)
		return b
	}
	return []byte(resultText(res))
}

func resultText(res *mcp.CallToolResult) string {
	if res == nil {
		return ""
	}
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			return t.Text
		}
	}
	return ""
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}
