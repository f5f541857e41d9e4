package engine

import (
	"runtime/debug"
	"strings"
	"testing"
)

// TestBuildIdentity: the Caddy binary and a standalone codemode-worker of
// the same source name the same build, whichever tool built them; builds of
// different releases, or a release and a local build, do not.
func TestBuildIdentity(t *testing.T) {
	goja := debug.Module{Path: "github.com/dop251/goja", Version: "v0.0.0-20260917113740-793a2a65c13b"}
	dep := func(v string, replace *debug.Module) *debug.Module {
		return &debug.Module{Path: modulePath, Version: v, Replace: replace}
	}
	caddy := func(ours *debug.Module) *debug.BuildInfo {
		return &debug.BuildInfo{Main: debug.Module{Path: "caddy"}, Deps: []*debug.Module{&goja, ours}}
	}
	standalone := func(v string) *debug.BuildInfo {
		return &debug.BuildInfo{Main: debug.Module{Path: modulePath, Version: v}, Deps: []*debug.Module{&goja}}
	}
	id := computeBuildIdentity
	same := []struct {
		name string
		a, b *debug.BuildInfo
	}{
		{"xcaddy of a release, go install of it", caddy(dep("v1.2.0", nil)), standalone("v1.2.0")},
		{"xcaddy --replace of a checkout, go build there", caddy(dep("v0.0.0-00010101000000-000000000000", &debug.Module{Path: "../caddy-codemode"})), standalone("v0.0.0-20261206172900-3290646abcde+dirty")},
		{"go build of ./cmd/caddy and of ./cmd/codemode-worker", standalone("v0.0.0-20261206172900-3290646abcde"), standalone("(devel)")},
	}
	for _, c := range same {
		if a, b := id(c.a), id(c.b); a != b {
			t.Errorf("%s: %q != %q", c.name, a, b)
		}
	}
	differ := []struct {
		name string
		a, b *debug.BuildInfo
	}{
		{"two releases", caddy(dep("v1.2.0", nil)), standalone("v1.3.0")},
		{"a release and a local build", caddy(dep("v1.2.0", nil)), standalone("(devel)")},
		{"another goja", caddy(dep("v1.2.0", nil)), &debug.BuildInfo{Main: debug.Module{Path: modulePath, Version: "v1.2.0"}, Deps: []*debug.Module{{Path: goja.Path, Version: "v0.0.0-20250101000000-000000000000"}}}},
	}
	for _, c := range differ {
		if a, b := id(c.a), id(c.b); a == b {
			t.Errorf("%s: both %q", c.name, a)
		}
	}
	// A `go test` binary (no dependencies recorded) takes a worker of its
	// module's source.
	if g, w := id(&debug.BuildInfo{Main: debug.Module{Path: modulePath, Version: "(devel)"}}), id(standalone("(devel)")); !sameBuild(g, w) || !sameBuild(w, g) {
		t.Errorf("a test binary %q refuses a worker %q", g, w)
	}
	for _, c := range differ {
		if sameBuild(id(c.a), id(c.b)) {
			t.Errorf("%s: sameBuild", c.name)
		}
	}
	if sameBuild("local goja unknown prelude 84c0b5668c09", "local goja unknown prelude 000000000000") || sameBuild("", "") {
		t.Error("another prelude, or no identity, passes")
	}
	if got := id(caddy(dep("v1.2.0", nil))); !strings.HasPrefix(got, "v1.2.0 goja v0.0.0-20260917113740-793a2a65c13b prelude ") {
		t.Errorf("identity %q", got)
	}
}
