package caddymodules

import (
	"context"
	"strings"
	"testing"

	"github.com/codemode-gateway/caddy-codemode/guard"
	"github.com/codemode-gateway/caddy-codemode/metatools"
)

// TestMetaLimiterUserPartitionKeepsTenantsApart: a meta-tool rule
// partitioned by userId counts the same user id in two tenants apart, as
// the broker's buckets do; otherwise one tenant's user could spend another
// tenant's user's calls.
func TestMetaLimiterUserPartitionKeepsTenantsApart(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	m, err := guard.NewGuardManager(ctx, guard.GuardConfig{Enabled: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	l := &metaLimiter{m: m, rules: map[string]*guard.RateLimitConfig{
		metatools.MetaExecute: {MaxRequests: 1, WindowMs: 60_000, PartitionBy: guard.PartitionKey{Strategy: guard.PartitionUserID}},
	}}
	call := func(tenant string) error {
		return l.Check(context.Background(), metatools.CallInfo{MetaTool: metatools.MetaExecute, UserID: "ada", TenantID: tenant, ClientIP: "192.0.2.1"})
	}
	if err := call("t1"); err != nil {
		t.Fatalf("first call of ada in t1: %v", err)
	}
	if err := call("t1"); err == nil {
		t.Fatal("second call of ada in t1 was allowed past a limit of 1")
	}
	if err := call("t2"); err != nil {
		t.Fatalf("ada of another tenant shares t1's bucket: %v", err)
	}
}

// TestMetaUpstreamNamesUnique: two upstreams of one name fail the load,
// from JSON as from the Caddyfile (meta_error_upstream_twice). Before, the
// config loaded, both servers listed their tools under one prefix, and a
// tool both offer reached the first only (the index keeps the first of a
// name).
func TestMetaUpstreamNamesUnique(t *testing.T) {
	quietCaddy(t)
	err := provisionApp([]byte(`{"meta":{"upstreams":[{"name":"calc","url":"http://127.0.0.1:9/mcp"},{"name":"calc","url":"http://127.0.0.1:10/mcp"}]}}`))
	if err == nil || !strings.Contains(err.Error(), `upstream "calc" is defined twice`) {
		t.Fatalf("two upstreams named calc: %v", err)
	}
}

// TestMetaIndexFilledAtProvision: the broker's tools are in the meta-tools'
// index once the app is provisioned, before its Start. Caddy starts its
// apps in map order, so the http app may serve this config's requests
// before the codemode app's Start has listed the tool sources: a
// meta:execute sent right after `caddy run` or a reload got TOOL_NOT_FOUND
// for client:prompt (found by restarting a killed gateway under a client;
// 2 of 3 runs of TestExitWithWaitingPlan before the fix).
func TestMetaIndexFilledAtProvision(t *testing.T) {
	quietCaddy(t)
	app, unload, err := loadApp([]byte(`{"broker":{"demo_tools":true},"meta":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	defer unload()
	for _, name := range []string{"client:prompt", "math:add"} {
		if _, ok := app.meta.rt.index.Lookup(name); !ok {
			t.Errorf("%s is not in the index of a provisioned, not started, app", name)
		}
	}
}
