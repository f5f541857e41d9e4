package metatools

import "syscall"

// stdioSysProcAttr makes a stdio upstream server get SIGTERM when the
// gateway dies without closing it (SIGKILL, the OOM killer, a crash):
// its stdin then ends too, but a server that does not watch it would be
// left running with no one to talk to. SIGTERM rather than the sandbox
// workers' SIGKILL, so that the server can clean up as on a normal stop.
// (Pdeathsig follows the thread that started the process; Go ends a
// thread only when a goroutine locked to it exits, which the gateway's
// code does not do.)
func stdioSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
