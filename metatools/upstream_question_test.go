package metatools

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codemode-gateway/caddy-codemode/broker"
	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"
	"github.com/codemode-gateway/caddy-codemode/internal/goroutinetest"
)

// askingUpstream adds to ru's server the tools "ask" (one form question,
// its answer returned as {"action", "content"}) and "big" (a question over
// MaxUpstreamQuestionBytes), and "quiet" asks nothing. They ask the 2026-07-28 way (an input_required
// result, the answer on the retry with the requestState); the go-sdk server
// asks a client of an older revision with elicitation/create instead. states
// records the requestState of each retry. "hold" answers once release is
// called, and says on started that it runs.
func askingUpstream(ru *revisionUpstream) (states func() []string, started <-chan struct{}, release func()) {
	var mu sync.Mutex
	var seen []string
	held, running := make(chan struct{}), make(chan struct{}, 1)
	var once sync.Once
	ru.srv.AddTool(&mcp.Tool{Name: "hold", Description: "Answer when released", InputSchema: map[string]any{"type": "object"}},
		func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			running <- struct{}{}
			select {
			case <-held:
			case <-ctx.Done():
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: `{"held":true}`}}}, nil
		})
	schema := map[string]any{"type": "object", "properties": map[string]any{
		"name": map[string]any{"type": "string", "title": "Name"}}, "required": []string{"name"}}
	ask := func(message string) mcp.ToolHandler {
		return func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if req.Params.RequestState == "" {
				return &mcp.CallToolResult{RequestState: "upstream-state-1",
					InputRequests: mcp.InputRequestMap{"q": &mcp.ElicitParams{Message: message, RequestedSchema: schema}}}, nil
			}
			mu.Lock()
			seen = append(seen, req.Params.RequestState)
			mu.Unlock()
			er, ok := req.Params.InputResponses["q"].(*mcp.ElicitResult)
			if !ok {
				return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "no answer"}}}, nil
			}
			b, _ := json.Marshal(map[string]any{"action": er.Action, "content": er.Content})
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(b)}}}, nil
		}
	}
	in := &mcp.Tool{InputSchema: map[string]any{"type": "object"}}
	t1, t2 := *in, *in
	t1.Name, t1.Description = "ask", "Ask for a name"
	t2.Name, t2.Description = "big", "Ask an oversize question"
	ru.srv.AddTool(&mcp.Tool{Name: "quiet", Description: "Answer without asking", InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: `{"quiet":true}`}}}, nil
		})
	ru.srv.AddTool(&t1, ask("Your name?"))
	ru.srv.AddTool(&t2, ask(strings.Repeat("x", MaxUpstreamQuestionBytes+1)))
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}, running, func() { once.Do(func() { close(held) }) }
}

// questionGateway serves meta-tools over one upstream ("up") of the given
// era over real HTTP; it returns the gateway's URLs (with sessions, and
// stateless for 2026-07-28) and the states the upstream's retries carried.
func questionGateway(t testing.TB, modernUpstream bool) ([2]string, func() []string, <-chan struct{}, func()) {
	t.Helper()
	return questionGatewayWith(t, modernUpstream, nil)
}

// questionGatewayWith is questionGateway whose meta:execute runs the plans
// of 2026-07-28 callers as sessions of b (when not nil), served as
// codemode_mcp serves them (cancellation propagated, testIdentity).
func questionGatewayWith(t testing.TB, modernUpstream bool, b *broker.Broker) ([2]string, func() []string, <-chan struct{}, func()) {
	t.Helper()
	ru := newRevisionUpstream(t, modernUpstream)
	states, started, release := askingUpstream(ru)
	t.Cleanup(release)
	u, err := NewUpstream(UpstreamConfig{Name: "up", URL: "http://" + ru.addr, CallTimeout: time.Minute}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ix, err := NewIndex([]ToolSource{u}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	u.Start(ctx)
	t.Cleanup(func() { u.Close() })
	if err := ix.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	engine := sandbox.NewInProcess(&sandbox.Options{Limits: sandbox.Limits{Timeout: time.Minute, MaxSteps: 1 << 40}})
	t.Cleanup(func() { engine.Close() })
	opts := &Options{Engine: engine}
	if b != nil {
		opts.Sessions = b
	}
	svc := NewService(ix, opts)
	// Revision 2026-07-28 has no sessions: codemode_mcp serves it with a
	// stateless handler, as the second server here.
	var urls [2]string
	for i, stateless := range []bool{false, true} {
		hs := httptest.NewServer(testIdentity(HTTPHandler(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return NewServer(svc, nil) },
			&mcp.StreamableHTTPOptions{Stateless: stateless, PropagateRequestCancellation: stateless}))))
		t.Cleanup(hs.Close)
		urls[i] = hs.URL
	}
	return urls, states, started, release
}

