package guard

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestResolvePartitionKey(t *testing.T) {
	full := PartitionKeyContext{SessionID: "s1", ClientIP: "10.0.0.1", UserID: "u1"}
	empty := PartitionKeyContext{}
	tests := []struct {
		name string
		p    PartitionKey
		pc   PartitionKeyContext
		want string
	}{
		{"unset", PartitionKey{}, full, "global"},
		{"global", PartitionKey{Strategy: "global"}, full, "global"},
		{"ip", PartitionKey{Strategy: "ip"}, full, "10.0.0.1"},
		{"ip absent", PartitionKey{Strategy: "ip"}, empty, "unknown-ip"},
		{"session", PartitionKey{Strategy: "session"}, full, "s1"},
		{"session absent", PartitionKey{Strategy: "session"}, empty, ""},
		{"userId", PartitionKey{Strategy: "userId"}, full, "u1"},
		{"userId absent", PartitionKey{Strategy: "userId"}, empty, "anonymous"},
		{"function", PartitionKey{Func: func(pc PartitionKeyContext) string { return "f:" + pc.UserID }}, full, "f:u1"},
		{"function wins over strategy", PartitionKey{Strategy: "ip", Func: func(PartitionKeyContext) string { return "x" }}, full, "x"},
	}
	for _, tt := range tests {
		if got := ResolvePartitionKey(tt.p, tt.pc); got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestBuildStorageKey(t *testing.T) {
	if got := BuildStorageKey("tool", "10.0.0.1"); got != "tool:10.0.0.1" {
		t.Errorf("got %q", got)
	}
	if got := BuildStorageKey("tool", "global", "rate"); got != "tool:global:rate" {
		t.Errorf("got %q", got)
	}
	if got := BuildStorageKey("tool", "p", ""); got != "tool:p" {
		t.Errorf("empty suffix: got %q", got)
	}
	// A part's ':' and '%' are escaped, so that no two parts make one key.
	if got := BuildStorageKey("math:add", "2001:db8::1", "rate"); got != "math%3Aadd:2001%3Adb8%3A%3A1:rate" {
		t.Errorf("colons: got %q", got)
	}
	if got := BuildStorageKey("a%3Ab", "100%"); got != "a%253Ab:100%25" {
		t.Errorf("percent signs: got %q", got)
	}
}

func TestPartitionKeyJSON(t *testing.T) {
	var c RateLimitConfig
	if err := json.Unmarshal([]byte(`{"maxRequests":5,"partitionBy":"userId"}`), &c); err != nil {
		t.Fatal(err)
	}
	if c.PartitionBy.Strategy != "userId" || c.MaxRequests != 5 {
		t.Fatalf("got %+v", c)
	}
	b, err := json.Marshal(c)
	if err != nil || string(b) != `{"maxRequests":5,"partitionBy":"userId"}` {
		t.Fatalf("marshal: %s %v", b, err)
	}
	b, _ = json.Marshal(RateLimitConfig{MaxRequests: 1})
	if string(b) != `{"maxRequests":1}` {
		t.Fatalf("unset partition marshalled as %s", b)
	}
	if err := json.Unmarshal([]byte(`{"maxRequests":5,"partitionBy":"tenant"}`), &c); err == nil || !strings.Contains(err.Error(), "tenant") {
		t.Fatalf("unknown strategy: %v", err)
	}
	if err := json.Unmarshal([]byte(`{"partitionBy":3}`), &c); err == nil {
		t.Fatal("number partition accepted")
	}
	if _, err := json.Marshal(RateLimitConfig{MaxRequests: 1, PartitionBy: PartitionKey{Func: func(PartitionKeyContext) string { return "" }}}); err == nil {
		t.Fatal("function partition marshalled")
	}
}

func TestValidateNamesField(t *testing.T) {
	tests := []struct {
		cfg  GuardConfig
		want string
	}{
		{GuardConfig{Global: &RateLimitConfig{}}, "global: maxRequests"},
		{GuardConfig{DefaultRateLimit: &RateLimitConfig{MaxRequests: 1, WindowMs: -1}}, "defaultRateLimit: windowMs"},
		{GuardConfig{DefaultRateLimit: &RateLimitConfig{MaxRequests: 1, PartitionBy: PartitionKey{Strategy: "x"}}}, "defaultRateLimit: partitionBy"},
		{GuardConfig{GlobalConcurrency: &ConcurrencyConfig{}}, "globalConcurrency: maxConcurrent"},
		{GuardConfig{DefaultConcurrency: &ConcurrencyConfig{MaxConcurrent: 1, QueueTimeoutMs: -1}}, "defaultConcurrency: queueTimeoutMs"},
		{GuardConfig{DefaultTimeout: &TimeoutConfig{}}, "defaultTimeout: executeMs"},
		{GuardConfig{IpFilter: &IpFilterConfig{AllowList: []string{"10.0.0.0/33"}}}, "ipFilter: allowList[0]"},
		{GuardConfig{IpFilter: &IpFilterConfig{DenyList: []string{"1.2.3.4", "nope"}}}, "ipFilter: denyList[1]"},
		{GuardConfig{IpFilter: &IpFilterConfig{DefaultAction: "block"}}, "ipFilter: defaultAction"},
		{GuardConfig{IpFilter: &IpFilterConfig{TrustedProxyDepth: -1}}, "ipFilter: trustedProxyDepth"},
		{GuardConfig{Storage: &StorageConfig{Provider: "etcd"}}, "storage: provider"},
		{GuardConfig{Storage: &StorageConfig{Port: 70000}}, "storage: port"},
		{GuardConfig{Storage: &StorageConfig{DB: -1}}, "storage: db"},
		{GuardConfig{Storage: &StorageConfig{FailureMode: "maybe"}}, "storage: failureMode"},
		{GuardConfig{Storage: &StorageConfig{TimeoutMs: -1}}, "storage: timeoutMs"},
	}
	for _, tt := range tests {
		err := tt.cfg.Validate()
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("Validate() = %v, want prefix %q", err, tt.want)
		}
	}
	ok := GuardConfig{
		Enabled: true, Storage: &StorageConfig{Provider: "redis", Port: 6379, FailureMode: "closed"},
		Global: &RateLimitConfig{MaxRequests: 1}, GlobalConcurrency: &ConcurrencyConfig{MaxConcurrent: 1},
		DefaultTimeout: &TimeoutConfig{ExecuteMs: 1},
		IpFilter:       &IpFilterConfig{AllowList: []string{"10.0.0.0/8", "::1"}, DefaultAction: "deny", TrustProxy: true, TrustedProxyDepth: 2},
	}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	var nilCfg *GuardConfig
	if err := nilCfg.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestGuardConfigJSON(t *testing.T) {
	src := `{"enabled":true,"storage":{"provider":"redis","host":"r","port":6380},"keyPrefix":"p:",
"global":{"maxRequests":100,"windowMs":1000,"partitionBy":"ip"},
"globalConcurrency":{"maxConcurrent":4,"queueTimeoutMs":250},
"defaultRateLimit":{"maxRequests":10},"defaultConcurrency":{"maxConcurrent":2,"partitionBy":"session"},
"defaultTimeout":{"executeMs":30000},
"ipFilter":{"allowList":["10.0.0.0/8"],"denyList":["10.0.0.9"],"defaultAction":"deny","trustProxy":true,"trustedProxyDepth":2}}`
	var c GuardConfig
	if err := json.Unmarshal([]byte(src), &c); err != nil {
		t.Fatal(err)
	}
	if !c.Enabled || c.Storage.Port != 6380 || c.Global.PartitionBy.Strategy != "ip" || c.GlobalConcurrency.QueueTimeoutMs != 250 ||
		c.DefaultConcurrency.PartitionBy.Strategy != "session" || c.DefaultTimeout.ExecuteMs != 30000 || c.IpFilter.TrustedProxyDepth != 2 {
		t.Fatalf("decoded %+v", c)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}
