package guard

import (
	"fmt"
	"net/netip"
)

// Default prefix lengths of ClientPrefixes: an IPv4 address is its own
// partition; an IPv6 host is assigned a whole /64 (RFC 6177 and RIPE-690
// advise /56 or /48 for a site), so a per-address limit keyed on its full
// address is one a caller escapes by rotating the low 64 bits.
const (
	DefaultIPv4Prefix = 32
	DefaultIPv6Prefix = 64
)

// ClientPrefixes are the prefix lengths that key a client address's
// per-address limits (the "ip" partition, anonymous callers' principals,
// the authorization server's endpoint limits): every address of one prefix
// shares one partition. The zero value is the defaults (/32, /64). Allow
// and deny rules (IpFilter) match the exact address, never its key.
type ClientPrefixes struct {
	// IPv4 is the prefix length of IPv4 addresses, 1 to 32. Default 32.
	IPv4 int
	// IPv6 is the prefix length of IPv6 addresses, 1 to 128. Default 64.
	IPv6 int
}

// Validate reports a prefix length out of range (0 is the default).
func (p ClientPrefixes) Validate() error {
	if p.IPv4 < 0 || p.IPv4 > 32 {
		return fmt.Errorf("ipv4_prefix %d: must be 1 to 32 bits", p.IPv4)
	}
	if p.IPv6 < 0 || p.IPv6 > 128 {
		return fmt.Errorf("ipv6_prefix %d: must be 1 to 128 bits", p.IPv6)
	}
	return nil
}

// Key returns the limit key of clientIP, the partition value of every
// per-address limit. Its form is stable (storage keys in memory and in
// Redis are made of it):
//
//   - an address whose prefix is its whole length (IPv4 /32, IPv6 /128) is
//     its canonical text: "203.0.113.7", "2001:db8::1";
//   - else the masked prefix in CIDR notation: "2001:db8:1:2::/64",
//     "203.0.113.0/24".
//
// clientIP may carry a port, brackets or a zone (stripped); an IPv4-mapped
// IPv6 address is keyed as the IPv4 address it maps. A value that is not
// an address ("unknown-ip", a Unix socket's name, a key already) is
// returned as it is, so that Key of a key is that key.
func (p ClientPrefixes) Key(clientIP string) string {
	return p.KeyAddr(clientIP, netip.Addr{})
}

// KeyAddr is Key of clientIP whose parsed form (ParseClientIP,
// IpFilter.ClientAddr) is addr, for a caller that parsed it already; the
// zero addr means not parsed.
func (p ClientPrefixes) KeyAddr(clientIP string, addr netip.Addr) string {
	if !addr.IsValid() {
		// A bare IPv4 address, the common case, without the general parser.
		if a, ok := parseIPv4(clientIP); ok {
			addr = a
		} else if a, err := ParseClientIP(clientIP); err == nil {
			addr = a
		} else {
			return clientIP
		}
	}
	addr = addr.WithZone("").Unmap()
	bits := p.IPv6
	if addr.Is4() {
		bits = p.IPv4
		if bits == 0 {
			bits = DefaultIPv4Prefix
		}
	} else if bits == 0 {
		bits = DefaultIPv6Prefix
	}
	if bits >= addr.BitLen() {
		return addrText(addr, clientIP)
	}
	pfx, err := addr.Prefix(bits)
	if err != nil { // bits out of range: Validate refuses it
		return addrText(addr, clientIP)
	}
	var buf [64]byte
	return string(pfx.AppendTo(buf[:0]))
}