// askVia calls up:<tool> by meta:invoke or from a meta:execute script and
// returns the tool's answer, or the error code of the call.
func askVia(t *testing.T, cs *mcp.ClientSession, via, tool string) (answer map[string]any, code string) {
	t.Helper()
	var res *mcp.CallToolResult
	var text string
	if via == "invoke" {
		res, text = callJSON(t, cs, MetaInvoke, map[string]any{"tool": "up:" + tool, "input": map[string]any{}})
	} else {
		res, text = callJSON(t, cs, MetaExecute, map[string]any{"script": `return await callTool("up:` + tool + `", {});`})
	}
	if res.IsError {
		var e struct{ Error Error }
		if json.Unmarshal([]byte(text), &e) != nil || e.Error.Code == "" {
			t.Fatalf("%s %s: error result %s", via, tool, text)
		}
		return nil, e.Error.Code
	}
	if via == "execute" {
		var r struct {
			Status string
			Result map[string]any
			Error  *struct{ Code string }
		}
		if err := json.Unmarshal([]byte(text), &r); err != nil {
			t.Fatalf("execute %s: %s", tool, text)
		}
		if r.Error != nil {
			return nil, r.Error.Code
		}
		return r.Result, ""
	}
	if err := json.Unmarshal([]byte(text), &answer); err != nil {
		t.Fatalf("invoke %s: %s", tool, text)
	}
	return answer, ""
}

