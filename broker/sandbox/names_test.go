package sandbox

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// exportedNames are the exported top-level names of the Go files of dir
// (tests left out), by kind: "type", "const", "var", "func".
func exportedNames(t *testing.T, dir string) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, dir, func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]string{}
	for _, p := range pkgs {
		for _, f := range p.Files {
			for _, d := range f.Decls {
				switch d := d.(type) {
				case *ast.FuncDecl:
					if d.Recv == nil && d.Name.IsExported() {
						names[d.Name.Name] = "func"
					}
				case *ast.GenDecl:
					for _, sp := range d.Specs {
						switch s := sp.(type) {
						case *ast.TypeSpec:
							if s.Name.IsExported() {
								names[s.Name.Name] = "type"
							}
						case *ast.ValueSpec:
							for _, n := range s.Names {
								if n.IsExported() {
									names[n.Name] = d.Tok.String()
								}
							}
						}
					}
				}
			}
		}
	}
	return names
}

// TestEveryEngineNameExported: the sandbox's API is its engine's
// (internal/engine, which imports no logging, metrics or tracing library so
// that a worker process initialises none): every exported type, constant
// and function of the engine has its name here, of the same kind, so that
// nothing a caller could use stays behind in the internal package. The
// two lists a Recorder's metrics are made with (DeathCauses, WaitOutcomes)
// are the engine's own business.
func TestEveryEngineNameExported(t *testing.T) {
	engine, here := exportedNames(t, "internal/engine"), exportedNames(t, ".")
	if len(engine) < 100 {
		t.Fatalf("found %d exported names in internal/engine", len(engine))
	}
	for name, kind := range engine {
		if name == "DeathCauses" || name == "WaitOutcomes" {
			continue
		}
		if here[name] != kind {
			t.Errorf("internal/engine's %s %s is not in broker/sandbox (found %q)", kind, name, here[name])
		}
	}
}
