package search

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"
)

// EmbeddingClient calls an OpenAI-compatible embeddings endpoint
// (POST {"model", "input": [...]} -> {"data": [{"index", "embedding"}]}).
type EmbeddingClient struct {
	// URL is the endpoint, e.g. http://127.0.0.1:11434/v1/embeddings; a URL
	// that does not end in /embeddings gets it appended.
	URL string
	// Model is sent as "model".
	Model string
	// APIKey, when set, is sent as a bearer token. It is never logged.
	APIKey string
	// HTTPClient defaults to http.DefaultClient.
	HTTPClient *http.Client
}

// ErrUnavailable marks a failure to reach or use the embeddings endpoint.
var ErrUnavailable = errors.New("embedding endpoint unavailable")

func (c *EmbeddingClient) endpoint() string {
	u := strings.TrimRight(c.URL, "/")
	if !strings.HasSuffix(u, "/embeddings") {
		u += "/embeddings"
	}
	return u
}

// Embed returns one vector per input, in input order.
func (c *EmbeddingClient) Embed(ctx context.Context, inputs []string) ([][]float32, error) {
	body, err := json.Marshal(map[string]any{"model": c.Model, "input": inputs})
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.endpoint(), bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	req.Header.Set("Content-Type", "application/json")
	if c.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.APIKey)
	}
	hc := c.HTTPClient
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrUnavailable, c.endpoint(), err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("%w: reading response: %v", ErrUnavailable, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w: %s answered %d: %.200s", ErrUnavailable, c.endpoint(), resp.StatusCode, raw)
	}
	var out struct {
		Data []struct {
			Index     int       `json:"index"`
			Embedding []float32 `json:"embedding"`
		} `json:"data"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("%w: decoding response: %v", ErrUnavailable, err)
	}
	vecs := make([][]float32, len(inputs))
	for _, d := range out.Data {
		if d.Index < 0 || d.Index >= len(inputs) {
			return nil, fmt.Errorf("%w: response index %d out of range", ErrUnavailable, d.Index)
		}
		vecs[d.Index] = normalize(d.Embedding)
	}
	for i, v := range vecs {
		if len(v) == 0 {
			return nil, fmt.Errorf("%w: no embedding for input %d", ErrUnavailable, i)
		}
	}
	return vecs, nil
}

func normalize(v []float32) []float32 {
	var s float64
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	if s == 0 {
		return v
	}
	n := float32(1 / math.Sqrt(s))
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = x * n
	}
	return out
}

// VectorCache keeps embeddings by text and model, so a rebuilt index (a tool
// list change) embeds only the tools that changed. Safe for concurrent use.
type VectorCache struct {
	mu   sync.Mutex
	vecs map[[32]byte][]float32
}

// NewVectorCache returns an empty cache.
func NewVectorCache() *VectorCache { return &VectorCache{vecs: map[[32]byte][]float32{}} }

func cacheKey(model, text string) [32]byte { return sha256.Sum256([]byte(model + "\x00" + text)) }

func (vc *VectorCache) get(model, text string) ([]float32, bool) {
	vc.mu.Lock()
	defer vc.mu.Unlock()
	v, ok := vc.vecs[cacheKey(model, text)]
	return v, ok
}

func (vc *VectorCache) put(model, text string, v []float32) {
	vc.mu.Lock()
	defer vc.mu.Unlock()
	vc.vecs[cacheKey(model, text)] = v
}

// Len reports how many vectors are cached.
func (vc *VectorCache) Len() int {
	vc.mu.Lock()
	defer vc.mu.Unlock()
	return len(vc.vecs)
}

// embedBatch is how many texts go into one embeddings request.
const embedBatch = 128

// Embeddings ranks documents by cosine similarity of embeddings. Document
// vectors are fetched on the first query and cached.
type Embeddings struct {
	client *EmbeddingClient
	cache  *VectorCache
	texts  []string
}

// NewEmbeddings prepares a ranker over docs; cache may be shared between
// rebuilds (nil makes a private one).
func NewEmbeddings(docs []Doc, client *EmbeddingClient, cache *VectorCache) *Embeddings {
	if cache == nil {
		cache = NewVectorCache()
	}
	texts := make([]string, len(docs))
	for i, d := range docs {
		texts[i] = strings.Join([]string{d.Name, d.Description, d.Params, strings.Join(d.Tags, " ")}, "\n")
	}
	return &Embeddings{client: client, cache: cache, texts: texts}
}

// vectors returns the vectors of texts, embedding the ones not cached.
func (e *Embeddings) vectors(ctx context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, len(texts))
	var missing []int
	for i, t := range texts {
		if v, ok := e.cache.get(e.client.Model, t); ok {
			out[i] = v
		} else {
			missing = append(missing, i)
		}
	}
	for start := 0; start < len(missing); start += embedBatch {
		end := min(start+embedBatch, len(missing))
		batch := make([]string, 0, end-start)
		for _, i := range missing[start:end] {
			batch = append(batch, texts[i])
		}
		vecs, err := e.client.Embed(ctx, batch)
		if err != nil {
			return nil, err
		}
		for j, i := range missing[start:end] {
			out[i] = vecs[j]
			e.cache.put(e.client.Model, texts[i], vecs[j])
		}
	}
	return out, nil
}

// Rank embeds the query and returns the k documents with the highest cosine
// similarity (negative similarities count as 0).
func (e *Embeddings) Rank(ctx context.Context, query string, k int, allow func(int) bool) ([]Hit, error) {
	docs, err := e.vectors(ctx, e.texts)
	if err != nil {
		return nil, err
	}
	qv, err := e.vectors(ctx, []string{query})
	if err != nil {
		return nil, err
	}
	q := qv[0]
	hits := make([]Hit, 0, len(docs))
	for i, v := range docs {
		if allow != nil && !allow(i) {
			continue
		}
		if len(v) != len(q) {
			return nil, fmt.Errorf("%w: vector sizes differ (%d and %d): was the model changed?", ErrUnavailable, len(v), len(q))
		}
		var dot float64
		for j := range v {
			dot += float64(v[j]) * float64(q[j])
		}
		if dot > 0 {
			hits = append(hits, Hit{Doc: i, Score: math.Min(dot, 1)})
		}
	}
	sortHits(hits)
	if k > 0 && len(hits) > k {
		hits = hits[:k]
	}
	return hits, nil
}
