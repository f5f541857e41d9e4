package metatools

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/codemode-gateway/caddy-codemode/metatools/search"
)

func TestSearchMLUnreachable(t *testing.T) {
	hs := httptest.NewServer(http.NotFoundHandler())
	url := hs.URL
	hs.Close()
	ix, err := NewIndex([]ToolSource{registeredTools()}, &IndexOptions{Strategy: StrategyML,
		Embedding: &search.EmbeddingClient{URL: url, Model: "m"}})
	if err != nil {
		t.Fatal(err)
	}
	ix.Reload(context.Background())
	_, err = NewService(ix, nil).Search(context.Background(), SearchInput{Queries: []string{"contacts"}})
	me, ok := err.(*Error)
	if !ok || me.Code != CodeSearchUnavailable || !me.Transient {
		t.Fatalf("err = %#v", err)
	}
	if _, err := NewIndex(nil, &IndexOptions{Strategy: StrategyML}); err == nil {
		t.Error("ml without an endpoint accepted")
	}
	if _, err := NewIndex(nil, &IndexOptions{Strategy: "vectors"}); err == nil {
		t.Error("unknown strategy accepted")
	}
}

func TestIsMetaToolName(t *testing.T) {
	for name, want := range map[string]bool{
		"meta:search": true, "meta:anything": true, "meta_search": true, "META_INVOKE": true, "meta.execute": true,
		"meta-describe": true, "metadata:get": false, "meta_data": false, "crm:createContact": false, "meta": false,
	} {
		if got := IsMetaToolName(name); got != want {
			t.Errorf("IsMetaToolName(%q) = %v", name, got)
		}
	}
}
