package mcpgo

import (
	"context"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/mark3labs/mcp-go/tracing"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/instrument"
	"github.com/idemkit-mcp/idemkit/internal/mcpcall"
)

// nopProcessor receives every ended span and drops it: spans are sampled
// and recorded (attributes built, IsRecording true) but not exported.
type nopProcessor struct{}

func (nopProcessor) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (nopProcessor) OnEnd(sdktrace.ReadOnlySpan)                     {}
func (nopProcessor) Shutdown(context.Context) error                  { return nil }
func (nopProcessor) ForceFlush(context.Context) error                { return nil }

func benchHandler(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	instrument.RecordWrite(ctx, "re_1")
	return &mcp.CallToolResult{
		Content:           []mcp.Content{mcp.NewTextContent("Refunded order " + req.GetString("order_id", ""))},
		StructuredContent: map[string]any{"refund_id": "re_1", "amount_cents": req.GetInt("amount_cents", 0)},
	}, nil
}

func readHandler(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	return mcp.NewToolResultText("order o-1"), nil
}

var (
	benchTool = mcp.NewTool("refund", mcp.WithDescription("Refunds an order."),
		mcp.WithString("order_id", mcp.Required()), mcp.WithNumber("amount_cents", mcp.Required()))
	benchReadTool = mcp.NewTool("lookup", mcp.WithDescription("Looks an order up."),
		mcp.WithString("order_id", mcp.Required()), mcp.WithReadOnlyHintAnnotation(true))
)

// server kinds of a paired benchmark.
const (
	bare = iota
	instrumented
	floor
	numKinds
)

// connector serves s over a transport and returns an initialized client;
// instrumented says whether s carries idemkit's options.
type connector func(b *testing.B, s *server.MCPServer, instrumented bool) *client.Client

// inProcess connects an in-process client.
func inProcess(b *testing.B, s *server.MCPServer, _ bool) *client.Client {
	b.Helper()
	c, err := client.NewInProcessClient(s)
	if err != nil {
		b.Fatal(err)
	}
	return startClient(b, c)
}

// overHTTP serves s over Streamable HTTP on loopback with stateful
// sessions (through NewStreamableHTTPHandler when instrumented, as a user
// would) and returns an initialized client of it.
func overHTTP(b *testing.B, s *server.MCPServer, inst bool) *client.Client {
	b.Helper()
	var h http.Handler = server.NewStreamableHTTPServer(s, server.WithStateful(true))
	if inst {
		h = NewStreamableHTTPHandler(s)
	}
	hs := httptest.NewServer(h)
	b.Cleanup(hs.Close)
	c, err := client.NewStreamableHttpClient(hs.URL)
	if err != nil {
		b.Fatal(err)
	}
	return startClient(b, c)
}

func startClient(b testing.TB, c *client.Client) *client.Client {
	b.Helper()
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	if _, err := c.Initialize(ctx, initRequest()); err != nil {
		b.Fatal(err)
	}
	return c
}

func initRequest() mcp.InitializeRequest {
	var init mcp.InitializeRequest
	init.Params.ProtocolVersion = mcp.LATEST_LEGACY_PROTOCOL_VERSION
	init.Params.ClientInfo = mcp.Implementation{Name: "bench", Version: "1"}
	return init
}

func callReq(tool string, args map[string]any) mcp.CallToolRequest {
	var r mcp.CallToolRequest
	r.Params.Name = tool
	r.Params.Arguments = args
	return r
}

// sweepEvery is how many calls pass between two sweeps of the benchmark's
// store. With a 10ms window a sweep keeps it near sweepEvery records, as a
// production sweeper keeps a store at window × rate; without it the store
// (and the GC's marking work) would grow with b.N.
const sweepEvery = 1024

