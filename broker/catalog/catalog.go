package catalog

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/codemode-gateway/caddy-codemode/internal/notify"
)

// Defaults of Source and Options fields left zero.
const (
	DefaultPollInterval     = 5 * time.Minute
	DefaultRetryInterval    = 10 * time.Second
	DefaultTimeout          = 30 * time.Second
	DefaultMaxResponseBytes = 10 << 20 // 10 MiB
	DefaultMaxSpecBytes     = 32 << 20 // 32 MiB
)

// Source is one OpenAPI document whose operations become actions.
type Source struct {
	// Name is the service name and the prefix of its action names: a letter,
	// then up to 31 letters, digits or underscores. Required, unique.
	Name string
	// SpecURL locates the OpenAPI 3 document (JSON or YAML): an http(s) URL,
	// a file:// URL or a file path. Required.
	SpecURL string
	// SpecHeaders are added to the request that fetches an http(s) SpecURL
	// (for a document behind authentication); with them, redirects to
	// another host are refused. Never logged.
	SpecHeaders map[string]string
	// BaseURL, when set, is where actions send their requests, overriding the
	// document's servers (document-, path- and operation-level alike).
	// Default: the first server of the operation, path or document, its
	// variables set to their defaults and a relative URL resolved against an
	// http(s) SpecURL; no servers at all means "/" (the spec's own host).
	BaseURL string
	// Headers are added to every action request to this service: credentials
	// such as Authorization or X-API-Key. They override header parameters of
	// the same name. The caller resolves placeholders (e.g. {env.API_TOKEN})
	// before handing them over. Never logged.
	Headers map[string]string
	// Timeout bounds one action call, from sending the request to reading the
	// whole response. Default 30s.
	Timeout time.Duration
	// MaxResponseBytes caps an action's response body; a larger one fails
	// with RESPONSE_TOO_LARGE. Default 10 MiB.
	MaxResponseBytes int64
}

// Options are the optional settings of a Catalog. A nil *Options means
// defaults.
type Options struct {
	// PollInterval is the time between two fetches of every source. Default
	// 5 minutes; negative disables polling (the catalog loads once at Start).
	PollInterval time.Duration
	// RetryInterval caps the wait before the next fetch while some source
	// has never loaded (its first fetch failed): the waits are 1s, 2s, 4s...
	// up to RetryInterval (and never over PollInterval), so a gateway started
	// before its upstream APIs, or before its own listener serves a demo
	// document, gets their actions soon after they come up. Default 10s.
	RetryInterval time.Duration
	// HTTPClient fetches documents and calls actions. Default: a client with
	// no overall timeout (Source.Timeout applies per call). Either way,
	// action calls refuse redirects to another host, so that credential
	// headers never leave the service they were configured for.
	HTTPClient *http.Client
	// Logger receives a warning for each failed fetch and an info line for
	// each change. Default: no logging.
	Logger *zap.Logger
	// Now is the clock behind lastUpdated. Default time.Now.
	Now func() time.Time
	// After waits between polls; tests inject a channel they control.
	// Default time.After.
	After func(time.Duration) <-chan time.Time
	// FetchTimeout bounds one document fetch. Default 30s.
	FetchTimeout time.Duration
	// MaxSpecBytes caps a document's size. Default 32 MiB.
	MaxSpecBytes int64
	// Metrics, when set, reports the sources while the catalog runs (from
	// Start to Close) and counts fetches. Nil records nothing.
	Metrics *Metrics
	// Authorize, when set, sees every action request after the source's
	// Headers are on it, with the caller's context, and may put the calling
	// user's own credential on it (a header or a query parameter). An
	// error stops the call: a *Error keeps its code (CREDENTIAL_REQUIRED,
	// say), any other is UPSTREAM_UNREACHABLE. Its credentials are never
	// logged and never appear in errors (URLs in errors lose their query).
	Authorize func(ctx context.Context, service string, req *http.Request) error
}

// CatalogResponse is the body of GET /code/actions.
type CatalogResponse struct {
	// Actions of all services, sorted by name.
	Actions []CatalogAction `json:"actions"`
	// Services in configuration order.
	Services []CatalogService `json:"services"`
	// Version is a deterministic hash of every service's spec hash; it
	// changes exactly when an action is added or removed.
	Version string `json:"version"`
}

