package metatools

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// DefaultProgressInterval is the shortest time between two
// notifications/progress of one meta:execute call; see
// Options.ProgressInterval.
const DefaultProgressInterval = 250 * time.Millisecond

// DefaultProgressHeartbeat is how long a call that reports progress goes
// without a notification before it sends a heartbeat; see
// Options.ProgressHeartbeat. Well under the 60 s a client's request times
// out by default (the TypeScript SDK's), so that client's
// resetTimeoutOnProgress keeps a call alive that waits on one slow tool.
const DefaultProgressHeartbeat = 10 * time.Second

// progressSettle is how long the sender waits after a step before it
// reports it, and progressGap the least time between the last
// notification and the result. A client may take a notification and the
// result that follows it in one read, and the TypeScript SDK handles a
// response at once but a notification a moment later, by when the result
// has retired the token: it reports "a progress notification for an
// unknown token". A plan that ends within the settle sends no
// notification for its last steps (the result reports them), and one that
// ends just after a notification has its result held for the rest of the
// gap (TestProgressNeverJustBeforeTheResult).
const (
	progressSettle = 25 * time.Millisecond
	progressGap    = 25 * time.Millisecond
)

// maxProgressMessageRunes bounds a progress notification's message: a
// status line, not a log transport.
const maxProgressMessageRunes = 120

// progressFunc sends one progress notification (the session's
// NotifyProgress in the server; a recorder in tests).
type progressFunc func(ctx context.Context, p *mcp.ProgressNotificationParams) error

// planProgress reports a meta:execute plan's progress, or that a
// meta:invoke call is still running, to the MCP client that asked for it
// with a progressToken: each completed tool call and each console line of a
// plan is one step, the message says what the latest step was. When nothing
// was sent for a heartbeat period (a plan waiting on one slow call, the
// invoked tool running), a heartbeat says the call is still running.
// progress is the number of steps and heartbeats so far. Notifications go
// out from their own goroutine, at most one per interval (the latest state;
// steps in between are counted, not lost), so neither a slow client stalls
// the plan nor a plan of 10,000 calls floods the client. stop ends them
// before the result is sent: none follows it.
type planProgress struct {
	token     any
	send      progressFunc
	interval  time.Duration
	heartbeat time.Duration // <= 0: none
	tool      string        // the tool meta:invoke runs; "" for a plan
	start     time.Time

	mu      sync.Mutex
	steps   int    // tool calls done + console lines
	calls   int    // tool calls done
	failed  int    // tool calls done with an error
	running int    // tool calls started and not done
	last    string // the latest step, for the message

	wake     chan struct{} // cap 1: a step happened
	done     chan struct{} // closed by stop, once
	exit     chan struct{} // closed when the sender has returned
	stopOnce sync.Once
	settle   time.Duration // wait after a step before reporting it
	gap      time.Duration // least time from the last notification to stop's return
	lastSent time.Time     // the sender's; read by stop once exit is closed
}

// progressOf returns the progress reporter of a tools/call request, or nil
// when the client sent no progressToken (nothing is ever sent then) or the
// request has no session to send on. tool is the tool a meta:invoke call
// runs ("" for a plan), named in its heartbeats. The reporter's
// notifications use ctx, the request's context: the transport relates them
// to the request (its SSE response stream).
func (s *Service) progressOf(ctx context.Context, req *mcp.CallToolRequest, tool string) *planProgress {
	if req == nil || req.Params == nil || req.Session == nil {
		return nil
	}
	token := req.Params.GetProgressToken()
	if !validProgressToken(token) {
		return nil
	}
	ss := req.Session
	return startProgress(ctx, token, s.opts.ProgressInterval, s.opts.ProgressHeartbeat, tool, func(ctx context.Context, p *mcp.ProgressNotificationParams) error {
		return ss.NotifyProgress(ctx, p)
	})
}

// validProgressToken: MCP allows a string or an integer (JSON decodes it as
// a float64 here).
func validProgressToken(t any) bool {
	switch v := t.(type) {
	case string:
		return true
	case float64:
		return v == float64(int64(v))
	case int, int32, int64:
		return true
	}
	return false
}

// startProgress starts the sender. interval 0 is DefaultProgressInterval;
// heartbeat 0 is DefaultProgressHeartbeat, negative none.
func startProgress(ctx context.Context, token any, interval, heartbeat time.Duration, tool string, send progressFunc) *planProgress {
	if interval <= 0 {
		interval = DefaultProgressInterval
	}
	if heartbeat == 0 {
		heartbeat = DefaultProgressHeartbeat
	}
	p := newProgress(token, interval, heartbeat, tool, send)
	go p.run(ctx)
	return p
}

// newProgress is a reporter whose sender is not started yet.
func newProgress(token any, interval, heartbeat time.Duration, tool string, send progressFunc) *planProgress {
	return &planProgress{token: token, send: send, interval: interval, heartbeat: heartbeat, tool: tool, start: time.Now(),
		wake: make(chan struct{}, 1), done: make(chan struct{}), exit: make(chan struct{}),
		settle: min(progressSettle, interval), gap: progressGap}
}

