package metatools

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// maxAnswerBytes is issue 13's budget for one meta:search (topK 10) or
// meta:describe (one tool, default detail) answer: the whole tools/call
// result as a client receives it, text content and structuredContent
// together.
const maxAnswerBytes = 6 << 10

// answerClient serves the meta-tools over the GitHub catalog (1,223 tools)
// to a go-sdk client on in-memory transports.
func answerClient(t *testing.T) (*sizedClient, *evalCatalog, *Service) {
	t.Helper()
	c := loadEvalCatalog(t, "github")
	svc := c.service(t, nil)
	return connectSized(t, svc), c, svc
}

// sizedClient is a go-sdk client session that keeps the "result" of the
// last response it read, byte for byte as it received it.
type sizedClient struct {
	*mcp.ClientSession
	mu   sync.Mutex
	last json.RawMessage
}

// connectSized connects a sizedClient to the meta-tools of svc on
// in-memory transports (which carry the JSON the server encodes, as HTTP
// does).
func connectSized(t *testing.T, svc *Service) *sizedClient {
	t.Helper()
	st, ct := mcp.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := NewServer(svc, nil).Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	sc := &sizedClient{}
	sc.ClientSession, err = mcp.NewClient(&mcp.Implementation{Name: "sizes", Version: "v1"}, nil).Connect(ctx, &resultTap{ct, sc}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sc.Close() })
	return sc
}

// resultTap is the transport of a sizedClient.
type resultTap struct {
	mcp.Transport
	sc *sizedClient
}

func (rt *resultTap) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := rt.Transport.Connect(ctx)
	return &tapConn{c, rt.sc}, err
}

type tapConn struct {
	mcp.Connection
	sc *sizedClient
}

func (c *tapConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	m, err := c.Connection.Read(ctx)
	if r, ok := m.(*jsonrpc.Response); ok && err == nil {
		c.sc.mu.Lock()
		c.sc.last = r.Result
		c.sc.mu.Unlock()
	}
	return m, err
}

