package caddymodules

import (
	"context"
	"encoding/json"
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

func provisionSandboxApp(t *testing.T, cfg *SandboxConfig) *App {
	t.Helper()
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	t.Cleanup(cancel)
	a := &App{Sandbox: cfg, ctx: ctx, logger: ctx.Logger()}
	if err := a.provisionSandbox(ctx); err != nil {
		t.Fatalf("provisionSandbox: %v", err)
	}
	return a
}

func runScript(t *testing.T, e sandbox.Engine, code string) *sandbox.Result {
	t.Helper()
	r, err := e.Execute(context.Background(), sandbox.Request{Code: code}, nullHost{})
	if err != nil {
		t.Fatalf("Execute: %v", err)
	}
	return r
}

func TestSandboxAdapters(t *testing.T) {
	for _, cfg := range []*SandboxConfig{
		nil, // default: worker pool, secure preset
		{Adapter: SandboxAdapterInProcess, Preset: "locked_down"},
		{Preset: "balanced", Pool: &SandboxPool{MaxSize: 2}},
	} {
		a := provisionSandboxApp(t, cfg)
		r := runScript(t, a.Engine(), "return 1+1")
		if r.Status != sandbox.StatusOK || string(r.Result) != "2" {
			t.Fatalf("%+v: %s %s", cfg, r.Status, r.Result)
		}
		if err := a.held.releaseAll(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSandboxPoolSurvivesReload: the same sandbox block in the next config
// reuses the running pool; the old config's cleanup does not stop it.
func TestSandboxPoolSurvivesReload(t *testing.T) {
	cfg := &SandboxConfig{Pool: &SandboxPool{MaxSize: 2}}
	old := provisionSandboxApp(t, cfg)
	next := provisionSandboxApp(t, &SandboxConfig{Pool: &SandboxPool{MaxSize: 2}})
	if old.Engine() != next.Engine() {
		t.Fatal("an unchanged sandbox block started a new pool")
	}
	changed := provisionSandboxApp(t, &SandboxConfig{Pool: &SandboxPool{MaxSize: 3}})
	if changed.Engine() == next.Engine() {
		t.Fatal("a changed sandbox block reused the pool")
	}
	if err := old.held.releaseAll(); err != nil {
		t.Fatal(err)
	}
	if r := runScript(t, next.Engine(), "return 3"); r.Status != sandbox.StatusOK {
		t.Fatalf("after the old config's cleanup: %s %+v", r.Status, r.Error)
	}
	e := next.Engine()
	if err := next.held.releaseAll(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Execute(context.Background(), sandbox.Request{Code: "return 1"}, nullHost{}); err == nil {
		t.Fatal("pool still serves after its last config was cleaned up")
	}
	if err := changed.held.releaseAll(); err != nil {
		t.Fatal(err)
	}
}

func TestSandboxConfigErrors(t *testing.T) {
	for _, cfg := range []*SandboxConfig{
		{Adapter: "threads"},
		{Preset: "reckless"},
		{Adapter: SandboxAdapterInProcess, Pool: &SandboxPool{MaxSize: 2}},
		{Pool: &SandboxPool{MaxSize: 1, MinSize: new(int)}, MaxSteps: -1},
		{Pool: &SandboxPool{ScaleUpThreshold: 0.2, ScaleDownThreshold: 0.5}},
	} {
		ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
		a := &App{Sandbox: cfg, ctx: ctx, logger: ctx.Logger()}
		if err := a.provisionSandbox(ctx); err == nil {
			_ = a.held.releaseAll()
			t.Errorf("%+v: provisioned", cfg)
		}
		cancel()
	}
}
