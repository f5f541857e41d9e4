package caddymodules

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/codemode-gateway/caddy-codemode/internal/jsonbound"
)

func init() {
	caddycmd.RegisterCommand(caddycmd.Command{
		Name:  "codemode-mcp-stdio",
		Usage: "--config <path> [--adapter <name>]",
		Short: "Serves the codemode meta-tools over MCP stdio",
		Long: `
Serves meta:search, meta:describe, meta:execute and meta:invoke over MCP on
standard input and output, for MCP clients that launch their servers (desktop
agents, IDEs). It reads the same Caddyfile or JSON config as 'caddy run' and
runs only its codemode app: the HTTP servers, the admin endpoint and every
other app are left out, so it can run beside a gateway started from the same
file. Logs go to standard error. It exits when standard input closes, once
the requests read before have been answered (for 10 seconds at most).
`,
		CobraFunc: func(cmd *cobra.Command) {
			cmd.Flags().StringP("config", "c", "", "Configuration file (Caddyfile or JSON)")
			cmd.Flags().StringP("adapter", "a", "", "Name of config adapter to apply")
			cmd.RunE = caddycmd.WrapCommandFuncForCobra(cmdMCPStdio)
		},
	})
}

func cmdMCPStdio(fl caddycmd.Flags) (int, error) {
	raw, _, _, err := caddycmd.LoadConfig(fl.String("config"), fl.String("adapter"))
	if err != nil {
		return caddy.ExitCodeFailedStartup, err
	}
	if len(raw) == 0 {
		return caddy.ExitCodeFailedStartup, errors.New("codemode-mcp-stdio: --config is required")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := serveMCPStdio(ctx, raw, &checkedStdio{in: os.Stdin, out: os.Stdout}); err != nil {
		return caddy.ExitCodeFailedStartup, err
	}
	return caddy.ExitCodeSuccess, nil
}

// codemodeOnlyConfig keeps, of a full Caddy JSON config, what the codemode
// app needs (the app itself, the pki app, storage and logging, its logs
// kept off standard output), disables the admin endpoint and the autosave
// of the config (which would overwrite the one of a gateway running from
// the same file).
func codemodeOnlyConfig(raw []byte) ([]byte, error) {
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, fmt.Errorf("decoding config: %w", err)
	}
	var apps map[string]json.RawMessage
	if a, ok := cfg["apps"]; ok {
		if err := json.Unmarshal(a, &apps); err != nil {
			return nil, fmt.Errorf("decoding apps: %w", err)
		}
	}
	code, ok := apps["codemode"]
	if !ok {
		code = json.RawMessage(`{}`)
	}
	keep := map[string]json.RawMessage{"codemode": code}
	// The pki app holds certificate authorities only (it listens on
	// nothing); the codemode app may trust one of them (auth
	// client_id_metadata's trust_pool pki_root).
	if pki, ok := apps["pki"]; ok {
		keep["pki"] = pki
	}
	out := map[string]any{
		"admin": map[string]any{"disabled": true, "config": map[string]any{"persist": false}},
		"apps":  keep,
	}
	if v, ok := cfg["storage"]; ok {
		out["storage"] = v
	}
	if v, ok := cfg["logging"]; ok {
		logging, err := logsOffStdout(v)
		if err != nil {
			return nil, err
		}
		out["logging"] = logging
	}
	return json.Marshal(out)
}

// logsOffStdout turns every log writer of a logging config that writes to
// standard output (`log { output stdout }`, usual in containers) to
// standard error: over stdio, standard output is the MCP channel and
// carries nothing but messages.
func logsOffStdout(raw json.RawMessage) (json.RawMessage, error) {
	var logging map[string]any
	if err := json.Unmarshal(raw, &logging); err != nil {
		return nil, fmt.Errorf("decoding logging: %w", err)
	}
	toStderr := func(v any) {
		if m, ok := v.(map[string]any); ok {
			if w, ok := m["writer"].(map[string]any); ok && (w["output"] == "stdout" ||
				w["output"] == "file" && (w["filename"] == "/dev/stdout" || w["filename"] == "/proc/self/fd/1")) {
				m["writer"] = map[string]any{"output": "stderr"}
			}
		}
	}
	toStderr(logging["sink"])
	if logs, ok := logging["logs"].(map[string]any); ok {
		for _, l := range logs {
			toStderr(l)
		}
	}
	return json.Marshal(logging)
}

// serveMCPStdio runs the codemode app of the config and serves its
// meta-tools on t until the client disconnects or ctx ends.
func serveMCPStdio(ctx context.Context, raw []byte, t mcp.Transport) error {
	cfg, err := codemodeOnlyConfig(raw)
	if err != nil {
		return err
	}
	if err := caddy.Load(cfg, true); err != nil {
		return fmt.Errorf("running the codemode app: %w", err)
	}
	defer caddy.Stop()
	v, err := caddy.ActiveContext().App("codemode")
	if err != nil {
		return fmt.Errorf("codemode app: %w", err)
	}
	srv := v.(*App).MetaServer()
	if srv == nil {
		return errors.New("codemode app: the meta-tools are not provisioned")
	}
	if cs, ok := t.(*checkedStdio); ok && cs.logger == nil {
		cs.logger = caddy.Log().Named("codemode.mcp")
	}
	if err := srv.Run(ctx, t); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("serving MCP on stdio: %w", err)
	}
	return nil
}