var benchGuardConfig = &idemkit.Config{Window: 10 * time.Millisecond}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func runCalls(b *testing.B, c *client.Client, g *idemkit.Guard) {
	ctx := context.Background()
	req := callReq("refund", nil)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := 0; b.Loop(); i++ {
		// Fresh arguments every iteration: every instrumented call claims a
		// new key, runs the handler and stores the result.
		req.Params.Arguments = map[string]any{"order_id": "o-" + strconv.Itoa(i), "amount_cents": 1250}
		r, err := c.CallTool(ctx, req)
		if err != nil || r.IsError {
			b.Fatal(err, r)
		}
		if g != nil && i%sweepEvery == sweepEvery-1 {
			if _, err := g.Sweep(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	// CPU time per call (user+system, all threads, GC included): steadier
	// than wall time on a shared machine.
	b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// BenchmarkCallTool compares a bare mcp-go tools/call (in-process client and
// server) with the same call through the instrumentation: a protected tool,
// a memory store, the request's SERVER span sampled and recorded, every
// metric (mcp.server.operation.duration included) recorded.
func BenchmarkCallTool(b *testing.B) {
	b.Run("bare", func(b *testing.B) {
		runCalls(b, inProcess(b, bareServer(), false), nil)
	})
	b.Run("instrumented", func(b *testing.B) {
		s, g := instrumentedServer(b, sdktrace.AlwaysSample())
		runCalls(b, inProcess(b, s, true), g)
	})
	// paired alternates a bare, an instrumented and a tracing-floor call in
	// every iteration and times each, so that load from other processes
	// (this machine is shared) hits them alike; it reports the times and
	// their ratios.
	b.Run("paired", func(b *testing.B) { runPaired(b, sdktrace.AlwaysSample(), inProcess, callOp) })
	// paired-http: the same over Streamable HTTP on loopback, where a call
	// pays for HTTP and a session, as in production.
	b.Run("paired-http", func(b *testing.B) { runPaired(b, sdktrace.AlwaysSample(), overHTTP, callOp) })
	// paired-unsampled: spans sampled out (what most calls cost under a
	// ratio sampler): protection and metrics only.
	b.Run("paired-unsampled", func(b *testing.B) { runPaired(b, sdktrace.NeverSample(), inProcess, callOp) })
}

// BenchmarkListTools compares tools/list (a protected tool, whose listing
// gains the idempotency_key argument, and a read-only tool) with and
// without the instrumentation, in-process, spans recording.
func BenchmarkListTools(b *testing.B) {
	b.Run("paired", func(b *testing.B) { runPaired(b, sdktrace.AlwaysSample(), inProcess, listOp) })
	// paired-without-key: the same without the idempotency_key argument in
	// the listing, which makes the answer larger to encode and to decode:
	// the cost of the span alone.
	b.Run("paired-without-key", func(b *testing.B) {
		runPaired(b, sdktrace.AlwaysSample(), inProcess, listOp, instrument.WithoutKeyParameter())
	})
}

// BenchmarkInitialize compares initialize with and without the
// instrumentation, in-process, spans recording.
func BenchmarkInitialize(b *testing.B) {
	b.Run("paired", func(b *testing.B) { runPaired(b, sdktrace.AlwaysSample(), inProcess, initOp) })
}

// op performs request number i on c.
type op func(ctx context.Context, c *client.Client, i int) error

func callOp(ctx context.Context, c *client.Client, i int) error {
	req := callReq("refund", map[string]any{"order_id": "o-" + strconv.Itoa(i), "amount_cents": 1250})
	_, err := c.CallTool(ctx, req)
	return err
}

func listOp(ctx context.Context, c *client.Client, _ int) error {
	_, err := c.ListTools(ctx, mcp.ListToolsRequest{})
	return err
}

func initOp(ctx context.Context, c *client.Client, _ int) error {
	_, err := c.Initialize(ctx, initRequest())
	return err
}

func runPaired(b *testing.B, sampler sdktrace.Sampler, connect connector, do op, opts ...instrument.Option) {
	si, g := instrumentedServer(b, sampler, opts...)
	// The tracing floor (floorServer): the same requests with a SERVER
	// span each carrying idemkit's attributes and the operation duration,
	// written by hand with the same SDK and no protection. It is what any
	// instrumentation following the MCP conventions costs on mcp-go;
	// idemkit's own cost is the gap between it and the instrumented call.
	sf := floorServer(b, sampler)
	clients := [numKinds]*client.Client{connect(b, bareServer(), false), connect(b, si, true), connect(b, sf, false)}
	ctx := context.Background()
	var d, cpu [numKinds]time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		for j := range numKinds { // rotate the order too
			k := (i + j) % numKinds
			c0, t0 := cpuTime(), time.Now()
			if err := do(ctx, clients[k], i); err != nil {
				b.Fatal(err)
			}
			d[k] += time.Since(t0)
			cpu[k] += cpuTime() - c0
		}
		if i%sweepEvery == sweepEvery-1 {
			t2 := time.Now()
			if _, err := g.Sweep(ctx); err != nil {
				b.Fatal(err)
			}
			d[instrumented] += time.Since(t2)
		}
	}
	n := float64(b.N)
	b.ReportMetric(float64(d[bare].Nanoseconds())/n, "bare-ns/call")
	b.ReportMetric(float64(d[instrumented].Nanoseconds())/n, "instrumented-ns/call")
	b.ReportMetric(float64(d[floor].Nanoseconds())/n, "floor-ns/call")
	b.ReportMetric(float64(d[instrumented])/float64(d[bare]), "ratio")
	b.ReportMetric(float64(d[floor])/float64(d[bare]), "floor-ratio")
	b.ReportMetric(float64(d[instrumented]-d[floor])/float64(d[bare]), "idemkit-share")
	// The same ratios in CPU time (the process's, user and system, around
	// each request): with -cpu 1 it is the request's own work plus the GC's,
	// and it does not count the time the process waited for a CPU, which on
	// a loaded machine dominates wall time.
	b.ReportMetric(float64(cpu[instrumented])/float64(cpu[bare]), "cpu-ratio")
	b.ReportMetric(float64(cpu[floor])/float64(cpu[bare]), "cpu-floor-ratio")
}

func addTools(s *server.MCPServer) {
	s.AddTool(benchTool, benchHandler)
	s.AddTool(benchReadTool, readHandler)
}

func bareServer() *server.MCPServer {
	s := server.NewMCPServer("bench", "1")
	addTools(s)
	return s
}

// floorServer serves the tools behind the tracing floor: a hand-written
// instrumentation that does what any mcp-go instrumentation following the
// MCP semantic conventions must do for a request, as cheaply as the SDK
// allows, and nothing else (no protection, no idemkit metrics):
//
//   - one SERVER span per request, opened where mcp-go dispatches it (its
//     Tracer hook: the only place a span wraps the whole request and
//     parents the handler's spans; mcp-go's INTERNAL tool span is not
//     created), with mcp.method.name (and gen_ai.operation.name for
//     tools/call) at its start;
//   - the JSON-RPC request ID from a BeforeAny hook, the tool from a
//     BeforeCallTool hook (mcp-go hands them to hooks only), the span then
//     renamed "tools/call {tool}", and the protocol version an initialize
//     settles from an AfterInitialize hook;
//   - at its end, the request ID, session ID and protocol version, and for
//     tools/call gen_ai.tool.name and seven attributes shaped like
//     idemkit's (three 32-character hashes, key source, outcome, attempt,
//     write ID; constant values): 13 attributes on a tools/call span and 4
//     on another request's, as idemkit's spans have;
//   - mcp.server.operation.duration recorded with the attributes idemkit
//     records (method, operation, tool, protocol version).
//
// Span names, start options and metric attribute sets are built once per
// method or tool and reused (metric.WithAttributeSet); the request's state
// is the context handed down, so it costs one allocation.
func floorServer(b *testing.B, sampler sdktrace.Sampler) *server.MCPServer {
	tp, mp := benchProviders(b, sampler, nopProcessor{}, sdkmetric.NewManualReader())
	return floorServerWith(b, tp, mp)
}

// benchProviders returns a tracer provider sending spans to sp and a meter
// provider read by r, shut down when tb ends.
func benchProviders(tb testing.TB, sampler sdktrace.Sampler, sp sdktrace.SpanProcessor, r sdkmetric.Reader) (*sdktrace.TracerProvider, *sdkmetric.MeterProvider) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler), sdktrace.WithSpanProcessor(sp))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	tb.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	return tp, mp
}

