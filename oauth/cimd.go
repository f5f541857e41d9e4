package oauth

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/zitadel/oidc/v3/pkg/oidc"
	"go.uber.org/zap"
	"golang.org/x/sync/singleflight"
)

// Client ID Metadata Documents (draft-ietf-oauth-client-id-metadata-document,
// MCP's recommended registration since 2025-11-25): a client_id that is an
// https URL names a JSON document of the client's metadata, which the
// server fetches, validates and caches instead of registering the client.

// Defaults and bounds of metadata documents.
const (
	DefaultMaxDocumentBytes = 5 << 10
	DefaultFetchTimeout     = 5 * time.Second
	DefaultMaxCacheTTL      = 24 * time.Hour
	// DocumentCacheTTL is how long a document is kept when its answer has
	// no caching headers.
	DocumentCacheTTL = 5 * time.Minute
	// DocumentErrorTTL is how long a failed fetch is remembered, so that a
	// client_id that does not resolve costs one fetch per interval.
	DocumentErrorTTL     = 30 * time.Second
	maxDocumentRedirects = 3
	maxCachedDocuments   = 1024
	maxClientIDLength    = 2048
)

// isMetadataURL reports whether a client_id is a metadata document URL.
func isMetadataURL(id string) bool { return strings.HasPrefix(id, "https://") }

// checkClientIDURL applies the draft's rules to a client_id URL: https, a
// host, a path other than "/", no dot segments, no fragment, no user
// information.
func checkClientIDURL(id string) error {
	if len(id) > maxClientIDLength {
		return fmt.Errorf("client_id URL is longer than %d bytes", maxClientIDLength)
	}
	u, err := url.Parse(id)
	switch {
	case err != nil || u.Scheme != "https" || u.Host == "":
		return errors.New("client_id must be an https URL")
	case u.User != nil:
		return errors.New("client_id URL must not contain user information")
	case u.Fragment != "" || strings.Contains(id, "#"):
		return errors.New("client_id URL must not contain a fragment")
	case u.Path == "" || u.Path == "/":
		return errors.New("client_id URL must have a path")
	}
	for _, seg := range strings.Split(u.EscapedPath(), "/") {
		if seg == "." || seg == ".." {
			return errors.New("client_id URL must not contain dot segments")
		}
	}
	return nil
}

// clientMetadataDocument is what the server reads from a document.
type clientMetadataDocument struct {
	ClientID                string           `json:"client_id"`
	ClientName              string           `json:"client_name"`
	ClientURI               string           `json:"client_uri"`
	RedirectURIs            []string         `json:"redirect_uris"`
	GrantTypes              []string         `json:"grant_types"`
	ResponseTypes           []string         `json:"response_types"`
	TokenEndpointAuthMethod string           `json:"token_endpoint_auth_method"`
	ClientSecret            *json.RawMessage `json:"client_secret"`
	ClientSecretExpiresAt   *json.RawMessage `json:"client_secret_expires_at"`
}

// documentResolver fetches, validates and caches metadata documents.
type documentResolver struct {
	s        *Server
	client   *http.Client
	maxBytes int64
	maxTTL   time.Duration
	group    singleflight.Group

	mu    sync.Mutex
	cache map[string]documentEntry
}

type documentEntry struct {
	c       *client
	err     error
	expires time.Time
}

func newDocumentResolver(s *Server, cfg ClientIDMetadataConfig) *documentResolver {
	timeout := secondsOr(cfg.FetchTimeout, DefaultFetchTimeout)
	allowed := make(map[string]bool, len(cfg.AllowedPrivateHosts))
	for _, h := range cfg.AllowedPrivateHosts {
		allowed[strings.ToLower(h)] = true
	}
	dialer := &net.Dialer{Timeout: timeout}
	tr := &http.Transport{
		Proxy: nil, // a proxy from the environment would dial for us, unchecked
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, port, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			if allowed[strings.ToLower(host)] {
				return dialer.DialContext(ctx, network, addr)
			}
			ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
			if err != nil {
				return nil, err
			}
			for _, ip := range ips {
				if forbiddenAddress(ip) {
					return nil, fmt.Errorf("%s resolves to %s, a loopback, private or link-local address", host, ip)
				}
			}
			if len(ips) == 0 {
				return nil, fmt.Errorf("%s has no address", host)
			}
			// Dial the address that was checked, not the name again (a
			// second lookup could answer differently).
			return dialer.DialContext(ctx, network, net.JoinHostPort(ips[0].Unmap().String(), port))
		},
		TLSClientConfig:        &tls.Config{RootCAs: cfg.RootCAs, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:    timeout,
		ResponseHeaderTimeout:  timeout,
		MaxResponseHeaderBytes: 16 << 10,
		MaxIdleConns:           16,
		IdleConnTimeout:        time.Minute,
	}
	r := &documentResolver{
		s:        s,
		maxBytes: int64(cfg.MaxDocumentBytes),
		maxTTL:   secondsOr(cfg.MaxCacheTTL, DefaultMaxCacheTTL),
		cache:    make(map[string]documentEntry),
	}
	if r.maxBytes <= 0 {
		r.maxBytes = DefaultMaxDocumentBytes
	}
	r.client = &http.Client{
		Transport: tr,
		Timeout:   timeout,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) > maxDocumentRedirects {
				return fmt.Errorf("more than %d redirects", maxDocumentRedirects)
			}
			if req.URL.Scheme != "https" {
				return errors.New("redirect to a URL that is not https")
			}
			return nil
		},
	}
	return r
}

