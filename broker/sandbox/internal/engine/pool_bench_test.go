package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Benchmarks of the worker engine. By default the workers are this test
// binary; CODEMODE_WORKER_CMD="/path/to/caddy codemode-worker" measures a
// real Caddy build instead.

func benchPool(b *testing.B, size int) *workerPool {
	b.Helper()
	return benchPoolWith(b, size, &Options{Limits: Limits{MaxToolCalls: 1000}})
}

// benchPoolWith is benchPool with the workers' engine options.
func benchPoolWith(b *testing.B, size int, engine *Options) *workerPool {
	b.Helper()
	opts := PoolOptions{
		RuntimePoolOptions: RuntimePoolOptions{MinSize: size, MaxSize: size},
		Engine:             engine,
	}
	if cmd := os.Getenv("CODEMODE_WORKER_CMD"); cmd != "" {
		opts.Command = strings.Fields(cmd)
	}
	p, err := newWorkerPool(&opts, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = p.Close() })
	return p
}

// benchWorkerScript runs code b.N times and reports the median besides the
// mean; perOp divides the median into a per-item figure.
func benchWorkerScript(b *testing.B, e Engine, host Host, code string, perOp float64, unit string) {
	b.Helper()
	req := Request{Code: code}
	ctx := context.Background()
	for range 3 { // warm up the worker
		if r, err := e.Execute(ctx, req, host); err != nil || r.Status != StatusOK {
			b.Fatalf("warm-up: %v %+v", err, r)
		}
	}
	times := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0, wcpu0 := processCPU(), workersCPU(e)
	for i := 0; i < b.N; i++ {
		start := time.Now()
		r, err := e.Execute(ctx, req, host)
		times = append(times, time.Since(start))
		if err != nil || r.Status != StatusOK {
			b.Fatalf("%v %+v", err, r)
		}
	}
	b.StopTimer()
	reportCPU(b, processCPU()-cpu0)
	if wcpu := workersCPU(e) - wcpu0; wcpu > 0 {
		b.ReportMetric(float64(wcpu.Nanoseconds())/float64(b.N), "worker-cpu-ns/op")
	}
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	median := times[len(times)/2]
	b.ReportMetric(float64(median.Nanoseconds()), "median-ns/op")
	if perOp > 0 {
		b.ReportMetric(float64(median.Nanoseconds())/perOp, unit)
	}
}

// workersCPU is the CPU time the live workers of e (a worker pool) have
// used so far, read from /proc/<pid>/task/*/schedstat (Linux; 0 elsewhere):
// with the parent's cpu-ns/op it gives what an execution costs both
// processes, which varies much less than the wall time on a shared machine.
func workersCPU(e Engine) time.Duration {
	p, ok := e.(*workerPool)
	if !ok {
		return 0
	}
	p.mu.Lock()
	pids := make([]int, 0, len(p.all))
	for w := range p.all {
		pids = append(pids, w.pid)
	}
	p.mu.Unlock()
	var total time.Duration
	for _, pid := range pids {
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
		for _, f := range tasks {
			b, err := os.ReadFile(f)
			fields := strings.Fields(string(b))
			if err != nil || len(fields) == 0 {
				continue
			}
			if ns, err := strconv.ParseInt(fields[0], 10, 64); err == nil {
				total += time.Duration(ns)
			}
		}
	}
	return total
}

// BenchmarkWorkerTrivialScript: `return 1+1` through a worker process
// (goal: median under 0.5 ms).
func BenchmarkWorkerTrivialScript(b *testing.B) {
	benchWorkerScript(b, benchPool(b, 1), newTestHost(nil), `return 1+1`, 0, "")
}

// BenchmarkWorkerLoop1e6: BenchmarkLoop1e6 through a worker, the default
// engine (same preset and step limit); a worker paces its collector
// (worker_gc.go), which the in-process engine leaves to its host process.
func BenchmarkWorkerLoop1e6(b *testing.B) {
	benchWorkerScript(b, benchPoolWith(b, 1, &Options{Preset: PresetExperimental}), newTestHost(nil), loop1e6, 0, "")
}

// BenchmarkWorkerTrivialScriptIdle: `return 1+1` arriving at an idle worker
// 2 ms after the previous answer (see benchIdle).
func BenchmarkWorkerTrivialScriptIdle(b *testing.B) {
	benchIdle(b, benchPool(b, 1))
}

// BenchmarkWorkerAwaitedToolCall: 100 sequential awaited calls of a tool
// that returns at once. The per-call overhead (goal under 30 µs) is
// (median - BenchmarkWorkerTrivialScript median) / 100.
func BenchmarkWorkerAwaitedToolCall(b *testing.B) {
	benchWorkerScript(b, benchPool(b, 1), newTestHost(echoTools()),
		`let s = 0; for (let i = 0; i < 100; i++) s += (await callTool("echo", {i})).i; return s`, 100, "median-ns/call")
}

