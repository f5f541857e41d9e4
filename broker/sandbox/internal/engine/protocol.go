package engine

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
)

// The worker protocol: the parent and a worker process exchange frames over
// the worker's stdin (parent to worker) and stdout (worker to parent). A frame
// is a 4-byte big-endian length followed by that many bytes of one JSON
// object, a wireMsg. The parent trusts nothing a worker sends: every frame is
// size-checked before it is read, decoded strictly and validated against the
// execution in progress.
//
//	parent -> worker   init, exec, result (tool call result), lookup (reply),
//	                   cancel
//	worker -> parent   ready, call, lookup, log, wait, done
//
// A session: the parent sends init (memory cap, message limit, engine
// options); the worker caps its memory and answers ready. Then the parent
// sends exec frames, as many as it chooses to host on this worker; each
// execution runs on its own, its frames carry its ID. While it runs the
// worker sends call (the parent answers result), lookup (answered by
// lookup) and log; wait says the script has nothing to run until a result
// comes (it gives up its CPU slot: see the pool); it ends with done. cancel
// asks the worker to stop an execution (its caller left).
//
// The parent holds a script's next result until the script may run again
// (a CPU slot is free), so a waiting script runs nothing without the
// parent's leave: the result is the leave.
const protocolVersion = 3

// Message types.
const (
	msgInit   = "init"
	msgReady  = "ready"
	msgExec   = "exec"
	msgCall   = "call"
	msgResult = "result"
	msgLookup = "lookup"
	msgLog    = "log"
	msgWait   = "wait"
	msgDone   = "done"
	msgCancel = "cancel"
)

// frameHeader is the size of a frame's length prefix.
const frameHeader = 4

// Limits of what a worker may send, checked by the parent.
const (
	maxToolNameBytes = 512
	maxLogLevelBytes = 8
)

// wireMsg is every message of the protocol; which fields are set depends on T.
type wireMsg struct {
	T string `json:"t"`
	// ID is the execution the message belongs to (exec, call, result, lookup,
	// log, done).
	ID uint64 `json:"id,omitempty"`
	// Call numbers a worker's calls and lookups within one execution,
	// strictly increasing from 1.
	Call uint64 `json:"call,omitempty"`

	// init and ready.
	V    int       `json:"v,omitempty"`
	Init *wireInit `json:"init,omitempty"`
	PID  int       `json:"pid,omitempty"`
	// Build is the worker's buildIdentity (ready): the pool refuses a
	// worker program of another build.
	Build string       `json:"build,omitempty"`
	Exec  *wireExec    `json:"exec,omitempty"`
	Done  *wireDone    `json:"done,omitempty"`
	Tool  *ToolInfo    `json:"tool,omitempty"`
	Err   *wireToolErr `json:"err,omitempty"`

	// call, lookup: the tool; call: its input and the engine's call ID.
	Name   string          `json:"name,omitempty"`
	CallID string          `json:"callId,omitempty"`
	Input  json.RawMessage `json:"input,omitempty"`
	// result: the tool's output.
	Data json.RawMessage `json:"data,omitempty"`
	// lookup reply: whether the tool exists (Tool holds its metadata).
	Found bool `json:"found,omitempty"`
	// call: the input exceeded the message limit and is not sent; the
	// parent answers with a tool error.
	Oversize bool `json:"oversize,omitempty"`
	// wait: how many tool results the script has received so far; the
	// parent compares it with the results it sent to tell a script that
	// waits from one with results on the way.
	Seen uint64 `json:"seen,omitempty"`

	// log.
	Level   string `json:"level,omitempty"`
	Message string `json:"message,omitempty"`

	// checked: Input (call) or Data (result) is known to be one JSON
	// value, scanned by whoever made the message (decodeCallFast, the
	// engine's call, the host's result in callTool), so encoding and
	// validation do not scan it again (json.Valid takes some 250 µs for
	// 100 KB). Never set from the wire.
	checked bool
}

