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

// received records the notifications of one kind a go-sdk client receives.
type received[P any] struct {
	mu   sync.Mutex
	got  []P
	seen chan struct{} // a notification arrived
}

func newReceived[P any]() *received[P] { return &received[P]{seen: make(chan struct{}, 1)} }

func (l *received[P]) add(p P) {
	l.mu.Lock()
	l.got = append(l.got, p)
	l.mu.Unlock()
	select {
	case l.seen <- struct{}{}:
	default:
	}
}

func (l *received[P]) all() []P {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]P(nil), l.got...)
}

// progressLog records the notifications/progress a go-sdk client receives.
type progressLog struct {
	*received[mcp.ProgressNotificationParams]
}

func newProgressLog() *progressLog {
	return &progressLog{newReceived[mcp.ProgressNotificationParams]()}
}

func (l *progressLog) handle(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
	l.add(*req.Params)
}

// waitFor waits (generously) until at least n notifications whose message
// contains text arrived.
func (l *progressLog) waitFor(ctx context.Context, n int, text string) error {
	count := func() int {
		c := 0
		for _, p := range l.all() {
			if strings.Contains(p.Message, text) {
				c++
			}
		}
		return c
	}
	for {
		if count() >= n {
			return nil
		}
		select {
		case <-l.seen:
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			return fmt.Errorf("%d progress notifications with %q after waiting, want %d", count(), text, n)
		}
	}
}

// progressFixture serves the meta-tools with a tool, gate:wait, that waits
// until the client has received n notifications: the plan moves on only
// once its progress reached the client, so the test needs no timing.
func progressFixture(t *testing.T, version string, interval, heartbeat time.Duration) (*fixture, *progressLog) {
	t.Helper()
	log := newProgressLog()
	f := newFixture(t, fixtureOptions{protocolVersion: version, extra: []ToolSource{gateTools(log)},
		client: &mcp.ClientOptions{ProgressNotificationHandler: log.handle},
		options: func(o *Options) {
			e := sandbox.NewInProcess(&sandbox.Options{Limits: sandbox.Limits{Timeout: time.Minute, AllowConsole: true, MaxToolCalls: 20000}})
			t.Cleanup(func() { e.Close() })
			o.Engine = e
			o.ProgressInterval = interval
			o.ProgressHeartbeat = heartbeat
		}})
	return f, log
}

