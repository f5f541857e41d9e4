// Package redistest gives tests a real redis-server.
//
// Client returns a client for the server named by CODEMODE_TEST_REDIS_ADDR
// (.ci/run starts one and exports it) or, when that is unset, for a server
// started for the test from redis-server on PATH. Start always starts a
// private server, for tests that stop and restart it. Without a server the
// test fails when CI is set and is skipped otherwise, so a developer without
// Redis can still run the rest of the suite.
package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/codemode-gateway/caddy-codemode/internal/nettest"
)

// EnvAddr names the environment variable holding a shared server's address.
const EnvAddr = "CODEMODE_TEST_REDIS_ADDR"

// Client returns a client of a real Redis and a key prefix unique to this
// test, so that tests sharing one server never see each other's keys.
func Client(tb testing.TB) (*redis.Client, string) {
	tb.Helper()
	addr := os.Getenv(EnvAddr)
	if addr == "" {
		addr = Start(tb).Addr
	}
	c := redis.NewClient(&redis.Options{Addr: addr})
	tb.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		tb.Fatalf("redis at %s: %v", addr, err)
	}
	return c, Prefix(tb)
}

// Prefix returns a key prefix unique to this test run.
func Prefix(tb testing.TB) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "test:" + hex.EncodeToString(b[:]) + ":"
}

// Server is a redis-server process owned by one test.
type Server struct {
	Addr string
	tb   testing.TB
	port int
	dir  string
	cmd  *exec.Cmd
}

// Start starts a private redis-server on a free loopback port; it is stopped
// when the test ends.
func Start(tb testing.TB) *Server {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") != "" {
			tb.Fatalf("redis-server is not on PATH (CI must install it): %v", err)
		}
		tb.Skip("redis-server is not on PATH; install it to run the Redis tests")
	}
	s := &Server{tb: tb, dir: tb.TempDir()}
	for attempt := 0; ; attempt++ {
		s.port = nettest.Port(tb)
		if err := s.run(bin); err == nil {
			break
		} else if attempt == 4 {
			tb.Fatalf("starting redis-server: %v", err)
		}
	}
	s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
	tb.Cleanup(s.Stop)
	return s
}

// Stop kills the server; a stopped server may be restarted.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Pause stops the server (SIGSTOP) without closing its connections, as a
// stalled or frozen Redis: commands sent meanwhile wait in its socket
// buffers and run when it continues (Resume).
func (s *Server) Pause() {
	s.tb.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		s.tb.Fatal(err)
	}
}

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() {
	s.tb.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		s.tb.Fatal(err)
	}
}

// Restart starts the server again on the same address, empty.
func (s *Server) Restart() {
	s.tb.Helper()
	s.Stop()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		s.tb.Fatal(err)
	}
	if err := s.run(bin); err != nil {
		s.tb.Fatalf("restarting redis-server: %v", err)
	}
}

func (s *Server) run(bin string) error {
	cmd := exec.Command(bin,
		"--bind", "127.0.0.1", "--port", strconv.Itoa(s.port),
		"--save", "", "--appendonly", "no", "--dir", s.dir,
		"--logfile", filepath.Join(s.dir, "redis.log"))
	if err := cmd.Start(); err != nil {
		return err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond); err == nil {
			_ = c.Close()
			s.cmd = cmd
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	return fmt.Errorf("redis-server did not listen on %s: %s", addr, log)
}
