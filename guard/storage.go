package guard

import "context"

// Storage is the state backend of the limiters. Each method is one atomic
// operation on the backend (a Lua script in Redis, a critical section in
// memory), so that limits are exact however many managers share it. Keys are
// given without the manager's key prefix; a shared backend adds it.
//
// Times are Unix milliseconds from the caller's clock, so that tests can
// inject a clock; gateways sharing a Redis need synchronised clocks (NTP).
type Storage interface {
	// SlidingWindow evaluates the two-window estimate of key for the window
	// starting at windowStartMs and, when it is below maxRequests,
	// increments the current window's counter.
	SlidingWindow(ctx context.Context, key string, windowStartMs, windowMs, nowMs, maxRequests int64) (WindowState, error)
	// ResetWindow clears the counters of key.
	ResetWindow(ctx context.Context, key string) error
	// AcquireSlot drops the tickets of key that expired at nowMs and, when
	// fewer than maxConcurrent remain, adds ticket expiring at expiresAtMs.
	AcquireSlot(ctx context.Context, key, ticket string, maxConcurrent, nowMs, expiresAtMs int64) (bool, error)
	// ReleaseSlot removes ticket from key and wakes waiters of key.
	ReleaseSlot(ctx context.Context, key, ticket string) error
	// ActiveSlots counts the tickets of key that have not expired at nowMs.
	ActiveSlots(ctx context.Context, key string, nowMs int64) (int64, error)
	// ResetSlots removes every ticket of key and wakes its waiters.
	ResetSlots(ctx context.Context, key string) error
	// Close releases the backend's resources.
	Close() error
}

// WindowState is the outcome of Storage.SlidingWindow.
type WindowState struct {
	// WindowStartMs is the start of the current window (normally the one
	// asked for; a peer with a clock ahead may have started a later one).
	WindowStartMs int64
	// Previous is the count of the previous window.
	Previous int64
	// Current is the count of the current window, including this request
	// when it was allowed.
	Current int64
	// Allowed reports whether the request was counted.
	Allowed bool
}

// ReleaseNotifier is implemented by storages that can wake the waiters of a
// semaphore when one of its slots is released (Redis pub/sub, in-process
// channels). Without it waiters poll.
type ReleaseNotifier interface {
	// WatchReleases returns a channel that receives after a release of key
	// (wake-ups may be spurious or coalesced) and a function that stops
	// watching.
	WatchReleases(key string) (<-chan struct{}, func())
}
