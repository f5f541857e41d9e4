// Command guard measures the throughput of a Caddy route with the
// codemode_guard handler against the same route without it, on loopback.
//
//	go run ./.ci/bench/guard [-c 32] [-d 10s] [-slice 250ms] [-redis 127.0.0.1:6379] [-cpuprofile f] [-routeprofiles dir] [-json]
//
// It starts Caddy in process with two servers on free loopback ports, one
// answering "ok" directly and one behind codemode_guard (IP filter, a global
// and a per-IP rate limit set high enough never to deny, a concurrency
// limit and, unless -timeout 0, a request timeout), then drives each with -c keep-alive connections for
// -d in total, alternating every -slice so that other load on the machine
// hits both alike, and prints requests per second and the
// guarded/unguarded ratio, and the same ratio of the process's CPU time
// per request (steadier than throughput when other load comes and goes), and
// the heap allocations per request of each route (server and client: the GC
// runs on the same cores). With -redis the guard uses that Redis server.
// With -routeprofiles it writes one CPU profile per slice and route into that
// directory (unguarded-NNN.pprof, guarded-NNN.pprof), so that each route's
// profile can be read apart: go tool pprof -proto dir/guarded-* > guarded.pb.gz.
// With -json the last line of its output is the figures as one JSON object
// ({"metrics": {name: {"value", "unit"}}}), which go run ./.ci/bench reads.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"runtime/metrics"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/caddyserver/caddy/v2"
	_ "github.com/caddyserver/caddy/v2/modules/standard"
	_ "github.com/codemode-gateway/caddy-codemode/caddymodules"
	"github.com/codemode-gateway/caddy-codemode/internal/nettest"
)

func main() {
	conns := flag.Int("c", 32, "concurrent keep-alive connections")
	dur := flag.Duration("d", 10*time.Second, "duration of each run")
	slice := flag.Duration("slice", 250*time.Millisecond, "alternate between the routes this often")
	redisAddr := flag.String("redis", "", "use this Redis server for the guard (default: memory)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	routeProfiles := flag.String("routeprofiles", "", "write a CPU profile of each slice of each route into this directory")
	timeout := flag.Duration("timeout", 30*time.Second, "the guard's request timeout; 0 leaves it out")
	guardJSON := flag.String("guard", "", "the codemode_guard handler as JSON, instead of the built-in one")
	warmup := flag.Duration("warmup", time.Second, "warm up each route this long before measuring")
	jsonOut := flag.Bool("json", false, "end the output with the figures as one JSON line")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}

	plainPort, guardPort := freePort(), freePort()
	g := map[string]any{
		"handler": "codemode_guard",
		"rate_limits": []any{
			map[string]any{"max_requests": 1 << 40, "window": int64(time.Minute)},
			map[string]any{"name": "per_ip", "max_requests": 1 << 40, "window": int64(time.Minute), "partition_by": "ip"},
		},
		"concurrency": []any{map[string]any{"max_concurrent": 100000}},
		"ip_filter":   map[string]any{"allow": []string{"127.0.0.0/8", "::1"}, "default_action": "deny"},
	}
	if *timeout > 0 {
		g["timeout"] = int64(*timeout)
	}
	if *guardJSON != "" {
		g = map[string]any{}
		if err := json.Unmarshal([]byte(*guardJSON), &g); err != nil {
			log.Fatalf("-guard: %v", err)
		}
		g["handler"] = "codemode_guard"
	}
	if *redisAddr != "" {
		g["storage"] = map[string]any{"module": "redis", "address": *redisAddr}
	}
	// A body unique to this run, so that a reply from some other process that
	// took one of the free ports is noticed.
	token := fmt.Sprintf("ok %d", time.Now().UnixNano())
	ok := map[string]any{"handler": "static_response", "body": token}
	server := func(port int, handle ...any) map[string]any {
		return map[string]any{
			"listen":          []string{fmt.Sprintf("127.0.0.1:%d", port)},
			"automatic_https": map[string]any{"disable": true},
			"routes":          []any{map[string]any{"handle": handle}},
		}
	}
	cfg, _ := json.Marshal(map[string]any{
		"admin":   map[string]any{"disabled": true, "config": map[string]any{"persist": false}},
		"logging": map[string]any{"logs": map[string]any{"default": map[string]any{"level": "ERROR"}}},
		"apps": map[string]any{"http": map[string]any{"servers": map[string]any{
			"plain":   server(plainPort, ok),
			"guarded": server(guardPort, g, ok),
		}}},
	})
	if err := caddy.Load(cfg, true); err != nil {
		log.Fatal(err)
	}
	defer caddy.Stop()

	backend := "memory"
	if *redisAddr != "" {
		backend = "redis " + *redisAddr
	}
	fmt.Printf("guard bench: %d connections, %v per route in %v slices, guard storage %s, guard timeout %v\n", *conns, *dur, *slice, backend, *timeout)
	plain := newTarget("unguarded", fmt.Sprintf("http://127.0.0.1:%d/", plainPort), *conns, token)
	guarded := newTarget("guarded", fmt.Sprintf("http://127.0.0.1:%d/", guardPort), *conns, token)
	plain.run(*warmup, "") // warm up both
	guarded.run(*warmup, "")
	plain.reset()
	guarded.reset()
	if *routeProfiles != "" {
		if *cpuProfile != "" {
			log.Fatal("-cpuprofile and -routeprofiles exclude each other")
		}
		if err := os.MkdirAll(*routeProfiles, 0o755); err != nil {
			log.Fatal(err)
		}
	}
	for plain.elapsed < *dur {
		plain.run(*slice, *routeProfiles)
		guarded.run(*slice, *routeProfiles)
	}
	p, q := plain.rate(), guarded.rate()
	fmt.Printf("unguarded %.0f req/s, guarded %.0f req/s, ratio %.1f%%\n", p, q, 100*q/p)
	// CPU per request (this process: server and client) tells the guard's
	// cost even when other load on the machine makes throughput wander.
	pc, qc := plain.cpuPerRequest(), guarded.cpuPerRequest()
	fmt.Printf("CPU per request: unguarded %.2f µs, guarded %.2f µs, ratio %.1f%%\n", pc, qc, 100*pc/qc)
	pa, qa := plain.perRequest(plain.allocs), guarded.perRequest(guarded.allocs)
	pb, qb := plain.perRequest(plain.bytes), guarded.perRequest(guarded.bytes)
	fmt.Printf("heap allocations per request: unguarded %.1f (%.0f B), guarded %.1f (%.0f B)\n", pa, pb, qa, qb)
	if plain.bad+guarded.bad > 0 {
		log.Fatalf("non-200 responses: unguarded %d, guarded %d", plain.bad, guarded.bad)
	}
	if *jsonOut {
		m := map[string]any{"metrics": map[string]any{
			"unguarded":        map[string]any{"value": p, "unit": "req/s"},
			"guarded":          map[string]any{"value": q, "unit": "req/s"},
			"ratio":            map[string]any{"value": 100 * q / p, "unit": "%"},
			"cpu_ratio":        map[string]any{"value": 100 * pc / qc, "unit": "%"},
			"unguarded_cpu":    map[string]any{"value": pc, "unit": "µs"},
			"guarded_cpu":      map[string]any{"value": qc, "unit": "µs"},
			"unguarded_allocs": map[string]any{"value": pa, "unit": "allocs"},
			"guarded_allocs":   map[string]any{"value": qa, "unit": "allocs"},
			"unguarded_bytes":  map[string]any{"value": pb, "unit": "B"},
			"guarded_bytes":    map[string]any{"value": qb, "unit": "B"},
		}}
		b, _ := json.Marshal(m)
		fmt.Println(string(b))
	}
}

