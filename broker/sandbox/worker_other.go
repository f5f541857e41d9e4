//go:build !linux

package sandbox

import (
	"runtime/debug"
	"syscall"
)

func workerSysProcAttr() *syscall.SysProcAttr { return nil }

// capMemory only sets the Go soft memory limit: the hard cap (RLIMIT_DATA
// read against /proc) is implemented for Linux only.
func capMemory(limit int64) error {
	debug.SetMemoryLimit(limit / 4 * 3)
	return nil
}
