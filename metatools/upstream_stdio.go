package metatools

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"
)

// stdioStopGrace is how long closing a stdio upstream waits for the process
// to exit after closing its stdin, and again after SIGTERM, before the next
// step (the MCP stdio lifecycle; the go-sdk's CommandTransport waits as
// long).
var stdioStopGrace = 5 * time.Second

const (
	// stdioExitDrain is how long a stdio upstream's stdout and stderr are
	// still read once the process has exited: what it wrote before
	// exiting is read, and a process it left behind holding the pipes
	// cannot keep the connection open.
	stdioExitDrain = time.Second
	// stdioGroupPoll is how often Close looks whether the processes a
	// server left in its group have ended.
	stdioGroupPoll = 50 * time.Millisecond
	// stderrPiece bounds one log entry of an upstream's stderr: a longer
	// line is logged in pieces.
	stderrPiece = 4 << 10
	// stderrPiecesPerSecond bounds how many pieces are logged a second;
	// the rest are counted, and the count logged.
	stderrPiecesPerSecond = 50
)

// stdioTransport runs an upstream MCP server by command and speaks
// newline-delimited JSON-RPC over its stdin and stdout, as the go-sdk's
// CommandTransport does, with bounds a hostile or broken server cannot
// pass: a message line over max bytes fails the connection (the call it
// answers gets RESPONSE_TOO_LARGE) and is never held whole, where the
// go-sdk's json.Decoder buffered it; stderr is drained and logged in
// bounded pieces, where the go-sdk sent it to /dev/null; a write to a
// server that stopped reading ends with its call's context. Close follows
// the stdio lifecycle: close stdin, wait, SIGTERM, wait, SIGKILL (to the
// server's process group on Linux, waiting for the group); the
// process is reaped and no goroutine is left.
type stdioTransport struct {
	cmd    *exec.Cmd // env and working directory as configured
	logger *zap.Logger
	max    int           // bytes of one message line, newline excluded
	grace  time.Duration // each wait of Close
}

// errStdioLineTooLarge is the read error of a connection whose upstream
// sent a line over the bound.
var errStdioLineTooLarge = errors.New("upstream message line over the bound")

func (t *stdioTransport) Connect(context.Context) (mcp.Connection, error) {
	// The process outlives Connect's context (the connect deadline): it
	// ends with Close. Pipes of our own, so that no exec goroutine copies
	// and Close can end the reads whoever holds the other end.
	var files []*os.File
	pipe := func() (r, w *os.File, err error) {
		if r, w, err = os.Pipe(); err == nil {
			files = append(files, r, w)
		}
		return r, w, err
	}
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	inR, inW, err := pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := pipe()
	if err != nil {
		closeAll()
		return nil, err
	}
	errR, errW, err := pipe()
	if err != nil {
		closeAll()
		return nil, err
	}
	t.cmd.Stdin, t.cmd.Stdout, t.cmd.Stderr = inR, outW, errW
	t.cmd.SysProcAttr = stdioSysProcAttr() // its own process group, which Close signals
	if err := t.cmd.Start(); err != nil {
		closeAll()
		return nil, err
	}
	inR.Close()
	outW.Close()
	errW.Close()
	c := &stdioConn{
		cmd: t.cmd, logger: t.logger, max: t.max, grace: t.grace,
		stdin: inW, stdout: outR, stderr: errR,
		incoming: make(chan jsonrpc.Message),
		failed:   make(chan struct{}),
		closing:  make(chan struct{}),
		exited:   make(chan struct{}),
		pending:  map[jsonrpc.ID]*answerCap{},
	}
	c.readers.Add(2)
	go c.readStdout()
	go c.readStderr()
	go c.wait()
	return c, nil
}

// stdioConn is the mcp.Connection of a stdioTransport.
type stdioConn struct {
	cmd    *exec.Cmd
	logger *zap.Logger
	max    int
	grace  time.Duration

	stdin, stdout, stderr *os.File

	incoming chan jsonrpc.Message
	failed   chan struct{} // readStdout ended; readErr says why
	readErr  error
	closing  chan struct{} // Close began
	exited   chan struct{} // the process was reaped
	readers  sync.WaitGroup

	writeMu     sync.Mutex
	writeBroken bool // a message was written in part

	pendingMu sync.Mutex
	pending   map[jsonrpc.ID]*answerCap // calls in flight that learn of a cut answer

	closeOnce sync.Once
	closeErr  error
}

func (c *stdioConn) SessionID() string { return "" }

func (c *stdioConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case m := <-c.incoming:
		return m, nil
	case <-c.failed:
		return nil, c.readErr
	case <-c.closing:
		return nil, io.EOF
	}
}

