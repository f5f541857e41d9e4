package search

import (
	"net/url"
	"slices"
	"strings"
)

// An agent that already knows which tool it wants often says so: it writes
// the tool's name ("github:issues/create", "issueCreateIssue" — from an
// earlier answer or the API's docs) or the HTTP call ("POST
// /repos/{owner}/{repo}/issues", a URL it was given). Words alone rank such
// a request poorly: a path is mostly parameters, a name's words are shared
// by its siblings. The tools a request names outright come first.

// namedSpans are the parts of a query that may be a name or a path: its
// whitespace-separated words without the quotes, brackets and sentence
// punctuation around them, and without a call's "()" ("`issueCreateIssue()`").
func namedSpans(query string) []string {
	f := strings.Fields(query)
	for i, w := range f {
		w = strings.Trim(w, "\"'`“”‘’()[]<>,;!?")
		w = strings.TrimSuffix(w, "()")
		w = strings.TrimRight(w, ".:")
		f[i] = w
	}
	return f
}

// nameKeys are the keys a tool is found by: its full name, and its local
// name when that is an identifier of several words ("issueCreateIssue",
// "issues/create", "send_message"); a one-word local name ("search") is an
// everyday word in a request, not a name.
func nameKeys(name, local string) []string {
	keys := []string{strings.ToLower(name)}
	if l := strings.ToLower(local); l != keys[0] && len(Tokenize(local)) >= 2 {
		keys = append(keys, l)
	}
	return keys
}

