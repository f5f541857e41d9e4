// Command guard measures the throughput of a Caddy route with the
// codemode_guard handler against the same route without it, on loopback.
//
//	go run ./.ci/bench/guard [-c 32] [-d 10s] [-rounds 2] [-redis 127.0.0.1:6379]
//
// It starts Caddy in process with two servers on free loopback ports, one
// answering "ok" directly and one behind codemode_guard (IP filter, a global
// and a per-IP rate limit set high enough never to deny, a concurrency
// limit and a timeout), then drives each with -c keep-alive connections for
// -d, alternating -rounds times, and prints requests per second and the
// guarded/unguarded ratio. With -redis the guard uses that Redis server.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	_ "github.com/caddyserver/caddy/v2/modules/standard"
	_ "github.com/codemode-gateway/caddy-codemode/caddymodules"
)

func main() {
	conns := flag.Int("c", 32, "concurrent keep-alive connections")
	dur := flag.Duration("d", 10*time.Second, "duration of each run")
	rounds := flag.Int("rounds", 2, "runs of each route, alternating")
	redisAddr := flag.String("redis", "", "use this Redis server for the guard (default: memory)")
	flag.Parse()

	plainPort, guardPort := freePort(), freePort()
	g := map[string]any{
		"handler": "codemode_guard",
		"rate_limits": []any{
			map[string]any{"max_requests": 1 << 40, "window": int64(time.Minute)},
			map[string]any{"name": "per_ip", "max_requests": 1 << 40, "window": int64(time.Minute), "partition_by": "ip"},
		},
		"concurrency": []any{map[string]any{"max_concurrent": 100000}},
		"timeout":     int64(30 * time.Second),
		"ip_filter":   map[string]any{"allow": []string{"127.0.0.0/8", "::1"}, "default_action": "deny"},
	}
	if *redisAddr != "" {
		host, port, err := net.SplitHostPort(*redisAddr)
		if err != nil {
			log.Fatal(err)
		}
		p, _ := strconv.Atoi(port)
		g["storage"] = map[string]any{"provider": "redis", "host": host, "port": p}
	}
	ok := map[string]any{"handler": "static_response", "body": "ok"}
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
	fmt.Printf("guard bench: %d connections, %v per run, %d rounds, guard storage %s, GOMAXPROCS from the machine\n", *conns, *dur, *rounds, backend)
	var plain, guarded float64
	for i := range *rounds {
		p := run(fmt.Sprintf("http://127.0.0.1:%d/", plainPort), *conns, *dur)
		q := run(fmt.Sprintf("http://127.0.0.1:%d/", guardPort), *conns, *dur)
		fmt.Printf("round %d: unguarded %.0f req/s, guarded %.0f req/s\n", i+1, p, q)
		plain += p
		guarded += q
	}
	plain /= float64(*rounds)
	guarded /= float64(*rounds)
	fmt.Printf("mean: unguarded %.0f req/s, guarded %.0f req/s, ratio %.1f%%\n", plain, guarded, 100*guarded/plain)
}

// run drives url with conns keep-alive connections for d and returns the
// rate of 200 responses.
func run(url string, conns int, d time.Duration) float64 {
	tr := &http.Transport{MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var n, bad atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range conns {
		wg.Go(func() {
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
				resp, err := client.Do(req)
				if err != nil {
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					n.Add(1)
				} else {
					bad.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if b := bad.Load(); b > 0 {
		fmt.Fprintf(os.Stderr, "%s: %d non-200 responses\n", url, b)
	}
	return float64(n.Load()) / time.Since(start).Seconds()
}

func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
