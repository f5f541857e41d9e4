package caddymodules

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	sdkjson "github.com/segmentio/encoding/json"
	"go.uber.org/zap"

	"github.com/codemode-gateway/caddy-codemode/metatools"
)

// A request its client cancelled (notifications/cancelled) gets no
// response. The go-sdk stops the request's handler but still sends what
// the handler returns as it unwinds (for meta:execute an EXECUTION_ABORTED
// result); MCP says the receiver SHOULD NOT respond to a cancelled
// request, and the TypeScript SDK reports such a response as one for an
// unknown id. The gateway records the requests under way, marks one
// cancelled when a cancellation the go-sdk acts on arrives (before the
// go-sdk reads it, so the mark is there before the handler can answer),
// and drops the response: over Streamable HTTP the request's POST ends
// without it, over stdio nothing is written. initialize is never marked
// (MCP forbids cancelling it). Revision 2026-07-28 over HTTP cancels by
// closing the request's stream (PropagateRequestCancellation), which
// leaves nobody to answer.

const notificationCancelled = "notifications/cancelled"

// rpcCall is a request under way.
type rpcCall struct {
	id     jsonrpc.ID
	method string
	// batch tells (stdio) that the request came in a batch, whose
	// responses the go-sdk writes together.
	batch bool
	// index is the request's place in its batch; params, its params
	// without _meta in canonical JSON, only when another request of the
	// batch has its method (postCalls.shared).
	index  int
	params []byte
	// reason is the first cancellation's.
	reason atomic.Pointer[string]
	// marks counts the cancellations of the request the go-sdk may act
	// on: one the go-sdk refused withdraws its own mark only, never that
	// of another it acted on.
	marks atomic.Int32
	// post counts the cancelled requests of its POST (HTTP; nil over
	// stdio), so that a POST's answers are looked at only when one is.
	post *atomic.Int32
	// A request served by a temporary go-sdk session (stateless handler,
	// adopted session) is out of reach of a cancellation, which arrives in
	// another POST and so in another temporary session: the gateway stops
	// it itself. cancelHandler ends its handler's context once the handler
	// started (stopCancelledCalls); stopped tells that it is to end at
	// once when it starts.
	stopMu        sync.Mutex
	cancelHandler context.CancelFunc
	stopped       bool
}

func (c *rpcCall) cancelled() bool { return c.marks.Load() > 0 }

// mark records a cancellation of c.
func (c *rpcCall) mark(reason string) {
	c.reason.CompareAndSwap(nil, &reason)
	if c.marks.Add(1) == 1 && c.post != nil {
		c.post.Add(1)
	}
}

// unmark withdraws a cancellation of c the go-sdk refused.
func (c *rpcCall) unmark() {
	if c.marks.Add(-1) == 0 && c.post != nil {
		c.post.Add(-1)
	}
}

// stop ends c's handler: now when it runs, as it starts when it has not.
func (c *rpcCall) stop() {
	c.stopMu.Lock()
	c.stopped = true
	cancel := c.cancelHandler
	c.stopMu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// started records the end of c's handler's context, ending it at once when
// c was stopped before its handler started.
func (c *rpcCall) started(cancel context.CancelFunc) {
	c.stopMu.Lock()
	c.cancelHandler = cancel
	stopped := c.stopped
	c.stopMu.Unlock()
	if stopped {
		cancel()
	}
}

// postCalls is what a meta-tool handler finds of its POST, in the POST's
// context (metatools.RequestContextOf the request's header).
type postCalls struct {
	// temporary: the POST is served by a temporary go-sdk session, whose
	// handlers nothing but the gateway can stop; they end with the POST
	// (nobody could receive their answers after it).
	temporary bool
	// byMethod are the POST's requests by method, those of a method no
	// other request of the POST has: a handler learns its method, not its
	// request's id.
	byMethod map[string]*rpcCall
	// shared are the requests of a 2025-03-26 batch whose method another
	// request of the batch has, by method: a handler's request is the one
	// whose params are its own. Two of one method with the same params
	// are not told apart, and the gateway stops neither (the go-sdk of a
	// held session does, by id).
	shared map[string][]*rpcCall
}

func (pc *postCalls) addShared(c *rpcCall) {
	if pc.shared == nil {
		pc.shared = map[string][]*rpcCall{}
	}
	pc.shared[c.method] = append(pc.shared[c.method], c)
}

// ofParams is the request of method among shared whose params are the
// handler's, nil when none or several are.
func (pc *postCalls) ofParams(method string, params mcp.Params) *rpcCall {
	calls := pc.shared[method]
	if len(calls) == 0 || params == nil {
		return nil
	}
	b, err := json.Marshal(params)
	if err != nil {
		return nil
	}
	own := canonicalParams(b)
	var found *rpcCall
	for _, c := range calls {
		if c.params != nil && bytes.Equal(c.params, own) {
			if found != nil {
				return nil
			}
			found = c
		}
	}
	return found
}

// canonicalParams is params, a JSON object, without its _meta (the go-sdk
// may add to it) in canonical form (keys sorted, no spaces, numbers as
// written), or nil.
func canonicalParams(params json.RawMessage) []byte {
	if len(params) == 0 {
		return nil
	}
	var m map[string]any
	d := json.NewDecoder(bytes.NewReader(params))
	d.UseNumber()
	if d.Decode(&m) != nil {
		return nil
	}
	delete(m, "_meta")
	b, err := json.Marshal(m)
	if err != nil {
		return nil
	}
	return b
}

type postCallsKey struct{}

// statelessPost is the postCalls of a POST of a stateless handler: no
// session, so no request is recorded (see mcpCalls).
var statelessPost = &postCalls{temporary: true}

func withPostCalls(r *http.Request, pc *postCalls) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), postCallsKey{}, pc))
}

