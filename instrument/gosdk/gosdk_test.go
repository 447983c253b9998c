package gosdk

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/idemkit/idemkit/idemkit"
	"github.com/idemkit/idemkit/instrument"
	"github.com/idemkit/idemkit/spancontract"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type harness struct {
	t      *testing.T
	sr     *tracetest.SpanRecorder
	reader *sdkmetric.ManualReader
	guard  *idemkit.Guard
	inst   *Instrumentation
	srv    *mcp.Server
}

func newHarness(t *testing.T, cfg *idemkit.Config, opts ...instrument.Option) *harness {
	t.Helper()
	h := &harness{t: t, sr: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(h.sr))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(h.reader))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()); _ = mp.Shutdown(context.Background()) })
	g, err := idemkit.NewGuard(&idemkit.MemoryStore{}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.guard = g
	h.srv = mcp.NewServer(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	h.inst = Instrument(h.srv, g, append([]instrument.Option{
		instrument.WithTracerProvider(tp), instrument.WithMeterProvider(mp), instrument.WithPropagator(propagation.TraceContext{}),
	}, opts...)...)
	return h
}

// connect returns a client session over in-memory transports, closed at
// cleanup.
func (h *harness) connect(opts *mcp.ClientOptions) *mcp.ClientSession {
	h.t.Helper()
	ctx := context.Background()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := h.srv.Connect(ctx, st, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "client", Version: "1"}, opts).Connect(ctx, ct, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() {
		_ = cs.Close()
		_ = ss.Wait()
	})
	return cs
}

func (h *harness) toolSpans(tool string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range h.sr.Ended() {
		if s.Name() == spancontract.SpanName(tool) {
			out = append(out, s)
		}
	}
	return out
}

func attrMap(s sdktrace.ReadOnlySpan) map[string]any {
	m := map[string]any{}
	for _, kv := range s.Attributes() {
		m[string(kv.Key)] = kv.Value.AsInterface()
	}
	return m
}

func text(r *mcp.CallToolResult) string {
	if r == nil || len(r.Content) == 0 {
		return ""
	}
	if tc, ok := r.Content[0].(*mcp.TextContent); ok {
		return tc.Text
	}
	return ""
}

func generic(t *testing.T, v any) map[string]any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

type refundIn struct {
	OrderID     string `json:"order_id"`
	AmountCents int    `json:"amount_cents"`
}

type refundOut struct {
	RefundID string `json:"refund_id"`
	Amount   int    `json:"amount"`
}

