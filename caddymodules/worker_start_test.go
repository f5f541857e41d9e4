package caddymodules

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"
	"github.com/codemode-gateway/caddy-codemode/internal/proctest"
)

// caddyBinary builds ./cmd/caddy once per test binary (seconds with a warm
// build cache); TestMain removes it (removeCaddyBinary). CODEMODE_CADDY_BINARY
// names a prebuilt binary instead, so that two builds can be compared
// interleaved with one test binary (docs/figures.md#worker-start-up), or
// the release build checked.
var caddyBinary = sync.OnceValues(func() (string, error) {
	if bin := os.Getenv("CODEMODE_CADDY_BINARY"); bin != "" {
		return bin, nil
	}
	return buildProgram("./cmd/caddy")
})

// workerBinary builds ./cmd/codemode-worker, the standalone sandbox worker,
// once per test binary; CODEMODE_WORKER_BINARY names a prebuilt one instead
// (as CODEMODE_CADDY_BINARY does for ./cmd/caddy).
var workerBinary = sync.OnceValues(func() (string, error) {
	if bin := os.Getenv("CODEMODE_WORKER_BINARY"); bin != "" {
		return bin, nil
	}
	return buildProgram("./cmd/codemode-worker")
})

// buildProgram builds the command pkg of this module into a temporary
// directory that removeCaddyBinary removes.
func buildProgram(pkg string) (string, error) {
	dir, err := os.MkdirTemp("", "codemode-build-")
	if err != nil {
		return "", err
	}
	builtDirs.Lock()
	builtDirs.dirs = append(builtDirs.dirs, dir)
	builtDirs.Unlock()
	bin := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %v: %s", pkg, err, out)
	}
	return bin, nil
}

var builtDirs struct {
	sync.Mutex
	dirs []string
}

func removeCaddyBinary() {
	builtDirs.Lock()
	defer builtDirs.Unlock()
	for _, dir := range builtDirs.dirs {
		_ = os.RemoveAll(dir)
	}
}

