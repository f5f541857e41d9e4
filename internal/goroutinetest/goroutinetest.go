// Package goroutinetest counts a test process's goroutines, for tests that
// check that nothing is left running after a request or a config load.
package goroutinetest

import (
	"runtime"
	"slices"
	"strings"
)

// Count counts this process's goroutines, less those whose stack mentions
// one of skip (goroutines that live as long as the process, or a bounded
// reserve such as idle runners), and returns the stacks it counted.
func Count(skip ...string) (int, string) {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var kept []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if !slices.ContainsFunc(skip, func(s string) bool { return strings.Contains(g, s) }) {
			kept = append(kept, g)
		}
	}
	return len(kept), strings.Join(kept, "\n\n")
}
