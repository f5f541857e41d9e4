package caddymodules

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/modules/standard"
)

var updateGolden = flag.Bool("update", false, "rewrite the expected output of .caddyfiletest files")

// TestCaddyfileAdapt checks every testdata/caddyfile/*.caddyfiletest: a
// Caddyfile, a line of ten dashes, then either the adapted JSON or a line
// "error: <text>" naming an adapt error that must contain <text>.
func TestCaddyfileAdapt(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "caddyfile", "*.caddyfiletest"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no .caddyfiletest files")
	}
	adapter := caddyconfig.GetAdapter("caddyfile")
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			raw, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			input, want, ok := strings.Cut(string(raw), "\n----------\n")
			if !ok {
				t.Fatalf("%s: no ---------- separator", file)
			}
			want = strings.TrimSpace(want)
			out, _, adaptErr := adapter.Adapt([]byte(input), map[string]any{"filename": file})
			if msg, isErr := strings.CutPrefix(want, "error:"); isErr {
				msg = strings.TrimSpace(msg)
				if adaptErr == nil {
					t.Fatalf("adapt succeeded, want an error containing %q", msg)
				}
				if !strings.Contains(adaptErr.Error(), msg) {
					t.Fatalf("adapt error %q does not contain %q", adaptErr, msg)
				}
				return
			}
			if adaptErr != nil {
				t.Fatalf("adapt: %v", adaptErr)
			}
			var buf bytes.Buffer
			if err := json.Indent(&buf, out, "", "\t"); err != nil {
				t.Fatal(err)
			}
			got := buf.String()
			if *updateGolden {
				if err := os.WriteFile(file, []byte(input+"\n----------\n"+got+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if got != want {
				t.Errorf("adapted JSON differs\n--- got\n%s\n--- want\n%s", got, want)
			}
		})
	}
}

// FuzzCaddyfileAdapt: `caddy adapt`, `caddy run` and `caddy reload` read a
// Caddyfile an operator wrote, typos and all; adapting any text through
// this project's directives and `codemode` global options answers JSON or
// an error, never a panic. Seeds are the inputs of the golden files.
// `import` is left out: it reads other files, which a fuzz run must not.
func FuzzCaddyfileAdapt(f *testing.F) {
	files, err := filepath.Glob(filepath.Join("testdata", "caddyfile", "*.caddyfiletest"))
	if err != nil {
		f.Fatal(err)
	}
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		input, _, _ := strings.Cut(string(raw), "\n----------\n")
		f.Add(input)
	}
	adapter := caddyconfig.GetAdapter("caddyfile")
	f.Fuzz(func(t *testing.T, input string) {
		if len(input) > 8<<10 || strings.Contains(input, "import") {
			return
		}
		out, _, err := adapter.Adapt([]byte(input), map[string]any{"filename": "Caddyfile"})
		if err == nil && !json.Valid(out) {
			t.Fatalf("adapted to invalid JSON: %s", out)
		}
	})
}
