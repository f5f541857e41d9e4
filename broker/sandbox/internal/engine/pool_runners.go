package engine

import (
	"sync"
	"sync/atomic"
	"time"
)

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

// inlineWatch takes the reading of a worker's frames away from a reader
// that stays in a tool call (see reading): every watchPeriod while some
// reader is in a call it looks at each reader, and one found in the same
// call as at the previous look is replaced by a new goroutine that reads
// on. So a slow host or a blocked write holds a worker's frames up for one
// to two periods (plus the timer's lateness), once: the call's tool is
// then known to be slow in that execution and its later calls go to the
// runners. It is armed only while a reader is in a call, once per period
// at most (a timer reset per call would wake the runtime's poller each
// time).
type inlineWatch struct {
	mu      sync.Mutex
	readers map[*reading]uint64 // the call each reader was in at the last look
	timer   *time.Timer
	armed   atomic.Bool
	idle    int // looks in a row that found no reader in a call
	// takeovers counts the readers replaced (tests).
	takeovers atomic.Int64
}

// watchPeriod is the interval of the inlineWatch's looks; tests change it.
var watchPeriod = time.Millisecond

const watchIdleLooks = 4

func (iw *inlineWatch) add(rd *reading) {
	iw.mu.Lock()
	defer iw.mu.Unlock()
	if iw.readers == nil {
		iw.readers = make(map[*reading]uint64)
		iw.timer = time.AfterFunc(time.Hour, iw.look)
		iw.timer.Stop()
	}
	iw.readers[rd] = 0
}

func (iw *inlineWatch) remove(rd *reading) {
	iw.mu.Lock()
	defer iw.mu.Unlock()
	delete(iw.readers, rd)
}

// arm makes sure a look is due: a reader just began a call.
func (iw *inlineWatch) arm() {
	if !iw.armed.Load() && iw.armed.CompareAndSwap(false, true) {
		iw.mu.Lock()
		iw.timer.Reset(watchPeriod)
		iw.mu.Unlock()
	}
}

// look replaces the readers in the same call as at the previous look, and
// looks again later while any reader is in a call.
func (iw *inlineWatch) look() {
	type stuckReader struct {
		rd   *reading
		call uint64
	}
	var stuck []stuckReader
	iw.mu.Lock()
	busy := false
	for rd, last := range iw.readers {
		n := rd.inCall.Load()
		if n != 0 {
			busy = true
			if n == last {
				stuck = append(stuck, stuckReader{rd, n})
			}
		}
		iw.readers[rd] = n
	}
	if busy {
		iw.idle = 0
	} else {
		iw.idle++
	}
	if iw.idle < watchIdleLooks {
		iw.timer.Reset(watchPeriod)
	} else {
		iw.idle = 0
		iw.armed.Store(false)
		// A reader that began a call after it was looked at above saw
		// the watch armed and did not arm it: look again.
		for rd := range iw.readers {
			if rd.inCall.Load() != 0 && iw.armed.CompareAndSwap(false, true) {
				iw.timer.Reset(watchPeriod)
				break
			}
		}
	}
	iw.mu.Unlock()
	for _, s := range stuck {
		if s.rd.inCall.CompareAndSwap(s.call, 0) {
			iw.takeovers.Add(1)
			go s.rd.w.read(s.rd)
		}
	}
}