// CatalogAction is one OpenAPI operation as a tool. Its JSON form has exactly
// the spec's fields; the fields tagged `json:"-"` are for tool indexes
// (meta-tools) and the broker.
type CatalogAction struct {
	// Name is <service>_<operation>; see the package README for the rules.
	Name string `json:"name"`
	// Description is the operation's summary and description, joined by a
	// blank line when both are present and differ.
	Description string `json:"description,omitempty"`
	// InputSchema is a JSON Schema object: one property per path, query,
	// header and cookie parameter (by parameter name) plus `body` for the
	// request body, with `required` and `additionalProperties: false`.
	InputSchema json.RawMessage `json:"inputSchema,omitempty"`
	// Service is the owning source's name.
	Service string `json:"service"`
	// Tags are the operation's tags.
	Tags []string `json:"tags,omitempty"`
	// Deprecated is the operation's deprecated flag.
	Deprecated bool `json:"deprecated,omitempty"`

	// Summary is the operation's summary alone (a short title).
	Summary string `json:"-"`
	// OutputSchema is the JSON Schema of the first 2xx JSON response
	// (200, 201, 202, 203, 206, 2XX, then other 2xx), or nil.
	OutputSchema json.RawMessage `json:"-"`
	// Annotations are MCP-style hints derived from the HTTP method.
	Annotations Annotations `json:"-"`
	// Method and Path are the operation's HTTP method (upper case) and path
	// template, e.g. "GET" and "/pets/{petId}".
	Method string `json:"-"`
	Path   string `json:"-"`
	// OperationID is the document's operationId, "" when it has none.
	OperationID string `json:"-"`
	// FullName is the name before it was cut to MaxNameLength ("" when it
	// was not): the words a cut name lost, for tool indexes.
	FullName string `json:"-"`
}

// Annotations are the MCP tool annotations an action implies. Every action
// talks to an outside service, hence OpenWorldHint is always true.
type Annotations struct {
	Title string `json:"title,omitempty"`
	// ReadOnlyHint: GET, HEAD, OPTIONS.
	ReadOnlyHint bool `json:"readOnlyHint"`
	// DestructiveHint: DELETE.
	DestructiveHint bool `json:"destructiveHint"`
	// IdempotentHint: GET, HEAD, OPTIONS, PUT, DELETE.
	IdempotentHint bool `json:"idempotentHint"`
	OpenWorldHint  bool `json:"openWorldHint"`
}

// CatalogService describes one source.
type CatalogService struct {
	// Name is Source.Name.
	Name string `json:"name"`
	// SpecURL is Source.SpecURL with any user:password removed.
	SpecURL string `json:"specUrl"`
	// LastUpdated is the ISO 8601 (RFC 3339, UTC, milliseconds) time of the
	// last successful fetch, "" until one succeeds.
	LastUpdated string `json:"lastUpdated"`
	// ActionCount is the number of actions of this service.
	ActionCount int `json:"actionCount"`

	// LastError is the error of the last fetch when it failed, else "".
	LastError string `json:"-"`
}

// Catalog holds the actions of a set of OpenAPI sources and keeps them up to
// date. Its methods are safe for concurrent use.
type Catalog struct {
	sources   []*sourceState
	opts      Options
	logger    *zap.Logger
	client    *http.Client // document fetches
	callerCli *http.Client // action calls: same-host redirects only

	snap atomic.Pointer[snapshot]

	refreshMu sync.Mutex // one refresh at a time
	loaded    bool       // a refresh has stored actions: guarded by refreshMu

	listeners notify.Set

	lifeMu      sync.Mutex // guards startCalled, closed and running.Add
	startCalled bool
	closed      bool
	running     sync.WaitGroup // Start and the polling loop
	ctx         context.Context
	cancel      context.CancelFunc // Close
}

// snapshot is an immutable view of the catalog; a refresh swaps in a new one.
type snapshot struct {
	resp CatalogResponse
	ops  map[string]*operation
	// contentHash covers every action's JSON and Go-only fields: OnChange
	// fires when it changes, even if the version (names only) does not.
	contentHash string
}

