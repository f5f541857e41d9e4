//go:build !linux

package metatools

import "syscall"

// stdioSysProcAttr: no parent-death signal outside Linux; a stdio server
// there ends when its stdin does, if it watches it.
func stdioSysProcAttr() *syscall.SysProcAttr { return nil }
