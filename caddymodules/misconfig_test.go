package caddymodules

import (
	"strings"
	"testing"
)

// TestBrokerAPIKeysUnique: one api key given to two users fails the load,
// without the key in the message. Before, the first user silently got
// every request made with it.
func TestBrokerAPIKeysUnique(t *testing.T) {
	quietCaddy(t)
	t.Setenv("CODEMODE_TEST_KEY_A", "k-0123456789")
	t.Setenv("CODEMODE_TEST_KEY_B", "k-0123456789")
	err := provisionApp([]byte(`{"broker":{"authentication":{"type":"api-key","keys":[` +
		`{"key":"{env.CODEMODE_TEST_KEY_A}","user_id":"alice"},{"key":"{env.CODEMODE_TEST_KEY_B}","user_id":"bob"}]}}}`))
	if err == nil || !strings.Contains(err.Error(), "keys 1 and 2 are the same") {
		t.Fatalf("one key for alice and bob: %v", err)
	}
	if strings.Contains(err.Error(), "k-0123456789") {
		t.Errorf("the error shows the key: %v", err)
	}
}

// TestBrokerToolCallsAboveTheSandboxRefused: a broker max_tool_calls above
// the sandbox's fails the load naming both, where it was accepted and every
// script stopped at the sandbox's limit (the secure preset's 100) anyway.
func TestBrokerToolCallsAboveTheSandboxRefused(t *testing.T) {
	quietCaddy(t)
	for _, tc := range []struct{ sandbox, want string }{
		{`{"engine":"inprocess","trusted_callers":true}`, "max_tool_calls 1000 is above the sandbox's max_tool_calls 100"},
		{`{"engine":"inprocess","trusted_callers":true,"preset":"experimental"}`, ""},
		{`{"engine":"inprocess","trusted_callers":true,"max_tool_calls":1000}`, ""},
	} {
		err := provisionApp([]byte(`{"sandbox":` + tc.sandbox + `,"broker":{"max_tool_calls":1000}}`))
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("sandbox %s: %v, want %q", tc.sandbox, err, tc.want)
		}
	}
}
