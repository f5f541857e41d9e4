// Command bench runs, in one job, every figure docs/figures.md states:
// the sandbox figures A–G, the broker over HTTP (in process with 1,000
// sessions, and through Caddy with 8 callers), the guard, meta:search, OAuth
// code exchange and JWT validation. It prints a Markdown table with each
// figure's median and spread (min–max over the rounds), notes the machine
// (CPU, cores, load average before and after, Go version, commit), and
// writes everything as JSON so that two commits can be compared.
//
//	go run ./.ci/bench [-rounds 5] [-only regexp] [-json bench.json] [-compare old.json] [-short]
//
// Rounds are interleaved: every figure runs once per round, so load from
// other processes on a shared machine falls on all figures alike. Go
// benchmarks run from test binaries built once (go test -c); the HTTP
// figures run the programs beside this one (./.ci/bench/guard,
// ./.ci/bench/broker) and a Caddy built from ./cmd/caddy.
//
// -short is the smoke check CI runs: one round with the smallest sizes. It
// checks that every figure runs and that the JSON is valid; it never
// compares a figure with a goal (speed is not asserted anywhere in CI).
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/codemode-gateway/caddy-codemode/internal/nettest"
)

// figure is one line of the table: a metric of a Go benchmark or of a
// program's -json line, or a value derived from other figures of the same
// round.
type figure struct {
	ID    string // stable key in the JSON
	What  string
	Goal  string
	Unit  string  // unit shown
	Scale float64 // shown value = raw value * Scale (0 means 1)

	// A Go benchmark: package, benchmark name (exact, sub-benchmarks
	// with a slash) and the metric's unit in its output.
	Pkg, Bench, Metric string
	// A program: its key in programs and the metric's name in its -json line.
	Prog string
	// Derived from the raw values of other figures of the same round.
	Derive func(raw map[string]float64) (float64, bool)
	// Optional figures (a benchmark another change adds) are reported
	// as missing instead of failing the run.
	Optional bool
}