// BenchmarkWorkerConcurrentToolCalls: 100 calls of a tool that returns at
// once, issued together (Promise.all); median-ns/call is the median script
// over 100.
func BenchmarkWorkerConcurrentToolCalls(b *testing.B) {
	benchWorkerScript(b, benchPool(b, 1), newTestHost(echoTools()),
		`const r = await Promise.all(Array.from({length: 100}, (_, i) => callTool("echo", {i}))); return r.length`, 100, "median-ns/call")
}

// BenchmarkWorkerParallel100x10ms: 100 tool calls of 10 ms each through
// __safe_parallel at concurrency 20 (ideal 5 waves of 10 ms = 50 ms; goal
// under 60 ms).
func BenchmarkWorkerParallel100x10ms(b *testing.B) {
	h := newTestHost(map[string]func(json.RawMessage) (json.RawMessage, error){
		"slow": func(in json.RawMessage) (json.RawMessage, error) {
			time.Sleep(10 * time.Millisecond)
			return in, nil
		},
	})
	benchWorkerScript(b, benchPool(b, 1), h,
		`const r = await __safe_parallel(Array.from({length: 100}, (_, i) => () => callTool("slow", {i})), {maxConcurrency: 20}); return r.length`, 0, "")
}

// BenchmarkWorkerIdlePoolMemory reports the resident memory (VmRSS) of an
// idle pool's workers after each has run one script.
func BenchmarkWorkerIdlePoolMemory(b *testing.B) {
	for _, n := range []int{1, 4} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			p := benchPool(b, n)
			h := newTestHost(echoTools())
			// Run one script on every worker at once.
			done := make(chan struct{}, n)
			for range n {
				go func() {
					_, _ = p.Execute(context.Background(), Request{Code: `await callTool("echo", {}); return 1`}, h)
					done <- struct{}{}
				}()
			}
			for range n {
				<-done
			}
			waitIdleRelease()
			for i := 0; i < b.N; i++ {
				var rss, anon int64
				p.mu.Lock()
				pids := make([]int, 0, len(p.all))
				for w := range p.all {
					pids = append(pids, w.pid)
				}
				p.mu.Unlock()
				for _, pid := range pids {
					rss += procStatusKB(b, pid, "VmRSS:")
					anon += procStatusKB(b, pid, "RssAnon:")
				}
				b.ReportMetric(float64(rss)/float64(len(pids)), "rss-kB/worker")
				b.ReportMetric(float64(rss), "rss-kB/pool")
				// RssAnon excludes the executable's pages, which the page
				// cache shares between workers.
				b.ReportMetric(float64(anon)/float64(len(pids)), "anon-kB/worker")
			}
		})
	}
}

// waitIdleRelease waits until idle workers have returned the memory their
// start-up left behind to the OS (releaseWhenIdle), so that what a
// benchmark reads next is what an idle worker holds.
func waitIdleRelease() {
	time.Sleep(4 * idleReleaseDelay)
}

// procStatusKB reads one kB field of /proc/<pid>/status.
func procStatusKB(b *testing.B, pid int, field string) int64 {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		b.Skip("no /proc")
	}
	for _, line := range bytes.Split(raw, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte(field)); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(string(v)), "kB")), 10, 64)
			return n
		}
	}
	return 0
}

// BenchmarkWorkerProtocolCall: 100 sequential tool calls from a scripted
// worker without goja (fakeEngine): the protocol's own cost per call round
// trip (worker -> parent -> host -> worker).
func BenchmarkWorkerProtocolCall(b *testing.B) {
	p, _ := newFakePool(b, PoolOptions{})
	benchWorkerScript(b, p, newBlockingHost(), "calls echo 100", 100, "median-ns/call")
}

// BenchmarkWorkerProtocolCall100KB: 10 sequential tool calls from a
// scripted worker without goja, each sending 100 KB of input that the
// tool returns as its result: the protocol's cost for large frames.
func BenchmarkWorkerProtocolCall100KB(b *testing.B) {
	p, _ := newFakePool(b, PoolOptions{})
	benchWorkerScript(b, p, newBlockingHost(), "bigcalls echo 10 100000", 10, "median-ns/call")
}

// BenchmarkWorkerProtocolExec: one execution round trip of a scripted
// worker without goja.
func BenchmarkWorkerProtocolExec(b *testing.B) {
	p, _ := newFakePool(b, PoolOptions{})
	benchWorkerScript(b, p, newBlockingHost(), "ok 2", 0, "")
}

