package caddymodules

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"

	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"
)

// nullHost serves no tools.
type nullHost struct{}

func (nullHost) LookupTool(string) (sandbox.ToolInfo, bool) { return sandbox.ToolInfo{}, false }
func (nullHost) CallTool(context.Context, sandbox.ToolCall) (json.RawMessage, error) {
	return nil, &sandbox.ToolError{Code: "NOT_FOUND", Message: "no tools"}
}

// provisionSandboxApp provisions the sandbox area of an app whose sandbox
// block is raw; cancel cleans it up as Caddy does when the config goes.
func provisionSandboxApp(t *testing.T, raw string) (a *App, cancel func()) {
	t.Helper()
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	t.Cleanup(cancel)
	a = &App{ctx: ctx, logger: ctx.Logger()}
	if raw != "" {
		a.SandboxRaw = json.RawMessage(raw)
	}
	if err := a.provisionSandbox(ctx); err != nil {
		t.Fatalf("provisionSandbox(%s): %v", raw, err)
	}
	return a, cancel
}

func runScript(t *testing.T, e sandbox.Engine, code string) *sandbox.Result {
	t.Helper()
	r, err := e.Execute(context.Background(), sandbox.Request{Code: code}, nullHost{})
	if err != nil {
		t.Fatalf("Execute: %v", err)
	}
	return r
}

func TestSandboxEngines(t *testing.T) {
	for _, raw := range []string{
		"", // default: worker pool, secure preset
		`{"engine":"inprocess","preset":"locked_down","trusted_callers":true}`,
		`{"preset":"balanced","pool":{"max_size":2}}`, // the engine name may be left out
	} {
		a, cancel := provisionSandboxApp(t, raw)
		r := runScript(t, a.Engine(), "return 1+1")
		if r.Status != sandbox.StatusOK || string(r.Result) != "2" {
			t.Fatalf("%s: %s %s", raw, r.Status, r.Result)
		}
		cancel()
	}
}

// TestSandboxPoolSurvivesReload: the same sandbox block in the next config
// reuses the running pool; the old config's cleanup does not stop it.
func TestSandboxPoolSurvivesReload(t *testing.T) {
	old, cancelOld := provisionSandboxApp(t, `{"engine":"worker","pool":{"max_size":2}}`)
	next, cancelNext := provisionSandboxApp(t, `{"pool":{"max_size":2},"preset":"secure"}`)
	if old.Engine() != next.Engine() {
		t.Fatal("an unchanged sandbox block (defaults spelled out or not) started a new pool")
	}
	changed, _ := provisionSandboxApp(t, `{"pool":{"max_size":3}}`)
	if changed.Engine() == next.Engine() {
		t.Fatal("a changed sandbox block reused the pool")
	}
	cancelOld()
	if r := runScript(t, next.Engine(), "return 3"); r.Status != sandbox.StatusOK {
		t.Fatalf("after the old config's cleanup: %s %+v", r.Status, r.Error)
	}
	e := next.Engine()
	cancelNext()
	if _, err := e.Execute(context.Background(), sandbox.Request{Code: "return 1"}, nullHost{}); err == nil {
		t.Fatal("pool still serves after its last config was cleaned up")
	}
}

func TestSandboxConfigErrors(t *testing.T) {
	for _, raw := range []string{
		`{"engine":"threads"}`,
		`{"preset":"reckless"}`,
		`{"engine":"inprocess","pool":{"max_size":2}}`,
		`{"engine":"inprocess"}`, // untrusted callers: refused, with the reason
		`{"pool":{"max_size":1,"min_size":0},"max_steps":-1}`,
		`{"pool":{"scale_up_threshold":0.2,"scale_down_threshold":0.5}}`,
		`{"adapter":"worker"}`,
	} {
		ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
		a := &App{SandboxRaw: json.RawMessage(raw), ctx: ctx, logger: ctx.Logger()}
		if err := a.provisionSandbox(ctx); err == nil {
			t.Errorf("%s: provisioned", raw)
		}
		cancel()
	}
}

// leakyHost's one tool, db, fails with an internal address and a secret.
type leakyHost struct{}

func (leakyHost) LookupTool(name string) (sandbox.ToolInfo, bool) {
	return sandbox.ToolInfo{Name: name}, name == "db"
}

