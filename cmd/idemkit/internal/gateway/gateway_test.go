package gateway

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"reflect"
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
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/internal/clip"
	"github.com/idemkit-mcp/idemkit/internal/mcpcall"
	"github.com/idemkit-mcp/idemkit/spancontract"
)

// upstreamServer is a real mcp-go server over Streamable HTTP with stateful
// sessions, counting the runs of its tools.
type upstreamServer struct {
	URL  string
	runs sync.Map // tool -> *atomic.Int64
	args sync.Map // tool -> map[string]any: the last call's arguments
}

// lastArgs returns the arguments the last call of tool arrived with.
func (u *upstreamServer) lastArgs(tool string) map[string]any {
	v, _ := u.args.Load(tool)
	m, _ := v.(map[string]any)
	return m
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
			u.args.Store("issue_refund", req.GetArguments())
			return mcp.NewToolResultText("refund issued for " + req.GetString("order_id", "")), nil
		})
	s.AddTool(mcp.NewTool("lookup", mcp.WithReadOnlyHintAnnotation(true), mcp.WithString("order_id")),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			u.inc("lookup")
			u.args.Store("lookup", req.GetArguments())
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
	// Results of any size: a write tool and a read-only one.
	big := func(name string) server.ToolHandlerFunc {
		return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			u.inc(name)
			if req.Params.Meta != nil && req.Params.Meta.ProgressToken != nil {
				// A message before the answer: mcp-go answers with an SSE
				// stream.
				_ = server.ServerFromContext(ctx).SendNotificationToClient(ctx, "notifications/progress",
					map[string]any{"progressToken": req.Params.Meta.ProgressToken, "progress": 1})
			}
			return mcp.NewToolResultText(strings.Repeat("x", req.GetInt("bytes", 0))), nil
		}
	}
	s.AddTool(mcp.NewTool("big_report", mcp.WithNumber("bytes")), big("big_report"))
	s.AddTool(mcp.NewTool("big_lookup", mcp.WithReadOnlyHintAnnotation(true), mcp.WithNumber("bytes")), big("big_lookup"))
	hs := httptest.NewServer(server.NewStreamableHTTPServer(s, server.WithStateful(true)))
	t.Cleanup(hs.Close)
	u.URL = hs.URL + "/mcp"
	return u
}

// newGatewayServer serves a Gateway in front of upstream on loopback,
// configured by cfg (its Upstream is set here).
func newGatewayServer(t testing.TB, upstreamURL string, cfg Config) (*Gateway, string) {
	t.Helper()
	up, err := NewHTTPUpstream(upstreamURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Upstream = up
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g, serveGateway(t, g)
}

// serveGateway serves g on loopback until the test ends, and returns its
// URL.
func serveGateway(t testing.TB, g *Gateway) string {
	t.Helper()
	hs := httptest.NewServer(g)
	t.Cleanup(func() {
		hs.Close()
		_ = g.Close(context.Background())
	})
	return hs.URL
}

// telemetryPair is a span recorder and a metric reader.
type telemetryPair struct {
	spans  *tracetest.SpanRecorder
	reader *sdkmetric.ManualReader
	tp     *sdktrace.TracerProvider
	mp     *sdkmetric.MeterProvider
}

func newTelemetryPair() *telemetryPair {
	p := &telemetryPair{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	p.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(p.spans))
	p.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(p.reader))
	return p
}

// config returns the instrumentation of a gateway recording into p.
func (p *telemetryPair) config() *mcpcall.Config {
	c := mcpcall.DefaultConfig()
	c.TracerProvider, c.MeterProvider = p.tp, p.mp
	return &c
}

// toolSpans returns the ended tools/call spans of tool, in end order, by
// their attributes.
func (p *telemetryPair) toolSpans(tool string) []map[string]any {
	var out []map[string]any
	for _, s := range p.spans.Ended() {
		if s.Name() == "tools/call "+tool {
			out = append(out, attrsOf(s))
		}
	}
	return out
}

