// Command prometheus is the observability check .ci/run runs against the
// built binary with a real Prometheus server: the gateway runs
// Caddyfile.example, Prometheus scrapes its admin /metrics every second
// with the alerting rules of docs/prometheus/alerts.yml loaded, traffic of
// every kind goes through the gateway, and then Prometheus itself answers
// for the dashboard (docs/grafana/caddy-codemode.json): every query parses
// and evaluates, the panels the traffic feeds have data, the instance
// variable lists the gateway, every alerting rule evaluates without error,
// none fires while the gateway is healthy, and a worker killed from outside
// fires CodemodeWorkersCrashing. Everything listens on 127.0.0.1; the whole
// run is bounded (-timeout). Run from the repository root:
//
//	go run ./.ci/prometheus -caddy /path/to/caddy
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/codemode-gateway/caddy-codemode/internal/nettest"
)

func main() {
	caddy := flag.String("caddy", "", "the gateway binary")
	prom := flag.String("prometheus", "prometheus", "the Prometheus server binary")
	timeout := flag.Duration("timeout", 3*time.Minute, "bound of the whole run")
	flag.Parse()
	if *caddy == "" {
		fmt.Fprintln(os.Stderr, "usage: prometheus -caddy /path/to/caddy [-prometheus prometheus]")
		os.Exit(2)
	}
	work, err := os.MkdirTemp("", "codemode-prometheus-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(work)
	h := &harness{work: work}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	err = h.run(ctx, *caddy, *prom)
	h.stopAll()
	if err != nil || h.failed > 0 {
		h.dumpLogs()
		fmt.Printf("prometheus: %d passed, %d failed; %v\n", h.passed, h.failed, err)
		os.Exit(1)
	}
	fmt.Printf("prometheus: %d passed, 0 failed\n", h.passed)
}

type harness struct {
	work           string
	procs          []*exec.Cmd
	gw, promURL    string
	passed, failed int
}

func (h *harness) check(name string, ok bool, detail string) {
	if ok {
		h.passed++
		fmt.Printf("ok   %s\n", name)
		return
	}
	h.failed++
	fmt.Printf("FAIL %s: %s\n", name, detail)
}

func freePort() int {
	port, err := nettest.FreePort()
	if err != nil {
		panic(err)
	}
	return port
}

func (h *harness) start(name string, env []string, args ...string) (*exec.Cmd, error) {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), env...)
	logf, err := os.Create(filepath.Join(h.work, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	h.procs = append(h.procs, cmd)
	return cmd, nil
}

func (h *harness) stopAll() {
	for _, cmd := range h.procs {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
}

func (h *harness) dumpLogs() {
	for _, name := range []string{"caddy.log", "prometheus.log"} {
		b, _ := os.ReadFile(filepath.Join(h.work, name))
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) > 40 {
			lines = lines[len(lines)-40:]
		}
		fmt.Printf("--- %s (last lines)\n%s\n", name, strings.Join(lines, "\n"))
	}
}

// waitFor polls ok every 100 ms until it holds or ctx ends.
func waitFor(ctx context.Context, ok func() bool) bool {
	for {
		if ok() {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func within(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d)
}

func (h *harness) run(ctx context.Context, caddy, prom string) error {
	gwPort, adminPort, promPort := freePort(), freePort(), freePort()
	h.gw = fmt.Sprintf("http://localhost:%d", gwPort)
	h.promURL = fmt.Sprintf("http://127.0.0.1:%d", promPort)
	gateway, err := h.start("caddy", []string{fmt.Sprintf("CODEMODE_PORT=%d", gwPort), fmt.Sprintf("CODEMODE_ADMIN=127.0.0.1:%d", adminPort)},
		caddy, "run", "--config", "Caddyfile.example")
	if err != nil {
		return err
	}
	rules, err := filepath.Abs("docs/prometheus/alerts.yml")
	if err != nil {
		return err
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: codemode
    static_configs:
      - targets: ["127.0.0.1:%d"]
`, rules, adminPort)
	cfgPath := filepath.Join(h.work, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return err
	}
	if _, err := h.start("prometheus", nil, prom, "--config.file="+cfgPath,
		"--storage.tsdb.path="+filepath.Join(h.work, "data"),
		fmt.Sprintf("--web.listen-address=127.0.0.1:%d", promPort)); err != nil {
		return err
	}
	wctx, cancel := within(ctx, 60*time.Second)
	defer cancel()
	if !waitFor(wctx, func() bool { return get(h.gw+"/healthz") == nil && get(h.promURL+"/-/ready") == nil }) {
		return errors.New("the gateway or Prometheus did not come up in 60 s")
	}

	// Traffic in two halves with scrapes between them, as on a live
	// gateway: a rate needs two samples of a series.
	wctx, cancel = within(ctx, 30*time.Second)
	defer cancel()
	if !waitFor(wctx, func() bool { v, _ := h.scalar(ctx, `up`); return v == 1 }) {
		return errors.New("Prometheus did not scrape the gateway in 30 s")
	}
	// The guarded route's limit counts in windows aligned to the minute
	// (docs/guard.md): traffic that straddles a minute's end is weighed with
	// the previous window's share and lets one more request in. Both halves
	// run within one minute.
	clearOfMinuteEnd(30 * time.Second)
	h.traffic(ctx, 0)
	time.Sleep(2500 * time.Millisecond)
	h.traffic(ctx, 1)
	// Every labelled series the traffic created needs two scrapes for a
	// rate; the scripts are counted when they end.
	wctx, cancel = within(ctx, 30*time.Second)
	defer cancel()
	if !waitFor(wctx, func() bool {
		v, _ := h.scalar(ctx, `sum(codemode_broker_executions_finished_total)`)
		return v >= 44
	}) {
		return errors.New("Prometheus did not see the 44 executions in 30 s")
	}
	time.Sleep(3 * time.Second)

	h.targetUp(ctx, adminPort)
	h.dashboard(ctx)
	h.alerts(ctx, gateway.Process.Pid)
	return nil
}

func get(u string) error {
	resp, err := http.Get(u)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", u, resp.Status)
	}
	return nil
}

func post(ctx context.Context, u string, hdr map[string]string, body string) (int, http.Header, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, strings.NewReader(body))
	if err != nil {
		return 0, nil, err.Error()
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// traffic: 20 executions calling two demo tools, 2 syntax errors, the
// guarded route (past its limit of 5 a minute in the second half), and MCP
// meta-tool calls.
func (h *harness) traffic(ctx context.Context, half int) {
	ok := 0
	for i := 0; i < 20; i++ {
		code, _, body := post(ctx, h.gw+"/broker/execute", nil,
			`{"code":"const s = await callTool(\"math:add\", {a: 2, b: 3}); return (await callTool(\"text:upper\", {text: \"x\" + s.sum})).text"}`)
		if code == http.StatusOK && strings.Contains(body, `"X5"`) {
			ok++
		}
	}
	h.check("20 executions calling math:add and text:upper", ok == 20, fmt.Sprintf("%d of 20 answered X5", ok))
	bad := 0
	for i := 0; i < 2; i++ {
		if _, _, body := post(ctx, h.gw+"/broker/execute", nil, `{"code":"return ("}`); strings.Contains(body, "SYNTAX") || strings.Contains(body, "syntax") {
			bad++
		}
	}
	h.check("2 executions with a syntax error", bad == 2, fmt.Sprintf("%d of 2 reported a syntax error", bad))
	refused, wantRefused := 0, 2*half
	for i := 0; i < 3+half; i++ {
		resp, err := http.Get(h.gw + "/limited")
		if err == nil {
			if resp.StatusCode == http.StatusTooManyRequests {
				refused++
			}
			resp.Body.Close()
		}
	}
	h.check("the guarded route refuses past its limit", refused == wantRefused, fmt.Sprintf("%d refused, want %d", refused, wantRefused))

	mcp := map[string]string{"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}
	code, hdr, body := post(ctx, h.gw+"/mcp", mcp,
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"ci-prometheus","version":"1"}}}`)
	sid := hdr.Get("Mcp-Session-Id")
	if code != http.StatusOK || sid == "" {
		h.check("MCP initialize", false, fmt.Sprintf("%d %q", code, body))
		return
	}
	mcp["Mcp-Session-Id"] = sid
	post(ctx, h.gw+"/mcp", mcp, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	calls := 0
	for i, call := range []string{
		`{"name":"meta:search","arguments":{"queries":["add two numbers"]}}`,
		`{"name":"meta:describe","arguments":{"toolNames":["math:add"]}}`,
		`{"name":"meta:invoke","arguments":{"tool":"math:add","input":{"a":1,"b":2}}}`,
	} {
		code, _, body := post(ctx, h.gw+"/mcp", mcp, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":%s}`, i+2, call))
		if code == http.StatusOK && strings.Contains(body, `"result"`) && !strings.Contains(body, `"isError":true`) {
			calls++
		}
	}
	h.check("MCP meta:search, meta:describe and meta:invoke", calls == 3, fmt.Sprintf("%d of 3 answered", calls))
}

type promResp struct {
	Status    string          `json:"status"`
	Error     string          `json:"error"`
	ErrorType string          `json:"errorType"`
	Data      json.RawMessage `json:"data"`
}

func (h *harness) api(ctx context.Context, path string, q url.Values) (promResp, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.promURL+path+"?"+q.Encode(), nil)
	if err != nil {
		return promResp{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return promResp{}, err
	}
	defer resp.Body.Close()
	var r promResp
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return r, fmt.Errorf("%s: %s: %w", path, resp.Status, err)
	}
	if r.Status != "success" {
		return r, fmt.Errorf("%s: %s: %s", r.ErrorType, r.Error, q.Get("query"))
	}
	return r, nil
}

type sample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

// query evaluates an instant query; it returns the samples whose value is a
// number (NaN, as a quantile of no observations, is no data).
func (h *harness) query(ctx context.Context, q string) ([]sample, error) {
	r, err := h.api(ctx, "/api/v1/query", url.Values{"query": {q}})
	if err != nil {
		return nil, err
	}
	var data struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(r.Data, &data); err != nil {
		return nil, err
	}
	if data.ResultType != "vector" {
		return nil, fmt.Errorf("%s: result type %s", q, data.ResultType)
	}
	var all, out []sample
	if err := json.Unmarshal(data.Result, &all); err != nil {
		return nil, err
	}
	for _, s := range all {
		v, _ := s.Value[1].(string)
		if f, err := strconv.ParseFloat(v, 64); err == nil && f == f {
			out = append(out, s)
		}
	}
	return out, nil
}

func (h *harness) scalar(ctx context.Context, q string) (float64, error) {
	s, err := h.query(ctx, q)
	if err != nil || len(s) != 1 {
		return 0, err
	}
	v, _ := s[0].Value[1].(string)
	return strconv.ParseFloat(v, 64)
}

func (h *harness) targetUp(ctx context.Context, adminPort int) {
	v, err := h.scalar(ctx, fmt.Sprintf(`up{instance="127.0.0.1:%d"}`, adminPort))
	h.check("Prometheus scrapes the admin endpoint's /metrics", err == nil && v == 1, fmt.Sprintf("up = %v, %v", v, err))
}

// dashboard evaluates every query of the Grafana dashboard with the
// instance variable at its "All" value.
func (h *harness) dashboard(ctx context.Context) {
	b, err := os.ReadFile("docs/grafana/caddy-codemode.json")
	if err != nil {
		h.check("read the dashboard", false, err.Error())
		return
	}
	var d any
	if err := json.Unmarshal(b, &d); err != nil {
		h.check("parse the dashboard", false, err.Error())
		return
	}
	var exprs []string
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if e, ok := v["expr"].(string); ok {
				exprs = append(exprs, e)
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(d)
	// Series the traffic above must have fed (the others, such as Redis
	// errors or tokens issued, stay empty on a healthy in-memory gateway).
	fed := []string{
		"codemode_broker_executions_started_total", "codemode_sandbox_workers{", "codemode_tool_calls_total",
		"codemode_meta_calls_total", "codemode_broker_execution_duration_seconds_bucket",
		"codemode_tool_call_duration_seconds_bucket", "codemode_sandbox_worker_memory_limit_bytes",
		"codemode_sandbox_workers_resident_memory_bytes", "codemode_meta_search_duration_seconds_bucket",
		"codemode_broker_executions_finished_total", "codemode_guard_decisions_total", "codemode_sandbox_scripts_total",
		"codemode_catalog_source_last_success_timestamp_seconds",
		"codemode_catalog_source_operations", "codemode_oauth_signing_key_age_seconds",
	}
	var failed, empty []string
	for _, e := range exprs {
		q := strings.ReplaceAll(e, "$instance", ".*")
		s, err := h.query(ctx, q)
		if err != nil {
			failed = append(failed, err.Error())
			continue
		}
		for _, f := range fed {
			if strings.Contains(e, f) && len(s) == 0 {
				empty = append(empty, e)
			}
		}
	}
	h.check(fmt.Sprintf("every dashboard query (%d) evaluates in Prometheus", len(exprs)), len(exprs) > 30 && len(failed) == 0,
		fmt.Sprintf("%d queries; failed: %s", len(exprs), strings.Join(failed, "; ")))
	h.check("the panels the traffic fed have data", len(empty) == 0, "no data: "+strings.Join(empty, "; "))

	outcomes := map[string]bool{}
	s, _ := h.query(ctx, `sum by (outcome) (increase(codemode_broker_executions_finished_total[5m]))`)
	for _, x := range s {
		outcomes[x.Metric["outcome"]] = true
	}
	h.check("executions by outcome: completed and syntax_error", outcomes["completed"] && outcomes["syntax_error"], fmt.Sprint(s))
	v, err := h.scalar(ctx, `sum(codemode_guard_decisions_total{rule="rate_limit",outcome="rate_limited"})`)
	h.check("guard decisions: the 2 rate_limit refusals counted", err == nil && v == 2, fmt.Sprintf("%v %v", v, err))

	// The dashboard's variable: label_values(codemode_broker_executions_started_total, instance).
	r, err := h.api(ctx, "/api/v1/label/instance/values", url.Values{"match[]": {"codemode_broker_executions_started_total"}})
	var values []string
	if err == nil {
		err = json.Unmarshal(r.Data, &values)
	}
	h.check("the dashboard's instance variable lists the gateway", err == nil && len(values) == 1, fmt.Sprintf("%v %v", values, err))
}

// alerts checks the rules of docs/prometheus/alerts.yml in the running
// Prometheus: all loaded and evaluating, none firing on a healthy gateway;
// then a worker killed from outside must fire CodemodeWorkersCrashing.
func (h *harness) alerts(ctx context.Context, gateway int) {
	r, err := h.api(ctx, "/api/v1/rules", url.Values{"type": {"alert"}})
	var data struct {
		Groups []struct {
			Rules []struct {
				Name           string `json:"name"`
				Health         string `json:"health"`
				LastError      string `json:"lastError"`
				State          string `json:"state"`
				LastEvaluation string `json:"lastEvaluation"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err == nil {
		err = json.Unmarshal(r.Data, &data)
	}
	n, bad, active := 0, []string{}, []string{}
	for _, g := range data.Groups {
		for _, rule := range g.Rules {
			n++
			if rule.Health != "ok" || strings.HasPrefix(rule.LastEvaluation, "0001") {
				bad = append(bad, rule.Name+": "+rule.Health+" "+rule.LastError)
			}
			if rule.State != "inactive" {
				active = append(active, rule.Name+" "+rule.State)
			}
		}
	}
	h.check("every alerting rule loaded and evaluates", err == nil && n == 12 && len(bad) == 0, fmt.Sprintf("%d rules, %v, %v", n, bad, err))
	h.check("no alert is pending or firing on a healthy gateway", len(active) == 0, strings.Join(active, "; "))

	pid, err := workerPID(gateway)
	if err != nil {
		h.check("find a sandbox worker", false, err.Error())
		return
	}
	_ = syscall.Kill(pid, syscall.SIGSEGV)
	wctx, cancel := within(ctx, 30*time.Second)
	defer cancel()
	var alerts []string
	fired := waitFor(wctx, func() bool {
		r, err := h.api(ctx, "/api/v1/alerts", nil)
		if err != nil {
			return false
		}
		var d struct {
			Alerts []struct {
				Labels map[string]string `json:"labels"`
				State  string            `json:"state"`
			} `json:"alerts"`
		}
		if json.Unmarshal(r.Data, &d) != nil {
			return false
		}
		alerts = alerts[:0]
		for _, a := range d.Alerts {
			alerts = append(alerts, a.Labels["alertname"]+" "+a.State)
		}
		return len(alerts) == 1 && alerts[0] == "CodemodeWorkersCrashing firing"
	})
	h.check("a worker killed by SIGSEGV fires CodemodeWorkersCrashing (and nothing else)", fired, fmt.Sprint(alerts))
}

// workerPID finds a worker process of the gateway (its pool keeps at
// least one): a child of it started as `codemode-worker`.
func workerPID(gateway int) (int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		args := bytes.Split(cmdline, []byte{0})
		if len(args) < 2 || string(args[1]) != "codemode-worker" {
			continue
		}
		// stat: pid (comm) state ppid ...; comm may hold spaces.
		stat, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(gateway) {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no codemode-worker process of the gateway (pid %d)", gateway)
}

// clearOfMinuteEnd waits for the next minute (of Unix time, to which the
// guard's windows are aligned) when less than need is left of this one.
func clearOfMinuteEnd(need time.Duration) {
	now := time.Now()
	next := now.Truncate(time.Minute).Add(time.Minute)
	if next.Sub(now) < need {
		time.Sleep(time.Until(next) + 100*time.Millisecond)
	}
}
