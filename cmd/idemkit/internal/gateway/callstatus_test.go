package gateway

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/idemkit-mcp/idemkit/internal/mcpcall"
)

// TestCallStatusTool_TheGatewaysOwnHidesTheUpstreams: an upstream tool with
// the call status tool's name is not listed, and its calls never reach
// the upstream: the gateway answers that name itself (the log says so).
func TestCallStatusTool_TheGatewaysOwnHidesTheUpstreams(t *testing.T) {
	ran := 0
	s := server.NewMCPServer("upstream", "1")
	s.AddTool(mcp.NewTool(mcpcall.DefaultCallStatusTool, mcp.WithDescription("the upstream's own")), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		ran++
		return mcp.NewToolResultText("upstream"), nil
	})
	s.AddTool(mcp.NewTool("issue_refund", mcp.WithString("order_id")), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText("refunded"), nil
	})
	hs := httptest.NewServer(server.NewStreamableHTTPServer(s, server.WithStateful(true)))
	defer hs.Close()
	ic := newTelemetryPair().config()
	ic.CallStatusTool = mcpcall.DefaultCallStatusTool
	_, url := newGatewayServer(t, hs.URL+"/mcp", Config{Guard: newGuard(t), Instrumentation: ic})
	c := mcpClient(t, url, "tok")
	lr, err := c.ListTools(context.Background(), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, tl := range lr.Tools {
		if tl.Name == mcpcall.DefaultCallStatusTool {
			n++
			if tl.Description != mcpcall.CallStatusDescription {
				t.Errorf("listed: %q, want the gateway's", tl.Description)
			}
		}
	}
	if n != 1 {
		t.Errorf("%d tools named %s listed, want 1", n, mcpcall.DefaultCallStatusTool)
	}
	res := callTool(t, c, mcpcall.DefaultCallStatusTool, map[string]any{"tool": "issue_refund", "arguments": map[string]any{"order_id": "o-1"}})
	if ran != 0 || res.Meta == nil || res.Meta.AdditionalFields[mcpcall.CallStatusMetaKey] == nil {
		t.Errorf("the upstream ran %d times; answer %+v", ran, res)
	}
}