func floorServerWith(tb testing.TB, tp *sdktrace.TracerProvider, mp *sdkmetric.MeterProvider) *server.MCPServer {
	dur, err := mp.Meter("floor").Float64Histogram("mcp.server.operation.duration", metric.WithUnit("s"))
	if err != nil {
		tb.Fatal(err)
	}
	f := &floorTracer{tracer: tp.Tracer("floor"), dur: dur}
	hooks := &server.Hooks{}
	hooks.AddBeforeAny(func(ctx context.Context, id any, _ mcp.MCPMethod, _ any) {
		if r, ok := ctx.Value(floorKey{}).(*floorReq); ok {
			r.id, r.hasID = mcpcall.FormatRequestID(id)
		}
	})
	hooks.AddBeforeCallTool(func(ctx context.Context, _ any, req *mcp.CallToolRequest) {
		if r, ok := ctx.Value(floorKey{}).(*floorReq); ok && req != nil {
			r.tool = f.toolOf(req.Params.Name)
			r.span.SetName(r.tool.spanName)
		}
	})
	hooks.AddAfterInitialize(func(ctx context.Context, _ any, _ *mcp.InitializeRequest, res *mcp.InitializeResult) {
		if r, ok := ctx.Value(floorKey{}).(*floorReq); ok && res != nil {
			r.protocol = res.ProtocolVersion
		}
	})
	s := server.NewMCPServer("bench", "1", server.WithTracer(f), server.WithHooks(hooks))
	addTools(s)
	return s
}

