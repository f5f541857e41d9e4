package caddymodules

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"

	"go.uber.org/zap"

	"github.com/codemode-gateway/caddy-codemode/oauth"
)

// buildOrchestrated builds our own authorization server. Token validation
// goes through its VerifyAccessToken, which returns the same
// *oauth.VerifiedToken and *oauth.TokenError reasons as the transparent
// Verifier and also checks that the token's session was not revoked
// (something a key set alone cannot tell).
func buildOrchestrated(s *authShared, cfg *AuthConfig, logger *zap.Logger) error {
	srv, err := oauth.NewServer(cfg.ServerConfig, &oauth.ServerOptions{Logger: logger, Metrics: processTelemetry().oauth})
	if err != nil {
		return err
	}
	s.closers = append(s.closers, srv.Close)
	s.server = srv
	s.handler = srv.Handler()
	s.issuer = srv.Issuer()
	s.verify = srv.VerifyAccessToken
	return nil
}

// servedResources are the resources (RFC 8707) the authorization server
// issues tokens for under one configuration: auth.resources when set, else
// the issuer, auth.resource and every resource this configuration's
// codemode_oauth and codemode_auth handlers name, declared as they
// provision. The server is shared between configurations (a reload keeps
// it), so the set is applied per configuration through
// oauth.Server.ResourceHandler, built at the first request, when every
// handler has provisioned.
type servedResources struct {
	explicit bool
	mu       sync.Mutex
	names    []string // canonical
	once     sync.Once
	handler  http.Handler
}

// newServedResources starts the set of an orchestrated configuration whose
// issuer, resource and resources have their defaults and placeholders
// applied.
func newServedResources(cfg *AuthConfig) (*servedResources, error) {
	s := &servedResources{explicit: len(cfg.Resources) > 0}
	if iss, ok := oauth.CanonicalResource(cfg.Issuer); ok { // else oauth.NewServer says what is wrong
		s.names = append(s.names, iss)
	}
	list := cfg.Resources
	if !s.explicit && cfg.Resource != "" {
		list = []string{cfg.Resource}
	}
	for _, r := range list {
		c, ok := oauth.CanonicalResource(r)
		if !ok && s.explicit {
			return nil, fmt.Errorf("resources: %q is not an absolute http(s) URI without fragment or user information", r)
		}
		if ok && !slices.Contains(s.names, c) {
			s.names = append(s.names, c)
		}
	}
	if s.explicit && cfg.Resource != "" {
		if err := s.declare("auth resource", cfg.Resource); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// declare adds a resource a handler of the configuration protects or
// describes; with auth.resources set, it must be one of them, so that a
// configuration whose clients could never get a token for a route fails
// at load. A resource that is not an http(s) URL cannot be named in an
// authorization request and is ignored. s may be nil (transparent mode).
func (s *servedResources) declare(what, resource string) error {
	c, ok := oauth.CanonicalResource(resource)
	if s == nil || !ok {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if slices.Contains(s.names, c) {
		return nil
	}
	if s.explicit {
		return fmt.Errorf("%s %s is not among the auth resources (%s): the authorization server would issue no token for it; add it to resources in the auth block",
			what, c, strings.Join(s.names, " "))
	}
	s.names = append(s.names, c)
	return nil
}

// serving returns srv's endpoints issuing tokens for the set.
func (s *servedResources) serving(srv *oauth.Server, logger *zap.Logger) http.Handler {
	s.once.Do(func() {
		s.mu.Lock()
		names := slices.Clone(s.names)
		s.mu.Unlock()
		h, err := srv.ResourceHandler(names)
		if err != nil { // the names are canonical: cannot happen
			logger.Error("served resources refused; the authorization server issues tokens for its issuer only", zap.Error(err))
			h, _ = srv.ResourceHandler(nil)
		}
		s.handler = h
		logger.Info("authorization server issues tokens for these resources", zap.Strings("resources", names), zap.Bool("configured", s.explicit))
	})
	return s.handler
}
