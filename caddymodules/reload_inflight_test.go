package caddymodules

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"golang.org/x/crypto/bcrypt"
)

// inflightGateway is a Caddyfile with the broker, the meta-tools over MCP
// and the authorization server with a route behind codemode_auth. The
// variants differ in the meta block only: each reload builds new
// meta-tools (per config) and keeps the engine, guard, broker and
// authorization server.
func inflightGateway(port, variant int) string {
	hash, _ := bcrypt.GenerateFromPassword([]byte("pw"), bcrypt.MinCost)
	if os.Getenv("CODEMODE_TEST_SIGN_KEY") == "" {
		_ = os.Setenv("CODEMODE_TEST_SIGN_KEY", testSigningKey())
	}
	return fmt.Sprintf(`{
	admin off
	persist_config off
	codemode {
		broker {
			demo_tools
		}
		meta {
			rate_limit meta:search %[2]d 1m
		}
		auth {
			development
			issuer http://127.0.0.1:%[1]d
			resource http://127.0.0.1:%[1]d/private
			user alice %[3]s
			local {
				sign_key {env.CODEMODE_TEST_SIGN_KEY}
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
	codemode_auth /private*
	respond /private* "in as {http.auth.user.id}"
}
`, port, 1000+variant, hash)
}

// inflightTally counts the outcomes of the client loops.
type inflightTally struct {
	ok, dropped atomic.Int64
	mu          sync.Mutex
	refused     []string // an answer a config that is not reloading would not give
}

func (c *inflightTally) refuse(what string, status int, body string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.refused) < 20 {
		c.refused = append(c.refused, fmt.Sprintf("%s: %d %.200s", what, status, body))
	}
}

// inflightCall sends one request on the client's keep-alive connections.
// It returns the status and body, or ok=false for a request that got no
// answer at all (the keep-alive race: EOF or a reset on a connection the
// old server closed).
func inflightCall(c *http.Client, method, url string, header map[string]string, body string) (status int, text string, answered bool, err error) {
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		if unanswered(err) {
			return 0, "", false, nil
		}
		return 0, "", false, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, "", false, err
	}
	text = string(b)
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		for _, line := range strings.Split(text, "\n") {
			if d, ok := strings.CutPrefix(line, "data: "); ok {
				text = d
			}
		}
	}
	return resp.StatusCode, strings.TrimSpace(text), true, nil
}

// TestReloadServesInFlightRequests: on a reload Caddy only starts the old
// servers' shutdown, then cleans the old config up, while the old servers
// still answer the requests under way and those already being read on
// kept-alive connections. Such a request must get its answer from its own
// config's objects. Before, App.Cleanup set the meta-tools' runtime to nil,
// which the MCP handler read per request: an initialize or tools/list on an
// old connection got the go-sdk's 400 "no server available", and the race
// detector reported the write in Cleanup against the read in the request.
// Four clients on keep-alive connections loop over a 2025-11-25 session
// (initialize, tools/list, DELETE), a 2026-07-28 stateless tools/list, a
// broker /execute, the authorization server's metadata and a request
// without a token behind codemode_auth while the config is reloaded; every answer must be the
// one a config that is not reloading gives. A request that got no answer
// at all (EOF or reset: the keep-alive race of every Caddy reload) is
// counted, not failed.
func TestReloadServesInFlightRequests(t *testing.T) {
	caddyMu.Lock()
	defer caddyMu.Unlock()
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	cfgs := loadVariants(t, func(v int) string { return inflightGateway(port, v) })
	defer func() { _ = caddy.Stop() }()

	var tally inflightTally
	var other atomic.Value // the first unexpected client error
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}, Timeout: 30 * time.Second}
		defer client.CloseIdleConnections()
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if err := inflightRound(client, base, (w+i)%5, &tally); err != nil {
					other.CompareAndSwap(nil, err)
				}
			}
		})
	}
	const reloads = 12
	for i := 1; i <= reloads; i++ {
		time.Sleep(100 * time.Millisecond) // let the loops fill the connections
		if err := caddy.Load(cfgs[i%2], true); err != nil {
			close(stop)
			wg.Wait()
			t.Fatalf("reload %d: %v", i, err)
		}
	}
	time.Sleep(100 * time.Millisecond)
	close(stop)
	wg.Wait()
	t.Logf("%d reloads: %d answered as without a reload, %d unanswered (keep-alive race), %d refused",
		reloads, tally.ok.Load(), tally.dropped.Load(), len(tally.refused))
	if err, _ := other.Load().(error); err != nil {
		t.Errorf("client: %v", err)
	}
	if len(tally.refused) > 0 {
		t.Errorf("answers a config that is not reloading does not give:\n%s", strings.Join(tally.refused, "\n"))
	}
	if tally.ok.Load() == 0 {
		t.Error("no request answered")
	}
}

