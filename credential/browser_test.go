package credential

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/codemode-gateway/caddy-codemode/internal/browsertest"
)

// TestBrowserConnections drives the connections page in headless Chromium:
// sign in, connect by OAuth through the upstream's authorization page
// (the page's Content-Security-Policy must let the form's redirect
// through), save an API key, disconnect.
func TestBrowserConnections(t *testing.T) {
	ctx := browsertest.Start(t, 90*time.Second)

	h := newHarness(t, nil, nil, nil)
	h.fake.AddAPIKey("browser-key-42", "acct-b")
	var notice, status, subject string
	err := chromedp.Run(ctx,
		chromedp.Navigate(h.fake.URL+"/login?account=gh-alice"),
		chromedp.WaitVisible(`#signed-in`, chromedp.ByID),
		chromedp.Navigate(h.gw.URL+"/test-login?user=alice"),
		// The connect URL an agent shows: sign-in first, then the page
		// with the service in front.
		chromedp.Navigate(h.gw.URL+"/connections/forge"),
		chromedp.WaitVisible(`tr.focus#svc-forge button[name=connect]`, chromedp.ByQuery),
		chromedp.Text(`#subject`, &subject, chromedp.ByID),
		chromedp.Click(`#svc-forge button[name=connect]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#notice`, chromedp.ByID),
		chromedp.Text(`#notice`, &notice, chromedp.ByID),
		chromedp.Text(`#svc-forge .status`, &status, chromedp.ByQuery),
	)
	if err != nil {
		t.Fatal(err)
	}
	if subject != "alice" || notice != "Fake Forge is connected." || status != "connected" {
		t.Fatalf("after connect: subject %q, notice %q, status %q", subject, notice, status)
	}
	if _, got, err := h.call(t, as("alice"), "forge", "/api/whoami"); err != nil || got != "gh-alice" {
		t.Fatalf("call after the browser connected: %q %v", got, err)
	}

	err = chromedp.Run(ctx,
		chromedp.SendKeys(`#svc-keyed input[name=api_key]`, "browser-key-42", chromedp.ByQuery),
		chromedp.Click(`#svc-keyed button[name=save]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#svc-keyed button[name=disconnect]`, chromedp.ByQuery),
		chromedp.Text(`#notice`, &notice, chromedp.ByID),
	)
	if err != nil {
		t.Fatal(err)
	}
	if notice != "keyed is connected." {
		t.Fatalf("after saving a key: %q", notice)
	}
	if _, got, err := h.call(t, as("alice"), "keyed", "/api/key/whoami"); err != nil || got != "acct-b" {
		t.Fatalf("call with the saved key: %q %v", got, err)
	}

	var html string
	err = chromedp.Run(ctx,
		chromedp.Click(`#svc-forge button[name=disconnect]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#svc-forge button[name=connect]`, chromedp.ByQuery),
		chromedp.Text(`#notice`, &notice, chromedp.ByID),
		chromedp.OuterHTML(`html`, &html, chromedp.ByQuery),
	)
	if err != nil {
		t.Fatal(err)
	}
	if notice != "Fake Forge is disconnected." {
		t.Fatalf("after disconnect: %q", notice)
	}
	if _, _, err := h.call(t, as("alice"), "forge", "/api/whoami"); ErrorCode(err) != CodeCredentialRequired {
		t.Fatalf("call after disconnect: %v", err)
	}
	for _, s := range append(h.fake.Tokens(), "browser-key-42") {
		if strings.Contains(html, s) {
			t.Fatal("the page shows a credential")
		}
	}
	h.noSecretInLogs(t, "browser-key-42")
}
