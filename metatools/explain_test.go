package metatools

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/codemode-gateway/caddy-codemode/metatools/search"
)

// TestExplainRanking is a tuning aid, skipped unless asked for: it prints
// the top tools of one query over an evaluation catalog with each query
// group's best term and contribution, and the same for the wanted tools.
//
//	CODEMODE_EXPLAIN_CATALOG=gitea CODEMODE_EXPLAIN_QUERY="star a repo" \
//	CODEMODE_EXPLAIN_WANT=userCurrentPutStar go test -run TestExplainRanking -v ./metatools/
func TestExplainRanking(t *testing.T) {
	cat, q := os.Getenv("CODEMODE_EXPLAIN_CATALOG"), os.Getenv("CODEMODE_EXPLAIN_QUERY")
	if cat == "" {
		t.Skip("set CODEMODE_EXPLAIN_CATALOG and CODEMODE_EXPLAIN_QUERY to explain a ranking")
	}
	c := loadEvalCatalog(t, cat)
	docs := make([]search.Doc, len(c.tools))
	for i, tl := range c.tools {
		docs[i] = docOf(tl)
	}
	ix := search.NewBM25(docs)
	hits, _ := ix.Rank(context.Background(), q, 8, nil)
	for _, h := range hits {
		t.Logf("%.3f %s %s", h.Score, c.tools[h.Doc].Name, ix.Explain(q, h.Doc))
	}
	for _, w := range strings.Split(os.Getenv("CODEMODE_EXPLAIN_WANT"), ",") {
		for i, tl := range c.tools {
			if tl.Name == c.byOp[w] {
				t.Logf("WANT %s %s", tl.Name, ix.Explain(q, i))
			}
		}
	}
}

// TestExplainMisses is a tuning aid, skipped unless asked for: for every
// query of a tuning catalog whose wanted tool is not first, it prints the
// top three tools and the best-ranked wanted tool, each with its score and
// TestExplainRanking's explanation. It refuses a report catalog: reading
// their rankings would end their use as a held-out measure.
//
//	CODEMODE_EXPLAIN_MISSES=kubernetes go test -run TestExplainMisses -v ./metatools/
func TestExplainMisses(t *testing.T) {
	cat := os.Getenv("CODEMODE_EXPLAIN_MISSES")
	if cat == "" {
		t.Skip("set CODEMODE_EXPLAIN_MISSES to a tuning catalog to explain its misses")
	}
	c := loadEvalCatalog(t, cat)
	if c.set.Role != "tune" {
		t.Fatalf("%s is a report catalog: its rankings are not read", cat)
	}
	docs := make([]search.Doc, len(c.tools))
	for i, tl := range c.tools {
		docs[i] = docOf(tl)
	}
	ix := search.NewBM25(docs)
	for _, q := range c.set.Queries {
		want := map[string]bool{}
		for _, w := range q.Want {
			want[c.byOp[w]] = true
		}
		hits, _ := ix.Rank(context.Background(), q.Q, len(docs), nil)
		rank := 0
		for i, h := range hits {
			if want[c.tools[h.Doc].Name] {
				rank = i + 1
				break
			}
		}
		if rank == 1 {
			continue
		}
		t.Logf("MISS rank %d %q", rank, q.Q)
		for i, h := range hits[:min(3, len(hits))] {
			t.Logf("  %d %.3f %s %s", i+1, h.Score, c.tools[h.Doc].Name, ix.Explain(q.Q, h.Doc))
		}
		if rank > 0 {
			h := hits[rank-1]
			t.Logf("  WANT %d %.3f %s %s", rank, h.Score, c.tools[h.Doc].Name, ix.Explain(q.Q, h.Doc))
		}
	}
}
