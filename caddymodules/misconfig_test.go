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
