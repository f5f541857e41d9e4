package caddymodules

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/rewrite"
)

// placedRequest is a request codemode_oauth must see as sent: its host
// (the issuer's or the resource's, with the port) and path.
type placedRequest struct{ host, path string }

// checkOAuthPlacement fails the load of a codemode_oauth that the requests
// it serves cannot reach as they were sent: inside `handle_path /gw/*` (or a
// handle or route with another path, or after a rewrite that strips a path
// prefix), or after a terminal route that takes them first (another site
// block for the issuer's host, before the catch-all site that holds the
// handler). The issuer has no path, so the authorization server's endpoints
// and the RFC 9728 metadata are at the site's root; under handle_path the
// handler saw only /gw/..., stripped to /..., and every URL it published
// named paths no request of the root reached. Before, such a config loaded
// and sign-in failed with the site's 404s (or another site's pages).
//
// It runs in Provision, when the routes that enclose the handler are known:
// the server being provisioned is in the context (caddyhttp.ServerCtxKey)
// and each enclosing subroute is in ctx.Modules(). Routes are provisioned
// in order, so in each list the routes before the handler's own have their
// handlers (and their rewrites are known), and the handler's own route is
// the first whose handlers are still raw. Only path and host matchers and
// prefix stripping are simulated. A route on the way may match unless its
// path matchers, or with byHost its host matchers, exclude the request
// (other matchers are assumed to match); an earlier terminal route takes
// the request only when it surely matches (path and host matchers only,
// all matching). So a config is refused only when no request for the path
// at its host can reach the handler with that path. byHost says that the
// Host a request arrives with is the one it was sent to (no proxy in front
// that may rewrite it): a host matcher on the handler's own route, or on a
// route enclosing it, for another host then counts as a site block for
// another host does.
func checkOAuthPlacement(ctx caddy.Context, reqs []placedRequest, byHost bool) error {
	var lists []caddyhttp.RouteList
	if srv, ok := ctx.Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server); ok && srv != nil {
		lists = append(lists, srv.Routes)
	}
	mods := ctx.Modules()
	for _, m := range mods[:max(len(mods)-1, 0)] {
		if sr, ok := m.(*caddyhttp.Subroute); ok {
			lists = append(lists, sr.Routes)
		}
	}
	for _, req := range reqs {
		p, seen := req.path, req.path
		for k, routes := range lists {
			i := currentRoute(routes)
			if i < 0 {
				continue // not provisioned from this list (e.g. an error route)
			}
			for _, rt := range routes[:i] {
				may, sure := routeMatches(rt.MatcherSets, req.host, seen, byHost)
				if rt.Terminal && sure {
					return fmt.Errorf("a request for %s at %s never reaches it: an earlier route (another site block for that host, "+
						"or a handle, route or respond before it) answers it first; put codemode_oauth in the site block of the "+
						"issuer's host, at its top level", p, req.host)
				}
				if !may {
					continue
				}
				for _, h := range rt.Handlers {
					if rw, ok := h.(*rewrite.Rewrite); ok {
						seen = stripPathPrefix(seen, rw.StripPathPrefix)
					}
				}
			}
			if may, _ := routeMatches(routes[i].MatcherSets, req.host, seen, false); !may {
				return fmt.Errorf("a request for %s never reaches it: it is inside a handle_path, handle or route that matches "+
					"other paths; the issuer has no path, so the authorization server's endpoints and the RFC 9728 metadata "+
					"are at the site's root: put codemode_oauth at the site's top level", p)
			}
			if may, _ := routeMatches(routes[i].MatcherSets, req.host, seen, byHost); !may {
				return fmt.Errorf("a request for %s at %s never reaches it: its route (a host matcher on codemode_oauth, or on "+
					"the site block, handle or route holding it) matches other hosts; serve it at the host of the issuer and "+
					"the resources", p, req.host)
			}
			// The Caddyfile puts a directive without a matcher in the
			// route of the one before it, as it does `uri strip_prefix`
			// and the handler after it: those before the handler (or the
			// subroute holding it) in its own route are still JSON.
			self := "codemode_oauth"
			if k < len(lists)-1 {
				self = "subroute"
			}
			for _, raw := range routes[i].HandlersRaw {
				var h struct {
					Handler         string `json:"handler"`
					StripPathPrefix string `json:"strip_path_prefix"`
				}
				if json.Unmarshal(raw, &h) != nil || h.Handler == self {
					break
				}
				if h.Handler == "rewrite" {
					seen = stripPathPrefix(seen, h.StripPathPrefix)
				}
			}
		}
		if seen != p {
			return fmt.Errorf("a request for %s reaches it as %s, after a rewrite that strips a path prefix (handle_path, "+
				"uri strip_prefix); the issuer has no path, so the authorization server's endpoints and the RFC 9728 "+
				"metadata are at the site's root: put codemode_oauth at the site's top level, before any rewrite", p, seen)
		}
	}
	return nil
}

// currentRoute is the index of the route being provisioned in routes: the
// first whose handlers are loading (raw JSON still there, none loaded),
// or -1.
func currentRoute(routes caddyhttp.RouteList) int {
	for i, rt := range routes {
		if len(rt.HandlersRaw) > 0 && len(rt.Handlers) == 0 {
			return i
		}
	}
	return -1
}

// routeMatches judges whether a request for host and path can match
// sets (may: its path matchers, and with byHost its host matchers, do not
// exclude it; other matchers assumed to match) and whether it surely does
// (a set of path and host matchers only, all matching).
func routeMatches(sets caddyhttp.MatcherSets, host, path string, byHost bool) (may, sure bool) {
	if len(sets) == 0 {
		return true, true
	}
	r := &http.Request{Method: http.MethodGet, Host: host, URL: &url.URL{Path: path}, Header: http.Header{}}
	c := context.WithValue(context.Background(), caddy.ReplacerCtxKey, caddy.NewReplacer())
	c = context.WithValue(c, caddyhttp.VarsCtxKey, map[string]any{})
	r = r.WithContext(c)
	for _, set := range sets {
		pathOK, known, hostOK := true, true, true
		for _, m := range set {
			switch pm := m.(type) {
			case caddyhttp.MatchPath:
				pathOK = pathOK && pm.Match(r)
			case *caddyhttp.MatchPath:
				pathOK = pathOK && pm.Match(r)
			case caddyhttp.MatchHost:
				hostOK = hostOK && host != "" && pm.Match(r)
			case *caddyhttp.MatchHost:
				hostOK = hostOK && host != "" && pm.Match(r)
			default:
				known = false
			}
		}
		may = may || (pathOK && (hostOK || !byHost || host == ""))
		sure = sure || (pathOK && hostOK && known)
	}
	return may, sure
}

// stripPathPrefix is path after a rewrite's strip_path_prefix (as the
// rewrite handler does it: case-insensitively, the result with a leading
// slash).
func stripPathPrefix(path, prefix string) string {
	if prefix == "" {
		return path
	}
	prefix = "/" + strings.TrimPrefix(prefix, "/")
	if len(path) < len(prefix) || !strings.EqualFold(path[:len(prefix)], prefix) {
		return path
	}
	return "/" + strings.TrimLeft(path[len(prefix):], "/")
}
