// Command refundserver is the demo's MCP server: a refund desk served over
// Streamable HTTP (stateful sessions) by mcp-go or, with -sdk gosdk, by the
// official Go SDK. Its issue_refund tool refunds an order through a payment
// gateway's HTTP API (the desk's fake one, served on a loopback port with
// its own ledger, or another at -gateway-url), which deduplicates by the
// Idempotency-Key header for 24 hours: the desk's client forwards idemkit's
// downstream key of the call there (downstream.Transport), the same on
// every attempt of one refund. It then writes the refund row to the desk's
// database. idemkit protects issue_refund (arguments validated,
// claim before the work, replay the stored result to every duplicate), and
// with the SQLite or PostgreSQL store the desk's tables live in the store's
// database: the claim commits first, the payment runs outside any
// transaction, then the refund row and the recorded outcome commit together
// in one short transaction (the phased handler form, mcpgo.AddPhasedTool),
// so that a slow payment holds up no other refund and no read. On mcp-go
// the server advertises MCP tasks: a task-augmented issue_refund is a
// durable task in the store. export_refunds is a job-and-poll tool whose
// jobs live in the store too. Every MCP request gets a SERVER span ("tools/call
// issue_refund"), and traces and metrics go to a Collector over OTLP/gRPC.
//
//	refundserver -addr 127.0.0.1:8080 -db refunds.db               # protected, mcp-go, SQLite store in refunds.db
//	refundserver -sdk gosdk -addr 127.0.0.1:8082                   # the same tools, auth and store on the go-sdk
//	refundserver -store postgres -postgres-dsn postgres://…         # protected, shared Postgres store and desk
//	refundserver -unprotected -addr 127.0.0.1:8081 -db before.db   # "before idemkit": every duplicate refunds again
//
// Callers authenticate with "Authorization: Bearer <token>" (-tokens maps
// tokens to subjects; the defaults are demo-token-alice and demo-token-bob).
// The subject scopes the idempotency keys, so a client that reconnects on a
// new MCP session still gets its first call's result. Without the header
// the keys are scoped by the (server-validated) session.
//
// Every limit a server exposed to untrusted clients needs is on, with a
// flag each: at most -max-sessions MCP sessions (10,000; another
// initialize gets HTTP 503 with a JSON-RPC error), each ended after
// -session-idle-timeout without a request (30m); request bodies of at most
// -max-body-bytes (4 MiB; HTTP 413, not read); -read-header-timeout (10s)
// and -read-timeout (30s) to send a request, -http-idle-timeout (2m) for
// an idle connection; with -store memory, at most -memory-max-records
// records (100,000; a new call beyond them is refused store_full and
// nothing runs). Expired records are swept every -sweep-interval (1m).
//
// SIGINT or SIGTERM stops it gracefully: in-flight calls finish, then the
// stores close and the telemetry is flushed.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/idemkit-mcp/idemkit/internal/httplimit"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/idemkit-mcp/idemkit/examples/internal/refunds"
	"github.com/idemkit-mcp/idemkit/examples/internal/telemetry"
	"github.com/idemkit-mcp/idemkit/instrument"
	"github.com/idemkit-mcp/idemkit/instrument/jobs"
)

// options are the command-line flags.
type options struct {
	addr, readyFile          string
	sdk                      string
	dbPath, gatewayDB        string
	gatewayURL               string
	store, storeDB, pgDSN    string
	window, lease            time.Duration
	unprotected              bool
	otlpEndpoint, service    string
	metricInterval           time.Duration
	tokens                   string
	fastLatency, slowLatency time.Duration
	taskLease, jobLease      time.Duration
	exportDuration           time.Duration
	holdAfterWrite           string
	holdAfterPayment         string
	sweepInterval            time.Duration
	memoryMaxRecords         int
	limits                   instrument.HTTPLimits
	readHeaderTimeout        time.Duration
	readTimeout, idleTimeout time.Duration
	confirmAbove             int64
}

