package dashtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"

	"github.com/idemkit-mcp/idemkit/dashboards/internal/metrics"
	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/sqlitestore"
	"github.com/idemkit-mcp/idemkit/instrument"
	"github.com/idemkit-mcp/idemkit/instrument/mcpgo"
	"github.com/idemkit-mcp/idemkit/internal/testing/harness"
	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

// GuardService is the service.name of the server GuardExercise runs: the
// job label of its metrics.
const GuardService = "dashtest-invoicing"

// guardTool is the exercised server's one tool: a write, protected.
const guardTool = "send_invoice"

// guardLease is the tool's lease; the exercise's clock jumps past it.
const guardLease = time.Minute

// GuardExerciseResult is what GuardExercise did, as the server's own spans
// recorded it: the evidence the Guard dashboard's values for GuardService
// are checked against.
type GuardExerciseResult struct {
	// Service is GuardService.
	Service string `json:"service"`
	// Spans are the server's spans (one SERVER span per MCP request),
	// recorded in process and never exported: the dup processor's evidence
	// stays the demo's.
	Spans []harness.Span `json:"-"`
	// Sessions is the number of MCP sessions the client opened and closed.
	Sessions int `json:"sessions"`
	// FinishErrors and Refusals are the spans' idemkit.finish.error and
	// idemkit.refusal.reason values, counted.
	FinishErrors map[string]float64 `json:"finish_errors"`
	Refusals     map[string]float64 `json:"refusals"`
}

// GuardExercise runs an MCP server (mcp-go over stateful Streamable HTTP,
// instrumented by package instrument with a Guard on a real SQLite store in
// dir) and drives it with a real MCP client into what a healthy demo never
// does, so that the Guard dashboard's panels for it read real series:
//
//   - a lost lease: a slow call outlives its lease (the Guard's clock jumps
//     past it), its retry takes the claim over and runs, and the slow call's
//     outcome cannot be recorded (idemkit_finish_errors_total
//     {idemkit_finish_error="lease_lost"});
//   - a locked store: another connection holds the database's write lock
//     (as a backup or a migration does) while a call ends, so its outcome
//     cannot be recorded (store_error), and the next call's claim fails
//     (refused: store_unavailable);
//   - a call whose arguments fail the tool's schema (refused:
//     invalid_arguments);
//   - a replay, tools/list, ping and a session that ends (every MCP method,
//     mcp.server.session.duration).
//
// Metrics go to mp; spans to an in-process recorder, returned as the
// evidence. The Guard's log (one error per failed finish) goes to log.
func GuardExercise(ctx context.Context, dir string, mp metric.MeterProvider, log io.Writer) (*GuardExerciseResult, error) {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans),
		sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName(GuardService))))
	defer func() { _ = tp.Shutdown(context.Background()) }()

	dbPath := filepath.Join(dir, "idemkit.db")
	// A short busy timeout: a claim or finish that meets the held lock fails
	// in 50ms (the finish retries until FinishTimeout).
	store, err := sqlitestore.Open(ctx, dbPath, &sqlitestore.Config{BusyTimeout: 50 * time.Millisecond})
	if err != nil {
		return nil, err
	}
	defer store.Close()
	clock := &jumpClock{}
	logger := slog.New(slog.NewTextHandler(log, nil)).With("service", GuardService)
	guard, err := idemkit.NewGuard(store, &idemkit.Config{
		Lease: guardLease, FinishTimeout: 300 * time.Millisecond, Now: clock.Now, Logger: logger,
	})
	if err != nil {
		return nil, err
	}

	srv := newInvoicing()
	s := server.NewMCPServer("invoicing", "1.0.0", mcpgo.ServerOptions(guard,
		instrument.WithTracerProvider(tp), instrument.WithMeterProvider(mp), instrument.WithLogger(logger))...)
	s.AddTool(mcp.NewTool(guardTool,
		mcp.WithDescription("Sends an invoice to the customer (a write: each call sends one)."),
		mcp.WithString("invoice_id", mcp.Required()),
		mcp.WithInteger("amount_cents", mcp.Required(), mcp.Min(1)),
	), srv.sendInvoice)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	hs := &http.Server{Handler: mcpgo.NewStreamableHTTPHandler(s), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
	}()
	url := "http://" + ln.Addr().String() + "/mcp"

	c, err := dialInvoicing(ctx, url)
	if err != nil {
		return nil, err
	}
	res := &GuardExerciseResult{Service: GuardService, Sessions: 1}
	if err := guardScript(ctx, c, srv, clock, dbPath); err != nil {
		_ = c.Close()
		return nil, err
	}
	// Closing ends the session (DELETE): mcp.server.session.duration.
	if err := c.Close(); err != nil {
		return nil, fmt.Errorf("guard exercise: closing the session: %w", err)
	}

	for _, s := range spans.Ended() {
		res.Spans = append(res.Spans, spanFromSDK(s))
	}
	res.FinishErrors = Count(res.Spans, func(s harness.Span) (string, bool) {
		v := s.Str(sc.FinishError)
		return v, v != ""
	})
	res.Refusals = Count(res.Spans, func(s harness.Span) (string, bool) {
		v := s.Str(sc.RefusalReason)
		return v, v != ""
	})
	for _, want := range [][2]string{{"finish error", sc.FinishLeaseLost}, {"finish error", sc.FinishStoreError}, {"refusal", sc.RefusalStoreUnavailable}, {"refusal", sc.RefusalInvalidArguments}} {
		m := res.FinishErrors
		if want[0] == "refusal" {
			m = res.Refusals
		}
		if m[want[1]] == 0 {
			return nil, fmt.Errorf("guard exercise: no span records the %s %s (finish errors %v, refusals %v): the exercise no longer causes it", want[0], want[1], res.FinishErrors, res.Refusals)
		}
	}
	return res, nil
}

