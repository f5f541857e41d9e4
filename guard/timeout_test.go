package guard

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestWithTimeout(t *testing.T) {
	ctx := context.Background()
	v, err := WithTimeout(ctx, 10_000, "fast", func(context.Context) (int, error) { return 42, nil })
	if v != 42 || err != nil {
		t.Fatalf("fast: %v %v", v, err)
	}
	boom := errors.New("boom")
	if _, err := WithTimeout(ctx, 10_000, "fails", func(context.Context) (int, error) { return 0, boom }); !errors.Is(err, boom) {
		t.Fatalf("error not passed through: %v", err)
	}
	// The deadline passes while fn waits on its context.
	_, err = WithTimeout(ctx, 1, "slow", func(ctx context.Context) (string, error) {
		<-ctx.Done()
		return "", ctx.Err()
	})
	var ge *GuardError
	if !errors.As(err, &ge) || ge.Code != CodeExecutionTimeout || ge.StatusCode != 408 || ge.EntityName != "slow" || ge.TimeoutMs != 1 {
		t.Fatalf("slow: %v", err)
	}
	// No timeout when timeoutMs is 0.
	if v, err := WithTimeout(ctx, 0, "none", func(ctx context.Context) (bool, error) { _, ok := ctx.Deadline(); return ok, nil }); v || err != nil {
		t.Fatalf("timeout 0 set a deadline: %v %v", v, err)
	}
	// A cancelled parent is not a timeout.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := WithTimeout(cctx, 10_000, "cancelled", func(ctx context.Context) (int, error) { <-ctx.Done(); return 0, ctx.Err() }); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
	// A panic becomes an error.
	if _, err := WithTimeout(ctx, 10_000, "panics", func(context.Context) (int, error) { panic("oops") }); err == nil || !strings.Contains(err.Error(), "panicked: oops") {
		t.Fatalf("panic: %v", err)
	}
}
