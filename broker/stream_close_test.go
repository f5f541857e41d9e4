package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/codemode-gateway/caddy-codemode/internal/streamdeadline"
)

// TestCloseEndsStreamOfClientThatStopsReading: a client that stops reading
// its /execute stream (a real socket, its buffers full) does not hold the
// stream past Close's drain: the aborted session's stream gets
// abortWriteGrace for its final event, then its write fails and its handler
// returns. It held the handler, the socket and the session's run for up to
// streamWriteTimeout (30 s) after the drain, and with them an exit that
// docs/broker.md bounds by drain_timeout (Caddy waits for open requests).
// The test's 15 s is a backstop under streamWriteTimeout, not the bound.
func TestCloseEndsStreamOfClientThatStopsReading(t *testing.T) {
	b := bigResultBroker(t)
	handlerDone := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.Handler().ServeHTTP(w, r)
		if r.URL.Path == "/execute" {
			close(handlerDone)
		}
	}))
	defer srv.Close()

	postNeverRead(t, srv.Listener.Addr().String())
	// The stream is stuck once the run's event queue is full behind the
	// blocked write; until then the session runs.
	var id string
	waitUntil(t, "the stream to block on the client", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		for sid, r := range b.runs {
			id = sid
			return len(r.events) == cap(r.events)
		}
		return false
	})

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := b.Close(ctx); err == nil || !strings.Contains(err.Error(), "aborted 1 running sessions") {
		s, _ := b.GetSession(context.Background(), id)
		t.Fatalf("Close: %v (the session: %+v)", err, s)
	}
	select {
	case <-handlerDone:
	case <-time.After(15 * time.Second):
		t.Fatal("the stream of a client that stopped reading outlived the drain")
	}
}

// TestStalledReaderEndsItsSession: a client that keeps its /execute
// response open but reads nothing ends its session once an event cannot be
// written within the stream's write timeout, as EXECUTION_ABORTED saying the
// caller stopped reading; the session said the caller had closed the
// stream, which it had not (the fault pass's slow reader).
func TestStalledReaderEndsItsSession(t *testing.T) {
	b := bigResultBroker(t)
	defer b.Close(context.Background())
	h := b.HTTPHandler(nil).(*httpHandler)
	h.writeTimeout = time.Second
	srv := httptest.NewServer(h)
	defer srv.Close()

	postNeverRead(t, srv.Listener.Addr().String())
	wantStalledSession(t, b)
}

// TestStalledHTTP2ReaderEndsItsSession: the same over HTTP/2, where the
// stream's deadline is disarmed between events
// (TestQuietHTTP2StreamOutlivesWriteTimeout): a write that blocks on a
// client that reads nothing still fails at its deadline.
func TestStalledHTTP2ReaderEndsItsSession(t *testing.T) {
	b := bigResultBroker(t)
	defer b.Close(context.Background())
	resp := postHTTP2(t, b, time.Second, `{"code":"for (let i = 0; i < 90; i++) await callTool(\"test:big\", {}); return 1"}`)
	defer resp.Body.Close() // never read
	wantStalledSession(t, b)
}

// TestStalledWriteIsTheCallersStall: a write that fails once its deadline
// has passed ends the run as the caller's stall, whatever the error: over
// HTTP/2 the deadline resets the stream and the write fails with the
// stream's error, not os.ErrDeadlineExceeded. Only the request context's
// callback said stall before, and when the handler returned first (a
// loaded machine: TestStalledHTTP2ReaderEndsItsSession, 1 run in 12 at
// load 20-25) the run ended "the caller closed the event stream". A write
// that fails before its deadline (a client that hung up) is not a stall.
func TestStalledWriteIsTheCallersStall(t *testing.T) {
	h2 := httptest.NewRequest(http.MethodPost, "/execute", nil)
	h2.ProtoMajor = 2
	for _, tc := range []struct {
		name  string
		every time.Duration
		want  error
	}{
		{"deadline passed", time.Second, errCallerStalled},
		{"deadline ahead", time.Hour, nil},
	} {
		d := streamdeadline.New(httptest.NewRecorder(), h2, tc.every)
		d.Extend(time.Now().Add(-time.Minute))
		ctx, abort := context.WithCancelCause(context.Background())
		stalled(&run{abortRun: abort}, errors.New("http2: stream closed"), d)
		if got := context.Cause(ctx); got != tc.want {
			t.Errorf("%s: the run's cause %v, want %v", tc.name, got, tc.want)
		}
		abort(nil)
	}
}

