package metatools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codemode-gateway/caddy-codemode/broker"
	"github.com/codemode-gateway/caddy-codemode/broker/catalog"
	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"
	"github.com/codemode-gateway/caddy-codemode/internal/clip"
	"github.com/codemode-gateway/caddy-codemode/internal/tool"
)

// DefaultListTTL is the longest freshness (ttlMs) a tools/list or
// server/discover result is given; see ServerOptions.ListTTL.
const DefaultListTTL = 5 * time.Minute

// MetaKeyToolIndexVersion is the _meta key of a tools/list result that
// carries Index.Version, the version of the tools behind the meta-tools.
const MetaKeyToolIndexVersion = "codemode/toolIndexVersion"

// ServerOptions configure the MCP server; nil means defaults.
type ServerOptions struct {
	// Name and Version identify the server in initialize; defaults
	// "codemode-meta-tools" and "v1".
	Name, Version string
	// Logger receives the SDK's own log records; nil discards them. (The
	// SDK logs a warning for the spec names, whose ':' SEP-986 does not
	// allow; NamingSafe avoids it.)
	Logger *slog.Logger
	// ProtocolVersions are the MCP revisions offered; empty means every
	// revision the go-sdk speaks (mcp.SupportedProtocolVersions). A
	// request for another revision gets the protocol's
	// UnsupportedProtocolVersion answer.
	ProtocolVersions []string
	// ListTTL bounds the freshness given to tools/list and server/discover
	// results (ttlMs, revision 2026-07-28). Default DefaultListTTL.
	ListTTL time.Duration
	// Now is the clock of the freshness computation; nil means time.Now.
	Now func() time.Time
}

// ValidateProtocolVersions checks a list of MCP revisions against those the
// go-sdk speaks.
func ValidateProtocolVersions(versions []string) error {
	known := mcp.SupportedProtocolVersions()
	for _, v := range versions {
		if !slices.Contains(known, v) {
			return fmt.Errorf("MCP protocol version %q is not supported (known: %s)", v, strings.Join(known, ", "))
		}
	}
	return nil
}

// listTTL is the freshness of the meta-tool list: a tenth of the time since
// the tool index last changed (the heuristic freshness of HTTP caching,
// RFC 9111 section 4.2.2), at most max. The four meta-tools change only
// with the configuration, which also builds a new index, so the list is
// re-fetched soon after the gateway's tool set or configuration changed and
// rarely while both are stable.
func listTTL(ix *Index, now time.Time, ceiling time.Duration) time.Duration {
	age := now.Sub(ix.ChangedAt())
	return min(max(age/10, 0), ceiling)
}

