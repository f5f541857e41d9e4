// Package proctest reads Linux's /proc for tests that watch processes (a
// gateway's sandbox workers).
package proctest

import (
	"bytes"
	"os"
	"strconv"
	"strings"
)

// Children lists the processes whose parent is ppid (none where /proc
// cannot be read).
func Children(ppid int) []int {
	entries, _ := os.ReadDir("/proc")
	var kids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so split after it.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(ppid) {
			kids = append(kids, pid)
		}
	}
	return kids
}
