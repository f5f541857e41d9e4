package metatools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/codemode-gateway/caddy-codemode/broker"
	"github.com/codemode-gateway/caddy-codemode/broker/catalog"
	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"
	"github.com/codemode-gateway/caddy-codemode/guard"
	"github.com/codemode-gateway/caddy-codemode/internal/clip"
	"github.com/codemode-gateway/caddy-codemode/internal/telemetry"
	"github.com/codemode-gateway/caddy-codemode/internal/tool"
	"github.com/codemode-gateway/caddy-codemode/metatools/search"
)

// Limits of the meta-tool inputs (spec: not shown; chosen here).
const (
	DefaultTopK       = 10
	MaxTopK           = 100
	MaxQueries        = 20
	MaxQueryLength    = 1000 // characters (code points), as meta:search's schema advertises
	MaxDescribeNames  = 50
	MaxScriptBytes    = 256 << 10
	lowRelevanceScore = 0.15
)

// MaxFilterNames bounds each of meta:search's lists of apps, tags and
// excluded tools: a filter names a few, and the excluded names not in the
// index are echoed back in a warning.
const MaxFilterNames = 1000

// MaxEchoedNames and MaxEchoedNameBytes bound the caller's names a warning
// quotes back (excluded_tool_not_found's affectedTools; meta:describe's
// notFound is cut to MaxEchoedNameBytes too): excludeToolNames
// takes 1,000 names of any length within the request body, and a warning
// that repeated them all cost the model reading it as much again. A tool
// name is at most 128 characters (MCP's rule for names), so a longer one
// names no tool and is cut.
const (
	MaxEchoedNames     = 20
	MaxEchoedNameBytes = 128
)

// echoNames is names without repeats, the first MaxEchoedNames of them, each
// cut to MaxEchoedNameBytes (with an ellipsis), and the number of distinct
// names.
func echoNames(names []string) ([]string, int) {
	seen := make(map[string]bool, len(names))
	var out []string
	for _, n := range names {
		if seen[n] {
			continue
		}
		seen[n] = true
		if len(out) < MaxEchoedNames {
			out = append(out, clip.Ellipsis(n, MaxEchoedNameBytes))
		}
	}
	return out, len(seen)
}

// CallInfo describes a meta-tool call for the Limiter.
type CallInfo struct {
	// MetaTool is the spec name ("meta:search"), whatever the naming option.
	MetaTool string
	// SessionID is the MCP session, empty on stateless transports.
	SessionID string
	// UserID is the authenticated user: the go-sdk's token info, else the
	// Identity of the HTTP request (WithIdentity). Empty when anonymous.
	UserID string
	// TenantID is the user's tenant, when known.
	TenantID string
	// ClientIP is the client address from the request's Identity, when
	// known.
	ClientIP string
	// ClientKey is ClientIP's key in per-address limits, from the
	// request's Identity; see AddressKey.
	ClientKey string
	// Header is the HTTP request header (nil over stdio).
	Header http.Header
}

// SessionPartition is the value of a "session" rate-limit partition: the MCP
// session id, or, for a request without a session (revision 2026-07-28 and
// stateless transports), the user, else the client address, so that such
// callers get a counter each instead of sharing one.
func (ci CallInfo) SessionPartition() string {
	switch {
	case ci.SessionID != "":
		return ci.SessionID
	case ci.UserID != "":
		return "user:" + ci.UserPartition()
	case ci.ClientIP != "" || ci.ClientKey != "":
		return "ip:" + ci.AddressKey()
	}
	return ""
}

// AddressKey is the caller's address in per-address limits: ClientKey,
// else ClientIP keyed with the default prefixes (guard.ClientPrefixes:
// every address of an IPv6 /64 is one caller).
func (ci CallInfo) AddressKey() string {
	if ci.ClientKey != "" {
		return ci.ClientKey
	}
	return guard.ClientPrefixes{}.Key(ci.ClientIP)
}

// UserPartition names the caller's user for rate-limit partitions: the
// user id, qualified by its tenant when it has one ("t1/ada"), since the
// same user id in two tenants is two users (as in the broker's buckets);
// "" without a user.
func (ci CallInfo) UserPartition() string {
	if ci.UserID == "" || ci.TenantID == "" {
		return ci.UserID
	}
	return ci.TenantID + "/" + ci.UserID
}

// principal is who the call acts for in the sandbox's fair sharing, named
// as the broker names it (the user within its tenant, else the client
// address); "" when neither is known (stdio: the one local client).
func (ci CallInfo) principal() string {
	if ci.UserID == "" && ci.ClientIP == "" && ci.ClientKey == "" {
		return ""
	}
	var auth *broker.AuthResult
	if ci.UserID != "" {
		auth = &broker.AuthResult{Valid: true, UserID: ci.UserID, TenantID: ci.TenantID}
	}
	return broker.Principal(auth, ci.AddressKey())
}

// Limiter enforces the per-meta-tool rate limit rules. A non-nil error
// refuses the call; an *Error keeps its code (RATE_LIMIT).
type Limiter interface {
	Check(ctx context.Context, call CallInfo) error
}

