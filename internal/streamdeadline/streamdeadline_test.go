package streamdeadline

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// recorder is a response writer that keeps the write deadlines set on it,
// as a connection's writer does for http.ResponseController.
type recorder struct {
	httptest.ResponseRecorder
	mu  sync.Mutex
	set []time.Time
}

func (r *recorder) SetWriteDeadline(t time.Time) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.set = append(r.set, t)
	return nil
}

func (r *recorder) deadlines() []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Time(nil), r.set...)
}

// wrapper stands for a middleware's writer (Caddy's IdleTimeoutWriter)
// over the connection's: deadlines set through it are recorded apart.
type wrapper struct {
	recorder
	inner http.ResponseWriter
}

func (w *wrapper) Unwrap() http.ResponseWriter { return w.inner }

func request(major int) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/execute", nil)
	r.ProtoMajor = major
	return r
}

var t0 = time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)

func TestExtendMovesTheDeadlineAtMostOnceASecond(t *testing.T) {
	w := &recorder{}
	d := New(w, request(1), 30*time.Second)
	d.Extend(t0)
	d.Extend(t0.Add(500 * time.Millisecond)) // within a second of what is set
	d.Extend(t0.Add(1500 * time.Millisecond))
	got := w.deadlines()
	want := []time.Time{t0.Add(30 * time.Second), t0.Add(31500 * time.Millisecond)}
	if len(got) != len(want) || !got[0].Equal(want[0]) || !got[1].Equal(want[1]) {
		t.Fatalf("deadlines set %v, want %v", got, want)
	}
	if d.Missed(t0.Add(31 * time.Second)) {
		t.Error("missed before the moved deadline")
	}
	if !d.Missed(t0.Add(31500 * time.Millisecond)) {
		t.Error("not missed at the deadline")
	}
}

func TestLimitCapsThroughTheConnectionAndHoldsAgainstExtend(t *testing.T) {
	conn := &recorder{}
	w := &wrapper{inner: conn}
	d := New(w, request(1), 30*time.Second)
	d.Extend(t0)
	end := t0.Add(time.Second)
	d.Limit(end)
	// The cap goes to the connection's writer, not through the wrapper,
	// which another goroutine's writes may be using.
	if got := conn.deadlines(); len(got) != 1 || !got[0].Equal(end) {
		t.Fatalf("connection deadlines %v, want [%v]", got, end)
	}
	before := len(w.deadlines())
	// The writer's next Extend passes the cap through the wrapper once,
	// and never moves it later again.
	d.Extend(t0.Add(5 * time.Second))
	d.Extend(t0.Add(10 * time.Second))
	got := w.deadlines()[before:]
	if len(got) != 1 || !got[0].Equal(end) {
		t.Fatalf("wrapper deadlines after the cap %v, want [%v]", got, end)
	}
	if !d.Missed(end) {
		t.Error("cap not missed at its time")
	}
	// A later limit than the deadline set does not move it.
	d.Limit(end.Add(time.Hour))
	if got := conn.deadlines(); len(got) != 1 {
		t.Errorf("a later limit set the connection's deadline again: %v", got)
	}
}

func TestSentDisarmsOnlyHTTP2(t *testing.T) {
	w1 := &recorder{}
	d1 := New(w1, request(1), 30*time.Second)
	d1.Extend(t0)
	d1.Sent()
	if got := w1.deadlines(); len(got) != 1 || !d1.Missed(t0.Add(time.Minute)) {
		t.Errorf("HTTP/1: Sent changed the deadline: %v", got)
	}

	w2 := &recorder{}
	d2 := New(w2, request(2), 30*time.Second)
	d2.Extend(t0)
	d2.Sent()
	got := w2.deadlines()
	if len(got) != 2 || !got[1].IsZero() || d2.Missed(t0.Add(time.Hour)) {
		t.Fatalf("HTTP/2: Sent did not disarm the deadline: %v", got)
	}
	// The next write arms it again.
	d2.Extend(t0.Add(time.Minute))
	if !d2.Missed(t0.Add(90 * time.Second)) {
		t.Error("HTTP/2: Extend after Sent did not arm the deadline")
	}
	// A cap stays through Sent.
	d2.Limit(t0.Add(61 * time.Second))
	d2.Sent()
	if !d2.Missed(t0.Add(61 * time.Second)) {
		t.Error("HTTP/2: Sent disarmed a cap")
	}
}

func TestClearEndsForGood(t *testing.T) {
	w := &recorder{}
	d := New(w, request(2), 30*time.Second)
	d.Extend(t0)
	d.Clear()
	n := len(w.deadlines())
	if got := w.deadlines()[n-1]; !got.IsZero() {
		t.Fatalf("Clear left the deadline at %v", got)
	}
	d.Limit(t0.Add(time.Second))
	d.Extend(t0.Add(time.Minute))
	d.Sent()
	if got := w.deadlines(); len(got) != n || d.Missed(t0.Add(time.Hour)) {
		t.Errorf("a deadline was set after Clear: %v", got[n:])
	}
}

// TestLimitFromAnotherGoroutine: Limit comes from the goroutine that ends
// the stream while the writer extends; run with -race.
func TestLimitFromAnotherGoroutine(t *testing.T) {
	conn := &recorder{}
	d := New(&wrapper{inner: conn}, request(2), 30*time.Second)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 1000; i++ {
			d.Extend(t0.Add(time.Duration(i) * time.Second))
			d.Sent()
		}
	}()
	d.Limit(t0.Add(2 * time.Second))
	wg.Wait()
	if !d.Missed(t0.Add(2 * time.Second)) {
		t.Error("the cap was lost to the writer's extends")
	}
}
