package engine

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// BenchmarkReplaceLoneSurrogates: what every result and tool-call input
// pays on its way out of the sandbox, for JSON of the usual shapes (text
// without escapes, API objects full of \" escapes, control characters as
// \u escapes) and one holding a surrogate pair (which the rewrite reads to
// its end).
func BenchmarkReplaceLoneSurrogates(b *testing.B) {
	var objs []map[string]any
	for i := range 4000 {
		objs = append(objs, map[string]any{"id": i, "name": "Item \"quoted\" name", "note": "line one\nline two\ttab"})
	}
	api, _ := json.Marshal(objs)
	for _, in := range []struct {
		name string
		b    []byte
	}{
		{"plain_1MB", []byte(`"` + strings.Repeat("The quick brown fox jumps over the lazy dog. ", 1<<20/45) + `"`)},
		{"api_json", api},
		{"u_escapes_1MB", []byte(`"` + strings.Repeat(`a\u0001b\u001fc `, 1<<20/16) + `"`)},
		{"pair_1MB", []byte(`"` + strings.Repeat("The quick brown fox jumps over the lazy dog. ", 1<<20/45) + `\ud83d\ude00"`)},
	} {
		b.Run(in.name, func(b *testing.B) {
			b.SetBytes(int64(len(in.b)))
			want := bytes.Clone(in.b)
			for b.Loop() {
				replaceLoneSurrogates(in.b)
			}
			if !bytes.Equal(in.b, want) {
				b.Fatal("the input changed")
			}
		})
	}
}