// wireInit configures a worker once, before its first execution.
type wireInit struct {
	// MemoryBytes is the data-segment growth the worker allows itself
	// (RLIMIT_DATA above its start-up size); 0 means no cap.
	MemoryBytes int64 `json:"memoryBytes,omitempty"`
	// ScriptMemoryBytes is one script's share of it (the pool's
	// MemoryBytes): the engine's memory limit is at most this.
	ScriptMemoryBytes int64 `json:"scriptMemoryBytes,omitempty"`
	// MaxMessageBytes bounds every frame in both directions.
	MaxMessageBytes int `json:"maxMessageBytes"`
	// Engine is the in-process engine configuration the worker runs
	// scripts with.
	Engine workerEngineConfig `json:"engine"`
}

// wireExec is one script to run.
type wireExec struct {
	Code string `json:"code"`
	// Allowed is Request.AllowedTools; HasAllowed tells nil from empty.
	Allowed    []string        `json:"allowed,omitempty"`
	HasAllowed bool            `json:"hasAllowed,omitempty"`
	Context    json.RawMessage `json:"context,omitempty"`
	Limits     Limits          `json:"limits"`
	// Tools are the allowed tools' metadata, looked up ahead so that the
	// worker needs no round trip for them.
	Tools []ToolInfo `json:"tools,omitempty"`
	// Missing are allowed tools the host does not know.
	Missing []string `json:"missing,omitempty"`
	// Stream asks for log messages (the host is a LogHost).
	Stream bool `json:"stream,omitempty"`
}

// wireDone ends an execution.
type wireDone struct {
	Result *Result `json:"result,omitempty"`
	// Err is an engine failure (Engine.Execute returned an error).
	Err   *Error    `json:"err,omitempty"`
	Stats wireStats `json:"stats"`
	// Recycle asks the parent to replace this worker: the script left it
	// with too little memory headroom for the next one.
	Recycle bool `json:"recycle,omitempty"`
}

type wireStats struct {
	DurationNS int64 `json:"durationNs"`
	ToolCalls  int   `json:"toolCalls"`
	Steps      int64 `json:"steps"`
}

// wireToolErr is a failed tool call; Plain marks an error that was not a
// *ToolError, so the worker hands its engine a plain error with the same text.
type wireToolErr struct {
	Code    string `json:"code,omitempty"`
	Message string `json:"message"`
	Plain   bool   `json:"plain,omitempty"`
}

// protocolError is a broken rule of the protocol; Code is MESSAGE_INVALID,
// MESSAGE_TOO_LARGE or MESSAGE_FLOOD.
type protocolError struct {
	Code string
	Msg  string
}

func (e *protocolError) Error() string { return e.Code + ": " + e.Msg }

func invalidf(format string, args ...any) *protocolError {
	return &protocolError{Code: CodeMessageInvalid, Msg: fmt.Sprintf(format, args...)}
}

// frameWriter writes whole frames; it is safe for concurrent use.
//
// A worker queues the frames a script sends in one stretch of JavaScript
// (its tool calls after the first, its console entries) instead of writing
// each at once: the next write, flush, or at the latest queueDelay later,
// sends all queued frames with one write(2). So the calls of a Promise.all
// reach the parent together, at the cost of one system call and one
// wake-up of the parent's reader instead of one per frame. The bytes on
// the wire are the same frames in the same order.
type frameWriter struct {
	mu  sync.Mutex
	w   io.Writer
	max int
	buf []byte
	// delay is how long a queued frame waits at most (0: queueDelay);
	// queued counts the frames in buf not written yet; timer flushes them
	// delay after the first was queued.
	delay  time.Duration
	queued int
	timer  *time.Timer
}

// queueDelay bounds how long a queued frame waits for the write that
// flushes it (a script that calls a tool and then computes for a while
// without awaiting anything). Tests change it.
var queueDelay = 200 * time.Microsecond

// maxQueuedBytes flushes a queue that grew this large at once.
const maxQueuedBytes = 64 << 10

