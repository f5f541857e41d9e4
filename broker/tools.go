package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/codemode-gateway/caddy-codemode/broker/catalog"
	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"
	"github.com/codemode-gateway/caddy-codemode/guard"
	"github.com/codemode-gateway/caddy-codemode/internal/telemetry"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// ToolGuard is a tool's own guard settings; nil fields use the guard
// manager's defaults (defaultRateLimit, defaultConcurrency, defaultTimeout
// of the throttle block). Limits are counted per tool name and partitioned
// by each config's partitionBy (global, session, userId, ip).
type ToolGuard struct {
	RateLimit   *guard.RateLimitConfig
	Concurrency *guard.ConcurrencyConfig
	Timeout     *guard.TimeoutConfig
}

// Tool sources reported in ToolSpec.Source.
const (
	SourceRegistry = "registry"
	SourceCatalog  = "catalog"
)

// CodeToolNotCallable is the tool error for a caller-answered tool invoked
// without a session stream to ask the caller through.
const CodeToolNotCallable = "TOOL_NOT_CALLABLE"

// ToolSpec describes one callable tool, from the registry or the catalog,
// the way tool indexes (the meta-tools) need it.
type ToolSpec struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// InputSchema is a JSON Schema object (never empty).
	InputSchema json.RawMessage `json:"inputSchema"`
	// OutputSchema is the result's JSON Schema, or empty.
	OutputSchema json.RawMessage  `json:"outputSchema,omitempty"`
	Annotations  *ToolAnnotations `json:"annotations,omitempty"`
	Examples     []ToolExample    `json:"examples,omitempty"`
	Tags         []string         `json:"tags,omitempty"`
	// Source is "registry" or "catalog".
	Source string `json:"source"`
	// Service is the catalog service of an action ("" for registry tools).
	Service    string `json:"service,omitempty"`
	Deprecated bool   `json:"deprecated,omitempty"`
	// Path is a catalog action's path template, for tool indexes (the
	// meta-tools' search); not part of the wire form.
	Path string `json:"-"`
	// Method is a catalog action's HTTP method, for tool indexes; not part
	// of the wire form.
	Method string `json:"-"`
	// FullName is a catalog action's name before it was cut to the
	// catalog's length limit ("" when it was not), for tool indexes; not
	// part of the wire form.
	FullName string `json:"-"`
	// CallerAnswered is true for registry tools answered by the caller
	// through the tool-result endpoint (no Go handler): they cannot be
	// invoked outside an /execute stream.
	CallerAnswered bool `json:"callerAnswered,omitempty"`
}

// ListTools returns every callable tool: registry tools sorted by name,
// then catalog actions sorted by name. A registry tool hides a catalog
// action of the same name.
func (b *Broker) ListTools() []ToolSpec {
	defs := b.tools.List()
	out := make([]ToolSpec, 0, len(defs))
	seen := make(map[string]bool, len(defs))
	for _, d := range defs {
		out = append(out, b.registrySpec(d))
		seen[d.Name] = true
	}
	if c := b.opts.Catalog; c != nil {
		for _, a := range c.Response().Actions {
			if !seen[a.Name] {
				out = append(out, actionSpec(a))
			}
		}
	}
	return out
}

// LookupTool returns the ToolSpec of name.
func (b *Broker) LookupTool(name string) (ToolSpec, bool) {
	if d := b.tools.Get(name); d != nil {
		return b.registrySpec(d), true
	}
	if c := b.opts.Catalog; c != nil {
		if a, ok := c.Action(name); ok {
			return actionSpec(a), true
		}
	}
	return ToolSpec{}, false
}

// OnToolsChange calls f after a tool is registered or the catalog's actions
// change, so indexes can reload ListTools. It returns the function that
// unregisters f: an index that outlives its interest (a config reload keeps
// the broker but builds a new index) must call it.
func (b *Broker) OnToolsChange(f func()) (remove func()) {
	r1 := b.tools.OnChange(f)
	r2 := func() {}
	if c := b.opts.Catalog; c != nil {
		r2 = c.OnChange(f)
	}
	return func() { r1(); r2() }
}

