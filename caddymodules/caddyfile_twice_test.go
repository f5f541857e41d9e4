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
	} {
		src := ":8080 {\n\t" + tc.directive + " {\n\t\t" + tc.lines + "\n\t}\n}\n"
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