// figures in table order. Sandbox A–G are the figures the engine is
// compared on with peers (issue 15): A start-up, B a trivial script, C an
// awaited tool call, D a compute loop, E throughput at 8 in flight, F memory
// growth over 1,000 runs, G parallel tool calls.
var figures = []figure{
	{ID: "sandbox.A.worker_ready", What: "sandbox A: Caddy-binary worker from exec to ready", Goal: "≤ 15 ms", Unit: "ms", Scale: 1e-6,
		Pkg: "./caddymodules", Bench: "BenchmarkWorkerStart/ready", Metric: "ns/op"},
	{ID: "sandbox.A.worker_ready_cpu", What: "sandbox A: the same, the worker's CPU time (median)", Goal: "stated", Unit: "ms",
		Pkg: "./caddymodules", Bench: "BenchmarkWorkerStart/ready", Metric: "cpu-ms"},
	{ID: "sandbox.A.first_script", What: "sandbox A: new Caddy-binary worker + first script", Goal: "stated", Unit: "ms", Scale: 1e-6,
		Pkg: "./caddymodules", Bench: "BenchmarkWorkerStart/first_script", Metric: "ns/op"},
	{ID: "sandbox.A.standalone_ready", What: "sandbox A: standalone `codemode-worker` (no Caddy) from exec to ready", Goal: "≤ 15 ms", Unit: "ms", Scale: 1e-6,
		Pkg: "./caddymodules", Bench: "BenchmarkWorkerStart/standalone_ready", Metric: "ns/op"},
	{ID: "sandbox.A.standalone_ready_cpu", What: "sandbox A: the same, the worker's CPU time (median)", Goal: "stated", Unit: "ms",
		Pkg: "./caddymodules", Bench: "BenchmarkWorkerStart/standalone_ready", Metric: "cpu-ms"},
	{ID: "sandbox.A.standalone_first_script", What: "sandbox A: new standalone worker + first script", Goal: "stated", Unit: "ms", Scale: 1e-6,
		Pkg: "./caddymodules", Bench: "BenchmarkWorkerStart/standalone_first_script", Metric: "ns/op"},
	{ID: "sandbox.B.trivial", What: "sandbox B: `return 1+1`, worker, median", Goal: "< 0.5 ms", Unit: "ms", Scale: 1e-6,
		Pkg: "./broker/sandbox/internal/engine", Bench: "BenchmarkWorkerTrivialScript", Metric: "median-ns/op"},
	{ID: "sandbox.B.trivial_inprocess", What: "sandbox B: `return 1+1`, in-process engine, median", Goal: "stated", Unit: "ms", Scale: 1e-6,
		Pkg: "./broker/sandbox/internal/engine", Bench: "BenchmarkTrivialScript", Metric: "median-ns/op"},
	{ID: "sandbox.B.trivial_idle", What: "sandbox B: `return 1+1`, worker, arriving 2 ms after the previous answer, median", Goal: "stated", Unit: "ms", Scale: 1e-6,
		Pkg: "./broker/sandbox/internal/engine", Bench: "BenchmarkWorkerTrivialScriptIdle", Metric: "median-ns/op"},
	{ID: "sandbox.B.trivial_idle_inprocess", What: "sandbox B: the same, in-process engine", Goal: "stated", Unit: "ms", Scale: 1e-6,
		Pkg: "./broker/sandbox/internal/engine", Bench: "BenchmarkTrivialScriptIdle", Metric: "median-ns/op"},
	{ID: "sandbox.C.awaited_call_script", What: "sandbox C: script of 100 awaited tool calls, worker, median", Goal: "stated", Unit: "ms", Scale: 1e-6,
		Pkg: "./broker/sandbox/internal/engine", Bench: "BenchmarkWorkerAwaitedToolCall", Metric: "median-ns/op"},
	{ID: "sandbox.C.awaited_call", What: "sandbox C: per awaited tool call, worker ((C script − B) / 100)", Goal: "≤ 30 µs", Unit: "µs", Scale: 1e-3,
		Derive: func(r map[string]float64) (float64, bool) {
			c, ok1 := r["sandbox.C.awaited_call_script"]
			b, ok2 := r["sandbox.B.trivial"]
			return (c - b) / 100, ok1 && ok2
		}},
	{ID: "sandbox.C.awaited_call_inprocess", What: "sandbox C: per awaited tool call, in-process ((script − B) / 100)", Goal: "stated", Unit: "µs", Scale: 1e-3,
		Pkg: "./broker/sandbox/internal/engine", Bench: "BenchmarkAwaitedToolCall", Metric: "median-ns/op",
		Derive: func(r map[string]float64) (float64, bool) {
			c, ok1 := r["sandbox.C.awaited_call_inprocess"]
			b, ok2 := r["sandbox.B.trivial_inprocess"]
			return (c - b) / 100, ok1 && ok2
		}},
	{ID: "sandbox.C.protocol_call", What: "sandbox C: protocol round trip per call, worker without goja", Goal: "stated", Unit: "µs", Scale: 1e-3,
		Pkg: "./broker/sandbox/internal/engine", Bench: "BenchmarkWorkerProtocolCall", Metric: "median-ns/call"},
	{ID: "sandbox.D.loop_1e6", What: "sandbox D: loop summing 1e6, step limit on, median", Goal: "≤ 90 ms", Unit: "ms", Scale: 1e-6,
		Pkg: "./broker/sandbox/internal/engine", Bench: "BenchmarkLoop1e6", Metric: "median-ns/op"},
	{ID: "sandbox.D.loop_1e6_bare", What: "sandbox D: the same loop in bare goja (no sandbox), median", Goal: "baseline", Unit: "ms", Scale: 1e-6,
		Pkg: "./broker/sandbox/internal/engine", Bench: "BenchmarkLoop1e6BareGoja", Metric: "median-ns/op"},
	{ID: "sandbox.D.loop_1e6_worker", What: "sandbox D: the same loop through a worker (the default engine), step limit on, median", Goal: "stated", Unit: "ms", Scale: 1e-6,
		Pkg: "./broker/sandbox/internal/engine", Bench: "BenchmarkWorkerLoop1e6", Metric: "median-ns/op"},
	{ID: "sandbox.E.in_flight_8", What: "sandbox E: `return 1+1` at 8 in flight, 4 workers", Goal: "stated", Unit: "exec/s",
		Pkg: "./broker/sandbox/internal/engine", Bench: "BenchmarkWorkerInFlight8", Metric: "exec/s"},
	{ID: "sandbox.F.rss_growth_1000", What: "sandbox F: worker RSS growth over 1,000 runs", Goal: "stated", Unit: "MB",
		Pkg: "./broker/sandbox/internal/engine", Bench: "BenchmarkWorkerRSSGrowth1000", Metric: "rss-growth-MB"},
	{ID: "sandbox.G.parallel_100x10ms", What: "sandbox G: 100 × 10 ms calls via `__safe_parallel` at 20, worker", Goal: "< 60 ms", Unit: "ms", Scale: 1e-6,
		Pkg: "./broker/sandbox/internal/engine", Bench: "BenchmarkWorkerParallel100x10ms", Metric: "median-ns/op"},
	{ID: "sandbox.idle_rss", What: "sandbox: idle worker memory (RSS), test-binary worker", Goal: "stated", Unit: "MB", Scale: 1.0 / 1024,
		Pkg: "./broker/sandbox/internal/engine", Bench: "BenchmarkWorkerIdlePoolMemory/1", Metric: "rss-kB/worker"},
	{ID: "sandbox.idle_anon", What: "sandbox: idle worker private memory (RssAnon)", Goal: "stated", Unit: "MB", Scale: 1.0 / 1024,
		Pkg: "./broker/sandbox/internal/engine", Bench: "BenchmarkWorkerIdlePoolMemory/1", Metric: "anon-kB/worker"},

	{ID: "http.execute_caddy_8", What: "HTTP `/execute` `return 1` through Caddy + worker pool, 8 callers", Goal: "≥ 2,500/s", Unit: "exec/s",
		Prog: "caddy-execute", Metric: "trivial_exec_per_s"},
	{ID: "http.execute_caddy_8_p50", What: "HTTP `/execute` through Caddy, 8 callers, p50", Goal: "stated", Unit: "ms",
		Prog: "caddy-execute", Metric: "trivial_p50"},
	{ID: "broker.execute_inprocess", What: "broker library: `ExecuteTrivial` (in-process engine, no HTTP)", Goal: "stated", Unit: "µs", Scale: 1e-3,
		Pkg: "./broker", Bench: "BenchmarkExecuteTrivial", Metric: "ns/op"},
	{ID: "broker.sessions_1000", What: "broker: 1,000 sessions × 10 tool calls over loopback HTTP", Goal: "stated", Unit: "exec/s",
		Prog: "broker-load", Metric: "sessions_exec_per_s"},
	{ID: "broker.sessions_1000_p99", What: "broker: 1,000 sessions × 10 tool calls, p99", Goal: "stated", Unit: "ms",
		Prog: "broker-load", Metric: "sessions_p99"},
	{ID: "broker.goroutines_after_close", What: "broker: goroutines over baseline after Close", Goal: "≤ 2", Unit: "",
		Prog: "broker-load", Metric: "goroutines_after_close"},

	{ID: "guard.route_ratio", What: "guard: guarded Caddy route vs unguarded (memory storage, no timeout)", Goal: "≥ 95%", Unit: "%",
		Prog: "guard-route", Metric: "ratio"},
	{ID: "guard.route_unguarded", What: "guard: unguarded route", Goal: "baseline", Unit: "req/s",
		Prog: "guard-route", Metric: "unguarded"},
	{ID: "guard.route_cpu_ratio", What: "guard: the same ratio by CPU time per request (steadier under other load)", Goal: "stated", Unit: "%",
		Prog: "guard-route", Metric: "cpu_ratio"},
	{ID: "guard.route_ratio_one_limit", What: "guard: route with one rate limit (what caddy-ratelimit's route does) vs unguarded", Goal: "stated", Unit: "%",
		Prog: "guard-route-one-limit", Metric: "ratio"},
	{ID: "guard.route_ratio_one_limit_hidden", What: "guard: the same with `hide_rate_limit_headers`", Goal: "stated", Unit: "%",
		Prog: "guard-route-one-limit-hidden", Metric: "ratio"},
	{ID: "guard.memory_check", What: "guard: memory limiter check", Goal: "< 300 ns", Unit: "ns",
		Pkg: "./guard", Bench: "BenchmarkMemoryLimiterCheck", Metric: "ns/op"},
	{ID: "guard.serve_http", What: "guard: `ServeHTTP` of the Caddy handler, every feature but the timeout (no sockets)", Goal: "stated", Unit: "ns",
		Pkg: "./caddymodules", Bench: "BenchmarkGuardServeHTTP/without_timeout", Metric: "ns/op"},

	{ID: "search.latency_1200", What: "meta:search over 1,200 tools, median", Goal: "< 1 ms", Unit: "µs",
		Pkg: "./metatools", Bench: "BenchmarkSearch1200", Metric: "median-µs"},
	{ID: "search.latency_github", What: "meta:search over the 1,223 GitHub tools, its evaluation queries, median", Goal: "stated", Unit: "µs",
		Pkg: "./metatools", Bench: "BenchmarkSearchGitHub", Metric: "median-µs"},
	{ID: "metatools.index_build_1000", What: "meta:search index build, 1,000 tools", Goal: "stated", Unit: "ms", Scale: 1e-6,
		Pkg: "./metatools", Bench: "BenchmarkIndexBuild1000", Metric: "ns/op"},
	{ID: "catalog.build_sendgrid", What: "catalog: build from SendGrid (1.5 MB, 334 operations)", Goal: "stated", Unit: "ms", Scale: 1e-6,
		Pkg: "./broker/catalog", Bench: "BenchmarkBuildLargeDocument/sendgrid", Metric: "ns/op"},
	{ID: "metatools.invoke_round_trip", What: "meta:invoke MCP round trip (loopback)", Goal: "stated", Unit: "ms", Scale: 1e-6,
		Pkg: "./metatools", Bench: "BenchmarkMCPInvokeRoundTrip", Metric: "ns/op"},

	{ID: "oauth.code_exchange", What: "oauth: authorization code exchange", Goal: "< 5 ms", Unit: "ms", Scale: 1e-6,
		Pkg: "./oauth", Bench: "BenchmarkCodeExchange", Metric: "ns/op"},
	{ID: "oauth.refresh", What: "oauth: refresh", Goal: "< 5 ms", Unit: "ms", Scale: 1e-6,
		Pkg: "./oauth", Bench: "BenchmarkRefresh", Metric: "ns/op"},
	{ID: "oauth.jwt_rs256_cold", What: "oauth: JWT validation, RS256, first sight", Goal: "< 50 µs", Unit: "µs", Scale: 1e-3,
		Pkg: "./oauth", Bench: "BenchmarkVerifyAccessTokenRS256Cold", Metric: "ns/op"},
	{ID: "oauth.jwt_rs256_seen", What: "oauth: JWT validation, RS256, token seen before", Goal: "< 50 µs", Unit: "µs", Scale: 1e-3,
		Pkg: "./oauth", Bench: "BenchmarkVerifyAccessTokenRS256", Metric: "ns/op"},
	{ID: "oauth.jwt_es256_cached", What: "oauth: JWT validation, ES256, result cache", Goal: "< 50 µs", Unit: "µs", Scale: 1e-3,
		Pkg: "./oauth", Bench: "BenchmarkVerifyCachedES256", Metric: "ns/op"},
	{ID: "auth.bearer_seen", What: "auth: `codemode_bearer` provider per request, token seen before", Goal: "stated", Unit: "µs", Scale: 1e-3,
		Pkg: "./caddymodules", Bench: "BenchmarkBearerAuthenticate", Metric: "ns/op"},
	{ID: "credential.authorize_memory", What: "credentials: acting as the user on one call (vault read, AES-GCM open, header), memory store", Goal: "stated", Unit: "µs", Scale: 1e-3,
		Pkg: "./credential", Bench: "BenchmarkAuthorize/memory", Metric: "ns/op"},
	{ID: "observability.tool_call_plain", What: "observability: one registry tool call, no metrics", Goal: "stated", Unit: "µs", Scale: 1e-3,
		Pkg: "./broker", Bench: "BenchmarkInvokeToolObserved/plain", Metric: "ns/op"},
	{ID: "observability.tool_call_traced", What: "observability: the same with metrics and a recorded span", Goal: "stated", Unit: "µs", Scale: 1e-3,
		Pkg: "./broker", Bench: "BenchmarkInvokeToolObserved/metrics+trace", Metric: "ns/op"},
}

