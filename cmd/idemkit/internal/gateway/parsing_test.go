package gateway

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/internal/mcpcall"
)

// refundUpstream is a real mcp-go server whose refund tool binds its
// arguments to a struct, as Go handlers do (encoding/json: member names
// matched case-insensitively, the last one winning; the amount read as a
// float64 and truncated, as mcp-go's GetInt does), and records every refund
// it makes.
type refundUpstream struct {
	URL     string
	mu      sync.Mutex // protects refunds
	refunds []string   // "order_id/amount_cents" of each run
}

func (u *refundUpstream) made() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.refunds...)
}

func newRefundUpstream(t *testing.T) *refundUpstream {
	t.Helper()
	u := &refundUpstream{}
	s := server.NewMCPServer("upstream", "1.0.0")
	tool := mcp.NewToolWithRawSchema("refund", "Refunds an order.", json.RawMessage(`{"type":"object",
		"properties":{"order_id":{"type":"string"},"amount_cents":{"type":"integer","minimum":1,"maximum":50}},
		"required":["order_id","amount_cents"]}`))
	s.AddTool(tool, func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args struct {
			OrderID     string  `json:"order_id"`
			AmountCents float64 `json:"amount_cents"` // as mcp-go's GetInt reads numbers
		}
		if err := req.BindArguments(&args); err != nil {
			return mcp.NewToolResultError(err.Error()), nil
		}
		u.mu.Lock()
		u.refunds = append(u.refunds, args.OrderID+"/"+jsonInt(int64(args.AmountCents)))
		u.mu.Unlock()
		return mcp.NewToolResultText("refunded " + args.OrderID), nil
	})
	hs := httptest.NewServer(server.NewStreamableHTTPServer(s, server.WithStateful(true)))
	t.Cleanup(hs.Close)
	u.URL = hs.URL + "/mcp"
	return u
}

func jsonInt(n int64) string { b, _ := json.Marshal(n); return string(b) }

// rawCallTool calls tool with raw JSON arguments, sent as they are written.
func rawCallTool(t *testing.T, c *client.Client, tool, args string) *mcp.CallToolResult {
	t.Helper()
	var r mcp.CallToolRequest
	r.Params.Name = tool
	r.Params.RawArguments = json.RawMessage(args)
	res, err := c.CallTool(context.Background(), r)
	if err != nil {
		t.Fatalf("%s %s: %v", tool, args, err)
	}
	return res
}

// refusalReason returns the io.idemkit/refusal marker's reason, or "".
func refusalReason(res *mcp.CallToolResult) string {
	if res.Meta == nil {
		return ""
	}
	m, _ := res.Meta.AdditionalFields["io.idemkit/refusal"].(map[string]any)
	s, _ := m["reason"].(string)
	return s
}

// Behind the gateway a Go upstream reads case-variant member names as one
// member, the last: the gateway refuses such calls as invalid_arguments
// and forwards nothing (before, {"order_id":"ord_1012","Order_Id":"ord_1013"}
// was keyed and validated for ord_1012 and refunded ord_1013, and the same
// members swapped were answered with that stored result).
func TestGateway_CaseVariantNamesAreRefused(t *testing.T) {
	up := newRefundUpstream(t)
	_, url := newGatewayServer(t, up.URL, Config{Guard: newGuard(t), Instrumentation: newTelemetryPair().config()})
	c := mcpClient(t, url, "tok")
	for _, args := range []string{
		`{"order_id":"ord_1012","Order_Id":"ord_1013","amount_cents":25}`,
		`{"Order_Id":"ord_1013","order_id":"ord_1012","amount_cents":25}`,
		`{"order_id":"o-1","amount_cents":20,"AMOUNT_CENTS":70}`,
		`{"order_id":"o-1","amount_cents":20,"x":[{"a":1,"A":2}]}`,
		`{"order_id":"o-1","amount_cents":20,"idempotency_key":"k-1","IDEMPOTENCY_KEY":"k-2"}`,
	} {
		res := rawCallTool(t, c, "refund", args)
		if !res.IsError || refusalReason(res) != "invalid_arguments" || !strings.Contains(text(res), "differ only in letter case") {
			t.Errorf("%s: %q (%s), want an invalid_arguments refusal", args, text(res), refusalReason(res))
		}
	}
	if got := up.made(); len(got) != 0 {
		t.Fatalf("the upstream refunded %v", got)
	}
	if res := rawCallTool(t, c, "refund", `{"order_id":"ord_1012","amount_cents":25}`); res.IsError {
		t.Fatalf("%q", text(res))
	}
	if got := up.made(); len(got) != 1 || got[0] != "ord_1012/25" {
		t.Fatalf("refunds %v", got)
	}
}

