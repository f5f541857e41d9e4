package metatools

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/codemode-gateway/caddy-codemode/broker"
)

// BrokerSource is a ToolSource over the broker: the tools of its registry
// and every action of its OpenAPI catalog (broker.ListTools), called through
// broker.InvokeTool so they get the broker's validation and guard. Catalog
// actions take their service as appId; registry tools the part of their name
// before ':' or '.', else "local". Tools answered by the caller are in the
// index marked CallerAnswered: the meta-tools ask the MCP client for them.
type BrokerSource struct {
	B *broker.Broker
}

// Tools implements ToolSource.
func (s *BrokerSource) Tools(context.Context) ([]Tool, error) {
	specs := s.B.ListTools()
	out := make([]Tool, 0, len(specs))
	for _, sp := range specs {
		t := Tool{Name: sp.Name, AppID: sp.Service, Description: sp.Description,
			InputSchema: sp.InputSchema, OutputSchema: sp.OutputSchema, Tags: sp.Tags, CallerAnswered: sp.CallerAnswered,
			Deprecated: sp.Deprecated, Path: sp.Path, Method: sp.Method, FullName: sp.FullName}
		if t.AppID == "" {
			t.AppID = "local"
			if i := strings.IndexAny(sp.Name, ":."); i > 0 {
				t.AppID = sp.Name[:i]
			}
		}
		if a := sp.Annotations; a != nil {
			t.Annotations = &Annotations{ReadOnlyHint: a.ReadOnlyHint, DestructiveHint: a.DestructiveHint,
				IdempotentHint: a.IdempotentHint, OpenWorldHint: a.OpenWorldHint}
		}
		for _, e := range sp.Examples {
			t.Examples = append(t.Examples, exampleFromBroker(e))
		}
		out = append(out, t)
	}
	return out, nil
}

func exampleFromBroker(e broker.ToolExample) Example {
	return Example{Description: e.Description, Code: e.Code}
}

// Call implements ToolSource.
func (s *BrokerSource) Call(ctx context.Context, name string, input json.RawMessage) (json.RawMessage, error) {
	ci, _ := CallInfoFrom(ctx)
	opts := &broker.InvokeOptions{SessionID: ci.SessionPartition(), ClientIP: ci.ClientIP}
	if ci.UserID != "" {
		opts.Auth = &broker.AuthResult{Valid: true, UserID: ci.UserID, TenantID: ci.TenantID}
	}
	return s.B.InvokeTool(ctx, name, input, opts)
}

// OnChange implements ChangeNotifier.
func (s *BrokerSource) OnChange(fn func()) (remove func()) { return s.B.OnToolsChange(fn) }