func TestReplay_SecondIdenticalCallReturnsFirstResultPlusMarker(t *testing.T) {
	h := newHarness(t, nil)
	var runs atomic.Int32
	// A typed tool: its inferred schema rejects unknown arguments, so the
	// idempotency_key must be removed before it reaches the handler.
	mcp.AddTool(h.srv, &mcp.Tool{Name: "refund", Description: "Refund an order."},
		func(ctx context.Context, req *mcp.CallToolRequest, in refundIn) (*mcp.CallToolResult, refundOut, error) {
			n := runs.Add(1)
			id := fmt.Sprintf("re_%d", n)
			instrument.RecordWrite(ctx, id)
			return &mcp.CallToolResult{Content: []mcp.Content{
				&mcp.TextContent{Text: "Refunded " + in.OrderID},
				&mcp.ImageContent{Data: []byte("png"), MIMEType: "image/png"},
			}}, refundOut{RefundID: id, Amount: in.AmountCents}, nil
		})
	cs := h.connect(nil)
	ctx := context.Background()
	args := map[string]any{"order_id": "o-1", "amount_cents": 1250, "idempotency_key": "k-1"}
	first, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "refund", Arguments: args})
	if err != nil || first.IsError {
		t.Fatalf("first: %v %q", err, text(first))
	}
	second, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "refund", Arguments: args})
	if err != nil {
		t.Fatal(err)
	}
	if runs.Load() != 1 {
		t.Fatalf("handler ran %d times", runs.Load())
	}
	g1, g2 := generic(t, first), generic(t, second)
	marker := g2["_meta"].(map[string]any)[instrument.ReplayMetaKey]
	if !reflect.DeepEqual(marker, map[string]any{"replayed": true, "attempt": float64(1), "write_id": "re_1"}) {
		t.Errorf("marker %v", marker)
	}
	delete(g2["_meta"].(map[string]any), instrument.ReplayMetaKey)
	if len(g2["_meta"].(map[string]any)) == 0 {
		delete(g2, "_meta")
	}
	if !reflect.DeepEqual(g1, g2) {
		t.Errorf("replay minus marker differs:\n%v\n%v", g1, g2)
	}
	if !reflect.DeepEqual(first.StructuredContent, second.StructuredContent) || len(second.Content) != 2 {
		t.Errorf("structured %v / %v, content %d", first.StructuredContent, second.StructuredContent, len(second.Content))
	}

	spans := h.toolSpans("refund")
	if len(spans) != 2 {
		t.Fatalf("%d spans", len(spans))
	}
	argsJSON, _ := json.Marshal(args)
	k, _ := idemkit.NewKey("", "refund", argsJSON, nil)
	for i, s := range spans {
		want := map[string]any{
			spancontract.GenAIOperationName: spancontract.OperationExecuteTool,
			spancontract.GenAIToolName:      "refund",
			spancontract.MCPMethodName:      spancontract.MethodToolsCall,
			spancontract.MCPProtocolVersion: attrMap(s)[spancontract.MCPProtocolVersion],
			spancontract.ArgsHash:           k.ArgsHash()[:32],
			spancontract.KeyHash:            k.Hash(),
			spancontract.KeySource:          spancontract.KeySourceExplicit,
			spancontract.Outcome:            []string{"executed", "replayed"}[i],
			spancontract.Attempt:            int64(1),
			spancontract.WriteID:            "re_1",
		}
		if got := attrMap(s); !reflect.DeepEqual(got, want) {
			t.Errorf("span %d:\n got %v\nwant %v", i, got, want)
		}
		if v, _ := attrMap(s)[spancontract.MCPProtocolVersion].(string); v == "" {
			t.Error("no protocol version")
		}
		if _, ok := attrMap(s)[spancontract.JSONRPCRequestID]; ok {
			t.Error("jsonrpc.request.id invented: the SDK does not expose it")
		}
		if s.SpanKind() != trace.SpanKindInternal {
			t.Errorf("kind %v", s.SpanKind())
		}
	}
	var rm metricdata.ResourceMetrics
	if err := h.reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name == instrument.MetricToolCalls {
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				o, _ := dp.Attributes.Value(spancontract.Outcome)
				got[o.AsString()] = dp.Value
			}
		}
	}
	if !reflect.DeepEqual(got, map[string]int64{"executed": 1, "replayed": 1}) {
		t.Errorf("calls %v", got)
	}
}

func TestConcurrentDuplicates_RunOnce(t *testing.T) {
	const n = 40
	h := newHarness(t, &idemkit.Config{Tools: map[string]idemkit.ToolConfig{"send": {Wait: 10 * time.Second}}})
	var runs atomic.Int32
	h.srv.AddTool(&mcp.Tool{Name: "send", InputSchema: map[string]any{"type": "object"}},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			runs.Add(1)
			time.Sleep(50 * time.Millisecond)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "sent"}}}, nil
		})
	cs := h.connect(nil)
	var wg sync.WaitGroup
	var replays atomic.Int32
	for range n {
		wg.Go(func() {
			r, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "send", Arguments: map[string]any{"to": "bob"}})
			if err != nil || text(r) != "sent" {
				t.Errorf("%v %#v", err, r)
				return
			}
			if r.Meta[instrument.ReplayMetaKey] != nil {
				replays.Add(1)
			}
		})
	}
	wg.Wait()
	if runs.Load() != 1 || replays.Load() != n-1 {
		t.Errorf("runs %d, replays %d", runs.Load(), replays.Load())
	}
}

