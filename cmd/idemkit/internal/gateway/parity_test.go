package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
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
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
	"github.com/idemkit-mcp/idemkit/instrument"
	"github.com/idemkit-mcp/idemkit/instrument/mcpgo"
	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

// parityServer is one copy of the server both sides run: the same tools,
// prompt and resource, counting the runs of its tools.
type parityServer struct {
	runs    sync.Map // tool -> *atomic.Int64
	holding chan struct{}
	release chan struct{}
}

func newParityServer() *parityServer {
	return &parityServer{holding: make(chan struct{}, 1), release: make(chan struct{})}
}

func (p *parityServer) count(tool string) int64 {
	v, _ := p.runs.LoadOrStore(tool, new(atomic.Int64))
	return v.(*atomic.Int64).Load()
}

func (p *parityServer) ran(tool string) {
	v, _ := p.runs.LoadOrStore(tool, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

// register adds the tools, a prompt and a resource to s.
func (p *parityServer) register(s *server.MCPServer) {
	text := func(t string) server.ToolHandlerFunc {
		return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			p.ran(req.Params.Name)
			return mcp.NewToolResultText(t), nil
		}
	}
	s.AddTool(mcp.NewTool("issue_refund", mcp.WithString("order_id", mcp.Required()), mcp.WithNumber("amount_cents")), text("refund issued"))
	s.AddTool(mcp.NewTool("lookup", mcp.WithReadOnlyHintAnnotation(true)), text("paid"))
	s.AddTool(mcp.NewTool("unrecorded", mcp.WithString("x")), text("done, but not recorded"))
	s.AddTool(mcp.NewTool("declined", mcp.WithString("x")), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		p.ran("declined")
		return mcp.NewToolResultError("card declined"), nil
	})
	s.AddTool(mcp.NewTool("broken", mcp.WithString("x")), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		p.ran("broken")
		return nil, errors.New("the database is down")
	})
	s.AddTool(mcp.NewTool("hold", mcp.WithString("x")), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		p.ran("hold")
		p.holding <- struct{}{}
		<-p.release
		return mcp.NewToolResultText("held"), nil
	})
	s.AddPrompt(mcp.NewPrompt("greet"), func(ctx context.Context, req mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		return mcp.NewGetPromptResult("greeting", []mcp.PromptMessage{mcp.NewPromptMessage(mcp.RoleUser, mcp.NewTextContent("hello"))}), nil
	})
	s.AddResource(mcp.NewResource("file:///doc", "doc"), func(ctx context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
		return []mcp.ResourceContents{mcp.TextResourceContents{URI: "file:///doc", Text: "the doc"}}, nil
	})
}

// unrecordedStore fails the finish of the tool "unrecorded" (whose result
// says "not recorded") with a store error that is not transient: the Guard
// gives up at once.
type unrecordedStore struct{ idemkit.MemoryStore }

func (s *unrecordedStore) Finish(ctx context.Context, req idemstore.FinishRequest) error {
	if bytes.Contains(req.Response.Body, []byte("not recorded")) {
		return errors.New("disk full")
	}
	return s.MemoryStore.Finish(ctx, req)
}

// bearerSubject is the gateway's subject of a bearer token, which the
// middleware side names the same way.
func bearerSubject(token string) string {
	sum := sha256.Sum256([]byte(token))
	return "bearer:" + hex.EncodeToString(sum[:])
}

// parityClient opens an MCP session on url, with a bearer token unless
// token is "".
func parityClient(t *testing.T, url, token string) *client.Client {
	t.Helper()
	var opts []transport.StreamableHTTPCOption
	if token != "" {
		// On every request, the closing DELETE included: mcp-go's client
		// sends its WithHTTPHeaders on its other requests only, and the
		// gateway refuses a request on a session whose subject differs
		// from its initialize's (session binding).
		opts = append(opts, transport.WithHTTPBasicClient(&http.Client{Transport: withAuthorization{"Bearer " + token}}))
	}
	c, err := client.NewStreamableHttpClient(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	var init mcp.InitializeRequest
	init.Params.ProtocolVersion = mcp.LATEST_LEGACY_PROTOCOL_VERSION
	init.Params.ClientInfo = mcp.Implementation{Name: "parity", Version: "1"}
	if _, err := c.Initialize(ctx, init); err != nil {
		t.Fatal(err)
	}
	return c
}

// withAuthorization is an http.RoundTripper that sets Authorization.
type withAuthorization struct{ value string }

func (a withAuthorization) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", a.value)
	return http.DefaultTransport.RoundTrip(r)
}