// encode encodes m as a whole frame: the length prefix, then the body.
// A message larger than the limit is refused with MESSAGE_TOO_LARGE.
func (fw *frameWriter) encode(m *wireMsg) ([]byte, error) {
	b, framed, err := fw.encodeMsg(m)
	if err != nil || framed {
		return b, err
	}
	return appendFrame(nil, b), nil
}

// encodeMsg encodes m: the frames of tool calls (appendFast's) whole, in
// one buffer after their length prefix (framed), so that write sends them
// as they are; the others as their body alone (json.Marshal's).
func (fw *frameWriter) encodeMsg(m *wireMsg) (b []byte, framed bool, err error) {
	b, framed = appendFast(make([]byte, frameHeader, frameHeader+64+len(m.Name)+len(m.CallID)+len(m.Input)+len(m.Data)), m)
	if !framed {
		if b, err = json.Marshal(m); err != nil {
			return nil, false, fmt.Errorf("encoding %s message: %w", m.T, err)
		}
	}
	n := len(b)
	if framed {
		n -= frameHeader
		binary.BigEndian.PutUint32(b, uint32(n))
	}
	if n > fw.max {
		return nil, false, fw.tooLarge(m, n)
	}
	return b, framed, nil
}

func (fw *frameWriter) tooLarge(m *wireMsg, n int) error {
	return &protocolError{Code: CodeMessageTooLarge, Msg: fmt.Sprintf("%s message of %d bytes exceeds the limit of %d bytes", m.T, n, fw.max)}
}

// appendFrame appends body to b as one frame.
func appendFrame(b, body []byte) []byte {
	return append(binary.BigEndian.AppendUint32(b, uint32(len(body))), body...)
}

// appendLocked appends what encodeMsg made to the buffer.
func (fw *frameWriter) appendLocked(b []byte, framed bool) {
	if framed {
		fw.buf = append(fw.buf, b...)
	} else {
		fw.buf = appendFrame(fw.buf, b)
	}
}

// write encodes m and writes it as one frame, after the frames queued
// before it. A message larger than the limit is refused with
// MESSAGE_TOO_LARGE and nothing is written (queued frames stay queued).
// A tool call's frame is written from the buffer it was encoded in when
// nothing is queued: a large result or input is not copied again.
func (fw *frameWriter) write(m *wireMsg) error {
	fw.mu.Lock()
	if fw.queued == 0 {
		if done, err := fw.writeFastLocked(m); done {
			fw.mu.Unlock()
			return err
		}
	}
	fw.mu.Unlock()
	b, framed, err := fw.encodeMsg(m)
	if err != nil {
		return err
	}
	fw.mu.Lock()
	defer fw.mu.Unlock()
	if framed && fw.queued == 0 {
		_, err := fw.w.Write(b)
		return err
	}
	fw.appendLocked(b, framed)
	return fw.flushLocked()
}

// writeFastLocked writes m, a tool call's frame (appendFast's), when
// nothing is queued, encoded in the writer's own buffer (empty then), which
// it keeps for the next frame unless it grew past maxQueuedBytes: no
// buffer is made per frame. done is false, with nothing written, for any
// other message (write encodes it as usual).
func (fw *frameWriter) writeFastLocked(m *wireMsg) (done bool, err error) {
	b := fw.buf[:0]
	if need := frameHeader + 64 + len(m.Name) + len(m.CallID) + len(m.Input) + len(m.Data); cap(b) < need {
		b = make([]byte, 0, need)
	}
	b, ok := appendFast(append(b, 0, 0, 0, 0), m)
	if cap(b) <= maxQueuedBytes {
		fw.buf = b[:0]
	}
	if !ok {
		return false, nil
	}
	n := len(b) - frameHeader
	if n > fw.max {
		return true, fw.tooLarge(m, n)
	}
	binary.BigEndian.PutUint32(b, uint32(n))
	_, err = fw.w.Write(b)
	return true, err
}

