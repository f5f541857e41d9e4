package credential

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/codemode-gateway/caddy-codemode/credential/credentialtest"
	"github.com/codemode-gateway/caddy-codemode/guard/redistest"
	"github.com/codemode-gateway/caddy-codemode/internal/kv"
)

// lifetimeStores are the stores a registration's lifetime is tested on:
// memory on the harness's clock, and a real Redis (whose own clock runs
// the time to live, so its PTTL is read instead).
func lifetimeStores() map[string]func(t *testing.T, now func() time.Time) (Store, func(key string) time.Duration) {
	return map[string]func(t *testing.T, now func() time.Time) (Store, func(key string) time.Duration){
		"memory": func(_ *testing.T, now func() time.Time) (Store, func(string) time.Duration) {
			return NewMemoryStore(now), nil
		},
		"redis": func(t *testing.T, _ func() time.Time) (Store, func(string) time.Duration) {
			c, prefix := redistest.Client(t)
			return NewRedisStore(c, prefix+"credentials:"), func(key string) time.Duration {
				d, err := c.PTTL(t.Context(), prefix+"credentials:"+key).Result()
				if err != nil {
					t.Fatal(err)
				}
				return d
			}
		},
	}
}

// registeringHarness is a gateway registering at a fake authorization
// server (HTTP Basic) on the store newStore makes, on the harness's clock.
func registeringHarness(t *testing.T, newStore func(*testing.T, func() time.Time) (Store, func(string) time.Duration)) (*harness, *credentialtest.Fake, func(string) time.Duration) {
	fake := credentialtest.New()
	t.Cleanup(fake.Close)
	fake.EnableRegistration(authBasic)
	var h *harness
	store, pttl := newStore(t, func() time.Time { return h.clock.now() })
	h = newHarnessWith(t, store, nil, fake, registeringSpecs(fake), nil)
	return h, fake, pttl
}

// registrationKey is where h's gateway keeps its forge registration.
func registrationKey(t *testing.T, h *harness) string {
	t.Helper()
	st := h.m.specs["forge"]
	meta, err := h.m.endpoints(t.Context(), st)
	if err != nil {
		t.Fatal(err)
	}
	return "registration:" + hashOf("forge\x00"+meta.Issuer+"\x00"+h.m.redirectURI(st))
}

