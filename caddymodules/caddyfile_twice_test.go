package caddymodules

import (
	"fmt"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
)

// TestCaddyfileOptionGivenTwice: every option of the handler directives
// (and of the blocks inside them: codemode_broker's rate_limit and limits,
// codemode_guard's ip_filter, a redis storage and its tls) that sets one
// value is an adapt error when given twice in one block, naming the option,
// the first line and (Caddy's ", at file:line") the second. Before, the
// second silently replaced the first. The options that add up (a list) may
// be repeated, and the adapted JSON keeps every value.
func TestCaddyfileOptionGivenTwice(t *testing.T) {
	for _, tc := range []struct {
		directive string
		first     string // the option's line; given twice, one after the other
		second    string // "" means first again
		// the block the option is in, around it; %s is the two lines
		block string
	}{
		{directive: "codemode_auth", first: "resource https://gw.example/mcp", second: "resource https://gw.example/other"},
		{directive: "codemode_auth", first: "audience a", second: "audience b"},
		{directive: "codemode_auth", first: "scopes mcp", second: "scopes admin"},
		{directive: "codemode_oauth", first: "scopes_supported mcp", second: "scopes_supported admin"},
		{directive: "codemode_mcp", first: "stateless"},
		{directive: "codemode_mcp", first: "json_response"},
		{directive: "codemode_mcp", first: "disable_localhost_protection"},
		{directive: "codemode_mcp", first: "gateway_url https://gw.example/a", second: "gateway_url https://gw.example/b"},
		{directive: "codemode_mcp", first: "session_timeout 1m", second: "session_timeout 2m"},
		{directive: "codemode_mcp", first: "max_sessions 5", second: "max_sessions 6"},
		{directive: "codemode_mcp", first: "max_sessions_per_client 2", second: "max_sessions_per_client 3"},
		{directive: "codemode_broker", first: "prefix /a", second: "prefix /b"},
		{directive: "codemode_broker", first: "rate_limit 10 1m", second: "rate_limit 20 1m"},
		{directive: "codemode_broker", first: "limits {\n\t\t\ttimeout 1s\n\t\t}", second: "limits {\n\t\t\ttimeout 2s\n\t\t}"},
		{directive: "codemode_broker", first: "key a", second: "key b", block: "rate_limit 10 1m {\n%s\n\t\t}"},
		{directive: "codemode_broker", first: "timeout 1s", second: "timeout 2s", block: "limits {\n%s\n\t\t}"},
		{directive: "codemode_broker", first: "max_tool_calls 1", second: "max_tool_calls 2", block: "limits {\n%s\n\t\t}"},
		{directive: "codemode_broker", first: "max_steps 1", second: "max_steps 2", block: "limits {\n%s\n\t\t}"},
		{directive: "codemode_guard", first: "zone a", second: "zone b"},
		{directive: "codemode_guard", first: "storage memory"},
		{directive: "codemode_guard", first: "key_prefix a:", second: "key_prefix b:"},
		{directive: "codemode_guard", first: "timeout 1s", second: "timeout 2s"},
		{directive: "codemode_guard", first: "ip_filter {\n\t\t\tallow 10.0.0.0/8\n\t\t}", second: "ip_filter {\n\t\t\tdeny 10.0.0.0/8\n\t\t}"},
		{directive: "codemode_guard", first: "session_header X-A", second: "session_header X-B"},
		{directive: "codemode_guard", first: "user a", second: "user b"},
		{directive: "codemode_guard", first: "hide_rate_limit_headers"},
		{directive: "codemode_guard", first: "default allow", second: "default deny", block: "ip_filter {\n%s\n\t\t}"},
		{directive: "codemode_guard", first: "trust_proxy 1", second: "trust_proxy 2", block: "ip_filter {\n%s\n\t\t}"},
		{directive: "codemode_guard", first: "address 127.0.0.1:1", second: "address 127.0.0.1:2", block: "storage redis {\n%s\n\t\t}"},
		{directive: "codemode_guard", first: "timeout 1s", second: "timeout 2s", block: "storage redis {\n%s\n\t\t}"},
		{directive: "codemode_guard", first: "password a", second: "password b", block: "storage redis {\n%s\n\t\t}"},
		{directive: "codemode_guard", first: "server_name a", second: "server_name b", block: "storage redis {\n\t\t\ttls {\n%s\n\t\t\t}\n\t\t}"},
	} {
		second := tc.second
		if second == "" {
			second = tc.first
		}
		name := strings.Fields(tc.first)[0]
		t.Run(tc.directive+"/"+name, func(t *testing.T) {
			lines := "\t\t" + tc.first + "\n\t\t" + second
			if tc.block != "" {
				lines = fmt.Sprintf("\t\t"+tc.block, lines)
			}
			src := ":8080 {\n\t" + tc.directive + " {\n" + lines + "\n\t}\n}\n"
			// The first of the two lines and the second's.
			firstLine, secondLine := 0, 0
			for i, l := range strings.Split(src, "\n") {
				if f := strings.Fields(l); len(f) > 0 && f[0] == name {
					if firstLine == 0 {
						firstLine = i + 1
					} else if secondLine == 0 {
						secondLine = i + 1
					}
				}
			}
			_, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(src), map[string]any{"filename": "Caddyfile"})
			want := fmt.Sprintf("%s: given twice (first on line %d); write it once, at Caddyfile:%d", name, firstLine, secondLine)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("adapt: %v\nwant %q\n%s", err, want, src)
			}
		})
	}

	// The codemode global option's blocks: each block's options, nested
	// blocks included.
	for _, tc := range []struct {
		first, second string
		block         string // %s is the two lines
	}{
		{"mode orchestrated", "mode transparent", "auth {\n%s\n\t\t}"},
		{"issuer https://a.example", "issuer https://b.example", "auth {\n%s\n\t\t}"},
		{"consent", "consent", "auth {\n%s\n\t\t}"},
		{"max_keys 2", "max_keys 3", "auth {\n\t\t\tlocal {\n%s\n\t\t\t}\n\t\t}"},
		{"skew 1s", "skew 2s", "auth {\n\t\t\trefresh {\n%s\n\t\t\t}\n\t\t}"},
		{"fetch_timeout 1s", "fetch_timeout 2s", "auth {\n\t\t\tclient_id_metadata {\n%s\n\t\t\t}\n\t\t}"},
		{"secret a", "secret b", "auth {\n\t\t\tclient c {\n%s\n\t\t\t}\n\t\t}"},
		{"key_prefix a:", "key_prefix b:", "throttle {\n%s\n\t\t}"},
		{"default_timeout 1s", "default_timeout 2s", "throttle {\n%s\n\t\t}"},
		{"engine worker", "engine worker", "sandbox {\n%s\n\t\t}"},
		{"max 2", "max 3", "sandbox {\n\t\t\tpool {\n%s\n\t\t\t}\n\t\t}"},
		{"remove_hosts", "remove_hosts", "sandbox {\n\t\t\tsanitization {\n%s\n\t\t\t}\n\t\t}"},
		{"session_timeout 1m", "session_timeout 2m", "broker {\n%s\n\t\t}"},
		{"max_response_size 1MB", "max_response_size 2MB", "broker {\n\t\t\topenapi a http://127.0.0.1:1/a.json {\n%s\n\t\t\t}\n\t\t}"},
		{"title A", "title B", "broker {\n\t\t\topenapi a http://127.0.0.1:1/a.json {\n\t\t\t\tcredential user {\n%s\n\t\t\t\t}\n\t\t\t}\n\t\t}"},
		{"client_id a", "client_id b", "broker {\n\t\t\topenapi a http://127.0.0.1:1/a.json {\n\t\t\t\tcredential user {\n\t\t\t\t\toauth {\n%s\n\t\t\t\t\t}\n\t\t\t\t}\n\t\t\t}\n\t\t}"},
		{"list_ttl 1m", "list_ttl 2m", "meta {\n%s\n\t\t}"},
		{"url http://127.0.0.1:1/a", "url http://127.0.0.1:1/b", "meta {\n\t\t\tupstream u {\n%s\n\t\t\t}\n\t\t}"},
		{"remove_hosts", "remove_hosts", "meta {\n\t\t\tsanitization {\n%s\n\t\t\t}\n\t\t}"},
		{"connect_url https://a.example/connections", "connect_url https://b.example/connections", "credentials {\n%s\n\t\t}"},
		{"session_ttl 1h", "session_ttl 2h", "credentials {\n%s\n\t\t}"},
		// One option in its two spellings is given twice too: the second
		// would replace the first as silently.
		{"engine worker", "adapter inprocess", "sandbox {\n%s\n\t\t}"},
		{"adapter inprocess", "engine worker", "sandbox {\n%s\n\t\t}"},
		{"key_rotation 30d", "key_rotation_days 60", "auth {\n\t\t\tlocal {\n%s\n\t\t\t}\n\t\t}"},
		{"storage memory", "redis {\n\t\t\t\taddress 127.0.0.1:1\n\t\t\t}", "broker {\n%s\n\t\t}"},
		{"search tfidf", "embedding {\n\t\t\t\tstrategy tfidf\n\t\t\t}", "meta {\n%s\n\t\t}"},
	} {
		name, second := strings.Fields(tc.first)[0], strings.Fields(tc.second)[0]
		label := name
		if second != name {
			label += "+" + second
		}
		t.Run("codemode/"+strings.Fields(tc.block)[0]+"/"+label, func(t *testing.T) {
			src := "{\n\tcodemode {\n\t\t" + fmt.Sprintf(tc.block, "\t\t\t"+tc.first+"\n\t\t\t"+tc.second) + "\n\t}\n}\n"
			var at []int
			for i, l := range strings.Split(src, "\n") {
				if f := strings.Fields(l); len(f) > 0 && (f[0] == name || f[0] == second) {
					at = append(at, i+1)
				}
			}
			_, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(src), map[string]any{"filename": "Caddyfile"})
			spelled := ""
			if second != name {
				spelled = ", as " + name
			}
			want := fmt.Sprintf("%s: given twice (first on line %d%s); write it once, at Caddyfile:%d", second, at[0], spelled, at[1])
			if len(at) != 2 || err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("adapt: %v\nwant %q\n%s", err, want, src)
			}
		})
	}

	// The options that add up.
	for _, tc := range []struct {
		directive, lines string
		want             []string // in the adapted JSON
	}{
		{"codemode_oauth", "resource https://gw.example/a\n\t\tresources https://gw.example/b", []string{`"resources":["https://gw.example/a","https://gw.example/b"]`}},
		{"codemode_mcp", "allowed_origins https://a.example\n\t\tallowed_origins https://b.example", []string{`"allowed_origins":["https://a.example","https://b.example"]`}},
		{"codemode_broker", "allowed_origins https://a.example\n\t\tallowed_origins https://b.example", []string{`"allowed_origins":["https://a.example","https://b.example"]`}},
		{"codemode_guard", "rate_limit a 1 1m\n\t\trate_limit b 2 1m\n\t\tconcurrency c 1\n\t\tconcurrency d 2", []string{`"name":"a"`, `"name":"b"`, `"name":"c"`, `"name":"d"`}},
		{"codemode_guard", "ip_filter {\n\t\t\tallow 10.0.0.0/8\n\t\t\tallow 192.168.0.0/16\n\t\t\tdeny 10.6.0.0/16\n\t\t\tdeny 10.7.0.0/16\n\t\t}", []string{`"allow":["10.0.0.0/8","192.168.0.0/16"]`, `"deny":["10.6.0.0/16","10.7.0.0/16"]`}},
		{"codemode", "auth {\n\t\t\tuser a " + cheapHash + "\n\t\t\tuser b " + cheapHash + "\n\t\t\tresources https://a.example/mcp\n\t\t\tresources https://b.example/mcp\n\t\t}",
			[]string{`"username":"a"`, `"username":"b"`, `"resources":["https://a.example/mcp","https://b.example/mcp"]`}},
		{"codemode", "broker {\n\t\t\topenapi a http://127.0.0.1:1/a.json {\n\t\t\t\theader X-A 1\n\t\t\t\theader X-B 2\n\t\t\t}\n\t\t\topenapi b http://127.0.0.1:1/b.json\n\t\t}",
			[]string{`"X-A":"1"`, `"X-B":"2"`, `"name":"b"`}},
		{"codemode", "credentials {\n\t\t\tkey k\n\t\t\tprevious_key p1\n\t\t\tprevious_key p2\n\t\t}", []string{`"previous_keys":["p1","p2"]`}},
	} {
		src := ":8080 {\n\t" + tc.directive + " {\n\t\t" + tc.lines + "\n\t}\n}\n"
		if tc.directive == "codemode" {
			src = "{\n\tcodemode {\n\t\t" + tc.lines + "\n\t}\n}\n"
		}
		out, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(src), nil)
		if err != nil {
			t.Errorf("%s: adapt: %v\n%s", tc.directive, err, src)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(string(out), w) {
				t.Errorf("%s: adapted JSON lacks %s:\n%s", tc.directive, w, out)
			}
		}
	}
}
