// Command refundserver is the demo's MCP server: a refund desk served over
// Streamable HTTP (stateful sessions) by mcp-go or, with -sdk gosdk, by the
// official Go SDK, whose issue_refund tool writes a refund row to an SQLite
// orders database. idemkit protects issue_refund (arguments validated, claim
// before the work, replay the stored result to every duplicate), every MCP
// request gets a SERVER span ("tools/call issue_refund"), and traces and
// metrics go to a Collector over OTLP/gRPC.
//
//	refundserver -addr 127.0.0.1:8080 -db refunds.db               # protected, mcp-go, SQLite store
//	refundserver -sdk gosdk -addr 127.0.0.1:8082                   # the same tools, auth and store on the go-sdk
//	refundserver -store postgres -postgres-dsn postgres://…         # protected, shared Postgres store
//	refundserver -unprotected -addr 127.0.0.1:8081 -db before.db   # "before idemkit": every duplicate refunds again
//
// Callers authenticate with "Authorization: Bearer <token>" (-tokens maps
// tokens to subjects; the defaults are demo-token-alice and demo-token-bob).
// The subject scopes the idempotency keys, so a client that reconnects on a
// new MCP session still gets its first call's result. Without the header
// the keys are scoped by the (server-validated) session.
//
// SIGINT or SIGTERM stops it gracefully: in-flight calls finish, then the
// stores close and the telemetry is flushed.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/idemkit/idemkit/examples/internal/refunds"
	"github.com/idemkit/idemkit/examples/internal/telemetry"
)

// options are the command-line flags.
type options struct {
	addr, readyFile          string
	sdk                      string
	dbPath                   string
	store, storeDB, pgDSN    string
	window                   time.Duration
	unprotected              bool
	otlpEndpoint, service    string
	metricInterval           time.Duration
	tokens                   string
	fastLatency, slowLatency time.Duration
}

func parseFlags() options {
	var o options
	flag.StringVar(&o.addr, "addr", "127.0.0.1:8080", "listen address (port 0: any free port; see -ready-file)")
	flag.StringVar(&o.readyFile, "ready-file", "", "once listening, write the server's MCP URL to this file")
	flag.StringVar(&o.sdk, "sdk", refunds.SDKMCPGo, "MCP SDK serving the tools: mcpgo (github.com/mark3labs/mcp-go) or gosdk (the official Go SDK)")
	flag.StringVar(&o.dbPath, "db", "refunds.db", "SQLite orders database (created and seeded when missing)")
	flag.StringVar(&o.store, "store", "sqlite", "idemkit store: sqlite, memory or postgres (ignored with -unprotected)")
	flag.StringVar(&o.storeDB, "store-db", "", "SQLite file of the idemkit store (default: idemkit.db beside -db)")
	flag.StringVar(&o.pgDSN, "postgres-dsn", os.Getenv("DATABASE_URL"), "PostgreSQL DSN for -store postgres (default $DATABASE_URL)")
	flag.DurationVar(&o.window, "window", 10*time.Minute, "how long a completed refund deduplicates its duplicates")
	flag.BoolVar(&o.unprotected, "unprotected", false, "serve without idemkit: plain OpenTelemetry GenAI tracing, every duplicate runs")
	flag.StringVar(&o.otlpEndpoint, "otlp-endpoint", "127.0.0.1:4317", "Collector OTLP/gRPC endpoint, host:port (empty: no export)")
	flag.StringVar(&o.service, "service-name", "", "service.name (default refundserver, or refundserver-unprotected)")
	flag.DurationVar(&o.metricInterval, "metric-interval", 2*time.Second, "metric export interval")
	flag.StringVar(&o.tokens, "tokens", refunds.FormatTokens(refunds.DemoTokens), "bearer tokens, token=subject,…")
	flag.DurationVar(&o.fastLatency, "fast-latency", refunds.DefaultFastLatency, "gateway latency of fastpay orders")
	flag.DurationVar(&o.slowLatency, "slow-latency", refunds.DefaultSlowLatency, "gateway latency of slowpay orders (every fourth order)")
	flag.Parse()
	if o.service == "" {
		o.service = "refundserver"
		if o.unprotected {
			o.service = "refundserver-unprotected"
		}
	}
	if o.storeDB == "" {
		o.storeDB = filepath.Join(filepath.Dir(o.dbPath), "idemkit.db")
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

	for _, p := range []string{o.dbPath, o.storeDB} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
	}
	db, err := refunds.OpenDB(ctx, o.dbPath)
	if err != nil {
		return err
	}
	defer db.Close()

	cfg := refunds.Config{
		DB: db, SDK: o.sdk, TracerProvider: tel.Tracer, MeterProvider: tel.Meter, Tokens: tokens,
		FastLatency: o.fastLatency, SlowLatency: o.slowLatency,
	}
	storeDesc := "none (unprotected)"
	if !o.unprotected {
		guard, closeStore, desc, err := openGuard(ctx, o)
		if err != nil {
			return err
		}
		defer closeStore()
		cfg.Guard, storeDesc = guard, desc
	}
	handler, err := refunds.NewHandler(cfg)
	if err != nil {
		return err
	}

	mux := http.NewServeMux()
	mux.Handle("/mcp", handler)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
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
	log.Info("shutting down: waiting for in-flight calls")
	sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("shutdown: %w", err)
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