// callStarted counts a tool call the plan started.
func (p *planProgress) callStarted() {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.running++
	p.mu.Unlock()
}

// callDone is one step: a tool call completed (failed when err).
func (p *planProgress) callDone(tool string, failed bool) {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.running--
	p.calls++
	if failed {
		p.failed++
		p.last = tool + " failed"
	} else {
		p.last = tool + " done"
	}
	p.step()
}

// logged is one step: the plan wrote a console line.
func (p *planProgress) logged(message string) {
	if p == nil {
		return
	}
	// Before the lock, and only the part a message can show: a long line
	// holds up neither the sender nor the plan's tool calls.
	last := "log: " + collapseSpaces(message, maxProgressMessageRunes)
	p.mu.Lock()
	p.last = last
	p.step()
}

// collapseSpaces is strings.Join(strings.Fields(s), " ") cut after n
// runes, without reading past them: message cuts the status line to n
// runes anyway, and a console line can be megabytes.
func collapseSpaces(s string, n int) string {
	var b strings.Builder
	space := false
	for _, r := range s {
		if unicode.IsSpace(r) {
			space = b.Len() > 0
			continue
		}
		if space {
			if n--; n < 0 {
				break
			}
			b.WriteByte(' ')
			space = false
		}
		if n--; n < 0 {
			break
		}
		b.WriteRune(r)
	}
	return b.String()
}

// step counts a step and wakes the sender; p.mu is held and released.
func (p *planProgress) step() {
	p.steps++
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// message is the status line of the current state; p.mu is held.
func (p *planProgress) message() string {
	msg := fmt.Sprintf("%d tool %s done", p.calls, plural(p.calls, "call", "calls"))
	if p.failed > 0 {
		msg += fmt.Sprintf(" (%d failed)", p.failed)
	}
	if p.running > 0 {
		msg += fmt.Sprintf(", %d running", p.running)
	}
	if p.last != "" {
		msg += "; " + p.last
	}
	return cutRunes(msg, maxProgressMessageRunes)
}

// heartbeatMessage is the status line of a heartbeat; p.mu is held.
func (p *planProgress) heartbeatMessage(elapsed time.Duration) string {
	e := elapsed.Round(time.Second).String()
	if p.tool != "" {
		return cutRunes(p.tool+" running for "+e, maxProgressMessageRunes)
	}
	return cutRunes("running for "+e+": "+p.message(), maxProgressMessageRunes)
}

// run is the sender: on each wake it sends the latest state, then waits
// out the interval before it looks again. When a heartbeat period passes
// without a notification, it sends a heartbeat.
func (p *planProgress) run(ctx context.Context) {
	defer close(p.exit)
	sent, beats := 0, 0 // steps of the last notification; heartbeats sent
	timer := time.NewTimer(0)
	<-timer.C
	var beat <-chan time.Time // nil (never ready) without heartbeats
	var beatTimer *time.Timer
	if p.heartbeat > 0 {
		beatTimer = time.NewTimer(p.heartbeat)
		defer beatTimer.Stop()
		beat = beatTimer.C
	}
	for {
		heartbeat := false
		select {
		case <-p.wake:
		case <-beat:
			heartbeat = true
		case <-p.done:
			return
		case <-ctx.Done():
			return
		}
		if !heartbeat && p.settle > 0 && !p.wait(ctx, timer, p.settle) {
			return
		}
		p.mu.Lock()
		steps := p.steps
		var msg string
		switch {
		case steps > sent:
			msg = p.message()
		case heartbeat:
			beats++
			msg = p.heartbeatMessage(time.Since(p.start))
		}
		p.mu.Unlock()
		if msg != "" {
			// progress only grows: steps and heartbeats never decrease,
			// and each notification has more steps or one more heartbeat
			// than the last one sent.
			_ = p.send(ctx, &mcp.ProgressNotificationParams{ProgressToken: p.token, Progress: float64(steps + beats), Message: msg})
			p.lastSent = time.Now()
			sent = steps
			if beatTimer != nil {
				beatTimer.Reset(p.heartbeat) // a heartbeat period from now
			}
		}
		if !p.wait(ctx, timer, p.interval) {
			return
		}
	}
}

// wait runs timer for d and reports whether it ran out: false when the
// reporter was stopped or ctx ended first.
func (p *planProgress) wait(ctx context.Context, timer *time.Timer, d time.Duration) bool {
	timer.Reset(d)
	select {
	case <-timer.C:
		return true
	case <-p.done:
	case <-ctx.Done():
	}
	timer.Stop()
	return false
}

// stop ends the notifications and returns once the sender has stopped (a
// notification being written is finished first) and the gap after the
// last one has passed: call it before the result is sent.
func (p *planProgress) stop() {
	if p == nil {
		return
	}
	p.stopOnce.Do(func() { close(p.done) })
	<-p.exit
	if p.lastSent.IsZero() {
		return
	}
	if wait := p.gap - time.Since(p.lastSent); wait > 0 {
		time.Sleep(wait)
	}
}
