package broker

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"

	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"
)

// The demo key-value store is a demo: its memory is bounded so that callers
// cannot park data in the gateway.
const (
	demoKVValueBytes = 4 << 10
	demoKVBytes      = 1 << 20
)

// DemoTools returns a small set of tools for examples, tests and load runs:
//
//	math:add      {a, b}          -> {sum}
//	text:upper    {text}          -> {text}
//	kv:set        {key, value}    -> {ok}    (in memory, shared by these tools;
//	                                          a demo: 4 KiB a value, 1 MiB in all)
//	kv:get        {key}           -> {key, value, found}
//	client:prompt {question}      -> answered by the caller of /execute
//
// client:prompt has no handler: its calls are streamed to the caller, who
// answers them through POST /sessions/{id}/tool-result.
func DemoTools() []ToolDefinition {
	var mu sync.Mutex
	kv := map[string]string{}
	used := 0 // bytes of keys and values held
	yes, no := true, false
	readOnly := &ToolAnnotations{ReadOnlyHint: &yes, DestructiveHint: &no, IdempotentHint: &yes, OpenWorldHint: &no}
	return []ToolDefinition{
		{
			Name:        "math:add",
			Description: "Adds two numbers.",
			Parameters: map[string]ParameterDef{
				"a": {Type: TypeNumber, Description: "First addend.", Required: true},
				"b": {Type: TypeNumber, Description: "Second addend.", Default: 0.0},
			},
			OutputSchema: []byte(`{"type":"object","properties":{"sum":{"type":"number"}},"required":["sum"]}`),
			Annotations:  readOnly,
			Tags:         []string{"demo", "math"},
			Examples:     []ToolExample{{Description: "add two numbers", Code: "const { sum } = await callTool(\"math:add\", { a: 2, b: 3 });\nreturn sum;"}},
			Handler: func(_ context.Context, in map[string]any, _ *ExecutionContext) (any, error) {
				sum := in["a"].(float64) + in["b"].(float64)
				if math.IsInf(sum, 0) {
					// JSON has no infinity: an overflow is the input's fault,
					// and the same input always overflows.
					return nil, &sandbox.ToolError{Code: CodeValidationError, Message: "a + b is beyond the range of a double"}
				}
				return map[string]float64{"sum": sum}, nil
			},
		},
		{
			Name:        "text:upper",
			Description: "Returns the text in upper case.",
			Parameters: map[string]ParameterDef{
				"text": {Type: TypeString, Description: "Text to convert.", Required: true},
			},
			OutputSchema: []byte(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`),
			Annotations:  readOnly,
			Tags:         []string{"demo", "text"},
			Handler: func(_ context.Context, in map[string]any, _ *ExecutionContext) (any, error) {
				return map[string]string{"text": strings.ToUpper(in["text"].(string))}, nil
			},
		},
		{
			Name:        "kv:set",
			Description: "Stores a value under a key in the demo key-value store (in memory, lost on restart; values up to 4 KiB, 1 MiB in all).",
			Parameters: map[string]ParameterDef{
				"key":   {Type: TypeString, Description: "Key.", Required: true},
				"value": {Type: TypeString, Description: "Value to store.", Required: true},
			},
			Annotations: &ToolAnnotations{ReadOnlyHint: &no, DestructiveHint: &no, IdempotentHint: &yes, OpenWorldHint: &no},
			Tags:        []string{"demo", "kv"},
			Handler: func(_ context.Context, in map[string]any, _ *ExecutionContext) (any, error) {
				key := in["key"].(string)
				if len(key) > 256 {
					return nil, &sandbox.ToolError{Code: CodeValidationError, Message: `parameter "key" must be at most 256 bytes`}
				}
				value := in["value"].(string)
				if len(value) > demoKVValueBytes {
					return nil, &sandbox.ToolError{Code: CodeValidationError, Message: fmt.Sprintf(`parameter "value" must be at most %d bytes`, demoKVValueBytes)}
				}
				mu.Lock()
				defer mu.Unlock()
				old, ok := kv[key]
				if !ok && len(kv) >= 10000 {
					return nil, &sandbox.ToolError{Code: CodeKVFull, Message: "the demo store holds at most 10000 keys"}
				}
				grow := len(value) - len(old)
				if !ok {
					grow += len(key)
				}
				if used+grow > demoKVBytes {
					return nil, &sandbox.ToolError{Code: CodeKVFull, Message: fmt.Sprintf("the demo store holds at most %d bytes", demoKVBytes)}
				}
				used += grow
				kv[key] = value
				return map[string]bool{"ok": true}, nil
			},
		},
		{
			Name:        "kv:get",
			Description: "Reads a value from the demo key-value store.",
			Parameters: map[string]ParameterDef{
				"key": {Type: TypeString, Description: "Key.", Required: true},
			},
			Annotations: readOnly,
			Tags:        []string{"demo", "kv"},
			Handler: func(_ context.Context, in map[string]any, _ *ExecutionContext) (any, error) {
				mu.Lock()
				defer mu.Unlock()
				v, ok := kv[in["key"].(string)]
				var value any
				if ok {
					value = v
				}
				return map[string]any{"key": in["key"], "value": value, "found": ok}, nil
			},
		},
		{
			Name:        "client:prompt",
			Description: "Asks the caller of /execute a question; the caller answers through POST /sessions/{id}/tool-result.",
			Parameters: map[string]ParameterDef{
				"question": {Type: TypeString, Description: "Question to ask.", Required: true},
			},
			Tags: []string{"demo", "client"},
		},
	}
}
