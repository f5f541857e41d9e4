package engine

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/codemode-gateway/caddy-codemode/broker/sandbox/internal/observe"
)

// TestUnknownToolReachesHost: a call of a tool the host does not know
// still reaches Host.CallTool (the broker's events and metrics count it),
// the script sees TOOL_NOT_FOUND whatever the host answered, and it counts
// against the tool call limit; with both engines.
func TestUnknownToolReachesHost(t *testing.T) {
	engines := map[string]Engine{
		"inprocess": NewInProcess(nil),
		"worker":    newRealPool(t, PoolOptions{RuntimePoolOptions: RuntimePoolOptions{MinSize: 1, MaxSize: 1}}),
	}
	for name, e := range engines {
		t.Run(name, func(t *testing.T) {
			h := newTestHost(echoTools())
			res := mustRun(t, e, `let code = ""; try { await callTool("no_such_tool", {x: 1}) } catch (e) { code = e.code }
return code`, h)
			wantOK(t, res, `"TOOL_NOT_FOUND"`)
			if got := strings.Join(h.callNames(), ","); got != "no_such_tool" {
				t.Fatalf("host saw calls %q", got)
			}
			res, err := e.Execute(context.Background(), Request{
				Code:   `for (let i = 0; i < 3; i++) { try { await callTool("nope", {}) } catch (e) {} } return 1`,
				Limits: Limits{MaxToolCalls: 2},
			}, h)
			if err != nil || res.Status == StatusOK {
				t.Fatalf("three unknown calls under a limit of 2: %v %s", err, describeResult(res))
			}
		})
	}
}

// TestPoolMetrics: scripts are counted by status and code, deaths by cause,
// starts and their duration, and the pool's workers, queue and resident
// memory are read at collection.
func TestPoolMetrics(t *testing.T) {
	m := NewMetrics()
	p, _ := newFakePool(t, PoolOptions{
		RuntimePoolOptions:     RuntimePoolOptions{MinSize: 1, MaxSize: 1},
		MemoryBytes:            64 << 20,
		MaxExecutionsPerWorker: 3,
		Metrics:                m,
	})
	h := newBlockingHost()
	for _, code := range []string{"ok 1", "crash", "alloc", "invalid", "ok 1", "ok 1", "ok 1"} {
		mustRun(t, p, code, h)
	}
	val := func(c prometheus.Collector) float64 { return testutil.ToFloat64(c) }
	for _, c := range []struct {
		status, code string
		want         float64
	}{
		{"ok", "ok", 4},
		{"runtime_error", "worker_crashed", 1},
		{"runtime_error", "worker_memory_exceeded", 1},
		{"runtime_error", "message_invalid", 1},
	} {
		if v := val(m.scripts.WithLabelValues(EngineWorker, c.status, c.code)); v != c.want {
			t.Errorf("scripts %s/%s = %v, want %v", c.status, c.code, v, c.want)
		}
	}
	for cause, want := range map[string]float64{DeathCrash: 1, DeathMemory: 1, DeathProtocol: 1, DeathRecycle: 1} {
		if v := val(m.deaths.WithLabelValues(cause)); v != want {
			t.Errorf("deaths %s = %v, want %v", cause, v, want)
		}
	}
	if n := testutil.CollectAndCount(m.startDuration); n != 1 {
		t.Errorf("start duration series %d", n)
	}
	waitFor(t, "a replacement worker", func() bool {
		_, idle, _, _, _ := p.gauges()
		return idle == 1
	})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	gauge := func(name, state string) float64 {
		for _, f := range families {
			if f.GetName() != name {
				continue
			}
			for _, mt := range f.GetMetric() {
				if state == "" || labelIs(mt, "state", state) {
					return mt.GetGauge().GetValue()
				}
			}
		}
		t.Fatalf("no %s{%s}", name, state)
		return 0
	}
	if gauge("codemode_sandbox_workers", "idle") != 1 || gauge("codemode_sandbox_workers", "busy") != 0 || gauge("codemode_sandbox_queue_length", "") != 0 {
		t.Errorf("worker gauges wrong: %v", families)
	}
	if rss := gauge("codemode_sandbox_workers_resident_memory_bytes", ""); rss <= 0 {
		t.Errorf("resident memory %v of a live worker", rss)
	}
	if lim := gauge("codemode_sandbox_worker_memory_limit_bytes", ""); lim != 64<<20 {
		t.Errorf("memory limit %v", lim)
	}
	// A closed pool leaves the gauges.
	p.Close()
	if v := val(m.deaths.WithLabelValues(DeathShutdown)); v != 1 {
		t.Errorf("shutdown deaths %v", v)
	}
	families, _ = reg.Gather()
	if gauge("codemode_sandbox_workers", "idle") != 0 {
		t.Error("a closed pool still counted")
	}
}