// ToolsChangeListeners counts the functions registered with OnToolsChange
// and not yet removed (the catalog's included), for leak checks.
func (b *Broker) ToolsChangeListeners() int {
	n := b.tools.onChange.Len()
	if c := b.opts.Catalog; c != nil {
		n += c.Listeners()
	}
	return n
}

// GetDocumentation is ToolRegistry.GetDocumentation for every callable
// tool: the registry's tools, then the catalog's actions (their top-level
// input properties as parameters).
func (b *Broker) GetDocumentation() string {
	var sb strings.Builder
	writeDocHeader(&sb)
	for _, s := range b.ListTools() {
		var params []paramSpec
		if d := b.tools.Get(s.Name); d != nil {
			params = d.params
		} else {
			params = sortedParams(paramsFromSchema(s.InputSchema))
		}
		writeToolDoc(&sb, s.Name, s.Description, params, s.OutputSchema, s.Examples)
	}
	return sb.String()
}

// Catalog returns the action catalog, or nil.
func (b *Broker) Catalog() *catalog.Catalog { return b.opts.Catalog }

func (b *Broker) registrySpec(d *ToolDefinition) ToolSpec {
	return ToolSpec{
		Name: d.Name, Description: d.Description, InputSchema: d.Schema(), OutputSchema: d.OutputSchema,
		Annotations: d.Annotations, Examples: d.Examples, Tags: d.Tags, Source: SourceRegistry,
		CallerAnswered: d.Handler == nil && b.opts.ToolHandler == nil,
	}
}

func actionSpec(a catalog.CatalogAction) ToolSpec {
	schema := a.InputSchema
	if len(schema) == 0 {
		schema = json.RawMessage(`{"type":"object"}`)
	}
	an := a.Annotations
	return ToolSpec{
		Name: a.Name, Description: a.Description, InputSchema: schema, OutputSchema: a.OutputSchema,
		Annotations: &ToolAnnotations{ReadOnlyHint: &an.ReadOnlyHint, DestructiveHint: &an.DestructiveHint,
			IdempotentHint: &an.IdempotentHint, OpenWorldHint: &an.OpenWorldHint},
		Tags: a.Tags, Source: SourceCatalog, Service: a.Service, Deprecated: a.Deprecated, Path: a.Path, Method: a.Method, FullName: a.FullName,
	}
}

// callerAnswered reports whether name is a registry tool that only the
// caller of a session can answer (no handler, no ToolHandler).
func (b *Broker) callerAnswered(name string) bool {
	d := b.tools.Get(name)
	return d != nil && d.Handler == nil && b.opts.ToolHandler == nil
}

func (b *Broker) lookupTool(name string) (sandbox.ToolInfo, bool) {
	s, ok := b.LookupTool(name)
	if !ok {
		return sandbox.ToolInfo{}, false
	}
	return sandbox.ToolInfo{Name: s.Name, Description: s.Description, InputSchema: s.InputSchema, OutputSchema: s.OutputSchema}, true
}

// InvokeOptions identify who invokes a tool outside a script.
type InvokeOptions struct {
	// SessionID partitions guard limits by session (meta-tools pass their
	// MCP session id).
	SessionID string
	// Auth partitions by user and reaches handlers.
	Auth *AuthResult
	// ClientIP partitions by address.
	ClientIP string
	// Context reaches handlers as ExecutionContext.Context.
	Context map[string]any
}

// InvokeTool calls one tool through the same path as a script's callTool:
// input validation (defaults applied), the guard (rate limit, concurrency,
// timeout) and the handler or catalog. A failure is a *sandbox.ToolError
// with a stable code (TOOL_NOT_FOUND, VALIDATION_ERROR, RATE_LIMIT,
// CONCURRENCY_LIMIT, QUEUE_TIMEOUT, EXECUTION_TIMEOUT, TOOL_NOT_CALLABLE,
// TOOL_EXECUTION_ERROR or a catalog code).
func (b *Broker) InvokeTool(ctx context.Context, name string, input json.RawMessage, opts *InvokeOptions) (json.RawMessage, error) {
	if opts == nil {
		opts = &InvokeOptions{}
	}
	ic := &invocation{sessionID: opts.SessionID, callID: newID(), auth: opts.Auth, clientIP: opts.ClientIP, context: opts.Context}
	out, err := b.invoke(ctx, name, input, ic)
	return out, toolError(err)
}