// New checks the sources and returns a catalog with no actions yet; Start
// loads them. Service names must be valid and unique and every source needs
// a SpecURL.
func New(sources []Source, opts *Options) (*Catalog, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.PollInterval == 0 {
		o.PollInterval = DefaultPollInterval
	}
	if o.RetryInterval <= 0 {
		o.RetryInterval = DefaultRetryInterval
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.After == nil {
		o.After = time.After
	}
	if o.FetchTimeout <= 0 {
		o.FetchTimeout = DefaultTimeout
	}
	if o.MaxSpecBytes <= 0 {
		o.MaxSpecBytes = DefaultMaxSpecBytes
	}
	logger := o.Logger
	if logger == nil {
		logger = zap.NewNop()
	}
	client := o.HTTPClient
	if client == nil {
		client = &http.Client{}
	}
	callerCli := *client
	callerCli.CheckRedirect = sameHostRedirects(client.CheckRedirect)

	c := &Catalog{
		opts:      o,
		logger:    logger,
		client:    client,
		callerCli: &callerCli,
	}
	seen := map[string]bool{}
	for i, src := range sources {
		if !serviceNamePattern.MatchString(src.Name) {
			return nil, fmt.Errorf("catalog source %d: name %q must be a letter followed by up to 31 letters, digits or underscores", i, src.Name)
		}
		if seen[src.Name] {
			return nil, fmt.Errorf("catalog source %q: duplicate name", src.Name)
		}
		seen[src.Name] = true
		st, err := newSourceState(src)
		if err != nil {
			return nil, fmt.Errorf("catalog source %q: %w", src.Name, err)
		}
		c.sources = append(c.sources, st)
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.snap.Store(c.buildSnapshot())
	return c, nil
}

// Start fetches every source once, then polls in the background until Close.
// It returns the sources' first-fetch errors joined (each naming its source),
// or nil; the catalog runs either way, serving the sources that loaded and
// retrying the others (1s, 2s, 4s... up to RetryInterval), so a caller may
// log the error and go on, or call Start in a goroutine. With polling
// disabled (negative PollInterval) there are no retries either. Start may be called once; ctx bounds
// only the first fetch, which Close also interrupts.
func (c *Catalog) Start(ctx context.Context) error {
	c.lifeMu.Lock()
	if c.startCalled || c.closed {
		c.lifeMu.Unlock()
		return errors.New("catalog: Start called twice or after Close")
	}
	c.startCalled = true
	c.running.Add(1)
	c.lifeMu.Unlock()
	c.opts.Metrics.track(c)
	defer c.running.Done()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(c.ctx, cancel)
	defer stop()
	err := c.refresh(ctx)
	if c.opts.PollInterval >= 0 {
		c.running.Add(1) // before the deferred Done: Close cannot miss it
		go c.loop()
	}
	return err
}

// Close stops polling and waits for an ongoing fetch (Start's included) to
// end. Calls already running are not interrupted: their own context and
// Timeout bound them.
func (c *Catalog) Close() {
	c.lifeMu.Lock()
	c.closed = true
	c.lifeMu.Unlock()
	c.opts.Metrics.untrack(c)
	c.cancel()
	c.running.Wait()
}

func (c *Catalog) loop() {
	defer c.running.Done()
	retry := time.Second
	for {
		wait := c.opts.PollInterval
		if c.anyNeverLoaded() {
			wait = min(wait, retry, c.opts.RetryInterval)
			retry *= 2
		} else {
			retry = time.Second
		}
		select {
		case <-c.ctx.Done():
			return
		case <-c.opts.After(wait):
		}
		_ = c.refresh(c.ctx) // failures are logged per source
	}
}

func (c *Catalog) anyNeverLoaded() bool {
	for _, s := range c.sources {
		if !s.loaded() {
			return true
		}
	}
	return false
}

// Refresh fetches every source now, as a poll does, and returns the joined
// fetch errors. Polling calls it; so may an admin endpoint.
func (c *Catalog) Refresh(ctx context.Context) error { return c.refresh(ctx) }

func (c *Catalog) refresh(ctx context.Context) error {
	c.refreshMu.Lock()
	defer c.refreshMu.Unlock()

	errs := make([]error, len(c.sources))
	var wg sync.WaitGroup
	for i, s := range c.sources {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.poll(ctx, s)
		}()
	}
	wg.Wait()

	old := c.snap.Load()
	next := c.buildSnapshot()
	c.snap.Store(next)
	if next.contentHash != old.contentHash {
		// The first load of a catalog is no change: every config load
		// (a reload included) builds a new catalog of the same sources,
		// and an info line saying "changed" each time would mislead.
		log := c.logger.Info
		msg := "action catalog changed"
		if !c.loaded {
			log, msg = c.logger.Debug, "action catalog loaded"
		}
		c.loaded = true
		log(msg, zap.String("version", next.resp.Version), zap.Int("actions", len(next.resp.Actions)))
		c.notify()
	}
	return errors.Join(errs...)
}

// poll fetches and parses one source, logging a failure. The source keeps its
// last good operations when anything fails.
func (c *Catalog) poll(ctx context.Context, s *sourceState) error {
	err := c.fetchAndParse(ctx, s)
	c.opts.Metrics.fetched(s.src.Name, err)
	if err != nil {
		err = fmt.Errorf("loading catalog source %q: %w", s.src.Name, err)
		s.setError(err)
		c.logger.Warn("catalog source fetch failed, keeping its last good actions",
			zap.String("service", s.src.Name),
			zap.String("spec_url", s.displayURL),
			zap.Int("actions_kept", s.actionCount()),
			zap.Error(err))
		return err
	}
	s.setSuccess(c.opts.Now())
	return nil
}

// buildSnapshot assembles the current actions of all sources.
func (c *Catalog) buildSnapshot() *snapshot {
	snap := &snapshot{ops: map[string]*operation{}}
	actions := []CatalogAction{}
	services := make([]CatalogService, 0, len(c.sources))
	var specHashes []string
	contentHash := sha256.New()
	for _, s := range c.sources {
		st := s.state()
		svc := CatalogService{
			Name:        s.src.Name,
			SpecURL:     s.displayURL,
			ActionCount: len(st.ops),
			LastError:   st.lastError,
		}
		if !st.lastSuccess.IsZero() {
			svc.LastUpdated = st.lastSuccess.UTC().Format("2006-01-02T15:04:05.000Z07:00")
		}
		services = append(services, svc)
		for _, op := range st.ops {
			actions = append(actions, op.action)
			snap.ops[op.action.Name] = op
		}
		specHashes = append(specHashes, s.src.Name+"\x00"+st.specHash+"\n")
		fmt.Fprintf(contentHash, "%s\x00%s\n", s.src.Name, st.contentHash)
	}
	sort.Slice(actions, func(i, j int) bool { return actions[i].Name < actions[j].Name })
	// By service name, so that reordering the configuration (which adds or
	// removes no action) keeps the version.
	sort.Strings(specHashes)
	versionHash := sha256.New()
	for _, h := range specHashes {
		versionHash.Write([]byte(h))
	}
	snap.resp = CatalogResponse{
		Actions:  actions,
		Services: services,
		Version:  hex.EncodeToString(versionHash.Sum(nil))[:16],
	}
	snap.contentHash = hex.EncodeToString(contentHash.Sum(nil))
	return snap
}

// Response returns the catalog as GET /code/actions serves it. The slices are
// the caller's; the json.RawMessage schemas inside are shared and must not be
// modified.
func (c *Catalog) Response() CatalogResponse {
	r := c.snap.Load().resp
	r.Actions = append([]CatalogAction(nil), r.Actions...)
	r.Services = append([]CatalogService(nil), r.Services...)
	if r.Actions == nil {
		r.Actions = []CatalogAction{}
	}
	if r.Services == nil {
		r.Services = []CatalogService{}
	}
	return r
}

// EmptyResponse is what a catalog with no sources serves: no actions, no
// services and the version of that empty set. A broker without OpenAPI
// sources answers GET /code/actions with it.
func EmptyResponse() CatalogResponse {
	return CatalogResponse{Actions: []CatalogAction{}, Services: []CatalogService{}, Version: emptyVersion}
}

var emptyVersion = func() string {
	sum := sha256.Sum256(nil)
	return hex.EncodeToString(sum[:])[:16]
}()

// Version returns the current catalog version.
func (c *Catalog) Version() string { return c.snap.Load().resp.Version }

// Action returns the action with the given name.
func (c *Catalog) Action(name string) (CatalogAction, bool) {
	op, ok := c.snap.Load().ops[name]
	if !ok {
		return CatalogAction{}, false
	}
	return op.action, true
}

// OnChange registers fn to run after a refresh changed the catalog: an action
// added, removed or changed (schema, description, ...), which is wider than a
// version change. fn runs on the polling goroutine (or in Start/Refresh)
// while the refresh holds its lock: keep it short, and do not call Refresh
// from it. Catalog thereby satisfies metatools.ChangeNotifier.
// It returns the function that unregisters fn.
func (c *Catalog) OnChange(fn func()) (remove func()) { return c.listeners.Add(fn) }

// Listeners counts the functions registered with OnChange, for leak checks.
func (c *Catalog) Listeners() int { return c.listeners.Len() }

func (c *Catalog) notify() { c.listeners.Notify() }

// sameHostRedirects allows a redirect only to the host of the original
// request, then defers to next (or the default limit of 10 redirects).
func sameHostRedirects(next func(*http.Request, []*http.Request) error) func(*http.Request, []*http.Request) error {
	return func(req *http.Request, via []*http.Request) error {
		if req.URL.Host != via[0].URL.Host {
			return fmt.Errorf("redirect to another host (%s) refused", req.URL.Host)
		}
		if via[0].URL.Scheme == "https" && req.URL.Scheme != "https" {
			// The same host name over plain HTTP: the source's credentials
			// would cross the network in clear text.
			return fmt.Errorf("redirect from https to %s refused", req.URL.Scheme)
		}
		if next != nil {
			return next(req, via)
		}
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		return nil
	}
}

// redactURL removes user:password from a URL for display.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	u.User = nil
	return u.String()
}
