package mcpgo

import (
	"context"
	"encoding/json"
	"reflect"
	"sort"
	"sync"
	"testing"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"

	"github.com/idemkit/idemkit/idemkit"
	"github.com/idemkit/idemkit/instrument"
	"github.com/idemkit/idemkit/spancontract"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// harness is a real mcp-go server with the instrumentation installed,
// recording spans and metrics.
type harness struct {
	t      *testing.T
	sr     *tracetest.SpanRecorder
	reader *sdkmetric.ManualReader
	store  idemkit.Store
	guard  *idemkit.Guard
	inst   *Instrumentation
	srv    *server.MCPServer
}

type harnessConfig struct {
	guard    *idemkit.Config
	store    idemkit.Store
	noGuard  bool
	opts     []instrument.Option
	srvOpts  []server.ServerOption
	optsLast bool // pass the instrumentation's options after srvOpts
}

func newHarness(t *testing.T, hc harnessConfig) *harness {
	t.Helper()
	h := &harness{t: t, sr: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(h.sr))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(h.reader))
	t.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	if !hc.noGuard {
		h.store = hc.store
		if h.store == nil {
			h.store = &idemkit.MemoryStore{}
		}
		g, err := idemkit.NewGuard(h.store, hc.guard)
		if err != nil {
			t.Fatal(err)
		}
		h.guard = g
	}
	opts := append([]instrument.Option{
		instrument.WithTracerProvider(tp),
		instrument.WithMeterProvider(mp),
		instrument.WithPropagator(propagation.TraceContext{}),
	}, hc.opts...)
	h.inst = New(h.guard, opts...)
	srvOpts := append(h.inst.ServerOptions(), hc.srvOpts...)
	if hc.optsLast {
		srvOpts = append(append([]server.ServerOption(nil), hc.srvOpts...), h.inst.ServerOptions()...)
	}
	h.srv = server.NewMCPServer("test", "1.0.0", srvOpts...)
	return h
}

// client returns an initialized in-process client; it is closed at cleanup.
func (h *harness) client() *client.Client {
	h.t.Helper()
	return h.clientOn(transport.NewInProcessTransport(h.srv))
}

func (h *harness) clientOn(tr transport.Interface) *client.Client {
	h.t.Helper()
	return h.initClient(client.NewClient(tr))
}

// initClient starts and initializes c; it is closed at cleanup.
func (h *harness) initClient(c *client.Client) *client.Client {
	h.t.Helper()
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { _ = c.Close() })
	var init mcp.InitializeRequest
	init.Params.ProtocolVersion = mcp.LATEST_LEGACY_PROTOCOL_VERSION
	init.Params.ClientInfo = mcp.Implementation{Name: "test-client", Version: "1"}
	if _, err := c.Initialize(ctx, init); err != nil {
		h.t.Fatal(err)
	}
	return c
}

func callReq(tool string, args map[string]any) mcp.CallToolRequest {
	var r mcp.CallToolRequest
	r.Params.Name = tool
	r.Params.Arguments = args
	return r
}

// toolSpans returns the ended execute_tool spans of tool, in end order.
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
	m := make(map[string]any)
	for _, kv := range s.Attributes() {
		m[string(kv.Key)] = kv.Value.AsInterface()
	}
	return m
}

// assertAttrs checks that span has exactly want (no other attributes).
func assertAttrs(t *testing.T, s sdktrace.ReadOnlySpan, want map[string]any) {
	t.Helper()
	got := attrMap(s)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("span %q attributes:\n got %v\nwant %v", s.Name(), sortedDump(got), sortedDump(want))
	}
}

func sortedDump(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k, v := range m {
		b, _ := json.Marshal(v)
		out = append(out, k+"="+string(b))
	}
	sort.Strings(out)
	return out
}

// collect returns the metrics recorded so far, by instrument name.
func (h *harness) collect() map[string]metricdata.Metrics {
	h.t.Helper()
	var rm metricdata.ResourceMetrics
	if err := h.reader.Collect(context.Background(), &rm); err != nil {
		h.t.Fatal(err)
	}
	out := make(map[string]metricdata.Metrics)
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != instrument.ScopeName {
			h.t.Errorf("unexpected scope %q", sm.Scope.Name)
		}
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// sumByAttrs returns an Int64 sum's data points as "k=v,k=v" -> value.
func sumByAttrs(t *testing.T, m metricdata.Metrics) map[string]int64 {
	t.Helper()
	s, ok := m.Data.(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("%s is %T, not an int64 sum", m.Name, m.Data)
	}
	out := make(map[string]int64)
	for _, dp := range s.DataPoints {
		out[setKey(dp.Attributes)] = dp.Value
	}
	return out
}

// histCounts returns a histogram's data point counts by attribute set.
func histCounts(t *testing.T, m metricdata.Metrics) map[string]uint64 {
	t.Helper()
	hist, ok := m.Data.(metricdata.Histogram[float64])
	if !ok {
		t.Fatalf("%s is %T, not a float64 histogram", m.Name, m.Data)
	}
	out := make(map[string]uint64)
	for _, dp := range hist.DataPoints {
		out[setKey(dp.Attributes)] = dp.Count
	}
	return out
}

func setKey(s attribute.Set) string {
	var parts []string
	for _, kv := range s.ToSlice() {
		parts = append(parts, string(kv.Key)+"="+kv.Value.String())
	}
	sort.Strings(parts)
	b, _ := json.Marshal(parts)
	return string(b)
}

func key(kv ...string) string {
	var parts []string
	for i := 0; i+1 < len(kv); i += 2 {
		parts = append(parts, kv[i]+"="+kv[i+1])
	}
	sort.Strings(parts)
	b, _ := json.Marshal(parts)
	return string(b)
}

// counter counts handler runs.
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counter) inc(k string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = make(map[string]int)
	}
	c.n[k]++
	return c.n[k]
}

func (c *counter) get(k string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[k]
}

// toJSON returns v's JSON as a generic value, for field-by-field comparison.
func toJSON(t *testing.T, v any) map[string]any {
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

func resultText(r *mcp.CallToolResult) string {
	if r == nil || len(r.Content) == 0 {
		return ""
	}
	if tc, ok := mcp.AsTextContent(r.Content[0]); ok {
		return tc.Text
	}
	return ""
}

func argsHash(t *testing.T, tool string, args map[string]any) string {
	t.Helper()
	b, _ := json.Marshal(args)
	k, err := idemkit.NewKey("", tool, b, nil)
	if err != nil {
		t.Fatal(err)
	}
	return k.ArgsHash()[:spancontract.HashLen]
}

func ctxWithUser(ctx context.Context, user string) context.Context {
	return context.WithValue(ctx, userKey{}, user)
}

type userKey struct{}

func userFrom(ctx context.Context) string {
	s, _ := ctx.Value(userKey{}).(string)
	return s
}