// exercise makes the same requests to a server at url: every method the
// gateway forwards, every outcome of a tools/call and every error class.
// It closes its clients (ending their sessions) before it returns.
func exercise(t *testing.T, url string, p *parityServer) {
	ctx := context.Background()
	c := parityClient(t, url, "tok")
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	call := func(tool string, args map[string]any) (*mcp.CallToolResult, error) {
		var r mcp.CallToolRequest
		r.Params.Name, r.Params.Arguments = tool, args
		return c.CallTool(ctx, r)
	}
	_, err := c.ListTools(ctx, mcp.ListToolsRequest{})
	must("tools/list", err)
	// The session speaks mcp.LATEST_LEGACY_PROTOCOL_VERSION, where ping is
	// still a request (the "ping" span checked below proves it was sent).
	//lint:ignore SA1019 deprecated only for protocol 2026-07-28, which this session does not speak
	must("ping", c.Ping(ctx))
	_, err = c.ListPrompts(ctx, mcp.ListPromptsRequest{})
	must("prompts/list", err)
	var gp mcp.GetPromptRequest
	gp.Params.Name = "greet"
	_, err = c.GetPrompt(ctx, gp)
	must("prompts/get", err)
	_, err = c.ListResources(ctx, mcp.ListResourcesRequest{})
	must("resources/list", err)
	var rr mcp.ReadResourceRequest
	rr.Params.URI = "file:///doc"
	_, err = c.ReadResource(ctx, rr)
	must("resources/read", err)
	// Methods the server does not serve: JSON-RPC errors both ways.
	if _, err := c.ListTasks(ctx, mcp.ListTasksRequest{}); err == nil {
		t.Errorf("tasks/list: no error from a server without tasks")
	}
	if _, err := c.GetTransport().SendRequest(ctx, transport.JSONRPCRequest{JSONRPC: "2.0", ID: mcp.NewRequestId(int64(9000)), Method: "no/such_method"}); err != nil {
		t.Fatalf("no/such_method: %v", err)
	}

	// tools/call: executed, replayed, explicit key, mismatch, bypassed,
	// isError, a Go error, invalid arguments, an unrecorded finish, in
	// progress.
	for _, args := range []map[string]any{{"order_id": "o-1"}, {"order_id": "o-1"}, {"order_id": "o-2", "idempotency_key": "k-2"}, {"order_id": "o-3", "idempotency_key": "k-2"}} {
		_, err := call("issue_refund", args)
		must("issue_refund", err)
	}
	_, err = call("lookup", nil)
	must("lookup", err)
	_, err = call("declined", map[string]any{"x": "1"})
	must("declined", err)
	_, err = call("declined", map[string]any{"x": "1"}) // the stored isError result, replayed
	must("declined", err)
	if _, err := call("broken", map[string]any{"x": "1"}); err == nil {
		t.Errorf("broken: no error")
	}
	_, err = call("issue_refund", map[string]any{"order_id": "o-4", "amount_cents": "twelve"})
	must("issue_refund with a bad argument", err)
	_, err = call("unrecorded", map[string]any{"x": "1"})
	must("unrecorded", err)

	done := make(chan error, 1)
	go func() {
		_, err := call("hold", map[string]any{"x": "1"})
		done <- err
	}()
	<-p.holding
	_, err = call("hold", map[string]any{"x": "1"}) // in progress
	must("hold (duplicate)", err)
	close(p.release)
	must("hold", <-done)

	// A caller without a subject: refused (fail closed).
	anon := parityClient(t, url, "")
	_, err = anon.ListTools(ctx, mcp.ListToolsRequest{})
	must("tools/list without a subject", err)
	var r mcp.CallToolRequest
	r.Params.Name, r.Params.Arguments = "issue_refund", map[string]any{"order_id": "o-9"}
	_, err = anon.CallTool(ctx, r)
	must("issue_refund without a subject", err)

	must("close", c.Close())
	must("close", anon.Close())
}

