package search

import (
	"context"
	"fmt"
	"math"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
)

// Doc is one searchable tool. The fields are indexed separately and weighted
// (BM25F), so a word in a tool's name counts more than one deep in its
// request body's field descriptions.
type Doc struct {
	// Name is the tool name, e.g. "github:listRepos" or "sendgrid:GET_alerts".
	Name string
	// AppID is the owning app; its words are indexed with the name.
	AppID string
	// Description is the full description; its first line or sentence is
	// indexed as the summary, with more weight than the rest.
	Description string
	// Params holds the top-level parameter names and their descriptions.
	Params string
	// FieldNames are the names of nested input fields (request body
	// properties at any depth, array items' properties).
	FieldNames string
	// FieldDocs are the first sentences of the nested fields' descriptions.
	FieldDocs string
	// EnumValues are the allowed values of every input field ("closed",
	// "APPROVE"): an API often expresses an everyday verb as a state.
	EnumValues string
	// States are the states a call can set: enum values and the names of
	// boolean fields ("closed", "APPROVE", "archived"). A request that
	// opens with a verb meets them as state terms: "close an issue" finds
	// the update whose state can be "closed".
	States string
	// Tags are free-form labels (OpenAPI tags, for example).
	Tags []string
	// Required is the number of required parameters: a request to list
	// things prefers tools that need no identifier.
	Required int
	// RequiredNames are the required parameters' names: a request that
	// names what a parameter identifies ("pods in a namespace") expects to
	// give it.
	RequiredNames []string
	// Deprecated tools rank below equivalent current ones.
	Deprecated bool
	// Path is the HTTP path template of an OpenAPI operation
	// ("/repos/{owner}/{repo}/issues/{index}/comments"); its static segments
	// are indexed (not its parameters, version markers or file extensions).
	Path string
	// Method is the operation's HTTP method ("POST"): a request that names
	// the call ("POST /repos/{owner}/{repo}/issues") finds it.
	Method string
	// Kinds are the enum values of a field of the input that holds the
	// kind of the thing a call makes or edits ("workType": ASSIGNMENT,
	// SHORT_ANSWER_QUESTION): a request names the thing by its kind ("delete
	// an assignment"), and every call on that thing is indexed with them.
	Kinds string
	// FullName is the tool's name before a catalog cut it to a length limit
	// ("kubernetes_deleteAdmissionregistrationV1CollectionMutatingWebh_3f2a1c"
	// was …MutatingWebhookConfiguration), "" when it was not cut: its words,
	// verb and head noun are the tool's, not the cut name's.
	FullName string
	// Access is what the tool declares of itself: AccessRead (read-only),
	// AccessWrite (not read-only) or AccessUnknown. It stands for the
	// intent of a tool whose name and summary have no intent word
	// ("assignIssue", "validateProjectKey").
	Access Access
}

// Access is a tool's declared effect.
type Access int8

// The declared effects.
const (
	AccessUnknown Access = iota
	AccessRead
	AccessWrite
)

// Hit is a ranked result: Doc is an index into the documents given to the
// ranker, Score the relevance in 0..1.
type Hit struct {
	Doc   int
	Score float64
}

// Ranker ranks documents for one query. allow filters documents (nil allows
// all). Implementations are safe for concurrent use.
type Ranker interface {
	Rank(ctx context.Context, query string, k int, allow func(doc int) bool) ([]Hit, error)
}

// The BM25F fields.
const (
	fieldName = iota
	fieldSummary
	fieldBody
	fieldParams
	fieldFieldNames
	fieldFieldDocs
	fieldEnums
	fieldTags
	fieldIntent
	fieldStates
	fieldNameParts
	fieldPath
	numFields
)

// fieldWeights were set on the tuning catalogs (SendGrid, Jira; the intent
// field's by leave-one-catalog-out over all five, the path's over all
// twelve in the thirteenth pass: 0.8–1.0 gained on three catalogs and lost
// on none); see docs/search.md.
var fieldWeights = [numFields]float64{
	fieldName:       2.5,
	fieldSummary:    2.5,
	fieldBody:       0.5,
	fieldParams:     0.6,
	fieldFieldNames: 0.5,
	fieldFieldDocs:  0.15,
	fieldEnums:      0.5,
	fieldTags:       1.0,
	fieldIntent:     1.4,
	fieldStates:     1.0,
	fieldNameParts:  1.0,
	fieldPath:       0.8,
}

// fieldB is BM25's length normalisation per field: long bodies and long
// field lists are discounted, names and summaries barely.
var fieldB = [numFields]float64{
	fieldName:       0.3,
	fieldSummary:    0.5,
	fieldBody:       0.75,
	fieldParams:     0.75,
	fieldFieldNames: 0.75,
	fieldFieldDocs:  0.75,
	fieldEnums:      0.75,
	fieldTags:       0.3,
	fieldIntent:     0,
	fieldStates:     0,
	fieldNameParts:  0.3,
	fieldPath:       0.3,
}

// The ranking's tuning parameters: variables only so that a tuning aid can
// vary them in a test binary; nothing changes them at run time.
var (
	k1 = 1.2
	// intentQueryWeight is the weight of a query's intent term.
	intentQueryWeight = 0.6
	// Weights of a query word's relatives: WordNet derived forms
	// ("approval" for "approve"), WordNet synonyms, a joined compound
	// ("user name" -> "username").
	derivedWeight = 0.6
	// actionVerbWeight is the weight of an imperative's verb as a word.
	actionVerbWeight = 0.7
	// stateWeight is the weight of a leading verb's state term.
	stateWeight = 1.0
	// createsExisting is the factor of a call that only creates, for a
	// request that names its thing by number.
	createsExisting = 0.35
	// intentWordWeight is the weight of the query's intent verb as a word.
	intentWordWeight = 0.4
	synonymWeight    = 0.3
	compoundWeight   = 0.8
	// Weights of a word's broader words, read only when no tool has the
	// word or any of its relatives: a WordNet hypernym ("odometer":
	// meter) and an attribute ("successful": success); and of a hypernym
	// of a word no tool has but whose relatives some have.
	hypernymWeight       = 0.2
	attributeWeight      = 0.3
	absentHypernymWeight = 0.1
	// listNeedsNoID scales the score of a tool with required parameters
	// when the query asks to list (and not to get one thing). 0.8 (and the
	// intent field's 1.4) were chosen leave-one-catalog-out: each was the
	// best one-parameter change on four tuning catalogs in the folds that
	// picked it and lost nothing on the fifth.
	listNeedsNoID = 0.8
	// intentMismatch scales the score of a tool whose intents all belong to
	// other families than the query's: "list bounced emails" should not
	// rank DELETE /bounces/{email} first.
	intentMismatch = 0.7
	// titleCoverage is the bonus for a query that covers all of a tool's
	// title (summary and name), with the square of the part it covers: a
	// title half covered gets a quarter of it.
	titleCoverage = 3.0
	// scoreScale maps scores to 0..1: a tool matching every query word at
	// full weight with its title half covered scores about 0.7, and no
	// score exceeds 1.
	scoreScale = 1 + titleCoverage/2
	// implicitReadFactor scales tools that do not read when the query names
	// no intent.
	implicitReadFactor = 0.9
	// actionReadFactor scales tools that only read when the query opens
	// with a verb and its object.
	actionReadFactor = 0.8
	// actionWriteCover is how much of a title's writing verb an
	// imperative of another verb covers ("attach a file": Add attachment).
	actionWriteCover = 0.25
	// itemPathFactor scales, for a list request, a reading tool whose
	// path ends in a parameter (`GET /pools/{pool_name}`): it reads one
	// thing, whatever its name and summary say. On the tuning catalogs 0.9
	// is best (0.95 gains one rank less); 0.85 and below lose a tool that
	// reads one tag with its topics.
	itemPathFactor = 0.9
	// listPathFactor scales, for a request to read one thing that is not a
	// question, a tool that lists a collection (see listPath). 0.7–0.9
	// give the same ranks on the tuning catalogs.
	listPathFactor = 0.9
	// pluralHeadFactor scales, for a list request, a tool whose name
	// writes its head in the plural (`getGoals` over `getGoal`).
	pluralHeadFactor = 1.05
	// oppositeSwitchFactor scales, for a request to turn something on
	// or off, or to join two things or undo the join, a tool whose name
	// does the other ("turn on DNSSEC": not Disable…; "detach a VPC": not
	// Associate…). 0.5-0.7 give the same ranks, 0.8 one fewer.
	oppositeSwitchFactor = 0.7
	// headInModifier scales a tool whose name's head noun only the
	// request's modifier names ("a ticket in a project": createProject).
	headInModifier = 0.7
	// headUnnamed scales, for a list request that is not a question, a
	// tool whose name's head noun the request names nowhere, not even by
	// a relative ("list all workspaces": not listSourcesForWorkspace,
	// whose short title it covers more of than listWorkspaces' long
	// one). 0.85 is best on the tuning
	// catalogs (0.8 loses a rank on one, 0.9 gains less); on every request
	// it cost ranks on ten of them, on list questions three ("what
	// commands does this device's protocol support?").
	headUnnamed = 0.85
	// deprecatedFactor demotes deprecated tools.
	deprecatedFactor = 0.75
	// objectUnmatched scales a tool that matches a request's modifier but
	// not its object.
	objectUnmatched = 0.7
	// objectShare is the part of its best score a word of the request's
	// object must reach in a tool to count as matched there.
	objectShare = 0.1
	// boilerplateDocs: a description sentence found in at least this many
	// tools (and 1% of them) is boilerplate ("OAuth app tokens need the repo
	// scope") and is not indexed.
	boilerplateDocs = 3
	// sharedSummaryShare: a summary found word for word in 1/this of the
	// tools says nothing of any one (see dropSharedSummaries); a few tools
	// sharing one name the same thing ("Deletes a payable." for XTRF's four
	// deletePayable calls).
	sharedSummaryShare = 20
	// otherAppFactor scales a tool of another app than the one a request
	// names ("create an issue in Jira" over Jira and GitHub tools).
	otherAppFactor = 0.7
)

type posting struct {
	doc int32
	// sat is the saturated BM25F term weight tf'/(k1+tf') of the term in doc.
	sat float32
}

// BM25 is a BM25F ranker over tool documents with lemmatization, related
// words and intents. Build it once per tool set; it is immutable afterwards.
type BM25 struct {
	postings map[string][]posting
	idf      map[string]float64
	n        int
	// families are each document's intent families (see intentFamily).
	families [][]Intent
	required []bool
	// requiredTerms are the terms of each required parameter's name.
	requiredTerms [][][]string
	deprecated    []bool
	access        []Access
	// titles are the distinct terms of each document's summary and local
	// name (intent words as their intent term): how much of a tool's title
	// a query covers is evidence that the tool is what was asked for.
	titles [][][]string
	// states are each document's state terms ("=close").
	states []map[string]bool
	// words are the words of the tools' titles as written.
	words map[string]bool
	// heads are the lemmas of the thing each tool acts on (see nameHead).
	heads []string
	// switches says whether a tool's name opens with a verb that turns
	// something on (1: enable, activate) or off (-1: disable, deactivate).
	switches []int8
	// onDeleted marks the tools whose name qualifies their thing as
	// deleted ("GetDeletedSecret", "PurgeDeletedKey"): they act on what a
	// soft delete keeps (see deletedWords).
	onDeleted []bool
	// anyDeleted says some tool is onDeleted: only then does a request's
	// plan look for words of deleted things.
	anyDeleted bool
	// undoesJoins says some tool's name undoes a join (detach,
	// disassociate, disconnect, unassign, unlink): only then does a
	// request that opens with such a verb ask for that call rather than a
	// delete (see requestIntent).
	undoesJoins bool
	// turnsOnOff says some tool's name turns a thing on or off (enable,
	// disable, pause, …): then a request to do so asks for that call, not
	// for an update's boolean field (see onOffVerbs).
	turnsOnOff bool
	// makesJoins says some tool's name makes a join (attach, associate,
	// bind, connect, assign, link): only then does a request that opens with
	// such a verb ask for that call rather than a create.
	makesJoins bool
	// pluralHead says whether the name writes its head in the plural
	// (`getGoals`, `listPods`).
	pluralHead []bool
	// headSet holds every tool's head.
	headSet map[string]bool
	// headIdx numbers each tool's head among headNames, -1 for none or a
	// generic one: a request checks each distinct head once, not each
	// tool's (see queryPlan.headNamed).
	headIdx   []int32
	headNames []string
	// headFields are, per head, the nested field names (terms) of the
	// tools that update it: the parts of the thing an edit can set.
	headFields map[string]map[string]bool
	// apps are each tool's app id as its words run together ("sendgrid",
	// "googlecalendar": a request may write "SendGrid" or "Google
	// Calendar"), appSet all of them (see withoutApps).
	apps   []string
	appSet map[string]bool
	// byName finds a tool by its name or its local name, lowercased (see
	// nameKeys); paths and methods are each tool's path template's
	// segments and HTTP method (see namedDocs).
	byName  map[string][]int
	paths   [][]string
	methods []string
	// queryKeys are the keys of the query part a path template carries
	// after "?" or "#" ("/{Bucket}#versioning": versioning), which tell
	// apart calls of one path.
	queryKeys [][]string
	// queryPairs are the literal keys and values of that query part (see
	// queryPairsOf).
	queryPairs [][]string
	// itemPath says whether a tool reads one thing of a collection: a GET
	// whose path ends in a parameter, not named or summarised as a list.
	itemPath []bool
	// listPath says whether a tool lists a collection: a GET named or
	// summarised as a list whose path ends in a literal segment.
	listPath []bool
	// spelling is the catalog's words a typo is read as, with their
	// document frequency, built on the first typo (see typo.go).
	spelling     map[string]int32
	spellingOnce sync.Once
	// reverse maps a word to the catalog's terms that WordNet relates to
	// it (see relativesOf).
	reverse     map[string][]weighted
	reverseOnce sync.Once
}