// Sanitization strips details from the errors meta:execute and
// meta:invoke report (sanitization.*): the sandbox's one policy, applied
// here on top of the engine's own.
type Sanitization = sandbox.Sanitization

// Options configure a Service; nil means defaults.
type Options struct {
	// Engine runs meta:execute scripts; nil makes meta:execute fail with
	// ENGINE_ERROR.
	Engine sandbox.Engine
	// Limits are passed with every script (zero fields keep the engine's).
	Limits sandbox.Limits
	// Naming is how the meta-tools are named on the MCP server.
	Naming Naming
	// Limiter, when set, is consulted before every meta-tool call.
	Limiter Limiter
	// Sessions runs plans whose caller-answered calls the MCP client answers
	// over multi round-trip requests (revision 2026-07-28); nil leaves
	// caller-answered tools to older revisions' elicitation only.
	Sessions PlanSessions
	Sanitize Sanitization
	Logger   *zap.Logger
	// Metrics, when set, counts meta-tool calls and searches. Nil records
	// nothing.
	Metrics *Metrics
	// ToolMetrics, when set, counts the calls of tools that do not go
	// through the broker (upstream MCP servers, tools the MCP client
	// answers, unknown names) in the broker's tool-call metrics.
	ToolMetrics *broker.Metrics
	// Listener, when set, receives the spec's lifecycle events of the
	// paths that run outside a broker session: session:created,
	// session:completed and session:error of a meta:execute plan run by
	// Engine, and tool:called and tool:completed of its calls and of
	// meta:invoke (Session nil). A plan run as a broker session reports
	// through the broker's own listeners instead.
	Listener broker.Listener
	// RequestContext, when set, gives each meta-tool call the context of
	// its HTTP request (trace span, request id); see RequestContextFunc.
	RequestContext RequestContextFunc
	// ConnectWait bounds how long a meta-tool call that arrives while the
	// index's sources are still making their first connection (see
	// Index.Connecting) waits for them before it is answered from the
	// tools listed so far. Default 5s.
	ConnectWait time.Duration
	// ProgressInterval is the shortest time between two
	// notifications/progress of one meta:execute call whose client sent a
	// progressToken; default DefaultProgressInterval (250ms).
	ProgressInterval time.Duration
	// ProgressHeartbeat is how long a meta:execute or meta:invoke call
	// whose client sent a progressToken goes without a notification before
	// it sends one that only says it is still running (a plan waiting on
	// one slow call, a slow invoked tool); default DefaultProgressHeartbeat
	// (10s), negative for none.
	ProgressHeartbeat time.Duration
}

// Service implements the four meta-tools over an Index.
type Service struct {
	index  *Index
	opts   Options
	logger *zap.Logger
	// maxScript is ScriptLimit; executeSchema is meta:execute's input
	// schema with it, compiled on first use.
	maxScript     int
	executeSchema json.RawMessage
	executeInput  func() (*tool.Schema, error)
	// levels are the sessions' logging/setLevel levels.
	levels sessionLevels
}

// NewService returns the meta-tools over index.
func NewService(index *Index, opts *Options) *Service {
	s := &Service{index: index}
	if opts != nil {
		s.opts = *opts
	}
	if s.opts.ConnectWait <= 0 {
		s.opts.ConnectWait = DefaultConnectWait
	}
	if s.opts.Naming == "" {
		s.opts.Naming = NamingSpec
	}
	s.logger = s.opts.Logger
	if s.logger == nil {
		s.logger = zap.NewNop()
	}
	s.maxScript = scriptLimit(s.opts)
	s.executeSchema = executeInputSchema(s.maxScript)
	s.executeInput = sync.OnceValues(func() (*tool.Schema, error) {
		sch, err := tool.CompileSchema(s.executeSchema)
		if err != nil {
			return nil, fmt.Errorf("%s input schema: %w", MetaExecute, err)
		}
		return sch, nil
	})
	return s
}

// scriptLimit is the size of the longest script meta:execute takes, in
// bytes: MaxScriptBytes, lowered by the engine's MaxSourceBytes when the
// engine tells it (sandbox.LimitsReporter) and by Options.Limits', which
// every request passes down. A longer script would only fail in the engine.
func scriptLimit(o Options) int {
	limit := MaxScriptBytes
	if lr, ok := o.Engine.(sandbox.LimitsReporter); ok {
		if m := lr.Limits().MaxSourceBytes; m > 0 && m < limit {
			limit = m
		}
	}
	if m := o.Limits.MaxSourceBytes; m > 0 && m < limit {
		limit = m
	}
	return limit
}

// ScriptLimit is the size of the longest script meta:execute takes, in
// bytes, as its input schema advertises (the script's maxLength).
func (s *Service) ScriptLimit() int { return s.maxScript }

// Index returns the service's tool index.
func (s *Service) Index() *Index { return s.index }

