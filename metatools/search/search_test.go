package search

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
)

func TestTokenize(t *testing.T) {
	cases := map[string][]string{
		"listUserRepos":            {"list", "user", "repos"},
		"HTTPServer_config":        {"http", "server", "config"},
		"get-user/by_id":           {"get", "user", "by", "id"},
		"github:createIssue":       {"github", "create", "issue"},
		"v2beta":                   {"v", "2", "beta"},
		"GET_access_settings-ip":   {"get", "access", "settings", "ip"},
		"  Retrieve all Campaigns": {"retrieve", "all", "campaigns"},
		"which pod IPs back it":    {"which", "pod", "ips", "back", "it"},
		"listAPIsForUser":          {"list", "apis", "for", "user"},
		"HTTPSettings PRs":         {"http", "settings", "prs"},
	}
	for in, want := range cases {
		if got := Tokenize(in); !reflect.DeepEqual(got, want) {
			t.Errorf("Tokenize(%q) = %v, want %v", in, got, want)
		}
	}
}

// TestLemmas checks the lemmatizer on regular and irregular inflections
// and on the distinctions issue 13 names: "assignees" meets "assign" only
// through a related form, "followers" and "following" stay apart.
func TestLemmas(t *testing.T) {
	cases := map[string][]string{
		"issues": {"issue"}, "assignees": {"assignee"}, "assigned": {"assigned", "assign"}, "starred": {"starred", "star"},
		"stargazers": {"stargazer"}, "followers": {"followers", "follower"}, "following": {"following", "follow"},
		"closed": {"closed", "close"}, "created": {"create"}, "listing": {"listing", "list"},
		"lists": {"list"}, "repositories": {"repository"}, "branches": {"branch"}, "addresses": {"address"},
		"settings": {"setting"}, "webhooks": {"webhook"}, "gists": {"gist"}, "status": {"status"},
		"children": {"child"}, "ran": {"run"}, "data": {"data"}, "news": {"news"}, "API": {"API"},
		"by": {"by"}, "shipped": {"ship"}, "latest": {"latest"}, "deleted": {"delete"},
		// Jargon WordNet does not know keeps a stem its other forms share.
		"namespaced": {"namespaced", "namespac"}, "namespaces": {"namespace", "namespac"},
		"autoscaler": {"autoscaler", "autoscal"}, "autoscaling": {"autoscaling", "autoscal"},
	}
	for in, want := range cases {
		if got := Lemmas(in); !reflect.DeepEqual(got, want) {
			t.Errorf("Lemmas(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestLexiconRelated checks the generated WordNet table: derived forms are
// marked, and the table is big enough to be the real one.
func TestLexiconRelated(t *testing.T) {
	if n := len(lex().pos); n < 70000 {
		t.Fatalf("lexicon has %d lemmas, want the whole of WordNet's (~77,000)", n)
	}
	found := false
	for _, r := range relatedWords("approve") {
		if r.word == "approval" && r.derived {
			found = true
		}
	}
	if !found {
		t.Errorf("approve's relatives %v lack the derived form approval", relatedWords("approve"))
	}
}

// rankOf ranks query with r (k hits at most, no filter); an error fails
// the test.
func rankOf(t *testing.T, r Ranker, query string, k int) []Hit {
	t.Helper()
	hits, err := r.Rank(context.Background(), query, k, nil)
	if err != nil {
		t.Fatal(err)
	}
	return hits
}

// wantFirst ranks each request of want over docs and wants its tool first.
func wantFirst(t *testing.T, docs []Doc, want map[string]string) {
	t.Helper()
	ix := NewBM25(docs)
	for q, name := range want {
		if hits := rankOf(t, ix, q, 3); len(hits) == 0 || docs[hits[0].Doc].Name != name {
			t.Errorf("%q: first %v, want %s", q, hits, name)
		}
	}
}

func sampleDocs() []Doc {
	return []Doc{
		{Name: "crm:createContact", AppID: "crm", Description: "Create a new contact", Params: "name email"},
		{Name: "crm:listContacts", AppID: "crm", Description: "List all contacts"},
		{Name: "crm:deleteContact", AppID: "crm", Description: "Delete a contact by id", Params: "id"},
		{Name: "mail:send_message", AppID: "mail", Description: "Send an email message", Tags: []string{"email"}},
	}
}

func TestBM25Synonyms(t *testing.T) {
	ix := NewBM25(sampleDocs())
	cases := map[string]string{
		"add a person to the address book": "crm:createContact",
		"show me every contact":            "crm:listContacts",
		"remove contact":                   "crm:deleteContact",
		"email someone":                    "mail:send_message",
	}
	for q, want := range cases {
		hits, _ := ix.Rank(context.Background(), q, 1, nil)
		if len(hits) == 0 || sampleDocs()[hits[0].Doc].Name != want {
			t.Errorf("%q: got %v, want %s", q, hits, want)
		}
		for _, h := range hits {
			if h.Score <= 0 || h.Score > 1 {
				t.Errorf("%q: score %v outside (0,1]", q, h.Score)
			}
		}
	}
	hits, _ := ix.Rank(context.Background(), "contact", 10, func(i int) bool { return i != 1 })
	for _, h := range hits {
		if h.Doc == 1 {
			t.Error("filter ignored")
		}
	}
}

// TestBM25SecondPass covers the second pass's general rules on a small
// Kubernetes-like tool set: a list request prefers the list whose required
// parameter it names, a compound written as one word meets its parts, a
// later "every" does not make a scheduling request a listing.
func TestBM25SecondPass(t *testing.T) {
	docs := []Doc{
		{Name: "k8s_readCoreV1NamespacedPod", AppID: "k8s", Description: "read the specified Pod", RequiredNames: []string{"name", "namespace"}, Required: 2},
		{Name: "k8s_listCoreV1NamespacedPod", AppID: "k8s", Description: "list or watch objects of kind Pod", RequiredNames: []string{"namespace"}, Required: 1},
		{Name: "k8s_listCoreV1PodForAllNamespaces", AppID: "k8s", Description: "list or watch objects of kind Pod"},
		{Name: "k8s_patchCoreV1NamespacedConfigMap", AppID: "k8s", Description: "partially update the specified ConfigMap", Required: 3},
		{Name: "k8s_patchCoreV1NamespacedSecret", AppID: "k8s", Description: "partially update the specified Secret", Required: 3},
		{Name: "k8s_createBatchV1NamespacedCronJob", AppID: "k8s", Description: "create a CronJob", Required: 2},
		{Name: "k8s_listBatchV1CronJobForAllNamespaces", AppID: "k8s", Description: "list or watch objects of kind CronJob"},
	}
	docs = append(docs, Doc{Name: "t_ListQueue", AppID: "t", Description: "Retrieve a list of queues", Path: "/Accounts/{AccountSid}/Queues.json"})
	ix := NewBM25(docs)
	cases := map[string]string{
		"change a value in a configmap":   "k8s_patchCoreV1NamespacedConfigMap",
		"schedule a cron job every night": "k8s_createBatchV1NamespacedCronJob",
	}
	for q, want := range cases {
		hits, _ := ix.Rank(context.Background(), q, 3, nil)
		if len(hits) == 0 || docs[hits[0].Doc].Name != want {
			var got []string
			for _, h := range hits {
				got = append(got, docs[h.Doc].Name)
			}
			t.Errorf("%q: got %v, want %s first", q, got, want)
		}
	}
	rank := map[string]int{}
	hits, _ := ix.Rank(context.Background(), "list the pods in a namespace", 0, nil)
	for i, h := range hits {
		rank[docs[h.Doc].Name] = i + 1
	}
	if r, l := rank["k8s_readCoreV1NamespacedPod"], rank["k8s_listCoreV1NamespacedPod"]; l == 0 || r != 0 && r < l {
		t.Errorf("list the pods in a namespace: reading one pod ranks %d, listing a namespace's %d", r, l)
	}
	if in := QueryIntents("schedule a job to run every night"); in != nil {
		t.Errorf("a request opening with its own verb got the intent %v from a later quantifier", in)
	}
	for _, q := range []string{"give someone else ownership of a filter", "follow an issue to get notified about changes"} {
		if in := QueryIntents(q); in != nil {
			t.Errorf("%q opens with its own verb, got the intent %v from a later word", q, in)
		}
	}
	for q, want := range map[string]bool{"upvote an issue": true, "star a repo": true, "roles of a project": false, "upvotes of an issue": false} {
		if got := imperative(Tokenize(q)); got != want {
			t.Errorf("%q imperative %v, want %v", q, got, want)
		}
	}
	if in := QueryIntents("delete all pods in a namespace"); len(in) != 1 || in[0] != IntentDelete {
		t.Errorf("delete all pods: intents %v, want delete", in)
	}
	for q, want := range map[string]Intent{"take a tag off a task": IntentDelete, "roll out a flag to everyone": IntentUpdate, "roll back a deployment": IntentUpdate} {
		if in := QueryIntents(q); len(in) != 1 || in[0] != want {
			t.Errorf("%q: intents %v, want %s", q, in, want)
		}
	}
	if in := QueryIntents("all open issues"); len(in) != 1 || in[0] != IntentList {
		t.Errorf("a verbless request with all: intents %v, want list", in)
	}
	// Stopping an activity undoes it; stopping a thing is no such phrase.
	for q, want := range map[string]bool{"stop watching an issue": true, "quit following someone": true, "stop a saved card": false, "stop sending emails": true, "stop thing": false} {
		in := QueryIntents(q)
		if got := len(in) == 1 && in[0] == IntentDelete; got != want {
			t.Errorf("%q: intents %v, want delete %v", q, in, want)
		}
	}
}

// TestBM25TitleVerb: the verb that opens a tool's title is covered by the
// request's intent or its own verb (and the verb's relatives), not by the
// same word used as a modifier elsewhere in the request.
func TestBM25TitleVerb(t *testing.T) {
	docs := []Doc{
		{Name: "x_deleteProject", AppID: "x", Description: "Delete project"},
		{Name: "x_restore", AppID: "x", Description: "Restore deleted or archived project"},
		{Name: "x_updateProject", AppID: "x", Description: "Update project"},
		{Name: "x_DisableCard", AppID: "x", Description: "Disables a card. A disabled card cannot be charged."},
		{Name: "x_Charge", AppID: "x", Description: "Charges a card"},
	}
	docs = append(docs, Doc{Name: "t_ListQueue", AppID: "t", Description: "Retrieve a list of queues", Path: "/Accounts/{AccountSid}/Queues.json"})
	ix := NewBM25(docs)
	for _, c := range []struct {
		q, doc string
		full   bool
	}{
		{"restore a deleted project", "x_deleteProject", false},
		{"restore a deleted project", "x_restore", false},
		{"delete a project", "x_deleteProject", true},
		{"remove a project", "x_deleteProject", true},
		{"stop a saved card from being charged again", "x_DisableCard", true},
		{"a disabled card", "x_DisableCard", false},
	} {
		for i, d := range docs {
			if d.Name != c.doc {
				continue
			}
			f, why := ix.factor(i, ix.plan(c.q), true)
			if full := f == 1+titleCoverage; full != c.full {
				t.Errorf("%q, %s: title fully covered %v, want %v (%s)", c.q, c.doc, full, c.full, why)
			}
		}
	}
	// A request's verb that is one of a tool's states covers its verb:
	// "archive a repo" is the edit that sets archived, not "Get an archive".
	repos := []Doc{
		{Name: "g_repoGetArchive", AppID: "g", Description: "Get an archive of a repository"},
		{Name: "g_repoEdit", AppID: "g", Description: "Edit a repository's properties. Only fields that are set will be changed.", States: "archived private"},
	}
	rix := NewBM25(repos)
	fa, why := rix.factor(1, rix.plan("archive a repo"), true)
	if fs, _ := rix.factor(1, rix.plan("star a repo"), true); fa <= fs {
		t.Errorf("archive a repo: the edit that sets archived covers no more than for star a repo (%s)", why)
	}
	if f, _ := rix.factor(1, rix.plan("repository archive"), true); f >= fa {
		t.Errorf("repository archive (no verb): the edit's verb covered (%.2f)", f)
	}
	// A create that can set the state makes a new thing in it; the
	// request's verb is no title verb of it: "suspend a cron job" patches
	// one, it does not create a suspended one.
	jobs := []Doc{
		{Name: "k_createCronJob", AppID: "k", Description: "Create a cron job", States: "suspend"},
		{Name: "k_patchCronJob", AppID: "k", Description: "Patch a cron job", States: "suspend"},
	}
	jix := NewBM25(jobs)
	for i, want := range []bool{false, true} {
		f, why := jix.factor(i, jix.plan("suspend a cron job"), true)
		if full := f == 1+titleCoverage; full != want {
			t.Errorf("suspend a cron job, %s: title fully covered %v, want %v (%s)", jobs[i].Name, full, want, why)
		}
	}
	rank := map[string]int{}
	hits, _ := ix.Rank(context.Background(), "bring back a deleted project", 0, nil)
	for i, h := range hits {
		rank[docs[h.Doc].Name] = i + 1
	}
	if r, d := rank["x_restore"], rank["x_deleteProject"]; r == 0 || d != 0 && d < r {
		t.Errorf("bring back a deleted project: restore ranks %d, deleteProject %d", r, d)
	}
}

// TestBM25PluralQuestion: a question that names things in the plural asks
// for a list, and covers no get-one verb; a word WordNet does not know is
// a plural only when the tools have its singular.
func TestBM25PluralQuestion(t *testing.T) {
	docs := []Doc{
		{Name: "k8s_readCoreV1Namespace", AppID: "k8s", Description: "read the specified Namespace", RequiredNames: []string{"name"}, Required: 1},
		{Name: "k8s_listCoreV1Namespace", AppID: "k8s", Description: "list or watch objects of kind Namespace"},
		{Name: "k8s_getCodeVersion", AppID: "k8s", Description: "get the code version of the Kubernetes server"},
	}
	docs = append(docs, Doc{Name: "t_ListQueue", AppID: "t", Description: "Retrieve a list of queues", Path: "/Accounts/{AccountSid}/Queues.json"})
	ix := NewBM25(docs)
	hits, _ := ix.Rank(context.Background(), "which namespaces exist?", 2, nil)
	if len(hits) == 0 || docs[hits[0].Doc].Name != "k8s_listCoreV1Namespace" {
		t.Errorf("which namespaces exist?: got %v, want the list first", hits)
		for i := range docs {
			t.Log(docs[i].Name, ix.Explain("which namespaces exist?", i))
		}
	}
	if !ix.plural("namespaces") || ix.plural("kubernetes") || !ix.plural("versions") || ix.plural("status") {
		t.Errorf("plural: namespaces %v, kubernetes %v, versions %v, status %v; want true, false, true, false",
			ix.plural("namespaces"), ix.plural("kubernetes"), ix.plural("versions"), ix.plural("status"))
	}
}

// embeddingServer is an OpenAI-compatible embeddings endpoint whose vectors
// are bags of the letters a..z: enough to make similar texts close.
func embeddingServer(t *testing.T, calls *atomic.Int64) *httptest.Server {
	t.Helper()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/embeddings" || r.Header.Get("Authorization") != "Bearer k" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		calls.Add(1)
		var req struct {
			Model string
			Input []string
		}
		json.NewDecoder(r.Body).Decode(&req)
		type item struct {
			Index     int       `json:"index"`
			Embedding []float32 `json:"embedding"`
		}
		var data []item
		for i, in := range req.Input {
			v := make([]float32, 26)
			for _, w := range Terms(in) {
				v[int(w[0]-'a')%26] += 1
			}
			data = append(data, item{Index: i, Embedding: v})
		}
		json.NewEncoder(w).Encode(map[string]any{"data": data, "model": req.Model})
	}))
	t.Cleanup(hs.Close)
	return hs
}

func TestEmbeddingsRankAndCache(t *testing.T) {
	var calls atomic.Int64
	hs := embeddingServer(t, &calls)
	client := &EmbeddingClient{URL: hs.URL + "/v1", Model: "m", APIKey: "k"}
	cache := NewVectorCache()
	e := NewEmbeddings(sampleDocs(), client, cache)
	hits := rankOf(t, e, "send email message", 2)
	if len(hits) == 0 || hits[0].Doc != 3 || hits[0].Score > 1 {
		t.Fatalf("hits = %v", hits)
	}
	if calls.Load() != 2 || cache.Len() != 5 {
		t.Fatalf("calls %d, cached %d", calls.Load(), cache.Len())
	}
	// A rebuilt index over the same docs reuses the cached vectors.
	e2 := NewEmbeddings(sampleDocs(), client, cache)
	if _, err := e2.Rank(context.Background(), "send email message", 2, nil); err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 2 {
		t.Errorf("cached vectors fetched again: %d calls", calls.Load())
	}
}

func TestEmbeddingsUnreachable(t *testing.T) {
	hs := httptest.NewServer(http.NotFoundHandler())
	url := hs.URL
	hs.Close()
	e := NewEmbeddings(sampleDocs(), &EmbeddingClient{URL: url, Model: "m"}, nil)
	_, err := e.Rank(context.Background(), "x", 1, nil)
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), url) {
		t.Fatalf("err = %v", err)
	}
	var calls atomic.Int64
	bad := embeddingServer(t, &calls)
	e = NewEmbeddings(sampleDocs(), &EmbeddingClient{URL: bad.URL + "/v1/embeddings", Model: "m", APIKey: "wrong"}, nil)
	if _, err := e.Rank(context.Background(), "x", 1, nil); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "400") {
		t.Fatalf("err = %v", err)
	}
}

func benchDocs(n int) []Doc {
	verbs := []string{"create", "list", "get", "update", "delete", "search"}
	nouns := []string{"user", "repo", "issue", "comment", "invoice", "order", "contact", "campaign", "alert", "template",
		"segment", "webhook", "domain", "key", "team", "project", "file", "folder", "event", "report"}
	docs := make([]Doc, n)
	for i := range docs {
		v, o := verbs[i%len(verbs)], nouns[(i/len(verbs))%len(nouns)]
		app := fmt.Sprintf("app%d", i/120)
		docs[i] = Doc{Name: fmt.Sprintf("%s:%s%s%d", app, v, strings.ToUpper(o[:1])+o[1:], i), AppID: app,
			Description: fmt.Sprintf("%s a %s of the %s service. Returns the %s with its id, name and timestamps.", v, o, app, o),
			Params:      fmt.Sprintf("%sId the %s identifier limit page size", o, o), Tags: []string{o}}
	}
	return docs
}

func BenchmarkBM25Build1000(b *testing.B) {
	docs := benchDocs(1000)
	b.ReportAllocs()
	for b.Loop() {
		NewBM25(docs)
	}
}

func BenchmarkBM25Search1200(b *testing.B) {
	ix := NewBM25(benchDocs(1200))
	queries := []string{"create a new invoice", "list all open issues in a repo", "delete webhook", "find contacts by email", "update the campaign template"}
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		ix.Rank(ctx, queries[i%len(queries)], 10, nil)
		i++
	}
}

// fixedRanker answers every query with the same documents in order.
type fixedRanker struct {
	docs []int
	err  error
}

func (f fixedRanker) Rank(_ context.Context, _ string, k int, _ func(int) bool) ([]Hit, error) {
	if f.err != nil {
		return nil, f.err
	}
	var hits []Hit
	for i, d := range f.docs {
		hits = append(hits, Hit{Doc: d, Score: 1 / float64(i+1)})
	}
	if k > 0 && len(hits) > k {
		hits = hits[:k]
	}
	return hits, nil
}

// TestHybridFusion: reciprocal rank fusion puts first what both rankings
// rank well, scores 1 for first-in-both, and falls back to the lexical
// ranking when the semantic one fails.
func TestHybridFusion(t *testing.T) {
	h := NewHybrid(fixedRanker{docs: []int{1, 2, 3}}, fixedRanker{docs: []int{2, 4, 1}}, nil)
	hits := rankOf(t, h, "q", 10)
	var order []int
	for _, x := range hits {
		order = append(order, x.Doc)
	}
	// 2: 1/62+1/61, 1: 1/61+1/63, 4: 1/62, 3: 1/63.
	if fmt.Sprint(order) != "[2 1 4 3]" {
		t.Fatalf("order %v", order)
	}
	same := NewHybrid(fixedRanker{docs: []int{7}}, fixedRanker{docs: []int{7}}, nil)
	if hits, _ := same.Rank(context.Background(), "q", 1, nil); hits[0].Score != 1 {
		t.Fatalf("first in both scores %v", hits[0].Score)
	}
	var reported error
	down := NewHybrid(fixedRanker{docs: []int{1, 2}}, fixedRanker{err: ErrUnavailable}, func(err error) { reported = err })
	hits, err := down.Rank(context.Background(), "q", 1, nil)
	if err != nil || len(hits) != 1 || hits[0].Doc != 1 || !errors.Is(reported, ErrUnavailable) {
		t.Fatalf("fallback: %v %v reported %v", hits, err, reported)
	}
}

// TestSaysDeprecated: a description that deprecates its operation in words
// demotes it like the OpenAPI flag; one that mentions deprecated fields
// does not.
func TestSaysDeprecated(t *testing.T) {
	for _, c := range []struct {
		local, desc string
		want        bool
	}{
		{"watchCoreV1PodList", "watch individual changes to a list of Pod. deprecated: use the 'watch' parameter with a list operation instead.", true},
		{"DeprecatedBatchChangeInventory", "Deprecated version of BatchChangeInventory", true},
		{"RenewToken", "RenewToken. `RenewToken` is deprecated. For information about refreshing OAuth access tokens, see …", true},
		{"getGroup", "Get group. This operation is deprecated, use group/member.", true},
		{"deleteLocale", "Deprecated, use Update a user profile", true},
		{"getPreference", "Returns the value of a preference of the current user. Note that these keys are deprecated: jira.user.locale", false},
		{"updateUser", "Updates a user. Deprecated fields are ignored.", false},
		{"listPods", "list or watch objects of kind Pod", false},
	} {
		summary, body := SplitSummary(c.desc)
		if got := saysDeprecated(c.local, summary, sentences(body)); got != c.want {
			t.Errorf("%s %q: deprecated %v, want %v", c.local, c.desc, got, c.want)
		}
	}
}

// TestNameHead: what a tool's name acts on is the last word after its verb,
// up to a preposition, without identifiers and version markers.
func TestNameHead(t *testing.T) {
	for name, want := range map[string]string{
		"removeUserFromGroup":                        "user",
		"repoCreateReleaseAttachment":                "attachment",
		"createAppsV1NamespacedDeployment":           "deployment",
		"listCertificatesV1alpha1ClusterTrustBundle": "bundle",
		"conversations.list":                         "conversation",
		"get_files_id":                               "file",
		"POST_campaigns_campaign_id_schedules":       "schedule",
		"GetCustomersCustomerSources":                "source",
		"assignIssue":                                "issue",
		"getIssueWatchersOfProject":                  "watcher",
		"delete":                                     "",
	} {
		if got := nameHead(name); got != want {
			t.Errorf("nameHead(%q) = %q, want %q", name, got, want)
		}
	}
}

// TestBM25HeadInModifier: a tool whose name's head noun only the request's
// modifier names ranks below the one its object names: "remove a member
// from a group" removes a user, not the group; "of" names the tool's own
// resource ("the image of a deployment").
func TestBM25HeadInModifier(t *testing.T) {
	docs := []Doc{
		{Name: "x_removeGroup", AppID: "x", Description: "Remove group. Deletes a group."},
		{Name: "x_removeUserFromGroup", AppID: "x", Description: "Remove user from group. Removes a user from a group."},
		{Name: "x_createIssue", AppID: "x", Description: "Create issue"},
		{Name: "x_createProject", AppID: "x", Description: "Create project"},
		{Name: "x_patchDeployment", AppID: "x", Description: "partially update the specified Deployment"},
		{Name: "x_listReplicaSet", AppID: "x", Description: "list or watch objects of kind ReplicaSet"},
		{Name: "x_getUsersFromGroup", AppID: "x", Description: "Get users from group"},
		{Name: "x_getUserGroups", AppID: "x", Description: "Get user groups. Returns the groups a user belongs to."},
	}
	docs = append(docs, Doc{Name: "t_ListQueue", AppID: "t", Description: "Retrieve a list of queues", Path: "/Accounts/{AccountSid}/Queues.json"})
	ix := NewBM25(docs)
	hits, _ := ix.Rank(context.Background(), "remove a member from a group", 2, nil)
	if len(hits) == 0 || docs[hits[0].Doc].Name != "x_removeUserFromGroup" {
		t.Errorf("remove a member from a group: %v, want x_removeUserFromGroup first", hits)
	}
	for _, c := range []struct {
		q, doc  string
		demoted bool
	}{
		{"open a new ticket in a project", "x_createProject", true},
		{"open a new ticket in a project", "x_createIssue", false},
		{"create a project", "x_createProject", false},
		{"change the container image of a deployment", "x_patchDeployment", false},
		// "of" after a word some tool acts on (a ReplicaSet's head).
		{"replica sets of a deployment", "x_patchDeployment", true},
		{"replica sets of a deployment", "x_listReplicaSet", false},
		// "what X …" asks for X.
		{"what groups is a user in", "x_getUsersFromGroup", true},
		{"what groups is a user in", "x_getUserGroups", false},
	} {
		for i, d := range docs {
			if d.Name == c.doc {
				_, why := ix.factor(i, ix.plan(c.q), true)
				if got := strings.Contains(why, "head-in-modifier"); got != c.demoted {
					t.Errorf("%q, %s: demoted %v, want %v (%s)", c.q, c.doc, got, c.demoted, why)
				}
			}
		}
	}
}

// TestBM25ActionWriteVerb: an imperative of a verb no intent names ("attach
// a file") asks to change something, so a writing tool's verb is partly
// covered by it, a reading tool's not: "Add attachment" ranks above "Get
// attachment content".
func TestBM25ActionWriteVerb(t *testing.T) {
	docs := []Doc{
		{Name: "x_getAttachmentContent", AppID: "x", Description: "Get attachment content. Returns the contents of an attachment."},
		{Name: "x_addAttachment", AppID: "x", Description: "Add attachment. Adds one or more files to an issue as attachments."},
		{Name: "x_getIssue", AppID: "x", Description: "Get issue"},
		{Name: "x_editIssue", AppID: "x", Description: "Edit issue"},
		{Name: "x_getProject", AppID: "x", Description: "Get project"},
		{Name: "x_deleteComment", AppID: "x", Description: "Delete comment"},
	}
	docs = append(docs, Doc{Name: "t_ListQueue", AppID: "t", Description: "Retrieve a list of queues", Path: "/Accounts/{AccountSid}/Queues.json"})
	ix := NewBM25(docs)
	// "Add attachment": attachment is covered by attach's derived form,
	// Add partly by the imperative; "Get attachment content": no part of
	// Get.
	qa := ix.plan("attach a file to an issue")
	if f, why := ix.factor(1, qa, true); f <= 1+titleCoverage/4 {
		t.Errorf("attach a file: Add attachment covered no more than half (%s)", why)
	}
	if f, why := ix.factor(0, qa, true); f != (1+titleCoverage*4/9)*actionReadFactor {
		t.Errorf("attach a file: Get attachment content factor %v, want 2 of 3 words and the read demotion (%s)", f, why)
	}
	// A request with an intent verb is no such imperative: "get the
	// attachment" covers the reading verb, not the writing one.
	qp := ix.plan("get the attachment")
	if f0, _ := ix.factor(0, qp, false); f0 != 1+titleCoverage*4/9 {
		t.Errorf("get the attachment: Get attachment content covered %v, want 2 of 3 words", f0)
	}
	if f1, _ := ix.factor(1, qp, false); f1 != (1+titleCoverage/4)*intentMismatch {
		t.Errorf("get the attachment: Add attachment factor %v, want half covered and a mismatch", f1)
	}
}

// TestBM25MethodYieldsInTitle: an HTTP method naming a tool yields its
// title slot to the summary's verb when that says another intent, so
// "update a customer" covers all of PostCustomersCustomer ("Updates the
// specified customer"); a method that agrees with the summary stays.
func TestBM25MethodYieldsInTitle(t *testing.T) {
	for _, c := range []struct {
		local, summary, method string
	}{
		{"PostCustomersCustomer", "Updates the specified customer", "post"},
		{"POST_campaigns_campaign_id", "Update a campaign", "post"},
		{"PostCustomers", "Creates a new customer", ""},
		{"GetCustomers", "Returns a list of customers", ""},
		{"post_files_id_copy", "Copy file", ""},
		{"createCustomer", "Updates a customer", ""},
	} {
		if m := methodYields(c.local, c.summary); m != c.method {
			t.Errorf("methodYields(%q, %q) = %q, want %q", c.local, c.summary, m, c.method)
		}
	}
	docs := []Doc{
		{Name: "s_PostCustomersCustomer", AppID: "s", Description: "Updates the specified customer"},
		{Name: "s_PostCustomers", AppID: "s", Description: "Creates a new customer"},
	}
	docs = append(docs, Doc{Name: "t_ListQueue", AppID: "t", Description: "Retrieve a list of queues", Path: "/Accounts/{AccountSid}/Queues.json"})
	ix := NewBM25(docs)
	if f, why := ix.factor(0, ix.plan("update the specified customer"), true); f != 1+titleCoverage {
		t.Errorf("update the specified customer: PostCustomersCustomer's title not fully covered (%s)", why)
	}
	if title := ix.titles[1]; len(title) == 0 || title[0][0] != titleIntent(IntentCreate) {
		t.Errorf("PostCustomers lost its verb: %v", title)
	}
}

// TestBM25ObjectUnmatched: a tool that matches the words of a request's
// modifier but not its object scores less ("list the nodes in the
// cluster" is not a list of ClusterRoles); a request without a modifier
// has no such demotion.
func TestBM25ObjectUnmatched(t *testing.T) {
	docs := []Doc{
		{Name: "k_listClusterRole", AppID: "k", Description: "list or watch objects of kind ClusterRole"},
		{Name: "k_listNode", AppID: "k", Description: "list or watch objects of kind Node"},
		{Name: "k_listClusterCIDR", AppID: "k", Description: "list or watch objects of kind ClusterCIDR"},
		{Name: "k_readNode", AppID: "k", Description: "read the specified Node"},
		{Name: "k_listPod", AppID: "k", Description: "list or watch objects of kind Pod. Lists the pods of a node in the cluster."},
	}
	docs = append(docs, Doc{Name: "t_ListQueue", AppID: "t", Description: "Retrieve a list of queues", Path: "/Accounts/{AccountSid}/Queues.json"})
	ix := NewBM25(docs)
	qp := ix.plan("list the nodes in the cluster")
	if f, why := ix.factor(0, qp, true); !strings.Contains(why, "object-unmatched") {
		t.Errorf("list the nodes in the cluster: ClusterRole not demoted (%.2f %s)", f, why)
	}
	for _, d := range []int{1, 4} {
		if _, why := ix.factor(d, qp, true); strings.Contains(why, "object-unmatched") {
			t.Errorf("list the nodes in the cluster: %s demoted (%s)", docs[d].Name, why)
		}
	}
	hits, _ := ix.Rank(context.Background(), "list the nodes in the cluster", 0, nil)
	if len(hits) == 0 || docs[hits[0].Doc].Name != "k_listNode" {
		t.Errorf("list the nodes in the cluster: first %v", hits)
	}
	if _, why := ix.factor(0, ix.plan("list cluster roles"), true); strings.Contains(why, "object-unmatched") {
		t.Errorf("list cluster roles (no modifier): ClusterRole demoted (%s)", why)
	}
}