func TestSubjects_NeverShareAResult(t *testing.T) {
	// The subject comes from the request (here a test-only _meta entry; in
	// production TokenSubject reads the verified bearer token).
	subject := func(ctx context.Context) string {
		s, _ := RequestFrom(ctx).Params.Meta["test/user"].(string)
		return s
	}
	h := newHarness(t, nil, instrument.WithSubject(subject))
	var runs sync.Map
	h.srv.AddTool(&mcp.Tool{Name: "send", InputSchema: map[string]any{"type": "object"}},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			user := req.Params.Meta["test/user"].(string)
			v, _ := runs.LoadOrStore(user, new(atomic.Int32))
			v.(*atomic.Int32).Add(1)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "for " + user}}}, nil
		})
	cs := h.connect(nil)
	for _, user := range []string{"alice", "bob", "alice", "bob"} {
		r, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "send", Arguments: map[string]any{"x": 1}, Meta: mcp.Meta{"test/user": user}})
		if err != nil || text(r) != "for "+user {
			t.Errorf("%s got %q (%v)", user, text(r), err)
		}
	}
	for _, user := range []string{"alice", "bob"} {
		v, _ := runs.Load(user)
		if v.(*atomic.Int32).Load() != 1 {
			t.Errorf("%s ran %d times", user, v.(*atomic.Int32).Load())
		}
	}
}

func TestListTools_AdvertisesTheKeyAndLearnsAnnotations(t *testing.T) {
	h := newHarness(t, nil)
	var runs sync.Map
	handler := func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		v, _ := runs.LoadOrStore(req.Params.Name, new(atomic.Int32))
		v.(*atomic.Int32).Add(1)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil
	}
	obj := map[string]any{"type": "object", "properties": map[string]any{"q": map[string]any{"type": "string"}}}
	h.srv.AddTool(&mcp.Tool{Name: "write", Description: "Writes.", InputSchema: obj}, handler)
	h.srv.AddTool(&mcp.Tool{Name: "read", InputSchema: obj, Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}, handler)
	cs := h.connect(nil)
	ctx := context.Background()

	// Calls before any listing: the middleware lists the tools itself.
	for _, name := range []string{"write", "write", "read", "read"} {
		if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: map[string]any{"q": "a"}}); err != nil {
			t.Fatal(err)
		}
	}
	counts := map[string]int32{}
	runs.Range(func(k, v any) bool { counts[k.(string)] = v.(*atomic.Int32).Load(); return true })
	if !reflect.DeepEqual(counts, map[string]int32{"write": 1, "read": 2}) {
		t.Errorf("runs %v", counts)
	}
	if a := attrMap(h.toolSpans("read")[1]); a[spancontract.Outcome] != "bypassed" {
		t.Errorf("read outcome %v", a[spancontract.Outcome])
	}

	res, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range res.Tools {
		props := tool.InputSchema.(map[string]any)["properties"].(map[string]any)
		_, has := props[instrument.KeyArgument]
		if has != (tool.Name == "write") || strings.Contains(tool.Description, instrument.KeyDescription) != (tool.Name == "write") {
			t.Errorf("%s: key advertised %v, description %q", tool.Name, has, tool.Description)
		}
	}

	// A tool added later, annotated read-only: the list_changed
	// notification makes the middleware forget what it knew.
	h.srv.AddTool(&mcp.Tool{Name: "late", InputSchema: obj, Annotations: &mcp.ToolAnnotations{IdempotentHint: true}}, handler)
	deadline := time.Now().Add(2 * time.Second)
	for {
		if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "late", Arguments: map[string]any{"q": "a"}}); err != nil {
			t.Fatal(err)
		}
		if len(h.toolSpans("late")) >= 2 || time.Now().After(deadline) {
			break
		}
	}
	if a := attrMap(h.toolSpans("late")[1]); a[spancontract.Outcome] != "bypassed" {
		t.Errorf("late tool outcome %v", a[spancontract.Outcome])
	}
	// Unknown tools pass through untouched: an error, no span.
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "missing"}); err == nil {
		t.Error("unknown tool accepted")
	}
	if len(h.toolSpans("missing")) != 0 {
		t.Error("span for an unknown tool")
	}
}

