package metatools

import (
	"context"
	"encoding/json"

	"github.com/codemode-gateway/caddy-codemode/internal/tool"
)

// Tool is one tool as the meta-tools see it, whatever its source: the
// descriptor every tool source shares. A tool only the MCP client can answer
// (CallerAnswered: a broker registry tool without a handler) is asked of
// the client through elicitation by meta:execute and meta:invoke (see
// docs/metatools.md).
type Tool = tool.Descriptor

// Annotations are the MCP tool hints.
type Annotations = tool.Annotations

// Example is a usage example of meta:describe: a JavaScript snippet for
// meta:execute that uses callTool.
type Example = tool.Example

// ToolSource feeds tools into the index and runs them.
type ToolSource interface {
	// Tools lists the source's tools, with their index names.
	Tools(ctx context.Context) ([]Tool, error)
	// Call runs the tool with input that already passed its input schema and
	// returns its result as JSON. Errors of type *Error keep their code;
	// others become TOOL_EXECUTION_ERROR.
	Call(ctx context.Context, name string, input json.RawMessage) (json.RawMessage, error)
}

// ChangeNotifier is an optional ToolSource capability: the source calls every
// registered function when its tool list changes, and the index reloads it.
// OnChange returns the function that unregisters fn; Index.Close calls it.
type ChangeNotifier interface {
	OnChange(fn func()) (remove func())
}

// StaticSource is a fixed set of tools with Go handlers, for embedding and
// tests.
type StaticSource struct {
	List     []Tool
	Handlers map[string]func(ctx context.Context, input json.RawMessage) (json.RawMessage, error)
}

// Tools implements ToolSource.
func (s *StaticSource) Tools(context.Context) ([]Tool, error) { return s.List, nil }

// Call implements ToolSource.
func (s *StaticSource) Call(ctx context.Context, name string, input json.RawMessage) (json.RawMessage, error) {
	h, ok := s.Handlers[name]
	if !ok {
		return nil, &Error{Code: CodeNotFound, Message: "tool " + name + " has no handler"}
	}
	return h(ctx, input)
}
