package metatools

import (
	"context"
	"encoding/json"
	"sync"
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

// askedCtx tells when a call first asks for its Done channel: with the
// fix, that is the wait for the upstreams' first connection.
type askedCtx struct {
	context.Context
	once  sync.Once
	asked chan struct{}
}

func (c *askedCtx) Done() <-chan struct{} {
	c.once.Do(func() { close(c.asked) })
	return c.Context.Done()
}

// TestGoAPIWaitsForUpstreams: Search and Describe called through the Go
// API wait for the upstreams' first connection as meta-tool calls do (up
// to ConnectWait): a tool whose upstream connects meanwhile is found.
// Before, they answered at once without it. The upstream "connects" only
// once the call waits, so a call that does not wait cannot find it.
func TestGoAPIWaitsForUpstreams(t *testing.T) {
	for _, api := range []string{"Search", "Describe"} {
		t.Run(api, func(t *testing.T) {
			src := &changingSource{}
			ix, err := NewIndex([]ToolSource{src}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer ix.Close()
			ix.Reload(context.Background())
			done := ix.Connecting()
			s := NewService(ix, &Options{ConnectWait: time.Hour})
			ctx := &askedCtx{Context: context.Background(), asked: make(chan struct{})}
			found := make(chan bool, 1)
			go func() {
				switch api {
				case "Search":
					out, err := s.Search(ctx, SearchInput{Query: "weather forecast"})
					found <- err == nil && len(out.Tools) == 1 && out.Tools[0].Name == "sky:forecast"
				case "Describe":
					out, err := s.Describe(ctx, DescribeInput{ToolNames: []string{"sky:forecast"}})
					found <- err == nil && len(out.Tools) == 1 && len(out.NotFound) == 0
				}
			}()
			select {
			case <-ctx.asked: // waiting: the upstream connects now
			case ok := <-found:
				t.Fatalf("%s answered without waiting for the upstream (found its tool: %v)", api, ok)
			}
			src.mu.Lock()
			src.tools = []Tool{{Name: "sky:forecast", Description: "Weather forecast for a city", InputSchema: json.RawMessage(`{"type":"object"}`)}}
			src.mu.Unlock()
			ix.Reload(context.Background())
			done()
			if !<-found {
				t.Fatalf("%s did not find the tool of the upstream that connected while it waited", api)
			}
		})
	}
}