// TestQueryLanguage: the fourth pass's readings of everyday English. "I"
// in a relative clause after a noun is the caller ("repos I starred"), not
// after a question word or an auxiliary; "me" right after an opening verb
// is whom the answer is for ("show me the pods"); "bring back" restores, "work out"
// calculates; "every" and "all" meet; a cap is a limit.
func TestQueryLanguage(t *testing.T) {
	ix := NewBM25([]Doc{
		{Name: "x_restoreProject", AppID: "x", Description: "Restore a deleted project"},
		{Name: "x_calculateOrder", AppID: "x", Description: "Calculate an order's total"},
		{Name: "x_clearLabels", AppID: "x", Description: "Remove all labels from an issue"},
		{Name: "x_setLimit", AppID: "x", Description: "Set the limit of a namespace"},
		{Name: "x_listMyStarred", AppID: "x", Description: "List the repos the authenticated user has starred"},
	})
	has := func(q, term string) bool { return queryWeight(ix, q, term) > 0 }
	for _, c := range []struct {
		q, term string
		want    bool
	}{
		{"repos I starred", "authenticated", true},
		{"the issues I created", "authenticated", true},
		{"which fields do I need", "authenticated", false},
		{"what can I do", "authenticated", false},
		{"I want to star a repo", "authenticated", false},
		{"show me every pod", "authenticated", false},
		{"give me my repos", "authenticated", true},
		{"assign the issue to me", "authenticated", true},
		{"bring back a deleted project", "restore", true},
		{"work out an order's total", "calculate", true},
		{"remove every label from an issue", "all", true},
		{"cap the memory of a namespace", "limit", true},
	} {
		if got := has(c.q, c.term); got != c.want {
			t.Errorf("%q has term %q: %v, want %v", c.q, c.term, got, c.want)
		}
	}
}

// TestBM25ActionNamesCreated: an imperative whose verb (or a relative of
// it) names what a tool creates covers that tool's create verb in full:
// "book an appointment" creates a booking, "follow an issue" adds a
// watcher; the update of the same thing gets only the imperative's partial
// cover.
func TestBM25ActionNamesCreated(t *testing.T) {
	docs := []Doc{
		{Name: "x_UpdateBooking", AppID: "x", Description: "Updates a booking"},
		{Name: "x_CreateBooking", AppID: "x", Description: "Creates a booking"},
		{Name: "x_addWatcher", AppID: "x", Description: "Add watcher"},
		{Name: "x_getWatchers", AppID: "x", Description: "Get issue watchers"},
	}
	docs = append(docs, Doc{Name: "t_ListQueue", AppID: "t", Description: "Retrieve a list of queues", Path: "/Accounts/{AccountSid}/Queues.json"})
	ix := NewBM25(docs)
	qp := ix.plan("book an appointment for a customer")
	fc, why := ix.factor(1, qp, true)
	if fc != 1+titleCoverage {
		t.Errorf("book an appointment: CreateBooking title not fully covered (%s)", why)
	}
	if fu, why := ix.factor(0, qp, true); fu >= fc {
		t.Errorf("book an appointment: UpdateBooking %.2f >= CreateBooking %.2f (%s)", fu, fc, why)
	}
	if f, why := ix.factor(2, ix.plan("follow an issue"), true); f != 1+titleCoverage {
		t.Errorf("follow an issue: Add watcher not fully covered (%s)", why)
	}
}

// TestFifthPassWords: "put X in/into/on/onto Y" adds X to Y (where "put"
// alone updates); a name word WordNet does not know is also indexed as its
// two halves when the catalog uses them as words ("Worklog": work, log),
// and never as halves the catalog does not use ("config": con, fig).
func TestFifthPassWords(t *testing.T) {
	for q, want := range map[string]Intent{
		"put a customer into a group":  IntentCreate,
		"put a gadget on a dashboard":  IntentCreate,
		"put the file in a folder":     IntentCreate,
		"put the new price on the tag": IntentCreate,
		"put a label":                  IntentUpdate,
	} {
		if in := QueryIntents(q); len(in) != 1 || in[0] != want {
			t.Errorf("QueryIntents(%q) = %v, want %s", q, in, want)
		}
	}
	vocab := map[string]bool{"work": true, "log": true, "web": true, "hook": true, "time": true, "sheet": true, "state": true}
	for w, want := range map[string]string{
		"worklog": "work+log", "webhooks": "web+hook", "timesheet": "time+sheet",
		"config": "", "stateful": "", "upsert": "", "against": "", "work": "", "worklo": "",
	} {
		a, b, ok := splitCompound(w, vocab)
		if got := a + "+" + b; ok != (want != "") || ok && got != want {
			t.Errorf("splitCompound(%q) = %q, %v; want %q", w, got, ok, want)
		}
	}
	docs := []Doc{
		{Name: "j_addWorklog", AppID: "j", Description: "Add worklog. Adds a worklog to an issue."},
		{Name: "j_addComment", AppID: "j", Description: "Add comment. Adds a comment to an issue; work done can be noted in its body."},
		{Name: "j_getAuditRecords", AppID: "j", Description: "Get audit records. Returns the log of changes."},
	}
	hits, _ := NewBM25(docs).Rank(context.Background(), "log two hours of work on a ticket", 0, nil)
	if len(hits) == 0 || docs[hits[0].Doc].Name != "j_addWorklog" {
		t.Errorf("log two hours of work on a ticket: first %v, want addWorklog", hits)
	}
}

// TestBM25DeclaredAccess: a tool whose name and summary have no intent
// word ("assignIssue", "validateProjectKey") reads or writes as it
// declares: a question demotes a declared writer, an imperative a declared
// reader, a request without a verb a writer a little; an undeclared tool
// keeps its score.
func TestBM25DeclaredAccess(t *testing.T) {
	docs := []Doc{
		{Name: "j_assignIssue", AppID: "j", Description: "Assign issue", Access: AccessWrite},
		{Name: "j_validateProjectKey", AppID: "j", Description: "Validate project key", Access: AccessRead},
		{Name: "j_assignProject", AppID: "j", Description: "Assign project"},
	}
	docs = append(docs, Doc{Name: "t_ListQueue", AppID: "t", Description: "Retrieve a list of queues", Path: "/Accounts/{AccountSid}/Queues.json"})
	ix := NewBM25(docs)
	for _, c := range []struct {
		q    string
		doc  int
		want string
	}{
		{"which users can be assigned to an issue", 0, "intent-mismatch"},
		{"assign the issue to someone", 0, ""},
		{"issue assignment", 0, "implicit-read"},
		{"validate a project key", 1, ""},
		{"is this project key valid", 1, ""},
		{"assign the project key to someone", 1, "action-read"},
		{"which users can be assigned to a project", 2, ""},
	} {
		_, why := ix.factor(c.doc, ix.plan(c.q), true)
		got := ""
		for _, w := range []string{"intent-mismatch", "implicit-read", "action-read"} {
			if strings.Contains(why, w) {
				got = w
			}
		}
		if got != c.want {
			t.Errorf("%q on %s: %q (%s), want %q", c.q, docs[c.doc].Name, got, why, c.want)
		}
	}
}

// TestQueryBackoff: an -ing form right after a noun describes the noun
// ("pods running": no exec), after "is" it is the act ("who is watching":
// watcher); the relatives of a word no tool has weigh no more than the
// rarest word of the request that tools have ("commit history": activity
// stays under commit).
func TestQueryBackoff(t *testing.T) {
	ix := NewBM25([]Doc{
		{Name: "k_connectPodExec", AppID: "k", Description: "connect GET requests to exec of Pod"},
		{Name: "k_listPod", AppID: "k", Description: "list or watch objects of kind Pod"},
		{Name: "j_getIssueWatchers", AppID: "j", Description: "Get issue watchers"},
		{Name: "g_repoListActivityFeeds", AppID: "g", Description: "List a repository's activity feeds"},
		{Name: "g_repoGetAllCommits", AppID: "g", Description: "Get a list of all commits from a repository"},
		{Name: "g_repoGetSingleCommit", AppID: "g", Description: "Get a single commit from a repository"},
		{Name: "g_repoListBranches", AppID: "g", Description: "List a repository's branches"},
	})
	weight := func(q, term string) float64 { return queryWeight(ix, q, term) }
	if w := weight("show me every pod running in the cluster", "exec"); w != 0 {
		t.Errorf("pods running: exec at %.2f", w)
	}
	if w := weight("run a command in a pod", "exec"); w == 0 {
		t.Error("run a command: no exec")
	}
	if w := weight("who is watching this issue", "watcher"); w == 0 {
		t.Error("who is watching: no watcher")
	}
	if wa, wc := weight("commit history of a repository", "activity")*ix.idf["activity"], weight("commit history of a repository", "commit")*ix.idf["commit"]; wa > wc {
		t.Errorf("commit history: activity %.2f outweighs commit %.2f", wa, wc)
	}
}

// queryWeight is the weight of term in the query's first group that has it
// (0 when none has).
func queryWeight(ix *BM25, q, term string) float64 {
	for _, g := range ix.queryGroups(q) {
		for _, wt := range g.terms {
			if wt.term == term {
				return wt.w
			}
		}
	}
	return 0
}

// TestBM25Path: an operation's path adds the words its name leaves out
// (parameters, versions and file extensions are no words), and a path-only
// word's document frequency does not make the names' words common.
func TestBM25Path(t *testing.T) {
	for path, want := range map[string]string{
		"/2010-04-01/Accounts/{AccountSid}/Queues/{QueueSid}/Members.json": "Accounts Queues Members ",
		"/apis/apps/v1/namespaces/{namespace}/replicasets":                 "apis apps namespaces replicasets ",
		"/v2beta1/users/{id}": "users ",
		"/":                   "",
	} {
		if got := pathWords(path); got != want {
			t.Errorf("pathWords(%q) = %q, want %q", path, got, want)
		}
	}
	if got := pathTerms("/queues/{sid}/members", "t_ListMember"); !reflect.DeepEqual(got, []string{"queue"}) {
		t.Errorf("pathTerms = %v, want [queue]", got)
	}
	// Opaque operation ids: only the path says which members are meant.
	docs := []Doc{
		{Name: "t_op17", AppID: "t", Description: "Retrieve a list of members", Path: "/Accounts/{AccountSid}/Conferences/{ConferenceSid}/Participants.json"},
		{Name: "t_op18", AppID: "t", Description: "Retrieve a list of members", Path: "/Accounts/{AccountSid}/Queues/{QueueSid}/Members.json"},
	}
	hits, _ := NewBM25(docs).Rank(context.Background(), "list the members of a queue", 0, nil)
	if len(hits) == 0 || docs[hits[0].Doc].Name != "t_op18" {
		t.Errorf("members of a queue: first %v, want op18 (/Queues/{QueueSid}/Members)", hits)
	}
	// "queue" is in one name and in two tools' paths: its idf stays that of
	// one tool in three.
	docs = append(docs, Doc{Name: "t_ListQueue", AppID: "t", Description: "Retrieve a list of queues", Path: "/Accounts/{AccountSid}/Queues.json"})
	ix := NewBM25(docs)
	if got, want := ix.idf["queue"], math.Log(1+(3-1+0.5)/(1+0.5)); math.Abs(got-want) > 1e-9 {
		t.Errorf("idf(queue) = %v, want %v", got, want)
	}
	// A segment repeated in one path ("/queues/{sid}/queues/{sub}") is still
	// one tool whose path alone has the word (counted twice, the name's tool
	// was discounted too; with more repeats the frequency went negative).
	docs[0].Path = "/Accounts/{AccountSid}/Queues/{QueueSid}/Queues/{Sub}.json"
	ix = NewBM25(docs)
	if got, want := ix.idf["queue"], math.Log(1+(3-1+0.5)/(1+0.5)); math.Abs(got-want) > 1e-9 {
		t.Errorf("idf(queue) with a repeated path segment = %v, want %v", got, want)
	}
}

// TestBM25AddPart: adding or removing what no tool acts on but what the
// edit of the modifier's thing has as a field edits that thing ("add a
// label to a node"); adding what a tool creates keeps its create ("add a
// webhook to a repository": the repository's edit has no webhook field).
func TestBM25AddPart(t *testing.T) {
	docs := []Doc{
		{Name: "k_createNode", AppID: "k", Description: "create a Node", FieldNames: "metadata name labels annotations spec taints"},
		{Name: "k_replaceNode", AppID: "k", Description: "replace the specified Node", FieldNames: "metadata name labels annotations spec taints"},
		{Name: "k_deleteNode", AppID: "k", Description: "delete a Node"},
		{Name: "g_repoCreateHook", AppID: "g", Description: "Create a hook", FieldNames: "type config events active"},
		{Name: "g_repoEdit", AppID: "g", Description: "Edit a repository's properties", FieldNames: "name description private archived"},
		{Name: "g_createRepo", AppID: "g", Description: "Create a repository", FieldNames: "name description private"},
	}
	ix := NewBM25(docs)
	for q, want := range map[string]string{
		"add a label to a node":         "k_replaceNode",
		"remove a label from a node":    "k_replaceNode",
		"add a webhook to a repository": "g_repoCreateHook",
	} {
		hits, _ := ix.Rank(context.Background(), q, 0, nil)
		if len(hits) == 0 || docs[hits[0].Doc].Name != want {
			var got []string
			for _, h := range hits {
				got = append(got, docs[h.Doc].Name)
			}
			t.Errorf("%q: ranked %v, want %s first", q, got, want)
		}
	}
}

// TestBM25GenericHead: a tool whose head noun stands for whatever its
// container holds (`addItemForPortfolio`) is not held to the request's
// object ("add a project to a portfolio"); one with a specific head is.
func TestBM25GenericHead(t *testing.T) {
	docs := []Doc{
		{Name: "a_addItemForPortfolio", AppID: "a", Description: "Add a portfolio item"},
		{Name: "a_addMembersForPortfolio", AppID: "a", Description: "Add users to a portfolio"},
		{Name: "a_createProject", AppID: "a", Description: "Create a project"},
	}
	ix := NewBM25(docs)
	const q = "add a project to the portfolio"
	if e := ix.Explain(q, 0); strings.Contains(e, "object-unmatched") {
		t.Errorf("%q: the generic item is held to the object: %s", q, e)
	}
	if e := ix.Explain(q, 1); !strings.Contains(e, "object-unmatched") {
		t.Errorf("%q: the members are not held to the object: %s", q, e)
	}
}

// TestBM25ListOwnID: a list request that names the listed things does not
// name the identifier of one of them ("list goals" gives no goal_gid), so
// the get-one tool is the one that needs an unnamed identifier; an
// identifier of another thing ("tasks of a goal") is named.
func TestBM25ListOwnID(t *testing.T) {
	docs := []Doc{
		{Name: "a_getGoal", AppID: "a", Description: "Get a goal", Required: 1, RequiredNames: []string{"goal_gid"}},
		{Name: "a_getGoals", AppID: "a", Description: "Get goals"},
		{Name: "a_getTasksForGoal", AppID: "a", Description: "Get tasks of a goal", Required: 1, RequiredNames: []string{"goal_gid"}},
	}
	ix := NewBM25(docs)
	for q, want := range map[string]string{"list goals": "a_getGoals", "list the tasks of a goal": "a_getTasksForGoal"} {
		if hits, _ := ix.Rank(context.Background(), q, 0, nil); len(hits) == 0 || docs[hits[0].Doc].Name != want {
			t.Errorf("%q: ranked %v, want %s first", q, hits, want)
		}
	}
	if e := ix.Explain("list goals", 0); !strings.Contains(e, "list-needs-id") {
		t.Errorf("list goals: getGoal needs no unnamed id: %s", e)
	}
	if e := ix.Explain("list the tasks of a goal", 2); strings.Contains(e, "list-needs-id") {
		t.Errorf("list the tasks of a goal: the goal's id is unnamed: %s", e)
	}
}

// TestBM25PluralHead: a list request prefers, among tools otherwise alike,
// the one whose name writes its head in the plural; a get request does not.
func TestBM25PluralHead(t *testing.T) {
	docs := []Doc{
		{Name: "a_getGoal", AppID: "a", Description: "Get goal"},
		{Name: "a_getGoals", AppID: "a", Description: "Get goal"},
	}
	ix := NewBM25(docs)
	if hits, _ := ix.Rank(context.Background(), "list the goals", 0, nil); len(hits) != 2 || hits[0].Doc != 1 || hits[0].Score <= hits[1].Score {
		t.Errorf("list: ranked %v, want the plural first", hits)
	}
	if hits, _ := ix.Rank(context.Background(), "get the goal", 0, nil); len(hits) != 2 || hits[0].Score != hits[1].Score {
		t.Errorf("get: ranked %v, want a tie", hits)
	}
	if e := ix.Explain("get the goal", 1); strings.Contains(e, "plural-head") {
		t.Errorf("get: the plural is preferred: %s", e)
	}
}

// TestBM25VerbPreposition: a preposition right after the opening verb is
// the verb's own ("subscribe to changes", "search for tasks"), it opens no
// modifier; the next one does.
func TestBM25VerbPreposition(t *testing.T) {
	ix := NewBM25([]Doc{
		{Name: "asana_createWebhook", AppID: "asana", Description: "Establish a webhook for changes"},
		{Name: "asana_getProject", AppID: "asana", Description: "Get a project"},
	})
	for q, want := range map[string][2]string{
		"subscribe to changes on a project": {"change", "project"},
		"reply to a comment on an issue":    {"comment", "issue"},
	} {
		p := ix.plan(q)
		if !p.mainWords[want[0]] || p.prep[want[0]] || !p.prep[want[1]] {
			t.Errorf("%q: object %v, modifier %v; want %s in the object, %s in the modifier", q, p.mainWords, p.prep, want[0], want[1])
		}
	}
}

// TestBM25HowMany: "how many" asks for a count, not for many things at once.
func TestBM25HowMany(t *testing.T) {
	ix := NewBM25([]Doc{
		{Name: "a_getTaskCountsForProject", AppID: "a", Description: "Get task count of a project"},
		{Name: "a_getTasksForProject", AppID: "a", Description: "Get tasks from a project"},
		{Name: "a_createBatchRequest", AppID: "a", Description: "Submit parallel requests in bulk"},
	})
	terms := map[string]bool{}
	for _, g := range ix.queryGroups("how many tasks are in this project") {
		for _, wt := range g.terms {
			terms[wt.term] = true
		}
	}
	if !terms["count"] || terms["bulk"] {
		t.Errorf("how many: terms %v, want count and no bulk", terms)
	}
	if hits, _ := ix.Rank(context.Background(), "how many tasks are in this project", 0, nil); len(hits) == 0 || hits[0].Doc != 0 {
		t.Errorf("how many tasks: ranked %v, want the count first", hits)
	}
}

// TestBM25NewWithCreate: "new" after a verb that creates is no search word
// (the verb asks for a new thing already; as a word it would meet
// descriptions that say "new"); without one it still is.
func TestBM25NewWithCreate(t *testing.T) {
	ix := NewBM25([]Doc{
		{Name: "k_createNamespacedEvent", AppID: "k", Description: "create an Event. Records what is new in a namespace.", Params: "namespace"},
		{Name: "k_createNamespace", AppID: "k", Description: "create a Namespace"},
	})
	for q, want := range map[string]bool{"create a new namespace": false, "new namespace": true, "open a new ticket": false, "pair a new reader": true} {
		got := false
		for _, g := range ix.queryGroups(q) {
			got = got || g.terms[0].term == "new"
		}
		if got != want {
			t.Errorf("%q: new is a search word %v, want %v", q, got, want)
		}
	}
}

// TestRequestOf: the words around a request that address whoever reads it
// ("How do I …", "Which endpoint should I call to …", "… using the API") are
// dropped; a question about the caller ("do I have …", "can I delete …") and
// a request that merely starts like one stay whole.
func TestRequestOf(t *testing.T) {
	for q, want := range map[string]string{
		"How do I close an issue?":                               "close an issue?",
		"Webhooks: delete one":                                   "delete Webhooks",
		"Pull requests: list the open ones":                      "list the open Pull requests",
		"Repository webhook: delete it":                          "delete Repository webhook",
		"Labels: add one to an issue":                            "add Labels to an issue",
		"Task: close it":                                         "close it",
		"Quick question: can you delete it":                      "delete it",
		"how to list bounced emails":                             "list bounced emails",
		"Which endpoint should I call to list bounced emails?":   "list bounced emails?",
		"I need to create a tag":                                 "create a tag",
		"We want to create a tag":                                "create a tag",
		"Find the API operation to add a label to a node":        "add a label to a node",
		"Tool to merge a PR":                                     "merge a PR",
		"Which endpoint can close an issue?":                     "close an issue?",
		"What tool would list pods?":                             "list pods?",
		"which tools exist":                                      "which tools exist",
		"Please merge a PR.":                                     "merge a PR.",
		"list pods using the API":                                "list pods",
		"list pods via the REST API":                             "list pods",
		"do I have unread notifications":                         "do I have unread notifications",
		"can I delete deployments?":                              "can I delete deployments?",
		"am I allowed to delete deployments?":                    "am I allowed to delete deployments?",
		"send a GET request through the API server to a service": "send a GET request through the API server to a service",
		"which API groups does the server support":               "which API groups does the server support",
		"how many units of an item do we have in stock":          "how many units of an item do we have in stock",
		"show me every pod":                                      "show me every pod",
		"find a user by username":                                "find a user by username",
		"like a message":                                         "like a message",
		"help me":                                                "help me",
		"How do I":                                               "How do I",
		"Quick question: how do I close an issue?":               "close an issue?",
		"Task: close an issue":                                   "close an issue",
		"list open issues so I can triage them":                  "list open issues",
		"archive old repos, so that the org stays tidy":          "archive old repos,",
		"delete the branch because it was merged":                "delete the branch",
		"list events since we deployed":                          "list events",
		"list events since my last sync":                         "list events since my last sync",
		"list events since the release":                          "list events since the release",
		"purge stale caches in order to free space":              "purge stale caches",
		"fetch the run to see what failed":                       "fetch the run",
		"get the flag to make sure it is on":                     "get the flag",
		"How do I check if a user is a member":                   "check if a user is a member",
		"use a token to check if it works":                       "use a token",
		"copy a file to somewhere else":                          "copy a file to somewhere else",
		"Quick question: replica sets of a deployment":           "replica sets of a deployment",
		"Kill switch: turn off a flag immediately":               "turn off a flag immediately",
		"Hey, close an issue":                                    "close an issue",
		"OK so, close an issue":                                  "close an issue",
		"For a project, list the tasks":                          "For a project, list the tasks",
		"close an issue and return the result":                   "close an issue",
		"list pods and then show me the output":                  "list pods",
		"list pods as JSON":                                      "list pods",
		"list pods for me, thanks":                               "list pods",
		"list pods in a namespace right now, please":             "list pods in a namespace right now,",
		"download messages as CSV":                               "download messages as CSV",
		"create a draft and send it":                             "create a draft and send it",
		"issues assigned to me":                                  "issues assigned to me",
		"Which of the endpoints can close an issue?":             "close an issue?",
		"Which endpoint lists pods?":                             "list pods?",
		"Is it possible to close an issue?":                      "close an issue?",
		"Any tool that can close an issue?":                      "close an issue?",
		"is it open":                                             "is it open",
		"the API call that deletes a user":                       "delete a user",
		"What endpoint copies a task?":                           "copy a task?",
		"what API calls exist":                                   "what API calls exist",
		"create a project named Apollo":                          "create a project",
		"create a project named “Big Apollo” now":                "create a project now",
		"get the pod nginx-7d9f4 in namespace default":           "get the pod in namespace default",
		"find tasks whose name contains 'invoice'":               "find tasks whose name contains",
		`rename the label "needs triage" to bug`:                 "rename the label to bug",
		"get the task (id 12345)":                                "get the task",
		"get the task with id=42":                                "get the task with",
		"invite jdoe@example.com to the workspace":               "invite to the workspace",
		"list ec2 instances":                                     "list ec2 instances",
		"list the customer's orders":                             "list the customer's orders",
		"How do I get the issue PROJ-42?":                        "get the issue",
	} {
		if got := requestOf(q); got != want {
			t.Errorf("requestOf(%q) = %q, want %q", q, got, want)
		}
	}
	// Wrapped or not, a request ranks the same tools.
	docs := []Doc{
		{Name: "t_getIssue", AppID: "t", Description: "Get an issue"},
		{Name: "t_editIssue", AppID: "t", Description: "Edit an issue", States: "open closed"},
		{Name: "t_listIssues", AppID: "t", Description: "List issues"},
	}
	ix := NewBM25(docs)
	plain, _ := ix.Rank(context.Background(), "close an issue", 0, nil)
	for _, q := range []string{"How do I close an issue?", "Which endpoint should I call to close an issue?", "I need to close an issue"} {
		hits, _ := ix.Rank(context.Background(), q, 0, nil)
		if len(hits) == 0 || len(plain) == 0 || docs[hits[0].Doc].Name != "t_editIssue" || !reflect.DeepEqual(hits, plain) {
			t.Errorf("%q ranks %v, want %v (as \"close an issue\", t_editIssue first)", q, hits, plain)
		}
	}
}

// TestWithoutApps: an app named as where a request happens ("In Jira, …",
// "GitHub: …", "… in Jira", "using the SendGrid API") is not part of the
// request; one named inside it ("a GitHub issue") is. Over several apps,
// the tools of the app named come first.
func TestWithoutApps(t *testing.T) {
	docs := []Doc{
		{Name: "jira_createIssue", AppID: "jira", Description: "Create an issue"},
		{Name: "jira_getProject", AppID: "jira", Description: "Get a project"},
		{Name: "github_issues/create", AppID: "github", Description: "Create an issue"},
		{Name: "sendgrid_POST_mail_send", AppID: "sendgrid", Description: "Send an email"},
		{Name: "gcal_events/insert", AppID: "google-calendar", Description: "Create an event"},
	}
	ix := NewBM25(docs)
	for q, want := range map[string]string{
		"In Jira, create an issue":              "create an issue",
		"Jira: create an issue":                 "create an issue",
		"create an issue in Jira":               "create an issue",
		"Using the SendGrid API, send an email": "send an email",
		"GitHub - create an issue":              "create an issue",
		"create an event in Google Calendar":    "create an event",
		"create a GitHub issue":                 "create a GitHub issue",
		"list the projects in a workspace":      "list the projects in a workspace",
		"Jira":                                  "Jira",
	} {
		if got, _ := ix.withoutApps(q); got != want {
			t.Errorf("withoutApps(%q) = %q, want %q", q, got, want)
		}
	}
	for q, want := range map[string]string{"create an issue in Jira": "jira_createIssue", "GitHub: create an issue": "github_issues/create"} {
		if hits, _ := ix.Rank(context.Background(), q, 0, nil); len(hits) == 0 || docs[hits[0].Doc].Name != want {
			t.Errorf("%q: first %v, want %s", q, hits, want)
		}
	}
}

// TestBM25Named: a request that names a tool outright — its name, its local
// name of several words, its HTTP method and path, a URL — ranks that tool
// first; filters still apply; a one-word local name is an everyday word.
func TestBM25Named(t *testing.T) {
	docs := []Doc{
		{Name: "git:issueListIssues", AppID: "git", Description: "List a repository's issues", Path: "/repos/{owner}/{repo}/issues", Method: "GET"},
		{Name: "git:issueCreateIssue", AppID: "git", Description: "Create an issue. If using deadline only the date will be taken into account", Path: "/repos/{owner}/{repo}/issues", Method: "POST"},
		{Name: "git:issueGetIssue", AppID: "git", Description: "Get an issue", Path: "/repos/{owner}/{repo}/issues/{index}", Method: "GET"},
		{Name: "git:issueGetComments", AppID: "git", Description: "List all comments on an issue", Path: "/repos/{owner}/{repo}/issues/comments", Method: "GET"},
		{Name: "git:repoDownloadPullDiffOrPatch", AppID: "git", Description: "Get a pull request diff or patch", Path: "/repos/{owner}/{repo}/pulls/{index}.{diffType}", Method: "GET"},
		{Name: "git:repoGetPullRequest", AppID: "git", Description: "Get a pull request", Path: "/repos/{owner}/{repo}/pulls/{index}", Method: "GET"},
		{Name: "tw:FetchCall", AppID: "tw", Description: "Fetch the call specified by the provided Call SID", Path: "/2010-04-01/Accounts/{AccountSid}/Calls/{Sid}.json", Method: "GET"},
		{Name: "git:search", AppID: "git", Description: "Search repositories"},
		{Name: "git:issueSearchIssues", AppID: "git", Description: "Search for issues across the repositories that the user has access to"},
	}
	ix := NewBM25(docs)
	for q, want := range map[string]string{
		"issueCreateIssue":                                      "git:issueCreateIssue",
		"git:issueCreateIssue":                                  "git:issueCreateIssue",
		"What does `issueGetComments()` return?":                "git:issueGetComments",
		"POST /repos/{owner}/{repo}/issues":                     "git:issueCreateIssue",
		"call GET /repos/{owner}/{repo}/issues":                 "git:issueListIssues",
		"GET /repos/octo/hello/issues/12":                       "git:issueGetIssue",
		"GET /repos/octo/hello/issues/comments":                 "git:issueGetComments", // a literal fits better than {index}
		"get /repos/{owner}/{repo}/pulls/{index}.{diffType}":    "git:repoDownloadPullDiffOrPatch",
		"https://api.example.com/api/v1/repos/a/b/issues/7?x=1": "git:issueGetIssue",    // a server's base path
		"POST repos/{owner}/{repo}/issues":                      "git:issueCreateIssue", // no leading slash
		"what does repos/{owner}/{repo}/issues/comments return": "git:issueGetComments",
		"GET /2010-04-01/Accounts/AC1/Calls/CA2.json":           "tw:FetchCall",
		"GET /2010-04-01/Accounts/:AccountSid/Calls/CA2":        "tw:FetchCall", // no extension
	} {
		hits, _ := ix.Rank(context.Background(), q, 3, nil)
		if len(hits) == 0 || docs[hits[0].Doc].Name != want {
			t.Errorf("%q: first %v, want %s", q, hits, want)
		}
	}
	// The method's tool first, the path's other after it, both above the rest.
	hits, _ := ix.Rank(context.Background(), "POST /repos/{owner}/{repo}/issues", 0, nil)
	if len(hits) < 3 || docs[hits[1].Doc].Name != "git:issueListIssues" || hits[0].Score != 1 || hits[2].Score >= hits[1].Score {
		t.Errorf("POST path: %v", hits)
	}
	// A filter that excludes the named tool leaves the words' ranking.
	hits, _ = ix.Rank(context.Background(), "issueCreateIssue", 3, func(d int) bool { return d != 1 })
	for _, h := range hits {
		if h.Doc == 1 {
			t.Errorf("a filtered-out tool was named back: %v", hits)
		}
	}
	// No template fits: the path's words still rank.
	hits, _ = ix.Rank(context.Background(), "GET /repos/{owner}/{repo}/issue-comments", 1, nil)
	if len(hits) == 0 {
		t.Errorf("an unknown path found nothing")
	}
	if got := ix.namedDocs("search"); len(got) != 0 {
		t.Errorf("a one-word local name was taken for the tool: %v", got)
	}
}