func parseFlags() options {
	var o options
	flag.StringVar(&o.addr, "addr", "127.0.0.1:8080", "listen address (port 0: any free port; see -ready-file)")
	flag.StringVar(&o.readyFile, "ready-file", "", "once listening, write the server's MCP URL to this file")
	flag.StringVar(&o.sdk, "sdk", refunds.SDKMCPGo, "MCP SDK serving the tools: mcpgo (github.com/mark3labs/mcp-go) or gosdk (the official Go SDK)")
	flag.StringVar(&o.dbPath, "db", "refunds.db", "SQLite orders database (created and seeded when missing); with -store sqlite it holds idemkit's store too")
	flag.StringVar(&o.gatewayDB, "gateway-db", "", "SQLite ledger of the fake payment gateway the desk serves on a loopback port (default: gateway.db beside -db; ignored with -gateway-url)")
	flag.StringVar(&o.gatewayURL, "gateway-url", "", "base URL of the payment gateway's HTTP API (POST /v1/refunds, deduplicating by Idempotency-Key; default: the desk serves its fake gateway on a loopback port)")
	flag.StringVar(&o.store, "store", "sqlite", "idemkit store: sqlite (in -db), memory or postgres (ignored with -unprotected)")
	flag.StringVar(&o.storeDB, "store-db", "", "SQLite file of the idemkit store (default: the -db file, where a refund row commits with the call's recorded outcome; "+
		"another file makes the row commit in a transaction of its own, before the outcome is recorded)")
	flag.StringVar(&o.pgDSN, "postgres-dsn", os.Getenv("DATABASE_URL"), "PostgreSQL DSN for -store postgres (default $DATABASE_URL)")
	flag.DurationVar(&o.window, "window", 10*time.Minute, "how long a completed refund deduplicates its duplicates")
	flag.DurationVar(&o.lease, "lease", 0, "how long a refund in progress holds its claim before a duplicate may take it over (default 2m: idemkit.DefaultLease)")
	flag.BoolVar(&o.unprotected, "unprotected", false, "serve without idemkit: plain OpenTelemetry GenAI tracing, every duplicate runs")
	flag.StringVar(&o.otlpEndpoint, "otlp-endpoint", "127.0.0.1:4317", "Collector OTLP/gRPC endpoint, host:port (empty: no export)")
	flag.StringVar(&o.service, "service-name", "", "service.name (default refundserver, or refundserver-unprotected)")
	flag.DurationVar(&o.metricInterval, "metric-interval", 2*time.Second, "metric export interval")
	flag.StringVar(&o.tokens, "tokens", refunds.FormatTokens(refunds.DemoTokens), "bearer tokens, token=subject,…")
	flag.DurationVar(&o.fastLatency, "fast-latency", refunds.DefaultFastLatency, "gateway latency of fastpay orders")
	flag.DurationVar(&o.slowLatency, "slow-latency", refunds.DefaultSlowLatency, "gateway latency of slowpay orders (every fourth order)")
	flag.DurationVar(&o.taskLease, "task-lease", 0, "how long a task's worker holds it without a heartbeat before it is reported lost (default 30s)")
	flag.DurationVar(&o.jobLease, "job-lease", 0, "how long a job's worker holds it without a heartbeat before it is reported lost (default 30s)")
	flag.DurationVar(&o.exportDuration, "export-duration", refunds.DefaultExportDuration, "how long an export_refunds job works")
	flag.StringVar(&o.holdAfterWrite, "fault-hold-after-write", "", "fault injection for crash tests: issue_refund writes this file once its row is written, then waits uncommitted")
	flag.StringVar(&o.holdAfterPayment, "fault-hold-after-payment", "", "fault injection for crash tests: issue_refund writes this file once the gateway has refunded, then waits before writing its row")
	flag.DurationVar(&o.sweepInterval, "sweep-interval", time.Minute, "how often expired idemkit records are deleted from the store")
	flag.IntVar(&o.memoryMaxRecords, "memory-max-records", 0,
		"with -store memory, the most records the store holds (0: the store's default, 100,000): a new call beyond them, with none expired, is refused (store_full) and nothing runs")
	flag.IntVar(&o.limits.MaxSessions, "max-sessions", httplimit.DefaultMaxSessions, "the most MCP sessions open at once: another initialize gets HTTP 503 (negative: no limit)")
	flag.DurationVar(&o.limits.SessionIdleTimeout, "session-idle-timeout", httplimit.DefaultIdleTimeout, "an MCP session with no request for this long is ended (negative: never)")
	flag.Int64Var(&o.limits.MaxBodyBytes, "max-body-bytes", httplimit.DefaultMaxBodyBytes, "the largest request body: a larger one gets HTTP 413 (negative: no limit)")
	flag.DurationVar(&o.readHeaderTimeout, "read-header-timeout", httplimit.ServerReadHeaderTimeout, "how long a client may take to send its request headers")
	flag.DurationVar(&o.readTimeout, "read-timeout", httplimit.ServerReadTimeout, "how long a client may take to send a whole request, body included")
	flag.DurationVar(&o.idleTimeout, "http-idle-timeout", httplimit.ServerIdleTimeout, "how long an idle keep-alive connection stays open")
	flag.Int64Var(&o.confirmAbove, "confirm-above-cents", 0, "ask the user (MCP elicitation) before a refund of more than this many cents; a client that cannot be asked is refused (0: never ask)")
	flag.Parse()
	if o.service == "" {
		o.service = "refundserver"
		if o.unprotected {
			o.service = "refundserver-unprotected"
		}
	}
	if o.gatewayDB == "" {
		o.gatewayDB = filepath.Join(filepath.Dir(o.dbPath), "gateway.db")
		if o.dbPath == ":memory:" {
			o.gatewayDB = ":memory:"
		}
	}
	return o
}