// sizes are the knobs -short turns down.
type sizes struct {
	benchtime    string
	guardDur     string
	guardWarm    string
	sessions     string
	trivialHTTP  string
	benchTimeout time.Duration
}

var (
	fullSizes  = sizes{benchtime: "1s", guardDur: "6s", guardWarm: "1s", sessions: "1000", trivialHTTP: "4000", benchTimeout: 10 * time.Minute}
	shortSizes = sizes{benchtime: "1x", guardDur: "200ms", guardWarm: "50ms", sessions: "20", trivialHTTP: "40", benchTimeout: 3 * time.Minute}
)

// Report is the JSON the command writes.
type Report struct {
	Machine Machine           `json:"machine"`
	Rounds  int               `json:"rounds"`
	Short   bool              `json:"short,omitempty"`
	Figures map[string]Result `json:"figures"`
}

// Machine notes where and when the figures were taken.
type Machine struct {
	Date        string  `json:"date"`
	Commit      string  `json:"commit"`
	Dirty       bool    `json:"dirty,omitempty"`
	GoVersion   string  `json:"go_version"`
	OS          string  `json:"os"`
	CPU         string  `json:"cpu"`
	NumCPU      int     `json:"num_cpu"`
	MemTotalMB  int     `json:"mem_total_mb,omitempty"`
	LoadBefore  float64 `json:"load_avg_1m_before"`
	LoadAfter   float64 `json:"load_avg_1m_after"`
	DurationSec float64 `json:"duration_s"`
}