// NewServer returns an MCP server exposing the service's four meta-tools.
// One server serves any number of sessions; hand it to
// mcp.NewStreamableHTTPHandler or run it on mcp.StdioTransport.
func NewServer(s *Service, opts *ServerOptions) *mcp.Server {
	o := ServerOptions{Name: "codemode-meta-tools", Version: "v1"}
	if opts != nil {
		if opts.Name != "" {
			o.Name = opts.Name
		}
		if opts.Version != "" {
			o.Version = opts.Version
		}
		o.Logger = opts.Logger
		o.ProtocolVersions = opts.ProtocolVersions
		o.ListTTL = opts.ListTTL
		o.Now = opts.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.ListTTL <= 0 {
		o.ListTTL = DefaultListTTL
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	n := s.opts.Naming
	srv := mcp.NewServer(&mcp.Implementation{Name: o.Name, Version: o.Version}, &mcp.ServerOptions{
		Logger:                    o.Logger,
		SupportedProtocolVersions: o.ProtocolVersions,
		Capabilities:              serverCapabilities(),
		// The meta-tools are the same for every caller: public.
		SetCacheable: func(_ context.Context, _ mcp.Request, c *mcp.Cacheable) {
			c.TTLMs = int(listTTL(s.index, o.Now(), o.ListTTL).Milliseconds())
			c.CacheScope = "public"
		},
		Instructions: fmt.Sprintf("Find tools with %s, read their signatures with %s, then call one with %s or orchestrate several in a JavaScript plan with %s (a plan can also search and describe tools itself).",
			n.ExposedName(MetaSearch), n.ExposedName(MetaDescribe), n.ExposedName(MetaInvoke), n.ExposedName(MetaExecute)),
	})
	readOnly := &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: new(false)}
	srv.AddTool(&mcp.Tool{
		Name:         n.ExposedName(MetaSearch),
		Title:        "Search tools",
		Description:  "Search the available tools by natural-language queries. Returns per tool its name, service (appId), a one-line description and a relevance score (0..1), the total number of tools and warnings. Filter by appIds, tags, readOnly, destructive.",
		InputSchema:  searchInputSchema,
		OutputSchema: searchOutputSchema,
		Annotations:  readOnly,
	}, s.observe(MetaSearch, s.handler(MetaSearch, func(ctx context.Context, args json.RawMessage) (any, error) {
		var in SearchInput
		if err := decodeArgs(MetaSearch, args, &in); err != nil {
			return nil, err
		}
		return s.Search(ctx, in)
	})))
	srv.AddTool(&mcp.Tool{
		Name:         n.ExposedName(MetaDescribe),
		Title:        "Describe tools",
		Description:  "Describe tools by name: a TypeScript signature of each tool's input and output, annotations and a JavaScript usage example; detail \"full\" adds the JSON Schemas and up to 5 examples. Unknown names (and meta-tools) are listed in notFound.",
		InputSchema:  describeInputSchema,
		OutputSchema: describeOutputSchema,
		Annotations:  readOnly,
	}, s.observe(MetaDescribe, s.handler(MetaDescribe, func(ctx context.Context, args json.RawMessage) (any, error) {
		var in DescribeInput
		if err := decodeArgs(MetaDescribe, args, &in); err != nil {
			return nil, err
		}
		return s.Describe(ctx, in)
	})))
	srv.AddTool(&mcp.Tool{
		Name:         n.ExposedName(MetaExecute),
		Title:        "Execute a plan",
		Description:  "Run a JavaScript plan (the body of an async function) in a restricted sandbox; it returns a value. A plan can find, inspect and call tools in one run. Statuses: ok, syntax_error, illegal_access, runtime_error, tool_error, timeout. Meta-tools cannot be called from a plan. Script API:\n" + ScriptAPI,
		InputSchema:  s.executeSchema,
		OutputSchema: executeOutputSchema,
		Annotations:  &mcp.ToolAnnotations{DestructiveHint: new(true), OpenWorldHint: new(true)},
	}, s.observe(MetaExecute, s.executeHandler()))
	srv.AddTool(&mcp.Tool{
		Name:        n.ExposedName(MetaInvoke),
		Title:       "Invoke a tool",
		Description: "Call a single tool directly with input (validated against its schema). Use it for one call with no data transformation; use the execute tool for several calls.",
		InputSchema: invokeInputSchema,
		// No OutputSchema: the result is the invoked tool's, whose schema
		// meta:describe returns. MCP wants an outputSchema of type object
		// and, once one is declared, structuredContent in every result
		// (the TypeScript SDK refuses a result without it), which a tool
		// answering text or an array cannot give.
		Annotations: &mcp.ToolAnnotations{DestructiveHint: new(true), OpenWorldHint: new(true)},
	}, s.observe(MetaInvoke, s.invokeHandler()))
	srv.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method == "logging/setLevel" {
				if err := checkLogLevel(req); err != nil {
					return nil, err
				}
			}
			if err := checkMetaLogLevel(method, req); err != nil {
				return nil, err
			}
			res, err := next(ctx, method, req)
			if ss, ok := req.GetSession().(*mcp.ServerSession); ok && method == "logging/setLevel" && err == nil {
				// Kept for the plans: which console lines to stream.
				s.levels.set(ss, req.GetParams().(*mcp.SetLoggingLevelParams).Level)
			}
			if lt, ok := res.(*mcp.ListToolsResult); ok && err == nil {
				if lt.Meta == nil {
					lt.Meta = mcp.Meta{}
				}
				lt.Meta[MetaKeyToolIndexVersion] = s.index.Version()
			}
			// Every meta-tool's answer reaches the client without the HTML
			// escaping the go-sdk's encoding of it adds.
			if cr, ok := res.(*mcp.CallToolResult); ok && err == nil {
				return unescapedResult{cr}, nil
			}
			return res, err
		}
	})
	return srv
}