// checkedStdio is the go-sdk's stdio transport behind a line check. The
// go-sdk ends the whole session at the first line that is not a JSON-RPC
// message (and the command exits); a stdio server answers it instead, as
// JSON-RPC says: -32700 for a line that is not JSON, -32600 for JSON that is
// no message or a line over maxStdioLine, and it reads on. Lines are the
// messages: the MCP stdio transport forbids newlines inside one.
type checkedStdio struct {
	in  io.Reader
	out io.Writer
	// maxLine is the longest message line read; 0 is the go-sdk's own
	// bound, mcp.DefaultMaxLineLength.
	maxLine int
	// logger gets the responses of cancelled requests left out (debug).
	logger *zap.Logger
}

// Connect implements mcp.Transport: the go-sdk reads the lines that pass
// the check from a pipe; both write to out through one lock, a message per
// write.
func (t *checkedStdio) Connect(ctx context.Context) (mcp.Connection, error) {
	pr, pw := io.Pipe()
	out := &lockedWriter{w: t.out}
	max := t.maxLine
	if max <= 0 {
		max = mcp.DefaultMaxLineLength
	}
	calls := newStdioCalls(t.logger)
	go checkLines(t.in, pw, out, max, calls)
	conn, err := (&mcp.IOTransport{Reader: pr, Writer: strippedWriter{out, calls}}).Connect(ctx)
	if err != nil {
		return nil, err
	}
	return codedErrors{conn, calls}, nil
}

// codedErrors gives every error response a JSON-RPC code. The go-sdk
// answers some requests with a plain Go error, which goes on the wire
// with code 0, a code JSON-RPC does not define: a call before initialize
// ("method ... is invalid during session initialization") and a second
// initialize are Invalid Requests (-32600, as the HTTP transport answers
// them), anything else an
// internal error (-32603) keeping its message; a message naming the
// go-sdk's Go types is put in MCP's words (plainErrorMessage, as over
// HTTP). It also leaves out the
// response of a request the client cancelled (mcp_cancel.go).
type codedErrors struct {
	mcp.Connection
	calls *stdioCalls
}

func (c codedErrors) Write(ctx context.Context, msg jsonrpc.Message) error {
	if r, ok := msg.(*jsonrpc.Response); ok && c.calls.answered(r.ID) {
		return nil
	}
	if r, ok := msg.(*jsonrpc.Response); ok && r.Error != nil {
		var wire *jsonrpc.Error
		if !errors.As(r.Error, &wire) || wire.Code == 0 {
			code := int64(rpcInternalError)
			if msg := r.Error.Error(); strings.Contains(msg, "during session initialization") ||
				strings.HasPrefix(msg, `duplicate "initialize"`) {
				code = rpcInvalidRequest
			}
			coded := *r
			coded.Error = &jsonrpc.Error{Code: code, Message: r.Error.Error()}
			msg = &coded
		} else if plain, ok := plainErrorMessage(wire.Code, r.Error.Error()); ok {
			coded := *r
			coded.Error = &jsonrpc.Error{Code: wire.Code, Message: plain}
			msg = &coded
		}
	}
	return c.Connection.Write(ctx, msg)
}

// stdioEOFGrace bounds how long the requests read before standard input
// closed may take to be answered before the session ends (the default
// drain_timeout of a stopping gateway).
const stdioEOFGrace = 10 * time.Second

