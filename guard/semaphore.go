package guard

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// Polling backoff of queued waiters: 100 ms doubling to 1000 ms. Release
// notifications wake waiters sooner; polling also notices expired tickets.
const (
	pollMin = 100 * time.Millisecond
	pollMax = 1000 * time.Millisecond
)

// SemaphoreTicket is a held slot of a semaphore.
type SemaphoreTicket struct {
	// Ticket is the slot's UUID. A slot of the memory storage taken
	// through a PreparedSemaphore has none (empty): that storage numbers
	// such slots instead, so that taking one makes no text.
	Ticket string
	// Key is the semaphore's storage key.
	Key string

	released atomic.Bool
	slot     uint64       // the number of a numbered slot (mem set)
	mem      *memorySem   // the semaphore of a numbered slot of the memory storage
	owner    *ticketOwner // nil for a ticket that holds nothing (fail open)
}

// ticketOwner is what releasing a ticket needs besides the ticket: its
// semaphore and, for a ticket taken through a manager, the manager (which
// logs release failures) and the in-use gauge counting the slot (when
// metrics are on). A prepared semaphore has one for all its tickets.
type ticketOwner struct {
	sem     *DistributedSemaphore
	manager *GuardManager
	inUse   prometheus.Gauge
}

// Release returns the slot. It is safe to call more than once and on a nil
// ticket; only the first call does anything.
func (t *SemaphoreTicket) Release(ctx context.Context) error {
	if t == nil || t.owner == nil || !t.released.CompareAndSwap(false, true) {
		return nil
	}
	o := t.owner
	if o.inUse != nil {
		o.inUse.Add(-1)
	}
	if t.mem != nil {
		t.mem.releaseNumbered(t.slot)
		return nil
	}
	err := o.sem.store.ReleaseSlot(ctx, t.Key, t.Ticket)
	if err != nil {
		if o.manager != nil {
			o.manager.logger.Warn("guard storage: releasing a semaphore ticket failed; the slot returns when the ticket expires",
				zap.String("key", t.Key), zap.Error(err))
		}
		return fmt.Errorf("releasing semaphore ticket: %w", err)
	}
	return nil
}

// DistributedSemaphore bounds concurrent holders per key. Tickets expire
// after a time to live (default 300 s) so that a crashed holder's slot comes
// back; a holder running longer than that loses its slot.
type DistributedSemaphore struct {
	store Storage
	now   func() time.Time
	ttlMs int64
	// pollMin and pollMax bound the polling backoff of queued waiters
	// (pollMin and pollMax above; tests lengthen them to show that the
	// release notification alone wakes a waiter).
	pollMin, pollMax time.Duration
	owner            ticketOwner // of the tickets taken with Acquire
}

// NewDistributedSemaphore returns a semaphore over store.
func NewDistributedSemaphore(store Storage, opts *LimiterOptions) *DistributedSemaphore {
	s := &DistributedSemaphore{store: store, now: time.Now, ttlMs: DefaultTicketTTLSeconds * 1000, pollMin: pollMin, pollMax: pollMax}
	s.owner.sem = s
	if opts != nil {
		if opts.Now != nil {
			s.now = opts.Now
		}
		if opts.TicketTTLSeconds > 0 {
			s.ttlMs = int64(opts.TicketTTLSeconds) * 1000
		}
	}
	return s
}

// Acquire takes a slot of key. When none is free it returns (nil, nil) if
// queueTimeoutMs is 0 or less, else it waits up to queueTimeoutMs and then
// fails with a QUEUE_TIMEOUT *GuardError. A cancelled ctx ends the wait with
// ctx's error.
func (s *DistributedSemaphore) Acquire(ctx context.Context, key string, maxConcurrent, queueTimeoutMs int64, entityName string) (*SemaphoreTicket, error) {
	t := new(SemaphoreTicket)
	if ok, err := s.acquire(ctx, key, maxConcurrent, queueTimeoutMs, entityName, s.now().UnixMilli(), 0, t); !ok {
		return nil, err
	}
	return t, nil
}

// acquire is Acquire into t, whose first try is at nowMs: true when t
// holds a slot. The ticket expires ttlMs after it is taken (0: the
// semaphore's time to live) unless released.
func (s *DistributedSemaphore) acquire(ctx context.Context, key string, maxConcurrent, queueTimeoutMs int64, entityName string, nowMs, ttlMs int64, t *SemaphoreTicket) (bool, error) {
	ticket := newUUID()
	ttlMs = s.ttl(ttlMs)
	ok, err := s.tryAt(ctx, key, ticket, maxConcurrent, nowMs, ttlMs)
	if err != nil || ok {
		return s.hold(t, key, ticket, ok, err)
	}
	if queueTimeoutMs <= 0 {
		return false, nil
	}
	return s.queue(ctx, key, ticket, maxConcurrent, queueTimeoutMs, entityName, ttlMs, t)
}