// floorTracer is the tracing floor's instrumentation: a tracing.Tracer
// for mcp-go.
type floorTracer struct {
	tracer trace.Tracer
	dur    metric.Float64Histogram

	methods sync.Map // method -> *floorMethod
	tools   sync.Map // tool -> *floorTool
	records sync.Map // floorRecordKey -> []metric.RecordOption
}

type floorMethod struct {
	name      string
	startOpts []trace.SpanStartOption
	attrs     []attribute.KeyValue // the method's (and operation's) attributes
}

type floorTool struct {
	name     string
	spanName string
	attr     attribute.KeyValue
}

type floorRecordKey struct{ method, tool, protocol string }

type floorKey struct{}

// floorReq is one request: the context handed down, the span mcp-go ends.
type floorReq struct {
	context.Context
	f        *floorTracer
	method   *floorMethod
	span     trace.Span
	start    time.Time
	id       string
	hasID    bool
	session  string
	protocol string
	tool     *floorTool
	failed   bool
}

func (r *floorReq) Value(key any) any {
	if key == (floorKey{}) {
		return r
	}
	return r.Context.Value(key)
}

func (f *floorTracer) methodOf(method string) *floorMethod {
	if v, ok := f.methods.Load(method); ok {
		return v.(*floorMethod)
	}
	m := &floorMethod{name: method, attrs: []attribute.KeyValue{attribute.String("mcp.method.name", method)}}
	if method == "tools/call" {
		m.attrs = append(m.attrs, attribute.String("gen_ai.operation.name", "execute_tool"))
	}
	m.startOpts = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(m.attrs...)}
	v, _ := f.methods.LoadOrStore(method, m)
	return v.(*floorMethod)
}

func (f *floorTracer) toolOf(name string) *floorTool {
	if v, ok := f.tools.Load(name); ok {
		return v.(*floorTool)
	}
	t := &floorTool{name: name, spanName: "tools/call " + name, attr: attribute.String("gen_ai.tool.name", name)}
	v, _ := f.tools.LoadOrStore(name, t)
	return v.(*floorTool)
}

func (f *floorTracer) recordOptions(m *floorMethod, t *floorTool, protocol string) []metric.RecordOption {
	k := floorRecordKey{method: m.name, protocol: protocol}
	if t != nil {
		k.tool = t.name
	}
	if v, ok := f.records.Load(k); ok {
		return v.([]metric.RecordOption)
	}
	kvs := append([]attribute.KeyValue(nil), m.attrs...)
	if t != nil {
		kvs = append(kvs, t.attr)
	}
	if protocol != "" {
		kvs = append(kvs, attribute.String("mcp.protocol.version", protocol))
	}
	opts := []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(kvs...))}
	f.records.Store(k, opts)
	return opts
}

// Start implements tracing.Tracer.
func (f *floorTracer) Start(ctx context.Context, name string, kind tracing.SpanKind, _ ...tracing.Attribute) (context.Context, tracing.Span) {
	method, ok := strings.CutPrefix(name, "mcp.")
	if kind != tracing.SpanKindServer || !ok {
		return ctx, floorNoSpan{}
	}
	r := &floorReq{f: f, method: f.methodOf(method), start: time.Now(), protocol: server.RequestProtocolVersion(ctx)}
	if s := server.ClientSessionFromContext(ctx); s != nil {
		r.session = s.SessionID()
	}
	ctx, r.span = f.tracer.Start(ctx, method, r.method.startOpts...)
	r.Context = ctx
	return r, r
}

func (r *floorReq) SetAttributes(...tracing.Attribute) {}
func (r *floorReq) RecordError(error)                  {}

func (r *floorReq) SetStatus(code tracing.StatusCode, description string) {
	if code == tracing.StatusError {
		r.failed = true
		r.span.SetStatus(codes.Error, description)
	}
}

