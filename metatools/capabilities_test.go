package metatools

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The declared capabilities say what the server does, on every revision
// (initialize, or server/discover on 2026-07-28): the tool list never
// changes while a server runs, so listChanged is not declared (before, it
// was, and no notification ever came); prompts/list and resources/list are
// answered, so their capabilities are declared (the conformance suite's
// server-stateless scenario failed "Server handles prompts but did not
// declare prompts capability"); completions are neither declared nor
// answered.
func TestDeclaredCapabilitiesMatchHandlers(t *testing.T) {
	for _, version := range []string{"2025-06-18", "2025-11-25", "2026-07-28"} {
		t.Run(version, func(t *testing.T) {
			f := newFixture(t, fixtureOptions{protocolVersion: version})
			caps := f.session.InitializeResult().Capabilities
			if caps.Tools == nil || caps.Tools.ListChanged {
				t.Errorf("tools capability %+v, want declared without listChanged", caps.Tools)
			}
			if caps.Prompts == nil || caps.Prompts.ListChanged || caps.Resources == nil || caps.Resources.ListChanged || caps.Resources.Subscribe {
				t.Errorf("prompts %+v, resources %+v: want both declared, without listChanged or subscribe", caps.Prompts, caps.Resources)
			}
			if caps.Completions != nil {
				t.Errorf("completions %+v declared", caps.Completions)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if res, err := f.session.ListPrompts(ctx, nil); err != nil || len(res.Prompts) != 0 {
				t.Errorf("prompts/list: %v, %v", res, err)
			}
			if res, err := f.session.ListResources(ctx, nil); err != nil || len(res.Resources) != 0 {
				t.Errorf("resources/list: %v, %v", res, err)
			}
			if _, err := f.session.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/prompt", Name: "x"},
				Argument: mcp.CompleteParamsArgument{Name: "a", Value: "b"}}); err == nil {
				t.Error("completion/complete answered without the capability")
			}
		})
	}
}

// TestSetLevelChecksTheLevel: logging/setLevel takes one of the eight levels
// MCP names (RFC 5424's severities) and answers any other with -32602
// invalid params, over HTTP to the go-sdk client. The go-sdk stored any
// string as the session's level.
func TestSetLevelChecksTheLevel(t *testing.T) {
	for _, version := range []string{"2025-06-18", "2025-11-25"} {
		t.Run(version, func(t *testing.T) {
			f := newFixture(t, fixtureOptions{protocolVersion: version})
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			for _, level := range []mcp.LoggingLevel{"debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"} {
				if err := f.session.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: level}); err != nil {
					t.Errorf("setLevel %q: %v", level, err)
				}
			}
			for _, level := range []mcp.LoggingLevel{"verbose", "", "INFO", "warn"} {
				err := f.session.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: level})
				var we *jsonrpc.Error
				if !errors.As(err, &we) || we.Code != jsonrpc.CodeInvalidParams {
					t.Errorf("setLevel %q: %v, want -32602", level, err)
				}
			}
		})
	}
}