// checkMetaLogLevel answers a request whose _meta names a log level
// (io.modelcontextprotocol/logLevel, revision 2026-07-28's per-request
// level) that is no level of MCP's with -32602 invalid params, as the
// revision says a server SHOULD; the go-sdk ignored it and served the
// request.
func checkMetaLogLevel(method string, req mcp.Request) error {
	if strings.HasPrefix(method, "notifications/") {
		return nil // nothing answers a notification
	}
	p := req.GetParams()
	if rv := reflect.ValueOf(p); !rv.IsValid() || rv.Kind() == reflect.Pointer && rv.IsNil() {
		return nil // a request without params (an older revision's)
	}
	v, ok := p.GetMeta()[mcp.MetaKeyLogLevel]
	if !ok {
		return nil
	}
	if level, _ := v.(string); slices.Contains(logLevels, mcp.LoggingLevel(level)) {
		return nil
	}
	raw, _ := json.Marshal(v)
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams,
		Message: fmt.Sprintf("invalid params: _meta %q is %s, not a logging level (want debug, info, notice, warning, error, critical, alert or emergency)", mcp.MetaKeyLogLevel, clip.String(string(raw), 64))}
}

// logLevels are the levels of logging/setLevel, MCP's LoggingLevel (the
// severities of RFC 5424).
var logLevels = []mcp.LoggingLevel{"debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"}

// checkLogLevel answers a logging/setLevel naming no level of MCP's with
// -32602 invalid params; the go-sdk stores any string as the session's
// level.
func checkLogLevel(req mcp.Request) error {
	p, _ := req.GetParams().(*mcp.SetLoggingLevelParams)
	if p == nil || !slices.Contains(logLevels, p.Level) {
		var level mcp.LoggingLevel
		if p != nil {
			level = p.Level
		}
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams,
			Message: fmt.Sprintf("invalid params: unknown logging level %q (want debug, info, notice, warning, error, critical, alert or emergency)", clip.String(string(level), 64))}
	}
	return nil
}

// serverCapabilities are the capabilities the server declares (initialize,
// server/discover): they say what it does. The four meta-tools never change
// while a server runs (a config change builds a new server), so the tool
// list is not announced as changing: a client would wait on a stream for
// notifications/tools/list_changed that never come. prompts/list and
// resources/list are answered (empty lists, by the go-sdk), so their
// capabilities are declared too: revision 2026-07-28 requires a server that
// answers prompts to declare them, and a client of any revision may skip an
// undeclared method.
func serverCapabilities() *mcp.ServerCapabilities {
	return &mcp.ServerCapabilities{
		Logging:   &mcp.LoggingCapabilities{},
		Tools:     &mcp.ToolCapabilities{},
		Prompts:   &mcp.PromptCapabilities{},
		Resources: &mcp.ResourceCapabilities{},
	}
}

// ScriptAPI is the script API as a compact TypeScript declaration, the form
// meta:describe gives tools in; the execute tool's description carries it.
const ScriptAPI = `declare function callTool(name: string, input?: object, options?: { throwOnError?: boolean }): Promise<any>; // throwOnError false: resolves to { success, data, error: { code, message } }
declare function searchTools(query: string, options?: { topK?: number; appIds?: string[]; tags?: string[]; readOnly?: boolean; destructive?: boolean; minRelevanceScore?: number }): Promise<{ name: string; appId: string; description: string; relevanceScore: number }[]>;
declare function describeTool(name: string): Promise<{ name: string; appId: string; description: string; signature: string; annotations: object; usageExamples: { description: string; code: string }[] } | null>;
declare function getTool(name: string): { name: string; description: string; signature: string; inputSchema: object; outputSchema?: object } | null;
declare function __safe_parallel<T>(fns: (() => Promise<T>)[], options?: { maxConcurrency?: number }): Promise<T[]>; // at most 100 functions, concurrency 10 (max 20)
declare const metaContext: object; // read-only
declare const console: { log(...a: any[]): void; warn(...a: any[]): void; error(...a: any[]): void }; // when enabled
// searchTools and describeTool count as tool calls against the plan's limits.`