// stopCancelledCalls is the meta-tools server's receiving middleware that
// lets the gateway stop a request: its handler's context ends when the
// request is stopped (rpcCall.stop) and, in a temporary go-sdk session,
// when its POST ends.
func stopCancelledCalls(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		extra := req.GetExtra()
		if extra == nil || extra.Header == nil || strings.HasPrefix(method, "notifications/") {
			return next(ctx, method, req)
		}
		post, ok := metatools.RequestContextOf(extra.Header)
		if !ok {
			return next(ctx, method, req)
		}
		pc, _ := post.Value(postCallsKey{}).(*postCalls)
		if pc == nil {
			return next(ctx, method, req)
		}
		c := pc.byMethod[method]
		if c == nil && pc.shared != nil {
			c = pc.ofParams(method, req.GetParams())
		}
		if c == nil && !pc.temporary {
			return next(ctx, method, req)
		}
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		if pc.temporary {
			defer context.AfterFunc(post, cancel)()
		}
		if c != nil {
			c.started(cancel)
		}
		return next(ctx, method, req)
	}
}

// cancelTarget is the request a notifications/cancelled with params
// cancels as the go-sdk reads it: params decoded into its CancelledParams
// with keys matched exactly, requestId a string or a number (truncated to
// an integer, as the go-sdk does). False when the go-sdk cancels nothing.
func cancelTarget(params json.RawMessage) (id jsonrpc.ID, reason string, ok bool) {
	if len(params) == 0 {
		return id, "", false
	}
	var p mcp.CancelledParams
	// The go-sdk decoder's flag without the decoder (a 32 KiB buffer per
	// cancellation), as readHeads reads.
	if _, err := sdkjson.Parse(bytes.TrimSpace(params), &p, sdkjson.DontMatchCaseInsensitiveStructFields); err != nil {
		return id, "", false
	}
	id, err := jsonrpc.MakeID(p.RequestID)
	return id, p.Reason, err == nil && id.IsValid()
}

// rpcHead is what the gateway reads of a message before the go-sdk does:
// keys matched exactly, as the go-sdk matches them.
type rpcHead struct {
	ID     json.RawMessage `json:"id"`
	Method json.RawMessage `json:"method"`
}

// readHeads decodes the id and method of buf's message, or of each
// message of buf's batch; false when buf is neither.
func readHeads(buf []byte) (heads []rpcHead, batch, ok bool) {
	t := bytes.TrimSpace(buf)
	decode := func(into any) bool {
		// The go-sdk's decoder's flag, without its copy of the body; what
		// follows the first value is ignored, as by the go-sdk's decoder.
		_, err := sdkjson.Parse(t, into, sdkjson.DontMatchCaseInsensitiveStructFields)
		return err == nil
	}
	if len(t) > 0 && t[0] == '[' {
		return heads, true, decode(&heads)
	}
	var h rpcHead
	if !decode(&h) {
		return nil, false, false
	}
	return []rpcHead{h}, false, true
}

