package catalog

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
)

// MaxNameLength is the longest action name the catalog produces: 64 fits the
// function-name limits of the common model APIs and MCP's 128.
const MaxNameLength = 64

// serviceNamePattern is what a Source.Name must match: a letter, then letters,
// digits and underscores, so that every action name is a JavaScript
// identifier and an MCP tool name.
var serviceNamePattern = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]{0,31}$`)

// sanitize keeps ASCII letters, digits and underscores as they are (camelCase
// survives), replaces every run of other characters with one underscore and
// trims underscores at both ends. "repos/get-content" -> "repos_get_content",
// "getUser" -> "getUser", "   " -> "".
func sanitize(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	pendingSep := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
		if !ok {
			pendingSep = true
			continue
		}
		if pendingSep && b.Len() > 0 {
			b.WriteByte('_')
		}
		pendingSep = false
		b.WriteByte(c)
	}
	return strings.Trim(collapseUnderscores(b.String()), "_")
}

func collapseUnderscores(s string) string {
	for strings.Contains(s, "__") {
		s = strings.ReplaceAll(s, "__", "_")
	}
	return s
}

// fallbackOperationName names an operation without an operationId: the
// lower-case method, then the path's segments, a `{param}` segment becoming
// `by_param`. GET /users/{id}/posts -> "get_users_by_id_posts"; GET / -> "get".
func fallbackOperationName(method, path string) string {
	parts := []string{strings.ToLower(method)}
	for _, seg := range strings.Split(path, "/") {
		if seg == "" {
			continue
		}
		if strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "}") {
			parts = append(parts, "by", seg[1:len(seg)-1])
			continue
		}
		parts = append(parts, seg)
	}
	return sanitize(strings.Join(parts, "_"))
}

// operationName is the sanitized operation part of an action name.
func operationName(operationID, method, path string) string {
	if n := sanitize(operationID); n != "" {
		return n
	}
	return fallbackOperationName(method, path)
}

// actionName joins service and operation and caps the result at
// MaxNameLength: a longer name is cut and ends with `_` and 6 hex digits of
// the SHA-256 of the full name, so two long names stay distinct.
func actionName(service, operation string) string {
	name := service + "_" + operation
	if len(name) <= MaxNameLength {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return strings.TrimRight(name[:MaxNameLength-7], "_") + "_" + hex.EncodeToString(sum[:])[:6]
}

// uniqueName returns name, or name_2, name_3, ... the first not yet in taken,
// and records it.
func uniqueName(name string, taken map[string]bool) string {
	if !taken[name] {
		taken[name] = true
		return name
	}
	for i := 2; ; i++ {
		suffix := fmt.Sprintf("_%d", i)
		candidate := name
		if len(candidate)+len(suffix) > MaxNameLength {
			candidate = candidate[:MaxNameLength-len(suffix)]
		}
		candidate += suffix
		if !taken[candidate] {
			taken[candidate] = true
			return candidate
		}
	}
}