func main() {
	o := parseFlags()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("service", o.service)
	if err := run(o, log); err != nil {
		log.Error("refundserver failed", "err", err)
		os.Exit(1)
	}
}

func run(o options, log *slog.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	tokens, err := refunds.ParseTokens(o.tokens)
	if err != nil {
		return err
	}
	tel, err := telemetry.Setup(ctx, telemetry.Config{ServiceName: o.service, Endpoint: o.otlpEndpoint, MetricInterval: o.metricInterval})
	if err != nil {
		return err
	}
	defer func() {
		// Flush after the server and the stores have stopped, so that the
		// last calls' spans and metrics are exported.
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := tel.Shutdown(sctx); err != nil {
			log.Error("flushing telemetry", "err", err)
		}
	}()

	if o.storeDB == "" {
		o.storeDB = o.dbPath
	}
	for _, p := range []string{o.dbPath, o.storeDB, o.gatewayDB} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
	}
	var gateway *refunds.Gateway
	if o.gatewayURL == "" {
		// The fake payment gateway, served by the desk (NewServer) on a
		// loopback port: the desk pays it over HTTP.
		if gateway, err = refunds.OpenGateway(ctx, o.gatewayDB); err != nil {
			return err
		}
		defer gateway.Close()
	}

	cfg := refunds.Config{
		Gateway: gateway, GatewayURL: o.gatewayURL, SDK: o.sdk, TracerProvider: tel.Tracer, MeterProvider: tel.Meter, Tokens: tokens,
		FastLatency: o.fastLatency, SlowLatency: o.slowLatency,
		Tasks: instrument.TasksConfig{Lease: o.taskLease}, Jobs: jobs.Config{Lease: o.jobLease},
		ExportDuration: o.exportDuration, HoldAfterWrite: o.holdAfterWrite, HoldAfterPayment: o.holdAfterPayment,
		ConfirmAboveCents: o.confirmAbove, HTTPLimits: o.limits,
	}
	storeDesc := "none (unprotected)"
	if o.unprotected {
		if cfg.DB, err = refunds.OpenDB(ctx, o.dbPath); err != nil {
			return err
		}
	} else {
		st, err := openStore(ctx, o)
		if err != nil {
			return err
		}
		defer st.close()
		cfg.Guard, cfg.DB, storeDesc = st.guard, st.db, st.desc
		// Expired records are deleted as the store's windows end: a SQL
		// store keeps them otherwise (the memory store deletes its own;
		// sweeping it too is harmless). Stopped before the store closes.
		if o.sweepInterval <= 0 {
			return fmt.Errorf("-sweep-interval must be positive, got %s", o.sweepInterval)
		}
		stopSweeper := st.guard.StartSweeper(o.sweepInterval, func(err error) { log.Error("sweeping expired records", "err", err) })
		defer stopSweeper()
	}
	defer cfg.DB.Close()
	desk, err := refunds.NewServer(cfg)
	if err != nil {
		return err
	}
	handler := desk.Handler

	mux := http.NewServeMux()
	mux.Handle("/mcp", handler)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return err
	}
	// Read timeouts: a client that trickles its request cannot hold a
	// connection for long; no write timeout, for SSE streams.
	srv := instrument.NewHTTPServer(mux)
	srv.ReadHeaderTimeout, srv.ReadTimeout, srv.IdleTimeout = o.readHeaderTimeout, o.readTimeout, o.idleTimeout
	url := fmt.Sprintf("http://%s/mcp", ln.Addr())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Info("refund desk listening", "url", url, "sdk", o.sdk, "protected", !o.unprotected, "store", storeDesc, "db", o.dbPath, "otlp", o.otlpEndpoint)
	if o.readyFile != "" {
		if err := writeAtomically(o.readyFile, url+"\n"); err != nil {
			return err
		}
	}

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down: waiting for in-flight calls, tasks and jobs")
	sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := desk.Close(sctx); err != nil {
		log.Error("stopping tasks and jobs", "err", err)
	}
	log.Info("stopped")
	return nil
}

// writeAtomically writes a file that a waiting script never sees half written.
func writeAtomically(path, content string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
