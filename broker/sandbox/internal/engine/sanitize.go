package engine

import (
	"regexp"
	"strings"
	"sync"
)

// Sanitization is the one policy for what a script or its caller may learn
// from an error: it is applied to the error a run ends with (message and
// stack) and to every tool error a script catches, whatever raised it (the
// spec's sanitization.removeStackTraces and sanitization.removeFilePaths,
// plus three of this engine's own). The zero value keeps everything.
type Sanitization struct {
	// RemoveStackTraces drops ScriptError.Stack. Default false.
	RemoveStackTraces bool
	// RemoveFilePaths replaces absolute file paths and file URLs with
	// "[path]". Default false.
	RemoveFilePaths bool
	// RemoveHosts replaces URLs with "[url]" and IP addresses and
	// host:port pairs with "[host]" (an upstream's internal address in a
	// dial error). A script's own "plan.js:3:7" positions are kept.
	// Default false.
	RemoveHosts bool
	// RemoveEnvValues replaces the value of environment-like KEY=value
	// pairs (an upper-case name) with "[redacted]". Default false.
	RemoveEnvValues bool
	// RemoveTypeNames replaces Go type names (*json.SyntaxError,
	// net.OpError, map[string]interface {}) with "[type]". Default false.
	RemoveTypeNames bool
}

// Text applies the policy's text rules to s (all but RemoveStackTraces).
func (s Sanitization) Text(t string) string {
	if t == "" {
		return t
	}
	if s.RemoveEnvValues {
		t = envValueRE().ReplaceAllString(t, "${1}${2}=[redacted]")
	}
	if s.RemoveHosts {
		t = removeHosts(t)
	}
	if s.RemoveFilePaths {
		t = RemoveFilePaths(t)
	}
	if s.RemoveTypeNames {
		t = goTypeRE().ReplaceAllString(t, "[type]")
	}
	return t
}

// Error applies the policy to a script error in place.
func (s Sanitization) Error(e *ScriptError) {
	if e == nil {
		return
	}
	e.Message = s.Text(e.Message)
	if s.RemoveStackTraces {
		e.Stack = ""
	} else {
		e.Stack = s.Text(e.Stack)
	}
}

// RemoveFilePaths replaces absolute file paths and file URLs in s with
// "[path]" (sanitization.removeFilePaths).
func RemoveFilePaths(s string) string {
	if s == "" {
		return s
	}
	return filePathRE().ReplaceAllString(s, "${1}[path]")
}

var (
	// filePathRE matches file URLs, Windows paths and absolute Unix paths
	// of at least two components that start a word.
	filePathRE = lazyRegexp(`(^|[\s'"(=,\[<])(file://[^\s'"()<>]+|[A-Za-z]:\\[^\s'"()<>]+|/(?:[\w.@+~-]+/)+[\w.@+~-]*)`)
	// envValueRE matches NAME=value with an upper-case name of two
	// characters or more; the value is quoted or runs to a space.
	envValueRE = lazyRegexp(`(^|[^\w.])([A-Z][A-Z0-9_]+)=("[^"]*"|'[^']*'|[^\s,;'"]+)`)
	// urlRE matches a URL with a scheme other than file (file URLs are
	// paths).
	urlRE = lazyRegexp(`\b(?:[a-zA-Z][a-zA-Z0-9+.-]*)://[^\s'"<>]+`)
	// hostPortRE matches IPv4 addresses (port optional), bracketed IPv6
	// with an optional port, and name:port where the name is localhost or
	// has a dot. The second group is a second ":n", which makes the match
	// a script position (plan.js:3:7), kept as is.
	hostPortRE = lazyRegexp(`\b(?:\d{1,3}(?:\.\d{1,3}){3}(?::\d{1,5})?|(?:localhost|[a-zA-Z0-9-]+(?:\.[a-zA-Z0-9-]+)+):(\d{1,5})(:\d+)?)\b|\[[0-9a-fA-F:.]*:[0-9a-fA-F:.]*\](?::\d{1,5})?`)
	// goTypeRE matches package-qualified Go type names with their pointer,
	// slice and map decorations, and the empty interface.
	goTypeRE = lazyRegexp(`(?:\*|\[\]|map\[[^\]\s]*\])*(?:\b[a-z][a-z0-9]+\.[A-Z]\w*\b|\binterface \{\})`)
)

// lazyRegexp compiles expr on first use: package initialisation runs in
// every worker before its handshake, and compiling these five there was
// ~0.4 M instructions of each start; a worker pays it now when it first
// sanitizes an error, after it is ready.
func lazyRegexp(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}

// removeHosts replaces URLs and addresses; file URLs stay for
// RemoveFilePaths.
func removeHosts(t string) string {
	t = urlRE().ReplaceAllStringFunc(t, func(u string) string {
		if strings.HasPrefix(strings.ToLower(u), "file://") {
			return u
		}
		return "[url]"
	})
	var b strings.Builder
	last := 0
	for _, m := range hostPortRE().FindAllStringSubmatchIndex(t, -1) {
		if m[4] >= 0 {
			continue // name:line:column, a position in a script
		}
		b.WriteString(t[last:m[0]])
		b.WriteString("[host]")
		last = m[1]
	}
	if last == 0 {
		return t
	}
	b.WriteString(t[last:])
	return b.String()
}
