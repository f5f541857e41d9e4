//go:build !linux

package metatools

import (
	"os"
	"syscall"
)

// stdioSysProcAttr: no parent-death signal and no process group outside
// Linux; a stdio server there ends when its stdin does, if it watches it,
// and the signals of Close reach the server only.
func stdioSysProcAttr() *syscall.SysProcAttr { return nil }

// signalStdioServer sends sig to the server.
func signalStdioServer(p *os.Process, sig syscall.Signal) error { return p.Signal(sig) }

// stdioGroupLeft: without a group of its own, nothing of the server is
// known to outlive it.
func stdioGroupLeft(int) []int { return nil }