// SearchInput is meta:search's input. Query and Filter are the earlier
// contract's spelling and are merged into Queries and AppIDs; Filter also
// takes the filters below.
type SearchInput struct {
	Queries           []string `json:"queries,omitempty"`
	Query             string   `json:"query,omitempty"`
	TopK              *int     `json:"topK,omitempty"`
	AppIDs            []string `json:"appIds,omitempty"`
	ExcludeToolNames  []string `json:"excludeToolNames,omitempty"`
	MinRelevanceScore *float64 `json:"minRelevanceScore,omitempty"`
	// Tags keeps tools with at least one of these tags (case-insensitive).
	Tags []string `json:"tags,omitempty"`
	// ReadOnly and Destructive keep tools whose annotation has this value
	// (a tool that does not declare readOnlyHint counts as not read-only;
	// one that does not declare destructiveHint as destructive unless it
	// is read-only, as MCP's defaults say).
	ReadOnly    *bool         `json:"readOnly,omitempty"`
	Destructive *bool         `json:"destructive,omitempty"`
	Filter      *SearchFilter `json:"filter,omitempty"`
}

// SearchFilter is the earlier contract's filter object, which also takes
// the newer filters.
type SearchFilter struct {
	AppIDs      []string `json:"appIds,omitempty"`
	Tags        []string `json:"tags,omitempty"`
	ReadOnly    *bool    `json:"readOnly,omitempty"`
	Destructive *bool    `json:"destructive,omitempty"`
}

// SearchResult is one entry of meta:search's tools. Description is the
// tool's one-line summary (at most MaxSummaryRunes); meta:describe has the
// rest. MatchedQueries is given when the call had several queries (with one
// it would repeat the query in every entry).
type SearchResult struct {
	Name           string   `json:"name"`
	AppID          string   `json:"appId"`
	Description    string   `json:"description"`
	RelevanceScore float64  `json:"relevanceScore"`
	MatchedQueries []string `json:"matchedQueries,omitempty"`
}

// MaxSummaryRunes bounds a search result's description.
const MaxSummaryRunes = 160

// Warning is one entry of meta:search's warnings.
type Warning struct {
	Type          string   `json:"type"`
	Message       string   `json:"message"`
	AffectedTools []string `json:"affectedTools,omitempty"`
}

// SearchOutput is meta:search's output.
type SearchOutput struct {
	Tools               []SearchResult `json:"tools"`
	TotalAvailableTools int            `json:"totalAvailableTools"`
	Warnings            []Warning      `json:"warnings"`
}