// forbiddenAddress reports the addresses a document is never fetched from
// (server-side request forgery): loopback, private, link-local,
// unspecified, multicast, shared (100.64/10) and this-network addresses.
func forbiddenAddress(ip netip.Addr) bool {
	ip = ip.Unmap()
	if ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsInterfaceLocalMulticast() || ip.IsMulticast() || ip.IsUnspecified() {
		return true
	}
	for _, p := range []netip.Prefix{netip.MustParsePrefix("100.64.0.0/10"), netip.MustParsePrefix("0.0.0.0/8"),
		netip.MustParsePrefix("192.0.0.0/24"), netip.MustParsePrefix("198.18.0.0/15"), netip.MustParsePrefix("64:ff9b::/96")} {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// lookup returns the client a metadata document describes. A document is
// fetched at most once at a time per URL, and kept as its caching headers
// allow; a failure is kept for DocumentErrorTTL.
func (r *documentResolver) lookup(ctx context.Context, id string) (*client, error) {
	if err := checkClientIDURL(id); err != nil {
		return nil, err
	}
	now := r.s.now()
	r.mu.Lock()
	e, ok := r.cache[id]
	r.mu.Unlock()
	if ok && now.Before(e.expires) {
		return e.c, e.err
	}
	v, err, _ := r.group.Do(id, func() (any, error) {
		// Detached from the caller: another request waiting on this fetch
		// must not fail because the first caller went away.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.client.Timeout)
		defer cancel()
		c, ttl, err := r.fetch(fctx, id)
		if err != nil {
			ttl = DocumentErrorTTL
			r.s.log.Info("client metadata document refused", zap.String("client_id", id), errField(err))
		}
		r.store(id, documentEntry{c: c, err: err, expires: r.s.now().Add(ttl)})
		return c, err
	})
	if err != nil {
		return nil, err
	}
	return v.(*client), nil
}

func (r *documentResolver) store(id string, e documentEntry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !e.expires.After(r.s.now()) {
		delete(r.cache, id)
		return
	}
	if len(r.cache) >= maxCachedDocuments {
		now := r.s.now()
		for k, v := range r.cache {
			if !v.expires.After(now) {
				delete(r.cache, k)
			}
		}
		for k := range r.cache {
			if len(r.cache) < maxCachedDocuments {
				break
			}
			delete(r.cache, k)
		}
	}
	r.cache[id] = e
}

// fetch gets and validates one document and says how long it may be kept.
func (r *documentResolver) fetch(ctx context.Context, id string) (*client, time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, id, nil)
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := r.client.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("fetching the client metadata document: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, 0, fmt.Errorf("the client metadata document answered %d", resp.StatusCode)
	}
	if ct, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type")); err != nil || (ct != "application/json" && !strings.HasSuffix(ct, "+json")) {
		return nil, 0, fmt.Errorf("the client metadata document is %q, not JSON", resp.Header.Get("Content-Type"))
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, r.maxBytes+1))
	if err != nil {
		return nil, 0, fmt.Errorf("reading the client metadata document: %w", err)
	}
	if int64(len(body)) > r.maxBytes {
		return nil, 0, fmt.Errorf("the client metadata document is larger than %d bytes", r.maxBytes)
	}
	var doc clientMetadataDocument
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, 0, fmt.Errorf("the client metadata document is not a JSON object of client metadata: %w", err)
	}
	c, err := r.clientFrom(id, &doc)
	if err != nil {
		return nil, 0, err
	}
	return c, r.cacheTTL(resp.Header), nil
}