// metaInputs are the input schemas of meta:search, meta:describe and
// meta:invoke, compiled on first use (never at package init: sandbox workers
// link this package too). meta:execute's depends on the service's script
// limit (Service.executeInput).
var metaInputs = sync.OnceValues(func() (map[string]*tool.Schema, error) {
	out := map[string]*tool.Schema{}
	for name, raw := range map[string]json.RawMessage{MetaSearch: searchInputSchema, MetaDescribe: describeInputSchema,
		MetaInvoke: invokeInputSchema} {
		s, err := tool.CompileSchema(raw)
		if err != nil {
			return nil, fmt.Errorf("%s input schema: %w", name, err)
		}
		out[name] = s
	}
	return out, nil
})

// decodeArgs checks the arguments of metaTool against its advertised input
// schema with the one tool-input validator (every fault named, undeclared
// fields refused, defaults applied), then decodes them into v.
func decodeArgs(metaTool string, args json.RawMessage, v any) error {
	schemas, err := metaInputs()
	if err != nil {
		return err
	}
	return decodeWith(metaTool, schemas[metaTool], args, v)
}

// decodeExecute is decodeArgs for meta:execute, against the service's
// schema of it.
func (s *Service) decodeExecute(args json.RawMessage, in *ExecuteInput) error {
	sch, err := s.executeInput()
	if err != nil {
		return err
	}
	return decodeWith(MetaExecute, sch, args, in)
}

func decodeWith(metaTool string, sch *tool.Schema, args json.RawMessage, v any) error {
	in, verr := sch.Validate(args, &tool.ValidateOptions{NoUnknown: true})
	if verr != nil {
		return verr
	}
	if err := json.Unmarshal(in, v); err != nil {
		return validationError("input", "arguments do not fit "+metaTool+": "+err.Error())
	}
	return nil
}

type callInfoKey struct{}

// CallInfoFrom returns the meta-tool call that ctx belongs to, for tool
// sources that partition limits by session or client.
func CallInfoFrom(ctx context.Context) (CallInfo, bool) {
	ci, ok := ctx.Value(callInfoKey{}).(CallInfo)
	return ci, ok
}

func callInfo(metaTool string, req *mcp.CallToolRequest) CallInfo {
	ci := CallInfo{MetaTool: metaTool}
	if req != nil {
		if req.Session != nil {
			ci.SessionID = req.Session.ID()
		}
		if req.Extra != nil {
			ci.Header = req.Extra.Header
			if ti := req.Extra.TokenInfo; ti != nil {
				ci.UserID = ti.UserID
			}
		}
		// The identity of the HTTP request (WithIdentity, HTTPHandler);
		// never a header a client could have set.
		if id, ok := identityOf(ci.Header); ok {
			ci.ClientIP, ci.ClientKey, ci.TenantID = id.ClientIP, id.ClientKey, id.TenantID
			if ci.UserID == "" {
				ci.UserID = id.UserID
			}
		}
	}
	return ci
}

func (s *Service) checkLimit(ctx context.Context, metaTool string, req *mcp.CallToolRequest) error {
	if s.opts.Limiter == nil {
		return nil
	}
	if err := s.opts.Limiter.Check(ctx, callInfo(metaTool, req)); err != nil {
		var me *Error
		if errors.As(err, &me) {
			return me
		}
		return &Error{Code: CodeRateLimit, Message: err.Error(), Transient: true}
	}
	return nil
}

// handler adapts a meta-tool function to an MCP tool handler: its value
// becomes structuredContent and a JSON text block; an *Error becomes an
// isError result.
func (s *Service) handler(metaTool string, fn func(context.Context, json.RawMessage) (any, error)) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if err := s.checkLimit(ctx, metaTool, req); err != nil {
			return errorResult(err), nil
		}
		ctx = context.WithValue(ctx, callInfoKey{}, callInfo(metaTool, req))
		out, err := fn(ctx, req.Params.Arguments)
		if err != nil {
			return errorResult(err), nil
		}
		return successResult(metaTool, out)
	}
}

// successResult is a meta-tool's output as structuredContent and the same
// JSON as text, encoded without HTML escaping (encodeJSON).
func successResult(metaTool string, out any) (*mcp.CallToolResult, error) {
	raw, err := encodeJSON(out)
	if err != nil {
		return nil, fmt.Errorf("encoding %s result: %w", metaTool, err)
	}
	return &mcp.CallToolResult{
		Content:           []mcp.Content{&mcp.TextContent{Text: string(raw)}},
		StructuredContent: json.RawMessage(raw),
	}, nil
}

