package caddymodules

import (
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
