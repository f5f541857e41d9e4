package engine

import (
	"sync"

	"github.com/dop251/goja"
)

// warmRuntime holds at most one runtime prepared for the engine's next
// script: a fresh goja runtime in which only the prelude's
// request-independent setup has run (about two thirds of a trivial
// execution's time). It is built on a goroutine of its own while the
// previous script still runs or the engine waits for its next request, and
// handed to exactly one execution, which then configures it for its
// request. Nothing is shared or reused between scripts: every script still
// gets a runtime no other script has touched.
//
// A script that finds the runtime still being built waits for it, unless
// another script already waits (then it sets up its own): so scripts in a
// row never set up twice, and concurrent scripts never queue behind one
// builder.
type warmRuntime struct {
	mu       sync.Mutex
	ready    *execution    // set up, not yet taken
	building chan struct{} // closed when the current build ends; nil when none runs
	waiting  bool          // a taker waits for the current build
	closed   bool
	// goroutines runs the build (the engine's runners); nil: a goroutine of
	// its own.
	goroutines *runners
}

// take returns a prepared execution, or nil when none is ready (the caller
// sets up its own). Either way the next one starts building.
func (w *warmRuntime) take() *execution {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ready == nil && w.building != nil && !w.waiting && !w.closed {
		ch := w.building
		w.waiting = true
		w.mu.Unlock()
		<-ch
		w.mu.Lock()
		w.waiting = false
	}
	x := w.ready
	w.ready = nil
	w.startLocked()
	return x
}

// startLocked starts building a runtime unless one is ready or being built.
func (w *warmRuntime) startLocked() {
	if w.closed || w.ready != nil || w.building != nil {
		return
	}
	ch := make(chan struct{})
	w.building = ch
	build := func() {
		x := &execution{rt: goja.New()}
		if x.runPrelude() != nil {
			// Not expected; the execution that needs a runtime sets up
			// its own and reports what failed.
			x = nil
		}
		w.mu.Lock()
		if !w.closed {
			w.ready = x
		}
		w.building = nil
		w.mu.Unlock()
		close(ch)
	}
	if w.goroutines != nil {
		w.goroutines.run(build)
	} else {
		go build()
	}
}

// close drops the prepared runtime; a build under way is dropped when it
// ends.
func (w *warmRuntime) close() {
	w.mu.Lock()
	w.closed = true
	w.ready = nil
	w.mu.Unlock()
}
