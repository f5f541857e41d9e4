package engine

import (
	"testing"

	"github.com/codemode-gateway/caddy-codemode/internal/tool"
)

// TestSharedCodesAreTools: the codes every tool source shares are spelt out
// in this package (importing internal/tool would link its validator into
// workers); they must stay internal/tool's.
func TestSharedCodesAreTools(t *testing.T) {
	for _, c := range []struct{ ours, tools string }{
		{CodeValidationError, tool.CodeValidationError},
		{CodeToolNotFound, tool.CodeToolNotFound},
		{CodeToolExecutionError, tool.CodeToolExecutionError},
	} {
		if c.ours != c.tools {
			t.Errorf("sandbox code %q, internal/tool's %q", c.ours, c.tools)
		}
	}
}