// Search runs meta:search. Invalid input gives an *Error with
// VALIDATION_ERROR; an unreachable embeddings endpoint SEARCH_UNAVAILABLE.
func (s *Service) Search(ctx context.Context, in SearchInput) (res *SearchOutput, err error) {
	ctx = s.awaitSources(ctx, MetaSearch)
	defer func(start time.Time) {
		if err == nil {
			s.opts.Metrics.searched(time.Since(start), len(res.Tools))
		}
	}(time.Now())
	queries := append([]string(nil), in.Queries...)
	if q := strings.TrimSpace(in.Query); q != "" {
		queries = append(queries, q)
	}
	if len(queries) == 0 {
		return nil, validationError("queries", "at least one query is required")
	}
	if len(queries) > MaxQueries {
		return nil, validationError("queries", fmt.Sprintf("at most %d queries are allowed, got %d", MaxQueries, len(queries)))
	}
	for i, q := range queries {
		if strings.TrimSpace(q) == "" {
			return nil, validationError(fmt.Sprintf("queries.%d", i), "query is empty")
		}
		// Characters (code points), as the schema's maxLength counts them.
		if len(q) > MaxQueryLength && utf8.RuneCountInString(q) > MaxQueryLength {
			return nil, validationError(fmt.Sprintf("queries.%d", i), fmt.Sprintf("query is longer than %d characters", MaxQueryLength))
		}
	}
	topK := DefaultTopK
	if in.TopK != nil {
		topK = *in.TopK
		if topK < 1 || topK > MaxTopK {
			return nil, validationError("topK", fmt.Sprintf("must be between 1 and %d, got %d", MaxTopK, topK))
		}
	}
	minScore := 0.0
	if in.MinRelevanceScore != nil {
		minScore = *in.MinRelevanceScore
		if minScore < 0 || minScore > 1 {
			return nil, validationError("minRelevanceScore", fmt.Sprintf("must be between 0 and 1, got %g", minScore))
		}
	}
	var filter SearchFilter
	if in.Filter != nil {
		filter = *in.Filter
	}
	for _, l := range []struct {
		field string
		names []string
	}{{"appIds", in.AppIDs}, {"tags", in.Tags}, {"excludeToolNames", in.ExcludeToolNames}, {"filter.appIds", filter.AppIDs}, {"filter.tags", filter.Tags}} {
		if len(l.names) > MaxFilterNames {
			return nil, validationError(l.field, fmt.Sprintf("at most %d names are allowed, got %d", MaxFilterNames, len(l.names)))
		}
	}
	appIDs := append([]string(nil), in.AppIDs...)
	tags := append([]string(nil), in.Tags...)
	readOnly, destructive := in.ReadOnly, in.Destructive
	if f := in.Filter; f != nil {
		appIDs = append(appIDs, f.AppIDs...)
		tags = append(tags, f.Tags...)
		if f.ReadOnly != nil {
			readOnly = f.ReadOnly
		}
		if f.Destructive != nil {
			destructive = f.Destructive
		}
	}
	tagSet := map[string]bool{}
	for _, t := range tags {
		tagSet[strings.ToLower(t)] = true
	}

	snap := s.index.snap.Load()
	out := &SearchOutput{Tools: []SearchResult{}, TotalAvailableTools: len(snap.tools), Warnings: []Warning{}}
	apps := map[string]bool{}
	for _, a := range appIDs {
		apps[a] = true
	}
	excluded := map[string]bool{}
	var missing []string
	for _, n := range in.ExcludeToolNames {
		excluded[n] = true
		if _, ok := snap.byName[n]; !ok {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		echoed, n := echoNames(missing)
		msg := fmt.Sprintf("%d excluded tool name(s) are not in the index", n)
		if len(echoed) < n {
			msg += fmt.Sprintf("; the first %d are listed", len(echoed))
		}
		out.Warnings = append(out.Warnings, Warning{Type: "excluded_tool_not_found", Message: msg, AffectedTools: echoed})
	}
	allow := func(i int) bool {
		t := &snap.tools[i]
		if len(apps) > 0 && !apps[t.AppID] || excluded[t.Name] {
			return false
		}
		if len(tagSet) > 0 && !hasTag(t.Tags, tagSet) {
			return false
		}
		ro, de := hintsOf(t)
		return (readOnly == nil || *readOnly == ro) && (destructive == nil || *destructive == de)
	}

	// A result is ordered by its exact score, then by its place in the
	// ranking: scores are rounded to three decimals for the answer, and
	// ordering by the rounded score would break near-ties by name.
	type ranked struct {
		res   *SearchResult
		exact float64
		place int
	}
	merged := map[int]*ranked{}
	var empty []string
	for _, q := range queries {
		hits, err := snap.ranker.Rank(ctx, q, topK, allow)
		if err != nil {
			if errors.Is(err, search.ErrUnavailable) {
				return nil, newError(CodeSearchUnavailable, err.Error())
			}
			return nil, err
		}
		n := 0
		for place, h := range hits {
			if h.Score < minScore || h.Score <= 0 {
				continue
			}
			n++
			r, ok := merged[h.Doc]
			if !ok {
				t := snap.tools[h.Doc]
				r = &ranked{res: &SearchResult{Name: t.Name, AppID: t.AppID, Description: snap.summaries[h.Doc]}, place: place}
				merged[h.Doc] = r
			}
			if h.Score > r.exact || h.Score == r.exact && place < r.place {
				r.exact, r.place = h.Score, place
			}
			if len(queries) > 1 {
				r.res.MatchedQueries = append(r.res.MatchedQueries, q)
			}
		}
		if n == 0 {
			empty = append(empty, q)
		}
	}
	order := make([]*ranked, 0, len(merged))
	for _, r := range merged {
		order = append(order, r)
	}
	sort.Slice(order, func(i, j int) bool {
		a, b := order[i], order[j]
		if a.exact != b.exact {
			return a.exact > b.exact
		}
		if a.place != b.place {
			return a.place < b.place
		}
		return a.res.Name < b.res.Name
	})
	for _, r := range order {
		r.res.RelevanceScore = float64(int(r.exact*1e3+0.5)) / 1e3
		out.Tools = append(out.Tools, *r.res)
	}
	switch {
	case len(out.Tools) == 0:
		out.Warnings = append(out.Warnings, Warning{Type: "no_results",
			Message: "no tool matched; try other words, fewer filters or a lower minRelevanceScore"})
	case len(empty) > 0:
		out.Warnings = append(out.Warnings, Warning{Type: "no_results",
			Message: fmt.Sprintf("no tool matched the quer%s %s", plural(len(empty), "y", "ies"), quoteList(empty))})
	}
	if len(out.Tools) > 0 && out.Tools[0].RelevanceScore < lowRelevanceScore {
		out.Warnings = append(out.Warnings, Warning{Type: "low_relevance",
			Message: fmt.Sprintf("the best match scores %.2f (below %.2f); results may not fit the query", out.Tools[0].RelevanceScore, lowRelevanceScore)})
	}
	return out, nil
}

// hasTag reports whether tags holds one of want (lowercase).
func hasTag(tags []string, want map[string]bool) bool {
	for _, t := range tags {
		if want[strings.ToLower(t)] {
			return true
		}
	}
	return false
}

// hintsOf is a tool's read-only and destructive hints with MCP's defaults:
// not read-only, destructive unless read-only.
func hintsOf(t *Tool) (readOnly, destructive bool) {
	a := t.Annotations
	if a != nil && a.ReadOnlyHint != nil {
		readOnly = *a.ReadOnlyHint
	}
	destructive = !readOnly
	if a != nil && a.DestructiveHint != nil {
		destructive = *a.DestructiveHint && !readOnly
	}
	return readOnly, destructive
}

// summaryOf is a tool's one-line summary for search results.
func summaryOf(t Tool) string { return oneLine(t.Description, MaxSummaryRunes) }

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func quoteList(qs []string) string {
	b, _ := json.Marshal(qs)
	return string(b)
}

// DescribeInput is meta:describe's input. Detail is DetailCompact (the
// default) or DetailFull.
type DescribeInput struct {
	ToolNames []string `json:"toolNames"`
	Detail    string   `json:"detail,omitempty"`
}

// meta:describe detail levels.
const (
	// DetailCompact answers with the tool's TypeScript signature (complete
	// input, output trimmed), a description of at most
	// compactDescriptionRunes and one generated usage example after the
	// declared ones: sized for a model's context.
	DetailCompact = "compact"
	// DetailFull adds the full input and output JSON Schemas, the whole
	// description and up to 5 usage examples, as the spec lists them.
	DetailFull = "full"
)

// Budgets of a compact describe entry (see TestDescribeAnswerSize: the
// whole tools/call result for the largest operation of a 1,000+ tool
// catalog stays under 6 KB, text and structuredContent included).
const (
	compactDescriptionRunes = 300
	// compactEntryBytes bounds one compact entry as it travels twice (the
	// structured JSON and the same JSON as an escaped text string).
	compactEntryBytes = 5600
)

// DescribeEntry is one entry of meta:describe's tools. Signature is always
// given; InputSchema and OutputSchema only with DetailFull.
// SignatureComplete is false when even the plainest signature had to cut
// the input's nesting to fit (then ask for DetailFull).
type DescribeEntry struct {
	Name              string          `json:"name"`
	AppID             string          `json:"appId"`
	Description       string          `json:"description"`
	Signature         string          `json:"signature"`
	SignatureComplete *bool           `json:"signatureComplete,omitempty"`
	InputSchema       json.RawMessage `json:"inputSchema,omitempty"`
	OutputSchema      json.RawMessage `json:"outputSchema,omitempty"`
	Deprecated        bool            `json:"deprecated,omitempty"`
	Annotations       DescribedHints  `json:"annotations"`
	UsageExamples     []Example       `json:"usageExamples"`
}

// DescribedHints are the annotations of a describe entry; readOnlyHint is
// always present (false when the tool does not declare it).
type DescribedHints struct {
	Title           string `json:"title,omitempty"`
	ReadOnlyHint    bool   `json:"readOnlyHint"`
	DestructiveHint *bool  `json:"destructiveHint,omitempty"`
	IdempotentHint  *bool  `json:"idempotentHint,omitempty"`
	OpenWorldHint   *bool  `json:"openWorldHint,omitempty"`
}

// DescribeOutput is meta:describe's output.
type DescribeOutput struct {
	Tools    []DescribeEntry `json:"tools"`
	NotFound []string        `json:"notFound,omitempty"`
}

// Describe runs meta:describe.
func (s *Service) Describe(ctx context.Context, in DescribeInput) (*DescribeOutput, error) {
	s.awaitSources(ctx, MetaDescribe)
	if len(in.ToolNames) == 0 {
		return nil, validationError("toolNames", "at least one tool name is required")
	}
	if len(in.ToolNames) > MaxDescribeNames {
		return nil, validationError("toolNames", fmt.Sprintf("at most %d names are allowed, got %d", MaxDescribeNames, len(in.ToolNames)))
	}
	switch in.Detail {
	case "", DetailCompact, DetailFull:
	default:
		return nil, validationError("detail", fmt.Sprintf("must be %q or %q, got %q", DetailCompact, DetailFull, in.Detail))
	}
	snap := s.index.snap.Load()
	out := &DescribeOutput{Tools: []DescribeEntry{}}
	seen := map[string]bool{}
	for i, name := range in.ToolNames {
		if strings.TrimSpace(name) == "" {
			return nil, validationError(fmt.Sprintf("toolNames.%d", i), "tool name is empty")
		}
		if seen[name] {
			continue
		}
		seen[name] = true
		idx, ok := snap.byName[name]
		if !ok || IsMetaToolName(name) {
			// Echoed cut, as a warning's names are: a name longer than a
			// tool name can be names nothing.
			out.NotFound = append(out.NotFound, clip.Ellipsis(name, MaxEchoedNameBytes))
			continue
		}
		if in.Detail == DetailFull {
			out.Tools = append(out.Tools, snap.describe(idx, true))
		} else {
			out.Tools = append(out.Tools, snap.compactEntry(idx))
		}
	}
	return out, nil
}

// compactEntry is the compact describe entry of tool idx, built once per
// snapshot (getTool asks for it at every call).
func (snap *snapshot) compactEntry(idx int) DescribeEntry {
	c := snap.compact[idx]
	c.once.Do(func() { c.e = snap.describe(idx, false) })
	return c.e
}

type lazyEntry struct {
	once sync.Once
	e    DescribeEntry
}

// describe is the describe entry of tool idx; scripts' describeTool shares it.
func (snap *snapshot) describe(idx int, full bool) DescribeEntry {
	t := snap.tools[idx]
	e := DescribeEntry{Name: t.Name, AppID: t.AppID, Deprecated: t.Deprecated}
	if full {
		e.Description = t.Description
		e.Signature, _ = Signature(t, nil)
		e.InputSchema, e.OutputSchema = t.InputSchema, t.OutputSchema
		if len(e.InputSchema) == 0 {
			e.InputSchema = json.RawMessage(`{"type":"object"}`)
		}
		if len(e.OutputSchema) == 0 {
			e.OutputSchema = json.RawMessage(`null`)
		}
	}
	if a := t.Annotations; a != nil {
		e.Annotations = DescribedHints{Title: a.Title, DestructiveHint: a.DestructiveHint,
			IdempotentHint: a.IdempotentHint, OpenWorldHint: a.OpenWorldHint}
		if a.ReadOnlyHint != nil {
			e.Annotations.ReadOnlyHint = *a.ReadOnlyHint
		}
	}
	e.UsageExamples = usageExamples(t, snap.schemas[idx].get(), full)
	if !full {
		e.Description = compactDescription(t.Description, snap.boilerplate, compactDescriptionRunes)
		sig, complete := Signature(t, func(sig string) bool {
			e.Signature = sig
			return wireSize(e) <= compactEntryBytes
		})
		if !complete {
			// Make room: a one-line description and no generated example.
			e.Description = oneLine(t.Description, MaxSummaryRunes)
			e.UsageExamples = e.UsageExamples[:min(len(t.Examples), len(e.UsageExamples))]
			sig, complete = Signature(t, func(sig string) bool {
				e.Signature = sig
				return wireSize(e) <= compactEntryBytes
			})
		}
		e.Signature = sig
		if !complete {
			e.SignatureComplete = new(false)
		}
	}
	return e
}

// wireSize is what an entry costs in a tools/call result as a client
// receives it: its JSON, and that JSON again as a JSON string in the text
// content.
func wireSize(v any) int {
	raw, _ := encodeJSON(v)
	structured, text := wireSizes(raw)
	return structured + text
}

// ExecuteInput is meta:execute's input. Context is the earlier contract's
// read-only object exposed as metaContext.
type ExecuteInput struct {
	Script       string          `json:"script"`
	AllowedTools []string        `json:"allowedTools,omitempty"`
	Context      json.RawMessage `json:"context,omitempty"`
}

// Execute runs meta:execute. Script outcomes (including errors) are in the
// result; an error is returned only for invalid input or when the engine
// could not run the script.
func (s *Service) Execute(ctx context.Context, in ExecuteInput) (*sandbox.Result, error) {
	return s.execute(s.awaitSources(ctx, MetaExecute), in, &host{s: s})
}

// allowedSet is allowedTools as a set, nil when the script has none.
func allowedSet(names []string) map[string]bool {
	if names == nil {
		return nil
	}
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// validateExecute checks meta:execute's input against a limit of maxScript
// bytes (a null context is dropped).
func validateExecute(in *ExecuteInput, maxScript int) error {
	if strings.TrimSpace(in.Script) == "" {
		return validationError("script", "script is empty")
	}
	if len(in.Script) > maxScript {
		return validationError("script", fmt.Sprintf("script is %d bytes, longer than the limit of %d bytes", len(in.Script), maxScript))
	}
	if string(in.Context) == "null" {
		in.Context = nil
	}
	if n := len(in.AllowedTools); n > broker.MaxAllowedTools {
		return validationError("allowedTools", fmt.Sprintf("at most %d names are allowed, got %d", broker.MaxAllowedTools, n))
	}
	if len(in.Context) > 0 && !isJSONObject(in.Context) {
		return validationError("context", "must be a JSON object")
	}
	if len(in.Context) > 0 {
		if msg := sandbox.CheckContext(in.Context); msg != "" {
			return validationError("context", msg)
		}
	}
	return nil
}

func (s *Service) execute(ctx context.Context, in ExecuteInput, h *host) (*sandbox.Result, error) {
	if err := validateExecute(&in, s.maxScript); err != nil {
		return nil, err
	}
	if s.opts.Engine == nil {
		return nil, newError(CodeEngineError, "no sandbox engine is configured")
	}
	req := sandbox.Request{Code: in.Script, AllowedTools: in.AllowedTools, Context: in.Context, Limits: s.opts.Limits}
	if h.ci != nil {
		// Scripts of MCP callers queue and share the sandbox per principal,
		// as the broker's do, not as one anonymous crowd.
		req.Principal = h.ci.principal()
	}
	h.allowed = allowedSet(in.AllowedTools)
	// The plan is a session of its own in the lifecycle events and logs.
	h.plan = s.startPlan(h.ci)
	ctx = telemetry.WithSessionID(ctx, h.plan.sess.ID)
	var sh sandbox.Host = h
	if h.progress != nil || h.log != nil {
		// Only a plan whose client can be told streams its console lines
		// (one more message per line from a worker).
		sh = consoleHost{h}
	}
	res, err := s.opts.Engine.Execute(ctx, req, sh)
	if err != nil {
		var ee *sandbox.Error
		if errors.As(err, &ee) {
			err = &Error{Code: ee.Code, Message: ee.Message, Transient: true}
		} else {
			err = newError(CodeEngineError, err.Error())
		}
		h.plan.finish(nil, err)
		return nil, err
	}
	res = s.scriptOutcome(res)
	h.plan.finish(res, nil)
	return res, nil
}

// scriptOutcome applies meta:execute's reporting rules to a script's result:
// a refused meta-tool call is illegal_access, and the sanitization options.
func (s *Service) scriptOutcome(res *sandbox.Result) *sandbox.Result {
	if e := res.Error; e != nil {
		// The engine sees a meta-tool call in a form it cannot know (a safe
		// name, a computed name) only when the host refuses it: report that
		// as the spec's illegal_access, like the literal meta: form.
		if e.Code == CodeSelfReferenceBlocked && res.Status == sandbox.StatusToolError {
			res.Status = sandbox.StatusIllegalAccess
			e.Kind = "SelfReference"
			e.Source = ""
		}
		s.opts.Sanitize.Error(e)
	}
	return res
}

func isJSONObject(raw json.RawMessage) bool {
	var m map[string]any
	return json.Unmarshal(raw, &m) == nil && m != nil
}

// InvokeInput is meta:invoke's input.
type InvokeInput struct {
	Tool  string          `json:"tool"`
	Input json.RawMessage `json:"input"`
}

// CallTool runs one indexed tool: self-reference check, lookup, input
// validation against the tool's schema, then the tool's source. It is what
// meta:invoke and scripts' callTool share.
func (s *Service) CallTool(ctx context.Context, name string, input json.RawMessage) (json.RawMessage, *Error) {
	return s.observedCall(s.awaitSources(ctx, "CallTool"), name, input, nil)
}

// callTool is CallTool; ask, when set, answers the tools only the caller
// can answer (by asking the MCP client).
func (s *Service) callTool(ctx context.Context, name string, input json.RawMessage, ask askFunc) (json.RawMessage, *Error) {
	if IsMetaToolName(name) {
		return nil, newError(CodeSelfReferenceBlocked, fmt.Sprintf("%s is a meta-tool and cannot be called from here", name))
	}
	snap := s.index.snap.Load()
	idx, ok := snap.byName[name]
	if !ok {
		if s.index.stillConnecting() {
			// Past the wait of observe (or called from a script): the
			// tool may be an upstream's that has not connected yet.
			return nil, newError(catalog.CodeUpstreamUnreachable, fmt.Sprintf("tool %q not found while upstream MCP servers are still making their first connection; try again shortly", name))
		}
		return nil, newError(CodeNotFound, fmt.Sprintf("tool %q not found; use %s to find available tools", name, s.opts.Naming.ExposedName(MetaSearch)))
	}
	if len(input) == 0 || string(input) == "null" {
		input = json.RawMessage(`{}`)
	}
	input, verr := snap.schemas[idx].get().validate(input)
	if verr != nil {
		verr.Message = fmt.Sprintf("input of %s: %s", name, verr.Message)
		return nil, verr
	}
	var out json.RawMessage
	var err error
	switch t := snap.tools[idx]; {
	case t.CallerAnswered && ask != nil:
		out, err = ask(ctx, t, input)
	case t.CallerAnswered:
		return nil, newError(CodeToolNotCallable, fmt.Sprintf("%s is answered by the MCP client, and this client cannot be asked: that needs the elicitation capability, over revision 2026-07-28 or a session of an older one", name))
	default:
		out, err = s.index.sources[snap.source[idx]].Call(ctx, name, input)
	}
	if err != nil {
		var me *Error
		if errors.As(err, &me) {
			c := *me
			c.Transient = transientError(&c)
			return nil, &c
		}
		var te *sandbox.ToolError
		if errors.As(err, &te) {
			return nil, newError(te.Code, te.Message)
		}
		return nil, newError(CodeToolExecutionError, err.Error())
	}
	if len(out) == 0 {
		out = json.RawMessage(`null`)
	}
	return out, nil
}

// validateToolInput checks input against an indexed tool's input schema.
func (s *Service) validateToolInput(name string, input json.RawMessage) *Error {
	snap := s.index.snap.Load()
	idx, ok := snap.byName[name]
	if !ok {
		return newError(CodeNotFound, fmt.Sprintf("tool %q not found", name))
	}
	if _, verr := snap.schemas[idx].get().validate(input); verr != nil {
		verr.Message = fmt.Sprintf("input of %s: %s", name, verr.Message)
		return verr
	}
	return nil
}

// host connects scripts to the index. ci, when set, is the meta-tool call
// the script belongs to (tool sources read it from the context); ask
// answers caller-answered tools.
// allowed, when set, is the script's allowedTools: discovery answers only
// with those.
type host struct {
	s   *Service
	ci  *CallInfo
	ask askFunc
	// questions is who an upstream's question during a call goes to.
	questions questionsCarrier
	allowed   map[string]bool
	// plan, when set, is the session whose tool events this host emits (a
	// plan run by the service's engine; the broker emits its own).
	plan *planSession
	// progress, when set, reports the plan's steps to the MCP client.
	progress *planProgress
	// log, when set, sends the plan's console lines to the MCP client as
	// log messages.
	log consoleLogger
}

// LookupTool answers getTool (and callTool's existence check) with the
// tool's compact description and signature, as meta:describe gives them,
// and its schemas.
func (h *host) LookupTool(name string) (sandbox.ToolInfo, bool) {
	if IsMetaToolName(name) {
		return sandbox.ToolInfo{}, false
	}
	snap := h.s.index.snap.Load()
	idx, ok := snap.byName[name]
	if !ok {
		return sandbox.ToolInfo{}, false
	}
	t := snap.tools[idx]
	in := t.InputSchema
	if len(in) == 0 {
		in = json.RawMessage(`{"type":"object"}`)
	}
	e := snap.compactEntry(idx)
	return sandbox.ToolInfo{Name: t.Name, Description: e.Description, Signature: e.Signature, InputSchema: in, OutputSchema: t.OutputSchema}, true
}

// SearchTools implements sandbox.Discovery: searchTools(query, options) in
// a script is meta:search with one query; it returns the list of tools
// (name, appId, description, relevanceScore), only allowedTools when the
// script has them.
func (h *host) SearchTools(ctx context.Context, request json.RawMessage) (json.RawMessage, error) {
	var in struct {
		Query             string   `json:"query"`
		TopK              *int     `json:"topK,omitempty"`
		AppIDs            []string `json:"appIds,omitempty"`
		Tags              []string `json:"tags,omitempty"`
		ReadOnly          *bool    `json:"readOnly,omitempty"`
		Destructive       *bool    `json:"destructive,omitempty"`
		MinRelevanceScore *float64 `json:"minRelevanceScore,omitempty"`
		ExcludeToolNames  []string `json:"excludeToolNames,omitempty"`
	}
	if err := decodeArgs(MetaSearch, request, &in); err != nil {
		return nil, toolErrorOf(err)
	}
	out, err := h.s.Search(ctx, SearchInput{Queries: []string{in.Query}, TopK: in.TopK, AppIDs: in.AppIDs, Tags: in.Tags,
		ReadOnly: in.ReadOnly, Destructive: in.Destructive, MinRelevanceScore: in.MinRelevanceScore, ExcludeToolNames: in.ExcludeToolNames})
	if err != nil {
		return nil, toolErrorOf(err)
	}
	tools := make([]SearchResult, 0, len(out.Tools))
	for _, r := range out.Tools {
		if h.allowed == nil || h.allowed[r.Name] {
			tools = append(tools, r)
		}
	}
	return json.Marshal(tools)
}

// DescribeTool implements sandbox.Discovery: describeTool(name) is
// meta:describe's compact entry of one tool, or null (also for a tool
// outside allowedTools).
func (h *host) DescribeTool(_ context.Context, name string) (json.RawMessage, error) {
	snap := h.s.index.snap.Load()
	idx, ok := snap.byName[name]
	if !ok || IsMetaToolName(name) || h.allowed != nil && !h.allowed[name] {
		return json.RawMessage("null"), nil
	}
	return json.Marshal(snap.compactEntry(idx))
}

// toolErrorOf turns a meta-tool error into the error a script sees.
func toolErrorOf(err error) error {
	var me *Error
	if errors.As(err, &me) {
		return &sandbox.ToolError{Code: me.Code, Message: scriptMessage(me)}
	}
	return err
}

// scriptMessage is the message a script sees: the field the error names
// and its message, the field once (a validation message names every field
// itself: "input of t: id: got string, want integer").
func scriptMessage(e *Error) string {
	if e.Field == "" || strings.HasPrefix(e.Message, e.Field+": ") || strings.Contains(e.Message, ": "+e.Field+": ") {
		return e.Message
	}
	return e.Field + ": " + e.Message
}

func (h *host) CallTool(ctx context.Context, call sandbox.ToolCall) (json.RawMessage, error) {
	if h.ci != nil {
		ctx = context.WithValue(ctx, callInfoKey{}, *h.ci)
		ctx = withCallerQuestions(ctx, h.questions)
	}
	if h.plan != nil {
		h.plan.calls.Add(1)
		h.s.emit(broker.Event{Name: broker.OnToolCalled, Session: h.plan.snapshot(), Tool: call.Name, CallID: call.ID, Input: call.Input})
	}
	h.progress.callStarted()
	out, err := h.s.observedCall(ctx, call.Name, call.Input, h.ask)
	h.progress.callDone(call.Name, err != nil)
	if h.plan != nil {
		ev := broker.Event{Name: broker.OnToolCompleted, Session: h.plan.snapshot(), Tool: call.Name, CallID: call.ID, Result: out}
		if err != nil {
			ev.Result, ev.Err = nil, &sandbox.ToolError{Code: err.Code, Message: err.Message}
		}
		h.s.emit(ev)
	}
	if err != nil {
		return nil, &sandbox.ToolError{Code: err.Code, Message: scriptMessage(err)}
	}
	return out, nil
}
