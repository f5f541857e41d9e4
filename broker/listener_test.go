package broker

import (
	"context"
	"testing"
	"time"
)

// TestPanickingListeners: a listener is user code; one that panics on every
// event neither crashes the process nor changes what callers see, and the
// broker still closes (a panic on session:created used to drop the
// connection and leak the session, so that Close hung).
func TestPanickingListeners(t *testing.T) {
	b, srv := newTestBroker(t, nil)
	for _, ev := range []string{OnSessionCreated, OnSessionCompleted, OnSessionError, OnToolCalled, OnToolCompleted} {
		b.On(ev, func(Event) { panic("listener bug on " + ev) })
	}
	s := startExecute(t, srv.URL, map[string]any{"code": `return (await callTool("math:add", {a: 2, b: 3})).sum`}, nil)
	evs := s.rest()
	if len(evs) == 0 || evs[len(evs)-1].Type != EventResult {
		t.Fatalf("events: %s", types(evs))
	}
	s = startExecute(t, srv.URL, map[string]any{"code": `throw new Error("boom")`}, nil)
	if evs := s.rest(); evs[len(evs)-1].Type != EventError {
		t.Fatalf("events: %s", types(evs))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if st := b.Stats(); st.Active != 0 {
		t.Fatalf("sessions left after Close: %+v", st)
	}
}
