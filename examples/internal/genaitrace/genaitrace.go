// Package genaitrace traces an mcp-go server the way a server is traced
// before idemkit: one SERVER span "tools/call {tool}" per tools/call, as the
// OpenTelemetry MCP semantic conventions define it (with
// gen_ai.operation.name=execute_tool), and nothing of idemkit (no Guard, no
// idempotency key, no idemkit.* attribute).
//
// The demo's unprotected refund server uses it, for two reasons:
//
//   - it is what "before idemkit" looks like: every duplicate runs the
//     refund again;
//   - the Collector's dup processor still names the layer behind each of
//     those duplicates, from the conventional attributes alone: it groups
//     spans without idemkit hashes by the canonical gen_ai.tool.call.arguments
//     (an opt-in attribute of the conventions, recorded here), and reads
//     mcp.session.id, jsonrpc.request.id and the agent's chat spans.
//
// A server wired with instrument/mcpgo and a nil Guard would not do: its
// spans say idemkit.outcome=bypassed, which the dup processor leaves
// untracked (a bypassed tool is one whose second run has no side effect).
package genaitrace

import (
	"context"
	"encoding/json"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/semconv/v1.41.0/mcpconv"
	"go.opentelemetry.io/otel/trace"

	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

// ScopeName is the instrumentation scope of the spans and metrics.
const ScopeName = "github.com/idemkit-mcp/idemkit/examples/internal/genaitrace"

// maxArguments caps gen_ai.tool.call.arguments.
const maxArguments = 4096

// Tracer installs conventional tool-call tracing on mcp-go servers.
type Tracer struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
	op     metric.Float64Histogram
	ids    sync.Map // *mcp.Meta -> string: request IDs captured by the hook
}

// New returns a Tracer that creates spans with tp and records
// mcp.server.operation.duration with mp.
func New(tp trace.TracerProvider, mp metric.MeterProvider) (*Tracer, error) {
	t := &Tracer{
		tracer: tp.Tracer(ScopeName),
		prop:   propagation.TraceContext{},
	}
	op, err := mcpconv.NewServerOperationDuration(mp.Meter(ScopeName))
	if err != nil {
		return nil, err
	}
	t.op = op.Inst()
	return t, nil
}

// ServerOptions returns the options to pass to server.NewMCPServer: a
// BeforeCallTool hook that captures the JSON-RPC request ID (mcp-go hands
// it to hooks only) and the tool middleware that writes the span.
func (t *Tracer) ServerOptions() []server.ServerOption {
	hooks := &server.Hooks{}
	hooks.AddBeforeCallTool(func(_ context.Context, id any, req *mcp.CallToolRequest) {
		if req.Params.Meta == nil {
			req.Params.Meta = &mcp.Meta{}
		}
		if s, ok := formatID(id); ok {
			t.ids.Store(req.Params.Meta, s)
		}
	})
	hooks.AddAfterCallTool(func(_ context.Context, _ any, req *mcp.CallToolRequest, _ any) {
		// A task-augmented call's handler runs after the request answered
		// (mcp-go's task engine): the middleware takes the ID then.
		if req.Params.Meta != nil && req.Params.Task == nil {
			t.ids.Delete(req.Params.Meta)
		}
	})
	return []server.ServerOption{server.WithHooks(hooks), server.WithToolHandlerMiddleware(t.middleware)}
}

func (t *Tracer) middleware(next server.ToolHandlerFunc) server.ToolHandlerFunc {
	return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		start := time.Now()
		tool := req.Params.Name
		attrs := []attribute.KeyValue{
			attribute.String(sc.GenAIOperationName, sc.OperationExecuteTool),
			attribute.String(sc.GenAIToolName, tool),
			attribute.String(sc.MCPMethodName, sc.MethodToolsCall),
		}
		if meta := req.Params.Meta; meta != nil {
			ctx = t.prop.Extract(ctx, metaCarrier(meta.AdditionalFields))
			if id, ok := t.ids.Load(meta); ok {
				attrs = append(attrs, attribute.String(sc.JSONRPCRequestID, id.(string)))
				if req.Params.Task != nil {
					t.ids.Delete(meta)
				}
			}
		}
		if s := server.ClientSessionFromContext(ctx); s != nil && s.SessionID() != "" {
			attrs = append(attrs, attribute.String(sc.MCPSessionID, s.SessionID()))
		}
		if v := server.RequestProtocolVersion(ctx); v != "" {
			attrs = append(attrs, attribute.String(sc.MCPProtocolVersion, v))
		}
		if args := argumentsJSON(req); args != "" {
			attrs = append(attrs, attribute.String(sc.GenAIToolCallArguments, args))
		}
		ctx, span := t.tracer.Start(ctx, sc.ServerSpanName(sc.MethodToolsCall, tool), trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
		defer span.End()

		res, err := next(ctx, req)
		errType := ""
		switch {
		case err != nil:
			// mcp-go answers a handler's Go error with JSON-RPC -32603.
			errType = strconv.Itoa(mcp.INTERNAL_ERROR)
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
			span.SetAttributes(attribute.String(sc.RPCResponseStatusCode, errType))
		case res != nil && res.IsError:
			errType = sc.ErrorTypeToolError
			span.SetStatus(codes.Error, sc.ErrorTypeToolError)
		}
		mattrs := []attribute.KeyValue{attribute.String(sc.MCPMethodName, sc.MethodToolsCall), attribute.String(sc.GenAIToolName, tool),
			attribute.String(sc.GenAIOperationName, sc.OperationExecuteTool)}
		if errType != "" {
			span.SetAttributes(attribute.String(sc.ErrorType, errType))
			mattrs = append(mattrs, attribute.String(sc.ErrorType, errType))
		}
		t.op.Record(ctx, time.Since(start).Seconds(), metric.WithAttributes(mattrs...))
		return res, err
	}
}

// argumentsJSON returns the raw arguments as received, cut to maxArguments.
func argumentsJSON(req mcp.CallToolRequest) string {
	raw := []byte(req.Params.RawArguments)
	if len(raw) == 0 && req.Params.Arguments != nil {
		raw, _ = json.Marshal(req.Params.Arguments)
	}
	if len(raw) == 0 || len(raw) > maxArguments {
		return ""
	}
	return string(raw)
}

// metaCarrier reads the trace context from params._meta.
type metaCarrier map[string]any

func (m metaCarrier) Get(key string) string { s, _ := m[key].(string); return s }
func (m metaCarrier) Set(key, value string) { m[key] = value }
func (m metaCarrier) Keys() []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}

// formatID formats a JSON-RPC request ID as jsonrpc.request.id: a string as
// it is, a number in full decimal notation.
func formatID(id any) (string, bool) {
	switch v := id.(type) {
	case string:
		return v, true
	case float64:
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return "", false
		}
		return strconv.FormatFloat(v, 'f', -1, 64), true
	case int64:
		return strconv.FormatInt(v, 10), true
	case json.Number:
		return string(v), v != ""
	}
	return "", false
}
