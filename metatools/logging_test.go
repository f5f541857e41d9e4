package metatools

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"
)

// logLines collects the log messages a client received.
type logLines struct {
	*received[mcp.LoggingMessageParams]
}

func (l logLines) handle(_ context.Context, req *mcp.LoggingMessageRequest) { l.add(*req.Params) }

// waitFor returns the first n messages once the client has them.
func (l logLines) waitFor(t *testing.T, n int) []mcp.LoggingMessageParams {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		got := l.all()
		if len(got) >= n {
			return got[:n]
		}
		have := len(got)
		select {
		case <-l.seen:
		case <-time.After(20 * time.Millisecond):
		case <-deadline:
			t.Fatalf("%d log messages after waiting, want %d", have, n)
		}
	}
}

// logLevelEras are the two ways a client sets its log level: the
// session's logging/setLevel, and at 2026-07-28 the request's _meta.
var logLevelEras = []struct {
	version  string
	setLevel func(t *testing.T, f *fixture, p *mcp.CallToolParams, level mcp.LoggingLevel)
}{
	{"2025-11-25", func(t *testing.T, f *fixture, _ *mcp.CallToolParams, level mcp.LoggingLevel) {
		if err := f.session.SetLoggingLevel(context.Background(), &mcp.SetLoggingLevelParams{Level: level}); err != nil {
			t.Fatal(err)
		}
	}},
	{"2026-07-28", func(_ *testing.T, _ *fixture, p *mcp.CallToolParams, level mcp.LoggingLevel) {
		p.Meta = mcp.Meta{mcp.MetaKeyLogLevel: string(level)}
	}},
}

// logHostProbe is an engine that records whether the host of its last
// script took console lines (a sandbox.LogHost: a worker sends every line
// to such a host).
type logHostProbe struct {
	sandbox.Engine
	streamed atomic.Bool
}

func (p *logHostProbe) Execute(ctx context.Context, req sandbox.Request, host sandbox.Host) (*sandbox.Result, error) {
	_, ok := host.(sandbox.LogHost)
	p.streamed.Store(ok)
	return p.Engine.Execute(ctx, req, host)
}

// TestConsoleLinesStreamOnlyWhenTaken: a plan whose client takes no console
// line (no level set, or a level above error) and asked for no progress
// runs on a host that is no LogHost, so a worker sends none of its lines;
// it used to stream them all to a go-sdk that dropped them. A level of
// error or below streams them, in both eras.
func TestConsoleLinesStreamOnlyWhenTaken(t *testing.T) {
	for _, era := range logLevelEras {
		t.Run(era.version, func(t *testing.T) {
			probe := &logHostProbe{}
			f := newFixture(t, fixtureOptions{protocolVersion: era.version,
				options: func(o *Options) {
					e := sandbox.NewInProcess(&sandbox.Options{Limits: sandbox.Limits{Timeout: time.Minute, AllowConsole: true}})
					t.Cleanup(func() { e.Close() })
					probe.Engine = e
					o.Engine = probe
				}})
			for _, tc := range []struct {
				level  mcp.LoggingLevel
				stream bool
			}{{"", false}, {"critical", false}, {"emergency", false}, {"error", true}, {"debug", true}} {
				p := &mcp.CallToolParams{Name: "meta:execute", Arguments: map[string]any{"script": `console.error("e"); return 1`}}
				if tc.level != "" {
					era.setLevel(t, f, p, tc.level)
				}
				if res, err := f.session.CallTool(context.Background(), p); err != nil || res.IsError {
					t.Fatalf("meta:execute: %v %v", err, res)
				}
				if got := probe.streamed.Load(); got != tc.stream {
					t.Errorf("level %q: console lines streamed %v, want %v", tc.level, got, tc.stream)
				}
			}
		})
	}
}

