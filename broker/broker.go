package broker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"
	"github.com/codemode-gateway/caddy-codemode/guard"
	"github.com/codemode-gateway/caddy-codemode/internal/telemetry"
	"github.com/redis/go-redis/v9"
)

// Broker runs scripts in sessions. Create it with New; its methods are safe
// for concurrent use.
type Broker struct {
	opts        BrokerOptions
	tools       *ToolRegistry
	store       store
	logger      *zap.Logger
	now         func() time.Time
	started     time.Time
	listeners   listeners
	engine      atomic.Pointer[engineBox]
	guard       atomic.Pointer[guard.GuardManager]
	httpGuardMu sync.Mutex
	httpGuard   *guard.GuardManager // private manager for RateLimiting when Guard is nil or disabled

	mu   sync.Mutex
	runs map[string]*run // pending and running sessions of this broker
	// perPrincipal counts the runs of each principal (guarded by mu).
	perPrincipal map[string]int
	closing      bool
	// aborted ends when Close's drain is over (the runs left aborted, or
	// none left): the event streams still open then have until streamsEnd
	// (see endStreams), however far their write deadline is.
	aborted      context.Context
	abortStreams context.CancelFunc
	endOnce      sync.Once
	streamsEnd   time.Time
	wg           sync.WaitGroup // one per run
	total        atomic.Int64

	server      *http.Server
	ln          net.Listener
	stopJanitor chan struct{}
	janitorDone chan struct{}
	closeOnce   sync.Once
	closeErr    error
	answerPoll  time.Duration // see answerPollInterval; tests shorten it
	// finishing, set by tests before any session, is called when a run's
	// script has ended, before its final record is written.
	finishing func(sessionID string)
	// delivering, set by tests before any session, is called before a
	// caller's answer is handed to the local run waiting for it.
	delivering func(a *toolAnswer)
	// callEnding, set by tests before any session, is called when the
	// context of a call waiting for its caller ends.
	callEnding func(sessionID, callID string)
	// callsRunning, set by tests before any session, is called when a run
	// that has ended waits for its tool calls still running.
	callsRunning func(sessionID string)

	watchMu  sync.Mutex
	watchers map[string]map[chan struct{}]struct{} // session id -> Await calls waiting here

	// owner is this broker's id in a shared store ("" in memory).
	owner string
	live  liveness
}

type engineBox struct{ e sandbox.Engine }

// errExecutionTimeout is the cancel cause of an execution past its timeout.
var errExecutionTimeout = errors.New("execution timeout")

// ExecuteOptions are the per-execution options.
type ExecuteOptions struct {
	// Timeout bounds the execution, including waits for caller-supplied
	// tool results. Zero means BrokerOptions.DefaultTimeout (30 s); it is
	// capped at SessionTimeout.
	Timeout time.Duration
	// MaxToolCalls caps the tool calls of the execution; the call over the
	// limit fails with TOOL_CALL_LIMIT. Zero means
	// BrokerOptions.DefaultMaxToolCalls (100).
	MaxToolCalls int
	// Context is exposed to the script as the frozen metaContext and to
	// tool handlers as ExecutionContext.Context.
	Context map[string]any
	// Filter restricts the event types delivered (BlockedTypes wins over
	// Types).
	Filter *EventFilter
	// AllowedTools, when non-nil, is the whitelist of tools the script may
	// call (ACCESS_DENIED otherwise), at most MaxAllowedTools names.
	AllowedTools []string
	// Auth is the caller's identity; the session belongs to Auth.UserID.
	Auth *AuthResult
	// ClientIP is the caller's address, for partitioning guard limits and,
	// for anonymous callers, naming the principal.
	ClientIP string
	// MaxSteps lowers the sandbox's step limit for this execution (never
	// raises it). Zero keeps the engine's.
	MaxSteps int64
	// Host, when set, resolves the script's tools (lookup and calls)
	// instead of the broker's registry and catalog, except the registry's
	// caller-answered tools, which still wait for the caller's
	// SubmitToolResult. meta:execute runs plans over its tool index this way.
	Host sandbox.Host
}

