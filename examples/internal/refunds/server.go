package refunds

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/mark3labs/mcp-go/server"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit-mcp/idemkit/examples/internal/genaitrace"
	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/pgstore"
	"github.com/idemkit-mcp/idemkit/idemkit/sqlitestore"
	"github.com/idemkit-mcp/idemkit/instrument"
	"github.com/idemkit-mcp/idemkit/instrument/gosdk"
	idemjobs "github.com/idemkit-mcp/idemkit/instrument/jobs"
	"github.com/idemkit-mcp/idemkit/instrument/mcpgo"
)

// Defaults of Config.
const (
	DefaultFastLatency = 20 * time.Millisecond
	DefaultSlowLatency = 800 * time.Millisecond
)

// SDKs the refund desk can be served with.
const (
	SDKMCPGo = "mcpgo"
	SDKGoSDK = "gosdk"
)

// Config configures the refund desk's MCP server.
type Config struct {
	// DB is the orders database. Required. With a Guard on idemkit's
	// SQLite or PostgreSQL store, make it the store's database
	// (NewSQLiteDB(store.DB(), store.ReadDB()), NewPostgresDB(pool)):
	// issue_refund then writes its refund row in the transaction that
	// records the call's outcome, after the payment.
	DB *DB
	// Gateway is the fake payment gateway (its ledger and its HTTP API),
	// which NewServer serves on a loopback port of its own when
	// GatewayURL is empty. Defaults to one with its ledger in memory.
	Gateway *Gateway
	// GatewayURL is the base URL of the payment gateway's HTTP API
	// (Gateway.ServeHTTP, POST /v1/refunds) that issue_refund pays
	// through, forwarding the call's downstream key in Idempotency-Key
	// (see GatewayClient). Defaults to "": NewServer serves Gateway on
	// loopback and pays there. NewMCPGoServer and NewGoSDKServer need it.
	GatewayURL string
	// SDK is the MCP SDK that serves the tools: SDKMCPGo
	// (github.com/mark3labs/mcp-go) or SDKGoSDK (the official Go SDK).
	// Defaults to SDKMCPGo.
	SDK string
	// Guard protects issue_refund. nil serves the server as it was before
	// idemkit: traced with the plain OpenTelemetry conventions (see package
	// genaitrace; mcp-go only), every call runs.
	Guard *idemkit.Guard
	// TracerProvider and MeterProvider receive the spans and metrics.
	// Required.
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
	// Tokens maps bearer tokens to subjects (see auth.go).
	Tokens map[string]string
	// FastLatency and SlowLatency are how long the fake payment gateway
	// takes to refund an order paid through FastGateway and SlowGateway.
	FastLatency, SlowLatency time.Duration
	// Tasks configures the durable MCP tasks of the mcp-go server with a
	// Guard (lease, poll interval). Defaults to instrument's defaults.
	Tasks instrument.TasksConfig
	// Jobs configures the export_refunds job (with a Guard). Defaults to
	// instrument's defaults.
	Jobs idemjobs.Config
	// ExportDuration is how long an export_refunds job works. Defaults to
	// DefaultExportDuration.
	ExportDuration time.Duration
	// HTTPLimits bound what the desk's clients may hold: sessions, their
	// idle time, request bodies. Defaults to instrument.HTTPLimits' own.
	HTTPLimits instrument.HTTPLimits
	// HoldAfterWrite, when set, is fault injection for the crash tests:
	// issue_refund writes this file once its refund row is written (not
	// yet committed) and then waits for its request to end, so that a test
	// can kill the process between the write and the commit.
	HoldAfterWrite string
	// HoldAfterPayment, when set, is fault injection for the crash tests:
	// issue_refund writes this file once the gateway has refunded (the
	// refund row not yet written) and then waits for its request to end,
	// so that a test can kill the process between the payment and the
	// local commit.
	HoldAfterPayment string

	// beforePayment, when set (by tests), runs in issue_refund's external
	// phase just before the gateway's latency.
	beforePayment func(ctx context.Context, orderID string)

	// ConfirmAboveCents, when positive, puts a human gate on issue_refund
	// (instrument.WithConfirmation): a refund of more than this many cents
	// runs only after the user confirmed it through MCP elicitation
	// ("Refund $250.00 on ord_1001?"); a client that cannot be asked is
	// refused. Defaults to 0: no gate.
	ConfirmAboveCents int64
}

// DefaultExportDuration is how long an export_refunds job works by default.
const DefaultExportDuration = 2 * time.Second

// Name and Version are the MCP server's implementation info.
const (
	Name    = "refund-desk"
	Version = "1.0.0"
)

