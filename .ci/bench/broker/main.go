// Command broker is the broker's load program: it starts a broker on a
// loopback port (in-process engine, demo tools, in-memory sessions) and
// drives it over HTTP.
//
//	go run ./.ci/bench/broker [-sessions 1000] [-calls 10] [-trivial 20000] [-concurrency 64]
//	go run ./.ci/bench/broker -url http://localhost:8080/broker   # a running gateway
//
// Phase 1 runs -sessions executions at once, each making -calls tool calls
// (math:add), and reports executions per second and p50/p99 latency.
// Phase 2 runs -trivial executions of `return 1` from -concurrency clients.
// Finally it closes the broker and reports goroutines and heap against the
// baseline taken before the broker started. -sessions 0 or -trivial 0 leaves
// that phase out. With -json the last line of the output is the figures as
// one JSON object ({"metrics": {name: {"value", "unit"}}}), which
// go run ./.ci/bench reads, and a failed execution fails the run.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/codemode-gateway/caddy-codemode/broker"
	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"
)

func main() {
	sessions := flag.Int("sessions", 1000, "concurrent sessions in phase 1")
	calls := flag.Int("calls", 10, "tool calls per session in phase 1")
	trivial := flag.Int("trivial", 20000, "trivial executions in phase 2")
	concurrency := flag.Int("concurrency", 64, "clients in phase 2")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of both phases to this file")
	target := flag.String("url", "", "drive the broker mounted at this URL (e.g. a Caddy gateway) instead of an in-process one")
	jsonOut := flag.Bool("json", false, "end the output with the figures as one JSON line; failed executions fail the run")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		_ = pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	metrics := map[string]metric{}
	err := run(*target, *sessions, *calls, *trivial, *concurrency, metrics)
	if err == nil && *jsonOut {
		if f := metrics["failed"]; f.Value > 0 {
			err = fmt.Errorf("%v executions failed", f.Value)
		} else {
			b, _ := json.Marshal(map[string]any{"metrics": metrics})
			fmt.Println(string(b))
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

// metric is one figure of the -json line.
type metric struct {
	Value float64 `json:"value"`
	Unit  string  `json:"unit"`
}

type stats struct {
	goroutines int
	heap       uint64
}

func measure() stats {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return stats{goroutines: runtime.NumGoroutine(), heap: m.HeapAlloc}
}

func run(target string, sessions, calls, trivial, concurrency int, metrics map[string]metric) error {
	fmt.Printf("GOMAXPROCS=%d NumCPU=%d %s\n", runtime.GOMAXPROCS(0), runtime.NumCPU(), runtime.Version())
	tr := &http.Transport{MaxIdleConns: sessions + concurrency, MaxIdleConnsPerHost: sessions + concurrency, IdleConnTimeout: time.Minute}
	client := &http.Client{Transport: tr}
	base0 := measure()

	var b *broker.Broker
	var engine sandbox.Engine
	url := strings.TrimSuffix(target, "/") + "/execute"
	if target == "" {
		engine = sandbox.NewInProcess(&sandbox.Options{Preset: sandbox.PresetBalanced})
		tools := broker.NewToolRegistry()
		for _, t := range broker.DemoTools() {
			tools.Register(t)
		}
		var err error
		b, err = broker.New(&broker.BrokerOptions{Engine: engine, Tools: tools, MaxConcurrentSessions: sessions + concurrency,
			MaxSessionsPerPrincipal: sessions + concurrency, // one caller drives them all
			DefaultMaxToolCalls:     calls + 1})
		if err != nil {
			return err
		}
		if err := b.Listen("127.0.0.1:0"); err != nil {
			return err
		}
		url = "http://" + b.Addr() + "/execute"
	}

	var sb strings.Builder
	sb.WriteString("let s = 0;\n")
	for i := 0; i < calls; i++ {
		fmt.Fprintf(&sb, "s = (await callTool(\"math:add\", {a: s, b: %d})).sum;\n", i+1)
	}
	sb.WriteString("return s;")
	want := fmt.Sprint(calls * (calls + 1) / 2)

	// Warm up connections and the engine.
	if _, err := execute(client, url, "return 1", "1"); err != nil {
		return err
	}

	var failed atomic.Int64
	var firstErr atomic.Value
	defer func() {
		if e := firstErr.Load(); e != nil {
			fmt.Println("  first error:", e)
		}
		metrics["failed"] = metric{float64(failed.Load()), "executions"}
	}()
	if sessions > 0 {
		phase1(client, url, sb.String(), want, sessions, calls, b, &failed, &firstErr, metrics)
	}
	if trivial > 0 {
		phase2(client, url, trivial, concurrency, b, &failed, &firstErr, metrics)
	}
	if b == nil {
		return nil // the gateway's goroutines and heap are not ours to measure
	}
	peak := measure()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Close(ctx); err != nil {
		return err
	}
	_ = engine.Close()
	tr.CloseIdleConnections()
	// Let closed connections' goroutines exit: poll rather than sleep a
	// fixed time, which a loaded machine (CI) may outlast.
	after := measure()
	for deadline := time.Now().Add(10 * time.Second); after.goroutines > base0.goroutines+2 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		after = measure()
	}
	fmt.Printf("goroutines: baseline %d, with idle connections %d, after Close %d\n", base0.goroutines, peak.goroutines, after.goroutines)
	fmt.Printf("heap: baseline %.1f MiB, before Close %.1f MiB, after Close %.1f MiB\n",
		mib(base0.heap), mib(peak.heap), mib(after.heap))
	metrics["goroutines_after_close"] = metric{float64(after.goroutines - base0.goroutines), "over baseline"}
	if after.goroutines > base0.goroutines+2 {
		return fmt.Errorf("goroutines did not return to baseline: %d > %d", after.goroutines, base0.goroutines)
	}
	return nil
}

// phase1 runs all sessions at once, each making calls tool calls.
func phase1(client *http.Client, url, code, want string, sessions, calls int, b *broker.Broker, failed *atomic.Int64, firstErr *atomic.Value, metrics map[string]metric) {
	lat := make([]time.Duration, sessions)
	var wg sync.WaitGroup
	cpu0 := cpuTime()
	start := time.Now()
	for i := 0; i < sessions; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			d, err := execute(client, url, code, want)
			if err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
			}
			lat[i] = d
		}(i)
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu := cpuTime() - cpu0
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	fmt.Printf("phase 1: %d concurrent sessions x %d tool calls over loopback HTTP: %.2fs, %.0f executions/s, %.0f tool calls/s, p50 %v, p99 %v, failed %d\n",
		sessions, calls, elapsed.Seconds(), float64(sessions)/elapsed.Seconds(), float64(sessions*calls)/elapsed.Seconds(),
		lat[len(lat)/2].Round(time.Millisecond), lat[len(lat)*99/100].Round(time.Millisecond), failed.Load())
	fmt.Printf("  CPU %.2fs (%s): %.0f executions per CPU-second\n", cpu.Seconds(), who(b), float64(sessions)/cpu.Seconds())
	metrics["sessions_exec_per_s"] = metric{float64(sessions) / elapsed.Seconds(), "exec/s"}
	metrics["sessions_p50"] = metric{float64(lat[len(lat)/2].Microseconds()) / 1000, "ms"}
	metrics["sessions_p99"] = metric{float64(lat[len(lat)*99/100].Microseconds()) / 1000, "ms"}
}

