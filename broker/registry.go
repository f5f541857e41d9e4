package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"
	"github.com/codemode-gateway/caddy-codemode/internal/notify"
	"github.com/codemode-gateway/caddy-codemode/internal/tool"
)

// ToolHandler runs one tool call in Go. input holds the validated arguments
// with declared defaults applied. The returned value is marshalled to JSON
// (a json.RawMessage passes through unchanged). A returned
// *sandbox.ToolError reaches the script with its code; any other error
// reaches it as TOOL_EXECUTION_ERROR with the error's text.
type ToolHandler func(ctx context.Context, input map[string]any, ec *ExecutionContext) (any, error)

// ExecutionContext describes the call a ToolHandler is answering.
type ExecutionContext struct {
	// SessionID is the calling session; empty for a direct invocation
	// without a session (Broker.InvokeTool with no SessionID).
	SessionID string
	// CallID is unique within the session.
	CallID string
	// Tool is the called tool's name.
	Tool string
	// Auth is the caller's authentication result, nil when anonymous.
	Auth *AuthResult
	// Context is the execution's context map (ExecuteOptions.Context).
	Context map[string]any
	// ClientIP is the address of the HTTP client that started the session,
	// when known.
	ClientIP string
}

// Parameter types accepted in ParameterDef.Type.
const (
	TypeString  = "string"
	TypeNumber  = "number"
	TypeInteger = "integer"
	TypeBoolean = "boolean"
	TypeObject  = "object"
	TypeArray   = "array"
)

// ParameterDef declares one named input of a tool.
type ParameterDef struct {
	// Type is one of string, number, boolean, object, array (integer is
	// accepted too and requires a whole number).
	Type string `json:"type"`
	// Description tells a model what to pass.
	Description string `json:"description"`
	// Required makes a missing (or null) value a VALIDATION_ERROR.
	Required bool `json:"required,omitempty"`
	// Default is applied when the value is missing or null.
	Default any `json:"default,omitempty"`
	// Enum, when set, lists the allowed values.
	Enum []any `json:"enum,omitempty"`
}

// ToolAnnotations are the MCP behaviour hints of a tool.
type ToolAnnotations struct {
	ReadOnlyHint    *bool `json:"readOnlyHint,omitempty"`
	DestructiveHint *bool `json:"destructiveHint,omitempty"`
	IdempotentHint  *bool `json:"idempotentHint,omitempty"`
	OpenWorldHint   *bool `json:"openWorldHint,omitempty"`
}

// ToolExample is a usage example: a script snippet that calls the tool.
type ToolExample struct {
	Description string `json:"description"`
	Code        string `json:"code"`
}

// ToolDefinition is a tool registered in a ToolRegistry.
type ToolDefinition struct {
	// Name is the tool name, for example "math:add" (<namespace>:<operation>).
	Name string `json:"name"`
	// Description is shown to models.
	Description string `json:"description"`
	// Parameters are the declared inputs; calls are validated against them
	// and their defaults applied before the handler runs.
	Parameters map[string]ParameterDef `json:"parameters,omitempty"`
	// InputSchema, when set, is published instead of the schema derived from
	// Parameters. When Parameters is empty its top-level properties,
	// required list and types are enforced.
	InputSchema json.RawMessage `json:"inputSchema,omitempty"`
	// OutputSchema is the JSON Schema of the result, if known.
	OutputSchema json.RawMessage `json:"outputSchema,omitempty"`
	// Annotations are MCP behaviour hints.
	Annotations *ToolAnnotations `json:"annotations,omitempty"`
	// Examples are usage examples for meta:describe (at most 5 are shown).
	Examples []ToolExample `json:"examples,omitempty"`
	// Tags group tools for search.
	Tags []string `json:"tags,omitempty"`
	// Guard holds this tool's rate limit, concurrency and timeout; nil
	// fields fall back to the guard manager's defaults (the throttle block).
	Guard ToolGuard `json:"-"`
	// Handler answers calls in Go. Nil means BrokerOptions.ToolHandler
	// answers, or, without one, the caller through the tool-result endpoint.
	Handler ToolHandler `json:"-"`

	params    []paramSpec // sorted Parameters (or those derived from InputSchema)
	schema    json.RawMessage
	validator *tool.Schema
}

type paramSpec struct {
	name string
	ParameterDef
}

// ToolRegistry holds the tools scripts may call. It is safe for concurrent
// use; the zero value is not usable, create one with NewToolRegistry.
type ToolRegistry struct {
	mu       sync.RWMutex
	tools    map[string]*ToolDefinition
	version  uint64
	onChange notify.Set
}

