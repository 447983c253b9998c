package refunds

import (
	"context"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
	"github.com/idemkit-mcp/idemkit/idemkit/pgstore"
	"github.com/idemkit-mcp/idemkit/idemkit/sqlitestore"
	"github.com/idemkit-mcp/idemkit/internal/testing/pgtest"
	"github.com/idemkit-mcp/idemkit/spancontract"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// Desk modes: where idemkit's store is, and whether there is one.
const (
	modeSQLite      = "sqlite"       // the store in the desk's file: the row commits with the outcome
	modeSQLiteApart = "sqlite-apart" // the store in a file of its own
	modePostgres    = "postgres"     // the store and the desk in one PostgreSQL schema
	modeMemory      = "memory"       // the memory store, the desk in a SQLite file
	modeBareSQLite  = "bare-sqlite"  // no idemkit, the desk in a SQLite file
	modeBarePG      = "bare-postgres"
)

// deskRig is a refund desk served over Streamable HTTP on loopback.
type deskRig struct {
	url   string
	db    *DB
	guard *idemkit.Guard // nil without idemkit
	gw    *Gateway
	srv   *Server
}

// deskOptions change a rig's Config.
type deskOptions struct {
	fast, slow    time.Duration
	beforePayment func(ctx context.Context, orderID string)
	pgConns       int32
	guard         *idemkit.Config // the Guard's Config (nil: the defaults)
	confirmAbove  int64           // Config.ConfirmAboveCents
}

// startDeskMode starts the desk of mode, on its own files or PostgreSQL
// schema, stopped at the end of tb.
func startDeskMode(tb testing.TB, mode string, o deskOptions) *deskRig {
	tb.Helper()
	ctx := context.Background()
	dir := tb.TempDir()
	r := &deskRig{}
	var cleanups []func()
	tb.Cleanup(func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	})
	must := func(err error) {
		tb.Helper()
		if err != nil {
			tb.Fatal(err)
		}
	}
	pgPool := func() *pgxpool.Pool {
		schema := pgtest.Schema(tb, pgtest.Pool(tb))
		cfg, err := pgxpool.ParseConfig(pgtest.DSN(tb))
		must(err)
		cfg.ConnConfig.RuntimeParams["search_path"] = schema
		if o.pgConns > 0 {
			cfg.MaxConns = o.pgConns
		}
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		must(err)
		cleanups = append(cleanups, pool.Close)
		return pool
	}
	var store idemstore.Store
	switch mode {
	case modeSQLite, modeSQLiteApart:
		s, err := sqlitestore.Open(ctx, filepath.Join(dir, "idemkit.db"), nil)
		must(err)
		cleanups = append(cleanups, func() { _ = s.Close() })
		store = s
		if mode == modeSQLite {
			r.db, err = NewSQLiteDB(ctx, s.DB(), s.ReadDB())
		} else {
			r.db, err = OpenDB(ctx, filepath.Join(dir, "refunds.db"))
		}
		must(err)
	case modePostgres:
		pool := pgPool()
		s, err := pgstore.New(pool, nil)
		must(err)
		must(s.Migrate(ctx))
		store = s
		r.db, err = NewPostgresDB(ctx, pool)
		must(err)
	case modeMemory, modeBareSQLite:
		db, err := OpenDB(ctx, filepath.Join(dir, "refunds.db"))
		must(err)
		r.db = db
		if mode == modeMemory {
			store = &idemkit.MemoryStore{}
		}
	case modeBarePG:
		db, err := NewPostgresDB(ctx, pgPool())
		must(err)
		r.db = db
	default:
		tb.Fatalf("unknown desk mode %q", mode)
	}
	cleanups = append(cleanups, func() { _ = r.db.Close() })
	if store != nil {
		g, err := idemkit.NewGuard(store, o.guard)
		must(err)
		r.guard = g
	}
	gw, err := OpenGateway(ctx, ":memory:")
	must(err)
	cleanups = append(cleanups, func() { _ = gw.Close() })
	r.gw = gw
	tp, mp := sdktrace.NewTracerProvider(), sdkmetric.NewMeterProvider()
	cleanups = append(cleanups, func() { _ = tp.Shutdown(ctx); _ = mp.Shutdown(ctx) })
	r.srv, err = NewServer(Config{DB: r.db, Guard: r.guard, Gateway: gw, TracerProvider: tp, MeterProvider: mp, Tokens: DemoTokens,
		FastLatency: o.fast, SlowLatency: o.slow, beforePayment: o.beforePayment, ConfirmAboveCents: o.confirmAbove})
	must(err)
	hs := httptest.NewServer(r.srv.Handler)
	cleanups = append(cleanups, func() {
		hs.Close()
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_ = r.srv.Close(sctx)
	})
	r.url = hs.URL
	return r
}

// deskClient is one MCP client of a rig (mcp-go's Streamable HTTP client,
// initialized, with alice's token).
func deskClient(tb testing.TB, url string) *client.Client {
	tb.Helper()
	c, err := client.NewStreamableHttpClient(url, transportAlice()...)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	if _, err := c.Initialize(ctx, initRequest()); err != nil {
		tb.Fatal(err)
	}
	return c
}

// transportAlice authenticates a client as alice.
func transportAlice() []transport.StreamableHTTPCOption {
	return []transport.StreamableHTTPCOption{transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer demo-token-alice"})}
}

func initRequest() mcp.InitializeRequest {
	var init mcp.InitializeRequest
	init.Params.ProtocolVersion = mcp.LATEST_LEGACY_PROTOCOL_VERSION
	return init
}

func callTool(ctx context.Context, c *client.Client, name string, args map[string]any) (*mcp.CallToolResult, error) {
	var req mcp.CallToolRequest
	req.Params.Name = name
	req.Params.Arguments = args
	return c.CallTool(ctx, req)
}

func resultText(r *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if t, ok := c.(mcp.TextContent); ok {
			b.WriteString(t.Text)
		}
	}
	return b.String()
}

