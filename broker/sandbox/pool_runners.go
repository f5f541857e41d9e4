package sandbox

import "sync"

// maxIdleRunners bounds the goroutines kept idle for the next tool call.
const maxIdleRunners = 16

// runners run functions each on a goroutine of its own, reusing
// goroutines: one that finished its function waits for the next instead of
// ending, so that a function costs neither a goroutine's creation nor the
// growth of a fresh stack (goja's interpreter grows a new goroutine's stack
// through several copies). The pool runs the host side of a worker's tool
// calls and lookups on them (a host may block; the worker's reader must
// not); the in-process engine runs its scripts' VMs and the preparation of
// the next runtime. At most maxIdleRunners wait; stop and close end them.
type runners struct {
	mu     sync.Mutex
	idle   []chan func()
	closed bool
	live   int // runner goroutines, busy or idle
	alive  sync.WaitGroup
}

// run runs f on an idle runner or a new goroutine.
func (r *runners) run(f func()) {
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

func (r *runners) serve(f func()) {
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
func (r *runners) close() {
	r.stop()
	r.alive.Wait()
}

// stop ends the idle runners; a busy one ends when its function returns,
// without being waited for (the in-process engine's Close does not wait for
// a VM abandoned inside a built-in). Functions run after stop get a
// goroutine that ends with them.
func (r *runners) stop() {
	r.mu.Lock()
	r.closed = true
	idle := r.idle
	r.idle = nil
	r.mu.Unlock()
	for _, ch := range idle {
		ch <- nil
	}
}