// call is the id of a request (a method and an id that is no null), as
// the go-sdk makes it, and its method.
func (h rpcHead) call() (id jsonrpc.ID, method string, isRequest bool) {
	if len(h.Method) == 0 || sdkjson.Unmarshal(h.Method, &method) != nil {
		return id, "", false
	}
	var v any
	if len(h.ID) > 0 && sdkjson.Unmarshal(h.ID, &v) == nil {
		id, _ = jsonrpc.MakeID(v)
	}
	return id, method, true
}

// paramsOf is the params of msg, one JSON-RPC message.
func paramsOf(msg []byte) json.RawMessage {
	var m struct {
		Params json.RawMessage `json:"params"`
	}
	if _, err := sdkjson.Parse(bytes.TrimSpace(msg), &m, sdkjson.DontMatchCaseInsensitiveStructFields); err != nil {
		return nil
	}
	return m.Params
}

// responseID is the id of raw when it is a JSON-RPC response.
func responseID(raw []byte) (jsonrpc.ID, bool) {
	var m struct {
		ID     any             `json:"id"`
		Method json.RawMessage `json:"method"`
	}
	if _, err := sdkjson.Parse(bytes.TrimSpace(raw), &m, sdkjson.DontMatchCaseInsensitiveStructFields); err != nil || len(m.Method) > 0 {
		return jsonrpc.ID{}, false
	}
	id, err := jsonrpc.MakeID(m.ID)
	return id, err == nil && id.IsValid()
}

// withoutResponses is data, one JSON-RPC message or a batch of them as
// the go-sdk writes it, without the responses drop picks: data itself
// when it keeps all, nil when it keeps none.
func withoutResponses(data []byte, drop func(jsonrpc.ID) bool) []byte {
	t := bytes.TrimSpace(data)
	if len(t) == 0 || t[0] != '[' {
		if id, ok := responseID(t); ok && drop(id) {
			return nil
		}
		return data
	}
	var msgs []json.RawMessage
	if sdkjson.Unmarshal(t, &msgs) != nil {
		return data
	}
	kept := msgs[:0]
	for _, m := range msgs {
		if id, ok := responseID(m); !ok || !drop(id) {
			kept = append(kept, m)
		}
	}
	switch {
	case len(kept) == len(msgs):
		return data
	case len(kept) == 0:
		return nil
	}
	out := []byte{'['}
	for i, m := range kept {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, m...)
	}
	return append(out, ']')
}

// sseData is the data of one SSE event as the go-sdk writes it (one
// "data: " line), or nil.
func sseData(event []byte) []byte {
	i := bytes.Index(event, []byte("data: "))
	if i < 0 || (i > 0 && event[i-1] != '\n') {
		return nil
	}
	data := event[i+len("data: "):]
	if j := bytes.IndexByte(data, '\n'); j >= 0 {
		data = data[:j]
	}
	return data
}

// mcpCalls holds the requests under way in the go-sdk sessions of the
// handshake revisions in this process, by session and id.
var mcpCalls = &callTable{byKey: map[callKey]*rpcCall{}}

type callKey struct {
	session string
	id      jsonrpc.ID
}

type callTable struct {
	mu    sync.Mutex
	byKey map[callKey]*rpcCall
}

