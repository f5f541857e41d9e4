// Package nettest finds free loopback ports for tests and the CI programs
// that start servers of their own.
package nettest

import (
	"net"
	"testing"
)

// FreePort returns a TCP port of 127.0.0.1 that was free when asked: the
// listener that found it is closed, so another process may take it before
// the caller listens on it (rare; a caller that must not fail listens on
// port 0 itself and passes the listener on).
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Port is FreePort for a test, which fails when none is found.
func Port(tb testing.TB) int {
	tb.Helper()
	port, err := FreePort()
	if err != nil {
		tb.Fatal(err)
	}
	return port
}