// Result is one figure over the rounds.
type Result struct {
	What    string    `json:"what"`
	Goal    string    `json:"goal"`
	Unit    string    `json:"unit"`
	Median  float64   `json:"median"`
	Min     float64   `json:"min"`
	Max     float64   `json:"max"`
	Samples []float64 `json:"samples"`
	Missing string    `json:"missing,omitempty"`
}

func main() {
	rounds := flag.Int("rounds", 5, "interleaved rounds (each figure runs once per round)")
	only := flag.String("only", "", "run only the figures whose ID matches this regexp")
	jsonPath := flag.String("json", "bench.json", "write the report here (empty: not at all)")
	compare := flag.String("compare", "", "a report of an earlier run to show ratios against")
	short := flag.Bool("short", false, "smoke check: one round, smallest sizes; checks that everything runs and the JSON is valid")
	flag.Parse()
	if err := run(*rounds, *only, *jsonPath, *compare, *short); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(rounds int, only, jsonPath, compare string, short bool) error {
	sz := fullSizes
	if short {
		sz, rounds = shortSizes, 1
	}
	if rounds < 1 {
		return errors.New("-rounds must be at least 1")
	}
	sel := figures
	if only != "" {
		re, err := regexp.Compile(only)
		if err != nil {
			return fmt.Errorf("-only: %w", err)
		}
		sel = nil
		for _, f := range figures {
			if re.MatchString(f.ID) {
				sel = append(sel, f)
			}
		}
	}
	var old *Report
	if compare != "" {
		raw, err := os.ReadFile(compare)
		if err != nil {
			return err
		}
		old = new(Report)
		if err := json.Unmarshal(raw, old); err != nil {
			return fmt.Errorf("-compare %s: %w", compare, err)
		}
	}
	root, err := repoRoot()
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "codemode-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	start := time.Now()
	m := machine(root)
	b := &builder{root: root, dir: tmp, sizes: sz}
	if err := b.build(sel); err != nil {
		return err
	}
	defer b.close()

	samples := map[string][]float64{}
	missing := map[string]string{}
	for r := 1; r <= rounds; r++ {
		fmt.Fprintf(os.Stderr, "round %d/%d\n", r, rounds)
		raw := map[string]float64{}
		for _, job := range b.jobs(sel) {
			got, err := job.run()
			if err != nil {
				return fmt.Errorf("round %d: %s: %w", r, job.name, err)
			}
			for k, v := range got {
				raw[k] = v
			}
		}
		for _, f := range sel {
			v, ok := raw[f.ID]
			if f.Derive != nil {
				v, ok = f.Derive(raw)
			}
			if !ok {
				if !f.Optional {
					return fmt.Errorf("round %d: figure %s: no value (benchmark %s %s)", r, f.ID, f.Pkg, f.Bench)
				}
				missing[f.ID] = "benchmark " + f.Bench + " not found in " + f.Pkg
				continue
			}
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return fmt.Errorf("round %d: figure %s: value %v", r, f.ID, v)
			}
			if f.Scale != 0 {
				v *= f.Scale
			}
			samples[f.ID] = append(samples[f.ID], v)
		}
	}
	m.LoadAfter = loadAvg()
	m.DurationSec = math.Round(time.Since(start).Seconds())

	rep := Report{Machine: m, Rounds: rounds, Short: short, Figures: map[string]Result{}}
	for _, f := range sel {
		res := Result{What: f.What, Goal: f.Goal, Unit: f.Unit, Missing: missing[f.ID]}
		if s := samples[f.ID]; len(s) > 0 {
			res.Samples = s
			res.Median, res.Min, res.Max = stats(s)
		}
		rep.Figures[f.ID] = res
	}
	out, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	// The report must read back as what was written: the smoke check in CI
	// relies on this.
	var check Report
	if err := json.Unmarshal(out, &check); err != nil || len(check.Figures) != len(sel) {
		return fmt.Errorf("report does not read back (%v)", err)
	}
	if jsonPath != "" {
		if err := os.WriteFile(jsonPath, append(out, '\n'), 0o644); err != nil {
			return err
		}
	}
	printTable(os.Stdout, rep, sel, old)
	return nil
}

