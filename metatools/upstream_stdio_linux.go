package metatools

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
)

// stdioSysProcAttr starts a stdio upstream server in a process group of
// its own, so that closing it signals what it started too (npx's node,
// uvx's python, a helper it spawned): a signal to the server alone left
// them running. It also makes the server get SIGTERM when the gateway dies
// without closing it (SIGKILL, the OOM killer, a crash): its stdin then
// ends too, but a server that does not watch it would be left running with
// no one to talk to. SIGTERM rather than the sandbox workers' SIGKILL, so
// that the server can clean up as on a normal stop. (Pdeathsig follows the
// thread that started the process; Go ends a thread only when a goroutine
// locked to it exits, which the gateway's code does not do.)
func stdioSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM, Setpgid: true}
}

// signalStdioServer sends sig to every process of the server's group
// (pid is the server's, the group's id).
func signalStdioServer(p *os.Process, sig syscall.Signal) error {
	return syscall.Kill(-p.Pid, sig)
}

// stdioGroupLeft lists the processes of group pgid that have not ended (a
// zombie has: it waits only for whoever adopted it to reap it). It reads
// /proc, so it costs a read per process of the system: it runs only while
// a server that has exited left processes in its group.
func stdioGroupLeft(pgid int) []int {
	entries, _ := os.ReadDir("/proc")
	var left []int
	want := strconv.Itoa(pgid)
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // ended meanwhile
		}
		// pid (comm) state ppid pgrp ...: comm may hold spaces and ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := bytes.Fields(b[i+1:])
		if len(f) > 2 && string(f[2]) == want && string(f[0]) != "Z" && string(f[0]) != "X" {
			left = append(left, pid)
		}
	}
	return left
}
