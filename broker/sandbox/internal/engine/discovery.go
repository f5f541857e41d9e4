package engine

import (
	"context"
	"encoding/json"
	"strings"
)

// Discovery is an optional Host capability behind the script API's
// searchTools(query, options) and describeTool(name): a plan can find,
// inspect and call tools in one run. The meta-tools implement it over their
// tool index; a host without it makes both fail with TOOL_NOT_FOUND.
//
// Each use counts as one tool call against the run's limits (maxToolCalls,
// pending calls) and takes the run's time, like callTool.
type Discovery interface {
	// SearchTools answers searchTools: request is the JSON object
	// {"query": string, ...options} the script passed; the result is the
	// JSON the script receives (a list of tools).
	SearchTools(ctx context.Context, request json.RawMessage) (json.RawMessage, error)
	// DescribeTool answers describeTool: the tool's compact description as
	// JSON, or JSON null when there is no such tool.
	DescribeTool(ctx context.Context, name string) (json.RawMessage, error)
}

// The reserved names under which searchTools and describeTool travel the
// tool-call path (and the worker protocol) to the host. The NUL byte keeps
// them apart from every real tool name.
const (
	discoverySearch   = "\x00searchTools"
	discoveryDescribe = "\x00describeTool"
)

func isDiscovery(name string) bool { return strings.HasPrefix(name, "\x00") }

// discoveryForwarder marks a host that forwards discovery calls as calls
// (the worker's proxy to its parent, which dispatches them).
type discoveryForwarder interface{ forwardsDiscovery() }

// dispatch runs one tool call on the host: discovery calls go to its
// Discovery capability, every other call to CallTool.
func dispatch(ctx context.Context, h Host, tc ToolCall) (json.RawMessage, error) {
	if !isDiscovery(tc.Name) {
		return h.CallTool(ctx, tc)
	}
	if _, ok := h.(discoveryForwarder); ok {
		return h.CallTool(ctx, tc)
	}
	d, ok := h.(Discovery)
	what := strings.TrimPrefix(tc.Name, "\x00")
	if !ok {
		return nil, &ToolError{Code: CodeToolNotFound, Message: what + " is not available here"}
	}
	switch tc.Name {
	case discoverySearch:
		return d.SearchTools(ctx, tc.Input)
	case discoveryDescribe:
		var in struct {
			Name string `json:"name"`
		}
		if err := json.Unmarshal(tc.Input, &in); err != nil {
			return nil, &ToolError{Code: CodeValidationError, Message: "describeTool: the tool name must be a string"}
		}
		return d.DescribeTool(ctx, in.Name)
	}
	return nil, &ToolError{Code: CodeToolNotFound, Message: what + " is not available here"}
}