// ttl is the time to live of a ticket asked to live ttlMs: at most the
// semaphore's, which 0 or less means.
func (s *DistributedSemaphore) ttl(ttlMs int64) int64 {
	if ttlMs <= 0 || ttlMs > s.ttlMs {
		return s.ttlMs
	}
	return ttlMs
}

// queue waits up to queueTimeoutMs for a slot of key (acquire found none).
// Apart from acquire's first try so that the common case, a free slot,
// runs without the timers' and select's stack frame.
func (s *DistributedSemaphore) queue(ctx context.Context, key, ticket string, maxConcurrent, queueTimeoutMs int64, entityName string, ttlMs int64, t *SemaphoreTicket) (bool, error) {
	deadline := time.NewTimer(time.Duration(queueTimeoutMs) * time.Millisecond)
	defer deadline.Stop()
	var wake <-chan struct{}
	if n, isN := s.store.(ReleaseNotifier); isN {
		ch, stop := n.WatchReleases(key)
		defer stop()
		wake = ch
		// A release between the first try and the watch would be missed.
		if ok, err := s.try(ctx, key, ticket, maxConcurrent, ttlMs); err != nil || ok {
			return s.hold(t, key, ticket, ok, err)
		}
	}
	poll := s.pollMin
	pollTimer := time.NewTimer(poll)
	defer pollTimer.Stop()
	for {
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-deadline.C:
			// One last try: a slot may have been freed at the same moment.
			if ok, err := s.try(ctx, key, ticket, maxConcurrent, ttlMs); err != nil || ok {
				return s.hold(t, key, ticket, ok, err)
			}
			return false, NewQueueTimeoutError(entityName, queueTimeoutMs)
		case <-wake:
		case <-pollTimer.C:
			poll = min(poll*2, s.pollMax)
			pollTimer.Reset(poll)
		}
		if ok, err := s.try(ctx, key, ticket, maxConcurrent, ttlMs); err != nil || ok {
			return s.hold(t, key, ticket, ok, err)
		}
	}
}

func (s *DistributedSemaphore) try(ctx context.Context, key, ticket string, maxConcurrent, ttlMs int64) (bool, error) {
	return s.tryAt(ctx, key, ticket, maxConcurrent, s.now().UnixMilli(), ttlMs)
}

func (s *DistributedSemaphore) tryAt(ctx context.Context, key, ticket string, maxConcurrent, nowMs, ttlMs int64) (bool, error) {
	return s.store.AcquireSlot(ctx, key, ticket, maxConcurrent, nowMs, nowMs+ttlMs)
}

// hold makes t the ticket of a slot taken (ok) by the try that returned ok
// and err.
func (s *DistributedSemaphore) hold(t *SemaphoreTicket, key, ticket string, ok bool, err error) (bool, error) {
	if ok && err == nil {
		t.Ticket, t.Key, t.owner = ticket, key, &s.owner
		return true, nil
	}
	return false, err
}

// GetActiveCount returns the number of unexpired tickets of key.
func (s *DistributedSemaphore) GetActiveCount(ctx context.Context, key string) (int64, error) {
	return s.store.ActiveSlots(ctx, key, s.now().UnixMilli())
}

// ForceReset removes every ticket of key (their Release becomes a no-op).
func (s *DistributedSemaphore) ForceReset(ctx context.Context, key string) error {
	return s.store.ResetSlots(ctx, key)
}

// newUUID returns a random (version 4) UUID. Tickets only need to be
// unique, not secret, so the runtime's fast generator is used rather than
// crypto/rand (which showed up in profiles of the guarded route).
func newUUID() string {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], rand.Uint64())
	binary.LittleEndian.PutUint64(b[8:], rand.Uint64())
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	// The 32 hex digits in a straight loop, then placed around the dashes
	// of the 8-4-4-4-12 form (no per-digit branch for the dashes).
	const digits = "0123456789abcdef"
	var h [32]byte
	for i, c := range b {
		h[2*i], h[2*i+1] = digits[c>>4], digits[c&0x0f]
	}
	var s [36]byte
	copy(s[0:8], h[0:8])
	copy(s[9:13], h[8:12])
	copy(s[14:18], h[12:16])
	copy(s[19:23], h[16:20])
	copy(s[24:36], h[20:32])
	s[8], s[13], s[18], s[23] = '-', '-', '-', '-'
	return string(s[:])
}
