package guard

import (
	"context"
	"hash/maphash"
	"sync"
	"time"
)

const memoryShards = 64

// MemoryStorage keeps state in process memory: the default backend, exact
// within one process and lost on restart. Idle keys are swept once a minute.
type MemoryStorage struct {
	seed   maphash.Seed
	shards [memoryShards]memoryShard
	now    func() time.Time
	stop   chan struct{}
	once   sync.Once
}

type memoryShard struct {
	mu      sync.Mutex
	windows map[string]*memoryWindow    // pointers: a check updates its window in place (one lookup)
	sems    map[string]map[string]int64 // ticket -> expiresAtMs
	waiters map[string]map[chan struct{}]struct{}
}

type memoryWindow struct {
	start, windowMs, prev, cur int64
}

// MemoryStorageOptions configures NewMemoryStorage; nil means defaults.
type MemoryStorageOptions struct {
	// Now is the clock of the idle-key sweeper. Default time.Now.
	Now func() time.Time
	// SweepInterval is how often idle keys are removed. Default 1 minute;
	// negative disables sweeping.
	SweepInterval time.Duration
}

// NewMemoryStorage returns an empty in-memory storage.
func NewMemoryStorage(opts *MemoryStorageOptions) *MemoryStorage {
	s := &MemoryStorage{seed: maphash.MakeSeed(), now: time.Now, stop: make(chan struct{})}
	interval := time.Minute
	if opts != nil {
		if opts.Now != nil {
			s.now = opts.Now
		}
		if opts.SweepInterval != 0 {
			interval = opts.SweepInterval
		}
	}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.windows = make(map[string]*memoryWindow)
		sh.sems = make(map[string]map[string]int64)
		sh.waiters = make(map[string]map[chan struct{}]struct{})
	}
	if interval > 0 {
		go s.sweepLoop(interval)
	}
	return s
}

func (s *MemoryStorage) shard(key string) *memoryShard {
	return &s.shards[maphash.String(s.seed, key)%memoryShards]
}

// SlidingWindow implements Storage.
func (s *MemoryStorage) SlidingWindow(_ context.Context, key string, windowStartMs, windowMs, nowMs, maxRequests int64) (WindowState, error) {
	sh := s.shard(key)
	sh.mu.Lock()
	w := sh.windows[key]
	switch {
	case w == nil:
		w = &memoryWindow{start: windowStartMs}
		sh.windows[key] = w
	case w.start == windowStartMs:
	case w.start == windowStartMs-windowMs:
		*w = memoryWindow{start: windowStartMs, prev: w.cur}
	case w.start > windowStartMs: // the clock went back: keep the newer window
	default:
		*w = memoryWindow{start: windowStartMs}
	}
	w.windowMs = windowMs
	st := WindowState{WindowStartMs: w.start, Previous: w.prev}
	if estimate(w.prev, w.cur, w.start, windowMs, nowMs) < float64(maxRequests) {
		w.cur++
		st.Allowed = true
	}
	st.Current = w.cur
	sh.mu.Unlock()
	return st, nil
}

// ResetWindow implements Storage.
func (s *MemoryStorage) ResetWindow(_ context.Context, key string) error {
	sh := s.shard(key)
	sh.mu.Lock()
	delete(sh.windows, key)
	sh.mu.Unlock()
	return nil
}

// AcquireSlot implements Storage.
func (s *MemoryStorage) AcquireSlot(_ context.Context, key, ticket string, maxConcurrent, nowMs, expiresAtMs int64) (bool, error) {
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	tickets := sh.sems[key]
	if int64(len(tickets)) >= maxConcurrent {
		// Full: drop expired tickets (only now, so the common case is O(1)).
		for t, exp := range tickets {
			if exp <= nowMs {
				delete(tickets, t)
			}
		}
		if int64(len(tickets)) >= maxConcurrent {
			return false, nil
		}
	}
	if tickets == nil {
		tickets = make(map[string]int64)
		sh.sems[key] = tickets
	}
	tickets[ticket] = expiresAtMs
	return true, nil
}

// ReleaseSlot implements Storage.
func (s *MemoryStorage) ReleaseSlot(_ context.Context, key, ticket string) error {
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if tickets, ok := sh.sems[key]; ok {
		n := len(tickets)
		if delete(tickets, ticket); len(tickets) < n { // it was held
			sh.wakeLocked(key)
		}
	}
	return nil
}

// ActiveSlots implements Storage.
func (s *MemoryStorage) ActiveSlots(_ context.Context, key string, nowMs int64) (int64, error) {
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	var n int64
	for _, exp := range sh.sems[key] {
		if exp > nowMs {
			n++
		}
	}
	return n, nil
}

// ResetSlots implements Storage.
func (s *MemoryStorage) ResetSlots(_ context.Context, key string) error {
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	delete(sh.sems, key)
	sh.wakeLocked(key)
	return nil
}

// WatchReleases implements ReleaseNotifier.
func (s *MemoryStorage) WatchReleases(key string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	sh := s.shard(key)
	sh.mu.Lock()
	set := sh.waiters[key]
	if set == nil {
		set = make(map[chan struct{}]struct{})
		sh.waiters[key] = set
	}
	set[ch] = struct{}{}
	sh.mu.Unlock()
	return ch, func() {
		sh.mu.Lock()
		delete(set, ch)
		if len(set) == 0 && sh.waiters[key] != nil && len(sh.waiters[key]) == 0 {
			delete(sh.waiters, key)
		}
		sh.mu.Unlock()
	}
}

func (sh *memoryShard) wakeLocked(key string) {
	if len(sh.waiters) == 0 { // the common case: nobody queued in this shard, no lookup
		return
	}
	for ch := range sh.waiters[key] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// Close stops the sweeper.
func (s *MemoryStorage) Close() error {
	s.once.Do(func() { close(s.stop) })
	return nil
}

func (s *MemoryStorage) sweepLoop(interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.Sweep()
		}
	}
}

// Sweep removes windows idle for two windows and semaphores without live
// tickets. It runs on its own once a minute; tests call it directly.
func (s *MemoryStorage) Sweep() {
	nowMs := s.now().UnixMilli()
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, w := range sh.windows {
			if w.start+2*w.windowMs <= nowMs {
				delete(sh.windows, k)
			}
		}
		for k, tickets := range sh.sems {
			for t, exp := range tickets {
				if exp <= nowMs {
					delete(tickets, t)
				}
			}
			if len(tickets) == 0 {
				delete(sh.sems, k)
			}
		}
		sh.mu.Unlock()
	}
}

// Len reports how many rate-limit keys and semaphore keys are stored.
func (s *MemoryStorage) Len() (windows, semaphores int) {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		windows += len(sh.windows)
		semaphores += len(sh.sems)
		sh.mu.Unlock()
	}
	return windows, semaphores
}

var (
	_ Storage         = (*MemoryStorage)(nil)
	_ ReleaseNotifier = (*MemoryStorage)(nil)
)
