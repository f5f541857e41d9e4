package metatools

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codemode-gateway/caddy-codemode/broker/catalog"
)

// evalQuery is one query of a catalog's evaluation set: the operationIds
// that fulfil it (several when the API has equivalent operations).
type evalQuery struct {
	Q    string   `json:"q"`
	Want []string `json:"want"`
}

// evalSet is testdata/catalogs/<name>.queries.json.
type evalSet struct {
	Catalog string      `json:"catalog"`
	Role    string      `json:"role"` // "tune" or "report"
	Queries []evalQuery `json:"queries"`
}

// evalCatalogs are the vendored catalogs in the order the docs report them:
// the tuning ones first.
var evalCatalogs = []string{"jira", "gitea", "square", "kubernetes", "asana", "launchdarkly", "telnyx", "discourse", "slicebox", "traccar", "airflow", "s3", "sinao", "osf", "route53", "anchore", "airbyte", "xtrf", "apideck", "cognito", "classroom", "influxdb", "netlify", "youtube", "keyvault", "docusign", "bunq", "netbox", "superset", "stripe", "slack", "github", "twilio", "box", "zoom", "reverb"}

var (
	evalMu    sync.Mutex
	evalCache = map[string]*evalCatalog{}
)

// evalCatalog is a vendored catalog loaded through the real OpenAPI catalog,
// with its tools and operationId -> action name map.
type evalCatalog struct {
	name  string
	set   evalSet
	src   *CatalogSource
	tools []Tool
	byOp  map[string]string
}

