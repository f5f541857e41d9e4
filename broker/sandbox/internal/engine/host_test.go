package engine

import (
	"context"
	"encoding/json"
	"sort"
	"sync"
)

// toolFunc is a test tool: JSON in, JSON out.
type toolFunc func(input json.RawMessage) (json.RawMessage, error)

// testHost is a Host over a map of tool functions. It records calls and
// console entries and is safe for concurrent use. Both engines' tests use it.
type testHost struct {
	tools map[string]toolFunc
	infos map[string]ToolInfo

	mu    sync.Mutex
	calls []ToolCall
	logs  []string
}

// newTestHost returns a host serving tools; every tool is described with a
// generic schema unless setInfo overrides it.
func newTestHost(tools map[string]func(json.RawMessage) (json.RawMessage, error)) *testHost {
	h := &testHost{tools: map[string]toolFunc{}, infos: map[string]ToolInfo{}}
	for n, f := range tools {
		h.tools[n] = f
		h.infos[n] = ToolInfo{
			Name:        n,
			Description: "test tool " + n,
			InputSchema: json.RawMessage(`{"type":"object"}`),
		}
	}
	return h
}

func (h *testHost) setInfo(info ToolInfo) { h.infos[info.Name] = info }

func (h *testHost) LookupTool(name string) (ToolInfo, bool) {
	info, ok := h.infos[name]
	return info, ok
}

func (h *testHost) CallTool(ctx context.Context, call ToolCall) (json.RawMessage, error) {
	h.mu.Lock()
	h.calls = append(h.calls, call)
	h.mu.Unlock()
	f, ok := h.tools[call.Name]
	if !ok {
		return nil, &ToolError{Code: "NOT_FOUND", Message: "no such tool"}
	}
	return f(call.Input)
}

func (h *testHost) Log(level, message string) {
	h.mu.Lock()
	h.logs = append(h.logs, level+": "+message)
	h.mu.Unlock()
}

// callNames returns the names of the tools called so far, sorted.
func (h *testHost) callNames() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]string, len(h.calls))
	for i, c := range h.calls {
		out[i] = c.Name
	}
	sort.Strings(out)
	return out
}

func (h *testHost) callCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.calls)
}

// echoTools is a small standard tool set: echo returns its input, fail
// fails with a tool error, boom fails with a plain error, add sums a and b.
func echoTools() map[string]func(json.RawMessage) (json.RawMessage, error) {
	return map[string]func(json.RawMessage) (json.RawMessage, error){
		"echo": func(in json.RawMessage) (json.RawMessage, error) { return in, nil },
		"fail": func(json.RawMessage) (json.RawMessage, error) {
			return nil, &ToolError{Code: "RATE_LIMIT", Message: "slow down"}
		},
		"boom": func(json.RawMessage) (json.RawMessage, error) {
			return nil, errBoom
		},
		"add": func(in json.RawMessage) (json.RawMessage, error) {
			var a struct{ A, B float64 }
			if err := json.Unmarshal(in, &a); err != nil {
				return nil, &ToolError{Code: "VALIDATION_ERROR", Message: err.Error()}
			}
			return json.Marshal(a.A + a.B)
		},
		"invalid": func(json.RawMessage) (json.RawMessage, error) {
			return json.RawMessage(`{not json`), nil
		},
	}
}

type boomError struct{}

func (boomError) Error() string { return "exploded in /srv/tools/boom.go" }

var errBoom error = boomError{}

// run is a helper executing code with the standard tools.
func run(engine Engine, code string) (*Result, *testHost, error) {
	h := newTestHost(echoTools())
	res, err := engine.Execute(context.Background(), Request{Code: code}, h)
	return res, h, err
}