// stats returns the median, minimum and maximum of s.
func stats(s []float64) (median, lo, hi float64) {
	c := append([]float64(nil), s...)
	sort.Float64s(c)
	n := len(c)
	median = c[n/2]
	if n%2 == 0 {
		median = (c[n/2-1] + c[n/2]) / 2
	}
	return median, c[0], c[n-1]
}

func printTable(w io.Writer, rep Report, sel []figure, old *Report) {
	m := rep.Machine
	dirty := ""
	if m.Dirty {
		dirty = " (with uncommitted changes)"
	}
	fmt.Fprintf(w, "Machine: %s, %d CPUs, %d MB, %s, %s; load average (1 min) %.2f before, %.2f after; commit %s%s; %s; %d round(s) in %.0f s.\n\n",
		m.CPU, m.NumCPU, m.MemTotalMB, m.OS, m.GoVersion, m.LoadBefore, m.LoadAfter, m.Commit, dirty, m.Date, rep.Rounds, m.DurationSec)
	head := "| Figure | Goal | Median | Spread (min–max) |"
	rule := "|---|---|---|---|"
	if old != nil {
		head += fmt.Sprintf(" Before (%s) | Ratio |", short(old.Machine.Commit))
		rule += "---|---|"
	}
	fmt.Fprintln(w, head)
	fmt.Fprintln(w, rule)
	for _, f := range sel {
		r := rep.Figures[f.ID]
		if r.Missing != "" {
			fmt.Fprintf(w, "| %s | %s | — | %s |", f.What, f.Goal, r.Missing)
		} else {
			fmt.Fprintf(w, "| %s | %s | %s | %s–%s |", f.What, f.Goal, strings.TrimSpace(num(r.Median)+" "+f.Unit), num(r.Min), num(r.Max))
		}
		if old != nil {
			if o, ok := old.Figures[f.ID]; ok && o.Missing == "" && o.Median != 0 && r.Missing == "" {
				fmt.Fprintf(w, " %s | %.2f× |", num(o.Median), r.Median/o.Median)
			} else {
				fmt.Fprint(w, " — | — |")
			}
		}
		fmt.Fprintln(w)
	}
}