// TestConsoleLinesAreLogMessages: a plan's console lines reach the client
// as notifications/message at or above the level it asked for — none
// before it asked — in both protocol eras (logging/setLevel; at 2026-07-28
// the request's _meta). console.debug and info are the sandbox's "log",
// so info.
func TestConsoleLinesAreLogMessages(t *testing.T) {
	script := `console.debug("d"); console.log("l"); console.info("i"); console.warn("w"); console.error("e"); return 1`
	for _, era := range logLevelEras {
		t.Run(era.version, func(t *testing.T) {
			lines := logLines{newReceived[mcp.LoggingMessageParams]()}
			f := newFixture(t, fixtureOptions{protocolVersion: era.version,
				client: &mcp.ClientOptions{LoggingMessageHandler: lines.handle},
				options: func(o *Options) {
					e := sandbox.NewInProcess(&sandbox.Options{Limits: sandbox.Limits{Timeout: time.Minute, AllowConsole: true}})
					t.Cleanup(func() { e.Close() })
					o.Engine = e
				}})
			run := func(tag string, level mcp.LoggingLevel) {
				t.Helper()
				p := &mcp.CallToolParams{Name: "meta:execute", Arguments: map[string]any{"script": fmt.Sprintf(`console.info(%q); `, tag) + script}}
				if level != "" {
					era.setLevel(t, f, p, level)
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				res, err := f.session.CallTool(ctx, p)
				if err != nil || res.IsError {
					t.Fatalf("meta:execute: %v %v", err, res)
				}
			}
			// No level asked for: nothing is sent. The next plan's lines
			// come after, so a line of this one would be the first seen.
			run("unasked", "")
			run("warning", "warning")
			run("info", "info")
			got := lines.waitFor(t, 2+6)
			want := []struct {
				level mcp.LoggingLevel
				data  string
			}{{"warning", "w"}, {"error", "e"}, {"info", "info"}, {"info", "d"}, {"info", "l"}, {"info", "i"}, {"warning", "w"}, {"error", "e"}}
			for i, w := range want {
				if got[i].Level != w.level || got[i].Data != w.data || got[i].Logger != MetaExecute {
					t.Errorf("message %d: %s %q from %q, want %s %q from %q", i, got[i].Level, got[i].Data, got[i].Logger, w.level, w.data, MetaExecute)
				}
			}
		})
	}
}

// TestPlanSessionConsoleLinesAreLogMessages: a plan run as a broker
// session (a 2026-07-28 caller who may be asked) sends the console lines of
// its first request as log messages, at or above the request's level, as a
// plan outside a session does; lines after that request answered are in
// the result only.
func TestPlanSessionConsoleLinesAreLogMessages(t *testing.T) {
	e := sandbox.NewInProcess(&sandbox.Options{Limits: sandbox.Limits{Timeout: time.Minute, AllowConsole: true}})
	t.Cleanup(func() { e.Close() })
	hs := planSessionServer(t, e, &Options{})
	lines := logLines{newReceived[mcp.LoggingMessageParams]()}
	client := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, &mcp.ClientOptions{
		LoggingMessageHandler: lines.handle,
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"result": "Ada"}}, nil
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: hs.URL}, &mcp.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	p := &mcp.CallToolParams{Name: "meta:execute", Arguments: map[string]any{"script": `console.info("quiet"); console.warn("before");
		const name = await callTool("client:prompt", {question: "name?"}); console.error("after " + name); return name`}}
	p.Meta = mcp.Meta{mcp.MetaKeyLogLevel: "warning"}
	res, err := cs.CallTool(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Status string
		Result any
		Logs   []string
	}
	structured(t, res, &out)
	if out.Status != "ok" || out.Result != "Ada" || len(out.Logs) != 3 {
		t.Fatalf("plan: %+v", out)
	}
	got := lines.waitFor(t, 1)
	if got[0].Level != "warning" || got[0].Data != "before" || got[0].Logger != MetaExecute {
		t.Errorf("first log message %s %q from %q, want warning \"before\" from %q", got[0].Level, got[0].Data, got[0].Logger, MetaExecute)
	}
	if all := lines.all(); len(all) != 1 {
		t.Errorf("log messages %+v, want the first request's one line at or above warning", all)
	}
}
