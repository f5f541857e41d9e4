package search

import (
	"slices"
	"strings"
)

// pathAction is the verb a tool name made of its HTTP method and path
// carries in the path's last segment — the catalog's name for an
// operation without an operationId, "post_metadata_series_query" for POST
// /metadata/series/query, "post_images_delete" for POST /images/delete —,
// or "" when it carries none. The method word is then the transport, not
// what the call does: a POST that queries searches, one that deletes
// deletes. Only a segment that is an intent word counts, and only for a
// method other than GET, whose last segment names what it reads
// (GET /images/export downloads an export). A name someone chose
// ("postQuery") is left as it is.
func pathAction(local, method, path string) string {
	m := strings.ToLower(method)
	if m == "get" || !pathBuilt(local, method, path) {
		return ""
	}
	segs := pathSegments(path)
	if len(segs) < 2 {
		return ""
	}
	last := strings.ToLower(segs[len(segs)-1])
	if intentWords[last] == IntentNone {
		return ""
	}
	return last
}

// pathBuilt reports whether a tool's local name is the one the catalog
// makes of its method and path when the operation has no id: the
// lower-case method, then the path's segments, a `{param}` becoming
// `by_param` ("get_users_by_id_posts").
func pathBuilt(local, method, path string) bool {
	m := strings.ToLower(method)
	if !httpMethods[m] || path == "" {
		return false
	}
	built := []string{m}
	for _, s := range pathSegments(path) {
		if strings.HasPrefix(s, "{") && strings.HasSuffix(s, "}") {
			built = append(built, "by", s[1:len(s)-1])
			continue
		}
		built = append(built, s)
	}
	return slices.Equal(Tokenize(local), Tokenize(strings.Join(built, "_")))
}

// headName is the name a tool's head noun is read from. For a name built
// from method and path it is the method and the path's literal segments:
// the "by" of "by_id" stands for a parameter, not a preposition, so
// get_import_sessions_by_id_images acts on images, not sessions. (A last
// segment that is the call's action stays the head: dropping it, so that
// post_metadata_series_query acts on series, lost a Slicebox list request
// to that query.) Another name is itself.
func headName(local, method, path string) string {
	if !pathBuilt(local, method, path) {
		return local
	}
	segs := pathSegments(path)
	words := []string{strings.ToLower(method)}
	for _, s := range segs {
		if !strings.HasPrefix(s, "{") {
			words = append(words, s)
		}
	}
	return strings.Join(words, "_")
}
