package telemetry

import (
	"context"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

func TestOutcome(t *testing.T) {
	for code, want := range map[string]string{"": "ok", "TOOL_NOT_FOUND": "tool_not_found", "RATE_LIMIT": "rate_limit",
		"MY_OWN_CODE": "other", "rate_limit": "other"} {
		if got := Outcome(code); got != want {
			t.Errorf("Outcome(%q) = %q, want %q", code, got, want)
		}
	}
}

func TestRegisterTwice(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "x_total", Help: "x"})
	if err := Register(reg, c); err != nil {
		t.Fatal(err)
	}
	if err := Register(reg, c); err != nil {
		t.Fatalf("the same collector again: %v", err)
	}
	other := prometheus.NewCounter(prometheus.CounterOpts{Name: "x_total", Help: "x"})
	if err := Register(reg, other); err == nil {
		t.Fatal("another collector under the same name accepted")
	}
}

func TestSpansOnlyUnderASpan(t *testing.T) {
	ctx, span := StartSpan(context.Background(), "nothing", trace.SpanKindInternal)
	if span.IsRecording() || trace.SpanContextFromContext(ctx).IsValid() {
		t.Fatal("a span without a parent")
	}
	h := http.Header{}
	Inject(ctx, h)
	if len(h) != 0 {
		t.Fatalf("trace context without a span: %v", h)
	}
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	root, rs := tp.Tracer("t").Start(context.Background(), "root")
	cctx, child := StartSpan(root, "child", trace.SpanKindClient)
	Inject(cctx, h)
	EndSpan(child, "TIMEOUT")
	rs.End()
	ended := rec.Ended()
	if len(ended) != 2 || ended[0].Name() != "child" || ended[0].Parent().SpanID() != rs.SpanContext().SpanID() ||
		ended[0].Status().Description != "TIMEOUT" {
		t.Fatalf("spans %v", ended)
	}
	if h.Get("traceparent") == "" {
		t.Fatal("no traceparent injected")
	}
}

func TestLogFields(t *testing.T) {
	ctx := WithSessionID(WithRequestID(context.Background(), "r1"), "s1")
	if f := LogFields(ctx); len(f) != 2 || f[0].String != "r1" || f[1].String != "s1" {
		t.Fatalf("fields %v", f)
	}
	if f := LogFields(context.Background()); len(f) != 0 {
		t.Fatalf("fields %v", f)
	}
}

// TestEveryCodeIsKnown: each error code constant of the module
// (Code... = "SOME_CODE") is a label value, so that a code added later is
// not counted as "other" by mistake.
func TestEveryCodeIsKnown(t *testing.T) {
	re := regexp.MustCompile(`\bCode\w*\s*=\s*"([A-Z][A-Z0-9_]+)"`)
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules" || d.Name() == "testdata") && path != "../.." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range re.FindAllSubmatch(b, -1) {
			if code := string(m[1]); Outcome(code) == "other" {
				t.Errorf("%s: code %s is not in knownCodes", path, code)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestSeries: a listed value's series is looked up once and then reused,
// none is created before its first use, and other values reach the vector
// each time.
func TestSeries(t *testing.T) {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "y_total", Help: "y"}, []string{"rule", "outcome"})
	lookups := map[string]int{}
	s := NewSeries(func(v ...string) prometheus.Counter {
		lookups[v[0]]++
		return vec.WithLabelValues("r", v[0])
	}, "allowed", "denied")
	if n := testutilCount(vec); n != 0 {
		t.Fatalf("%d series before any use", n)
	}
	for range 3 {
		s.Of("allowed").Inc()
		s.Of("other").Inc()
	}
	if lookups["allowed"] != 1 || lookups["other"] != 3 || lookups["denied"] != 0 {
		t.Fatalf("lookups %v, want allowed once, other each time, denied never", lookups)
	}
	if n := testutilCount(vec); n != 2 {
		t.Fatalf("%d series, want 2 (allowed, other)", n)
	}
}

// testutilCount is the number of series vec has.
func testutilCount(c prometheus.Collector) int {
	ch := make(chan prometheus.Metric, 16)
	c.Collect(ch)
	close(ch)
	return len(ch)
}

// notCodes are the upper-case names in backquotes of docs/ that are not
// error codes: environment variables, kernel constants, and a code of a
// former design named as such.
var notCodes = map[string]bool{
	"CODEMODE_CADDY_BINARY": true, "CODEMODE_EVAL_CATALOGS": true, "CODEMODE_TEST_REDIS_ADDR": true,
	"EPOLL_CTL_MOD": true, "HTTPS_PROXY": true, "IDP_CLIENT_ID": true, "IDP_CLIENT_SECRET": true,
	"IDP_EXPECTED_AUDIENCE": true, "IDP_PROVIDER_URL": true, "JWT_SIGNING_KEY": true,
	"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": true, "REDIS_HOST": true, "REDIS_PASSWORD": true,
	"REDIS_PORT": true, "RLIMIT_DATA": true, "SCHED_FIFO": true, "SO_LINGER": true, "SO_REUSEPORT": true,
	"VAULT_CORRUPT": true,
}

// TestCodesDocumented: every code of knownCodes is named in README.md or
// docs/ (in backquotes or as a JSON "code"), and every upper-case name in
// backquotes there with an underscore is a code of this module or listed in notCodes, so an
// operator can look up any code a gateway answers and finds none that no
// longer exists.
func TestCodesDocumented(t *testing.T) {
	pages, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	named := map[string]string{}
	re := regexp.MustCompile("`([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*)`" + `|"code":"([A-Z][A-Z0-9_]+)"`)
	for _, p := range append(pages, "../../README.md") {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			named[m[1]+m[2]] = filepath.Base(p)
		}
	}
	for code := range knownCodes() {
		if named[code] == "" {
			t.Errorf("code %s is in knownCodes but named nowhere in README.md or docs/", code)
		}
	}
	for name, page := range named {
		// A single word (`GET`, `TIMEOUT`) is checked one way only.
		if strings.Contains(name, "_") && !knownCodes()[name] && !notCodes[name] {
			t.Errorf("%s names %s, which is neither a code of knownCodes nor in notCodes", page, name)
		}
	}
}
