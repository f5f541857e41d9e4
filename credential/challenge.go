package credential

import (
	"context"
	"errors"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"
)

// maxPlaced bounds the tokens remembered for Transport: past it the memory
// is cleared (a refusal of a forgotten token then passes through as the
// upstream's answer).
const maxPlaced = 10000

// insufficientScope is the error of a 403 challenge that asks for more
// scopes (RFC 6750 section 3.1).
var insufficientScope = regexp.MustCompile(`(?i)(?:^|[\s,])error="insufficient_scope"`)

// Transport wraps base, the transport of service's upstream MCP
// connections, so that the upstream's refusal of a user's token is acted
// on as the MCP authorization spec says, instead of reaching the caller as
// the upstream's error:
//
//   - 401 (the token is refused: revoked, expired early, or the server now
//     trusts another authorization server): the service's metadata is read
//     again at the next use, and the token is refreshed now (at the server
//     that issued it only) or, without a refresh token, or when the
//     metadata now names another server, forgotten; the request fails
//     with CREDENTIAL_UNAVAILABLE (retry: a new token is in place) or
//     CREDENTIAL_REQUIRED (connect again);
//   - 403 with error="insufficient_scope" and a scope the connection was
//     not authorized for (step-up): the scopes are remembered with the
//     connection, and the request fails with CREDENTIAL_REQUIRED; the
//     user's next connection asks for the union of the scopes asked for
//     before, those granted, and those challenged. A scope asked for
//     already is not asked again (a server that never grants it does not
//     loop the user through sign-ins): its 403 passes through.
//
// Other answers, and the answers to requests that carry no user's token,
// pass through unchanged.
func (m *Manager) Transport(service string, base http.RoundTripper) http.RoundTripper {
	st, ok := m.specs[service]
	if !ok || st.spec.Kind != KindOAuth {
		return base
	}
	return &refusalTransport{m: m, st: st, base: base}
}

type refusalTransport struct {
	m    *Manager
	st   *specState
	base http.RoundTripper
}

func (t *refusalTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(r)
	if err != nil || resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden {
		return resp, err
	}
	o, secret, ok := t.m.placedOn(t.st, r)
	if !ok {
		return resp, nil
	}
	challenge := strings.Join(resp.Header.Values("WWW-Authenticate"), ", ")
	var rerr error
	if resp.StatusCode == http.StatusUnauthorized {
		rerr = t.m.tokenRefused(r.Context(), o, t.st, secret)
	} else {
		rerr = t.m.scopeChallenged(r.Context(), o, t.st, secret, challenge)
	}
	if rerr == nil {
		return resp, nil
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	return nil, rerr
}

// remember notes that secret was placed for o on a request to st's
// upstream (Transport finds the owner of a refused token by it).
func (m *Manager) remember(st *specState, o Owner, secret string) {
	k := hashOf(st.spec.Service + "\x00" + secret)
	m.mu.Lock()
	if _, ok := m.placed[k]; !ok && len(m.placed) >= maxPlaced {
		clear(m.placed)
	}
	m.placed[k] = o
	m.mu.Unlock()
}

// placedOn returns the owner whose credential is on r, and the credential.
func (m *Manager) placedOn(st *specState, r *http.Request) (Owner, string, bool) {
	var secret string
	if q := st.spec.Apply.Query; q != "" {
		secret = r.URL.Query().Get(q)
	} else {
		name, scheme := st.spec.Apply.header()
		secret = r.Header.Get(name)
		if scheme != "" {
			var ok bool
			if secret, ok = strings.CutPrefix(secret, scheme+" "); !ok {
				return Owner{}, "", false
			}
		}
	}
	if secret == "" {
		return Owner{}, "", false
	}
	m.mu.Lock()
	o, ok := m.placed[hashOf(st.spec.Service+"\x00"+secret)]
	m.mu.Unlock()
	return o, secret, ok
}

// tokenRefused handles a 401 to o's token secret (see Transport).
func (m *Manager) tokenRefused(ctx context.Context, o Owner, st *specState, secret string) error {
	svc := st.spec.Service
	st.mu.Lock()
	st.metaAt = time.Time{} // read the metadata again: the server may have moved
	st.mu.Unlock()
	rec, sealed, err := m.vault.getSealed(ctx, o.Key(), svc)
	if err != nil {
		return nil // gone or unreadable: the next use says so
	}
	if rec.AccessToken == secret {
		due := *rec
		due.Expiry = m.now().Add(-m.opts.RefreshBefore - 1)
		if ok, err := m.vault.replace(ctx, o.Key(), svc, sealed, &due); err != nil || !ok {
			return unavailable(svc, errors.Join(err, errors.New("the upstream refused the token")))
		}
	}
	m.log.Info("the upstream refused a user's token; refreshing or asking the user to connect again", zap.String("service", svc))
	if _, err := m.secret(ctx, o, st); err != nil {
		if errors.Is(err, errNoCredential) {
			return m.required(svc, svc+" refused your connection", nil)
		}
		return err
	}
	return unavailable(svc, errors.New("the upstream refused the token; a new one is in place"))
}

// scopeChallenged handles a 403 to o's token secret (see Transport).
func (m *Manager) scopeChallenged(ctx context.Context, o Owner, st *specState, secret, challenge string) error {
	svc := st.spec.Service
	if !insufficientScope.MatchString(challenge) {
		return nil
	}
	sm := scopeParam.FindStringSubmatch(challenge)
	if sm == nil {
		return nil
	}
	wanted := scopeList(strings.Fields(sm[1]))
	rec, sealed, err := m.vault.getSealed(ctx, o.Key(), svc)
	if err != nil || rec.AccessToken != secret {
		return nil
	}
	asked := strings.Fields(rec.RequestedScope)
	var missing []string
	for _, s := range wanted {
		if !slices.Contains(asked, s) {
			missing = append(missing, s)
		}
	}
	if len(missing) == 0 {
		return nil // asked for before and not granted: another sign-in will not help
	}
	union := scopeList(slices.Concat(asked, strings.Fields(rec.Scope), strings.Fields(rec.StepUpScope), wanted))
	next := *rec
	next.StepUpScope = strings.Join(union, " ")
	if _, err := m.vault.replace(ctx, o.Key(), svc, sealed, &next); err != nil {
		return unavailable(svc, err)
	}
	m.log.Info("the upstream asks for more scopes than a user's connection grants; the user must connect again",
		zap.String("service", svc), zap.Strings("scopes", missing))
	return m.required(svc, svc+" needs more access than your connection grants ("+strings.Join(missing, " ")+")", nil)
}