// queue encodes m and queues it for the next write (see frameWriter). Only
// encoding errors are returned; a failed write shows as the stream ending.
func (fw *frameWriter) queue(m *wireMsg) error {
	b, framed, err := fw.encodeMsg(m)
	if err != nil {
		return err
	}
	fw.mu.Lock()
	defer fw.mu.Unlock()
	fw.appendLocked(b, framed)
	fw.queued++
	if len(fw.buf) >= maxQueuedBytes {
		_ = fw.flushLocked()
		return nil
	}
	if fw.queued == 1 {
		d := fw.delay
		if d <= 0 {
			d = queueDelay
		}
		if fw.timer == nil {
			fw.timer = time.AfterFunc(d, fw.flush)
		} else {
			fw.timer.Reset(d)
		}
	}
	return nil
}

// flush writes the queued frames, if any.
func (fw *frameWriter) flush() {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	if fw.queued > 0 {
		_ = fw.flushLocked()
	}
}

func (fw *frameWriter) flushLocked() error {
	if fw.queued > 0 {
		fw.queued = 0
		fw.timer.Stop()
	}
	_, err := fw.w.Write(fw.buf)
	fw.buf = fw.buf[:0]
	if cap(fw.buf) > maxQueuedBytes {
		fw.buf = nil // do not pin one huge result
	}
	return err
}

// frameReader reads frames no larger than max.
type frameReader struct {
	r   io.Reader
	max int
	hdr [frameHeader]byte
	buf []byte
	// fastResults decodes result frames by hand (decodeResultFast): set
	// by a worker only, which trusts its parent. fastCalls decodes call
	// frames by hand (decodeCallFast, exact): set by the parent.
	fastResults bool
	fastCalls   bool
	// lastName is the tool name of the last call frame decoded: a
	// script's calls mostly name the same tools, so the string is reused
	// rather than made anew per call.
	lastName string
}

// buffered is how many bytes of later frames were read already (0 when
// the reader does not buffer).
func (fr *frameReader) buffered() int {
	if b, ok := fr.r.(*bufio.Reader); ok {
		return b.Buffered()
	}
	return 0
}

// read returns the next message. io.EOF means the stream ended cleanly
// between frames; a *protocolError means the peer broke the protocol.
func (fr *frameReader) read() (*wireMsg, error) {
	if _, err := io.ReadFull(fr.r, fr.hdr[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, invalidf("stream ended inside a frame header")
		}
		return nil, err
	}
	n, err := frameLength(fr.hdr[:], fr.max)
	if err != nil {
		return nil, err
	}
	if cap(fr.buf) < n {
		fr.buf = make([]byte, n)
	}
	body := fr.buf[:n]
	if _, err := io.ReadFull(fr.r, body); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, invalidf("stream ended inside a frame of %d bytes", n)
		}
		return nil, err
	}
	// A buffer larger than 64 KiB is this frame's alone and is dropped
	// after it (not to pin one huge frame): the message may keep it.
	own := cap(fr.buf) > 64<<10
	if own {
		fr.buf = nil
	}
	m, err := fr.decodeBody(body, own)
	return m, err
}

// frameLength is the body length a frame header announces; an empty
// frame or one over max is refused.
func frameLength(hdr []byte, max int) (int, error) {
	n := binary.BigEndian.Uint32(hdr)
	if n == 0 {
		return 0, invalidf("empty frame")
	}
	if uint64(n) > uint64(max) {
		return 0, &protocolError{Code: CodeMessageTooLarge, Msg: fmt.Sprintf("message of %d bytes exceeds the limit of %d bytes", n, max)}
	}
	return int(n), nil
}

// decode decodes a frame's body; the message does not alias body.
func (fr *frameReader) decode(body []byte) (*wireMsg, error) { return fr.decodeBody(body, false) }

