package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/dop251/goja"
)

// TestWarmRuntimeIsolation: with runtimes prepared ahead of their requests,
// every script still starts from a runtime no other script touched, gets
// its own request's context and limits, and the generator and RegExp
// hardening that only some plans need is applied to prepared runtimes too.
func TestWarmRuntimeIsolation(t *testing.T) {
	engine := NewInProcess(&Options{Limits: Limits{MaxSteps: 10000}})
	defer engine.Close()
	ctx := context.Background()
	run := func(code string, req Request) *Result {
		t.Helper()
		req.Code = code
		r, err := engine.Execute(ctx, req, newTestHost(nil))
		if err != nil {
			t.Fatalf("%s: %v", code, err)
		}
		return r
	}
	const polluter = `Object.prototype.leak = 1; Array.prototype.push = null; String.prototype.trim = () => "x"; return 1`
	const checker = `return [({}).leak === undefined, typeof [].push === "function", " a ".trim() === "a", metaContext.n]`
	for i := 0; i < 5; i++ {
		if r := run(polluter, Request{}); r.Status != StatusOK {
			t.Fatalf("polluter: %s", describeResult(r))
		}
		want := fmt.Sprintf("[true,true,true,%d]", i)
		r := run(checker, Request{Context: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))})
		if r.Status != StatusOK || string(r.Result) != want {
			t.Fatalf("round %d: %s, want %s", i, describeResult(r), want)
		}
		// A request's lower limit applies to a prepared runtime.
		r = run(`for (;;) {}`, Request{Limits: Limits{MaxSteps: int64(50 + i)}})
		if r.Status != StatusRuntimeError || !strings.Contains(r.Error.Message, fmt.Sprintf("step limit of %d ", 50+i)) || r.Stats.Steps != int64(51+i) {
			t.Fatalf("round %d: %s steps=%d", i, describeResult(r), r.Stats.Steps)
		}
		// Generator and RegExp hardening come with configuration.
		r = run(`const G = Reflect.getPrototypeOf(function* () {}); const F = Reflect.get(G, "con" + "structor"); try { F("return 1"); return "escaped" } catch (e) { return e.message }`, Request{})
		if r.Status != StatusOK || !strings.Contains(string(r.Result), "code generation from strings is disabled") {
			t.Fatalf("round %d, GeneratorFunction: %s", i, describeResult(r))
		}
		r = run(`try { new RegExp("(".repeat(200) + ")".repeat(200)); return "compiled" } catch (e) { return e.message }`, Request{})
		if r.Status != StatusOK || !strings.Contains(string(r.Result), "nests groups deeper") {
			t.Fatalf("round %d, RegExp: %s", i, describeResult(r))
		}
	}
}

// TestWarmRuntimeConcurrent: concurrent scripts each get a runtime of their
// own (a global one script sets is never seen by another), whether they
// take a prepared runtime, wait for one or set up their own.
func TestWarmRuntimeConcurrent(t *testing.T) {
	engine := NewInProcess(&Options{Limits: Limits{MaxSteps: 100000}})
	defer engine.Close()
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 8; i++ {
				id := g*100 + i
				code := fmt.Sprintf(`if (Object.prototype.owner !== undefined) return "saw " + Object.prototype.owner; Object.prototype.owner = %d; let s = 0; for (let k = 0; k < 1000; k++) s += k; return ({}).owner === %d && metaContext.id === %d`, id, id, id)
				r, err := engine.Execute(context.Background(), Request{Code: code, Context: json.RawMessage(fmt.Sprintf(`{"id":%d}`, id))}, newTestHost(nil))
				if err != nil || r.Status != StatusOK || string(r.Result) != "true" {
					errs <- fmt.Sprintf("%d: %v %s", id, err, describeResult(r))
					return
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// TestWarmRuntimeAfterClose: a closed engine keeps no prepared runtime.
func TestWarmRuntimeAfterClose(t *testing.T) {
	e := NewInProcess(nil).(*InProcess)
	if r, err := e.Execute(context.Background(), Request{Code: `return 1`}, newTestHost(nil)); err != nil || r.Status != StatusOK {
		t.Fatalf("%v %s", err, describeResult(r))
	}
	_ = e.Close()
	waitFor(t, "the build under way to end", func() bool {
		e.warm.mu.Lock()
		defer e.warm.mu.Unlock()
		return e.warm.building == nil
	})
	e.warm.mu.Lock()
	defer e.warm.mu.Unlock()
	if e.warm.ready != nil {
		t.Error("a closed engine still holds a prepared runtime")
	}
}

// TestPreludeFailsClosedUntilConfigured: a runtime set up ahead of its
// request refuses what its limits guard until configure brings them, and
// configure runs once only.
func TestPreludeFailsClosedUntilConfigured(t *testing.T) {
	x := &execution{rt: goja.New()}
	if err := x.runPrelude(); err != nil {
		t.Fatal(err)
	}
	rt := x.rt
	if _, err := x.prelude.result(goja.Undefined(), rt.ToValue("a")); err == nil || !strings.Contains(err.Error(), "limit of 0 bytes") {
		t.Fatalf("result before configure: %v", err)
	}
	if _, err := rt.RunString(`"ab".repeat(2)`); err == nil || !strings.Contains(err.Error(), "sandbox limit of 0") {
		t.Fatalf("repeat before configure: %v", err)
	}
	x.init(context.Background(), Limits{MaxSteps: 100}, Request{Context: json.RawMessage(`{"k":1}`)}, newTestHost(nil))
	defer x.cancel(nil)
	if _, _, _, _, res, err := x.setup(false); res != nil || err != nil {
		t.Fatalf("setup: %v %s", err, describeResult(res))
	}
	v, err := x.prelude.result(goja.Undefined(), rt.ToValue("a"))
	if err != nil || v.String() != `"a"` {
		t.Fatalf("result after configure: %v %v", v, err)
	}
	if _, err := x.prelude.configure(goja.Undefined(), rt.ToValue(`{}`), rt.NewObject()); err == nil || !strings.Contains(err.Error(), "already configured") {
		t.Fatalf("second configure: %v", err)
	}
}