func short(commit string) string {
	if len(commit) > 12 {
		return commit[:12]
	}
	return commit
}

// num prints three significant digits, with thousands separated.
func num(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 1000:
		s := strconv.FormatInt(int64(math.Round(v)), 10)
		neg := strings.HasPrefix(s, "-")
		s = strings.TrimPrefix(s, "-")
		var b strings.Builder
		for i, c := range s {
			if i > 0 && (len(s)-i)%3 == 0 {
				b.WriteByte(',')
			}
			b.WriteRune(c)
		}
		if neg {
			return "-" + b.String()
		}
		return b.String()
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	default:
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
}

// builder compiles the test binaries and programs once, and runs Caddy for
// the HTTP figures.
type builder struct {
	root, dir string
	sizes     sizes
	tests     map[string]string // package -> test binary
	progs     map[string]string // ./.ci/bench/x or ./cmd/caddy -> binary
	caddy     *exec.Cmd
	caddyURL  string
}

func (b *builder) build(sel []figure) error {
	b.tests, b.progs = map[string]string{}, map[string]string{}
	need := map[string]bool{}
	for _, f := range sel {
		switch {
		case f.Pkg != "":
			need["test "+f.Pkg] = true
		case f.Prog == "caddy-execute":
			need["prog ./.ci/bench/broker"], need["prog ./cmd/caddy"] = true, true
		case f.Prog == "broker-load":
			need["prog ./.ci/bench/broker"] = true
		case strings.HasPrefix(f.Prog, "guard-route"):
			need["prog ./.ci/bench/guard"] = true
		}
	}
	keys := make([]string, 0, len(need))
	for k := range need {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		kind, pkg, _ := strings.Cut(k, " ")
		out := filepath.Join(b.dir, strings.NewReplacer("/", "_", ".", "_").Replace(pkg))
		var cmd *exec.Cmd
		if kind == "test" {
			out += ".test"
			cmd = exec.Command("go", "test", "-c", "-o", out, pkg)
			b.tests[pkg] = out
		} else {
			cmd = exec.Command("go", "build", "-o", out, pkg)
			b.progs[pkg] = out
		}
		fmt.Fprintf(os.Stderr, "building %s\n", pkg)
		cmd.Dir, cmd.Stdout, cmd.Stderr = b.root, os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("building %s: %w", pkg, err)
		}
	}
	if _, ok := b.progs["./cmd/caddy"]; ok {
		return b.startCaddy()
	}
	return nil
}