// ToolHost returns a sandbox.Host whose calls go through InvokeTool with
// opts, for callers that run scripts on their own engine (meta:execute).
func (b *Broker) ToolHost(opts *InvokeOptions) sandbox.Host {
	if opts == nil {
		opts = &InvokeOptions{}
	}
	return &invokeHost{b: b, opts: opts}
}

type invokeHost struct {
	b    *Broker
	opts *InvokeOptions
}

func (h *invokeHost) LookupTool(name string) (sandbox.ToolInfo, bool) { return h.b.lookupTool(name) }

func (h *invokeHost) CallTool(ctx context.Context, call sandbox.ToolCall) (json.RawMessage, error) {
	ic := &invocation{sessionID: h.opts.SessionID, callID: call.ID, auth: h.opts.Auth, clientIP: h.opts.ClientIP, context: h.opts.Context}
	out, err := h.b.invoke(ctx, call.Name, call.Input, ic)
	return out, toolError(err)
}

// invocation is one tool call and who makes it.
type invocation struct {
	sessionID string
	callID    string
	auth      *AuthResult
	clientIP  string
	context   map[string]any
	// caller is the session run, when the call comes from /execute; it lets
	// caller-answered tools ask the stream's consumer.
	caller *run
	// announce sends the tool_call event (nil outside a stream).
	announce func(awaiting bool)
}

func (ic *invocation) announceCall(awaiting bool) {
	if ic.announce != nil {
		ic.announce(awaiting)
	}
}

// invoke resolves, validates, guards and runs one call, in a span of its
// own and counted in the tool-call metrics.
func (b *Broker) invoke(ctx context.Context, name string, input json.RawMessage, ic *invocation) (json.RawMessage, error) {
	source := b.toolSource(name)
	ctx, span := telemetry.StartSpan(ctx, toolSpanName(name, source), trace.SpanKindInternal, toolSpanAttrs(name, ic.callID, source)...)
	started := b.now()
	out, err := b.dispatch(ctx, name, input, ic)
	code := ""
	if err != nil {
		code = toolError(err).(*sandbox.ToolError).Code
	}
	b.opts.Metrics.ObserveToolCall(source, code, b.now().Sub(started))
	telemetry.EndSpan(span, code)
	return out, err
}

// toolSource is where a call of name goes: the registry (a Go handler), the
// caller of the session, the catalog, or nowhere.
func (b *Broker) toolSource(name string) string {
	if d := b.tools.Get(name); d != nil {
		if d.Handler == nil && b.opts.ToolHandler == nil {
			return SourceCaller
		}
		return SourceRegistry
	}
	if c := b.opts.Catalog; c != nil {
		if _, ok := c.Action(name); ok {
			return SourceCatalog
		}
	}
	return SourceUnknown
}

// toolSpanName is the name of a tool call's span: "execute_tool <name>"
// (OpenTelemetry's GenAI convention), without the name for an unknown tool
// so that arbitrary script input never names spans.
func toolSpanName(name, source string) string {
	if source == SourceUnknown {
		return "execute_tool"
	}
	return "execute_tool " + name
}

// toolSpanAttrs are a tool call's span attributes: never its input or
// result.
func toolSpanAttrs(name, callID, source string) []attribute.KeyValue {
	if len(name) > 128 {
		name = name[:128]
	}
	return []attribute.KeyValue{
		attribute.String("gen_ai.operation.name", "execute_tool"),
		attribute.String("gen_ai.tool.name", name),
		attribute.String("gen_ai.tool.call.id", callID),
		attribute.String("codemode.tool.source", source),
	}
}

