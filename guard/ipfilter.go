package guard

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// Reasons of an IpFilterResult.
const (
	ReasonAllowlisted = "allowlisted"
	ReasonDenylisted  = "denylisted"
	ReasonDefault     = "default"
)

// IpFilterResult is the outcome of an IP filter check.
type IpFilterResult struct {
	// Allowed reports whether the client may proceed.
	Allowed bool
	// Reason is "allowlisted", "denylisted" or "default".
	Reason string
	// MatchedRule is the list entry (IP or CIDR, as configured) that matched;
	// empty for "default".
	MatchedRule string
}

// Err returns nil when r allows the client, else IP_BLOCKED (deny list) or
// IP_NOT_ALLOWED (default deny) for clientIP.
func (r *IpFilterResult) Err(clientIP string) error {
	if r == nil || r.Allowed {
		return nil
	}
	if r.Reason == ReasonDenylisted {
		return NewIPBlockedError(clientIP)
	}
	return NewIPNotAllowedError(clientIP)
}

type ipRule struct {
	prefix netip.Prefix
	raw    string
}

// IpFilter applies allow and deny lists of IPs and CIDR ranges. Rules are
// parsed once, at construction. Evaluation order: deny list, allow list,
// default action. IPv4-mapped IPv6 addresses (::ffff:a.b.c.d), in rules and
// in client addresses, are treated as the IPv4 address.
type IpFilter struct {
	allow, deny []ipRule
	defaultDeny bool
	trustProxy  bool
	depth       int
}

// NewIpFilter parses cfg's rules.
func NewIpFilter(cfg IpFilterConfig) (*IpFilter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	f := &IpFilter{defaultDeny: cfg.DefaultAction == ActionDeny, trustProxy: cfg.TrustProxy, depth: cfg.TrustedProxyDepth}
	if f.depth == 0 {
		f.depth = DefaultTrustedProxyDepth
	}
	for _, r := range cfg.AllowList {
		p, _ := ParseIPRule(r)
		f.allow = append(f.allow, ipRule{p, r})
	}
	for _, r := range cfg.DenyList {
		p, _ := ParseIPRule(r)
		f.deny = append(f.deny, ipRule{p, r})
	}
	return f, nil
}

// Check evaluates clientIP. An address that does not parse matches no rule
// and gets the default action.
func (f *IpFilter) Check(clientIP string) IpFilterResult {
	addr, _ := ParseClientIP(clientIP)
	return f.CheckAddr(addr)
}

// CheckAddr is Check of an address already parsed by ParseClientIP; the
// zero (invalid) Addr gets the default action, as an unparsable one.
func (f *IpFilter) CheckAddr(addr netip.Addr) IpFilterResult {
	if addr.IsValid() {
		if r, ok := match(f.deny, addr); ok {
			return IpFilterResult{Allowed: false, Reason: ReasonDenylisted, MatchedRule: r}
		}
		if r, ok := match(f.allow, addr); ok {
			return IpFilterResult{Allowed: true, Reason: ReasonAllowlisted, MatchedRule: r}
		}
	}
	return IpFilterResult{Allowed: !f.defaultDeny, Reason: ReasonDefault}
}

// IsAllowListed reports whether clientIP matches the allow list (whatever
// the deny list says).
func (f *IpFilter) IsAllowListed(clientIP string) bool {
	addr, err := ParseClientIP(clientIP)
	if err != nil {
		return false
	}
	_, ok := match(f.allow, addr)
	return ok
}

// ClientIP returns the client address of a request that came from
// remoteAddr ("host:port" or a bare IP) with the given X-Forwarded-For header
// values. Without trustProxy it is remoteAddr's host; with it, see
// ClientIPFromXFF.
func (f *IpFilter) ClientIP(remoteAddr string, xff []string) string {
	ip, _ := f.ClientAddr(remoteAddr, xff)
	return ip
}

// ClientAddr is ClientIP with the address parsed (ParseClientIP), for
// CheckAddr: the zero Addr when it is not an IP.
func (f *IpFilter) ClientAddr(remoteAddr string, xff []string) (string, netip.Addr) {
	if !f.trustProxy {
		return hostAddr(remoteAddr)
	}
	return clientAddrFromXFF(remoteAddr, xff, f.depth)
}

// TrustsProxy reports whether ClientIP reads X-Forwarded-For (trust_proxy),
// so that a caller without it need not look the header up.
func (f *IpFilter) TrustsProxy() bool { return f.trustProxy }

func match(rules []ipRule, addr netip.Addr) (string, bool) {
	for _, r := range rules {
		if r.prefix.Contains(addr) {
			return r.raw, true
		}
	}
	return "", false
}

// ParseIPRule parses an IP or a CIDR range, IPv4 or IPv6. A bare IP is a
// single-address range; an IPv4-mapped IPv6 rule is turned into its IPv4
// form (::ffff:10.0.0.0/104 is 10.0.0.0/8). Host bits are masked off.
func ParseIPRule(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return netip.Prefix{}, errors.New("empty IP rule")
	}
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("invalid CIDR %q: %w", s, err)
		}
		a, bits := p.Addr(), p.Bits()
		if a.Is4In6() {
			if bits < 96 {
				return netip.Prefix{}, fmt.Errorf("invalid CIDR %q: an IPv4-mapped range needs at least 96 bits", s)
			}
			a, bits = a.Unmap(), bits-96
		}
		return netip.PrefixFrom(a, bits).Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("invalid IP %q: %w", s, err)
	}
	if a.Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("invalid IP %q: zones are not allowed in rules", s)
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// ParseClientIP parses a client address: a bare IPv4 or IPv6 address,
// optionally bracketed, with a port or a zone; IPv4-mapped IPv6 becomes IPv4.
func ParseClientIP(s string) (netip.Addr, error) {
	s = strings.TrimSpace(s)
	// A bare address first (the common case; a failed parse allocates its
	// error), unless the form says host:port.
	if !strings.HasPrefix(s, "[") && strings.Count(s, ":") != 1 {
		if a, err := netip.ParseAddr(s); err == nil {
			return a.WithZone("").Unmap(), nil
		}
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().WithZone("").Unmap(), nil
	}
	s = strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("invalid client IP %q: %w", s, err)
	}
	return a.WithZone("").Unmap(), nil
}

