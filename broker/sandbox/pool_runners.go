package sandbox

import "sync"

// maxIdleRunners bounds the goroutines kept idle for the next tool call.
const maxIdleRunners = 16

// callRunners run the host side of a worker's tool calls and lookups, each
// on a goroutine of its own (a host may block; the worker's reader must
// not), reusing goroutines: one that finished a call waits for the next
// instead of ending, so that a call costs neither a goroutine's creation
// nor the growth of a fresh stack through the host's code. At most
// maxIdleRunners wait; close ends them.
type callRunners struct {
	mu     sync.Mutex
	idle   []chan func()
	closed bool
	live   int // runner goroutines, busy or idle
	alive  sync.WaitGroup
}

// run runs f on an idle runner or a new goroutine.
func (r *callRunners) run(f func()) {
	r.mu.Lock()
	if n := len(r.idle); n > 0 {
		ch := r.idle[n-1] // the last to finish: its stack is the warmest
		r.idle = r.idle[:n-1]
		r.mu.Unlock()
		ch <- f
		return
	}
	r.live++
	r.alive.Add(1)
	r.mu.Unlock()
	go r.serve(f)
}

func (r *callRunners) serve(f func()) {
	defer r.alive.Done()
	var ch chan func()
	for f != nil {
		f()
		r.mu.Lock()
		if r.closed || len(r.idle) >= maxIdleRunners {
			r.live--
			r.mu.Unlock()
			return
		}
		if ch == nil {
			ch = make(chan func(), 1)
		}
		r.idle = append(r.idle, ch)
		r.mu.Unlock()
		if f = <-ch; f == nil {
			r.mu.Lock()
			r.live--
			r.mu.Unlock()
		}
	}
}

// close ends the idle runners and waits until every runner has ended; no
// call may be running or started any more.
func (r *callRunners) close() {
	r.mu.Lock()
	r.closed = true
	idle := r.idle
	r.idle = nil
	r.mu.Unlock()
	for _, ch := range idle {
		ch <- nil
	}
	r.alive.Wait()
}
