package mcpgo

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idemkit/idemkit"
	"github.com/idemkit/idemkit/instrument"
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

func startClient(b *testing.B, c *client.Client) *client.Client {
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
	// The tracing floor: the same requests with one SERVER span per
	// tools/call carrying as many attributes as idemkit's and the operation
	// duration, written by hand with the same SDK and no protection. It is
	// what any MCP tool-call instrumentation costs; idemkit's own cost is the
	// gap between it and the instrumented call.
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

// floorServer serves the tools behind a hand-written tracing middleware:
// one SERVER span "tools/call {tool}" with the method, operation and tool
// at its start and ten more attributes of the sizes idemkit sets at its end
// (request ID, session, protocol version, three hashes, key source,
// outcome, attempt, write ID), ended, and mcp.server.operation.duration
// recorded with the attributes idemkit records.
func floorServer(b *testing.B, sampler sdktrace.Sampler) *server.MCPServer {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler), sdktrace.WithSpanProcessor(nopProcessor{}))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	b.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	tracer := tp.Tracer("floor")
	dur, err := mp.Meter("floor").Float64Histogram("mcp.server.operation.duration")
	if err != nil {
		b.Fatal(err)
	}
	mw := func(next server.ToolHandlerFunc) server.ToolHandlerFunc {
		return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			t0 := time.Now()
			tool := req.Params.Name
			ctx, span := tracer.Start(ctx, "tools/call "+tool, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
				attribute.String("mcp.method.name", "tools/call"), attribute.String("gen_ai.operation.name", "execute_tool"),
				attribute.String("gen_ai.tool.name", tool)))
			res, err := next(ctx, req)
			if span.IsRecording() {
				sid := ""
				if s := server.ClientSessionFromContext(ctx); s != nil {
					sid = s.SessionID()
				}
				span.SetAttributes(
					attribute.String("jsonrpc.request.id", "12345"),
					attribute.String("mcp.session.id", sid),
					attribute.String("mcp.protocol.version", "2025-11-25"),
					attribute.String("idemkit.args.hash", "0123456789abcdef0123456789abcdef"),
					attribute.String("idemkit.key.hash", "0123456789abcdef0123456789abcdef"),
					attribute.String("idemkit.key.source", "derived"),
					attribute.String("idemkit.subject.hash", "0123456789abcdef0123456789abcdef"),
					attribute.String("idemkit.outcome", "executed"),
					attribute.Int("idemkit.attempt", 1),
					attribute.String("idemkit.write.id", "re_1"),
				)
			}
			span.End()
			dur.Record(ctx, time.Since(t0).Seconds(), metric.WithAttributes(
				attribute.String("mcp.method.name", "tools/call"), attribute.String("gen_ai.operation.name", "execute_tool"),
				attribute.String("gen_ai.tool.name", tool), attribute.String("mcp.protocol.version", "2025-11-25")))
			return res, err
		}
	}
	s := server.NewMCPServer("bench", "1", server.WithToolHandlerMiddleware(mw))
	addTools(s)
	return s
}

func instrumentedServer(b *testing.B, sampler sdktrace.Sampler, opts ...instrument.Option) (*server.MCPServer, *idemkit.Guard) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler), sdktrace.WithSpanProcessor(nopProcessor{}))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	b.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	g, err := idemkit.NewGuard(&idemkit.MemoryStore{}, benchGuardConfig)
	if err != nil {
		b.Fatal(err)
	}
	s := server.NewMCPServer("bench", "1", ServerOptions(g,
		append([]instrument.Option{instrument.WithTracerProvider(tp), instrument.WithMeterProvider(mp)}, opts...)...)...)
	addTools(s)
	return s, g
}
