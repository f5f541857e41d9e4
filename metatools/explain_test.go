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
