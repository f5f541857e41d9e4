package sandbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"
)

// upperHost serves one tool, "text:upper", that upper-cases {"s": "..."}.
type upperHost struct{}

func (upperHost) LookupTool(name string) (sandbox.ToolInfo, bool) {
	return sandbox.ToolInfo{Name: name, Description: "upper-case a string"}, name == "text:upper"
}

func (upperHost) CallTool(_ context.Context, call sandbox.ToolCall) (json.RawMessage, error) {
	var in struct{ S string }
	if err := json.Unmarshal(call.Input, &in); err != nil {
		return nil, &sandbox.ToolError{Code: "VALIDATION_ERROR", Message: err.Error()}
	}
	return json.Marshal(strings.ToUpper(in.S))
}

func ExampleNewInProcess() {
	engine := sandbox.NewInProcess(&sandbox.Options{Preset: sandbox.PresetSecure})
	defer engine.Close()

	res, err := engine.Execute(context.Background(), sandbox.Request{
		Code: `
			const words = metaContext.words;
			const upper = await __safe_parallel(words.map(s => () => callTool("text:upper", {s})));
			return upper.join(" ");`,
		Context: json.RawMessage(`{"words":["code","mode"]}`),
	}, upperHost{})
	if err != nil {
		fmt.Println("engine error:", err)
		return
	}
	fmt.Println(res.Status, string(res.Result))

	res, _ = engine.Execute(context.Background(), sandbox.Request{Code: `return eval("1")`}, upperHost{})
	fmt.Println(res.Status, res.Error.Code, res.Error.Kind)
	// Output:
	// ok "CODE MODE"
	// illegal_access VALIDATION_ERROR IllegalBuiltinAccess
}
