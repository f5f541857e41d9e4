package oauth

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/codemode-gateway/caddy-codemode/guard/redistest"
	"golang.org/x/oauth2"
)

// reportMedian adds the median of the timed operations to the benchmark's
// output: the goals are stated as medians.
func reportMedian(b *testing.B, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	slices.Sort(d)
	b.ReportMetric(float64(d[len(d)/2].Microseconds())/1000, "ms-median")
}

func redisOpt(b *testing.B) func(*ServerConfig) {
	rc, prefix := redistest.Client(b)
	return func(c *ServerConfig) {
		c.TokenStorage = TokenStorageConfig{Type: "redis", Client: rc, KeyPrefix: prefix}
	}
}

func benchExchange(b *testing.B, mutate func(*ServerConfig)) {
	e := newAS(b, mutate)
	cfg := e.oauth2(asClientID, asRedirect)
	ctx := e.ctx()
	var times []time.Duration
	for b.Loop() {
		b.StopTimer()
		v := oauth2.GenerateVerifier()
		code := e.code(cfg, v)
		b.StartTimer()
		start := time.Now()
		if _, err := cfg.Exchange(ctx, code, oauth2.VerifierOption(v)); err != nil {
			b.Fatal(err)
		}
		times = append(times, time.Since(start))
	}
	reportMedian(b, times)
}

// BenchmarkCodeExchange is POST /oauth/token with grant_type
// authorization_code over real HTTP (TLS, keep-alive) with x/oauth2.
func BenchmarkCodeExchange(b *testing.B)      { benchExchange(b, nil) }
func BenchmarkCodeExchangeRedis(b *testing.B) { benchExchange(b, redisOpt(b)) }

func benchRefresh(b *testing.B, mutate func(*ServerConfig)) {
	e := newAS(b, mutate)
	cfg := e.oauth2(asClientID, asRedirect)
	ctx := e.ctx()
	v := oauth2.GenerateVerifier()
	tok, err := cfg.Exchange(ctx, e.code(cfg, v), oauth2.VerifierOption(v))
	if err != nil {
		b.Fatal(err)
	}
	rt := tok.RefreshToken
	past := time.Now().Add(-time.Minute)
	var times []time.Duration
	for b.Loop() {
		start := time.Now()
		tok, err := cfg.TokenSource(ctx, &oauth2.Token{RefreshToken: rt, Expiry: past}).Token()
		if err != nil {
			b.Fatal(err)
		}
		times = append(times, time.Since(start))
		rt = tok.RefreshToken
	}
	reportMedian(b, times)
}

// BenchmarkRefresh is POST /oauth/token with grant_type refresh_token
// (rotation included) over real HTTP.
func BenchmarkRefresh(b *testing.B)      { benchRefresh(b, nil) }
func BenchmarkRefreshRedis(b *testing.B) { benchRefresh(b, redisOpt(b)) }