// TestBM25Typos: a word neither the catalog nor WordNet knows is read as
// the catalog's word one edit away, the most frequent when several are,
// with its inflection; else as WordNet's only lemma one edit away. Real
// words, short words, a known word behind a prefix ("upvote") and
// identifiers stay as written.
func TestBM25Typos(t *testing.T) {
	docs := []Doc{
		{Name: "a:revokeToken", Description: "Revoke an access token"},
		{Name: "a:getCommit", Description: "Get a commit"},
		{Name: "a:listLabels", Description: "List the labels of an issue"},
		{Name: "a:addVote", Description: "Vote for an issue"},
		{Name: "a:listPriorities", Description: "List all priorities"},
		{Name: "a:createIssue", Description: "Create an issue"},
		{Name: "a:listSubtasks", Description: "List the subtasks of a task"},
		{Name: "a:listMachines", Description: "List the machines"},
	}
	ix := NewBM25(docs)
	for w, want := range map[string]string{
		"revke":      "revoke",     // a letter lost
		"craete":     "create",     // two swapped
		"isue":       "issue",      // a four-letter word that lost a letter
		"comit":      "commit",     // "co" + "mit" is no prefixed word: "mit" is too short to prove one
		"lables":     "labels",     // the plural kept
		"priortiies": "priorities", // -ies kept
		"subtsks":    "subtasks",
		"ownesrhip":  "ownership", // WordNet's only lemma one edit away
		"machnies":   "machines",
	} {
		if got, ok := ix.corrected(w); !ok || got != want {
			t.Errorf("corrected(%q) = %q, %v; want %q", w, got, ok, want)
		}
	}
	for _, w := range []string{"crate", "upvote", "onboard", "onto", "issue", "saml", "configmap"} {
		if got, ok := ix.corrected(w); ok {
			t.Errorf("corrected(%q) = %q; want it left as written", w, got)
		}
	}
	if got := ix.withoutTypos("Revke the tokn of issueCreateIssue, café lables"); got != "revoke the token of issueCreateIssue, café labels" {
		t.Errorf("withoutTypos = %q", got)
	}
	hits, _ := ix.Rank(context.Background(), "revke an acess tokn", 1, nil)
	if len(hits) == 0 || docs[hits[0].Doc].Name != "a:revokeToken" {
		t.Errorf("revke an acess tokn: %v", hits)
	}
	hits, _ = ix.Rank(context.Background(), "lsit the lables of an isue", 1, nil)
	if len(hits) == 0 || docs[hits[0].Doc].Name != "a:listLabels" {
		t.Errorf("lsit the lables of an isue: %v", hits)
	}
}

// TestBM25SwitchWords: APIs switch a thing on and off as enable/disable or
// activate/deactivate/suspend, and say whether it is active with a status;
// a meeting's people are its participants.
func TestBM25SwitchWords(t *testing.T) {
	docs := []Doc{
		{Name: "a:getCard", AppID: "a", Description: "Get a card"},
		{Name: "a:updateCard", AppID: "a", Description: "Update a card"},
		{Name: "a:deleteCard", AppID: "a", Description: "Delete a card"},
		{Name: "a:cardEnable", AppID: "a", Description: "Request a card enable"},
		{Name: "a:cardDisable", AppID: "a", Description: "Request a card disable"},
		{Name: "a:getCardStatus", AppID: "a", Description: "Retrieve a card status"},
		{Name: "a:getMeeting", AppID: "a", Description: "Retrieve a meeting"},
		{Name: "a:listMeetingParticipants", AppID: "a", Description: "List meeting participants"},
	}
	ix := NewBM25(docs)
	for q, want := range map[string]string{
		"activate a card":            "a:cardEnable",
		"suspend a card":             "a:cardDisable",
		"deactivate a card":          "a:cardDisable",
		"is this card still active?": "a:getCardStatus",
		"who is in this meeting?":    "a:listMeetingParticipants",
	} {
		hits, _ := ix.Rank(context.Background(), q, 3, nil)
		if len(hits) == 0 || docs[hits[0].Doc].Name != want {
			var got []string
			for _, h := range hits {
				got = append(got, docs[h.Doc].Name)
			}
			t.Errorf("%q: %v, want %s first", q, got, want)
		}
	}
}

// TestBM25LongWordIsCheap: a query of one very long word (or many long
// ones) is ranked; splitting joined words and correcting typos try every
// position of a word, which took minutes on a 100,000-letter one.
func TestBM25LongWordIsCheap(t *testing.T) {
	ix := NewBM25(sampleDocs())
	for _, q := range []string{strings.Repeat("z", 100000), strings.Repeat("listissues", 10000),
		strings.TrimSpace(strings.Repeat(strings.Repeat("q", 49)+" ", 2000))} {
		if _, err := ix.Rank(context.Background(), q, 10, nil); err != nil {
			t.Fatalf("Rank of a %d-byte query: %v", len(q), err)
		}
	}
}

// TestTelegraphic: a request written without articles ("archive repo",
// "take tag off task") opens with a verb and its object as the same
// request written in full does; a bare plural or a noun compound does not
// ("watch pods", "cash drawer shifts at location"), nor does a request
// with an article elsewhere ("issue comments on a PR").
func TestTelegraphic(t *testing.T) {
	for _, c := range []struct {
		q    string
		want bool
	}{
		{"archive repo", true},
		{"star repo", true},
		{"activate SIM card", true},
		{"upvote issue", true},
		{"stop saved card from being charged", true},
		{"place outbound phone call", true},
		{"archive a repo", true},
		{"watch pods", false},
		{"issue comments", false},
		{"cash drawer shifts at location", false},
		{"port out requests", false},
		{"issue comment on a PR", false},
		{"roles of project", false},
		{"issue assignment", false},
	} {
		if got := imperative(Tokenize(c.q)); got != c.want {
			t.Errorf("imperative(%q) = %v, want %v", c.q, got, c.want)
		}
	}
	for _, c := range []struct {
		q    string
		want Intent
	}{
		{"take tag off task", IntentDelete},
		{"mark issue as resolved", IntentUpdate},
		{"put customer into group", IntentCreate},
		{"sign customer up for subscription plan", IntentCreate},
		{"turn feature flag on in production", IntentUpdate},
		{"kick someone out of a group", IntentDelete},
		{"log them out", IntentDelete},
		{"kick someone off the team", IntentDelete},
		{"kick a user off the project", IntentDelete},
		{"kick off a new build", IntentCreate},
		{"throw away a deploy key", IntentDelete},
		{"take out an injected script", IntentDelete},
		{"throw out the old drafts", IntentDelete},
	} {
		if got := QueryIntents(c.q); len(got) != 1 || got[0] != c.want {
			t.Errorf("QueryIntents(%q) = %v, want %v", c.q, got, c.want)
		}
	}
}

// TestBM25LikeIsAWord: "like" is a verb APIs have ("Like a post"), not a
// stopword; "I'd like to …" is framing, which requestOf drops.
func TestBM25LikeIsAWord(t *testing.T) {
	docs := []Doc{
		{Name: "d_updatePost", AppID: "d", Description: "Update a single post"},
		{Name: "d_performPostAction", AppID: "d", Description: "Like a post and other actions"},
	}
	ix := NewBM25(docs)
	for _, q := range []string{"like a post", "I'd like to like a post"} {
		hits, _ := ix.Rank(context.Background(), q, 0, nil)
		if len(hits) == 0 || docs[hits[0].Doc].Name != "d_performPostAction" {
			t.Errorf("%q: first %v, want d_performPostAction", q, hits)
		}
	}
}

// TestModerationWords: a forum's or a chat's moderation and threads in the
// words agents use: ban is a suspension, mute silences, a thread is a topic.
func TestModerationWords(t *testing.T) {
	ix := NewBM25([]Doc{
		{Name: "d_suspendUser", AppID: "d", Description: "Suspend a user"},
		{Name: "d_silenceUser", AppID: "d", Description: "Silence a user"},
		{Name: "d_createTopic", AppID: "d", Description: "Creates a new topic"},
	})
	for _, c := range [][2]string{{"ban a user", "suspend"}, {"mute a user", "silence"}, {"start a discussion thread", "topic"}} {
		if queryWeight(ix, c[0], c[1]) == 0 {
			t.Errorf("%q has no term %q", c[0], c[1])
		}
	}
}

// TestStateParticiple: a past participle after "be" says a state ("the users
// who are suspended"); when WordNet has it as a word of its own, the verb
// it comes from is not asked for.
func TestStateParticiple(t *testing.T) {
	ix := NewBM25([]Doc{
		{Name: "d_suspendUser", AppID: "d", Description: "Suspend a user"},
		{Name: "d_listUsers", AppID: "d", Description: "Get a list of users", States: "active suspended"},
	})
	for _, c := range []struct {
		q    string
		want bool
	}{
		{"list the users who are suspended", false},
		{"which users were suspended", false},
		{"suspend a user", true},
		{"a user suspended by a moderator", true},
	} {
		if got := queryWeight(ix, c.q, "suspend") > 0; got != c.want {
			t.Errorf("%q asks for suspend: %v, want %v", c.q, got, c.want)
		}
	}
}

// TestDomainKeyAsWritten: a domain-table key that is an inflected form or
// looks like one ("newest", "sms") is met by the word as written: its
// lemma ("new", "sm") is another word.
func TestDomainKeyAsWritten(t *testing.T) {
	ix := NewBM25([]Doc{
		{Name: "d_listLatestTopics", AppID: "d", Description: "Get the latest topics"},
		{Name: "d_createMessage", AppID: "d", Description: "Send a message"},
	})
	for _, c := range [][2]string{{"newest topics", "latest"}, {"send an SMS", "message"}} {
		if queryWeight(ix, c[0], c[1]) == 0 {
			t.Errorf("%q has no term %q", c[0], c[1])
		}
	}
}

// TestPathAction: a tool named from its method and path (no operationId)
// whose path ends in an intent word does what that word says, not what
// its method word says: POST /metadata/series/query searches, POST
// /images/delete deletes. A GET, a name someone chose, and a last segment
// that is no intent word keep the name's intent.
func TestPathAction(t *testing.T) {
	docs := []Doc{
		{Name: "box_post_metadata_series_query", AppID: "box", Description: "submit a query for series", Method: "POST", Path: "/metadata/series/query"},
		{Name: "box_post_images_delete", AppID: "box", Description: "bulk delete a sequence of images according to the supplied image IDs", Method: "POST", Path: "/images/delete"},
		{Name: "box_get_metadata_series", AppID: "box", Description: "Returns a list of metadata on the series level of the DICOM hierarchy", Method: "GET", Path: "/metadata/series"},
		{Name: "box_get_metadata_series_by_id", AppID: "box", Description: "Return the series with the supplied ID", Method: "GET", Path: "/metadata/series/{id}"},
		{Name: "box_post_metadata_series_by_id_seriestags", AppID: "box", Description: "add a series tag to the series with the supplied ID", Method: "POST", Path: "/metadata/series/{id}/seriestags"},
		{Name: "box_postQuery", AppID: "box", Description: "submit a saved query", Method: "POST", Path: "/saved/query"},
		{Name: "box_post_boxes_by_id_send", AppID: "box", Description: "send images to the remote box", Method: "POST", Path: "/boxes/{id}/send"},
	}
	ix := NewBM25(docs)
	for i, want := range []Intent{IntentSearch, IntentDelete, IntentGet, IntentGet, IntentCreate, IntentCreate, IntentCreate} {
		if got := ix.families[i]; len(got) != 1 || got[0] != intentFamily(want) {
			t.Errorf("%s: intents %v, want %v", docs[i].Name, got, intentFamily(want))
		}
	}
	hits := rankOf(t, ix, "find series matching some criteria", 3)
	if len(hits) == 0 || hits[0].Doc != 0 {
		t.Errorf("find series matching some criteria: %v, want box_post_metadata_series_query first", hits)
	}
}

// TestInsertsIntent: a summary in the third person ("Inserts or updates a
// filter") says its verb as "Creates", "Adds" and "Updates" do.
func TestInsertsIntent(t *testing.T) {
	if got := ToolIntents("post_filtering_filters", "Inserts or updates a filter."); len(got) != 1 || got[0] != IntentCreate {
		t.Errorf("post_filtering_filters: %v, want create", got)
	}
	if got := IntentOf("Inserts"); got != IntentCreate {
		t.Errorf("Inserts: %v, want create", got)
	}
}

// TestDownloadIntent: downloading reads ("download the DICOM dataset of an
// image" is no change to make; an imperative of a verb no intent names
// preferred the tools that write, x0.8 for the reads).
func TestDownloadIntent(t *testing.T) {
	if got := QueryIntents("download the DICOM dataset of an image"); len(got) != 1 || got[0] != IntentGet {
		t.Errorf("download the DICOM dataset of an image: %v, want get", got)
	}
	if got := ToolIntents("files_content", "Downloads the contents of a file."); len(got) != 1 || got[0] != IntentGet {
		t.Errorf("Downloads the contents of a file: %v, want get", got)
	}
}

// TestPathHead: in a name built from method and path, "by_id" stands for
// a parameter, not a preposition: get_import_sessions_by_id_images acts on
// images, so "images imported in an import session" finds it before the
// list of sessions (whose head the request names only in its modifier).
func TestPathHead(t *testing.T) {
	docs := []Doc{
		{Name: "box_get_import_sessions", AppID: "box", Description: "Returns a list of available import sessions.", Method: "GET", Path: "/import/sessions"},
		{Name: "box_get_import_sessions_by_id_images", AppID: "box", Description: "get the imported images corresponding to the import session with the supplied ID", Method: "GET", Path: "/import/sessions/{id}/images"},
		{Name: "box_post_import_sessions_by_id_images", AppID: "box", Description: "add a DICOM dataset to the import session with the supplied ID", Method: "POST", Path: "/import/sessions/{id}/images"},
		{Name: "box_getSessionsByIdImages", AppID: "box", Description: "Images of a session.", Method: "GET", Path: "/other/{id}/images"},
	}
	ix := NewBM25(docs)
	for i, want := range []string{"sessions", "image", "image", "sessions"} {
		if ix.heads[i] != want {
			t.Errorf("%s: head %q, want %q", docs[i].Name, ix.heads[i], want)
		}
	}
	hits := rankOf(t, ix, "images imported in an import session", 3)
	if len(hits) == 0 || hits[0].Doc != 1 {
		t.Errorf("images imported in an import session: %v, want box_get_import_sessions_by_id_images first", hits)
	}
}

// TestListOfTitle: a summary whose reading verb is followed by "a list of"
// ("Retrieves a list of categories") lists: a request to list covers its
// verb, which a get-one verb alone does not give it.
func TestListOfTitle(t *testing.T) {
	title := titleTerms("listCategories", "Retrieves a list of categories.")
	var verb []string
	for _, slot := range title {
		if slot[0] == titleIntent(IntentGet) {
			verb = slot
		}
	}
	if !slices.Contains(verb, titleIntent(IntentList)) {
		t.Errorf("title %v: the summary's verb slot does not list", title)
	}
	title = titleTerms("getCategory", "Retrieves a single category.")
	for _, slot := range title {
		if slices.Contains(slot, titleIntent(IntentList)) {
			t.Errorf("title %v: a get-one summary lists", title)
		}
	}
}

// TestLogOutPhrase: "log out" (also "sign out", "log off") ends a session,
// as "log in" opens one: the words alone ("log", "out") meet neither the
// session's delete nor a logout call, and every other delete ranked first.
func TestLogOutPhrase(t *testing.T) {
	docs := []Doc{
		{Name: "t_delete_calendars_by_id", AppID: "t", Description: "Delete a Calendar", Method: "DELETE", Path: "/calendars/{id}"},
		{Name: "t_delete_drivers_by_id", AppID: "t", Description: "Delete a Driver", Method: "DELETE", Path: "/drivers/{id}"},
		{Name: "t_delete_session", AppID: "t", Description: "Close the Session", Method: "DELETE", Path: "/session"},
		{Name: "t_post_session", AppID: "t", Description: "Create a new Session", Method: "POST", Path: "/session"},
		{Name: "t_get_logs", AppID: "t", Description: "Fetch the audit log", Method: "GET", Path: "/logs"},
	}
	ix := NewBM25(docs)
	for _, q := range []string{"log out", "sign out of my account", "log off"} {
		hits := rankOf(t, ix, q, 3)
		if len(hits) == 0 || docs[hits[0].Doc].Name != "t_delete_session" {
			t.Errorf("%q: first %v, want t_delete_session", q, hits)
		}
	}
}

// TestCreateNewNotRecent: the "new" of "Create a new Session" is the act,
// not a recent thing: "the latest location of a car" (latest: newest,
// whose lemma is new) ranked the session's create above the positions.
func TestCreateNewNotRecent(t *testing.T) {
	if got := sentenceTerms("Create a new Session"); slices.Contains(got, "new") {
		t.Errorf("Create a new Session: %v has new", got)
	}
	if got := sentenceTerms("Lists the new members"); !slices.Contains(got, "new") {
		t.Errorf("Lists the new members: %v lacks new", got)
	}
	docs := []Doc{
		{Name: "t_post_session", AppID: "t", Description: "Create a new Session", Method: "POST", Path: "/session"},
		{Name: "t_get_positions", AppID: "t", Description: "Fetches a list of Positions", Method: "GET", Path: "/positions"},
		{Name: "t_get_devices", AppID: "t", Description: "Fetch a list of Devices", Method: "GET", Path: "/devices"},
	}
	ix := NewBM25(docs)
	hits := rankOf(t, ix, "latest GPS location of a car", 3)
	if len(hits) == 0 || docs[hits[0].Doc].Name != "t_get_positions" {
		t.Errorf("first %v, want t_get_positions", hits)
	}
}

// TestWhereQuestion: "where" asks for a place, as "who" asks for people:
// "where are all my vehicles right now?" names no word of the positions'
// call (the catalog says device, position), and every plain list tied.
func TestWhereQuestion(t *testing.T) {
	docs := []Doc{
		{Name: "t_get_calendars", AppID: "t", Description: "Fetch a list of Calendars", Method: "GET", Path: "/calendars"},
		{Name: "t_get_groups", AppID: "t", Description: "Fetch a list of Groups", Method: "GET", Path: "/groups"},
		{Name: "t_get_positions", AppID: "t", Description: "Fetches a list of Positions", Method: "GET", Path: "/positions"},
		{Name: "t_get_devices", AppID: "t", Description: "Fetch a list of Devices", Method: "GET", Path: "/devices"},
	}
	ix := NewBM25(docs)
	hits := rankOf(t, ix, "where are all my vehicles right now?", 3)
	if len(hits) == 0 || docs[hits[0].Doc].Name != "t_get_positions" {
		t.Errorf("first %v, want t_get_positions", hits)
	}
}

// TestTrackerDevice: APIs of tracking hardware call a GPS tracker (or a
// gadget) a device, which WordNet does not relate: "register a new GPS
// tracker" found every create but the device's.
func TestTrackerDevice(t *testing.T) {
	docs := []Doc{
		{Name: "t_post_calendars", AppID: "t", Description: "Create a Calendar", Method: "POST", Path: "/calendars"},
		{Name: "t_post_drivers", AppID: "t", Description: "Create a Driver", Method: "POST", Path: "/drivers"},
		{Name: "t_post_devices", AppID: "t", Description: "Create a Device", Method: "POST", Path: "/devices"},
	}
	ix := NewBM25(docs)
	hits := rankOf(t, ix, "register a new GPS tracker", 3)
	if len(hits) == 0 || docs[hits[0].Doc].Name != "t_post_devices" {
		t.Errorf("first %v, want t_post_devices", hits)
	}
}

// TestOneThing: a read of "one" thing asks for that thing, though its verb
// ("show") lists: "show one connection's details" ranked the list of
// connections first; so did "status of a particular run" (also "specific",
// "single"). "pods in one namespace" lists pods.
func TestOneThing(t *testing.T) {
	docs := []Doc{
		{Name: "a_get_connections", AppID: "a", Description: "List connections", Method: "GET", Path: "/connections"},
		{Name: "a_get_connection", AppID: "a", Description: "Get a connection", Method: "GET", Path: "/connections/{connection_id}", Required: 1, RequiredNames: []string{"connection_id"}},
		{Name: "a_delete_connection", AppID: "a", Description: "Delete a connection", Method: "DELETE", Path: "/connections/{connection_id}", Required: 1, RequiredNames: []string{"connection_id"}},
	}
	ix := NewBM25(docs)
	hits := rankOf(t, ix, "show one connection's details", 3)
	if len(hits) == 0 || docs[hits[0].Doc].Name != "a_get_connection" {
		t.Errorf("first %v, want a_get_connection", hits)
	}
	for _, c := range []struct {
		q    string
		want bool
	}{{"show one connection", true}, {"details of one event", true}, {"list pods in one namespace", false}, {"make one task a subtask of another", true}, {"one another", false}, {"status of a particular run", true}, {"a specific webhook", true}} {
		if got := oneThing(Tokenize(c.q)); got != c.want {
			t.Errorf("oneThing(%q) = %v, want %v", c.q, got, c.want)
		}
	}
}

// TestActionVerbNotDelete: an imperative of a verb no intent names ("resize
// a pool", "give a role more permissions") asks to change the thing, not
// to delete it: a delete verb is no partial match for it, as create and
// update verbs are ("resize a pool" ranked the pool's delete first).
func TestActionVerbNotDelete(t *testing.T) {
	docs := []Doc{
		{Name: "a_delete_pool", AppID: "a", Description: "Delete a pool", Method: "DELETE", Path: "/pools/{pool_name}", Required: 1, RequiredNames: []string{"pool_name"}},
		{Name: "a_patch_pool", AppID: "a", Description: "Update a pool", Method: "PATCH", Path: "/pools/{pool_name}", Required: 1, RequiredNames: []string{"pool_name"}, FieldNames: "name slots description"},
		{Name: "a_post_pool", AppID: "a", Description: "Create a pool", Method: "POST", Path: "/pools", FieldNames: "name slots description"},
	}
	ix := NewBM25(docs)
	hits := rankOf(t, ix, "resize a pool", 3)
	if len(hits) == 0 || docs[hits[0].Doc].Name == "a_delete_pool" {
		t.Errorf("first %v, want no delete", hits)
	}
}

// TestMarkAsState: the word after "as" is the state a request puts its
// thing in ("mark a DAG run as failed": the run's update whose state can
// be failed), as a leading verb is ("close an issue").
func TestMarkAsState(t *testing.T) {
	docs := []Doc{
		{Name: "a_patch_dag", AppID: "a", Description: "Update a DAG", Method: "PATCH", Path: "/dags/{dag_id}", Required: 1, RequiredNames: []string{"dag_id"}, FieldNames: "is_paused dagrun_timeout", States: "is_paused"},
		{Name: "a_patch_dags", AppID: "a", Description: "Update DAGs", Method: "PATCH", Path: "/dags", FieldNames: "is_paused dagrun_timeout", States: "is_paused"},
		{Name: "a_update_dag_run_state", AppID: "a", Description: "Modify a DAG run", Method: "PATCH", Path: "/dags/{dag_id}/dagRuns/{dag_run_id}", Required: 2, RequiredNames: []string{"dag_id", "dag_run_id"}, FieldNames: "state", EnumValues: "queued success failed", States: "queued success failed"},
	}
	ix := NewBM25(docs)
	state := false
	for _, g := range ix.queryGroups("mark a DAG run as failed") {
		for _, wt := range g.terms {
			state = state || wt.term == "=fail" || wt.term == "=failed"
		}
	}
	if !state {
		t.Errorf("mark a DAG run as failed: no state term for failed")
	}
	hits := rankOf(t, ix, "mark a DAG run as failed", 3)
	if len(hits) == 0 || docs[hits[0].Doc].Name != "a_update_dag_run_state" {
		t.Errorf("first %v, want a_update_dag_run_state", hits)
	}
}

// TestWorkflowDAG: orchestrators call a workflow or a pipeline a DAG,
// which WordNet does not know: "list all workflows" ranked every other
// list above the DAGs'.
func TestWorkflowDAG(t *testing.T) {
	docs := []Doc{
		{Name: "a_get_permissions", AppID: "a", Description: "List permissions", Method: "GET", Path: "/permissions"},
		{Name: "a_get_providers", AppID: "a", Description: "List providers", Method: "GET", Path: "/providers"},
		{Name: "a_get_dags", AppID: "a", Description: "List DAGs", Method: "GET", Path: "/dags"},
	}
	ix := NewBM25(docs)
	hits := rankOf(t, ix, "list all workflows", 3)
	if len(hits) == 0 || docs[hits[0].Doc].Name != "a_get_dags" {
		t.Errorf("first %v, want a_get_dags", hits)
	}
}

// TestCheckVerifies: to check that something works or is right is to test,
// verify or validate it, which WordNet's check does not relate: "check
// whether a connection works" ranked the connection's reads above its test.
func TestCheckVerifies(t *testing.T) {
	docs := []Doc{
		{Name: "a_get_connections", AppID: "a", Description: "List connections", Method: "GET", Path: "/connections"},
		{Name: "a_get_connection", AppID: "a", Description: "Get a connection", Method: "GET", Path: "/connections/{connection_id}", Required: 1, RequiredNames: []string{"connection_id"}},
		{Name: "a_test_connection", AppID: "a", Description: "Test a connection", Method: "POST", Path: "/connections/test"},
	}
	ix := NewBM25(docs)
	test := false
	for _, g := range ix.queryGroups("check whether a connection works before saving it") {
		for _, wt := range g.terms {
			test = test || wt.term == "test"
		}
	}
	if !test {
		t.Errorf("check whether a connection works: test is no relative of check")
	}
	hits := rankOf(t, ix, "check whether a connection works before saving it", 3)
	if len(hits) < 3 || docs[hits[2].Doc].Name == "a_test_connection" {
		t.Errorf("ranking %v: the test is last", hits)
	}
}

// TestNotifyWhen: a request to be told when something happens ("email me
// when a vehicle leaves a geofence") asks for a notification; the clause
// after "when" is its condition, not what the request acts on (the
// geofence's create ranked first).
func TestNotifyWhen(t *testing.T) {
	docs := []Doc{
		{Name: "t_post_geofences", AppID: "t", Description: "Create a Geofence", Method: "POST", Path: "/geofences"},
		{Name: "t_put_geofences_by_id", AppID: "t", Description: "Update a Geofence", Method: "PUT", Path: "/geofences/{id}", Required: 1, RequiredNames: []string{"id"}},
		{Name: "t_post_notifications", AppID: "t", Description: "Create a Notification", Method: "POST", Path: "/notifications", FieldNames: "type mail sms web always calendarId"},
	}
	ix := NewBM25(docs)
	hits := rankOf(t, ix, "email me when a vehicle leaves a geofence", 3)
	if len(hits) == 0 || docs[hits[0].Doc].Name != "t_post_notifications" {
		t.Errorf("first %v, want t_post_notifications", hits)
	}
}

// TestWhoLists: a question for people ("who has an account?") asks for
// them all: the list of users, not one user; "who am I" asks for one.
func TestWhoLists(t *testing.T) {
	docs := []Doc{
		{Name: "a_get_user", AppID: "a", Description: "Get a user", Method: "GET", Path: "/users/{username}", Required: 1, RequiredNames: []string{"username"}},
		{Name: "a_get_users", AppID: "a", Description: "List users", Method: "GET", Path: "/users"},
		{Name: "a_patch_user", AppID: "a", Description: "Update a user", Method: "PATCH", Path: "/users/{username}", Required: 1, RequiredNames: []string{"username"}},
	}
	ix := NewBM25(docs)
	hits := rankOf(t, ix, "who has an account?", 3)
	if len(hits) == 0 || docs[hits[0].Doc].Name != "a_get_users" {
		t.Errorf("first %v, want a_get_users", hits)
	}
	if qp := ix.plan("who am I"); qp.listing {
		t.Errorf("who am I: a list request")
	}
}

// TestAdjectiveNotObject: an adjective before the object's noun ("full
// details of a DAG") describes it; a tool that lacks the adjective still
// matches the object (the DAG's details were held to "full", and a log
// whose description says "full" ranked first).
func TestAdjectiveNotObject(t *testing.T) {
	docs := []Doc{
		{Name: "a_get_log", AppID: "a", Description: "Get logs. Returns the full content of the log of a task instance.", Method: "GET", Path: "/dags/{dag_id}/logs", Required: 1, RequiredNames: []string{"dag_id"}},
		{Name: "a_get_dag_details", AppID: "a", Description: "Get a simplified representation of DAG", Method: "GET", Path: "/dags/{dag_id}/details", Required: 1, RequiredNames: []string{"dag_id"}},
		{Name: "a_get_dag", AppID: "a", Description: "Get basic information about a DAG", Method: "GET", Path: "/dags/{dag_id}", Required: 1, RequiredNames: []string{"dag_id"}},
	}
	ix := NewBM25(docs)
	if qp := ix.plan("full details of a DAG"); len(qp.object) != 0 {
		t.Errorf("full details of a DAG: object %v, want none (full describes details)", qp.object)
	}
	hits := rankOf(t, ix, "full details of a DAG", 3)
	if len(hits) == 0 || docs[hits[0].Doc].Name != "a_get_dag_details" {
		t.Errorf("first %v, want a_get_dag_details", hits)
	}
}

// TestLoggedInState: "logged in" after a form of "be" is the state of the
// current, authenticated user, not the act of logging in: "who am I logged
// in as?" ranked the login call first.
func TestLoggedInState(t *testing.T) {
	docs := []Doc{
		{Name: "s_post_users_login", AppID: "s", Description: "Obtain a session cookie that can be used to authenticate future API calls from the present IP address.", Method: "POST", Path: "/users/login"},
		{Name: "s_get_users_current", AppID: "s", Description: "obtain information on the currently logged in user as specified by the supplied session cookie.", Method: "GET", Path: "/users/current"},
		{Name: "s_get_users", AppID: "s", Description: "Returns all users", Method: "GET", Path: "/users"},
		{Name: "s_post_users", AppID: "s", Description: "Creates a new user.", Method: "POST", Path: "/users"},
	}
	ix := NewBM25(docs)
	for _, g := range ix.queryGroups("who am I logged in as?") {
		for _, wt := range g.terms {
			if wt.term == "login" && wt.w == 1 {
				t.Errorf("who am I logged in as?: login weighs 1, the act's weight")
			}
		}
	}
	hits := rankOf(t, ix, "who am I logged in as?", 3)
	if len(hits) == 0 || docs[hits[0].Doc].Name != "s_get_users_current" {
		t.Errorf("first %v, want s_get_users_current", hits)
	}
	hits = rankOf(t, ix, "log in", 3)
	if len(hits) == 0 || docs[hits[0].Doc].Name != "s_post_users_login" {
		t.Errorf("log in: first %v, want s_post_users_login", hits)
	}
}

