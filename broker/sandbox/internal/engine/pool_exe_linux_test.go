package engine

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// replacedBinaryEnv runs TestWorkersOfAReplacedBinary's child: a gateway
// whose executable file was replaced under it.
const replacedBinaryEnv = "CODEMODE_TEST_REPLACED_BINARY"

// TestWorkersOfAReplacedBinary: a process whose executable file is
// replaced while it runs (`caddy upgrade`, a package upgrade before the
// restart) keeps starting workers of its own build. Started from the path,
// every new worker was the new file: here a program that exits at once,
// so no script ran until the restart (WORKER_STARTUP_FAILED); with a real
// new build, workers of another version.
func TestWorkersOfAReplacedBinary(t *testing.T) {
	if os.Getenv(replacedBinaryEnv) == "1" {
		replacedBinaryChild(t)
		return
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(t.TempDir(), "gateway.test")
	copyFile(t, self, exe)
	cmd := exec.Command(exe, "-test.run=^TestWorkersOfAReplacedBinary$", "-test.v")
	cmd.Env = append(os.Environ(), replacedBinaryEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "script result 2") {
		t.Fatalf("a script after the binary was replaced: %v\n%s", err, out)
	}
}

// replacedBinaryChild replaces its own executable with a program that is
// no worker, then runs a script on a new pool.
func replacedBinaryChild(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(exe); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(exe, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	p, err := NewWorkerPool(&PoolOptions{RuntimePoolOptions: RuntimePoolOptions{MinSize: -1}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	res, err := p.Execute(context.Background(), Request{Code: "return 1 + 1"}, newBlockingHost())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("script result %s", res.Result)
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
