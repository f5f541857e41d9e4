package caddymodules

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
)

// TestCaddyfileKeysDocumented: every subdirective a Caddyfile parser of
// this package accepts (each string of its `case` clauses) appears in the
// syntax block of its reference page in docs/, so an operator reading the
// docs sees every key that works. Former spellings count when the block
// names them (in a comment is enough). The other way round, every key a
// line of the block starts with is one its parsers accept, or a block
// that holds them (the codemode option, its blocks, a directive).
func TestCaddyfileKeysDocumented(t *testing.T) {
	keys := caseStrings(t)
	holders := map[string]bool{"codemode": true, "handle_path": true, "credential": true}
	for _, k := range keys["parseAppCaddyfile"] {
		holders[k] = true
	}
	lineKey := regexp.MustCompile(`(?m)^\s*([a-z_]+)(?:\s|$)`)
	for _, tc := range []struct {
		page, heading string
		parsers       []string
	}{
		{"sandbox.md", "## Caddyfile", []string{"parseSandbox", "parseSandboxPool", "parseSandboxSanitization"}},
		{"broker.md", "## Caddyfile", []string{"parseBroker", "parseOpenAPISource", "BrokerHandler.UnmarshalCaddyfile"}},
		{"metatools.md", "## Caddyfile reference (`codemode { meta { … } }`)", []string{"parseMeta", "parseMetaUpstream", "SearchEmbeddings.unmarshalOption"}},
		{"auth.md", "### `auth` (inside the `codemode` global option)", []string{"parseAuth", "parseLocal", "parseRefresh", "parseClientIDMetadata", "parseClient"}},
		{"auth.md", "### `codemode_oauth`", []string{"OAuthHandler.UnmarshalCaddyfile"}},
		{"auth.md", "### `codemode_auth`", []string{"BearerAuth.UnmarshalCaddyfile"}},
		{"guard.md", "## `codemode_guard` (HTTP handler, ID `http.handlers.codemode_guard`)", []string{"Guard.UnmarshalCaddyfile", "parseGuardIPFilter", "AddressPrefixes.unmarshalCaddyfileOption"}},
		{"guard.md", "## `throttle` (the codemode app's GuardConfig)", []string{"parseThrottle"}},
		{"storage.md", "## `codemode.storage.redis`", []string{"RedisStorage.UnmarshalCaddyfile"}},
		{"credentials.md", "## Caddyfile and JSON reference", []string{"parseSourceCredential"}},
		{"metatools.md", "## Endpoints", []string{"MCPHandler.UnmarshalCaddyfile"}},
	} {
		block := docsBlock(t, tc.page, tc.heading)
		words := map[string]bool{}
		for _, w := range regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`).FindAllString(block, -1) {
			words[w] = true
		}
		accepted := map[string]bool{}
		for _, fn := range tc.parsers {
			ks, ok := keys[fn]
			if !ok {
				t.Errorf("no parser %s in caddymodules", fn)
				continue
			}
			for _, k := range ks {
				accepted[k] = true
				if !words[k] {
					t.Errorf("docs/%s %q: %s accepts %q, which the syntax block does not show", tc.page, tc.heading, fn, k)
				}
			}
		}
		for _, m := range lineKey.FindAllStringSubmatch(block, -1) {
			if k := m[1]; !accepted[k] && !holders[k] && !strings.HasPrefix(k, "codemode_") {
				t.Errorf("docs/%s %q: the syntax block shows %q, which none of %v accepts", tc.page, tc.heading, k, tc.parsers)
			}
		}
	}
	// The credentials block of the app has its own block, the second of
	// that section.
	_, rest, _ := strings.Cut(docsSection(t, "credentials.md", "## Caddyfile and JSON reference"), "credentials {")
	for _, k := range keys["parseCredentials"] {
		if !strings.Contains(rest, k) {
			t.Errorf("docs/credentials.md: parseCredentials accepts %q, which the credentials block does not show", k)
		}
	}
}

// TestDocsReferenceBlocksAdapt: the reference blocks written as whole
// Caddyfiles (not syntax with <placeholders>) adapt as they stand, so an
// operator can start from a copy.
func TestDocsReferenceBlocksAdapt(t *testing.T) {
	for _, tc := range []struct{ page, heading string }{
		{"sandbox.md", "## Caddyfile"},
		{"metatools.md", "## Endpoints"},
	} {
		if _, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(docsBlock(t, tc.page, tc.heading)), nil); err != nil {
			t.Errorf("docs/%s %q: %v", tc.page, tc.heading, err)
		}
	}
}

// caseStrings maps each function of the package's non-test files that
// reads a Caddyfile (named "Type.Method" for methods) to the strings of
// its case clauses.
func caseStrings(t *testing.T) map[string][]string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	out := map[string][]string{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range file.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			name := fd.Name.Name
			if fd.Recv != nil && len(fd.Recv.List) == 1 {
				typ := fd.Recv.List[0].Type
				if st, ok := typ.(*ast.StarExpr); ok {
					typ = st.X
				}
				if id, ok := typ.(*ast.Ident); ok {
					name = id.Name + "." + name
				}
			}
			seen := map[string]bool{}
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				cc, ok := n.(*ast.CaseClause)
				if !ok {
					return true
				}
				for _, e := range cc.List {
					if lit, ok := e.(*ast.BasicLit); ok && lit.Kind == token.STRING {
						if s, err := strconv.Unquote(lit.Value); err == nil && s != "" && !seen[s] {
							seen[s] = true
							out[name] = append(out[name], s)
						}
					}
				}
				return true
			})
			sort.Strings(out[name])
		}
	}
	return out
}

// docsAfter is the text of a page of docs/ after heading.
func docsAfter(t *testing.T, page, heading string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "docs", page))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("docs/%s has no heading %q", page, heading)
	}
	return rest
}

// docsSection is the text of a page of docs/ from heading to the next
// heading of any level.
func docsSection(t *testing.T, page, heading string) string {
	t.Helper()
	rest := docsAfter(t, page, heading)
	if i := strings.Index(rest, "\n#"); i >= 0 {
		rest = rest[:i]
	}
	return rest
}

// docsBlock is the first fenced block of a section of docs/, whatever its
// language.
func docsBlock(t *testing.T, page, heading string) string {
	t.Helper()
	sec := docsSection(t, page, heading)
	_, rest, ok := strings.Cut(sec, "```")
	if !ok {
		t.Fatalf("docs/%s %q: no fenced block", page, heading)
	}
	_, rest, _ = strings.Cut(rest, "\n") // the fence's language
	block, _, ok := strings.Cut(rest, "\n```")
	if !ok {
		t.Fatalf("docs/%s %q: the block does not end", page, heading)
	}
	return block
}

// TestDocsCaddyfileBlocksAdapt: every caddyfile block of README.md and
// docs/ is a whole Caddyfile that adapts, a syntax block (placeholders in
// <…>, alternatives a|b, elisions …), or a fragment whose page says where
// it goes and which adapts there: in a site block, or in the codemode
// global option (whole, or its broker or meta block). A block a reader
// copies either works or says what it is.
func TestDocsCaddyfileBlocksAdapt(t *testing.T) {
	pages, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	wraps := []struct{ where, before, after string }{
		{"site block", "http://localhost {\n", "\n}\n"},
		{"global option", "{\n\tcodemode {\n", "\n\t}\n}\n"},
		{"`broker` block", "{\n\tcodemode {\n\t\tbroker {\n", "\n\t\t}\n\t}\n}\n"},
		{"`meta` block", "{\n\tcodemode {\n\t\tmeta {\n", "\n\t\t}\n\t}\n}\n"},
	}
	syntax := regexp.MustCompile(`<[a-z_ .…]+>|\w\|\w|\.\.\.|…`)
	adapt := func(src string) error {
		_, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(src), nil)
		return err
	}
	n := 0
	for _, p := range append(pages, "../README.md") {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		parts := strings.Split(string(b), "```caddyfile\n")
		for i := 1; i < len(parts); i++ {
			block, _, ok := strings.Cut(parts[i], "```")
			if !ok {
				t.Fatalf("%s: a caddyfile block does not end", p)
			}
			n++
			// The block's indentation as a list item's is not its own.
			block = regexp.MustCompile(`(?m)^  `).ReplaceAllString(block, "")
			if syntax.MatchString(block) || adapt(block) == nil {
				continue
			}
			// The paragraph before the block says where it goes.
			intro := strings.TrimRight(parts[i-1], " \n")
			if j := strings.LastIndex(intro, "\n\n"); j >= 0 {
				intro = intro[j:]
			}
			fits := false
			for _, w := range wraps {
				if strings.Contains(intro, w.where) && adapt(w.before+block+w.after) == nil {
					fits = true
					break
				}
			}
			if !fits {
				t.Errorf("%s: a caddyfile block neither adapts, nor is syntax, nor is a fragment its paragraph places (%q): %v\n%s",
					filepath.Base(p), strings.TrimSpace(intro), adapt(block), block)
			}
		}
	}
	if n < 15 {
		t.Fatalf("%d caddyfile blocks found, want the docs' 15 or more", n)
	}
}