// checkLines copies in's message lines to pass and answers the others on
// out, until in ends (pass then ends too) or the session stops reading.
// The requests it passes, and their cancellations, go to calls first.
func checkLines(in io.Reader, pass *io.PipeWriter, out io.Writer, maxLine int, calls *stdioCalls) {
	br := bufio.NewReaderSize(in, 64<<10)
	var line []byte
	tooLong := false
	for {
		chunk, err := br.ReadSlice('\n')
		if len(line)+len(chunk) > maxLine+1 { // the newline is no part of it
			tooLong = true
		} else if !tooLong {
			line = append(line, chunk...)
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		msg := bytes.TrimSpace(line)
		var reply []byte
		var excess *jsonbound.Excess
		if !tooLong {
			excess = jsonbound.Check(msg, jsonbound.Request)
		}
		switch {
		case tooLong:
			reply = rpcError(nil, rpcInvalidRequest, fmt.Sprintf("Invalid Request: a message line is longer than %d bytes", maxLine))
		case len(msg) == 0:
		case excess != nil:
			// As over HTTP (refuseLargeBody), before anything decodes it.
			reply = rpcError(requestID(msg), rpcInvalidParams, "invalid params: "+excess.Error())
		default:
			// A message is decoded here and again by the go-sdk; only a
			// line that fails is scanned once more, for its error code.
			msgs, batch, bad := decodeLine(msg)
			if bad != nil {
				if !json.Valid(msg) {
					reply = rpcError(nil, rpcParseError, "Parse error: the line is not JSON")
				} else {
					reply = rpcError(requestID(msg), rpcInvalidRequest, invalidMessage(msg, bad.Error()))
				}
				break
			}
			if requestsWithBadID(msg) {
				reply = rpcError(nil, rpcInvalidRequest, badIDMessage)
				break
			}
			if batch {
				if heads, _, _ := readHeads(msg); initializeInBatch(heads) {
					reply = rpcError(nil, rpcInvalidRequest, batchedInitializeMessage)
					break
				}
			}
			if id, problem := initializeProblem(msg); problem != "" {
				reply = rpcError(id, rpcInvalidParams, "invalid params: initialize: "+problem)
				break
			}
			calls.read(msgs, batch)
			lines := [][]byte{msg}
			if batch {
				lines = stdioBatchLines(msg, msgs)
			}
			for _, l := range lines {
				if _, werr := pass.Write(append(l, '\n')); werr != nil {
					return // the session ended
				}
			}
		}
		if reply != nil {
			if _, werr := out.Write(reply); werr != nil {
				pass.CloseWithError(werr)
				return
			}
		}
		line, tooLong = line[:0], false
		if err != nil {
			if err == io.EOF {
				// The go-sdk ends the session at the end of its input,
				// answered or not: the requests already read are answered
				// first (`printf … | caddy codemode-mcp-stdio` lost them).
				calls.settle(stdioEOFGrace)
				err = nil
			}
			pass.CloseWithError(err)
			return
		}
	}
}

// stdioBatchLines are the lines the go-sdk reads for msg, a batch of
// msgs: its notifications of methods the go-sdk handles each alone (those
// before the batch's first request or response first, the others after
// it), those of other methods left out, and the rest as a batch. JSON-RPC
// answers no notification and ignores one the server does not know; the
// go-sdk's stdio transport waited for an answer to every message of a
// batch, a notification's included, and so never answered a batch that
// held one (TestMCPStdioAnswersBadLines).
func stdioBatchLines(msg []byte, msgs []jsonrpc.Message) [][]byte {
	notification := func(m jsonrpc.Message) bool {
		req, ok := m.(*jsonrpc.Request)
		return ok && !req.IsCall()
	}
	var raws []json.RawMessage
	if !slices.ContainsFunc(msgs, notification) || json.Unmarshal(msg, &raws) != nil || len(raws) != len(msgs) {
		return [][]byte{msg}
	}
	var before, after [][]byte
	rest := []byte{'['}
	for i, m := range msgs {
		if !notification(m) {
			if len(rest) > 1 {
				rest = append(rest, ',')
			}
			rest = append(rest, raws[i]...)
		} else if sdkNotifications[m.(*jsonrpc.Request).Method] && len(rest) == 1 {
			before = append(before, raws[i])
		} else if sdkNotifications[m.(*jsonrpc.Request).Method] {
			after = append(after, raws[i])
		}
	}
	if len(rest) > 1 {
		before = append(before, append(rest, ']'))
	}
	return append(before, after...)
}

// initializeProblem is the id of msg and what is wrong with its params
// when msg is an initialize whose params the go-sdk cannot decode (it
// answered code 0, naming its Go types), else "".
func initializeProblem(msg []byte) (json.RawMessage, string) {
	if !bytes.Contains(msg, []byte(`"initialize"`)) {
		return nil, ""
	}
	m, ok := parseJSONRPC(msg)
	if !ok || m.Method != "initialize" || len(m.ID) == 0 || len(m.Params) == 0 {
		return nil, ""
	}
	if !isJSONObjectRaw(m.Params) {
		return m.ID, "params must be an object"
	}
	return m.ID, initializeParamsProblem(m.Params)
}

// decodeLine decodes msg's JSON-RPC message or batch of messages, or
// says why it is none (not JSON included).
func decodeLine(msg []byte) (msgs []jsonrpc.Message, batch bool, err error) {
	if msg[0] != '[' {
		m, err := jsonrpc.DecodeMessage(msg)
		return []jsonrpc.Message{m}, false, err
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(msg, &raws); err != nil || len(raws) == 0 {
		return nil, true, errors.New("empty batch")
	}
	for _, raw := range raws {
		m, err := jsonrpc.DecodeMessage(raw)
		if err != nil {
			return nil, true, err
		}
		msgs = append(msgs, m)
	}
	return msgs, true, nil
}

// requestID is msg's id when it is a string or a number, or nil.
func requestID(msg []byte) json.RawMessage {
	var m struct {
		ID json.RawMessage `json:"id"`
	}
	if json.Unmarshal(msg, &m) != nil || len(m.ID) == 0 {
		return nil
	}
	if c := m.ID[0]; c == '"' || c == '-' || (c >= '0' && c <= '9') {
		return m.ID
	}
	return nil
}

// rpcError is a JSON-RPC error response line (id null when id is nil).
func rpcError(id json.RawMessage, code int64, message string) []byte {
	b, _ := json.Marshal(jsonrpcError(id, code, message, nil))
	return append(b, '\n')
}

// lockedWriter serializes writes to w; Close leaves w open (standard output
// is the process's, closed when it exits).
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (l *lockedWriter) Close() error { return nil }