// intentFamily groups the intents whose tools answer the same kind of
// request: reads (get, list, search) are interchangeable.
func intentFamily(i Intent) Intent {
	switch i {
	case IntentGet, IntentList, IntentSearch:
		return IntentGet
	}
	return i
}

var (
	htmlTagRe  = regexp.MustCompile(`<[^>]*>`)
	mdLinkRe   = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
	urlRe      = regexp.MustCompile(`https?://\S+`)
	sentenceRe = regexp.MustCompile(`[.!?]\s+|\n+`)
	// noticeRe is a description that opens with a notice's label: "Note:",
	// "**Warning:**", "Important:".
	noticeRe = regexp.MustCompile(`(?i)^[*_\s]*(note|notice|warning|important|caution|attention)[*_\s]*:`)
)

// CleanText drops what carries no words a user would search for: HTML
// tags, link targets (the link text stays) and bare URLs.
func CleanText(s string) string {
	if strings.ContainsRune(s, '<') {
		s = htmlTagRe.ReplaceAllString(s, " ")
	}
	if strings.Contains(s, "](") {
		s = mdLinkRe.ReplaceAllString(s, "$1")
	}
	if strings.Contains(s, "://") {
		s = urlRe.ReplaceAllString(s, " ")
	}
	return s
}

// SplitSummary splits a description into its first line or sentence and the
// rest, after CleanText.
func SplitSummary(desc string) (summary, body string) {
	desc = strings.TrimSpace(CleanText(desc))
	end := len(desc)
	if i := strings.IndexByte(desc, '\n'); i >= 0 {
		end = i
	}
	if i := strings.Index(desc[:end], ". "); i >= 0 {
		end = i + 1
	}
	return strings.TrimSpace(desc[:end]), desc[end:]
}