func benchVerifyAccess(b *testing.B, cold bool, mutate func(*ServerConfig)) {
	e := newAS(b, mutate)
	cfg := e.oauth2(asClientID, asRedirect)
	v := oauth2.GenerateVerifier()
	tok, err := cfg.Exchange(e.ctx(), e.code(cfg, v), oauth2.VerifierOption(v))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if cold {
			r := e.s.verifier.results
			r.mu.Lock()
			clear(r.m)
			r.mu.Unlock()
		}
		if _, err := e.s.VerifyAccessToken(ctx, tok.AccessToken, asResource); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerifyAccessToken* is the per-request check: expiry, audience
// and the session lookup (in memory, or one Redis GET) on a token seen
// before (its verified signature is cached). The Cold variants verify the
// signature every time, as for the first request with a new token.
func BenchmarkVerifyAccessTokenRS256(b *testing.B)     { benchVerifyAccess(b, false, nil) }
func BenchmarkVerifyAccessTokenRS256Cold(b *testing.B) { benchVerifyAccess(b, true, nil) }
func BenchmarkVerifyAccessTokenES256Cold(b *testing.B) {
	benchVerifyAccess(b, true, func(c *ServerConfig) { c.Local.KeyRotationDays = 30 })
}
func BenchmarkVerifyAccessTokenRS256Redis(b *testing.B) { benchVerifyAccess(b, false, redisOpt(b)) }

// BenchmarkRegistrationCount is the count behind max_registered_clients:
// one admit with DefaultMaxRegisteredClients live registrations, refused
// ("full", the memory storage then sweeps every entry) or admitted with
// one place left ("room"), on each storage.
func BenchmarkRegistrationCount(b *testing.B) {
	ctx := context.Background()
	now := time.Now()
	exp := now.Add(UnusedClientTTL)
	const n = DefaultMaxRegisteredClients
	for _, st := range []struct {
		name string
		regs func(b *testing.B) registrations
	}{
		{"memory", func(*testing.B) registrations { return newMemoryRegistrations() }},
		{"redis", func(b *testing.B) registrations {
			rc, prefix := redistest.Client(b)
			return redisRegistrations{rc, prefix + keyRegistrations, "registered clients"}
		}},
	} {
		for _, full := range []bool{true, false} {
			name := st.name + "/room"
			if full {
				name = st.name + "/full"
			}
			b.Run(name, func(b *testing.B) {
				r := st.regs(b)
				for i := range n - 1 {
					if ok, _, err := r.admit(ctx, fmt.Sprint("c", i), now, exp, n); !ok || err != nil {
						b.Fatal(ok, err)
					}
				}
				if full {
					_, _, _ = r.admit(ctx, "last", now, exp, n)
				}
				for b.Loop() {
					ok, _, err := r.admit(ctx, "x", now, exp, n)
					if err != nil || ok == full {
						b.Fatal(ok, err)
					}
					if ok {
						_ = r.forget(ctx, "x")
					}
				}
			})
		}
	}
}

func benchLogin(b *testing.B, mutate func(*ServerConfig)) {
	e, cfg := benchAS(b, mutate)
	timeRequests(b, http.StatusSeeOther, func() func() *http.Response {
		loginURL := location(b, e.get(cfg.AuthCodeURL("st", oauth2.S256ChallengeOption(oauth2.GenerateVerifier()))), http.StatusFound)
		id, csrf := hidden(b, body(b, e.get(e.srv.URL+loginURL.RequestURI())))
		form := url.Values{"id": {id}, "csrf": {csrf}, "username": {asUser}, "password": {asPassword}}
		return func() *http.Response { return e.postForm(e.srv.URL+"/oauth/login", form) }
	})
}

// benchAS is the server of a login or authorization benchmark: every
// iteration leaves its authorization pending, so no cap refuses a long
// run.
func benchAS(b *testing.B, mutate func(*ServerConfig)) (*asEnv, *oauth2.Config) {
	e := newAS(b, func(c *ServerConfig) {
		c.MaxPendingAuthorizations = 1 << 30
		if mutate != nil {
			mutate(c)
		}
	})
	return e, e.oauth2(asClientID, asRedirect)
}

// timeRequests times, per iteration, the request that prepare (untimed)
// returns, which must answer want, and reports the median.
func timeRequests(b *testing.B, want int, prepare func() func() *http.Response) {
	var times []time.Duration
	for b.Loop() {
		b.StopTimer()
		do := prepare()
		b.StartTimer()
		start := time.Now()
		resp := do()
		times = append(times, time.Since(start))
		b.StopTimer()
		if resp.StatusCode != want {
			b.Fatalf("%d, want %d", resp.StatusCode, want)
		}
		resp.Body.Close()
		b.StartTimer()
	}
	reportMedian(b, times)
}

// BenchmarkLogin is POST /oauth/login with the right password (bcrypt at
// its least cost, so the storage's share shows) over real HTTP.
func BenchmarkLogin(b *testing.B)      { benchLogin(b, nil) }
func BenchmarkLoginRedis(b *testing.B) { benchLogin(b, redisOpt(b)) }

func benchAuthorize(b *testing.B, mutate func(*ServerConfig)) {
	e, cfg := benchAS(b, mutate)
	timeRequests(b, http.StatusFound, func() func() *http.Response {
		u := cfg.AuthCodeURL("st", oauth2.S256ChallengeOption(oauth2.GenerateVerifier()))
		return func() *http.Response { return e.get(u) }
	})
}

// BenchmarkAuthorize is GET /oauth/authorize answered with the redirect to
// the login page (the pending authorization stored, and counted) over real
// HTTP.
func BenchmarkAuthorize(b *testing.B)      { benchAuthorize(b, nil) }
func BenchmarkAuthorizeRedis(b *testing.B) { benchAuthorize(b, redisOpt(b)) }