func (c *stdioConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	data, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return fmt.Errorf("encoding a message: %w", err)
	}
	data = append(data, '\n')
	if req, ok := msg.(*jsonrpc.Request); ok && req.IsCall() {
		if ac, _ := ctx.Value(answerCapKey{}).(*answerCap); ac != nil {
			c.pendingMu.Lock()
			c.pending[req.ID] = ac
			c.pendingMu.Unlock()
			context.AfterFunc(ctx, func() {
				c.pendingMu.Lock()
				if c.pending[req.ID] == ac {
					delete(c.pending, req.ID)
				}
				c.pendingMu.Unlock()
			})
		}
	}
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	if c.writeBroken {
		return errors.New("writing to upstream: an earlier message was cut short")
	}
	// A server that stops reading fills the pipe: the write then ends
	// with its context instead of blocking the call past its deadline.
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		c.stdin.SetWriteDeadline(time.Now())
		close(fired)
	})
	n, err := c.stdin.Write(data)
	if !stop() {
		<-fired
		c.stdin.SetWriteDeadline(time.Time{})
	}
	if err != nil {
		if n > 0 {
			// Half a message is on the wire: the stream is lost.
			c.writeBroken = true
			c.stdin.Close()
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("writing to upstream: %w", err)
	}
	return nil
}

// readStdout reads message lines until the stream ends, a line is over the
// bound or is no JSON-RPC message, or Close.
func (c *stdioConn) readStdout() {
	defer c.readers.Done()
	err := c.readLines()
	switch {
	case errors.Is(err, errStdioLineTooLarge):
		// The process writing it gets EPIPE (SIGPIPE) at once; Close,
		// which the session calls after a failed read, stops it.
		c.stdout.Close()
	case err != io.EOF:
		c.logger.Warn("reading upstream MCP server's stdout failed; closing the connection", zap.Error(err))
	}
	c.readErr = err
	close(c.failed)
}

func (c *stdioConn) readLines() error {
	br := bufio.NewReaderSize(c.stdout, 64<<10)
	var line []byte // a line longer than br's buffer
	for {
		chunk, err := br.ReadSlice('\n')
		if len(line)+len(chunk) > c.max+1 { // the newline is no part of it
			if len(line) == 0 {
				line = chunk
			}
			return c.tooLarge(line)
		}
		if err == bufio.ErrBufferFull {
			line = appendLine(line, chunk, c.max+1)
			continue
		}
		if line != nil {
			chunk = appendLine(line, chunk, c.max+1)
			line = nil
		}
		if derr := c.deliver(chunk); derr != nil {
			return derr
		}
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, os.ErrClosed) {
				err = io.EOF // the process exited (c.wait) or Close
			}
			return err
		}
	}
}

// appendLine appends chunk to line, doubling line's capacity up to limit:
// a line of the bound allocates about twice the bound (append's growth of
// a quarter allocated six times it).
func appendLine(line, chunk []byte, limit int) []byte {
	if need := len(line) + len(chunk); need > cap(line) {
		grown := make([]byte, len(line), max(min(2*cap(line), limit), need))
		copy(grown, line)
		line = grown
	}
	return append(line, chunk...)
}

// tooLarge logs a line over the bound, marks the call it answers, and
// drops it. head is the start of the line.
func (c *stdioConn) tooLarge(head []byte) error {
	head = head[:min(len(head), 64<<10)]
	id, known := lineID(head)
	c.pendingMu.Lock()
	if ac := c.pending[id]; known && ac != nil {
		ac.exceeded.Store(true)
	} else if !known {
		// Whichever call it answers, each waiting call ends with it.
		for _, ac := range c.pending {
			ac.exceeded.Store(true)
		}
	}
	c.pendingMu.Unlock()
	fields := []zap.Field{zap.Int("max_bytes", c.max), zap.Int("pid", c.cmd.Process.Pid)}
	if known {
		fields = append(fields, zap.Any("id", id.Raw()))
	}
	c.logger.Warn("upstream MCP server wrote a message line over the bound (RESPONSE_TOO_LARGE); stopping it", fields...)
	return fmt.Errorf("%w of %d bytes", errStdioLineTooLarge, c.max)
}

// lineID is the id of the JSON-RPC message that head starts, when head
// holds it (the go-sdk and most servers write "id" first).
func lineID(head []byte) (jsonrpc.ID, bool) {
	dec := json.NewDecoder(bytes.NewReader(head))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return jsonrpc.ID{}, false
	}
	for {
		key, err := dec.Token()
		if err != nil {
			return jsonrpc.ID{}, false
		}
		if key == "id" {
			v, err := dec.Token()
			if err != nil {
				return jsonrpc.ID{}, false
			}
			id, err := jsonrpc.MakeID(v)
			return id, err == nil && id.IsValid()
		}
		// Skip the value, however deep.
		for depth := 0; ; {
			t, err := dec.Token()
			if err != nil {
				return jsonrpc.ID{}, false
			}
			switch t {
			case json.Delim('{'), json.Delim('['):
				depth++
			case json.Delim('}'), json.Delim(']'):
				depth--
			}
			if depth == 0 {
				break
			}
		}
	}
}