func attrsOf(s sdktrace.ReadOnlySpan) map[string]any {
	m := map[string]any{}
	for _, kv := range s.Attributes() {
		m[string(kv.Key)] = kv.Value.AsInterface()
	}
	return m
}

func newGuard(t testing.TB) *idemkit.Guard {
	t.Helper()
	g, err := idemkit.NewGuard(&idemkit.MemoryStore{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// subjectHash is the idemkit.subject.hash of a caller presenting a bearer
// token: the gateway's subject is the token's SHA-256, never the token.
func subjectHash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return clip.Hash("bearer:" + hex.EncodeToString(sum[:]))
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

func TestGateway_MCPGoClientAndServer(t *testing.T) {
	up := newUpstream(t)
	tel := newTelemetryPair()
	_, url := newGatewayServer(t, up.URL, Config{Guard: newGuard(t), Instrumentation: tel.config()})
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
	// The key is the gateway's: a protected tool never sees it.
	if _, ok := up.lastArgs("issue_refund")["idempotency_key"]; ok || up.lastArgs("issue_refund")["order_id"] != "o-1" {
		t.Errorf("the upstream got %v: the key must be stripped, the rest kept", up.lastArgs("issue_refund"))
	}
	// A read-only tool's arguments are forwarded as they are.
	callTool(t, c, "lookup", map[string]any{"order_id": "o-1", "idempotency_key": "mine"})
	if up.lastArgs("lookup")["idempotency_key"] != "mine" {
		t.Errorf("the read-only tool got %v: an unprotected tool's arguments must pass untouched", up.lastArgs("lookup"))
	}

	calls := tel.toolSpans("issue_refund")
	if len(calls) != 1 {
		t.Fatalf("%d issue_refund spans", len(calls))
	}
	c0 := calls[0]
	for k, want := range map[string]any{
		"idemkit.outcome": "executed", "idemkit.key.source": "explicit", "idemkit.subject.hash": subjectHash("tok"),
		"network.transport": "tcp", "network.protocol.name": "http", "network.protocol.version": "1.1",
		"client.address": "127.0.0.1", "mcp.protocol.version": mcp.LATEST_LEGACY_PROTOCOL_VERSION,
		"gen_ai.operation.name": "execute_tool", "mcp.method.name": "tools/call",
	} {
		if c0[k] != want {
			t.Errorf("issue_refund span %s = %v, want %v", k, c0[k], want)
		}
	}
	for _, k := range []string{"mcp.session.id", "jsonrpc.request.id", "client.port", "idemkit.key.hash", "idemkit.args.hash"} {
		if c0[k] == nil || c0[k] == "" {
			t.Errorf("issue_refund span lacks %s: %v", k, c0)
		}
	}
	if l := tel.toolSpans("lookup"); len(l) != 1 || l[0]["idemkit.outcome"] != "bypassed" || l[0]["idemkit.bypass.reason"] != "unprotected" {
		t.Errorf("lookup spans: %v", l)
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

// TestGateway_NestedKeyPropertyIsAnOrdinaryArgument: a property named
// idempotency_key inside another property is one of the tool's own
// arguments, not the key; only a top-level property declares the key, so
// the gateway advertises the key for this tool and strips it from the
// top level (and only there) before forwarding.
func TestGateway_NestedKeyPropertyIsAnOrdinaryArgument(t *testing.T) {
	u := &upstreamServer{}
	s := server.NewMCPServer("upstream", "1.0.0")
	s.AddTool(mcp.NewToolWithRawSchema("ship_order", "Ships an order.",
		json.RawMessage(`{"type":"object","properties":{"order":{"type":"object","properties":{"idempotency_key":{"type":"string"}}}}}`)),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			u.inc("ship_order")
			u.args.Store("ship_order", req.GetArguments())
			return mcp.NewToolResultText("shipped"), nil
		})
	hs := httptest.NewServer(server.NewStreamableHTTPServer(s, server.WithStateful(true)))
	t.Cleanup(hs.Close)
	_, url := newGatewayServer(t, hs.URL+"/mcp", Config{Guard: newGuard(t)})
	c := mcpClient(t, url, "tok")
	tools, err := c.ListTools(context.Background(), mcp.ListToolsRequest{})
	if err != nil || len(tools.Tools) != 1 {
		t.Fatalf("tools/list: %v %v", tools, err)
	}
	if _, ok := tools.Tools[0].InputSchema.Properties[spancontract.KeyArgument]; !ok || !strings.Contains(tools.Tools[0].Description, "Retries are safe") {
		t.Errorf("ship_order is not advertised the key: %+v", tools.Tools[0])
	}
	args := map[string]any{"order": map[string]any{spancontract.KeyArgument: "inner"}, spancontract.KeyArgument: "k-1"}
	callTool(t, c, "ship_order", args)
	if r := callTool(t, c, "ship_order", args); r.Meta == nil || r.Meta.AdditionalFields[spancontract.ReplayMetaKey] == nil {
		t.Errorf("the duplicate was not replayed: %+v", r)
	}
	got := u.lastArgs("ship_order")
	if _, ok := got[spancontract.KeyArgument]; ok || u.count("ship_order") != 1 || !reflect.DeepEqual(got["order"], map[string]any{spancontract.KeyArgument: "inner"}) {
		t.Errorf("the upstream ran %d times and got %v: the top-level key must be stripped, the nested property kept", u.count("ship_order"), got)
	}
}

func TestGateway_LearnsToolsWhenTheClientNeverListed(t *testing.T) {
	up := newUpstream(t)
	tel := newTelemetryPair()
	_, url := newGatewayServer(t, up.URL, Config{Guard: newGuard(t), Instrumentation: tel.config()})
	c := mcpClient(t, url, "tok")
	callTool(t, c, "lookup", map[string]any{})
	var r mcp.CallToolRequest
	r.Params.Name = "nonexistent_tool_x"
	if _, err := c.CallTool(context.Background(), r); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("an unknown tool: %v, want the upstream's error", err)
	}
	// lookup was learned read-only from the gateway's own tools/list.
	if l := tel.toolSpans("lookup"); len(l) != 1 || l[0]["idemkit.bypass.reason"] != "unprotected" {
		t.Errorf("lookup without a prior tools/list: %v", l)
	}
	// An unlisted tool gets MCP's default annotations: a write tool,
	// claimed (and released when the upstream answers with an error).
	u := tel.toolSpans("nonexistent_tool_x")
	if len(u) != 1 || u[0]["idemkit.outcome"] != "executed" || u[0]["idemkit.key.hash"] == nil || u[0]["error.type"] == nil {
		t.Errorf("an unlisted tool's span: %v", u)
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
	_, url := newGatewayServer(t, up.URL, Config{})
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

// anonymousClient returns an initialized client that sends no
// Authorization header.
func anonymousClient(t *testing.T, url string) *client.Client {
	t.Helper()
	c, err := client.NewStreamableHttpClient(url)
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

// TestGateway_RefusesProtectedCallsWithoutASubject: over HTTP, a protected
// call without the subject header is refused (fail closed), with a span
// that says why; a tools/list without it does not advertise the key
// either; read-only tools are still forwarded.
func TestGateway_RefusesProtectedCallsWithoutASubject(t *testing.T) {
	up := newUpstream(t)
	tel := newTelemetryPair()
	var logs strings.Builder
	log := slog.New(slog.NewTextHandler(&syncWriter{w: &logs}, nil))
	_, url := newGatewayServer(t, up.URL, Config{Guard: newGuard(t), Instrumentation: tel.config(), Logger: log})
	c := anonymousClient(t, url)
	tools, err := c.ListTools(context.Background(), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range tools.Tools {
		if _, ok := tl.InputSchema.Properties["idempotency_key"]; ok || strings.Contains(tl.Description, "Retries are safe") {
			t.Errorf("%s claims retry safety to a caller without a subject: %+v", tl.Name, tl)
		}
	}
	for range 2 {
		r := callTool(t, c, "issue_refund", map[string]any{"order_id": "o-1"})
		refusal, _ := r.Meta.AdditionalFields[spancontract.RefusalMetaKey].(map[string]any)
		if !r.IsError || refusal["reason"] != "unscoped" || !strings.Contains(text(r), "nothing was done") || !strings.Contains(text(r), "credentials") {
			t.Errorf("a protected call without a subject: %+v", r)
		}
	}
	if n := up.count("issue_refund"); n != 0 {
		t.Fatalf("the upstream ran %d refunds for callers it cannot tell apart", n)
	}
	callTool(t, c, "lookup", map[string]any{})
	if up.count("lookup") != 1 {
		t.Errorf("a read-only tool was not forwarded")
	}
	spans := tel.toolSpans("issue_refund")
	if len(spans) != 2 {
		t.Fatalf("%d issue_refund spans, want one per refused call", len(spans))
	}
	for _, sp := range spans {
		if sp["idemkit.refusal.reason"] != "unscoped" || sp["error.type"] != "tool_error" || sp["idemkit.outcome"] != nil {
			t.Errorf("a refused call's span: %v", sp)
		}
	}
	if n := strings.Count(logs.String(), "refused a call of a protected tool"); n != 1 || !strings.Contains(logs.String(), "--subject-header") {
		t.Errorf("the operator's log (want one line per tool naming the flag to set):\n%s", logs.String())
	}
}

// TestGateway_NoSubjectHeaderScopesCallsBySession: with --subject-header -,
// the gateway's own sessions (random IDs, only issued ones accepted) scope
// the calls: a retry on the session is replayed, a new session's call runs.
func TestGateway_NoSubjectHeaderScopesCallsBySession(t *testing.T) {
	up := newUpstream(t)
	_, url := newGatewayServer(t, up.URL, Config{Guard: newGuard(t), SubjectHeader: "-"})
	a := anonymousClient(t, url)
	tools, err := a.ListTools(context.Background(), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	advertised := false
	for _, tl := range tools.Tools {
		_, ok := tl.InputSchema.Properties["idempotency_key"]
		advertised = advertised || (tl.Name == "issue_refund" && ok)
	}
	if !advertised {
		t.Errorf("issue_refund's calls are protected, but tools/list does not say so")
	}
	args := map[string]any{"order_id": "o-1"}
	callTool(t, a, "issue_refund", args)
	r := callTool(t, a, "issue_refund", args)
	if up.count("issue_refund") != 1 || r.Meta == nil || r.Meta.AdditionalFields[spancontract.ReplayMetaKey] == nil {
		t.Fatalf("a retry on the same session: %d runs, %+v", up.count("issue_refund"), r)
	}
	callTool(t, anonymousClient(t, url), "issue_refund", args)
	if up.count("issue_refund") != 2 {
		t.Errorf("another session shared the first one's result: %d runs", up.count("issue_refund"))
	}
}

// syncWriter serialises writes to a builder read by the test.
type syncWriter struct {
	mu sync.Mutex // protects w
	w  *strings.Builder
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
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
	tel := newTelemetryPair()
	_, url := newGatewayServer(t, hs.URL+"/mcp", Config{Guard: newGuard(t), Instrumentation: tel.config()})

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
	if l := tel.toolSpans("late_0"); len(l) != 1 || l[0]["idemkit.bypass.reason"] != "unprotected" {
		t.Errorf("the read-only tool added at run time was handled as %v: the gateway kept a stale tool list", l)
	}
}

func TestToolIndex_ObservesEveryPage(t *testing.T) {
	var x toolIndex
	page1 := json.RawMessage(`{"tools":[{"name":"a","annotations":{"readOnlyHint":true}}],"nextCursor":"p2"}`)
	tools, err := parseTools(page1)
	if err != nil {
		t.Fatal(err)
	}
	next := nextCursor(page1)
	if string(next) != `"p2"` {
		t.Fatalf("next cursor %s", next)
	}
	x.observe(nil, tools, next)
	if a, _ := x.get("a"); a == nil || !a.info.ReadOnlyHint {
		t.Errorf("after page 1: a %v", a)
	}
	if _, known := x.get("c"); known {
		t.Errorf("after page 1 of 2, c is known not to exist")
	}
	page2 := json.RawMessage(`{"tools":[{"name":"b","inputSchema":{"type":"object","properties":{"idempotency_key":{"type":"string"}}}}]}`)
	if tools, err = parseTools(page2); err != nil {
		t.Fatal(err)
	}
	if next := nextCursor(page2); next != nil {
		t.Fatalf("a last page has cursor %s", next)
	}
	x.observe(json.RawMessage(`"p2"`), tools, nil)
	a, _ := x.get("a")
	b, _ := x.get("b")
	if a == nil || !a.info.ReadOnlyHint || b == nil || !b.info.DeclaresKey || b.info.ReadOnlyHint {
		t.Errorf("after page 2: a %+v, b %+v", a, b)
	}
	if _, known := x.get("c"); !known {
		t.Errorf("a complete listing must know that c does not exist")
	}
	x.invalidate()
	if a, known := x.get("a"); a != nil || known {
		t.Errorf("after invalidate: a %v, known %v", a, known)
	}
}

// TestGateway_ServeStdio_SpansOfALocalClient: served over stdio, the
// gateway's one client needs no subject (a local transport); its spans say
// network.transport pipe and carry no session or client address.
func TestGateway_ServeStdio_SpansOfALocalClient(t *testing.T) {
	up := newUpstream(t)
	u, err := NewHTTPUpstream(up.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	tel := newTelemetryPair()
	g, err := New(Config{Upstream: u, Guard: newGuard(t), Instrumentation: tel.config()})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(context.Background())
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	served := make(chan error, 1)
	go func() { served <- g.ServeStdio(context.Background(), inR, outW) }()
	answers := bufio.NewScanner(outR)
	answers.Buffer(nil, 1<<20)
	send := func(msg string) map[string]any {
		t.Helper()
		if _, err := io.WriteString(inW, msg+"\n"); err != nil {
			t.Fatal(err)
		}
		if !answers.Scan() {
			t.Fatalf("no answer to %s: %v", msg, answers.Err())
		}
		var m map[string]any
		if err := json.Unmarshal(answers.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	if _, err := io.WriteString(inW, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n"); err != nil {
		t.Fatal(err)
	}
	call := `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"issue_refund","arguments":{"order_id":"o-1"}}}`
	send(fmt.Sprintf(call, 2))
	second := send(fmt.Sprintf(call, 3))
	if up.count("issue_refund") != 1 {
		t.Fatalf("the duplicate ran: %d runs (%v)", up.count("issue_refund"), second)
	}
	inW.Close()
	if err := <-served; err != nil {
		t.Fatalf("ServeStdio: %v", err)
	}
	spans := tel.toolSpans("issue_refund")
	if len(spans) != 2 || spans[1]["idemkit.outcome"] != "replayed" {
		t.Fatalf("spans %v", spans)
	}
	for _, sp := range spans {
		if sp["network.transport"] != "pipe" || sp["mcp.session.id"] != nil || sp["client.address"] != nil ||
			sp["mcp.protocol.version"] != "2025-06-18" || sp["idemkit.subject.hash"] != nil || sp["jsonrpc.request.id"] == nil {
			t.Errorf("a stdio call's span: %v", sp)
		}
	}
}
