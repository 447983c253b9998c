package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// upstreamServer is a real mcp-go server over Streamable HTTP with stateful
// sessions, counting the runs of its tools.
type upstreamServer struct {
	URL  string
	runs sync.Map // tool -> *atomic.Int64
}

func (u *upstreamServer) count(tool string) int64 {
	v, _ := u.runs.LoadOrStore(tool, new(atomic.Int64))
	return v.(*atomic.Int64).Load()
}

func (u *upstreamServer) inc(tool string) {
	v, _ := u.runs.LoadOrStore(tool, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

func newUpstream(t testing.TB) *upstreamServer {
	t.Helper()
	u := &upstreamServer{}
	s := server.NewMCPServer("upstream", "1.0.0")
	s.AddTool(mcp.NewTool("issue_refund", mcp.WithString("order_id", mcp.Required()), mcp.WithNumber("amount_cents")),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			u.inc("issue_refund")
			return mcp.NewToolResultText("refund issued for " + req.GetString("order_id", "")), nil
		})
	s.AddTool(mcp.NewTool("lookup", mcp.WithReadOnlyHintAnnotation(true), mcp.WithString("order_id")),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			u.inc("lookup")
			return mcp.NewToolResultText("paid"), nil
		})
	s.AddTool(mcp.NewTool("slow", mcp.WithNumber("steps")),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			u.inc("slow")
			steps := req.GetInt("steps", 3)
			var token mcp.ProgressToken
			if req.Params.Meta != nil {
				token = req.Params.Meta.ProgressToken
			}
			for i := 1; i <= steps; i++ {
				time.Sleep(20 * time.Millisecond)
				if token != nil {
					_ = server.ServerFromContext(ctx).SendNotificationToClient(ctx, "notifications/progress",
						map[string]any{"progressToken": token, "progress": i, "total": steps})
				}
			}
			// mcp-go v1.2.1 queues notifications apart from the response
			// and may write the response first, dropping the last
			// notification (seen calling it directly): let them drain.
			time.Sleep(50 * time.Millisecond)
			return mcp.NewToolResultText("done"), nil
		})
	hs := httptest.NewServer(server.NewStreamableHTTPServer(s, server.WithStateful(true)))
	t.Cleanup(hs.Close)
	u.URL = hs.URL + "/mcp"
	return u
}

