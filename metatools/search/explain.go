package search

import (
	"fmt"
	"math"
)

// Explain tells why doc scores what it does for query: each query group with
// the term that matched best and its contribution (a tuning aid).
func (ix *BM25) Explain(query string, doc int) string {
	out := ""
	q, _ := ix.request(query)
	for _, g := range ix.queryGroups(q) {
		bestT, bestS := "", 0.0
		for _, wt := range g.terms {
			idf := ix.idf[wt.term]
			for _, p := range ix.postings[wt.term] {
				if int(p.doc) == doc {
					if s := wt.w * idf * float64(p.sat); s > bestS {
						bestT, bestS = wt.term, s
					}
				}
			}
		}
		out += fmt.Sprintf("[%s:%s %.2f] ", g.terms[0].term, bestT, math.Round(bestS*100)/100)
	}
	_, why := ix.factor(doc, ix.plan(query), true)
	return out + why + " title=" + fmt.Sprint(ix.titles[doc])
}
