package search

import (
	"context"
	"math"
)

// rrfK is reciprocal rank fusion's constant (Cormack et al. 2009): a
// document at rank r (from 1) of one ranking scores 1/(rrfK + r).
const rrfK = 60

// Hybrid ranks by reciprocal rank fusion of a lexical ranking (BM25) and a
// semantic one (embeddings): each ranks its best candidates and a document's
// fused score is the sum of 1/(60 + rank) over the rankings that hold it,
// scaled to 0..1 (1 = first in both). Fusion by rank needs no calibration
// between the two scores. When the semantic ranking fails (the embeddings
// endpoint is down), Hybrid answers with the lexical ranking alone and
// reports the failure to onError.
type Hybrid struct {
	lexical, semantic Ranker
	onError           func(error)
}

// hybridDepth is how many candidates each ranking contributes at least.
const hybridDepth = 50

// NewHybrid fuses lexical and semantic; onError may be nil.
func NewHybrid(lexical, semantic Ranker, onError func(error)) *Hybrid {
	if onError == nil {
		onError = func(error) {}
	}
	return &Hybrid{lexical: lexical, semantic: semantic, onError: onError}
}

// Rank implements Ranker.
func (h *Hybrid) Rank(ctx context.Context, query string, k int, allow func(int) bool) ([]Hit, error) {
	depth := max(k, hybridDepth)
	lex, err := h.lexical.Rank(ctx, query, depth, allow)
	if err != nil {
		return nil, err
	}
	sem, err := h.semantic.Rank(ctx, query, depth, allow)
	if err != nil {
		h.onError(err)
		if k > 0 && len(lex) > k {
			lex = lex[:k]
		}
		return lex, nil
	}
	fused := map[int]float64{}
	for _, list := range [][]Hit{lex, sem} {
		for i, hit := range list {
			fused[hit.Doc] += 1 / float64(rrfK+i+1)
		}
	}
	best := 2 / float64(rrfK+1)
	hits := make([]Hit, 0, len(fused))
	for d, s := range fused {
		hits = append(hits, Hit{Doc: d, Score: math.Min(s/best, 1)})
	}
	sortHits(hits)
	if k > 0 && len(hits) > k {
		hits = hits[:k]
	}
	return hits, nil
}
