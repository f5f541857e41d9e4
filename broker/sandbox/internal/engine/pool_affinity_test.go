package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// hostsOf reports, for each live worker that hosts executions, the
// executions it hosts by principal.
func hostsOf(p *workerPool) []map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []map[string]int
	for w := range p.all {
		if w.hosted == 0 {
			continue
		}
		m := map[string]int{}
		for pr, n := range w.principals {
			m[pr.name] = n
		}
		out = append(out, m)
	}
	return out
}

// pidOf returns the pid of the live worker hosting an execution of
// principal (0 when none does).
func pidOf(p *workerPool, principal string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for w := range p.all {
		w.mu.Lock()
		for _, st := range w.execs {
			if st.pr.name == principal {
				w.mu.Unlock()
				return w.pid
			}
		}
		w.mu.Unlock()
	}
	return 0
}

// TestAttackerCannotEndAnotherPrincipalsSession: a principal whose script
// brings its worker down does not end another principal's waiting
// scripts: placement keeps principals on workers of their own while the
// pool is below MaxWorkers. The victim parks two scripts with the spare
// up, so that a placement that spreads by load (as before principal
// affinity) puts the victim on every worker the pool may have, and the
// attacker next to one of them.
//
// The engine stops every memory and CPU bomb known to it inside the worker
// (TestWorkerMemoryBombs, TestAbuseWorkers: the heap watchdog answers
// WORKER_MEMORY_EXCEEDED and the worker lives), so the worker death a bomb
// the engine does not know would cause is played by SIGKILL of the
// process hosting the attacker's script, the same death the kernel deals
// at RLIMIT_DATA.
func TestAttackerCannotEndAnotherPrincipalsSession(t *testing.T) {
	p := newRealPool(t, PoolOptions{
		RuntimePoolOptions: RuntimePoolOptions{MinSize: 1, MaxSize: 1},
		MaxWorkers:         2,
	})
	wp := p.(*workerPool)
	h := newGateHost()
	settled := func(what string, live int) {
		t.Helper()
		waitFor(t, what, func() bool {
			l, _, busy, starting, _ := wp.stats()
			return l == live && busy == 0 && starting == 0
		})
	}
	v1 := execAsync(p, "victim", `return await callTool("wait", {gate: "v"})`, h)
	<-h.started
	settled("the victim's first script parked and the spare up", 2)
	v2 := execAsync(p, "victim", `return await callTool("wait", {gate: "v"})`, h)
	<-h.started
	settled("the victim's second script parked", 2)
	attack := execAsync(p, "attacker", `await callTool("wait", {gate: "a"}); const a = []; for (;;) a.push("x".repeat(1e6) + a.length)`, h)
	<-h.started
	settled("the attacker's script parked", 2)

	pid := pidOf(wp, "attacker")
	if pid == 0 {
		t.Fatal("no worker hosts the attacker's script")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if r := <-attack; r.Error == nil || r.Error.Code != CodeWorkerLost {
		t.Fatalf("attacker: %s, want WORKER_LOST", describeResult(r))
	}
	close(h.gate("v"))
	for _, ch := range []chan *Result{v1, v2} {
		wantOK(t, <-ch, `"opened"`)
	}
	wantOK(t, mustRun(t, p, "return 1", h), "1")
}

// TestOnePrincipalsWaitingScriptsShareAWorker: affinity does not cost the
// cheap wait: one principal's waiting scripts fill the seats of as few
// workers as they need, and the spare stays empty for other principals.
func TestOnePrincipalsWaitingScriptsShareAWorker(t *testing.T) {
	const n, seats = 20, 8
	p := newRealPool(t, PoolOptions{RuntimePoolOptions: RuntimePoolOptions{MinSize: 1, MaxSize: 1}, SessionsPerWorker: seats})
	wp := p.(*workerPool)
	h := newGateHost()
	var waiting []chan *Result
	for range n {
		waiting = append(waiting, execAsync(p, "waiter", `return await callTool("wait", {gate: "g"})`, h))
	}
	for range n {
		<-h.started
	}
	waitFor(t, "every script parked and a spare up", func() bool {
		_, idle, busy, starting, _ := wp.stats()
		return busy == 0 && starting == 0 && idle >= 1
	})
	hosts := hostsOf(wp)
	if want := (n + seats - 1) / seats; len(hosts) != want {
		t.Fatalf("%d waiting scripts of one principal on %d workers %v, want %d", n, len(hosts), hosts, want)
	}
	// Another principal takes the spare, not a seat beside the waiter.
	wantOK(t, mustRunAs(t, p, "other", `return 40 + 2`, h), "42")
	close(h.gate("g"))
	for _, ch := range waiting {
		wantOK(t, <-ch, `"opened"`)
	}
}

// TestMixingAtMaxWorkers: with MaxWorkers alive and no worker free of
// other principals, a principal joins the worker hosting the fewest other
// principals, however many scripts they have there (the residual risk
// docs/sandbox.md states).
func TestMixingAtMaxWorkers(t *testing.T) {
	p := newRealPool(t, PoolOptions{
		RuntimePoolOptions: RuntimePoolOptions{MinSize: 1, MaxSize: 1},
		MaxWorkers:         2,
	})
	wp := p.(*workerPool)
	h := newGateHost()
	var waiting []chan *Result
	park := func(principal string) {
		t.Helper()
		waiting = append(waiting, execAsync(p, principal, `return await callTool("wait", {gate: "g"})`, h))
		<-h.started
		waitFor(t, principal+" parked and the pool settled", func() bool {
			live, _, busy, starting, _ := wp.stats()
			return live == 2 && busy == 0 && starting == 0
		})
	}
	hosting := func() string {
		var out []string
		for _, m := range hostsOf(wp) {
			var names []string
			for name, n := range m {
				names = append(names, fmt.Sprintf("%s:%d", name, n))
			}
			slices.Sort(names)
			out = append(out, strings.Join(names, ","))
		}
		slices.Sort(out)
		return strings.Join(out, " | ")
	}
	for _, pr := range []string{"a", "a", "a", "b"} {
		park(pr)
	}
	if got, want := hosting(), "a:3 | b:1"; got != want {
		t.Fatalf("hosting %q, want %q", got, want)
	}
	// At the max: c joins the worker with fewer scripts (one other
	// principal each), d the one with fewer other principals.
	park("c")
	park("d")
	if got, want := hosting(), "a:3,d:1 | b:1,c:1"; got != want {
		t.Fatalf("hosting %q, want %q", got, want)
	}
	close(h.gate("g"))
	for _, ch := range waiting {
		wantOK(t, <-ch, `"opened"`)
	}
}

func mustRunAs(t testing.TB, e Engine, principal, code string, host Host) *Result {
	t.Helper()
	res, err := e.Execute(context.Background(), Request{Code: code, Principal: principal}, host)
	if err != nil {
		t.Fatalf("%q: Execute error %v", code, err)
	}
	return res
}
