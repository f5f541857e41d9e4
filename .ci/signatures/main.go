// Command signatures writes the TypeScript signatures meta:describe gives
// for every operation of the vendored evaluation catalogs (the default,
// size-bounded one and the most detailed one) into one declaration file,
// so that CI can have the TypeScript compiler check that they are
// TypeScript (.ci/run: tsc --noEmit --strict on the output).
package main

import (
	"compress/gzip"
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"strings"

	"github.com/codemode-gateway/caddy-codemode/broker/catalog"
	"github.com/codemode-gateway/caddy-codemode/metatools"
)

func main() {
	dir := flag.String("catalogs", "metatools/testdata/catalogs", "directory of the vendored <name>.json.gz catalogs")
	out := flag.String("out", "signatures.d.ts", "declaration file to write")
	flag.Parse()
	paths, err := filepath.Glob(filepath.Join(*dir, "*.json.gz"))
	if err != nil || len(paths) == 0 {
		log.Fatalf("no catalogs in %s: %v", *dir, err)
	}
	var b strings.Builder
	n := 0
	for _, p := range paths {
		name := strings.TrimSuffix(filepath.Base(p), ".json.gz")
		tools := load(name, p)
		ix, err := metatools.NewIndex([]metatools.ToolSource{&metatools.StaticSource{List: tools}}, nil)
		if err != nil {
			log.Fatal(err)
		}
		if err := ix.Reload(context.Background()); err != nil {
			log.Fatal(err)
		}
		svc := metatools.NewService(ix, nil)
		for _, t := range tools {
			compact, err := svc.Describe(context.Background(), metatools.DescribeInput{ToolNames: []string{t.Name}})
			if err != nil {
				log.Fatal(err)
			}
			full, _ := metatools.Signature(t, nil)
			for _, sig := range []string{compact.Tools[0].Signature, full} {
				n++
				fmt.Fprintf(&b, "// %s\ndeclare namespace S%d {\n%s\n}\n", t.Name, n, sig)
			}
		}
	}
	if err := os.WriteFile(*out, []byte(b.String()), 0o644); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d signatures of %d catalogs written to %s\n", n, len(paths), *out)
}

// load builds a catalog's tools from its gzip document, as the gateway does
// from a spec_url.
func load(name, path string) []metatools.Tool {
	f, err := os.Open(path)
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		log.Fatal(err)
	}
	tmp, err := os.CreateTemp("", "catalog-*.json")
	if err != nil {
		log.Fatal(err)
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, zr); err != nil {
		log.Fatal(err)
	}
	tmp.Close()
	cat, err := catalog.New([]catalog.Source{{Name: name, SpecURL: tmp.Name()}}, &catalog.Options{PollInterval: -1})
	if err != nil {
		log.Fatal(err)
	}
	if err := cat.Start(context.Background()); err != nil {
		log.Fatalf("loading %s: %v", name, err)
	}
	defer cat.Close()
	tools, err := (&metatools.CatalogSource{C: cat}).Tools(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	return tools
}
