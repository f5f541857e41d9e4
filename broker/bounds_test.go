package broker

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"
	"github.com/codemode-gateway/caddy-codemode/internal/jsonbound"
)

// TestLargeBodiesRefused: over a socket, /execute bodies within the 1 MiB
// body limit whose JSON holds more object members or array items than
// jsonbound.Request are refused before they are decoded (400
// VALIDATION_ERROR naming the bound), and allowedTools is bounded at
// MaxAllowedTools names. A caller's tool result is not bounded by shape:
// 30,000 keys reach the script. The broker answers an ordinary script
// after them all.
func TestLargeBodiesRefused(t *testing.T) {
	// The scripts read 120,000 values: generous limits for -race on a
	// loaded machine.
	_, srv := newTestBroker(t, func(o *BrokerOptions) {
		o.Engine = sandbox.NewInProcess(&sandbox.Options{Limits: sandbox.Limits{Timeout: 2 * time.Minute, CPUTime: time.Minute}})
		o.DefaultTimeout, o.MaxTimeout = 2*time.Minute, 2*time.Minute
	})
	names := func(n int) string { return `[` + strings.Repeat(`"math:add",`, n-1) + `"math:add"]` }
	manyKeys := `{` + strings.Repeat(`"a":0,`, 150_000) + `"b":0}`
	for _, tc := range []struct {
		name, body, want string
	}{
		{"200,000 allowedTools", `{"code":"return 1","allowedTools":[` + strings.Repeat(`"a",`, 200_000) + `"a"]}`, "more than 100000 array items"},
		{"150,000 keys in context", `{"code":"return 1","context":` + manyKeys + `}`, "more than 20000 object members"},
		{"150,000 unknown fields", strings.Replace(manyKeys, `{`, `{"code":"return 1",`, 1), "more than 20000 object members"},
		{"1,001 allowedTools", `{"code":"return 1","allowedTools":` + names(MaxAllowedTools+1) + `}`, fmt.Sprintf("allowedTools has %d names, more than the limit of %d", MaxAllowedTools+1, MaxAllowedTools)},
	} {
		code, _, body := do(t, http.MethodPost, srv.URL+"/execute", tc.body, nil)
		if code != http.StatusBadRequest || errorCode(t, body) != CodeValidationError || !strings.Contains(string(body), tc.want) {
			t.Errorf("%s: %d %s, want 400 VALIDATION_ERROR %q", tc.name, code, body, tc.want)
		}
	}
	// At the bounds: served.
	keys := jsonbound.Request.Members - 10
	items := jsonbound.Request.Items - MaxAllowedTools - 10
	var m strings.Builder
	for i := range keys {
		fmt.Fprintf(&m, `"%x":0,`, i)
	}
	within := fmt.Sprintf(`{"code":"return [Object.keys(metaContext.m).length, metaContext.l.length]","allowedTools":%s,"context":{"m":{%s"z":0},"l":[%s0]}}`,
		names(MaxAllowedTools), m.String(), strings.Repeat("0,", items-1))
	s := startExecute(t, srv.URL, json.RawMessage(within), nil)
	evs := append([]event{s.next()}, s.rest()...)
	if last := evs[len(evs)-1]; last.Type != EventResult || !strings.Contains(string(last.Payload), fmt.Sprintf(`[%d,%d]`, keys+1, items)) {
		t.Errorf("within the bounds: %s %s", last.Type, last.Payload)
	}

	// A tool result of 30,000 keys (different ones: the script counts them).
	s = startExecute(t, srv.URL, map[string]any{"code": `return Object.keys(await callTool("client:prompt", {question: "data?"})).length`}, nil)
	var sess Session
	s.next().decode(t, &sess)
	var call ToolCallPayload
	s.next().decode(t, &call)
	var result strings.Builder
	result.WriteString(`{"callId":"` + call.CallID + `","result":{"k0":0`)
	for i := 1; i < 30_000; i++ {
		fmt.Fprintf(&result, `,"%x":0`, i)
	}
	result.WriteString(`}}`)
	if code, _, body := do(t, http.MethodPost, srv.URL+"/sessions/"+sess.ID+"/tool-result", result.String(), nil); code != http.StatusOK {
		t.Fatalf("tool result of 30,000 keys: %d %s", code, body)
	}
	evs = s.rest()
	if last := evs[len(evs)-1]; last.Type != EventResult || !strings.Contains(string(last.Payload), `30000`) {
		t.Errorf("the script's count of the result's keys: %s %s", last.Type, last.Payload)
	}

	s = startExecute(t, srv.URL, map[string]any{"code": `return (await callTool("math:add", {a: 1, b: 2})).sum`}, nil)
	evs = append([]event{s.next()}, s.rest()...)
	if last := evs[len(evs)-1]; last.Type != EventResult || !strings.Contains(string(last.Payload), `"result":3`) {
		t.Errorf("after: %s %s", last.Type, last.Payload)
	}
}
