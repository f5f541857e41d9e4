package metatools

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codemode-gateway/caddy-codemode/broker"
	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"
)

// progressLog records the notifications/progress a go-sdk client receives.
type progressLog struct {
	mu   sync.Mutex
	got  []mcp.ProgressNotificationParams
	seen chan struct{} // a notification arrived
}

func newProgressLog() *progressLog { return &progressLog{seen: make(chan struct{}, 1)} }

func (l *progressLog) handle(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
	l.mu.Lock()
	l.got = append(l.got, *req.Params)
	l.mu.Unlock()
	select {
	case l.seen <- struct{}{}:
	default:
	}
}

func (l *progressLog) all() []mcp.ProgressNotificationParams {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]mcp.ProgressNotificationParams(nil), l.got...)
}

// waitFor waits (generously) until at least n notifications arrived.
func (l *progressLog) waitFor(ctx context.Context, n int) error {
	for {
		if len(l.all()) >= n {
			return nil
		}
		select {
		case <-l.seen:
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			return fmt.Errorf("%d progress notifications after waiting, want %d", len(l.all()), n)
		}
	}
}

// progressFixture serves the meta-tools with a tool, gate:wait, that waits
// until the client has received n notifications: the plan moves on only
// once its progress reached the client, so the test needs no timing.
func progressFixture(t *testing.T, version string, interval time.Duration) (*fixture, *progressLog) {
	t.Helper()
	log := newProgressLog()
	f := newFixture(t, fixtureOptions{protocolVersion: version, extra: []ToolSource{gateTools(log)},
		client: &mcp.ClientOptions{ProgressNotificationHandler: log.handle},
		options: func(o *Options) {
			e := sandbox.NewInProcess(&sandbox.Options{Limits: sandbox.Limits{Timeout: time.Minute, AllowConsole: true, MaxToolCalls: 20000}})
			t.Cleanup(func() { e.Close() })
			o.Engine = e
			o.ProgressInterval = interval
		}})
	return f, log
}

