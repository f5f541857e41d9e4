// Command confclient is the client the MCP conformance suite's client
// scenarios judge: the gateway's own upstream MCP client (metatools.Upstream,
// configured as `meta { upstream conf { url ... } }` configures it) connects
// to the scenario's test server, lists its tools and calls each one, as a
// script's callTool("conf:<tool>") would. The suite runs it as
//
//	conformance client --command "confclient" --scenario NAME
//
// appending the server's URL and naming the scenario in
// MCP_CONFORMANCE_SCENARIO; a scenario's calls, when it gives them, come in
// MCP_CONFORMANCE_CONTEXT ({"toolCalls":[{"name":...,"arguments":{...}}]}),
// else each tool is called with arguments made from its input schema. It
// exits non-zero when it cannot connect or a call fails at the transport (a tool's own error answer is what some scenarios ask for).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/codemode-gateway/caddy-codemode/metatools"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: confclient <server url> (run by conformance client --command)")
		os.Exit(2)
	}
	if err := run(os.Args[len(os.Args)-1]); err != nil {
		fmt.Fprintln(os.Stderr, "confclient:", err)
		os.Exit(1)
	}
}

func run(url string) error {
	logger, _ := zap.NewDevelopment()
	up, err := metatools.NewUpstream(metatools.UpstreamConfig{Name: "conf", URL: url, CallTimeout: 15 * time.Second}, logger)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()
	if err := up.Start(ctx); err != nil {
		return err
	}
	defer up.Close()
	if up.ProtocolVersion() == "" {
		return errors.New("no connection to the upstream (see the log above)")
	}
	tools, _ := up.Tools(ctx)
	fmt.Printf("protocol %s, %d tools\n", up.ProtocolVersion(), len(tools))
	calls, err := contextCalls()
	if err != nil {
		return err
	}
	if calls == nil {
		for _, t := range tools {
			calls = append(calls, call{Name: strings.TrimPrefix(t.Name, "conf:"), Arguments: argumentsFor(t.InputSchema)})
		}
		echoSchema(tools, calls)
	}
	for _, c := range calls {
		out, err := up.Call(ctx, "conf:"+c.Name, c.Arguments)
		var me *metatools.Error
		switch {
		case errors.As(err, &me) && me.Code == metatools.CodeToolExecutionError:
			fmt.Printf("%s: the tool's error: %s\n", c.Name, me.Message)
		case err != nil:
			return fmt.Errorf("calling %s: %w", c.Name, err)
		default:
			fmt.Printf("%s: %s\n", c.Name, out)
		}
	}
	return nil
}

type call struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// contextCalls are the calls the scenario names in MCP_CONFORMANCE_CONTEXT,
// nil when it names none.
func contextCalls() ([]call, error) {
	s := os.Getenv("MCP_CONFORMANCE_CONTEXT")
	if s == "" {
		return nil, nil
	}
	var c struct {
		ToolCalls []call `json:"toolCalls"`
	}
	if err := json.Unmarshal([]byte(s), &c); err != nil {
		return nil, fmt.Errorf("MCP_CONFORMANCE_CONTEXT: %w", err)
	}
	return c.ToolCalls, nil
}

// echoSchema gives a tool named json_schema_echo (json-schema-2020-12-
// preservation) the input schema the gateway holds for the other tool listed,
// as meta:describe would show it, so the scenario sees what survived.
func echoSchema(tools []metatools.Tool, calls []call) {
	for i, c := range calls {
		if c.Name != "json_schema_echo" {
			continue
		}
		for _, t := range tools {
			if t.Name != "conf:json_schema_echo" && len(t.InputSchema) > 0 {
				calls[i].Arguments, _ = json.Marshal(map[string]json.RawMessage{"schema": t.InputSchema})
			}
		}
	}
}

// argumentsFor makes arguments that satisfy a plain object schema: each
// required property (all of them when none is marked) with a value of its
// type.
func argumentsFor(schema json.RawMessage) json.RawMessage {
	var s struct {
		Properties map[string]struct {
			Type any   `json:"type"`
			Enum []any `json:"enum"`
		} `json:"properties"`
		Required []string `json:"required"`
	}
	_ = json.Unmarshal(schema, &s)
	names := s.Required
	if len(names) == 0 {
		for n := range s.Properties {
			names = append(names, n)
		}
	}
	args := map[string]any{}
	for _, n := range names {
		p := s.Properties[n]
		if len(p.Enum) > 0 {
			args[n] = p.Enum[0]
			continue
		}
		typ, _ := p.Type.(string)
		if l, ok := p.Type.([]any); ok && len(l) > 0 {
			typ, _ = l[0].(string)
		}
		switch typ {
		case "number", "integer":
			args[n] = 1
		case "boolean":
			args[n] = true
		case "array":
			args[n] = []any{}
		case "object":
			args[n] = map[string]any{}
		default:
			args[n] = "conformance"
		}
	}
	b, _ := json.Marshal(args)
	return b
}
