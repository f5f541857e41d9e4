package metatools

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/codemode-gateway/caddy-codemode/metatools/search"
)

// fakeEmbeddings is a local OpenAI-compatible embeddings endpoint: a text's
// vector counts its terms' first letters, so texts sharing words are close.
func fakeEmbeddings(t *testing.T, calls *atomic.Int64) *httptest.Server {
	t.Helper()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		var req struct{ Input []string }
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		type item struct {
			Index     int       `json:"index"`
			Embedding []float32 `json:"embedding"`
		}
		data := []item{}
		for i, in := range req.Input {
			v := make([]float32, 26)
			for _, term := range search.Terms(in) {
				if c := term[0]; c >= 'a' && c <= 'z' {
					v[c-'a']++
				}
			}
			data = append(data, item{i, v})
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"data": data})
	}))
	t.Cleanup(hs.Close)
	return hs
}

// TestHybridStrategy: the hybrid strategy asks the embeddings endpoint and
// ranks the obvious tool first; with the endpoint gone it still answers,
// from tfidf alone.
func TestHybridStrategy(t *testing.T) {
	var calls atomic.Int64
	hs := fakeEmbeddings(t, &calls)
	strategy, err := search.NewHybridStrategy(&search.EmbeddingClient{URL: hs.URL + "/v1", Model: "fake"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ix, err := NewIndex([]ToolSource{registeredTools()}, &IndexOptions{Strategy: strategy})
	if err != nil {
		t.Fatal(err)
	}
	if err := ix.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	s := NewService(ix, nil)
	out, err := s.Search(context.Background(), SearchInput{Queries: []string{"list all contacts"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Tools) == 0 || out.Tools[0].Name != "crm:listContacts" || calls.Load() == 0 {
		t.Fatalf("hybrid: %+v after %d embedding calls", out.Tools, calls.Load())
	}
	hs.Close()
	out, err = s.Search(context.Background(), SearchInput{Queries: []string{"create a contact"}})
	if err != nil || len(out.Tools) == 0 || out.Tools[0].Name != "crm:createContact" {
		t.Fatalf("without the endpoint: %+v, %v", out, err)
	}
	if _, err := search.NewHybridStrategy(&search.EmbeddingClient{}, nil); err == nil {
		t.Fatal("hybrid without an endpoint was accepted")
	}
}
