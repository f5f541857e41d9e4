package engine

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"syscall"

	"github.com/codemode-gateway/caddy-codemode/broker/sandbox/internal/threads"
)

// workerSysProcAttr makes a worker die with its parent's thread (the pipes
// closing is the main guarantee: a worker exits when its stdin ends).
func workerSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// runningExecutable is the file workers are started from: this process's
// own image through /proc/self/exe, which stays the running build when the
// file at its path is replaced (`caddy upgrade`, a package upgrade before
// the restart) or deleted. The path itself would start the new file: a
// worker of another build, or, when that build speaks another worker
// protocol or the file is gone, no worker at all until the restart.
func runningExecutable() (string, error) {
	if _, err := os.Stat(selfExe); err == nil {
		return selfExe, nil
	}
	return os.Executable()
}

// killedOutright reports a worker ended by SIGKILL, which no script can
// send itself: from outside (an operator, the kernel's OOM killer) unless
// the pool killed it, which it records.
func killedOutright(state *os.ProcessState) bool {
	ws, ok := state.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// capMemory limits this process's data segment to its current size plus
// limit bytes (RLIMIT_DATA; RLIMIT_AS does not work for Go, which reserves
// address space it never uses) and sets the Go soft memory limit to 3/4 of
// limit so the collector works hard before the hard cap is reached. Beyond
// the cap the runtime fails to map memory and dies with "out of memory".
func capMemory(limit int64) error {
	// Threads started later need stacks (8 MiB each with cgo) under the cap;
	// the runtime keeps these idle for reuse, and their stacks count in the
	// base rather than against the script. A worker started by the pool
	// began starting them during package initialisation.
	threads.Ensure(runtime.GOMAXPROCS(0) + threads.Spare)
	base, err := dataSegmentBytes()
	if err != nil {
		return err
	}
	hard := uint64(base) + uint64(limit)
	if err := syscall.Setrlimit(syscall.RLIMIT_DATA, &syscall.Rlimit{Cur: hard, Max: hard}); err != nil {
		return fmt.Errorf("setrlimit RLIMIT_DATA %d: %w", hard, err)
	}
	debug.SetMemoryLimit(limit / 4 * 3)
	return nil
}

// dataSegmentBytes reads VmData from /proc/self/status.
func dataSegmentBytes() (int64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("VmData:")); ok {
			v = bytes.TrimSpace(bytes.TrimSuffix(bytes.TrimSpace(v), []byte("kB")))
			kb, err := strconv.ParseInt(string(v), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("parsing VmData %q: %w", v, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("no VmData in /proc/self/status")
}

// processActivity reads from /proc/<pid>/stat whether a process is stopped
// (state T, a SIGSTOP; t, a tracer) and the CPU time it has used (user and
// system, in clock ticks). ok is false when it cannot be read.
func processActivity(pid int) (stopped bool, cpuTicks uint64, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false, 0, false
	}
	// pid (comm) state ppid ... utime stime: comm may hold spaces and
	// parentheses, so the fields are counted after its last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return false, 0, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 13 {
		return false, 0, false
	}
	utime, err1 := strconv.ParseUint(string(f[11]), 10, 64)
	stime, err2 := strconv.ParseUint(string(f[12]), 10, 64)
	if err1 != nil || err2 != nil {
		return false, 0, false
	}
	return f[0][0] == 'T' || f[0][0] == 't', utime + stime, true
}
