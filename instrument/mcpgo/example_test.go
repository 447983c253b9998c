package mcpgo_test

import (
	"context"
	"fmt"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/instrument"
	"github.com/idemkit-mcp/idemkit/instrument/mcpgo"
	"github.com/idemkit-mcp/idemkit/spancontract"
)

// An mcp-go server with idemkit wired in: the refund tool runs once however
// often it is called, and every call is traced.
func ExampleServerOptions() {
	ctx := context.Background()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer func() { _ = tp.Shutdown(ctx) }()

	guard, _ := idemkit.NewGuard(&idemkit.MemoryStore{}, nil)
	s := server.NewMCPServer("billing", "1.0.0",
		mcpgo.ServerOptions(guard, instrument.WithTracerProvider(tp))...)

	refunds := 0
	s.AddTool(mcp.NewTool("refund", mcp.WithString("order_id")), // unannotated: protected
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			refunds++
			instrument.RecordWrite(ctx, "re_1")
			return mcp.NewToolResultText("refunded " + req.GetString("order_id", "")), nil
		})

	c, _ := client.NewInProcessClient(s)
	defer func() { _ = c.Close() }()
	_ = c.Start(ctx)
	var init mcp.InitializeRequest
	init.Params.ProtocolVersion = mcp.LATEST_LEGACY_PROTOCOL_VERSION
	_, _ = c.Initialize(ctx, init)

	var req mcp.CallToolRequest
	req.Params.Name = "refund"
	req.Params.Arguments = map[string]any{"order_id": "o-1"}
	for range 2 { // the model retries
		res, _ := c.CallTool(ctx, req)
		fmt.Println(res.Content[0].(mcp.TextContent).Text, res.Meta != nil)
	}
	fmt.Println("refunds:", refunds)
	for _, span := range spans.Ended() {
		for _, kv := range span.Attributes() {
			if kv.Key == spancontract.Outcome {
				fmt.Println(span.Name(), kv.Value.AsString())
			}
		}
	}
	// Output:
	// refunded o-1 false
	// refunded o-1 true
	// refunds: 1
	// tools/call refund executed
	// tools/call refund replayed
}