// executeResult is meta:execute's success, held to the result bound as a
// client receives it (answerOverBound): a result whose structuredContent is
// larger ends the plan with runtime_error, as the sandbox ends one larger
// before encoding (its envelope, the logs, U+2028 escaped, add to it).
// docs/metatools.md, "What a client receives".
func (s *Service) executeResult(res *sandbox.Result) (*mcp.CallToolResult, error) {
	out, err := successResult(MetaExecute, res)
	if err != nil {
		return nil, err
	}
	if n, bound := s.answerOverBound(out, res.Status); n > 0 && res.Status == sandbox.StatusOK {
		return successResult(MetaExecute, &sandbox.Result{Status: sandbox.StatusRuntimeError, Logs: res.Logs, Error: &sandbox.ScriptError{
			Code: sandbox.CodeExecutionError, Source: "script", Name: "RangeError",
			Message: fmt.Sprintf("the script result is %d bytes of JSON as an MCP client receives it, more than the limit of %d bytes", n, bound),
		}})
	}
	return out, nil
}

// executeHandler is meta:execute. A plan's calls of tools only the caller
// can answer go to the MCP client (see caller.go): over multi round-trip
// requests, or over the session of an older revision.
func (s *Service) executeHandler() mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if err := s.checkLimit(ctx, MetaExecute, req); err != nil {
			return errorResult(err), nil
		}
		ci := callInfo(MetaExecute, req)
		ctx = context.WithValue(ctx, callInfoKey{}, ci)
		var in ExecuteInput
		if err := s.decodeExecute(req.Params.Arguments, &in); err != nil {
			return errorResult(err), nil
		}
		if s.usesPlanSessions(req) {
			return s.executeRounds(ctx, req, ci, in)
		}
		h := &host{s: s, ci: &ci, ask: sessionAsker(req), questions: callerQuestionsOf(req), progress: s.progressOf(ctx, req, ""), log: s.sessionLogger(ctx, req)}
		res, err := s.execute(ctx, in, h)
		h.progress.stop() // no notification after the result
		if err != nil {
			return errorResult(err), nil
		}
		return s.executeResult(res)
	}
}

// errorResult is the isError result of a failed meta-tool call. The text is
// the JSON {"error": {...}} so a model can read the code and field; _meta
// carries the same object under "codemode/error".
func errorResult(err error) *mcp.CallToolResult {
	var me *Error
	if !errors.As(err, &me) {
		me = newError(CodeToolExecutionError, err.Error())
	}
	raw, _ := encodeJSON(map[string]any{"error": me})
	return &mcp.CallToolResult{
		Content: []mcp.Content{&mcp.TextContent{Text: string(raw)}},
		IsError: true,
		Meta:    mcp.Meta{"codemode/error": me},
	}
}

// invokeHandler is meta:invoke: the tool's result as a standard call-tool
// result.
func (s *Service) invokeHandler() mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if err := s.checkLimit(ctx, MetaInvoke, req); err != nil {
			return errorResult(err), nil
		}
		ctx = context.WithValue(ctx, callInfoKey{}, callInfo(MetaInvoke, req))
		var in InvokeInput
		if err := decodeArgs(MetaInvoke, req.Params.Arguments, &in); err != nil {
			return errorResult(err), nil
		}
		if t, ok := s.index.Lookup(in.Tool); ok && t.CallerAnswered && usesMRTR(req) && validateInvoke(in) == nil {
			if verr := s.validateToolInput(in.Tool, in.Input); verr != nil {
				return errorResult(verr), nil
			}
			if !canElicit(req) {
				return nil, missingElicitation(fmt.Sprintf("%s is answered by the client, asked with elicitation/create", t.Name))
			}
			return s.invokeAnswered(req, t, in), nil
		}
		// A client that sent a progressToken gets heartbeats while the
		// tool runs (a slow tool outlives its request timeout otherwise);
		// they stop before the result is sent.
		p := s.progressOf(ctx, req, in.Tool)
		if s.holdsInvoke(req, in) {
			res, err := s.invokeHeld(ctx, req, callInfo(MetaInvoke, req), in)
			p.stop()
			return res, err
		}
		res, err := s.invoke(withCallerQuestions(ctx, callerQuestionsOf(req)), in, sessionAsker(req))
		p.stop()
		if err != nil {
			return errorResult(err), nil
		}
		return res, nil
	}
}

