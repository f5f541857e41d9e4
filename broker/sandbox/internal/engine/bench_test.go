package engine

import (
	"context"
	"encoding/json"
	"sort"
	"testing"
	"time"

	"github.com/dop251/goja"
)

// benchScript runs code b.N times on engine and reports the median time of
// one execution besides the mean.
func benchScript(b *testing.B, engine Engine, host Host, code string, perOp float64, unit string) {
	b.Helper()
	req := Request{Code: code}
	ctx := context.Background()
	// Warm up (compiles the prelude, starts workers for pooled engines).
	if r, err := engine.Execute(ctx, req, host); err != nil || r.Status != StatusOK {
		b.Fatalf("warm-up: %v %s", err, describeResult(r))
	}
	times := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	cpu := processCPU()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		r, err := engine.Execute(ctx, req, host)
		times = append(times, time.Since(start))
		if err != nil || r.Status != StatusOK {
			b.Fatalf("%v %s", err, describeResult(r))
		}
	}
	b.StopTimer()
	reportCPU(b, processCPU()-cpu)
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	median := times[len(times)/2]
	b.ReportMetric(float64(median.Nanoseconds()), "median-ns/op")
	if perOp > 0 {
		b.ReportMetric(float64(median.Nanoseconds())/perOp, unit)
	}
}

// reportCPU reports the CPU time this process spent per operation
// (cpu-ns/op, garbage collection included): on a machine shared with other
// work it varies much less than the wall time. For the worker engine it is
// the parent's share only.
func reportCPU(b *testing.B, cpu time.Duration) {
	if cpu > 0 {
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
}

// benchEngines lists the engines the benchmarks measure; the worker engine's
// tests add theirs with the same scripts.
func benchInProcess(b *testing.B) Engine {
	e := NewInProcess(&Options{Limits: Limits{MaxToolCalls: 1000}})
	b.Cleanup(func() { _ = e.Close() })
	return e
}

// BenchmarkTrivialScript: `return 1+1` end to end (validation, fresh
// runtime, prelude, run).
func BenchmarkTrivialScript(b *testing.B) {
	benchScript(b, benchInProcess(b), newTestHost(nil), `return 1+1`, 0, "")
}

// BenchmarkTrivialScriptIdle: `return 1+1` arriving at an idle engine, as
// requests usually do (see benchIdle).
func BenchmarkTrivialScriptIdle(b *testing.B) {
	benchIdle(b, benchInProcess(b))
}

// benchIdle runs `return 1+1` b.N times, each 2 ms after the previous one
// answered, and reports the median of the executions alone: the engine
// prepares the next runtime in the gap.
func benchIdle(b *testing.B, e Engine) {
	b.Helper()
	h := newTestHost(nil)
	req := Request{Code: `return 1+1`}
	for range 3 { // warm up (the prelude's compile, a worker's start)
		if r, err := e.Execute(context.Background(), req, h); err != nil || r.Status != StatusOK {
			b.Fatalf("warm-up: %v %s", err, describeResult(r))
		}
	}
	times := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		time.Sleep(2 * time.Millisecond) // the gap between requests
		start := time.Now()
		r, err := e.Execute(context.Background(), req, h)
		times = append(times, time.Since(start))
		if err != nil || r.Status != StatusOK {
			b.Fatalf("%v %s", err, describeResult(r))
		}
	}
	b.StopTimer()
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	b.ReportMetric(float64(times[len(times)/2].Nanoseconds()), "median-ns/op")
}

// BenchmarkAwaitedToolCall: 100 sequential awaited calls of a tool that
// returns at once; median-ns/call is the per-call overhead (it includes 1/100
// of the fixed cost of a script, about BenchmarkTrivialScript).
func BenchmarkAwaitedToolCall(b *testing.B) {
	benchScript(b, benchInProcess(b), newTestHost(echoTools()),
		`let s = 0; for (let i = 0; i < 100; i++) s += (await callTool("echo", {i})).i; return s`, 100, "median-ns/call")
}

// BenchmarkParallel100x10ms: 100 calls of a 10 ms tool through
// __safe_parallel at concurrency 20 (ideal: 5 waves of 10 ms = 50 ms).
func BenchmarkParallel100x10ms(b *testing.B) {
	h := newTestHost(map[string]func(json.RawMessage) (json.RawMessage, error){
		"slow": func(in json.RawMessage) (json.RawMessage, error) {
			time.Sleep(10 * time.Millisecond) // simulated tool latency
			return in, nil
		},
	})
	benchScript(b, benchInProcess(b), h,
		`const r = await __safe_parallel(Array.from({length: 100}, (_, i) => () => callTool("slow", {i})), {maxConcurrency: 20}); return r.length`, 0, "")
}

// BenchmarkResult100KB: serializing a 1000-record result (~130 KB of JSON)
// with the interruptible serializer.
func BenchmarkResult100KB(b *testing.B) {
	benchScript(b, benchInProcess(b), newTestHost(nil), `const r = [];
		for (let i = 0; i < 1000; i++) r.push({id: i, name: "user " + i, email: "u" + i + "@example.com", active: i % 2 == 0, score: i * 1.5, tags: ["a", "b"], addr: {city: "X", zip: "12345"}});
		return r`, 0, "")
}

// loop1e6 sums the numbers below one million: one million loop iterations,
// each a step the step limit counts.
const loop1e6 = `let s = 0; for (let i = 0; i < 1000000; i++) s += i; return s`

// BenchmarkLoop1e6: loop1e6 with the step limit on (the experimental
// preset's 10,000,000 steps; goal under 90 ms). BenchmarkLoop1e6BareGoja
// is the same loop in a bare goja runtime, without step accounting or the
// sandbox: the difference is what the accounting costs.
func BenchmarkLoop1e6(b *testing.B) {
	e := NewInProcess(&Options{Preset: PresetExperimental})
	b.Cleanup(func() { _ = e.Close() })
	benchScript(b, e, newTestHost(nil), loop1e6, 0, "")
}

func BenchmarkLoop1e6BareGoja(b *testing.B) {
	prog := goja.MustCompile("loop", "(function() {"+loop1e6+"})()", true)
	times := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	cpu := processCPU()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		v, err := goja.New().RunProgram(prog)
		times = append(times, time.Since(start))
		if err != nil || v.ToInteger() != 499999500000 {
			b.Fatalf("%v %v", v, err)
		}
	}
	reportCPU(b, processCPU()-cpu)
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	b.ReportMetric(float64(times[len(times)/2].Nanoseconds()), "median-ns/op")
}
