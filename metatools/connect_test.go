package metatools

import (
	"context"
	"testing"
	"time"

	"github.com/codemode-gateway/caddy-codemode/broker/catalog"
)

// TestCallWhileUpstreamsConnect: a tool not in the index while upstreams
// announced by Index.Connecting are still making their first connection
// is answered with a transient UPSTREAM_UNREACHABLE saying so, not the
// final NOT_FOUND; once the attempts are over (or the index closed), the
// answer is NOT_FOUND. A meta-tool call waits at most ConnectWait for them.
func TestCallWhileUpstreamsConnect(t *testing.T) {
	ix, err := NewIndex(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := ix.Connecting()
	s := NewService(ix, &Options{ConnectWait: 10 * time.Millisecond})
	_, e := s.CallTool(context.Background(), "calc:add", nil)
	if e == nil || e.Code != catalog.CodeUpstreamUnreachable || !Transient(e.Code) {
		t.Fatalf("while connecting: %+v, want a transient %s", e, catalog.CodeUpstreamUnreachable)
	}
	if ix.awaitConnecting(context.Background(), s.opts.ConnectWait) {
		t.Fatal("awaitConnecting reported the attempts over before done")
	}
	done()
	if !ix.awaitConnecting(context.Background(), time.Hour) {
		t.Fatal("awaitConnecting after done: not over")
	}
	if _, e = s.CallTool(context.Background(), "calc:add", nil); e == nil || e.Code != CodeNotFound {
		t.Fatalf("after the first attempts: %+v, want %s", e, CodeNotFound)
	}
	done() // a second call does nothing

	ix2, _ := NewIndex(nil, nil)
	ix2.Connecting()
	ix2.Close()
	if ix2.stillConnecting() {
		t.Fatal("a closed index still waits for its upstreams")
	}
}
