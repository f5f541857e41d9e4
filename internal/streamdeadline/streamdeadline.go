// Package streamdeadline bounds the writes of a long response (the broker's
// NDJSON event stream, an MCP answer streamed as SSE) to a client that may
// stop reading: each write gets a deadline, a quiet stream none, and the
// whole stream can be given a last moment (the process exiting).
package streamdeadline

import (
	"net/http"
	"sync"
	"time"
)

// WriteTimeout is what one write of a stream gets to go out: a client that
// keeps its connection but reads nothing for this long is cut.
const WriteTimeout = 30 * time.Second

// Grace is what a stream that must end (its server closing) has left to
// write its last event.
const Grace = time.Second

// Deadline is the write deadline of one streamed response: moved every
// ahead as writes go out (at most once a second), and capped once the
// stream must end (Limit, from another goroutine).
type Deadline struct {
	rc *http.ResponseController
	// conn sets the deadline of the connection under every wrapper of the
	// response: Limit, called from another goroutine than the writer's,
	// cannot go through rc, since a wrapper may keep the deadline in a field
	// its writes read (Caddy's IdleTimeoutWriter does: a data race). The
	// cap reaches rc at the writer's next Extend.
	conn  *http.ResponseController
	every time.Duration
	// timer is set on HTTP/2, whose write deadline is a timer that resets
	// the stream when it fires, a write in flight or not: there the
	// deadline is disarmed once a write has gone out (Sent), or a stream
	// quiet for every (a script waiting for its caller) lost its stream.
	// On HTTP/1 a deadline only fails the next write, so it stays.
	timer  bool
	mu     sync.Mutex
	at     time.Time // the deadline set, zero for none
	capped time.Time // the latest deadline allowed, zero for none
	told   bool      // capped has gone through rc
	done   bool      // the stream ended: its connection may serve others
}

// New bounds each write of r's response w by every.
func New(w http.ResponseWriter, r *http.Request, every time.Duration) *Deadline {
	inner := w
	for {
		u, ok := inner.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			break
		}
		inner = u.Unwrap()
	}
	return &Deadline{rc: http.NewResponseController(w), conn: http.NewResponseController(inner), every: every, timer: r.ProtoMajor == 2}
}

// Extend gives the next write every, unless the deadline set is within a
// second of that already; once capped, the cap. Only the writer's goroutine
// calls it.
func (d *Deadline) Extend(now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.done {
		return
	}
	if !d.capped.IsZero() {
		if !d.told {
			d.told = true
			_ = d.rc.SetWriteDeadline(d.at)
		}
		return
	}
	if d.at.Sub(now) >= d.every-time.Second {
		return
	}
	d.at = now.Add(d.every)
	_ = d.rc.SetWriteDeadline(d.at)
}

// Sent disarms the deadline of an HTTP/2 stream once what was written has
// gone out; the next write arms it again (Extend). A cap stays.
func (d *Deadline) Sent() {
	if !d.timer {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.done || d.at.IsZero() || !d.capped.IsZero() {
		return
	}
	d.at = time.Time{}
	_ = d.rc.SetWriteDeadline(time.Time{})
}

// Limit brings the deadline to at, if later, and keeps it there; any
// goroutine may call it. A write under way fails at at.
func (d *Deadline) Limit(at time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.done {
		return
	}
	d.capped = at
	if d.at.IsZero() || d.at.After(at) {
		d.at = at
		_ = d.conn.SetWriteDeadline(at)
	}
}

// Missed reports whether a deadline is set and now is past it.
func (d *Deadline) Missed(now time.Time) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return !d.at.IsZero() && !now.Before(d.at)
}

// Clear removes the deadline for good (the connection may serve other
// requests): a Limit or Extend that comes later is ignored. The writer's
// goroutine calls it, once it writes no more.
func (d *Deadline) Clear() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.done, d.at = true, time.Time{}
	_ = d.rc.SetWriteDeadline(time.Time{})
}
