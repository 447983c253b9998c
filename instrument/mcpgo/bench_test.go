package mcpgo

import (
	"context"
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

func benchClient(b *testing.B, s *server.MCPServer) *client.Client {
	b.Helper()
	c, err := client.NewInProcessClient(s)
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
	var init mcp.InitializeRequest
	init.Params.ProtocolVersion = mcp.LATEST_LEGACY_PROTOCOL_VERSION
	init.Params.ClientInfo = mcp.Implementation{Name: "bench", Version: "1"}
	if _, err := c.Initialize(ctx, init); err != nil {
		b.Fatal(err)
	}
	return c
}

// sweepEvery is how many calls pass between two sweeps of the benchmark's
// store. With a 10ms window a sweep keeps it near sweepEvery records, as a
// production sweeper keeps a store at window × rate; without it the store
// (and the GC's marking work) would grow with b.N.
const sweepEvery = 1024

var benchGuardConfig = &idemkit.Config{Window: 10 * time.Millisecond}

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

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkCallTool compares a bare mcp-go tools/call (in-process client and
// server) with the same call through the instrumentation: a protected tool,
// a memory store, spans sampled and recorded, metrics recorded.
func BenchmarkCallTool(b *testing.B) {
	tool := mcp.NewTool("refund", mcp.WithString("order_id"), mcp.WithNumber("amount_cents"))
	b.Run("bare", func(b *testing.B) {
		s := server.NewMCPServer("bench", "1")
		s.AddTool(tool, benchHandler)
		runCalls(b, benchClient(b, s), nil)
	})
	b.Run("instrumented", func(b *testing.B) {
		s, g := instrumentedServer(b, tool)
		runCalls(b, benchClient(b, s), g)
	})
	// instrumented-unsampled: the same with spans sampled out (what most
	// calls cost under a ratio sampler): protection and metrics only.
	b.Run("instrumented-unsampled", func(b *testing.B) {
		s, g := instrumentedServerWith(b, tool, sdktrace.NeverSample())
		runCalls(b, benchClient(b, s), g)
	})
	// paired alternates a bare and an instrumented call in every iteration
	// and times each, so that load from other processes (this machine is
	// shared) hits both alike; it reports both times and their ratio.
	b.Run("paired", func(b *testing.B) { runPaired(b, tool, sdktrace.AlwaysSample()) })
	// paired-http: the same over mcp-go's Streamable HTTP transport on
	// loopback, where a call pays for HTTP and a session, as in production.
	b.Run("paired-http", func(b *testing.B) { runPairedOn(b, tool, sdktrace.AlwaysSample(), httpClient) })
	b.Run("paired-unsampled", func(b *testing.B) { runPaired(b, tool, sdktrace.NeverSample()) })
}

func runPaired(b *testing.B, tool mcp.Tool, sampler sdktrace.Sampler) {
	runPairedOn(b, tool, sampler, benchClient)
}

// httpClient serves s over Streamable HTTP on loopback and returns an
// initialized client of it.
func httpClient(b *testing.B, s *server.MCPServer) *client.Client {
	b.Helper()
	hs := httptest.NewServer(server.NewStreamableHTTPServer(s))
	b.Cleanup(hs.Close)
	c, err := client.NewStreamableHttpClient(hs.URL)
	if err != nil {
		b.Fatal(err)
	}
	return startClient(b, c)
}

func runPairedOn(b *testing.B, tool mcp.Tool, sampler sdktrace.Sampler, connect func(*testing.B, *server.MCPServer) *client.Client) {
	bare := server.NewMCPServer("bench", "1")
	bare.AddTool(tool, benchHandler)
	si, g := instrumentedServerWith(b, tool, sampler)
	// The tracing floor: the same call with one span carrying as many
	// attributes as idemkit's and the operation-duration metric, written
	// by hand with the same SDK and no protection. It is what any GenAI
	// tool-call instrumentation costs; idemkit's own cost is the gap
	// between it and the instrumented call.
	sf := floorServer(b, tool, sampler)
	clients := [3]*client.Client{connect(b, bare), connect(b, si), connect(b, sf)}
	ctx := context.Background()
	req := callReq("refund", nil)
	var d [3]time.Duration // bare, instrumented, floor
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		req.Params.Arguments = map[string]any{"order_id": "o-" + strconv.Itoa(i), "amount_cents": 1250}
		for j := range 3 { // rotate the order too
			k := (i + j) % 3
			t0 := time.Now()
			if _, err := clients[k].CallTool(ctx, req); err != nil {
				b.Fatal(err)
			}
			d[k] += time.Since(t0)
		}
		if i%sweepEvery == sweepEvery-1 {
			t2 := time.Now()
			if _, err := g.Sweep(ctx); err != nil {
				b.Fatal(err)
			}
			d[1] += time.Since(t2)
		}
	}
	n := float64(b.N)
	b.ReportMetric(float64(d[0].Nanoseconds())/n, "bare-ns/call")
	b.ReportMetric(float64(d[1].Nanoseconds())/n, "instrumented-ns/call")
	b.ReportMetric(float64(d[2].Nanoseconds())/n, "floor-ns/call")
	b.ReportMetric(float64(d[1])/float64(d[0]), "ratio")
	b.ReportMetric(float64(d[2])/float64(d[0]), "floor-ratio")
	b.ReportMetric(float64(d[1]-d[2])/float64(d[0]), "idemkit-share")
}

// floorServer serves tool behind a hand-written tracing middleware: one
// execute_tool span with the operation, tool and method at its start and
// ten more attributes of the sizes idemkit sets at its end (session,
// request ID, protocol version, three hashes, key source, outcome, attempt,
// write ID), ended, and the operation duration recorded.
func floorServer(b *testing.B, tool mcp.Tool, sampler sdktrace.Sampler) *server.MCPServer {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler), sdktrace.WithSpanProcessor(nopProcessor{}))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	b.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	tracer := tp.Tracer("floor")
	dur, err := mp.Meter("floor").Float64Histogram("gen_ai.server.operation.duration")
	if err != nil {
		b.Fatal(err)
	}
	start := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(
		attribute.String("gen_ai.operation.name", "execute_tool"), attribute.String("gen_ai.tool.name", tool.Name),
		attribute.String("mcp.method.name", "tools/call"))}
	recOpts := []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(
		attribute.String("mcp.method.name", "tools/call"), attribute.String("gen_ai.tool.name", tool.Name)))}
	mw := func(next server.ToolHandlerFunc) server.ToolHandlerFunc {
		return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			t0 := time.Now()
			ctx, span := tracer.Start(ctx, "execute_tool "+tool.Name, start...)
			res, err := next(ctx, req)
			if span.IsRecording() {
				sid := ""
				if s := server.ClientSessionFromContext(ctx); s != nil {
					sid = s.SessionID()
				}
				span.SetAttributes(
					attribute.String("mcp.session.id", sid),
					attribute.String("jsonrpc.request.id", "12345"),
					attribute.String("mcp.protocol.version", "2025-06-18"),
					attribute.String("idemkit.args.hash", "0123456789abcdef"),
					attribute.String("idemkit.key.hash", "0123456789abcdef"),
					attribute.String("idemkit.subject.hash", "0123456789abcdef"),
					attribute.String("idemkit.key.source", "derived"),
					attribute.String("idemkit.outcome", "executed"),
					attribute.Int("idemkit.attempt", 1),
					attribute.String("idemkit.write.id", "re_1"),
				)
			}
			span.End()
			dur.Record(ctx, time.Since(t0).Seconds(), recOpts...)
			return res, err
		}
	}
	s := server.NewMCPServer("bench", "1", server.WithToolHandlerMiddleware(mw))
	s.AddTool(tool, benchHandler)
	return s
}

func instrumentedServer(b *testing.B, tool mcp.Tool) (*server.MCPServer, *idemkit.Guard) {
	return instrumentedServerWith(b, tool, sdktrace.AlwaysSample())
}

func instrumentedServerWith(b *testing.B, tool mcp.Tool, sampler sdktrace.Sampler) (*server.MCPServer, *idemkit.Guard) {
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
		instrument.WithTracerProvider(tp), instrument.WithMeterProvider(mp))...)
	s.AddTool(tool, benchHandler)
	return s, g
}

func callReq(tool string, args map[string]any) mcp.CallToolRequest {
	var r mcp.CallToolRequest
	r.Params.Name = tool
	r.Params.Arguments = args
	return r
}