// options are the instrumentation's options, the same on both SDKs.
func (cfg *Config) options(subject instrument.Option) []instrument.Option {
	opts := []instrument.Option{
		instrument.WithTracerProvider(cfg.TracerProvider),
		instrument.WithMeterProvider(cfg.MeterProvider),
		instrument.WithPropagator(propagation.TraceContext{}),
		// The authenticated caller scopes the keys: a client that
		// reconnects on a new session (reconnect_replay) still finds its
		// first call's result.
		subject,
		// An in-progress answer tells the model which tool reports on the
		// refund instead of "try again".
		instrument.WithStatusTool(ToolIssueRefund, ToolRefundStatus),
		instrument.WithTasks(cfg.Tasks),
	}
	if cfg.ConfirmAboveCents > 0 {
		// Large refunds are irreversible enough to ask the user first.
		opts = append(opts, instrument.WithConfirmation(ToolIssueRefund, instrument.Confirmation{Question: refundQuestion(cfg.ConfirmAboveCents)}))
	}
	return opts
}

// refundQuestion returns the human gate's question for refunds above
// threshold cents.
func refundQuestion(threshold int64) func(json.RawMessage) (string, error) {
	return func(args json.RawMessage) (string, error) {
		var a struct {
			OrderID string `json:"order_id"`
			Amount  int64  `json:"amount_cents"`
		}
		if err := json.Unmarshal(args, &a); err != nil {
			return "", err
		}
		if a.Amount <= threshold {
			return "", nil
		}
		return fmt.Sprintf("Refund %s on %s?", money(a.Amount), a.OrderID), nil
	}
}

func (cfg *Config) tools() *tools {
	return &tools{db: cfg.DB, gw: NewGatewayClient(cfg.GatewayURL), fast: orDefault(cfg.FastLatency, DefaultFastLatency), slow: orDefault(cfg.SlowLatency, DefaultSlowLatency),
		export: orDefault(cfg.ExportDuration, DefaultExportDuration), holdFile: cfg.HoldAfterWrite, holdAfterPayment: cfg.HoldAfterPayment,
		beforePayment: cfg.beforePayment}
}

// txMode is how issue_refund writes its row. In every mode the payment
// runs outside any transaction, then the row commits in a short one.
type txMode uint8

const (
	// txOwn: in a transaction of the desk's own, under the Guard's plain
	// claim (the memory store, or a store in another file: the outcome is
	// recorded after the row commits), or without one (no Guard).
	txOwn txMode = iota
	// txSQLite and txPostgres: in the store's transaction in which the
	// outcome is recorded (the phased handler form, AddPhasedTool).
	txSQLite
	txPostgres
)

// txMode returns how issue_refund writes: with its recorded outcome when
// the desk's database is the Guard's store's.
func (cfg *Config) txMode() (txMode, error) {
	if cfg.Guard == nil {
		return txOwn, nil
	}
	switch st := cfg.Guard.Store().(type) {
	case *sqlitestore.Store:
		if cfg.DB.sql == st.DB() {
			return txSQLite, nil
		}
	case *pgstore.Store:
		if cfg.DB.pg != nil && st.DB() == pgstore.DB(cfg.DB.pg) {
			return txPostgres, nil
		}
		return 0, errors.New("refunds: with a PostgreSQL store the desk's database must be the store's (NewPostgresDB on its pool)")
	}
	return txOwn, nil
}

// Server is the refund desk's MCP server over Streamable HTTP.
type Server struct {
	// Handler serves MCP at the path it is mounted at (/mcp).
	Handler http.Handler
	closers []func(context.Context) error
}

// Close stops the server's background work (the tasks it runs: it waits
// for them until ctx is done), then the payment gateway it serves, and
// closes the default gateway ledger.
func (s *Server) Close(ctx context.Context) error {
	var errs []error
	for _, c := range s.closers {
		errs = append(errs, c(ctx))
	}
	return errors.Join(errs...)
}

// NewHandler returns NewServer's Handler, for callers that never Close it.
func NewHandler(cfg Config) (http.Handler, error) {
	s, err := NewServer(cfg)
	if err != nil {
		return nil, err
	}
	return s.Handler, nil
}