// track records the requests of a POST of session sid (w.body, peeked)
// and marks those its cancellations cancel, before the go-sdk reads it.
// The returned func, called once the go-sdk has answered the POST,
// forgets its requests, withdraws its marks when the go-sdk refused it
// (then it cancelled nothing), and ends a POST whose every answer was
// dropped as an SSE stream without events: a request needs an SSE stream
// or a JSON answer, and an empty JSON body is no message.
func (t *callTable) track(sid string, w *mcpWriter, logger *zap.Logger) func() {
	heads, batch, ok := w.body.readHeads()
	if !ok {
		return func() {}
	}
	// What each message asks, in order, read before the lock (which every
	// POST of every session takes); a batch's messages are decoded once,
	// when a cancellation needs its params (decoded per cancellation, a
	// batch of n cancellations cost n² and held the lock all along).
	type op struct {
		id     jsonrpc.ID
		cancel bool // id is the request a cancellation cancels
		reason string
		method string
		index  int // in the batch
	}
	var ops []op
	var msgs []json.RawMessage
	msgsDrawn := false
	for i, h := range heads {
		id, method, isRequest := h.call()
		switch {
		case !isRequest || method == "initialize":
		case id.IsValid():
			ops = append(ops, op{id: id, method: method, index: i})
		case method == notificationCancelled:
			msg := w.body.buf
			if batch {
				if !msgsDrawn {
					// As the go-sdk reads a batch: what follows it is ignored.
					if _, err := sdkjson.Parse(bytes.TrimSpace(w.body.buf), &msgs, sdkjson.DontMatchCaseInsensitiveStructFields); err != nil {
						msgs = nil
					}
					msgsDrawn = true
				}
				if i >= len(msgs) {
					continue
				}
				msg = msgs[i]
			}
			if target, reason, ok := cancelTarget(paramsOf(msg)); ok {
				ops = append(ops, op{id: target, cancel: true, reason: reason})
			}
		}
	}
	if len(ops) == 0 {
		return func() {}
	}
	var own []callKey
	var marked []*rpcCall
	t.mu.Lock()
	for _, o := range ops {
		k := callKey{sid, o.id}
		switch c := t.byKey[k]; {
		case !o.cancel && c == nil: // else the go-sdk refuses the duplicate
			c = &rpcCall{id: o.id, method: o.method, post: &w.cancelledCalls, index: o.index}
			t.byKey[k] = c
			own = append(own, k)
			if w.calls == nil {
				w.calls = map[jsonrpc.ID]*rpcCall{}
			}
			w.calls[o.id] = c
		case o.cancel && c != nil:
			c.mark(o.reason)
			marked = append(marked, c)
		}
	}
	t.mu.Unlock()
	if len(own) == 0 && len(marked) == 0 {
		return func() {}
	}
	w.logger = logger
	// Stopped once the go-sdk accepts the POST (mcpWriter.WriteHeader): in
	// a go-sdk session its canceller stopped them already, in a temporary
	// one nothing else does.
	w.stops = marked
	if len(own) > 0 {
		w.post = &postCalls{byMethod: make(map[string]*rpcCall, len(own))}
		seen := make(map[string]bool, len(own))
		for _, k := range own {
			c := w.calls[k.id]
			if seen[c.method] {
				if first := w.post.byMethod[c.method]; first != nil {
					delete(w.post.byMethod, c.method)
					w.post.addShared(first)
				}
				w.post.addShared(c)
				continue
			}
			seen[c.method] = true
			w.post.byMethod[c.method] = c
		}
		if len(w.post.shared) > 0 {
			// Requests of one method in a 2025-03-26 batch: told apart by
			// their params, the one thing of its request a handler sees.
			if !msgsDrawn {
				if _, err := sdkjson.Parse(bytes.TrimSpace(w.body.buf), &msgs, sdkjson.DontMatchCaseInsensitiveStructFields); err != nil {
					msgs = nil
				}
			}
			for _, calls := range w.post.shared {
				for _, c := range calls {
					if c.index < len(msgs) {
						c.params = canonicalParams(paramsOf(msgs[c.index]))
					}
				}
			}
		}
	}
	return func() {
		t.mu.Lock()
		for _, k := range own {
			delete(t.byKey, k)
		}
		t.mu.Unlock()
		if w.status >= 400 {
			for _, c := range marked {
				c.unmark()
			}
		} else {
			w.stopCancelled() // a POST answered without a header of its own: 200
		}
		if w.dropped && !w.wrote {
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
		}
	}
}

// readHeads is readHeads of the body, decoded once.
func (pb *peekedBody) readHeads() ([]rpcHead, bool, bool) {
	if !pb.headsDrawn {
		pb.heads, pb.headsBatch, pb.headsOK = readHeads(pb.buf)
		pb.headsDrawn = true
	}
	return pb.heads, pb.headsBatch, pb.headsOK
}

// stopCancelled stops the requests the POST's cancellations cancel, once.
func (w *mcpWriter) stopCancelled() {
	stops := w.stops
	w.stops = nil
	for _, c := range stops {
		c.stop()
	}
}

// cancelledCall is the POST's request id when its client cancelled it.
func (w *mcpWriter) cancelledCall(id jsonrpc.ID) *rpcCall {
	if c := w.calls[id]; c != nil && c.cancelled() {
		return c
	}
	return nil
}

