package guard

import (
	"net/netip"
	"strings"
	"testing"
)

func mustFilter(t *testing.T, cfg IpFilterConfig) *IpFilter {
	t.Helper()
	f, err := NewIpFilter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestIpFilterCheck(t *testing.T) {
	f := mustFilter(t, IpFilterConfig{
		AllowList: []string{"10.0.0.0/8", "2001:db8::/32", "192.168.1.10", "::ffff:172.16.0.0/108"},
		DenyList:  []string{"10.0.0.66", "10.9.0.0/16", "2001:db8:bad::/48"},
	})
	tests := []struct {
		ip      string
		allowed bool
		reason  string
		rule    string
	}{
		{"10.1.2.3", true, "allowlisted", "10.0.0.0/8"},
		{"10.0.0.66", false, "denylisted", "10.0.0.66"},              // deny wins over allow
		{"10.9.1.1", false, "denylisted", "10.9.0.0/16"},             // deny range inside allow range
		{"::ffff:10.9.1.1", false, "denylisted", "10.9.0.0/16"},      // IPv4-mapped client
		{"::ffff:10.1.1.1", true, "allowlisted", "10.0.0.0/8"},       // IPv4-mapped client
		{"172.16.5.5", true, "allowlisted", "::ffff:172.16.0.0/108"}, // IPv4-mapped rule
		{"172.32.0.1", true, "default", ""},
		{"192.168.1.10", true, "allowlisted", "192.168.1.10"},
		{"192.168.1.11", true, "default", ""},
		{"2001:db8::1", true, "allowlisted", "2001:db8::/32"},
		{"2001:db8:bad::1", false, "denylisted", "2001:db8:bad::/48"},
		{"[2001:db8::1]:443", true, "allowlisted", "2001:db8::/32"}, // with port
		{"10.1.2.3:5555", true, "allowlisted", "10.0.0.0/8"},
		{"fe80::1%eth0", true, "default", ""}, // zone dropped, not in lists
		{" 10.1.2.3 ", true, "allowlisted", "10.0.0.0/8"},
		{"not-an-ip", true, "default", ""},
	}
	for _, tt := range tests {
		r := f.Check(tt.ip)
		if r.Allowed != tt.allowed || r.Reason != tt.reason || r.MatchedRule != tt.rule {
			t.Errorf("Check(%q) = %+v, want allowed=%v reason=%s rule=%q", tt.ip, r, tt.allowed, tt.reason, tt.rule)
		}
	}
	if !f.IsAllowListed("10.0.0.66") {
		t.Error("IsAllowListed ignores the deny list: want true for 10.0.0.66")
	}
	if f.IsAllowListed("8.8.8.8") || f.IsAllowListed("") || f.IsAllowListed("junk") {
		t.Error("IsAllowListed true for an address not on the allow list")
	}
}

func TestIpFilterDefaultDeny(t *testing.T) {
	f := mustFilter(t, IpFilterConfig{AllowList: []string{"127.0.0.1", "::1"}, DefaultAction: "deny"})
	for ip, want := range map[string]bool{"127.0.0.1": true, "::1": true, "::ffff:127.0.0.1": true, "127.0.0.2": false, "junk": false} {
		if got := f.Check(ip).Allowed; got != want {
			t.Errorf("Check(%q).Allowed = %v, want %v", ip, got, want)
		}
	}
	r := f.Check("127.0.0.2")
	ge, _ := r.Err("127.0.0.2").(*GuardError)
	if ge == nil || ge.Code != CodeIPNotAllowed || ge.StatusCode != 403 || ge.ClientIP != "127.0.0.2" {
		t.Fatalf("default deny error = %+v", ge)
	}
	g := mustFilter(t, IpFilterConfig{DenyList: []string{"1.2.3.4"}})
	r = g.Check("1.2.3.4")
	ge, _ = r.Err("1.2.3.4").(*GuardError)
	if ge == nil || ge.Code != CodeIPBlocked || ge.StatusCode != 403 || ge.ClientIP != "1.2.3.4" {
		t.Fatalf("deny list error = %+v", ge)
	}
	if err := (&IpFilterResult{Allowed: true}).Err("x"); err != nil {
		t.Fatal(err)
	}
}

func TestParseIPRule(t *testing.T) {
	tests := []struct {
		in, want, err string
	}{
		{"10.0.0.1", "10.0.0.1/32", ""},
		{"10.1.2.3/8", "10.0.0.0/8", ""}, // host bits masked
		{"::1", "::1/128", ""},
		{"2001:db8::/32", "2001:db8::/32", ""},
		{"::ffff:10.0.0.1", "10.0.0.1/32", ""},
		{"::ffff:10.0.0.0/104", "10.0.0.0/8", ""},
		{"::ffff:0.0.0.0/96", "0.0.0.0/0", ""},
		{"0.0.0.0/0", "0.0.0.0/0", ""},
		{"::/0", "::/0", ""},
		{"::ffff:0:0/80", "", "at least 96 bits"},
		{"10.0.0.0/33", "", "invalid CIDR"},
		{"2001:db8::/129", "", "invalid CIDR"},
		{"10.0.0.256", "", "invalid IP"},
		{"fe80::1%eth0", "", "zones"},
		{"", "", "empty"},
		{"10.0.0.0/", "", "invalid CIDR"},
	}
	for _, tt := range tests {
		p, err := ParseIPRule(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("ParseIPRule(%q) error = %v, want %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || p.String() != tt.want {
			t.Errorf("ParseIPRule(%q) = %v, %v; want %s", tt.in, p, err, tt.want)
		}
	}
}

func TestClientIPFromXFF(t *testing.T) {
	tests := []struct {
		name   string
		remote string
		xff    []string
		depth  int
		want   string
	}{
		{"no header", "10.0.0.1:1234", nil, 1, "10.0.0.1"},
		{"one hop", "10.0.0.1:1234", []string{"203.0.113.7"}, 1, "203.0.113.7"},
		{"spoofed left entries ignored", "10.0.0.1:1234", []string{"1.1.1.1, 2.2.2.2, 203.0.113.7"}, 1, "203.0.113.7"},
		{"depth 2", "10.0.0.1:1234", []string{"1.1.1.1, 203.0.113.7, 10.0.0.2"}, 2, "203.0.113.7"},
		{"depth 2 across header lines", "10.0.0.1:1234", []string{"1.1.1.1, 203.0.113.7", "10.0.0.2"}, 2, "203.0.113.7"},
		{"fewer entries than depth: leftmost", "10.0.0.1:1234", []string{"203.0.113.7"}, 3, "203.0.113.7"},
		{"depth 0 means 1", "10.0.0.1:1234", []string{"1.1.1.1, 203.0.113.7"}, 0, "203.0.113.7"},
		{"empty entries skipped", "10.0.0.1:1234", []string{"203.0.113.7, , "}, 1, "203.0.113.7"},
		{"garbage falls back to remote", "10.0.0.1:1234", []string{"1.1.1.1, garbage"}, 1, "10.0.0.1"},
		{"entry with port", "10.0.0.1:1234", []string{"[2001:db8::7]:443"}, 1, "2001:db8::7"},
		{"IPv4-mapped entry", "10.0.0.1:1234", []string{"::ffff:203.0.113.7"}, 1, "203.0.113.7"},
		{"IPv6 remote", "[::1]:80", nil, 1, "::1"},
		{"IPv4-mapped remote", "[::ffff:10.0.0.1]:80", nil, 1, "10.0.0.1"},
		{"only commas", "10.0.0.1:1", []string{",,,"}, 1, "10.0.0.1"},
	}
	for _, tt := range tests {
		if got := ClientIPFromXFF(tt.remote, tt.xff, tt.depth); got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, got, tt.want)
		}
	}
	f := mustFilter(t, IpFilterConfig{})
	if got := f.ClientIP("10.0.0.1:1", []string{"203.0.113.7"}); got != "10.0.0.1" {
		t.Errorf("trustProxy off used XFF: %q", got)
	}
	f = mustFilter(t, IpFilterConfig{TrustProxy: true, TrustedProxyDepth: 2})
	if got := f.ClientIP("10.0.0.1:1", []string{"9.9.9.9, 203.0.113.7, 10.0.0.2"}); got != "203.0.113.7" {
		t.Errorf("trustProxy depth 2: %q", got)
	}
	if got := hostOnly("unix-socket"); got != "unix-socket" {
		t.Errorf("hostOnly(non-ip) = %q", got)
	}
	if got := hostOnly("example:80"); got != "example" {
		t.Errorf("hostOnly(name:port) = %q", got)
	}
	// The written host is returned as is only when it is canonical.
	for in, want := range map[string]string{
		"127.0.0.1:5555":           "127.0.0.1",
		"127.0.0.1":                "127.0.0.1",
		"[::1]:80":                 "::1",
		"::1":                      "::1",
		"[2001:DB8:0:0::1]:443":    "2001:db8::1",
		"2001:db8:0000::1":         "2001:db8::1",
		"[::ffff:10.1.2.3]:8080":   "10.1.2.3",
		"[fe80::1%eth0]:22":        "fe80::1",
		" 10.0.0.7:1 ":             "10.0.0.7",
		"[2001:db8::2]":            "2001:db8::2",
		"192.0.2.1:65535":          "192.0.2.1",
		"[2001:db8::a:b:c:d]:1234": "2001:db8::a:b:c:d",
	} {
		if got := hostOnly(in); got != want {
			t.Errorf("hostOnly(%q) = %q, want %q", in, got, want)
		}
	}
}