// TestDocsCaddyfileBlocksTagged: a fenced block of README.md or docs/ that
// is Caddyfile (a line opening a block of a codemode option or directive,
// or of a Caddy directive that only a Caddyfile has) is tagged caddyfile,
// so that TestDocsCaddyfileBlocksAdapt checks it. Six were untagged
// (auth.md's syntax of auth, codemode_oauth and codemode_auth, its
// example and transparent-mode blocks, sandbox.md's worker command), and a
// wrong key in them would have gone unnoticed. Blocks of a programming
// language (go, js, json) are not Caddyfile whatever their lines.
func TestDocsCaddyfileBlocksTagged(t *testing.T) {
	pages, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	fence := regexp.MustCompile("(?m)^[ \t]*```([a-z]*)[ \t]*\n")
	opens := regexp.MustCompile(`(?m)^\s*(codemode(_[a-z]+)?|auth|broker|sandbox|meta|credentials|throttle|storage|pool|refresh|local|handle_errors|handle_path|handle|route|reverse_proxy)\b[^{\n]*\{\s*$`)
	checked := 0
	for _, p := range append(pages, "../README.md") {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		for len(text) > 0 {
			m := fence.FindStringSubmatchIndex(text)
			if m == nil {
				break
			}
			lang := text[m[2]:m[3]]
			rest := text[m[1]:]
			end := regexp.MustCompile("(?m)^[ \t]*```[ \t]*$").FindStringIndex(rest)
			if end == nil {
				t.Fatalf("%s: a fenced block does not end", p)
			}
			block := rest[:end[0]]
			text = rest[end[1]:]
			checked++
			switch lang {
			case "caddyfile", "go", "js", "json":
				continue
			}
			if l := opens.FindString(block); l != "" {
				t.Errorf("%s: a block tagged %q opens %q: a Caddyfile, to be tagged caddyfile:\n%s", filepath.Base(p), lang, strings.TrimSpace(l), block)
			}
		}
	}
	if checked < 60 {
		t.Fatalf("%d fenced blocks found, want the docs' 60 or more", checked)
	}
}
