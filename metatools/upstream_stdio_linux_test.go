package metatools

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
)

// stdioGatewayEnv makes the test binary a gateway of one stdio upstream
// (this test binary in a hostile mode, its pid written to the file the
// variable names) that prints "ready" once the upstream answers, then waits
// to be killed.
const stdioGatewayEnv = "METATOOLS_TEST_STDIO_GATEWAY"

func serveStdioGatewayForTest(pids string) {
	os.Unsetenv(stdioGatewayEnv) // the upstream is no gateway
	u, err := NewUpstream(UpstreamConfig{Name: "orphan", Command: os.Args[0], Args: []string{"-test.run=^$"},
		Env: []string{stdioModeEnv + "=lingering", stdioPidsEnv + "=" + pids}}, zap.NewNop())
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	u.Start(ctx)
	if _, err := callConnected(ctx, u, "echo"); err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	fmt.Println("ready")
	<-ctx.Done()
}

// TestStdioUpstreamEndsWithItsGateway: a stdio upstream that stays after
// its stdin closes, whose gateway is SIGKILLed (no Close, nothing reaped),
// gets SIGTERM from the kernel and ends, instead of running on with no one
// to talk to.
func TestStdioUpstreamEndsWithItsGateway(t *testing.T) {
	pids := filepath.Join(t.TempDir(), "pids")
	gw := exec.Command(os.Args[0], "-test.run=^$")
	gw.Env = append(os.Environ(), stdioGatewayEnv+"="+pids)
	out, err := gw.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := gw.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		gw.Process.Kill()
		gw.Wait()
		t.Fatalf("gateway did not connect its upstream: %q", line)
	}
	b, err := os.ReadFile(pids)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("pid file %q: %v", b, err)
	}
	if err := gw.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	gw.Wait()
	deadline := time.Now().Add(30 * time.Second)
	for processRunning(pid) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("upstream %d still runs 30 s after its gateway was killed", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// processRunning reports whether pid is a process that has not ended (an
// orphan's end is reaped by whoever adopts it; a zombie has ended).
func processRunning(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}