// initTrace runs command with GODEBUG=inittrace=1, as a sandbox worker the
// pool started when worker is set, and returns its package inits, slowest
// first, and their total.
func initTrace(t testing.TB, command []string, worker bool) (lines []initLine, total float64) {
	t.Helper()
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1")
	if worker {
		cmd.Env = append(cmd.Env, "CODEMODE_SANDBOX_WORKER=1")
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	_ = cmd.Run() // stdin is empty: a worker exits at once
	sc := bufio.NewScanner(&stderr)
	for sc.Scan() {
		// init <pkg> @<start> ms, <clock> ms clock, <bytes> bytes, <allocs> allocs
		f := strings.Fields(sc.Text())
		if len(f) < 10 || f[0] != "init" {
			continue
		}
		ms, _ := strconv.ParseFloat(f[4], 64)
		b, _ := strconv.ParseInt(f[7], 10, 64)
		lines = append(lines, initLine{pkg: f[1], ms: ms, bytes: b})
		total += ms
	}
	sort.Slice(lines, func(i, j int) bool { return lines[i].ms > lines[j].ms })
	return lines, total
}

// notInWorker are packages a worker does not initialise: the sandbox's
// logging, metrics and tracing, HTTP, and the two costly inits Go's order
// put before the sandbox while it imported them. (Leaf packages of zap,
// OpenTelemetry and Prometheus that import only what goja imports still
// initialise before the engine in a Caddy build: they cost ~0.1 ms.)
var notInWorker = []string{
	"go.uber.org/zap",
	"github.com/prometheus/client_golang/prometheus",
	"go.opentelemetry.io/otel/internal/global",
	"net/http",
	"github.com/santhosh-tekuri/jsonschema/v6",
	"golang.org/x/crypto/x509roots/fallback",
}

type initLine struct {
	pkg   string
	ms    float64
	bytes int64
}

// TestWorkerInitTrace: the packages of this module do nothing expensive at
// init, which every process start pays, sandbox workers included. It
// checks what does not depend on the machine's speed: no package of ours
// allocates more than 256 KiB at init (a template parsed, a table built, a
// key derived: the bcrypt stand-in hash allocated 4 KiB but took 58 ms, so
// the clock times are logged for the reader too), in a Caddy process that
// initialises everything (`caddy version`). And a worker initialises less:
// a Caddy-binary worker is served from the init of broker/sandbox/workerinit,
// which imports only the sandbox's engine (goja, the prelude, the standard
// library), so Go initialises it before Caddy's commands, this module's
// Caddy modules, and the libraries of logging, metrics, tracing and HTTP and
// whatever sorts between them (the JSON Schema validator, x509roots): none
// of those initialises in a worker, Caddy-binary or standalone, while each
// does in `caddy version`.
func TestWorkerInitTrace(t *testing.T) {
	bin, err := caddyBinary()
	if err != nil {
		t.Fatalf("building ./cmd/caddy: %v", err)
	}
	lines, total := initTrace(t, []string{bin, "version"}, false)
	if len(lines) == 0 {
		t.Fatal("no inittrace output")
	}
	for i, l := range lines {
		if i < 8 {
			t.Logf("%6.2f ms %9d B  %s", l.ms, l.bytes, l.pkg)
		}
		if strings.HasPrefix(l.pkg, "github.com/codemode-gateway/") && l.bytes > 256<<10 {
			t.Errorf("%s allocates %d bytes at init", l.pkg, l.bytes)
		}
	}
	t.Logf("all package inits of caddy version: %.1f ms", total)
	for _, pkg := range notInWorker {
		if !slices.ContainsFunc(lines, func(l initLine) bool { return l.pkg == pkg }) {
			t.Errorf("caddy version did not initialise %s: the workers' check of it checks nothing", pkg)
		}
	}

	const sandboxPkg = "github.com/codemode-gateway/caddy-codemode/broker/sandbox/internal/engine"
	worker, total := initTrace(t, []string{bin, sandbox.WorkerCommandName}, true)
	if !slices.ContainsFunc(worker, func(l initLine) bool { return l.pkg == sandboxPkg }) {
		t.Fatalf("a Caddy-binary worker did not initialise %s (%d inits)", sandboxPkg, len(worker))
	}
	for _, l := range worker {
		if l.pkg == "github.com/caddyserver/caddy/v2/cmd" || strings.HasPrefix(l.pkg, "github.com/codemode-gateway/caddy-codemode/caddymodules") {
			t.Errorf("a Caddy-binary worker initialised %s: it is served before", l.pkg)
		}
		if slices.Contains(notInWorker, l.pkg) {
			t.Errorf("a Caddy-binary worker initialised %s", l.pkg)
		}
		// The sandbox's own init runs in every worker before its
		// handshake: its sanitizer's regexps compile on first use (they
		// were 55 KiB and 0.4 M instructions of the init here).
		if l.pkg == sandboxPkg && l.bytes > 32<<10 {
			t.Errorf("a Caddy-binary worker's init of %s allocates %d bytes", l.pkg, l.bytes)
		}
	}
	t.Logf("a Caddy-binary worker: %d package inits of %d, %.1f ms", len(worker), len(lines), total)

	standalone, err := workerBinary()
	if err != nil {
		t.Fatalf("building ./cmd/codemode-worker: %v", err)
	}
	worker, total = initTrace(t, []string{standalone}, true)
	if !slices.ContainsFunc(worker, func(l initLine) bool { return l.pkg == sandboxPkg }) {
		t.Fatalf("the standalone worker did not initialise %s (%d inits)", sandboxPkg, len(worker))
	}
	for _, l := range worker {
		if slices.Contains(notInWorker, l.pkg) {
			t.Errorf("the standalone worker initialised %s", l.pkg)
		}
	}
	t.Logf("the standalone worker: %d package inits, %.1f ms", len(worker), total)
}

// BenchmarkWorkerStart measures a Caddy-binary sandbox worker's start, what
// a pool pays for each new worker: "ready" from exec to the worker's
// handshake (pool set-up included, a few microseconds), "first_script" to
// the result of a first `return 1 + 1` on it. Besides the wall time per
// start it reports the fastest start and the median CPU time the worker
// used until then (all its threads, from /proc): on a machine shared with
// other jobs the wall time measures the machine as much as the worker, the
// CPU time much less. The standalone_ variants start ./cmd/codemode-worker,
// the worker without Caddy, instead.
//
//	go test -run '^$' -bench WorkerStart -benchtime 50x ./caddymodules/
func BenchmarkWorkerStart(b *testing.B) {
	bin, err := caddyBinary()
	if err != nil {
		b.Fatalf("building ./cmd/caddy: %v", err)
	}
	standalone, err := workerBinary()
	if err != nil {
		b.Fatalf("building ./cmd/codemode-worker: %v", err)
	}
	for _, program := range [][]string{{bin, sandbox.WorkerCommandName}, {standalone}} {
		for _, firstScript := range []bool{false, true} {
			name := "ready"
			if firstScript {
				name = "first_script"
			}
			if len(program) == 1 {
				name = "standalone_" + name
			}
			benchmarkWorkerStart(b, name, program, firstScript)
		}
	}
}

func benchmarkWorkerStart(b *testing.B, name string, command []string, firstScript bool) {
	b.Run(name, func(b *testing.B) {
		fastest := time.Duration(1 << 62)
		var cpu []time.Duration
		for b.Loop() {
			t0 := time.Now()
			p, err := sandbox.NewWorkerPool(&sandbox.PoolOptions{
				RuntimePoolOptions: sandbox.RuntimePoolOptions{MinSize: 1, MaxSize: 1},
				Command:            command,
				SpareWorkers:       -1,
			})
			if err != nil {
				b.Fatal(err)
			}
			if firstScript {
				res, err := p.Execute(context.Background(), sandbox.Request{Code: "return 1 + 1"}, noTools{})
				if err != nil || res.Status != sandbox.StatusOK {
					b.Fatalf("first script: %+v %v", res, err)
				}
			}
			fastest = min(fastest, time.Since(t0))
			b.StopTimer()
			if kids := childPIDs(os.Getpid()); len(kids) == 1 {
				cpu = append(cpu, processCPU(kids[0]))
			}
			_ = p.Close()
			b.StartTimer()
		}
		b.ReportMetric(float64(fastest)/1e6, "fastest-ms")
		if len(cpu) > 0 {
			slices.Sort(cpu)
			b.ReportMetric(float64(cpu[len(cpu)/2])/1e6, "cpu-ms")
		}
	})
}

// noTools is a Host without tools.
type noTools struct{}

func (noTools) LookupTool(string) (sandbox.ToolInfo, bool) { return sandbox.ToolInfo{}, false }
func (noTools) CallTool(context.Context, sandbox.ToolCall) (json.RawMessage, error) {
	return nil, errors.New("no tools")
}

// childPIDs lists the processes whose parent is ppid.
func childPIDs(ppid int) []int { return proctest.Children(ppid) }

// processCPU is the CPU time pid's threads have used (schedstat: ns on a
// CPU).
func processCPU(pid int) time.Duration {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	var total time.Duration
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		if f := strings.Fields(string(b)); len(f) > 0 {
			ns, _ := strconv.ParseInt(f[0], 10, 64)
			total += time.Duration(ns)
		}
	}
	return total
}
