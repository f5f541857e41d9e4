package engine

import (
	"testing"
	"time"
)

// TestWorkerReleasesMemoryWhenIdle: a worker returns its start-up memory to
// the OS only once no script has started or run for the quiet delay; never
// while a script runs or scripts keep arriving, and not at all once it
// stops.
func TestWorkerReleasesMemoryWhenIdle(t *testing.T) {
	s := &workerServer{execs: make(map[uint64]*serverExec), stopped: make(chan struct{})}
	end := func(se *serverExec) {
		s.mu.Lock()
		delete(s.execs, se.id)
		s.mu.Unlock()
	}
	// The decision at each tick: idle only when the last tick saw the same
	// count of started scripts and none runs.
	seen, idle := s.idleSince(0)
	if !idle || seen != 0 {
		t.Fatalf("fresh worker: idle %v, begun %d", idle, seen)
	}
	se, _ := s.start(1)
	if seen, idle = s.idleSince(seen); idle || seen != 1 {
		t.Fatalf("a script started since the last tick: idle %v, begun %d", idle, seen)
	}
	if _, idle = s.idleSince(seen); idle {
		t.Fatal("idle while a script runs")
	}
	end(se)
	se, _ = s.start(2) // the next arrives before the tick
	end(se)
	if seen, idle = s.idleSince(seen); idle || seen != 2 {
		t.Fatalf("a script started and ended between ticks: idle %v, begun %d", idle, seen)
	}
	if _, idle = s.idleSince(seen); !idle {
		t.Fatal("not idle after a quiet tick")
	}

	// The loop: nothing while a script runs; once it ends, the release.
	released := make(chan struct{})
	se, _ = s.start(3)
	go s.releaseWhenIdle(time.Millisecond, func() { close(released) })
	time.Sleep(50 * time.Millisecond)
	select {
	case <-released:
		t.Fatal("released while a script ran")
	default:
	}
	end(se)
	select {
	case <-released:
	case <-time.After(10 * time.Second):
		t.Fatal("an idle worker never released its memory")
	}

	// A worker that stops before it is idle releases nothing, and the
	// goroutine ends.
	s2 := &workerServer{execs: make(map[uint64]*serverExec), stopped: make(chan struct{})}
	ended := make(chan struct{})
	go func() {
		s2.releaseWhenIdle(time.Hour, func() { t.Error("released after the worker stopped") })
		close(ended)
	}()
	close(s2.stopped)
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("releaseWhenIdle outlived its worker")
	}
}
