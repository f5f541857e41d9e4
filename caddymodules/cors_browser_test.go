package caddymodules

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/codemode-gateway/caddy-codemode/internal/browsertest"
)

// corsPageScript is what a browser-based MCP client and a broker client do
// from their own page: initialize (a JSON POST, so a preflight first), read
// the session id the answer carries, list the tools in that session, and
// run a plan through the broker. It resolves to one line per step, or the
// error that stopped it.
const corsPageScript = `(async (gw) => {
	const out = [];
	try {
		const h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"};
		let r = await fetch(gw + "/mcp", {method: "POST", headers: h, body: JSON.stringify({jsonrpc: "2.0", id: 1,
			method: "initialize", params: {protocolVersion: "2025-11-25", capabilities: {}, clientInfo: {name: "page", version: "1"}}})});
		const sid = r.headers.get("Mcp-Session-Id");
		out.push("initialize " + r.status + " session " + (sid ? "yes" : "no") + " " + ((await r.text()).includes("protocolVersion") ? "answer" : "no answer"));
		r = await fetch(gw + "/mcp", {method: "POST", headers: {...h, "Mcp-Session-Id": sid, "Mcp-Protocol-Version": "2025-11-25"},
			body: JSON.stringify({jsonrpc: "2.0", id: 2, method: "tools/list"})});
		out.push("tools/list " + r.status + " " + ((await r.text()).includes("meta:execute") ? "tools" : "no tools"));
		r = await fetch(gw + "/broker/execute", {method: "POST", headers: {"Content-Type": "application/json"},
			body: JSON.stringify({code: "return (await callTool('math:add', {a: 2, b: 3})).sum"})});
		const lines = (await r.text()).trim().split("\n");
		out.push("execute " + r.status + " session " + (r.headers.get("X-Session-Id") ? "yes" : "no") + " " + lines[lines.length - 1]);
		r = await fetch(gw + "/private/mcp", {method: "POST", headers: h, body: JSON.stringify({jsonrpc: "2.0", id: 1, method: "ping"})});
		out.push("private " + r.status + " " + r.headers.get("WWW-Authenticate"));
	} catch (e) {
		out.push("error " + e.name);
	}
	return out.join("\n");
})`

// TestBrowserPageOfAnAllowedOrigin: a page of an origin named in
// allowed_origins uses /mcp and the broker from Chromium (a real browser
// enforcing CORS). Both answered without Access-Control-Allow-Origin and
// refused the preflight of a JSON POST with 405, so the browser let no
// request of the page through: allowed_origins allowed nothing. Behind
// codemode_auth the page reads the 401 and its challenge (the preflight got
// 401 and the browser hid it). A page of another origin is still refused.
func TestBrowserPageOfAnAllowedOrigin(t *testing.T) {
	ctx := browsertest.Start(t, 90*time.Second)
	caddyMu.Lock()
	defer caddyMu.Unlock()
	gw, page, other := freePort(t), freePort(t), freePort(t)
	loadCaddyfile(t, fmt.Sprintf(`{
	admin off
	persist_config off
	codemode {
		sandbox {
			pool {
				min 1
				max 1
			}
		}
		broker {
			demo_tools
		}
		auth {
			development
			issuer http://127.0.0.1:%[1]d
		}
	}
}

http://127.0.0.1:%[1]d {
	bind 127.0.0.1
	codemode_mcp /mcp {
		allowed_origins http://127.0.0.1:%[2]d
	}
	codemode_auth /private/*
	codemode_mcp /private/mcp {
		allowed_origins http://127.0.0.1:%[2]d
	}
	handle_path /broker/* {
		codemode_broker {
			allowed_origins http://127.0.0.1:%[2]d
		}
	}
}

http://127.0.0.1:%[2]d, http://127.0.0.1:%[3]d {
	bind 127.0.0.1
	header Content-Type text/html
	respond "<!doctype html><title>page</title>"
}
`, gw, page, other))
	defer func() { _ = caddy.Stop() }()

	run := func(pagePort int) string {
		t.Helper()
		var got string
		err := chromedp.Run(ctx,
			chromedp.Navigate(fmt.Sprintf("http://127.0.0.1:%d/", pagePort)),
			chromedp.Evaluate(fmt.Sprintf(`%s("http://127.0.0.1:%d")`, corsPageScript, gw), &got,
				func(p *runtime.EvaluateParams) *runtime.EvaluateParams { return p.WithAwaitPromise(true) }),
		)
		if err != nil {
			t.Fatalf("page of port %d: %v", pagePort, err)
		}
		return got
	}

	got := run(page)
	for _, want := range []string{
		"initialize 200 session yes answer",
		"tools/list 200 tools",
		`execute 200 session yes {"type":"result"`,
		`private 401 Bearer resource_metadata="http://127.0.0.1:` + fmt.Sprint(gw) + `/.well-known/oauth-protected-resource"`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("page of the allowed origin: %q lacks %q", got, want)
		}
	}
	if !strings.Contains(got, `"result":5`) {
		t.Errorf("page of the allowed origin: the plan's result is not 5: %q", got)
	}
	if got := run(other); got != "error TypeError" {
		t.Errorf("page of another origin: %q, want the browser's TypeError (refused)", got)
	}
}
