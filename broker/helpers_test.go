package broker

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"
)

// testEngine is the real in-process goja engine, shared by the tests.
var testEngine = sync.OnceValue(func() sandbox.Engine { return sandbox.NewInProcess(nil) })

// bigResultEngine runs the tests whose scripts build and return results of
// a megabyte: the secure preset's 3.5 s of running time is measured on the
// clock, which a machine loaded by other jobs (CI beside the race detector)
// stretches past it for such a script; a time limit is not what they test.
var bigResultEngine = sync.OnceValue(func() sandbox.Engine {
	return sandbox.NewInProcess(&sandbox.Options{Limits: sandbox.Limits{Timeout: time.Minute, CPUTime: time.Minute}})
})

// newTestBroker returns a broker with the demo tools behind a real HTTP
// server on 127.0.0.1, both closed when the test ends.
func newTestBroker(t *testing.T, mutate func(*BrokerOptions)) (*Broker, *httptest.Server) {
	t.Helper()
	opts := &BrokerOptions{Engine: testEngine(), Tools: NewToolRegistry()}
	for _, d := range DemoTools() {
		opts.Tools.Register(d)
	}
	if mutate != nil {
		mutate(opts)
	}
	b, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	srv := httptest.NewServer(b.Handler())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = b.Close(ctx) // tests that close the broker check the error themselves
		srv.Close()
	})
	return b, srv
}

// event is a decoded NDJSON line.
type event struct {
	Type    string          `json:"type"`
	Payload json.RawMessage `json:"payload"`
}

func (e event) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(e.Payload, v); err != nil {
		t.Fatalf("decoding %s payload %s: %v", e.Type, e.Payload, err)
	}
}

// stream is an open POST /execute response read line by line.
type stream struct {
	t    *testing.T
	resp *http.Response
	sc   *bufio.Scanner
}

func startExecute(t *testing.T, base string, body any, header http.Header) *stream {
	t.Helper()
	raw, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, base+"/execute", bytes.NewReader(raw))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST /execute: %v", err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("POST /execute: status %d: %s", resp.StatusCode, b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/x-ndjson" {
		t.Fatalf("Content-Type = %q", ct)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	return &stream{t: t, resp: resp, sc: sc}
}

// next returns the next event, failing the test at the end of the stream.
func (s *stream) next() event {
	s.t.Helper()
	if !s.sc.Scan() {
		s.t.Fatalf("stream ended early: %v", s.sc.Err())
	}
	var e event
	if err := json.Unmarshal(s.sc.Bytes(), &e); err != nil {
		s.t.Fatalf("bad NDJSON line %q: %v", s.sc.Text(), err)
	}
	return e
}

// rest reads the remaining events.
func (s *stream) rest() []event {
	s.t.Helper()
	var out []event
	for s.sc.Scan() {
		var e event
		if err := json.Unmarshal(s.sc.Bytes(), &e); err != nil {
			s.t.Fatalf("bad NDJSON line %q: %v", s.sc.Text(), err)
		}
		out = append(out, e)
	}
	return out
}

func types(evs []event) string {
	var ts []string
	for _, e := range evs {
		ts = append(ts, e.Type)
	}
	return strings.Join(ts, ",")
}

// do sends a JSON request and returns the status, headers and body.
func do(t *testing.T, method, url string, body any, header http.Header) (int, http.Header, []byte) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		raw, _ := json.Marshal(b)
		rd = bytes.NewReader(raw)
	}
	req, _ := http.NewRequest(method, url, rd)
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

// errorCode extracts error.code from an error body.
func errorCode(t *testing.T, body []byte) string {
	t.Helper()
	var e struct {
		Error ErrorBody `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Error.Code == "" || e.Error.Message == "" {
		t.Fatalf("not an error body: %s", body)
	}
	return e.Error.Code
}

// collect runs Execute and returns all events.
func collect(t *testing.T, b *Broker, code string, opts ExecuteOptions) ([]StreamEvent, error) {
	t.Helper()
	var evs []StreamEvent
	for ev, err := range b.Execute(context.Background(), code, opts) {
		if err != nil {
			return evs, err
		}
		evs = append(evs, ev)
	}
	return evs, nil
}

// fakeClock is an injected clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// newServer serves h on a real loopback socket for the test.
func newServer(t *testing.T, h http.Handler) string {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}
