package metatools

import "strings"

// Naming selects how the meta-tools are named on the MCP server.
type Naming string

const (
	// NamingSpec is the spec's spelling, "meta:search" etc. (default). The
	// MCP tool-name rules (SEP-986) and several model APIs reject ':'.
	NamingSpec Naming = "spec"
	// NamingSafe is "meta_search" etc.: letters, digits and '_' only.
	NamingSafe Naming = "safe"
)

// The meta-tools by their spec names.
const (
	MetaSearch   = "meta:search"
	MetaDescribe = "meta:describe"
	MetaExecute  = "meta:execute"
	MetaInvoke   = "meta:invoke"
)

var metaNames = []string{MetaSearch, MetaDescribe, MetaExecute, MetaInvoke}

// ExposedName is a meta-tool's name under naming n.
func (n Naming) ExposedName(spec string) string {
	if n == NamingSafe {
		return strings.Replace(spec, ":", "_", 1)
	}
	return spec
}

// IsMetaToolName reports whether name refers to a meta-tool in any spelling:
// anything under the "meta:" prefix, and meta_search, meta.search, meta-search
// (any case) for each of the four. Scripts and meta:invoke may not call these
// (SELF_REFERENCE_BLOCKED), sources may not register them and meta:describe
// never describes them.
func IsMetaToolName(name string) bool {
	lower := strings.ToLower(strings.TrimSpace(name))
	if strings.HasPrefix(lower, "meta:") {
		return true
	}
	if len(lower) < 6 || !strings.HasPrefix(lower, "meta") {
		return false
	}
	switch lower[4] {
	case '_', '.', '-', '/':
		switch lower[5:] {
		case "search", "describe", "execute", "invoke":
			return true
		}
	}
	return false
}
