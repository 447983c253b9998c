package mcpgo

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/idemkit/idemkit/spancontract"
)

// TestHTTP_SessionIDsAndReplayOverStreamableHTTP runs the real HTTP
// transport: the span carries the transport's session ID and the header
// protocol version, and a retry on the same session is replayed.
func TestHTTP_SessionIDsAndReplayOverStreamableHTTP(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	var runs counter
	h.srv.AddTool(mcp.NewTool("send"), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		runs.inc("x")
		return mcp.NewToolResultText("sent"), nil
	})
	hs := httptest.NewServer(server.NewStreamableHTTPServer(h.srv))
	defer hs.Close()
	c, err := client.NewStreamableHttpClient(hs.URL)
	if err != nil {
		t.Fatal(err)
	}
	c = h.initClient(c)
	for range 2 {
		if r, err := c.CallTool(context.Background(), callReq("send", map[string]any{"a": 1})); err != nil || resultText(r) != "sent" {
			t.Fatalf("%v %#v", err, r)
		}
	}
	if runs.get("x") != 1 {
		t.Errorf("ran %d times", runs.get("x"))
	}
	spans := h.toolSpans("send")
	a0, a1 := attrMap(spans[0]), attrMap(spans[1])
	sid, _ := a0[spancontract.MCPSessionID].(string)
	if sid == "" || sid != c.GetSessionId() || a1[spancontract.MCPSessionID] != sid {
		t.Errorf("session ids %v %v, client has %q", a0[spancontract.MCPSessionID], a1[spancontract.MCPSessionID], c.GetSessionId())
	}
	if a1[spancontract.Outcome] != "replayed" || a0[spancontract.JSONRPCRequestID] == a1[spancontract.JSONRPCRequestID] {
		t.Errorf("outcome %v, request ids %v %v", a1[spancontract.Outcome], a0[spancontract.JSONRPCRequestID], a1[spancontract.JSONRPCRequestID])
	}
	if a0[spancontract.MCPProtocolVersion] != mcp.LATEST_LEGACY_PROTOCOL_VERSION {
		t.Errorf("protocol version %v", a0[spancontract.MCPProtocolVersion])
	}
}