// forgetPrincipalLocked counts one run of principal as ended.
func (b *Broker) forgetPrincipalLocked(principal string) {
	if b.perPrincipal[principal]--; b.perPrincipal[principal] <= 0 {
		delete(b.perPrincipal, principal)
	}
}

// redisStartTimeout bounds New's subscription and first heartbeat with
// Redis: a Redis that does not answer fails New with STORAGE_UNAVAILABLE
// after that long at most, whatever the client's timeouts.
const redisStartTimeout = 10 * time.Second

// startRedisStore runs start until ctx ends: go-redis applies a context's
// deadline to dialing only, and a Redis that accepts a connection and never
// answers holds a read for the client's own timeout, of any length (closing
// the client ends it). A store that starts after ctx ended is closed.
func startRedisStore(ctx context.Context, start func() (*redisStore, error)) (*redisStore, error) {
	type started struct {
		rs  *redisStore
		err error
	}
	done := make(chan started, 1)
	go func() {
		rs, err := start()
		done <- started{rs, err}
	}()
	select {
	case s := <-done:
		return s.rs, s.err
	case <-ctx.Done():
		go func() {
			if s := <-done; s.err == nil {
				_ = s.rs.close()
			}
		}()
		return nil, fmt.Errorf("no answer within %v: %w", redisStartTimeout, ctx.Err())
	}
}