// resultBytes calls a meta-tool and returns the JSON of the result the
// client received (the JSON-RPC response's "result"), as it received it.
func resultBytes(t *testing.T, cs *sizedClient, name string, args any) []byte {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError {
		t.Fatalf("%s: %s", name, text(res))
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.last
}

// TestSearchAnswerSize holds meta:search at topK 10 over a 1,223-tool
// catalog to maxAnswerBytes for every evaluation query of that catalog.
func TestSearchAnswerSize(t *testing.T) {
	cs, c, _ := answerClient(t)
	var sizes []int
	for _, q := range c.set.Queries {
		raw := resultBytes(t, cs, MetaSearch, map[string]any{"queries": []string{q.Q}, "topK": 10})
		if len(raw) > maxAnswerBytes {
			t.Errorf("search %q: %d bytes, budget %d", q.Q, len(raw), maxAnswerBytes)
		}
		sizes = append(sizes, len(raw))
	}
	sort.Ints(sizes)
	t.Logf("meta:search topK 10 over %d tools, %d queries: median %d bytes, max %d", len(c.tools), len(sizes), sizes[len(sizes)/2], sizes[len(sizes)-1])
}

// TestDescribeAnswerSize holds meta:describe (default detail) of every
// tool of a 1,223-tool catalog to maxAnswerBytes, the largest operations
// included, and checks that their signatures stayed complete.
func TestDescribeAnswerSize(t *testing.T) {
	cs, c, svc := answerClient(t)
	// Every tool through the service (fast), then the largest ones, by the
	// size of their full answer, through the MCP client.
	type sized struct {
		name string
		full int
	}
	var all []sized
	var compact []int
	incomplete := 0
	for _, tl := range c.tools {
		out, err := svc.Describe(context.Background(), DescribeInput{ToolNames: []string{tl.Name}, Detail: DetailFull})
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := json.Marshal(out)
		all = append(all, sized{tl.Name, len(raw)})
		cout, err := svc.Describe(context.Background(), DescribeInput{ToolNames: []string{tl.Name}})
		if err != nil {
			t.Fatal(err)
		}
		if cout.Tools[0].SignatureComplete != nil {
			incomplete++
			t.Logf("%s: signature cut to fit, signatureComplete false", tl.Name)
		}
		craw, _ := json.Marshal(cout)
		compact = append(compact, len(craw))
	}
	sort.Slice(all, func(i, j int) bool { return all[i].full > all[j].full })
	sort.Ints(compact)
	worst := 0
	for _, s := range all[:25] {
		raw := resultBytes(t, cs, MetaDescribe, map[string]any{"toolNames": []string{s.name}})
		if len(raw) > maxAnswerBytes {
			t.Errorf("describe %s: %d bytes (full detail %d), budget %d", s.name, len(raw), s.full, maxAnswerBytes)
		}
		worst = max(worst, len(raw))
	}
	// A handful of operations (GitHub's rulesets: a union of 20 rule types)
	// cannot be spelled out completely in 6 KB; they say so
	// (signatureComplete false) and detail "full" has the rest. The largest
	// operation by schema size must be complete.
	if incomplete > len(all)/100 {
		t.Errorf("%d of %d signatures had to cut their input", incomplete, len(all))
	}
	largest, _ := svc.Describe(context.Background(), DescribeInput{ToolNames: []string{all[0].name}})
	if largest.Tools[0].SignatureComplete != nil {
		t.Errorf("the largest operation %s has no complete signature", all[0].name)
	}
	t.Logf("meta:describe over %d tools: largest operation %s (%d bytes with detail full) answers %d bytes by default; largest default answer of the 25 largest operations %d bytes; structured part median %d, max %d",
		len(all), all[0].name, all[0].full, len(resultBytes(t, cs, MetaDescribe, map[string]any{"toolNames": []string{all[0].name}})), worst, compact[len(compact)/2], compact[len(compact)-1])
}

// TestDescribeAnswerSizeManyFields: operations with hundreds of optional
// fields (an account's settings object, a list with a filter parameter per
// field and operator, as public catalogs have) stay within the budget: the
// required fields all stay, the optional ones are cut shortest names
// first, and the signature says how many it left out.
func TestDescribeAnswerSizeManyFields(t *testing.T) {
	props := map[string]any{"accountId": map[string]any{"type": "string"}, "state": map[string]any{"enum": []string{"open", "closed"}}}
	body := map[string]any{}
	for i := range 700 {
		props[fmt.Sprintf("address__field_%03d__istartswith_or_isnull", i)] = map[string]any{"type": "string", "description": "Filter by a field."}
		body[fmt.Sprintf("allowSettingNumber%03dMetadata", i)] = map[string]any{"type": "object", "properties": map[string]any{"x": map[string]any{"type": "string"}}}
	}
	props["body"] = map[string]any{"type": "object", "properties": body}
	schema, _ := json.Marshal(map[string]any{"type": "object", "properties": props, "required": []string{"accountId"}})
	tool := Tool{Name: "svc:updateSettings", Description: "Updates the account settings.", InputSchema: schema}
	ix, err := NewIndex([]ToolSource{&StaticSource{List: []Tool{tool}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ix.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	cs := connectSized(t, NewService(ix, nil))
	raw := resultBytes(t, cs, MetaDescribe, map[string]any{"toolNames": []string{tool.Name}})
	if len(raw) > maxAnswerBytes {
		t.Errorf("describe: %d bytes, budget %d", len(raw), maxAnswerBytes)
	}
	var res struct {
		StructuredContent DescribeOutput `json:"structuredContent"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatal(err)
	}
	e := res.StructuredContent.Tools[0]
	for _, want := range []string{"accountId: string;", "state?: \"open\" | \"closed\";", "more optional fields: detail \"full\" has them"} {
		if !strings.Contains(e.Signature, want) {
			t.Errorf("signature lacks %q:\n%s", want, e.Signature)
		}
	}
	if e.SignatureComplete == nil || *e.SignatureComplete {
		t.Error("a cut signature is not marked incomplete")
	}
	t.Logf("%d bytes; signature:\n%s", len(raw), e.Signature)
}

// TestDescribeAnswerSizeManyShapes: a body that is one of dozens of shapes,
// each with required fields of its own (a message per channel and type,
// as Vonage's Messages API has), stays within the budget: the union keeps
// as many shapes as fit and says how many it left out.
func TestDescribeAnswerSizeManyShapes(t *testing.T) {
	var shapes []any
	for i := range 40 {
		props := map[string]any{"message_type": map[string]any{"const": fmt.Sprintf("type_%02d", i)}}
		var req []string
		for _, f := range []string{"recipient_identifier", "sender_identifier", "content_payload", "delivery_channel"} {
			props[fmt.Sprintf("%s_%02d", f, i)] = map[string]any{"type": "string"}
			req = append(req, fmt.Sprintf("%s_%02d", f, i))
		}
		shapes = append(shapes, map[string]any{"type": "object", "properties": props, "required": req})
	}
	schema, _ := json.Marshal(map[string]any{"type": "object", "required": []string{"body"},
		"properties": map[string]any{"body": map[string]any{"oneOf": shapes}}})
	tool := Tool{Name: "svc:sendMessage", Description: "Send a message to the given channel.", InputSchema: schema}
	ix, err := NewIndex([]ToolSource{&StaticSource{List: []Tool{tool}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ix.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	out, err := NewService(ix, nil).Describe(context.Background(), DescribeInput{ToolNames: []string{tool.Name}})
	if err != nil {
		t.Fatal(err)
	}
	e := out.Tools[0]
	if n := wireSize(out); n > maxAnswerBytes {
		t.Errorf("describe: %d bytes on the wire, budget %d", n, maxAnswerBytes)
	}
	if !strings.Contains(e.Signature, "recipient_identifier_00: string;") || !strings.Contains(e.Signature, `more shapes: detail "full" has them`) {
		t.Errorf("signature:\n%s", e.Signature)
	}
	if e.SignatureComplete == nil || *e.SignatureComplete {
		t.Error("a cut signature is not marked incomplete")
	}
}