// phase2 runs trivial executions from concurrency clients.
func phase2(client *http.Client, url string, trivial, concurrency int, b *broker.Broker, failed *atomic.Int64, firstErr *atomic.Value, metrics map[string]metric) {
	lat := make([]time.Duration, trivial)
	var next atomic.Int64
	var wg sync.WaitGroup
	cpu0 := cpuTime()
	start := time.Now()
	for c := 0; c < concurrency; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= trivial {
					return
				}
				d, err := execute(client, url, "return 1", "1")
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				}
				lat[i] = d
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu := cpuTime() - cpu0
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	fmt.Printf("phase 2: %d trivial executions from %d clients: %.2fs, %.0f executions/s, p50 %v, p99 %v, failed %d\n",
		trivial, concurrency, elapsed.Seconds(), float64(trivial)/elapsed.Seconds(),
		lat[len(lat)/2].Round(time.Microsecond), lat[len(lat)*99/100].Round(time.Microsecond), failed.Load())
	fmt.Printf("  CPU %.2fs (%s): %.0f executions per CPU-second\n", cpu.Seconds(), who(b), float64(trivial)/cpu.Seconds())
	metrics["trivial_exec_per_s"] = metric{float64(trivial) / elapsed.Seconds(), "exec/s"}
	metrics["trivial_p50"] = metric{float64(lat[len(lat)/2].Microseconds()) / 1000, "ms"}
	metrics["trivial_p99"] = metric{float64(lat[len(lat)*99/100].Microseconds()) / 1000, "ms"}
	metrics["trivial_exec_per_cpu_s"] = metric{float64(trivial) / cpu.Seconds(), "exec/CPU-s"}
}

// cpuTime is the process's user+system CPU time: on a shared machine,
// executions per CPU-second is the figure that does not depend on how much
// of the cores others use.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func who(b *broker.Broker) string {
	if b == nil {
		return "client only"
	}
	return "client and server in this process"
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// execute posts one script and reads its NDJSON stream to the end, checking
// the final result.
func execute(client *http.Client, url, code, want string) (time.Duration, error) {
	body, _ := json.Marshal(map[string]any{"code": code, "filter": map[string]any{"types": []string{"result", "error"}}})
	start := time.Now()
	resp, err := client.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var buf bytes.Buffer
		_, _ = buf.ReadFrom(resp.Body)
		return 0, fmt.Errorf("status %d: %s", resp.StatusCode, buf.String())
	}
	var last struct {
		Type    string `json:"type"`
		Payload struct {
			Result json.RawMessage `json:"result"`
		} `json:"payload"`
	}
	sc := bufio.NewScanner(resp.Body)
	var line []byte
	for sc.Scan() {
		line = append(line[:0], sc.Bytes()...)
	}
	d := time.Since(start)
	if err := json.Unmarshal(line, &last); err != nil {
		return d, fmt.Errorf("bad stream end %q: %v", line, err)
	}
	if last.Type != "result" || string(last.Payload.Result) != want {
		return d, fmt.Errorf("unexpected end %s", line)
	}
	return d, nil
}