// TestUpstreamQuestionsReachTheCaller: an upstream tool's question, asked
// either way (elicitation/create over a 2025-11-25 session, or a 2026-07-28
// input_required result whose requestState is echoed unchanged), reaches a
// caller of an older revision that declared elicitation, by meta:invoke and
// from a meta:execute script; the caller's accept, decline and cancel go
// back upstream as they are. A caller that cannot be asked, an oversize
// question and an answer outside the requested schema fail the call with
// their codes, and the upstream gets a JSON-RPC error, never an answer the
// gateway made up. No goroutine outlives the calls.
func TestUpstreamQuestionsReachTheCaller(t *testing.T) {
	for _, modern := range []bool{false, true} {
		era := map[bool]string{false: "2025-11-25 upstream", true: "2026-07-28 upstream"}[modern]
		t.Run(era, func(t *testing.T) {
			urls, states, started, release := questionGateway(t, modern)
			var mu sync.Mutex
			reply := &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Ada"}}
			var asked []string
			handler := func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
				mu.Lock()
				defer mu.Unlock()
				asked = append(asked, req.Params.Message)
				return reply, nil
			}
			setReply := func(r *mcp.ElicitResult) { mu.Lock(); reply = r; mu.Unlock() }
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			connect := func(h func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error), version string) *mcp.ClientSession {
				t.Helper()
				url := urls[0]
				if version >= firstMRTRRevision {
					url = urls[1]
				}
				cs, err := mcp.NewClient(&mcp.Implementation{Name: "caller", Version: "1"}, &mcp.ClientOptions{ElicitationHandler: h}).Connect(ctx,
					&mcp.StreamableClientTransport{Endpoint: url}, &mcp.ClientSessionOptions{ProtocolVersion: version})
				if err != nil {
					t.Fatal(err)
				}
				if v := cs.InitializeResult().ProtocolVersion; v != version {
					t.Fatalf("the caller speaks %s, want %s", v, version)
				}
				t.Cleanup(func() { cs.Close() })
				return cs
			}
			cs := connect(handler, "2025-11-25")
			other := connect(handler, "2025-11-25")
			cannot := map[string]*mcp.ClientSession{"2025-11-25": connect(nil, "2025-11-25"), "2026-07-28": connect(handler, "2026-07-28")}
			// Goroutines are counted with every session open and the
			// engine's workers started (a first plan), without idle HTTP
			// connections.
			callJSON(t, cs, MetaExecute, map[string]any{"script": `return 1;`})
			before, _ := goroutineCount()
			for _, via := range []string{"invoke", "execute"} {
				setReply(&mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Ada"}})
				ans, code := askVia(t, cs, via, "ask")
				if code != "" || ans["action"] != "accept" || ans["content"].(map[string]any)["name"] != "Ada" {
					t.Fatalf("%s accept: %v %s", via, ans, code)
				}
				for _, action := range []string{"decline", "cancel"} {
					setReply(&mcp.ElicitResult{Action: action})
					if ans, code := askVia(t, cs, via, "ask"); code != "" || ans["action"] != action || ans["content"] != nil {
						t.Fatalf("%s %s: %v %s", via, action, ans, code)
					}
				}
				if _, code := askVia(t, cs, via, "big"); code != CodeUpstreamQuestionRefused {
					t.Fatalf("%s oversize question: code %q, want %s", via, code, CodeUpstreamQuestionRefused)
				}
				// A number where the form asks for text: refused (by the
				// caller's go-sdk, and by the gateway's check of the
				// answer against the requested schema).
				setReply(&mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": 42}})
				if _, code := askVia(t, cs, via, "ask"); code != CodeCallerAnswerInvalid {
					t.Fatalf("%s answer of the wrong type: code %q, want %s", via, code, CodeCallerAnswerInvalid)
				}
			}
			mu.Lock()
			if len(asked) == 0 || asked[0] != "Your name?" {
				t.Errorf("the caller was asked %q, want the upstream's question as it is", asked)
			}
			for _, m := range asked {
				if len(m) > MaxUpstreamQuestionBytes {
					t.Errorf("an oversize question reached the caller")
				}
			}
			mu.Unlock()
			for _, s := range states() {
				if s != "upstream-state-1" {
					t.Errorf("the upstream's retry carried requestState %q, want its own, unchanged", s)
				}
			}
			if len(states()) < 6 {
				t.Errorf("%d answered retries reached the upstream, want 6", len(states()))
			}

			// Callers that cannot be asked: no elicitation declared, or
			// revision 2026-07-28 on a gateway without plan sessions (no
			// session to ask over, none to wait in).
			for version, c := range cannot {
				n := len(states())
				for _, via := range []string{"invoke", "execute"} {
					if _, code := askVia(t, c, via, "ask"); code != CodeToolNotCallable {
						t.Fatalf("%s caller %s: code %q, want %s", version, via, code, CodeToolNotCallable)
					}
				}
				if m := len(states()); m != n {
					t.Errorf("%s caller: the upstream got %d answers made up by the gateway", version, m-n)
				}
			}

			// A question while another call is in flight: a 2026-07-28
			// upstream's comes back on its call and is passed on; over a
			// 2025-11-25 session nothing says which call asked, and the
			// gateway does not guess. The other call is not failed by it.
			held := make(chan string, 1)
			go func() {
				res, err := other.CallTool(ctx, &mcp.CallToolParams{Name: MetaInvoke, Arguments: map[string]any{"tool": "up:hold", "input": map[string]any{}}})
				if err != nil {
					held <- err.Error()
					return
				}
				b, _ := json.Marshal(res.Content)
				held <- string(b)
			}()
			<-started
			setReply(&mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Ada"}})
			ans, code := askVia(t, cs, "invoke", "ask")
			if want := map[bool]string{false: CodeUpstreamQuestionRefused, true: ""}[modern]; code != want || (code == "" && ans["action"] != "accept") {
				t.Errorf("a question while another call is in flight: %v, code %q, want code %q", ans, code, want)
			}
			release()
			if h := <-held; !strings.Contains(h, `{\"held\":true}`) {
				t.Errorf("the call in flight answered %s", h)
			}

			noGoroutinesLeft(t, before, 10*time.Second)
		})
	}
}

// goroutineCount is the number of goroutines, without idle HTTP
// connections', and their stacks.
func goroutineCount() (int, string) {
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	return goroutinetest.Count()
}

// noGoroutinesLeft fails t when, within wait, the goroutines do not come
// back to before.
func noGoroutinesLeft(t *testing.T, before int, wait time.Duration) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		n, stacks := goroutineCount()
		if n <= before {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%d goroutines after the calls, %d before:\n%s", n, before, stacks)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}