// withoutCancelled is b, an SSE event or a JSON answer of the POST,
// without the responses to its cancelled requests (nil: nothing left).
func (w *mcpWriter) withoutCancelled(b []byte) []byte {
	drop := func(id jsonrpc.ID) bool {
		c := w.cancelledCall(id)
		if c != nil {
			logCancelledResponse(w.logger, c)
		}
		return c != nil
	}
	if strings.HasPrefix(w.Header().Get("Content-Type"), "text/event-stream") {
		data := sseData(b)
		if id, ok := responseID(data); data != nil && ok && drop(id) {
			return nil
		}
		return b
	}
	return withoutResponses(b, drop)
}

func logCancelledResponse(logger *zap.Logger, c *rpcCall) {
	if ce := logger.Check(zap.DebugLevel, "MCP request cancelled by its client: its response is not sent"); ce != nil {
		var reason string
		if r := c.reason.Load(); r != nil {
			reason = *r
		}
		ce.Write(zap.Any("id", c.id.Raw()), zap.String("reason", reason))
	}
}

// stdioCalls are the requests under way on a stdio session.
type stdioCalls struct {
	mu   sync.Mutex
	byID map[jsonrpc.ID]*rpcCall
	// strip holds cancelled requests of a batch: the go-sdk writes a
	// batch's responses once all are there, so theirs goes to it and is
	// taken out of the array on the way out.
	strip  map[jsonrpc.ID]bool
	logger *zap.Logger
	// open counts the requests read and not answered yet (initialize
	// included); change is closed at each answer, for settle.
	open   int
	change chan struct{}
}

func newStdioCalls(logger *zap.Logger) *stdioCalls {
	if logger == nil {
		logger = zap.NewNop()
	}
	return &stdioCalls{byID: map[jsonrpc.ID]*rpcCall{}, strip: map[jsonrpc.ID]bool{}, logger: logger}
}

// read records the requests of a line the go-sdk is about to read and
// marks those its cancellations cancel.
func (s *stdioCalls) read(msgs []jsonrpc.Message, batch bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range msgs {
		req, ok := m.(*jsonrpc.Request)
		if ok && req.IsCall() {
			s.open++
		}
		switch {
		case !ok:
		case req.Method == notificationCancelled:
			// The go-sdk cancels on any message of this method.
			target, reason, ok := cancelTarget(req.Params)
			if c := s.byID[target]; ok && c != nil {
				c.mark(reason)
			}
		case req.IsCall() && req.Method != "initialize":
			// A fresh record: one the go-sdk never answered (a batch it
			// refused) is not taken for this request.
			s.byID[req.ID] = &rpcCall{id: req.ID, batch: batch}
		}
	}
}

// answered forgets request id, answered now, and tells whether its
// response is to be dropped here (a batch's is stripped later).
func (s *stdioCalls) answered(id jsonrpc.ID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open > 0 {
		s.open--
	}
	if s.change != nil {
		close(s.change)
		s.change = nil
	}
	c := s.byID[id]
	delete(s.byID, id)
	if c == nil || !c.cancelled() {
		return false
	}
	logCancelledResponse(s.logger, c)
	if c.batch {
		s.strip[id] = true
		return false
	}
	return true
}

// settle waits until every request read has been answered, or for d at
// most (a request the go-sdk refused unanswered, a plan waiting for a
// client that is gone).
func (s *stdioCalls) settle(d time.Duration) {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		open := s.open
		if s.change == nil {
			s.change = make(chan struct{})
		}
		change := s.change
		s.mu.Unlock()
		if open == 0 {
			return
		}
		select {
		case <-change:
		case <-deadline.C:
			return
		}
	}
}

// strippedWriter writes the go-sdk's lines without the responses of
// cancelled requests in a batch.
type strippedWriter struct {
	*lockedWriter
	calls *stdioCalls
}

func (w strippedWriter) Write(p []byte) (int, error) {
	s := w.calls
	s.mu.Lock()
	stripping := len(s.strip) > 0 && len(p) > 0 && p[0] == '['
	var kept []byte
	if stripping {
		kept = withoutResponses(p, func(id jsonrpc.ID) bool {
			if s.strip[id] {
				delete(s.strip, id)
				return true
			}
			return false
		})
	}
	s.mu.Unlock()
	switch {
	case !stripping:
		return w.lockedWriter.Write(p)
	case kept == nil:
		return len(p), nil
	}
	if !bytes.HasSuffix(kept, []byte("\n")) {
		kept = append(kept, '\n')
	}
	if _, err := w.lockedWriter.Write(kept); err != nil {
		return 0, err
	}
	return len(p), nil
}

var _ io.WriteCloser = strippedWriter{}