func labelIs(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue() == value
		}
	}
	return false
}

// TestInProcessMetrics: the in-process engine counts its scripts too.
func TestInProcessMetrics(t *testing.T) {
	m := NewMetrics()
	e := NewInProcess(&Options{Metrics: m})
	h := newTestHost(echoTools())
	mustRun(t, e, "return 1", h)
	mustRun(t, e, "return (", h)
	if v := testutil.ToFloat64(m.scripts.WithLabelValues(EngineInProcess, "ok", "ok")); v != 1 {
		t.Errorf("ok scripts %v", v)
	}
	if v := testutil.ToFloat64(m.scripts.WithLabelValues(EngineInProcess, "syntax_error", "syntax_error")); v != 1 {
		t.Errorf("syntax errors %v", v)
	}
}

// TestStartInterruptedByShutdown: a worker still starting when its pool
// shuts down (every reload does this to the replaced pool) is neither a
// start failure nor a warning; one that fails its handshake is both.
func TestStartInterruptedByShutdown(t *testing.T) {
	for _, shutdown := range []bool{true, false} {
		m := NewMetrics()
		core, logs := observer.New(zap.WarnLevel)
		ft := newFakeTimers()
		p, err := newWorkerPool(&PoolOptions{
			RuntimePoolOptions: RuntimePoolOptions{MinSize: -1, MaxSize: 1},
			Env:                []string{testWorkerEnv + "=silent"}, // never completes its handshake
			StartupTimeout:     testStartupTimeout,
			QueueTimeout:       testQueueTimeout,
			Metrics:            m,
			Logger:             observe.Zap{L: zap.New(core)},
		}, func(p *workerPool) { p.newTimer = ft.newTimer })
		if err != nil {
			t.Fatal(err)
		}
		ran := make(chan error, 1)
		go func() {
			_, err := p.Execute(context.Background(), Request{Code: "ok 1"}, newTestHost(nil))
			ran <- err
		}()
		waitFor(t, "a worker starting", func() bool { return ft.pending(testStartupTimeout) > 0 })
		if shutdown {
			p.Close()
		} else {
			ft.fire(testStartupTimeout)
		}
		if err := <-ran; err == nil {
			t.Fatalf("shutdown %v: the execution ran without a worker", shutdown)
		}
		p.Close()
		failures, warned := testutil.ToFloat64(m.startFailures), logs.FilterMessage("sandbox worker failed to start").Len()
		if shutdown && (failures != 0 || warned != 0) {
			t.Errorf("a start the shutdown interrupted: %v start failures, %d warnings", failures, warned)
		}
		if !shutdown && (failures != 1 || warned != 1) {
			t.Errorf("a start that timed out: %v start failures, %d warnings", failures, warned)
		}
	}
}

// TestDeathCausesExportedAtZero: every cause of worker_deaths_total is a
// series from the start, so that Prometheus' increase() sees the first
// death of a cause (it does not count a series' first sample).
func TestDeathCausesExportedAtZero(t *testing.T) {
	m := NewMetrics()
	if n := testutil.CollectAndCount(m.deaths, "codemode_sandbox_worker_deaths_total"); n != 9 {
		t.Errorf("%d worker_deaths_total series before any death, want 9", n)
	}
	// The queue wait's outcomes too (empty histograms).
	if n := testutil.CollectAndCount(m.queueWait, "codemode_sandbox_queue_wait_seconds"); n != 3 {
		t.Errorf("%d queue_wait_seconds series before any wait, want 3 (acquired, queue_timeout, aborted)", n)
	}
	if v := testutil.ToFloat64(m.deaths.WithLabelValues(DeathCrash)); v != 0 {
		t.Errorf("crash deaths %v, want 0", v)
	}
}