func (leakyHost) CallTool(context.Context, sandbox.ToolCall) (json.RawMessage, error) {
	return nil, errors.New("dial tcp 10.0.0.5:5432: refused; DB_PASSWORD=hunter2 (*net.OpError)")
}

// TestSanitizationIsOnePolicy: the sandbox block's policy reaches the tool
// errors scripts catch, in a worker process as in-process, and is the
// meta-tools' policy unless their block sets one.
func TestSanitizationIsOnePolicy(t *testing.T) {
	for _, raw := range []string{
		`{"engine":"inprocess","trusted_callers":true,"sanitization":{"remove_hosts":true,"remove_env_values":true,"remove_type_names":true}}`,
		`{"pool":{"max_size":1},"sanitization":{"remove_hosts":true,"remove_env_values":true,"remove_type_names":true}}`,
	} {
		a, cancel := provisionSandboxApp(t, raw)
		if p := a.sandbox.sanitize; !p.RemoveHosts || !p.RemoveEnvValues || !p.RemoveTypeNames {
			t.Errorf("%s: app policy %+v", raw, p)
		}
		r, err := a.Engine().Execute(context.Background(), sandbox.Request{Code: `try { await callTool("db", {}) } catch (e) { return e.message }`}, leakyHost{})
		if err != nil {
			t.Fatal(err)
		}
		got := string(r.Result)
		if r.Status != sandbox.StatusOK || strings.Contains(got, "10.0.0.5") || strings.Contains(got, "hunter2") || strings.Contains(got, "net.OpError") || !strings.Contains(got, "refused") {
			t.Errorf("%s: caught %s (%s)", raw, got, r.Status)
		}
		cancel()
	}
}

// waitingHost's one tool, wait, answers when release is closed; started
// gets a value when a script calls it.
type waitingHost struct{ started, release chan struct{} }

func (h waitingHost) LookupTool(name string) (sandbox.ToolInfo, bool) {
	return sandbox.ToolInfo{Name: name}, name == "wait"
}

func (h waitingHost) CallTool(ctx context.Context, _ sandbox.ToolCall) (json.RawMessage, error) {
	h.started <- struct{}{}
	select {
	case <-h.release:
		return json.RawMessage(`"answered"`), nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// TestRetiredPoolDrainsInTheBackground: the cleanup that lets go of a
// worker pool's last reference (the config it came from is gone, a reload
// changed the sandbox block) returns while the pool's scripts still run;
// they finish in the background, each up to its own limit, and a new
// script is refused at once. Before, that cleanup waited for them when it
// was the last reference, which on a reload is Caddy's Load (the old
// broker's background drain lets go of its reference too, and whichever
// was last waited): a reload under a meta:execute plan waiting for its
// client's answer did not return until the plan's execution timeout, and
// TestPlanOutlivesSandboxReload, whose client reloads before it answers,
// failed about once in 50 runs on a loaded machine.
func TestRetiredPoolDrainsInTheBackground(t *testing.T) {
	// The timeout is a backstop: the script is answered right after the
	// cleanup returns.
	a, cancel := provisionSandboxApp(t, `{"timeout":"30s","pool":{"max_size":1}}`)
	e := a.Engine()
	h := waitingHost{started: make(chan struct{}, 1), release: make(chan struct{})}
	done := make(chan *sandbox.Result, 1)
	go func() {
		r, err := e.Execute(context.Background(), sandbox.Request{Code: `return await callTool("wait", {})`}, h)
		if err != nil {
			r = &sandbox.Result{Status: sandbox.StatusRuntimeError, Error: &sandbox.ScriptError{Message: err.Error()}}
		}
		done <- r
	}()
	<-h.started
	cancel() // the config's cleanup: the pool's last reference
	if _, err := e.Execute(context.Background(), sandbox.Request{Code: "return 1"}, nullHost{}); err == nil {
		t.Error("the retired pool took a new script")
	}
	close(h.release)
	if r := <-done; r.Status != sandbox.StatusOK || string(r.Result) != `"answered"` {
		t.Fatalf("the script running when its pool was retired: %s %s %+v (the cleanup waited for it)", r.Status, r.Result, r.Error)
	}
}