// storedRegistration is the registration kept under key, nil for none.
func storedRegistration(t *testing.T, h *harness, key string) *registration {
	t.Helper()
	b, err := h.store.Get(t.Context(), key)
	if errors.Is(err, kv.ErrNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var reg registration
	if err := json.Unmarshal(b, &reg); err != nil {
		t.Fatal(err)
	}
	return &reg
}

// TestRegistrationLifetime: a registration is kept as long as its client
// secret lives (client_secret_expires_at; 0 never): a secret that has
// expired on arrival is registered again once, and never kept (it was
// kept without a time to live, and every connection registered anew); a
// registration past its secret's expiry is registered anew and replaced.
// On memory and on Redis.
func TestRegistrationLifetime(t *testing.T) {
	for name, newStore := range lifetimeStores() {
		t.Run(name, func(t *testing.T) {
			h, fake, pttl := registeringHarness(t, newStore)
			key := registrationKey(t, h)

			// The first secret has expired when it arrives: one more
			// registration, and that one is kept until its secret expires.
			now := h.clock.now()
			fake.SetSecretExpiry(now.Add(-time.Minute), now.Add(time.Hour))
			h.connect(t, h.browser(t, "alice", "gh-alice"))
			if n := len(fake.Registrations()); n != 2 {
				t.Fatalf("%d registrations, want 2 (the expired secret's and one more)", n)
			}
			reg := storedRegistration(t, h, key)
			if reg == nil || !reg.ExpiresAt.Equal(now.Add(time.Hour).Truncate(time.Second)) {
				t.Fatalf("stored %+v, want the registration whose secret expires in an hour", reg)
			}
			for _, q := range fake.Authorizations() {
				if q.Get("client_id") != reg.ClientID {
					t.Fatalf("the connection used client %q, not the stored %q", q.Get("client_id"), reg.ClientID)
				}
			}
			if pttl != nil {
				if d := pttl(key); d <= 0 || d > time.Hour {
					t.Fatalf("the registration's time to live is %v, want (0, 1h]", d)
				}
			}
			// Another user within the hour: the same client.
			h.connect(t, h.browser(t, "bob", "gh-bob"))
			if n := len(fake.Registrations()); n != 2 {
				t.Fatalf("%d registrations after a second user, want 2", n)
			}

			// Past the secret's expiry: registered anew, and the new one kept.
			h.clock.add(time.Hour + time.Second)
			if pttl == nil && storedRegistration(t, h, key) != nil {
				t.Fatal("the memory store still holds the registration past its time to live")
			}
			fake.SetSecretExpiry(h.clock.now().Add(time.Hour))
			h.connect(t, h.browser(t, "carol", "gh-carol"))
			if n := len(fake.Registrations()); n != 3 {
				t.Fatalf("%d registrations after the secret expired, want 3", n)
			}
			if again := storedRegistration(t, h, key); again == nil || again.ClientID == reg.ClientID {
				t.Fatalf("stored %+v after the secret expired, want a new client", again)
			}
		})
	}
}

// TestRegistrationExpiredTwice: an authorization server that registers
// only secrets that have already expired is asked twice, then the
// connection stops with UPSTREAM_REGISTRATION_FAILED, and nothing is kept.
func TestRegistrationExpiredTwice(t *testing.T) {
	fake := credentialtest.New()
	t.Cleanup(fake.Close)
	fake.EnableRegistration(authPost)
	h := newHarnessWith(t, nil, nil, fake, registeringSpecs(fake), nil)
	fake.SetSecretExpiry(h.clock.now().Add(-time.Hour))
	c := h.browser(t, "alice", "gh-alice")
	status, _, body := post(t, c, h.gw.URL+"/connections/forge/connect", url.Values{"csrf": {h.csrf(t, c)}}, nil)
	if m := pageCode.FindStringSubmatch(body); status != http.StatusBadGateway || m == nil || m[1] != CodeRegistrationFailed {
		t.Fatalf("connect: %d %s", status, body)
	}
	if n := len(fake.Registrations()); n != 2 {
		t.Fatalf("%d registrations, want 2", n)
	}
	if !h.logged("already expired") {
		t.Error("no log line says the secrets had already expired")
	}
	if reg := storedRegistration(t, h, registrationKey(t, h)); reg != nil {
		t.Fatalf("kept %+v", reg)
	}
}

// TestRegistrationStaleEntryReplaced: a registration kept without a time
// to live past its secret's expiry (as gateways before the twenty-fourth
// pass stored one) is replaced by the next registration, which the next
// connections use; before, it stayed, and every connection registered.
func TestRegistrationStaleEntryReplaced(t *testing.T) {
	for name, newStore := range lifetimeStores() {
		t.Run(name, func(t *testing.T) {
			h, fake, _ := registeringHarness(t, newStore)
			key := registrationKey(t, h)
			stale, _ := json.Marshal(registration{ClientID: "stale-client", Method: authNone, ExpiresAt: h.clock.now().Add(-time.Hour)})
			if err := h.store.Set(t.Context(), key, stale, 0); err != nil {
				t.Fatal(err)
			}
			h.connect(t, h.browser(t, "alice", "gh-alice"))
			h.connect(t, h.browser(t, "bob", "gh-bob"))
			if n := len(fake.Registrations()); n != 1 {
				t.Fatalf("%d registrations for two users, want 1", n)
			}
			if reg := storedRegistration(t, h, key); reg == nil || reg.ClientID == "stale-client" {
				t.Fatalf("stored %+v, want the new registration", reg)
			}
		})
	}
}

// TestRegistrationRefusedIsForgotten: when the authorization server
// answers the registered client's authentication with invalid_client (it
// forgot or revoked the client), the registration is deleted: the user is
// asked to connect again, and that connection registers anew once and
// works (before, the dead client was used until the store was cleared).
func TestRegistrationRefusedIsForgotten(t *testing.T) {
	for name, newStore := range lifetimeStores() {
		t.Run(name, func(t *testing.T) {
			h, fake, _ := registeringHarness(t, newStore)
			key := registrationKey(t, h)
			c := h.browser(t, "alice", "gh-alice")
			h.connect(t, c)
			first := storedRegistration(t, h, key)
			if first == nil {
				t.Fatal("no registration stored")
			}

			fake.ForgetClients()
			h.clock.add(2 * time.Hour) // the token is due: the refresh authenticates as the client
			_, _, err := h.call(t, as("alice"), "forge", "/api/whoami")
			wantCode(t, err, CodeCredentialRequired)
			if reg := storedRegistration(t, h, key); reg != nil {
				t.Fatalf("the refused registration is still stored: %+v", reg)
			}
			if !h.logged("invalid_client") {
				t.Error("no log line says the client was refused")
			}

			h.connect(t, c)
			if n := len(fake.Registrations()); n != 2 {
				t.Fatalf("%d registrations, want 2", n)
			}
			if _, got, err := h.call(t, as("alice"), "forge", "/api/whoami"); err != nil || got != "gh-alice" {
				t.Fatalf("alice's call with the new registration: %q %v", got, err)
			}
			if reg := storedRegistration(t, h, key); reg == nil || reg.ClientID == first.ClientID {
				t.Fatalf("stored %+v, want a new client", reg)
			}
		})
	}
}