// postHTTP2 posts body to b's /execute over HTTP/2 (TLS, as Caddy serves
// HTTPS), its streams' write timeout set to writeTimeout.
func postHTTP2(t *testing.T, b *Broker, writeTimeout time.Duration, body string) *http.Response {
	t.Helper()
	h := b.HTTPHandler(nil).(*httpHandler)
	h.writeTimeout = writeTimeout
	srv := httptest.NewUnstartedServer(h)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	resp, err := srv.Client().Post(srv.URL+"/execute", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if resp.ProtoMajor != 2 {
		resp.Body.Close()
		t.Fatalf("the stream is %s, want HTTP/2", resp.Proto)
	}
	return resp
}

// wantStalledSession waits for b's one session to end, and wants it ended
// because its caller stopped reading.
func wantStalledSession(t *testing.T, b *Broker) {
	t.Helper()
	var id string
	waitUntil(t, "the session to start", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		for sid := range b.runs {
			id = sid
		}
		return id != ""
	})
	var s *Session
	waitUntil(t, "the session to end", func() bool {
		got, err := b.GetSession(context.Background(), id)
		s = got
		return err == nil && s != nil && s.Status == StatusError
	})
	if s.Error == nil || s.Error.Code != "EXECUTION_ABORTED" || !strings.Contains(s.Error.Message, "the caller stopped reading the event stream") {
		t.Fatalf("session error %+v, want EXECUTION_ABORTED: the caller stopped reading", s.Error)
	}
}

// bigResultBroker is a broker whose test:big tool answers 256 KiB. Its
// engine is bigResultEngine: the scripts of these tests take 90 such
// results, whose running time (measured on the clock) passed the secure
// preset's 3.5 s under -race on a loaded machine, and the script ended
// TIMEOUT before the stream stalled or the broker closed (Close: "aborted
// 0 running sessions").
func bigResultBroker(t *testing.T) *Broker {
	t.Helper()
	big := strings.Repeat("x", 256<<10)
	opts := &BrokerOptions{Engine: bigResultEngine(), Tools: NewToolRegistry(), MaxStreamBytes: 1 << 30}
	opts.Tools.Register(ToolDefinition{Name: "test:big", Description: "a big result",
		Handler: func(context.Context, map[string]any, *ExecutionContext) (any, error) { return big, nil }})
	b, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// postNeverRead posts, on a real socket with a small receive buffer, an
// /execute whose 90 results of 256 KiB (23 MB) fill the socket's buffers many
// times over, and never reads its answer.
func postNeverRead(t *testing.T, addr string) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.(*net.TCPConn).SetReadBuffer(4096)
	body, _ := json.Marshal(map[string]any{"code": `for (let i = 0; i < 90; i++) await callTool("test:big", {}); return 1`})
	if _, err := fmt.Fprintf(conn, "POST /execute HTTP/1.1\r\nHost: broker\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body); err != nil {
		t.Fatal(err)
	}
}

// TestQuietHTTP2StreamOutlivesWriteTimeout: an /execute stream over HTTP/2
// (Caddy's protocol for HTTPS by default) whose script waits longer than the
// stream's write timeout between two events (a caller answering a prompt, a
// slow tool) is not cut while its client reads. HTTP/2's write deadline is a
// timer that resets the stream when it fires, even with no write in flight:
// the deadline the last event left armed reset the stream 30 s after it, and
// the session ended EXECUTION_ABORTED, "the caller stopped reading" (a
// gateway with tls internal and max_execution_timeout 120s, curl --http2:
// exit 92, a client:prompt answered after 45 s). The tool's wait is three
// write timeouts.
func TestQuietHTTP2StreamOutlivesWriteTimeout(t *testing.T) {
	const writeTimeout = 300 * time.Millisecond
	tools := NewToolRegistry()
	tools.Register(ToolDefinition{Name: "test:slow", Description: "answers after three write timeouts",
		Handler: func(ctx context.Context, _ map[string]any, _ *ExecutionContext) (any, error) {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(3 * writeTimeout):
				return "slow answer", nil
			}
		}})
	b, err := New(&BrokerOptions{Engine: testEngine(), Tools: tools})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(context.Background())
	resp := postHTTP2(t, b, writeTimeout, `{"code":"return await callTool(\"test:slow\", {})"}`)
	defer resp.Body.Close()
	stream, err := io.ReadAll(resp.Body)
	if err != nil || !strings.Contains(string(stream), `"result":"slow answer"`) {
		t.Fatalf("the stream over HTTP/2 (read error %v):\n%s", err, stream)
	}
}
