package metatools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/codemode-gateway/caddy-codemode/credential/credentialtest"
)

type callerKey struct{}

// TestUpstreamPerUserConnections: an upstream MCP server that serves
// signed-in users only is called over each user's own connection with
// that user's token; the first user's connection lists the tools; a
// credential refused on the way out reaches the caller as it is.
func TestUpstreamPerUserConnections(t *testing.T) {
	fake := credentialtest.New()
	defer fake.Close()
	tokens := map[string]string{"alice": fake.IssueToken("gh-alice"), "bob": fake.IssueToken("gh-bob")}
	var mu sync.Mutex
	disconnected := map[string]bool{}
	required := &Error{Code: "CREDENTIAL_REQUIRED", Message: "connect at https://gw/connections/fake"}
	up, err := NewUpstream(UpstreamConfig{Name: "fake", URL: fake.URL + "/mcp",
		Credential: func(ctx context.Context) (string, func(*http.Request) error, error) {
			user, _ := ctx.Value(callerKey{}).(string)
			if user == "" {
				return "", nil, required
			}
			return user, func(r *http.Request) error {
				mu.Lock()
				gone := disconnected[user]
				mu.Unlock()
				if gone {
					return required
				}
				r.Header.Set("Authorization", "Bearer "+tokens[user])
				return nil
			}, nil
		}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := up.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	if tools, _ := up.Tools(ctx); len(tools) != 0 {
		t.Fatalf("the shared connection (no token) listed %d tools", len(tools))
	}
	var wg sync.WaitGroup
	for range 5 {
		for user, acct := range map[string]string{"alice": "gh-alice", "bob": "gh-bob"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				out, err := up.Call(context.WithValue(ctx, callerKey{}, user), "fake:whoami", json.RawMessage(`{}`))
				var got struct{ Account string }
				_ = json.Unmarshal(out, &got)
				if err != nil || got.Account != acct {
					t.Errorf("%s: %s %v", user, out, err)
				}
			}()
		}
	}
	wg.Wait()
	if n := up.UserConnections(); n != 2 {
		t.Fatalf("%d user connections, want 2", n)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if tools, _ := up.Tools(ctx); len(tools) == 1 && tools[0].Name == "fake:whoami" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a user's connection did not list the tools")
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, s := range fake.Seen() {
		if s.Account == "" && s.Credential != "Bearer " {
			t.Fatalf("a request went out with a bad token: %+v", s)
		}
		if s.Account != "" && s.Credential != "Bearer "+tokens[map[string]string{"gh-alice": "alice", "gh-bob": "bob"}[s.Account]] {
			t.Fatalf("%s's connection carried %q", s.Account, s.Credential)
		}
	}
	// No caller: the credential hook's error, untouched.
	if _, err := up.Call(ctx, "fake:whoami", nil); !errors.Is(err, required) {
		t.Fatalf("anonymous: %v", err)
	}
	// Alice disconnects: her open connection's next request is refused
	// with the hook's error; bob is unaffected.
	mu.Lock()
	disconnected["alice"] = true
	mu.Unlock()
	_, err = up.Call(context.WithValue(ctx, callerKey{}, "alice"), "fake:whoami", nil)
	var me *Error
	if !errors.As(err, &me) || me.Code != "CREDENTIAL_REQUIRED" {
		t.Fatalf("alice after disconnect: %v", err)
	}
	if out, err := up.Call(context.WithValue(ctx, callerKey{}, "bob"), "fake:whoami", nil); err != nil {
		t.Fatalf("bob after alice's disconnect: %s %v", out, err)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestUpstreamUserListingRefusedCloses: a user's connection whose tool
// listing is refused with the credential's error (the upstream refused the
// token and the user must connect again) is closed, so that the user's next
// connection lists the tools; before, it stayed open and the next one was
// never made.
func TestUpstreamUserListingRefusedCloses(t *testing.T) {
	fake := credentialtest.New()
	defer fake.Close()
	token := fake.IssueToken("gh-alice")
	required := &Error{Code: "CREDENTIAL_REQUIRED", Message: "connect at https://gw/connections/fake"}
	var refuse atomic.Bool
	refuse.Store(true)
	authorize := func(r *http.Request) error {
		r.Header.Set("Authorization", "Bearer "+token)
		return nil
	}
	up, err := NewUpstream(UpstreamConfig{Name: "fake", URL: fake.URL + "/mcp",
		HTTPClient: &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if refuse.Load() && r.Body != nil && r.Header.Get("Authorization") != "" {
				b, _ := io.ReadAll(r.Body)
				r.Body = io.NopCloser(bytes.NewReader(b))
				if bytes.Contains(b, []byte(`"tools/list"`)) {
					return nil, required
				}
			}
			return http.DefaultTransport.RoundTrip(r)
		})},
		Credential: func(context.Context) (string, func(*http.Request) error, error) { return "alice", authorize, nil }}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := up.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	up.Prime("alice", authorize)
	for up.UserConnections() != 0 || len(fake.Seen()) == 0 {
		if ctx.Err() != nil {
			t.Fatalf("the refused connection stays open (%d)", up.UserConnections())
		}
		time.Sleep(20 * time.Millisecond)
	}
	refuse.Store(false)
	up.Prime("alice", authorize)
	for {
		if tools, _ := up.Tools(ctx); len(tools) == 1 {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the user's next connection did not list the tools")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
