package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"
	"github.com/codemode-gateway/caddy-codemode/guard/redistest"
	"github.com/redis/go-redis/v9"

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

// roundTrips counts the commands and pipelines a go-redis client sends.
type roundTrips struct{ n atomic.Int64 }

func (*roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { c.n.Add(1); return next(ctx, cmd) }
}
func (c *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { c.n.Add(1); return next(ctx, cmds) }
}

// BenchmarkRedisExecute runs `return 1+1` through Execute with sessions in
// a real Redis and an engine that answers at once: the store's cost per
// session (create, finish, close its calls, announce the change), in
// allocations and Redis round trips (the heartbeat's included).
func BenchmarkRedisExecute(b *testing.B) {
	rdb, prefix := redistest.Client(b)
	rt := &roundTrips{}
	rdb.AddHook(rt)
	br, err := New(&BrokerOptions{Engine: constEngine{}, Redis: rdb, KeyPrefix: prefix})
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close(context.Background())
	b.ReportAllocs()
	rt.n.Store(0)
	b.ResetTimer()
	for b.Loop() {
		for _, err := range br.Execute(context.Background(), "return 1+1", ExecuteOptions{}) {
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(rt.n.Load())/float64(b.N), "roundtrips/op")
}