// BenchmarkWaitingSessions: 1,000 scripts of 1,000 principals wait for a
// tool result (a caller who answers later) in a pool with the default
// options, while another principal runs trivial scripts. It reports the
// workers' private memory per waiting script (RssAnon of every worker,
// minus what the same workers held before the scripts started) and the
// trivial scripts' latency (median, p99) meanwhile. Each iteration is one
// trivial script.
func BenchmarkWaitingSessions(b *testing.B) {
	opts := PoolOptions{}
	if cmd := os.Getenv("CODEMODE_WORKER_CMD"); cmd != "" {
		opts.Command = strings.Fields(cmd)
	}
	if n, _ := strconv.Atoi(os.Getenv("CODEMODE_SESSIONS_PER_WORKER")); n > 0 {
		opts.SessionsPerWorker = n
	}
	p, err := newWorkerPool(&opts, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	anon := func() (kb int64, workers int) {
		p.mu.Lock()
		pids := make([]int, 0, len(p.all))
		for w := range p.all {
			pids = append(pids, w.pid)
		}
		p.mu.Unlock()
		for _, pid := range pids {
			kb += procStatusKB(b, pid, "RssAnon:")
		}
		return kb, len(pids)
	}
	h := newGateHost()
	ctx := context.Background()
	wantOK(b, mustRun(b, p, "return 1", h), "1")
	waitIdleRelease()
	beforeKB, _ := anon()
	const waiting = 1000
	results := make(chan *Result, waiting)
	for i := range waiting {
		go func() {
			r, err := p.Execute(ctx, Request{Code: `const a = await callTool("wait", {gate: "g"}); return a`, Principal: "w" + strconv.Itoa(i)}, h)
			if err != nil {
				r = &Result{Status: StatusRuntimeError, Error: &ScriptError{Message: err.Error()}}
			}
			results <- r
		}()
	}
	for range waiting {
		<-h.started
	}
	time.Sleep(500 * time.Millisecond) // let the workers settle after the burst
	afterKB, workers := anon()
	times := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		r, err := p.Execute(ctx, Request{Code: "return 1 + 1", Principal: "other"}, h)
		times = append(times, time.Since(start))
		if err != nil || r.Status != StatusOK {
			b.Fatalf("%v %+v", err, r)
		}
	}
	b.StopTimer()
	close(h.gate("g"))
	for range waiting {
		if r := <-results; r.Status != StatusOK {
			b.Fatalf("waiting script: %s", describeResult(r))
		}
	}
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	b.ReportMetric(float64(times[len(times)/2].Nanoseconds()), "median-ns/op")
	b.ReportMetric(float64(times[len(times)*99/100].Nanoseconds()), "p99-ns/op")
	b.ReportMetric(float64(afterKB-beforeKB)*1024/waiting, "private-bytes/waiting")
	b.ReportMetric(float64(workers), "workers")
}

// BenchmarkWorkerInFlight8: `return 1+1` from 8 callers at once through a
// pool of 4 workers; reports executions per second.
func BenchmarkWorkerInFlight8(b *testing.B) {
	p := benchPool(b, 4)
	h := newTestHost(nil)
	req := Request{Code: `return 1+1`}
	ctx := context.Background()
	for range 8 {
		if r, err := p.Execute(ctx, req, h); err != nil || r.Status != StatusOK {
			b.Fatalf("warm-up: %v %+v", err, r)
		}
	}
	var next atomic.Int64
	errs := make(chan error, 8)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				if r, err := p.Execute(ctx, req, h); err != nil || r.Status != StatusOK {
					errs <- fmt.Errorf("%v %+v", err, r)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "exec/s")
}

// BenchmarkWorkerRSSGrowth1000: the growth of a worker's resident memory
// (VmRSS) over 1,000 executions of a script that allocates and awaits a tool
// call, after 10 warm-up runs. One iteration is 1,000 executions.
func BenchmarkWorkerRSSGrowth1000(b *testing.B) {
	p := benchPool(b, 1)
	h := newTestHost(echoTools())
	req := Request{Code: `const a = []; for (let i = 0; i < 100; i++) a.push({i, s: "x" + i}); return (await callTool("echo", {n: a.length})).n`}
	ctx := context.Background()
	run := func(n int) {
		for range n {
			if r, err := p.Execute(ctx, req, h); err != nil || r.Status != StatusOK {
				b.Fatalf("%v %+v", err, r)
			}
		}
	}
	rss := func() (kb int64) {
		p.mu.Lock()
		defer p.mu.Unlock()
		for w := range p.all {
			kb += procStatusKB(b, w.pid, "VmRSS:")
		}
		return kb
	}
	run(10)
	var growth int64
	for i := 0; i < b.N; i++ {
		before := rss()
		run(1000)
		growth += rss() - before
	}
	b.ReportMetric(float64(growth)/float64(b.N)/1024, "rss-growth-MB")
}
