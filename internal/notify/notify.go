// Package notify keeps the change listeners of a long-lived object (a tool
// registry, a catalog, an upstream MCP server). Every registration returns
// its removal, so that an index built for one config, which stops listening
// when that config goes, leaves nothing behind on objects that outlive it.
package notify

import (
	"slices"
	"sync"
)

// Set is a set of listeners; the zero value is empty and ready to use.
type Set struct {
	mu   sync.Mutex
	next uint64
	fns  map[uint64]func()
}

// Add registers fn and returns the function that removes it (idempotent).
func (s *Set) Add(fn func()) (remove func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fns == nil {
		s.fns = make(map[uint64]func())
	}
	id := s.next
	s.next++
	s.fns[id] = fn
	return func() {
		s.mu.Lock()
		delete(s.fns, id)
		s.mu.Unlock()
	}
}

// Notify calls every listener registered at the time of the call, in
// registration order, without holding the set's lock.
func (s *Set) Notify() {
	s.mu.Lock()
	ids := make([]uint64, 0, len(s.fns))
	for id := range s.fns {
		ids = append(ids, id)
	}
	fns := make([]func(), 0, len(ids))
	slices.Sort(ids)
	for _, id := range ids {
		fns = append(fns, s.fns[id])
	}
	s.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
}

// Len is the number of registered listeners (leak checks use it).
func (s *Set) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.fns)
}
