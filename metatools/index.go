package metatools

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/codemode-gateway/caddy-codemode/metatools/search"
)

// IndexOptions configure an Index; nil fields mean defaults.
type IndexOptions struct {
	// Strategy ranks search results (embedding.strategy): search.BM25Strategy
	// (the spec's "tfidf", the default), search.EmbeddingStrategy ("ml") or
	// search.HybridStrategy.
	Strategy search.Strategy
	// Logger defaults to zap.NewNop().
	Logger *zap.Logger
	// Now is the clock of ChangedAt; nil means time.Now.
	Now func() time.Time
}

// Index is the one tool index behind the meta-tools: the union of its
// sources' tools, searchable, rebuilt whenever a source reports a change.
// Reads never block on a rebuild: they see the latest complete snapshot.
type Index struct {
	sources []ToolSource
	opts    IndexOptions
	logger  *zap.Logger

	closed    atomic.Bool
	mu        sync.Mutex // serialises rebuilds
	lists     [][]Tool   // last good list per source
	snap      atomic.Pointer[snapshot]
	listeners []func(total int)
	unlisten  []func() // removes this index's OnChange registrations

	// connecting is closed when the sources' first connection attempts are
	// over (nil: none were announced); see Connecting.
	connecting atomic.Pointer[chan struct{}]
	connected  sync.Once
}

// DefaultConnectWait is Options.ConnectWait's default.
const DefaultConnectWait = 5 * time.Second

// Connecting announces sources that are making their first connection
// (upstream MCP servers a front end starts after building the index): until
// done is called, meta-tool calls wait for it (up to Options.ConnectWait)
// instead of answering without those sources' tools. done marks the first
// attempts over, whether they connected or not (each source's tools join
// when it connects); Close calls it too. Call Connecting before the index
// serves requests.
func (ix *Index) Connecting() (done func()) {
	ch := make(chan struct{})
	ix.connecting.Store(&ch)
	return ix.doneConnecting
}

func (ix *Index) doneConnecting() {
	if ch := ix.connecting.Load(); ch != nil {
		ix.connected.Do(func() { close(*ch) })
	}
}

// stillConnecting reports sources announced by Connecting whose first
// connection attempts are not over yet.
func (ix *Index) stillConnecting() bool {
	ch := ix.connecting.Load()
	if ch == nil {
		return false
	}
	select {
	case <-*ch:
		return false
	default:
		return true
	}
}

