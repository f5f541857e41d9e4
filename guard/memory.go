package guard

import (
	"context"
	"hash/maphash"
	"sync"
	"sync/atomic"
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
	windows map[string]*memoryWindow // pointers: a check updates its window in place (one lookup)
	sems    map[string]*memorySem
	waiters map[string]map[chan struct{}]struct{}
}

type memoryWindow struct {
	start, windowMs, prev, cur int64
	gone                       bool // removed from its shard (reset, swept): a memoryKey looks its key up again
}

// memorySem is one semaphore key's tickets, each with its expiry (Unix ms):
// the UUID tickets of AcquireSlot and the numbered slots of
// acquireNumbered (the prepared semaphores' path: no ticket text to make
// and hash). Both count against the same limit.
type memorySem struct {
	sh      *memoryShard
	key     string
	tickets map[string]int64 // UUID -> expiresAtMs
	// The numbered slots, held or free: a slot's number is its index
	// and its generation, so that taking and returning one is an index
	// into an array (no map to hash into and delete from, as a
	// map[number]expiry was) and a number from before the slot was
	// swept or taken again returns nothing.
	numbered []numberedSlot
	free     []int32 // indexes of the free entries of numbered
	nHeld    int     // numbered slots held
	gone     bool    // removed from its shard (reset, swept), as memoryWindow.gone
}

// numberedSlot is an entry of memorySem.numbered.
type numberedSlot struct {
	expiresAtMs int64
	gen         uint32 // incremented each time the entry is taken
	held        bool
}

func (m *memorySem) held() int { return len(m.tickets) + m.nHeld }

// slotNumber is the number of entry i of memorySem.numbered in generation
// gen.
func slotNumber(i int, gen uint32) uint64 { return uint64(i)<<32 | uint64(gen) }

// releaseEntry returns entry i, which is held; the caller holds the
// shard's lock.
func (m *memorySem) releaseEntry(i int) {
	m.numbered[i].held = false
	m.free = append(m.free, int32(i))
	m.nHeld--
}

// room reports whether m (nil: no tickets yet) has a free slot of
// maxConcurrent at nowMs, dropping expired tickets when it is full (only
// then, so that the common case is O(1)).
func (m *memorySem) room(maxConcurrent, nowMs int64) bool {
	if m == nil {
		return maxConcurrent > 0
	}
	if int64(m.held()) >= maxConcurrent {
		m.dropExpired(nowMs)
	}
	return int64(m.held()) < maxConcurrent
}

func (m *memorySem) dropExpired(nowMs int64) {
	for t, exp := range m.tickets {
		if exp <= nowMs {
			delete(m.tickets, t)
		}
	}
	for i := range m.numbered {
		if e := &m.numbered[i]; e.held && e.expiresAtMs <= nowMs {
			m.releaseEntry(i)
		}
	}
}

// semLocked is key's semaphore, created when missing.
func (sh *memoryShard) semLocked(key string) *memorySem {
	m := sh.sems[key]
	if m == nil {
		m = &memorySem{sh: sh, key: key}
		sh.sems[key] = m
	}
	return m
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
		sh.sems = make(map[string]*memorySem)
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
	if w == nil {
		w = &memoryWindow{start: windowStartMs}
		sh.windows[key] = w
	}
	st := w.slide(windowStartMs, windowMs, nowMs, maxRequests)
	sh.mu.Unlock()
	return st, nil
}

// slidingWindowBytes is SlidingWindow of the key written in key, which it
// does not keep: a caller builds the key of a partition in a buffer of its
// own, and only a key seen for the first time is copied (the map lookup of
// string(key) does not allocate).
func (s *MemoryStorage) slidingWindowBytes(key []byte, windowStartMs, windowMs, nowMs, maxRequests int64) WindowState {
	sh := &s.shards[maphash.Bytes(s.seed, key)%memoryShards] // the shard of string(key)
	sh.mu.Lock()
	w := sh.windows[string(key)]
	if w == nil {
		w = &memoryWindow{start: windowStartMs}
		sh.windows[string(key)] = w
	}
	st := w.slide(windowStartMs, windowMs, nowMs, maxRequests)
	sh.mu.Unlock()
	return st
}

// slide moves w to the window starting at windowStartMs and counts a
// request when the estimate is below maxRequests. The caller holds the
// shard's lock.
func (w *memoryWindow) slide(windowStartMs, windowMs, nowMs, maxRequests int64) WindowState {
	switch {
	case w.start == windowStartMs:
	case w.start == windowStartMs-windowMs:
		w.start, w.prev, w.cur = windowStartMs, w.cur, 0
	case w.start > windowStartMs: // the clock went back: keep the newer window
	default:
		w.start, w.prev, w.cur = windowStartMs, 0, 0
	}
	w.windowMs = windowMs
	st := WindowState{WindowStartMs: w.start, Previous: w.prev}
	if estimate(w.prev, w.cur, w.start, windowMs, nowMs) < float64(maxRequests) {
		w.cur++
		st.Allowed = true
	}
	st.Current = w.cur
	return st
}

// ResetWindow implements Storage.
func (s *MemoryStorage) ResetWindow(_ context.Context, key string) error {
	sh := s.shard(key)
	sh.mu.Lock()
	if w := sh.windows[key]; w != nil {
		w.gone = true
		delete(sh.windows, key)
	}
	sh.mu.Unlock()
	return nil
}

// AcquireSlot implements Storage.
func (s *MemoryStorage) AcquireSlot(_ context.Context, key, ticket string, maxConcurrent, nowMs, expiresAtMs int64) (bool, error) {
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	m := sh.sems[key]
	if !m.room(maxConcurrent, nowMs) {
		return false, nil
	}
	m = sh.semLocked(key)
	if m.tickets == nil {
		m.tickets = make(map[string]int64)
	}
	m.tickets[ticket] = expiresAtMs
	return true, nil
}

