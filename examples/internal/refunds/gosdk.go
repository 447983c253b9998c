package refunds

import (
	"context"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The refund desk's tools for the official Go SDK: the same names,
// schemas and answers as the mcp-go ones.

type issueRefundIn struct {
	OrderID     string `json:"order_id"`
	AmountCents int64  `json:"amount_cents"`
}

type orderIn struct {
	OrderID string `json:"order_id"`
}

func orderSchema() *jsonschema.Schema {
	return &jsonschema.Schema{
		Type:       "object",
		Properties: map[string]*jsonschema.Schema{"order_id": {Type: "string", Description: orderIDDescription}},
		Required:   []string{"order_id"},
	}
}

func addGoSDKTools(s *mcp.Server, t *tools) {
	one := 1.0
	f := false
	schema := orderSchema()
	schema.Properties["amount_cents"] = &jsonschema.Schema{Type: "integer", Minimum: &one, Description: amountDescription}
	schema.Required = append(schema.Required, "amount_cents")
	mcp.AddTool(s, &mcp.Tool{Name: ToolIssueRefund, Description: issueRefundDescription, InputSchema: schema},
		func(ctx context.Context, req *mcp.CallToolRequest, in issueRefundIn) (*mcp.CallToolResult, any, error) {
			sessionID := ""
			if req.Session != nil {
				sessionID = req.Session.ID()
			}
			return gosdkResult(t.issueRefund(ctx, in.OrderID, in.AmountCents, sessionID))
		})
	read := &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, DestructiveHint: &f}
	mcp.AddTool(s, &mcp.Tool{Name: ToolRefundStatus, Description: refundStatusDescription, InputSchema: orderSchema(), Annotations: read},
		func(ctx context.Context, _ *mcp.CallToolRequest, in orderIn) (*mcp.CallToolResult, any, error) {
			return gosdkResult(t.refundStatus(ctx, in.OrderID))
		})
	mcp.AddTool(s, &mcp.Tool{Name: ToolLookupOrder, Description: lookupOrderDescription, InputSchema: orderSchema(), Annotations: read},
		func(ctx context.Context, _ *mcp.CallToolRequest, in orderIn) (*mcp.CallToolResult, any, error) {
			return gosdkResult(t.lookupOrder(ctx, in.OrderID))
		})
}

func gosdkResult(a answer, err error) (*mcp.CallToolResult, any, error) {
	if err != nil {
		return nil, nil, err
	}
	res := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: a.text}}, IsError: a.isError}
	if !a.isError {
		res.StructuredContent = jsonValue(a.structured)
	}
	return res, nil, nil
}