// deliver decodes a line (a message, or a batch of them) and hands it to
// Read; a blank line is skipped.
func (c *stdioConn) deliver(line []byte) error {
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return nil
	}
	raws := []json.RawMessage{line}
	if line[0] == '[' {
		raws = nil
		if err := json.Unmarshal(line, &raws); err != nil {
			return fmt.Errorf("upstream sent a batch that is not JSON: %w", err)
		}
	}
	for _, raw := range raws {
		msg, err := jsonrpc.DecodeMessage(raw)
		if err != nil {
			return fmt.Errorf("upstream sent a line that is no JSON-RPC message: %w", err)
		}
		select {
		case c.incoming <- msg:
		case <-c.closing:
			return io.EOF
		}
	}
	return nil
}

// readStderr logs the server's stderr in pieces of at most stderrPiece
// bytes, at most stderrPiecesPerSecond a second, until it ends; the child
// never blocks on it.
func (c *stdioConn) readStderr() {
	defer c.readers.Done()
	br := bufio.NewReaderSize(c.stderr, stderrPiece)
	var window time.Time
	logged, dropped := 0, 0
	reportDropped := func() {
		if dropped > 0 {
			c.logger.Info("upstream MCP server stderr: pieces not logged (over the rate)", zap.Int("pieces", dropped))
		}
		logged, dropped = 0, 0
	}
	for {
		piece, err := br.ReadSlice('\n')
		if len(bytes.TrimSpace(piece)) > 0 {
			if now := time.Now(); now.Sub(window) >= time.Second {
				reportDropped()
				window = now
			}
			if logged < stderrPiecesPerSecond {
				if ce := c.logger.Check(zap.InfoLevel, "upstream MCP server stderr"); ce != nil {
					ce.Write(zap.ByteString("line", bytes.TrimRight(piece, "\r\n")))
				}
				logged++
			} else {
				dropped++
			}
		}
		if err != nil && err != bufio.ErrBufferFull {
			reportDropped()
			return
		}
	}
}

// wait reaps the process, then gives its pipes stdioExitDrain to be read
// to their end.
func (c *stdioConn) wait() {
	c.cmd.Wait()
	close(c.exited)
	end := time.Now().Add(stdioExitDrain)
	c.stdout.SetReadDeadline(end)
	c.stderr.SetReadDeadline(end)
}

// Close ends the process as the MCP stdio lifecycle says (close stdin,
// wait; SIGTERM, wait; SIGKILL), reaps it and ends the connection's
// goroutines. The signals go to the server's process group and the waits
// are for the group (on Linux): what the server started ends with it.
func (c *stdioConn) Close() error {
	c.closeOnce.Do(func() {
		close(c.closing)
		c.stdin.Close()
		c.closeErr = c.stop()
		c.stdout.Close()
		c.stderr.Close()
		c.readers.Wait()
	})
	return c.closeErr
}

func (c *stdioConn) stop() error {
	pid := c.cmd.Process.Pid
	if c.ended() {
		return nil
	}
	c.warnStop("its stdin closed", "SIGTERM")
	signalStdioServer(c.cmd.Process, syscall.SIGTERM) // an error: nothing left to signal, which ended sees
	if c.ended() {
		return nil
	}
	c.warnStop("SIGTERM", "SIGKILL")
	signalStdioServer(c.cmd.Process, syscall.SIGKILL)
	if c.ended() {
		return nil
	}
	if left := stdioGroupLeft(pid); len(left) > 0 {
		return fmt.Errorf("upstream MCP server (pid %d) left processes %v after SIGKILL", pid, left)
	}
	return fmt.Errorf("upstream MCP server (pid %d) did not exit after SIGKILL", pid)
}

// ended waits up to a grace for the server to end: the process reaped and
// no process left in its group (where the system tells).
func (c *stdioConn) ended() bool {
	t := time.NewTimer(c.grace)
	defer t.Stop()
	select {
	case <-c.exited:
	case <-t.C:
		return false
	}
	tick := time.NewTicker(stdioGroupPoll)
	defer tick.Stop()
	for len(stdioGroupLeft(c.cmd.Process.Pid)) > 0 {
		select {
		case <-tick.C:
		case <-t.C:
			return len(stdioGroupLeft(c.cmd.Process.Pid)) == 0
		}
	}
	return true
}

// warnStop logs that Close sends signal to the server's group since it is
// still there after what: the server itself, or (once it has exited) the
// processes it left in its group.
func (c *stdioConn) warnStop(after, signal string) {
	pid := c.cmd.Process.Pid
	fields := []zap.Field{zap.Int("pid", pid), zap.Duration("grace", c.grace)}
	select {
	case <-c.exited:
		fields = append(fields, zap.Ints("left_in_group", stdioGroupLeft(pid)))
		c.logger.Warn("upstream MCP server exited, processes it started did not after "+after+"; sending "+signal+" to its group", fields...)
	default:
		c.logger.Warn("upstream MCP server did not exit after "+after+"; sending "+signal, fields...)
	}
}

var _ mcp.Transport = (*stdioTransport)(nil)