// guardScript is the exercise's sequence of calls on one session.
func guardScript(ctx context.Context, c *client.Client, srv *invoicing, clock *jumpClock, dbPath string) error {
	call := func(invoice string, amount any) (*mcp.CallToolResult, error) {
		var req mcp.CallToolRequest
		req.Params.Name = guardTool
		req.Params.Arguments = map[string]any{"invoice_id": invoice, "amount_cents": amount}
		return c.CallTool(ctx, req)
	}
	want := func(what string, res *mcp.CallToolResult, err error, isError bool) error {
		switch {
		case err != nil:
			return fmt.Errorf("guard exercise: %s: %w", what, err)
		case res.IsError != isError:
			return fmt.Errorf("guard exercise: %s: isError %v, want %v: %v", what, res.IsError, isError, res.Content)
		}
		return nil
	}
	if _, err := c.ListTools(ctx, mcp.ListToolsRequest{}); err != nil {
		return fmt.Errorf("guard exercise: tools/list: %w", err)
	}
	//lint:ignore SA1019 the session speaks 2025-11-25, where ping is a request the server records (one more method on the MCP panels)
	if err := c.Ping(ctx); err != nil {
		return fmt.Errorf("guard exercise: ping: %w", err)
	}

	// A call and its duplicate: executed, then replayed.
	for _, what := range []string{"first call of inv-1", "duplicate of inv-1"} {
		res, err := call("inv-1", 1200)
		if err := want(what, res, err, false); err != nil {
			return err
		}
	}
	if n := srv.sent("inv-1"); n != 1 {
		return fmt.Errorf("guard exercise: inv-1 sent %d times, want 1 (the duplicate must be replayed)", n)
	}

	// Arguments that fail the schema: refused, nothing run.
	res, err := call("inv-2", "1200")
	if err := want("inv-2 with amount_cents a string", res, err, true); err != nil {
		return err
	}

	// A lost lease: the first call of inv-3 outlives its lease, its retry
	// takes the claim over and runs; the first call's finish is fenced out.
	release := srv.hold("inv-3")
	first := asyncCall(func() (*mcp.CallToolResult, error) { return call("inv-3", 3400) })
	if err := srv.waitRunning(ctx, "inv-3"); err != nil {
		return err
	}
	clock.jump(2 * guardLease)
	res, err = call("inv-3", 3400)
	if err := want("retry of inv-3 after its lease", res, err, false); err != nil {
		return err
	}
	release()
	r := <-first
	if err := want("slow first call of inv-3", r.res, r.err, false); err != nil {
		return err
	}
	if n := srv.sent("inv-3"); n != 2 {
		return fmt.Errorf("guard exercise: inv-3 sent %d times, want 2 (the retry took the expired claim over)", n)
	}

	// A locked store: the finish of inv-4 and the claim of inv-5 meet
	// another connection's write lock.
	release = srv.hold("inv-4")
	fourth := asyncCall(func() (*mcp.CallToolResult, error) { return call("inv-4", 5600) })
	if err := srv.waitRunning(ctx, "inv-4"); err != nil {
		return err
	}
	unlock, err := lockSQLite(ctx, dbPath)
	if err != nil {
		release()
		<-fourth
		return err
	}
	release()
	r = <-fourth
	if err := want("inv-4 while the store is locked", r.res, r.err, false); err != nil {
		unlock()
		return err
	}
	res, err = call("inv-5", 7800)
	unlock()
	if err := want("inv-5 while the store is locked", res, err, true); err != nil {
		return err
	}
	if n := srv.sent("inv-5"); n != 0 {
		return fmt.Errorf("guard exercise: inv-5 sent %d times while its claim failed, want 0", n)
	}
	return nil
}