func FuzzParseIPRule(f *testing.F) {
	for _, s := range []string{"10.0.0.1", "10.0.0.0/8", "::1", "2001:db8::/32", "::ffff:10.0.0.0/104", "::ffff:0:0/80", "fe80::1%eth0", "", "1.2.3.4/33", "/"} {
		f.Add(s, "10.1.2.3")
	}
	f.Fuzz(func(t *testing.T, rule, client string) {
		p, err := ParseIPRule(rule)
		if err != nil {
			return
		}
		if !p.IsValid() || p != p.Masked() {
			t.Fatalf("ParseIPRule(%q) = %v: not a valid masked prefix", rule, p)
		}
		if p.Addr().Is4In6() {
			t.Fatalf("ParseIPRule(%q) kept an IPv4-mapped prefix %v", rule, p)
		}
		// The canonical form parses back to itself.
		if q, err := ParseIPRule(p.String()); err != nil || q != p {
			t.Fatalf("round trip of %v: %v, %v", p, q, err)
		}
		f, err := NewIpFilter(IpFilterConfig{DenyList: []string{rule}})
		if err != nil {
			t.Fatalf("NewIpFilter rejected a rule ParseIPRule accepted: %v", err)
		}
		a, err := ParseClientIP(client)
		r := f.Check(client)
		if err == nil && p.Contains(a) != (r.Reason == ReasonDenylisted) {
			t.Fatalf("rule %v client %v: check %+v disagrees with Contains", p, a, r)
		}
	})
}

