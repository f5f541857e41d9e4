package search

import (
	"context"
	"math"
	"sort"
	"strings"
)

// Doc is one searchable tool. The fields are indexed separately and weighted
// (BM25F), so a word in a tool's name counts more than one deep in its
// parameter descriptions.
type Doc struct {
	// Name is the tool name, e.g. "github:listRepos" or "sendgrid:GET_alerts".
	Name string
	// AppID is the owning app; its words are indexed with the name.
	AppID string
	// Description is the full description; its first line or sentence is
	// indexed as the summary, with more weight than the rest.
	Description string
	// Params holds parameter names and their descriptions.
	Params string
	// Tags are free-form labels (OpenAPI tags, for example).
	Tags []string
	// Required is the number of required parameters: a request to list
	// things prefers tools that need no identifier.
	Required int
}

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

// The BM25F fields and their weights, tuned on the search-quality test set.
const (
	fieldName = iota
	fieldSummary
	fieldBody
	fieldParams
	fieldTags
	fieldIntent
	numFields
)

var fieldWeights = [numFields]float64{
	fieldName:    2.5,
	fieldSummary: 2.5,
	fieldBody:    0.6,
	fieldParams:  0.5,
	fieldTags:    1.2,
	fieldIntent:  0.8,
}

// fieldB is BM25's length normalisation per field.
var fieldB = [numFields]float64{
	fieldName:    0.3,
	fieldSummary: 0.5,
	fieldBody:    0.75,
	fieldParams:  0.75,
	fieldTags:    0.3,
	fieldIntent:  0,
}

const (
	k1 = 1.2
	// intentQueryWeight is the weight of a query's intent terms relative to
	// its words.
	intentQueryWeight = 0.6
)

type posting struct {
	doc int32
	// sat is the saturated BM25F term weight tf'/(k1+tf') of the term in doc.
	sat float32
}

// BM25 is a BM25F ranker over tool documents with stemming and intent
// synonyms. Build it once per tool set; it is immutable afterwards.
type BM25 struct {
	postings map[string][]posting
	idf      map[string]float64
	n        int
	// family is each document's primary intent family (see intentFamily).
	family   []Intent
	required []bool
}

// listNeedsNoID scales the score of a tool with required parameters when
// the query asks to list (and not to get one thing).
const listNeedsNoID = 0.85

// intentMismatch scales the score of a tool whose primary intent belongs to
// another family than every intent of the query: "list bounced emails"
// should not rank DELETE /bounces/{email} first.
const intentMismatch = 0.7

// intentFamily groups the intents whose tools answer the same kind of
// request: reads (get, list, search) are interchangeable.
func intentFamily(i Intent) Intent {
	switch i {
	case IntentGet, IntentList, IntentSearch:
		return IntentGet
	}
	return i
}

// primaryIntent is the first intent word of the tool's local name, else of
// its summary.
func primaryIntent(name, summary string) Intent {
	for _, text := range []string{localName(name), summary} {
		for _, w := range Tokenize(text) {
			if in := intentWords[w]; in != IntentNone {
				return in
			}
		}
	}
	return IntentNone
}

// NewBM25 indexes docs.
func NewBM25(docs []Doc) *BM25 {
	type fieldTerms [numFields][]string
	all := make([]fieldTerms, len(docs))
	var total [numFields]float64
	for i, d := range docs {
		summary, body := splitSummary(d.Description)
		nameText := d.Name
		if d.AppID != "" && !strings.HasPrefix(d.Name, d.AppID) {
			nameText = d.AppID + " " + d.Name
		}
		ft := fieldTerms{
			fieldName:    Terms(nameText),
			fieldSummary: Terms(summary),
			fieldBody:    Terms(body),
			fieldParams:  Terms(d.Params),
			fieldTags:    Terms(strings.Join(d.Tags, " ")),
		}
		ft[fieldIntent] = append(intentTerms(localName(d.Name)), intentTerms(summary)...)
		all[i] = ft
		for f := range numFields {
			total[f] += float64(len(ft[f]))
		}
	}
	var avg [numFields]float64
	for f := range numFields {
		avg[f] = math.Max(total[f]/math.Max(float64(len(docs)), 1), 1)
	}
	ix := &BM25{postings: map[string][]posting{}, idf: map[string]float64{}, n: len(docs), family: make([]Intent, len(docs)), required: make([]bool, len(docs))}
	for i, d := range docs {
		ix.required[i] = d.Required > 0
		summary, _ := splitSummary(d.Description)
		ix.family[i] = intentFamily(primaryIntent(d.Name, summary))
	}
	for i, ft := range all {
		tf := map[string]float64{}
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
		df := float64(len(ps))
		ix.idf[t] = math.Log(1 + (float64(ix.n)-df+0.5)/(df+0.5))
	}
	return ix
}

// localName is the part of a namespaced tool name after the app prefix.
func localName(name string) string {
	if i := strings.LastIndexByte(name, ':'); i >= 0 {
		return name[i+1:]
	}
	return name
}

// splitSummary splits a description into its first line or sentence and the
// rest.
func splitSummary(desc string) (summary, body string) {
	desc = strings.TrimSpace(desc)
	end := len(desc)
	if i := strings.IndexByte(desc, '\n'); i >= 0 {
		end = i
	}
	if i := strings.Index(desc[:end], ". "); i >= 0 {
		end = i + 1
	}
	return desc[:end], desc[end:]
}

// queryTerms weighs the terms of a query: each distinct word once, and its
// intent terms at intentQueryWeight.
func queryTerms(query string) map[string]float64 {
	qt := map[string]float64{}
	for _, t := range Terms(query) {
		qt[t] = 1
	}
	for _, t := range intentTerms(query) {
		qt[t] = intentQueryWeight
	}
	return qt
}

// Rank scores every allowed document that shares a term with query and
// returns the best k. The score is the BM25F score divided by the largest
// score the query could reach, so it lies in 0..1 and is comparable across
// queries (minRelevanceScore relies on that).
func (ix *BM25) Rank(_ context.Context, query string, k int, allow func(int) bool) ([]Hit, error) {
	qt := queryTerms(query)
	// A dense score array beats a map at these sizes (a few thousand tools);
	// touched lists the documents that scored.
	scores := make([]float64, ix.n)
	var touched []int32
	var upper float64
	for t, w := range qt {
		idf, ok := ix.idf[t]
		if !ok {
			// An unknown word still counts against the maximum: a query
			// half made of words no tool has is a weaker match.
			upper += w * math.Log(1+(float64(ix.n)+0.5)/0.5)
			continue
		}
		upper += w * idf
		for _, p := range ix.postings[t] {
			if scores[p.doc] == 0 {
				touched = append(touched, p.doc)
			}
			scores[p.doc] += w * idf * float64(p.sat)
		}
	}
	families := map[Intent]bool{}
	listing, getting := false, false
	for _, t := range Tokenize(query) {
		if in := intentWords[t]; in != IntentNone {
			families[intentFamily(in)] = true
			listing = listing || in == IntentList
			getting = getting || in == IntentGet
		}
	}
	hits := make([]Hit, 0, len(touched))
	for _, d := range touched {
		if allow != nil && !allow(int(d)) {
			continue
		}
		s := scores[d]
		if f := ix.family[d]; len(families) > 0 && f != IntentNone && !families[f] {
			s *= intentMismatch
		}
		if listing && !getting && ix.required[d] {
			s *= listNeedsNoID
		}
		hits = append(hits, Hit{Doc: int(d), Score: s / upper})
	}
	sortHits(hits)
	if k > 0 && len(hits) > k {
		hits = hits[:k]
	}
	return hits, nil
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
