//go:build !linux

package engine

import (
	"os"
	"runtime/debug"
	"syscall"
)

func workerSysProcAttr() *syscall.SysProcAttr { return nil }

// runningExecutable is the file workers are started from: this
// executable's path.
func runningExecutable() (string, error) { return os.Executable() }

// killedOutright: exit statuses are not told apart here; no retry.
func killedOutright(*os.ProcessState) bool { return false }

// capMemory only sets the Go soft memory limit: the hard cap (RLIMIT_DATA
// read against /proc) is implemented for Linux only.
func capMemory(limit int64) error {
	debug.SetMemoryLimit(limit / 4 * 3)
	return nil
}

// processActivity: a process's state is read from /proc, on Linux only.
func processActivity(int) (stopped bool, cpuTicks uint64, ok bool) { return false, 0, false }
