package oauth

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/oauth2"
)

// TestMetricsOfTheAuthorizationServer: tokens by grant, refresh reuse and
// the revocation it causes, logins by outcome and the signing key's age.
func TestMetricsOfTheAuthorizationServer(t *testing.T) {
	e := newAS(t, func(c *ServerConfig) { c.Consent.Enabled = false })
	m := e.s.metrics
	cfg := e.oauth2(asClientID, asRedirect)
	tok := e.token(cfg)
	refresh := func(rt string) (*oauth2.Token, error) {
		return cfg.TokenSource(e.ctx(), &oauth2.Token{RefreshToken: rt, Expiry: time.Now().Add(-time.Minute)}).Token()
	}
	tok2, err := refresh(tok.RefreshToken)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := refresh(tok.RefreshToken); err == nil {
		t.Fatal("reuse accepted")
	}
	_ = tok2

	// A wrong password on the login page.
	loginURL := location(t, e.get(cfg.AuthCodeURL("st", oauth2.S256ChallengeOption(oauth2.GenerateVerifier()))), http.StatusFound)
	id, csrf := hidden(t, body(t, e.get(e.srv.URL+loginURL.RequestURI())))
	resp := e.postForm(e.srv.URL+"/oauth/login", url.Values{"id": {id}, "csrf": {csrf}, "username": {asUser}, "password": {"wrong"}})
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("wrong password: %d", resp.StatusCode)
	}
	resp.Body.Close()

	val := func(c prometheus.Collector) float64 { return testutil.ToFloat64(c) }
	for name, c := range map[string]struct {
		c    prometheus.Collector
		want float64
	}{
		"issued authorization_code": {m.issued.WithLabelValues("authorization_code"), 1},
		"issued refresh_token":      {m.issued.WithLabelValues("refresh_token"), 1},
		"refresh reuse revoked":     {m.reuse.WithLabelValues("revoked"), 1},
		"revoked for reuse":         {m.revoked.WithLabelValues("refresh_reuse"), 1},
		"logins success":            {m.logins.WithLabelValues("success"), 1},
		"logins failure":            {m.logins.WithLabelValues("failure"), 1},
	} {
		if v := val(c.c); v != c.want {
			t.Errorf("%s = %v, want %v", name, v, c.want)
		}
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	e.clock.Add(90 * time.Second)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP codemode_oauth_signing_key_age_seconds Time since the signing key in use took over: the start of the current rotation period, or, without rotation, since the server started.
# TYPE codemode_oauth_signing_key_age_seconds gauge
codemode_oauth_signing_key_age_seconds 90
`), "codemode_oauth_signing_key_age_seconds"); err != nil {
		t.Error(err)
	}
	_ = e.s.Close()
	if n, _ := testutil.GatherAndCount(reg, "codemode_oauth_signing_key_age_seconds"); n != 0 {
		t.Error("a closed server still reports its key age")
	}
}

// TestCountersExportedAtZero: every label value of the OAuth counters is a
// series from the start, so that Prometheus' increase() and the alerting
// rules (a replayed refresh token, lockouts, a full server) see the first
// event.
func TestCountersExportedAtZero(t *testing.T) {
	m := NewMetrics()
	for name, want := range map[string]int{
		"codemode_oauth_tokens_issued_total":  2,
		"codemode_oauth_refresh_reuse_total":  2,
		"codemode_oauth_grants_revoked_total": 3,
		"codemode_oauth_logins_total":         6,
		"codemode_oauth_refused_full_total":   2,
	} {
		if n := testutil.CollectAndCount(m, name); n != want {
			t.Errorf("%s: %d series before any event, want %d", name, n, want)
		}
	}
}
