package broker

import (
	"context"
	"testing"
)

// BenchmarkExecuteTrivial runs `return 1` through Execute (no HTTP).
func BenchmarkExecuteTrivial(b *testing.B) {
	br, err := New(&BrokerOptions{Engine: testEngine()})
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close(context.Background())
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			for _, err := range br.Execute(context.Background(), "return 1", ExecuteOptions{}) {
				if err != nil {
					b.Error(err)
				}
			}
		}
	})
}
