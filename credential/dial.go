package credential

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The dial-time half of the rule of endpoints.go. Discovery judges a
// discovered URL's host as written; a public name may still resolve to an
// internal address (DNS rebinding, or an upstream's hostile DNS). So each
// service talks to its upstream through a client that checks the address
// it actually connects to: an internal address is refused, with
// UPSTREAM_ENDPOINT_REFUSED and before anything is sent, unless
//
//   - the host is one the configuration names (the operator's choice, as
//     at load: an authorization server on an internal name keeps working),
//   - the configured server discovery starts from is itself internal as
//     written (what discovery allows then, the dial allows too), or
//   - it is the proxy the transport's own Proxy function chose (the proxy
//     then answers for where it connects).
//
// Each service has its own transport, so a connection pooled for one
// service's configured host never serves another's discovered endpoint.

// guardedClient returns the client service s talks to its upstream with:
// base with a transport that applies the rule above. base is returned as
// it is when the rule has nothing to refuse (the configured server is
// internal) or cannot be applied (its Transport is not an *http.Transport:
// it answers for where it connects).
func guardedClient(base *http.Client, s Spec) (*http.Client, *http.Transport) {
	o := s.OAuth
	if o == nil {
		return base, nil
	}
	start := o.AuthorizationServer
	if start == "" && resourceRoot(s) {
		start = s.Resource
	}
	if u, err := url.Parse(start); start == "" || err != nil || internalHost(u.Hostname()) {
		return base, nil // nothing discovered, or discovery may name internal hosts
	}
	var tr *http.Transport
	switch t := base.Transport.(type) {
	case nil:
		tr = http.DefaultTransport.(*http.Transport).Clone()
		// Its dialer is a plain one (30 s, keep-alive 30 s): left to
		// dial's own, so the address is checked before connecting, not
		// on a connection already made.
		tr.DialContext = nil
	case *http.Transport:
		tr = t.Clone()
	default:
		return base, nil
	}
	g := &dialGuard{service: s.Service, trusted: map[string]bool{}}
	for _, raw := range []string{o.AuthorizationServer, o.AuthorizationEndpoint, o.TokenEndpoint, o.RevocationEndpoint, s.Resource} {
		if u, err := url.Parse(raw); raw != "" && err == nil {
			g.trusted[hostKey(u.Hostname())] = true
		}
	}
	if proxy := tr.Proxy; proxy != nil {
		tr.Proxy = func(r *http.Request) (*url.URL, error) {
			u, err := proxy(r)
			if u != nil {
				g.proxies.Store(hostKey(u.Hostname()), true)
			}
			return u, err
		}
	}
	tr.DialContext = g.dial(tr.DialContext)
	if tr.DialTLSContext != nil {
		tr.DialTLSContext = g.dial(tr.DialTLSContext)
	}
	c := *base
	c.Transport = tr
	return &c, tr
}

// dialGuard is one service's check of the addresses its client connects to.
type dialGuard struct {
	service string
	trusted map[string]bool // hosts the configuration names
	proxies sync.Map        // hosts of the proxies the transport chose
}

type dialFunc = func(ctx context.Context, network, addr string) (net.Conn, error)

// dial wraps inner (nil: a plain dialer). With a plain dialer the address
// is checked before connecting (net.Dialer.Control); with another dialer
// (a test's, or one that routes elsewhere), on the connection it returns,
// which is closed before anything is written to it.
func (g *dialGuard) dial(inner dialFunc) dialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		if g.trusted[hostKey(host)] {
			return g.plain(inner)(ctx, network, addr)
		}
		if _, ok := g.proxies.Load(hostKey(host)); ok {
			return g.plain(inner)(ctx, network, addr)
		}
		if inner == nil {
			d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second,
				Control: func(_, address string, _ syscall.RawConn) error { return g.check(host, address) }}
			return d.DialContext(ctx, network, addr)
		}
		conn, err := inner(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		if err := g.check(host, conn.RemoteAddr().String()); err != nil {
			conn.Close()
			return nil, err
		}
		return conn, nil
	}
}

func (g *dialGuard) plain(inner dialFunc) dialFunc {
	if inner != nil {
		return inner
	}
	return (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
}

// check refuses address (ip:port) when it is internal.
func (g *dialGuard) check(host, address string) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil || !internalHost(ap.Addr().Unmap().String()) {
		return nil
	}
	return endpointRefused(g.service, fmt.Sprintf("%s resolves to %s, an internal address, where the configured server is not internal; nothing is sent there",
		host, ap.Addr().Unmap()))
}

func hostKey(host string) string {
	return strings.ToLower(strings.TrimSuffix(host, "."))
}
