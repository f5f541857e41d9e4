package caddymodules

import (
	"fmt"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
)

// TestOAuthPlacement: a codemode_oauth that the requests it serves cannot
// reach as sent fails the load, naming a path it would not see: under
// handle_path (which strips the prefix, so the issuer's URLs, at the site's
// root, named paths that never reached it), under handle or route with a
// path, or with a matcher of its own that excludes its endpoints. Before,
// each of these loaded and sign-in failed with the site's 404s. The forms
// that reach it (the site's top level, after a prefix strip that other paths
// pass unchanged, a matcher that covers its paths in transparent mode) load.
func TestOAuthPlacement(t *testing.T) {
	idp := newFakeIDP(t)
	orchestrated := func(port int) string {
		return fmt.Sprintf(`development
			issuer http://127.0.0.1:%d
			resource http://127.0.0.1:%[1]d/gw/mcp
			user demo %s`, port, cheapHash)
	}
	transparent := func(port int) string {
		return fmt.Sprintf(`mode transparent
			development
			provider_url %s
			expected_audience http://127.0.0.1:%d/gw/mcp
			resource http://127.0.0.1:%[2]d/gw/mcp`, idp.srv.URL, port)
	}
	for _, tc := range []struct {
		name string
		auth func(port int) string
		site string // %s is the site's address
		want string // "" means the load succeeds
	}{
		{"top level", orchestrated, "http://%s {\n\tcodemode_oauth\n\thandle_path /gw/* {\n\t\tcodemode_auth /mcp\n\t\trespond 200\n\t}\n}", ""},
		{"top level, no host", orchestrated, "http://:%s {\n\tcodemode_oauth\n}", ""},
		{"handle_path", orchestrated, "http://%s {\n\thandle_path /gw/* {\n\t\tcodemode_oauth\n\t}\n}",
			"codemode_oauth: a request for /.well-known/oauth-protected-resource/gw/mcp never reaches it: it is inside a handle_path, handle or route"},
		{"handle_path, no host", orchestrated, "http://:%s {\n\thandle_path /gw/* {\n\t\tcodemode_oauth\n\t}\n}",
			"a request for /.well-known/oauth-protected-resource/gw/mcp never reaches it"},
		{"handle_path, transparent", transparent, "http://%s {\n\thandle_path /gw/* {\n\t\tcodemode_oauth\n\t}\n}",
			"a request for /.well-known/oauth-protected-resource/gw/mcp never reaches it"},
		{"nested handle", orchestrated, "http://%s {\n\thandle /gw/* {\n\t\troute {\n\t\t\tcodemode_oauth\n\t\t}\n\t}\n}",
			"never reaches it"},
		{"handle_path of its own paths", orchestrated, "http://%s {\n\thandle_path /oauth/* {\n\t\tcodemode_oauth\n\t}\n\tcodemode_oauth\n}",
			"a request for /.well-known/oauth-protected-resource/gw/mcp never reaches it"},
		{"strip of the root", orchestrated, "http://%s {\n\troute {\n\t\turi strip_prefix /.well-known\n\t\tcodemode_oauth\n\t}\n}",
			"codemode_oauth: a request for /.well-known/oauth-protected-resource/gw/mcp reaches it as /oauth-protected-resource/gw/mcp, after a rewrite that strips a path prefix"},
		{"strip of another prefix", orchestrated, "http://%s {\n\troute {\n\t\turi strip_prefix /gw\n\t\tcodemode_oauth\n\t}\n}", ""},
		{"matcher of its own, orchestrated", orchestrated, "http://%s {\n\tcodemode_oauth /.well-known/*\n}",
			"a request for /oauth/authorize never reaches it"},
		{"matcher of its own, transparent", transparent, "http://%s {\n\tcodemode_oauth /.well-known/*\n}", ""},
		// Another site block for the issuer's host comes first (Caddy puts
		// the catch-all site last) and answers the requests: before, this
		// loaded and the metadata URL served the other site's page.
		{"catch-all site after the issuer's host", orchestrated, "http://%s {\n\trespond 200\n}\nhttp://:PORT {\n\tbind 127.0.0.1\n\tcodemode_oauth\n}",
			"codemode_oauth: a request for /.well-known/oauth-protected-resource/gw/mcp at 127.0.0.1:PORT never reaches it: an earlier route"},
		{"catch-all site after the issuer's host, transparent", transparent, "http://%s {\n\trespond 200\n}\nhttp://:PORT {\n\tbind 127.0.0.1\n\tcodemode_oauth\n}",
			"never reaches it: an earlier route"},
		{"catch-all site after another host", orchestrated, "http://localhost:PORT%.0s {\n\trespond 200\n}\nhttp://:PORT {\n\tbind 127.0.0.1\n\tcodemode_oauth\n}", ""},
		// A host matcher counts on the handler's own route and on the
		// handle holding it as on the site block: one for the issuer's
		// host loads, one for another host never sees the requests (it
		// loaded silently, the metadata and sign-in then 404).
		{"own host matcher, the issuer's host", orchestrated, "http://:PORT%.0s {\n\t@gw host 127.0.0.1\n\tcodemode_oauth @gw\n\trespond 404\n}", ""},
		{"own host matcher, another host", orchestrated, "http://:PORT%.0s {\n\t@gw host gw.example.com\n\tcodemode_oauth @gw\n}",
			"codemode_oauth: a request for /.well-known/oauth-protected-resource/gw/mcp at 127.0.0.1:PORT never reaches it: its route (a host matcher"},
		{"handle with a host matcher, the issuer's host", orchestrated, "http://:PORT%.0s {\n\t@gw host 127.0.0.1\n\thandle @gw {\n\t\tcodemode_oauth\n\t}\n}", ""},
		{"handle with a host matcher, another host", transparent, "http://:PORT%.0s {\n\t@gw host gw.example.com\n\thandle @gw {\n\t\tcodemode_oauth\n\t}\n}",
			"never reaches it: its route (a host matcher"},
		{"site block of another host", orchestrated, "http://localhost:PORT%.0s {\n\tcodemode_oauth\n}", "never reaches it: its route (a host matcher"},
		{"own host matcher after another host's site", orchestrated, "http://localhost:PORT%.0s {\n\trespond 200\n}\nhttp://:PORT {\n\tbind 127.0.0.1\n\t@gw host 127.0.0.1\n\tcodemode_oauth @gw\n\trespond 404\n}", ""},
		{"own host matcher after the issuer's site", orchestrated, "http://%s {\n\trespond 200\n}\nhttp://:PORT {\n\tbind 127.0.0.1\n\t@gw host 127.0.0.1\n\tcodemode_oauth @gw\n}",
			"never reaches it: an earlier route"},
		// Behind a TLS proxy the Host may be rewritten: a warning, not a
		// load error.
		{"another host behind a TLS proxy", func(port int) string { return orchestrated(port) + "\n\t\t\tbehind_tls_proxy" },
			"http://:PORT%.0s {\n\t@gw host gw.internal\n\tcodemode_oauth @gw\n}", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			port := freePort(t)
			addr := fmt.Sprintf("127.0.0.1:%d", port)
			if strings.HasPrefix(tc.site, "http://:") {
				addr = fmt.Sprint(port)
			}
			src := fmt.Sprintf(`{
	admin off
	persist_config off
	codemode {
		auth {
			%s
		}
	}
}
`, tc.auth(port)) + strings.Replace(fmt.Sprintf(tc.site, addr), "{\n", "{\n\tbind 127.0.0.1\n", 1) + "\n"
			src = strings.ReplaceAll(src, "PORT", fmt.Sprint(port))
			want := strings.ReplaceAll(tc.want, "PORT", fmt.Sprint(port))
			cfg, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(src), nil)
			if err != nil {
				t.Fatalf("adapt: %v\n%s", err, src)
			}
			err = loadErr(t, cfg)
			switch {
			case want == "" && err != nil:
				t.Errorf("load: %v\n%s", err, src)
			case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
				t.Errorf("load: %v, want %q\n%s", err, want, src)
			}
		})
	}
}