// newGatewayServer serves a Gateway in front of upstream on loopback.
func newGatewayServer(t testing.TB, upstreamURL string, calls CallHandler) (*Gateway, string) {
	t.Helper()
	up, err := NewHTTPUpstream(upstreamURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(Config{Upstream: up, Calls: calls})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(g)
	t.Cleanup(func() {
		hs.Close()
		_ = g.Close(context.Background())
	})
	return g, hs.URL
}

// mcpClient returns an initialized mcp-go Streamable HTTP client of url.
func mcpClient(t testing.TB, url, token string) *client.Client {
	t.Helper()
	c, err := client.NewStreamableHttpClient(url, transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + token}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	var init mcp.InitializeRequest
	init.Params.ProtocolVersion = mcp.LATEST_LEGACY_PROTOCOL_VERSION
	init.Params.ClientInfo = mcp.Implementation{Name: "test", Version: "1"}
	if _, err := c.Initialize(ctx, init); err != nil {
		t.Fatal(err)
	}
	return c
}

func callTool(t testing.TB, c *client.Client, tool string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	var r mcp.CallToolRequest
	r.Params.Name = tool
	r.Params.Arguments = args
	res, err := c.CallTool(context.Background(), r)
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	return res
}

func text(r *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// recordingHandler protects the tools a set names, records the calls it is
// given and forwards them.
type recordingHandler struct {
	protect map[string]bool
	mu      sync.Mutex
	calls   []ToolCall
}

func (h *recordingHandler) Protects(tool string, a Annotations) bool {
	if v, ok := h.protect[tool]; ok {
		return v
	}
	return !a.ReadOnly && !a.Idempotent
}

func (h *recordingHandler) HandleCall(ctx context.Context, call *ToolCall, forward Forward) (json.RawMessage, error) {
	h.mu.Lock()
	h.calls = append(h.calls, *call)
	h.mu.Unlock()
	return forward(ctx)
}

func TestGateway_MCPGoClientAndServer(t *testing.T) {
	up := newUpstream(t)
	h := &recordingHandler{}
	_, url := newGatewayServer(t, up.URL, h)
	c := mcpClient(t, url, "tok")

	tools, err := c.ListTools(context.Background(), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]mcp.Tool{}
	for _, tl := range tools.Tools {
		byName[tl.Name] = tl
	}
	// Protected tools advertise the key; the read-only one does not.
	if _, ok := byName["issue_refund"].InputSchema.Properties["idempotency_key"]; !ok {
		t.Errorf("issue_refund's schema lacks idempotency_key: %+v", byName["issue_refund"].InputSchema)
	}
	if !strings.Contains(byName["issue_refund"].Description, "Retries are safe") {
		t.Errorf("issue_refund's description: %q", byName["issue_refund"].Description)
	}
	if _, ok := byName["lookup"].InputSchema.Properties["idempotency_key"]; ok {
		t.Errorf("the read-only tool advertises idempotency_key")
	}

	r := callTool(t, c, "issue_refund", map[string]any{"order_id": "o-1", "amount_cents": 5, "idempotency_key": "k-1"})
	if text(r) != "refund issued for o-1" || up.count("issue_refund") != 1 {
		t.Fatalf("issue_refund: %q, %d runs", text(r), up.count("issue_refund"))
	}
	callTool(t, c, "lookup", map[string]any{"order_id": "o-1"})

	h.mu.Lock()
	calls := append([]ToolCall(nil), h.calls...)
	h.mu.Unlock()
	if len(calls) != 2 {
		t.Fatalf("the handler saw %d calls", len(calls))
	}
	c0 := calls[0]
	if c0.Tool != "issue_refund" || c0.SessionID == "" || c0.RequestID == "" || c0.Annotations != (Annotations{Listed: true}) ||
		!strings.HasPrefix(c0.Subject, "bearer:") || strings.Contains(c0.Subject, "tok") || c0.Transport != "tcp" || c0.ProtocolVersion == "" {
		t.Errorf("the first call: %+v", c0)
	}
	var args map[string]any
	_ = json.Unmarshal(c0.Arguments, &args)
	if args["idempotency_key"] != "k-1" {
		t.Errorf("the handler did not get the key in the arguments: %s", c0.Arguments)
	}
	if calls[1].Annotations != (Annotations{ReadOnly: true, Listed: true}) {
		t.Errorf("lookup's annotations: %+v", calls[1].Annotations)
	}

	// Progress passes through as it comes.
	var got atomic.Int64
	c.OnNotification(func(n mcp.JSONRPCNotification) {
		if n.Method == "notifications/progress" {
			got.Add(1)
		}
	})
	var req mcp.CallToolRequest
	req.Params.Name = "slow"
	req.Params.Arguments = map[string]any{"steps": 3}
	req.Params.Meta = &mcp.Meta{ProgressToken: "p-1"}
	if _, err := c.CallTool(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	// mcp-go's client hands notifications to their handler on goroutines
	// of their own: wait for the last one.
	for deadline := time.Now().Add(5 * time.Second); got.Load() < 3 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if got.Load() != 3 {
		t.Errorf("the client got %d progress notifications, want 3", got.Load())
	}
}

func TestGateway_LearnsToolsWhenTheClientNeverListed(t *testing.T) {
	up := newUpstream(t)
	h := &recordingHandler{}
	_, url := newGatewayServer(t, up.URL, h)
	c := mcpClient(t, url, "tok")
	callTool(t, c, "lookup", map[string]any{})
	var r mcp.CallToolRequest
	r.Params.Name = "nonexistent_tool_x"
	if _, err := c.CallTool(context.Background(), r); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("an unknown tool: %v, want the upstream's error", err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.calls[0].Annotations != (Annotations{ReadOnly: true, Listed: true}) {
		t.Errorf("lookup without a prior tools/list: %+v", h.calls[0].Annotations)
	}
	if h.calls[1].Annotations != (Annotations{}) {
		t.Errorf("an unlisted tool must get MCP's default annotations (a write tool): %+v", h.calls[1].Annotations)
	}
}

func TestGateway_StripsTheKeyFromProtectedCallsOnly(t *testing.T) {
	for _, tc := range []struct {
		args      string
		protected bool
		want      string
	}{
		{`{"a":1,"idempotency_key":"k"}`, true, `{"a":1}`},
		{`{"a":1,"idempotency_key":"k"}`, false, `{"a":1,"idempotency_key":"k"}`},
		{`{"a":1}`, true, `{"a":1}`},
	} {
		got := json.RawMessage(tc.args)
		if tc.protected {
			if s, ok := stripKey(got); ok {
				got = s
			}
		}
		var g, w any
		_ = json.Unmarshal(got, &g)
		_ = json.Unmarshal([]byte(tc.want), &w)
		if fmt.Sprint(g) != fmt.Sprint(w) {
			t.Errorf("%s protected=%v: forwarded %s, want %s", tc.args, tc.protected, got, tc.want)
		}
	}
}

func TestFormatID(t *testing.T) {
	for in, want := range map[string]string{`"abc"`: "abc", `7`: "7", `1e3`: "1000", `12345678901234567890`: "12345678901234567890", `null`: "", ``: "", `1.5`: "1.5"} {
		if got := formatID(json.RawMessage(in)); got != want {
			t.Errorf("formatID(%s) = %q, want %q", in, got, want)
		}
	}
}

func TestSSEReader(t *testing.T) {
	in := ": comment\n\nid: 1\ndata:\n\nevent: message\ndata: {\"a\":\ndata: 1}\n\nevent: ping\ndata: x\n\ndata: {\"b\":2}\r\n\r\ndata: {\"c\":3}"
	r := newSSEReader(strings.NewReader(in))
	var got []string
	for {
		b, err := r.next()
		if err != nil {
			break
		}
		got = append(got, string(b))
	}
	want := []string{"{\"a\":\n1}", `{"b":2}`, `{"c":3}`}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("events %q, want %q", got, want)
	}
}

// TestGateway_ConcurrentCallsOnOneSession sends many calls at once on one
// session: every answer reaches the request that asked for it.
func TestGateway_ConcurrentCallsOnOneSession(t *testing.T) {
	up := newUpstream(t)
	_, url := newGatewayServer(t, up.URL, PassThrough{})
	c := mcpClient(t, url, "tok")
	var wg sync.WaitGroup
	answers := make([]string, 20)
	for i := range answers {
		wg.Go(func() {
			answers[i] = text(callTool(t, c, "issue_refund", map[string]any{"order_id": fmt.Sprintf("o-%02d", i)}))
		})
	}
	wg.Wait()
	sort.Strings(answers)
	for i, a := range answers {
		if want := fmt.Sprintf("refund issued for o-%02d", i); a != want {
			t.Errorf("answer %d = %q, want %q", i, a, want)
		}
	}
}

// TestGateway_ClaimsNoRetrySafetyWithoutASubject: over HTTP, a protected
// call without the subject header is refused, so a tools/list without it
// must not advertise the idempotency key either.
func TestGateway_ClaimsNoRetrySafetyWithoutASubject(t *testing.T) {
	up := newUpstream(t)
	_, url := newGatewayServer(t, up.URL, &recordingHandler{})
	c, err := client.NewStreamableHttpClient(url)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var init mcp.InitializeRequest
	init.Params.ProtocolVersion = mcp.LATEST_LEGACY_PROTOCOL_VERSION
	init.Params.ClientInfo = mcp.Implementation{Name: "test", Version: "1"}
	if _, err := c.Initialize(ctx, init); err != nil {
		t.Fatal(err)
	}
	tools, err := c.ListTools(ctx, mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range tools.Tools {
		if _, ok := tl.InputSchema.Properties["idempotency_key"]; ok || strings.Contains(tl.Description, "Retries are safe") {
			t.Errorf("%s claims retry safety to a caller without a subject: %+v", tl.Name, tl)
		}
	}
}

// TestGateway_ToolListChangedReachesTheClientAndRefreshesAnnotations: a
// tool added at run time is announced on the stream outside requests
// (GET); the gateway passes the notification on and learns the new tool's
// annotations instead of treating it as unlisted.
func TestGateway_ToolListChangedReachesTheClientAndRefreshesAnnotations(t *testing.T) {
	s := server.NewMCPServer("upstream", "1.0.0", server.WithToolCapabilities(true))
	s.AddTool(mcp.NewTool("first"), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText("1"), nil
	})
	hs := httptest.NewServer(server.NewStreamableHTTPServer(s, server.WithStateful(true)))
	defer hs.Close()
	h := &recordingHandler{}
	_, url := newGatewayServer(t, hs.URL+"/mcp", h)

	// The standalone GET stream belongs to the session-based protocol the
	// gateway serves (up to 2025-11-25), which this option keeps the
	// client on.
	//lint:ignore SA1019 the GET stream is what this test exercises
	c, err := client.NewStreamableHttpClient(url, transport.WithContinuousListening(),
		transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer tok"}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	changed := make(chan struct{}, 1)
	c.OnNotification(func(n mcp.JSONRPCNotification) {
		if n.Method == "notifications/tools/list_changed" {
			select {
			case changed <- struct{}{}:
			default:
			}
		}
	})
	var init mcp.InitializeRequest
	init.Params.ProtocolVersion = mcp.LATEST_LEGACY_PROTOCOL_VERSION
	init.Params.ClientInfo = mcp.Implementation{Name: "test", Version: "1"}
	if _, err := c.Initialize(ctx, init); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ListTools(ctx, mcp.ListToolsRequest{}); err != nil {
		t.Fatal(err)
	}
	// The GET stream opens in the background: add tools until the
	// notification arrives.
	deadline := time.After(10 * time.Second)
	for i := 0; ; i++ {
		s.AddTool(mcp.NewTool(fmt.Sprintf("late_%d", i), mcp.WithReadOnlyHintAnnotation(true)),
			func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return mcp.NewToolResultText("late"), nil
			})
		select {
		case <-changed:
		case <-time.After(200 * time.Millisecond):
			continue
		case <-deadline:
			t.Fatal("no notifications/tools/list_changed reached the client through the gateway")
		}
		break
	}
	callTool(t, c, "late_0", map[string]any{})
	h.mu.Lock()
	defer h.mu.Unlock()
	if got := h.calls[len(h.calls)-1].Annotations; got != (Annotations{ReadOnly: true, Listed: true}) {
		t.Errorf("the tool added at run time has annotations %+v: the gateway kept a stale tool list", got)
	}
}

func TestToolIndex_ObservesEveryPage(t *testing.T) {
	var x toolIndex
	next := x.observe(nil, json.RawMessage(`{"tools":[{"name":"a","annotations":{"readOnlyHint":true}}],"nextCursor":"p2"}`))
	if string(next) != `"p2"` {
		t.Fatalf("next cursor %s", next)
	}
	if _, ok, complete := x.get("a"); !ok || complete {
		t.Errorf("after page 1: known %v, complete %v", ok, complete)
	}
	if next := x.observe(json.RawMessage(`"p2"`), json.RawMessage(`{"tools":[{"name":"b","inputSchema":{"type":"object","properties":{"idempotency_key":{"type":"string"}}}}]}`)); next != nil {
		t.Fatalf("a last page returned cursor %s", next)
	}
	a, _, complete := x.get("a")
	b, _, _ := x.get("b")
	if !complete || a.ann != (Annotations{ReadOnly: true, Listed: true}) || !b.declaresKey || b.ann != (Annotations{Listed: true}) {
		t.Errorf("after page 2: a %+v, b %+v, complete %v", a, b, complete)
	}
	x.invalidate()
	if _, ok, complete := x.get("a"); ok || complete {
		t.Errorf("after invalidate: known %v, complete %v", ok, complete)
	}
}