// spanView is what two spans of the same request must share: everything
// but the per-session, per-request and per-connection values.
type spanView struct {
	Name, Kind, Status string
	Attrs              map[string]string
}

func (v spanView) String() string {
	keys := make([]string, 0, len(v.Attrs))
	for k := range v.Attrs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "%s [%s %s]", v.Name, v.Kind, v.Status)
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%s", k, v.Attrs[k])
	}
	return b.String()
}

func viewOf(s sdktrace.ReadOnlySpan) spanView {
	v := spanView{Name: s.Name(), Kind: s.SpanKind().String(), Status: s.Status().Code.String(), Attrs: map[string]string{}}
	for _, kv := range s.Attributes() {
		val := fmt.Sprint(kv.Value.AsInterface())
		switch kv.Key {
		case sc.MCPSessionID, sc.JSONRPCRequestID, sc.ClientPort:
			val = "<set>"
		}
		v.Attrs[string(kv.Key)] = val
	}
	return v
}

// metricPoints returns every data point by metric name and attribute set:
// the value of a counter, the count of a histogram.
func metricPoints(t *testing.T, r *sdkmetric.ManualReader) map[string]float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	key := func(name string, a attribute.Set) string {
		return name + "{" + a.Encoded(attribute.DefaultEncoder()) + "}"
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out[key(m.Name, p.Attributes)] = float64(p.Value)
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					out[key(m.Name, p.Attributes)] = float64(p.Count)
				}
			default:
				t.Fatalf("metric %s: unexpected data %T", m.Name, m.Data)
			}
		}
	}
	return out
}