func TestProgress_NotifiesAndKeepsTheClaim(t *testing.T) {
	const lease = 300 * time.Millisecond
	h := newHarness(t, &idemkit.Config{Tools: map[string]idemkit.ToolConfig{"export": {Lease: lease}}})
	var runs atomic.Int32
	h.srv.AddTool(&mcp.Tool{Name: "export", InputSchema: map[string]any{"type": "object"}},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			runs.Add(1)
			for i := 1; i <= 16; i++ {
				time.Sleep(50 * time.Millisecond)
				if err := instrument.Progress(ctx, float64(i), 16, "rows"); err != nil {
					return nil, err
				}
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil
		})
	var mu sync.Mutex
	var got []float64
	cs := h.connect(&mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
		mu.Lock()
		got = append(got, r.Params.Progress)
		mu.Unlock()
	}})
	done := make(chan *mcp.CallToolResult, 1)
	go func() {
		r, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "export", Meta: mcp.Meta{"progressToken": "tok"}})
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	time.Sleep(2 * lease)
	dup, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "export"})
	if err != nil {
		t.Fatal(err)
	}
	if r := <-done; text(r) != "done" {
		t.Errorf("first %q", text(r))
	}
	if !dup.IsError || !strings.Contains(text(dup), "already in progress") || runs.Load() != 1 {
		t.Errorf("duplicate %q, runs %d", text(dup), runs.Load())
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n >= 16 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	sort.Float64s(got)
	if len(got) != 16 || got[15] != 16 {
		t.Errorf("progress notifications %v", got)
	}
}

func TestTraceContext_FromMeta(t *testing.T) {
	h := newHarness(t, nil)
	h.srv.AddTool(&mcp.Tool{Name: "read", InputSchema: map[string]any{"type": "object"}, Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil
		})
	cs := h.connect(nil)
	if _, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "read", Meta: mcp.Meta{
		"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	}}); err != nil {
		t.Fatal(err)
	}
	p := h.toolSpans("read")[0].Parent()
	if p.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || p.SpanID().String() != "00f067aa0ba902b7" || !p.IsRemote() {
		t.Errorf("parent %v", p)
	}
}

func TestJobTool_DuplicateStartsShareOneJob(t *testing.T) {
	h := newHarness(t, nil)
	jobs := instrument.NewJobs(h.inst.Instrumenter(), nil)
	defer func() {
		if err := jobs.Close(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	var runs atomic.Int32
	release := make(chan struct{})
	AddJobTool(h.srv, jobs, &mcp.Tool{Name: "export"}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		runs.Add(1)
		<-release
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "exported"}}}, nil
	})
	cs := h.connect(nil)
	ctx := context.Background()
	var ids []string
	for range 2 {
		r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "export", Arguments: map[string]any{"t": "orders"}})
		if err != nil || r.IsError {
			t.Fatalf("%v %q", err, text(r))
		}
		ids = append(ids, r.StructuredContent.(map[string]any)["job_id"].(string))
	}
	if ids[0] != ids[1] {
		t.Errorf("job ids %v", ids)
	}
	close(release)
	deadline := time.Now().Add(5 * time.Second)
	var final *mcp.CallToolResult
	for time.Now().Before(deadline) {
		r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "export_status", Arguments: map[string]any{"job_id": ids[0]}})
		if err != nil {
			t.Fatal(err)
		}
		if r.Meta[instrument.JobMetaKey].(map[string]any)["state"] == "succeeded" {
			final = r
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if final == nil || text(final) != "exported" || runs.Load() != 1 {
		t.Errorf("final %#v, runs %d", final, runs.Load())
	}
}