// startCaddy runs the gateway of .ci/bench/broker/Caddyfile on a free port.
func (b *builder) startCaddy() error {
	port, err := nettest.FreePort()
	if err != nil {
		return err
	}
	cmd := exec.Command(b.progs["./cmd/caddy"], "run", "--config", filepath.Join(".ci", "bench", "broker", "Caddyfile"), "--adapter", "caddyfile")
	cmd.Dir = b.root
	cmd.Env = append(os.Environ(), "BENCH_PORT="+strconv.Itoa(port))
	logf, err := os.Create(filepath.Join(b.dir, "caddy.log"))
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return err
	}
	b.caddy = cmd
	b.caddyURL = fmt.Sprintf("http://127.0.0.1:%d", port)
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Post(b.caddyURL+"/execute", "application/json", strings.NewReader(`{"code":"return 1"}`))
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	log, _ := os.ReadFile(logf.Name())
	return fmt.Errorf("caddy did not answer on %s within 60 s; its log:\n%s", b.caddyURL, log)
}

func (b *builder) close() {
	if b.caddy != nil {
		_ = b.caddy.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = b.caddy.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = b.caddy.Process.Kill()
			<-done
		}
	}
}

// job is one process run per round; it yields raw values by figure ID.
type job struct {
	name string
	run  func() (map[string]float64, error)
}

// jobs groups the selected figures into process runs: one test binary run
// per package (all its benchmarks), one run per program.
func (b *builder) jobs(sel []figure) []job {
	var out []job
	byPkg := map[string][]figure{}
	var pkgs []string
	byProg := map[string][]figure{}
	var progs []string
	for _, f := range sel {
		switch {
		case f.Pkg != "":
			if byPkg[f.Pkg] == nil {
				pkgs = append(pkgs, f.Pkg)
			}
			byPkg[f.Pkg] = append(byPkg[f.Pkg], f)
		case f.Prog != "":
			if byProg[f.Prog] == nil {
				progs = append(progs, f.Prog)
			}
			byProg[f.Prog] = append(byProg[f.Prog], f)
		}
	}
	for _, pkg := range pkgs {
		fs := byPkg[pkg]
		out = append(out, job{name: pkg, run: func() (map[string]float64, error) { return b.runBench(pkg, fs) }})
	}
	for _, prog := range progs {
		fs := byProg[prog]
		out = append(out, job{name: prog, run: func() (map[string]float64, error) { return b.runProg(prog, fs) }})
	}
	return out
}