// NewServer returns the refund desk over Streamable HTTP, with stateful
// sessions (every client gets an Mcp-Session-Id at initialize, and an
// unknown or terminated one gets 404) within cfg.HTTPLimits, behind
// bearer-token authentication. Mount its Handler at /mcp. On mcp-go it advertises MCP
// tasks, and issue_refund supports task augmentation: with a Guard, its
// tasks live in the Guard's store.
func NewServer(cfg Config) (*Server, error) {
	if cfg.DB == nil || cfg.TracerProvider == nil || cfg.MeterProvider == nil {
		return nil, errors.New("refunds: Config needs DB, TracerProvider and MeterProvider")
	}
	mode, err := cfg.txMode()
	if err != nil {
		return nil, err
	}
	srv := &Server{}
	if cfg.GatewayURL == "" {
		// The desk's own fake gateway, a real HTTP server on loopback:
		// issue_refund pays over HTTP, as it would pay a provider.
		if cfg.Gateway == nil {
			gw, err := OpenGateway(context.Background(), ":memory:")
			if err != nil {
				return nil, err
			}
			cfg.Gateway = gw
			srv.closers = append(srv.closers, func(context.Context) error { return gw.Close() })
		}
		url, stop, err := ServeGateway(cfg.Gateway)
		if err != nil {
			_ = srv.Close(context.Background())
			return nil, err
		}
		cfg.GatewayURL = url
		srv.closers = append([]func(context.Context) error{stop}, srv.closers...)
	}
	var jobs *idemjobs.Runner
	if cfg.Guard != nil {
		if jobs, err = idemjobs.New(cfg.Guard, &cfg.Jobs); err != nil {
			return nil, err
		}
		srv.closers = append([]func(context.Context) error{jobs.Close}, srv.closers...)
	}
	switch cfg.SDK {
	case "", SDKMCPGo:
		s, inst, err := newMCPGoServer(cfg, mode, jobs)
		if err != nil {
			return nil, err
		}
		// The same handler with or without idemkit: its HTTP limits
		// (sessions, bodies) are hygiene every server needs, not
		// protection against duplicates.
		srv.Handler = mcpgoAuth(cfg.Tokens, mcpgo.NewStreamableHTTPHandler(s, mcpgo.WithHTTPLimits(cfg.HTTPLimits)))
		if inst != nil {
			srv.closers = append([]func(context.Context) error{inst.Close}, srv.closers...)
		}
	case SDKGoSDK:
		if cfg.Guard == nil {
			return nil, errors.New("refunds: the server without idemkit is served by mcp-go only; use SDK mcpgo")
		}
		s := newGoSDKServer(cfg, mode, jobs)
		srv.Handler = gosdkAuth(cfg.Tokens, gosdk.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil, gosdk.WithHTTPLimits(cfg.HTTPLimits)))
	default:
		return nil, fmt.Errorf("refunds: SDK %q: want %s or %s", cfg.SDK, SDKMCPGo, SDKGoSDK)
	}
	return srv, nil
}

// NewMCPGoServer returns the refund desk on mcp-go: issue_refund (protected
// when cfg.Guard is set, and task-augmentable), get_refund_status and
// lookup_order (read-only, traced, never protected).
func NewMCPGoServer(cfg Config) (*server.MCPServer, error) {
	mode, err := cfg.txMode()
	if err != nil {
		return nil, err
	}
	if cfg.GatewayURL == "" {
		return nil, errors.New("refunds: NewMCPGoServer needs Config.GatewayURL (serve a Gateway with ServeGateway)")
	}
	s, _, err := newMCPGoServer(cfg, mode, nil)
	return s, err
}

func newMCPGoServer(cfg Config, mode txMode, jobs *idemjobs.Runner) (*server.MCPServer, *mcpgo.Instrumentation, error) {
	var (
		opts []server.ServerOption
		inst *mcpgo.Instrumentation
	)
	if cfg.Guard != nil {
		inst = mcpgo.New(cfg.Guard, cfg.options(instrument.WithSubject(mcpgo.TokenSubject))...)
		opts = inst.ServerOptions()
	} else {
		tr, err := genaitrace.New(cfg.TracerProvider, cfg.MeterProvider)
		if err != nil {
			return nil, nil, err
		}
		opts = tr.ServerOptions()
	}
	// Tasks (MCP 2025-11-25): tasks/list, tasks/cancel and task-augmented
	// tools/call. With a Guard they live in its store; without one, in
	// mcp-go's memory.
	opts = append(opts, server.WithToolCapabilities(false), server.WithTaskCapabilities(true, true, true))
	s := server.NewMCPServer(Name, Version, opts...)
	addMCPGoTools(s, cfg.tools(), mode, cfg.Guard, jobs)
	return s, inst, nil
}

// NewGoSDKServer returns the refund desk on the official Go SDK, protected
// by cfg.Guard: the same tools as NewMCPGoServer (the go-sdk has no MCP
// tasks).
func NewGoSDKServer(cfg Config) (*mcp.Server, error) {
	mode, err := cfg.txMode()
	if err != nil {
		return nil, err
	}
	if cfg.GatewayURL == "" {
		return nil, errors.New("refunds: NewGoSDKServer needs Config.GatewayURL (serve a Gateway with ServeGateway)")
	}
	return newGoSDKServer(cfg, mode, nil), nil
}

func newGoSDKServer(cfg Config, mode txMode, jobs *idemjobs.Runner) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: Name, Version: Version}, nil)
	gosdk.Instrument(s, cfg.Guard, cfg.options(instrument.WithSubject(gosdk.TokenSubject))...)
	addGoSDKTools(s, cfg.tools(), mode, cfg.Guard, jobs)
	return s
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}
