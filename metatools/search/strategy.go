package search

import "errors"

// Strategy turns the documents of an index snapshot into a Ranker. An index
// calls NewRanker on every rebuild; a strategy keeps what should outlive a
// rebuild (the embedding strategy's vector cache).
type Strategy interface {
	NewRanker(docs []Doc) Ranker
}

// BM25Strategy ranks with BM25F over names, descriptions and parameters,
// with stemming and intent synonyms: offline, no model. The default.
type BM25Strategy struct{}

// NewRanker implements Strategy.
func (BM25Strategy) NewRanker(docs []Doc) Ranker { return NewBM25(docs) }

// EmbeddingStrategy ranks by cosine similarity of embeddings from an
// OpenAI-compatible endpoint. Its vector cache outlives rebuilds, so an
// unchanged tool is embedded once.
type EmbeddingStrategy struct {
	client *EmbeddingClient
	cache  *VectorCache
}

// NewEmbeddingStrategy returns the strategy over client, which needs an
// endpoint URL and a model.
func NewEmbeddingStrategy(client *EmbeddingClient) (*EmbeddingStrategy, error) {
	if client == nil || client.URL == "" || client.Model == "" {
		return nil, errors.New("the embeddings search strategy needs an endpoint URL and a model")
	}
	return &EmbeddingStrategy{client: client, cache: NewVectorCache()}, nil
}

// NewRanker implements Strategy.
func (s *EmbeddingStrategy) NewRanker(docs []Doc) Ranker {
	return NewEmbeddings(docs, s.client, s.cache)
}

// HybridStrategy fuses BM25F and embeddings by reciprocal rank fusion; while
// the embeddings endpoint fails it answers from BM25F alone and reports the
// error to onError.
type HybridStrategy struct {
	embeddings *EmbeddingStrategy
	onError    func(error)
}

// NewHybridStrategy returns the strategy over client (which needs an
// endpoint URL and a model); onError may be nil.
func NewHybridStrategy(client *EmbeddingClient, onError func(error)) (*HybridStrategy, error) {
	e, err := NewEmbeddingStrategy(client)
	if err != nil {
		return nil, errors.New("the hybrid search strategy needs an embeddings endpoint URL and a model")
	}
	return &HybridStrategy{embeddings: e, onError: onError}, nil
}

// NewRanker implements Strategy.
func (s *HybridStrategy) NewRanker(docs []Doc) Ranker {
	return NewHybrid(NewBM25(docs), s.embeddings.NewRanker(docs), s.onError)
}