// New returns a broker. opts.Engine is required; the zero values of the
// other fields mean their documented defaults.
func New(opts *BrokerOptions) (*Broker, error) {
	if opts == nil || opts.Engine == nil {
		return nil, errors.New("broker: an Engine is required")
	}
	o := *opts
	if o.SessionTimeout < 0 || o.MaxConcurrentSessions < 0 || o.DefaultTimeout < 0 || o.DefaultMaxToolCalls < 0 || o.MaxBodyBytes < 0 {
		return nil, errors.New("broker: sessionTimeout, maxConcurrentSessions, defaultTimeout, defaultMaxToolCalls and maxBodyBytes must not be negative")
	}
	if o.SessionTimeout == 0 {
		o.SessionTimeout = DefaultSessionTimeout
	}
	if o.MaxConcurrentSessions == 0 {
		o.MaxConcurrentSessions = DefaultMaxConcurrentSessions
	}
	if o.DefaultTimeout == 0 {
		o.DefaultTimeout = DefaultExecutionTimeout
	}
	o.DefaultTimeout = min(o.DefaultTimeout, o.SessionTimeout)
	if o.MaxTimeout <= 0 {
		o.MaxTimeout = o.DefaultTimeout
	}
	o.MaxTimeout = min(max(o.MaxTimeout, o.DefaultTimeout), o.SessionTimeout)
	if o.DefaultMaxToolCalls == 0 {
		o.DefaultMaxToolCalls = DefaultMaxToolCalls
	}
	if o.MaxSessionsPerPrincipal <= 0 {
		o.MaxSessionsPerPrincipal = max(1, o.MaxConcurrentSessions/4)
	}
	if o.MaxStreamBytes <= 0 {
		o.MaxStreamBytes = DefaultMaxStreamBytes
	}
	if o.MaxFinishedBytes <= 0 {
		o.MaxFinishedBytes = DefaultMaxFinishedBytes
	}
	if o.ToolTimeout <= 0 {
		o.ToolTimeout = DefaultToolTimeout
	}
	if o.MaxAuthFailures == 0 {
		o.MaxAuthFailures = DefaultMaxAuthFailures
	}
	if o.MaxBodyBytes == 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.KeyPrefix == "" {
		o.KeyPrefix = DefaultKeyPrefix
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.OwnerTimeout < 0 || o.StorageTimeout < 0 {
		return nil, errors.New("broker: ownerTimeout and storageTimeout must not be negative")
	}
	if o.OwnerTimeout == 0 {
		o.OwnerTimeout = DefaultOwnerTimeout
	}
	if o.StorageTimeout == 0 {
		o.StorageTimeout = DefaultStorageTimeout
	}
	switch o.StorageFailureMode {
	case "":
		o.StorageFailureMode = StorageFailClosed
	case StorageFailClosed, StorageFailOpen:
	default:
		return nil, fmt.Errorf("broker: storageFailureMode must be %q or %q, got %q", StorageFailClosed, StorageFailOpen, o.StorageFailureMode)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Tools == nil {
		o.Tools = NewToolRegistry()
	}
	if a := o.Authentication; a != nil {
		switch a.Type {
		case AuthBearer, AuthAPIKey, AuthCustom:
		default:
			return nil, fmt.Errorf("broker: authentication type must be bearer, api-key or custom, got %q", a.Type)
		}
		if a.Validate == nil {
			return nil, errors.New("broker: authentication needs a Validate function")
		}
	}
	if rl := o.RateLimiting; rl != nil && (rl.WindowMs <= 0 || rl.MaxRequests <= 0) {
		return nil, errors.New("broker: rateLimiting needs positive windowMs and maxRequests")
	}
	b := &Broker{
		opts:         o,
		tools:        o.Tools,
		logger:       o.Logger,
		now:          o.Now,
		started:      o.Now(),
		runs:         make(map[string]*run),
		perPrincipal: make(map[string]int),
		answerPoll:   answerPollInterval,
	}
	b.aborted, b.abortStreams = context.WithCancel(context.Background())
	b.listeners.logger = o.Logger
	b.engine.Store(&engineBox{o.Engine})
	b.guard.Store(o.Guard)
	if o.Redis != nil {
		ctx, cancel := context.WithTimeout(context.Background(), redisStartTimeout)
		defer cancel()
		b.owner = newID()
		rs, err := startRedisStore(ctx, func() (*redisStore, error) {
			return newRedisStore(ctx, o.Redis, o.KeyPrefix, b.owner, o.OwnerTimeout, o.StorageTimeout, o.MaxFinishedBytes, o.Now, b.deliver, o.Logger)
		})
		if err != nil {
			// A config load fails with the code the broker's requests get
			// while Redis is down.
			return nil, fmt.Errorf("broker: %w", &Error{Code: CodeStorageUnavailable, Status: http.StatusServiceUnavailable,
				Message: "the session store (Redis) failed at start", Err: err})
		}
		b.store = rs
		if o.Metrics != nil {
			b.store = countedRedisStore{rs, o.Metrics}
		}
		b.startKeepAlive()
	} else {
		b.store = newMemoryStore(o.Now, b.deliver, o.MaxFinishedBytes)
		b.stopJanitor = make(chan struct{})
		b.janitorDone = make(chan struct{})
		go b.janitor()
	}
	return b, nil
}

// SetEngine replaces the engine used by new executions (running ones keep
// theirs). The Caddy app calls it when a config reload brings a new engine
// but keeps the broker.
func (b *Broker) SetEngine(e sandbox.Engine) {
	if e != nil {
		b.engine.Store(&engineBox{e})
	}
}

// SetGuard replaces the guard manager used for tool calls and rate limits.
func (b *Broker) SetGuard(m *guard.GuardManager) { b.guard.Store(m) }

// Redis returns the Redis client sessions are kept in and the key prefix,
// or nil when sessions are in memory. Other parts of a gateway (the MCP
// handler's session directory) keep their shared state beside them.
func (b *Broker) Redis() (redis.UniversalClient, string) { return b.opts.Redis, b.opts.KeyPrefix }

// Tools returns the broker's tool registry.
func (b *Broker) Tools() *ToolRegistry { return b.tools }

// On registers a listener for an in-process event: session:created,
// session:completed, session:error, tool:called or tool:completed (see
// EventNames). Any other name, or a nil listener, is an error: a typo
// would otherwise listen to nothing, silently.
func (b *Broker) On(event string, l Listener) error {
	if !slices.Contains(EventNames, event) {
		return fmt.Errorf("broker: unknown event %q (known: %s)", event, strings.Join(EventNames, ", "))
	}
	if l == nil {
		return errors.New("broker: nil listener")
	}
	b.listeners.on(event, l)
	return nil
}

// janitor removes expired sessions from the memory store.
func (b *Broker) janitor() {
	defer close(b.janitorDone)
	t := time.NewTicker(max(min(b.opts.SessionTimeout/4, time.Minute), time.Second))
	defer t.Stop()
	for {
		select {
		case <-b.stopJanitor:
			return
		case <-t.C:
			b.store.sweep(b.now().UnixMilli())
		}
	}
}

// GetSession returns a session by id, or nil when it is unknown or has
// expired. With Redis it finds sessions of every broker sharing it; with a
// Directory, the running sessions of every broker sharing that.
func (b *Broker) GetSession(ctx context.Context, id string) (*Session, error) {
	if id == "" {
		return nil, nil
	}
	o := b.runner(id)
	s, err := o.store.get(ctx, id)
	if err != nil {
		o.callerStorageFailed(ctx, err)
		return nil, storageError(err)
	}
	return s, nil
}

// ToolResult is a caller-supplied answer to a tool call. When Error is set
// the call failed and Result is ignored.
type ToolResult struct {
	CallID string           `json:"callId"`
	Result json.RawMessage  `json:"result,omitempty"`
	Error  *ToolResultError `json:"error,omitempty"`
}

// ToolResultError is a caller-reported tool failure. Code defaults to
// TOOL_EXECUTION_ERROR.
type ToolResultError struct {
	Message string `json:"message"`
	Code    string `json:"code,omitempty"`
}

// MaxAllowedTools bounds a script's allowedTools: a whitelist names the
// few tools a plan may call (it makes at most max_tool_calls, 100 by
// default), and each name is looked up on every call of the script.
const MaxAllowedTools = 1000

// SubmitToolResult answers a tool call that a session is waiting on. It
// fails, changing nothing, with NOT_FOUND (404) for an unknown session or
// call, CALL_ALREADY_ANSWERED (409) for a second answer, CALL_ABANDONED
// (409) for a call that stopped waiting before its answer came and
// SESSION_FINISHED (409) when the session is over. It does not check who
// owns the session; the HTTP handler does. A session run by another broker
// of the Directory is answered there.
func (b *Broker) SubmitToolResult(ctx context.Context, sessionID string, res ToolResult) error {
	if o := b.runner(sessionID); o != b {
		return o.SubmitToolResult(ctx, sessionID, res)
	}
	if res.CallID == "" {
		return newError(http.StatusBadRequest, CodeInvalidRequest, "callId is required")
	}
	a := &toolAnswer{SessionID: sessionID, CallID: res.CallID, Result: res.Result}
	if res.Error != nil {
		if res.Error.Message == "" {
			return newError(http.StatusBadRequest, CodeInvalidRequest, "error.message is required")
		}
		a.Error = &answerError{Message: res.Error.Message, Code: res.Error.Code}
		a.Result = nil
	} else if len(res.Result) == 0 {
		return newError(http.StatusBadRequest, CodeInvalidRequest, "result is required (use null for no value)")
	}
	switch err := b.store.resolveCall(ctx, a); {
	case err == nil:
		return nil
	case errors.Is(err, errSessionGone):
		return newError(http.StatusNotFound, CodeNotFound, "session not found")
	case errors.Is(err, errCallUnknown):
		return newError(http.StatusNotFound, CodeNotFound, fmt.Sprintf("session has no pending call %q", res.CallID))
	case errors.Is(err, errCallAnswered):
		return newError(http.StatusConflict, CodeCallAlreadyAnswered, fmt.Sprintf("call %q was already answered", res.CallID))
	case errors.Is(err, errCallAbandoned):
		return newError(http.StatusConflict, CodeCallAbandoned, fmt.Sprintf("call %q stopped waiting for its result (the script timed out, was aborted or lost its worker, or the tool's timeout passed); nothing will read this result", res.CallID))
	case errors.Is(err, errCallClosed):
		return newError(http.StatusConflict, CodeSessionFinished, "session is finished")
	case errors.Is(err, errOwnerLost):
		return newError(http.StatusConflict, CodeOwnerLost, "the gateway running this session is gone; the session ended with OWNER_LOST and nothing will read this result")
	default:
		b.callerStorageFailed(ctx, err)
		return storageError(err)
	}
}

// deliver hands a caller-supplied answer to the local run waiting for it,
// or a change notice to the local Await calls following the session.
// Answers for sessions of other brokers (seen through Redis) are ignored.
func (b *Broker) deliver(a *toolAnswer) {
	if a.Changed {
		b.watchMu.Lock()
		for ch := range b.watchers[a.SessionID] {
			select {
			case ch <- struct{}{}:
			default: // a wake-up is already pending
			}
		}
		b.watchMu.Unlock()
		return
	}
	if b.delivering != nil {
		b.delivering(a)
	}
	b.mu.Lock()
	r := b.runs[a.SessionID]
	b.mu.Unlock()
	if r != nil {
		r.answer(a)
	}
}

// Stats are the session counters of GET /health.
type Stats struct {
	// Active counts this broker's pending and running sessions.
	Active int `json:"active"`
	// Total counts the sessions this broker created since it started.
	Total int64 `json:"total"`
}

// Stats returns the session counters.
func (b *Broker) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return Stats{Active: len(b.runs), Total: b.total.Load()}
}

// Execute runs code in a new session and yields its events: session first,
// then tool_call, tool_result and log events as they happen, and a final
// result or error (see EventFilter for filtering). The session starts when
// iteration starts. A failure to start (SESSION_LIMIT, SHUTTING_DOWN,
// VALIDATION_ERROR) is yielded once as an *Error. Stopping the iteration
// early, or cancelling ctx, aborts the execution.
func (b *Broker) Execute(ctx context.Context, code string, opts ExecuteOptions) iter.Seq2[StreamEvent, error] {
	return func(yield func(StreamEvent, error) bool) {
		r, err := b.start(ctx, code, opts)
		if err != nil {
			yield(StreamEvent{}, err)
			return
		}
		r.stream(yield)
	}
}

// Start runs code in a new session like Execute, without a stream: the
// session runs on this broker until it finishes or reaches its timeout,
// whatever happens to ctx afterwards (its values are kept). Its tool calls
// answered by the caller wait for SubmitToolResult. Follow it with Await,
// from this broker or any other sharing its store. Errors are those of
// Execute's start (SESSION_LIMIT, SHUTTING_DOWN, VALIDATION_ERROR, a store
// failure).
func (b *Broker) Start(ctx context.Context, code string, opts ExecuteOptions) (*Session, error) {
	opts.Filter = nil
	r, err := b.startRun(context.WithoutCancel(ctx), code, opts, true)
	if err != nil {
		return nil, err
	}
	return r.snapshot(), nil
}

// Cancel aborts a session that runs on this broker (or on the broker of
// its Directory that runs it), as a streaming caller's disconnect does: its
// script stops and the session ends EXECUTION_ABORTED. It is for a session
// made by Start whose only client left before it could be told the
// session's id. It reports whether the session was found running.
func (b *Broker) Cancel(id string) bool {
	if o := b.runner(id); o != b {
		return o.Cancel(id)
	}
	b.mu.Lock()
	r := b.runs[id]
	b.mu.Unlock()
	if r == nil {
		return false
	}
	r.cancel()
	return true
}

// Await returns the state of a session once it has finished or has a call
// waiting for the caller's answer. When ctx ends first it returns the
// latest state with ctx's error. An unknown or expired session is a nil
// state. It works on every broker sharing the store; a session made by
// Start wakes it at once, any other within the answer poll interval (1 s).
func (b *Broker) Await(ctx context.Context, id string) (*SessionState, error) {
	if o := b.runner(id); o != b {
		return o.Await(ctx, id) // run by another broker of the Directory (a reload)
	}
	ch := make(chan struct{}, 1)
	b.watchMu.Lock()
	if b.watchers == nil {
		b.watchers = make(map[string]map[chan struct{}]struct{})
	}
	if b.watchers[id] == nil {
		b.watchers[id] = make(map[chan struct{}]struct{})
	}
	b.watchers[id][ch] = struct{}{}
	b.watchMu.Unlock()
	defer func() {
		b.watchMu.Lock()
		delete(b.watchers[id], ch)
		if len(b.watchers[id]) == 0 {
			delete(b.watchers, id)
		}
		b.watchMu.Unlock()
	}()
	poll := time.NewTicker(b.answerPoll)
	defer poll.Stop()
	for {
		s, err := b.store.get(ctx, id)
		if err != nil {
			return nil, storageError(err)
		}
		if s == nil {
			return nil, nil
		}
		st := &SessionState{Session: s}
		if s.finished() {
			return st, nil
		}
		if st.Pending, err = b.store.pendingCalls(ctx, id); err != nil {
			return nil, storageError(err)
		}
		if len(st.Pending) > 0 {
			return st, nil
		}
		select {
		case <-ch:
		case <-poll.C:
		case <-ctx.Done():
			return st, ctx.Err()
		}
	}
}

// start creates the session and launches the execution.
func (b *Broker) start(ctx context.Context, code string, opts ExecuteOptions) (*run, error) {
	return b.startRun(ctx, code, opts, false)
}

// startRun creates the session and launches the execution; a detached run
// has no consumer for its events and announces its changes to Await.
func (b *Broker) startRun(ctx context.Context, code string, opts ExecuteOptions, detached bool) (*run, error) {
	if err := opts.Filter.validate(); err != nil {
		return nil, err
	}
	if opts.Timeout < 0 || opts.MaxToolCalls < 0 {
		return nil, newError(http.StatusBadRequest, CodeValidationError, "timeout and maxToolCalls must not be negative")
	}
	if code == "" {
		return nil, newError(http.StatusBadRequest, CodeValidationError, "code is required")
	}
	if n := len(opts.AllowedTools); n > MaxAllowedTools {
		return nil, newError(http.StatusBadRequest, CodeValidationError, fmt.Sprintf("allowedTools has %d names, more than the limit of %d", n, MaxAllowedTools))
	}
	// The configured values are ceilings: a request may lower them only
	// (the HTTP handler refuses more with LIMIT_EXCEEDED; library callers
	// get them clamped).
	timeout := opts.Timeout
	if timeout == 0 {
		timeout = b.opts.DefaultTimeout
	}
	timeout = min(timeout, b.opts.MaxTimeout)
	maxCalls := opts.MaxToolCalls
	if maxCalls == 0 {
		maxCalls = b.opts.DefaultMaxToolCalls
	}
	maxCalls = min(maxCalls, b.opts.DefaultMaxToolCalls)
	principal := Principal(opts.Auth, b.opts.ClientPrefixes.Key(opts.ClientIP))
	var ctxJSON json.RawMessage
	if opts.Context != nil {
		var err error
		if ctxJSON, err = json.Marshal(opts.Context); err != nil {
			return nil, newError(http.StatusBadRequest, CodeValidationError, "context is not JSON-serializable: "+err.Error())
		}
		if msg := sandbox.CheckContext(ctxJSON); msg != "" {
			return nil, newError(http.StatusBadRequest, CodeValidationError, msg)
		}
	}

	now := b.now()
	s := &Session{
		ID:        newID(),
		Owner:     b.owner,
		Status:    StatusPending,
		CreatedAt: now.UnixMilli(),
		ExpiresAt: now.Add(b.opts.SessionTimeout).UnixMilli(),
		UpdatedAt: now.UnixMilli(),
	}
	if opts.Auth != nil {
		s.UserID, s.TenantID = opts.Auth.UserID, opts.Auth.TenantID
	}
	// The broker bounds the whole execution, waits for tool results
	// included, whatever the engine does with Limits.Timeout.
	// abort ends the run with a cause (OWNER_LOST); the timeout has its own.
	actx, abort := context.WithCancelCause(telemetry.WithSessionID(ctx, s.ID))
	rctx, cancel := context.WithTimeoutCause(actx, timeout, errExecutionTimeout)
	r := &run{
		b:        b,
		sess:     s,
		ctx:      rctx,
		abortRun: abort,
		cancel:   cancel,
		events:   make(chan StreamEvent, 16),
		stop:     make(chan struct{}),
		filter:   opts.Filter,
		auth:     opts.Auth,
		clientIP: opts.ClientIP,
		context:  opts.Context,
		maxCalls: maxCalls,
		waiters:  make(map[string]chan *toolAnswer),
		begun:    now,
		log:      telemetry.Logger(rctx, b.logger),
		engine:   b.engine.Load().e,
		host:     opts.Host,
		announce: detached,
		req: sandbox.Request{
			Code:         code,
			AllowedTools: opts.AllowedTools,
			Context:      ctxJSON,
			Limits:       sandbox.Limits{Timeout: timeout, MaxToolCalls: maxCalls, MaxSteps: opts.MaxSteps},
			Principal:    principal,
		},
		principal: principal,
	}

	b.mu.Lock()
	switch {
	case b.closing:
		b.mu.Unlock()
		cancel()
		b.opts.Metrics.sessionRejected(CodeShuttingDown)
		return nil, &Error{Code: CodeShuttingDown, Message: "broker is shutting down", Status: http.StatusServiceUnavailable, RetryAfter: 5 * time.Second}
	case len(b.runs) >= b.opts.MaxConcurrentSessions:
		b.mu.Unlock()
		cancel()
		b.opts.Metrics.sessionRejected(CodeSessionLimit)
		return nil, &Error{Code: CodeSessionLimit, Message: fmt.Sprintf("too many concurrent sessions (limit %d)", b.opts.MaxConcurrentSessions), Status: http.StatusTooManyRequests, RetryAfter: time.Second}
	case b.perPrincipal[principal] >= b.opts.MaxSessionsPerPrincipal:
		b.mu.Unlock()
		cancel()
		b.opts.Metrics.sessionRejected(CodeSessionLimit)
		return nil, &Error{Code: CodeSessionLimit, Message: fmt.Sprintf("this caller has %d sessions pending or running, the most allowed", b.opts.MaxSessionsPerPrincipal), Status: http.StatusTooManyRequests, RetryAfter: time.Second}
	}
	b.perPrincipal[principal]++
	if detached {
		r.stopOnce.Do(func() { close(r.stop) }) // nobody reads the events
	}
	b.runs[s.ID] = r
	b.wg.Add(1)
	b.total.Add(1)
	b.mu.Unlock()
	if d := b.opts.Directory; d != nil {
		d.add(s.ID, b)
	}

	if err := b.store.put(rctx, s); err != nil {
		if b.opts.StorageFailureMode != StorageFailOpen {
			b.mu.Lock()
			delete(b.runs, s.ID)
			b.forgetPrincipalLocked(principal)
			b.mu.Unlock()
			if d := b.opts.Directory; d != nil {
				d.remove(s.ID, b)
			}
			b.wg.Done()
			cancel()
			abort(nil)
			if !errors.Is(ctx.Err(), context.Canceled) {
				// Not a caller that hung up while the record was written.
				b.storageFailed(err)
				b.opts.Metrics.sessionRejected(CodeStorageUnavailable)
			}
			return nil, storageError(fmt.Errorf("creating session: %w", err))
		}
		// Open: the session runs here; the keep-alive loop writes its
		// record once the store answers.
		r.log.Warn("session store unavailable; running the session on this gateway only", zap.Error(err))
		b.callerStorageFailed(ctx, err)
		r.dirty.Store(true)
	}
	b.opts.Metrics.executionStarted()
	r.ctx, r.span = telemetry.StartSpan(r.ctx, "codemode.execute", trace.SpanKindInternal,
		attribute.String("codemode.session.id", s.ID))
	if ce := r.log.Check(zap.DebugLevel, "session created"); ce != nil {
		ce.Write(zap.Bool("detached", detached))
	}
	b.listeners.emit(Event{Name: OnSessionCreated, Session: s.clone()})
	r.send(StreamEvent{Type: EventSession, Payload: s.clone()})
	go r.execute()
	return r, nil
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Listen serves the broker's HTTP interface on addr (host:port; port 0
// picks a free one) in the background. It returns once the socket is bound.
func (b *Broker) Listen(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("broker: listening on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: b.Handler(), ReadHeaderTimeout: 10 * time.Second}
	b.mu.Lock()
	if b.server != nil || b.closing {
		b.mu.Unlock()
		_ = ln.Close()
		return errors.New("broker: already listening or closed")
	}
	b.server, b.ln = srv, ln
	b.mu.Unlock()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			b.logger.Error("broker server stopped", zap.Error(err))
		}
	}()
	return nil
}

// Addr returns the address Listen bound, or "" before Listen.
func (b *Broker) Addr() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ln == nil {
		return ""
	}
	return b.ln.Addr().String()
}

