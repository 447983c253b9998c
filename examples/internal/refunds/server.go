package refunds

import (
	"errors"
	"net/http"
	"time"

	"github.com/mark3labs/mcp-go/server"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idemkit/examples/internal/genaitrace"
	"github.com/idemkit/idemkit/idemkit"
	"github.com/idemkit/idemkit/instrument"
	"github.com/idemkit/idemkit/instrument/mcpgo"
)

// Defaults of Config.
const (
	DefaultFastLatency = 20 * time.Millisecond
	DefaultSlowLatency = 800 * time.Millisecond
)

// Config configures the refund desk's MCP server.
type Config struct {
	// DB is the orders database. Required.
	DB *DB
	// Guard protects issue_refund. nil serves the server as it was before
	// idemkit: traced with the plain OpenTelemetry GenAI conventions (see
	// package genaitrace), every call runs.
	Guard *idemkit.Guard
	// TracerProvider and MeterProvider receive the spans and metrics.
	// Required.
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
	// Tokens maps bearer tokens to subjects (see Authenticate).
	Tokens map[string]string
	// FastLatency and SlowLatency are how long the fake payment gateway
	// takes to refund an order paid through FastGateway and SlowGateway.
	FastLatency, SlowLatency time.Duration
}

// Name and Version are the MCP server's implementation info.
const (
	Name    = "refund-desk"
	Version = "1.0.0"
)

// NewMCPServer returns the refund desk: issue_refund (protected when
// cfg.Guard is set), get_refund_status and lookup_order (read-only, traced,
// never protected).
func NewMCPServer(cfg Config) (*server.MCPServer, error) {
	if cfg.DB == nil || cfg.TracerProvider == nil || cfg.MeterProvider == nil {
		return nil, errors.New("refunds: Config needs DB, TracerProvider and MeterProvider")
	}
	var opts []server.ServerOption
	if cfg.Guard != nil {
		opts = mcpgo.ServerOptions(cfg.Guard,
			instrument.WithTracerProvider(cfg.TracerProvider),
			instrument.WithMeterProvider(cfg.MeterProvider),
			instrument.WithPropagator(propagation.TraceContext{}),
			// The authenticated caller scopes the keys: a client that
			// reconnects on a new session (reconnect_replay) still finds
			// its first call's result.
			instrument.WithSubject(SubjectFromContext),
			// An in-progress answer tells the model which tool reports on
			// the refund instead of "try again".
			instrument.WithStatusTool(ToolIssueRefund, ToolRefundStatus),
			// mcp.server.operation.duration, so that both servers report
			// their request counts under the same metric.
			instrument.WithOperationDuration(),
		)
	} else {
		tr, err := genaitrace.New(cfg.TracerProvider, cfg.MeterProvider)
		if err != nil {
			return nil, err
		}
		opts = tr.ServerOptions()
	}
	opts = append(opts, server.WithToolCapabilities(false))
	s := server.NewMCPServer(Name, Version, opts...)

	t := &tools{db: cfg.DB, fast: orDefault(cfg.FastLatency, DefaultFastLatency), slow: orDefault(cfg.SlowLatency, DefaultSlowLatency)}
	s.AddTool(issueRefundTool(), t.issueRefund)
	s.AddTool(refundStatusTool(), t.refundStatus)
	s.AddTool(lookupOrderTool(), t.lookupOrder)
	return s, nil
}

// NewHandler returns the MCP server over Streamable HTTP (stateful sessions:
// every client gets an Mcp-Session-Id at initialize), behind Authenticate.
// Mount it at /mcp.
func NewHandler(cfg Config) (http.Handler, error) {
	s, err := NewMCPServer(cfg)
	if err != nil {
		return nil, err
	}
	return Authenticate(cfg.Tokens, server.NewStreamableHTTPServer(s)), nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}