// clientFrom validates a document (the draft's rules and MCP's required
// fields) and builds the public client it describes.
func (r *documentResolver) clientFrom(id string, doc *clientMetadataDocument) (*client, error) {
	switch {
	case doc.ClientID != id:
		return nil, fmt.Errorf("the document's client_id %q is not its URL", doc.ClientID)
	case strings.TrimSpace(doc.ClientName) == "":
		return nil, errors.New("the document has no client_name")
	case checkClientName(doc.ClientName) != nil:
		return nil, errors.New("the document's client_name " + checkClientName(doc.ClientName).Error())
	case len(doc.RedirectURIs) == 0 || len(doc.RedirectURIs) > maxRedirectURIs:
		return nil, fmt.Errorf("the document must list between 1 and %d redirect_uris", maxRedirectURIs)
	case doc.ClientSecret != nil || doc.ClientSecretExpiresAt != nil:
		return nil, errors.New("a client metadata document must not carry a client_secret")
	}
	switch doc.TokenEndpointAuthMethod {
	case "", "none":
	default:
		// No shared secret can be established with a document's client;
		// private_key_jwt is not offered.
		return nil, fmt.Errorf("token_endpoint_auth_method %q is not supported for a metadata document (use none)", doc.TokenEndpointAuthMethod)
	}
	for _, u := range doc.RedirectURIs {
		if err := checkRedirectURI(u, r.s.cfg.development); err != nil {
			return nil, err
		}
	}
	for _, rt := range doc.ResponseTypes {
		if rt != "code" {
			return nil, errors.New(`the document's response_types must be ["code"]`)
		}
	}
	grants := []oidc.GrantType{oidc.GrantTypeCode}
	for _, g := range doc.GrantTypes {
		switch gt := oidc.GrantType(g); gt {
		case oidc.GrantTypeCode:
		case oidc.GrantTypeRefreshToken:
			if r.s.cfg.refreshOn {
				grants = append(grants, gt)
			}
		default:
			return nil, fmt.Errorf("grant type %q is not offered", g)
		}
	}
	host := ""
	if u, err := url.Parse(id); err == nil {
		host = u.Host
	}
	return &client{
		ID: id, Name: doc.ClientName, URIs: doc.RedirectURIs, AuthMeth: oidc.AuthMethodNone, Grants: grants,
		AllowedScope: r.s.cfg.scopes, dev: r.s.cfg.development, ttl: r.s.cfg.accessTTL,
		document: true, documentHost: host,
	}, nil
}

// cacheTTL reads how long a document may be kept from its answer's
// Cache-Control (no-store and no-cache: not at all; max-age less Age) or
// Expires, within the configured cap; DocumentCacheTTL without either.
func (r *documentResolver) cacheTTL(h http.Header) time.Duration {
	ttl := DocumentCacheTTL
	fromHeaders := false
	if cc := h.Get("Cache-Control"); cc != "" {
		for _, d := range strings.Split(cc, ",") {
			name, val, _ := strings.Cut(strings.TrimSpace(d), "=")
			switch strings.ToLower(name) {
			case "no-store", "no-cache":
				return 0
			case "max-age":
				if n, err := strconv.Atoi(strings.Trim(val, `"`)); err == nil && n >= 0 {
					ttl, fromHeaders = time.Duration(n)*time.Second, true
				}
			}
		}
		if fromHeaders {
			if age, err := strconv.Atoi(h.Get("Age")); err == nil && age > 0 {
				ttl -= time.Duration(age) * time.Second
			}
		}
	}
	if !fromHeaders {
		if exp := h.Get("Expires"); exp != "" {
			t, err := http.ParseTime(exp)
			if err != nil {
				return 0 // an invalid Expires means already expired (RFC 9111 5.3)
			}
			ttl = t.Sub(r.s.now())
		}
	}
	return min(max(ttl, 0), r.maxTTL)
}

// redirectAllowed says whether a client may use redirect as its redirect
// URI: one it registered, character for character. A metadata document's
// loopback IP redirect URI matches on any port (RFC 8252 section 7.3,
// OAuth 2.1 section 8.4.2): a native client picks a free port when it runs,
// and a static document cannot list it.
func (c *client) redirectAllowed(redirect string) bool {
	if slices.Contains(c.URIs, redirect) {
		return true
	}
	if !c.document {
		return false
	}
	req, err := url.Parse(redirect)
	if err != nil || req.Scheme != "http" || !isLoopbackIP(req.Hostname()) || strings.Contains(redirect, "#") {
		// A fragment (even an empty one) is never part of a redirect
		// URI (RFC 6749 section 3.1.2); the parsed URL would drop it.
		return false
	}
	for _, raw := range c.URIs {
		reg, err := url.Parse(raw)
		if err == nil && reg.Scheme == "http" && reg.Hostname() == req.Hostname() &&
			reg.EscapedPath() == req.EscapedPath() && reg.RawQuery == req.RawQuery && reg.User == nil && req.User == nil {
			return true
		}
	}
	return false
}

func isLoopbackIP(h string) bool {
	ip, err := netip.ParseAddr(h)
	return err == nil && ip.IsLoopback()
}

// onlyLocalRedirects reports whether every redirect URI of a client is on
// this computer (loopback or localhost): any program here could claim to be
// the client, which the consent page says.
func (c *client) onlyLocalRedirects() bool {
	for _, raw := range c.URIs {
		u, err := url.Parse(raw)
		if err != nil || !isLoopbackHost(u.Hostname()) {
			return false
		}
	}
	return true
}