// TestNamePhrase: a name that writes a domain phrase as two words
// ("logOutUser") is indexed with the phrase's term (logout), as a request
// that says it ("sign out") is: "force a user to sign out everywhere"
// ranked it sixth in Discourse.
func TestNamePhrase(t *testing.T) {
	if got := phraseTerms("logOutUser"); !slices.Equal(got, []string{"logout"}) {
		t.Errorf("logOutUser: %v, want [logout]", got)
	}
	if got := phraseTerms("repoCreatePullRequest"); len(got) != 0 {
		t.Errorf("repoCreatePullRequest: %v, want none (pull is its own word)", got)
	}
	docs := []Doc{
		{Name: "d_deleteUser", AppID: "d", Description: "Delete a user"},
		{Name: "d_silenceUser", AppID: "d", Description: "Silence a user"},
		{Name: "d_logOutUser", AppID: "d", Description: "Log a user out"},
		{Name: "d_deletePost", AppID: "d", Description: "Delete a single post"},
	}
	ix := NewBM25(docs)
	hits := rankOf(t, ix, "force a user to sign out everywhere", 3)
	// The delete still comes first (the request's intent is a delete);
	// the log-out call must come next, before the silence.
	if len(hits) < 2 || docs[hits[1].Doc].Name != "d_logOutUser" {
		t.Errorf("ranking %v, want d_logOutUser second", hits)
	}
}

// BenchmarkLexiconDecode measures decoding the embedded WordNet table, which
// the first search of a process pays.
func BenchmarkLexiconDecode(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		decodeLexicon()
	}
}

// BenchmarkBroaderDecode measures decoding the embedded broader table, which
// the first request word that no tool has, nor its relatives, pays.
func BenchmarkBroaderDecode(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		decodeBroader()
	}
}

// TestBroaderWords: a word that no tool has, nor any of its relatives, is
// stood in for by its WordNet hypernyms ("truck": vehicle) and attributes
// ("successful": success), weakly; a word the catalog has, or one a relative
// stands in for, gets none. The table is read by bisection, first and last
// lines included.
func TestBroaderWords(t *testing.T) {
	has := func(lemma string, kind byte, word string) bool {
		for _, b := range broaderWords(lemma) {
			if b.kind == kind && b.word == word {
				return true
			}
		}
		return false
	}
	for _, c := range []struct {
		lemma, word string
		kind        byte
	}{{"truck", "vehicle", 'h'}, {"odometer", "meter", 'h'}, {"yesterday", "period", 'h'}, {"successful", "success", 'a'}} {
		if !has(c.lemma, c.kind, c.word) {
			t.Errorf("broaderWords(%q) = %v, want %c:%s", c.lemma, broaderWords(c.lemma), c.kind, c.word)
		}
	}
	text := broaderTable()
	first, _, _ := strings.Cut(string(text[:bytes.IndexByte(text, '\n')]), " ")
	last, _, _ := strings.Cut(string(text[bytes.LastIndexByte(text[:len(text)-1], '\n')+1:]), " ")
	for _, w := range []string{first, last} {
		if len(broaderWords(w)) == 0 {
			t.Errorf("broaderWords(%q) found nothing", w)
		}
	}
	if b := broaderWords("zzzz"); b != nil {
		t.Errorf("broaderWords(zzzz) = %v", b)
	}

	docs := []Doc{
		{Name: "f_get_drivers", AppID: "f", Description: "List drivers"},
		{Name: "f_get_vehicles", AppID: "f", Description: "List vehicles"},
		{Name: "f_listBadRuns", AppID: "f", Description: "List runs that ended in failure"},
		{Name: "f_listGoodRuns", AppID: "f", Description: "List runs that ended in success"},
	}
	ix := NewBM25(docs)
	for q, want := range map[string]string{"show every truck": "f_get_vehicles", "which runs were successful?": "f_listGoodRuns"} {
		hits := rankOf(t, ix, q, 4)
		if len(hits) == 0 || docs[hits[0].Doc].Name != want {
			t.Errorf("%q: first %v, want %s", q, hits, want)
		}
	}
	// A word the catalog has gets no broader words.
	ix = NewBM25(append(docs, Doc{Name: "f_get_trucks", AppID: "f", Description: "List trucks"}))
	for _, g := range ix.queryGroups("show every truck") {
		for _, wt := range g.terms {
			if wt.term == "vehicle" {
				t.Errorf("truck, which a tool has, stood in for by vehicle: %v", g.terms)
			}
		}
	}
}

// TestRelativesFromTheCatalogSide: a request word that neither the catalog
// nor its own relatives know is stood in for by a catalog word whose
// WordNet relatives include it: "route" has path (its first sense is "path,
// route, itinerary"), though "path" has no route.
func TestRelativesFromTheCatalogSide(t *testing.T) {
	docs := []Doc{
		{Name: "t_get_devices", AppID: "t", Description: "Fetch a list of Devices"},
		{Name: "t_get_positions", AppID: "t", Description: "Fetch a list of Positions of a Device"},
		{Name: "t_get_reports_route", AppID: "t", Description: "Fetch a list of Positions of a Device within the time period, as its route"},
	}
	ix := NewBM25(docs)
	hits := rankOf(t, ix, "the path a device took", 3)
	if len(hits) == 0 || docs[hits[0].Doc].Name != "t_get_reports_route" {
		t.Errorf("first %v, want t_get_reports_route", hits)
	}
	if got := ix.relativesOf("path"); !slices.Contains(got, weighted{"route", synonymWeight}) {
		t.Errorf("relativesOf(path) = %v, want route at %v", got, synonymWeight)
	}
}

// TestAbsentWordHypernyms: a word no tool has, though some have one of its
// relatives, also gets its hypernyms, at 0.1: "month" meets "monthly" and
// now "period" too, so "topics this month" covers more of a title that
// filters by period.
func TestAbsentWordHypernyms(t *testing.T) {
	docs := []Doc{
		{Name: "f_listCategoryTopics", AppID: "f", Description: "List topics of a category"},
		{Name: "f_listTopTopics", AppID: "f", Description: "List top topics of a period"},
		{Name: "f_getStats", AppID: "f", Description: "Get monthly statistics"},
	}
	ix := NewBM25(docs)
	hits := rankOf(t, ix, "topics this month", 3)
	if len(hits) == 0 || docs[hits[0].Doc].Name != "f_listTopTopics" {
		t.Errorf("first %v, want f_listTopTopics", hits)
	}
}

// TestHowManyNotList: a question "how many X …" asks for a number, not for
// the list of X its plural would say, and "does" is no plural (of the noun
// "do"): "how many slots does a pool have?" read as a list request ranked
// the pools' list above the pool it asks about. A list word in a question
// ("… for every flag?") still asks for a list.
func TestHowManyNotList(t *testing.T) {
	docs := []Doc{
		{Name: "a_get_pools", AppID: "a", Description: "List pools", Method: "GET", Path: "/pools"},
		{Name: "a_get_pool", AppID: "a", Description: "Get a pool. Its name, slots and description.", Method: "GET", Path: "/pools/{pool_name}", Required: 1, RequiredNames: []string{"pool_name"}},
	}
	ix := NewBM25(docs)
	for _, c := range []struct {
		q    string
		list bool
	}{{"how many slots does a pool have?", false}, {"does a pool exist", false}, {"which pools exist", true}, {"what does a user get for every flag?", true}} {
		if qp := ix.plan(c.q); qp.listing != c.list {
			t.Errorf("%q: listing %v, want %v", c.q, qp.listing, c.list)
		}
	}
	hits := rankOf(t, ix, "how many slots does a pool have?", 2)
	if len(hits) == 0 || docs[hits[0].Doc].Name != "a_get_pool" {
		t.Errorf("first %v, want a_get_pool", hits)
	}
}

// TestSomeoneMember: "someone" in a request about a group, a team or a
// project is one of its members, as "everyone" and "person" are: "kick
// someone out of a group" ranked the group's delete above its members'
// removal.
func TestSomeoneMember(t *testing.T) {
	docs := []Doc{
		{Name: "a_deleteGroup", AppID: "a", Description: "Delete a group"},
		{Name: "a_removeGroupMembers", AppID: "a", Description: "Remove members from a group"},
	}
	ix := NewBM25(docs)
	hits := rankOf(t, ix, "kick someone out of a group", 2)
	if len(hits) == 0 || docs[hits[0].Doc].Name != "a_removeGroupMembers" {
		t.Errorf("first %v, want a_removeGroupMembers", hits)
	}
}

// TestHeadInModifierOwnWords: a tool whose head the request's modifier
// names is the modifier's thing even when a relative of the object's word
// is that head: WordNet has project among task's synonyms, so "list all
// tasks in a project" did not hold getProjectsForTask to its modifier and
// ranked it above getTasksForProject.
func TestHeadInModifierOwnWords(t *testing.T) {
	if !slices.ContainsFunc(relatedWords("task"), func(r relWord) bool { return r.word == "project" }) {
		t.Skip("the lexicon no longer relates task to project")
	}
	docs := []Doc{
		{Name: "asana_getProjectsForTask", AppID: "asana", Description: "Get projects a task is in"},
		{Name: "asana_getTasksForProject", AppID: "asana", Description: "Get tasks from a project"},
	}
	ix := NewBM25(docs)
	hits := rankOf(t, ix, "list all tasks in a project", 2)
	if len(hits) == 0 || docs[hits[0].Doc].Name != "asana_getTasksForProject" {
		t.Errorf("first %v, want asana_getTasksForProject", hits)
	}
}

// TestItemPathNotList: a GET whose path ends in a parameter reads one thing
// of a collection, whatever its name and summary say; a list request
// prefers the collection's read ("list the scheduled changes of a flag":
// LaunchDarkly's getFlagConfigScheduledChange reads one change by its id). A tool named
// or summarised as a list keeps its place (`GET /admin/users/list/{flag}`
// lists users by a filter).
func TestItemPathNotList(t *testing.T) {
	docs := []Doc{
		{Name: "ld_readScheduledChange", AppID: "ld", Description: "Get scheduled changes of a flag", Method: "GET", Path: "/flags/{featureFlagKey}/scheduled-changes/{id}", Required: 2},
		{Name: "ld_fetchScheduledChange", AppID: "ld", Description: "Get scheduled changes of a flag", Method: "GET", Path: "/flags/{featureFlagKey}/scheduled-changes", Required: 1},
		{Name: "ld_listUsers", AppID: "ld", Description: "List users by a flag", Method: "GET", Path: "/admin/users/list/{flag}", Required: 1},
	}
	ix := NewBM25(docs)
	hits := rankOf(t, ix, "list the scheduled changes of a flag", 3)
	if len(hits) == 0 || docs[hits[0].Doc].Name != "ld_fetchScheduledChange" {
		t.Errorf("first %v, want ld_fetchScheduledChange", hits)
	}
	if !ix.itemPath[0] || ix.itemPath[1] || ix.itemPath[2] {
		t.Errorf("item paths %v, want [true false false]", ix.itemPath)
	}
}

// TestPathWeight: the resource only an operation's path names (`listMember`
// at /Queues/{QueueSid}/Members: queue) weighs more than a parameter's
// name: at 0.5 the path's word weighed less than a parameter's (0.6), and
// a tool with a "queue" parameter ranked first for "list the members of a
// queue".
func TestPathWeight(t *testing.T) {
	docs := []Doc{
		{Name: "tw_listMembership", AppID: "tw", Description: "List members", Method: "GET", Path: "/Memberships", Params: "queue"},
		{Name: "tw_listMember", AppID: "tw", Description: "List members", Method: "GET", Path: "/Queues/{QueueSid}/Members"},
	}
	ix := NewBM25(docs)
	hits := rankOf(t, ix, "list the members of a queue", 2)
	if len(hits) == 0 || docs[hits[0].Doc].Name != "tw_listMember" {
		t.Errorf("first %v, want tw_listMember", hits)
	}
}

// TestListPathNotOne: a request to read one thing ("download the DICOM
// dataset of an image") does not ask for a collection's list (`GET
// /images/{id}/attributes`, "list all DICOM attributes of the dataset"),
// whose path ends in the collection: such a tool ranked above the read of
// the image's dataset on Slicebox. A question is left alone: in the
// singular it often asks for a list ("what has a user done recently").
func TestListPathNotOne(t *testing.T) {
	docs := []Doc{
		{Name: "sb_get_images_by_id_attributes", AppID: "sb", Description: "list all DICOM attributes of the dataset corresponding to the supplied image ID", Method: "GET", Path: "/images/{id}/attributes", Required: 1, RequiredNames: []string{"id"}},
		{Name: "sb_get_images_by_id", AppID: "sb", Description: "fetch dataset corresponding to the supplied image ID", Method: "GET", Path: "/images/{id}", Required: 1, RequiredNames: []string{"id"}},
		{Name: "sb_post_images", AppID: "sb", Description: "add a DICOM dataset to slicebox", Method: "POST", Path: "/images"},
	}
	ix := NewBM25(docs)
	if !ix.listPath[0] || ix.listPath[1] || ix.listPath[2] {
		t.Errorf("list paths %v, want [true false false]", ix.listPath)
	}
	for q, want := range map[string]bool{"download the DICOM dataset of an image": true, "get an image's attributes": true,
		"what attributes does an image have": false, "list the attributes of an image": false} {
		f, why := ix.factor(0, ix.plan(q), true)
		if got := strings.Contains(why, "list-path"); got != want {
			t.Errorf("%q: the attributes' list demoted %v (factor %.2f: %s), want %v", q, got, f, why, want)
		}
	}
}

// TestRegularNominalization: a verb WordNet relates to no derived noun
// meets its regular nominalization ("encrypt": encryption, a word the
// table has only as a noun of its own), so "encrypt a bucket by default"
// finds the bucket's encryption settings.
func TestRegularNominalization(t *testing.T) {
	for verb, want := range map[string]string{"encrypt": "encryption", "replicate": "replication"} {
		if got := regularNominalizations(verb); !slices.Contains(got, want) {
			t.Errorf("regularNominalizations(%q) = %v, want %s", verb, got, want)
		}
	}
	if got := regularNominalizations("approve"); got != nil {
		t.Errorf("regularNominalizations(approve) = %v: WordNet already derives approval", got)
	}
	docs := []Doc{
		{Name: "s_PutBucketEncryption", AppID: "s", Description: "Sets the default encryption configuration of a bucket."},
		{Name: "s_CopyObject", AppID: "s", Description: "Copies an object. You can encrypt the copy with a key you provide; by default it keeps the source's settings."},
		{Name: "s_PutObject", AppID: "s", Description: "Adds an object to a bucket; it may be stored encrypted."},
	}
	ix := NewBM25(docs)
	hits := rankOf(t, ix, "encrypt everything in a bucket by default", 3)
	if len(hits) == 0 || docs[hits[0].Doc].Name != "s_PutBucketEncryption" {
		t.Errorf("encrypt a bucket by default: %v, want s_PutBucketEncryption first", hits)
	}
}

// TestNamedCallQueryPart: calls of one path told apart by a query part
// ("/{Bucket}#versioning", as the OpenAPI conversion of S3 writes them; "?"
// in a real request) are found by it, the path without one by its absence;
// "GET /" names the root.
func TestNamedCallQueryPart(t *testing.T) {
	docs := []Doc{
		{Name: "s3:ListBuckets", AppID: "s3", Description: "Returns a list of all buckets owned by the authenticated sender", Path: "/", Method: "GET"},
		{Name: "s3:ListObjects", AppID: "s3", Description: "Returns some or all of the objects in a bucket", Path: "/{Bucket}", Method: "GET"},
		{Name: "s3:GetBucketVersioning", AppID: "s3", Description: "Returns the versioning state of a bucket", Path: "/{Bucket}#versioning", Method: "GET"},
		{Name: "s3:GetBucketTagging", AppID: "s3", Description: "Returns the tag set associated with the bucket", Path: "/{Bucket}#tagging", Method: "GET"},
		{Name: "s3:UploadPart", AppID: "s3", Description: "Uploads a part in a multipart upload", Path: "/{Bucket}/{Key}#partNumber&uploadId", Method: "PUT"},
		{Name: "s3:PutObject", AppID: "s3", Description: "Adds an object to a bucket", Path: "/{Bucket}/{Key}", Method: "PUT"},
	}
	ix := NewBM25(docs)
	for q, want := range map[string]string{
		"GET /":                    "s3:ListBuckets",
		"GET /{Bucket}#versioning": "s3:GetBucketVersioning",
		"GET /my-bucket?tagging":   "s3:GetBucketTagging",
		"GET /{Bucket}":            "s3:ListObjects",
		"PUT /{Bucket}/{Key}#partNumber&uploadId": "s3:UploadPart",
		"PUT /b/k.txt?uploadId=7&partNumber=2":    "s3:UploadPart",
		"PUT /{Bucket}/{Key}":                     "s3:PutObject",
	} {
		hits, _ := ix.Rank(context.Background(), q, 3, nil)
		if len(hits) == 0 || docs[hits[0].Doc].Name != want {
			t.Errorf("%q: first %v, want %s", q, hits, want)
		}
	}
}

// TestNumberedThing: a read verb's singular noun followed by its number
// ("show me invoice 42") asks for that one thing, though "show" lists; a
// number before a noun ("the last 5 invoices") does not, nor does a
// request to change the thing ("close issue number 12").
func TestNumberedThing(t *testing.T) {
	docs := []Doc{
		{Name: "a_list_invoices", AppID: "a", Description: "List invoices", Method: "GET", Path: "/invoices"},
		{Name: "a_get_invoice", AppID: "a", Description: "Get an invoice", Method: "GET", Path: "/invoices/{id}", Required: 1, RequiredNames: []string{"id"}},
		{Name: "a_download_invoices", AppID: "a", Description: "Download a list of invoices as a zip file", Method: "GET", Path: "/invoices/download"},
	}
	ix := NewBM25(docs)
	for q, want := range map[string]string{"show me invoice 42": "a_get_invoice", "show the last 5 invoices": "a_list_invoices"} {
		hits := rankOf(t, ix, q, 3)
		if len(hits) == 0 || docs[hits[0].Doc].Name != want {
			t.Errorf("%q: first %v, want %s", q, hits, want)
		}
	}
	for q, want := range map[string]bool{"show me invoice 42": true, "issue number 12 in a repo": true, "the last 5 builds": false, "invoices 42": false, "pods in namespace 5": false} {
		if got := numbered(Tokenize(q)); got != want {
			t.Errorf("numbered(%q) = %v, want %v", q, got, want)
		}
	}
}

// TestCustomerContact: invoicing and CRM APIs keep their customers as
// contacts (persons, organizations); "add a private customer" finds the
// contact's create.
func TestCustomerContact(t *testing.T) {
	docs := []Doc{
		{Name: "a_contacts_persons_create", AppID: "a", Description: "Create a person. Represent a private contact", Method: "POST", Path: "/contacts/persons"},
		{Name: "a_payments_register", AppID: "a", Description: "Register a person and create them a payment mandate", Method: "POST", Path: "/payments/register"},
		{Name: "a_coupon", AppID: "a", Description: "Add coupon", Method: "POST", Path: "/subscription/coupon"},
	}
	ix := NewBM25(docs)
	for _, q := range []string{"add a private customer", "add a new client"} {
		hits := rankOf(t, ix, q, 3)
		if len(hits) == 0 || docs[hits[0].Doc].Name != "a_contacts_persons_create" {
			t.Errorf("%q: first %v, want a_contacts_persons_create", q, hits)
		}
	}
}

// TestHowMuchStatistics: "how much" and "how many" ask for a number, which
// APIs give as a total or as statistics ("Obtain statistics about
// purchases"), not as the things themselves.
func TestHowMuchStatistics(t *testing.T) {
	docs := []Doc{
		{Name: "a_app_documents_purchases_list", AppID: "a", Description: "List purchases", Method: "GET", Path: "/purchases"},
		{Name: "a_app_documents_purchases_statistics", AppID: "a", Description: "Obtain statistics about purchases", Method: "GET", Path: "/purchases/statistics"},
		{Name: "a_app_documents_purchases_original", AppID: "a", Description: "Download the purchase as pdf", Method: "GET", Path: "/purchases/{id}/original"},
		{Name: "a_app_documents_quotes_list", AppID: "a", Description: "List quotes", Method: "GET", Path: "/quotes"},
		{Name: "a_app_documents_quotes_statistics", AppID: "a", Description: "Obtain statistics about quotes", Method: "GET", Path: "/quotes/statistics"},
		{Name: "a_app_documents_quotes_get", AppID: "a", Description: "Get a quote", Method: "GET", Path: "/quotes/{id}"},
		{Name: "a_app_documents_purchases_get", AppID: "a", Description: "Get a purchase", Method: "GET", Path: "/purchases/{id}"},
		{Name: "a_app_documents_invoices_list", AppID: "a", Description: "List invoices", Method: "GET", Path: "/invoices"},
		{Name: "a_app_documents_invoices_get", AppID: "a", Description: "Get an invoice", Method: "GET", Path: "/invoices/{id}"},
		{Name: "a_app_documents_products_list", AppID: "a", Description: "List products", Method: "GET", Path: "/products"},
		{Name: "a_app_documents_persons_list", AppID: "a", Description: "List persons", Method: "GET", Path: "/persons"},
	}
	ix := NewBM25(docs)
	for q, want := range map[string]string{"how much did I spend on purchases": "a_app_documents_purchases_statistics"} {
		hits := rankOf(t, ix, q, 3)
		if len(hits) == 0 || docs[hits[0].Doc].Name != want {
			t.Errorf("%q: first %v, want %s", q, hits, want)
		}
	}
	asks := false
	for _, g := range ix.queryGroups("how many quotes did I send this quarter") {
		for _, wt := range g.terms {
			asks = asks || wt.term == "statistic"
		}
	}
	if !asks {
		t.Errorf("how many quotes: no statistic among %v", ix.queryGroups("how many quotes did I send this quarter"))
	}
}

// TestQueryPartSubresource: a path's query part names a sub-resource of
// what the path ends in ("GET /{Bucket}#tagging" reads the bucket's tag
// set), so the path does not read one thing by its parameter, and a list
// request does not demote it.
func TestQueryPartSubresource(t *testing.T) {
	docs := []Doc{
		{Name: "s3:GetBucketTagging", AppID: "s3", Description: "Returns the tag set associated with the bucket", Path: "/{Bucket}#tagging", Method: "GET"},
		{Name: "s3:GetObject", AppID: "s3", Description: "Retrieves objects", Path: "/{Bucket}/{Key}", Method: "GET"},
		{Name: "s3:ListBucketMetricsConfigurations", AppID: "s3", Description: "Lists the metrics configurations for the bucket", Path: "/{Bucket}#metrics", Method: "GET"},
	}
	ix := NewBM25(docs)
	if ix.itemPath[0] || !ix.itemPath[1] {
		t.Errorf("itemPath = %v, want [false true false]", ix.itemPath)
	}
	if !ix.listPath[2] {
		t.Errorf("listPath = %v: a list named so whose path ends in a query part lists", ix.listPath)
	}
}

// TestScopeNeedsContent: a request's scope words ("my", "I") tell the
// caller's things apart among tools that match what it asks for; alone they
// found "Get the current user" for anything the caller owns. A request made
// of scope words only ("who am I") still finds it.
func TestScopeNeedsContent(t *testing.T) {
	docs := []Doc{
		{Name: "a_account_get", AppID: "a", Description: "Get the current user's account", Method: "GET", Path: "/account"},
		{Name: "a_app_list", AppID: "a", Description: "List the apps", Method: "GET", Path: "/apps"},
		{Name: "a_purchases_list", AppID: "a", Description: "List purchases", Params: "supplier_id", Method: "GET", Path: "/purchases"},
		{Name: "a_repos_list", AppID: "a", Description: "List repositories of a user", Params: "username", Method: "GET", Path: "/users/{username}/repos"},
		{Name: "a_my_repos_list", AppID: "a", Description: "List repositories of the authenticated user", Method: "GET", Path: "/user/repos"},
	}
	ix := NewBM25(docs)
	for q, want := range map[string]string{
		"list my expenses from suppliers": "a_purchases_list",
		"list my repositories":            "a_my_repos_list",
		"who am I":                        "a_account_get",
	} {
		hits := rankOf(t, ix, q, 3)
		if len(hits) == 0 || docs[hits[0].Doc].Name != want {
			t.Errorf("%q: first %v, want %s", q, hits, want)
		}
	}
}

// TestScopeNeedsObject: the scope words count for a tool that matches the
// request's object — the last word of the noun phrase after its verb, not
// a participle that modifies it ("tasks assigned to me") —, not for one
// that matches another of its words: "list all my user pools" asks for the
// account's pools, not for the tasks in a user's My Tasks list, which match
// "user" and "my" only.
func TestScopeNeedsObject(t *testing.T) {
	docs := []Doc{
		{Name: "a_ListDevices", AppID: "a", Description: "Lists the sign-in devices that Amazon Cognito has registered to the current user.", Params: "AccessToken", Required: 1, RequiredNames: []string{"AccessToken"}},
		{Name: "a_ListUserPools", AppID: "a", Description: "Lists the user pools associated with an Amazon Web Services account.", Params: "MaxResults", Required: 1, RequiredNames: []string{"MaxResults"}},
		{Name: "a_CreateUserPool", AppID: "a", Description: "Creates a new user pool.", Params: "PoolName", Required: 1, RequiredNames: []string{"PoolName"}},
		{Name: "a_DeleteUserPool", AppID: "a", Description: "Deletes a user pool.", Params: "UserPoolId", Required: 1, RequiredNames: []string{"UserPoolId"}},
		{Name: "a_GetUser", AppID: "a", Description: "Gets the user attributes and metadata for a user.", Params: "AccessToken", Required: 1, RequiredNames: []string{"AccessToken"}},
		{Name: "a_AdminListDevices", AppID: "a", Description: "Lists devices, as an administrator.", Params: "UserPoolId Username", Required: 2, RequiredNames: []string{"UserPoolId", "Username"}},
		{Name: "b_getTasks", AppID: "b", Description: "Returns the compact task records for some filtered set of tasks.", Params: "assignee"},
		{Name: "b_getTasksForUserTaskList", AppID: "b", Description: "Returns the compact list of tasks in a user's My Tasks list.", Params: "user_task_list_gid"},
	}
	wantFirst(t, docs, map[string]string{
		"list all my user pools":  "a_ListUserPools",
		"list my sign-in devices": "a_ListDevices",
	})
	// A participle ends the object: "tasks", not "assigned", is what the
	// tool that has the caller's tasks must match.
	docs = append(docs[len(docs)-2:],
		Doc{Name: "b_getProjectsForTask", AppID: "b", Description: "Returns a compact representation of all of the projects the task is in.", Params: "task_gid"},
		Doc{Name: "b_searchTasksForWorkspace", AppID: "b", Description: "Search tasks in a workspace.", Params: "workspace_gid assigned_by.any"})
	rank := map[string]int{}
	for i, h := range rankOf(t, NewBM25(docs), "tasks assigned to me", len(docs)) {
		rank[docs[h.Doc].Name] = i + 1
	}
	if r := rank["b_getTasksForUserTaskList"]; r == 0 || r > rank["b_getTasks"] {
		t.Errorf("tasks assigned to me: ranks %v, want the caller's task list above the tasks by assignee", rank)
	}
}

// TestMethodIntent: a DELETE whose name and summary have no intent word
// ("Detach a file", "Unassign a driver") deletes, as its HTTP method says,
// and its summary's verb is what a request to remove covers.
func TestMethodIntent(t *testing.T) {
	docs := []Doc{
		{Name: "a_invoices_attach", AppID: "a", Description: "Attach a file at an invoice", Method: "POST", Path: "/invoices/{id}/attach"},
		{Name: "a_invoices_detach", AppID: "a", Description: "Detach a file at an invoice", Method: "DELETE", Path: "/invoices/{id}/attach"},
		{Name: "a_products_attach", AppID: "a", Description: "Attach a file", Method: "POST", Path: "/products/{id}/attach"},
		{Name: "a_products_detach", AppID: "a", Description: "Detach a file", Method: "DELETE", Path: "/products/{id}/attach"},
		{Name: "a_quotes_attach", AppID: "a", Description: "Attach a file at a quote", Method: "POST", Path: "/quotes/{id}/attach"},
		{Name: "a_quotes_detach", AppID: "a", Description: "Detach a file at a quote", Method: "DELETE", Path: "/quotes/{id}/attach"},
		{Name: "a_invoices_get", AppID: "a", Description: "Get an invoice", Method: "GET", Path: "/invoices/{id}"},
		{Name: "a_invoices_update", AppID: "a", Description: "Update an invoice", Method: "PUT", Path: "/invoices/{id}"},
		{Name: "a_invoices_delete", AppID: "a", Description: "Delete an invoice", Method: "DELETE", Path: "/invoices/{id}"},
		{Name: "a_files_list", AppID: "a", Description: "List files", Method: "GET", Path: "/files"},
		{Name: "a_drivers_unassign", AppID: "a", Description: "Unassign a driver from a vehicle", Method: "DELETE", Path: "/vehicles/{id}/drivers"},
		{Name: "a_drivers_assign", AppID: "a", Description: "Assign a driver to a vehicle", Method: "POST", Path: "/vehicles/{id}/drivers"},
		{Name: "a_drivers_create", AppID: "a", Description: "Create a driver", Method: "POST", Path: "/drivers"},
	}
	ix := NewBM25(docs)
	for q, want := range map[string]string{
		"remove a file from an invoice": "a_invoices_detach",
		"remove the file of a quote":    "a_quotes_detach",
		"delete a file from a product":  "a_products_detach",
		"attach a file to an invoice":   "a_invoices_attach",
	} {
		hits := rankOf(t, ix, q, 3)
		if len(hits) == 0 || docs[hits[0].Doc].Name != want {
			t.Errorf("%q: first %v, want %s", q, hits, want)
		}
	}
	// Its summary's verb is its title's verb, a delete: a request to remove
	// covers it as it covers "Delete an invoice".
	if !slices.ContainsFunc(ix.titles[1], func(slot []string) bool { return slot[0] == titleIntent(IntentDelete) }) {
		t.Errorf("Detach a file at an invoice: title %v has no deleting verb", ix.titles[1])
	}
	// A DELETE deletes: adding is not what it does.
	hits := rankOf(t, ix, "add a driver to a vehicle", 3)
	for _, h := range hits {
		if n := docs[h.Doc].Name; n == "a_drivers_unassign" {
			t.Errorf("add a driver to a vehicle: the DELETE unassign above the POST assign: %v", hits)
		} else if n == "a_drivers_assign" {
			break
		}
	}
}