// gateTools are gate:wait, which returns once the client has seen n
// progress notifications, and gate:tick, which returns at once.
func gateTools(log *progressLog) *StaticSource {
	return &StaticSource{
		List: []Tool{
			{Name: "gate:wait", AppID: "gate", Description: "Wait until the client has seen n progress notifications",
				InputSchema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}}}`)},
			{Name: "gate:tick", AppID: "gate", Description: "Return at once", InputSchema: json.RawMessage(`{"type":"object"}`)},
		},
		Handlers: map[string]func(context.Context, json.RawMessage) (json.RawMessage, error){
			"gate:wait": func(ctx context.Context, in json.RawMessage) (json.RawMessage, error) {
				var v struct{ N int }
				_ = json.Unmarshal(in, &v)
				ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				defer cancel()
				if err := log.waitFor(ctx, v.N); err != nil {
					return nil, err
				}
				return json.RawMessage(`{"ok":true}`), nil
			},
			"gate:tick": func(context.Context, json.RawMessage) (json.RawMessage, error) {
				return json.RawMessage(`{}`), nil
			},
		},
	}
}

func callExecute(t *testing.T, f *fixture, script string, token any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := &mcp.CallToolParams{Name: "meta:execute", Arguments: map[string]any{"script": script}}
	if token != nil {
		p.SetProgressToken(token)
	}
	res, err := f.session.CallTool(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Status string
		Error  any
	}
	structured(t, res, &out)
	if out.Status != "ok" {
		t.Fatalf("plan status %q: %v", out.Status, out.Error)
	}
	return res
}

// checkProgress checks what MCP asks of a sequence of notifications: the
// request's token, progress increasing with each, a short message.
func checkProgress(t *testing.T, got []mcp.ProgressNotificationParams, token any) {
	t.Helper()
	for i, p := range got {
		if fmt.Sprint(p.ProgressToken) != fmt.Sprint(token) {
			t.Errorf("notification %d: token %v, want %v", i, p.ProgressToken, token)
		}
		if i > 0 && p.Progress <= got[i-1].Progress {
			t.Errorf("notification %d: progress %v after %v: must increase", i, p.Progress, got[i-1].Progress)
		}
		if p.Message == "" || utf8.RuneCountInString(p.Message) > maxProgressMessageRunes {
			t.Errorf("notification %d: message %q", i, p.Message)
		}
		if p.Total != 0 {
			t.Errorf("notification %d: total %v, want none (unknown)", i, p.Total)
		}
	}
}

// The client of each transport revision that sends a progressToken gets
// notifications/progress as the plan's tool calls complete and its console
// lines are written, on the request's own stream.
func TestExecuteProgress(t *testing.T) {
	for _, version := range []string{"2025-11-25", "2025-06-18", "2026-07-28"} {
		t.Run(version, func(t *testing.T) {
			f, log := progressFixture(t, version, 10*time.Millisecond)
			// Each gate:wait returns only once the client has seen the
			// progress of the steps before it.
			script := `await callTool("gate:tick", {}); for (let i = 1; i <= 4; i++) { await callTool("gate:wait", {n: i}); console.log("step", i, "of 4"); }
				await callTool("gate:wait", {n: 5}); return 1`
			callExecute(t, f, script, "plan-1")
			got := log.all()
			if len(got) < 5 {
				t.Fatalf("%d notifications, want at least 5: %+v", len(got), got)
			}
			checkProgress(t, got, "plan-1")
			var logs, calls bool
			for _, p := range got {
				logs = logs || strings.Contains(p.Message, "log: step")
				calls = calls || strings.Contains(p.Message, "gate:tick done")
			}
			if !logs || !calls {
				t.Errorf("messages name neither the console lines (%v) nor the calls (%v): %+v", logs, calls, got)
			}

			// Without a token, nothing is sent (and an integer token works).
			n := len(got)
			callExecute(t, f, `for (let i = 0; i < 20; i++) { await callTool("gate:tick", {}); console.log(i) } return 1`, nil)
			callExecute(t, f, `await callTool("gate:tick", {}); await callTool("gate:wait", {n: `+fmt.Sprint(n+1)+`}); return 1`, 7)
			got = log.all()
			checkProgress(t, got[n:], 7)
			if len(got) < n+1 || len(got) > n+2 {
				t.Errorf("%d notifications after a call without token and one with a two-call plan, want %d or %d: %+v", len(got), n+1, n+2, got[n:])
			}
		})
	}
}

// A plan of thousands of calls gets at most one notification per interval.
func TestExecuteProgressRateLimited(t *testing.T) {
	const interval = 100 * time.Millisecond
	f, log := progressFixture(t, "2025-11-25", interval)
	start := time.Now()
	// The first notification is awaited (gate:wait), so at least one is
	// sent however the machine schedules the sender.
	callExecute(t, f, `await callTool("gate:tick", {}); await callTool("gate:wait", {n: 1});
		for (let i = 0; i < 3000; i++) await callTool("gate:tick", {}); return 1`, "many")
	elapsed := time.Since(start)
	got := log.all()
	checkProgress(t, got, "many")
	// The sender waits an interval after each notification, so within
	// elapsed there is room for at most elapsed/interval + 1.
	if max := int(elapsed/interval) + 1; len(got) > max || len(got) == 0 {
		t.Errorf("%d notifications in %v (interval %v), want 1..%d", len(got), elapsed, interval, max)
	}
	if len(got) > 0 && got[len(got)-1].Progress > 3002 {
		t.Errorf("progress %v beyond the plan's 3002 calls", got[len(got)-1].Progress)
	}
	t.Logf("3000 calls in %v: %d notifications", elapsed, len(got))
}

// stop returns only when the sender is done: nothing is sent after it, even
// while steps keep coming from other goroutines.
func TestPlanProgressStop(t *testing.T) {
	var stopped atomic.Bool
	var sent, late atomic.Int64
	var last atomic.Int64
	p := startProgress(context.Background(), "t", time.Millisecond, func(_ context.Context, n *mcp.ProgressNotificationParams) error {
		if stopped.Load() {
			late.Add(1)
		}
		if int64(n.Progress) <= last.Load() {
			t.Errorf("progress %v after %v", n.Progress, last.Load())
		}
		last.Store(int64(n.Progress))
		sent.Add(1)
		time.Sleep(time.Millisecond) // a slow client
		return nil
	})
	var wg sync.WaitGroup
	quit := make(chan struct{})
	for g := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-quit:
					return
				default:
				}
				p.callStarted()
				p.callDone(fmt.Sprintf("t%d", g), i%3 == 0)
				p.logged("line\n  two")
			}
		})
	}
	for deadline := time.Now().Add(20 * time.Second); sent.Load() < 3; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			close(quit)
			wg.Wait()
			t.Fatalf("%d notifications sent in 20 s of steps", sent.Load())
		}
	}
	p.stop()
	stopped.Store(true)
	time.Sleep(20 * time.Millisecond) // steps go on after stop
	close(quit)
	wg.Wait()
	p.stop() // twice is fine
	if late.Load() != 0 {
		t.Errorf("%d notifications after stop", late.Load())
	}
	var nilp *planProgress // no token: every method is a no-op
	nilp.callStarted()
	nilp.callDone("x", false)
	nilp.logged("x")
	nilp.stop()
}

func TestProgressMessage(t *testing.T) {
	p := &planProgress{}
	p.running, p.calls, p.failed, p.last = 2, 41, 1, "log: "+strings.Repeat("é", 300)
	msg := p.message()
	if !strings.HasPrefix(msg, "41 tool calls done (1 failed), 2 running; log: éé") || utf8.RuneCountInString(msg) > maxProgressMessageRunes {
		t.Errorf("message %q", msg)
	}
	for _, tc := range []struct {
		token any
		ok    bool
	}{{"a", true}, {float64(3), true}, {3.5, false}, {nil, false}, {true, false}, {map[string]any{}, false}} {
		if got := validProgressToken(tc.token); got != tc.ok {
			t.Errorf("validProgressToken(%v) = %v", tc.token, got)
		}
	}
}

// On revision 2026-07-28 a client that can elicit runs plans over multi
// round-trip requests when the catalog has caller-answered tools: the
// first request reports the plan's steps until the plan first asks the
// client, then answers input_required; no notification follows it.
func TestExecuteProgressOverMRTR(t *testing.T) {
	reg := broker.NewToolRegistry()
	for _, d := range broker.DemoTools() {
		reg.Register(d)
	}
	b, err := broker.New(&broker.BrokerOptions{Tools: reg, Engine: sandbox.NewInProcess(nil)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		b.Close(ctx)
	})
	log := newProgressLog()
	ix, err := NewIndex([]ToolSource{&BrokerSource{B: b}, gateTools(log)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ix.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv := NewServer(NewService(ix, &Options{Engine: sandbox.NewInProcess(nil), Sessions: b, ProgressInterval: 10 * time.Millisecond}), nil)
	hs := httptest.NewServer(HTTPHandler(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
		&mcp.StreamableHTTPOptions{Stateless: true})))
	t.Cleanup(hs.Close)
	var asked int
	var mu sync.Mutex
	client := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: log.handle,
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			mu.Lock()
			asked++
			mu.Unlock()
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
	p := &mcp.CallToolParams{Name: "meta:execute", Arguments: map[string]any{"script": `await callTool("gate:tick", {});
		await callTool("gate:wait", {n: 1}); await callTool("gate:tick", {});
		const name = await callTool("client:prompt", {question: "name?"}); await callTool("gate:tick", {}); return name`}}
	p.SetProgressToken("mrtr")
	res, err := cs.CallTool(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Status string
		Result any
	}
	structured(t, res, &out)
	if out.Status != "ok" || out.Result != "Ada" || asked != 1 {
		t.Fatalf("plan: %+v, asked %d", out, asked)
	}
	got := log.all()
	checkProgress(t, got, "mrtr")
	// At least the step gate:wait waited for; at most the first request's
	// three calls.
	if len(got) == 0 || got[len(got)-1].Progress > 3 {
		t.Errorf("notifications %+v: want 1..3 steps of the first request", got)
	}
}

// TestCollapseSpaces: collapseSpaces is strings.Fields joined by one space,
// cut after n runes.
func TestCollapseSpaces(t *testing.T) {
	for _, s := range []string{"", "  ", " a  b\t\nc ", strings.Repeat("é ", 300), "  x" + strings.Repeat(" ", 500) + "y", strings.Repeat("ab", 100)} {
		for _, n := range []int{0, 1, 2, 3, 120} {
			want := strings.Join(strings.Fields(s), " ")
			if r := []rune(want); len(r) > n {
				want = string(r[:n])
			}
			if got := collapseSpaces(s, n); got != want {
				t.Errorf("collapseSpaces(%q, %d) = %q, want %q", s, n, got, want)
			}
		}
	}
}