// TestProtector_SameSpansAndMetricsAsTheMiddleware makes the same requests
// to a server protected by the mcp-go middleware and to an unprotected copy
// behind the gateway: every method the gateway forwards, every outcome of a
// tools/call, JSON-RPC errors of the server and of unknown methods, isError
// results, a finish that fails, and a caller without a subject. Both must
// record the same spans (names, kinds, statuses, attributes, per-request
// values aside) and the same metric points.
func TestProtector_SameSpansAndMetricsAsTheMiddleware(t *testing.T) {
	verify := func(ctx context.Context, token string, r *http.Request) (string, error) {
		return bearerSubject(token), nil
	}

	// The middleware, over Streamable HTTP whose sessions do not scope
	// calls (as the gateway's do not while a subject header is set).
	mw := newTelemetryPair()
	g1, err := idemkit.NewGuard(&unrecordedStore{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	p1 := newParityServer()
	s1 := server.NewMCPServer("refunds", "1", mcpgo.ServerOptions(g1,
		instrument.WithTracerProvider(mw.tp), instrument.WithMeterProvider(mw.mp),
		instrument.WithSubject(mcpgo.TokenSubject))...)
	p1.register(s1)
	hs1 := httptest.NewServer(mcpgo.RequireBearerToken(verify, &mcpgo.BearerOptions{Optional: true})(
		mcpgo.HTTPHandler(server.NewStreamableHTTPServer(s1, server.WithStateful(true)), false)))
	defer hs1.Close()

	// The gateway in front of an unprotected copy.
	gw := newTelemetryPair()
	g2, err := idemkit.NewGuard(&unrecordedStore{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	p2 := newParityServer()
	s2 := server.NewMCPServer("refunds", "1")
	p2.register(s2)
	hs2 := httptest.NewServer(server.NewStreamableHTTPServer(s2, server.WithStateful(true)))
	defer hs2.Close()
	_, gwURL := newGatewayServer(t, hs2.URL+"/mcp", Config{Guard: g2, Instrumentation: gw.config()})

	exercise(t, hs1.URL+"/mcp", p1)
	exercise(t, gwURL, p2)

	for _, tool := range []string{"issue_refund", "lookup", "declined", "broken", "unrecorded", "hold"} {
		if a, b := p1.count(tool), p2.count(tool); a != b || (tool != "lookup" && a == 0) {
			t.Errorf("%s ran %d times behind the middleware, %d behind the gateway", tool, a, b)
		}
	}
	if p1.count("issue_refund") != 2 {
		t.Errorf("issue_refund ran %d times, want 2 (o-1 once, o-2 once)", p1.count("issue_refund"))
	}

	// Spans, as multisets: the in-progress duplicate ends before the call
	// it waits for.
	views := func(p *telemetryPair) map[string]int {
		m := map[string]int{}
		for _, s := range p.spans.Ended() {
			v := viewOf(s)
			if v.Name == sc.ErrorTypeOther {
				// mcp-go fires no hook for a method it does not know, so
				// the middleware cannot learn the request ID there; the
				// gateway has it (checked below).
				delete(v.Attrs, sc.JSONRPCRequestID)
			}
			m[v.String()]++
		}
		return m
	}
	a, b := views(mw), views(gw)
	var diff []string
	for v, n := range a {
		if b[v] != n {
			diff = append(diff, fmt.Sprintf("middleware %d, gateway %d: %s", n, b[v], v))
		}
	}
	for v, n := range b {
		if _, ok := a[v]; !ok {
			diff = append(diff, fmt.Sprintf("middleware 0, gateway %d: %s", n, v))
		}
	}
	sort.Strings(diff)
	for _, d := range diff {
		t.Error(d)
	}

	// Every span kind of outcome and error the test means to cover is
	// there (on the gateway; the middleware's are equal).
	want := []struct{ name, attr, val string }{
		{"initialize", sc.MCPMethodName, "initialize"},
		{"tools/list", sc.MCPMethodName, "tools/list"},
		{"ping", sc.MCPMethodName, "ping"},
		{"prompts/get greet", sc.MCPMethodName, "prompts/get"},
		{"resources/read", sc.MCPResourceURI, "file:///doc"},
		{"tasks/list", sc.ErrorType, "-32601"},
		{"_OTHER", sc.ErrorType, "-32601"},
		{"tools/call issue_refund", sc.Outcome, sc.OutcomeReplayed},
		{"tools/call issue_refund", sc.Outcome, sc.OutcomeMismatch},
		{"tools/call issue_refund", sc.RefusalReason, sc.RefusalInvalidArguments},
		{"tools/call issue_refund", sc.RefusalReason, sc.RefusalUnscoped},
		{"tools/call lookup", sc.BypassReason, sc.BypassUnprotected},
		{"tools/call declined", sc.ErrorType, sc.ErrorTypeToolError},
		{"tools/call broken", sc.ErrorType, "-32603"},
		{"tools/call unrecorded", sc.FinishError, sc.FinishStoreError},
		{"tools/call hold", sc.Outcome, sc.OutcomeInProgress},
	}
	ended := gw.spans.Ended()
	for _, w := range want {
		found := false
		for _, s := range ended {
			if s.Name() != w.name {
				continue
			}
			for _, kv := range s.Attributes() {
				if string(kv.Key) == w.attr && kv.Value.String() == w.val {
					found = true
				}
			}
		}
		if !found {
			t.Errorf("no %q span with %s=%s", w.name, w.attr, w.val)
		}
	}
	for _, s := range ended {
		if s.Name() == "tools/call broken" && s.Status().Code != codes.Error {
			t.Errorf("tools/call broken: status %v", s.Status())
		}
		if s.Name() == sc.ErrorTypeOther && viewOf(s).Attrs[sc.JSONRPCRequestID] != "<set>" {
			t.Errorf("the gateway's span of an unknown method lacks %s", sc.JSONRPCRequestID)
		}
	}

	// Metrics. mcp.server.session.duration is recorded when a session ends,
	// which the clients' close requested: wait for both sides'.
	deadline := time.Now().Add(5 * time.Second)
	var ma, mb map[string]float64
	for {
		ma, mb = metricPoints(t, mw.reader), metricPoints(t, gw.reader)
		if hasSessions(ma, 2) && hasSessions(mb, 2) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(ma) == 0 {
		t.Fatal("the middleware recorded no metrics")
	}
	for k, v := range ma {
		if mb[k] != v {
			t.Errorf("%s: middleware %v, gateway %v", k, v, mb[k])
		}
	}
	for k, v := range mb {
		if _, ok := ma[k]; !ok {
			t.Errorf("%s: middleware none, gateway %v", k, v)
		}
	}
}

// hasSessions reports whether points count n ended sessions.
func hasSessions(points map[string]float64, n int) bool {
	total := 0.0
	for k, v := range points {
		if strings.HasPrefix(k, "mcp.server.session.duration{") {
			total += v
		}
	}
	return total >= float64(n)
}