var benchLine = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+\d+\s+(.*)$`)

// runBench runs a package's benchmarks: one run for the figures of whole
// benchmarks, one for the figures of sub-benchmarks (a -bench pattern with
// a second level skips benchmarks that have none). Sub-benchmark names
// must differ across a package's figures.
func (b *builder) runBench(pkg string, fs []figure) (map[string]float64, error) {
	var whole, sub []figure
	for _, f := range fs {
		if strings.Contains(f.Bench, "/") {
			sub = append(sub, f)
		} else {
			whole = append(whole, f)
		}
	}
	out := map[string]float64{}
	for _, group := range [][]figure{whole, sub} {
		if len(group) == 0 {
			continue
		}
		got, err := b.runBenchGroup(pkg, group)
		if err != nil {
			return nil, err
		}
		for k, v := range got {
			out[k] = v
		}
	}
	return out, nil
}

func (b *builder) runBenchGroup(pkg string, fs []figure) (map[string]float64, error) {
	tops, subs := map[string]bool{}, map[string]bool{}
	for _, f := range fs {
		top, sub, _ := strings.Cut(f.Bench, "/")
		tops[regexp.QuoteMeta(top)] = true
		if sub != "" {
			subs[regexp.QuoteMeta(sub)] = true
		}
	}
	pattern := "^(" + strings.Join(sortedKeys(tops), "|") + ")$"
	if len(subs) > 0 {
		pattern += "/^(" + strings.Join(sortedKeys(subs), "|") + ")$"
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.sizes.benchTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, b.tests[pkg], "-test.run", "^$", "-test.bench", pattern,
		"-test.benchtime", b.sizes.benchtime, "-test.count", "1", "-test.benchmem")
	cmd.Dir = filepath.Join(b.root, pkg) // tests read testdata relative to their package
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%w\n%s%s", err, tail(stdout.String()), tail(stderr.String()))
	}
	// name -> unit -> value
	got := map[string]map[string]float64{}
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		m := benchLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		fields := strings.Fields(m[2])
		vals := map[string]float64{}
		for i := 0; i+1 < len(fields); i += 2 {
			if v, err := strconv.ParseFloat(fields[i], 64); err == nil {
				vals[fields[i+1]] = v
			}
		}
		got[m[1]] = vals
	}
	out := map[string]float64{}
	for _, f := range fs {
		if v, ok := got[f.Bench][f.Metric]; ok {
			out[f.ID] = v
		}
	}
	return out, nil
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func (b *builder) runProg(prog string, fs []figure) (map[string]float64, error) {
	var bin string
	var args []string
	switch prog {
	case "guard-route", "guard-route-one-limit", "guard-route-one-limit-hidden":
		bin = b.progs["./.ci/bench/guard"]
		args = []string{"-json", "-timeout", "0", "-d", b.sizes.guardDur, "-warmup", b.sizes.guardWarm, "-slice", "50ms"}
		switch prog {
		case "guard-route-one-limit":
			args = append(args, "-guard", `{"rate_limits":[{"max_requests":1099511627776,"window":60000000000}]}`)
		case "guard-route-one-limit-hidden":
			args = append(args, "-guard", `{"rate_limits":[{"max_requests":1099511627776,"window":60000000000}],"hide_rate_limit_headers":true}`)
		}
	case "broker-load":
		bin = b.progs["./.ci/bench/broker"]
		args = []string{"-json", "-sessions", b.sizes.sessions, "-calls", "10", "-trivial", "0"}
	case "caddy-execute":
		bin = b.progs["./.ci/bench/broker"]
		args = []string{"-json", "-url", b.caddyURL, "-sessions", "0", "-trivial", b.sizes.trivialHTTP, "-concurrency", "8"}
	default:
		return nil, fmt.Errorf("unknown program %q", prog)
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.sizes.benchTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = b.root
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%w\n%s%s", err, tail(stdout.String()), tail(stderr.String()))
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	var res struct {
		Metrics map[string]struct {
			Value float64 `json:"value"`
		} `json:"metrics"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil {
		return nil, fmt.Errorf("reading its -json line: %w\n%s", err, tail(stdout.String()))
	}
	out := map[string]float64{}
	for _, f := range fs {
		if v, ok := res.Metrics[f.Metric]; ok {
			out[f.ID] = v.Value
		}
	}
	return out, nil
}

func tail(s string) string {
	if len(s) > 4000 {
		s = "…" + s[len(s)-4000:]
	}
	return s
}

func repoRoot() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		return "", fmt.Errorf("finding the module root (run from inside the repository): %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

func machine(root string) Machine {
	m := Machine{
		Date:       time.Now().UTC().Format(time.RFC3339),
		GoVersion:  runtime.Version(),
		OS:         runtime.GOOS + "/" + runtime.GOARCH,
		NumCPU:     runtime.NumCPU(),
		LoadBefore: loadAvg(),
		CPU:        "unknown CPU",
	}
	if out, err := exec.Command("go", "env", "GOVERSION").Output(); err == nil {
		m.GoVersion = strings.TrimSpace(string(out)) // the toolchain that builds the benchmarks
	}
	git := func(args ...string) string {
		cmd := exec.Command("git", args...)
		cmd.Dir = root
		out, _ := cmd.Output()
		return strings.TrimSpace(string(out))
	}
	m.Commit = git("rev-parse", "HEAD")
	m.Dirty = git("status", "--porcelain", "--untracked-files=no") != ""
	if raw, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(raw), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if raw, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(raw), "\n") {
			if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				kb, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
				m.MemTotalMB = kb / 1024
			}
		}
	}
	return m
}

// loadAvg is the one-minute load average (Linux), 0 elsewhere.
func loadAvg() float64 {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(raw))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}