type target struct {
	name    string
	url     string
	want    string
	conns   int
	client  *http.Client
	n, bad  int64
	elapsed time.Duration
	cpu     time.Duration // process CPU time (user + system) during the runs
	allocs  uint64        // heap allocations (objects) during the runs
	bytes   uint64        // heap bytes allocated during the runs
	slices  int
}

func (t *target) reset() {
	t.n, t.bad, t.elapsed, t.cpu, t.allocs, t.bytes, t.slices = 0, 0, 0, 0, 0, 0, 0
}

// perRequest is v divided by the requests served.
func (t *target) perRequest(v uint64) float64 {
	return float64(v) / float64(t.n)
}

// heapAllocs reads the process's cumulative heap allocations (objects and
// bytes) without stopping the world.
func heapAllocs() (objects, bytes uint64) {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:objects"}, {Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64(), s[1].Value.Uint64()
}

// cpuPerRequest is the process's CPU time per request to t, in µs.
func (t *target) cpuPerRequest() float64 {
	return float64(t.cpu.Microseconds()) / float64(t.n)
}

// processCPU is the CPU time (user + system) this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func newTarget(name, url string, conns int, want string) *target {
	tr := &http.Transport{MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns}
	return &target{name: name, url: url, want: want, conns: conns, client: &http.Client{Transport: tr}}
}

func (t *target) rate() float64 { return float64(t.n) / t.elapsed.Seconds() }

// run drives the target with its connections for d, counting 200s with
// the expected body; with profileDir, under a CPU profile of its own.
func (t *target) run(d time.Duration, profileDir string) {
	if profileDir != "" {
		f, err := os.Create(filepath.Join(profileDir, fmt.Sprintf("%s-%03d.pprof", t.name, t.slices)))
		if err != nil {
			log.Fatal(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	t.slices++
	deadline := time.Now().Add(d)
	var n, bad atomic.Int64
	var wg sync.WaitGroup
	objects0, bytes0 := heapAllocs()
	start, cpu0 := time.Now(), processCPU()
	for range t.conns {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				resp, err := t.client.Get(t.url)
				if err != nil {
					bad.Add(1)
					continue
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK && string(body) == t.want {
					n.Add(1)
				} else {
					bad.Add(1)
				}
			}
		})
	}
	wg.Wait()
	t.cpu += processCPU() - cpu0
	t.elapsed += time.Since(start)
	objects1, bytes1 := heapAllocs()
	t.allocs += objects1 - objects0
	t.bytes += bytes1 - bytes0
	t.n += n.Load()
	t.bad += bad.Load()
}

func freePort() int {
	port, err := nettest.FreePort()
	if err != nil {
		log.Fatal(err)
	}
	return port
}