// Invoke runs meta:invoke and returns the standard call-tool result. Only
// invalid meta:invoke input is returned as an error; every failure of the
// tool itself, including an unknown tool, is an isError result.
func (s *Service) Invoke(ctx context.Context, in InvokeInput) (*mcp.CallToolResult, error) {
	return s.invoke(s.awaitSources(ctx, MetaInvoke), in, nil)
}

func validateInvoke(in InvokeInput) error {
	if strings.TrimSpace(in.Tool) == "" {
		return validationError("tool", "tool name is required")
	}
	if len(in.Input) == 0 || string(in.Input) == "null" {
		return validationError("input", "input is required (use {} for a tool without arguments)")
	}
	if !isJSONObject(in.Input) {
		return validationError("input", "must be a JSON object")
	}
	return nil
}

func (s *Service) invoke(ctx context.Context, in InvokeInput, ask askFunc) (*mcp.CallToolResult, error) {
	if err := validateInvoke(in); err != nil {
		return nil, err
	}
	callID := newSessionID()
	s.emit(broker.Event{Name: broker.OnToolCalled, Tool: in.Tool, CallID: callID, Input: in.Input})
	out, cerr := s.observedCall(ctx, in.Tool, in.Input, ask)
	ev := broker.Event{Name: broker.OnToolCompleted, Tool: in.Tool, CallID: callID, Result: out}
	if cerr != nil {
		ev.Result, ev.Err = nil, &sandbox.ToolError{Code: cerr.Code, Message: cerr.Message}
	}
	s.emit(ev)
	if cerr != nil {
		// The caller sees a bounded message under the sanitization policy.
		c := *cerr
		c.Message = s.opts.Sanitize.Text(clip.String(c.Message, sandbox.MaxErrorBytes))
		cerr = &c
		if cerr.Code == CodeNotFound {
			// The spec's shape: one text entry saying not found, pointing to search.
			return &mcp.CallToolResult{
				Content: []mcp.Content{&mcp.TextContent{Text: cerr.Message}},
				IsError: true,
				Meta:    mcp.Meta{"codemode/error": cerr},
			}, nil
		}
		return errorResult(cerr), nil
	}
	return s.invokeResult(in.Tool, out), nil
}

// invokeResult is meta:invoke's success: the tool's result as text, and as
// structuredContent when it is a JSON object. It is held to the result
// bound of meta:execute's plans as a client receives it (answerOverBound):
// a larger result is RESPONSE_TOO_LARGE, as an OpenAPI source's answer over
// its max_response_size; a text copy over it is a note.
func (s *Service) invokeResult(name string, out json.RawMessage) *mcp.CallToolResult {
	res := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: textOf(out)}}}
	// MCP (up to revision 2025-11-25) allows only an object as
	// structuredContent; any other value is in the text alone.
	if isJSONObject(out) {
		res.StructuredContent = out
	}
	if n, bound := s.answerOverBound(res, sandbox.StatusOK); n > 0 {
		return errorResult(newError(catalog.CodeResponseTooLarge, fmt.Sprintf(
			"the result of %s is %d bytes of JSON as an MCP client receives it, more than the result bound of %d bytes", clip.String(name, 128), n, bound)))
	}
	return res
}

// textOf is the text content of a tool result: a JSON string as its plain
// text, any other value as JSON.
func textOf(raw json.RawMessage) string {
	var s string
	if len(raw) > 0 && raw[0] == '"' && json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}

// resultBound is the result size limit of meta:execute's plans, in bytes:
// the engine's, lowered by Options.Limits; 0 when the engine does not say.
func (s *Service) resultBound() int {
	n := 0
	if lr, ok := s.opts.Engine.(sandbox.LimitsReporter); ok {
		n = lr.Limits().MaxResultBytes
	}
	if m := s.opts.Limits.MaxResultBytes; m > 0 && (n == 0 || m < n) {
		n = m
	}
	return n
}
