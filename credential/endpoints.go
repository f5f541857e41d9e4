package credential

import (
	"fmt"
	"net/netip"
	"net/url"
	"strings"
)

// The rule for the URLs the gateway sends a client secret, a code or a
// refresh token to. The operator configures where discovery starts (the
// authorization server, or the MCP server whose RFC 9728 document names
// it); whoever controls a metadata document chooses the rest. So:
//
//   - a configured URL is https; plain http only on a loopback address
//     or in development (where the tests' fake upstream runs);
//   - a discovered URL (the authorization server an RFC 9728 document
//     names, the endpoints an RFC 8414 / OpenID document names) is https,
//     or http only when the document was itself read over http: metadata
//     read over https cannot downgrade;
//   - a discovered URL names an internal address (loopback, private,
//     link-local, unspecified, localhost) only when the URL discovery
//     started from names one too: an upstream on the internet cannot send
//     the token request into the gateway's network.
//
// A discovered endpoint may be on another public host than its issuer
// (Google's token endpoint is not on accounts.google.com).

// configuredURL checks a URL written in the configuration.
func configuredURL(service, what, raw string, development bool) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return endpointRefused(service, fmt.Sprintf("%s %q is not an absolute http(s) URL", what, raw))
	}
	if u.Scheme == "http" && !development && !loopbackHost(u.Hostname()) {
		return endpointRefused(service, fmt.Sprintf("%s %s must be https (plain http only on a loopback address or in development): "+
			"the token request carries the client secret and the user's code or refresh token", what, redact(u)))
	}
	return nil
}

// discoveredURL checks a URL found in a metadata document read from from.
func discoveredURL(service, what, raw string, from *url.URL) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return endpointRefused(service, fmt.Sprintf("the metadata of %s names %s %q, which is not an absolute http(s) URL", redact(from), what, raw))
	}
	if u.Scheme == "http" && from.Scheme != "http" {
		return endpointRefused(service, fmt.Sprintf("the metadata of %s, read over https, names %s %s over plain http", redact(from), what, redact(u)))
	}
	if internalHost(u.Hostname()) && !internalHost(from.Hostname()) {
		return endpointRefused(service, fmt.Sprintf("the metadata of %s names %s %s, an internal address, where the configured server is not internal",
			redact(from), what, redact(u)))
	}
	return nil
}

func endpointRefused(service, msg string) *Error {
	return &Error{Code: CodeEndpointRefused, Service: service, Message: "credential " + service + ": " + msg}
}

// redact drops a URL's query and user info (a misconfigured URL may carry
// a secret) for messages and logs.
func redact(u *url.URL) string {
	c := *u
	c.User, c.RawQuery, c.ForceQuery, c.Fragment = nil, "", false, ""
	return c.String()
}

func loopbackHost(host string) bool {
	if isLocalhost(host) {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Unmap().IsLoopback()
}

// internalHost reports whether host names an address that is not on the
// internet. Names are taken as written (no DNS lookup), localhost aside.
func internalHost(host string) bool {
	if isLocalhost(host) {
		return true
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	a = a.Unmap()
	return a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() ||
		a.IsInterfaceLocalMulticast() || a.IsUnspecified() || sharedAddressSpace.Contains(a)
}

// sharedAddressSpace is RFC 6598's carrier-grade NAT range, internal too.
var sharedAddressSpace = netip.MustParsePrefix("100.64.0.0/10")

func isLocalhost(host string) bool {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	return h == "localhost" || strings.HasSuffix(h, ".localhost")
}