func sentences(body string) []string {
	var out []string
	for _, s := range sentenceRe.Split(body, -1) {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// Boilerplate is the set of description sentences (after the summary,
// lowercase) that recur in so many of descriptions that they say nothing
// about one tool ("OAuth app tokens and personal access tokens (classic)
// need the repo scope to use this endpoint."): search does not index them,
// and meta:describe's compact answer leaves them out.
type Boilerplate map[string]bool

// FindBoilerplate finds the boilerplate sentences of a tool set's
// descriptions: those in at least boilerplateDocs of them and 1%.
func FindBoilerplate(descriptions []string) Boilerplate {
	counts := map[string]int{}
	for _, d := range descriptions {
		_, body := SplitSummary(d)
		seen := map[string]bool{}
		for _, s := range sentences(body) {
			k := strings.ToLower(s)
			if !seen[k] {
				seen[k] = true
				counts[k]++
			}
		}
	}
	min := max(boilerplateDocs, len(descriptions)/100)
	b := Boilerplate{}
	for k, c := range counts {
		if c >= min {
			b[k] = true
		}
	}
	return b
}

// dropSharedSummaries empties the summaries found word for word in at least
// sharedSummaryShare of the tools (and boilerplateDocs): a generated document's "Retrieves a
// list of resources, possibly filtered." or "Inserts a new resource into this
// collection." (53 of YouTube's 80 calls open with one of four such
// sentences) says nothing of which thing a tool lists or makes, and as a
// title it outweighs the name that does; the tool's title is its name's
// words, as for a description that opens with a notice.
func dropSharedSummaries(summaries []string) {
	counts := map[string]int{}
	for _, s := range summaries {
		if s != "" {
			counts[strings.ToLower(s)]++
		}
	}
	min := max(boilerplateDocs, len(summaries)/sharedSummaryShare)
	for i, s := range summaries {
		if s != "" && counts[strings.ToLower(s)] >= min {
			summaries[i] = ""
		}
	}
}

// Strip returns the sentences of text that are not boilerplate, rejoined.
func (b Boilerplate) Strip(text string) string {
	var keep []string
	for _, s := range sentences(text) {
		if !b[strings.ToLower(s)] {
			keep = append(keep, s)
		}
	}
	return strings.Join(keep, ". ")
}

// NewBM25 indexes docs.
func NewBM25(docs []Doc) *BM25 {
	n := len(docs)
	summaries := make([]string, n)
	bodies := make([][]string, n)
	descs := make([]string, n)
	for i, d := range docs {
		var body string
		summaries[i], body = SplitSummary(d.Description)
		if noticeRe.MatchString(summaries[i]) {
			// "**Note:** Environment variables will soon move …": a notice
			// opening the description says nothing of what the tool does,
			// so the tool has no summary (its title is its name's words).
			summaries[i], body = "", summaries[i]+" "+body
		}
		bodies[i] = sentences(body)
		descs[i] = d.Description
	}
	boiler := FindBoilerplate(descs)
	dropSharedSummaries(summaries)

	type fieldTerms [numFields][]string
	all := make([]fieldTerms, n)
	var total [numFields]float64
	vocab := map[string]bool{} // every term of every field
	locals := make([]string, n)
	ix := &BM25{postings: map[string][]posting{}, idf: map[string]float64{}, n: n,
		families: make([][]Intent, n), required: make([]bool, n), requiredTerms: make([][][]string, n), deprecated: make([]bool, n), access: make([]Access, n), titles: make([][][]string, n), states: make([]map[string]bool, n), words: map[string]bool{}, heads: make([]string, n), switches: make([]int8, n), onDeleted: make([]bool, n), pluralHead: make([]bool, n), headSet: map[string]bool{}, headIdx: make([]int32, n), headFields: map[string]map[string]bool{}, apps: make([]string, n), appSet: map[string]bool{},
		byName: map[string][]int{}, paths: make([][]string, n), methods: make([]string, n), queryKeys: make([][]string, n), queryPairs: make([][]string, n), itemPath: make([]bool, n), listPath: make([]bool, n)}
	headNums := map[string]int32{}
	for i, d := range docs {
		var body []string
		for _, s := range bodies[i] {
			if !boiler[strings.ToLower(s)] {
				body = append(body, s)
			}
		}
		name := indexName(d)
		nameText := name
		if d.AppID != "" && !strings.HasPrefix(name, d.AppID) {
			nameText = d.AppID + " " + name
		}
		local := localName(name, d.AppID)
		intents := ToolIntents(local, summaries[i])
		if act := pathAction(local, d.Method, d.Path); act != "" {
			intents = []Intent{intentWords[act]}
		}
		if setsNamedItem(local, d.Method, d.Path, intents) {
			intents = append(intents, IntentCreate)
		}
		methodDeletes := len(intents) == 0 && strings.EqualFold(d.Method, "delete")
		if methodDeletes {
			// "Detach a file", "Unassign a driver": a verb no intent
			// names, but the HTTP method says what the call does.
			intents = []Intent{IntentDelete}
		}
		var intentTerms []string
		for _, in := range intents {
			intentTerms = append(intentTerms, intentTerm(intentFamily(in)))
			ix.families[i] = append(ix.families[i], intentFamily(in))
		}
		ft := fieldTerms{
			fieldName:       append(Terms(nameText), phraseTerms(nameText)...),
			fieldSummary:    append(sentenceTerms(summaries[i]), phraseTerms(summaries[i])...),
			fieldBody:       append(Terms(strings.Join(body, ". ")), phraseTerms(strings.Join(body, ". "))...),
			fieldParams:     Terms(CleanText(d.Params)),
			fieldFieldNames: Terms(d.FieldNames),
			fieldFieldDocs:  Terms(CleanText(d.FieldDocs)),
			fieldEnums:      Terms(d.EnumValues),
			fieldTags:       Terms(strings.Join(d.Tags, " ")),
			fieldIntent:     intentTerms,
			fieldStates:     stateTerms(d.States),
			fieldPath:       pathTerms(d.Path, nameText),
		}
		all[i] = ft
		hname := headName(local, d.Method, d.Path)
		if h := nameHead(hname); h != "" && len(ix.families[i]) > 0 && ix.families[i][0] == IntentUpdate {
			fs := ix.headFields[h]
			if fs == nil {
				fs = map[string]bool{}
				ix.headFields[h] = fs
			}
			for _, t := range ft[fieldFieldNames] {
				fs[t] = true
			}
		}
		if len(ft[fieldStates]) > 0 {
			ix.states[i] = map[string]bool{}
			for _, t := range ft[fieldStates] {
				ix.states[i][t] = true
			}
		}
		for f := range numFields {
			total[f] += float64(len(ft[f]))
			for _, t := range ft[f] {
				vocab[t] = true
			}
		}
		locals[i] = local
		for _, k := range nameKeys(d.Name, local) {
			ix.byName[k] = append(ix.byName[k], i)
		}
		p, q := splitPathQuery(d.Path)
		ix.paths[i], ix.methods[i], ix.queryKeys[i] = pathSegments(p), strings.ToUpper(d.Method), queryKeysOf(q)
		ix.queryPairs[i] = queryPairsOf(q)
		// A query part names a sub-resource of what the path ends in
		// ("GET /{Bucket}?tagging" reads the bucket's tags): the path ends
		// in it, not in the parameter.
		subresource := len(ix.queryKeys[i]) > 0
		if ps := ix.paths[i]; len(ps) > 0 && strings.HasPrefix(ps[len(ps)-1], "{") && !subresource && (ix.methods[i] == "GET" || ix.methods[i] == "") && !slices.Contains(intents, IntentList) && !slices.Contains(intents, IntentSearch) {
			ix.itemPath[i] = true
		}
		if ps := ix.paths[i]; len(ps) > 0 && (!strings.HasPrefix(ps[len(ps)-1], "{") || subresource) && ix.methods[i] == "GET" && (slices.Contains(intents, IntentList) || slices.Contains(intents, IntentSearch)) {
			ix.listPath[i] = true
		}
		if app := strings.Join(Tokenize(d.AppID), ""); app != "" {
			ix.apps[i] = app
			ix.appSet[app] = true
		}
		ix.required[i] = d.Required > 0
		ix.access[i] = d.Access
		ix.deprecated[i] = d.Deprecated || saysDeprecated(local, summaries[i], bodies[i])
		ix.titles[i] = titleTerms(local, summaries[i])
		if methodDeletes {
			// The summary's opening verb ("Detach") is the tool's verb, and
			// the DELETE says it deletes: a request to remove covers it.
			if toks := Tokenize(summaries[i]); len(toks) > 0 && isVerb(Lemmas(toks[0])[0]) {
				v := Lemmas(toks[0])[0]
				for k, slot := range ix.titles[i] {
					if slot[0] == v {
						ix.titles[i][k] = []string{titleIntent(IntentDelete), verbTerm(v)}
					}
				}
			}
		}
		ix.heads[i] = nameHead(hname)
		for k, t := range Tokenize(local) {
			if k > 0 && (t == "deleted" || t == "trashed") {
				ix.onDeleted[i], ix.anyDeleted = true, true
			}
		}
		for _, t := range Tokenize(local) {
			if sw := switchWords[t]; sw != 0 {
				ix.switches[i] = sw
				break
			}
		}
		for _, t := range Tokenize(local) {
			ix.undoesJoins = ix.undoesJoins || undoVerbs[t] && intentWords[t] == IntentNone
			ix.makesJoins = ix.makesJoins || joinVerbs[t] || t == "attach" || t == "bind"
			for _, l := range Lemmas(t) {
				ix.turnsOnOff = ix.turnsOnOff || onOffVerbs[l] || l == "enable" || l == "disable"
			}
		}
		if w := nameHeadWord(hname); w != ix.heads[i] && strings.HasSuffix(w, "s") {
			ix.pluralHead[i] = true
		}
		ix.headSet[ix.heads[i]] = true
		ix.headIdx[i] = -1
		if h := ix.heads[i]; h != "" && !genericHeads[h] {
			k, ok := headNums[h]
			if !ok {
				k = int32(len(ix.headNames))
				headNums[h] = k
				ix.headNames = append(ix.headNames, h)
			}
			ix.headIdx[i] = k
		}
		for _, t := range Tokenize(local + " " + summaries[i]) {
			ix.words[t] = true
		}
		for _, r := range d.RequiredNames {
			ix.requiredTerms[i] = append(ix.requiredTerms[i], Terms(r))
		}
	}
	// A name word WordNet does not know whose two halves the catalog uses
	// as words ("Worklog": work, log) is also indexed as them.
	aliases := catalogAliases(descs, locals)
	kinds := ix.kindsByHead(docs)
	for i, local := range locals {
		all[i][fieldNameParts] = compoundTerms(local, vocab)
		if k := kinds[ix.heads[i]]; len(k) > 0 && docs[i].Kinds == "" {
			all[i][fieldEnums] = append(all[i][fieldEnums], k...)
			total[fieldEnums] += float64(len(k))
		}
		if len(aliases) > 0 {
			for _, t := range Terms(local) {
				all[i][fieldNameParts] = append(all[i][fieldNameParts], aliases[t]...)
			}
		}
		total[fieldNameParts] += float64(len(all[i][fieldNameParts]))
	}
	var avg [numFields]float64
	for f := range numFields {
		avg[f] = math.Max(total[f]/math.Max(float64(n), 1), 1)
	}
	// A tool whose path alone has a term does not count in the term's
	// document frequency (unless only paths have it): a path repeats its
	// parents' segments in every call under them ("contents" in every file
	// call of /repos/{owner}/{repo}/contents/{filepath}), which would make a
	// word common that the tools' own names and descriptions keep rare.
	pathOnly := map[string]int{}
	for i, ft := range all {
		tf := map[string]float64{}
		counted := map[string]bool{}
		for _, t := range ft[fieldPath] {
			if counted[t] {
				continue // a repeated segment is still one tool
			}
			counted[t] = true
			inOther := false
			for f := range numFields {
				if f != fieldPath && slices.Contains(ft[f], t) {
					inOther = true
					break
				}
			}
			if !inOther {
				pathOnly[t]++
			}
		}
		for f := range numFields {
			counts := map[string]int{}
			for _, t := range ft[f] {
				counts[t]++
			}
			norm := 1 - fieldB[f] + fieldB[f]*float64(len(ft[f]))/avg[f]
			for t, c := range counts {
				tf[t] += fieldWeights[f] * float64(c) / norm
			}
		}
		for t, v := range tf {
			ix.postings[t] = append(ix.postings[t], posting{doc: int32(i), sat: float32(v / (k1 + v))})
		}
	}
	for t, ps := range ix.postings {
		df := float64(len(ps) - pathOnly[t])
		if df == 0 {
			df = float64(len(ps)) // only paths have it
		}
		ix.idf[t] = math.Log(1 + (float64(ix.n)-df+0.5)/(df+0.5))
	}
	return ix
}

// relativesOf maps a word to the catalog's terms whose WordNet relatives
// include it, at the relative's weight: WordNet relates words by their most
// frequent senses, so a relation can hold from one side only ("route" has
// path, route's first sense being "path, route, itinerary"; "path" has no
// route). Built on the first request word that needs it.
func (ix *BM25) relativesOf(word string) []weighted {
	ix.reverseOnce.Do(func() {
		ix.reverse = map[string][]weighted{}
		for t := range ix.idf {
			if !isLower(t) {
				continue
			}
			for _, r := range relatedWords(t) {
				w := synonymWeight
				if r.derived {
					w = derivedWeight
				}
				ix.reverse[r.word] = append(ix.reverse[r.word], weighted{t, w})
			}
		}
	})
	return ix.reverse[word]
}

// compoundTerms are the parts of a name's words that WordNet does not know
// but whose two halves it does and the catalog uses as words ("Worklog":
// work, log; "Webhooks": web, hook): people write them apart.
func compoundTerms(local string, vocab map[string]bool) []string {
	var out []string
	for _, t := range Tokenize(local) {
		if a, b, ok := splitCompound(t, vocab); ok {
			out = append(out, a, b)
		}
	}
	return out
}

// splitCompound splits a word WordNet does not know into two lemmas that it
// knows and vocab has, each of three letters at least.
func splitCompound(t string, vocab map[string]bool) (string, string, bool) {
	if len(t) < 6 || !isLower(t) || stopwords[t] || intentWords[t] != IntentNone {
		return "", "", false
	}
	lemma := func(w string) string {
		for _, l := range Lemmas(w) {
			if _, ok := lex().pos[l]; ok && vocab[l] {
				return l
			}
		}
		return ""
	}
	for _, l := range Lemmas(t) {
		if _, ok := lex().pos[l]; ok {
			return "", "", false
		}
	}
	for i := 3; i <= len(t)-3; i++ {
		a := lemma(t[:i])
		if a == "" || stopwords[a] {
			continue
		}
		if b := lemma(t[i:]); b != "" && !stopwords[b] {
			return a, b, true
		}
	}
	return "", "", false
}

// deprecatedRe matches a sentence that deprecates its operation:
// "Deprecated, use …", "deprecated: use the 'watch' parameter …", "This
// operation is deprecated", "`RenewToken` is deprecated".
var deprecatedRe = regexp.MustCompile(`(?i)^(\W*deprecated(\W*$|\s*[:,.;(-]|\s+(version|in favou?r|since|and|use)\b)|(this (operation|endpoint|method|api|call)|` + "`" + `\w+` + "`" + `) is deprecated\b)`)

// saysDeprecated reports whether a tool's description or name says it is
// deprecated: many catalogs say so in words instead of the OpenAPI flag
// (Kubernetes' watch operations, Square's Deprecated… operations).
func saysDeprecated(local, summary string, body []string) bool {
	if strings.HasPrefix(strings.ToLower(local), "deprecated") || deprecatedRe.MatchString(summary) {
		return true
	}
	for _, s := range body {
		if deprecatedRe.MatchString(s) {
			return true
		}
	}
	return false
}

// stateTerms are the state terms of a tool ("=close" for "closed"): its
// states' lemmas, marked so that they meet only a query's leading verb.
func stateTerms(states string) []string {
	var out []string
	for _, t := range Terms(states) {
		out = append(out, "="+t)
	}
	return out
}

// titleTerms are the distinct words of a title's parts (the local name and
// the summary), each as the terms that cover it: its lemmas, and for an
// intent word also its intent family's term. A part's first intent word
// ("list" in listCoreV1NamespacedPod, "Create" in issueCreateLabel) is the
// tool's verb, covered by a request's intents or by the
// request's own verb and its relatives ("stop a card" covers "Disable
// card"), not by the same word elsewhere ("Delete project" is no match for
// "bring back a deleted project"); one further on is a noun that its own
// word covers too ("Set" in "ReplicaSet" by "sets").
//
// An HTTP method that names the tool ("PostCustomersCustomer", "POST_…")
// yields to the summary's verb when that says another intent ("Updates the
// specified customer"), as in ToolIntents: the method is the transport, the
// summary the meaning, and a slot for it would dilute the title.
func titleTerms(local, summary string) [][]string {
	seen := map[string]bool{}
	var out [][]string
	method := methodYields(local, summary)
	for p, part := range []string{local, summary} {
		leading := true
		toks := Tokenize(part)
		for k, t := range toks {
			if p == 0 && leading && t == method {
				leading = false
				continue
			}
			if stopwords[t] || len(t) < 2 || isNumber(t) {
				// Version markers ("V1", "v2beta1") and numbers say nothing
				// about what a tool does.
				continue
			}
			// A word's first lemma, and a jargon word's stem: "following"
			// stays apart from "follow", "namespaced" meets "namespace".
			slot := Lemmas(t)
			if _, known := lex().pos[slot[0]]; known {
				slot = slot[:1]
			}
			if in := intentWords[t]; in != IntentNone {
				if leading {
					for j, l := range slot {
						slot[j] = verbTerm(l)
					}
				}
				slot = append([]string{titleIntent(in)}, slot...)
				if leading && in == IntentGet && listOf(toks[k+1:]) {
					slot = append(slot, titleIntent(IntentList))
				}
				leading = false
			}
			if !seen[slot[0]] {
				seen[slot[0]] = true
				out = append(out, slot)
			}
		}
	}
	return out
}

// readVerbs are the title terms of the reading verbs.
var readVerbs = map[string]bool{titleIntent(IntentGet): true, titleIntent(IntentList): true, titleIntent(IntentSearch): true}

// modifierPrepositions open a request's modifier, the thing its object
// belongs in or goes to: "a ticket in a project", "a binary to a release",
// "a member from a group". "of" and "with" are left out: "the image of a
// deployment" and "expose pods with a service" name the tool's own
// resource there.
var modifierPrepositions = map[string]bool{
	"in": true, "on": true, "to": true, "from": true, "for": true, "at": true, "by": true,
	"into": true, "onto": true, "inside": true, "within": true, "across": true, "under": true,
}

// nameHead is the lemma of what a tool's local name acts on: the last word
// of the phrase after its verb, up to a preposition ("removeUserFromGroup":
// user; "repoCreateReleaseAttachment": attachment;
// "createAppsV1NamespacedDeployment": deployment), or the last word before
// the verb when none follows ("conversations.list"). Version markers
// and identifiers ("id") are no head. "" when the name has no such word.
func nameHead(local string) string {
	if head := nameHeadWord(local); head != "" {
		return Lemmas(head)[0]
	}
	return ""
}

// nameHeadWord is nameHead's word as the name writes it ("Goals").
func nameHeadWord(local string) string {
	toks := Tokenize(local)
	verb := -1
	for i, t := range toks {
		if intentWords[t] != IntentNone {
			verb = i
			break
		}
	}
	word := func(t string) bool {
		return len(t) >= 2 && !isNumber(t) && !stopwords[t] && !notHeads[t]
	}
	head := ""
	for _, t := range toks[verb+1:] {
		if modifierPrepositions[t] || t == "of" || t == "with" {
			break
		}
		if word(t) {
			head = t
		}
	}
	if head == "" && verb > 0 {
		for _, t := range toks[:verb] {
			if word(t) {
				head = t
			}
		}
	}
	return head
}

// genericHeads are head nouns that stand for whatever a container holds:
// `addItemForPortfolio` adds a project to a portfolio, `addItemToCart` a
// product to a cart. Such a tool can match a request's object without
// naming it.
var genericHeads = map[string]bool{"item": true, "entry": true, "object": true, "element": true, "resource": true,
	"record": true}

// namesHead reports whether one of words is what some tool acts on (a
// tool's head).
func (ix *BM25) namesHead(words []string) bool {
	for _, w := range words {
		if stopwords[w] {
			continue
		}
		for _, l := range Lemmas(w) {
			if ix.headSet[l] {
				return true
			}
		}
	}
	return false
}

// notHeads are name words that never name what a tool acts on.
var notHeads = map[string]bool{"id": true, "ids": true, "alpha": true, "beta": true}

// verbTerm is the title term of a tool's verb that a request's verb covers.
func verbTerm(lemma string) string { return "@" + lemma }

// titleIntent is the title term of an intent word: "list" and "get" are
// told apart here, where the index's intent terms join them in one family.
func titleIntent(in Intent) string { return "^" + string(in) }

// kindsByHead are, by head noun, the terms of the kinds that the calls
// making or editing that thing take ("workType": ASSIGNMENT, QUESTION for
// course work): what a request may call any call on that thing by.
func (ix *BM25) kindsByHead(docs []Doc) map[string][]string {
	var out map[string][]string
	for i, d := range docs {
		h := ix.heads[i]
		if d.Kinds == "" || h == "" || len(ix.families[i]) == 0 || ix.families[i][0] != IntentCreate && ix.families[i][0] != IntentUpdate {
			continue
		}
		if out == nil {
			out = map[string][]string{}
		}
		for _, v := range strings.Fields(d.Kinds) {
			// A kind named by one word ("ASSIGNMENT"); a value of several
			// ("other_income", "SHORT_ANSWER_QUESTION") qualifies a kind,
			// and its words alone name none.
			if toks := Tokenize(v); len(toks) != 1 {
				continue
			}
			for _, t := range Terms(v) {
				if !ix.words[t] && !slices.Contains(out[h], t) {
					out[h] = append(out[h], t)
				}
			}
		}
	}
	return out
}

// indexName is the name d is indexed by: its full name when a catalog cut
// it to a length limit.
func indexName(d Doc) string {
	if d.FullName != "" {
		return d.FullName
	}
	return d.Name
}

// localName is the part of a tool name after its app: "github:listRepos"
// and "stripe_GetCustomers" (app "stripe") name listRepos and GetCustomers.
func localName(name, appID string) string {
	if i := strings.LastIndexByte(name, ':'); i >= 0 {
		return name[i+1:]
	}
	if appID != "" && len(name) > len(appID)+1 && strings.HasPrefix(name, appID) && strings.IndexByte("_-./", name[len(appID)]) >= 0 {
		return name[len(appID)+1:]
	}
	return name
}

// termGroup is one unit of a query: a word with its lemmas and relatives.
// A document scores the best of a group's terms, not their sum, so a word
// with many relatives weighs no more than one without. optional groups
// (scope words, joined compounds) do not count against the maximum score
// when no tool has any of their terms.
type termGroup struct {
	terms    []weighted
	optional bool
	// scope marks the group of the request's scope words ("my", "me"):
	// it counts only for a tool that matches some other word of the
	// request (see Rank).
	scope bool
	// verb marks the group of the request's opening verb.
	verb bool
	// at is 1 + the index of the query token the group comes from (0: none).
	at int
}

func (g *termGroup) add(term string, w float64) {
	for i := range g.terms {
		if g.terms[i].term == term {
			g.terms[i].w = max(g.terms[i].w, w)
			return
		}
	}
	g.terms = append(g.terms, weighted{term, w})
}

// queryTokens are the query's words, a word no tool has split in two that
// tools have ("configmap" -> config map, "timezone" -> time zone): the
// index splits names at case changes, people write them as one word.
func (ix *BM25) queryTokens(query string) []string {
	toks := Tokenize(query)
	out := make([]string, 0, len(toks))
	for _, t := range toks {
		if a, b, ok := ix.splitJoined(t); ok {
			out = append(out, a, b)
			continue
		}
		out = append(out, t)
	}
	return out
}

// maxRepairedWordLen is the longest word splitJoined splits and corrected
// corrects: both try every position of a word, so their work grows with the
// square of its length, and no word people join or mistype is that long (a
// query of one 100,000-letter word took minutes).
const maxRepairedWordLen = 48

// splitJoined splits a word no tool has into two that tools have
// ("configmap": config, map).
func (ix *BM25) splitJoined(t string) (string, string, bool) {
	if len(t) < 6 || len(t) > maxRepairedWordLen || !isLower(t) || stopwords[t] || ix.known(t) {
		return "", "", false
	}
	for i := 3; i <= len(t)-3; i++ {
		if a, b := t[:i], t[i:]; !stopwords[a] && !stopwords[b] && ix.known(a) && ix.known(b) {
			return a, b, true
		}
	}
	return "", "", false
}

// known reports whether some tool has a lemma of w.
func (ix *BM25) known(w string) bool {
	for _, l := range Lemmas(w) {
		if _, ok := ix.idf[l]; ok {
			return true
		}
	}
	return false
}

// queryGroups turns a query into term groups: each distinct non-stopword
// with its lemmas (1), WordNet derived forms and synonyms, and domain
// relatives; scope words ("me", "my") as one group of the words APIs use
// for the caller; adjacent words joined when the index knows the compound;
// the query's intent.
func (ix *BM25) queryGroups(query string) []termGroup {
	toks := ix.queryTokens(query)
	intents, intentTok := ix.requestIntent(toks)
	var groups []termGroup
	presentIDF := 0.0
	for _, t := range toks {
		if !stopwords[t] {
			for _, l := range Lemmas(t) {
				presentIDF = max(presentIDF, ix.idf[l])
			}
		}
	}
	seen := map[string]bool{}
	scope := false
	skip := map[int]bool{}
	if j := splitPhrase(toks); j > 0 {
		// "log a user in", "sign them out": the phrase split by its object.
		ph := domainPhrases[[2]string{Lemmas(toks[0])[len(Lemmas(toks[0]))-1], toks[j]}]
		groups = append(groups, termGroup{terms: append([]weighted(nil), ph...)})
		skip[0], skip[j] = true, true
	}
	for i, t := range toks {
		if g, ok := questionTerms[t]; ok && i == 0 {
			groups = append(groups, termGroup{terms: append([]weighted(nil), g...), optional: true})
		}
		if i+1 < len(toks) {
			a, b := Lemmas(t)[len(Lemmas(t))-1], toks[i+1]
			if ph, ok := domainPhrases[[2]string{a, b}]; ok {
				state := false
				if b == "in" && strings.HasSuffix(t, "ed") && beBefore(toks, i) {
					// "who am I logged in as", "which users are signed
					// in": the state of being logged in is the current,
					// authenticated user or session, not the act.
					ph, state = loggedIn, true
				}
				// The state of being logged in names the caller, as a
				// scope word does.
				groups = append(groups, termGroup{terms: append([]weighted(nil), ph...), scope: state})
				skip[i], skip[i+1] = true, true
				continue
			}
		}
	}
	for i, t := range toks {
		if skip[i] {
			continue
		}
		if t == "me" && i == 1 && len(toks) > 2 && opensWithVerb(toks) {
			// "show me the pods", "give me a list of users": the one the
			// answer is for, not the caller's own things.
			continue
		}
		if scopeWords[t] || t == "am" && i+1 < len(toks) && toks[i+1] == "i" || ownClause(toks, i) {
			scope = true
			continue
		}
		if i+1 < len(toks) && !skip[i+1] && !stopwords[t] {
			var g termGroup
			for _, l := range joinedCompound(toks, i) {
				if _, ok := ix.idf[l]; ok {
					g.add(l, compoundWeight)
				}
			}
			if len(g.terms) > 0 {
				g.optional = true
				groups = append(groups, g)
			}
		}
		if g, ok := ix.acronym(toks, i); ok {
			groups = append(groups, g)
		}
		if stopwords[t] || questionWords[t] && i == 0 || intentTok[i] && len(intentTok) > 1 || isNumber(t) {
			// Stopwords, an opening question word, both words of a phrasal
			// verb ("look up") and numbers ("issue 12") say nothing about
			// which tool is meant.
			continue
		}
		if t == "new" && otherCreateWord(toks, i) {
			// "create a new namespace", "open a new ticket": the verb
			// already asks for a new one; as a word, "new" would only
			// meet descriptions that say "new".
			continue
		}
		lemmas := Lemmas(t)
		if len(lemmas) > 1 && lemmas[0] == t && stateParticiple(toks, i) {
			// "the users who are suspended", "which issues are closed": a
			// state the things are in, not the act that put them there
			// (suspendUser).
			lemmas = lemmas[:1]
		}
		if seen[lemmas[0]] {
			continue
		}
		seen[lemmas[0]] = true
		// The verb that carries the query's intent, and other intent words
		// ("new", "all"), count mostly through the intent term: "open a
		// new ticket" is about tickets.
		base := 1.0
		switch {
		case intentTok[i] || intentWords[t] != IntentNone:
			base = intentWordWeight
		case i == 0 && imperative(toks):
			// "archive a repo", "file a new issue": the verb's noun sense
			// ("Get an archive") must not decide.
			base = actionVerbWeight
		}
		g := termGroup{verb: i == 0 && (intentTok[i] || intentWords[t] != IntentNone || imperative(toks)), at: i + 1}
		for _, l := range lemmas {
			g.add(l, base)
		}
		// A relative weighs at most what the word itself would (its idf
		// capped at the word's), so a rare relative cannot outweigh the
		// words the user wrote.
		capIDF := 0.0
		for _, l := range lemmas {
			capIDF = max(capIDF, ix.idf[l])
		}
		ownIDF := capIDF
		if capIDF == 0 {
			// A word no tool has: its relatives stand in for it, but
			// weigh no more than the rarest word of the request that
			// tools do have ("commit history": history's relative
			// "activity" must not outweigh "commit").
			capIDF = presentIDF
		}
		// "pods running in the cluster", "the server running": the state
		// of a thing, not an act on it; the domain's relatives of the act
		// ("run": exec) do not apply.
		describes := participle(toks, i)
		// "the details of an invoice" asks for all of it: WordNet's
		// detail is a part (item, point), which met "Get Invoice Item".
		whole := slices.Contains(lemmas, "detail")
		addRel := func(term string, w float64) {
			if idf, ok := ix.idf[term]; ok && capIDF > 0 && idf > capIDF {
				w *= capIDF / idf
			}
			g.add(term, w*base)
		}
		// The domain table's own inflected keys ("newest": latest) are
		// met by the word as written: its lemma ("new") is another word.
		domainKeys := lemmas
		if !slices.Contains(lemmas, t) && domainRelated[t] != nil {
			domainKeys = append([]string{t}, lemmas...)
		}
		for _, l := range domainKeys {
			for _, r := range relatedWords(l) {
				if whole {
					break
				}
				w := synonymWeight
				if r.derived {
					w = derivedWeight
				}
				for _, rl := range Lemmas(r.word) {
					addRel(rl, w)
				}
			}
			for _, r := range domainRelated[l] {
				if describes {
					break
				}
				if in := intentWords[r]; in != IntentNone && isVerb(r) && len(intents) > 0 && !slices.ContainsFunc(intents, func(q Intent) bool { return intentFamily(q) == intentFamily(in) }) {
					// "download a file", "delete a file": the file's
					// relative "upload" is an act of its own, another
					// than the one the request asks for.
					continue
				}
				for _, rl := range Lemmas(r) {
					addRel(rl, domainWeight)
				}
			}
			// "encrypt": encryption, "replicate": replication — a verb
			// whose senses WordNet tags with no derived noun is related
			// to its regular nominalization.
			for _, n := range regularNominalizations(l) {
				addRel(n, derivedWeight)
			}
			// "reassign", "unstar", "unarchive": the base verb is a
			// derived form.
			for _, prefix := range []string{"re", "un"} {
				if rest := strings.TrimPrefix(l, prefix); rest != l && len(rest) >= 3 && isVerb(rest) {
					addRel(rest, derivedWeight)
				}
			}
		}
		if ix.unmatched(g) && !whole {
			// No tool has the word or one of its relatives: a catalog
			// word that WordNet relates to it from its own side stands
			// in ("path": route).
			for _, l := range lemmas {
				for _, r := range ix.relativesOf(l) {
					addRel(r.term, r.w)
				}
			}
		}
		if unmatched := ix.unmatched(g); (unmatched || ownIDF == 0) && !whole {
			// Nothing the word or its relatives are is in the catalog: a
			// broader word stands in for it, weakly ("odometer": meter,
			// "yesterday": period, "successful": success), a distant
			// relative being better than nothing. A word no tool has but
			// whose relatives some have gets its hypernyms more weakly
			// still ("month": monthly, and period at 0.1), where they
			// count mostly as title words covered ("List top topics of a
			// period").
			for _, l := range lemmas {
				for _, b := range broaderWords(l) {
					w := hypernymWeight
					switch {
					case !unmatched && b.kind == 'h':
						w = absentHypernymWeight
					case !unmatched:
						continue
					case b.kind == 'a':
						w = attributeWeight
					}
					for _, rl := range Lemmas(b.word) {
						addRel(rl, w)
					}
				}
			}
		}
		groups = append(groups, g)
	}
	// A request that opens with a verb other than the CRUD ones may mean a
	// state the API sets ("close" an issue: state "closed"; "archive" a
	// repo: "archived").
	if len(toks) > 0 && !questionWords[toks[0]] && intentWords[toks[0]] == IntentNone {
		ls := Lemmas(toks[0])
		if v := ls[len(ls)-1]; isVerb(v) {
			g := termGroup{optional: true}
			g.add("="+v, stateWeight)
			for _, prefix := range []string{"re", "un"} {
				if rest := strings.TrimPrefix(v, prefix); rest != v && len(rest) >= 3 {
					g.add("="+rest, stateWeight*derivedWeight)
				}
			}
			if onOffVerbs[v] && !ix.turnsOnOff {
				// "pause the revenue alert", "resume a schedule": an API
				// with no call to turn things on and off does it through
				// a boolean field (active, enabled) of an update.
				for _, t := range Terms(onOffFields) {
					g.add("="+t, stateWeight*derivedWeight)
				}
			}
			groups = append(groups, g)
		}
	}
	// "mark a DAG run as failed", "flag a comment as spam": the word after
	// "as" is the state the request puts the thing in.
	if len(toks) > 3 && opensWithVerb(toks) {
		for i := 2; i+1 < len(toks); i++ {
			if toks[i] != "as" || stopwords[toks[i+1]] {
				continue
			}
			g := termGroup{optional: true}
			for _, l := range Lemmas(toks[i+1]) {
				g.add("="+l, stateWeight)
				for _, r := range relatedWords(l) {
					if r.derived {
						g.add("="+r.word, stateWeight*derivedWeight)
					}
				}
			}
			groups = append(groups, g)
			break
		}
	}
	// "make my project public": the adjective is the state the request
	// puts the thing in, as the word after "as" is.
	if i := madeState(toks); i > 0 {
		g := termGroup{optional: true}
		for _, l := range Lemmas(toks[i]) {
			g.add("="+l, stateWeight)
		}
		groups = append(groups, g)
	}
	// "email me when a vehicle leaves a geofence", "notify us when a build
	// fails": a request to be told when something happens asks for a
	// notification, an alert, a subscription or a webhook; the clause
	// after "when" is its condition (a modifier).
	if i := slices.Index(toks, "when"); i > 1 && opensWithVerb(toks) {
		groups = append(groups, termGroup{optional: true, terms: []weighted{{"notification", 0.6}, {"alert", 0.5}, {"subscription", 0.4}, {"webhook", 0.4}}})
	}
	if scope {
		g := termGroup{optional: true, scope: true}
		for _, st := range scopeTerms {
			g.add(st.term, st.w)
		}
		groups = append(groups, g)
	}
	for _, in := range intents {
		groups = append(groups, termGroup{terms: []weighted{{intentTerm(intentFamily(in)), intentQueryWeight}}, optional: true})
	}
	return groups
}

// objectHead is the group of the last word of the noun phrase a request
// opens with after its verb ("pools" of "list all my user pools", "tasks"
// of "tasks assigned to me"), -1 without one: the run of consecutive
// content words from the first, up to a verb's participle.
func objectHead(groups []termGroup, qtoks []string) int {
	head, at := -1, 0
	for {
		next := -1
		for gi, g := range groups {
			if g.at > at && !g.verb && !g.optional && !g.scope && (next < 0 || g.at < groups[next].at) {
				next = gi
			}
		}
		if next < 0 || head >= 0 && groups[next].at != at+1 {
			return head
		}
		w := qtoks[groups[next].at-1]
		if head >= 0 && (strings.HasSuffix(w, "ed") || strings.HasSuffix(w, "ing")) && slices.ContainsFunc(Lemmas(w), isVerb) {
			return head
		}
		head, at = next, groups[next].at
	}
}

// opensWithVerb reports whether a request of at least one word opens with
// a verb, not a question word ("show me …", "mark … as failed", "email me
// when …").
func opensWithVerb(toks []string) bool {
	if questionWords[toks[0]] {
		return false
	}
	ls := Lemmas(toks[0])
	return isVerb(ls[len(ls)-1])
}

// unmatched reports whether no tool has any of a group's terms.
func (ix *BM25) unmatched(g termGroup) bool {
	for _, wt := range g.terms {
		if _, ok := ix.idf[wt.term]; ok {
			return false
		}
	}
	return true
}

// beForms are the forms of "be" before a participle that says a state.
var beForms = map[string]bool{"is": true, "are": true, "was": true, "were": true, "be": true, "been": true}

// stateParticiple reports whether toks[i] is a past participle after a
// form of "be" ("who are suspended", "is it archived").
func stateParticiple(toks []string, i int) bool {
	return i > 0 && beForms[toks[i-1]] && strings.HasSuffix(toks[i], "ed")
}

// participle reports whether toks[i] is an -ing form right after a noun
// ("pods running", "the server running"): a reduced relative clause that
// describes the noun, not the request's act. After "is"/"are" ("who is
// watching this issue") it is the act itself.
func participle(toks []string, i int) bool {
	if i == 0 || !gerund(toks[i]) || stopwords[toks[i-1]] || questionWords[toks[i-1]] {
		return false
	}
	return lex().pos[Lemmas(toks[i-1])[0]]&posNoun != 0
}

// ownClause reports whether toks[i] is the "I" of a relative clause after a
// noun ("repos I starred", "the issues I created"): the caller's own
// things, as "my" says. After a question word or an auxiliary ("which fields
// do I need", "what can I do", "should I") it is no scope word, unless it
// has: "what buckets do I have".
func ownClause(toks []string, i int) bool {
	if toks[i] == "i" && i+1 < len(toks) && toks[i+1] == "have" {
		// "what buckets do I have", "which workspaces do I have access
		// to": what the caller has is the caller's own.
		return true
	}
	return toks[i] == "i" && i > 0 && !questionWords[toks[i-1]] && !stopwords[toks[i-1]]
}

// Rank scores every allowed document that shares a term with query and
// returns the best k. The score is the BM25F score divided by the largest
// score the query could reach, so it lies in 0..1 and is comparable across
// queries (minRelevanceScore relies on that).
func (ix *BM25) Rank(_ context.Context, query string, k int, allow func(int) bool) ([]Hit, error) {
	named := ix.namedDocs(query)
	qp := ix.plan(query)
	// Dense arrays beat maps at these sizes (a few thousand tools); touched
	// lists the documents that scored.
	scores := make([]float64, ix.n)
	best := make([]float64, ix.n)
	var touched, gTouched []int32
	if len(qp.object) > 0 {
		qp.objectHit = make([]bool, ix.n)
	}
	// A request's scope words ("my expenses", "a bill I received") tell
	// apart the caller's things from anyone's among tools that match what
	// it asks for; alone they would find "Get the current user" for
	// anything the caller owns. A tool matches them only when it matches
	// the request's object too ("list all my user pools": pools, not the
	// current user's devices by "user"), or, when the request has no
	// object, one of its words besides its opening verb ("who am I" has
	// none).
	var content []bool
	if slices.ContainsFunc(qp.groups, func(g termGroup) bool { return g.scope }) &&
		slices.ContainsFunc(qp.groups, func(g termGroup) bool { return !g.optional && !g.verb && !g.scope }) {
		content = make([]bool, ix.n)
	}
	for gi, g := range qp.groups {
		gTouched = gTouched[:0]
		for _, wt := range g.terms {
			idf, ok := ix.idf[wt.term]
			if !ok {
				continue
			}
			for _, p := range ix.postings[wt.term] {
				s := wt.w * idf * float64(p.sat)
				if best[p.doc] == 0 {
					gTouched = append(gTouched, p.doc)
				}
				best[p.doc] = max(best[p.doc], s)
			}
		}
		isObject := slices.Contains(qp.object, gi)
		for _, d := range gTouched {
			if content != nil {
				if g.scope && !content[d] {
					best[d] = 0
					continue
				}
				if qp.scopeHead < 0 {
					content[d] = content[d] || !g.optional && !g.verb && !g.scope
				} else {
					content[d] = content[d] || gi == qp.scopeHead
				}
			}
			if isObject && best[d] >= objectShare*qp.gUpper[gi] {
				qp.objectHit[d] = true
			}
			if scores[d] == 0 {
				touched = append(touched, d)
			}
			scores[d] += best[d]
			best[d] = 0
		}
	}
	if qp.upper == 0 && len(named) == 0 {
		return nil, nil
	}
	hits := make([]Hit, 0, len(touched))
	for _, d := range touched {
		if allow != nil && !allow(int(d)) || qp.upper == 0 {
			continue
		}
		f, _ := ix.factor(int(d), qp, false)
		hits = append(hits, Hit{Doc: int(d), Score: scores[d] * f / (qp.upper * scoreScale)})
	}
	// Ordered by the score itself, then capped at 1 for the caller: capped
	// first, tools above 1 would tie and fall back to document order.
	sortHits(hits)
	for i := range hits {
		hits[i].Score = math.Min(hits[i].Score, 1)
	}
	hits = pinNamed(hits, named, allow)
	if k > 0 && len(hits) > k {
		hits = hits[:k]
	}
	return hits, nil
}

// needsUnnamed reports whether doc requires a parameter the query does not
// name: "list the pods in a namespace" names the namespace a list of pods
// needs, but not the name that reading one pod needs.
func (ix *BM25) needsUnnamed(d int, qp *queryPlan) bool {
	if !ix.required[d] {
		return false
	}
	if len(ix.requiredTerms[d]) == 0 {
		return true
	}
	for _, terms := range ix.requiredTerms[d] {
		// The listed things named are not the one a parameter after the
		// tool's head identifies: "list goals" names no goal_gid ("tasks
		// of a goal" would; "user_task_list_gid" is no task's).
		own := ix.identifies(d, terms) && !qp.prep[ix.heads[d]]
		named := false
		for _, t := range terms {
			named = named || qp.words[t] && !own
		}
		if !named {
			return true
		}
	}
	return false
}

// identifies reports whether a parameter's terms name one of tool d's
// head: the head and identifier words only (goal_gid, podName, id).
func (ix *BM25) identifies(d int, terms []string) bool {
	head := false
	for _, t := range terms {
		switch {
		case t == ix.heads[d]:
			head = true
		case !idWords[t]:
			return false
		}
	}
	return head
}

// idWords are the words of an identifier's name besides what it identifies.
var idWords = map[string]bool{"id": true, "gid": true, "uid": true, "uuid": true, "sid": true, "key": true,
	"name": true, "number": true, "slug": true, "identifier": true}

// queryPlan is what ranking needs of one query, computed once.
type queryPlan struct {
	groups []termGroup
	// upper is the largest score the query's words could reach.
	upper float64
	// families are the query's intent families; listing and getting say
	// whether it asks to list or to get one thing.
	families         map[Intent]bool
	listing, getting bool
	action, implicit bool
	// existing says the request names its thing by number ("close issue
	// number 12") and asks to create nothing: the thing exists.
	existing bool
	// prep are the terms of the request's words after its first
	// preposition (nil without one), mainWords the lemmas of its words
	// before it, without relatives: a tool's head named in the modifier is
	// the modifier's thing even when a relative of an object's word is
	// the same ("tasks in a project": WordNet has project among task's
	// synonyms).
	prep, mainWords map[string]bool
	// object are the indexes of the groups of the request's object when it
	// has a modifier; objectHit, filled by Rank, says which documents
	// match one of them.
	object    []int
	objectHit []bool
	// scopeHead is the group of the last word of the request's object
	// (objectHead), which a tool must match for the request's scope words
	// to count; -1 without one.
	scopeHead int
	// gUpper is each group's largest score.
	gUpper []float64
	// verbTerms are the terms of the request's opening verb.
	verbTerms map[string]bool
	qterms    map[string]bool
	// words are the lemmas of the query's own words (no relatives).
	words map[string]bool
	// question marks a request that opens with a question word.
	question bool
	// turn is 1 for a request to turn something on ("turn on DNSSEC
	// signing"), -1 to turn it off or to undo a join ("detach a VPC",
	// "remove an attached file"), else 0.
	turn int8
	// plurals are the lemmas of the words the request writes in the
	// plural (not what "how many" counts).
	plurals map[string]bool
	// part marks a request that adds or removes a part of what its
	// modifier names (see partOf).
	part bool
	// apps are the apps the request names as where it happens ("in
	// GitHub"); see withoutApps.
	apps map[string]bool
	// verbOpen marks a request read as a list that opens with a verb no
	// intent names.
	verbOpen bool
	// headNamed says, for a list request that is not a question (nil
	// otherwise), which of the index's heads (headNames) the request names.
	headNamed []bool
	// deleted says the request speaks of deleted things beside its verb
	// (see deletedWords).
	deleted bool
}

// plan analyses a query: its term groups, the score they could reach, its
// intents and the terms that cover a title.
func (ix *BM25) plan(query string) *queryPlan {
	query, apps := ix.request(query)
	query = ix.withoutTypos(query)
	qp := &queryPlan{apps: apps, groups: ix.queryGroups(query), families: map[Intent]bool{}, qterms: map[string]bool{}, words: map[string]bool{}}
	qtoks := ix.queryTokens(query)
	for i, t := range qtoks {
		for _, l := range Lemmas(t) {
			qp.words[l] = true
		}
		if ix.plural(t) && !countedNoun(qtoks, i) {
			if qp.plurals == nil {
				qp.plurals = map[string]bool{}
			}
			qp.plurals[Lemmas(t)[0]] = true
		}
	}
	unknownIDF := math.Log(1 + (float64(ix.n)+0.5)/0.5)
	for _, g := range qp.groups {
		var gUpper float64
		for _, wt := range g.terms {
			if idf, ok := ix.idf[wt.term]; ok {
				gUpper = max(gUpper, wt.w*idf)
			}
		}
		qp.gUpper = append(qp.gUpper, gUpper)
		if gUpper == 0 && !g.optional {
			// A word no tool has still counts against the maximum: a query
			// half made of such words is a weaker match.
			gUpper = g.terms[0].w * unknownIDF
		}
		qp.upper += gUpper
	}
	itoks := Tokenize(query)
	qIntents, intentToks := ix.requestIntent(itoks)
	if len(itoks) > 0 && undoVerbs[itoks[0]] {
		qp.turn = -1
	}
	if len(intentToks) == 2 {
		// "turn on DNSSEC signing", "switch the alerts off".
		var first, second string
		for i := range itoks {
			if intentToks[i] {
				if first == "" {
					first = itoks[i]
				} else {
					second = itoks[i]
				}
			}
		}
		if first == "turn" || first == "switch" {
			switch second {
			case "on":
				qp.turn = 1
			case "off":
				qp.turn = -1
			}
		}
	}
	for i, t := range itoks {
		if !ix.anyDeleted || intentToks[i] {
			continue
		}
		for _, l := range Lemmas(t) {
			qp.deleted = qp.deleted || deletedWords[l]
		}
	}
	for _, in := range qIntents {
		qp.families[intentFamily(in)] = true
		qp.listing = qp.listing || in == IntentList
		qp.getting = qp.getting || in == IntentGet
	}
	// The request's modifier starts at its first preposition ("a ticket in
	// a project") but the verb's own right after it ("subscribe to changes
	// on a project", "reply to a comment"); "of" opens one only after a word that some tool acts on
	// ("replica sets of a deployment", not "the image of a deployment"). A
	// question "which X …" or "what X …" asks for X: the rest modifies it.
	firstPrep := -1
	for i, t := range qtoks {
		if i > 1 && (modifierPrepositions[t] || t == "of" && ix.namesHead(qtoks[:i]) || t == "when") {
			firstPrep = i
			break
		}
	}
	if len(qtoks) > 2 && (qtoks[0] == "which" || qtoks[0] == "what") && !stopwords[qtoks[1]] && !questionWords[qtoks[1]] {
		firstPrep = 1
	}
	qp.scopeHead = objectHead(qp.groups, qtoks)
	if firstPrep > 0 {
		// The request's object: the words before the modifier that are
		// neither its verb nor an intent word ("the nodes" of "list the
		// nodes in the cluster").
		for gi, g := range qp.groups {
			if g.at > 0 && g.at-1 < firstPrep && !g.verb && !g.optional && intentWords[qtoks[g.at-1]] == IntentNone {
				if w := qtoks[g.at-1]; g.at < firstPrep && lex().pos[w]&posAdj != 0 {
					// An adjective before the object's noun ("full
					// details of a DAG", "the public address") describes
					// it: a tool need not match it.
					continue
				}
				qp.object = append(qp.object, gi)
			}
		}
		qp.mainWords, qp.prep = map[string]bool{}, map[string]bool{}
		for _, t := range qtoks[:firstPrep] {
			for _, l := range Lemmas(t) {
				qp.mainWords[l] = true
			}
		}
		for _, g := range qp.groups {
			if g.at-1 > firstPrep {
				for _, wt := range g.terms {
					qp.prep[wt.term] = true
				}
			}
		}
	}
	if firstPrep > 0 && len(qp.object) > 0 && len(qp.families) == 1 && (qp.families[IntentCreate] || qp.families[IntentDelete]) && ix.partOf(qp, qtoks, firstPrep) {
		// "add a label to a node": what is added is no tool's subject but a
		// field of the thing the modifier names, so the request edits that
		// thing.
		qp.part = true
		qp.families = map[Intent]bool{IntentUpdate: true}
		qIntents = []Intent{IntentUpdate}
		for gi := range qp.groups {
			for ti, wt := range qp.groups[gi].terms {
				if wt.term == intentTerm(IntentCreate) || wt.term == intentTerm(IntentDelete) {
					qp.groups[gi].terms[ti].term = intentTerm(IntentUpdate)
				}
			}
		}
	}
	for _, g := range qp.groups {
		for _, wt := range g.terms {
			qp.qterms[wt.term] = true
			if g.verb {
				qp.qterms[verbTerm(wt.term)] = true
				if qp.verbTerms == nil {
					qp.verbTerms = map[string]bool{}
				}
				qp.verbTerms[wt.term] = true
			}
		}
	}
	if len(qIntents) == 0 && ix.undoesCreate(qtoks, qp) {
		// "unsubscribe from a tag": the verb undoes what a call creates
		// (a subscription), so the request deletes it.
		qIntents = []Intent{IntentDelete}
		qp.families = map[Intent]bool{IntentDelete: true}
	}
	// Title coverage counts every intent word of the query ("which fields do
	// I need to create an issue" covers "create"). A request to list covers
	// a title that lists or searches, not one that gets one thing; a
	// question covers every kind of read.
	cover := func(in Intent) {
		qp.qterms[titleIntent(in)] = true
		switch in {
		case IntentList:
			qp.qterms[titleIntent(IntentSearch)] = true
		case IntentSearch:
			qp.qterms[titleIntent(IntentList)] = true
		}
	}
	for _, t := range qtoks {
		if in := intentWords[t]; in != IntentNone {
			cover(in)
		}
	}
	question := len(qtoks) > 0 && questionWords[qtoks[0]]
	qp.question = question
	if !question {
		// A question's read is decided below: it covers a get-one verb
		// only when it does not name things in the plural.
		for _, in := range qIntents {
			cover(in)
		}
	}
	// A read that names things in the plural ("which namespaces exist?",
	// "cash drawer shifts at a location") asks for a list; another question
	// may ask for one thing or many.
	many := false
	if len(qIntents) == 0 || question {
		for i, t := range qtoks {
			// "what variation does this user get for every flag?": a list
			// word in a question asks for them all.
			many = many || ix.plural(t) && !countedNoun(qtoks, i) || question && i > 0 && intentWords[t] == IntentList
		}
		// "who has an account?", "who joined the session": a question for
		// people asks for them all, unless it asks about the caller ("who
		// am I").
		many = many || len(qtoks) > 0 && qtoks[0] == "who" && !slices.Contains(qtoks, "i") && !slices.Contains(qtoks, "me")
	}
	switch {
	case many && (question || len(qIntents) == 0 && !imperative(qtoks)):
		qp.listing, qp.getting = true, false
		cover(IntentList)
		// A request that opens with a verb no intent names ("undo
		// payments matched to invoice") may not list at all.
		qp.verbOpen = len(qIntents) == 0 && isVerb(Lemmas(qtoks[0])[len(Lemmas(qtoks[0]))-1])
	case question:
		cover(IntentList)
		cover(IntentGet)
	}
	// A read of "one" thing ("show one connection's details", "the
	// configuration of one flag", "one audit log entry", "status of a
	// particular run") asks for that thing, not for the list its verb
	// ("show") or a plural would say.
	// So does a read verb's singular noun with its number ("show me
	// invoice 42").
	// So does a read of what one thing has that no call acts on ("find a
	// customer's billing address": the customer).
	if readOnly(qp.families) && (oneThing(qtoks) || len(qIntents) > 0 && numbered(qtoks) || len(qIntents) > 0 && !question && ix.possessedField(qtoks)) {
		qp.listing, qp.getting = false, true
		delete(qp.qterms, titleIntent(IntentList))
		if !slices.Contains(qIntents, IntentSearch) {
			delete(qp.qterms, titleIntent(IntentSearch))
		}
		cover(IntentGet)
	}
	// A request without a verb ("roles of a project") most likely wants to
	// read; one that opens with a verb no intent covers ("star a repo",
	// "approve a pull request") wants to change something.
	qp.action = len(qIntents) == 0 && imperative(qtoks)
	qp.implicit = len(qIntents) == 0 && !qp.action
	qp.existing = !qp.families[IntentCreate] && numbered(qtoks)
	if qp.listing && !qp.question && !qp.verbOpen {
		qp.headNamed = make([]bool, len(ix.headNames))
		for k, h := range ix.headNames {
			qp.headNamed[k] = qp.qterms[h]
		}
	}
	return qp
}

// acronym is the group of the acronym that the words from toks[i] on
// spell out, when the catalog writes it and WordNet does not know it as a
// word: "software bill of materials" is an SBOM, "access control list" an
// ACL, "time to live" a TTL. Its letters are the first of each word, with
// or without the function words between ("of", "to"); two words at least,
// none an intent word, the first and the last no function word.
func (ix *BM25) acronym(toks []string, i int) (termGroup, bool) {
	if stopwords[toks[i]] || intentWords[toks[i]] != IntentNone || questionWords[toks[i]] {
		return termGroup{}, false
	}
	var allBuf, contentBuf [6]byte
	all, content := allBuf[:0], contentBuf[:0]
	for j := i; j < len(toks) && j < i+len(allBuf); j++ {
		t := toks[j]
		if t == "" || intentWords[t] != IntentNone || isNumber(t) {
			break
		}
		all = append(all, t[0])
		if stopwords[t] {
			continue
		}
		content = append(content, t[0])
		if len(content) < 2 {
			continue
		}
		for _, a := range [2][]byte{all, content} {
			// (Indexing a map by string(a) does not allocate.)
			if len(a) < 3 {
				continue
			}
			if _, ok := ix.idf[string(a)]; !ok {
				continue
			}
			if _, known := lex().pos[string(a)]; known {
				continue
			}
			var g termGroup
			g.add(string(a), 1)
			g.optional = true
			return g, true
		}
	}
	return termGroup{}, false
}

// switchWords are the verbs of a name that turn something on or join two
// things (1: enable, attach, associate) or undo it (-1: disable, detach,
// disassociate).
var switchWords = map[string]int8{"enable": 1, "enables": 1, "activate": 1, "activates": 1,
	"attach": 1, "attaches": 1, "associate": 1, "associates": 1, "connect": 1, "assign": 1,
	"disable": -1, "disables": -1, "deactivate": -1, "deactivates": -1, "detach": -1, "detaches": -1,
	"disassociate": -1, "disassociates": -1, "disconnect": -1, "unassign": -1, "unlink": -1}

// undoVerbs are the opening verbs of a request that undo a switch or a
// join ("detach a VPC from a zone", "remove an attached file").
var undoVerbs = map[string]bool{"detach": true, "disassociate": true, "disconnect": true, "unassign": true,
	"unlink": true, "remove": true, "delete": true}

// onOffVerbs turn a thing on or off without a CRUD verb of their own; the
// boolean fields of onOffFields are how an update says it.
var onOffVerbs = map[string]bool{"pause": true, "unpause": true, "resume": true, "suspend": true,
	"unsuspend": true, "activate": true, "deactivate": true, "mute": true, "unmute": true}

const onOffFields = "active enabled disabled paused"

// requestIntent is queryIntent over the index: a request that opens with a
// verb undoing a join ("disconnect a database", "unlink an account",
// "detach a disk") where no call's name undoes one deletes the thing, as
// unplugging a cable does: the API keeps the join as the thing itself (a
// database connection, a linked account), and removing it is its delete.
func (ix *BM25) requestIntent(toks []string) ([]Intent, map[int]bool) {
	intents, words := queryIntent(toks)
	if len(intents) == 0 && len(toks) > 1 && undoVerbs[toks[0]] && !ix.undoesJoins {
		return []Intent{IntentDelete}, map[int]bool{0: true}
	}
	if len(intents) == 0 && len(toks) > 1 && joinVerbs[toks[0]] && !ix.makesJoins {
		// "connect a new Postgres database": the join is the thing.
		return []Intent{IntentCreate}, map[int]bool{0: true}
	}
	return intents, words
}

// joinVerbs are the opening verbs of a request that join two things, the
// counterparts of undoVerbs. Not "attach": to attach a policy or a file is
// as often to set it on the thing (S3's PutBucketPolicy) as to make one.
var joinVerbs = map[string]bool{"associate": true, "connect": true, "assign": true, "link": true}

// undoesCreate reports whether a request opens with a verb that "un"
// makes of another ("unsubscribe", "unfollow") whose base or one of its
// relatives names what some call of the catalog only creates (subscribe:
// a subscription): undoing it deletes that thing. A base no call creates
// ("unarchive", "unpause": no call makes an archive or a pause) is
// undone by an edit, not a delete.
func (ix *BM25) undoesCreate(toks []string, qp *queryPlan) bool {
	if len(toks) == 0 {
		return false
	}
	rest, ok := strings.CutPrefix(toks[0], "un")
	if !ok || len(rest) < 3 || !isVerb(rest) {
		return false
	}
	if _, known := lex().pos[toks[0]]; known {
		return false
	}
	// The verb need not be followed by its object ("unsubscribe from a
	// tag"), so its terms are its group's, not qp.verbTerms.
	terms := map[string]bool{}
	for _, g := range qp.groups {
		if g.at == 1 {
			for _, wt := range g.terms {
				terms[wt.term] = true
			}
		}
	}
	for d, fs := range ix.families {
		if len(fs) == 0 || !terms[ix.heads[d]] {
			continue
		}
		creates := true
		for _, f := range fs {
			creates = creates && f == IntentCreate
		}
		if creates {
			return true
		}
	}
	return false
}

// countedNoun reports whether toks[i] is what "how many" counts ("how many
// issues are in a version", "how many slots does a pool have"): English puts
// it in the plural, but the question asks for a number, not for the things.
// The counted thing may be a compound whose last noun is plural ("how many
// health checks").
func countedNoun(toks []string, i int) bool {
	for k := i - 1; k >= 1 && k >= i-3; k-- {
		if toks[k-1] == "how" && toks[k] == "many" {
			return true
		}
		if stopwords[toks[k]] || lex().pos[toks[k]]&posNoun == 0 {
			return false
		}
	}
	return false
}

// plural reports whether a word is the plural of a noun: "jobs",
// "namespaces", "categories" (not "status", "news" or "followers", which
// are lemmas themselves).
func (ix *BM25) plural(w string) bool {
	if len(w) < 4 || !strings.HasSuffix(w, "s") || strings.HasSuffix(w, "ss") || stopwords[w] || questionWords[w] {
		// ("does" is no plural of the noun "do".)
		return false
	}
	l := Lemmas(w)[0]
	if l == w {
		return false
	}
	bits, known := lex().pos[l]
	if !known {
		// A word WordNet does not know is a plural when the tools' titles
		// have its singular: "namespaces", not "Kubernetes".
		return ix.words[l]
	}
	return bits&posNoun != 0
}

// factor is what multiplies doc's BM25F score for the query: title
// coverage, intent agreement, deprecation. explain also describes it.
func (ix *BM25) factor(d int, qp *queryPlan, explain bool) (float64, string) {
	f := 1.0
	var why []string
	note := func(name string, x float64) {
		f *= x
		if explain && x != 1 {
			why = append(why, fmt.Sprintf("%s×%.2f", name, x))
		}
	}
	if fs := ix.families[d]; len(fs) > 0 {
		if qp.implicit && fs[0] != IntentGet {
			note("implicit-read", implicitReadFactor)
		}
		if qp.action && fs[0] == IntentGet {
			note("action-read", actionReadFactor)
		}
	} else {
		// A tool named by a verb no intent names ("assignIssue",
		// "validateProjectKey", "Charge") reads or writes as it declares
		// (an OpenAPI GET is read-only): a question does not ask to assign,
		// an imperative does not ask to validate.
		switch a := ix.access[d]; {
		case a == AccessRead && qp.action && !ix.namedByVerb(d, qp):
			note("action-read", actionReadFactor)
		case a == AccessWrite && qp.implicit:
			note("implicit-read", implicitReadFactor)
		case a == AccessWrite && len(qp.families) == 1 && qp.families[IntentGet]:
			note("intent-mismatch", intentMismatch)
		}
	}
	if ix.onDeleted[d] && !qp.deleted {
		note("not-deleted", notDeletedFactor)
	}
	if title := ix.titles[d]; len(title) > 0 {
		// A request whose verb is one of the tool's states ("archive a
		// repo": the update that sets archived) covers the tool's verb,
		// unless the tool only creates: "suspend a cron job" changes one,
		// it does not make a suspended one.
		stateVerb := false
		creates := len(ix.families[d]) > 0
		for _, f := range ix.families[d] {
			creates = creates && f == IntentCreate
		}
		for t := range ix.states[d] {
			stateVerb = stateVerb || qp.action && qp.qterms[t] && !creates
		}
		covered := 0.0
		for _, slot := range title {
			if stateVerb && strings.HasPrefix(slot[0], "^") {
				covered++
				continue
			}
			hit := false
			for _, t := range slot {
				if qp.qterms[t] {
					covered++
					hit = true
					break
				}
			}
			switch {
			case hit || !qp.action || len(slot) < 2 || !strings.HasPrefix(slot[1], "@"):
			case slot[0] == titleIntent(IntentCreate) && qp.verbTerms[ix.heads[d]]:
				// The imperative's verb names what the tool creates: "book
				// an appointment" (booking), "follow an issue" (a
				// watcher), "schedule a campaign" (a schedule).
				covered++
			case !readVerbs[slot[0]] && slot[0] != titleIntent(IntentDelete):
				// An imperative of a verb no intent names ("attach a
				// file", "approve a PR") asks to change something: a
				// tool's writing verb ("Add attachment", "Create pull
				// review") is a partial match for it, a reading one none,
				// nor a deleting one: "resize a pool" does not delete it.
				covered += actionWriteCover
			}
		}
		cov := covered / float64(len(title))
		note("title", 1+titleCoverage*cov*cov)
	}
	if qp.existing && !qp.verbTerms[ix.heads[d]] && len(ix.families[d]) > 0 {
		creates := true
		for _, f := range ix.families[d] {
			creates = creates && f == IntentCreate
		}
		if creates {
			// "close issue number 12": issue 12 exists, so a call that
			// only creates (an issue with a closed flag, a closed
			// milestone) does not close it; one that creates what the
			// request's verb names ("label issue 12": add a label) may.
			note("creates-existing", createsExisting)
		}
	}
	if fs := ix.families[d]; len(qp.families) > 0 && len(fs) > 0 {
		match := false
		for _, f := range fs {
			match = match || qp.families[f]
		}
		if !match {
			note("intent-mismatch", intentMismatch)
		}
	}
	if qp.listing && !qp.getting && ix.needsUnnamed(d, qp) {
		note("list-needs-id", listNeedsNoID)
	}
	if qp.getting && !qp.listing && !qp.question && ix.listPath[d] {
		// A request to read one thing ("get a topic", "download the
		// dataset of an image") does not ask for the collection's list,
		// whose path ends in the collection ("GET /images"). A question
		// in the singular often does ("what has a user done recently").
		note("list-path", listPathFactor)
	}
	if qp.listing && !qp.getting && ix.itemPath[d] {
		// The path says the call reads one thing ("/pools/{pool_name}"),
		// which a list request does not ask for.
		note("item-path", itemPathFactor)
	}
	if qp.turn != 0 && ix.switches[d] == -qp.turn {
		// "turn on DNSSEC signing" does not disable it.
		note("opposite-switch", oppositeSwitchFactor)
	}
	if (qp.listing || qp.plurals[ix.heads[d]]) && ix.pluralHead[d] {
		// A list request asks for many things; so does a request to act
		// on what it names in the plural ("clear out old events":
		// delete_events, not delete_event).
		note("plural-head", pluralHeadFactor)
	}

	if h := ix.heads[d]; h != "" && qp.prep != nil && qp.prep[h] && !qp.mainWords[h] && !qp.part {
		// What the tool acts on is named only in the request's modifier:
		// "open a ticket in a project" does not create the project.
		note("head-in-modifier", headInModifier)
	}
	if k := ix.headIdx[d]; qp.headNamed != nil && k >= 0 && !qp.headNamed[k] {
		// The request lists things the tool's name does not act on: the
		// workspace is named in its title only as whose sources it lists.
		note("head-unnamed", headUnnamed)
	}
	if len(qp.object) > 0 && !genericHeads[ix.heads[d]] && !ix.matchesObject(d, qp) {
		// The request's modifier matched, its object did not: "list the
		// nodes in the cluster" is not ClusterRoles.
		note("object-unmatched", objectUnmatched)
	}
	if len(qp.apps) > 0 && len(ix.appSet) > 1 && !qp.apps[ix.apps[d]] {
		// The request names another app than the tool's.
		note("other-app", otherAppFactor)
	}
	if ix.deprecated[d] {
		note("deprecated", deprecatedFactor)
	}
	return f, strings.Join(why, " ")
}

// namedByVerb reports whether the request's opening verb, or a relative of
// it, is the first word of the tool's name ("validate a key":
// validateProjectKey).
func (ix *BM25) namedByVerb(d int, qp *queryPlan) bool {
	if len(ix.titles[d]) == 0 {
		return false
	}
	for _, t := range ix.titles[d][0] {
		if qp.verbTerms[t] {
			return true
		}
	}
	return false
}

// matchesObject reports whether doc has a term of the request's object.
func (ix *BM25) matchesObject(d int, qp *queryPlan) bool {
	if qp.objectHit != nil {
		return qp.objectHit[d]
	}
	for _, gi := range qp.object {
		best := 0.0
		for _, wt := range qp.groups[gi].terms {
			ps := ix.postings[wt.term]
			if i, ok := slices.BinarySearchFunc(ps, int32(d), func(p posting, d int32) int { return int(p.doc - d) }); ok {
				best = max(best, wt.w*ix.idf[wt.term]*float64(ps[i].sat))
			}
		}
		if best > 0 && best >= objectShare*qp.gUpper[gi] {
			return true
		}
	}
	return false
}

// pinNamed puts the tools a query names outright (see namedDocs) before
// every other hit: by their rank, then by their words' score; the first
// scores 1 and each next one 0.01 less, and no other tool scores above the
// last of them.
func pinNamed(hits []Hit, named []namedDoc, allow func(int) bool) []Hit {
	if len(named) == 0 {
		return hits
	}
	score := make(map[int]float64, len(hits))
	for _, h := range hits {
		score[h.Doc] = h.Score
	}
	keep := make([]namedDoc, 0, len(named))
	for _, n := range named {
		if allow == nil || allow(n.d) {
			keep = append(keep, n)
		}
	}
	sort.SliceStable(keep, func(i, j int) bool {
		if keep[i].rank != keep[j].rank {
			return keep[i].rank > keep[j].rank
		}
		return score[keep[i].d] > score[keep[j].d]
	})
	out := make([]Hit, 0, len(hits)+len(keep))
	pinned := make(map[int]bool, len(keep))
	s := 1.0
	for _, n := range keep {
		out = append(out, Hit{Doc: n.d, Score: s})
		pinned[n.d] = true
		s = max(s-0.01, 0.5)
	}
	for _, h := range hits {
		if !pinned[h.Doc] {
			out = append(out, Hit{Doc: h.Doc, Score: min(h.Score, s)})
		}
	}
	return out
}

// sortHits orders by score, ties by document order (stable results).
func sortHits(hits []Hit) {
	sort.Slice(hits, func(i, j int) bool {
		if hits[i].Score != hits[j].Score {
			return hits[i].Score > hits[j].Score
		}
		return hits[i].Doc < hits[j].Doc
	})
}

func isNumber(t string) bool {
	for i := 0; i < len(t); i++ {
		if t[i] < '0' || t[i] > '9' {
			return false
		}
	}
	return t != ""
}

// pathTerms are the terms of a path's static segments that the tool's name
// does not have: what the path adds is the resource a name leaves out
// ("ListMember" at /Queues/{QueueSid}/Members: queue); repeating the name's
// words would only make them commoner.
func pathTerms(path, name string) []string {
	if path == "" {
		return nil
	}
	own := map[string]bool{}
	for _, t := range Terms(name) {
		own[t] = true
	}
	var out []string
	for _, t := range Terms(pathWords(path)) {
		if !own[t] {
			out = append(out, t)
		}
	}
	return out
}

// pathWords are the words of a path template's static segments:
// "/2010-04-01/Accounts/{AccountSid}/Calls.json" gives "Accounts Calls".
// Parameters, version markers ("v1", "v2beta1", dates) and a file
// extension say nothing about what the call acts on.
func pathWords(path string) string {
	var b strings.Builder
	for _, seg := range strings.Split(path, "/") {
		if seg == "" || strings.Contains(seg, "{") {
			continue
		}
		if i := strings.LastIndexByte(seg, '.'); i > 0 {
			seg = seg[:i]
		}
		if versionSegment.MatchString(seg) {
			continue
		}
		b.WriteString(seg)
		b.WriteByte(' ')
	}
	return b.String()
}

// versionSegment matches a path segment that is a version: "v1", "v2beta1",
// "2010-04-01", "1.0".
var versionSegment = regexp.MustCompile(`^(?i:v\d+([a-z]+\d*)?|[\d.-]+)$`)

// partOf reports whether a request to add or remove something acts on a
// part of what its modifier names: no word of its object is what some tool
// acts on, and one is a field of a tool that updates the modifier's thing
// ("add a label to a node": no tool's subject is a label, a node's edit has
// metadata.labels). "add a webhook to a repository" keeps its create: the
// edit of a repository has no webhook field.
func (ix *BM25) partOf(qp *queryPlan, qtoks []string, firstPrep int) bool {
	for _, gi := range qp.object {
		if ix.namesHead(qtoks[qp.groups[gi].at-1 : qp.groups[gi].at]) {
			return false
		}
	}
	for _, w := range qtoks[firstPrep+1:] {
		for _, l := range Lemmas(w) {
			fs := ix.headFields[l]
			if fs == nil || !ix.headSet[l] {
				continue
			}
			for _, gi := range qp.object {
				if fs[qp.groups[gi].terms[0].term] {
					return true
				}
			}
		}
	}
	return false
}

// otherCreateWord reports whether a word of toks other than toks[i] asks to
// create.
func otherCreateWord(toks []string, i int) bool {
	for j, t := range toks {
		if j != i && intentWords[t] == IntentCreate {
			return true
		}
	}
	return false
}

// possessedField reports whether a request names, before its modifier, what
// one thing has ("a customer's billing address", "the vendor's phone
// number") where no tool acts on what is had: the request is about that one
// thing. Not "a user's repos", which a call lists.
func (ix *BM25) possessedField(toks []string) bool {
	end := len(toks)
	for i, t := range toks {
		if (modifierPrepositions[t] || t == "when") && i > 1 {
			end = i
			break
		}
	}
	for i := 2; i+1 < end; i++ {
		// ("customers' addresses" has no "s" of its own: many things.)
		if toks[i] == "s" && !contractions[toks[i-1]] && !stopwords[toks[i-1]] && !questionWords[toks[i-1]] {
			// What is had ends at the next function word ("a
			// project's files as a zip": files).
			j := i + 1
			for j < end && !stopwords[toks[j]] {
				j++
			}
			return j > i+1 && !ix.namesHead(toks[j-1:j])
		}
	}
	return false
}

// contractions are the words whose "'s" is "is", "has" or "us": "what's",
// "it's", "let's".
var contractions = map[string]bool{"what": true, "it": true, "that": true, "there": true, "here": true, "who": true,
	"where": true, "how": true, "when": true, "let": true, "he": true, "she": true, "which": true}

// oneWords name one thing of a kind.
var oneWords = map[string]bool{"one": true, "particular": true, "specific": true, "single": true}

// readOnly reports whether a request's intent families are reads only (or
// it has none).
func readOnly(families map[Intent]bool) bool {
	for f := range families {
		if f != IntentGet {
			return false
		}
	}
	return true
}

// oneThing reports whether a request names what it is about with "one"
// (or "particular", "specific", "single") before its modifier ("show one connection", "details of one event"; not
// "pods in one namespace", "one of the users", "one another").
func oneThing(toks []string) bool {
	return beforeModifier(toks, func(i int) bool {
		return oneWords[toks[i]] && i+1 < len(toks) && !stopwords[toks[i+1]] && toks[i+1] != "another"
	})
}

// numbered reports whether a number of toks names one thing (see
// numberedThing) before any modifier.
func numbered(toks []string) bool {
	return beforeModifier(toks, func(i int) bool { return numberedThing(toks, i) })
}

// beforeModifier reports whether is holds for a word of toks before the
// first preposition that opens a modifier; one right after the opening
// verb is the verb's own ("look at one log entry"), as for the request's
// modifier (see plan).
func beforeModifier(toks []string, is func(i int) bool) bool {
	for i, t := range toks {
		if modifierPrepositions[t] && i > 1 {
			return false
		}
		if is(i) {
			return true
		}
	}
	return false
}

// numberedThing reports whether toks[i] is a number that names one thing
// by the singular noun before it: "invoice 42", "issue number 12" (not
// "the last 5 builds", where a noun follows the number).
func numberedThing(toks []string, i int) bool {
	if i == 0 || strings.Trim(toks[i], "0123456789") != "" || i+1 < len(toks) && !stopwords[toks[i+1]] {
		return false
	}
	prev := toks[i-1]
	return !stopwords[prev] && lex().pos[prev]&posNoun != 0 && Lemmas(prev)[0] == prev
}

// joinedCompound is the lemmas of toks[i] and toks[i+1] written as one
// word ("user name": username), and of a verb's lemma and the particle
// after it ("add-on": addon, "setting up": setup), which a catalog writes
// as one noun though the particle may be a stop word.
func joinedCompound(toks []string, i int) []string {
	next := toks[i+1]
	var out []string
	if !stopwords[next] {
		out = Lemmas(toks[i] + next)
	}
	if particle(next) {
		ls := Lemmas(toks[i])
		if v := ls[len(ls)-1]; isVerb(v) && (v != toks[i] || stopwords[next]) {
			out = append(out, Lemmas(v+next)...)
		}
	}
	return out
}

// splitPhrase is where the second word of a domain phrase follows the
// request's opening verb past its object ("log a user in", "sign me out",
// "bring the project back"), 0 when it does not. A particle that opens a
// phrase of its own ("log a message in the channel") is a preposition.
func splitPhrase(toks []string) int {
	first := phrasalSplit(toks)
	if first == 0 {
		return 0
	}
	ls := Lemmas(toks[0])
	for j := first; j < len(toks) && j <= first+1; j++ {
		if _, ok := domainPhrases[[2]string{ls[len(ls)-1], toks[j]}]; !ok {
			continue
		}
		if j+1 < len(toks) && (determiners[toks[j+1]] || possessives[toks[j+1]]) {
			return 0
		}
		return j
	}
	return 0
}

// possessives are the words that open a noun phrase as its owner's.
var possessives = map[string]bool{"my": true, "our": true, "your": true, "his": true, "her": true, "their": true, "its": true, "this": true, "that": true}

// loggedIn are the terms of being logged (or signed) in.
var loggedIn = []weighted{{"current", 1}, {"authenticated", 0.8}, {"session", 0.5}, {"login", 0.3}}

// beBefore reports whether a form of "be" comes among the three words
// before toks[i] ("am I logged", "are signed").
func beBefore(toks []string, i int) bool {
	for j := max(0, i-3); j < i; j++ {
		if beForms[toks[j]] || toks[j] == "am" {
			return true
		}
	}
	return false
}

// phraseTerms are the terms of the domain phrases a name writes as two
// words ("logOutUser": logout, "getUserName": username), so that a request
// that says the phrase ("sign out", "user name") meets them as it meets a
// name that writes them as one word.
func phraseTerms(name string) []string {
	toks := Tokenize(name)
	var out []string
	for i := 0; i+1 < len(toks); i++ {
		ls := Lemmas(toks[i])
		if toks[i+1] == "in" && strings.HasSuffix(toks[i], "ed") {
			// "the currently logged in user": the state of being logged
			// in names the caller, not the act of logging in.
			continue
		}
		if questionWords[toks[i]] {
			// "how many", "who can" ask a question; a description that
			// says "how many zones are returned" does not count them.
			continue
		}
		if ph, ok := domainPhrases[[2]string{ls[len(ls)-1], toks[i+1]}]; ok && ph[0].term != ls[len(ls)-1] {
			// ("pull request" stands for pull, a word the name has.)
			out = append(out, ph[0].term)
		}
	}
	return out
}

// sentenceTerms are the Terms of a tool's own sentence without the "new"
// of a verb that creates: "Create a new Session", "Adds a new member" say
// the act, not that the thing is recent, so "the latest location" (latest:
// newest, whose lemma is new) must not meet them.
func sentenceTerms(text string) []string {
	toks := Tokenize(text)
	out := make([]string, 0, len(toks))
	for i, t := range toks {
		if stopwords[t] || t == "new" && createsNew(toks, i) {
			continue
		}
		out = append(out, Lemmas(t)...)
	}
	return out
}

// createsNew reports whether the "new" at toks[i] follows a verb that
// creates, an article aside ("create a new", "adds new").
func createsNew(toks []string, i int) bool {
	j := i - 1
	if j >= 0 && (toks[j] == "a" || toks[j] == "an" || toks[j] == "the") {
		j--
	}
	return j >= 0 && toks[j] != "new" && intentWords[toks[j]] == IntentCreate
}

// listOf reports whether words open with "a list of" (also "the list
// of", "list of"): "Retrieves a list of categories", "Get a list of
// anonymization keys" list, though their verb reads one thing.
func listOf(words []string) bool {
	if len(words) > 0 && (words[0] == "a" || words[0] == "the") {
		words = words[1:]
	}
	return len(words) >= 2 && (words[0] == "list" || words[0] == "lists") && words[1] == "of"
}

// aliasRe matches a word the catalog explains by others in parentheses right
// after it: "a given node (project or component)", "an item (file or
// folder)".
var aliasRe = regexp.MustCompile(`(?i)\b([a-z]{3,}) \(([a-z]{3,}(?:(?:,? or |, )[a-z]{3,}){0,2})\)`)

// catalogAliases are the words a catalog's own descriptions give for a
// word of its tools' names ("Retrieves the details of a given node
// (project or component)": node is a project or a component), as lemmas:
// the catalog's vocabulary, which no general table can hold. The explained
// word is a noun a tool's name has and no intent word, the words in
// parentheses are nouns, and not an abbreviation in capitals.
func catalogAliases(descs, locals []string) map[string][]string {
	var named map[string]bool // the names' terms, made at the first match
	out := map[string][]string{}
	for _, d := range descs {
		if !strings.Contains(d, " (") {
			continue
		}
		for _, m := range aliasRe.FindAllStringSubmatch(d, -1) {
			if named == nil {
				named = map[string]bool{}
				for _, l := range locals {
					for _, t := range Terms(l) {
						named[t] = true
					}
				}
			}
			w := Lemmas(strings.ToLower(m[1]))[0]
			if !named[w] || stopwords[w] || intentWords[w] != IntentNone || lex().pos[w]&posNoun == 0 ||
				strings.ToUpper(m[2]) == m[2] {
				// "access control list (ACL)" spells out an abbreviation,
				// "list (…)" is an act.
				continue
			}
			var alts []string
			for _, a := range strings.FieldsFunc(strings.ToLower(m[2]), func(r rune) bool { return r == ' ' || r == ',' }) {
				if a == "or" {
					continue
				}
				l := Lemmas(a)[0]
				if stopwords[l] || l == w || intentWords[a] != IntentNone || lex().pos[l]&posNoun == 0 {
					alts = nil
					break
				}
				alts = append(alts, l)
			}
			for _, a := range alts {
				if !slices.Contains(out[w], a) {
					out[w] = append(out[w], a)
				}
			}
		}
	}
	return out
}

// A soft-delete API keeps its deleted things apart and names the calls on
// them so: "GetDeletedSecret", "RecoverDeletedKey", "PurgeDeletedCertificate"
// beside "GetSecret" and "DeleteKey" (Key Vault; Box's trashed items). Their
// names share the request's words — its verb's "delete" meets their
// "deleted" — so that "delete a signing key" found the purge of a deleted
// key first and "get the details of a storage account" the deleted one. A
// request about deleted things says so beside its verb (deletedWords: "a
// deleted key", "the trash", "undelete", "for good"); without such a word,
// a tool on deleted things counts for notDeletedFactor.
var deletedWords = map[string]bool{"delete": true, "deletion": true, "remove": true, "removal": true, "trash": true,
	"recycle": true, "purge": true, "undelete": true, "undo": true, "recover": true, "permanently": true, "forever": true, "good": true}

const notDeletedFactor = 0.7