// A slow payment holds up nothing else: while one refund waits at the
// payment gateway, a refund of another order completes, the status tool
// and lookup_order answer, and (with idemkit) a duplicate of the waiting
// call is told it is in progress. In every mode of the desk. (With the
// transaction held across the payment, on SQLite every one of these waited
// for the payment.)
func TestDesk_ASlowPaymentHoldsUpNoOtherRefundOrRead(t *testing.T) {
	for _, mode := range []string{modeSQLite, modeSQLiteApart, modePostgres, modeMemory, modeBareSQLite, modeBarePG} {
		t.Run(mode, func(t *testing.T) {
			entered, release := make(chan struct{}), make(chan struct{})
			var once, releaseOnce sync.Once
			r := startDeskMode(t, mode, deskOptions{fast: time.Millisecond, slow: time.Millisecond,
				beforePayment: func(_ context.Context, orderID string) {
					if orderID == "ord_1004" {
						once.Do(func() { close(entered) })
						<-release
					}
				}})
			t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) }) // before the server stops
			slowArgs := map[string]any{"order_id": "ord_1004", "amount_cents": 300}
			slow := make(chan error, 1)
			a := deskClient(t, r.url)
			go func() {
				res, err := callTool(context.Background(), a, ToolIssueRefund, slowArgs)
				if err == nil && res.IsError {
					err = fmt.Errorf("the slow refund: %s", resultText(res))
				}
				slow <- err
			}()
			select {
			case <-entered:
			case <-time.After(30 * time.Second):
				t.Fatal("the slow refund never reached the gateway")
			}
			b := deskClient(t, r.url)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			res, err := callTool(ctx, b, ToolIssueRefund, map[string]any{"order_id": "ord_1001", "amount_cents": 200})
			if err != nil || res.IsError {
				t.Fatalf("a refund of another order while the slow one waits at the gateway: %v %v", resultText(res), err)
			}
			res, err = callTool(ctx, b, ToolRefundStatus, map[string]any{"order_id": "ord_1001"})
			if err != nil || !strings.Contains(resultText(res), "has 1 refund(s)") {
				t.Fatalf("get_refund_status while the slow refund waits: %v %v", res, err)
			}
			if res, err := callTool(ctx, b, ToolLookupOrder, map[string]any{"order_id": "ord_1004"}); err != nil || !strings.Contains(resultText(res), "$0.00 refunded") {
				t.Fatalf("lookup_order of the waiting order: %v %v", res, err)
			}
			if r.guard != nil {
				res, err := callTool(ctx, b, ToolIssueRefund, slowArgs)
				if err != nil || !res.IsError || marker(res, spancontract.RefusalMetaKey)["reason"] != "in_progress" {
					t.Fatalf("a duplicate of the waiting refund: %+v %v; want in progress", res, err)
				}
			}
			releaseOnce.Do(func() { close(release) })
			if err := <-slow; err != nil {
				t.Fatal(err)
			}
			if n := refundRows(t, r.db, "ord_1004"); n != 1 {
				t.Fatalf("%d refunds of the slow order, want 1", n)
			}
		})
	}
}

// A caller that hangs up while its refund waits at the gateway does not
// leave the refund half done: the payment and the row complete (and, with
// idemkit, the outcome is recorded: the retry gets the replay). In every
// mode of the desk.
func TestDesk_ARefundWhoseCallerHangsUpCompletes(t *testing.T) {
	for _, mode := range []string{modeSQLite, modeSQLiteApart, modePostgres, modeMemory, modeBareSQLite, modeBarePG} {
		t.Run(mode, func(t *testing.T) {
			entered, release := make(chan struct{}), make(chan struct{})
			var once, releaseOnce sync.Once
			r := startDeskMode(t, mode, deskOptions{fast: time.Millisecond, slow: time.Millisecond,
				beforePayment: func(context.Context, string) {
					once.Do(func() { close(entered) })
					<-release
				}})
			t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
			c := deskClient(t, r.url)
			args := map[string]any{"order_id": "ord_1002", "amount_cents": 250}
			ctx, cancel := context.WithCancel(context.Background())
			hungUp := make(chan error, 1)
			go func() {
				_, err := callTool(ctx, c, ToolIssueRefund, args)
				hungUp <- err
			}()
			select {
			case <-entered:
			case <-time.After(30 * time.Second):
				t.Fatal("the refund never reached the gateway")
			}
			cancel()
			if err := <-hungUp; err == nil {
				t.Fatal("the call whose caller hung up answered")
			}
			releaseOnce.Do(func() { close(release) })
			for deadline := time.Now().Add(30 * time.Second); refundRows(t, r.db, "ord_1002") == 0; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the refund whose caller hung up never completed")
				}
			}
			if n, err := r.gw.Refunds(context.Background(), "ord_1002"); err != nil || n != 1 {
				t.Fatalf("%d gateway refunds, %v; want 1", n, err)
			}
			if r.guard == nil {
				return
			}
			b := deskClient(t, r.url)
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				res, err := callTool(context.Background(), b, ToolIssueRefund, args)
				if err != nil {
					t.Fatal(err)
				}
				if marker(res, spancontract.ReplayMetaKey)["replayed"] == true {
					break
				}
				if !res.IsError || time.Now().After(deadline) {
					t.Fatalf("the retry: %+v; want the replay (in progress until the outcome is recorded)", res)
				}
			}
			if n := refundRows(t, r.db, "ord_1002"); n != 1 {
				t.Fatalf("%d refund rows, want 1", n)
			}
		})
	}
}