func FuzzClientIPFromXFF(f *testing.F) {
	f.Add("10.0.0.1:1234", "1.1.1.1, 203.0.113.7", 1)
	f.Add("[::1]:80", "::ffff:1.2.3.4,,[2001:db8::1]:80", 2)
	f.Add("junk", ",,,", 3)
	f.Add("10.0.0.1", "fe80::1%eth0, 8.8.8.8", 0)
	f.Add("192.0.2.1:99999", "", 1)
	f.Add("192.0.2.1:x", "", 1)
	f.Add("1.2.3.4:5:6", "", 1)
	f.Add(" 10.0.0.1:80", "", 1)
	f.Fuzz(func(t *testing.T, remote, xff string, depth int) {
		if depth > 64 || depth < -64 {
			return
		}
		got := ClientIPFromXFF(remote, strings.Split(xff, "\n"), depth)
		// The parsed form handed to CheckAddr is the address of the text,
		// and the filter decides the same on either.
		ip, addr := clientAddrFromXFF(remote, strings.Split(xff, "\n"), depth)
		if parsed, err := ParseClientIP(got); ip != got || (err == nil) != addr.IsValid() || (err == nil && parsed != addr) {
			t.Fatalf("clientAddrFromXFF(%q, %q) = %q, %v; ClientIPFromXFF %q", remote, xff, ip, addr, got)
		}
		// The IPv4 host:port fast path answers as the general one does.
		hIP, hAddr := hostAddr(remote)
		if wantIP, wantAddr := hostAddrParsed(remote); hIP != wantIP || hAddr != wantAddr {
			t.Fatalf("hostAddr(%q) = %q, %v; the general path gives %q, %v", remote, hIP, hAddr, wantIP, wantAddr)
		}
		filter := mustFilter(t, IpFilterConfig{AllowList: []string{"10.0.0.0/8", "::1"}, DenyList: []string{"10.6.0.0/16"}, DefaultAction: ActionDeny})
		if filter.CheckAddr(addr) != filter.Check(got) {
			t.Fatalf("CheckAddr(%v) and Check(%q) differ", addr, got)
		}
		if a, err := netip.ParseAddr(got); err == nil {
			if a.Is4In6() || a.Zone() != "" {
				t.Fatalf("result %q is not normalised", got)
			}
			return
		}
		// Not an IP: must be the remote address (or its host part) as given.
		if !strings.HasPrefix(remote, got) {
			t.Fatalf("ClientIPFromXFF(%q, %q) = %q: neither an IP nor remote's host", remote, xff, got)
		}
	})
}

// FuzzParseIPv4: the IPv4 parser of the client address's fast path accepts
// exactly the dotted-decimal IPv4 addresses netip.ParseAddr accepts, with
// the same address.
func FuzzParseIPv4(f *testing.F) {
	for _, s := range []string{"127.0.0.1", "0.0.0.0", "255.255.255.255", "256.0.0.1", "1.2.3", "1.2.3.4.5", "01.2.3.4",
		"1.02.3.4", "1.2.3.0", "1..3.4", ".1.2.3", "1.2.3.", "1.2.3.4 ", "1.2.3.04", "1000.2.3.4", "::1", "::ffff:1.2.3.4", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := parseIPv4(s)
		want, err := netip.ParseAddr(s)
		if wantOK := err == nil && want.Is4(); ok != wantOK || (ok && got != want) {
			t.Fatalf("parseIPv4(%q) = %v, %v; netip.ParseAddr gives %v, %v", s, got, ok, want, err)
		}
	})
}