// gateTools are gate:wait, which returns once the client has seen n
// progress notifications (n whose message contains text, when given),
// gate:tick, which returns at once, and gate:hold, which returns after ms
// milliseconds.
func gateTools(log *progressLog) *StaticSource {
	return &StaticSource{
		List: []Tool{
			{Name: "gate:wait", AppID: "gate", Description: "Wait until the client has seen n progress notifications",
				InputSchema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"},"text":{"type":"string"}}}`)},
			{Name: "gate:tick", AppID: "gate", Description: "Return at once", InputSchema: json.RawMessage(`{"type":"object"}`)},
			{Name: "gate:hold", AppID: "gate", Description: "Return after ms milliseconds",
				InputSchema: json.RawMessage(`{"type":"object","properties":{"ms":{"type":"integer"}}}`)},
		},
		Handlers: map[string]func(context.Context, json.RawMessage) (json.RawMessage, error){
			"gate:wait": func(ctx context.Context, in json.RawMessage) (json.RawMessage, error) {
				var v struct {
					N    int
					Text string
				}
				_ = json.Unmarshal(in, &v)
				ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				defer cancel()
				if err := log.waitFor(ctx, v.N, v.Text); err != nil {
					return nil, err
				}
				return json.RawMessage(`{"ok":true}`), nil
			},
			"gate:tick": func(context.Context, json.RawMessage) (json.RawMessage, error) {
				return json.RawMessage(`{}`), nil
			},
			"gate:hold": func(ctx context.Context, in json.RawMessage) (json.RawMessage, error) {
				var v struct{ Ms int }
				_ = json.Unmarshal(in, &v)
				select {
				case <-time.After(time.Duration(v.Ms) * time.Millisecond):
				case <-ctx.Done():
					return nil, ctx.Err()
				}
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
			f, log := progressFixture(t, version, 10*time.Millisecond, 0)
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
	f, log := progressFixture(t, "2025-11-25", interval, 0)
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
// while steps keep coming from other goroutines and heartbeats are due.
func TestPlanProgressStop(t *testing.T) {
	var stopped atomic.Bool
	var sent, late atomic.Int64
	var last atomic.Int64
	p := startProgress(context.Background(), "t", time.Millisecond, time.Millisecond, "", func(_ context.Context, n *mcp.ProgressNotificationParams) error {
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
	if hb := p.heartbeatMessage(100*time.Second + 400*time.Millisecond); !strings.HasPrefix(hb, "running for 1m40s: 41 tool calls done (1 failed), 2 running; log: é") || utf8.RuneCountInString(hb) > maxProgressMessageRunes {
		t.Errorf("heartbeat message %q", hb)
	}
	inv := &planProgress{tool: "crm:export"}
	if hb := inv.heartbeatMessage(1500 * time.Millisecond); hb != "crm:export running for 2s" {
		t.Errorf("heartbeat message of meta:invoke %q", hb)
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

// planSessionServer serves meta-tools with plan sessions over stateless
// Streamable HTTP: a broker of the demo tools (client:prompt answered by
// the caller) on engine e, whose tools and extra's the index holds; opts
// gets the engine and the broker.
func planSessionServer(t *testing.T, e sandbox.Engine, opts *Options, extra ...ToolSource) *httptest.Server {
	t.Helper()
	reg := broker.NewToolRegistry()
	for _, d := range broker.DemoTools() {
		reg.Register(d)
	}
	b := newTestBroker(t, &broker.BrokerOptions{Tools: reg, Engine: e})
	ix, err := NewIndex(append([]ToolSource{&BrokerSource{B: b}}, extra...), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ix.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	opts.Engine, opts.Sessions = e, b
	srv := NewServer(NewService(ix, opts), nil)
	hs := httptest.NewServer(HTTPHandler(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
		&mcp.StreamableHTTPOptions{Stateless: true})))
	t.Cleanup(hs.Close)
	return hs
}

// On revision 2026-07-28 a client that can elicit runs plans over multi
// round-trip requests when the catalog has caller-answered tools: the
// first request reports the plan's steps until the plan first asks the
// client, then answers input_required; no notification follows it.
func TestExecuteProgressOverMRTR(t *testing.T) {
	log := newProgressLog()
	hs := planSessionServer(t, sandbox.NewInProcess(nil), &Options{ProgressInterval: 10 * time.Millisecond}, gateTools(log))
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

func callInvoke(t *testing.T, f *fixture, tool string, input map[string]any, token any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := &mcp.CallToolParams{Name: "meta:invoke", Arguments: map[string]any{"tool": tool, "input": input}}
	if token != nil {
		p.SetProgressToken(token)
	}
	res, err := f.session.CallTool(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError {
		t.Fatalf("meta:invoke %s: %s", tool, text(res))
	}
	return res
}

// A meta:invoke call whose client sent a progressToken gets heartbeats
// while the tool runs (gate:wait returns only once the client has seen
// three of them), none after its result, and none without a token.
func TestInvokeProgress(t *testing.T) {
	for _, version := range []string{"2025-11-25", "2025-06-18", "2026-07-28"} {
		t.Run(version, func(t *testing.T) {
			f, log := progressFixture(t, version, time.Millisecond, 10*time.Millisecond)
			callInvoke(t, f, "gate:wait", map[string]any{"n": 3, "text": "gate:wait running for "}, "inv-1")
			got := log.all()
			if len(got) < 3 {
				t.Fatalf("%d notifications, want at least 3: %+v", len(got), got)
			}
			checkProgress(t, got, "inv-1")

			// A call without a token that runs 30 heartbeat periods: no
			// notification for it, and none of the first call's after its
			// result.
			n := len(got)
			callInvoke(t, f, "gate:hold", map[string]any{"ms": 300}, nil)
			if got := log.all(); len(got) != n {
				t.Errorf("%d notifications after the first call's result and a call without token, want %d: %+v", len(got), n, got[n:])
			}

			// An integer token.
			callInvoke(t, f, "gate:wait", map[string]any{"n": n + 2}, 7)
			got = log.all()
			checkProgress(t, got[n:], 7)
			if len(got) < n+2 {
				t.Errorf("%d notifications, want at least %d", len(got), n+2)
			}
		})
	}
}

// A plan waiting on one slow call gets heartbeats: the plan's only call
// returns once the client has seen two notifications sent while it ran
// (no step happens meanwhile, so only heartbeats can say "1 running").
func TestExecuteHeartbeat(t *testing.T) {
	f, log := progressFixture(t, "2025-11-25", time.Millisecond, 10*time.Millisecond)
	callExecute(t, f, `await callTool("gate:wait", {n: 2, text: "1 running"}); await callTool("gate:tick", {}); return 1`, "hb")
	got := log.all()
	checkProgress(t, got, "hb")
	beats := 0
	for _, p := range got {
		if strings.HasPrefix(p.Message, "running for ") && strings.Contains(p.Message, "0 tool calls done, 1 running") {
			beats++
		}
	}
	if beats < 2 {
		t.Errorf("%d heartbeats while the plan waited on its call, want at least 2: %+v", beats, got)
	}
}

// Heartbeats alone: progress counts them, the message names the invoked
// tool; a step between them goes on from the count; nothing after stop.
func TestProgressHeartbeat(t *testing.T) {
	var mu sync.Mutex
	var got []mcp.ProgressNotificationParams
	stopped := false
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(got)
	}
	p := startProgress(context.Background(), "t", time.Millisecond, time.Millisecond, "crm:export", func(_ context.Context, n *mcp.ProgressNotificationParams) error {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			t.Errorf("notification after stop: %+v", n)
		}
		got = append(got, *n)
		return nil
	})
	wait := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); count() < n; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d notifications in 20 s, want %d", count(), n)
			}
		}
	}
	wait(3)
	p.callStarted()
	p.callDone("crm:page", false)
	wait(count() + 2)
	p.stop()
	mu.Lock()
	stopped = true
	all := append([]mcp.ProgressNotificationParams(nil), got...)
	mu.Unlock()
	checkProgress(t, all, "t")
	if all[0].Progress != 1 || !strings.HasPrefix(all[0].Message, "crm:export running for ") {
		t.Errorf("first heartbeat %+v", all[0])
	}
	step := false
	for _, n := range all {
		step = step || n.Message == "1 tool call done; crm:page done"
	}
	if !step {
		t.Errorf("the step is not among %+v", all)
	}
	time.Sleep(10 * time.Millisecond) // heartbeats would be due
}

// TestProgressNeverJustBeforeTheResult: a step is reported only after the
// settle, so a plan that ends within it sends nothing more; and stop holds
// the result until the gap after the last notification has passed, so
// that a client does not read the two at once (the TypeScript SDK then
// takes the notification for one of an unknown token).
func TestProgressNeverJustBeforeTheResult(t *testing.T) {
	t.Run("ends while settling", func(t *testing.T) {
		var sent atomic.Int32
		p := newProgress("t", time.Millisecond, -1, "", func(context.Context, *mcp.ProgressNotificationParams) error {
			sent.Add(1)
			return nil
		})
		p.settle = time.Hour
		go p.run(context.Background())
		p.callStarted()
		p.callDone("crm:export", false)
		time.Sleep(20 * time.Millisecond) // the sender has woken and is settling
		p.stop()
		if n := sent.Load(); n != 0 {
			t.Errorf("%d notifications for a step the result follows within the settle, want 0", n)
		}
	})
	t.Run("ends right after a notification", func(t *testing.T) {
		sent := make(chan time.Time, 1)
		p := newProgress("t", time.Millisecond, -1, "", func(context.Context, *mcp.ProgressNotificationParams) error {
			sent <- time.Now()
			return nil
		})
		p.settle, p.gap = 0, 200*time.Millisecond
		go p.run(context.Background())
		p.callStarted()
		p.callDone("crm:export", false)
		at := <-sent
		p.stop()
		if d := time.Since(at); d < p.gap {
			t.Errorf("stop returned %v after the last notification, want at least %v", d, p.gap)
		}
	})
}