// TestDomainRelativeOtherAct: a domain relative that is a verb of another
// act than the request's stands for nothing it asks: "upload" is a file's
// relative, but "download a file" or "list the files" does not ask for
// uploads (multipart upload calls ranked above the object reads).
func TestDomainRelativeOtherAct(t *testing.T) {
	docs := []Doc{
		{Name: "a_UploadPart", AppID: "a", Description: "Uploads a part in a multipart upload.", Method: "PUT", Path: "/{Bucket}/{Key}?uploadId"},
		{Name: "a_ListMultipartUploads", AppID: "a", Description: "Lists in-progress multipart uploads.", Method: "GET", Path: "/{Bucket}?uploads"},
		{Name: "a_ListParts", AppID: "a", Description: "Lists the parts that have been uploaded for a specific multipart upload.", Method: "GET", Path: "/{Bucket}/{Key}?uploadId"},
		{Name: "a_GetObject", AppID: "a", Description: "Retrieves an object and its content from a bucket.", Method: "GET", Path: "/{Bucket}/{Key}"},
		{Name: "a_ListObjects", AppID: "a", Description: "Returns the objects in a bucket.", Method: "GET", Path: "/{Bucket}"},
		{Name: "a_DeleteBucket", AppID: "a", Description: "Deletes a bucket.", Method: "DELETE", Path: "/{Bucket}"},
		{Name: "a_CreateMultipartUpload", AppID: "a", Description: "Initiates a multipart upload.", Method: "POST", Path: "/{Bucket}/{Key}?uploads"},
	}
	ix := NewBM25(docs)
	for q, want := range map[string]bool{"download a file": false, "list the files": false, "delete a file": false, "store an audio file": true} {
		upload := false
		for _, g := range ix.queryGroups(q) {
			for _, wt := range g.terms {
				upload = upload || wt.term == "upload"
			}
		}
		if upload != want {
			t.Errorf("%q: upload among the relatives %v, want %v", q, upload, want)
		}
	}
	for q, want := range map[string]string{
		"download a file from a bucket": "a_GetObject",
		"list the files in a bucket":    "a_ListObjects",
	} {
		hits := rankOf(t, ix, q, 3)
		if len(hits) == 0 || docs[hits[0].Doc].Name != want {
			t.Errorf("%q: first %v, want %s", q, hits, want)
		}
	}
}

// TestIHaveScope: what the caller has is the caller's own ("what buckets do
// I have?"), as "my buckets" says, though the "I" follows an auxiliary.
func TestIHaveScope(t *testing.T) {
	docs := []Doc{
		{Name: "a_ListBucketInventoryConfigurations", AppID: "a", Description: "Returns a list of inventory configurations for the bucket.", Method: "GET", Path: "/{Bucket}?inventory"},
		{Name: "a_ListBucketMetricsConfigurations", AppID: "a", Description: "Lists the metrics configurations for the bucket.", Method: "GET", Path: "/{Bucket}?metrics"},
		{Name: "a_ListBuckets", AppID: "a", Description: "Returns a list of all buckets owned by the authenticated sender of the request.", Method: "GET", Path: "/"},
		{Name: "a_ListObjects", AppID: "a", Description: "Returns some or all of the objects in a bucket.", Method: "GET", Path: "/{Bucket}"},
	}
	ix := NewBM25(docs)
	hits := rankOf(t, ix, "what buckets do I have?", 3)
	if len(hits) == 0 || docs[hits[0].Doc].Name != "a_ListBuckets" {
		t.Errorf("what buckets do I have?: first %v, want a_ListBuckets", hits)
	}
}

// TestLoggedInScope: "logged in" after a form of "be" names the caller as a
// scope word does, so it is no word of the request a tool must match for
// the scope words to count ("who am I logged in as?").
func TestLoggedInScope(t *testing.T) {
	docs := []Doc{
		{Name: "a_users_read", AppID: "a", Description: "Retrieve a user", Params: "user_id: the user's id, or me", Method: "GET", Path: "/users/{user_id}"},
		{Name: "a_users_list", AppID: "a", Description: "List all users", Method: "GET", Path: "/users"},
		{Name: "a_draft_institutions", AppID: "a", Description: "Retrieve the institutions of a draft. Once an authenticated user has marked their draft as affiliated with an institution, it is listed here", Method: "GET", Path: "/drafts/{draft_id}/institutions"},
		{Name: "a_drafts_list", AppID: "a", Description: "List the drafts of a user", Method: "GET", Path: "/drafts"},
		{Name: "a_nodes_list", AppID: "a", Description: "List the nodes of a user", Method: "GET", Path: "/nodes"},
		{Name: "a_files_list", AppID: "a", Description: "List the files a user uploaded", Method: "GET", Path: "/files"},
		{Name: "a_wikis_list", AppID: "a", Description: "List the wikis a user wrote", Method: "GET", Path: "/wikis"},
		{Name: "a_logs_list", AppID: "a", Description: "List the logs of a user's actions", Method: "GET", Path: "/logs"},
	}
	ix := NewBM25(docs)
	hits := rankOf(t, ix, "who am I logged in as?", 3)
	if len(hits) == 0 || docs[hits[0].Doc].Name != "a_users_read" {
		t.Errorf("who am I logged in as?: first %v, want a_users_read", hits)
	}
}

// TestMadeState: "make my project public" puts an existing thing in a
// state, as "mark … as public" would: it updates, and the adjective is the
// state the update sets. "make a new project" still creates.
func TestMadeState(t *testing.T) {
	docs := []Doc{
		{Name: "a_registrations_create", AppID: "a", Description: "Create a registration", Method: "POST", Path: "/registrations"},
		{Name: "a_registrations_forks_create", AppID: "a", Description: "Create a fork of a registration", Method: "POST", Path: "/registrations/{id}/forks"},
		{Name: "a_registrations_update", AppID: "a", Description: "Update a registration", FieldNames: "public title", States: "public", Method: "PATCH", Path: "/registrations/{id}"},
		{Name: "a_registrations_read", AppID: "a", Description: "Retrieve a registration", Method: "GET", Path: "/registrations/{id}"},
	}
	ix := NewBM25(docs)
	for q, want := range map[string]string{
		"make a registration public":  "a_registrations_update",
		"make my registration public": "a_registrations_update",
		"make a new registration":     "a_registrations_create",
	} {
		hits := rankOf(t, ix, q, 3)
		if len(hits) == 0 || docs[hits[0].Doc].Name != want {
			t.Errorf("%q: first %v, want %s", q, hits, want)
		}
	}
}

// TestCollaboratorContributor: the people who work on a thing with its
// owner are its collaborators to one API and its contributors to another;
// WordNet relates neither to the other.
func TestCollaboratorContributor(t *testing.T) {
	docs := []Doc{
		{Name: "a_nodes_list", AppID: "a", Description: "List all projects", Method: "GET", Path: "/nodes"},
		{Name: "a_nodes_contributors_list", AppID: "a", Description: "List all contributors", Method: "GET", Path: "/nodes/{node_id}/contributors"},
		{Name: "a_users_list", AppID: "a", Description: "List all users", Method: "GET", Path: "/users"},
	}
	ix := NewBM25(docs)
	hits := rankOf(t, ix, "who are the collaborators on this project?", 3)
	if len(hits) == 0 || docs[hits[0].Doc].Name != "a_nodes_contributors_list" {
		t.Errorf("first %v, want a_nodes_contributors_list", hits)
	}
}

// TestOneThingAfterVerbParticle: a preposition right after the opening verb
// is the verb's own ("look at one log entry"), so the "one" after it still
// names the thing the request reads.
func TestOneThingAfterVerbParticle(t *testing.T) {
	docs := []Doc{
		{Name: "a_registrations_logs_list", AppID: "a", Description: "List all logs of a registration", Method: "GET", Path: "/registrations/{id}/logs"},
		{Name: "a_nodes_logs_list", AppID: "a", Description: "List all logs of a node", Method: "GET", Path: "/nodes/{id}/logs"},
		{Name: "a_logs_read", AppID: "a", Description: "Retrieve a log", Method: "GET", Path: "/logs/{log_id}"},
	}
	ix := NewBM25(docs)
	hits := rankOf(t, ix, "look at one log entry", 3)
	if len(hits) == 0 || docs[hits[0].Doc].Name != "a_logs_read" {
		t.Errorf("first %v, want a_logs_read", hits)
	}
	if !oneThing(Tokenize("look at one log entry")) || oneThing(Tokenize("list pods in one namespace")) {
		t.Errorf("oneThing: \"look at one log entry\" names one thing, \"list pods in one namespace\" does not")
	}
}

// FuzzBM25Rank: a query comes from any caller of meta:search, and a tool's
// name, description and path from a tool source; whatever they hold, the
// ranking answers at most k hits of known documents with scores in (0,1],
// without a panic.
func FuzzBM25Rank(f *testing.F) {
	for _, c := range [][4]string{
		{"add a person to the address book", "crm:createContact", "Create a new contact", "/contacts"},
		{"GET /repos/{owner}/{repo}/issues", "gh:GET_repos_owner_repo_issues", "List issues.\nAll of them.", "/repos/{owner}/{repo}/issues"},
		{"what buckets do I have? make größe public, one log entry", "s3:ListBuckets", "Returns a list of all buckets owned by the sender", "/"},
		{"  \u00a0\u200b\ufffd ", "", "", "{}{}//"},
		{"delete delete delete ' \" ` - _ . : / ? ! 日本語の検索", "x:_-.", "DELETE", "/{a}{b}/{"},
	} {
		f.Add(c[0], c[1], c[2], c[3])
	}
	f.Fuzz(func(t *testing.T, query, name, desc, path string) {
		docs := append(sampleDocs(), Doc{Name: name, AppID: "x", Description: desc, Path: path, Method: "POST"})
		ix := NewBM25(docs)
		hits, err := ix.Rank(context.Background(), query, 5, nil)
		if err != nil || len(hits) > 5 {
			t.Fatalf("%d hits, %v", len(hits), err)
		}
		for _, h := range hits {
			if h.Doc < 0 || h.Doc >= len(docs) || !(h.Score > 0 && h.Score <= 1) {
				t.Fatalf("hit %+v", h)
			}
		}
	})
}

// TestListedIntents: a call whose summary opens with a list of verbs among
// which is its name's ("Creates, changes, or deletes a resource record set"
// of ChangeResourceRecordSets) does each of them, so a request to delete a
// record finds it; a read verb in the list ("Creates and returns") adds no
// intent.
func TestListedIntents(t *testing.T) {
	got := ToolIntents("ChangeResourceRecordSets", "Creates, changes, or deletes a resource record set")
	if !slices.Contains(got, IntentDelete) || !slices.Contains(got, IntentCreate) {
		t.Errorf("ToolIntents of a change that creates, changes or deletes: %v", got)
	}
	if got := ToolIntents("CreateToken", "Creates and returns a token"); len(got) != 1 || got[0] != IntentCreate {
		t.Errorf("ToolIntents of \"Creates and returns a token\": %v, want create alone", got)
	}
	if got := ToolIntents("ChangeOwner", "Deletes the old owner's grants"); len(got) != 1 || got[0] != IntentUpdate {
		t.Errorf("ToolIntents of a change whose summary names another intent only: %v, want update alone", got)
	}
	docs := []Doc{
		{Name: "a_ChangeResourceRecordSets", AppID: "a", Description: "Creates, changes, or deletes a resource record set, which contains authoritative DNS information for a domain name", Method: "POST", Path: "/hostedzone/{Id}/rrset"},
		{Name: "a_DeleteHostedZone", AppID: "a", Description: "Deletes a hosted zone. You can delete a hosted zone only if it contains only the default SOA record and NS resource record sets", Method: "DELETE", Path: "/hostedzone/{Id}"},
		{Name: "a_DeleteHealthCheck", AppID: "a", Description: "Deletes a health check, even if the health check is associated with one or more resource record sets", Method: "DELETE", Path: "/healthcheck/{Id}"},
		{Name: "a_DeleteQueryLoggingConfig", AppID: "a", Description: "Deletes a configuration for DNS query logging", Method: "DELETE", Path: "/queryloggingconfig/{Id}"},
	}
	ix := NewBM25(docs)
	hits := rankOf(t, ix, "delete a DNS record", 4)
	if len(hits) == 0 || docs[hits[0].Doc].Name != "a_ChangeResourceRecordSets" {
		t.Errorf("first %v, want a_ChangeResourceRecordSets", hits)
	}
}

// TestHostNameValue: a domain name in a request ("for my domain
// example.com") is a value the call takes, not words a tool must match: a
// description that happens to say "such as example.com" is no better for it.
func TestHostNameValue(t *testing.T) {
	for w, want := range map[string]bool{"example.com": true, "www.example.com?": true, "package.json": true, "my-app.io,": true,
		"e.g.": false, "repos.": false, "v1.2": false, "a.b": false, "end.": false} {
		if hostName(w) != want {
			t.Errorf("hostName(%q) = %v, want %v", w, !want, want)
		}
	}
	docs := []Doc{
		{Name: "a_CreateTrafficPolicy", AppID: "a", Description: "Creates a traffic policy, which you use to create multiple DNS resource record sets for one domain name (such as example.com)", Method: "POST", Path: "/trafficpolicy"},
		{Name: "a_CreateHostedZone", AppID: "a", Description: "Creates a new public or private hosted zone. You create records in a public hosted zone to define how you want to route traffic on the internet for a domain", Method: "POST", Path: "/hostedzone"},
	}
	ix := NewBM25(docs)
	hits := rankOf(t, ix, "create a DNS zone for my domain example.com", 2)
	if len(hits) == 0 || docs[hits[0].Doc].Name != "a_CreateHostedZone" {
		t.Errorf("first %v, want a_CreateHostedZone", hits)
	}
}

// TestCatalogAliases: a catalog that explains a word of its names by others
// in parentheses ("a given node (project or component)") has given its own
// vocabulary, so a request that says project finds the node calls; an
// abbreviation spelled out ("access control list (ACL)") and an act ("list
// (…)") give no alias.
func TestCatalogAliases(t *testing.T) {
	got := catalogAliases([]string{
		"Retrieves the details of a given node (project or component).",
		"Returns the access control list (ACL) of a bucket.",
		"Lists the (files, folders) of a folder.",
	}, []string{"nodes_read", "GetBucketAcl", "list_folders"})
	if !slices.Equal(got["node"], []string{"project", "component"}) || len(got) != 1 {
		t.Errorf("catalogAliases = %v, want node: project, component only", got)
	}
	docs := []Doc{
		{Name: "a_nodes_partial_update", AppID: "a", Description: "Update a node. Updates the title, description or category of a node", Method: "PATCH", Path: "/nodes/{node_id}"},
		{Name: "a_nodes_read", AppID: "a", Description: "Retrieve a node. Retrieves the details of a given node (project or component).", Method: "GET", Path: "/nodes/{node_id}"},
		{Name: "a_registrations_partial_update", AppID: "a", Description: "Update a registration. Updates a registration, the frozen copy of a project: its title or description", Method: "PATCH", Path: "/registrations/{registration_id}"},
	}
	ix := NewBM25(docs)
	hits := rankOf(t, ix, "rename a project", 3)
	if len(hits) == 0 || docs[hits[0].Doc].Name != "a_nodes_partial_update" {
		t.Errorf("first %v, want a_nodes_partial_update", hits)
	}
}

// TestNumberedExists: a request that names its thing by number ("close
// issue number 12") asks about a thing that exists, so a call that only
// creates (an issue that may be created closed) is not the answer; one that
// creates what the request's verb names ("label issue 12") still may be.
func TestNumberedExists(t *testing.T) {
	docs := []Doc{
		{Name: "a_issueCreateIssue", AppID: "a", Description: "Create an issue. If using deadline only the date will be taken into account", Method: "POST", Path: "/repos/{owner}/{repo}/issues", States: "closed"},
		{Name: "a_issueEditIssue", AppID: "a", Description: "Edit an issue. If using deadline only the date will be taken into account", Method: "PATCH", Path: "/repos/{owner}/{repo}/issues/{index}", Params: "state", FieldDocs: "the state of the issue: open or closed"},
		{Name: "a_issueAddLabel", AppID: "a", Description: "Add a label to an issue", Method: "POST", Path: "/repos/{owner}/{repo}/issues/{index}/labels"},
	}
	ix := NewBM25(docs)
	hits := rankOf(t, ix, "close issue number 12", 3)
	if len(hits) == 0 || docs[hits[0].Doc].Name != "a_issueEditIssue" {
		t.Errorf("close issue number 12: first %v, want a_issueEditIssue", hits)
	}
	hits = rankOf(t, ix, "label issue 12", 3)
	if len(hits) == 0 || docs[hits[0].Doc].Name != "a_issueAddLabel" {
		t.Errorf("label issue 12: first %v, want a_issueAddLabel", hits)
	}
}

// TestCountedCompound: what "how many" counts may be a compound whose last
// noun is plural ("how many health checks"): the question asks for a number,
// not for the list the plural would say.
func TestCountedCompound(t *testing.T) {
	toks := Tokenize("how many health checks are in my account")
	if !countedNoun(toks, 3) || countedNoun(Tokenize("how many of the jobs"), 4) {
		t.Errorf("countedNoun: \"health checks\" is counted, \"of the jobs\" is not")
	}
	docs := []Doc{
		{Name: "a_ListHealthChecks", AppID: "a", Description: "Retrieve a list of the health checks that are associated with the current account.", Method: "GET", Path: "/healthcheck"},
		{Name: "a_GetHealthCheckCount", AppID: "a", Description: "Retrieves the number of health checks that are associated with the current account.", Method: "GET", Path: "/healthcheckcount"},
		{Name: "a_DeleteHealthCheck", AppID: "a", Description: "Deletes a health check.", Method: "DELETE", Path: "/healthcheck/{HealthCheckId}"},
	}
	ix := NewBM25(docs)
	hits := rankOf(t, ix, "how many health checks are in my account?", 3)
	if len(hits) == 0 || docs[hits[0].Doc].Name != "a_GetHealthCheckCount" {
		t.Errorf("first %v, want a_GetHealthCheckCount", hits)
	}
}

// TestUnVerbDeletes: a verb "un" makes of another ("unsubscribe") whose
// base names what a call only creates (a subscription) deletes that thing;
// one whose base no call creates ("unpause") is left alone.
func TestUnVerbDeletes(t *testing.T) {
	docs := []Doc{
		{Name: "a_list_subscriptions", AppID: "a", Description: "List all subscriptions", Method: "GET", Path: "/subscriptions"},
		{Name: "a_add_subscription", AppID: "a", Description: "Add a subscription of a specific type", Method: "POST", Path: "/subscriptions"},
		{Name: "a_delete_subscription", AppID: "a", Description: "Delete subscriptions of a specific type", Method: "DELETE", Path: "/subscriptions/{subscriptionId}"},
	}
	ix := NewBM25(docs)
	hits := rankOf(t, ix, "unsubscribe from a tag", 3)
	if len(hits) == 0 || docs[hits[0].Doc].Name != "a_delete_subscription" {
		t.Errorf("unsubscribe from a tag: first %v, want a_delete_subscription", hits)
	}
	qp := ix.plan("unpause a subscription")
	if qp.families[IntentDelete] {
		t.Errorf("unpause: no call creates a pause, so the request deletes nothing")
	}
}

// TestAcronymSpelledOut: a request that spells out an acronym the catalog
// writes ("software bill of materials": sbom) meets it; initials WordNet
// knows as a word are no acronym.
func TestAcronymSpelledOut(t *testing.T) {
	docs := []Doc{
		{Name: "a_get_image_sbom_native", AppID: "a", Description: "Get image sbom in the native format", Method: "GET", Path: "/images/{imageDigest}/sboms/native"},
		{Name: "a_get_image_content_by_type_files", AppID: "a", Description: "Get the content of an image by type files", Method: "GET", Path: "/images/{imageDigest}/content/files"},
		{Name: "a_get_image_content_by_type", AppID: "a", Description: "Get the content of an image by type", Method: "GET", Path: "/images/{imageDigest}/content/{ctype}"},
	}
	ix := NewBM25(docs)
	hits := rankOf(t, ix, "download the software bill of materials of an image", 3)
	if len(hits) == 0 || docs[hits[0].Doc].Name != "a_get_image_sbom_native" {
		t.Errorf("first %v, want a_get_image_sbom_native", hits)
	}
	if g, ok := ix.acronym(Tokenize("get the type of content"), 2); ok {
		t.Errorf("type of content: acronym %v, want none", g)
	}
}

// TestPluralHeadAnyIntent: a request that names its things in the plural
// prefers the call whose name writes them in the plural, whatever it asks
// to do ("clear out old events": delete_events).
func TestPluralHeadAnyIntent(t *testing.T) {
	docs := []Doc{
		{Name: "a_delete_event", AppID: "a", Description: "Delete Event", Method: "DELETE", Path: "/events/{eventId}"},
		{Name: "a_delete_events", AppID: "a", Description: "Delete Events", Method: "DELETE", Path: "/events"},
	}
	ix := NewBM25(docs)
	for q, want := range map[string]string{"clear out old events": "a_delete_events", "delete an event": "a_delete_event"} {
		hits := rankOf(t, ix, q, 2)
		if len(hits) == 0 || docs[hits[0].Doc].Name != want {
			t.Errorf("%s: first %v, want %s", q, hits, want)
		}
	}
}

// TestShowDetailsGets: "show" lists, but "show the details of an event"
// asks for one thing's details.
func TestShowDetailsGets(t *testing.T) {
	for q, want := range map[string]Intent{"show the details of an event": IntentGet, "show me the detail of a job": IntentGet, "show the events": IntentList} {
		if got := QueryIntents(q); len(got) != 1 || got[0] != want {
			t.Errorf("%s: %v, want %v", q, got, want)
		}
	}
}

// TestAutomaticallyRule: what a request wants done "automatically" is
// done by a rule, a timer or an automation the API keeps (Discourse
// "automatically close a topic in 3 days": createTopicTimer).
func TestAutomaticallyRule(t *testing.T) {
	docs := []Doc{
		{Name: "a_createTopicTimer", AppID: "a", Description: "Create topic timer", Method: "POST", Path: "/t/{id}/timer.json"},
		{Name: "a_create_analysis_archive_rule", AppID: "a", Method: "POST", Path: "/archives/rules"},
	}
	ix := NewBM25(docs)
	found := map[string]bool{}
	for _, g := range ix.queryGroups("automatically close a topic in 3 days") {
		for _, wt := range g.terms {
			found[wt.term] = true
		}
	}
	if !found["timer"] || !found["rule"] {
		t.Errorf("automatically: terms %v, want timer and rule among them", found)
	}
}

// TestScanAnalysis: a security scan is what APIs call an analysis, and a
// CVE a vulnerability.
func TestScanAnalysis(t *testing.T) {
	docs := []Doc{
		{Name: "a_add_image", AppID: "a", Description: "Submit a new image for analysis by the engine", Method: "POST", Path: "/images"},
		{Name: "a_get_image_vulnerabilities", AppID: "a", Description: "Get vulnerabilities by type", Method: "GET", Path: "/images/{imageDigest}/vuln/{vtype}"},
	}
	ix := NewBM25(docs)
	found := map[string]bool{}
	for _, q := range []string{"scan a docker image", "list the CVEs of an image"} {
		for _, g := range ix.queryGroups(q) {
			for _, wt := range g.terms {
				found[wt.term] = true
			}
		}
	}
	if !found["analysis"] || !found["vulnerability"] {
		t.Errorf("terms %v, want analysis and vulnerability among them", found)
	}
}

// TestCancelDeletes: to cancel something is to delete it (a scheduled
// change, an import in progress): LaunchDarkly "cancel a scheduled flag
// change" finds the delete of the scheduled change, Anchore "cancel an
// import" the DELETE that invalidates the import.
func TestCancelDeletes(t *testing.T) {
	for _, q := range []string{"cancel an import", "cancel a scheduled flag change"} {
		if got := QueryIntents(q); len(got) != 1 || got[0] != IntentDelete {
			t.Errorf("%s: %v, want delete", q, got)
		}
	}
}

// TestTurnOnOff: a request to turn something on does not ask for the call
// that disables it, nor one to turn it off for the call that enables it;
// nor does a request to detach or remove ask for the call that attaches or
// associates.
func TestTurnOnOff(t *testing.T) {
	join := []Doc{
		{Name: "a_AssociateVPCWithHostedZone", AppID: "a", Description: "Associates an Amazon VPC with a private hosted zone.", Method: "POST", Path: "/hostedzone/{Id}/associatevpc"},
		{Name: "a_DisassociateVPCFromHostedZone", AppID: "a", Description: "Disassociates an Amazon Virtual Private Cloud (Amazon VPC) from an Amazon Route 53 private hosted zone. Note the following: You can't disassociate the last Amazon VPC from a private hosted zone.", Method: "POST", Path: "/hostedzone/{Id}/disassociatevpc"},
	}
	jix := NewBM25(join)
	if hits := rankOf(t, jix, "detach a VPC from a private zone", 2); len(hits) == 0 || join[hits[0].Doc].Name != "a_DisassociateVPCFromHostedZone" {
		t.Errorf("detach a VPC from a private zone: first %v, want a_DisassociateVPCFromHostedZone", hits)
	}
	docs := []Doc{
		{Name: "a_DisableHostedZoneDNSSEC", AppID: "a", Description: "Disables DNSSEC signing in a specific hosted zone.", Method: "POST", Path: "/hostedzone/{Id}/disable-dnssec"},
		{Name: "a_EnableHostedZoneDNSSEC", AppID: "a", Description: "Enables DNSSEC signing in a specific hosted zone.", Method: "POST", Path: "/hostedzone/{Id}/enable-dnssec"},
	}
	ix := NewBM25(docs)
	for q, want := range map[string]string{"turn on DNSSEC signing for a zone": "a_EnableHostedZoneDNSSEC", "turn DNSSEC signing off": "a_DisableHostedZoneDNSSEC"} {
		hits := rankOf(t, ix, q, 2)
		if len(hits) == 0 || docs[hits[0].Doc].Name != want {
			t.Errorf("%s: first %v, want %s", q, hits, want)
		}
	}
}

// TestHowLong: "how long" asks for a length or a duration ("how long are
// the analysis queues", "how long did the build take"), not for things
// described as long: the phrase stands for its terms, as "how many" does.
func TestHowLong(t *testing.T) {
	docs := []Doc{
		{Name: "a_get_service_detail", AppID: "a", Description: "System status. Get the system status including analysis queue lengths", Method: "GET", Path: "/system"},
		{Name: "a_list_long_jobs", AppID: "a", Description: "List long running analysis jobs", Method: "GET", Path: "/jobs/long"},
	}
	ix := NewBM25(docs)
	found := map[string]bool{}
	for _, g := range ix.queryGroups("how long are the analysis queues right now?") {
		for _, wt := range g.terms {
			found[wt.term] = true
		}
	}
	if !found["length"] || found["long"] {
		t.Errorf("how long: terms %v, want length and not long", found)
	}
}

// TestSpecAndValidate: "spec" is short for specification (as "config" is
// for configuration), and to validate or verify something is to check it:
// Airbyte "get the spec of a source connector" finds
// getSourceDefinitionSpecification ("Get specification for a
// SourceDefinition"), "validate the new settings of a source" reaches the
// call that checks a source's connection.
func TestSpecAndValidate(t *testing.T) {
	docs := []Doc{
		{Name: "a_getSource", AppID: "a", Description: "Get source", Method: "POST", Path: "/v1/sources/get"},
		{Name: "a_getSourceDefinition", AppID: "a", Description: "Get source", Method: "POST", Path: "/v1/source_definitions/get"},
		{Name: "a_getSourceDefinitionSpecification", AppID: "a", Description: "Get specification for a SourceDefinition.", Method: "POST", Path: "/v1/source_definition_specifications/get"},
		{Name: "a_checkConnectionToSource", AppID: "a", Description: "Check connection to the source", Method: "POST", Path: "/v1/sources/check_connection"},
	}
	ix := NewBM25(docs)
	hits, _ := ix.Rank(context.Background(), "get the spec of a source connector", 4, nil)
	if len(hits) == 0 || docs[hits[0].Doc].Name != "a_getSourceDefinitionSpecification" {
		t.Errorf("spec: top %v, want a_getSourceDefinitionSpecification", hits)
	}
	// A related term's weight is discounted by how common it is in the
	// index; WordNet relates spec to specification at a related word's
	// weight (0.09 here), the domain table at its own (0.21).
	for q, want := range map[string]struct {
		term string
		min  float64
	}{"validate a source": {"check", 0.01}, "verify a source": {"check", 0.01}, "get the spec of a source": {"specification", 0.15}} {
		w := 0.0
		for _, g := range ix.queryGroups(q) {
			for _, wt := range g.terms {
				if wt.term == want.term {
					w = max(w, wt.w)
				}
			}
		}
		if w < want.min {
			t.Errorf("%s: term %s at %.2f, want at least %.2f", q, want.term, w, want.min)
		}
	}
}

// TestTakeAwayAndTest: "take away" a grant revokes it, and to test
// something is to check it (as to validate or verify it is): Airbyte
// "take away a workspace's access to a private destination connector" 3 ->
// 1 (revokeDestinationDefinitionFromWorkspace over the grant), "test
// whether the credentials of a destination work" 8 -> 1 (the call that
// checks the connection to the destination).
func TestTakeAwayAndTest(t *testing.T) {
	ix := NewBM25([]Doc{
		{Name: "x_grantDefinition", AppID: "x", Description: "grant a private definition to a given workspace"},
		{Name: "x_revokeDefinition", AppID: "x", Description: "revoke a grant to a private definition from a given workspace"},
		{Name: "x_checkConnectionToDestination", AppID: "x", Description: "Check connection to the destination"},
		{Name: "x_tryNotification", AppID: "x", Description: "Try sending a notification"},
	})
	// (WordNet relates test to check, at a related word's weight only.)
	for _, c := range []struct{ q, term string }{
		{"take away a workspace's access to a definition", "revoke"},
		{"test whether the credentials of a destination work", "check"},
	} {
		if w := queryWeight(ix, c.q, c.term); w < domainWeight {
			t.Errorf("%q has term %q at %.2f, want %.2f", c.q, c.term, w, domainWeight)
		}
	}
}

// TestVendorSupplierProvider: a vendor, a supplier and a provider are one
// party of a purchase, named otherwise by each API (XTRF's vendors are
// `/providers`): "list all vendors" finds the providers' list, "get the
// details of a vendor invoice" the provider invoice.
func TestVendorSupplierProvider(t *testing.T) {
	ix := NewBM25([]Doc{
		{Name: "x_getAllIds_5", AppID: "x", Description: "Returns providers' internal identifiers.", Method: "GET", Path: "/providers/ids"},
		{Name: "x_getById_3", AppID: "x", Description: "Returns provider invoice details.", Method: "GET", Path: "/accounting/providers/invoices/{invoiceId}"},
		{Name: "x_listSuppliers", AppID: "x", Description: "List suppliers", Method: "GET", Path: "/suppliers"},
	})
	for _, c := range []struct{ q, term string }{
		{"list all vendors", "provider"}, {"list all vendors", "supplier"}, {"remove a supplier", "vendor"},
	} {
		if w := queryWeight(ix, c.q, c.term); w < domainWeight {
			t.Errorf("%q has term %q at %.2f, want %.2f", c.q, c.term, w, domainWeight)
		}
	}
}

