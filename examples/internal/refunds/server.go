package refunds

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/mark3labs/mcp-go/server"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idemkit/examples/internal/genaitrace"
	"github.com/idemkit/idemkit/idemkit"
	"github.com/idemkit/idemkit/instrument"
	"github.com/idemkit/idemkit/instrument/gosdk"
	"github.com/idemkit/idemkit/instrument/mcpgo"
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
	// DB is the orders database. Required.
	DB *DB
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
}

// Name and Version are the MCP server's implementation info.
const (
	Name    = "refund-desk"
	Version = "1.0.0"
)

// options are the instrumentation's options, the same on both SDKs.
func (cfg *Config) options(subject instrument.Option) []instrument.Option {
	return []instrument.Option{
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
	}
}

func (cfg *Config) tools() *tools {
	return &tools{db: cfg.DB, fast: orDefault(cfg.FastLatency, DefaultFastLatency), slow: orDefault(cfg.SlowLatency, DefaultSlowLatency)}
}

// NewHandler returns the refund desk over Streamable HTTP, with stateful
// sessions (every client gets an Mcp-Session-Id at initialize, and an
// unknown or terminated one gets 404), behind bearer-token
// authentication. Mount it at /mcp.
func NewHandler(cfg Config) (http.Handler, error) {
	if cfg.DB == nil || cfg.TracerProvider == nil || cfg.MeterProvider == nil {
		return nil, errors.New("refunds: Config needs DB, TracerProvider and MeterProvider")
	}
	switch cfg.SDK {
	case "", SDKMCPGo:
		s, err := NewMCPGoServer(cfg)
		if err != nil {
			return nil, err
		}
		if cfg.Guard == nil {
			return mcpgoAuth(cfg.Tokens, server.NewStreamableHTTPServer(s, server.WithStateful(true))), nil
		}
		return mcpgoAuth(cfg.Tokens, mcpgo.NewStreamableHTTPHandler(s)), nil
	case SDKGoSDK:
		if cfg.Guard == nil {
			return nil, errors.New("refunds: the server without idemkit is served by mcp-go only; use SDK mcpgo")
		}
		s := NewGoSDKServer(cfg)
		return gosdkAuth(cfg.Tokens, gosdk.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)), nil
	}
	return nil, fmt.Errorf("refunds: SDK %q: want %s or %s", cfg.SDK, SDKMCPGo, SDKGoSDK)
}

// NewMCPGoServer returns the refund desk on mcp-go: issue_refund (protected
// when cfg.Guard is set), get_refund_status and lookup_order (read-only,
// traced, never protected).
func NewMCPGoServer(cfg Config) (*server.MCPServer, error) {
	var opts []server.ServerOption
	if cfg.Guard != nil {
		opts = mcpgo.ServerOptions(cfg.Guard, cfg.options(instrument.WithSubject(mcpgo.TokenSubject))...)
	} else {
		tr, err := genaitrace.New(cfg.TracerProvider, cfg.MeterProvider)
		if err != nil {
			return nil, err
		}
		opts = tr.ServerOptions()
	}
	opts = append(opts, server.WithToolCapabilities(false))
	s := server.NewMCPServer(Name, Version, opts...)
	addMCPGoTools(s, cfg.tools())
	return s, nil
}

// NewGoSDKServer returns the refund desk on the official Go SDK, protected
// by cfg.Guard: the same tools as NewMCPGoServer.
func NewGoSDKServer(cfg Config) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: Name, Version: Version}, nil)
	gosdk.Instrument(s, cfg.Guard, cfg.options(instrument.WithSubject(gosdk.TokenSubject))...)
	addGoSDKTools(s, cfg.tools())
	return s
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}