// dispatch resolves, validates, guards and runs one call.
func (b *Broker) dispatch(ctx context.Context, name string, input json.RawMessage, ic *invocation) (json.RawMessage, error) {
	var tg ToolGuard
	var run func(context.Context) (json.RawMessage, error)
	if d := b.tools.Get(name); d != nil {
		args, err := d.Validate(input)
		if err != nil {
			return nil, err
		}
		tg = d.Guard
		handler := d.Handler
		if handler == nil {
			handler = b.opts.ToolHandler
		}
		switch {
		case handler != nil:
			ec := &ExecutionContext{SessionID: ic.sessionID, CallID: ic.callID, Tool: name, Auth: ic.auth, Context: ic.context, ClientIP: ic.clientIP}
			run = func(ctx context.Context) (json.RawMessage, error) {
				ic.announceCall(false)
				v, err := handler(ctx, args, ec)
				if err != nil {
					return nil, err
				}
				return marshalResult(v)
			}
		case ic.caller != nil:
			run = func(ctx context.Context) (json.RawMessage, error) {
				return ic.caller.awaitCaller(ctx, PendingCall{CallID: ic.callID, Tool: name, Input: input}, ic.announceCall)
			}
		default:
			return nil, &sandbox.ToolError{Code: CodeToolNotCallable, Message: fmt.Sprintf("tool %q is answered by the caller of /execute and cannot be invoked here", name)}
		}
	} else if c := b.opts.Catalog; c != nil {
		if _, ok := c.Action(name); !ok {
			return nil, &sandbox.ToolError{Code: CodeToolNotFound, Message: fmt.Sprintf("tool %q not found", name)}
		}
		run = func(ctx context.Context) (json.RawMessage, error) {
			ic.announceCall(false)
			return c.Call(ctx, name, input)
		}
	} else {
		return nil, &sandbox.ToolError{Code: CodeToolNotFound, Message: fmt.Sprintf("tool %q not found", name)}
	}
	// Every call has a deadline: a Go handler's or the catalog's is the
	// guard's timeout, else ToolTimeout; one the caller answers waits up
	// to the execution's timeout.
	deadline := b.tools.Get(name) == nil || b.tools.Get(name).Handler != nil || b.opts.ToolHandler != nil
	return b.guarded(ctx, name, tg, ic, run, deadline)
}

// guarded runs fn under the tool's rate limit, concurrency slot and timeout.
func (b *Broker) guarded(ctx context.Context, name string, tg ToolGuard, ic *invocation, fn func(context.Context) (json.RawMessage, error), deadline bool) (json.RawMessage, error) {
	m := b.guard.Load()
	if m == nil {
		if deadline {
			return guard.WithTimeout(ctx, b.opts.ToolTimeout.Milliseconds(), name, fn)
		}
		return fn(ctx)
	}
	if tg.RateLimit == nil {
		tg.RateLimit = b.opts.ToolDefaults.RateLimit
	}
	if tg.Concurrency == nil {
		tg.Concurrency = b.opts.ToolDefaults.Concurrency
	}
	if tg.Timeout == nil {
		tg.Timeout = b.opts.ToolDefaults.Timeout
	}
	pc := guard.PartitionKeyContext{SessionID: ic.sessionID, ClientIP: b.opts.ClientPrefixes.Key(ic.clientIP)}
	if ic.auth != nil {
		// The same user id in two tenants is two principals.
		pc.UserID = ic.auth.UserID
		if ic.auth.TenantID != "" {
			pc.UserID = ic.auth.TenantID + "/" + ic.auth.UserID
		}
	}
	rl, err := m.CheckRateLimit(ctx, name, tg.RateLimit, pc)
	if err != nil {
		return nil, err
	}
	if err := rl.Err(name); err != nil {
		return nil, err
	}
	ms := m.TimeoutMs(tg.Timeout)
	if ms <= 0 && deadline {
		ms = b.opts.ToolTimeout.Milliseconds()
	}
	// The call ends by its timeout, so its ticket need not outlive it by
	// much: a gateway killed mid-call frees the slot soon (guard.HoldMs).
	ticket, err := m.AcquireSemaphoreTimed(ctx, name, tg.Concurrency, pc, ms)
	if err != nil {
		return nil, err
	}
	defer func() { _ = ticket.Release(context.WithoutCancel(ctx)) }()
	var out json.RawMessage
	if deadline {
		out, err = guard.WithTimeout(ctx, ms, name, fn)
	} else {
		out, err = callerTimeout(ctx, ms, name, fn)
	}
	if ms > 0 {
		m.ObserveTimeout(err)
	}
	return out, err
}

