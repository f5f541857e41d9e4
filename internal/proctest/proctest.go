// Package proctest reads Linux's /proc for tests that watch processes (a
// gateway's sandbox workers).
package proctest

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
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

// Running reports whether pid is a process that has not ended: a zombie
// has (an orphan's end is reaped by whoever adopted it, which may be
// never in a container).
func Running(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || (b[i+2] != 'Z' && b[i+2] != 'X')
}

// KillLeftovers SIGKILLs those of pids that still run this test binary
// (os.Args[0], as re-executed by the test), so that a test that failed
// leaves no process behind; a pid reused by another program is spared.
func KillLeftovers(tb testing.TB, pids []int) {
	tb.Helper()
	for _, pid := range pids {
		cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if Running(pid) && strings.HasPrefix(string(cmdline), os.Args[0]+"\x00") {
			tb.Logf("killing process %d, left running", pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// PidFile reads the pids a test's processes wrote to file, one a line
// (none when the file is missing).
func PidFile(tb testing.TB, file string) []int {
	tb.Helper()
	b, err := os.ReadFile(file)
	if err != nil && !os.IsNotExist(err) {
		tb.Fatal(err)
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			tb.Fatalf("pid file %s: %q is no pid", file, f)
		}
		pids = append(pids, pid)
	}
	return pids
}
