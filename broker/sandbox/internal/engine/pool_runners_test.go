package engine

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"
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

// flipHost's "flip" tool answers its first call at once and blocks the
// later ones until release is closed, whatever their context says (a
// host that ignores cancellation).
type flipHost struct {
	*testHost
	mu      sync.Mutex
	flips   int
	blocked chan struct{} // receives when a call blocks
	release chan struct{}
}

func (h *flipHost) CallTool(ctx context.Context, call ToolCall) (json.RawMessage, error) {
	if call.Name != "flip" {
		return h.testHost.CallTool(ctx, call)
	}
	h.mu.Lock()
	h.flips++
	first := h.flips == 1
	h.mu.Unlock()
	if first {
		return json.RawMessage(`1`), nil
	}
	h.blocked <- struct{}{}
	<-h.release
	return json.RawMessage(`2`), nil
}

// TestReaderCallTakeover: a tool whose first call returned at once is
// called by the worker's reader itself the next time (its frame is the
// only one in flight); when that call blocks, the watch makes another
// goroutine the reader, which reads the frames that follow (here the done
// of the execution, cancelled by its caller), and the worker serves later
// executions; the blocked goroutine ends when its call returns.
func TestReaderCallTakeover(t *testing.T) {
	defer func(q time.Duration) { quickCall = q }(quickCall)
	quickCall = time.Hour // the first flip counts as quick even under -race
	p, _ := newFakePool(t, PoolOptions{RuntimePoolOptions: RuntimePoolOptions{MinSize: 1, MaxSize: 1}})
	h := &flipHost{testHost: newTestHost(echoTools()), blocked: make(chan struct{}, 4), release: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := make(chan error, 1)
	go func() {
		_, err := p.Execute(ctx, Request{Code: "calls flip 2"}, h)
		a <- err
	}()
	select {
	case <-h.blocked:
	case err := <-a:
		t.Fatalf("the execution ended before its blocking call: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("timed out waiting for the second flip")
	}
	// The caller leaves: the worker stops the script and answers done,
	// which only a new reader can read while the old one is in the call.
	cancel()
	waitFor(t, "a reader takeover", func() bool { return p.watch.takeovers.Load() >= 1 })
	waitFor(t, "the execution's done to be read", func() bool {
		w := anyWorker(p)
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.execs) == 0
	})
	close(h.release)
	if err := <-a; err == nil {
		t.Fatal("the cancelled execution succeeded")
	}
	r, err := p.Execute(context.Background(), Request{Code: "calls echo 3"}, h)
	if err != nil || r.Status != StatusOK {
		t.Fatalf("next execution: %v %+v", err, r)
	}
}

// anyWorker returns one of p's workers.
func anyWorker(p *workerPool) *worker {
	p.mu.Lock()
	defer p.mu.Unlock()
	for w := range p.all {
		return w
	}
	return nil
}
