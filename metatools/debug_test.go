package metatools

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/codemode-gateway/caddy-codemode/metatools/search"
)

func TestDebugExplain(t *testing.T) {
	cat, q := os.Getenv("DBG_CAT"), os.Getenv("DBG_Q")
	if cat == "" {
		t.Skip()
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
	for _, w := range strings.Split(os.Getenv("DBG_WANT"), ",") {
		for i, tl := range c.tools {
			if tl.Name == c.byOp[w] {
				t.Logf("WANT %s %s", tl.Name, ix.Explain(q, i))
			}
		}
	}
}