// The gateway's schema check reads an integer by its exact value:
// 16.00000000000000000001 is refused (before, it passed as 16, got a key of
// its own and the upstream refunded 16 cents a second time); 16 and 16.0
// are one call.
func TestGateway_InexactIntegersAreRefused(t *testing.T) {
	up := newRefundUpstream(t)
	_, url := newGatewayServer(t, up.URL, Config{Guard: newGuard(t), Instrumentation: newTelemetryPair().config()})
	c := mcpClient(t, url, "tok")
	if res := rawCallTool(t, c, "refund", `{"order_id":"o-1","amount_cents":16}`); res.IsError {
		t.Fatalf("%q", text(res))
	}
	for _, amount := range []string{"16.00000000000000000001", "15.99999999999999999999"} {
		res := rawCallTool(t, c, "refund", `{"order_id":"o-1","amount_cents":`+amount+`}`)
		if !res.IsError || refusalReason(res) != "invalid_arguments" {
			t.Errorf("amount_cents %s: %q (%s), want an invalid_arguments refusal", amount, text(res), refusalReason(res))
		}
	}
	if res := rawCallTool(t, c, "refund", `{"order_id":"o-1","amount_cents":16.0}`); res.IsError || res.Meta == nil || res.Meta.AdditionalFields["io.idemkit/replay"] == nil {
		t.Errorf("16.0 after 16: %q, %+v", text(res), res.Meta)
	}
	if got := up.made(); len(got) != 1 || got[0] != "o-1/16" {
		t.Fatalf("refunds %v, want one of 16 cents", got)
	}
}

// The idempotency_key property the gateway advertises in tools/list
// declares the bounds it enforces: a client's validator, compiled from it,
// accepts exactly the keys idemkit.ValidateExplicitKey accepts (before, an
// empty key passed).
func TestGateway_ToolsListAdvertisesTheKeysBounds(t *testing.T) {
	up := newRefundUpstream(t)
	_, url := newGatewayServer(t, up.URL, Config{Guard: newGuard(t), Instrumentation: newTelemetryPair().config()})
	c := mcpClient(t, url, "tok")
	tools, err := c.ListTools(context.Background(), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(tools.Tools) != 1 {
		t.Fatalf("tools %+v", tools.Tools)
	}
	prop, err := json.Marshal(tools.Tools[0].InputSchema.Properties["idempotency_key"])
	if err != nil {
		t.Fatal(err)
	}
	v, err := mcpcall.NewSchemaValidator(json.RawMessage(prop))
	if err != nil {
		t.Fatalf("%s: %v", prop, err)
	}
	for _, k := range []string{"", "a", " ", "~", strings.Repeat("k", idemkit.MaxExplicitKeyLen), strings.Repeat("k", idemkit.MaxExplicitKeyLen+1),
		"clé", "a\nb", "\x7f", "😀", strings.Repeat("é", 10)} {
		if client, server := v.ValidateValue(k) == nil, idemkit.ValidateExplicitKey(k) == nil; client != server {
			t.Errorf("%s: the key %q: the advertised schema accepts it %v, the server %v", prop, k, client, server)
		}
	}
}
