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
	if !httpMethods[m] || m == "get" || path == "" {
		return ""
	}
	segs := pathSegments(path)
	if len(segs) < 2 {
		return ""
	}
	built := []string{m}
	for _, s := range segs {
		if strings.HasPrefix(s, "{") && strings.HasSuffix(s, "}") {
			built = append(built, "by", s[1:len(s)-1])
			continue
		}
		built = append(built, s)
	}
	if !slices.Equal(Tokenize(local), Tokenize(strings.Join(built, "_"))) {
		return ""
	}
	last := strings.ToLower(segs[len(segs)-1])
	if intentWords[last] == IntentNone {
		return ""
	}
	return last
}