func (r *floorReq) End() {
	if r.span.IsRecording() {
		buf := floorAttrs.Get().(*[]attribute.KeyValue)
		attrs := (*buf)[:0]
		if r.hasID {
			attrs = append(attrs, attribute.String("jsonrpc.request.id", r.id))
		}
		if r.session != "" {
			attrs = append(attrs, attribute.String("mcp.session.id", r.session))
		}
		if r.protocol != "" {
			attrs = append(attrs, attribute.String("mcp.protocol.version", r.protocol))
		}
		if r.tool != nil {
			attrs = append(attrs, r.tool.attr,
				attribute.String("idemkit.args.hash", "0123456789abcdef0123456789abcdef"),
				attribute.String("idemkit.key.hash", "0123456789abcdef0123456789abcdef"),
				attribute.String("idemkit.key.source", "derived"),
				attribute.String("idemkit.subject.hash", "0123456789abcdef0123456789abcdef"),
				attribute.String("idemkit.outcome", "executed"),
				attribute.Int("idemkit.attempt", 1),
				attribute.String("idemkit.write.id", "re_1"),
			)
		}
		r.span.SetAttributes(attrs...)
		clear(attrs)
		*buf = attrs[:0]
		floorAttrs.Put(buf)
	}
	r.span.End()
	r.f.dur.Record(r, time.Since(r.start).Seconds(), r.f.recordOptions(r.method, r.tool, r.protocol)...)
}

// floorAttrs recycles the attribute buffers of floorReq.End (the SDK's
// SetAttributes copies them; an interface call makes a stack buffer escape).
var floorAttrs = sync.Pool{New: func() any {
	b := make([]attribute.KeyValue, 0, 16)
	return &b
}}

type floorNoSpan struct{}

func (floorNoSpan) SetAttributes(...tracing.Attribute)   {}
func (floorNoSpan) RecordError(error)                    {}
func (floorNoSpan) SetStatus(tracing.StatusCode, string) {}
func (floorNoSpan) End()                                 {}

func instrumentedServer(b *testing.B, sampler sdktrace.Sampler, opts ...instrument.Option) (*server.MCPServer, *idemkit.Guard) {
	tp, mp := benchProviders(b, sampler, nopProcessor{}, sdkmetric.NewManualReader())
	return instrumentedServerWith(b, tp, mp, opts...)
}

func instrumentedServerWith(tb testing.TB, tp *sdktrace.TracerProvider, mp *sdkmetric.MeterProvider, opts ...instrument.Option) (*server.MCPServer, *idemkit.Guard) {
	g, err := idemkit.NewGuard(&idemkit.MemoryStore{}, benchGuardConfig)
	if err != nil {
		tb.Fatal(err)
	}
	s := server.NewMCPServer("bench", "1", ServerOptions(g,
		append([]instrument.Option{instrument.WithTracerProvider(tp), instrument.WithMeterProvider(mp)}, opts...)...)...)
	addTools(s)
	return s, g
}

// TestBenchFloor_SameShapeAsIdemkit keeps the tracing floor of the paired
// benchmarks honest: for each request they time, the floor's span has the
// kind, name and attribute keys of idemkit's, and the floor records
// mcp.server.operation.duration with the same attributes.
func TestBenchFloor_SameShapeAsIdemkit(t *testing.T) {
	type shapes struct {
		spans   map[string]string // span name -> kind and sorted attribute keys
		metrics map[string]bool   // the duration's attribute sets
	}
	observe := func(t *testing.T, serve func(testing.TB, *sdktrace.TracerProvider, *sdkmetric.MeterProvider) *server.MCPServer) shapes {
		sr, rd := tracetest.NewSpanRecorder(), sdkmetric.NewManualReader()
		tp, mp := benchProviders(t, sdktrace.AlwaysSample(), sr, rd)
		c, err := client.NewInProcessClient(serve(t, tp, mp))
		if err != nil {
			t.Fatal(err)
		}
		c = startClient(t, c)
		ctx := context.Background()
		for i, do := range []op{callOp, listOp, initOp} {
			if err := do(ctx, c, i); err != nil {
				t.Fatal(err)
			}
		}
		got := shapes{spans: map[string]string{}, metrics: map[string]bool{}}
		for _, s := range sr.Ended() {
			keys := make([]string, 0, len(s.Attributes()))
			for _, kv := range s.Attributes() {
				keys = append(keys, string(kv.Key))
			}
			slices.Sort(keys)
			got.spans[s.Name()] = s.SpanKind().String() + " " + strings.Join(keys, ",")
		}
		var rm metricdata.ResourceMetrics
		if err := rd.Collect(ctx, &rm); err != nil {
			t.Fatal(err)
		}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if h, ok := m.Data.(metricdata.Histogram[float64]); ok && m.Name == "mcp.server.operation.duration" {
					for _, dp := range h.DataPoints {
						got.metrics[dp.Attributes.Encoded(attribute.DefaultEncoder())] = true
					}
				}
			}
		}
		return got
	}
	idem := observe(t, func(tb testing.TB, tp *sdktrace.TracerProvider, mp *sdkmetric.MeterProvider) *server.MCPServer {
		s, _ := instrumentedServerWith(tb, tp, mp)
		return s
	})
	fl := observe(t, floorServerWith)
	for _, name := range []string{"tools/call refund", "tools/list", "initialize"} {
		if idem.spans[name] == "" || idem.spans[name] != fl.spans[name] {
			t.Errorf("span %q:\nidemkit: %s\nfloor:   %s", name, idem.spans[name], fl.spans[name])
		}
	}
	if len(idem.metrics) != 3 || !maps.Equal(idem.metrics, fl.metrics) {
		t.Errorf("mcp.server.operation.duration attributes:\nidemkit: %v\nfloor:   %v", slices.Sorted(maps.Keys(idem.metrics)), slices.Sorted(maps.Keys(fl.metrics)))
	}
}