// awaitConnecting waits until the first connection attempts announced by
// Connecting are over, up to max or ctx's end; it reports whether they are.
// Once they are, it costs an atomic load and a closed channel's receive.
func (ix *Index) awaitConnecting(ctx context.Context, max time.Duration) bool {
	ch := ix.connecting.Load()
	if ch == nil {
		return true
	}
	select {
	case <-*ch:
		return true
	default:
	}
	t := time.NewTimer(max)
	defer t.Stop()
	select {
	case <-*ch:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

type snapshot struct {
	// version identifies the tool set (see Index.Version); changed is when
	// it last differed from the previous snapshot's.
	version string
	changed time.Time
	// callerAnswered is true when a tool needs the MCP client's answer.
	callerAnswered bool
	// mayAsk is true when a tool comes from an upstream MCP server, whose
	// calls may ask the MCP client a question.
	mayAsk bool

	tools []Tool
	// summaries are the tools' one-line summaries for search results.
	summaries []string
	source    []int // source index per tool
	byName    map[string]int
	ranker    search.Ranker
	schemas   []*lazySchema
	compact   []*lazyEntry
	// boilerplate are the description sentences common to many tools,
	// left out of compact descriptions.
	boilerplate search.Boilerplate
}

type lazySchema struct {
	once   sync.Once
	raw    []byte
	c      compiledSchema
	tool   string
	logger *zap.Logger
}

func (l *lazySchema) get() compiledSchema {
	l.once.Do(func() {
		l.c = compileSchema(l.raw)
		if l.c.err != nil && l.logger != nil {
			l.logger.Warn("tool input schema does not compile; the tool is called without our validation",
				zap.String("tool", l.tool), zap.Error(l.c.err))
		}
	})
	return l.c
}

// NewIndex returns an index over sources; call Reload to fill it. Sources
// implementing ChangeNotifier are reloaded when they report a change.
func NewIndex(sources []ToolSource, opts *IndexOptions) (*Index, error) {
	ix := &Index{sources: sources, lists: make([][]Tool, len(sources))}
	if opts != nil {
		ix.opts = *opts
	}
	if ix.opts.Strategy == nil {
		ix.opts.Strategy = search.BM25Strategy{}
	}
	ix.logger = ix.opts.Logger
	if ix.logger == nil {
		ix.logger = zap.NewNop()
	}
	if ix.opts.Now == nil {
		ix.opts.Now = time.Now
	}
	ix.snap.Store(ix.build(nil))
	for i, s := range sources {
		if n, ok := s.(ChangeNotifier); ok {
			ix.unlisten = append(ix.unlisten, n.OnChange(func() {
				if ix.closed.Load() {
					return
				}
				// A notification may arrive while the source holds its own
				// lock; reload from a fresh goroutine.
				go ix.reloadSource(context.Background(), i)
			}))
		}
	}
	return ix, nil
}

// Close stops reacting to change notifications and unregisters from its
// sources, which may outlive it (a config reload keeps the broker but builds
// a new index).
func (ix *Index) Close() {
	if ix.closed.Swap(true) {
		return
	}
	ix.doneConnecting()
	for _, remove := range ix.unlisten {
		remove()
	}
}

// OnReload registers fn to be called after each rebuild with the new tool
// count (tests and the MCP server use it).
func (ix *Index) OnReload(fn func(total int)) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.listeners = append(ix.listeners, fn)
}

// Reload lists every source and rebuilds the index. A source that fails keeps
// its previous tools; the first error is returned after the rebuild.
func (ix *Index) Reload(ctx context.Context) error {
	ix.mu.Lock()
	var first error
	for i, s := range ix.sources {
		tools, err := s.Tools(ctx)
		if err != nil {
			ix.logger.Warn("listing tools of a source failed; keeping its previous tools", zap.Int("source", i), zap.Error(err))
			if first == nil {
				first = fmt.Errorf("listing tools of source %d: %w", i, err)
			}
			continue
		}
		ix.lists[i] = tools
	}
	ix.rebuildLocked()
	return first
}

// ReloadSource lists source i again and rebuilds the index. A front end
// that starts its remote sources later (MCP upstreams) fills the index with
// its local ones (the broker's tools) this way before it serves a request.
func (ix *Index) ReloadSource(ctx context.Context, i int) error {
	ix.mu.Lock()
	tools, err := ix.sources[i].Tools(ctx)
	if err != nil {
		ix.mu.Unlock()
		return fmt.Errorf("listing tools of source %d: %w", i, err)
	}
	ix.lists[i] = tools
	ix.rebuildLocked()
	return nil
}

func (ix *Index) reloadSource(ctx context.Context, i int) {
	ix.mu.Lock()
	tools, err := ix.sources[i].Tools(ctx)
	if err != nil {
		ix.mu.Unlock()
		ix.logger.Warn("reloading tools of a source failed", zap.Int("source", i), zap.Error(err))
		return
	}
	ix.lists[i] = tools
	ix.rebuildLocked()
}

// rebuildLocked builds and publishes a snapshot, then unlocks ix.mu and
// notifies listeners.
func (ix *Index) rebuildLocked() {
	snap := ix.build(ix.snap.Load())
	ix.snap.Store(snap)
	listeners := append([]func(int){}, ix.listeners...)
	ix.mu.Unlock()
	for _, fn := range listeners {
		fn(len(snap.tools))
	}
}

func (ix *Index) build(prev *snapshot) *snapshot {
	s := &snapshot{byName: map[string]int{}}
	for si, list := range ix.lists {
		for _, t := range list {
			if t.Name == "" || IsMetaToolName(t.Name) {
				ix.logger.Warn("skipping tool with an empty or reserved name", zap.String("tool", t.Name))
				continue
			}
			if _, dup := s.byName[t.Name]; dup {
				ix.logger.Warn("duplicate tool name; the first source wins", zap.String("tool", t.Name))
				continue
			}
			s.callerAnswered = s.callerAnswered || t.CallerAnswered
			if _, up := ix.sources[si].(*Upstream); up {
				s.mayAsk = true
			}
			s.byName[t.Name] = len(s.tools)
			s.tools = append(s.tools, t)
			s.summaries = append(s.summaries, summaryOf(t))
			s.source = append(s.source, si)
			s.schemas = append(s.schemas, &lazySchema{raw: t.InputSchema, tool: t.Name, logger: ix.logger})
			s.compact = append(s.compact, &lazyEntry{})
		}
	}
	docs := make([]search.Doc, len(s.tools))
	descs := make([]string, len(s.tools))
	for i, t := range s.tools {
		docs[i] = docOf(t)
		descs[i] = t.Description
	}
	s.boilerplate = search.FindBoilerplate(descs)
	s.ranker = ix.opts.Strategy.NewRanker(docs)
	s.version = toolSetVersion(s.tools)
	if prev != nil && prev.version == s.version {
		s.changed = prev.changed
	} else {
		s.changed = ix.opts.Now()
	}
	return s
}

// toolSetVersion hashes everything a client of the meta-tools can see of
// the tools: names, descriptions, schemas, annotations, examples, tags.
func toolSetVersion(tools []Tool) string {
	sorted := append([]Tool(nil), tools...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	h := sha256.New()
	enc := json.NewEncoder(h)
	for _, t := range sorted {
		_ = enc.Encode(t) // a Tool always encodes
	}
	return hex.EncodeToString(h.Sum(nil)[:12])
}

// Version identifies the current tool set: it changes when a tool is added,
// removed or changed in any source (a catalog source reloaded, an upstream
// server that connected or listed new tools), and only then.
func (ix *Index) Version() string { return ix.snap.Load().version }

// ChangedAt is when Version last changed (the index's creation at first).
func (ix *Index) ChangedAt() time.Time { return ix.snap.Load().changed }

// fromUpstream reports whether tool name comes from an upstream MCP
// server.
func (ix *Index) fromUpstream(name string) bool {
	s := ix.snap.Load()
	if !s.mayAsk {
		return false
	}
	i, ok := s.byName[name]
	if !ok {
		return false
	}
	_, up := ix.sources[s.source[i]].(*Upstream)
	return up
}

// mayAskCaller reports whether a tool of the index needs the MCP client's
// answer or comes from an upstream MCP server, which may ask it a question
// during a call.
func (ix *Index) mayAskCaller() bool {
	s := ix.snap.Load()
	return s.callerAnswered || s.mayAsk
}

// Len is the number of tools in the index.
func (ix *Index) Len() int { return len(ix.snap.Load().tools) }

// Tools returns the indexed tools sorted by name.
func (ix *Index) Tools() []Tool {
	out := append([]Tool(nil), ix.snap.Load().tools...)
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Lookup finds a tool by name.
func (ix *Index) Lookup(name string) (Tool, bool) {
	s := ix.snap.Load()
	i, ok := s.byName[name]
	if !ok {
		return Tool{}, false
	}
	return s.tools[i], true
}

// docOf is what search indexes of a tool: the top-level parameters with
// their descriptions, and the nested input fields (a request body's
// properties at any depth) with their names, enum values and descriptions.
func docOf(t Tool) search.Doc {
	d := search.Doc{Name: t.Name, AppID: t.AppID, Description: t.Description, Tags: t.Tags, Deprecated: t.Deprecated, Path: t.Path, Method: t.Method, FullName: t.FullName}
	if a := t.Annotations; a != nil && a.ReadOnlyHint != nil {
		d.Access = search.AccessWrite
		if *a.ReadOnlyHint {
			d.Access = search.AccessRead
		}
	}
	var s map[string]any
	if len(t.InputSchema) > 0 && json.Unmarshal(t.InputSchema, &s) == nil {
		w := &schemaWalker{budget: maxIndexedFields}
		w.walk(s, 0)
		d.Params, d.FieldNames, d.FieldDocs, d.EnumValues, d.Kinds = w.params.String(), w.names.String(), w.docs.String(), w.enums.String(), w.kinds.String()
		if ro, _ := hintsOf(&t); !ro {
			d.States = w.states.String() // a read-only call sets nothing
		}
		d.RequiredNames = requiredOf(s)
		d.Required = len(d.RequiredNames)
	}
	return d
}

// maxStateDepth is the deepest level of a field whose values are states a
// call sets: a parameter (0) or a request body's field (1) — "state":
// "closed", "archived": true. Deeper fields of a body that carries a whole
// object (a Kubernetes pod's status.phase "Running") describe it, they are
// not what the call is for.
const maxStateDepth = 1

// maxSwitchDepth is the deepest level of a one-word boolean field that is a
// state a call sets: one level deeper than an enum's, because a body that
// carries a whole object keeps its switches in its spec ("suspend a cron
// job": spec.suspend; "pause a rollout": spec.paused), where a value such
// as status.phase describes it.
const maxSwitchDepth = 2

// maxIndexedFields bounds the schema nodes indexed per tool: a body of
// thousands of nested properties adds noise, not findability.
const maxIndexedFields = 400

type schemaWalker struct {
	params, names, docs, enums, states, kinds strings.Builder
	budget                                    int
}

// kindField reports whether a field's name says it holds the kind of the
// thing a call makes or edits: "type", "kind", "workType",
// "resource_subtype" (not "content_type_id").
func kindField(name string) bool {
	if n := len(name); n < 4 || !strings.EqualFold(name[n-4:], "type") && !strings.EqualFold(name[n-4:], "kind") {
		return false // most fields: no need to split the name
	}
	toks := search.Tokenize(name)
	if len(toks) == 0 {
		return false
	}
	last := toks[len(toks)-1]
	return last == "type" || last == "kind" || last == "subtype"
}

func (w *schemaWalker) walk(s map[string]any, depth int) {
	if s == nil || w.budget <= 0 || depth > 6 {
		return
	}
	for _, e := range asSlice(s["enum"]) {
		if v, ok := e.(string); ok {
			w.enums.WriteString(v)
			w.enums.WriteByte(' ')
			if depth <= maxStateDepth+1 {
				w.states.WriteString(v + " ")
			}
		}
	}
	if c, ok := s["const"].(string); ok {
		w.enums.WriteString(c + " ")
	}
	props, _ := s["properties"].(map[string]any)
	names := make([]string, 0, len(props))
	for name := range props {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if w.budget--; w.budget < 0 {
			return
		}
		p, _ := props[name].(map[string]any)
		desc := fieldDescription(p)
		if depth <= maxSwitchDepth && slices.Contains(schemaTypes(p), "boolean") {
			// A boolean field named by one word is a state a call can set
			// ("archived", "is_locked", "draft"); a longer name is an
			// option ("accept_partial_authorization").
			if toks := search.Tokenize(name); len(toks) == 1 || len(toks) == 2 && (toks[0] == "is" || toks[0] == "has") {
				w.states.WriteString(name + " ")
			}
		}
		if depth <= maxStateDepth && kindField(name) {
			for _, e := range asSlice(p["enum"]) {
				if v, ok := e.(string); ok {
					w.kinds.WriteString(v + " ")
				}
			}
		}
		if depth == 0 {
			w.params.WriteString(name + " ")
			if desc != "" {
				first, _ := search.SplitSummary(desc)
				w.params.WriteString(first + " ")
			}
		} else {
			w.names.WriteString(name + " ")
			if desc != "" {
				first, _ := search.SplitSummary(desc)
				w.docs.WriteString(withoutExamples(first) + " ")
			}
		}
		w.walk(p, depth+1)
	}
	if items, ok := s["items"].(map[string]any); ok {
		w.walk(items, depth)
	}
	for _, k := range []string{"oneOf", "anyOf", "allOf"} {
		for _, alt := range asSlice(s[k]) {
			if m, ok := alt.(map[string]any); ok {
				w.walk(m, depth)
			}
		}
	}
}

// fieldDescription is what documents a field: its own description, or, when
// it has none, that of its allOf wrapper — OpenAPI 3.0 cannot put siblings
// next to a $ref, so a field of a shared type is documented as
// {"allOf": [{"$ref": …}, {"description": …}]} (every AWS document converted
// by APIs.guru). The wrapper's entry that only describes is the field's own
// word; the referenced type's description says what the type is.
func fieldDescription(p map[string]any) string {
	if d, ok := p["description"].(string); ok {
		return d
	}
	for _, alt := range asSlice(p["allOf"]) {
		m, _ := alt.(map[string]any)
		if d, ok := m["description"].(string); ok && !isSchemaShape(m) {
			return d
		}
	}
	return ""
}

// isSchemaShape says whether a schema says what a value is (a type, its
// fields, items or values, a reference), not only how it is described.
func isSchemaShape(m map[string]any) bool {
	for _, k := range []string{"$ref", "type", "properties", "items", "enum", "const", "allOf", "anyOf", "oneOf"} {
		if _, ok := m[k]; ok {
			return true
		}
	}
	return false
}

// exampleRe finds where a field's description starts giving examples.
var exampleRe = regexp.MustCompile(`(?i)(,\s*|\s+\(|\s+)((such as|for example|for instance)\b|e\.g\.)`)

// withoutExamples is a field's description without the examples it gives
// ("The name of the provider, such as Facebook, Google, or Login with
// Amazon"): an example value says what the field may hold, not what the
// call does, and a request that names it asks for the call that is about
// it.
func withoutExamples(s string) string {
	if loc := exampleRe.FindStringIndex(s); loc != nil {
		return s[:loc[0]]
	}
	return s
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}

func requiredOf(s map[string]any) []string {
	var out []string
	for _, r := range asSlice(s["required"]) {
		if n, ok := r.(string); ok {
			out = append(out, n)
		}
	}
	return out
}
