package metatools

import (
	"context"
	"encoding/json"

	"github.com/codemode-gateway/caddy-codemode/broker/catalog"
)

// CatalogSource is a ToolSource over an OpenAPI catalog on its own (without
// a broker): every action, appId = its service, called with catalog.Call.
// With a broker, use BrokerSource, which includes the catalog and adds the
// broker's guard.
type CatalogSource struct {
	C *catalog.Catalog
}

// Tools implements ToolSource.
func (s *CatalogSource) Tools(context.Context) ([]Tool, error) {
	actions := s.C.Response().Actions
	out := make([]Tool, 0, len(actions))
	for _, a := range actions {
		an := a.Annotations
		out = append(out, Tool{
			Name: a.Name, AppID: a.Service, Description: a.Description,
			InputSchema: a.InputSchema, OutputSchema: a.OutputSchema, Tags: a.Tags, Deprecated: a.Deprecated, Path: a.Path, Method: a.Method, FullName: a.FullName,
			Annotations: &Annotations{Title: an.Title, ReadOnlyHint: &an.ReadOnlyHint, DestructiveHint: &an.DestructiveHint,
				IdempotentHint: &an.IdempotentHint, OpenWorldHint: &an.OpenWorldHint},
		})
	}
	return out, nil
}

// Call implements ToolSource.
func (s *CatalogSource) Call(ctx context.Context, name string, input json.RawMessage) (json.RawMessage, error) {
	return s.C.Call(ctx, name, input)
}

// OnChange implements ChangeNotifier.
func (s *CatalogSource) OnChange(fn func()) (remove func()) { return s.C.OnChange(fn) }