// TestHowFarWhoCan: "how far along" asks for a progress, "who can" for
// permissions or access, phrases as "how many" and "how long" are (XTRF
// "how far along is a task?": getProgress, "who can see a saved view?":
// the view's permissions).
func TestHowFarWhoCan(t *testing.T) {
	docs := []Doc{
		{Name: "x_getProgress", AppID: "x", Description: "Returns progress of a given task.", Method: "GET", Path: "/tasks/{taskId}/progress"},
		{Name: "x_getPermissions", AppID: "x", Description: "Returns view's permissions.", Method: "GET", Path: "/browser/views/{viewId}/permissions"},
		{Name: "x_getTaskFiles", AppID: "x", Description: "Returns lists of files of a given task.", Method: "GET", Path: "/tasks/{taskId}/files"},
		{Name: "x_get", AppID: "x", Description: "Returns all view's information.", Method: "GET", Path: "/browser/views/{viewId}"},
		{Name: "x_getViewsBrief", AppID: "x", Description: "Returns views' brief.", Method: "GET", Path: "/browser/views/for/{className}"},
	}
	for q, want := range map[string]string{"how far along is a task?": "x_getProgress", "who can see a saved view?": "x_getPermissions"} {
		// (How far is told apart among the task's calls.)
		ds := docs
		if want == "x_getProgress" {
			ds = docs[:3]
		}
		hits, _ := NewBM25(ds).Rank(context.Background(), q, 3, nil)
		if len(hits) == 0 || ds[hits[0].Doc].Name != want {
			t.Errorf("%s: first %v, want %s", q, hits, want)
		}
	}
}

// TestWebhookSubscription: an API's webhooks are its subscriptions to
// events (XTRF `POST /subscription` "Subscribe to event", `DELETE
// /subscription/{id}` "Unsubscribe from event"): "stop getting webhook
// calls" reads subscription too (in XTRF's catalog the unsubscribe then
// comes first).
func TestWebhookSubscription(t *testing.T) {
	docs := []Doc{
		{Name: "x_unsubscribe", AppID: "x", Description: "Unsubscribe from event", Method: "DELETE", Path: "/subscription/{subscriptionId}"},
		{Name: "x_areHooksSupported", AppID: "x", Description: "This method can be used to determine if hooks are supported.", Method: "GET", Path: "/subscription/supports"},
		{Name: "x_stopSharing", AppID: "x", Description: "Stops sharing selected files with a job in a project.", Method: "PUT", Path: "/v2/jobs/{jobId}/files/stopSharing"},
		{Name: "x_delete", AppID: "x", Description: "Removes a view.", Method: "DELETE", Path: "/browser/views/{viewId}"},
	}
	// (On these four calls alone the hooks' call stays first: it names
	// hooks, the unsubscribe does not.)
	if w := queryWeight(NewBM25(docs), "stop getting webhook calls", "subscription"); w < 0.3 {
		t.Errorf("stop getting webhook calls: term subscription at %.2f, want at least 0.3", w)
	}
}

// TestEstimateQuote: an estimate is what sales APIs call a quote (XTRF
// "create an estimate for a new client request": create_7, "Creates a new
// Smart Quote").
func TestEstimateQuote(t *testing.T) {
	docs := []Doc{
		{Name: "x_create_7", AppID: "x", Description: "Creates a new Smart Quote.", Method: "POST", Path: "/v2/quotes"},
		{Name: "x_create_3", AppID: "x", Description: "Creates a new client.", Method: "POST", Path: "/customers"},
		{Name: "x_create_6", AppID: "x", Description: "Creates a new Smart Project.", Method: "POST", Path: "/v2/projects"},
	}
	hits, _ := NewBM25(docs).Rank(context.Background(), "create an estimate for a new request", 3, nil)
	if len(hits) == 0 || docs[hits[0].Doc].Name != "x_create_7" {
		t.Errorf("create an estimate: first %v, want x_create_7", hits)
	}
}

// TestListHeadUnnamed: a list request does not ask for a call whose name
// acts on a thing the request names nowhere (Airbyte "list all
// workspaces": listWorkspaces, "List all workspaces registered in the
// current Airbyte deployment", not listSourcesForWorkspace, "List sources
// for workspace", whose shorter title the request covers more of).
func TestListHeadUnnamed(t *testing.T) {
	docs := []Doc{
		{Name: "x_listSourcesForWorkspace", AppID: "x", Description: "List sources for workspace", Method: "POST", Path: "/v1/sources/list"},
		{Name: "x_listDestinationsForWorkspace", AppID: "x", Description: "List configured destinations for a workspace", Method: "POST", Path: "/v1/destinations/list"},
		{Name: "x_listWorkspaces", AppID: "x", Description: "List all workspaces registered in the current Airbyte deployment", Method: "POST", Path: "/v1/workspaces/list"},
	}
	ix := NewBM25(docs)
	// (On these three calls alone listWorkspaces comes first either way;
	// in Airbyte's 102 it was fifth.)
	if got := ix.Explain("list all workspaces", 0); !strings.Contains(got, "head-unnamed") {
		t.Errorf("list all workspaces, listSourcesForWorkspace: %s, want head-unnamed", got)
	}
	if got := ix.Explain("list all workspaces", 2); strings.Contains(got, "head-unnamed") {
		t.Errorf("list all workspaces, listWorkspaces: %s", got)
	}
	// A question is left alone: it may name what it asks about otherwise;
	// so is a request read as a list that opens with a verb no intent
	// names ("undo payments matched to invoice").
	for _, q := range []string{"which workspaces are there?", "undo workspaces"} {
		if got := ix.Explain(q, 0); strings.Contains(got, "head-unnamed") {
			t.Errorf("%s: %s", q, got)
		}
	}
}

// TestPhoneContact: a phone number is kept in a contact's details (XTRF
// "get the phone number of a vendor": getContact_3, "Returns contact of a
// given provider").
func TestPhoneContact(t *testing.T) {
	docs := []Doc{
		{Name: "x_getContact_3", AppID: "x", Description: "Returns contact of a given provider.", Method: "GET", Path: "/providers/{providerId}/contact"},
		{Name: "x_getCompetencies", AppID: "x", Description: "Returns competencies of a given provider.", Method: "GET", Path: "/providers/{providerId}/competencies"},
		{Name: "x_getAddress_1", AppID: "x", Description: "Returns address of a given provider.", Method: "GET", Path: "/providers/{providerId}/address"},
	}
	hits, _ := NewBM25(docs).Rank(context.Background(), "get the phone number of a vendor", 3, nil)
	if len(hits) == 0 || docs[hits[0].Doc].Name != "x_getContact_3" {
		t.Errorf("phone number: first %v, want x_getContact_3", hits)
	}
}

// TestOpeningIntents: "record" and "fix" name an intent only as the
// request's opening verb on an object; elsewhere they are nouns ("a DNS
// record"), and "record that …" says what happened, not the act.
func TestOpeningIntents(t *testing.T) {
	for q, want := range map[string]Intent{
		"record a payment a customer made": IntentCreate, "record a bill from a vendor": IntentCreate,
		"fix the memo on a journal entry": IntentUpdate, "correct a typo in a comment": IntentUpdate,
		"list the records of a zone": IntentList,
	} {
		if got := QueryIntents(q); len(got) != 1 || got[0] != want {
			t.Errorf("%s: %v, want %s", q, got, want)
		}
	}
	for _, q := range []string{"record that we received new stock", "DNS record for a domain"} {
		if got := QueryIntents(q); len(got) != 0 {
			t.Errorf("%s: %v, want no intent", q, got)
		}
	}
	docs := []Doc{
		{Name: "a_billsUpdate", AppID: "a", Description: "Update Bill", Method: "PATCH", Path: "/accounting/bills/{id}",
			FieldNames: "notes", FieldDocs: "Notes kept on the record."},
		{Name: "a_billsAdd", AppID: "a", Description: "Create Bill", Method: "POST", Path: "/accounting/bills"},
	}
	ix := NewBM25(docs)
	if hits := rankOf(t, ix, "record a bill from a vendor", 2); len(hits) == 0 || docs[hits[0].Doc].Name != "a_billsAdd" {
		t.Errorf("record a bill from a vendor: first %v, want a_billsAdd", hits)
	}
}

// TestDetailsAskForAll: "the details of an invoice" asks for the whole
// invoice; WordNet's detail (item, point: a part) does not meet the call of
// an invoice's items.
func TestDetailsAskForAll(t *testing.T) {
	var docs []Doc
	for _, r := range [][2]string{{"invoiceItems", "Invoice Item"}, {"invoices", "Invoice"}, {"bills", "Bill"}, {"customers", "Customer"}, {"payments", "Payment"}} {
		path := "/accounting/" + strings.ToLower(strings.ReplaceAll(r[1], " ", "-")) + "s"
		docs = append(docs,
			Doc{Name: "a_" + r[0] + "One", AppID: "a", Description: "Get " + r[1], Method: "GET", Path: path + "/{id}"},
			Doc{Name: "a_" + r[0] + "All", AppID: "a", Description: "List " + r[1] + "s", Method: "GET", Path: path},
			Doc{Name: "a_" + r[0] + "Add", AppID: "a", Description: "Create " + r[1], Method: "POST", Path: path})
	}
	ix := NewBM25(docs)
	if hits := rankOf(t, ix, "get the details of an invoice", 3); len(hits) == 0 || docs[hits[0].Doc].Name != "a_invoicesOne" {
		t.Errorf("get the details of an invoice: first %v, want a_invoicesOne", hits)
	}
}

// TestLedgerWords: a PO is a purchase order, a credit memo a credit note,
// a product an item (an invoice's, a catalog's), and an organization may
// be called a company (twentieth pass, Apideck's accounting ledger).
func TestLedgerWords(t *testing.T) {
	ix := NewBM25([]Doc{
		{Name: "a_purchaseOrdersOne", AppID: "a", Description: "Get Purchase Order", Method: "GET", Path: "/accounting/purchase-orders/{id}"},
		{Name: "a_creditNotesAdd", AppID: "a", Description: "Create Credit Note", Method: "POST", Path: "/accounting/credit-notes"},
		{Name: "a_invoiceItemsAll", AppID: "a", Description: "List Invoice Items", Method: "GET", Path: "/accounting/invoice-items"},
		{Name: "a_companyInfoOne", AppID: "a", Description: "Get company info", Method: "GET", Path: "/accounting/company-info"},
		{Name: "a_journalEntriesAdd", AppID: "a", Description: "Create Journal Entry", Method: "POST", Path: "/accounting/journal-entries", FieldNames: "memo"},
	})
	for _, c := range []struct{ q, term string }{
		{"get a PO", "purchase"}, {"issue a credit memo", "note"}, {"list the products we sell", "item"},
		{"get our organization's details", "company"},
	} {
		if w := queryWeight(ix, c.q, c.term); w == 0 {
			t.Errorf("%q lacks term %q", c.q, c.term)
		}
	}
}

// TestPossessedField: a read of what one thing has that no call acts on
// ("find a customer's billing address") is about that one thing, so the
// call that gets one customer comes before the list; what a call acts on
// ("a customer's invoices") keeps the list.
func TestPossessedField(t *testing.T) {
	docs := []Doc{
		{Name: "a_customersAll", AppID: "a", Description: "List Customers", Method: "GET", Path: "/accounting/customers"},
		{Name: "a_customersOne", AppID: "a", Description: "Get Customer", Method: "GET", Path: "/accounting/customers/{id}", Required: 1, RequiredNames: []string{"id"}},
		{Name: "a_billsAll", AppID: "a", Description: "List Bills", Method: "GET", Path: "/accounting/bills"},
		{Name: "a_invoicesAll", AppID: "a", Description: "List Invoices", Method: "GET", Path: "/accounting/invoices"},
	}
	ix := NewBM25(docs)
	if hits := rankOf(t, ix, "find a customer's billing address", 3); len(hits) == 0 || docs[hits[0].Doc].Name != "a_customersOne" {
		t.Errorf("find a customer's billing address: first %v, want a_customersOne", hits)
	}
	for q, want := range map[string]bool{
		"find a customer's billing address": true, "get the vendor's phone number for an order": true,
		"find a customer's invoices": false, "what's the customer address": false, "find customers' addresses": false,
	} {
		if got := ix.possessedField(Tokenize(q)); got != want {
			t.Errorf("possessedField(%q) = %v, want %v", q, got, want)
		}
	}
}

// TestFileObject: object storage calls a file an object ("download a file
// from a bucket": GetObject).
func TestFileObject(t *testing.T) {
	docs := []Doc{
		{Name: "s_GetObject", AppID: "s", Description: "Retrieves objects from Amazon S3.", Method: "GET", Path: "/{Bucket}/{Key}"},
		{Name: "s_GetBucketPolicy", AppID: "s", Description: "Returns the policy of a specified bucket.", Method: "GET", Path: "/{Bucket}#policy"},
		{Name: "s_PutBucketLogging", AppID: "s", Description: "Set the logging parameters for a bucket.", Method: "PUT", Path: "/{Bucket}#logging"},
	}
	ix := NewBM25(docs)
	if w := queryWeight(ix, "download a file from a bucket", "object"); w == 0 {
		t.Errorf("download a file from a bucket lacks term object")
	}
	if hits := rankOf(t, ix, "download a file from a bucket", 3); len(hits) == 0 || docs[hits[0].Doc].Name != "s_GetObject" {
		t.Errorf("download a file from a bucket: first %v, want s_GetObject", hits)
	}
}

// TestSplitDomainPhrase: a domain phrase split by the request's object
// ("log a user in", "log me out everywhere", "sign them out") means what
// the phrase means; before, its verb alone ranked the logging tools first
// (Cognito's "log a user in with their password": InitiateAuth 18th). A
// particle that opens a phrase of its own is a preposition: "log a
// message in the channel" does not log anyone in.
func TestSplitDomainPhrase(t *testing.T) {
	docs := []Doc{
		{Name: "a:InitiateAuth", AppID: "a", Description: "Initiates sign-in for a user."},
		{Name: "a:GlobalSignOut", AppID: "a", Description: "Signs out a user from all devices."},
		{Name: "a:SetLogDeliveryConfiguration", AppID: "a", Description: "Sets up the detailed activity logging of a user pool."},
		{Name: "a:WriteLogEntry", AppID: "a", Description: "Writes a message to a log channel."},
	}
	wantFirst(t, docs, map[string]string{
		"log a user in with their password": "a:InitiateAuth",
		"log me out everywhere":             "a:GlobalSignOut",
		"sign them out":                     "a:GlobalSignOut",
		"log a message in the channel":      "a:WriteLogEntry",
	})
	for toks, want := range map[string]int{"log a user in": 3, "log me out everywhere": 2, "log a message in the channel": 0, "log out": 0} {
		if got := splitPhrase(strings.Fields(toks)); got != want {
			t.Errorf("splitPhrase(%q) = %d, want %d", toks, got, want)
		}
	}
}

// TestDescriptionPhrase: a description that says a domain phrase ("Signs
// out a user", "Initiates sign-in") meets a request that says the phrase
// another way ("log out", "log in"), as a name that says it does; before,
// only names had the phrase's term. A question phrase in a description
// ("how many zones are returned") asks nothing.
func TestDescriptionPhrase(t *testing.T) {
	docs := []Doc{
		{Name: "a:InitiateAuth", AppID: "a", Description: "Initiates sign-in for a user."},
		{Name: "a:GlobalSignOut", AppID: "a", Description: "Signs out a user from all devices."},
		{Name: "a:ListUsers", AppID: "a", Description: "Lists the users of a pool."},
	}
	wantFirst(t, docs, map[string]string{"log in": "a:InitiateAuth", "log out of every device": "a:GlobalSignOut"})
	if got := phraseTerms("Signs out a user; how many zones are returned"); !slices.Equal(got, []string{"logout"}) {
		t.Errorf("phraseTerms = %v, want [logout]", got)
	}
}

// TestNamedRPCCall: an RPC-style API puts every call on one path and names
// it in the query part ("POST /#X-Amz-Target=Service.GetUser", "GET
// /?Action=DeleteAlarms"); a request that gives that call names it. Before,
// the empty path was no path and Cognito's calls named so ranked anywhere.
func TestNamedRPCCall(t *testing.T) {
	docs := []Doc{
		{Name: "a:GetUser", AppID: "a", Description: "Gets the user.", Method: "POST", Path: "/#X-Amz-Target=Service.GetUser"},
		{Name: "a:AdminGetUser", AppID: "a", Description: "Gets the user as an administrator.", Method: "POST", Path: "/#X-Amz-Target=Service.AdminGetUser"},
		{Name: "a:ListUsers", AppID: "a", Description: "Lists the users.", Method: "POST", Path: "/#X-Amz-Target=Service.ListUsers"},
		{Name: "b:DeleteAlarms", AppID: "b", Description: "Deletes alarms.", Method: "GET", Path: "/?Action=DeleteAlarms"},
		{Name: "b:PutAlarm", AppID: "b", Description: "Creates an alarm.", Method: "GET", Path: "/?Action=PutAlarm"},
	}
	wantFirst(t, docs, map[string]string{
		"POST /#X-Amz-Target=Service.GetUser":                "a:GetUser",
		"what does POST /#X-Amz-Target=Service.ListUsers do": "a:ListUsers",
		"GET /?Action=DeleteAlarms":                          "b:DeleteAlarms",
	})
	if got := queryPairsOf("uploadId&X-Amz-Target=S.Get&id={id}"); !slices.Equal(got, []string{"x-amz-target=s.get"}) {
		t.Errorf("queryPairsOf = %v", got)
	}
}

// TestCutNameFullName: a catalog cuts a long name to its length limit and
// ends it with a hash ("k_createCoreV1NamespacedServiceAccountTok_3f2a1c"),
// losing its last words — in Google's and Kubernetes' names the verb or the
// thing acted on. The words of the full name are indexed instead, and the
// full local name names the call; the cut one stays its name.
func TestCutNameFullName(t *testing.T) {
	docs := []Doc{
		{Name: "k_createCoreV1NamespacedServiceAccountTok_3f2a1c", FullName: "k_createCoreV1NamespacedServiceAccountToken", AppID: "k", Method: "POST"},
		{Name: "k_createCoreV1NamespacedServiceAccount", AppID: "k", Method: "POST"},
		{Name: "k_readCoreV1NamespacedServiceAccount", AppID: "k", Method: "GET"},
	}
	wantFirst(t, docs, map[string]string{
		"create a token for a service account":      "k_createCoreV1NamespacedServiceAccountTok_3f2a1c",
		"createCoreV1NamespacedServiceAccountToken": "k_createCoreV1NamespacedServiceAccountTok_3f2a1c",
		"create a service account":                  "k_createCoreV1NamespacedServiceAccount",
	})
}

// TestClassCourse: education APIs keep a school's classes as courses
// (Google Classroom, Canvas, Moodle); WordNet relates neither to the other.
func TestClassCourse(t *testing.T) {
	docs := []Doc{
		{Name: "e:listCourses", AppID: "e", Description: "Returns a list of courses."},
		{Name: "e:listStudents", AppID: "e", Description: "Returns a list of students of a course."},
		{Name: "e:listGrades", AppID: "e", Description: "Returns a list of grades."},
	}
	wantFirst(t, docs, map[string]string{"list all the classes": "e:listCourses"})
}

// TestKindsOfHead: a request names a thing by its kind ("delete an
// assignment": Classroom's course work, whose create and patch take a
// workType of ASSIGNMENT or SHORT_ANSWER_QUESTION). The one-word kinds that
// the calls making or editing a thing take, and that no tool's name or
// summary says, are indexed with every call on that thing; a kind of
// several words qualifies one ("other_income") and is not.
func TestKindsOfHead(t *testing.T) {
	docs := []Doc{
		{Name: "e:courses_courseWork_create", AppID: "e", Description: "Creates course work.", Kinds: "ASSIGNMENT SHORT_ANSWER_QUESTION"},
		{Name: "e:courses_courseWork_delete", AppID: "e", Description: "Deletes a course work."},
		{Name: "e:courses_delete", AppID: "e", Description: "Deletes a course."},
		{Name: "e:courses_topics_delete", AppID: "e", Description: "Deletes a topic."},
		{Name: "e:courses_answers_delete", AppID: "e", Description: "Deletes an answer."},
	}
	wantFirst(t, docs, map[string]string{"delete an assignment": "e:courses_courseWork_delete", "delete a short answer": "e:courses_answers_delete"})
}

// TestVerbParticleCompound: a verb and the particle after it are also
// read as the one word a catalog writes ("add-on": addon, "setting up":
// setup), from the verb's lemma, though the particle is a stop word.
func TestVerbParticleCompound(t *testing.T) {
	docs := []Doc{
		{Name: "a_list_addon_folders", AppID: "a", Description: "List the folders of an addon", Method: "GET", Path: "/nodes/{id}/addons/{provider}/folders"},
		{Name: "a_list_storage_folders", AppID: "a", Description: "List the folders of a storage provider", Method: "GET", Path: "/nodes/{id}/storage/{provider}/folders"},
		{Name: "a_start_token_setup", AppID: "a", Description: "Begins the setup of an authenticator token for a user", Method: "POST", Path: "/token/associate"},
		{Name: "a_start_user_job", AppID: "a", Description: "Starts a job for a user", Method: "POST", Path: "/jobs/start"},
	}
	wantFirst(t, docs, map[string]string{
		"folders of a connected storage add-on on a project": "a_list_addon_folders",
		"start setting up an authenticator app for a user":   "a_start_token_setup",
	})
}

// TestTokenAuthorization: APIs keep the tokens they issue as authorizations
// (InfluxDB's /authorizations, GitHub's OAuth authorizations), and an agent
// asks for a token.
func TestTokenAuthorization(t *testing.T) {
	docs := []Doc{
		{Name: "m:GetAuthorizations", AppID: "m", Description: "List all authorizations"},
		{Name: "m:GetBuckets", AppID: "m", Description: "List all buckets"},
		{Name: "m:GetOrgsIDSecrets", AppID: "m", Description: "List all secret keys for an organization"},
	}
	wantFirst(t, docs, map[string]string{"list all the API tokens": "m:GetAuthorizations"})
}

// TestPanelCell: a dashboard is made of panels (Grafana), widgets (Datadog)
// or cells (InfluxDB); an agent says panel or widget for any of them.
func TestPanelCell(t *testing.T) {
	docs := []Doc{
		{Name: "m:PostDashboards", AppID: "m", Description: "Create a dashboard"},
		{Name: "m:PostDashboardsIDCells", AppID: "m", Description: "Create a dashboard cell"},
		{Name: "m:PostDashboardsIDLabels", AppID: "m", Description: "Add a label to a dashboard"},
	}
	wantFirst(t, docs, map[string]string{"add a panel to a dashboard": "m:PostDashboardsIDCells", "add a widget to a dashboard": "m:PostDashboardsIDCells"})
}

// TestExecutionRun: one execution of a task, job or workflow is what APIs
// call a run (Airflow's DAG runs, InfluxDB's task runs, CI runs).
func TestExecutionRun(t *testing.T) {
	docs := []Doc{
		{Name: "m:GetTasks", AppID: "m", Description: "List all tasks", Path: "/tasks", Method: "GET"},
		{Name: "m:GetTasksIDRuns", AppID: "m", Description: "List runs for a task", Path: "/tasks/{taskID}/runs", Method: "GET", Required: 1, RequiredNames: []string{"taskID"}},
		{Name: "m:GetTasksIDLogs", AppID: "m", Description: "Retrieve all logs for a task", Path: "/tasks/{taskID}/logs", Method: "GET", Required: 1, RequiredNames: []string{"taskID"}},
	}
	wantFirst(t, docs, map[string]string{"list the executions of a task": "m:GetTasksIDRuns"})
}

// TestAdminOwner: who administers a thing is its owner in many APIs
// (InfluxDB's and Gitea's owners); an agent asks for an admin.
func TestAdminOwner(t *testing.T) {
	docs := []Doc{
		{Name: "m:PostOrgsIDMembers", AppID: "m", Description: "Add a member to an organization", Path: "/orgs/{orgID}/members", Method: "POST", Required: 1, RequiredNames: []string{"orgID"}},
		{Name: "m:PostOrgsIDOwners", AppID: "m", Description: "Add an owner to an organization", Path: "/orgs/{orgID}/owners", Method: "POST", Required: 1, RequiredNames: []string{"orgID"}},
		{Name: "m:PostOrgs", AppID: "m", Description: "Create an organization", Path: "/orgs", Method: "POST"},
	}
	wantFirst(t, docs, map[string]string{"add an admin to the organization": "m:PostOrgsIDOwners"})
}

// TestNoticeIsNoSummary: a description that opens with a notice ("**Note:**
// Environment variable keys will soon be moved …", Netlify's site calls) has
// no summary: the notice's words do not make the tool's title.
func TestNoticeIsNoSummary(t *testing.T) {
	note := "**Note:** Environment variable keys and values will soon be moved from `build_settings.env` to a new endpoint. Please use [getEnvVars](#getEnvVars) to retrieve site environment variables."
	docs := []Doc{
		{Name: "m:listSites", AppID: "m", Description: note, Path: "/sites", Method: "GET"},
		{Name: "m:listSiteFiles", AppID: "m", Path: "/sites/{site_id}/files", Method: "GET", Required: 1, RequiredNames: []string{"site_id"}},
		{Name: "m:listSiteForms", AppID: "m", Path: "/sites/{site_id}/forms", Method: "GET", Required: 1, RequiredNames: []string{"site_id"}},
		{Name: "m:getEnvVars", AppID: "m", Description: "Returns all environment variables for an account or site.", Path: "/accounts/{account_id}/env", Method: "GET"},
	}
	wantFirst(t, docs, map[string]string{"which sites do I have": "m:listSites"})
}

// TestWebsiteSite: hosting APIs keep websites as sites.
func TestWebsiteSite(t *testing.T) {
	docs := []Doc{
		{Name: "m:deleteDeploy", AppID: "m", Path: "/deploys/{deploy_id}", Method: "DELETE", Required: 1, RequiredNames: []string{"deploy_id"}},
		{Name: "m:deleteHook", AppID: "m", Path: "/hooks/{hook_id}", Method: "DELETE", Required: 1, RequiredNames: []string{"hook_id"}},
		{Name: "m:deleteSite", AppID: "m", Path: "/sites/{site_id}", Method: "DELETE", Required: 1, RequiredNames: []string{"site_id"}},
		{Name: "m:listAccountsForUser", AppID: "m", Path: "/accounts", Method: "GET"},
		{Name: "m:listDeployKeys", AppID: "m", Path: "/deploy_keys", Method: "GET"},
		{Name: "m:listSites", AppID: "m", Path: "/sites", Method: "GET"},
	}
	wantFirst(t, docs, map[string]string{"delete a website I no longer need": "m:deleteSite", "list all my websites": "m:listSites"})
}

// TestTeamAccount: hosting and SaaS APIs keep a team as an account (Netlify's
// accounts are its teams, as Vercel's and Heroku's teams are accounts).
func TestTeamAccount(t *testing.T) {
	docs := []Doc{
		{Name: "m:getCurrentUser", AppID: "m", Path: "/user", Method: "GET"},
		{Name: "m:listAccountsForUser", AppID: "m", Path: "/accounts", Method: "GET"},
		{Name: "m:cancelAccount", AppID: "m", Path: "/accounts/{account_id}", Method: "DELETE", Required: 1, RequiredNames: []string{"account_id"}},
		{Name: "m:cancelSiteDeploy", AppID: "m", Path: "/deploys/{deploy_id}/cancel", Method: "POST", Required: 1, RequiredNames: []string{"deploy_id"}},
		{Name: "m:createSiteInTeam", AppID: "m", Path: "/{account_slug}/sites", Method: "POST", Required: 1, RequiredNames: []string{"account_slug"}},
		{Name: "m:listMembersForAccount", AppID: "m", Path: "/{account_slug}/members", Method: "GET", Required: 1, RequiredNames: []string{"account_slug"}},
	}
	wantFirst(t, docs, map[string]string{"list the teams I belong to": "m:listAccountsForUser", "cancel my team's subscription": "m:cancelAccount"})
}

// TestNotificationHook: APIs keep the notifications they send out as hooks
// (Netlify's deploy notifications, GitLab's and Bitbucket's webhooks).
func TestNotificationHook(t *testing.T) {
	docs := []Doc{
		{Name: "m:deleteDeploy", AppID: "m", Path: "/deploys/{deploy_id}", Method: "DELETE", Required: 1, RequiredNames: []string{"deploy_id"}},
		{Name: "m:deleteDeployKey", AppID: "m", Path: "/deploy_keys/{key_id}", Method: "DELETE", Required: 1, RequiredNames: []string{"key_id"}},
		{Name: "m:deleteHook", AppID: "m", Path: "/hooks/{hook_id}", Method: "DELETE", Required: 1, RequiredNames: []string{"hook_id"}},
		{Name: "m:listHookTypes", AppID: "m", Path: "/hooks/types", Method: "GET"},
		{Name: "m:listSiteForms", AppID: "m", Path: "/sites/{site_id}/forms", Method: "GET", Required: 1, RequiredNames: []string{"site_id"}},
	}
	wantFirst(t, docs, map[string]string{"what kinds of notifications can I set up": "m:listHookTypes"})
}

// TestPinLock: pinning a deploy or a version keeps it, which APIs call
// locking it (Netlify's lockDeploy).
func TestPinLock(t *testing.T) {
	docs := []Doc{
		{Name: "m:getCurrentUser", AppID: "m", Path: "/user", Method: "GET"},
		{Name: "m:listSiteDeploys", AppID: "m", Path: "/sites/{site_id}/deploys", Method: "GET", Required: 1, RequiredNames: []string{"site_id"}, Params: "production branch"},
		{Name: "m:lockDeploy", AppID: "m", Path: "/deploys/{deploy_id}/lock", Method: "POST", Required: 1, RequiredNames: []string{"deploy_id"}},
		{Name: "m:unlockDeploy", AppID: "m", Path: "/deploys/{deploy_id}/unlock", Method: "POST", Required: 1, RequiredNames: []string{"deploy_id"}},
	}
	wantFirst(t, docs, map[string]string{"pin production to the current deploy": "m:lockDeploy"})
}

