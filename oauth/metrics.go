package oauth

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/codemode-gateway/caddy-codemode/internal/telemetry"
)

// Metrics are the authorization server's Prometheus metrics: tokens issued
// by grant, refresh-token reuse, revoked grants, logins, and the age of the
// signing key. One Metrics serves any number of servers; register it once
// per registry. A nil *Metrics records nothing.
type Metrics struct {
	issued  *prometheus.CounterVec
	reuse   *prometheus.CounterVec
	revoked *prometheus.CounterVec
	logins  *prometheus.CounterVec
	fulls   *prometheus.CounterVec
	all     telemetry.Collectors
	keyAge  *prometheus.Desc

	mu      sync.Mutex
	seq     uint64
	servers map[*Server]uint64
}

// NewMetrics returns the server's metrics, registered nowhere yet.
func NewMetrics() *Metrics {
	m := &Metrics{
		issued: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "codemode", Subsystem: "oauth", Name: "tokens_issued_total",
			Help: "Access tokens issued by the token endpoint, by grant type (authorization_code, refresh_token).",
		}, []string{"grant_type"}),
		reuse: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "codemode", Subsystem: "oauth", Name: "refresh_reuse_total",
			Help: "Rotated refresh tokens presented again, by action (revoked: the whole grant was revoked; grace: accepted within reuse_grace_seconds).",
		}, []string{"action"}),
		revoked: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "codemode", Subsystem: "oauth", Name: "grants_revoked_total",
			Help: "Grants revoked, by reason (refresh_reuse, code_reuse, revoked: asked at the revocation endpoint).",
		}, []string{"reason"}),
		logins: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "codemode", Subsystem: "oauth", Name: "logins_total",
			Help: "Login form submissions, by outcome (success, demo, failure, locked_out, refused: the authorization was signed in already, busy: no password check came free in time).",
		}, []string{"outcome"}),
		fulls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "codemode", Subsystem: "oauth", Name: "refused_full_total",
			Help: "Requests answered 503 temporarily_unavailable because the server holds as many as it may, by limit (max_registered_clients: a registration; max_pending_authorizations: an authorization request).",
		}, []string{"limit"}),
		keyAge: prometheus.NewDesc("codemode_oauth_signing_key_age_seconds",
			"Time since the signing key in use took over: the start of the current rotation period, or, without rotation, since the server started.",
			nil, nil),
		servers: map[*Server]uint64{},
	}
	m.all = telemetry.Collectors{m.issued, m.reuse, m.revoked, m.logins, m.fulls}
	// Every label value is exported from the start at 0, so that
	// increase(), rate() and alerts see the first event (Prometheus does
	// not count a series' first sample as an increase).
	for vec, values := range map[*prometheus.CounterVec][]string{
		m.issued:  {"authorization_code", "refresh_token"},
		m.reuse:   {"revoked", "grace"},
		m.revoked: {"refresh_reuse", "code_reuse", "revoked"},
		m.logins:  {"success", "demo", "failure", "locked_out", "refused", "busy"},
		m.fulls:   {"max_registered_clients", "max_pending_authorizations"},
	} {
		for _, v := range values {
			vec.WithLabelValues(v)
		}
	}
	return m
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.all.Describe(ch)
	ch <- m.keyAge
}

// Collect implements prometheus.Collector; the key age is the newest live
// server's.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.all.Collect(ch)
	type live struct {
		s   *Server
		seq uint64
	}
	m.mu.Lock()
	servers := make([]live, 0, len(m.servers))
	for s, n := range m.servers {
		servers = append(servers, live{s, n})
	}
	m.mu.Unlock()
	if len(servers) == 0 {
		return
	}
	newest := slices.MaxFunc(servers, func(a, b live) int { return cmp.Compare(a.seq, b.seq) }).s
	ch <- prometheus.MustNewConstMetric(m.keyAge, prometheus.GaugeValue, newest.keyAge().Seconds())
}

// keyAge is how long the current signing key has been signing.
func (s *Server) keyAge() time.Duration {
	now := s.now()
	if r := s.keys.rotation; r > 0 {
		return now.Sub(time.Unix(s.keys.period(now)*int64(r/time.Second), 0))
	}
	return now.Sub(s.started)
}

func (m *Metrics) track(s *Server) {
	if m != nil {
		m.mu.Lock()
		m.seq++
		m.servers[s] = m.seq
		m.mu.Unlock()
	}
}

func (m *Metrics) untrack(s *Server) {
	if m != nil {
		m.mu.Lock()
		delete(m.servers, s)
		m.mu.Unlock()
	}
}

func (m *Metrics) tokenIssued(grant string) {
	if m != nil {
		m.issued.WithLabelValues(grant).Inc()
	}
}

func (m *Metrics) refreshReused(action string) {
	if m != nil {
		m.reuse.WithLabelValues(action).Inc()
	}
}

func (m *Metrics) grantRevoked(reason string) {
	if m != nil {
		m.revoked.WithLabelValues(reason).Inc()
	}
}

func (m *Metrics) login(outcome string) {
	if m != nil {
		m.logins.WithLabelValues(outcome).Inc()
	}
}

func (m *Metrics) full(limit string) {
	if m != nil {
		m.fulls.WithLabelValues(limit).Inc()
	}
}