// BenchmarkOTelSDK measures what the OpenTelemetry SDK itself charges for
// the pieces every instrumentation of a request pays (spans recorded and
// dropped, metrics read by a manual reader): a SERVER span started and
// ended with 0, 4 (a tools/list span's) or 13 (a tools/call span's)
// attributes, set as the floor and idemkit set them; one histogram record
// and one counter add from cached attribute sets. The per-attribute cost is
// the difference between the span cases over the attribute count.
func BenchmarkOTelSDK(b *testing.B) {
	tp, mp := benchProviders(b, sdktrace.AlwaysSample(), nopProcessor{}, sdkmetric.NewManualReader())
	tracer, meter := tp.Tracer("sdk"), mp.Meter("sdk")
	ctx := context.Background()
	method := attribute.String("mcp.method.name", "tools/call")
	startOpts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(method, attribute.String("gen_ai.operation.name", "execute_tool"))}
	end := []attribute.KeyValue{
		attribute.String("jsonrpc.request.id", "12345"),
		attribute.String("mcp.session.id", "mcp-session-0123456789abcdef"),
		attribute.String("mcp.protocol.version", "2025-11-25"),
		attribute.String("gen_ai.tool.name", "refund"),
		attribute.String("idemkit.args.hash", "0123456789abcdef0123456789abcdef"),
		attribute.String("idemkit.key.hash", "0123456789abcdef0123456789abcdef"),
		attribute.String("idemkit.key.source", "derived"),
		attribute.String("idemkit.subject.hash", "0123456789abcdef0123456789abcdef"),
		attribute.String("idemkit.outcome", "executed"),
		attribute.Int("idemkit.attempt", 1),
		attribute.String("idemkit.write.id", "re_1"),
	}
	b.Run("span/attrs=0", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, span := tracer.Start(ctx, "tools/call refund", trace.WithSpanKind(trace.SpanKindServer))
			span.End()
		}
	})
	listOpts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attribute.String("mcp.method.name", "tools/list"))}
	b.Run("span/attrs=4", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, span := tracer.Start(ctx, "tools/list", listOpts...)
			span.SetAttributes(end[:3]...)
			span.End()
		}
	})
	b.Run("span/attrs=13", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, span := tracer.Start(ctx, "tools/call refund", startOpts...)
			span.SetAttributes(end...)
			span.End()
		}
	})
	hist, err := meter.Float64Histogram("mcp.server.operation.duration", metric.WithUnit("s"))
	if err != nil {
		b.Fatal(err)
	}
	recOpts := []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(method,
		attribute.String("gen_ai.operation.name", "execute_tool"), attribute.String("gen_ai.tool.name", "refund"),
		attribute.String("mcp.protocol.version", "2025-11-25")))}
	b.Run("histogram.Record", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			hist.Record(ctx, 0.001, recOpts...)
		}
	})
	counter, err := meter.Int64Counter("idemkit.tool.calls")
	if err != nil {
		b.Fatal(err)
	}
	addOpts := []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(attribute.String("gen_ai.tool.name", "refund"),
		attribute.String("idemkit.outcome", "executed")))}
	b.Run("counter.Add", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			counter.Add(ctx, 1, addOpts...)
		}
	})
}
