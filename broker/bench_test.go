package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
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

// BenchmarkInvokeToolObserved is one registry tool call (math:add) through
// InvokeTool without metrics, with metrics, and with metrics under a
// recording trace span: the cost of the instrumentation per call.
func BenchmarkInvokeToolObserved(b *testing.B) {
	// Spans are sampled and recorded, then dropped: no exporter.
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	traced, span := tp.Tracer("bench").Start(context.Background(), "request")
	defer span.End()
	for _, c := range []struct {
		name    string
		metrics *Metrics
		ctx     context.Context
	}{
		{"plain", nil, context.Background()},
		{"metrics", NewMetrics(), context.Background()},
		{"metrics+trace", NewMetrics(), traced},
	} {
		b.Run(c.name, func(b *testing.B) {
			br, err := New(&BrokerOptions{Engine: testEngine(), Tools: NewToolRegistry(), Metrics: c.metrics})
			if err != nil {
				b.Fatal(err)
			}
			defer br.Close(context.Background())
			for _, d := range DemoTools() {
				br.Tools().Register(d)
			}
			in := json.RawMessage(`{"a":1,"b":2}`)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if _, err := br.InvokeTool(c.ctx, "math:add", in, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// constEngine answers every script with the number 2 at once: the broker's
// own cost per execution, without a sandbox.
type constEngine struct{}

func (constEngine) Execute(context.Context, sandbox.Request, sandbox.Host) (*sandbox.Result, error) {
	return &sandbox.Result{Status: sandbox.StatusOK, Result: json.RawMessage("2")}, nil
}

func (constEngine) Close() error { return nil }

// BenchmarkHTTPExecuteOverhead is POST /execute of `return 1+1` through the
// broker's HTTP handler (no sockets) with an engine that answers at once:
// request decode, session bookkeeping, metrics and the NDJSON stream.
func BenchmarkHTTPExecuteOverhead(b *testing.B) {
	br, err := New(&BrokerOptions{Engine: constEngine{}, Metrics: NewMetrics()})
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close(context.Background())
	h := br.Handler()
	body := []byte(`{"code":"return 1+1"}`)
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodPost, "/execute", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusOK || !bytes.Contains(w.Body.Bytes(), []byte(`"result":2`)) {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
}