type callResult struct {
	res *mcp.CallToolResult
	err error
}

func asyncCall(f func() (*mcp.CallToolResult, error)) <-chan callResult {
	ch := make(chan callResult, 1)
	go func() {
		res, err := f()
		ch <- callResult{res, err}
	}()
	return ch
}

// lockSQLite takes the write lock of the database at path on a connection
// of its own (BEGIN IMMEDIATE plus a write), as a backup or a migration
// would, and returns the function that releases it.
func lockSQLite(ctx context.Context, path string) (func(), error) {
	db, err := sql.Open("sqlite", "file:"+path+"?_busy_timeout=5000")
	if err != nil {
		return nil, err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		db.Close()
		return nil, err
	}
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		conn.Close()
		db.Close()
		return nil, fmt.Errorf("guard exercise: locking %s: %w", path, err)
	}
	if _, err := conn.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS dashtest_lock (x INTEGER)"); err != nil {
		_, _ = conn.ExecContext(context.Background(), "ROLLBACK")
		conn.Close()
		db.Close()
		return nil, fmt.Errorf("guard exercise: locking %s: %w", path, err)
	}
	return func() {
		_, _ = conn.ExecContext(context.Background(), "ROLLBACK")
		conn.Close()
		db.Close()
	}, nil
}

// dialInvoicing opens an MCP session (a protocol version that has sessions,
// so that the session scopes the calls and its end is recorded).
func dialInvoicing(ctx context.Context, url string) (*client.Client, error) {
	tr, err := transport.NewStreamableHTTP(url)
	if err != nil {
		return nil, err
	}
	c := client.NewClient(tr, client.WithProtocolVersion(mcp.LATEST_LEGACY_PROTOCOL_VERSION))
	if err := c.Start(ctx); err != nil {
		return nil, fmt.Errorf("guard exercise: start MCP client: %w", err)
	}
	var init mcp.InitializeRequest
	init.Params.ProtocolVersion = mcp.LATEST_LEGACY_PROTOCOL_VERSION
	init.Params.ClientInfo = mcp.Implementation{Name: "dashtest", Version: "1.0.0"}
	if _, err := c.Initialize(ctx, init); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("guard exercise: initialize: %w", err)
	}
	if c.GetSessionId() == "" {
		_ = c.Close()
		return nil, errors.New("guard exercise: the server handed out no Mcp-Session-Id")
	}
	return c, nil
}

// jumpClock is the Guard's clock: the machine's, plus the jumps made.
type jumpClock struct{ offset atomic.Int64 }

func (c *jumpClock) Now() time.Time       { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *jumpClock) jump(d time.Duration) { c.offset.Add(int64(d)) }

// invoicing is the exercised tool: it counts the invoices it sent, and can
// hold a call of an invoice until released.
type invoicing struct {
	mu      sync.Mutex
	count   map[string]int
	holds   map[string]chan struct{} // closed by release
	running map[string]chan struct{} // closed when a held call runs
}

func newInvoicing() *invoicing {
	return &invoicing{count: map[string]int{}, holds: map[string]chan struct{}{}, running: map[string]chan struct{}{}}
}

// hold makes the next call of invoice wait in the tool until release is
// called.
func (v *invoicing) hold(invoice string) (release func()) {
	v.mu.Lock()
	defer v.mu.Unlock()
	ch := make(chan struct{})
	v.holds[invoice] = ch
	v.running[invoice] = make(chan struct{})
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }
}