// TestScriptSnippet: a script injected into a site's pages is a snippet.
func TestScriptSnippet(t *testing.T) {
	docs := []Doc{
		{Name: "m:listSiteForms", AppID: "m", Path: "/sites/{site_id}/forms", Method: "GET", Required: 1, RequiredNames: []string{"site_id"}},
		{Name: "m:listSiteSubmissions", AppID: "m", Path: "/sites/{site_id}/submissions", Method: "GET", Required: 1, RequiredNames: []string{"site_id"}},
		{Name: "m:createSiteSnippet", AppID: "m", Path: "/sites/{site_id}/snippets", Method: "POST", Required: 1, RequiredNames: []string{"site_id"}},
		{Name: "m:listSiteSnippets", AppID: "m", Path: "/sites/{site_id}/snippets", Method: "GET", Required: 1, RequiredNames: []string{"site_id"}},
		{Name: "m:deleteSiteSnippet", AppID: "m", Path: "/sites/{site_id}/snippets/{snippet_id}", Method: "DELETE", Required: 2, RequiredNames: []string{"site_id", "snippet_id"}},
		{Name: "m:deleteSiteForm", AppID: "m", Path: "/sites/{site_id}/forms/{form_id}", Method: "DELETE", Required: 2, RequiredNames: []string{"site_id", "form_id"}},
	}
	wantFirst(t, docs, map[string]string{"add an analytics script to my site": "m:createSiteSnippet", "which scripts run on my site": "m:listSiteSnippets", "remove a script from my site": "m:deleteSiteSnippet"})
}

// TestPipelineBuild: a CI pipeline's run is a build (Jenkins, Travis CI,
// CircleCI, Netlify).
func TestPipelineBuild(t *testing.T) {
	docs := []Doc{
		{Name: "m:listSiteFiles", AppID: "m", Path: "/sites/{site_id}/files", Method: "GET", Required: 1, RequiredNames: []string{"site_id"}},
		{Name: "m:listSiteForms", AppID: "m", Path: "/sites/{site_id}/forms", Method: "GET", Required: 1, RequiredNames: []string{"site_id"}},
		{Name: "m:listSiteBuilds", AppID: "m", Path: "/sites/{site_id}/builds", Method: "GET", Required: 1, RequiredNames: []string{"site_id"}},
	}
	wantFirst(t, docs, map[string]string{"show the pipeline runs of a site": "m:listSiteBuilds"})
}

// TestHyphenatedJoined: a hyphenated pair the catalog writes as one word
// ("add-on": addon) is that word, not the verb "add" and a word "ons".
func TestHyphenatedJoined(t *testing.T) {
	docs := []Doc{
		{Name: "m:addMemberToAccount", AppID: "m", Path: "/{account_slug}/members", Method: "POST", Required: 1, RequiredNames: []string{"account_slug"}},
		{Name: "m:createDeployKey", AppID: "m", Path: "/deploy_keys", Method: "POST"},
		{Name: "m:createServiceInstance", AppID: "m", Path: "/sites/{site_id}/services/{addon}/instances", Method: "POST", Required: 2, RequiredNames: []string{"site_id", "addon"}, Params: "site_id addon"},
	}
	wantFirst(t, docs, map[string]string{"install an add-on": "m:createServiceInstance"})
}

// TestAddonService: an add-on is a service, plugin, extension or
// integration (Netlify's and Heroku's add-on services).
func TestAddonService(t *testing.T) {
	docs := []Doc{
		{Name: "m:listSites", AppID: "m", Path: "/sites", Method: "GET"},
		{Name: "m:listSiteFiles", AppID: "m", Path: "/sites/{site_id}/files", Method: "GET", Required: 1, RequiredNames: []string{"site_id"}},
		{Name: "m:showService", AppID: "m", Path: "/services/{addonName}", Method: "GET", Required: 1, RequiredNames: []string{"addonName"}, Params: "addonName"},
		{Name: "m:listServiceInstancesForSite", AppID: "m", Path: "/sites/{site_id}/service-instances", Method: "GET", Required: 1, RequiredNames: []string{"site_id"}},
	}
	wantFirst(t, docs, map[string]string{"list the add-ons installed on a site": "m:listServiceInstancesForSite"})
}

// TestDomainZone: a domain's DNS is kept as a zone (Netlify's DNS zones,
// Route 53's hosted zones, Cloudflare's zones).
func TestDomainZone(t *testing.T) {
	docs := []Doc{
		{Name: "m:createDnsRecord", AppID: "m", Path: "/dns_zones/{zone_id}/dns_records", Method: "POST", Required: 1, RequiredNames: []string{"zone_id"}},
		{Name: "m:createDnsZone", AppID: "m", Path: "/dns_zones", Method: "POST"},
		{Name: "m:configureDNSForSite", AppID: "m", Path: "/sites/{site_id}/dns", Method: "PUT", Required: 1, RequiredNames: []string{"site_id"}},
	}
	wantFirst(t, docs, map[string]string{"host the DNS of a new domain": "m:createDnsZone"})
}

// TestReleaseDeploy: a release of a site or an app is a deploy (Netlify's
// and Vercel's deploys, Heroku's releases).
func TestReleaseDeploy(t *testing.T) {
	docs := []Doc{
		{Name: "m:listSites", AppID: "m", Path: "/sites", Method: "GET"},
		{Name: "m:listSiteFiles", AppID: "m", Path: "/sites/{site_id}/files", Method: "GET", Required: 1, RequiredNames: []string{"site_id"}},
		{Name: "m:listSiteDeploys", AppID: "m", Path: "/sites/{site_id}/deploys", Method: "GET", Required: 1, RequiredNames: []string{"site_id"}},
		{Name: "m:listSiteForms", AppID: "m", Path: "/sites/{site_id}/forms", Method: "GET", Required: 1, RequiredNames: []string{"site_id"}},
	}
	wantFirst(t, docs, map[string]string{"list the recent releases of a site": "m:listSiteDeploys"})
}

// TestVarVariable: a var is a variable ("env var", "config var").
func TestVarVariable(t *testing.T) {
	docs := []Doc{
		{Name: "m:getEnvVariable", AppID: "m", Description: "Returns an individual environment variable.", Path: "/accounts/{account_id}/variables/{key}", Method: "GET", Required: 2, RequiredNames: []string{"account_id", "key"}},
		{Name: "m:listEnvironments", AppID: "m", Description: "Returns the environments of a project.", Path: "/environments", Method: "GET"},
		{Name: "m:getVersion", AppID: "m", Description: "Returns one version of a project.", Path: "/versions/{version_id}", Method: "GET", Required: 1, RequiredNames: []string{"version_id"}},
	}
	wantFirst(t, docs, map[string]string{"read one var": "m:getEnvVariable"})
}

// TestSharedSummaryIsNoSummary: a summary that a twentieth of a catalog's
// tools open with word for word ("Inserts a new resource into this
// collection.", a generated document's) says nothing of any one of them: the
// tool's title is its name's words, so that a request naming the thing is not
// held to cover "resource" and "collection" too (YouTube's "upload a new
// video to my channel" ranked the live stream's insert, whose summary is its
// own, over the video's).
func TestSharedSummaryIsNoSummary(t *testing.T) {
	insert := "Inserts a new resource into this collection."
	docs := []Doc{
		{Name: "m:youtube.videos.insert", AppID: "m", Description: insert, Path: "/youtube/v3/videos", Method: "POST"},
		{Name: "m:youtube.playlists.insert", AppID: "m", Description: insert, Path: "/youtube/v3/playlists", Method: "POST"},
		{Name: "m:youtube.comments.insert", AppID: "m", Description: insert, Path: "/youtube/v3/comments", Method: "POST"},
		{Name: "m:youtube.liveStreams.insert", AppID: "m", Description: "Inserts a new stream for the authenticated user.", Path: "/youtube/v3/liveStreams", Method: "POST"},
	}
	ix := NewBM25(docs)
	has := func(doc int, word string) bool {
		for _, slot := range ix.titles[doc] {
			if slices.Contains(slot, word) {
				return true
			}
		}
		return false
	}
	if has(0, "resource") || has(0, "collection") || !has(0, "video") {
		t.Errorf("title of %s: %v, want the name's words only", docs[0].Name, ix.titles[0])
	}
	if !has(3, "stream") || !has(3, "user") {
		t.Errorf("title of %s: %v, want its own summary's words", docs[3].Name, ix.titles[3])
	}
}

// TestSubtitleCaption: subtitles are captions (YouTube's caption tracks,
// Vimeo's and Mux's text tracks).
func TestSubtitleCaption(t *testing.T) {
	docs := []Doc{
		{Name: "m:youtube.captions.insert", AppID: "m", Path: "/youtube/v3/captions", Method: "POST", FieldNames: "snippet videoId language name"},
		{Name: "m:youtube.captions.update", AppID: "m", Path: "/youtube/v3/captions", Method: "PUT", FieldNames: "snippet videoId language name"},
		{Name: "m:youtube.videos.insert", AppID: "m", Path: "/youtube/v3/videos", Method: "POST", FieldNames: "snippet title description tags defaultLanguage"},
		{Name: "m:youtube.videos.update", AppID: "m", Path: "/youtube/v3/videos", Method: "PUT", FieldNames: "snippet title description tags defaultLanguage"},
		{Name: "m:youtube.playlistItems.insert", AppID: "m", Path: "/youtube/v3/playlistItems", Method: "POST", FieldNames: "snippet playlistId resourceId videoId"},
	}
	wantFirst(t, docs, map[string]string{"upload subtitles for my video": "m:youtube.captions.insert", "fix a typo in a subtitle": "m:youtube.captions.update"})
}

// TestCoverPreviewThumbnail: a video's cover or preview picture is its
// thumbnail (YouTube's, Vimeo's and Mux's thumbnails).
func TestCoverPreviewThumbnail(t *testing.T) {
	docs := []Doc{
		{Name: "m:youtube.thumbnails.set", AppID: "m", Description: "As this is not an insert in a strict sense (it supports uploading/setting of a thumbnail for multiple videos, which doesn't result in creation of a single resource), use the custom verb here.", Path: "/youtube/v3/thumbnails/set", Method: "POST", Params: "videoId"},
		{Name: "m:youtube.watermarks.set", AppID: "m", Description: "Allows upload of watermark image and setting it for a channel.", Path: "/youtube/v3/watermarks/set", Method: "POST", Params: "channelId"},
		{Name: "m:youtube.playlistImages.update", AppID: "m", Path: "/youtube/v3/playlistImages", Method: "PUT", FieldNames: "snippet playlistId type"},
		{Name: "m:youtube.channels.update", AppID: "m", Path: "/youtube/v3/channels", Method: "PUT", FieldNames: "brandingSettings image bannerExternalUrl"},
	}
	wantFirst(t, docs, map[string]string{"set a custom cover image for my video": "m:youtube.thumbnails.set", "replace the preview picture of a clip": "m:youtube.thumbnails.set"})
}

// TestLikeRating: liking or disliking a thing rates it (YouTube's video
// ratings, "like" and "dislike"; Spotify's and Vimeo's likes).
func TestLikeRating(t *testing.T) {
	docs := []Doc{
		{Name: "m:youtube.videos.list", AppID: "m", Path: "/youtube/v3/videos", Method: "GET", Params: "id chart myRating regionCode", EnumValues: "mostPopular like dislike"},
		{Name: "m:youtube.videos.getRating", AppID: "m", Description: "Retrieves the ratings that the authorized user gave to a list of specified videos.", Path: "/youtube/v3/videos/getRating", Method: "GET", Params: "id"},
		{Name: "m:youtube.videoCategories.list", AppID: "m", Path: "/youtube/v3/videoCategories", Method: "GET"},
		{Name: "m:youtube.search.list", AppID: "m", Description: "Retrieves a list of search resources", Path: "/youtube/v3/search", Method: "GET"},
	}
	ix := NewBM25(docs)
	hits := rankOf(t, ix, "did I like these videos already", 4)
	for i, h := range hits {
		if docs[h.Doc].Name == "m:youtube.videos.getRating" {
			if i > 1 {
				t.Errorf("getRating ranked %d: %v", i+1, hits)
			}
			return
		}
	}
	t.Errorf("getRating not found: %v", hits)
}

// TestThumbsUpLike: a thumbs up is a like, a thumbs down a dislike: a
// rating or a reaction (YouTube's video ratings, GitHub's +1 reactions).
func TestThumbsUpLike(t *testing.T) {
	docs := []Doc{
		{Name: "m:youtube.videos.rate", AppID: "m", Description: "Adds a like or dislike rating to a video or removes a rating from a video.", Path: "/youtube/v3/videos/rate", Method: "POST", Params: "id rating"},
		{Name: "m:youtube.videos.getRating", AppID: "m", Description: "Retrieves the ratings that the authorized user gave to a list of specified videos.", Path: "/youtube/v3/videos/getRating", Method: "GET", Params: "id"},
		{Name: "m:youtube.videos.insert", AppID: "m", Path: "/youtube/v3/videos", Method: "POST"},
		{Name: "m:youtube.videos.update", AppID: "m", Path: "/youtube/v3/videos", Method: "PUT"},
	}
	wantFirst(t, docs, map[string]string{"give a video a thumbs up": "m:youtube.videos.rate", "thumbs down this video": "m:youtube.videos.rate"})
}

// TestFlagReport: flagging a thing reports it (YouTube's abuse reports,
// GitHub's reported content).
func TestFlagReport(t *testing.T) {
	docs := []Doc{
		{Name: "m:youtube.videos.reportAbuse", AppID: "m", Description: "Report abuse for a video.", Path: "/youtube/v3/videos/reportAbuse", Method: "POST", FieldNames: "videoId reasonId comments"},
		{Name: "m:youtube.comments.markAsSpam", AppID: "m", Description: "Expresses the caller's opinion that one or more comments should be flagged as spam.", Path: "/youtube/v3/comments/markAsSpam", Method: "POST", Params: "id"},
		{Name: "m:youtube.videos.insert", AppID: "m", Path: "/youtube/v3/videos", Method: "POST", FieldDocs: "Whether the video is inappropriate for children."},
		{Name: "m:youtube.videos.update", AppID: "m", Path: "/youtube/v3/videos", Method: "PUT", FieldDocs: "Whether the video is inappropriate for children."},
	}
	wantFirst(t, docs, map[string]string{"flag a video as inappropriate": "m:youtube.videos.reportAbuse"})
}

// TestGenreCategory: a genre is a category (YouTube's video categories).
func TestGenreCategory(t *testing.T) {
	docs := []Doc{
		{Name: "m:youtube.videoCategories.list", AppID: "m", Path: "/youtube/v3/videoCategories", Method: "GET", Params: "id regionCode"},
		{Name: "m:youtube.videos.list", AppID: "m", Path: "/youtube/v3/videos", Method: "GET", Params: "id chart videoCategoryId"},
		{Name: "m:youtube.search.list", AppID: "m", Description: "Retrieves a list of search resources", Path: "/youtube/v3/search", Method: "GET", Params: "q type videoCategoryId", FieldDocs: "Sort the results by content kind."},
	}
	wantFirst(t, docs, map[string]string{"list the genres a video can be filed under": "m:youtube.videoCategories.list"})
}

// TestConnectBind: to connect one thing to another is to bind, link or
// attach it (YouTube binds a broadcast to a stream).
func TestConnectBind(t *testing.T) {
	docs := []Doc{
		{Name: "m:youtube.liveBroadcasts.bind", AppID: "m", Description: "Bind a broadcast to a stream.", Path: "/youtube/v3/liveBroadcasts/bind", Method: "POST", Params: "id streamId"},
		{Name: "m:youtube.liveBroadcasts.insert", AppID: "m", Description: "Inserts a new stream for the authenticated user.", Path: "/youtube/v3/liveBroadcasts", Method: "POST", FieldNames: "snippet title scheduledStartTime contentDetails boundStreamId"},
		{Name: "m:youtube.liveBroadcasts.update", AppID: "m", Description: "Updates an existing broadcast for the authenticated user.", Path: "/youtube/v3/liveBroadcasts", Method: "PUT", FieldNames: "snippet title scheduledStartTime contentDetails boundStreamId"},
		{Name: "m:youtube.liveStreams.list", AppID: "m", Path: "/youtube/v3/liveStreams", Method: "GET"},
		{Name: "m:youtube.videos.list", AppID: "m", Path: "/youtube/v3/videos", Method: "GET"},
		{Name: "m:youtube.playlists.list", AppID: "m", Path: "/youtube/v3/playlists", Method: "GET"},
		{Name: "m:youtube.comments.list", AppID: "m", Path: "/youtube/v3/comments", Method: "GET"},
		{Name: "m:youtube.captions.list", AppID: "m", Path: "/youtube/v3/captions", Method: "GET"},
		{Name: "m:youtube.channels.list", AppID: "m", Path: "/youtube/v3/channels", Method: "GET"},
	}
	wantFirst(t, docs, map[string]string{"connect a broadcast to my encoder's stream": "m:youtube.liveBroadcasts.bind"})
}

// TestApproveModeration: approving held comments or posts is moderation
// (YouTube's comment moderation status, Discourse's review queue).
func TestApproveModeration(t *testing.T) {
	docs := []Doc{
		{Name: "m:youtube.comments.setModerationStatus", AppID: "m", Description: "Sets the moderation status of one or more comments.", Path: "/youtube/v3/comments/setModerationStatus", Method: "POST", Params: "id moderationStatus banAuthor", EnumValues: "heldForReview published rejected"},
		{Name: "m:youtube.comments.insert", AppID: "m", Path: "/youtube/v3/comments", Method: "POST", FieldNames: "snippet textOriginal moderationStatus"},
		{Name: "m:youtube.comments.update", AppID: "m", Path: "/youtube/v3/comments", Method: "PUT", FieldNames: "snippet textOriginal moderationStatus"},
		{Name: "m:youtube.comments.list", AppID: "m", Path: "/youtube/v3/comments", Method: "GET", Params: "id parentId"},
	}
	wantFirst(t, docs, map[string]string{"approve a comment": "m:youtube.comments.setModerationStatus"})
}

// TestSubscribeCreates: to subscribe creates a subscription (YouTube's
// subscriptions, Asana's webhooks, Anchore's subscriptions), as
// unsubscribing deletes one.
func TestSubscribeCreates(t *testing.T) {
	docs := []Doc{
		{Name: "m:youtube.subscriptions.insert", AppID: "m", Path: "/youtube/v3/subscriptions", Method: "POST", FieldNames: "snippet resourceId channelId"},
		{Name: "m:youtube.subscriptions.list", AppID: "m", Path: "/youtube/v3/subscriptions", Method: "GET", Params: "channelId forChannelId mine mySubscribers"},
		{Name: "m:youtube.subscriptions.delete", AppID: "m", Path: "/youtube/v3/subscriptions", Method: "DELETE", Params: "id"},
		{Name: "m:youtube.channels.update", AppID: "m", Path: "/youtube/v3/channels", Method: "PUT"},
	}
	wantFirst(t, docs, map[string]string{"subscribe to a channel": "m:youtube.subscriptions.insert"})
}

// TestReplyCreates: to reply creates a comment or a post (YouTube's
// comments, Discourse's posts in a topic).
func TestReplyCreates(t *testing.T) {
	docs := []Doc{
		{Name: "m:youtube.comments.insert", AppID: "m", Path: "/youtube/v3/comments", Method: "POST", FieldNames: "snippet parentId textOriginal"},
		{Name: "m:youtube.comments.list", AppID: "m", Path: "/youtube/v3/comments", Method: "GET", Params: "id parentId"},
		{Name: "m:youtube.comments.update", AppID: "m", Path: "/youtube/v3/comments", Method: "PUT", FieldNames: "snippet parentId textOriginal"},
		{Name: "m:youtube.commentThreads.list", AppID: "m", Path: "/youtube/v3/commentThreads", Method: "GET", Params: "videoId", FieldDocs: "The replies to the comment."},
	}
	wantFirst(t, docs, map[string]string{"reply to a comment": "m:youtube.comments.insert"})
}

// TestLatelyActivity: what a thing has done lately is its recent activity
// (YouTube's and GitHub's activity feeds).
func TestLatelyActivity(t *testing.T) {
	docs := []Doc{
		{Name: "m:youtube.activities.list", AppID: "m", Path: "/youtube/v3/activities", Method: "GET", Params: "channelId mine publishedAfter"},
		{Name: "m:youtube.channels.list", AppID: "m", Path: "/youtube/v3/channels", Method: "GET", Params: "id forHandle mine"},
		{Name: "m:youtube.channelSections.list", AppID: "m", Path: "/youtube/v3/channelSections", Method: "GET", Params: "channelId mine"},
		{Name: "m:youtube.search.list", AppID: "m", Description: "Retrieves a list of search resources", Path: "/youtube/v3/search", Method: "GET", Params: "q channelId"},
		{Name: "m:youtube.channelSections.insert", AppID: "m", Path: "/youtube/v3/channelSections", Method: "POST", FieldNames: "snippet channelId"},
		{Name: "m:youtube.channels.update", AppID: "m", Path: "/youtube/v3/channels", Method: "PUT"},
		{Name: "m:youtube.videos.list", AppID: "m", Path: "/youtube/v3/videos", Method: "GET"},
		{Name: "m:youtube.playlists.list", AppID: "m", Path: "/youtube/v3/playlists", Method: "GET", Params: "channelId mine"},
		{Name: "m:youtube.comments.list", AppID: "m", Path: "/youtube/v3/comments", Method: "GET"},
	}
	wantFirst(t, docs, map[string]string{"what have they been up to lately": "m:youtube.activities.list"})
}

// TestHideModeration: hiding a comment or a post is moderation (YouTube's
// comment moderation status, forums' hidden posts).
func TestHideModeration(t *testing.T) {
	docs := []Doc{
		{Name: "m:youtube.comments.setModerationStatus", AppID: "m", Description: "Sets the moderation status of one or more comments.", Path: "/youtube/v3/comments/setModerationStatus", Method: "POST", Params: "id moderationStatus banAuthor", EnumValues: "heldForReview published rejected"},
		{Name: "m:youtube.comments.insert", AppID: "m", Path: "/youtube/v3/comments", Method: "POST", FieldNames: "snippet textOriginal authorDisplayName"},
		{Name: "m:youtube.comments.update", AppID: "m", Path: "/youtube/v3/comments", Method: "PUT", FieldNames: "snippet textOriginal authorDisplayName"},
	}
	wantFirst(t, docs, map[string]string{"hide a rude comment": "m:youtube.comments.setModerationStatus"})
}

// TestCertCertificate: a cert is a certificate, and an SSL or TLS one is
// what hosting, CDN and key-management APIs keep as certificates (Netlify's
// TLS certificates, Key Vault's certificates).
func TestCertCertificate(t *testing.T) {
	docs := []Doc{
		{Name: "m:createCertificate", AppID: "m", Description: "Creates a new certificate.", Path: "/certificates", Method: "POST", FieldNames: "policy attributes tags"},
		{Name: "m:createKey", AppID: "m", Description: "Creates a new key.", Path: "/keys", Method: "POST", FieldNames: "kty key_size attributes tags"},
		{Name: "m:createDomain", AppID: "m", Description: "Adds a custom domain to a site.", Path: "/domains", Method: "POST", FieldNames: "hostname site_id"},
		{Name: "m:getDomain", AppID: "m", Description: "Gets a custom domain.", Path: "/domains/{name}", Method: "GET"},
	}
	wantFirst(t, docs, map[string]string{"request a new SSL cert for my domain": "m:createCertificate", "order a TLS cert for www.example.com": "m:createCertificate"})
}

// TestCertificateAuthorityIssuer: a certificate authority is the issuer of
// certificates (Key Vault's certificate issuers, cert-manager's Issuers).
func TestCertificateAuthorityIssuer(t *testing.T) {
	docs := []Doc{
		{Name: "m:listCertificateIssuers", AppID: "m", Description: "List certificate issuers for a vault.", Path: "/certificates/issuers", Method: "GET"},
		{Name: "m:listCertificates", AppID: "m", Description: "List certificates in a vault.", Path: "/certificates", Method: "GET"},
		{Name: "m:listCertificateVersions", AppID: "m", Description: "List the versions of a certificate.", Path: "/certificates/{name}/versions", Method: "GET"},
		{Name: "m:getCertificatePolicy", AppID: "m", Description: "Gets the policy of a certificate.", Path: "/certificates/{name}/policy", Method: "GET", FieldNames: "issuer key_props lifetime_actions"},
	}
	wantFirst(t, docs, map[string]string{"which certificate authorities are configured?": "m:listCertificateIssuers", "list the certificate authorities": "m:listCertificateIssuers"})
}

// TestSetNamedItemCreates: a tool that sets a thing with a PUT to the
// thing's own path creates it when the name is new (Key Vault's SetSecret,
// PUT /secrets/{secret-name}, "adds a secret"), so a request to save or add
// one meets it; a name made of the method ("PutChecksID") or a PUT to a
// collection ("setLabels") is no such call.
func TestSetNamedItemCreates(t *testing.T) {
	for _, c := range []struct {
		local, method, path string
		want                bool
	}{
		{"SetSecret", "PUT", "/secrets/{secret-name}", true},
		{"setUserProperty", "PUT", "/user/properties/{propertyKey}", true},
		{"PutChecksID", "PUT", "/checks/{checkID}", false},
		{"setLabels", "PUT", "/repos/{owner}/{repo}/issues/{issue_number}/labels", false},
		{"SetSecret", "POST", "/secrets/{secret-name}", false},
	} {
		in := ToolIntents(c.local, "")
		if got := setsNamedItem(c.local, c.method, c.path, in); got != c.want {
			t.Errorf("setsNamedItem(%q, %s %s) = %v, want %v", c.local, c.method, c.path, got, c.want)
		}
	}
	docs := []Doc{
		{Name: "m:SetSecret", AppID: "m", Description: "Sets a secret in a specified key vault.", Path: "/secrets/{secret-name}", Method: "PUT", FieldNames: "value tags contentType attributes"},
		{Name: "m:BackupSecret", AppID: "m", Description: "Backs up the specified secret.", Path: "/secrets/{secret-name}/backup", Method: "POST"},
		{Name: "m:RestoreSecret", AppID: "m", Description: "Restores a backed up secret to a vault.", Path: "/secrets/restore", Method: "POST", FieldNames: "value"},
		{Name: "m:CreateKey", AppID: "m", Description: "Creates a new key, stores it, then returns key parameters.", Path: "/keys/{key-name}/create", Method: "POST", FieldNames: "kty key_size tags attributes"},
	}
	wantFirst(t, docs, map[string]string{"save the database connection string as a secret": "m:SetSecret", "add a new secret to the vault": "m:SetSecret"})
}

// TestTrashDeleted: what sits in the trash or the recycle bin has been
// deleted (Box's trashed items, Key Vault's soft-deleted secrets).
func TestTrashDeleted(t *testing.T) {
	docs := []Doc{
		{Name: "m:GetDeletedSecrets", AppID: "m", Description: "Lists deleted secrets for the specified vault.", Path: "/deletedsecrets", Method: "GET"},
		{Name: "m:GetSecrets", AppID: "m", Description: "List secrets in a specified key vault.", Path: "/secrets", Method: "GET"},
		{Name: "m:GetSecretVersions", AppID: "m", Description: "List all versions of the specified secret.", Path: "/secrets/{secret-name}/versions", Method: "GET"},
	}
	wantFirst(t, docs, map[string]string{"which secrets are sitting in the recycle bin?": "m:GetDeletedSecrets", "show the secrets in the trash": "m:GetDeletedSecrets"})
}

// TestForGoodPurge: deleting a thing for good or forever is a permanent
// deletion, a purge of what a soft delete kept (Key Vault's purge of a
// deleted secret, against its delete and its recovery).
func TestForGoodPurge(t *testing.T) {
	docs := []Doc{
		{Name: "m:DeleteSecret", AppID: "m", Description: "Deletes a secret.", Path: "/secrets/{secret-name}", Method: "DELETE"},
		{Name: "m:GetSecret", AppID: "m", Description: "Get a specified secret from a given key vault.", Path: "/secrets/{secret-name}/{secret-version}", Method: "GET"},
		{Name: "m:DeleteKey", AppID: "m", Description: "Deletes a key of any type from storage.", Path: "/keys/{key-name}", Method: "DELETE"},
		{Name: "m:GetSecrets", AppID: "m", Description: "List secrets in a specified key vault.", Path: "/secrets", Method: "GET"},
		{Name: "m:PurgeDeletedSecret", AppID: "m", Description: "Permanently deletes the specified secret.", Path: "/deletedsecrets/{secret-name}", Method: "DELETE"},
		{Name: "m:RecoverDeletedSecret", AppID: "m", Description: "Recovers the deleted secret to the latest version.", Path: "/deletedsecrets/{secret-name}/recover", Method: "POST"},
	}
	wantFirst(t, docs, map[string]string{"delete a secret": "m:DeleteSecret", "delete a secret for good": "m:PurgeDeletedSecret", "get rid of a deleted secret for good": "m:PurgeDeletedSecret"})
}

// TestUndeleteRecovers: undeleting a thing, or undoing its deletion,
// recovers it (Key Vault's recovery of a soft-deleted certificate), as
// restoring it does.
func TestUndeleteRecovers(t *testing.T) {
	docs := []Doc{
		{Name: "m:SetSecret", AppID: "m", Description: "Sets a secret in a specified key vault.", Path: "/secrets/{secret-name}", Method: "PUT", FieldNames: "value tags attributes"},
		{Name: "m:UpdateSecret", AppID: "m", Description: "Updates the attributes associated with a specified secret.", Path: "/secrets/{secret-name}/{secret-version}", Method: "PATCH", FieldNames: "tags attributes"},
		{Name: "m:BackupSecret", AppID: "m", Description: "Backs up the specified secret.", Path: "/secrets/{secret-name}/backup", Method: "POST"},
		{Name: "m:GetDeletedSecret", AppID: "m", Description: "Gets the specified deleted secret.", Path: "/deletedsecrets/{secret-name}", Method: "GET"},
		{Name: "m:RecoverDeletedSecret", AppID: "m", Description: "Recovers the deleted secret to the latest version.", Path: "/deletedsecrets/{secret-name}/recover", Method: "POST"},
		{Name: "m:PurgeDeletedSecret", AppID: "m", Description: "Permanently deletes the specified secret.", Path: "/deletedsecrets/{secret-name}", Method: "DELETE"},
	}
	wantFirst(t, docs, map[string]string{"undelete a secret": "m:RecoverDeletedSecret", "undo the deletion of a secret": "m:RecoverDeletedSecret", "undo deleting a secret": "m:RecoverDeletedSecret"})
}