// errCallerTimeout is the cause of a caller-answered call's context ended
// by the tool's guard timeout.
var errCallerTimeout = errors.New("the tool's timeout passed")

// callerTimeout runs a caller-answered call (awaitCaller) under the tool's
// guard timeout, ms (none when 0 or less). Unlike guard.WithTimeout it
// waits for the call, which returns as soon as its context ends: the call
// may still return an answer the store accepted just before, and that
// answer is its outcome. guard.WithTimeout returned at the deadline, so
// such an answer, its caller told 200, was dropped.
func callerTimeout(ctx context.Context, ms int64, name string, fn func(context.Context) (json.RawMessage, error)) (json.RawMessage, error) {
	if ms <= 0 {
		return fn(ctx)
	}
	cctx, cancel := context.WithTimeoutCause(ctx, time.Duration(ms)*time.Millisecond, errCallerTimeout)
	defer cancel()
	out, err := fn(cctx)
	if err != nil && errors.Is(err, context.DeadlineExceeded) && context.Cause(cctx) == errCallerTimeout {
		return nil, guard.NewExecutionTimeoutError(name, ms)
	}
	return out, err
}

func marshalResult(v any) (json.RawMessage, error) {
	switch x := v.(type) {
	case json.RawMessage:
		if len(x) == 0 {
			return json.RawMessage("null"), nil
		}
		if !json.Valid(x) {
			return nil, errors.New("tool returned invalid JSON")
		}
		return x, nil
	case []byte:
		return nil, errors.New("tool returned bytes; return json.RawMessage for raw JSON")
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("tool result is not JSON-serializable: %w", err)
	}
	return b, nil
}

// toolErrorIn is toolError for a call made under ctx: a call that ended
// because ctx was cancelled is reported with the cancellation's cause (the
// worker hosting the script died, the session was aborted or its broker
// closed); TIMEOUT stays for a deadline, or a cancellation nobody explained.
func toolErrorIn(ctx context.Context, err error) error {
	if err != nil && ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		if te := causeToolError(context.Cause(ctx)); te != nil {
			return te
		}
	}
	return toolError(err)
}

// causeToolError names a cancellation's cause as a tool error, or nil for
// a bare context error (left to toolError).
func causeToolError(cause error) *sandbox.ToolError {
	const ended = "the execution ended before the tool answered: "
	var te *sandbox.ToolError
	switch {
	case cause == nil, cause == context.Canceled, cause == context.DeadlineExceeded, cause == errExecutionTimeout:
		return nil
	case errors.As(cause, &te):
		return te
	case cause == errShuttingDown:
		return &sandbox.ToolError{Code: CodeShuttingDown, Message: ended + cause.Error()}
	case cause == errOwnerLost:
		return &sandbox.ToolError{Code: CodeOwnerLost, Message: ended + cause.Error()}
	case cause == errStreamLimit:
		return &sandbox.ToolError{Code: CodeStreamLimit, Message: ended + cause.Error()}
	}
	return &sandbox.ToolError{Code: sandbox.CodeExecutionAborted, Message: ended + cause.Error()}
}

// toolError gives every tool failure a stable code, as the script sees it.
func toolError(err error) error {
	if err == nil {
		return nil
	}
	var te *sandbox.ToolError
	if errors.As(err, &te) {
		return te
	}
	var ge *guard.GuardError
	if errors.As(err, &ge) {
		msg := ge.Message
		if ge.RetryAfterMs > 0 {
			msg = fmt.Sprintf("%s; retry after %d ms", msg, ge.RetryAfterMs)
		}
		return &sandbox.ToolError{Code: ge.Code, Message: msg}
	}
	var ce *catalog.Error
	if errors.As(err, &ce) {
		return &sandbox.ToolError{Code: ce.Code, Message: ce.Message}
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return &sandbox.ToolError{Code: sandbox.CodeTimeout, Message: "the execution ended before the tool answered"}
	}
	return &sandbox.ToolError{Code: CodeToolExecutionError, Message: err.Error()}
}