// waitRunning waits until the held call of invoice runs in the tool.
func (v *invoicing) waitRunning(ctx context.Context, invoice string) error {
	v.mu.Lock()
	ch := v.running[invoice]
	v.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("guard exercise: waiting for the call of %s to run: %w", invoice, ctx.Err())
	case <-time.After(30 * time.Second):
		return fmt.Errorf("guard exercise: the call of %s did not reach the tool in 30s", invoice)
	}
}

func (v *invoicing) sent(invoice string) int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.count[invoice]
}

func (v *invoicing) sendInvoice(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	invoice := req.GetString("invoice_id", "")
	v.mu.Lock()
	v.count[invoice]++
	hold, held := v.holds[invoice]
	if held {
		delete(v.holds, invoice)
		close(v.running[invoice])
	}
	v.mu.Unlock()
	if held {
		select {
		case <-hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return mcp.NewToolResultText("Invoice " + invoice + " sent."), nil
}

// spanFromSDK flattens a recorded span as harness.ReadSpans flattens the
// spans a Collector wrote.
func spanFromSDK(s sdktrace.ReadOnlySpan) harness.Span {
	out := harness.Span{
		TraceID: s.SpanContext().TraceID().String(), SpanID: s.SpanContext().SpanID().String(),
		Name: s.Name(), Scope: s.InstrumentationScope().Name, Kind: int(s.SpanKind()),
		Start: s.StartTime().UnixNano(), End: s.EndTime().UnixNano(), Attrs: map[string]any{},
	}
	if p := s.Parent(); p.HasSpanID() {
		out.ParentSpanID = p.SpanID().String()
	}
	for _, kv := range s.Attributes() {
		out.Attrs[string(kv.Key)] = kv.Value.AsInterface()
	}
	if v, ok := s.Resource().Set().Value(semconv.ServiceNameKey); ok {
		out.Service = v.AsString()
	}
	return out
}

// GuardExerciseConfig configures ExportGuardExercise.
type GuardExerciseConfig struct {
	// Dir is the exercised server's work directory (its SQLite store).
	Dir string
	// OTLP is the Collector's OTLP/gRPC host:port the servers export to.
	OTLP string
	// Exporters are the host:port of the Prometheus exporters that serve
	// the servers' metrics (one of them does).
	Exporters []string
	// Log receives the server's log.
	Log io.Writer
}

// ExportGuardExercise runs GuardExercise with its metrics exported over
// OTLP to cfg.OTLP, flushes them, and waits until a Prometheus exporter of
// cfg.Exporters serves the finish errors the spans recorded.
func ExportGuardExercise(ctx context.Context, cfg GuardExerciseConfig) (*GuardExerciseResult, error) {
	exp, err := otlpmetricgrpc.New(ctx, otlpmetricgrpc.WithEndpoint(cfg.OTLP), otlpmetricgrpc.WithInsecure())
	if err != nil {
		return nil, fmt.Errorf("guard exercise: OTLP metric exporter for %s: %w", cfg.OTLP, err)
	}
	mp := sdkmetric.NewMeterProvider(
		sdkmetric.WithResource(resource.NewSchemaless(semconv.ServiceName(GuardService))),
		sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp, sdkmetric.WithInterval(time.Second))))
	res, err := GuardExercise(ctx, cfg.Dir, mp, cfg.Log)
	// Shutdown exports what was recorded.
	if serr := mp.Shutdown(ctx); err == nil && serr != nil {
		err = fmt.Errorf("guard exercise: flushing the metrics to %s: %w", cfg.OTLP, serr)
	}
	if err != nil {
		return nil, err
	}
	name := metrics.MustLoad().Name("finish_errors")
	want := 0.0
	for _, n := range res.FinishErrors {
		want += n
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := 0.0
		var serr error
		for _, a := range cfg.Exporters {
			s, err := harness.Scrape(ctx, "http://"+a+"/metrics")
			if err != nil {
				serr = err
				continue
			}
			got += s.Total(name, map[string]string{"job": GuardService})
		}
		if got == want {
			return res, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("guard exercise: after 30s the exporters %v serve %s{job=%q} = %g, want %g (%v)", cfg.Exporters, name, GuardService, got, want, serr)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