// loadEvalCatalog decompresses testdata/catalogs/<name>.json.gz into a
// temporary file and builds the catalog from it, as the gateway would from
// a spec_url. Loaded catalogs are shared by the tests of one run (the GitHub
// document takes seconds to load under -race).
func loadEvalCatalog(t testing.TB, name string) *evalCatalog {
	t.Helper()
	evalMu.Lock()
	defer evalMu.Unlock()
	if c, ok := evalCache[name]; ok {
		return c
	}
	dir := filepath.Join("testdata", "catalogs")
	raw, err := os.ReadFile(filepath.Join(dir, name+".queries.json"))
	if err != nil {
		t.Fatal(err)
	}
	c := &evalCatalog{name: name, byOp: map[string]string{}}
	if err := json.Unmarshal(raw, &c.set); err != nil {
		t.Fatalf("%s.queries.json: %v", name, err)
	}
	f, err := os.Open(filepath.Join(dir, name+".json.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tmp, err := os.MkdirTemp("", "codemode-eval-")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(tmp, name+".json")
	out, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, zr); err != nil {
		t.Fatal(err)
	}
	out.Close()
	cat, err := catalog.New([]catalog.Source{{Name: name, SpecURL: path}}, &catalog.Options{PollInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := cat.Start(context.Background()); err != nil {
		t.Fatalf("loading %s: %v", name, err)
	}
	os.RemoveAll(tmp)
	for _, a := range cat.Response().Actions {
		if a.OperationID != "" {
			c.byOp[a.OperationID] = a.Name
		}
		// An operation without an operationId is labelled "METHOD path".
		c.byOp[a.Method+" "+a.Path] = a.Name
	}
	c.src = &CatalogSource{C: cat}
	c.tools, _ = c.src.Tools(context.Background())
	for _, q := range c.set.Queries {
		for _, w := range q.Want {
			if _, ok := c.byOp[w]; !ok {
				t.Fatalf("%s: query %q names operation %q, which the catalog does not have", name, q.Q, w)
			}
		}
	}
	evalCache[name] = c
	return c
}

// evalRole is the role of a catalog's evaluation set, read without
// loading its document (GitHub's takes seconds under -race).
func evalRole(t testing.TB, name string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "catalogs", name+".queries.json"))
	if err != nil {
		t.Fatal(err)
	}
	var set evalSet
	if err := json.Unmarshal(raw, &set); err != nil {
		t.Fatalf("%s.queries.json: %v", name, err)
	}
	return set.Role
}

// evalResult is recall@1/5/10 and MRR (over the top 10) of one catalog.
type evalResult struct {
	R1, R5, R10, MRR float64
	Misses           []string
}

// service is the meta-tools over an index of c's tools built with opts.
func (c *evalCatalog) service(t testing.TB, opts *IndexOptions) *Service {
	t.Helper()
	ix, err := NewIndex([]ToolSource{&StaticSource{List: c.tools}}, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := ix.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	return NewService(ix, nil)
}

// evaluate runs every query of c through meta:search over an index of c's
// tools built with opts.
func evaluate(t testing.TB, c *evalCatalog, opts *IndexOptions) evalResult {
	return evaluateFramed(t, c, opts, "%s")
}

// evaluateFramed is evaluate with each query that is not a question put in
// framing, a fmt format with one %s ("How do I %s?"); {app} in it stands for
// the catalog's app, capitalised ("In {app}, %s": "In Jira, …").
func evaluateFramed(t testing.TB, c *evalCatalog, opts *IndexOptions, framing string) evalResult {
	t.Helper()
	return evaluateWith(t, c, c.service(t, opts), framing)
}

// evaluateWith is evaluateFramed over a service already built (an index
// build costs more than a pass of queries, most under -race).
func evaluateWith(t testing.TB, c *evalCatalog, s *Service, framing string) evalResult {
	t.Helper()
	var r evalResult
	for _, q := range c.set.Queries {
		query := q.Q
		if w := strings.Fields(strings.ToLower(query)); len(w) > 0 && !evalQuestion[w[0]] {
			query = strings.ReplaceAll(fmt.Sprintf(framing, query), "{app}", strings.ToUpper(c.name[:1])+c.name[1:])
		}
		out, err := s.Search(context.Background(), SearchInput{Queries: []string{query}, TopK: new(10)})
		if err != nil {
			t.Fatalf("search %q: %v", q.Q, err)
		}
		want := map[string]bool{}
		for _, w := range q.Want {
			want[c.byOp[w]] = true
		}
		rank := 0
		var top []string
		for i, res := range out.Tools {
			if want[res.Name] && rank == 0 {
				rank = i + 1
			}
			if i < 3 {
				top = append(top, strings.TrimPrefix(res.Name, c.name+":"))
			}
		}
		switch {
		case rank == 1:
			r.R1++
			fallthrough
		case rank >= 1 && rank <= 5:
			r.R5++
			fallthrough
		case rank >= 1 && rank <= 10:
			r.R10++
		}
		if rank > 0 {
			r.MRR += 1 / float64(rank)
		}
		if rank != 1 {
			r.Misses = append(r.Misses, strings.Join([]string{"rank", itoa(rank), "for", `"` + q.Q + `"`, "want", strings.Join(q.Want, ","), "top:", strings.Join(top, " ")}, " "))
		}
	}
	n := float64(len(c.set.Queries))
	r.R1, r.R5, r.R10, r.MRR = r.R1/n, r.R5/n, r.R10/n, r.MRR/n
	return r
}

// evalQuestion are the words that open a question: a framing such as "How do
// I %s?" around one would not be English.
var evalQuestion = map[string]bool{"who": true, "whom": true, "whose": true, "what": true, "which": true, "when": true,
	"where": true, "why": true, "how": true, "is": true, "are": true, "was": true, "were": true, "has": true,
	"have": true, "does": true, "do": true, "did": true, "can": true, "could": true, "am": true}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}

// qualityFloors hold each catalog's recall@5 and MRR a little under what
// docs/search.md reports, so that a change that loses quality fails here.
// (Issue 13's goal for catalogs not tuned on is recall@5 >= 0.92 and MRR >=
// 0.75; docs/search.md says where it is not met.)
var qualityFloors = map[string][2]float64{
	"jira": {0.94, 0.89}, "gitea": {0.98, 0.93}, "square": {0.96, 0.88}, "kubernetes": {0.82, 0.75},
	"asana": {0.93, 0.82}, "launchdarkly": {0.89, 0.85}, "telnyx": {0.86, 0.78}, "discourse": {0.94, 0.88}, "slicebox": {0.90, 0.85}, "traccar": {0.95, 0.88}, "airflow": {0.98, 0.90},
	"s3": {0.92, 0.76}, "sinao": {0.96, 0.82}, "osf": {0.89, 0.74}, "route53": {0.99, 0.85}, "anchore": {0.90, 0.77}, "airbyte": {0.91, 0.80}, "xtrf": {0.87, 0.79}, "apideck": {0.95, 0.93}, "cognito": {0.92, 0.76}, "classroom": {0.94, 0.87}, "influxdb": {0.91, 0.81}, "netlify": {0.91, 0.77}, "youtube": {0.95, 0.84}, "keyvault": {0.96, 0.75}, "docusign": {0.88, 0.71}, "bunq": {0.74, 0.56}, "netbox": {0.68, 0.59}, "superset": {0.88, 0.76},
	"stripe": {0.88, 0.74}, "slack": {0.88, 0.81}, "github": {0.95, 0.83}, "twilio": {0.83, 0.70}, "box": {0.83, 0.72},
	"zoom": {0.88, 0.77}, "reverb": {0.65, 0.58},
}

// TestSearchQualityCatalogs measures the tfidf strategy on every vendored
// catalog against the floors above. -v logs the misses of the tuning
// catalogs only: a report catalog's misses stay unread so that its figures
// stay a held-out measure (CODEMODE_EVAL_REPORT_MISSES=1 logs them too, for
// whoever studies them after the fact). CODEMODE_EVAL_CATALOGS=a,b runs only
// those catalogs (tuning without looking at the report catalogs).
func TestSearchQualityCatalogs(t *testing.T) {
	only := map[string]bool{}
	for _, n := range strings.Split(os.Getenv("CODEMODE_EVAL_CATALOGS"), ",") {
		if n = strings.TrimSpace(n); n != "" {
			only[n] = true
		}
	}
	for _, name := range evalCatalogs {
		if len(only) > 0 && !only[name] {
			continue
		}
		t.Run(name, func(t *testing.T) {
			c := loadEvalCatalog(t, name)
			if len(c.set.Queries) < 50 {
				t.Fatalf("%s has only %d queries", name, len(c.set.Queries))
			}
			r := evaluate(t, c, nil)
			t.Logf("%s (%s, %d tools, %d queries): recall@1 %.3f recall@5 %.3f recall@10 %.3f MRR %.3f",
				name, c.set.Role, len(c.tools), len(c.set.Queries), r.R1, r.R5, r.R10, r.MRR)
			if testing.Verbose() && (c.set.Role == "tune" || os.Getenv("CODEMODE_EVAL_REPORT_MISSES") == "1") {
				for _, m := range r.Misses {
					t.Log(m)
				}
			}
			if f := qualityFloors[name]; r.R5 < f[0] || r.MRR < f[1] {
				t.Errorf("%s below its floor: recall@5 %.3f (floor %.2f), MRR %.3f (floor %.2f)", name, r.R5, f[0], r.MRR, f[1])
			}
		})
	}
}

// TestSearchQualityFramed: an agent often wraps its request in words
// addressed to whoever reads it ("How do I …?", "I need to …", "Which
// endpoint should I call to …?"). Over the tuning catalogs, such a framing
// around every request that is not a question must keep MRR within 0.04 of
// the plain requests' (without search.requestOf they lost 0.15 to 0.45);
// so must the app named as where the request happens ("In Jira, …", "… in
// Jira": 0.06 to 0.1 lost before search's withoutApps), a label before it
// or a tail after it that address the reader ("Quick question: …", "… and
// return the result", "…, thanks": 0.01 to 0.07 lost before requestOf
// knew them, "Which of the endpoints can …" 0.26); so must the values a
// request carries ("… (id 12345)": up to 0.075 lost, `… named
// "prod-web-1"` 0.06, before search's withoutValues); so must a reason
// after the request ("… so I can review it", "… to see what changed": 0.03
// and 0.05 lost before search's withoutReason).
// Report catalogs are left out: their figures are read once per pass.
func TestSearchQualityFramed(t *testing.T) {
	forTuningCatalogs(t, func(t *testing.T, c *evalCatalog, s *Service) {
		plain := evaluateWith(t, c, s, "%s")
		for _, framing := range []string{"How do I %s?", "I need to %s", "Which endpoint should I call to %s?", "%s using the API", "Which endpoint can %s?", "In {app}, %s", "{app}: %s", "%s in {app}",
			"Quick question: %s", "%s and return the result", "Which of the endpoints can %s?", "%s, thanks",
			"%s (id 12345)", `%s named "prod-web-1"`, "%s so I can review it", "%s to see what changed"} {
			if r := evaluateWith(t, c, s, framing); r.MRR < plain.MRR-0.04 {
				t.Errorf("%s framed as %q: MRR %.3f, plain %.3f", c.name, framing, r.MRR, plain.MRR)
			}
		}
	})
}

// TestSearchQualityTelegraphic: an agent in a hurry writes without
// articles ("archive repo", "take tag off task"). Over the tuning catalogs,
// every request with its articles dropped must keep MRR within 0.02 of the
// plain requests' (before search read a verb and a bare singular noun as an
// imperative and its object, it lost up to 0.09: Gitea 0.926 -> 0.836).
func TestSearchQualityTelegraphic(t *testing.T) {
	forTuningCatalogs(t, func(t *testing.T, c *evalCatalog, s *Service) {
		var plain, bare float64
		for _, q := range c.set.Queries {
			var words []string
			for _, w := range strings.Fields(q.Q) {
				if l := strings.ToLower(w); l != "a" && l != "an" && l != "the" {
					words = append(words, w)
				}
			}
			plain += reciprocalRank(t, c, s, q.Q, q.Want)
			bare += reciprocalRank(t, c, s, strings.Join(words, " "), q.Want)
		}
		n := float64(len(c.set.Queries))
		if bare/n < plain/n-0.02 {
			t.Errorf("%s without articles: MRR %.3f, plain %.3f", c.name, bare/n, plain/n)
		}
	})
}

// TestSearchNamedCalls: an agent that knows the call names it — the tool's
// name, or its HTTP method and path, with values or with the template's
// placeholders. Over the tuning catalogs, every query's wanted tool named
// so ranks first (words alone had it first for 78–100% of names and 63–80%
// of method-and-path requests).
func TestSearchNamedCalls(t *testing.T) {
	forTuningCatalogs(t, func(t *testing.T, c *evalCatalog, s *Service) {
		call := map[string]string{}
		for k, v := range c.byOp {
			if strings.Contains(k, " /") {
				call[v] = k
			}
		}
		for _, q := range c.set.Queries {
			tool := c.byOp[q.Want[0]]
			local := strings.TrimPrefix(tool, c.name+":")
			for _, query := range []string{tool, local, call[tool], "What does `" + local + "` return?"} {
				out, err := s.Search(context.Background(), SearchInput{Queries: []string{query}, TopK: new(3)})
				if err != nil {
					t.Fatal(err)
				}
				if len(out.Tools) == 0 || out.Tools[0].Name != tool {
					t.Errorf("%q: first %v, want %s", query, out.Tools, tool)
				}
			}
		}
	})
}

// TestSearchQualityTypos: a request typed in a hurry. Over the tuning
// catalogs, every request with two letters of its longest word swapped
// ("list the lables") must keep MRR within 0.04 of the plain requests'
// (before search's typo reading it lost 0.15 to 0.4).
func TestSearchQualityTypos(t *testing.T) {
	swap := func(q string) string {
		words := strings.Fields(q)
		long := -1
		for i, w := range words {
			if len(w) >= 5 && strings.Trim(w, "abcdefghijklmnopqrstuvwxyz") == "" && (long < 0 || len(w) > len(words[long])) {
				long = i
			}
		}
		if long >= 0 {
			w := []byte(words[long])
			m := len(w) / 2
			w[m], w[m+1] = w[m+1], w[m]
			words[long] = string(w)
		}
		return strings.Join(words, " ")
	}
	forTuningCatalogs(t, func(t *testing.T, c *evalCatalog, s *Service) {
		var plain, typed float64
		for _, q := range c.set.Queries {
			plain += reciprocalRank(t, c, s, q.Q, q.Want)
			typed += reciprocalRank(t, c, s, swap(q.Q), q.Want)
		}
		n := float64(len(c.set.Queries))
		if typed/n < plain/n-0.04 {
			t.Errorf("%s with a typo: MRR %.3f, plain %.3f", c.name, typed/n, plain/n)
		}
	})
}

// reciprocalRank is 1/rank of the first of want among query's top 10 (0
// when none is there).
func reciprocalRank(t testing.TB, c *evalCatalog, s *Service, query string, want []string) float64 {
	t.Helper()
	out, err := s.Search(context.Background(), SearchInput{Queries: []string{query}, TopK: new(10)})
	if err != nil {
		t.Fatalf("search %q: %v", query, err)
	}
	for i, res := range out.Tools {
		for _, w := range want {
			if c.byOp[w] == res.Name {
				return 1 / float64(i+1)
			}
		}
	}
	return 0
}

// forTuningCatalogs runs f as a subtest over each tuning catalog with a
// service over its tools. Report catalogs are left out: their figures are
// read once per pass.
func forTuningCatalogs(t *testing.T, f func(t *testing.T, c *evalCatalog, s *Service)) {
	for _, name := range evalCatalogs {
		if evalRole(t, name) != "tune" {
			continue
		}
		c := loadEvalCatalog(t, name)
		t.Run(name, func(t *testing.T) { f(t, c, c.service(t, nil)) })
	}
}

// BenchmarkSearchGitHub is one meta:search query (topK 10) through
// Service.Search over the 1,223 tools of the GitHub catalog, cycling
// through its evaluation queries; it also reports the median latency of a
// separate timed pass over them.
func BenchmarkSearchGitHub(b *testing.B) {
	c := loadEvalCatalog(b, "github")
	s := c.service(b, nil)
	ctx := context.Background()
	lat := make([]time.Duration, 0, 20*len(c.set.Queries))
	for range 20 {
		for _, q := range c.set.Queries {
			start := time.Now()
			_, _ = s.Search(ctx, SearchInput{Queries: []string{q.Q}})
			lat = append(lat, time.Since(start))
		}
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		_, _ = s.Search(ctx, SearchInput{Queries: []string{c.set.Queries[i%len(c.set.Queries)].Q}})
		i++
	}
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "median-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}
