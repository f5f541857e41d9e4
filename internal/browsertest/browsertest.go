// Package browsertest starts the headless Chromium that the browser tests
// (the authorization server's login and consent pages, the connections
// page) drive with chromedp.
package browsertest

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// ChromiumPath finds a headless-capable Chromium. Without one the test is
// skipped, except in CI, which installs Debian's chromium.
func ChromiumPath(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium is not on PATH (CI must install the chromium package)")
	}
	t.Skip("chromium is not on PATH; install it to run the browser tests")
	return ""
}

// Start starts a headless Chromium for one test and returns its context,
// which ends after timeout or with the test.
func Start(t testing.TB, timeout time.Duration) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(ChromiumPath(t)),
		chromedp.NoSandbox,                               // CI runs as root in a container
		chromedp.Flag("ignore-certificate-errors", true), // httptest's self-signed certificates
		chromedp.Flag("disable-dev-shm-usage", true),
	)
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelB := chromedp.NewContext(actx)
	ctx, cancelT := context.WithTimeout(ctx, timeout)
	t.Cleanup(func() { cancelT(); cancelB(); cancelA() })
	if err := chromedp.Run(ctx); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	return ctx
}