// Close stops accepting executions (they get SHUTTING_DOWN, 503), waits
// for running sessions to finish until ctx ends, then aborts the rest,
// stops the server started by Listen and releases the store. Tool results
// are still accepted while draining. Close does not close the Engine,
// Catalog, Guard or Redis client it was given.
func (b *Broker) Close(ctx context.Context) error {
	b.closeOnce.Do(func() { b.closeErr = b.close(ctx) })
	return b.closeErr
}

func (b *Broker) close(ctx context.Context) error {
	b.mu.Lock()
	b.closing = true
	b.mu.Unlock()

	drained := make(chan struct{})
	go func() { b.wg.Wait(); close(drained) }()
	var err error
	select {
	case <-drained:
	case <-ctx.Done():
		b.endStreams(time.Now())
		b.mu.Lock()
		n := len(b.runs)
		for _, r := range b.runs {
			r.abort(errShuttingDown)
		}
		b.mu.Unlock()
		b.logger.Warn("aborting sessions still running at close", zap.Int("sessions", n))
		err = fmt.Errorf("broker: aborted %d running sessions: %w", n, ctx.Err())
		select {
		case <-drained:
		case <-time.After(5 * time.Second):
			b.logger.Error("sessions did not stop after abort")
		}
	}
	// Drained: a stream still writing has a slow client, or one that
	// stopped reading; it may write until the drain's deadline.
	end := time.Now()
	if d, ok := ctx.Deadline(); ok && d.After(end) {
		end = d
	}
	b.endStreams(end)
	b.mu.Lock()
	srv := b.server
	b.mu.Unlock()
	if srv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = srv.Shutdown(sctx)
		cancel()
	}
	if b.stopJanitor != nil {
		close(b.stopJanitor)
		<-b.janitorDone
	}
	b.stopKeepAlive()
	if cerr := b.store.close(); cerr != nil && err == nil {
		err = cerr
	}
	b.closeGuard()
	return err
}

// endStreams gives the event streams still open until at plus
// abortWriteGrace to write their last event (their final one, when at is
// when their session was aborted): a client that stopped reading held its
// stream, its handler and its session's run up to streamWriteTimeout past
// the drain, and with them the server's shutdown (Caddy's exit waits for
// open requests). The first call decides.
func (b *Broker) endStreams(at time.Time) {
	b.endOnce.Do(func() {
		b.streamsEnd = at.Add(abortWriteGrace)
		b.abortStreams()
	})
}

func (b *Broker) closeGuard() {
	b.httpGuardMu.Lock()
	defer b.httpGuardMu.Unlock()
	if b.httpGuard != nil {
		_ = b.httpGuard.Destroy(context.Background())
		b.httpGuard = nil
	}
}
