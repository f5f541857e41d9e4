package nettest

import (
	"net"
	"strconv"
	"testing"
)

// TestPortIsFree: the port found can be listened on at once, and two
// ports found one after the other while the first is held differ.
func TestPortIsFree(t *testing.T) {
	port := Port(t)
	if port <= 0 || port > 65535 {
		t.Fatalf("port %d", port)
	}
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		t.Fatalf("listening on the port found: %v", err)
	}
	defer l.Close()
	if other := Port(t); other == port {
		t.Fatalf("port %d found again while it is held", port)
	}
}