// NewToolRegistry returns an empty registry.
func NewToolRegistry() *ToolRegistry {
	return &ToolRegistry{tools: make(map[string]*ToolDefinition)}
}

// Register adds a tool, replacing one of the same name. It panics on an
// invalid definition (empty name, unknown parameter type, invalid schema
// JSON), which is a programming error; use Add to get the error instead.
func (r *ToolRegistry) Register(tool ToolDefinition) {
	if err := r.Add(tool); err != nil {
		panic(err)
	}
}

// Add is Register returning an error for an invalid definition.
func (r *ToolRegistry) Add(tool ToolDefinition) error {
	t := tool
	if err := t.compile(); err != nil {
		return err
	}
	r.mu.Lock()
	r.tools[t.Name] = &t
	r.version++
	r.mu.Unlock()
	r.onChange.Notify()
	return nil
}

// Get returns the tool named name, or nil.
func (r *ToolRegistry) Get(name string) *ToolDefinition {
	if r == nil {
		return nil
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.tools[name]
}

// List returns all tools sorted by name.
func (r *ToolRegistry) List() []*ToolDefinition {
	if r == nil {
		return nil
	}
	r.mu.RLock()
	out := make([]*ToolDefinition, 0, len(r.tools))
	for _, t := range r.tools {
		out = append(out, t)
	}
	r.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// OnChange registers f to be called after every Register and returns the
// function that unregisters it.
func (r *ToolRegistry) OnChange(f func()) (remove func()) { return r.onChange.Add(f) }

// GetDocumentation returns Markdown describing every tool, fit for a
// language model's prompt: name, description, parameters with types,
// whether they are required and their defaults, and how to call it.
func (r *ToolRegistry) GetDocumentation() string {
	var b strings.Builder
	writeDocHeader(&b)
	for _, t := range r.List() {
		writeToolDoc(&b, t.Name, t.Description, t.params, t.OutputSchema, t.Examples)
	}
	return b.String()
}

func writeDocHeader(b *strings.Builder) {
	b.WriteString("# Available tools\n\nCall a tool from a script with `await callTool(name, input)`; it returns the tool's result or throws an error with a `code`.\n")
}

// writeToolDoc writes one tool's Markdown section.
func writeToolDoc(b *strings.Builder, name, description string, params []paramSpec, output json.RawMessage, examples []ToolExample) {
	fmt.Fprintf(b, "\n## %s\n\n", name)
	if description != "" {
		b.WriteString(description)
		b.WriteString("\n\n")
	}
	if len(params) == 0 {
		b.WriteString("Parameters: none.\n")
	} else {
		b.WriteString("Parameters:\n")
		for _, p := range params {
			typ := p.Type
			if typ == "" {
				typ = "any"
			}
			fmt.Fprintf(b, "- `%s` (%s", p.name, typ)
			if p.Required {
				b.WriteString(", required")
			} else {
				b.WriteString(", optional")
			}
			if p.Default != nil {
				d, _ := json.Marshal(p.Default)
				fmt.Fprintf(b, ", default %s", d)
			}
			b.WriteString(")")
			if p.Description != "" {
				b.WriteString(": " + p.Description)
			}
			if len(p.Enum) > 0 {
				e, _ := json.Marshal(p.Enum)
				fmt.Fprintf(b, " One of %s.", e)
			}
			b.WriteString("\n")
		}
	}
	if len(output) > 0 {
		fmt.Fprintf(b, "\nReturns: `%s`\n", compactJSON(output))
	}
	for _, ex := range examples {
		fmt.Fprintf(b, "\nExample (%s):\n```js\n%s\n```\n", ex.Description, ex.Code)
	}
	if len(examples) == 0 {
		fmt.Fprintf(b, "\nExample:\n```js\nconst out = await callTool(%q, %s);\n```\n", name, exampleInput(params))
	}
}

// sortedParams turns a parameter map into the sorted list documentation uses.
func sortedParams(m map[string]ParameterDef) []paramSpec {
	out := make([]paramSpec, 0, len(m))
	for name, p := range m {
		out = append(out, paramSpec{name: name, ParameterDef: p})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// Schema returns the tool's input JSON Schema: InputSchema when set,
// otherwise the schema derived from Parameters.
func (t *ToolDefinition) Schema() json.RawMessage {
	if t.schema == nil {
		_ = t.compile()
	}
	return t.schema
}

func (t *ToolDefinition) compile() error {
	if strings.TrimSpace(t.Name) == "" {
		return fmt.Errorf("tool definition: empty name")
	}
	if len(t.InputSchema) > 0 && !json.Valid(t.InputSchema) {
		return fmt.Errorf("tool %q: input schema is not valid JSON", t.Name)
	}
	if len(t.OutputSchema) > 0 && !json.Valid(t.OutputSchema) {
		return fmt.Errorf("tool %q: output schema is not valid JSON", t.Name)
	}
	params := t.Parameters
	if len(params) == 0 && len(t.InputSchema) > 0 {
		params = paramsFromSchema(t.InputSchema)
	}
	t.params = nil // never reuse the backing array of a registered copy
	for name, p := range params {
		switch p.Type {
		case TypeString, TypeNumber, TypeInteger, TypeBoolean, TypeObject, TypeArray:
		case "":
			if len(t.Parameters) > 0 {
				return fmt.Errorf("tool %q: parameter %q has no type", t.Name, name)
			}
		default:
			return fmt.Errorf("tool %q: parameter %q has unknown type %q", t.Name, name, p.Type)
		}
		t.params = append(t.params, paramSpec{name: name, ParameterDef: p})
	}
	sort.Slice(t.params, func(i, j int) bool { return t.params[i].name < t.params[j].name })
	if len(t.InputSchema) > 0 {
		t.schema = t.InputSchema
	} else {
		t.schema = schemaFromParams(t.params)
	}
	v, err := tool.CompileSchema(t.schema)
	if err != nil {
		return fmt.Errorf("tool %q: %w", t.Name, err)
	}
	t.validator = v
	return nil
}

func schemaFromParams(params []paramSpec) json.RawMessage {
	props := make(map[string]any, len(params))
	required := []string{}
	for _, p := range params {
		s := map[string]any{"type": p.Type}
		if p.Description != "" {
			s["description"] = p.Description
		}
		if p.Default != nil {
			s["default"] = p.Default
		}
		if len(p.Enum) > 0 {
			s["enum"] = p.Enum
		}
		props[p.name] = s
		if p.Required {
			required = append(required, p.name)
		}
	}
	schema := map[string]any{"type": "object", "properties": props}
	if len(required) > 0 {
		schema["required"] = required
	}
	b, _ := json.Marshal(schema)
	return b
}

// paramsFromSchema derives top-level checks from a JSON Schema object.
func paramsFromSchema(raw json.RawMessage) map[string]ParameterDef {
	var s struct {
		Properties map[string]struct {
			Type        any    `json:"type"`
			Description string `json:"description"`
			Default     any    `json:"default"`
			Enum        []any  `json:"enum"`
		} `json:"properties"`
		Required []string `json:"required"`
	}
	if json.Unmarshal(raw, &s) != nil {
		return nil
	}
	out := make(map[string]ParameterDef, len(s.Properties))
	for name, p := range s.Properties {
		typ, _ := p.Type.(string) // a list of types is not enforced
		out[name] = ParameterDef{Type: typ, Description: p.Description, Default: p.Default, Enum: p.Enum,
			Required: slices.Contains(s.Required, name)}
	}
	return out
}

// Validate checks input (a JSON object, or empty/null for none) against the
// tool's input schema with the one tool-input validator (nested fields
// included) and returns it with the schema's defaults applied. A mismatch
// is a *sandbox.ToolError with code VALIDATION_ERROR whose message names
// every field at fault. Fields the schema does not forbid pass through.
func (t *ToolDefinition) Validate(input json.RawMessage) (map[string]any, error) {
	if t.schema == nil {
		if err := t.compile(); err != nil {
			return nil, err
		}
	}
	out, verr := t.validator.Validate(input, nil)
	if verr != nil {
		return nil, &sandbox.ToolError{Code: CodeValidationError, Message: verr.Message}
	}
	args := map[string]any{}
	if err := json.Unmarshal(out, &args); err != nil {
		return nil, &sandbox.ToolError{Code: CodeValidationError, Message: err.Error()}
	}
	return args, nil
}

func exampleInput(params []paramSpec) string {
	var parts []string
	for _, p := range params {
		if !p.Required {
			continue
		}
		var v string
		switch p.Type {
		case TypeString:
			v = `"..."`
		case TypeNumber, TypeInteger:
			v = "1"
		case TypeBoolean:
			v = "true"
		case TypeObject:
			v = "{}"
		case TypeArray:
			v = "[]"
		default:
			v = "null"
		}
		parts = append(parts, p.name+": "+v)
	}
	if len(parts) == 0 {
		return "{}"
	}
	return "{ " + strings.Join(parts, ", ") + " }"
}

func compactJSON(raw json.RawMessage) string {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return string(raw)
	}
	b, _ := json.Marshal(v)
	return string(b)
}
