package engine

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"runtime/debug"
	"strings"
	"sync"

	"github.com/codemode-gateway/caddy-codemode/broker/sandbox/internal/prelude"
)

// modulePath is this module's path, looked up in a binary's build
// information.
const modulePath = "github.com/codemode-gateway/caddy-codemode"

// buildIdentity names the sandbox a binary contains, so that a pool refuses
// a worker program of another build (a standalone codemode-worker left at
// an older version when Caddy was upgraded): its prelude, goja, and this
// module's version when both are releases. It is the same in the Caddy
// binary and in a codemode-worker built from the same source, whatever the
// build tool (go build, go install, xcaddy with --replace). A variable so
// that a test worker can pretend to be another build.
var buildIdentity = sync.OnceValue(func() string {
	bi, _ := debug.ReadBuildInfo()
	return computeBuildIdentity(bi)
})

// pseudoVersion matches a Go pseudo-version (v0.0.0-20260101000000-abcdef123456
// and its variants), which a local build stamps from its VCS state.
var pseudoVersion = regexp.MustCompile(`\d{14}-[0-9a-f]{12}`)

func computeBuildIdentity(bi *debug.BuildInfo) string {
	sum := sha256.Sum256([]byte(prelude.Source))
	module, goja := "local", "unknown"
	if bi != nil {
		if bi.Main.Path == modulePath {
			module = releaseVersion(bi.Main.Version, nil)
		}
		for _, d := range bi.Deps {
			switch d.Path {
			case modulePath:
				module = releaseVersion(d.Version, d.Replace)
			case "github.com/dop251/goja":
				goja = d.Version
			}
		}
	}
	return module + " goja " + goja + " prelude " + hex.EncodeToString(sum[:6])
}

// sameBuild reports whether a worker of build identity w may serve a
// gateway of identity g: the same prelude and module version, and the same
// goja where both binaries know it (a `go test` binary records no
// dependencies).
func sameBuild(g, w string) bool {
	gf, wf := strings.Fields(g), strings.Fields(w)
	if len(gf) != 5 || len(wf) != 5 {
		return false
	}
	for i := range gf {
		if gf[i] != wf[i] && (i != 2 || gf[i] != "unknown" && wf[i] != "unknown") {
			return false
		}
	}
	return true
}

// releaseVersion is v if it is a release (a tag, not a local build), else
// "local": a local build's version says little (a pseudo-version from the
// VCS, "(devel)", or a replaced module's placeholder), so two local builds
// are told apart by the prelude's hash alone.
func releaseVersion(v string, replace *debug.Module) string {
	if replace != nil || v == "" || v == "(devel)" || strings.Contains(v, "+") || pseudoVersion.MatchString(v) {
		return "local"
	}
	return v
}
