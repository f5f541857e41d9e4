package sandbox

import (
	"sync"
	"testing"
)

// TestCallRunners: calls run at once even while another blocks, a
// goroutine that finished a call takes the next, at most maxIdleRunners
// wait, and close ends them all.
func TestCallRunners(t *testing.T) {
	var r runners
	count := func() (idle, live int) {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.idle), r.live
	}
	block := make(chan struct{})
	blocked := make(chan struct{})
	r.run(func() { close(blocked); <-block })
	<-blocked
	for range 20 { // one after the other: one goroutine serves them all
		done := make(chan struct{})
		r.run(func() { close(done) })
		<-done
		waitFor(t, "the runner to be idle", func() bool { idle, _ := count(); return idle == 1 })
	}
	if _, live := count(); live != 2 {
		t.Fatalf("%d runners for one blocked call and 20 sequential ones, want 2", live)
	}
	// Many at once: each gets a goroutine; at most maxIdleRunners stay.
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for range 3 * maxIdleRunners {
		wg.Add(1)
		r.run(func() { defer wg.Done(); <-gate })
	}
	if _, live := count(); live != 3*maxIdleRunners+1 {
		t.Fatalf("%d runners for %d blocked calls, want one each", live, 3*maxIdleRunners+1)
	}
	close(gate)
	wg.Wait()
	close(block)
	waitFor(t, "the runners to settle", func() bool {
		idle, live := count()
		return idle == maxIdleRunners && live == maxIdleRunners
	})
	r.close() // waits for them to end
	if idle, live := count(); idle != 0 || live != 0 {
		t.Fatalf("%d idle, %d live runners after close", idle, live)
	}
}
