package metatools

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// syntheticTools is n tools over 10 apps with schemas, for benchmarks.
func syntheticTools(n int) []Tool {
	verbs := []string{"create", "list", "get", "update", "delete", "search"}
	nouns := []string{"user", "repo", "issue", "comment", "invoice", "order", "contact", "campaign", "alert", "template",
		"segment", "webhook", "domain", "key", "team", "project", "file", "folder", "event", "report"}
	tools := make([]Tool, n)
	for i := range tools {
		v, o := verbs[i%len(verbs)], nouns[(i/len(verbs))%len(nouns)]
		app := fmt.Sprintf("app%d", i%10)
		tools[i] = Tool{
			Name: fmt.Sprintf("%s:%s%s%d", app, v, strings.ToUpper(o[:1])+o[1:], i), AppID: app,
			Description: fmt.Sprintf("%s a %s in %s. Returns the %s with its id and name.", v, o, app, o),
			InputSchema: json.RawMessage(fmt.Sprintf(`{"type":"object","properties":{"%sId":{"type":"string","description":"the %s id"},"limit":{"type":"integer"}},"required":["%sId"]}`, o, o, o)),
			Tags:        []string{o},
		}
	}
	return tools
}

func BenchmarkIndexBuild1000(b *testing.B) {
	src := &StaticSource{List: syntheticTools(1000)}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		ix, _ := NewIndex([]ToolSource{src}, nil)
		ix.Reload(ctx)
	}
}

// BenchmarkSearch1200 is one meta:search query over 1,200 tools through
// Service.Search (validation, ranking, merge, warnings). It also reports the
// median latency of a separate timed pass.
func BenchmarkSearch1200(b *testing.B) {
	ix, _ := NewIndex([]ToolSource{&StaticSource{List: syntheticTools(1200)}}, nil)
	ix.Reload(context.Background())
	s := NewService(ix, nil)
	queries := []string{"create a new invoice", "list all open issues in a repo", "delete webhook", "find contacts by email", "update the campaign template"}
	ctx := context.Background()
	lat := make([]time.Duration, 0, 1000)
	for i := range 1000 {
		start := time.Now()
		s.Search(ctx, SearchInput{Queries: []string{queries[i%len(queries)]}})
		lat = append(lat, time.Since(start))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		s.Search(ctx, SearchInput{Queries: []string{queries[i%len(queries)]}})
		i++
	}
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "median-µs")
}

// BenchmarkMCPInvokeRoundTrip is one meta:invoke call from a go-sdk client
// to the meta-tools over Streamable HTTP on loopback, to an in-process tool.
func BenchmarkMCPInvokeRoundTrip(b *testing.B) {
	ix, _ := NewIndex([]ToolSource{registeredTools()}, nil)
	ix.Reload(context.Background())
	svc := NewService(ix, nil)
	srv := NewServer(svc, nil)
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	defer hs.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "v1"}, nil).
		Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: hs.URL}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer cs.Close()
	params := &mcp.CallToolParams{Name: MetaInvoke, Arguments: map[string]any{"tool": "crm:listContacts", "input": map[string]any{}}}
	b.ReportAllocs()
	for b.Loop() {
		res, err := cs.CallTool(context.Background(), params)
		if err != nil || res.IsError {
			b.Fatalf("%v %v", err, res)
		}
	}
}