// ClientIPFromXFF picks the client address from X-Forwarded-For, reading
// from the right: each of the (at most depth) trusted proxies appended the
// address it saw, so the client is the depth-th entry from the right, or the
// leftmost when there are fewer entries. Values may be spread over several
// header lines. When there is no entry, or the chosen one is not an IP,
// remoteAddr's host is returned. The result is normalised (no port, no
// zone, IPv4-mapped IPv6 as IPv4).
func ClientIPFromXFF(remoteAddr string, xff []string, depth int) string {
	ip, _ := clientAddrFromXFF(remoteAddr, xff, depth)
	return ip
}

func clientAddrFromXFF(remoteAddr string, xff []string, depth int) (string, netip.Addr) {
	if depth <= 0 {
		depth = DefaultTrustedProxyDepth
	}
	// Walk the entries from the right without allocating a split slice.
	seen := 0
	chosen := ""
	for i := len(xff) - 1; i >= 0 && seen < depth; i-- {
		v := xff[i]
		for seen < depth {
			j := strings.LastIndexByte(v, ',')
			part := strings.TrimSpace(v[j+1:])
			if part != "" {
				seen++
				chosen = part
			}
			if j < 0 {
				break
			}
			v = v[:j]
		}
	}
	if chosen != "" {
		if a, err := ParseClientIP(chosen); err == nil {
			return a.String(), a
		}
	}
	return hostAddr(remoteAddr)
}

// hostOnly returns the normalised IP of remoteAddr, or remoteAddr without a
// port when it is not an IP.
func hostOnly(remoteAddr string) string {
	ip, _ := hostAddr(remoteAddr)
	return ip
}

// hostAddr is hostOnly with the parsed address (the zero Addr when it is
// not an IP).
func hostAddr(remoteAddr string) (string, netip.Addr) {
	// The common form first: an IPv4 "host:port", as Go's HTTP server
	// writes a request's RemoteAddr. An IPv4 address that parses is written
	// canonically, so host is its text; the port is not looked at (the
	// general path below falls back to the host when it is not a number).
	if i := strings.LastIndexByte(remoteAddr, ':'); i > 0 && strings.IndexByte(remoteAddr[:i], ':') < 0 {
		if a, ok := parseIPv4(remoteAddr[:i]); ok {
			return remoteAddr[:i], a
		}
	}
	return hostAddrParsed(remoteAddr)
}

// parseIPv4 parses s if it is an IPv4 address in dotted-decimal form as
// netip.ParseAddr accepts it (four fields of 0 to 255 without leading
// zeros), in a third of netip's instructions; anything else is not ok, and
// callers fall back to the general parser.
func parseIPv4(s string) (netip.Addr, bool) {
	var ip [4]byte
	i := 0
	for f := range ip {
		if f > 0 {
			if i >= len(s) || s[i] != '.' {
				return netip.Addr{}, false
			}
			i++
		}
		if i >= len(s) || s[i] < '0' || s[i] > '9' {
			return netip.Addr{}, false
		}
		n := uint(s[i] - '0')
		i++
		// Up to two more digits, unless the field is a 0 (a leading zero
		// is not read on, so the '.' or end expected next is missing).
		for k := 0; k < 2 && n != 0 && i < len(s) && '0' <= s[i] && s[i] <= '9'; k++ {
			n = n*10 + uint(s[i]-'0')
			i++
		}
		if n > 255 {
			return netip.Addr{}, false
		}
		ip[f] = byte(n)
	}
	if i != len(s) {
		return netip.Addr{}, false
	}
	return netip.AddrFrom4(ip), true
}

// hostAddrParsed is hostAddr for any form of address.
func hostAddrParsed(remoteAddr string) (string, netip.Addr) {
	if a, err := ParseClientIP(remoteAddr); err == nil {
		return addrText(a, hostPart(remoteAddr)), a
	}
	if i := strings.LastIndexByte(remoteAddr, ':'); i >= 0 && !strings.Contains(remoteAddr[:i], ":") {
		// The host may still be an IP ("0.0.0.0:", an empty port).
		a, _ := ParseClientIP(remoteAddr[:i])
		return remoteAddr[:i], a
	}
	return remoteAddr, netip.Addr{}
}

// hostPart is the host of "host:port", "[host]:port" or a bare address, as
// written (not parsed).
func hostPart(s string) string {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "[") {
		if i := strings.IndexByte(s, ']'); i > 0 {
			return s[1:i]
		}
		return s
	}
	if i := strings.LastIndexByte(s, ':'); i >= 0 && strings.IndexByte(s, ':') == i {
		return s[:i]
	}
	return s
}

// addrText is a.String(), returning written instead when it already is that
// text: a request's client address is usually written canonically, and
// this runs on every guarded request.
func addrText(a netip.Addr, written string) string {
	var buf [64]byte
	if string(a.AppendTo(buf[:0])) == written {
		return written
	}
	return a.String()
}