// decodeBody is decode; with own (body is no one else's, ever), a call's
// input is kept in body rather than copied (a large input's copy).
func (fr *frameReader) decodeBody(body []byte, own bool) (*wireMsg, error) {
	m, ok := (*wireMsg)(nil), false
	switch {
	case fr.fastResults:
		if m, ok = decodeResultFast(body); !ok {
			m, ok = decodeExecFast(body)
		}
	case fr.fastCalls:
		m, ok = decodeCall(body, own, &fr.lastName)
	}
	if !ok {
		m = new(wireMsg)
		if err := json.Unmarshal(body, m); err != nil {
			return nil, invalidf("malformed JSON: %v", err)
		}
	}
	return m, nil
}

// validateFromWorker checks the shape of a message a worker sent: a known
// type with the fields that type needs. Whether it fits the execution in
// progress is checked by the execution loop.
func validateFromWorker(m *wireMsg) error {
	switch m.T {
	case msgReady:
		if m.V != protocolVersion {
			return invalidf("ready: protocol version %d, want %d", m.V, protocolVersion)
		}
		if b := buildIdentity(); !sameBuild(b, m.Build) {
			return invalidf("ready: the worker program is another build (%.120q) than the gateway (%q): build it from the same version", m.Build, b)
		}
	case msgCall:
		if m.ID == 0 || m.Call == 0 {
			return invalidf("call: missing execution or call number")
		}
		if err := validToolName(m.Name); err != nil {
			return err
		}
		if m.Oversize {
			if len(m.Input) != 0 {
				return invalidf("call: input with the oversize mark")
			}
			break
		}
		if len(m.Input) == 0 {
			return invalidf("call: missing input")
		}
		if !m.checked && !json.Valid(m.Input) {
			return invalidf("call: input is not JSON")
		}
	case msgLookup:
		if m.ID == 0 || m.Call == 0 {
			return invalidf("lookup: missing execution or call number")
		}
		if err := validToolName(m.Name); err != nil {
			return err
		}
	case msgLog:
		if m.ID == 0 {
			return invalidf("log: missing execution")
		}
		switch m.Level {
		case "log", "info", "warn", "error", "debug":
		default:
			return invalidf("log: unknown level %.*q", maxLogLevelBytes, m.Level)
		}
	case msgWait:
		if m.ID == 0 {
			return invalidf("wait: missing execution")
		}
	case msgDone:
		if m.ID == 0 || m.Done == nil {
			return invalidf("done: missing execution or body")
		}
		return validateDone(m.Done)
	default:
		return invalidf("unknown message type %.32q", m.T)
	}
	return nil
}

func validToolName(name string) error {
	if name == "" {
		return invalidf("empty tool name")
	}
	if len(name) > maxToolNameBytes {
		return invalidf("tool name of %d bytes exceeds %d", len(name), maxToolNameBytes)
	}
	return nil
}

// validateDone checks a worker's final report.
func validateDone(d *wireDone) error {
	if (d.Result == nil) == (d.Err == nil) {
		return invalidf("done: exactly one of result and err must be set")
	}
	if d.Err != nil {
		switch d.Err.Code {
		case "":
			return invalidf("done: engine error without a code")
		}
		return nil
	}
	r := d.Result
	switch r.Status {
	case StatusOK:
		if r.Error != nil {
			return invalidf("done: status ok with an error")
		}
		if len(r.Result) == 0 {
			return invalidf("done: status ok without a result")
		}
		if !json.Valid(r.Result) {
			return invalidf("done: result is not JSON")
		}
	case StatusSyntaxError, StatusIllegalAccess, StatusRuntimeError, StatusToolError, StatusTimeout:
		if r.Error == nil || r.Error.Code == "" {
			return invalidf("done: status %s without an error code", r.Status)
		}
		if len(r.Result) != 0 {
			return invalidf("done: status %s with a result", r.Status)
		}
	default:
		return invalidf("done: unknown status %.32q", r.Status)
	}
	if d.Stats.DurationNS < 0 || d.Stats.ToolCalls < 0 || d.Stats.Steps < 0 {
		return invalidf("done: negative stats")
	}
	return nil
}
