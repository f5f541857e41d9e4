package guard

import (
	"context"
	"math"
	"time"
)

// Unlimited is RateLimitResult.Remaining when no rate limit applies (the
// spec's Infinity).
const Unlimited int64 = math.MaxInt64

// RateLimitResult is the outcome of a rate-limit check.
type RateLimitResult struct {
	// Allowed reports whether the request may proceed.
	Allowed bool
	// Limit is the maxRequests that applied; 0 when no limit applied.
	Limit int64
	// Remaining is how many more requests the window allows now; Unlimited
	// when no limit applied.
	Remaining int64
	// ResetMs is the time until the current window ends, in milliseconds.
	ResetMs int64
	// RetryAfterMs is set only when denied: the time until a request would
	// be allowed again, in milliseconds.
	RetryAfterMs int64
}

// Err returns nil when r allows the request, else a RATE_LIMIT *GuardError
// for entityName carrying RetryAfterMs.
func (r RateLimitResult) Err(entityName string) error {
	if r.Allowed {
		return nil
	}
	return NewRateLimitError(entityName, r.Limit, r.RetryAfterMs)
}

// allowAll is the result when no limit applies.
var allowAll = RateLimitResult{Allowed: true, Remaining: Unlimited}

// SlidingWindowRateLimiter limits requests per key with two adjacent fixed
// windows: estimatedCount = previous*(1-elapsedRatio) + current. A request
// is allowed, and counted, while the estimate is below maxRequests. Storage
// per key is constant (one window start and two counters).
type SlidingWindowRateLimiter struct {
	store Storage
	now   func() time.Time
}

// LimiterOptions configures the limiter and the semaphore; nil means defaults.
type LimiterOptions struct {
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// TicketTTLSeconds is how long a semaphore ticket lives unless released.
	// Default 300.
	TicketTTLSeconds int
}

// NewSlidingWindowRateLimiter returns a limiter over store.
func NewSlidingWindowRateLimiter(store Storage, opts *LimiterOptions) *SlidingWindowRateLimiter {
	l := &SlidingWindowRateLimiter{store: store, now: time.Now}
	if opts != nil && opts.Now != nil {
		l.now = opts.Now
	}
	return l
}

// Check counts a request against key and reports whether it is allowed.
// windowMs 0 means the default of 60000.
func (l *SlidingWindowRateLimiter) Check(ctx context.Context, key string, maxRequests, windowMs int64) (RateLimitResult, error) {
	return l.CheckAt(ctx, key, maxRequests, windowMs, l.now().UnixMilli())
}

// CheckAt is Check at the time nowMs (Unix milliseconds) instead of the
// limiter's clock.
func (l *SlidingWindowRateLimiter) CheckAt(ctx context.Context, key string, maxRequests, windowMs, nowMs int64) (RateLimitResult, error) {
	if windowMs <= 0 {
		windowMs = DefaultWindowMs
	}
	start := nowMs - nowMs%windowMs
	st, err := l.store.SlidingWindow(ctx, key, start, windowMs, nowMs, maxRequests)
	if err != nil {
		return RateLimitResult{}, err
	}
	return windowResult(st, maxRequests, windowMs, nowMs), nil
}

// Reset clears the counters of key.
func (l *SlidingWindowRateLimiter) Reset(ctx context.Context, key string, windowMs int64) error {
	return l.store.ResetWindow(ctx, key)
}

// estimate is the spec's sliding-window formula.
func estimate(prev, cur, startMs, windowMs, nowMs int64) float64 {
	ratio := float64(nowMs-startMs) / float64(windowMs)
	if ratio < 0 {
		ratio = 0
	} else if ratio > 1 {
		ratio = 1
	}
	return float64(prev)*(1-ratio) + float64(cur)
}

func windowResult(st WindowState, maxRequests, windowMs, nowMs int64) RateLimitResult {
	end := st.WindowStartMs + windowMs
	r := RateLimitResult{Allowed: st.Allowed, Limit: maxRequests, ResetMs: max(end-nowMs, 0)}
	est := estimate(st.Previous, st.Current, st.WindowStartMs, windowMs, nowMs)
	if st.Allowed {
		r.Remaining = max(int64(math.Floor(float64(maxRequests)-est)), 0)
		return r
	}
	// Find when the estimate falls below maxRequests again.
	m, p, c, w := float64(maxRequests), float64(st.Previous), float64(st.Current), float64(windowMs)
	var at float64 // absolute time in ms
	if c < m && p > 0 {
		// Still this window: p*(1-r)+c < m  <=>  r > 1-(m-c)/p.
		at = float64(st.WindowStartMs) + w*(1-(m-c)/p)
	} else {
		// Next window, where c becomes the previous count: c*(1-r) < m.
		at = float64(end) + w*(1-m/c)
	}
	r.RetryAfterMs = max(int64(math.Floor(at))-nowMs+1, 1)
	return r
}
