package metatools

import (
	"context"
	"encoding/json"
)

// Tool is one tool as the meta-tools see it, whatever its source.
type Tool struct {
	// Name is unique in the index, namespaced as <app>:<tool> by the
	// catalog and upstream sources.
	Name string `json:"name"`
	// AppID is the owning app (the OpenAPI service or upstream server name).
	AppID       string `json:"appId"`
	Description string `json:"description"`
	// InputSchema is a JSON Schema object; empty means {"type":"object"}.
	InputSchema json.RawMessage `json:"inputSchema,omitempty"`
	// OutputSchema is a JSON Schema, or empty when the tool declares none.
	OutputSchema json.RawMessage `json:"outputSchema,omitempty"`
	Annotations  *Annotations    `json:"annotations,omitempty"`
	// Examples are declared usage examples; meta:describe lists them before
	// generated ones.
	Examples []Example `json:"examples,omitempty"`
	// Tags are indexed for search (OpenAPI tags, for example) and can be
	// filtered on.
	Tags []string `json:"tags,omitempty"`
	// CallerAnswered marks a tool that only the MCP client can answer (a
	// broker registry tool without a handler): meta:execute and meta:invoke
	// ask the client through elicitation (see docs/metatools.md).
	CallerAnswered bool `json:"callerAnswered,omitempty"`
	// Deprecated tools rank below equivalent current ones.
	Deprecated bool `json:"deprecated,omitempty"`
}

// Annotations are the MCP tool hints.
type Annotations struct {
	Title           string `json:"title,omitempty"`
	ReadOnlyHint    *bool  `json:"readOnlyHint,omitempty"`
	DestructiveHint *bool  `json:"destructiveHint,omitempty"`
	IdempotentHint  *bool  `json:"idempotentHint,omitempty"`
	OpenWorldHint   *bool  `json:"openWorldHint,omitempty"`
}

// Example is a usage example of meta:describe: a JavaScript snippet for
// meta:execute that uses callTool.
type Example struct {
	Description string `json:"description"`
	Code        string `json:"code"`
}

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