// TestPasswordSecret: a password kept by an API is a secret (Key Vault's,
// GitHub Actions' and Kubernetes' secrets), as it is a credential.
func TestPasswordSecret(t *testing.T) {
	docs := []Doc{
		{Name: "m:SetSecret", AppID: "m", Description: "Sets a secret in a specified key vault.", Path: "/secrets/{secret-name}", Method: "PUT", FieldNames: "value tags contentType attributes"},
		{Name: "m:CreateKey", AppID: "m", Description: "Creates a new key, stores it, then returns key parameters and attributes to the client.", Path: "/keys/{key-name}/create", Method: "POST", FieldNames: "kty key_size tags attributes"},
		{Name: "m:CreateCertificate", AppID: "m", Description: "Creates a new certificate.", Path: "/certificates/{certificate-name}/create", Method: "POST", FieldNames: "policy tags attributes"},
		{Name: "m:SetStorageAccount", AppID: "m", Description: "Creates or updates a new storage account.", Path: "/storage/{storage-account-name}", Method: "PUT", FieldNames: "resourceId activeKeyName autoRegenerateKey"},
		{Name: "m:SetCertificateIssuer", AppID: "m", Description: "Sets the specified certificate issuer.", Path: "/certificates/issuers/{issuer-name}", Method: "PUT", FieldNames: "provider credentials org_details"},
	}
	wantFirst(t, docs, map[string]string{"store a new password in the vault": "m:SetSecret", "save my database password": "m:SetSecret", "add a password": "m:SetSecret"})
}

// TestWhoContact: "who" asks for people, and the people an API keeps to
// reach about a thing are its contacts (Key Vault's certificate contacts,
// a domain registrar's contacts).
func TestWhoContact(t *testing.T) {
	docs := []Doc{
		{Name: "m:GetCertificate", AppID: "m", Description: "Gets information about a certificate.", Path: "/certificates/{certificate-name}/{certificate-version}", Method: "GET"},
		{Name: "m:GetCertificateVersions", AppID: "m", Description: "List the versions of a certificate.", Path: "/certificates/{certificate-name}/versions", Method: "GET"},
		{Name: "m:GetCertificateContacts", AppID: "m", Description: "Lists the certificate contacts for a specified key vault.", Path: "/certificates/contacts", Method: "GET"},
		{Name: "m:GetCertificatePolicy", AppID: "m", Description: "Lists the policy for a certificate.", Path: "/certificates/{certificate-name}/policy", Method: "GET", FieldNames: "lifetime_actions days_before_expiry"},
	}
	wantFirst(t, docs, map[string]string{"who is told when certificates expire?": "m:GetCertificateContacts"})
}

// TestNotDeletedTwin: a soft-delete API's calls on deleted things
// ("GetDeletedStorageAccount", "PurgeDeletedKey") meet a request's verb
// "delete" and its thing's words; a request that says nothing of deleted
// things beside its verb wants the live thing's call.
func TestNotDeletedTwin(t *testing.T) {
	docs := []Doc{
		{Name: "m:GetDeletedStorageAccount", AppID: "m", Description: "Gets the specified deleted storage account.", Path: "/deletedstorage/{storage-account-name}", Method: "GET"},
		{Name: "m:GetStorageAccount", AppID: "m", Description: "Gets information about a specified storage account.", Path: "/storage/{storage-account-name}", Method: "GET"},
		{Name: "m:PurgeDeletedKey", AppID: "m", Description: "Permanently deletes the specified key.", Path: "/deletedkeys/{key-name}", Method: "DELETE"},
		{Name: "m:DeleteKey", AppID: "m", Description: "Deletes a key of any type from storage.", Path: "/keys/{key-name}", Method: "DELETE"},
	}
	ix := NewBM25(docs)
	for _, c := range []struct {
		q    string
		doc  int
		want bool
	}{
		{"get the details of a storage account", 0, true},
		{"get the details of a storage account", 1, false},
		{"delete a key", 2, true},
		{"delete a key", 3, false},
		{"show a deleted storage account", 0, false},
		{"which storage accounts were removed?", 0, false},
		{"erase a key for good", 2, false},
		{"list what is in the trash", 0, false},
	} {
		if got := strings.Contains(ix.Explain(c.q, c.doc), "not-deleted"); got != c.want {
			t.Errorf("%q on %s: not-deleted %v, want %v", c.q, docs[c.doc].Name, got, c.want)
		}
	}
}

// TestSignerRecipient: a signer is a recipient of what is sent for signing
// (DocuSign's, Dropbox Sign's and Adobe Sign's recipients), so a request
// about signers meets the recipients' calls.
func TestSignerRecipient(t *testing.T) {
	docs := []Doc{
		{Name: "m:addRecipients", AppID: "m", Description: "Adds one or more recipients to an envelope.", Path: "/envelopes/{envelopeId}/recipients", Method: "POST"},
		{Name: "m:addDocuments", AppID: "m", Description: "Adds one or more documents to an existing envelope.", Path: "/envelopes/{envelopeId}/documents", Method: "PUT"},
		{Name: "m:createEnvelope", AppID: "m", Description: "Creates an envelope.", Path: "/envelopes", Method: "POST", FieldNames: "documents status email_subject"},
		{Name: "m:addSigningGroupMembers", AppID: "m", Description: "Adds members to a signing group.", Path: "/signing_groups/{signingGroupId}/users", Method: "PUT"},
	}
	wantFirst(t, docs, map[string]string{"add a signer to an envelope": "m:addRecipients", "add another signatory to the envelope": "m:addRecipients"})
}

// TestLinkURL: a link an API hands out is a URL (a signing view's, a
// presigned download's, a share's), so a request for a link meets the
// calls that return one.
func TestLinkURL(t *testing.T) {
	docs := []Doc{
		{Name: "m:createRecipientView", AppID: "m", Description: "Returns a URL to the recipient view UI.", Path: "/envelopes/{envelopeId}/views/recipient", Method: "POST"},
		{Name: "m:getConnectConfig", AppID: "m", Description: "Gets the details about a Connect configuration.", Path: "/connect/{connectId}", Method: "GET"},
		{Name: "m:getEnvelope", AppID: "m", Description: "Gets the status of a single envelope.", Path: "/envelopes/{envelopeId}", Method: "GET"},
		{Name: "m:createEnvelope", AppID: "m", Description: "Creates an envelope.", Path: "/envelopes", Method: "POST"},
	}
	wantFirst(t, docs, map[string]string{"get a signing link for a recipient": "m:createRecipientView", "get a link to the recipient's signing page": "m:createRecipientView"})
}

// TestAddressBookContacts: an address book is a list of contacts, so a
// request about it meets the contacts' calls rather than those on
// addresses or books.
func TestAddressBookContacts(t *testing.T) {
	docs := []Doc{
		{Name: "m:addContacts", AppID: "m", Description: "Add contacts to a contacts list.", Path: "/contacts", Method: "POST", FieldNames: "emails name organization"},
		{Name: "m:addEmailSettings", AppID: "m", Description: "Adds email setting overrides to an envelope.", Path: "/envelopes/{envelopeId}/email_settings", Method: "POST", FieldNames: "reply_email_address_override bcc_email_addresses"},
		{Name: "m:addBccArchive", AppID: "m", Description: "Creates a BCC email archive configuration.", Path: "/settings/bcc_email_archives", Method: "POST", FieldNames: "email"},
		{Name: "m:getBook", AppID: "m", Description: "Gets a book.", Path: "/books/{bookId}", Method: "GET"},
	}
	wantFirst(t, docs, map[string]string{"add an email address to the address book": "m:addContacts", "put a new person in the address book": "m:addContacts"})
}

// TestBehalfAuthorization: letting someone act on one's behalf is a
// delegated authorization (DocuSign's user authorizations, Gmail's
// delegates), not the act itself.
func TestBehalfAuthorization(t *testing.T) {
	docs := []Doc{
		{Name: "m:createUserAuthorization", AppID: "m", Description: "Creates the user authorization.", Path: "/users/{userId}/authorization", Method: "POST", FieldNames: "agent_user permission start_date end_date"},
		{Name: "m:createEnvelope", AppID: "m", Description: "Creates an envelope.", Path: "/envelopes", Method: "POST", FieldNames: "documents recipients status"},
		{Name: "m:lockEnvelope", AppID: "m", Description: "Locks an envelope.", Path: "/envelopes/{envelopeId}/lock", Method: "POST"},
		{Name: "m:registerNotary", AppID: "m", Description: "Registers the current user as a notary.", Path: "/current_user/notary", Method: "POST"},
	}
	wantFirst(t, docs, map[string]string{"let another user send envelopes on my behalf": "m:createUserAuthorization", "allow my assistant to sign on my behalf": "m:createUserAuthorization"})
}

// TestDriveCloudStorage: a drive (Google Drive, Microsoft's) is a cloud
// storage provider, so a request about one meets the cloud storage calls.
func TestDriveCloudStorage(t *testing.T) {
	docs := []Doc{
		{Name: "m:listCloudStorageFolder", AppID: "m", Description: "Retrieves a list of all the items in a specified folder from the specified cloud storage provider.", Path: "/users/{userId}/cloud_storage/{serviceId}/folders", Method: "GET"},
		{Name: "m:listWorkspaceFolder", AppID: "m", Description: "List workspace folder contents.", Path: "/workspaces/{workspaceId}/folders/{folderId}", Method: "GET"},
		{Name: "m:listFolders", AppID: "m", Description: "Gets a list of the folders for the account.", Path: "/folders", Method: "GET"},
		{Name: "m:getDocument", AppID: "m", Description: "Retrieves a single document from an envelope.", Path: "/envelopes/{envelopeId}/documents/{documentId}", Method: "GET"},
	}
	wantFirst(t, docs, map[string]string{"list a folder of my Google Drive": "m:listCloudStorageFolder", "what is in my drive folder?": "m:listCloudStorageFolder"})
}

// TestScreenView: a screen of an app is a view of its UI (DocuSign's sender
// and recipient views, returned as URLs).
func TestScreenView(t *testing.T) {
	docs := []Doc{
		{Name: "m:createSenderView", AppID: "m", Description: "Returns a URL to the sender view UI.", Path: "/envelopes/{envelopeId}/views/sender", Method: "POST"},
		{Name: "m:createEnvelope", AppID: "m", Description: "Creates an envelope.", Path: "/envelopes", Method: "POST", FieldNames: "documents recipients status sender"},
		{Name: "m:createHtmlPreview", AppID: "m", Description: "Creates a preview of the responsive versions of all of the documents in an envelope.", Path: "/envelopes/{envelopeId}/responsive_html_preview", Method: "POST"},
		{Name: "m:getEnvelope", AppID: "m", Description: "Gets the status of a single envelope.", Path: "/envelopes/{envelopeId}", Method: "GET"},
	}
	wantFirst(t, docs, map[string]string{"open the sender's screen for an envelope": "m:createSenderView", "get the sender screen of an envelope": "m:createSenderView"})
}

// TestContractDocument: a contract or an agreement sent for signing is a
// document (DocuSign's envelopes' documents, Adobe Sign's agreements).
func TestContractDocument(t *testing.T) {
	docs := []Doc{
		{Name: "m:getDocument", AppID: "m", Description: "Retrieves a single document or all documents from an envelope.", Path: "/envelopes/{envelopeId}/documents/{documentId}", Method: "GET"},
		{Name: "m:getWorkspaceFile", AppID: "m", Description: "Gets a workspace file.", Path: "/workspaces/{workspaceId}/folders/{folderId}/files/{fileId}", Method: "GET"},
		{Name: "m:getCommentsTranscript", AppID: "m", Description: "Gets a PDF transcript of all of the comments in an envelope.", Path: "/envelopes/{envelopeId}/comments/transcript", Method: "GET"},
		{Name: "m:getEnvelope", AppID: "m", Description: "Gets the status of a single envelope.", Path: "/envelopes/{envelopeId}", Method: "GET"},
	}
	wantFirst(t, docs, map[string]string{"download the signed contract": "m:getDocument", "download the signed PDF of an agreement": "m:getDocument"})
}

// TestDeactivateCloses: an API that keeps a deactivated user or account
// closes it (DocuSign closes users, banks and billing APIs close
// accounts), so deactivating one meets the call that closes it.
func TestDeactivateCloses(t *testing.T) {
	docs := []Doc{
		{Name: "m:closeUsers", AppID: "m", Description: "Closes one or more users in the account.", Path: "/users", Method: "DELETE"},
		{Name: "m:updateUserSignature", AppID: "m", Description: "Updates the user signature for a specified user.", Path: "/users/{userId}/signatures/{signatureId}", Method: "PUT"},
		{Name: "m:updateUser", AppID: "m", Description: "Updates user information for the specified user.", Path: "/users/{userId}", Method: "PUT"},
		{Name: "m:listUsers", AppID: "m", Description: "Retrieves the list of users for the specified account.", Path: "/users", Method: "GET"},
	}
	wantFirst(t, docs, map[string]string{"deactivate a user who left the company": "m:closeUsers", "deactivate a user": "m:closeUsers"})
}

// TestDeleteNameKeepsIntent: a DELETE only deletes and a GET only reads,
// whatever a summary shared by every call of the resource says (bunq's
// DELETE_CustomerStatement_for_User_MonetaryAccount: "Used to create new and
// read existing statement exports."); a POST still yields to its summary's
// verb (Stripe's PostCustomersCustomer: "Updates the specified customer").
func TestDeleteNameKeepsIntent(t *testing.T) {
	shared := "Used to create new and read existing statement exports."
	for _, c := range []struct {
		name, summary string
		want          Intent
	}{
		{"DELETE_CustomerStatement_for_User_MonetaryAccount", shared, IntentDelete},
		{"GET_CustomerStatement_for_User_MonetaryAccount", "Used to create new statement exports.", IntentGet},
		{"GetCustomersSearch", "Search for customers you've previously created.", IntentSearch},
		{"PostCustomersCustomer", "Updates the specified customer", IntentUpdate},
	} {
		if got := ToolIntents(c.name, c.summary); len(got) != 1 || got[0] != c.want {
			t.Errorf("ToolIntents(%q, %q) = %v, want %s", c.name, c.summary, got, c.want)
		}
	}
	if m := methodYields("DELETE_CustomerStatement_for_User_MonetaryAccount", shared); m != "" {
		t.Errorf("methodYields: DELETE yields to %q", m)
	}
	ix := NewBM25([]Doc{
		{Name: "b_DELETE_CustomerStatement_for_User_MonetaryAccount", AppID: "b", Description: shared},
		{Name: "b_CREATE_CustomerStatement_for_User_MonetaryAccount", AppID: "b", Description: shared},
	})
	if hits := rankOf(t, ix, "delete an old statement export", 2); len(hits) == 0 || hits[0].Doc != 0 {
		t.Errorf("delete an old statement export: %v, want the DELETE first", hits)
	}
}

// TestMannerAdverbIntent: an adverb before the verb says how, not what
// ("automatically move part of every incoming payment to savings" does
// not list, though "every" is a list word), and what is done automatically
// is what APIs name "auto" (bunq's PaymentAutoAllocate, GitHub's
// auto-merge).
func TestMannerAdverbIntent(t *testing.T) {
	if got := QueryIntents("automatically move part of every incoming payment to savings"); len(got) != 0 {
		t.Errorf("automatically move part of every incoming payment: %v, want no intent", got)
	}
	if got := QueryIntents("permanently delete a file that's in the trash"); len(got) != 1 || got[0] != IntentDelete {
		t.Errorf("permanently delete a file: %v, want delete", got)
	}
	docs := []Doc{
		{Name: "b:CREATE_PaymentAutoAllocate", AppID: "b", Description: "Manage a user's payment auto allocation settings.", Method: "POST", Path: "/payment-auto-allocate"},
		{Name: "b:CREATE_Payment", AppID: "b", Description: "Create a new Payment.", Method: "POST", Path: "/payment"},
		{Name: "b:READ_Payment", AppID: "b", Description: "Get a specific previous Payment.", Method: "GET", Path: "/payment/{itemId}"},
	}
	wantFirst(t, docs, map[string]string{"automatically move part of every payment to savings": "b:CREATE_PaymentAutoAllocate"})
}

// TestTransactionPayment: a bank's or a ledger's transactions are its
// payments (bunq's payments, Sinao's).
func TestTransactionPayment(t *testing.T) {
	docs := []Doc{
		{Name: "b:List_all_Payment", AppID: "b", Description: "Get a listing of all Payments performed on a given MonetaryAccount (incoming and outgoing).", Method: "GET", Path: "/monetary-account/{id}/payment"},
		{Name: "b:List_all_Event", AppID: "b", Description: "Get a collection of events for a given user.", Method: "GET", Path: "/event"},
		{Name: "b:List_all_MonetaryAccount", AppID: "b", Description: "Get a collection of all your MonetaryAccounts.", Method: "GET", Path: "/monetary-account"},
	}
	wantFirst(t, docs, map[string]string{"show the transactions on my account": "b:List_all_Payment", "list my transactions": "b:List_all_Payment"})
}

// TestRecurringSchedule: what recurs is run on a schedule (bunq's scheduled
// payments; cron-like schedules of jobs and reports).
func TestRecurringSchedule(t *testing.T) {
	docs := []Doc{
		{Name: "b:List_all_SchedulePayment", AppID: "b", Description: "Endpoint for schedule payments.", Method: "GET", Path: "/schedule-payment"},
		{Name: "b:List_all_Payment", AppID: "b", Description: "List the payments of an account.", Method: "GET", Path: "/payment"},
		{Name: "b:List_all_PaymentBatch", AppID: "b", Description: "Return all the payment batches for a monetary account.", Method: "GET", Path: "/payment-batch"},
	}
	wantFirst(t, docs, map[string]string{"list my recurring payments": "b:List_all_SchedulePayment"})
}

// TestUpdateThatDeletes: an API that keeps what is revoked or cancelled
// does it by updating its status; an update whose summary opens with a
// verb that deletes does that delete too (bunq's UPDATE_RequestInquiry:
// "Revoke a request for payment, by updating the status to REVOKED").
func TestUpdateThatDeletes(t *testing.T) {
	got := ToolIntents("UPDATE_RequestInquiry_for_User_MonetaryAccount", "Revoke a request for payment, by updating the status to REVOKED.")
	if !slices.Contains(got, IntentUpdate) || !slices.Contains(got, IntentDelete) {
		t.Errorf("UPDATE_RequestInquiry: %v, want update and delete", got)
	}
	if got := ToolIntents("UpdateCustomer", "Updates a customer and removes its default source."); len(got) != 1 || got[0] != IntentUpdate {
		t.Errorf("UpdateCustomer: %v, want update only", got)
	}
	docs := []Doc{
		{Name: "b:UPDATE_RequestInquiry", AppID: "b", Description: "Revoke a request for payment, by updating the status to REVOKED.", Method: "PUT", Path: "/request-inquiry/{itemId}"},
		{Name: "b:DELETE_NoteText_for_RequestInquiry", AppID: "b", Description: "Delete a note of a request inquiry.", Method: "DELETE", Path: "/request-inquiry/{requestInquiryID}/note-text/{itemId}"},
		{Name: "b:DELETE_Session", AppID: "b", Description: "Deletes the current session.", Method: "DELETE", Path: "/session/{itemId}"},
	}
	wantFirst(t, docs, map[string]string{"revoke a payment request I sent": "b:UPDATE_RequestInquiry"})
}

// TestCurrencyAmount: a sum in euros, dollars or pounds is an amount of a
// currency (bunq's currency conversion quotes, exchange rates).
func TestCurrencyAmount(t *testing.T) {
	docs := []Doc{
		{Name: "b:CREATE_CurrencyConversionQuote", AppID: "b", Description: "Endpoint to create a quote for currency conversions.", Method: "POST", Path: "/currency-conversion-quote"},
		{Name: "b:List_all_Limit", AppID: "b", Description: "Get all limits for the authenticated user.", Method: "GET", Path: "/limit"},
		{Name: "b:List_all_Insights", AppID: "b", Description: "Used to get insights about transactions between given time range.", Method: "GET", Path: "/insights"},
	}
	wantFirst(t, docs, map[string]string{"how much would 500 euros be in pounds?": "b:CREATE_CurrencyConversionQuote", "what is 20 dollars in euros?": "b:CREATE_CurrencyConversionQuote"})
}

// TestNetworkGearDevice: routers, switches and firewalls are what inventory
// and monitoring APIs keep as devices; a VM is a virtual machine and a NIC
// its network interface (NetBox's dcim devices and virtualization interfaces).
func TestNetworkGearDevice(t *testing.T) {
	docs := []Doc{
		{Name: "n:dcim_racks_list", AppID: "n", Description: "Call to super to allow for caching", Method: "GET", Path: "/dcim/racks/"},
		{Name: "n:dcim_console-server-ports_list", AppID: "n", Description: "Call to super to allow for caching", Method: "GET", Path: "/dcim/console-server-ports/"},
		{Name: "n:dcim_devices_list", AppID: "n", Description: "Call to super to allow for caching", Method: "GET", Path: "/dcim/devices/"},
		{Name: "n:virtualization_virtual-machines_create", AppID: "n", Method: "POST", Path: "/virtualization/virtual-machines/"},
		{Name: "n:virtualization_clusters_create", AppID: "n", Method: "POST", Path: "/virtualization/clusters/"},
		{Name: "n:virtualization_interfaces_create", AppID: "n", Method: "POST", Path: "/virtualization/interfaces/"},
	}
	wantFirst(t, docs, map[string]string{
		"list the switches": "n:dcim_devices_list", "list every firewall": "n:dcim_devices_list", "list the routers": "n:dcim_devices_list",
		"add a VM to a cluster": "n:virtualization_virtual-machines_create", "add a NIC": "n:virtualization_interfaces_create",
	})
}

// TestNetworkInventoryNouns: an IP network is kept as a prefix, a cabinet as
// a rack, a telecom carrier as a provider, and hardware comes from its
// manufacturer (NetBox's ipam prefixes, dcim racks and manufacturers,
// circuit providers).
func TestNetworkInventoryNouns(t *testing.T) {
	docs := []Doc{
		{Name: "n:dcim_sites_list", AppID: "n", Description: "Call to super to allow for caching", Method: "GET", Path: "/dcim/sites/"},
		{Name: "n:ipam_prefixes_create", AppID: "n", Method: "POST", Path: "/ipam/prefixes/"},
		{Name: "n:dcim_racks_list", AppID: "n", Description: "Call to super to allow for caching", Method: "GET", Path: "/dcim/racks/"},
		{Name: "n:circuits_providers_list", AppID: "n", Description: "Call to super to allow for caching", Method: "GET", Path: "/circuits/providers/"},
		{Name: "n:circuits_providers_create", AppID: "n", Method: "POST", Path: "/circuits/providers/"},
		{Name: "n:dcim_manufacturers_create", AppID: "n", Method: "POST", Path: "/dcim/manufacturers/"},
	}
	wantFirst(t, docs, map[string]string{
		"create a subnet": "n:ipam_prefixes_create", "list the cabinets at a site": "n:dcim_racks_list",
		"list our carriers": "n:circuits_providers_list", "add a hardware vendor": "n:dcim_manufacturers_create",
	})
}

// TestNetworkInventoryPhrases: a data center is a site, a network or switch
// port an interface, an operating system a platform (NetBox's dcim sites,
// interfaces and platforms).
func TestNetworkInventoryPhrases(t *testing.T) {
	docs := []Doc{
		{Name: "n:dcim_front-ports_list", AppID: "n", Description: "Call to super to allow for caching", Method: "GET", Path: "/dcim/front-ports/"},
		{Name: "n:dcim_devices_list", AppID: "n", Description: "Call to super to allow for caching", Method: "GET", Path: "/dcim/devices/"},
		{Name: "n:dcim_interfaces_list", AppID: "n", Description: "Call to super to allow for caching", Method: "GET", Path: "/dcim/interfaces/"},
		{Name: "n:dcim_platforms_list", AppID: "n", Description: "Call to super to allow for caching", Method: "GET", Path: "/dcim/platforms/"},
		{Name: "n:extras_config-contexts_create", AppID: "n", Method: "POST", Path: "/extras/config-contexts/"},
		{Name: "n:dcim_sites_create", AppID: "n", Method: "POST", Path: "/dcim/sites/"},
	}
	wantFirst(t, docs, map[string]string{
		"add a new data center": "n:dcim_sites_create", "list the network ports of a switch": "n:dcim_interfaces_list",
		"list the operating systems": "n:dcim_platforms_list",
	})
}

// TestReleaseDeletes: to release what was reserved or allocated (a rack
// reservation, an IP address, a phone number, a lock) is to delete it, and
// to unplug a cable is to delete the connection it records.
func TestReleaseDeletes(t *testing.T) {
	docs := []Doc{
		{Name: "n:dcim_rack-reservations_create", AppID: "n", Method: "POST", Path: "/dcim/rack-reservations/"},
		{Name: "n:dcim_rack-reservations_update", AppID: "n", Method: "PUT", Path: "/dcim/rack-reservations/{id}/"},
		{Name: "n:dcim_rack-reservations_delete", AppID: "n", Method: "DELETE", Path: "/dcim/rack-reservations/{id}/"},
		{Name: "n:dcim_cables_create", AppID: "n", Method: "POST", Path: "/dcim/cables/"},
		{Name: "n:dcim_cables_update", AppID: "n", Method: "PUT", Path: "/dcim/cables/{id}/"},
		{Name: "n:dcim_cables_delete", AppID: "n", Method: "DELETE", Path: "/dcim/cables/{id}/"},
	}
	wantFirst(t, docs, map[string]string{"release a rack reservation": "n:dcim_rack-reservations_delete", "unplug the cable": "n:dcim_cables_delete"})
}

// TestRenewRefreshes: to renew a token, a certificate or a lease is to
// refresh it (Superset's, OAuth servers' and Vault's refresh calls).
func TestRenewRefreshes(t *testing.T) {
	docs := []Doc{
		{Name: "s:get_security_csrf_token", AppID: "s", Description: "Fetch the CSRF token", Method: "GET", Path: "/security/csrf_token/"},
		{Name: "s:post_security_refresh", AppID: "s", Description: "Use the refresh token to get a new JWT access token", Method: "POST", Path: "/security/refresh"},
		{Name: "s:post_security_login", AppID: "s", Description: "Authenticate and get a JWT access and refresh token", Method: "POST", Path: "/security/login"},
	}
	wantFirst(t, docs, map[string]string{"my token expired, renew it": "s:post_security_refresh"})
}

// TestUndoJoinDeletes: where no call's name undoes a join, a request to
// disconnect, detach or unlink a thing deletes it (Superset keeps a
// connected database as the database itself); where one does, the request
// asks for that call.
func TestUndoJoinDeletes(t *testing.T) {
	docs := []Doc{
		{Name: "s:post_database", AppID: "s", Description: "Create a new Database.", Method: "POST", Path: "/database/"},
		{Name: "s:post_database_import", AppID: "s", Method: "POST", Path: "/database/import/"},
		{Name: "s:delete_database_by_pk", AppID: "s", Description: "Deletes a Database.", Method: "DELETE", Path: "/database/{pk}"},
		{Name: "s:put_database_by_pk", AppID: "s", Description: "Changes a Database.", Method: "PUT", Path: "/database/{pk}"},
	}
	wantFirst(t, docs, map[string]string{"disconnect a database": "s:delete_database_by_pk"})
	joined := []Doc{
		{Name: "c:create_disk", AppID: "c", Description: "Create a disk", Method: "POST", Path: "/disks"},
		{Name: "c:delete_disk", AppID: "c", Description: "Delete a disk", Method: "DELETE", Path: "/disks/{id}"},
		{Name: "c:attach_disk", AppID: "c", Description: "Attach a disk to a server", Method: "POST", Path: "/servers/{id}/disks"},
		{Name: "c:detach_disk", AppID: "c", Description: "Detach a disk from a server", Method: "DELETE", Path: "/servers/{id}/disks/{disk}"},
	}
	wantFirst(t, joined, map[string]string{"detach a disk from the server": "c:detach_disk"})
}

// TestOnOffByField: where no call turns things on or off, pausing or
// resuming a thing is the update that sets its boolean field (Superset's
// report schedules and InfluxDB's tasks are "active"); where one does, the
// request asks for that call.
func TestOnOffByField(t *testing.T) {
	docs := []Doc{
		{Name: "s:post_report", AppID: "s", Description: "Create a report schedule", Method: "POST", Path: "/report/"},
		{Name: "s:delete_report_by_pk", AppID: "s", Description: "Delete a report schedule", Method: "DELETE", Path: "/report/{pk}"},
		{Name: "s:put_report_by_pk", AppID: "s", Description: "Update a report schedule", Method: "PUT", Path: "/report/{pk}", States: "active"},
		{Name: "s:get_report_by_pk", AppID: "s", Description: "Get a report schedule", Method: "GET", Path: "/report/{pk}"},
	}
	wantFirst(t, docs, map[string]string{"pause the report schedule": "s:put_report_by_pk"})
	switched := append(docs[:len(docs):len(docs)],
		Doc{Name: "s:disable_report", AppID: "s", Description: "Disable a report schedule", Method: "POST", Path: "/report/{pk}/disable"})
	wantFirst(t, switched, map[string]string{"suspend the report schedule": "s:disable_report"})
}

// TestJoinCreates: where no call's name joins two things, a request to
// connect, link, associate or assign one makes it (Superset's database
// connection is the database; Traccar's and Airbyte's links are
// permissions and sources).
func TestJoinCreates(t *testing.T) {
	docs := []Doc{
		{Name: "s:post_database", AppID: "s", Description: "Create a new Database.", Method: "POST", Path: "/database/"},
		{Name: "s:post_database_test_connection", AppID: "s", Description: "Tests a database connection", Method: "POST", Path: "/database/test_connection"},
		{Name: "s:post_database_validate_parameters", AppID: "s", Description: "Validates parameters used to connect to a database", Method: "POST", Path: "/database/validate_parameters"},
		{Name: "s:put_database_by_pk", AppID: "s", Description: "Changes a Database.", Method: "PUT", Path: "/database/{pk}"},
		{Name: "s:get_database", AppID: "s", Description: "Get a list of models", Method: "GET", Path: "/database/"},
		{Name: "s:get_database_by_pk", AppID: "s", Description: "Get an item model", Method: "GET", Path: "/database/{pk}"},
		{Name: "s:get_database_available", AppID: "s", Description: "Get names of databases currently available", Method: "GET", Path: "/database/available/"},
		{Name: "s:get_database_by_pk_schemas", AppID: "s", Description: "Get all schemas from a database", Method: "GET", Path: "/database/{pk}/schemas/"},
		{Name: "s:delete_database_by_pk", AppID: "s", Description: "Deletes a Database.", Method: "DELETE", Path: "/database/{pk}"},
		{Name: "s:post_dataset", AppID: "s", Description: "Create a new Dataset", Method: "POST", Path: "/dataset/"},
		{Name: "s:get_dataset", AppID: "s", Description: "Get a list of models", Method: "GET", Path: "/dataset/"},
	}
	for _, thing := range []string{"chart", "dashboard", "report", "saved_query", "css_template", "annotation_layer"} {
		docs = append(docs,
			Doc{Name: "s:post_" + thing, AppID: "s", Description: "Create a " + thing, Method: "POST", Path: "/" + thing + "/"},
			Doc{Name: "s:get_" + thing, AppID: "s", Description: "Get a list of " + thing + "s", Method: "GET", Path: "/" + thing + "/"},
			Doc{Name: "s:delete_" + thing + "_by_pk", AppID: "s", Description: "Delete a " + thing, Method: "DELETE", Path: "/" + thing + "/{pk}"})
	}
	wantFirst(t, docs, map[string]string{"connect a new Postgres database": "s:post_database"})
}