// acquireNumbered is AcquireSlot of the key written in key (not kept, as
// in slidingWindowBytes) with a numbered slot instead of a UUID ticket: it
// returns the key's semaphore and the slot's number, for releaseNumbered,
// or nil when no slot is free.
func (s *MemoryStorage) acquireNumbered(key []byte, maxConcurrent, nowMs, expiresAtMs int64) (*memorySem, uint64) {
	sh := &s.shards[maphash.Bytes(s.seed, key)%memoryShards]
	sh.mu.Lock()
	m := sh.sems[string(key)]
	if m == nil && maxConcurrent > 0 {
		m = sh.semLocked(string(key))
	}
	n, ok := m.takeNumbered(maxConcurrent, nowMs, expiresAtMs)
	sh.mu.Unlock()
	if !ok {
		return nil, 0
	}
	return m, n
}

// takeNumbered takes a numbered slot of m (nil: none free) when one of
// maxConcurrent is free at nowMs. The caller holds the shard's lock.
func (m *memorySem) takeNumbered(maxConcurrent, nowMs, expiresAtMs int64) (uint64, bool) {
	if m == nil || !m.room(maxConcurrent, nowMs) {
		return 0, false
	}
	var i int
	if k := len(m.free); k > 0 {
		i, m.free = int(m.free[k-1]), m.free[:k-1]
	} else {
		i = len(m.numbered)
		m.numbered = append(m.numbered, numberedSlot{})
	}
	e := &m.numbered[i]
	e.expiresAtMs, e.held = expiresAtMs, true
	e.gen++
	m.nHeld++
	return slotNumber(i, e.gen), true
}

// memoryKey is a key of the memory storage that a prepared limit uses for
// every request (a global partition): its shard is found once, and its
// window or semaphore is kept between requests (until it is reset or
// swept), so that a request neither hashes the key nor looks it up.
type memoryKey struct {
	key string
	sh  *memoryShard
	win atomic.Pointer[memoryWindow]
	sem atomic.Pointer[memorySem]
}

func (s *MemoryStorage) fixedKey(key string) *memoryKey {
	return &memoryKey{key: key, sh: s.shard(key)}
}

// slidingWindow is MemoryStorage.SlidingWindow of k.
func (k *memoryKey) slidingWindow(windowStartMs, windowMs, nowMs, maxRequests int64) WindowState {
	sh := k.sh
	sh.mu.Lock()
	w := k.win.Load()
	if w == nil || w.gone {
		if w = sh.windows[k.key]; w == nil {
			w = &memoryWindow{start: windowStartMs}
			sh.windows[k.key] = w
		}
		k.win.Store(w)
	}
	st := w.slide(windowStartMs, windowMs, nowMs, maxRequests)
	sh.mu.Unlock()
	return st
}

// acquireNumbered is MemoryStorage.acquireNumbered of k.
func (k *memoryKey) acquireNumbered(maxConcurrent, nowMs, expiresAtMs int64) (*memorySem, uint64) {
	sh := k.sh
	sh.mu.Lock()
	m := k.sem.Load()
	if m == nil || m.gone {
		if m = sh.sems[k.key]; m == nil && maxConcurrent > 0 {
			m = sh.semLocked(k.key)
		}
		if m != nil {
			k.sem.Store(m)
		}
	}
	n, ok := m.takeNumbered(maxConcurrent, nowMs, expiresAtMs)
	sh.mu.Unlock()
	if !ok {
		return nil, 0
	}
	return m, n
}

// ReleaseSlot implements Storage.
func (s *MemoryStorage) ReleaseSlot(_ context.Context, key, ticket string) error {
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if m := sh.sems[key]; m != nil {
		n := len(m.tickets)
		if delete(m.tickets, ticket); len(m.tickets) < n { // it was held
			sh.wakeLocked(key)
		}
	}
	return nil
}

// releaseNumbered returns slot n of m (acquireNumbered). When m is no
// longer its key's semaphore (reset, or swept after the slot expired) the
// slot is gone already and nothing happens, as ReleaseSlot of a ticket
// that is not held.
func (m *memorySem) releaseNumbered(n uint64) {
	sh := m.sh
	sh.mu.Lock()
	if i := int(n >> 32); i < len(m.numbered) && m.numbered[i].held && slotNumber(i, m.numbered[i].gen) == n {
		m.releaseEntry(i)
		sh.wakeLocked(m.key)
	}
	sh.mu.Unlock()
}

// ActiveSlots implements Storage.
func (s *MemoryStorage) ActiveSlots(_ context.Context, key string, nowMs int64) (int64, error) {
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	var n int64
	if m := sh.sems[key]; m != nil {
		for _, exp := range m.tickets {
			if exp > nowMs {
				n++
			}
		}
		for _, e := range m.numbered {
			if e.held && e.expiresAtMs > nowMs {
				n++
			}
		}
	}
	return n, nil
}

// ResetSlots implements Storage.
func (s *MemoryStorage) ResetSlots(_ context.Context, key string) error {
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if m := sh.sems[key]; m != nil {
		// Its numbered slots' releases find nothing to return.
		m.tickets, m.numbered, m.free, m.nHeld, m.gone = nil, nil, nil, 0, true
		delete(sh.sems, key)
	}
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
				w.gone = true
				delete(sh.windows, k)
			}
		}
		for k, m := range sh.sems {
			m.dropExpired(nowMs)
			if m.held() == 0 {
				m.gone = true
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