// inflightRound sends one of the five kinds of request (a 2025-11-25
// session, a 2026-07-28 stateless call, a broker execution, the
// authorization server's metadata, a route behind codemode_auth without a
// token) and tallies it.
func inflightRound(c *http.Client, base string, kind int, tally *inflightTally) error {
	check := func(what string, status int, body string, answered bool, err error, good func() bool) bool {
		switch {
		case err != nil:
			return false
		case !answered:
			tally.dropped.Add(1)
			return false
		case !good():
			tally.refuse(what, status, body)
			return false
		}
		tally.ok.Add(1)
		return true
	}
	switch kind {
	case 0:
		req, _ := http.NewRequest(http.MethodPost, base+"/mcp", strings.NewReader(mcpInit2025))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := c.Do(req)
		if err != nil {
			if unanswered(err) {
				tally.dropped.Add(1)
				return nil
			}
			return err
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		sid := resp.Header.Get("Mcp-Session-Id")
		if resp.StatusCode != http.StatusOK || sid == "" || !strings.Contains(string(b), `"protocolVersion":"2025-11-25"`) {
			tally.refuse("initialize 2025-11-25", resp.StatusCode, string(b))
			return nil
		}
		tally.ok.Add(1)
		hdr := map[string]string{"Mcp-Session-Id": sid, "Mcp-Protocol-Version": "2025-11-25"}
		status, body, answered, err := inflightCall(c, http.MethodPost, base+"/mcp", hdr, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		if !check("notifications/initialized", status, body, answered, err, func() bool { return status == http.StatusAccepted }) {
			return err
		}
		status, body, answered, err = inflightCall(c, http.MethodPost, base+"/mcp", hdr, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
		if !check("tools/list 2025-11-25", status, body, answered, err, func() bool {
			return status == http.StatusOK && strings.Contains(body, `"meta:search"`)
		}) {
			return err
		}
		status, body, answered, err = inflightCall(c, http.MethodDelete, base+"/mcp", hdr, "")
		check("DELETE", status, body, answered, err, func() bool { return status == http.StatusNoContent })
		return err
	case 1:
		status, body, answered, err := inflightCall(c, http.MethodPost, base+"/mcp",
			map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list"},
			`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{`+modernMeta+`}}`)
		check("tools/list 2026-07-28", status, body, answered, err, func() bool {
			return status == http.StatusOK && strings.Contains(body, `"meta:search"`)
		})
		return err
	case 3:
		status, body, answered, err := inflightCall(c, http.MethodGet, base+"/.well-known/oauth-authorization-server", nil, "")
		check("authorization server metadata", status, body, answered, err, func() bool {
			return status == http.StatusOK && strings.Contains(body, `"issuer":"`+base+`"`)
		})
		return err
	case 4:
		status, body, answered, err := inflightCall(c, http.MethodGet, base+"/private", nil, "")
		check("codemode_auth without a token", status, body, answered, err, func() bool { return status == http.StatusUnauthorized })
		return err
	default:
		status, body, answered, err := inflightCall(c, http.MethodPost, base+"/broker/execute", nil,
			`{"code":"return (await callTool(\"math:add\", {a: 2, b: 3})).sum"}`)
		check("broker /execute", status, body, answered, err, func() bool {
			if status != http.StatusOK {
				return false
			}
			var last ndjsonEvent
			sc := bufio.NewScanner(strings.NewReader(body))
			for sc.Scan() {
				_ = json.Unmarshal(sc.Bytes(), &last)
			}
			return last.Type == "result" && strings.Contains(string(last.Payload), `"result":5`)
		})
		if err != nil {
			return fmt.Errorf("broker /execute: %w", err)
		}
		return nil
	}
}

// TestReloadAnswersRequestBeingRead: a request whose handler is reading its
// body when Caddy reloads is answered by the old config after Caddy cleaned
// that config up (caddy.Load returns only after the old config's Cleanup).
// The client sends Expect: 100-continue and waits for the 100, which
// net/http sends when the handler first reads the body, so the reload falls
// between the handler's start and its use of the app, every time. Before,
// the MCP handler then found the meta-tools' server gone and answered 400
// "no server available".
func TestReloadAnswersRequestBeingRead(t *testing.T) {
	caddyMu.Lock()
	defer caddyMu.Unlock()
	port := freePort(t)
	cfgs := loadVariants(t, func(v int) string { return inflightGateway(port, v) })
	defer func() { _ = caddy.Stop() }()
	for i, c := range []struct {
		name, header, body, want string
	}{
		{"initialize 2025-11-25", "", mcpInit2025, `"protocolVersion":"2025-11-25"`},
		{"tools/list 2026-07-28", "Mcp-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/list\r\n",
			`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{` + modernMeta + `}}`, `"meta:search"`},
	} {
		// The connection after the previous case's reload may be queued on
		// the outgoing config's listener and reset when it closes (see
		// unansweredRetry): nothing was sent but headers, so dial again.
		var conn net.Conn
		var br *bufio.Reader
		for attempt := 1; ; attempt++ {
			var err error
			conn, err = net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
			fmt.Fprintf(conn, "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"+
				"Accept: application/json, text/event-stream\r\nContent-Length: %d\r\nExpect: 100-continue\r\n%s\r\n", port, len(c.body), c.header)
			br = bufio.NewReader(conn)
			line, err := br.ReadString('\n')
			if err != nil && unanswered(err) && attempt < 10 {
				continue
			}
			if err != nil || !strings.HasPrefix(line, "HTTP/1.1 100 ") {
				t.Fatalf("%s: %q %v, want 100 Continue", c.name, line, err)
			}
			break
		}
		if _, err := br.ReadString('\n'); err != nil { // the blank line ending the 100
			t.Fatal(err)
		}
		if err := caddy.Load(cfgs[(i+1)%2], true); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(conn, c.body); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), c.want) {
			t.Errorf("%s, answered by the config a reload cleaned up: %d %s", c.name, resp.StatusCode, b)
		}
	}
}
