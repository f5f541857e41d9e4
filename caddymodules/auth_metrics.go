package caddymodules

import (
	"errors"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/codemode-gateway/caddy-codemode/oauth"
)

// authMetrics are the authentication metrics exported through Caddy's
// metrics endpoint (production rule 9 and the spec's monitoring thresholds).
type authMetrics struct {
	// failures counts rejected bearer tokens by reason (missing_token,
	// expired, wrong_audience, unknown_key, bad_signature, ...; unavailable
	// and issuer_mismatch are the server's).
	failures *prometheus.CounterVec
	// tokenLatency is the time to answer /oauth/token, by grant type and
	// outcome (the spec alarms above 500 ms).
	tokenLatency *prometheus.HistogramVec
	// rateLimited counts token-endpoint requests refused with 429.
	rateLimited prometheus.Counter
}

// authFailureReasons are the reason labels of failures: the token's
// faults (oauth.Reasons), a valid token without a required scope, and the
// server's failures (a key set or token storage that cannot be reached, a
// provider whose discovery documents name another issuer).
var authFailureReasons = append(slices.Clone(oauth.Reasons), reasonInsufficientScope, reasonUnavailable, reasonIssuerMismatch)

const (
	reasonInsufficientScope = "insufficient_scope"
	reasonUnavailable       = "unavailable"
	reasonIssuerMismatch    = "issuer_mismatch"
)

func newAuthMetrics(reg interface {
	prometheus.Registerer
}) (*authMetrics, error) {
	m := &authMetrics{
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "codemode", Subsystem: "auth", Name: "failures_total",
			Help: "Bearer tokens refused, by reason.",
		}, []string{"reason"}),
		tokenLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "codemode", Subsystem: "auth", Name: "token_issuance_seconds",
			Help:    "Latency of the token endpoint, by grant type and status class.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"grant_type", "status"}),
		rateLimited: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "codemode", Subsystem: "auth", Name: "rate_limited_total",
			Help: "Requests to the token, registration, revocation and login endpoints refused with 429.",
		}),
	}
	// Every reason is exported from the start at 0, as the other packages'
	// counters are: Prometheus counts no increase at a series' first
	// sample, so rate() and increase() missed each reason's first failure.
	for _, reason := range authFailureReasons {
		m.failures.WithLabelValues(reason)
	}
	// The token endpoint's latency too, for the answers it gives (empty):
	// a grant it knows succeeds, is refused or fails; another or none is
	// refused (peekGrantType, statusClass).
	for _, grant := range []string{"authorization_code", "refresh_token"} {
		for _, status := range []string{"2xx", "4xx", "5xx"} {
			m.tokenLatency.WithLabelValues(grant, status)
		}
	}
	for _, grant := range []string{"other", "unknown"} {
		m.tokenLatency.WithLabelValues(grant, "4xx")
	}
	if reg == nil {
		return m, nil
	}
	var err error
	m.failures, err = register(reg, m.failures)
	if err != nil {
		return nil, err
	}
	m.tokenLatency, err = register(reg, m.tokenLatency)
	if err != nil {
		return nil, err
	}
	m.rateLimited, err = register(reg, m.rateLimited)
	return m, err
}

// register registers c, or returns the collector already registered under
// the same name (a config reload provisions the app again).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		return c, err
	}
	return c, nil
}
