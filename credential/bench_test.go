package credential

import (
	"net/http"
	"testing"

	"github.com/codemode-gateway/caddy-codemode/guard/redistest"
)

// BenchmarkAuthorize is what acting as the user adds to one outbound call
// of a connected user: the vault record read and opened (AES-256-GCM), the
// token put on the request. Against the in-process store, and against a
// real Redis on loopback (one GET and the touch that keeps the record).
func BenchmarkAuthorize(b *testing.B) {
	for _, tc := range []struct {
		name  string
		store func(b *testing.B) Store
	}{
		{"memory", func(*testing.B) Store { return NewMemoryStore(nil) }},
		{"redis", func(b *testing.B) Store {
			rc, prefix := redistest.Client(b)
			return NewRedisStore(rc, prefix)
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			h := newHarness(b, tc.store(b), nil, nil)
			h.connect(b, h.browser(b, "alice", "gh-alice"))
			ctx := as("alice")
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, h.fake.URL+"/api/whoami", nil)
			b.ReportAllocs()
			for b.Loop() {
				req.Header.Del("Authorization")
				if ok, err := h.m.Authorize(ctx, "forge", req); !ok || err != nil {
					b.Fatal(ok, err)
				}
			}
			if req.Header.Get("Authorization") == "" {
				b.Fatal("no credential applied")
			}
		})
	}
}