// pathSegments splits a path template or a request's path into segments,
// without empty ones.
func pathSegments(p string) []string {
	var out []string
	for _, s := range strings.Split(p, "/") {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// requestPath is the path a query word gives: "/repos/{owner}/{repo}" or a
// URL's path ("https://api.example.com/v1/pets/7?x=1" -> /v1/pets/7);
// ok is false for a word that is neither. relative also takes a path
// without its leading slash ("repos/{owner}/{repo}/issues"): after an HTTP
// method, or with a template's placeholder.
//
// keys are the keys of the path's query part ("?versioning",
// "?uploadId=7"), pairs its keys with their values (see queryPairsOf), and
// the root path "/" is a path after an HTTP method ("GET /"), or with a
// query part ("/#X-Amz-Target=Service.GetUser", an RPC-style call).
func requestPath(w string, relative bool) (segs, keys, pairs []string, ok bool) {
	if relative && !strings.HasPrefix(w, "/") && strings.Contains(w, "/") && !strings.Contains(w, "://") {
		w = "/" + w
	}
	switch {
	case strings.HasPrefix(w, "http://") || strings.HasPrefix(w, "https://"):
		u, err := url.Parse(w)
		if err != nil || u.Path == "" {
			return nil, nil, nil, false
		}
		w, keys, pairs = u.Path, queryKeysOf(u.RawQuery), queryPairsOf(u.RawQuery)
	case strings.HasPrefix(w, "/") && len(w) > 1:
		var q string
		w, q = splitPathQuery(w)
		keys, pairs = queryKeysOf(q), queryPairsOf(q)
	case w == "/" && relative:
		return nil, nil, nil, true
	default:
		return nil, nil, nil, false
	}
	segs = pathSegments(w)
	return segs, keys, pairs, len(segs) > 0 || len(pairs) > 0
}

// splitPathQuery cuts a path at its query part: "/{Bucket}#versioning"
// (how a catalog tells apart calls of one path) or "/pets?limit=2".
func splitPathQuery(p string) (path, query string) {
	if i := strings.IndexAny(p, "?#"); i > 0 {
		return p[:i], p[i+1:]
	}
	return p, ""
}

// queryKeysOf are the keys of a query part, lowercased and sorted
// ("uploadId=7&partNumber=1": partnumber, uploadid).
func queryKeysOf(q string) []string {
	var keys []string
	for _, kv := range strings.FieldsFunc(q, func(r rune) bool { return r == '&' || r == '#' || r == '?' }) {
		k, _, _ := strings.Cut(kv, "=")
		if k != "" && !slices.Contains(keys, strings.ToLower(k)) {
			keys = append(keys, strings.ToLower(k))
		}
	}
	slices.Sort(keys)
	return keys
}

// queryPairsOf are the keys of a query part that carry a literal value,
// with it, lowercased and sorted: an RPC-style API names each call by one
// ("/#X-Amz-Target=Service.GetUser", "/?Action=DeleteAlarms") on one path.
// A placeholder value ("{id}") is no literal.
func queryPairsOf(q string) []string {
	var pairs []string
	for _, kv := range strings.FieldsFunc(q, func(r rune) bool { return r == '&' || r == '#' || r == '?' }) {
		k, v, _ := strings.Cut(kv, "=")
		if p := strings.ToLower(k + "=" + v); k != "" && v != "" && !strings.Contains(v, "{") && !slices.Contains(pairs, p) {
			pairs = append(pairs, p)
		}
	}
	slices.Sort(pairs)
	return pairs
}

// segmentMatches reports whether a request's path segment q fits a
// template's segment t: a literal equal to it (case aside, with or without
// the template's file extension: "Calls" fits "Calls.json"), or anything
// for a parameter, with the literal text around it ("{Sid}.json").
func segmentMatches(t, q string) bool {
	i := strings.IndexByte(t, '{')
	if i < 0 {
		if strings.EqualFold(t, q) {
			return true
		}
		ext := strings.LastIndexByte(t, '.')
		return ext > 0 && !strings.Contains(q, ".") && strings.EqualFold(t[:ext], q)
	}
	j := strings.LastIndexByte(t, '}')
	if j < i {
		return false
	}
	pre, suf := strings.ToLower(t[:i]), strings.ToLower(t[j+1:])
	lq := strings.ToLower(q)
	if !strings.HasPrefix(lq, pre) {
		return false
	}
	lq = lq[len(pre):]
	if strings.HasSuffix(lq, suf) && len(lq) > len(suf) {
		return true
	}
	// The request may leave the extension out ("/Calls/CA123").
	return strings.HasPrefix(suf, ".") && lq != "" && !strings.Contains(lq, ".")
}

// pathMatch reports whether a request's path fits a template, and how many
// of the template's segments are literals (a literal fits better than a
// parameter: /issues/comments is the comments' call, not /issues/{number}).
// A request's own placeholder ("{owner}", ":owner") fits only a parameter;
// one written as the template writes it counts as a literal
// ("{index}.{diffType}" is not "{index}").
func pathMatch(tmpl, q []string) (bool, int) {
	if len(tmpl) != len(q) {
		return false, 0
	}
	literals := 0
	for i, t := range tmpl {
		if strings.EqualFold(t, q[i]) {
			literals++
			continue
		}
		param := strings.Contains(t, "{")
		placeholder := strings.HasPrefix(q[i], "{") || strings.HasPrefix(q[i], ":")
		switch {
		case placeholder && !param:
			return false, 0
		case placeholder:
		case !segmentMatches(t, q[i]):
			return false, 0
		case !param:
			literals++
		}
	}
	return true, literals
}

// namedDoc is a tool a query names outright; a higher rank comes first.
type namedDoc struct{ d, rank int }

// namedDocs are the tools query names outright, best first: by name (in the
// order the query names them), then by HTTP method and path — the method's
// tools before the path's others, a template with more literal segments
// before one with fewer. A URL's path may carry a base the templates leave
// out ("/api/v1" of a server URL): up to three leading segments are dropped
// until some template fits. Equal ranks are left to the words' ranking.
func (ix *BM25) namedDocs(query string) []namedDoc {
	if !strings.ContainsAny(query, "/:_-") && !hasInnerUpper(query) {
		return nil // no name of several words, no path
	}
	spans := namedSpans(query)
	var out []namedDoc
	seen := map[int]bool{}
	for _, w := range spans {
		for _, d := range ix.byName[strings.ToLower(w)] {
			if !seen[d] {
				seen[d] = true
				out = append(out, namedDoc{d, 1 << 20})
			}
		}
	}
	for i, w := range spans {
		method := ""
		if i > 0 && requestMethods[strings.ToLower(spans[i-1])] {
			method = strings.ToUpper(spans[i-1])
		}
		segs, keys, pairs, ok := requestPath(w, method != "" || strings.Contains(w, "{"))
		if !ok {
			continue
		}
		for skip := 0; skip <= 3 && skip <= max(len(segs)-1, 0); skip++ {
			found := false
			for d, tmpl := range ix.paths {
				ok, literals := pathMatch(tmpl, segs[skip:])
				if !ok || seen[d] || !pairsGiven(ix.queryPairs[d], pairs) {
					continue
				}
				rank := literals * 2
				if method == "" || ix.methods[d] == method {
					rank += 1000
				}
				// Calls of one path told apart by their query part
				// ("GET /{Bucket}?versioning", "GET /{Bucket}"): the one
				// whose keys the request gives first.
				if slices.Equal(ix.queryKeys[d], keys) {
					rank += 100
				}
				seen[d], found = true, true
				out = append(out, namedDoc{d, rank})
			}
			if found {
				break
			}
		}
	}
	return out
}

// pairsGiven reports whether a request's query part gives every literal
// key and value of a template's: one that gives another value
// ("X-Amz-Target=Service.GetUser" for Service.ListUsers) names another
// call; one that gives none leaves it open.
func pairsGiven(tmpl, req []string) bool {
	if len(req) == 0 {
		return true
	}
	for _, p := range tmpl {
		if !slices.Contains(req, p) {
			return false
		}
	}
	return true
}

// requestMethods are the HTTP methods that may precede a path in a request.
var requestMethods = map[string]bool{"get": true, "post": true, "put": true, "patch": true, "delete": true, "head": true, "options": true}

// hasInnerUpper reports whether a word of s has a capital after its first
// letter: a camelCase name ("issueCreateIssue", "PostCustomers").
func hasInnerUpper(s string) bool {
	for i := 1; i < len(s); i++ {
		if s[i] >= 'A' && s[i] <= 'Z' && s[i-1] != ' ' {
			return true
		}
	}
	return false
}
